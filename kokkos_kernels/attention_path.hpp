// Which attention core a process runs:
//   flash         flash_attention.hpp: tiled over query and key blocks with an online softmax, no
//                 S×S buffer; the default on host backends, where it is faster than the GEMMs over
//                 stored scores (docs/design.md, "Attention")
//   batched       attention_batched.hpp: a fixed number of large strided-batched GEMMs over every
//                 (batch, head) pair and the full S×S square; the default on device backends (a
//                 GPU pays per launch, ~5 µs of host time each, and has the flops to spare) until
//                 a GPU measurement says otherwise
//   causal_tiles  attention.hpp's 128-row causal tile GEMMs: a test reference, and the batched
//                 driver's fallback when it has no room for its pointer tables
// The model takes flash or not from its shape (GptShape::flash_attention, the deck's
// training.attention); this process-wide choice says which GEMM form attention.hpp runs (tests,
// and `bench --attention batched` on a CPU: the launch budget test counts the CUDA path's
// launches that way). Host-only state, read when a pass starts.
#pragma once

#include <optional>
#include <string>
#include <type_traits>

#include <Kokkos_Core.hpp>

namespace tptrain::kernels {

enum class AttentionPath { flash, batched, causal_tiles };

inline const char* attention_path_name(AttentionPath p) {
  return p == AttentionPath::flash ? "flash" : p == AttentionPath::batched ? "batched" : "causal_tiles";
}

// Process-wide override (empty: the default of the execution space).
inline std::optional<AttentionPath>& attention_path_override() {
  static std::optional<AttentionPath> path;
  return path;
}

template <class Exec>
AttentionPath default_attention_path() {
  return std::is_same<typename Exec::memory_space, Kokkos::HostSpace>::value ? AttentionPath::flash
                                                                            : AttentionPath::batched;
}

template <class Exec>
AttentionPath attention_path() {
  const std::optional<AttentionPath>& o = attention_path_override();
  return o ? *o : default_attention_path<Exec>();
}

// Sets the override for the lifetime of the object, then puts the previous one back (tests).
class AttentionPathScope {
 public:
  explicit AttentionPathScope(std::optional<AttentionPath> path) : previous_(attention_path_override()) {
    attention_path_override() = path;
  }
  ~AttentionPathScope() { attention_path_override() = previous_; }
  AttentionPathScope(const AttentionPathScope&) = delete;
  AttentionPathScope& operator=(const AttentionPathScope&) = delete;

 private:
  std::optional<AttentionPath> previous_;
};

}  // namespace tptrain::kernels
