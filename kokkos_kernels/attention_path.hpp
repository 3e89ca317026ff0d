// Which of the two attention implementations (attention.hpp) a process runs:
//   causal_tiles  the GEMMs walk 128-row causal tiles and loop over min(batch, heads), skipping
//                 the masked half of the S² work (attention_gemm.hpp); many small calls
//   batched       a fixed number of large calls over every (batch, head) pair, the full S×S
//                 square, whatever S, B and the head count (attention_batched.hpp)
// The default follows the execution space: batched on device backends (a GPU pays per launch,
// ~5 µs of host time each, and has the flops to spare), causal tiles on host backends, where a
// call costs little and the skipped flops are time (docs/design.md, "Attention paths", has the
// CPU figures). The override lets a CPU test or bench run the device path: the launch budget
// test counts the CUDA path's launches that way. Host-only state, read when a pass starts.
#pragma once

#include <optional>
#include <string>
#include <type_traits>

#include <Kokkos_Core.hpp>

namespace tptrain::kernels {

enum class AttentionPath { causal_tiles, batched };

inline const char* attention_path_name(AttentionPath p) {
  return p == AttentionPath::batched ? "batched" : "causal_tiles";
}

// Process-wide override (empty: the default of the execution space).
inline std::optional<AttentionPath>& attention_path_override() {
  static std::optional<AttentionPath> path;
  return path;
}

template <class Exec>
AttentionPath default_attention_path() {
  return std::is_same<typename Exec::memory_space, Kokkos::HostSpace>::value ? AttentionPath::causal_tiles
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
