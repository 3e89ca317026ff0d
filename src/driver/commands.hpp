// The subcommands of the tptrain executable. Each returns the process exit code:
// 0 success, 1 bad input or a failed run, 2 usage error or a subcommand not implemented yet,
// 3 (train only) stopped by SIGUSR1/SIGTERM after writing a checkpoint: requeue the job
// (util::kRequeueExitStatus).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/deck.hpp"
#include "src/driver/bench.hpp"

namespace tptrain::driver {

struct DeckOptions {
  std::string deck;
  std::vector<std::string> overrides;  // --set section.key=value
  io::DataFiles data_files = io::DataFiles::required;  // which data files the command reads (io/deck.hpp)
};

struct EvalOptions {
  std::string checkpoint;
  std::string data;  // empty: the deck's data.valid
  int windows = 0;   // 0: the deck's training.eval_windows
  std::string tasks;         // a multiple-choice task file: scored instead of the loss
  std::string tasks_scores;  // with tasks: each example's scores go here
};

struct GenerateOptions {
  std::string checkpoint;
  std::string prompt;
  int tokens = 128;
  double temperature = 1.0;
  int top_k = 0;  // 0 = no top-k filter
  unsigned long long seed = 0;
  bool no_kv_cache = false;  // the full forward for every token
  bool ignore_eos = false;   // <|endoftext|> does not end the sample
};

// `tptrain tokenize`: text files and JSON Lines -> llm.c token shards in `out`
// (src/driver/tokenize_command.cpp); run under mpiexec to split the work, the same output on
// any number of ranks. 0 when every shard is written, 1 for bad input (nothing written).
struct TokenizeOptions {
  std::vector<std::string> inputs;
  std::string out;
  std::string tokenizer = "gpt2";
  std::string tokenizer_dir;      // "" = the tokenizer's cache folder (text/tokenizer.hpp)
  std::string tokenizer_pattern;  // of "tiktoken:PATH": "cl100k", "o200k" or "llama3"
  std::uint64_t shard_tokens = 100000000;             // llm.c's shards of FineWeb: 1e8 tokens
  std::uint64_t valid_tokens = 0;                     // the first ones go to valid_*.bin
  std::uint64_t segment_bytes = std::uint64_t{8} << 20;  // input per rank and round
};
int tokenize(const TokenizeOptions& options);

// `tptrain plan`: what the deck needs on the hardware described (src/plan/plan.hpp); no MPI, no
// data files. 0 when it fits on the GPU count it needs, 1 otherwise (or for a bad deck).
struct PlanOptions {
  std::string machine;        // --machine FILE; empty: the built-in DGX A100 80 GB (input/machines/dgx-a100-80gb.toml)
  long long gpus = 0;         // 0: the deck's tensor x pipeline x data
  int gpus_per_node = 0;      // 0: the machine's
  double gpu_memory_gib = 0;  // 0: the machine's
  double peak_tflops = 0;     // 0: the machine's, for the deck's precision
  double tokens = 0;          // 0: training.steps x global_batch x seq_length
  bool search = false;        // --search: rank the fitting layouts by simulated step time
  std::string trace;          // --trace FILE.json: the simulated step as a Chrome trace
  double expert_imbalance = 1;  // --expert-imbalance: plan::Config::expert_imbalance
};
int plan(const DeckOptions& options, const PlanOptions& plan);

// `tptrain check`: the resolved deck as TOML for people, or for scripts the rank count alone
// (--ranks) or one JSON object (--json). Output directories that could not be written are
// problems too (what `train` would refuse before step 1).
enum class CheckOutput { resolved_deck, ranks, json };
int check(const DeckOptions& options, CheckOutput output = CheckOutput::resolved_deck);
int train(const DeckOptions& options);
int eval(const DeckOptions& options, const EvalOptions& eval);
int generate(const DeckOptions& options, const GenerateOptions& generate);
// `tptrain bench`: timed training steps on synthetic tokens, MFU against the measured GEMM rate.
int bench(const DeckOptions& options, const BenchOptions& bench);
// Describes a checkpoint file (src/driver/inspect.hpp); no MPI. 0: verified, 1: missing, unreadable,
// not a checkpoint, or a checksum that does not verify.
int inspect(const std::string& file);

// `tptrain export CHECKPOINT --format hf --out DIR`: the checkpoint's weights as a Hugging Face
// GPT2LMHeadModel folder, config.json + model.safetensors (float32), from any layout and precision;
// `tptrain import DIR --deck DECK --out FILE.h5`: such a folder as a step-0 checkpoint of the
// deck's model (src/driver/hf_commands.cpp, docs/checkpoints.md). 0 when written, 1 for bad input
// (nothing written).
struct ExportOptions {
  std::string checkpoint;
  std::string format = "hf";
  std::string out;
};
int export_checkpoint(const ExportOptions& options);
struct ImportOptions {
  std::string dir;
  DeckOptions deck;
  std::string out;
};
int import_checkpoint(const ImportOptions& options);

std::string version_string();

// The --kokkos-* flags of the command line (e.g. --kokkos-print-configuration,
// --kokkos-device-id=N), passed to Kokkos::initialize by every MPI job.
void set_kokkos_arguments(std::vector<std::string> args);

// The GPU this rank drives, as the job's start-up bound it (-1 without GPUs): what the rank map
// prints, and the straggler report names.
int rank_device();

}  // namespace tptrain::driver
