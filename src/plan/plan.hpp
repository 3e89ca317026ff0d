// `tptrain plan`: what a deck will need before it runs (docs/planning.md). Pure functions of the
// deck and of the hardware described on the command line; no MPI, no devices, no data files.
//
// The report: parameter counts, the memory of the most loaded rank by category, FLOPs per
// iteration, time per iteration and for the whole run, the pipeline bubble, the bytes each
// communicator moves per step (tensor, context, pipeline, data x context, embedding) and, for each
// rank order, the bytes that cross nodes, and the problems that make the deck not run as written
// (a GPU count other than tensor × context × pipeline × data, a rank that does not fit in GPU
// memory), each with the nearest layouts that would fit. With context parallelism every figure is
// a rank's, which holds seq_length / context tokens of each sequence. With a mixture of experts
// (model.mlp = "moe") also the active parameters, FLOPs of K of the E experts, a rank's share of
// the experts (parallel.expert), the all-to-all bytes and the experts' gradient bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/deck.hpp"
#include "io/json_line.hpp"
#include "src/plan/communication.hpp"
#include "src/plan/count.hpp"
#include "src/plan/cross_node.hpp"
#include "src/plan/machine.hpp"
#include "src/plan/parameter_count.hpp"
#include "src/plan/parameter_memory.hpp"
#include "src/plan/plan_config.hpp"
#include "src/plan/step_simulation.hpp"

namespace tptrain::plan {

// The machine and the run, from the command line (0 = the machine's figure).
struct Hardware {
  Machine machine = dgx_a100_80gb();  // --machine FILE (src/plan/machine.hpp)
  std::int64_t gpus = 0;      // GPUs of the allocation; 0: the deck's tensor × context × pipeline × data
  int gpus_per_node = 0;      // 0: the machine's [node] devices
  double gpu_memory_gib = 0;  // 0: the machine's [device] memory_gib
  double peak_tflops = 0;     // dense peak per GPU for the deck's precision; 0: the machine's
  double tokens = 0;          // training tokens; 0: training.steps × global_batch × seq_length
};

// The machine with the command line's figures put in (--gpus-per-node, --gpu-memory, --peak-tflops
// for `precision`), and those resolved in `hw`.
Machine resolved_machine(Hardware& hw, const std::string& precision);

// The default machine's dense peaks (A100 SXM, NVIDIA's data sheet): 312 TFLOP/s bf16/fp16 tensor
// cores, 19.5 fp32 (tptrain's fp32 GEMMs do not use TF32).
double default_peak_tflops(const std::string& precision);

// The keys by which `c` differs from `deck`, as --set arguments ("parallel.tensor=4", ...).
std::vector<std::string> changed_keys(const Config& deck, const Config& c);

// One rank's memory: a rank of pipeline stage `stage` (every tensor- and data-parallel rank of a
// stage holds the same).
struct RankMemory {
  int stage = 0;
  int layers = 0;
  int in_flight = 0;  // micro-batches whose activations it keeps at once (all chunks together)
  std::vector<int> chunk_slots;  // per model chunk (parallel.virtual_stages): micro-batches kept
  int received_gradients = 0;    // interleaved schedule: buffers received gradients wait in
  std::int64_t parameters = 0;
  std::int64_t expert_parameters = 0;  // of them, its experts' (a mixture of experts)
  ParameterBytes parameter_bytes;
  std::int64_t activations = 0;  // layers · in_flight · per layer + recompute working set
  std::int64_t head = 0;         // last stage: ln_f output, logits (their gradient in place), loss vectors
  std::int64_t workspace = 0;    // scratch shared by the stage's layers (estimate)
  std::int64_t total() const { return Count(parameter_bytes.total()) + activations + head + workspace; }
};
// A rank of stage `stage` of c, given the stages' parameter counts (stage_parameters()).
RankMemory rank_memory(const Config& c, const StageParameters& stage_parameters, int stage);
// The stage whose rank needs the most (the first stage, usually). Only the first, second and
// last stages can: every stage between the first and the last holds what the second holds, with
// no more micro-batches in flight.
RankMemory most_loaded_rank(const Config& c, const StageParameters& stage_parameters);
RankMemory most_loaded_rank(const Config& c);

// A layout that fits, near the deck's: the keys to change and what it would need and take.
struct Suggestion {
  Config config;
  std::vector<std::string> sets;  // "parallel.context=4", "parallel.data=8", ... (for --set)
  std::int64_t bytes = 0;         // most loaded rank
  double days = 0;
};

struct Plan {
  std::string deck;  // the deck's path, for the report
  Config config;
  Hardware hardware;       // defaults resolved
  std::int64_t gpus = 0;   // of the allocation
  double tokens = 0;

