// Every activation and scratch buffer of one pipeline stage, allocated in one place that knows
// each buffer's name, size and category, so that the memory report and the pipeline's
// activation figures are read from here and not from a list of members.
//
// Categories (what a buffer's lifetime is):
//   activation  saved by a layer's forward for its backward (one set per layer; what activation
//               recomputation would drop)
//   stage       the stage's own tensors between layers: the residual stream, the stage input and
//               output, the loss head's logits
//   scratch     valid only inside one layer's forward or backward, hence ONE buffer per name
//               shared by every layer of the stage (llm.c's scratch reuse): requested again under
//               the same name, the same allocation comes back. A block's attention and MLP
//               scratch (ScratchPhase) share one region as large as the larger part.
// Buffers are allocated when requested (layer construction), never in the training loop.
// A buffer holds the stage's storage type T unless asked for another (U): with mixed precision
// the activations are bf16/fp16 while LayerNorm statistics, the loss head's row statistics and
// partial column sums are float (kx::acc_t<T>).
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kokkos_kernels/views.hpp"
#include "src/model/spec/scratch_phase.hpp"
#include "src/util/memory_category.hpp"

namespace tptrain::model {

enum class BufferCategory { activation, stage, scratch };


// Where a layer's saved-for-backward buffers go: their name prefix (empty: the layer's name) and
// category. With recompute = full every block gets the same scratch placement, so the blocks share
// one set, filled again by each block's recomputed forward.
struct SavedPlacement {
  std::string prefix;
  BufferCategory category = BufferCategory::activation;
  std::string name_for(const std::string& layer_name) const { return prefix.empty() ? layer_name : prefix; }
};

inline const char* category_name(BufferCategory c) {
  return c == BufferCategory::activation ? "activation" : c == BufferCategory::stage ? "stage" : "scratch";
}

template <class T>
class Workspace {
 public:
  struct Entry {
    std::string name;
    BufferCategory category;
    std::vector<std::int64_t> shape;
    std::size_t bytes;
    bool in_region = false;  // a part's scratch inside the shared region (its bytes are the region's)
  };

  // phase_bytes: the shared region of the attention's and the MLP's scratch (0: none, each such
  // buffer its own allocation, as for a layer built outside a model). The region is allocated
  // when first used, and no part may outgrow it.
  explicit Workspace(std::size_t phase_bytes = 0) : phase_bytes_(phase_bytes) {}

  template <class U = T>
  kernels::Vector<U> vector(const std::string& name, BufferCategory c, std::int64_t n,
                            ScratchPhase p = ScratchPhase::block) {
    return get<kernels::Vector<U>>(name, c, {n}, p);
  }
  template <class U = T>
  kernels::Matrix<U> matrix(const std::string& name, BufferCategory c, std::int64_t rows, std::int64_t cols,
                            ScratchPhase p = ScratchPhase::block) {
    return get<kernels::Matrix<U>>(name, c, {rows, cols}, p);
  }
  template <class U = T>
  kernels::Tensor4<U> tensor4(const std::string& name, BufferCategory c, std::int64_t n0, std::int64_t n1,
                              std::int64_t n2, std::int64_t n3, ScratchPhase p = ScratchPhase::block) {
    return get<kernels::Tensor4<U>>(name, c, {n0, n1, n2, n3}, p);
  }

  // One entry per allocation (a shared scratch buffer once), in the order of allocation.
  const std::vector<Entry>& entries() const { return entries_; }
  std::size_t bytes(BufferCategory c) const {
    std::size_t n = 0;
    for (const Entry& e : entries_) n += e.category == c && !e.in_region ? e.bytes : 0;
    return n;
  }
  std::size_t total_bytes() const {
    std::size_t n = 0;
    for (const Entry& e : entries_) n += e.in_region ? 0 : e.bytes;
    return n;
  }

