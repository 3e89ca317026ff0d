#include "src/train/training_run.hpp"

#include <cmath>
#include <fmt/format.h>

#include "src/log.hpp"
#include "src/parallel/agreement.hpp"
#include "src/util/phases.hpp"

namespace tptrain::train {

model::GptShape shape_of(const io::Deck& deck) {
  model::GptShape s;
  s.layers = deck.model.layers;
  s.hidden = deck.model.hidden;
  s.heads = deck.model.heads;
  s.ffn_hidden = deck.model.ffn_hidden;
  s.seq_length = deck.model.seq_length;
  s.vocab_size = deck.model.vocab_size;
  s.tensor = deck.parallel.tensor;
  return s;
}

void check_finite(std::int64_t step, double loss, double grad_norm) {
  if (std::isfinite(loss) && std::isfinite(grad_norm)) return;
  // Loss and norm are global reductions: every rank sees the same values and throws here.
  throw parallel::AgreedError(fmt::format(
      "step {}: loss = {}, gradient norm = {}: stopping the run (try a lower optimizer.lr or "
      "training.grad_clip)", step, loss, grad_norm));
}

double pipeline_forward(Model& model, parallel::Communicator& pp, const kx::ExecSpace& exec,
                        const kernels::Tokens& inputs, const kernels::Tokens* targets, std::int64_t count) {
  const int stage = pp.rank();
  if (!model.is_first_stage()) parallel::recv(pp, exec, model.stage_input(), stage - 1, 0);
  double loss = 0.0;
  if (targets != nullptr)
    loss = model.forward(exec, inputs, *targets, count);
  else
    model.forward_logits(exec, inputs);
  if (!model.is_last_stage()) parallel::send(pp, exec, model.stage_output(), stage + 1, 0);
  return loss;
}

namespace {

double evaluate_impl(Model& model, const data::TokenDataset& data, std::int64_t windows,
                     parallel::Communicator* pp) {
  const kx::ExecSpace exec;
  const int S = model.shape().seq_length;
  const int B = model.micro_batch();
  DeviceBatch batch(model.tokens());
  double sum = 0.0;
  for (std::int64_t first = 0; first < windows; first += B) {
    const std::int64_t rows = std::min<std::int64_t>(B, windows - first);
    for (int b = 0; b < B; ++b) {  // a last partial batch repeats its first window, not counted
      const std::size_t j = static_cast<std::size_t>(first + (b < rows ? b : 0));
      data.window(j, S, &batch.h_inputs[static_cast<std::size_t>(b) * S],
                  &batch.h_targets[static_cast<std::size_t>(b) * S]);
    }
    batch.upload(exec);
    sum += pp ? pipeline_forward(model, *pp, exec, batch.inputs, &batch.targets, rows * S)
              : model.forward(exec, batch.inputs, batch.targets, rows * S);
  }
  if (pp) sum = parallel::all_reduce_scalar(*pp, sum, parallel::ReduceOp::sum);  // the last stage's
  return sum / static_cast<double>(windows * S);
}

}  // namespace

double evaluate(Model& model, const data::TokenDataset& data, std::int64_t windows) {
  if (model.stage().size != 1)
    throw std::logic_error("tptrain: evaluate: a pipeline stage needs its PP group");
  return evaluate_impl(model, data, windows, nullptr);
}

double evaluate(Model& model, const data::TokenDataset& data, std::int64_t windows, parallel::Communicator& pp) {
  return evaluate_impl(model, data, windows, &pp);
}

namespace {
std::unique_ptr<data::TokenDataset> open_data(const std::string& path, int vocab) {
  if (path.empty()) return nullptr;
  return std::make_unique<data::TokenDataset>(data::TokenDataset::open(path, vocab));
}
}  // namespace

TrainingRun::TrainingRun(const io::Deck& deck, const parallel::Topology& topo, RunOptions options)
    : deck_(deck),
      topo_(topo),
      options_(options),
      train_(options.synthetic_tokens > 0
                 ? std::make_unique<data::TokenDataset>(data::TokenDataset::synthetic(
                       static_cast<std::size_t>(options.synthetic_tokens), deck.model.vocab_size, deck.training.seed))
                 : open_data(deck.data.train, deck.model.vocab_size)),
      valid_(options.synthetic_tokens > 0 ? nullptr : open_data(deck.data.valid, deck.model.vocab_size)),
      sampler_(std::make_unique<data::BatchSampler>(*train_, deck.model.seq_length, deck.training.global_batch,
                                                    deck.training.micro_batch, topo.coords().dp,
                                                    topo.layout().data, deck.training.seed)),
      model_(shape_of(deck), deck.training.micro_batch, topo.tp(), deck.training.seed,
             model::PipelineStage{topo.coords().pp, topo.layout().pipeline}),
      parameters_(model_.parameters()),
      schedule_{deck.optimizer.lr, deck.optimizer.min_lr, deck.optimizer.warmup_steps, deck.training.steps,
                deck.optimizer.decay},
      adamw_{deck.optimizer.beta1, deck.optimizer.beta2, deck.optimizer.eps, deck.optimizer.weight_decay},
      batch_(model_.tokens()),
      pipeline_(model_, topo.pp(), options.schedule),
      reducer_(model_, topo.dp()),
      optimizer_(model_),
      tokens_per_step_(std::int64_t(deck.training.global_batch) * deck.model.seq_length) {
  if (valid_)
    eval_windows_ = std::min<std::int64_t>(deck.training.eval_windows,
                                           static_cast<std::int64_t>(valid_->num_windows(deck.model.seq_length)));
  const int P = topo.layout().pipeline;
  if (micro_batches() < P && topo.world_rank() == 0)
    log::warning(fmt::format("{} micro-batch{} per step on {} pipeline stages: most stages idle most of the time "
                             "(pipeline bubble); use training.global_batch / (micro_batch * data) >= {}",
                             micro_batches(), micro_batches() == 1 ? "" : "es", P, P));
}

StageMemory TrainingRun::memory() const {
  return stage_memory(pipeline_.schedule(), topo_.coords().pp, topo_.layout().pipeline, micro_batches(),
                      model_.tokens(), model_.shape().hidden, model_.activation_bytes());
}

std::string TrainingRun::memory_report() const {
  constexpr double MiB = 1 << 20;
  std::size_t params = 0;
  for (const auto* p : parameters_) params += static_cast<std::size_t>(p->local_size());
  const auto& ws = model_.workspace();
  const StageMemory stage = memory();
  return fmt::format(
      "memory of this rank: {:.1f} MiB parameters (values, gradients, AdamW moments: 4 x {:.1f}); "
      "{:.1f} MiB activations and scratch: {:.1f} saved for backward, {:.1f} stage tensors, {:.1f} scratch "
      "shared by all layers{}",
      4.0 * params * sizeof(float) / MiB, params * sizeof(float) / MiB, ws.total_bytes() / MiB,
      ws.bytes(model::BufferCategory::activation) / MiB, ws.bytes(model::BufferCategory::stage) / MiB,
      ws.bytes(model::BufferCategory::scratch) / MiB,
      stage.stored_inputs > 0 ? fmt::format("; {:.1f} MiB stored pipeline inputs", stage.stored_inputs / MiB) : "");
}

double TrainingRun::compute_gradients(std::int64_t step) {
  const kx::ExecSpace exec;
  {
    util::PhaseScope phase(util::Phase::optimizer);
    model_.zero_grad(exec);
  }
  // Gradients of the mean loss over the GLOBAL batch: every token's loss weighs 1/(B_global S),
  // so summing the data-parallel ranks' gradients gives the full gradient.
  const float scale = 1.0f / static_cast<float>(tokens_per_step_);
  const int M = micro_batches();
  int loaded = -1;
  const auto batch = [&](int m) -> const DeviceBatch& {
    if (loaded != m) {
      sampler_->micro_batch(step, m, batch_.h_inputs.data(), batch_.h_targets.data());
      batch_.upload_for_backward(exec);
      loaded = m;
    }
    return batch_;
  };
  // Data parallelism: a bucket's gradients are final once the LAST micro-batch's backward has
  // passed it; its all-reduce then runs while the backward goes on.
  const auto bucket_done = [&](int m, std::size_t b) {
    util::PhaseScope phase(util::Phase::dp_comm);
    if (options_.overlap_grad_reduce && m == M - 1)
      reducer_.launch(exec, b);
    else
      reducer_.progress();
  };
  double loss_sum = pipeline_.run(exec, M, scale, batch, bucket_done);
  {
    util::PhaseScope phase(util::Phase::dp_comm);
    reducer_.finish(exec);
  }
  // The tied word embedding: the first stage holds the embedding's part of its gradient, the
  // last stage the output layer's; both end with the sum, so both copies stay identical.
  if (topo_.layout().pipeline > 1 && topo_.in_embedding_group()) {
    util::PhaseScope phase(util::Phase::pipeline_wait);
    parallel::all_reduce(topo_.embedding(), exec, model_.word()->dv(), parallel::ReduceOp::sum);
  }
  // The last stage has the loss; every rank reports it.
  loss_sum = parallel::all_reduce_scalar(topo_.pp(), loss_sum, parallel::ReduceOp::sum);
  loss_sum = parallel::all_reduce_scalar(topo_.dp(), loss_sum, parallel::ReduceOp::sum);
  return loss_sum / static_cast<double>(tokens_per_step_);
}

StepResult TrainingRun::step(std::int64_t step) {
  const kx::ExecSpace exec;
  util::PhaseScope step_phase(util::Phase::other);  // what no inner phase claims
  StepResult r;
  r.loss = compute_gradients(step);
  util::PhaseScope phase(util::Phase::optimizer);
  r.grad_norm = optimizer_.grad_norm(exec, topo_.tp(), topo_.pp());
  check_finite(step + 1, r.loss, r.grad_norm);
  const double clip = deck_.training.grad_clip;
  // As PyTorch's clip_grad_norm_, folded into AdamW's reading of the gradients.
  const float grad_scale = clip > 0 && r.grad_norm > clip ? static_cast<float>(clip / (r.grad_norm + 1e-6)) : 1.0f;
  r.lr = schedule_.at(step);
  optimizer_.step(exec, adamw_, r.lr, step + 1, grad_scale);
  return r;
}

double TrainingRun::evaluate() {
  if (!valid_ || eval_windows_ == 0) return std::nan("");
  return train::evaluate(model_, *valid_, eval_windows_, topo_.pp());
}

}  // namespace tptrain::train
