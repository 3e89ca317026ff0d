#include "src/driver/eval_command.hpp"

#include <cmath>
#include <vector>

#include "base/agreement.hpp"
#include "io/json_line.hpp"
#include "src/util/log.hpp"
#include "src/checkpoint/model_checkpoint.hpp"
#include "src/driver/multiple_choice.hpp"
#include "src/driver/precision_dispatch.hpp"
#include "src/data/data_blend.hpp"
#include "src/train/training_run.hpp"
#include "text/tokenizer.hpp"

namespace tptrain::driver {

namespace {

using parallel::on_every_rank;

// The UTF-8 bytes the target tokens of the first `windows` windows stand for, in the deck's
// tokenizer: bits per byte = total nats / (ln 2 · bytes) compares models whose tokens differ
// (a byte-level model's token is one byte; a GPT-2 token about four). Without a count (a target
// token the tokenizer does not have, e.g. GPT-2 shards under the default data.tokenizer =
// "bytes"), `why` says so and eval reports nats per token only.
struct TargetBytes {
  std::int64_t bytes = 0;
  std::string why;  // non-empty: no count
};
TargetBytes target_bytes(const io::Deck& deck, const data::TokenDataset& data, std::int64_t windows, int S,
                         const std::string& path) {
  const std::unique_ptr<text::Tokenizer> tokenizer = text::make_tokenizer(deck.data.tokenizer, deck.data.tokenizer_dir,
                                                                          deck.data.tokenizer_pattern);
  // -1: an id in a gap of the encoding (cl100k_base's 100256), which no tokenized text holds.
  std::vector<std::int64_t> length(tokenizer->vocab_size(), -1);
  for (std::size_t t = 0; t < length.size(); ++t)
    if (tokenizer->has_token(static_cast<text::Token>(t)))
      length[t] = static_cast<std::int64_t>(tokenizer->decode({static_cast<text::Token>(t)}).size());
  std::vector<std::int32_t> inputs(static_cast<std::size_t>(S)), targets(static_cast<std::size_t>(S));
  TargetBytes r;
  // Every window is read here, even after a token without a count: reading checks each token
  // against model.vocab_size (data sets too large to check at open are checked where read), and
  // this runs on every rank at once, so a bad token is one agreed error, not one rank's abort in
  // the evaluation's collectives.
  for (std::int64_t j = 0; j < windows; ++j) {
    data.window(static_cast<std::size_t>(j), S, inputs.data(), targets.data());
    for (std::int32_t t : targets) {
      if (!r.why.empty()) break;
      if (t < 0 || static_cast<std::size_t>(t) >= length.size() || length[static_cast<std::size_t>(t)] < 0)
        r.why = fmt::format("{} window {} has token {}, which the {} tokenizer (data.tokenizer) does not have (ids "
                            "0..{}){}",
                            path, j, t, tokenizer->name(), length.size() - 1,
                            deck.data.tokenizer == "bytes" ? "; for GPT-2 tokens set data.tokenizer = \"gpt2\"" : "");
      else
        r.bytes += length[static_cast<std::size_t>(t)];
    }
  }
  if (!r.why.empty()) r.bytes = 0;
  return r;
}

// The deck's model with the checkpoint's weights; it may not fit, or the file may not load:
// reported like any other failure, on every rank.
template <class T>
std::unique_ptr<model::GptModel<T>> load_model(const io::Deck& deck, const parallel::Topology& topo,
                                               const std::string& checkpoint, io::CheckpointMeta& meta) {
  std::unique_ptr<model::GptModel<T>> model;
  on_every_rank(topo.world(), [&] {
    model = std::make_unique<model::GptModel<T>>(model::shape_of(deck), deck.training.micro_batch, topo.tp(),
                                                 deck.training.seed,
                                                 model::PipelineStage{topo.coords().pp, topo.layout().pipeline},
                                                 model::Recompute::selective, model::OptimizerSharding{}, topo.cp(),
                                                 &topo.ep());
  });
  on_every_rank(topo.world(), [&] { meta = checkpoint::load_weights(*model, topo, checkpoint); });
  return model;
}

template <class T>
int eval_tasks_as(const io::Deck& deck, const parallel::Topology& topo, const std::string& checkpoint,
                  const TaskOptions& o) {
  if (topo.layout().context > 1)  // the same deck on every rank: the same verdict
    throw parallel::AgreedError("eval --tasks scores endings without context parallelism: run it with parallel.context = 1 "
                             "(--set parallel.context=1), the checkpoint loads under any layout");
  // The file first: a bad line is said before minutes of loading a large model.
  std::unique_ptr<MultipleChoiceTasks> tasks;
  on_every_rank(topo.world(), [&] { tasks = std::make_unique<MultipleChoiceTasks>(load_multiple_choice_tasks(deck, o.tasks)); });
  io::CheckpointMeta meta;
  const std::unique_ptr<model::GptModel<T>> model = load_model<T>(deck, topo, checkpoint, meta);
  const MultipleChoiceResult r = score_multiple_choice(*model, topo, *tasks, train::documents_of(deck));
  log::infof("eval: checkpoint {} (step {}), {} examples of {}: mc_accuracy {:.6f} ({} right), mc_accuracy_norm "
             "{:.6f} ({} right; per UTF-8 byte of the ending); {} of {} endings scored with their context cut to "
             "model.seq_length = {} tokens",
             checkpoint, meta.step, r.examples, o.tasks, r.accuracy(), r.correct, r.accuracy_norm(), r.correct_norm,
             tasks->truncated, tasks->rows.size(), deck.model.seq_length);
  if (!o.scores.empty())
    on_every_rank(topo.world(), [&] {
      if (topo.world_rank() == 0) write_multiple_choice_scores(o.scores, *tasks, r);
    });
  log::info(io::JsonObject()
                .number("mc_accuracy", r.accuracy(), io::digits(9))
                .number("mc_accuracy_norm", r.accuracy_norm(), io::digits(9))
                .integer("examples", r.examples)
                .integer("endings", tasks->rows.size())
                .integer("truncated", tasks->truncated)
                .text());
  return 0;
}

template <class T>
int eval_as(const io::Deck& deck, const parallel::Topology& topo, const std::string& checkpoint,
            const std::string& data_path, int windows) {
  using Model = model::GptModel<T>;
  const model::GptShape shape = model::shape_of(deck);
  // --data names one path; the deck's data.valid may be a blend, evaluated per dataset.
  const io::DataSources sources = data_path.empty() ? deck.data.valid : io::DataSources(data_path);
  const std::string key = data_path.empty() ? "data.valid" : "--data";
  std::unique_ptr<data::DataBlend> data;
  // In messages: a blend's entry as the deck wrote it, a lone dataset by its path.
  const auto dataset_name = [&](std::size_t i) { return data->size() > 1 ? data->name(i) : data->dataset(i).path(); };
  const std::int64_t n = windows > 0 ? windows : deck.training.eval_windows;
  on_every_rank(topo.world(), [&] {
    if (sources.empty())
      throw std::runtime_error("no evaluation data: the deck has no data.valid and no --data was given");
    data = std::make_unique<data::DataBlend>(data::DataBlend::open(sources, key, shape.vocab_size));
    for (std::size_t i = 0; i < data->size(); ++i) {
      const data::TokenDataset& d = data->dataset(i);
      const std::string name = dataset_name(i);
      if (std::string w = data::other_tokenizer_warning(d, data->size() > 1 ? name : key, deck.data.tokenizer);
          !w.empty() && topo.world_rank() == 0)
        log::warning(w);
      const auto available = static_cast<std::int64_t>(d.num_windows(shape.seq_length));
      if (available < n)
        throw std::runtime_error(fmt::format("{} holds {} windows of {} tokens, {} were asked for", name, available,
                                             shape.seq_length + 1, n));
    }
  });
  io::CheckpointMeta meta;
  const std::unique_ptr<Model> model = load_model<T>(deck, topo, checkpoint, meta);
  const std::int64_t tokens = n * shape.seq_length;
  double loss = 0.0;  // a blend's: the mean of its datasets' weighted by their shares
  std::vector<double> losses, bits;  // per dataset
  std::int64_t bytes = 0;             // all datasets' target bytes
  bool all_bits = true;
  for (std::size_t i = 0; i < data->size(); ++i) {
    const data::TokenDataset& d = data->dataset(i);
    TargetBytes counted;
    on_every_rank(topo.world(), [&] { counted = target_bytes(deck, d, n, shape.seq_length, d.path()); });
    const double l = train::evaluate(*model, d, n, topo.pp(), train::documents_of(deck));
    if (!std::isfinite(l))  // JSON has no NaN: a non-finite loss is an error, not a result
      throw parallel::AgreedError(fmt::format("eval: checkpoint {}: the mean loss is {} (not finite){}", checkpoint, l,
                                              data->size() > 1 ? " on " + data->name(i) : std::string()));
    losses.push_back(l);
    loss += data->share(i) * l;
    const std::string what = dataset_name(i);
    if (counted.why.empty()) {
      bits.push_back(l * static_cast<double>(tokens) / (std::log(2.0) * static_cast<double>(counted.bytes)));
      log::infof("eval: checkpoint {} (step {}), {} windows of {} tokens from {}: mean loss {:.6f} nats/token, "
                 "{:.6f} bits/byte ({} tokens of {} bytes, data.tokenizer = \"{}\")",
                 checkpoint, meta.step, n, shape.seq_length, what, l, bits.back(), tokens, counted.bytes,
                 deck.data.tokenizer);
      bytes += counted.bytes;
    } else {
      all_bits = false;
      bits.push_back(std::nan(""));
      log::infof("eval: checkpoint {} (step {}), {} windows of {} tokens from {}: mean loss {:.6f} nats/token",
                 checkpoint, meta.step, n, shape.seq_length, what, l);
      if (log::rank() <= 0) log::warning("eval: no bits per byte: " + counted.why);
    }
  }
  io::JsonObject json;
  json.number("eval_loss", loss, io::digits(9)).number("nats_per_token", loss, io::digits(9));
  if (data->size() == 1) {
    if (all_bits) json.number("bits_per_byte", bits[0], io::digits(9));
  } else {
    std::vector<double> shares;
    for (std::size_t i = 0; i < data->size(); ++i) shares.push_back(data->share(i));
    log::infof("eval: the blend's mean loss, weighted {:.4g}: {:.6f} nats/token", fmt::join(shares, " / "), loss);
    json.numbers("eval_loss_by_dataset", losses, io::digits(9));
    if (all_bits) json.numbers("bits_per_byte_by_dataset", bits, io::digits(9));
  }
  json.integer("windows", n).integer("tokens", tokens);
  if (data->size() == 1 && all_bits) json.integer("bytes", bytes);
  log::info(json.text());
  return 0;
}

}  // namespace

int run_eval_tasks(const io::Deck& deck, const parallel::Topology& topo, const std::string& checkpoint,
                   const TaskOptions& tasks) {
  return with_precision(deck.training.precision,
                        [&](auto t) { return eval_tasks_as<decltype(t)>(deck, topo, checkpoint, tasks); });
}

int run_eval(const io::Deck& deck, const parallel::Topology& topo, const std::string& checkpoint,
             const std::string& data, int windows) {
  return with_precision(deck.training.precision,
                        [&](auto t) { return eval_as<decltype(t)>(deck, topo, checkpoint, data, windows); });
}

}  // namespace tptrain::driver