 private:
  template <class V>
  V get(const std::string& name, BufferCategory c, std::vector<std::int64_t> shape, ScratchPhase p) {
    using U = typename V::non_const_value_type;
    util::MemoryCategoryScope as(c == BufferCategory::scratch ? util::MemoryCategory::workspace
                                                              : util::MemoryCategory::activations);
    std::size_t count = 1;
    for (std::int64_t s : shape) count *= static_cast<std::size_t>(s);
    const std::size_t bytes = count * sizeof(U);
    if (c == BufferCategory::scratch) {
      const auto it = scratch_.find(name);
      if (it != scratch_.end()) {
        const Entry& e = entries_[it->second.entry];
        if (e.shape != shape || e.bytes != bytes)
          throw std::logic_error("tptrain: shared scratch buffer " + name + " requested with two shapes or types");
        return view_of<V>(it->second.storage, shape);
      }
    }
    const bool in_region = c == BufferCategory::scratch && p != ScratchPhase::block && phase_bytes_ > 0;
    std::size_t& used = phase_used_[static_cast<int>(p)];
    if (in_region && used + bytes > phase_bytes_)
      throw std::logic_error("tptrain: scratch buffer " + name + " does not fit in the block's shared region of " +
                             std::to_string(phase_bytes_) + " bytes (src/model/spec/block_descriptor.hpp)");
    entries_.push_back(Entry{name, c, shape, bytes, in_region});
    if (c != BufferCategory::scratch) return allocate<V>(name, shape);
    Bytes storage;
    if (in_region) {
      if (region_.size() == 0) {
        entries_.insert(entries_.end() - 1, Entry{"block.phase_scratch", c, {std::int64_t(phase_bytes_)}, phase_bytes_});
        region_ = Bytes("block.phase_scratch", phase_bytes_);
      }
      storage = Kokkos::subview(region_, std::make_pair(used, used + bytes));
      used += phase_aligned(bytes);
    } else {
      storage = Bytes(name, bytes);
    }
    scratch_.emplace(name, Shared{storage, entries_.size() - 1});
    return view_of<V>(storage, shape);
  }

  template <class V>
  static V allocate(const std::string& name, const std::vector<std::int64_t>& s) {
    if constexpr (V::rank == 1) return V(name, s[0]);
    else if constexpr (V::rank == 2) return V(name, s[0], s[1]);
    else return V(name, s[0], s[1], s[2], s[3]);
  }
  // Shared scratch storage: raw bytes (Kokkos allocations are aligned for any element type).
  using Bytes = Kokkos::View<unsigned char*, kx::MemSpace>;
  // A view of the requested rank and type over the shared storage. Kokkos has no managed
  // reshape: the workspace keeps `storage` alive as long as the model.
  template <class V>
  static V view_of(const Bytes& storage, const std::vector<std::int64_t>& s) {
    using U = typename V::non_const_value_type;
    using Unmanaged = Kokkos::View<typename V::data_type, typename V::array_layout, typename V::memory_space,
                                   Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    U* p = reinterpret_cast<U*>(storage.data());
    if constexpr (V::rank == 1) return Unmanaged(p, s[0]);
    else if constexpr (V::rank == 2) return Unmanaged(p, s[0], s[1]);
    else return Unmanaged(p, s[0], s[1], s[2], s[3]);
  }

  struct Shared {
    Bytes storage;
    std::size_t entry;
  };
  std::vector<Entry> entries_;
  std::map<std::string, Shared> scratch_;
  std::size_t phase_bytes_;
  Bytes region_;
  std::size_t phase_used_[3] = {0, 0, 0};  // bytes each part holds in the region
};

// The first n rows of a buffer sized for a micro-batch: a layer's forward on fewer rows than it
// was built for (generation's new tokens, kv_cache.hpp) computes in the leading rows of its own
// buffers. n = the buffer's rows is the buffer itself.
template <class T>
kernels::Matrix<T> first_rows(const kernels::Matrix<T>& m, std::int64_t n) {
  if (n == static_cast<std::int64_t>(m.extent(0))) return m;
  return Kokkos::subview(m, std::make_pair(std::int64_t(0), n), Kokkos::ALL());
}
template <class T>
kernels::Vector<T> first_rows(const kernels::Vector<T>& v, std::int64_t n) {
  if (n == static_cast<std::int64_t>(v.extent(0))) return v;
  return Kokkos::subview(v, std::make_pair(std::int64_t(0), n));
}

}  // namespace tptrain::model
