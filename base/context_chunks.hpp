// Which tokens of a sequence a context-parallel rank holds (parallel.context = C; docs/design.md,
// "Context parallelism"). The sequence of S tokens is cut into 2C chunks of c = S/(2C); context
// rank r holds chunks r and 2C − 1 − r (Megatron-Core's load balancing for causal attention:
// chunk k's queries see k + 1 chunks of keys, so a rank's two chunks see 2C + 1 together, the
// same on every rank). Its local sequence is those two chunks back to back, [0, c) then [c, 2c):
// local row i of a sequence is at global position position(i). Pure arithmetic: the data layer
// cuts the batches with it (src/train/context_batch.hpp), the attention rings over it
// (src/model/ring_attention.hpp).
#pragma once

#include <cstdint>

namespace tptrain {

struct ContextChunks {
  int rank = 0;              // the context rank r
  int size = 1;              // C
  std::int64_t sequence = 0; // S, the whole sequence

  bool split() const { return size > 1; }
  std::int64_t chunk() const { return split() ? sequence / (2 * size) : sequence; }  // c
  std::int64_t local() const { return split() ? 2 * chunk() : sequence; }            // 2c = S/C
  // The global chunk index of local chunk `half` (0 or 1) of context rank `r`.
  int global_chunk(int half, int r) const { return half == 0 ? r : 2 * size - 1 - r; }
  int global_chunk(int half) const { return global_chunk(half, rank); }
  // Global position of local row i (0 <= i < local()).
  std::int64_t position(std::int64_t i) const {
    if (!split()) return i;
    const std::int64_t c = chunk();
    return i < c ? rank * c + i : (2 * std::int64_t(size) - 1 - rank) * c + (i - c);
  }
};

}  // namespace tptrain
