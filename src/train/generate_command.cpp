#include "src/train/generate_command.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <type_traits>

#include "base/agreement.hpp"
#include "src/log.hpp"
#include "src/train/model_checkpoint.hpp"
#include "src/train/precision_dispatch.hpp"
#include "src/train/training_run.hpp"

namespace tptrain::train {

namespace {

using parallel::on_every_rank;

template <class T>
int generate_as(const io::Deck& deck, const parallel::Topology& topo, const std::string& checkpoint,
                const SampleOptions& o) {
  using Model = model::GptModel<T>;
  const model::GptShape shape = shape_of(deck);
  const kx::ExecSpace exec;
  std::unique_ptr<Model> model_ptr;
  on_every_rank(topo.world(), [&] {
    model_ptr = std::make_unique<Model>(shape, 1, topo.tp(), deck.training.seed, model::PipelineStage{topo.coords().pp, topo.layout().pipeline});
  });
  Model& model = *model_ptr;
  on_every_rank(topo.world(), [&] { load_weights(model, topo, checkpoint); });
  std::vector<std::int32_t> context;
  for (unsigned char c : o.prompt) context.push_back(c);
  if (context.empty()) context.push_back('\n');
  for (std::int32_t t : context)  // the same prompt on every rank: the same verdict everywhere
    if (t >= shape.vocab_size)
      throw parallel::AgreedError(
          fmt::format("the prompt has byte {} but the model's vocabulary has {} tokens", t, shape.vocab_size));
  const int S = shape.seq_length;
  DeviceBatch batch(S);
  kernels::Vector<T> row("generate.row", shape.local_vocab()), full("generate.full", shape.padded_vocab());
  std::mt19937_64 rng(o.seed);  // same seed on every rank: every rank draws the same token
  // Streamed as it comes: a long sample shows progress, and a killed run keeps what it made.
  log::stream(o.prompt);
  for (int i = 0; i < o.tokens; ++i) {
    // The last S tokens of the context, left-aligned; causal attention makes whatever follows
    // position `last` irrelevant to its logits.
    const std::size_t first = context.size() > static_cast<std::size_t>(S) ? context.size() - S : 0;
    const int last = static_cast<int>(context.size() - first) - 1;
    std::fill(batch.h_inputs.begin(), batch.h_inputs.end(), 0);
    std::copy(context.begin() + static_cast<std::ptrdiff_t>(first), context.end(), batch.h_inputs.begin());
    batch.upload(exec);
    pipeline_forward(model, topo.pp(), exec, batch.inputs, nullptr);
    // On the last pipeline stage, which holds the logits: (logit, token) of the vocabulary,
    // padding excluded, and how many are NaN or +-Inf.
    std::vector<std::pair<double, int>> cand;
    int non_finite = 0, first_bad = 0;
    if (model.is_last_stage()) {
      Kokkos::deep_copy(exec, row, Kokkos::subview(model.local_logits(), last, Kokkos::ALL()));
      parallel::all_gather(model.tp(), exec, row, full);  // one row of logits, for sampling only
      auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), full);
      for (int v = 0; v < shape.vocab_size; ++v) {
        cand.emplace_back(h(v), v);
        if (!std::isfinite(cand.back().first) && non_finite++ == 0) first_bad = v;
      }
    }
    // A NaN or Inf logit gives no distribution (every weight turns NaN): refused, as eval refuses
    // a non-finite loss. The verdict goes from the last stage to every rank: all stop together.
    if (const int count = parallel::all_reduce_scalar(topo.pp(), non_finite, parallel::ReduceOp::sum); count > 0) {
      const bool mine = model.is_last_stage();
      const int token = parallel::all_reduce_scalar(topo.pp(), mine ? first_bad : 0, parallel::ReduceOp::sum);
      const double value = parallel::all_reduce_scalar(  // x + 0 keeps NaN and Inf
          topo.pp(), mine ? cand[static_cast<std::size_t>(first_bad)].first : 0.0, parallel::ReduceOp::sum);
      log::stream("\n");
      throw parallel::AgreedError(fmt::format(
          "generate: checkpoint {}: the logits for generated token {} are not finite ({} of {}; the first, for "
          "token {}, is {}): nothing to sample from{}",
          checkpoint, i + 1, count, shape.vocab_size, token, value,
          std::is_same<T, kx::fp16>::value
              ? " (in fp16 the forward pass exceeds fp16's range, largest value 65504: try training.precision = "
                "\"bf16\")"
              : ""));
    }
    int next = 0;
    if (model.is_last_stage()) {
      std::sort(cand.begin(), cand.end(), [](const auto& a, const auto& b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
      });
      if (o.top_k > 0 && static_cast<std::size_t>(o.top_k) < cand.size())
        cand.resize(static_cast<std::size_t>(o.top_k));
      next = cand.front().second;
      if (o.temperature > 0) {
        std::vector<double> w;
        for (const auto& c : cand) w.push_back(std::exp((c.first - cand.front().first) / o.temperature));
        std::discrete_distribution<int> pick(w.begin(), w.end());
        next = cand[static_cast<std::size_t>(pick(rng))].second;
      }
    }
    // Every stage needs the token for its next input: the last stage's choice, to all.
    next = parallel::all_reduce_scalar(topo.pp(), model.is_last_stage() ? next : 0, parallel::ReduceOp::sum);
    context.push_back(next);
    log::stream(std::string(1, static_cast<char>(next)));
  }
  log::stream("\n");
  return 0;
}

}  // namespace

int run_generate(const io::Deck& deck, const parallel::Topology& topo, const std::string& checkpoint,
                 const SampleOptions& options) {
  return with_precision(deck.training.precision,
                        [&](auto t) { return generate_as<decltype(t)>(deck, topo, checkpoint, options); });
}

}  // namespace tptrain::train
