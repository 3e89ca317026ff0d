// Input deck: the TOML file that describes one experiment (model shape, parallel layout,
// training schedule, optimizer, data, checkpoints, run directory), plus `--set section.key=value`
// overrides from the command line.
//
// load_deck() reads, overrides, validates and resolves a deck in one go. Every problem found is
// collected, and a single DeckError lists them all, one per line, each naming where it came
// from, the key, the offending value and what was expected:
//
//   exp.toml:3: model.hidden = 130: expected a multiple of model.heads = 4 (line 4); ...
//   --set optimizer.lr=-1: optimizer.lr = -1: expected a number > 0
//   exp.toml: data.train is required: the training data, a .txt file (byte-level tokens) ...
//
// Every key, its default, meaning and valid range is one table, io/deck_keys.hpp/.cpp, documented
// in docs/deck-reference.md.
// Relative paths written in a deck file are relative to the deck file's own folder; paths given
// with --set are relative to the current working directory. A loaded Deck holds absolute,
// lexically normalised paths.
//
// This layer knows nothing of MPI or of the model's math: it checks shapes and layouts only as
// far as the deck can state them (sizes >= 1, divisibility rules, file existence).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "io/data_sources.hpp"
#include "src/model/spec/gpt_shape.hpp"
#include "io/path_text.hpp"  // display_path(), for messages that name a deck

namespace tptrain::io {

// The sections of a deck. Members are zero until a Deck is constructed: the defaults, the valid
// ranges and the meaning of every key are in one table, io/deck_keys.cpp (and
// docs/deck-reference.md).

// [model] reads straight into the model's shape (src/model/spec/gpt_shape.hpp, ModelShape): the
// architecture (a preset of the block specification, src/model/spec/block_spec.hpp: "gpt2",
// "llama"), the choices that override it, and the sizes. A loaded deck holds model.ffn_hidden
// and model.kv_heads resolved; one built in code may leave them 0 (4 * hidden, heads).

// [parallel]: world = tensor * context * pipeline * data ranks. Its tensor, context, expert and
// sequence_parallel keys are the model's layout (model::ParallelLayout, the part a shape holds).
struct ParallelConfig : model::ParallelLayout {
  int pipeline{};
  int data{};
  int shard_group{};         // hybrid sharding: data x context ranks per shard group (0: all of them)
  std::string order;         // rank order: "tp-pp-dp" or "tp-dp-pp", or with "cp" after "tp" (src/parallel/topology_rank_map.hpp)
  int virtual_stages{};      // model chunks per pipeline rank (interleaved 1F1B); 1: none
  bool nccl_pipeline_lanes{};     // NCCL: a lane per pipeline flow (src/parallel/communicator.hpp)
  std::string mpi_device_memory;  // "auto", "on" or "off": MPI handed device pointers

  int world_size() const;  // tensor * context * pipeline * data
};

// [training]
struct TrainingConfig {
  int global_batch{};
  int micro_batch{};
  int steps{};
  std::uint64_t seed{};
  std::string precision;  // "fp32", "bf16" or "fp16"
  // fp16's dynamic loss scaler (src/train/loss_scaler.hpp); unused with fp32 and bf16.
  double loss_scale_initial{};
  int loss_scale_window{};
  int loss_scale_hysteresis{};
  double loss_scale_min{};
  double loss_scale_growth_factor{};
  double loss_scale_backoff_factor{};
  std::string recompute;  // "none", "selective" or "full"
  std::string attention;  // "default", "flash" or "batched" (model::shape_of resolves default)
  double grad_clip{};
  // (training.moe_aux_loss_coeff and training.moe_z_loss_coeff weigh the mixture of experts' losses:
  // their values live in the model's specification, model.moe_aux_loss_coeff, which the kind reads.)
  int log_interval{};
  int eval_interval{};
  int eval_windows{};
  // Multiple-choice evaluation during training (src/driver/multiple_choice.hpp): the task file
  // ("" = none) and the steps between scorings (0 = never).
  std::string tasks;
  int tasks_interval{};
  std::string init_from;  // a checkpoint whose weights start the run ("" = the seeded initialisation)
  // Spike and non-finite skipping (src/train/spike_detector.hpp).
  bool skip_spikes{};
  double spike_zscore{};
  int spike_window{};
  int max_skipped_steps{};
  // The straggler report (src/train/straggler_report.hpp).
  double straggler_factor{};
  int straggler_intervals{};
};

// [optimizer]: AdamW, linear warmup then decay to min_lr.
struct OptimizerConfig {
  double lr{};
  double min_lr{};
  int warmup_steps{};
  std::string decay;
  double weight_decay{};
  double beta1{};
  double beta2{};
  double eps{};
  bool distributed{};  // AdamW state sharded over the data-parallel group: shard != "none"
  std::string shard;   // "none", "optimizer" (ZeRO-1), "gradients" (ZeRO-2), "parameters" (ZeRO-3)
  bool reshard_after_forward{};  // "parameters": gathered weights freed between forward and backward
};

// [data]: .txt (byte-level tokens) or .bin (llm.c token shard) files, one or a folder or glob
// pattern of them (io/data_paths.hpp), and the tokenizer of its text.
struct DataConfig {
  DataSources train;  // one path or a weighted blend (io/data_sources.hpp)
  DataSources valid;  // empty = no validation set; a blend is evaluated per source
  // A resume may continue under a data.train that differs from its checkpoint's record
  // (src/data/blend_resume.hpp); without it such a resume is refused.
  bool allow_blend_change{};
  // "bytes", "gpt2", "cl100k_base", "o200k_base" or "tiktoken:PATH", PATH absolute
  // (text/tokenizer.hpp)
  std::string tokenizer;
  std::string tokenizer_dir;      // the tokenizer's files; "" = its cache folder
  std::string tokenizer_pattern;  // "tiktoken:PATH"'s: "cl100k", "o200k" or "llama3"
  // Documents packed into sequences (src/data/document_starts.hpp): attention stays within a
  // document; position ids restart at each document.
  bool document_mask{};
  bool reset_positions{};
};

// [checkpoint]
struct CheckpointConfig {
  std::string dir;
  int interval{};
  int keep{};
  bool resume{};
  bool overwrite{};  // a start from step 0 may delete an earlier run's checkpoints and metrics
  double metadata_timeout_s{};  // io/read_watchdog.hpp
  bool async{};  // written by a background thread (src/checkpoint/checkpoint_writer.hpp)
};

// [run]
struct RunConfig {
  std::string dir;
};

struct Deck {
  // Every key at its default (derived defaults from the other defaults: min_lr = lr / 10,
  // checkpoint.dir = run.dir/checkpoints; ffn_hidden stays 0, "4 * hidden"); data.train empty.
  Deck();

