#include "src/train/training_run.hpp"

#include <cmath>
#include <fmt/format.h>

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
  throw std::runtime_error(fmt::format(
      "step {}: loss = {}, gradient norm = {}: stopping the run (try a lower optimizer.lr or "
      "training.grad_clip)", step, loss, grad_norm));
}

double evaluate(Model& model, const data::TokenDataset& data, std::int64_t windows) {
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
    batch.upload();
    sum += model.forward(exec, batch.inputs, batch.targets, rows * S);
  }
  return sum / static_cast<double>(windows * S);
}

namespace {
std::unique_ptr<data::TokenDataset> open_data(const std::string& path, int vocab) {
  if (path.empty()) return nullptr;
  return std::make_unique<data::TokenDataset>(data::TokenDataset::open(path, vocab));
}
}  // namespace

TrainingRun::TrainingRun(const io::Deck& deck, const parallel::Topology& topo)
    : deck_(deck),
      topo_(topo),
      train_(open_data(deck.data.train, deck.model.vocab_size)),
      valid_(open_data(deck.data.valid, deck.model.vocab_size)),
      sampler_(std::make_unique<data::BatchSampler>(*train_, deck.model.seq_length, deck.training.global_batch,
                                                    deck.training.micro_batch, topo.coords().dp,
                                                    topo.layout().data, deck.training.seed)),
      model_(shape_of(deck), deck.training.micro_batch, topo.tp(), deck.training.seed),
      parameters_(model_.parameters()),
      schedule_{deck.optimizer.lr, deck.optimizer.min_lr, deck.optimizer.warmup_steps, deck.training.steps,
                deck.optimizer.decay},
      adamw_{deck.optimizer.beta1, deck.optimizer.beta2, deck.optimizer.eps, deck.optimizer.weight_decay},
      batch_(model_.tokens()),
      tokens_per_step_(std::int64_t(deck.training.global_batch) * deck.model.seq_length) {
  if (valid_)
    eval_windows_ = std::min<std::int64_t>(deck.training.eval_windows,
                                           static_cast<std::int64_t>(valid_->num_windows(deck.model.seq_length)));
}

StepResult TrainingRun::step(std::int64_t step) {
  const kx::ExecSpace exec;
  Kokkos::Profiling::pushRegion("tptrain::TrainingRun::step");
  model_.zero_grad(exec);
  double loss_sum = 0.0;
  // Gradients of the mean loss over the GLOBAL batch: every token's loss weighs 1/(B_global S),
  // so summing the data-parallel ranks' gradients gives the full gradient.
  const float scale = 1.0f / static_cast<float>(tokens_per_step_);
  for (int m = 0; m < sampler_->micro_batches_per_step(); ++m) {
    sampler_->micro_batch(step, m, batch_.h_inputs.data(), batch_.h_targets.data());
    batch_.upload();
    loss_sum += model_.forward(exec, batch_.inputs, batch_.targets);
    model_.backward(exec, batch_.inputs, batch_.targets, scale);
  }
  // Data parallelism: sum the gradients of the DP replicas (non-blocking, one per parameter,
  // all in flight together, waited on before the norm).
  std::vector<parallel::Request> pending;
  for (model::Parameter<float>* p : parameters_)
    pending.push_back(parallel::iall_reduce(topo_.dp(), exec, p->dv(), parallel::ReduceOp::sum));
  parallel::wait_all(pending.data(), pending.size());
  loss_sum = parallel::all_reduce_scalar(topo_.dp(), loss_sum, parallel::ReduceOp::sum);

  StepResult r;
  r.loss = loss_sum / static_cast<double>(tokens_per_step_);
  r.grad_norm = global_grad_norm(exec, parameters_, topo_.tp());
  check_finite(step + 1, r.loss, r.grad_norm);
  const double clip = deck_.training.grad_clip;
  if (clip > 0 && r.grad_norm > clip)  // as PyTorch's clip_grad_norm_
    scale_gradients(exec, parameters_, static_cast<float>(clip / (r.grad_norm + 1e-6)));
  r.lr = schedule_.at(step);
  adamw_step(exec, parameters_, adamw_, r.lr, step + 1);
  Kokkos::Profiling::popRegion();
  return r;
}

double TrainingRun::evaluate() {
  if (!valid_ || eval_windows_ == 0) return std::nan("");
  return train::evaluate(model_, *valid_, eval_windows_);
}

}  // namespace tptrain::train
