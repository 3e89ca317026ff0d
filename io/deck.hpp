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
// Every key, its default, meaning and valid range is documented in docs/deck-reference.md.
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

namespace tptrain::io {

// [model]: GPT-2 shape.
struct ModelConfig {
  int layers = 4;        // transformer blocks
  int hidden = 128;      // H, model width
  int heads = 4;         // attention heads; head_dim = hidden / heads
  int ffn_hidden = 0;    // F, MLP width; 0 -> 4 * hidden (a loaded deck holds the resolved value)
  int seq_length = 128;  // S, tokens per sequence (context length)
  int vocab_size = 256;  // V, logical vocabulary (256 for byte-level .txt data)

  int head_dim() const;   // hidden / heads
  int ffn_width() const;  // ffn_hidden, or 4 * hidden when ffn_hidden == 0 (unresolved)
};

// [parallel]: world = tensor * pipeline * data ranks.
struct ParallelConfig {
  int tensor = 1;
  int pipeline = 1;
  int data = 1;

  int world_size() const;  // tensor * pipeline * data
};

// [training]
struct TrainingConfig {
  int global_batch = 16;      // sequences per optimizer step, over all data-parallel ranks
  int micro_batch = 4;        // sequences per forward/backward on one data-parallel rank
  int steps = 300;            // optimizer steps
  std::uint64_t seed = 1234;  // initial weights and data order (layout independent)
  std::string precision = "fp32";
  double grad_clip = 1.0;   // global gradient-norm clip; 0 = off
  int log_interval = 10;    // steps between metric lines
  int eval_interval = 100;  // steps between evaluations; 0 = never
  int eval_windows = 16;    // validation windows of seq_length tokens per evaluation
};

// [optimizer]: AdamW, linear warmup then decay to min_lr.
struct OptimizerConfig {
  double lr = 3e-3;
  double min_lr = 3e-4;  // a deck that leaves it out gets lr / 10
  int warmup_steps = 30;
  std::string decay = "cosine";  // "cosine", "linear" or "constant"
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
};

// [data]: .txt (byte-level tokens) or .bin (llm.c token shard).
struct DataConfig {
  std::string train;  // required
  std::string valid;  // optional: "" = no validation set
};

// [checkpoint]
struct CheckpointConfig {
  std::string dir = "runs/default/checkpoints";  // default: <run.dir>/checkpoints
  int interval = 0;                              // steps between checkpoints; 0 = only at the end
  int keep = 3;                                  // newest checkpoints kept on disk
  bool resume = false;  // continue from the newest checkpoint in dir, if there is one
};

// [run]
struct RunConfig {
  std::string dir = "runs/default";  // metrics.jsonl and other run outputs
};

struct Deck {
  ModelConfig model;
  ParallelConfig parallel;
  TrainingConfig training;
  OptimizerConfig optimizer;
  DataConfig data;
  CheckpointConfig checkpoint;
  RunConfig run;
  std::string source;  // path of the deck file as given ("<string>"-like name for text decks)

  int grad_accum_steps() const;  // global_batch / (micro_batch * data)

  // The resolved deck: every section and key in DESIGN.md order, defaults filled in, paths
  // absolute. Valid TOML that load_deck()/parse_deck() accept and that parses back to an equal
  // Deck (operator== below).
  std::string to_toml() const;
};

// Equality of settings. Deck equality ignores `source` (where the settings came from, not what
// they are), so a deck equals the deck parsed back from its to_toml().
bool operator==(const ModelConfig& a, const ModelConfig& b);
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

// Reads the deck file at `path`, applies `overrides` ("section.key=value", as given to --set),
// validates, resolves paths. Throws DeckError listing every problem.
Deck load_deck(const std::string& path, const std::vector<std::string>& overrides = {});

// Same for a deck held in memory (tests, decks stored in checkpoints). `source_name` stands for
// the file name in messages and Deck::source; relative paths in the text are resolved against
// `base_dir` (itself made absolute against the working directory; "" = working directory).
Deck parse_deck(std::string_view toml_text, const std::string& source_name,
                const std::string& base_dir, const std::vector<std::string>& overrides = {});

}  // namespace tptrain::io
