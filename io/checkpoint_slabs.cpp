#include "io/checkpoint_slabs.hpp"

#include <string_view>
#include <unordered_set>

#include "base/mpi_check.hpp"

namespace tptrain::io::detail {

std::string shape_str(const std::vector<std::uint64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(v[i]);
  }
  return s + "]";
}

std::vector<hsize_t> to_hsize(const std::vector<std::uint64_t>& v) {
  return std::vector<hsize_t>(v.begin(), v.end());
}

namespace {
constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 62;

}  // namespace

std::string make_plan(const TensorShard& t, bool moving, bool writing, SlabPlan& plan) {
  plan.groups.clear();
  plan.elements = 0;
  const std::string& name = t.name;
  if (name.empty()) return "a tensor has an empty name";
  const auto& shape = t.global_shape;
  if (shape.empty() || shape.size() > H5S_MAX_RANK)
    return name + ": global_shape " + shape_str(shape) + " must have 1 to " +
           std::to_string(H5S_MAX_RANK) + " dimensions";
  std::uint64_t total = 1;
  for (std::uint64_t d : shape) {
    if (d != 0 && total > kMaxElements / d)
      return name + ": global_shape " + shape_str(shape) + " has too many elements";
    total *= d;
  }
  if (!moving) return {};

  const std::size_t rank = shape.size();
  std::vector<std::uint64_t> stride(rank, 1);
  for (std::size_t d = rank - 1; d > 0; --d) stride[d - 1] = stride[d] * shape[d];

  std::uint64_t offset = 0;
  std::uint64_t last_hi = 0;
  for (std::size_t k = 0; k < t.slabs.size(); ++k) {
    const Hyperslab& s = t.slabs[k];
    const std::string where = name + ": slab " + std::to_string(k) + " (start " +
                              shape_str(s.start) + ", count " + shape_str(s.count) + ")";
    if (s.start.size() != rank || s.count.size() != rank)
      return where + " does not have one entry per dimension of the global shape " +
             shape_str(shape);
    std::uint64_t n = 1, lo = 0, hi = 0;
    for (std::size_t d = 0; d < rank; ++d) {
      if (s.count[d] > shape[d] || s.start[d] > shape[d] - s.count[d])
        return where + " lies outside the global shape " + shape_str(shape);
      n *= s.count[d];
    }
    if (n == 0) continue;  // nothing to move; occupies nothing in the buffer
    for (std::size_t d = 0; d < rank; ++d) {
      lo += s.start[d] * stride[d];
      hi += (s.start[d] + s.count[d] - 1) * stride[d];
    }
    if (plan.groups.empty() || lo <= last_hi) {
      SlabGroup g;
      g.offset = offset;
      plan.groups.push_back(g);
    }
    plan.groups.back().slabs.push_back(k);
    plan.groups.back().elements += n;
    last_hi = hi;
    if (offset > kMaxElements - n) return name + ": its slabs hold too many elements";
    offset += n;
  }
  if (offset > 0 && t.data == nullptr)
    return name + ": data is null, but the slabs hold " + std::to_string(offset) + " elements";
  plan.elements = offset;
  if (writing) {
    // Each element is written once: a rank's slabs must not overlap (which value would land is
    // unspecified, and the checksum would count the element twice).
    for (std::size_t a = 0; a < t.slabs.size(); ++a)
      for (std::size_t b = a + 1; b < t.slabs.size(); ++b) {
        const Hyperslab &x = t.slabs[a], &y = t.slabs[b];
        bool overlap = true;
        for (std::size_t d = 0; d < rank && overlap; ++d)
          overlap = x.count[d] > 0 && y.count[d] > 0 && x.start[d] < y.start[d] + y.count[d] &&
                    y.start[d] < x.start[d] + x.count[d];
        if (overlap)
          return name + ": slabs " + std::to_string(a) + " and " + std::to_string(b) +
                 " overlap (each element must be written once)";
      }
  }
  return {};
}

namespace {

// A fingerprint of the path and tensor list, to compare across ranks with one reduction.
struct Fnv1a {
  std::uint64_t h = 14695981039346656037ull;
  void bytes(const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  void u64(std::uint64_t v) { bytes(&v, sizeof v); }
  void str(const std::string& s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
};

}  // namespace

std::string plan_transfers(MPI_Comm comm, const std::string& path,
                           const std::vector<TensorShard>& tensors, bool writing,
                           std::vector<SlabPlan>& plans, std::vector<int>& rounds,
                           std::string error) {
  plans.assign(tensors.size(), SlabPlan{});
  std::unordered_set<std::string_view> names;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const TensorShard& t = tensors[i];
    std::string e = make_plan(t, !writing || t.write, writing, plans[i]);
    if (e.empty() && writing && !names.insert(t.name).second)
      e = t.name + ": appears twice in the list of tensors";
    if (!e.empty()) {
      plans[i].groups.clear();
      if (error.empty()) error = std::move(e);
    }
  }

  Fnv1a f;
  f.str(path);
  f.u64(tensors.size());
  for (const TensorShard& t : tensors) {
    f.str(t.name);
    f.u64(t.global_shape.size());
    for (std::uint64_t d : t.global_shape) f.u64(d);
  }
  unsigned long long mine[2] = {f.h, ~f.h}, all[2] = {0, 0};
  TPTRAIN_MPI_CHECK(MPI_Allreduce(mine, all, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm));
  const bool same = all[0] == ~all[1];  // max == min over the ranks
  rounds.assign(tensors.size(), 0);
  if (!same) {
    if (error.empty())
      error =
          "the ranks disagree on the path or on the list of tensors (names and global "
          "shapes, in the same order on every rank)";
    return error;
  }
  std::vector<int> local(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i)
    local[i] = static_cast<int>(plans[i].groups.size());
  if (!local.empty())
    TPTRAIN_MPI_CHECK(MPI_Allreduce(local.data(), rounds.data(), static_cast<int>(local.size()),
                                   MPI_INT, MPI_MAX, comm));
  if (!writing) return error;

  // Every element written exactly once: the written element counts add up to the tensor's size.
  // The last entry counts the ranks with an error already, whose counts mean nothing.
  std::vector<std::uint64_t> counts(tensors.size() + 1, 0), sums(tensors.size() + 1, 0);
  for (std::size_t i = 0; i < tensors.size(); ++i) counts[i] = plans[i].elements;
  counts.back() = error.empty() ? 0 : 1;
  TPTRAIN_MPI_CHECK(MPI_Allreduce(counts.data(), sums.data(), static_cast<int>(counts.size()),
                                 MPI_UINT64_T, MPI_SUM, comm));
  if (sums.back() != 0) return error;
  for (std::size_t i = 0; i < tensors.size() && error.empty(); ++i) {
    std::uint64_t total = 1;
    for (std::uint64_t d : tensors[i].global_shape) total *= d;
    if (sums[i] != total)
      error = tensors[i].name + ": the ranks write " + std::to_string(sums[i]) +
              " elements of its " + std::to_string(total) + " " + shape_str(tensors[i].global_shape) +
              " (every element must be written exactly once, by one rank)";
  }
  return error;
}

}  // namespace tptrain::io::detail
