// One training run's state and its optimizer step: the model shard of this rank (its pipeline
// stage, its tensor-parallel part), the data sampler of its data-parallel rank, the pipeline
// schedule, the data-parallel gradient reduction, AdamW, the LR schedule. `tptrain train`
// drives it step by step (train_command.cpp); tests drive it directly.
#pragma once

#include <map>
#include <memory>
#include <vector>
#include <optional>
#include <string>

#include "io/deck.hpp"
#include "src/data/batch_sampler.hpp"
#include "src/data/data_blend.hpp"
#include "src/data/token_dataset.hpp"
#include "src/model/gpt_model.hpp"
#include "src/model/shape_of_deck.hpp"
#include "src/parallel/topology.hpp"
#include "src/train/device_batch.hpp"
#include "src/train/gradient_reducer.hpp"
#include "src/train/loss_scaler.hpp"
#include "src/train/lr_schedule.hpp"
#include "src/train/optimizer.hpp"
#include "src/train/pipeline_runner.hpp"
#include "src/train/spike_detector.hpp"

namespace tptrain::train {

// A non-finite loss or gradient norm ends the run: throws parallel::AgreedError (the values are
// global reductions, the same on every rank) naming the step (1-based).
void check_finite(std::int64_t step, double loss, double grad_norm);

// Mean loss over the first `windows` evaluation windows of `data` (docs/design.md, "Data": window j covers
// tokens [j*S, j*S+S]), in batches of the model's micro-batch size. With a PP group, collective
// over it: the activations go stage to stage and every stage returns the last stage's loss.
// `documents`: the packed documents' masks and positions (data.document_mask, reset_positions).
template <class T>
double evaluate(model::GptModel<T>& model, const data::TokenDataset& data, std::int64_t windows,
                const Documents& documents = {});
template <class T>
double evaluate(model::GptModel<T>& model, const data::TokenDataset& data, std::int64_t windows,
                parallel::Communicator& pp, const Documents& documents = {});

// Forward only through the pipeline (evaluation, generation), collective over `pp`: a
// non-first stage receives its input from the previous stage, a non-last stage sends its
// output to the next. The last stage leaves the local logits in model.local_logits() and,
// with `targets`, returns the loss summed over the first `count` tokens (count < 0: all);
// other stages return 0.
template <class T>
double pipeline_forward(model::GptModel<T>& model, parallel::Communicator& pp, const kx::ExecSpace& exec,
                        const kernels::Tokens& inputs, const kernels::Tokens* targets, std::int64_t count = -1);

struct StepResult {
  double loss = 0;       // mean over the global batch
  double grad_norm = 0;  // before clipping (of the unscaled gradients)
  double lr = 0;
  double loss_scale = 1;  // the scale this step's backward ran with (fp16; 1 otherwise)
  bool skipped = false;   // the weights were not updated: an fp16 overflow, or a spike (skip_reason)
  std::string skip_reason;  // training.skip_spikes: why the step was skipped ("" for an fp16 overflow)
  int skipped_in_a_row = 0;  // training.skip_spikes: this step's run of skips
};

// This rank's parameter memory by category, read from the buffers the model allocated
// (GradBucket). Megatron's accounting: bf16 without a distributed optimizer is 2 bytes of
// weights + 4 of gradients + 4 of fp32 master + 8 of moments = 18 per parameter; fp32 is 16.
// With a distributed optimizer over d data-parallel ranks the master and the moments are a
// 1/d shard: 6 + 12/d bytes (bf16), 8 + 8/d (fp32), plus the shards' padding (< d elements per
// bucket).
struct ParameterMemory {
  std::int64_t parameters = 0;  // local elements, the tied copy included, the padding not
  int optimizer_shards = 1;     // d with a distributed optimizer
  std::size_t weight = 0, master = 0, gradient = 0, optimizer = 0;  // bytes
  std::size_t total() const { return weight + master + gradient + optimizer; }
  double per_parameter() const { return parameters > 0 ? static_cast<double>(total()) / static_cast<double>(parameters) : 0.0; }
};

struct RunOptions {
  Schedule schedule = Schedule::one_f_one_b;
  // Start each gradient bucket's data-parallel all-reduce as soon as the last micro-batch's
  // backward has finished it (false: all of them after the backward, for comparison).
  bool overlap_grad_reduce = true;
  // Complete each pipeline transfer only where its data or buffer is needed, so that it runs
  // during the compute before (false: right after posting it, for comparison).
  bool overlap_pipeline_transfers = true;
  // > 0: train on this many random tokens made in memory (TokenDataset::synthetic) instead of
  // the deck's data files, and evaluate nothing (benchmarks).
  std::int64_t synthetic_tokens = 0;
};

// T: the compute (storage) type of weights and activations, from training.precision: float,
// kx::bf16 or kx::fp16 (master weights, gradients and moments are fp32 in every case).
template <class T = float>
class TrainingRun {
 public:
  using Model = model::GptModel<T>;

