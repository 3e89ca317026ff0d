// One training run's state and its optimizer step: the model shard of this rank, the data
// sampler of its data-parallel rank, AdamW, the LR schedule. `tptrain train` drives it step by
// step (trainer.cpp); tests drive it directly.
#pragma once

#include <memory>
#include <optional>

#include "io/deck.hpp"
#include "src/data/batch_sampler.hpp"
#include "src/data/token_dataset.hpp"
#include "src/model/gpt_model.hpp"
#include "src/parallel/topology.hpp"
#include "src/train/device_batch.hpp"
#include "src/train/lr_schedule.hpp"
#include "src/train/optimizer.hpp"

namespace tptrain::train {

using Model = model::GptModel<float>;

model::GptShape shape_of(const io::Deck& deck);

// A non-finite loss or gradient norm ends the run: throws naming the step (1-based).
void check_finite(std::int64_t step, double loss, double grad_norm);

// Mean loss over the first `windows` evaluation windows of `data` (DESIGN.md: window j covers
// tokens [j*S, j*S+S]), in batches of the model's micro-batch size.
double evaluate(Model& model, const data::TokenDataset& data, std::int64_t windows);

struct StepResult {
  double loss = 0;       // mean over the global batch
  double grad_norm = 0;  // before clipping
  double lr = 0;
};

class TrainingRun {
 public:
  // Opens the data (throws data::DataError) and builds the model shard of this rank.
  TrainingRun(const io::Deck& deck, const parallel::Topology& topo);

  // Optimizer step `step` (0-based): zero grads, forward/backward of every micro-batch of this
  // data-parallel rank, gradient all-reduce over the DP group, global norm, clipping, AdamW.
  StepResult step(std::int64_t step);

  // Mean validation loss over training.eval_windows windows (0 windows: no validation data).
  double evaluate();
  std::int64_t eval_windows() const { return eval_windows_; }

  Model& model() { return model_; }
  std::int64_t tokens_per_step() const { return tokens_per_step_; }
  int micro_batches() const { return sampler_->micro_batches_per_step(); }

 private:
  const io::Deck& deck_;
  const parallel::Topology& topo_;
  std::unique_ptr<data::TokenDataset> train_, valid_;
  std::unique_ptr<data::BatchSampler> sampler_;
  Model model_;
  std::vector<model::Parameter<float>*> parameters_;
  LrSchedule schedule_;
  AdamWConfig adamw_;
  DeviceBatch batch_;
  std::int64_t tokens_per_step_ = 0;
  std::int64_t eval_windows_ = 0;
};

}  // namespace tptrain::train
