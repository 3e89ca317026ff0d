#include "src/plan/plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <utility>

#include "io/json_line.hpp"
#include "io/path_text.hpp"
#include "src/model/spec/sublayer_kinds.hpp"
#include "src/plan/activation_memory.hpp"
#include "src/plan/flops.hpp"
#include "src/plan/korthikanti.hpp"
#include "src/plan/parameter_count.hpp"
#include "src/plan/schedule_cache.hpp"
#include "src/schedule/schedule_memory.hpp"

namespace tptrain::plan {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kSecondsPerDay = 86400.0;

double gib(double bytes) { return bytes / kGiB; }

// "1.46 GiB", "48.0 MiB", "12.0 KiB": bytes as people read them.
std::string human_bytes(double bytes) {
  if (bytes >= kGiB) return fmt::format("{:.2f} GiB", bytes / kGiB);
  if (bytes >= 1024.0 * 1024.0) return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024.0));
  if (bytes >= 1024.0) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  return fmt::format("{:.0f} B", bytes);
}

std::string yes_no(bool b) { return b ? "on" : "off"; }

// parallel.order as the report spells it: with the context axis under context parallelism.
std::string order_name(const Config& c, parallel::RankOrder order) {
  return std::string(c.context() > 1 ? parallel::rank_order_name_with_context(order)
                                      : parallel::rank_order_name(order));
}

// The published formulas hold for the blocks they were written for: Llama's (Touvron et al.
// 2023: RMSNorm, SwiGLU, no biases), GPT's (Narayanan et al. 2021 eq. 2 and 3: LayerNorm, GELU,
// biases, multi-head attention) and Mixtral's (Jiang et al. 2024: llama's block with a mixture of
// SwiGLU experts as its MLP): the blocks of those presets. Other specifications get the exact
// count alone.
bool block_of_preset(const model::GptShape& m, const char* name) {
  const model::BlockSpec& p = model::block_preset(name)->spec;
  return m.norm == p.norm && m.mlp == p.mlp && m.attention == p.attention && m.qkv_bias == p.qkv_bias &&
         m.linear_bias == p.linear_bias;
}
bool llama_formula_applies(const model::GptShape& m) { return block_of_preset(m, "llama"); }
bool gpt_formula_applies(const model::GptShape& m) {
  return block_of_preset(m, "gpt2") && m.kv_head_count() == m.heads;
}
bool moe_formula_applies(const model::GptShape& m) { return block_of_preset(m, "mixtral"); }

void check_hardware(const Hardware& hw) {
  const auto positive = [](const char* option, double v) {
    if (!(v > 0) || !std::isfinite(v))
      throw std::invalid_argument(fmt::format("{} = {}: expected a positive number", option, v));
  };
  if (hw.gpus < 0) throw std::invalid_argument(fmt::format("--gpus = {}: expected a positive integer", hw.gpus));
  if (hw.gpus_per_node != 0) positive("--gpus-per-node", hw.gpus_per_node);
  if (hw.gpu_memory_gib != 0) positive("--gpu-memory", hw.gpu_memory_gib);
  if (hw.peak_tflops != 0) positive("--peak-tflops", hw.peak_tflops);
  if (hw.tokens < 0 || !std::isfinite(hw.tokens))
    throw std::invalid_argument(fmt::format("--tokens = {}: expected a positive number", hw.tokens));
}

// Seconds of one simulated step, NaN where no schedule exists for the layout.
double step_seconds_of(const Config& c, const Machine& m) {
  try {
    return simulate_step(c, m).step_seconds;
  } catch (const std::invalid_argument&) {
    return std::numeric_limits<double>::quiet_NaN();
  }
}

double days_of(const Config& c, const Machine& m, double tokens) {
  const double iterations = tokens / (double(c.global_batch) * c.shape.seq_length);
  return iterations * step_seconds_of(c, m) / kSecondsPerDay;
}

}  // namespace

std::vector<std::string> changed_keys(const Config& deck, const Config& c) {
  std::vector<std::string> out;
  if (c.tensor() != deck.tensor()) out.push_back(fmt::format("parallel.tensor={}", c.tensor()));
  if (c.context() != deck.context()) out.push_back(fmt::format("parallel.context={}", c.context()));
  if (c.pipeline != deck.pipeline) out.push_back(fmt::format("parallel.pipeline={}", c.pipeline));
  if (c.virtual_stages != deck.virtual_stages) out.push_back(fmt::format("parallel.virtual_stages={}", c.virtual_stages));
  if (c.data != deck.data) out.push_back(fmt::format("parallel.data={}", c.data));
  if (c.order != deck.order) out.push_back(fmt::format("parallel.order={}", parallel::rank_order_name(c.order)));
  if (c.expert() != deck.expert()) out.push_back(fmt::format("parallel.expert={}", c.expert()));
  if (c.sequence_parallel != deck.sequence_parallel)
    out.push_back(fmt::format("parallel.sequence_parallel={}", c.sequence_parallel));
  if (c.micro_batch != deck.micro_batch) out.push_back(fmt::format("training.micro_batch={}", c.micro_batch));
  if (c.precision != deck.precision) out.push_back(fmt::format("training.precision={}", c.precision));
  if (c.recompute != deck.recompute) out.push_back(fmt::format("training.recompute={}", recompute_name(c.recompute)));
  if (c.shard() != deck.shard()) out.push_back(fmt::format("optimizer.shard={}", c.shard()));
  if (c.shard_group != deck.shard_group) out.push_back(fmt::format("parallel.shard_group={}", c.shard_group));
  return out;
}

