// A sublayer kind described as plain data (docs/design.md, "Sublayer kinds"): the slot of the
// block it fills, the name the deck gives it, the parameter and buffer rows it adds to the block
// descriptor, and how its statistics become metrics. Each kind's description is a file of its own
// (gelu_mlp_kind.hpp, ...); the registry (sublayer_kinds.hpp) lists them, and the descriptor, the
// checkpoint, the planner and the docs iterate it. The kind's forward and backward live beside it,
// behind the slot's interface (sublayer.hpp). No Kokkos, no MPI: the planner reads it too.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "base/rules.hpp"

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

// A deck key a kind owns (docs/deck-reference.md lists it with the others; io/deck_keys.cpp takes
// it into the key table): its value lives in the specification, which the kind reads. A deck that
// chooses another kind for the slot leaves it out (or at its default: a resolved deck lists it).
struct KindKey {
  const char* section;       // "model", or "training" for a weight of the training loss
  const char* key;
  double default_value;
  double lowest;             // the smallest valid value (integers: at least it)
  bool lowest_inclusive;
  const char* note;          // after the range in messages: "(0 = dropless)"; "" for none
  const char* doc;           // what it means, one line
  const char* left_out;      // why another kind leaves it out: "it is the mixture of experts'"
  using IntegerMember = int ModelShape::*;
  using NumberMember = double ModelShape::*;
  IntegerMember integer = nullptr;  // where its value lives: an integer, or
  NumberMember number = nullptr;    // a number
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
  RowSpan<KindKey> keys = {};  // its deck keys
  // Its rules, stated once: the deck (at the keys' lines), the model and the planner ask them
  // (sublayer_kinds.hpp, sublayer_problems). The deck asks once its keys and the [model] keys
  // named in `binds` are valid.
  std::vector<rules::Problem> (*problems)(const ModelShape&) = nullptr;
  RowSpan<const char*> binds = {};
};

// The [model] key that chooses the slot's kind ("mlp": model.mlp = "gelu"), and its value in s.
inline const char* slot_key(SublayerSlot slot) {
  switch (slot) {
    case SublayerSlot::mlp: return "mlp";
  }
  return "";
}
inline const std::string& slot_value(const ModelShape& s, SublayerSlot slot) {
  switch (slot) {
    case SublayerSlot::mlp: break;
  }
  return s.mlp;
}

}  // namespace tptrain::model
