// A sublayer kind described as plain data (docs/design.md, "Sublayer kinds"): the slot of the
// block it fills, the name the deck gives it, the parameter and buffer rows it adds to the block
// descriptor, and how its statistics become metrics. Each kind's description is a file of its own
// (gelu_mlp_kind.hpp, ...); the registry (sublayer_kinds.hpp) lists them, and the descriptor, the
// checkpoint, the planner and the docs iterate it. The kind's forward and backward live beside it,
// behind the slot's interface (sublayer.hpp). No Kokkos, no MPI: the planner reads it too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "base/rules.hpp"

#include "src/model/spec/buffer_spec.hpp"
#include "src/model/spec/gpt_shape.hpp"
#include "src/model/spec/parameter_spec.hpp"
#include "src/model/spec/sublayer_statistics.hpp"

namespace tptrain::model {

// The slots a kind can fill: the norms (each norm place of the block and the final one), the
// positions (at the embedding, or inside the attention), the attention, the MLP.
enum class SublayerSlot { norm, position, attention, mlp };
inline constexpr SublayerSlot kSublayerSlots[] = {SublayerSlot::norm, SublayerSlot::position, SublayerSlot::attention,
                                                  SublayerSlot::mlp};

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
  using TextMember = std::string ModelShape::*;
  using FlagMember = bool ModelShape::*;
  IntegerMember integer = nullptr;  // where its value lives: an integer, or
  NumberMember number = nullptr;    // a number,
  double highest = std::numeric_limits<double>::infinity();  // a number's bound above, if any (exclusive)
  TextMember text = nullptr;        // a choice among `choices` (default: default_text; text_key), or
  RowSpan<const char*> choices = {};
  const char* default_text = "";
  FlagMember flag = nullptr;        // a switch (default: default_value 1 or 0; flag_key)
};

// A kind's key that chooses among named values ("softmax", "sigmoid"), and one that is a switch.
constexpr KindKey text_key(const char* section, const char* key, const char* default_text,
                           RowSpan<const char*> choices, const char* doc, const char* left_out,
                           KindKey::TextMember member) {
  KindKey k{section, key, 0.0, 0.0, true, "", doc, left_out};
  k.text = member;
  k.choices = choices;
  k.default_text = default_text;
  return k;
}
constexpr KindKey flag_key(const char* section, const char* key, bool default_value, const char* doc,
                           const char* left_out, KindKey::FlagMember member) {
  KindKey k{section, key, default_value ? 1.0 : 0.0, 0.0, true, "", doc, left_out};
  k.flag = member;
  return k;
}

// An MLP kind's structure as the planner counts its kernels (src/plan/block_time.cpp).
struct MlpStructure {
  const char* activation = "";  // its elementwise op in the planner's kernel list: "gelu", "swiglu"
  bool gated = false;           // fc stacks gate|up (2F rows); the activation reads both, writes F
  // Tokens routed to experts: k of E per token, N·k rows over the rank's experts, a router, and
  // with expert parallelism the all-to-all. Its rows of each expert are ParameterRow::per_expert.
  bool routed = false;
};

// A rotary position kind's angles (rope_kind.hpp): the inverse frequency ω_i of each of the d/2
// rotated pairs of a head of d features, and the amplitude its cos and sin tables carry (YaRN's
// attention factor; 1 for the others).
struct RotaryFrequencies {
  std::vector<double> (*inverse)(const ModelShape&, std::int64_t d) = nullptr;
  double (*amplitude)(const ModelShape&) = nullptr;
};

