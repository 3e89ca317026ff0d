#include "src/train/eval_command.hpp"

#include <cmath>

#include "base/agreement.hpp"
#include "io/json_line.hpp"
#include "src/log.hpp"
#include "src/train/model_checkpoint.hpp"
#include "src/train/precision_dispatch.hpp"
#include "src/train/training_run.hpp"

namespace tptrain::train {

namespace {

using parallel::on_every_rank;

template <class T>
int eval_as(const io::Deck& deck, const parallel::Topology& topo, const std::string& checkpoint,
            const std::string& data_path, int windows) {
  using Model = model::GptModel<T>;
  const model::GptShape shape = shape_of(deck);
  const std::string path = data_path.empty() ? deck.data.valid : data_path;
  std::unique_ptr<data::TokenDataset> data;
  const std::int64_t n = windows > 0 ? windows : deck.training.eval_windows;
  on_every_rank(topo.world(), [&] {
        if (path.empty())
          throw std::runtime_error("no evaluation data: the deck has no data.valid and no --data was given");
        data = std::make_unique<data::TokenDataset>(data::TokenDataset::open(path, shape.vocab_size));
        const auto available = static_cast<std::int64_t>(data->num_windows(shape.seq_length));
        if (available < n)
          throw std::runtime_error(fmt::format("{} holds {} windows of {} tokens, {} were asked for", path,
                                               available, shape.seq_length + 1, n));
  });
  std::unique_ptr<Model> model;  // may not fit: reported like any other failure, on every rank
  on_every_rank(topo.world(), [&] {
    model = std::make_unique<Model>(shape, deck.training.micro_batch, topo.tp(), deck.training.seed, model::PipelineStage{topo.coords().pp, topo.layout().pipeline});
  });
  io::CheckpointMeta meta;
  on_every_rank(topo.world(), [&] { meta = load_weights(*model, topo, checkpoint); });
  const double loss = evaluate(*model, *data, n, topo.pp());
  if (!std::isfinite(loss))  // JSON has no NaN: a non-finite loss is an error, not a result
    throw parallel::AgreedError(fmt::format("eval: checkpoint {}: the mean loss is {} (not finite)", checkpoint, loss));
  log::infof("eval: checkpoint {} (step {}), {} windows of {} tokens from {}: mean loss {:.6f} nats/token",
             checkpoint, meta.step, n, shape.seq_length, path, loss);
  log::info(io::JsonObject().number("eval_loss", loss, io::digits(9)).integer("windows", n)
                .integer("tokens", n * shape.seq_length).text());
  return 0;
}

}  // namespace

int run_eval(const io::Deck& deck, const parallel::Topology& topo, const std::string& checkpoint,
             const std::string& data, int windows) {
  return with_precision(deck.training.precision,
                        [&](auto t) { return eval_as<decltype(t)>(deck, topo, checkpoint, data, windows); });
}

}  // namespace tptrain::train