  double parameters_eq2 = 0;     // Narayanan et al. 2021 eq. 2 (padded vocabulary)
  double parameters_llama = 0;   // llama decks: Llama's formula (llama_parameters; logical vocabulary)
  double parameters_moe = 0;     // mixture-of-experts decks: Mixtral's formula (moe_parameters)
  std::int64_t parameters = 0;   // exact, model::logical_tensors
  // The parameters a token's forward reads: with a mixture of experts the router and K of the E
  // experts per block (active_parameters, and Mixtral's formula with K experts); = parameters else.
  std::int64_t active_parameters = 0;
  double active_parameters_formula = 0;
  RankMemory memory;             // the most loaded rank
  std::int64_t layer_activation_bytes = 0;  // one layer, one micro-batch, kept
  double korthikanti_layer_bytes = 0;       // Korthikanti et al. 2022 Table 2 for the same configuration

  double flops = 0;  // per iteration, with the deck's recomputation
  double flops_none = 0, flops_selective = 0, flops_full = 0;
  double flops_eq3 = 0;  // Narayanan eq. 3 as published (full recomputation, ffn = 4h)
  StepSimulation simulation;  // one step, simulated on the machine (src/plan/step_simulation.hpp)
  double achieved_flops = 0;  // per GPU: FLOPs per iteration (recomputation included) / (GPUs x step time)
  double seconds_per_iteration = 0;
  double iterations = 0;
  double training_days = 0;
  double training_days_eq4 = 0;
  double total_flops_6nt = 0;
  double bubble = 0;  // (p − 1)/(v·m)
  double bubble_without_interleaving = 0;  // (p − 1)/m
  // Days the interleaved schedule saves against v = 1: the simulated run with one chunk per rank
  // against this one.
  double days_saved_by_interleaving = 0;
  StepCommunication communication;
  // Bytes per step that cross node boundaries (--gpus-per-node, ranks placed node by node) under
  // each rank order, tp-pp-dp then tp-dp-pp; and the order with fewer (the deck's on a tie).
  std::vector<CrossNodeBytes> cross_node;
  parallel::RankOrder recommended_order = parallel::RankOrder::tp_pp_dp;

  std::vector<std::string> problems;  // why the deck cannot run as written on this hardware
  std::vector<std::string> notes;     // worth knowing, not fatal (a tensor group across nodes, ...)
  std::vector<Suggestion> suggestions;
  bool fits = false;  // the most loaded rank fits in the GPU's memory
  bool ok() const { return problems.empty(); }  // fits, on the GPU count the deck needs
};

// `deck_path` only names the deck in the report. `suggest`: search the nearest layouts that fit
// when there are problems. Throws std::invalid_argument, naming the keys, for a deck whose counts
// or bytes exceed 2^63 − 1. Takes the same time for any number of layers and GPUs.
Plan make_plan(const Config& c, const Hardware& hw, double deck_tokens, const std::string& deck_path = "",
               bool suggest = true);
// `expert_imbalance`: Config::expert_imbalance (`plan --expert-imbalance`).
Plan make_plan(const io::Deck& deck, const Hardware& hw, double expert_imbalance = 1.0);

// The report for people, and its last line: one JSON object (`params`, `memory_bytes` by category,
// `flops_per_iteration`, `seconds_per_iteration`, `training_days`, `fits`, `problems`, ...). A
// figure beyond a double's range (from extreme --tokens, --peak-tflops or --gpu-memory) is null
// in the JSON and the report says why.
std::string report(const Plan& p);
// "compute 1.234 s (80 %), tensor ..., optimizer ...": a simulated rank's step, by part.
std::string step_breakdown_text(const std::string& label, const StepBreakdown& b, double step);
io::JsonObject step_breakdown_json(const StepBreakdown& b, double step);
std::string report_json(const Plan& p);

}  // namespace tptrain::plan
