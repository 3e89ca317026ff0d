// A sublayer kind described as plain data (docs/design.md, "Sublayer kinds"): the slot of the
// block it fills, the name the deck gives it, the parameter and buffer rows it adds to the block
// descriptor, and how its statistics become metrics. Each kind's description is a file of its own
// (gelu_mlp_kind.hpp, ...); the registry (sublayer_kinds.hpp) lists them, and the descriptor, the
// checkpoint, the planner and the docs iterate it. The kind's forward and backward live beside it,
// behind the slot's interface (sublayer.hpp). No Kokkos, no MPI: the planner reads it too.
#pragma once

#include <cstddef>

#include "src/model/spec/buffer_spec.hpp"
#include "src/model/spec/gpt_shape.hpp"
#include "src/model/spec/parameter_spec.hpp"
#include "src/model/spec/sublayer_statistics.hpp"

namespace tptrain::model {

// The places of a block a kind can fill.
enum class SublayerSlot { mlp };

// A constexpr table seen as a range.
template <class Row>
struct RowSpan {
  const Row* first = nullptr;
  std::size_t count = 0;
  constexpr RowSpan() = default;
  template <std::size_t N>
  constexpr RowSpan(const Row (&rows)[N]) : first(rows), count(N) {}  // NOLINT: a table is its span
  const Row* begin() const { return first; }
  const Row* end() const { return first + count; }
};

struct SublayerKind {
  SublayerSlot slot;
  const char* name;  // the deck's value of its slot's key (model.mlp = "gelu")
  const char* what;  // for the docs and messages
  // Its parameters in checkpoint (and bucket) order, named from the block ("mlp/fc/weight"); the
  // rows of each expert (ParameterRow::per_expert) consecutive.
  RowSpan<ParameterRow> parameters;
  RowSpan<BufferRow> buffers;  // what it allocates in the model's workspace
  // Its metrics from its statistics summed over the ranks (StatisticSums); null: it counts none.
  SublayerMetrics (*metrics)(const GptShape&, const StatisticSums&) = nullptr;
};

// "mlp" for the docs' conditions: model.<slot key> = "<name>".
inline const char* slot_key(SublayerSlot slot) {
  switch (slot) {
    case SublayerSlot::mlp: return "mlp";
  }
  return "";
}

}  // namespace tptrain::model
