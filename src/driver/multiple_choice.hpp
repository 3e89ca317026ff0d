// Multiple-choice evaluation (`tptrain eval --tasks`, training.tasks; docs/design.md,
// "Multiple-choice evaluation"): each ending of an example is scored by the log-likelihood of its
// tokens given the context, tokenized as lm-evaluation-harness does, and the example counts as
// right when its label's ending scores highest (mc_accuracy) or highest per UTF-8 byte of the
// ending (mc_accuracy_norm, lm-eval's acc_norm).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/deck.hpp"
#include "io/multiple_choice_tasks.hpp"
#include "src/model/gpt_model.hpp"
#include "src/parallel/topology.hpp"
#include "src/train/documents.hpp"
#include "text/tokenizer.hpp"

namespace tptrain::driver {

// One (context, ending) pair as the model sees it.
struct ChoiceRow {
  std::vector<std::int32_t> tokens;  // the context's tokens, then the ending's: at most S + 1, the last ones
  std::int32_t continuation = 0;     // the ending's tokens: the last `continuation` of `tokens`
  bool truncated = false;            // the context lost tokens at its start to fit the window
};

// lm-eval's split (lm_eval/api/model.py, `_encode_pair`): whitespace at the end of the context
// (Python's str.isspace: ASCII and Unicode white space) moves to the start of the ending, since
// BPE vocabularies attach a space to the word after it. Returns (context, ending) after the move.
std::pair<std::string, std::string> move_trailing_whitespace(const std::string& context, const std::string& ending);

// The row of one pair for a model of `seq_length` S: after the move above, the ending's tokens
// are encode(context + ending) less its first len(encode(context)) tokens; an empty context (or
// one of white space only, which lm-eval would score without any token before the ending) is the
// tokenizer's end-of-text token (a newline for bytes), as lm-eval's and generate's; the
// context and ending tokens together keep their last S + 1 (left truncation, lm-eval's). Throws
// std::runtime_error (to be prefixed with the line) when the ending adds no token to the
// context's, or has more than S.
ChoiceRow choice_row(const std::string& context, const std::string& ending, text::Tokenizer& tokenizer, int seq_length);

// A task file read and tokenized once: every example's endings as rows, in file order.
struct MultipleChoiceTasks {
  std::string path;
  std::vector<io::MultipleChoiceExample> examples;
  std::vector<ChoiceRow> rows;
  std::vector<std::size_t> first_row;  // example i's rows start at first_row[i]
  std::int64_t truncated = 0;          // rows whose context was cut
};

// Reads `path` (io/multiple_choice_tasks.hpp) and tokenizes it for a model of `seq_length` and
// `vocab_size`. Throws std::runtime_error "<path>:<line>: ..." for a bad line, an ending choice_row
// refuses, or a token id the model does not have. Local: the caller agrees across ranks.
MultipleChoiceTasks load_multiple_choice_tasks(const std::string& path, text::Tokenizer& tokenizer, int seq_length,
                                               int vocab_size);
// The same with the deck's data.tokenizer, model.seq_length and model.vocab_size.
MultipleChoiceTasks load_multiple_choice_tasks(const io::Deck& deck, const std::string& path);

struct MultipleChoiceResult {
  std::int64_t examples = 0, correct = 0, correct_norm = 0;
  std::vector<double> log_likelihoods;  // per row of the tasks
  double accuracy() const { return examples > 0 ? double(correct) / double(examples) : 0.0; }
  double accuracy_norm() const { return examples > 0 ? double(correct_norm) / double(examples) : 0.0; }
};

// Scores every row with `model` (this rank's shard; weights loaded), collective over the world:
// rows go in micro-batches of model.micro_batch() padded to S tokens, one forward each through
// the pipeline; the data-parallel replicas share the batches; the last stage sums each ending's
// token losses (GptModel::token_losses, vocab-parallel) and one all-reduce gives every rank every
// score. The same result on every rank; throws parallel::AgreedError for a score that is not finite.
template <class T>
MultipleChoiceResult score_multiple_choice(model::GptModel<T>& model, const parallel::Topology& topo,
                                           const MultipleChoiceTasks& tasks, const train::Documents& documents);

// One JSON line per example to `path` (rank 0's): its line, label, each ending's log-likelihood,
// UTF-8 bytes, scored tokens and continuation length; for scripts that check the scores.
void write_multiple_choice_scores(const std::string& path, const MultipleChoiceTasks& tasks,
                                  const MultipleChoiceResult& result);

}  // namespace tptrain::driver