  // Opens the data (throws data::DataError) and builds the model shard of this rank (its
  // pipeline stage). No communication. Warns (rank 0) when there are fewer micro-batches than
  // pipeline stages.
  TrainingRun(const io::Deck& deck, const parallel::Topology& topo, RunOptions options = {});

  // Optimizer step `step` (0-based): compute_gradients, then update.
  StepResult step(std::int64_t step);
  // The optimizer half of step `step`, once compute_gradients has left the step's gradients
  // (`loss`: what it returned): global norm, clipping, AdamW. With fp16 the loss was scaled by
  // the dynamic loss scaler; a step whose gradients hold Inf/NaN on any rank is skipped on every
  // rank (weights and moments untouched) and the scaler told. Throws parallel::AgreedError (the
  // run stops) for a non-finite loss or norm, and with fp16 for a non-finite loss (no loss scale
  // changes the forward) or an overflow at training.loss_scale_min. With training.skip_spikes a
  // spike or a non-finite loss or norm skips the step instead (spike_detector.hpp), and
  // training.max_skipped_steps skips in a row stop the run (AgreedError).
  StepResult update(std::int64_t step, double loss);

  // What exact resumption needs besides weights and moments, as /train checkpoint attributes
  // (the fp16 loss scaler's state, the spike detector's window; empty otherwise), and its
  // restoration: the scale clamped to this run's [training.loss_scale_min, 2^64] (said on rank
  // 0); std::invalid_argument naming the attribute for a scale or count no run writes. The
  // attributes are the same on every rank.
  std::map<std::string, std::int64_t> train_state() const;
  void restore_train_state(const std::map<std::string, std::int64_t>& saved);
  // The loss scaler of an fp16 run (nullptr otherwise).
  const DynamicLossScaler* loss_scaler() const { return scaler_ ? &*scaler_ : nullptr; }

  // Zeroes the gradients, runs the pipeline schedule over this data-parallel rank's
  // micro-batches (forward and backward; data order as with one rank), averages the gradients
  // over the DP group in buckets (overlapped with the backward), sums the tied word
  // embedding's gradient over the embedding group. Returns the mean loss over the global batch
  // (on every rank). The parameters then hold the final gradients of the step (with a
  // distributed optimizer: the buckets' shards of this rank, GradBucket::shard_grads).
  double compute_gradients(std::int64_t step);

  // Mean validation loss over training.eval_windows windows (0 windows: no validation data).
  // A data.valid blend is evaluated per dataset (each its first eval_windows windows) and the
  // loss is the mean weighted by the blend's shares; eval_loss_by_dataset() has each dataset's.
  double evaluate();
  const std::vector<double>& eval_loss_by_dataset() const { return eval_by_dataset_; }
  // Windows per validation dataset (the fewest a dataset holds, at most training.eval_windows).
  std::int64_t eval_windows() const { return eval_windows_; }