namespace {

// optimizer.shard's modes, the deck's first.
std::vector<std::string> shard_modes(const std::string& deck) {
  std::vector<std::string> modes{deck};
  for (const char* mode : {"none", "optimizer", "gradients", "parameters"})
    if (mode != deck) modes.emplace_back(mode);
  return modes;
}

// The divisors of n > 0, increasing: trial division up to √n, at most 46341 steps for an int.
std::vector<int> divisors(int n) {
  std::vector<int> low, high;
  for (int k = 1; std::int64_t(k) * k <= n; ++k)
    if (n % k == 0) {
      low.push_back(k);
      if (k != n / k) high.push_back(n / k);
    }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

// The most (tensor, context, pipeline) layouts the layout search tries, those nearest the deck's
// first, and the most context sizes it considers: a bound on its time whatever the GPU count and
// the divisors of the layers and the sequence (the shipped decks have a few dozen layouts).
constexpr std::size_t kMaxLayouts = 256;
constexpr std::size_t kMaxContexts = 32;
// The most expert-parallel sizes it tries per layout (a mixture of 8 experts has 4).
constexpr std::size_t kMaxExperts = 8;

// The values nearest `deck` first, by the ratio to it: |log(v / deck)|.
void nearest_first(std::vector<int>& values, int deck) {
  std::stable_sort(values.begin(), values.end(), [&](int a, int b) {
    return std::fabs(std::log(double(a) / deck)) < std::fabs(std::log(double(b) / deck));
  });
}

// Fewest keys changed first, then the shortest training (a figure that is not a number last),
// then the least memory.
bool nearer(const Suggestion& a, const Suggestion& b) {
  if (a.sets.size() != b.sets.size()) return a.sets.size() < b.sets.size();
  const auto days = [](double d) { return std::isnan(d) ? std::numeric_limits<double>::infinity() : d; };
  if (days(a.days) != days(b.days)) return days(a.days) < days(b.days);
  return a.bytes < b.bytes;
}

// The layouts for `gpus` GPUs that fit, nearest first. What varies: tensor (a divisor of the
// node's GPUs, so that a tensor group stays in a node), context (a divisor of the GPUs that cuts
// the sequence into 2·context chunks; 1 when the deck's attention or tasks rule ring attention
// out), pipeline (a divisor of the layers), data (the rest), with a mixture of experts
// parallel.expert (a divisor of data and of model.experts, at most kMaxExperts of them, those
// nearest the deck's first), sequence parallelism, the recomputation, the distributed optimizer,
// micro_batch (the deck's or 1) and, for an fp32 deck, bf16.
std::vector<Suggestion> nearest_fitting(const Config& deck, const Hardware& hw, const Machine& machine,
                                        std::int64_t gpus, double tokens, std::size_t count) {
  std::vector<int> tensors;
  for (const int t : divisors(hw.gpus_per_node))
    if (gpus % t == 0) tensors.push_back(t);
  if (gpus % deck.tensor() == 0 && std::find(tensors.begin(), tensors.end(), deck.tensor()) == tensors.end())
    tensors.push_back(deck.tensor());
  // seq_length % (2·context) == 0: the divisors of seq_length / 2.
  std::vector<int> contexts{1};
  if (deck.context_allowed && deck.shape.seq_length % 2 == 0)
    for (const int cp : divisors(deck.shape.seq_length / 2))
      if (cp > 1 && gpus % cp == 0) contexts.push_back(cp);
  if (gpus % deck.context() == 0 && std::find(contexts.begin(), contexts.end(), deck.context()) == contexts.end())
    contexts.push_back(deck.context());
  nearest_first(contexts, deck.context());
  if (contexts.size() > kMaxContexts) contexts.resize(kMaxContexts);
  const std::vector<int> pipelines = divisors(deck.shape.layers);
  struct Sizes {
    int tensor, context, pipeline;
  };
  std::vector<Sizes> layouts;  // whose product divides the GPUs
  for (const int t : tensors)
    for (const int cp : contexts) {
      const std::int64_t tc = std::int64_t(t) * cp;
      if (gpus % tc != 0) continue;
      for (const int p : pipelines)
        if (gpus % (tc * p) == 0 && gpus / (tc * p) <= std::numeric_limits<int>::max()) layouts.push_back({t, cp, p});
    }
  if (layouts.size() > kMaxLayouts) {
    const auto distance = [&](const Sizes& x) {
      return std::fabs(std::log(double(x.tensor) / deck.tensor())) +
             std::fabs(std::log(double(x.context) / deck.context())) +
             std::fabs(std::log(double(x.pipeline) / deck.pipeline));
    };
    std::stable_sort(layouts.begin(), layouts.end(),
                     [&](const Sizes& a, const Sizes& b) { return distance(a) < distance(b); });
    layouts.resize(kMaxLayouts);
  }
  std::vector<int> micro_batches{deck.micro_batch};
  if (deck.micro_batch != 1) micro_batches.push_back(1);
  std::vector<std::string> precisions{deck.precision};
  if (deck.precision == "fp32") precisions.push_back("bf16");
  const double limit = hw.gpu_memory_gib * kGiB;

  std::vector<Suggestion> found;
  for (const auto& [t, cp, p] : layouts) {
    const std::int64_t d = gpus / (std::int64_t(t) * cp * p);
    Config c = deck;
    c.shape.tensor = t;
    c.set_context(cp);
    c.pipeline = p;
    c.data = static_cast<int>(d);
    // parallel.expert: 1 without a mixture of experts, else the divisors of data that divide the
    // experts (of their greatest common divisor).
    std::vector<int> experts{1};
    if (deck.holds_experts()) {
      experts = divisors(std::gcd(static_cast<int>(d), deck.shape.experts));
      nearest_first(experts, deck.expert());
      if (experts.size() > kMaxExperts) experts.resize(kMaxExperts);
    }
    for (const int ep : experts) {
      c.shape.expert = ep;
      std::optional<StageParameters> parameters;
      for (const int mb : micro_batches)
        for (const std::string& precision : precisions)
          for (const bool sp : {deck.sequence_parallel, !deck.sequence_parallel})
            for (const Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
              for (const std::string& shard : shard_modes(deck.shard())) {
                if (sp && t == 1 && !deck.sequence_parallel) continue;  // nothing to split
                if (shard != "none" && c.data_context() == 1 && deck.shard() == "none") continue;
                c.micro_batch = mb;
                c.precision = precision;
                c.sequence_parallel = sp;
                c.recompute = r;
                c.set_shard(shard);
                // The deck's hybrid sharding where it still applies (a divisor of the new data x context).
                c.shard_group = shard != "none" && deck.shard_group > 0 && c.data_context() % deck.shard_group == 0
                                    ? deck.shard_group
                                    : 0;
                if (!c.layout_problem().empty()) continue;
                std::int64_t most = 0;
                try {
                  if (!parameters) parameters = stage_parameters(c.shape, p, c.virtual_stages);
                  most = most_loaded_rank(c, *parameters).total();
                } catch (const Overflow&) {
                  continue;  // more than 2^63 − 1 bytes: fits no GPU
                }
                if (double(most) > limit) continue;
                found.push_back(Suggestion{c, changed_keys(deck, c), most, 0});
              }
    }
  }
  // The days come from a simulated step: only for the suggestions with the fewest changes, enough
  // of them to fill `count` (every one of the last number of changes taken).
  std::stable_sort(found.begin(), found.end(),
                   [](const Suggestion& a, const Suggestion& b) { return a.sets.size() < b.sets.size(); });
  std::size_t kept = 0;
  while (kept < found.size() && (kept < count || found[kept].sets.size() == found[kept - 1].sets.size())) ++kept;
  found.resize(kept);
  for (Suggestion& s : found) s.days = days_of(s.config, machine, tokens);
  std::sort(found.begin(), found.end(), nearer);
  if (found.size() > count) found.resize(count);
  return found;
}

// Why a deck cannot be planned when `figure` exceeds 2^63 − 1: the largest of the keys it grows
// with, then the others (`activations`: it grows with the heads and the micro-batch too).
std::string beyond_64_bits(const Config& c, const std::string& figure, bool activations) {
  const model::GptShape& m = c.shape;
  std::vector<std::pair<std::string, int>> keys{{"model.hidden", m.hidden},         {"model.layers", m.layers},
                                                {"model.ffn_hidden", m.ffn_hidden}, {"model.vocab_size", m.vocab_size},
                                                {"model.seq_length", m.seq_length}};
  if (model::holds_experts(m)) keys.emplace_back("model.experts", m.experts);
  if (activations) {
    keys.emplace_back("model.heads", m.heads);
    keys.emplace_back("training.micro_batch", c.micro_batch);
  }
  std::stable_sort(keys.begin(), keys.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string others;
  for (std::size_t i = 1; i < keys.size(); ++i)
    others += fmt::format("{}{} = {}", i > 1 ? ", " : "", keys[i].first, keys[i].second);
  return fmt::format("{} = {} is too large: {} (with {}) exceeds 2^63 - 1 = {}, the largest count tptrain represents",
                     keys[0].first, keys[0].second, figure, others, std::numeric_limits<std::int64_t>::max());
}

// f(), with an Overflow turned into that refusal.
template <class F>
auto counted(const Config& c, const char* figure, bool activations, F&& f) {
  try {
    return f();
  } catch (const Overflow&) {
    throw std::invalid_argument(beyond_64_bits(c, figure, activations));
  }
}

// The JSON line of a plan (io/json_line.hpp: a figure that is not finite is null).
io::JsonObject json_of(const Plan& p);

}  // namespace

std::string step_breakdown_text(const std::string& label, const StepBreakdown& b, double step) {
  const auto part = [&](double x) { return fmt::format("{:.3f} s ({:.0f} %)", x, step > 0 ? 100 * x / step : 0.0); };
  return fmt::format("{} compute {}, tensor {}, context {}, expert {}, pipeline bubble {}, data {}, optimizer {}",
                     label, part(b.compute), part(b.tensor), part(b.context), part(b.expert), part(b.bubble),
                     part(b.data), part(b.optimizer));
}

io::JsonObject step_breakdown_json(const StepBreakdown& b, double step) {
  using io::digits;
  return io::JsonObject()
      .number("step", step, digits(6))
      .number("compute", b.compute, digits(6))
      .number("tensor", b.tensor, digits(6))
      .number("context", b.context, digits(6))
      .number("expert", b.expert, digits(6))
      .number("pipeline_bubble", b.bubble, digits(6))
      .number("data", b.data, digits(6))
      .number("optimizer", b.optimizer, digits(6));
}

namespace {

}  // namespace

double default_peak_tflops(const std::string& precision) { return peak_flops(dgx_a100_80gb(), precision) / 1e12; }

Machine resolved_machine(Hardware& hw, const std::string& precision) {
  Machine m = hw.machine;
  if (hw.gpus_per_node > 0) m.devices = hw.gpus_per_node;
  if (hw.gpu_memory_gib > 0) m.memory_gib = hw.gpu_memory_gib;
  if (hw.peak_tflops > 0) (precision == "bf16" ? m.peak_tflops_bf16 : precision == "fp16" ? m.peak_tflops_fp16 : m.peak_tflops_fp32) = hw.peak_tflops;
  hw.gpus_per_node = m.devices;
  hw.gpu_memory_gib = m.memory_gib;
  hw.peak_tflops = peak_flops(m, precision) / 1e12;
  hw.machine = m;
  return m;
}

RankMemory rank_memory(const Config& c, const StageParameters& stage_parameters, int stage) {
  const int P = c.pipeline;
  RankMemory m;
  m.stage = stage;
  m.layers = c.shape.layers / P;
  // The schedule's own counts (schedule::schedule_memory), as the run reserves them.
  const schedule::ScheduleMemory kept = per_schedule({stage, P, c.virtual_stages, c.micro_batches()}, [&] {
    return schedule::schedule_memory(schedule::Schedule::one_f_one_b,
                                     schedule::PipelinePlace{stage, P, c.virtual_stages}, c.micro_batches());
  });
  m.chunk_slots = kept.slots;
  m.in_flight = kept.total_slots();
  m.received_gradients = kept.received_gradients;
  m.parameters = stage_parameters.of(stage);
  m.expert_parameters = stage_parameters.experts_of(stage);
  m.parameter_bytes = parameter_bytes(stage_parameters.buckets_of(stage), c);
  m.activations = chunked_activation_bytes(c, m.layers / c.virtual_stages, m.chunk_slots);
  m.head = stage == P - 1 ? total_bytes(head_buffers(c)) : 0;
  m.workspace = total_bytes(workspace_buffers(c)) + received_gradient_bytes(c, m.received_gradients);
  return m;
}

RankMemory most_loaded_rank(const Config& c, const StageParameters& stage_parameters) {
  RankMemory most = rank_memory(c, stage_parameters, 0);
  for (const int stage : {1, c.pipeline - 1}) {
    if (stage < 1 || stage >= c.pipeline) continue;
    const RankMemory m = rank_memory(c, stage_parameters, stage);
    if (m.total() > most.total()) most = m;  // the earlier stage on a tie
  }
  return most;
}

RankMemory most_loaded_rank(const Config& c) {
  return most_loaded_rank(c, stage_parameters(c.shape, c.pipeline, c.virtual_stages));
}

Plan make_plan(const Config& c, const Hardware& hw_in, double deck_tokens, const std::string& deck_path,
               bool suggest) {
  check_hardware(hw_in);
  if (const std::string why = c.layout_problem(); !why.empty()) throw std::invalid_argument("tptrain: plan: " + why);
  c.shape.validate(c.micro_batch);
  model::validate_kinds(c.shape);
  Plan p;
  p.deck = deck_path;
  p.config = c;
  p.hardware = hw_in;
  const Machine machine = resolved_machine(p.hardware, c.precision);
  p.gpus = hw_in.gpus > 0 ? hw_in.gpus : c.world();
  p.hardware.gpus = p.gpus;
  p.tokens = hw_in.tokens > 0 ? hw_in.tokens : deck_tokens;
  p.hardware.tokens = p.tokens;
  const model::GptShape& m = c.shape;

  p.parameters_eq2 = narayanan_parameters(m.layers, m.hidden, m.padded_vocab(), m.seq_length);
  if (llama_formula_applies(m))
    p.parameters_llama = llama_parameters(m.layers, m.hidden, m.heads, m.kv_head_count(), m.ffn_hidden, m.vocab_size,
                                          m.tie_embeddings);
  p.parameters = counted(c, "the parameter count", false, [&] { return exact_parameters(m); });
  p.active_parameters = counted(c, "the active parameter count", false, [&] { return active_parameters(m); });
  p.active_parameters_formula = double(p.active_parameters);
  if (model::holds_experts(m)) {
    p.parameters_moe = moe_parameters(m.layers, m.hidden, m.heads, m.kv_head_count(), m.ffn_hidden, m.experts,
                                      m.experts, m.vocab_size, m.tie_embeddings);
    p.active_parameters_formula = moe_parameters(m.layers, m.hidden, m.heads, m.kv_head_count(), m.ffn_hidden,
                                                 m.experts, m.experts_per_token, m.vocab_size, m.tie_embeddings);
  }
  const StageParameters per_stage = counted(c, "the parameter count of a pipeline stage", false,
                                            [&] { return stage_parameters(m, c.pipeline, c.virtual_stages); });
  p.memory = counted(c, "the byte count of a rank", true, [&] { return most_loaded_rank(c, per_stage); });
  p.layer_activation_bytes =
      counted(c, "the byte count of a layer's activations", true, [&] { return total_bytes(layer_activations(c)); });
  p.korthikanti_layer_bytes =
      korthikanti_table2(korthikanti_case(c), m.local_seq_length(), c.micro_batch, m.hidden, m.heads, m.tensor);

  p.flops_none = flops_per_iteration(c, Recompute::none);
  p.flops_selective = flops_per_iteration(c, Recompute::selective);
  p.flops_full = flops_per_iteration(c, Recompute::full);
  p.flops = flops_per_iteration(c, c.recompute);
  p.flops_eq3 = narayanan_flops_per_iteration(c.global_batch, m.seq_length, m.layers, m.hidden, m.padded_vocab());
  p.bubble_without_interleaving = double(c.pipeline - 1) / c.micro_batches();
  p.bubble = p.bubble_without_interleaving / c.virtual_stages;
  p.simulation = simulate_step(c, machine);
  p.seconds_per_iteration = p.simulation.step_seconds;
  p.achieved_flops = p.flops / (double(c.world()) * p.seconds_per_iteration);
  p.iterations = p.tokens / (double(c.global_batch) * m.seq_length);
  p.training_days = p.iterations * p.seconds_per_iteration / kSecondsPerDay;
  if (c.virtual_stages > 1) {
    Config one = c;
    one.virtual_stages = 1;
    const double without = p.iterations * step_seconds_of(one, machine) / kSecondsPerDay;
    if (without > p.training_days) p.days_saved_by_interleaving = without - p.training_days;
  }
  // Eq. 4 and 6NT count the parameters a token's work touches: a mixture's active ones.
  p.training_days_eq4 = narayanan_training_seconds(p.tokens, double(p.active_parameters), double(c.world()),
                                                   p.achieved_flops,
                                                   c.recompute == Recompute::full) /
                        kSecondsPerDay;
  p.total_flops_6nt = six_n_t(double(p.active_parameters), p.tokens);
  p.communication = busiest_communication(c, per_stage);
  const CrossNodeBytes* deck_order = nullptr;
  for (const parallel::RankOrder order : {parallel::RankOrder::tp_pp_dp, parallel::RankOrder::tp_dp_pp})
    p.cross_node.push_back(cross_node_bytes(c, per_stage, order, p.hardware.gpus_per_node));
  for (const CrossNodeBytes& x : p.cross_node)
    if (x.order == c.order) deck_order = &x;
  p.recommended_order = c.order;
  for (const CrossNodeBytes& x : p.cross_node)
    if (x.total() < deck_order->total()) p.recommended_order = x.order;

  if (p.gpus != c.world())
    p.problems.push_back(fmt::format("wrong GPU count: the deck needs tensor {} x context {} x pipeline {} x data {} "
                                     "= {} GPUs, but {} are given (--gpus)",
                                     c.tensor(), c.context(), c.pipeline, c.data, c.world(), p.gpus));
  p.fits = double(p.memory.total()) <= p.hardware.gpu_memory_gib * kGiB;
  if (!p.fits)
    p.problems.push_back(fmt::format(
        "does not fit: the most loaded rank (pipeline stage {}) needs {:.1f} GiB, more than --gpu-memory {:g} GiB "
        "(parameters, gradients and optimizer state {:.1f} GiB, activations {:.1f} GiB, logits {:.1f} GiB, "
        "workspace {:.1f} GiB)",
        p.memory.stage, gib(p.memory.total()), p.hardware.gpu_memory_gib, gib(p.memory.parameter_bytes.total()),
        gib(p.memory.activations), gib(p.memory.head), gib(p.memory.workspace)));
  const int gpus_per_node = p.hardware.gpus_per_node;
  if (gpus_per_node % m.tensor != 0)
    p.notes.push_back(fmt::format("a tensor-parallel group of {} ranks does not fit in a node of {} GPUs: its "
                                  "all-reduces, several per layer, cross the network",
                                  m.tensor, gpus_per_node));
  if (p.gpus % gpus_per_node != 0 && p.gpus > gpus_per_node)
    p.notes.push_back(fmt::format("{} GPUs are not whole nodes of {}", p.gpus, gpus_per_node));
  if (c.micro_batches() < c.pipeline)
    p.notes.push_back(fmt::format("{} micro-batches per step on {} pipeline stages: most stages idle most of the time",
                                  c.micro_batches(), c.pipeline));
  if (suggest && !p.problems.empty()) {
    Hardware hw = p.hardware;
    p.suggestions = nearest_fitting(c, hw, machine, p.gpus, p.tokens, 5);
  }
  // Extreme --tokens, --peak-tflops or --gpu-memory put a figure beyond a double: the JSON line
  // has null there (JSON has no infinity), and the report says why.
  if (const io::JsonObject json = json_of(p); !json.non_finite().empty())
    p.notes.push_back(fmt::format("{}: beyond the range of a double (with --tokens {:g}, --peak-tflops {:g}, "
                                  "--gpu-memory {:g} GiB); null in the JSON line",
                                  io::describe_non_finite(json), p.tokens, p.hardware.peak_tflops,
                                  p.hardware.gpu_memory_gib));
  return p;
}

Plan make_plan(const io::Deck& deck, const Hardware& hw, double expert_imbalance) {
  const double tokens = double(deck.training.steps) * deck.training.global_batch * deck.model.seq_length;
  Config c = config_of(deck);
  c.expert_imbalance = expert_imbalance;
  return make_plan(c, hw, tokens, deck.source);
}

std::string report(const Plan& p) {
  const Config& c = p.config;
  const model::GptShape& m = c.shape;
  const RankMemory& r = p.memory;
  const ParameterBytes& pb = r.parameter_bytes;
  const std::string precision = c.precision;
  std::string out;
  const auto line = [&](const std::string& s) { out += s + "\n"; };

  line(fmt::format("# tptrain plan {}", io::display_path(p.deck)));
  const std::string biases = m.qkv_bias && m.linear_bias ? "all"
                             : m.qkv_bias                ? "q/k/v only"
                             : m.linear_bias             ? "all but q/k/v"
                                                         : "none";
  line(fmt::format("model        {}: {} layers, hidden {}, {} heads ({}), ffn {} ({}), seq_length {}, "
                   "vocab {} (padded {}), {}; {}, {}; biases {}",
                   m.architecture, m.layers, m.hidden, m.heads,
                   m.latent_attention() ? model::attention_kind(m).label(m)
                                        : fmt::format("{} key/value", m.kv_head_count()),
                   m.ffn_hidden,
                   model::mlp_kind(m).label(m), m.seq_length, m.vocab_size, m.padded_vocab(),
                   m.tie_embeddings ? "tied" : "untied", model::norm_kind(m).label(m),
                   model::position_kind(m).label(m), biases));
  // Generation's cache per token and layer: multi-head latent attention caches its latent (the
  // same on every tensor rank), where its heads' keys and values would be nh·(d_q + d_v).
  if (m.latent_attention()) {
    const std::int64_t latent = std::int64_t(m.kv_lora_rank) + m.qk_rope_head_dim;
    const std::int64_t heads = std::int64_t(m.heads) * (m.qk_head_dim() + m.value_head_dim());
    line(fmt::format("kv cache     {} values per token and layer (the latent r_kv + d_R), {} bytes in {}; the heads' "
                     "keys and values would be {} ({:.1f}x)",
                     latent, latent * c.element_bytes(), precision, heads, double(heads) / double(latent)));
  }
  line(fmt::format("layout       tensor {} x context {} x pipeline {} x data {}{} = {} GPUs, order {}; {} given, {} per "
                   "node{}",
                   m.tensor, m.context, c.pipeline, c.data,
                   model::holds_experts(m) ? fmt::format(" (expert {}: {} of the {} experts of a block per rank)", c.expert(),
                                         model::local_experts(m), m.experts)
                           : std::string(),
                   c.world(), order_name(c, c.order), p.gpus,
                   p.hardware.gpus_per_node,
                   m.context > 1 ? fmt::format("; {} tokens of each sequence per rank (2 chunks of {})",
                                               m.local_seq_length(), m.seq_length / (2 * m.context))
                                 : std::string()));
  line(fmt::format("training     {}, recompute {}, sequence parallel {}, {}; global batch {} = "
                   "{} micro-batches of {} per data-parallel rank",
                   precision, recompute_name(c.recompute), yes_no(c.sequence_parallel),
                   c.shard_parameters ? (c.reshard_after_forward
                                             ? "sharded optimizer state, gradients and weights (ZeRO-3)"
                                             : "sharded optimizer state, gradients and weights (ZeRO-3), "
                                               "kept from forward to backward")
                   : c.shard_gradients       ? "sharded optimizer state and gradients (ZeRO-2)"
                   : c.distributed_optimizer ? "distributed optimizer yes"
                                             : "distributed optimizer no",
                   c.global_batch, c.micro_batches(), c.micro_batch));
  if (llama_formula_applies(m))
    line(fmt::format("parameters   {:.2f} B: {} exactly (tptrain's tensors), {:.0f} by Llama's formula "
                     "(l(h(a+2k)d + adh + 3hf + 2h) + {}Vh + h)",
                     p.parameters / 1e9, p.parameters, p.parameters_llama, m.tie_embeddings ? "" : "2"));
  else if (moe_formula_applies(m))
    line(fmt::format("parameters   {:.2f} B: {} exactly (tptrain's tensors), {:.0f} by Mixtral's formula "
                     "(l(h(a+2k)d + adh + 3Ehf + Eh + 2h) + {}Vh + h, E = {} experts)",
                     p.parameters / 1e9, p.parameters, p.parameters_moe, m.tie_embeddings ? "" : "2", m.experts));
  else if (model::holds_experts(m))
    line(fmt::format("parameters   {:.2f} B: {} exactly (tptrain's tensors)", p.parameters / 1e9, p.parameters));
  else
    line(fmt::format("parameters   {:.2f} B: {} exactly (tptrain's tensors), {:.2f} B by Narayanan et al. 2021 eq. 2",
                     p.parameters / 1e9, p.parameters, p.parameters_eq2 / 1e9));
  if (model::holds_experts(m))
    line(fmt::format("active       {:.2f} B per token: {} (every tensor but the experts a token skips: the router and "
                     "K = {} of the E = {} experts per block{})",
                     p.active_parameters / 1e9, p.active_parameters, m.experts_per_token, m.experts,
                     moe_formula_applies(m)
                         ? fmt::format("; {:.0f} by l(h(a+2k)d + adh + 3Khf + Eh + 2h) + {}Vh + h",
                                       p.active_parameters_formula, m.tie_embeddings ? "" : "2")
                         : std::string()));
  line("");
  std::string chunks, kept = std::to_string(r.in_flight);
  if (c.virtual_stages > 1) {
    chunks = fmt::format(" in {} chunks of {}", c.virtual_stages, r.layers / c.virtual_stages);
    kept.clear();
    for (const int k : r.chunk_slots) kept += (kept.empty() ? "" : " + ") + std::to_string(k);
    kept += fmt::format(" = {}", r.in_flight);
  }
  line(fmt::format("memory of the most loaded rank: pipeline stage {} of {} ({} layers{}, {} micro-batch{} in flight{})",
                   r.stage, c.pipeline, r.layers, chunks, kept, r.in_flight == 1 ? "" : "es",
                   r.stage == c.pipeline - 1 ? ", the loss head" : ""));
  const auto row = [&](const char* what, double bytes, const std::string& note) {
    line(fmt::format("  {:<17}{:>10.2f} GiB   {}", what, gib(bytes), note));
  };
  const double per_param = r.parameters > 0 ? double(pb.total()) / double(r.parameters) : 0.0;
  row("weights", pb.weights,
      (model::holds_experts(m)
           ? fmt::format("{} parameters on this rank, {} of them its {} of {} experts in each of its {} blocks, {}",
                         r.parameters, r.expert_parameters, model::local_experts(m), m.experts, r.layers, precision)
           : fmt::format("{} parameters on this rank, {}", r.parameters, precision)) +
          (!c.shard_parameters
               ? std::string()
               : fmt::format("; 1/{} of them (sharded parameters) and {} gathered at a time ({})", c.shard_ranks(),
                             human_bytes(double(pb.gathered_weights)),
                             c.reshard_after_forward ? "the module computing and the one prefetched"
                                                     : "every module, kept from its forward to its backward")));
  row("master weights", pb.master, precision == "fp32" ? "none: the fp32 weights are the master" : "fp32");
  row("gradients", pb.gradients,
      !c.shard_gradients ? std::string("fp32")
                         : fmt::format("fp32, 1/{} of them (sharded gradients), the word embedding's whole when the head "
                                       "writes it, and the pool of whole buckets the backward writes into",
                                       c.shard_ranks()));
  row("optimizer state", pb.optimizer,
      !c.distributed_optimizer ? std::string("AdamW moments, fp32")
      : model::holds_experts(m)
          ? fmt::format("AdamW moments, fp32, 1/{} of the dense ones' and 1/{} of the experts' (distributed optimizer, "
                        "over data x context and the expert-data group)",
                        c.data_context(), c.expert_data_context())
          : fmt::format("AdamW moments, fp32, 1/{} of them (distributed optimizer{})", c.shard_ranks(),
                        c.shard_replicas() > 1 ? fmt::format(", hybrid: shard groups of {}, {} replicas", c.shard_ranks(),
                                                             c.shard_replicas())
                        : c.context() > 1      ? fmt::format(", over data {} x context {}", c.data, c.context())
                                               : ""));
  const std::int64_t working_set = total_bytes(recompute_working_set(c));
  row("activations", r.activations,
      fmt::format("{} layers x {} micro-batches x {} per layer{}", r.layers / c.virtual_stages, r.in_flight,
                  human_bytes(p.layer_activation_bytes),
                  working_set > 0 ? fmt::format(" + {} recompute working set", human_bytes(working_set)) : ""));
  row("logits", r.head, r.head > 0 ? "ln_f output, logits (their gradient in place), loss vectors" : "(on the last stage)");
  row("workspace", r.workspace,
      fmt::format("{} {}, block, gradient and sequence-parallel buffers",
                  c.shape.flash_attention ? "flash (no S x S buffer):" : "batched (S x S scores and their row tile):",
                  c.holds_experts() ? "the attention's scratch, the experts' rows and the router's gradients"
                          : "attention's and the MLP's scratch in one region"));
  row("total", r.total(),
      fmt::format("{:.1f} bytes per parameter + activations; --gpu-memory {:g} GiB: {}", per_param,
                  p.hardware.gpu_memory_gib,
                  p.fits ? "fits" : "DOES NOT FIT"));
  row("checkpoint (host)", pb.checkpoint_host,
      fmt::format("not in the total: host memory a checkpoint copies the fp32 master and moments to{}",
                  c.async_checkpoint ? ", held from the first checkpoint on (checkpoint.async)"
                                     : ", for the write (checkpoint.async holds it from the first checkpoint on)"));
  line(fmt::format("  (Korthikanti et al. 2022 Table 2, {}, 16-bit with dropout{}: {} per layer and micro-batch; "
                   "tptrain keeps {})",
                   korthikanti_case_name(korthikanti_case(c)),
                   m.context > 1 ? fmt::format(", s = {} tokens per rank", m.local_seq_length()) : "",
                   human_bytes(p.korthikanti_layer_bytes), human_bytes(p.layer_activation_bytes)));
  line("");
  line("compute");
  line(fmt::format("  FLOPs per iteration  {:.3e} with recompute {} (none {:.3e}, selective {:.3e}, full {:.3e}{})",
                   p.flops, recompute_name(c.recompute), p.flops_none, p.flops_selective, p.flops_full,
                   !gpt_formula_applies(m) ? std::string("; not GPT's block, no eq. 3")  // eq. 3: GPT's, f = 4h
                                           : fmt::format("; Narayanan eq. 3: {:.3e}", p.flops_eq3)));
  const StepSimulation& sim = p.simulation;
  line(fmt::format("  machine              {} ({}): {} {:g} TFLOP/s {} peak, {:g} GB/s memory, {} per node, link {:g} "
                   "GB/s, network {:g} GB/s per device",
                   p.hardware.machine.name, io::display_path(p.hardware.machine.path), p.hardware.machine.device_name,
                   p.hardware.peak_tflops, c.precision, p.hardware.machine.memory_bandwidth_gbs, p.hardware.gpus_per_node,
                   p.hardware.machine.link_bandwidth_gbs, p.hardware.machine.network_bandwidth_gbs));
  line(fmt::format("  time per iteration   {:.3f} s on {} GPUs (a simulated step: the schedule's ops on every stage{}{})",
                   p.seconds_per_iteration, c.world(),
                   c.expert() > 1 && c.expert_imbalance != 1.0
                       ? fmt::format("; the busiest expert rank's rows {:g} x the balanced", c.expert_imbalance)
                       : std::string(),
                   p.hardware.machine.rank_time_share < 1
                       ? fmt::format("; ranks holding {:.3g} of a core while all compute, faster while others wait "
                                     "(--trace shows the timeline at that share)",
                                     p.hardware.machine.rank_time_share)
                       : std::string()));
  line(fmt::format("  achieved             {:.1f} TFLOP/s per GPU with recomputation; MFU {:.1f} % (model FLOPs {:.3e} "
                   "per step)",
                   p.achieved_flops / 1e12, 100 * sim.mfu, sim.model_flops));
  line(fmt::format("  training             {:.4g} B tokens = {:.0f} iterations: {:.1f} days (eq. 4, {}TP/(nX): {:.1f} "
                   "days); 6NT = {:.3g} FLOPs",
                   p.tokens / 1e9, p.iterations, p.training_days, c.recompute == Recompute::full ? 8 : 6,
                   p.training_days_eq4, p.total_flops_6nt));
  line(step_breakdown_text("  step, average rank  ", sim.average, sim.step_seconds));
  line(step_breakdown_text(fmt::format("  most loaded rank {:<3}", sim.most_loaded.world_rank), sim.most_loaded,
                           sim.step_seconds));
  if (c.virtual_stages == 1)
    line(fmt::format("  pipeline bubble      (p - 1)/m = {}/{} = {:.1f} % of the ideal step (closed form; simulated: "
                     "{:.1f} % of the step idle on the average rank)",
                     c.pipeline - 1, c.micro_batches(), 100 * p.bubble, 100 * sim.average.bubble / sim.step_seconds));
  else
    line(fmt::format("  pipeline bubble      (p - 1)/(v m) = {}/({} x {}) = {:.1f} % of the ideal step, interleaved "
                     "(1F1B without it: {:.1f} %; simulated: {:.1f} % idle): {:.1f} days saved, for {} times the "
                     "point-to-point messages",
                     c.pipeline - 1, c.virtual_stages, c.micro_batches(), 100 * p.bubble,
                     100 * p.bubble_without_interleaving, 100 * sim.average.bubble / sim.step_seconds,
                     p.days_saved_by_interleaving, c.virtual_stages));
  line("");
  line("communication per step: bytes one rank sends (ring algorithms; the busiest stage)");
  const StepCommunication& x = p.communication;
  line(fmt::format("  tensor    ({:>4} ranks)   {}", m.tensor, human_bytes(x.tensor)));
  line(fmt::format("  context   ({:>4} ranks)   {}{}", m.context, human_bytes(x.context),
                   m.context > 1 ? fmt::format("   ring attention: per layer and micro-batch {} K,V blocks of {} "
                                               "forward, {} and {} fp32 dK,dV sums backward{}",
                                               m.context - 1, human_bytes(context_kv_block_bytes(c)),
                                               m.context - 1, m.context,
                                               c.recompute == Recompute::full ? ", the forward's again (recompute full)"
                                                                              : "")
                                 : std::string()));
  if (model::holds_experts(m))
    line(fmt::format("  expert    ({:>4} ranks)   {}{}", c.expert(), human_bytes(x.expert),
                     c.expert() > 1
                         ? fmt::format("   all-to-all: per layer and micro-batch {} all-to-alls of the N K = {} token "
                                       "copies ({}), (ep - 1)/ep = {}/{} of each to other ranks (2 forward, 2 "
                                       "backward{})",
                                       expert_all_to_alls(c),
                                       std::int64_t(c.micro_batch) * m.local_seq_length() * m.experts_per_token,
                                       human_bytes(expert_all_to_all_bytes(c)), c.expert() - 1, c.expert(),
                                       c.recompute == Recompute::full ? ", the forward's 2 again (recompute full)" : "")
                         : std::string("   every rank holds every expert: no all-to-all")));
  line(fmt::format("  pipeline  ({:>4} stages)  {}", c.pipeline, human_bytes(x.pipeline)));
  line(fmt::format("  data      ({:>4} ranks)   {}{}", c.distributed_optimizer ? c.shard_ranks() : c.data_context(),
                   human_bytes(x.data),
                   model::holds_experts(m) ? std::string("   the dense parameters' gradients") +
                                 (m.context > 1 ? fmt::format(", over data {} x context {}", c.data, m.context) : "")
                   : m.context > 1 ? fmt::format("   the gradients over data {} x context {}", c.data, m.context)
                                   : std::string()));
  if (model::holds_experts(m))
    line(fmt::format("  expert data ({:>4} ranks) {}   the experts' gradients, over the data / expert = {} ranks "
                     "that hold the same experts{}",
                     c.expert_data_context(), human_bytes(x.expert_data), c.data / c.expert(),
                     m.context > 1 ? fmt::format(" x context {}", m.context) : ""));
  if (c.shard_replicas() > 1 && c.distributed_optimizer) {
    // Hybrid sharding: G consecutive data x context ranks, T·G apart at most (T·P·G with tp-pp-dp
    // when a group spans data ranks).
    const std::int64_t G = c.shard_ranks();
    const std::int64_t span =
        c.tensor() * G * (c.order == parallel::RankOrder::tp_pp_dp && G > c.context() ? c.pipeline : 1);
    line(fmt::format("  data replicas ({:>4} groups) {}   hybrid sharding: the reduce-scatters{} above run inside shard "
                     "groups of {} ranks ({}), then each fp32 gradient shard is all-reduced across the groups",
                     c.shard_replicas(), human_bytes(x.data_replicas), c.shard_parameters ? " and all-gathers" : "", G,
                     span <= p.hardware.gpus_per_node ? fmt::format("inside a node of {}", p.hardware.gpus_per_node)
                                                      : fmt::format("spanning {} ranks, more than a node's {}", span,
                                                                    p.hardware.gpus_per_node)));
  }
  line(fmt::format("  embedding (first + last) {}", human_bytes(x.embedding)));
  line("");
  line(fmt::format("across nodes per step: bytes all ranks send to another node (nodes of {} GPUs, ranks placed node "
                   "by node; a ring enters and leaves each node of its group once)",
                   p.hardware.gpus_per_node));
  if (model::holds_experts(m)) {  // the expert groups' columns too
    line(fmt::format("  {:<19}{:>14}{:>14}{:>14}{:>14}{:>14}{:>14}{:>14}{:>14}", "parallel.order", "tensor", "context",
                     "expert", "pipeline", "data", "expert data", "embedding", "total"));
    for (const CrossNodeBytes& o : p.cross_node)
      line(fmt::format("  {:<19}{:>14}{:>14}{:>14}{:>14}{:>14}{:>14}{:>14}{:>14}",
                       fmt::format("{}{}", order_name(c, o.order), o.order == c.order ? " (deck)" : ""),
                       human_bytes(o.tensor), human_bytes(o.context), human_bytes(o.expert), human_bytes(o.pipeline),
                       human_bytes(o.data), human_bytes(o.expert_data), human_bytes(o.embedding),
                       human_bytes(o.total())));
  } else {
    line(fmt::format("  {:<19}{:>14}{:>14}{:>14}{:>14}{:>14}{:>14}", "parallel.order", "tensor", "context", "pipeline",
                     "data", "embedding", "total"));
    for (const CrossNodeBytes& o : p.cross_node)
      line(fmt::format("  {:<19}{:>14}{:>14}{:>14}{:>14}{:>14}{:>14}",
                       fmt::format("{}{}", order_name(c, o.order), o.order == c.order ? " (deck)" : ""),
                       human_bytes(o.tensor), human_bytes(o.context), human_bytes(o.pipeline), human_bytes(o.data),
                       human_bytes(o.embedding), human_bytes(o.total())));
  }
  {
    const auto total_of = [&](parallel::RankOrder order) {
      for (const CrossNodeBytes& o : p.cross_node)
        if (o.order == order) return o.total();
      return 0.0;
    };
    const double deck_total = total_of(c.order), best = total_of(p.recommended_order);
    if (p.recommended_order == c.order)
      line(fmt::format("  recommended: parallel.order = \"{}\", the deck's ({})", order_name(c, c.order),
                       deck_total == 0 ? "nothing crosses a node"
                                       : fmt::format("{} across nodes per step; the other order sends no less",
                                                     human_bytes(deck_total))));
    else
      line(fmt::format("  recommended: --set parallel.order={} ({} across nodes per step instead of {})",
                       order_name(c, p.recommended_order), human_bytes(best), human_bytes(deck_total)));
  }
  line("");
  for (const std::string& n : p.notes) line("note: " + n);
  if (p.ok()) {
    line("result: the deck fits");
  } else {
    line("result: the deck cannot run as written");
    for (const std::string& problem : p.problems) line("  problem: " + problem);
    if (p.suggestions.empty()) {
      line(fmt::format("no layout of {} GPUs both suits the model (heads, layers and the global batch divide) and "
                       "fits {:g} GiB per GPU (tried tensor, context, pipeline, data, sequence parallel, recompute, "
                       "distributed optimizer, micro_batch 1, bf16)",
                       p.gpus, p.hardware.gpu_memory_gib));
    } else {
      line(fmt::format("nearest layouts of {} GPUs that fit (fewest changes first):", p.gpus));
      for (const Suggestion& s : p.suggestions) {
        std::string sets;
        for (const std::string& k : s.sets) sets += " --set " + k;
        line(fmt::format("  {:.1f} GiB per rank, {:.1f} days:{}", gib(s.bytes), s.days, sets));
      }
    }
  }
  return out;
}

namespace {

io::JsonObject json_of(const Plan& p) {
  using io::digits, io::exponent, io::fixed;
  const Config& c = p.config;
  const RankMemory& r = p.memory;
  const ParameterBytes& pb = r.parameter_bytes;
  std::vector<io::JsonObject> suggestions;
  for (const Suggestion& s : p.suggestions)
    suggestions.push_back(io::JsonObject()
                              .strings("set", s.sets)
                              .integer("memory_bytes", s.bytes)
                              .number("training_days", s.days, digits(6)));
  io::JsonObject o;
  o.string("deck", p.deck).integer("gpus", p.gpus).integer("tensor", c.tensor()).integer("context", c.context());
  o.integer("pipeline", c.pipeline);
  o.integer("data", c.data);
  if (c.holds_experts())
    o.integer("expert", c.expert())
        .integer("experts", c.shape.experts)
        .integer("experts_per_token", c.shape.experts_per_token)
        .integer("experts_per_rank", model::local_experts(c.shape));
  o.integer("params", p.parameters).number("params_narayanan_eq2", p.parameters_eq2, fixed(0));
  if (llama_formula_applies(c.shape)) o.number("params_llama_formula", p.parameters_llama, fixed(0));
  if (moe_formula_applies(c.shape)) o.number("params_moe_formula", p.parameters_moe, fixed(0));
  if (c.holds_experts()) {
    o.integer("params_active", p.active_parameters);
    if (moe_formula_applies(c.shape)) o.number("params_active_formula", p.active_parameters_formula, fixed(0));
    o.integer("params_on_rank", r.parameters).integer("expert_params_on_rank", r.expert_parameters);
  }
  o.integer("most_loaded_stage", r.stage);
  o.object("memory_bytes", io::JsonObject()
                               .integer("weights", pb.weights)
                               .integer("master_weights", pb.master)
                               .integer("gradients", pb.gradients)
                               .integer("optimizer_state", pb.optimizer)
                               .integer("activations", r.activations)
                               .integer("logits", r.head)
                               .integer("workspace", r.workspace)
                               .integer("total", r.total())
                               .integer("checkpoint_host", pb.checkpoint_host));
  o.number("gpu_memory_bytes", p.hardware.gpu_memory_gib * kGiB, fixed(0));
  o.number("flops_per_iteration", p.flops, exponent(6));
  o.object("flops_per_iteration_by_recompute", io::JsonObject()
                                                   .number("none", p.flops_none, exponent(6))
                                                   .number("selective", p.flops_selective, exponent(6))
                                                   .number("full", p.flops_full, exponent(6)));
  o.string("machine", p.hardware.machine.name);
  o.number("peak_tflops", p.hardware.peak_tflops, digits(6)).number("mfu", p.simulation.mfu, digits(6));
  o.object("step_seconds", step_breakdown_json(p.simulation.average, p.simulation.step_seconds));
  o.object("most_loaded_rank_seconds", step_breakdown_json(p.simulation.most_loaded, p.simulation.step_seconds)
                                           .integer("rank", p.simulation.most_loaded.world_rank)
                                           .integer("stage", p.simulation.most_loaded.stage));
  o.number("expert_imbalance", c.expert_imbalance, digits(6));
  o.number("seconds_per_iteration", p.seconds_per_iteration, digits(6)).number("tokens", p.tokens, exponent(6));
  o.number("iterations", p.iterations, digits(6)).number("training_days", p.training_days, digits(6));
  o.number("training_days_eq4", p.training_days_eq4, digits(6));
  o.number("total_flops_6nt", p.total_flops_6nt, exponent(6)).number("pipeline_bubble", p.bubble, digits(6));
  o.integer("virtual_stages", c.virtual_stages)
      .number("pipeline_bubble_without_interleaving", p.bubble_without_interleaving, digits(6))
      .number("days_saved_by_interleaving", p.days_saved_by_interleaving, digits(6));
  io::JsonObject communication;
  communication.number("tensor", p.communication.tensor, fixed(0)).number("context", p.communication.context, fixed(0));
  if (c.holds_experts()) communication.number("expert", p.communication.expert, fixed(0));
  communication.number("pipeline", p.communication.pipeline, fixed(0)).number("data", p.communication.data, fixed(0));
  if (c.holds_experts()) communication.number("expert_data", p.communication.expert_data, fixed(0));
  communication.number("embedding", p.communication.embedding, fixed(0));
  o.object("communication_bytes_per_step", communication);
  o.string("order", parallel::rank_order_name(c.order));
  io::JsonObject cross;
  for (const CrossNodeBytes& x : p.cross_node) {
    io::JsonObject groups;
    groups.number("tensor", x.tensor, fixed(0)).number("context", x.context, fixed(0));
    if (c.holds_experts()) groups.number("expert", x.expert, fixed(0));
    groups.number("pipeline", x.pipeline, fixed(0)).number("data", x.data, fixed(0));
    if (c.holds_experts()) groups.number("expert_data", x.expert_data, fixed(0));
    groups.number("embedding", x.embedding, fixed(0)).number("total", x.total(), fixed(0));
    cross.object(parallel::rank_order_name(x.order), groups);
  }
  o.object("cross_node_bytes_per_step", cross);
  o.string("recommended_order", parallel::rank_order_name(p.recommended_order));
  o.boolean("fits", p.fits).strings("problems", p.problems).objects("suggestions", suggestions);
  return o;
}

}  // namespace

std::string report_json(const Plan& p) { return json_of(p).text(); }

}  // namespace tptrain::plan
