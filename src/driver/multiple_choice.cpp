#include "src/driver/multiple_choice.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

#include "base/agreement.hpp"
#include "base/mpi_check.hpp"
#include "io/json_line.hpp"
#include "io/path_text.hpp"
#include "src/train/device_batch.hpp"
#include "src/train/training_run.hpp"

namespace tptrain::driver {

namespace {

// Python's str.isspace(), which str.rstrip() strips: lm-eval's rule is written in Python.
bool python_space(std::uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// The start of the last UTF-8 character of s[0, end) (end > 0), and its code point.
std::size_t last_character(const std::string& s, std::size_t end, std::uint32_t* code) {
  std::size_t at = end - 1;
  while (at > 0 && (static_cast<unsigned char>(s[at]) & 0xc0) == 0x80) --at;
  const auto lead = static_cast<unsigned char>(s[at]);
  const int n = static_cast<int>(end - at);
  std::uint32_t c = n == 1 ? lead : lead & (0x7f >> n);
  for (std::size_t i = at + 1; i < end; ++i) c = (c << 6) | (static_cast<unsigned char>(s[i]) & 0x3f);
  *code = c;
  return at;
}

std::vector<std::int32_t> encode(text::Tokenizer& tokenizer, const std::string& s) {
  std::vector<std::int32_t> out;
  for (text::Token t : tokenizer.encode(s)) out.push_back(static_cast<std::int32_t>(t));
  return out;
}

}  // namespace

std::pair<std::string, std::string> move_trailing_whitespace(const std::string& context, const std::string& ending) {
  std::size_t keep = context.size();
  std::uint32_t c = 0;
  while (keep > 0) {
    const std::size_t at = last_character(context, keep, &c);
    if (!python_space(c)) break;
    keep = at;
  }
  return {context.substr(0, keep), context.substr(keep) + ending};
}

ChoiceRow choice_row(const std::string& context_text, const std::string& ending_text, text::Tokenizer& tokenizer,
                     int seq_length) {
  const auto [context, ending] = move_trailing_whitespace(context_text, ending_text);
  ChoiceRow row;
  std::vector<std::int32_t> continuation;
  if (context.empty()) {
    row.tokens.push_back(static_cast<std::int32_t>(text::document_start(tokenizer)));
    continuation = encode(tokenizer, ending);
  } else {
    // Not encode(ending) alone: BPE merges across the boundary, and lm-eval scores the tokens the
    // whole text has after the context's.
    row.tokens = encode(tokenizer, context);
    const std::vector<std::int32_t> whole = encode(tokenizer, context + ending);
    if (whole.size() <= row.tokens.size())
      throw std::runtime_error(fmt::format(
          "adds no token to the context's: the {} tokenizer encodes the context in {} tokens and context + ending in {}",
          tokenizer.name(), row.tokens.size(), whole.size()));
    continuation.assign(whole.begin() + static_cast<std::ptrdiff_t>(row.tokens.size()), whole.end());
  }
  if (continuation.size() > static_cast<std::size_t>(seq_length))
    throw std::runtime_error(fmt::format("has {} tokens, more than the model's window (model.seq_length = {})",
                                         continuation.size(), seq_length));
  row.continuation = static_cast<std::int32_t>(continuation.size());
  row.tokens.insert(row.tokens.end(), continuation.begin(), continuation.end());
  const std::size_t window = static_cast<std::size_t>(seq_length) + 1;
  if (row.tokens.size() > window) {
    row.tokens.erase(row.tokens.begin(), row.tokens.end() - static_cast<std::ptrdiff_t>(window));
    row.truncated = true;
  }
  return row;
}

MultipleChoiceTasks load_multiple_choice_tasks(const std::string& path, text::Tokenizer& tokenizer, int seq_length,
                                               int vocab_size) {
  MultipleChoiceTasks tasks;
  tasks.path = path;
  tasks.examples = io::read_multiple_choice_tasks(path);
  for (const io::MultipleChoiceExample& ex : tasks.examples) {
    tasks.first_row.push_back(tasks.rows.size());
    for (std::size_t k = 0; k < ex.endings.size(); ++k) {
      const auto fail = [&](const std::string& what) {
        throw std::runtime_error(fmt::format("{}:{}: ending {} {}", io::display_path(path), ex.line, k, what));
      };
      try {
        tasks.rows.push_back(choice_row(ex.context, ex.endings[k], tokenizer, seq_length));
      } catch (const std::exception& e) {
        fail(e.what());
      }
      for (std::int32_t t : tasks.rows.back().tokens)
        if (t < 0 || t >= vocab_size)
          fail(fmt::format("(with its context) has token {}, but the model's vocabulary has {} tokens (0..{}): is "
                           "data.tokenizer = \"{}\" the model's tokenizer?",
                           t, vocab_size, vocab_size - 1, tokenizer.name()));
      if (tasks.rows.back().truncated) ++tasks.truncated;
    }
  }
  return tasks;
}

MultipleChoiceTasks load_multiple_choice_tasks(const io::Deck& deck, const std::string& path) {
  const std::unique_ptr<text::Tokenizer> tokenizer = text::make_tokenizer(deck.data.tokenizer, deck.data.tokenizer_dir,
                                                                          deck.data.tokenizer_pattern);
  return load_multiple_choice_tasks(path, *tokenizer, deck.model.seq_length, deck.model.vocab_size);
}

template <class T>
MultipleChoiceResult score_multiple_choice(model::GptModel<T>& model, const parallel::Topology& topo,
                                           const MultipleChoiceTasks& tasks, const train::Documents& documents) {
  const kx::ExecSpace exec;
  const std::size_t S = static_cast<std::size_t>(model.shape().seq_length);
  const std::size_t B = static_cast<std::size_t>(model.micro_batch());
  const std::size_t replicas = static_cast<std::size_t>(topo.layout().data);
  const std::vector<ChoiceRow>& rows = tasks.rows;
  train::DeviceBatch batch(model.tokens(), documents);
  if (documents.any()) model.bind_documents(batch.doc_start, batch.positions, nullptr);
  // Every row's score comes from exactly one rank (the last stage's tensor rank 0 of the replica
  // that ran it), so the sum over the world is that score on every rank.
  const bool reports = model.is_last_stage() && model.tp().rank() == 0;
  std::vector<double> ll(rows.size(), 0.0);
  const std::size_t batches = (rows.size() + B - 1) / B;
  for (std::size_t k = static_cast<std::size_t>(topo.coords().dp); k < batches; k += replicas) {
    // Row r of the batch: inputs tokens[0, L-1), targets tokens[1, L), left-aligned; the
    // padding after it cannot change its logits (causal attention) and is not summed.
    std::fill(batch.h_inputs.begin(), batch.h_inputs.end(), 0);
    std::fill(batch.h_targets.begin(), batch.h_targets.end(), 0);
    for (std::size_t b = 0; b < B && k * B + b < rows.size(); ++b) {
      const std::vector<std::int32_t>& t = rows[k * B + b].tokens;
      std::copy(t.begin(), t.end() - 1, batch.h_inputs.begin() + static_cast<std::ptrdiff_t>(b * S));
      std::copy(t.begin() + 1, t.end(), batch.h_targets.begin() + static_cast<std::ptrdiff_t>(b * S));
    }
    batch.upload(exec);
    train::pipeline_forward(model, topo.pp(), exec, batch.inputs, &batch.targets);
    if (!reports) continue;
    const auto loss = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), model.token_losses());
    for (std::size_t b = 0; b < B && k * B + b < rows.size(); ++b) {
      const ChoiceRow& row = rows[k * B + b];
      const std::size_t n = row.tokens.size() - 1;  // targets; the ending's are the last ones
      for (std::size_t i = n - static_cast<std::size_t>(row.continuation); i < n; ++i)
        ll[k * B + b] -= static_cast<double>(loss(b * S + i));
    }
  }
  TPTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, ll.data(), static_cast<int>(ll.size()), MPI_DOUBLE, MPI_SUM,
                                  topo.world()));
  MultipleChoiceResult r;
  r.log_likelihoods = std::move(ll);
  for (std::size_t i = 0; i < tasks.examples.size(); ++i) {
    const io::MultipleChoiceExample& ex = tasks.examples[i];
    std::size_t best = 0, best_norm = 0;
    std::vector<double> norm;
    for (std::size_t k = 0; k < ex.endings.size(); ++k) {
      const double l = r.log_likelihoods[tasks.first_row[i] + k];
      if (!std::isfinite(l))  // the same on every rank: all stop together
        throw parallel::AgreedError(fmt::format("{}:{}: ending {} has log-likelihood {} (not finite)",
                                                io::display_path(tasks.path), ex.line, k, l));
      // The ending as written, not with the context's moved white space: the and llm.c's
      // divisor (lm-eval's acc_norm divides by the length in characters).
      norm.push_back(l / static_cast<double>(ex.endings[k].size()));
      // The first of equal scores, as numpy's argmax.
      if (l > r.log_likelihoods[tasks.first_row[i] + best]) best = k;
      if (norm[k] > norm[best_norm]) best_norm = k;
    }
    r.correct += best == static_cast<std::size_t>(ex.label);
    r.correct_norm += best_norm == static_cast<std::size_t>(ex.label);
  }
  r.examples = static_cast<std::int64_t>(tasks.examples.size());
  return r;
}