struct SublayerKind {
  SublayerSlot slot;
  const char* name;  // the deck's value of its slot's key (model.mlp = "gelu")
  const char* what;  // for the docs and messages
  // Its parameters in checkpoint (and bucket) order, named from its place ("{place}/fc/weight":
  // placed_row); the rows of each expert (ParameterRow::per_expert) consecutive.
  RowSpan<ParameterRow> parameters;
  RowSpan<BufferRow> buffers;  // what it allocates in the model's workspace ("{place}" as above)
  // Its metrics from its statistics summed over the ranks (StatisticSums); null: it counts none.
  SublayerMetrics (*metrics)(const GptShape&, const StatisticSums&) = nullptr;
  RowSpan<KindKey> keys = {};  // its deck keys
  // Its rules, stated once: the deck (at the keys' lines), the model and the planner ask them
  // (sublayer_kinds.hpp, sublayer_problems). The deck asks once its keys and the [model] keys
  // named in `binds` are valid.
  std::vector<rules::Problem> (*problems)(const ModelShape&) = nullptr;
  RowSpan<const char*> binds = {};
  // Its name in reports (tptrain plan's model line): "SwiGLU", "RMSNorm eps 1e-05".
  std::string (*label)(const ModelShape&) = nullptr;
  // A position kind that acts in every attention (q and k rotated) rather than at the embedding:
  // where the model places its module and the planner counts its passes.
  bool in_attention = false;
  MlpStructure mlp = {};  // an MLP kind's
  RotaryFrequencies rotary = {};  // a rotary position kind's
};

// The [model] key that chooses the slot's kind ("mlp": model.mlp = "gelu"), and its value in s.
inline const char* slot_key(SublayerSlot slot) {
  switch (slot) {
    case SublayerSlot::norm: return "norm";
    case SublayerSlot::position: return "position";
    case SublayerSlot::attention: return "attention";
    case SublayerSlot::mlp: return "mlp";
  }
  return "";
}
inline std::string& slot_value(ModelShape& s, SublayerSlot slot) {
  switch (slot) {
    case SublayerSlot::norm: return s.norm;
    case SublayerSlot::position: return s.position;
    case SublayerSlot::attention: return s.attention;
    case SublayerSlot::mlp: break;
  }
  return s.mlp;
}
inline const std::string& slot_value(const ModelShape& s, SublayerSlot slot) {
  return slot_value(const_cast<ModelShape&>(s), slot);  // the same member, read only
}

// A place of the model a kind fills (the block's, block_descriptor.hpp; the embedding's and the
// head's, model_parameters.hpp): the slot, the name its parameters and buffers take for "{place}"
// ("ln_1"), and its Hugging Face module per naming family, which takes the place of "{module}" in
// the kind's Hugging Face names ("gpt2=transformer.h.{i}.ln_1 llama=model.layers.{i}.input_layernorm";
// parameter_spec.hpp: a family the place lacks drops the entries that name the module).
struct SublayerPlace {
  SublayerSlot slot;
  const char* name;
  const char* hf_module = "";
};

// Row r of a kind at `place`: "{place}" in its name replaced by the place's name, "{module}" in
// its Hugging Face names by the place's module of each family.
inline ParameterRow placed_row(const ParameterRow& r, const SublayerPlace& place) {
  ParameterRow out = r;
  out.name = interned_name(replace_all(r.name, "{place}", place.name));
  std::string hf;
  for (const std::string& entry : hf_entries(r.hf)) {
    if (entry.find("{module}") == std::string::npos) {
      hf += (hf.empty() ? "" : " ") + entry;
      continue;
    }
    const std::size_t eq = entry.find('=');
    const std::string family = entry.substr(0, entry[eq - 1] == '^' ? eq - 1 : eq);
    const HfName module = hf_entry(place.hf_module, family);
    if (module.pattern != nullptr)
      hf += (hf.empty() ? "" : " ") + replace_all(entry, "{module}", module.pattern);
  }
  out.hf = interned_name(hf);
  return out;
}
inline BufferRow placed_row(const BufferRow& r, const SublayerPlace& place) {
  BufferRow out = r;
  out.name = interned_name(replace_all(r.name, "{place}", place.name));
  out.what = interned_name(replace_all(r.what, "{place}", place.name));
  return out;
}

}  // namespace tptrain::model