  model::ModelShape model;
  ParallelConfig parallel;
  TrainingConfig training;
  OptimizerConfig optimizer;
  DataConfig data;
  CheckpointConfig checkpoint;
  RunConfig run;
  std::string source;  // path of the deck file as given ("<string>"-like name for text decks)

  int grad_accum_steps() const;  // global_batch / (micro_batch * data)

  // The resolved deck: every section and key in table order, defaults filled in, paths
  // absolute. Valid TOML that load_deck()/parse_deck() accept and that parses back to an equal
  // Deck (operator== below).
  std::string to_toml() const;
  // The same as one line of JSON: {"model.layers": 4, ..., "run.dir": "...", "ranks": 2}, where
  // "ranks" is tensor * context * pipeline * data.
  std::string to_json() const;
};

// Equality of settings. Deck equality ignores `source` (where the settings came from, not what
// they are), so a deck equals the deck parsed back from its to_toml().
bool operator==(const model::ModelShape& a, const model::ModelShape& b);
bool operator==(const ParallelConfig& a, const ParallelConfig& b);
bool operator==(const TrainingConfig& a, const TrainingConfig& b);
bool operator==(const OptimizerConfig& a, const OptimizerConfig& b);
bool operator==(const DataConfig& a, const DataConfig& b);
bool operator==(const CheckpointConfig& a, const CheckpointConfig& b);
bool operator==(const RunConfig& a, const RunConfig& b);
bool operator==(const Deck& a, const Deck& b);
inline bool operator!=(const Deck& a, const Deck& b) { return !(a == b); }

// Every problem found in a deck and its overrides; what() lists them one per line.
class DeckError : public std::runtime_error {
 public:
  explicit DeckError(std::vector<std::string> problems);
  const std::vector<std::string>& problems() const;

 private:
  std::vector<std::string> problems_;
};

// Decks larger than this are refused before they are read (a deck is a few kilobytes).
inline constexpr std::uint64_t kMaxDeckBytes = 1u << 20;

// Reads the deck file at `path` (a regular file of at most kMaxDeckBytes), applies `overrides` ("section.key=value", as given to --set),
// validates, resolves paths. Throws DeckError listing every problem.
// With DataFiles::ignored ([data] is not used: `tptrain bench` trains on synthetic tokens) the
// data keys may be missing and their files are not looked at. With DataFiles::may_be_absent
// (`tptrain check` and `plan` on a cluster deck whose data lives on the cluster) data.train is
// still required and its files are checked, but a file that does not exist is a warning, added
// to `warnings` ("deck.toml:42: data.train = ...: ... does not exist"), not an error, and so is
// a glob pattern that matches nothing; a file that exists and cannot be read (a FIFO, no
// permission) or a wrong extension stays an error. A folder or pattern (io/data_paths.hpp) is
// checked file by file. A command checks what it reads: with DataFiles::validation (`tptrain
// eval` on the deck's data.valid) only data.valid, with DataFiles::tokenizer_only (`eval --data`,
// `generate`) no data file; data.train may then be missing, and the tokenizer's vocabulary
// (data.tokenizer = "gpt2") is still checked.
enum class DataFiles { required, ignored, may_be_absent, validation, tokenizer_only };
Deck load_deck(const std::string& path, const std::vector<std::string>& overrides = {},
               DataFiles data_files = DataFiles::required, std::vector<std::string>* warnings = nullptr);

// Same for a deck held in memory (tests, decks stored in checkpoints). `source_name` stands for
// the file name in messages and Deck::source; relative paths in the text are resolved against
// `base_dir` (itself made absolute against the working directory; "" = working directory).
Deck parse_deck(std::string_view toml_text, const std::string& source_name,
                const std::string& base_dir, const std::vector<std::string>& overrides = {},
                DataFiles data_files = DataFiles::required);

}  // namespace tptrain::io