  // How the training data has been used after `steps_done` optimizer steps, per dataset of
  // data.train (one entry without a blend), cumulative from step 0: the share of all sequences
  // drawn so far that came from it, and its epochs, tokens drawn (sequences x seq_length) over
  // its tokens. Counted on every rank alone from the sampler's (seed, step) draws, from step 0
  // or from the counts of the checkpoint the run resumed from (resume_data_use): a resume with
  // a changed blend keeps what the steps before it drew, and the new weights count from there.
  struct DataUse {
    std::vector<double> share, epochs;
  };
  DataUse data_use(std::int64_t steps_done);
  // data.train as the checkpoint after `steps_done` steps records it (io/checkpoint_blend.hpp):
  // each entry's path, tokens and weight, and the sequences drawn from it so far.
  io::BlendRecord data_record(std::int64_t steps_done);
  // The counts of data_use continue from a checkpoint of step `step` whose record is `saved`;
  // returns how data.train differs from it (data::resume_blend), empty when it does not. An
  // empty record (a checkpoint from before the record) cannot be compared: the counts then
  // start from step 0 under this deck's blend, as they did before.
  std::vector<std::string> resume_data_use(const io::BlendRecord& saved, std::int64_t step);

  Model& model() { return model_; }
  // The metrics of the block's sublayer kinds since the last call (a mixture's losses and loads;
  // sublayer_statistics.hpp), summed over the stages and the data x context ranks. Collective
  // over the world (every rank logs the same steps); empty when no kind counts any.
  std::vector<model::SublayerMetrics> take_sublayer_metrics();
  std::int64_t tokens_per_step() const { return tokens_per_step_; }
  int micro_batches() const { return sampler_->micro_batches_per_step(); }
  PipelineRunner<T>& pipeline() { return pipeline_; }
  const typename GradientReducer<T>::Stats& reduction_stats() const { return reducer_.stats(); }
  ParameterMemory parameter_memory() const;
  // This rank's memory in words: parameters with their gradients and AdamW moments, then the
  // workspace by category (model::Workspace: activation slots, recompute mode); on a second line
  // what the memory ledger measured (train/memory_metrics.hpp: by category, peak, resident set).
  std::string memory_report() const;

 private:
  // Reads the evaluation's windows of data.valid, throwing what reading them throws.
  void check_eval_windows() const;
  const io::Deck& deck_;
  const parallel::Topology& topo_;
  RunOptions options_;
  std::unique_ptr<data::DataBlend> train_, valid_;
  std::unique_ptr<data::BatchSampler> sampler_;
  // Brings the counts below to `steps_done` steps.
  void count_draws(std::int64_t steps_done);
  std::vector<std::int64_t> drawn_;  // sequences per training dataset in steps [0, drawn_steps_)
  std::int64_t drawn_steps_ = 0;
  // All sequences of steps [0, drawn_steps_), from entries a resume removed too.
  std::int64_t drawn_sequences() const;
  // Where the counts start: step 0 with none drawn, or the resumed checkpoint's step and counts.
  std::vector<std::int64_t> start_drawn_;
  std::int64_t start_step_ = 0;
  std::int64_t start_sequences_ = 0;
  std::vector<double> eval_by_dataset_;
  // This rank's tokens of the current step, every micro-batch, read before the step in a phase
  // all ranks agree on: the pipeline takes them between collectives, where a failed read (a
  // token >= vocab_size, a data file cut under the job) could not be agreed.
  std::vector<std::int32_t> step_inputs_, step_targets_;
  Model model_;
  LrSchedule schedule_;
  AdamWConfig adamw_;
  PipelineRunner<T> pipeline_;
  GradientReducer<T> reducer_;
  BucketOptimizer<T> optimizer_;
  std::int64_t tokens_per_step_ = 0;
  std::int64_t eval_windows_ = 0;
  std::optional<DynamicLossScaler> scaler_;  // fp16 only
  std::optional<SpikeDetector> spikes_;      // training.skip_spikes only
};

}  // namespace tptrain::train