template MultipleChoiceResult score_multiple_choice<float>(model::GptModel<float>&, const parallel::Topology&,
                                                           const MultipleChoiceTasks&, const train::Documents&);
template MultipleChoiceResult score_multiple_choice<kx::bf16>(model::GptModel<kx::bf16>&, const parallel::Topology&,
                                                              const MultipleChoiceTasks&, const train::Documents&);
template MultipleChoiceResult score_multiple_choice<kx::fp16>(model::GptModel<kx::fp16>&, const parallel::Topology&,
                                                              const MultipleChoiceTasks&, const train::Documents&);

void write_multiple_choice_scores(const std::string& path, const MultipleChoiceTasks& tasks,
                                  const MultipleChoiceResult& result) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (std::size_t i = 0; i < tasks.examples.size() && out; ++i) {
    const io::MultipleChoiceExample& ex = tasks.examples[i];
    std::vector<io::JsonObject> endings;
    for (std::size_t k = 0; k < ex.endings.size(); ++k) {
      const ChoiceRow& row = tasks.rows[tasks.first_row[i] + k];
      endings.push_back(io::JsonObject()
                            .number("log_likelihood", result.log_likelihoods[tasks.first_row[i] + k], io::digits(17))
                            .integer("bytes", ex.endings[k].size())
                            .integers("tokens", std::vector<std::int64_t>(row.tokens.begin(), row.tokens.end()))
                            .integer("continuation", row.continuation));
    }
    out << io::JsonObject().integer("line", ex.line).integer("label", ex.label).objects("endings", endings).text()
        << '\n';
  }
  out.close();
  if (!out) throw std::runtime_error("cannot write the scores to " + io::display_path(path));
}

}  // namespace tptrain::driver
