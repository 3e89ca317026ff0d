#include "src/train/training_run.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <type_traits>
#include <fmt/format.h>

#include "base/agreement.hpp"
#include "base/mpi_check.hpp"
#include "base/test_hooks.hpp"
#include "src/data/blend_resume.hpp"
#include "src/data/shard_header.hpp"
#include "src/util/log.hpp"
#include "src/train/memory_metrics.hpp"
#include "src/util/host_waits.hpp"
#include "src/util/phases.hpp"

namespace tptrain::train {

void check_finite(std::int64_t step, double loss, double grad_norm) {
  if (std::isfinite(loss) && std::isfinite(grad_norm)) return;
  // Loss and norm are global reductions: every rank sees the same values and throws here.
  throw parallel::AgreedError(fmt::format(
      "step {}: loss = {}, gradient norm = {}: stopping the run (try a lower optimizer.lr or "
      "training.grad_clip)", step, loss, grad_norm));
}

template <class T>
double pipeline_forward(model::GptModel<T>& model, parallel::Communicator& pp, const kx::ExecSpace& exec,
                        const kernels::Tokens& inputs, const kernels::Tokens* targets, std::int64_t count) {
  // Chunk by chunk (virtual stage c·p + r): from the previous rank, to the next, and from the
  // last rank around to rank 0's next chunk.
  const int p = pp.size(), r = pp.rank();
  double loss = 0.0;
  for (int c = 0; c < model.chunks(); ++c) {
    model.bind_slot(0, c);
    if (!(model.is_first_stage() && c == 0)) parallel::recv(pp, exec, model.stage_input(), (r + p - 1) % p, c);
    if (targets != nullptr)
      loss += model.forward(exec, inputs, *targets, count);
    else
      model.forward_logits(exec, inputs);
    if (!model.chunk_has_head(c)) parallel::send(pp, exec, model.stage_output(), (r + 1) % p, r == p - 1 ? c + 1 : c);
  }
  return loss;
}

namespace {

template <class T>
double evaluate_impl(model::GptModel<T>& model, const data::TokenDataset& data, std::int64_t windows,
                     parallel::Communicator* pp, const Documents& documents) {
  const kx::ExecSpace exec;
  const int S = model.shape().seq_length;
  const int B = model.micro_batch();
  Documents docs = documents;
  docs.seq_length = S;
  docs.context = model.context_chunks();  // the rank's chunks of each window (context parallelism)
  DeviceBatch batch(model.tokens(), docs);
  if (docs.any()) model.bind_documents(batch.doc_start, batch.positions, nullptr);
  double sum = 0.0;
  for (std::int64_t first = 0; first < windows; first += B) {
    const std::int64_t rows = std::min<std::int64_t>(B, windows - first);
    for (int b = 0; b < B; ++b) {  // a last partial batch repeats its first window, not counted
      const std::size_t j = static_cast<std::size_t>(first + (b < rows ? b : 0));
      data.window(j, S, &batch.h_inputs[static_cast<std::size_t>(b) * S],
                  &batch.h_targets[static_cast<std::size_t>(b) * S]);
    }
    batch.upload(exec);
    const std::int64_t count = rows * docs.local_length();  // the rank's rows of the windows counted
    sum += pp ? pipeline_forward(model, *pp, exec, batch.inputs, &batch.targets, count)
              : model.forward(exec, batch.inputs, batch.targets, count);
  }
  if (pp) sum = parallel::all_reduce_scalar(*pp, sum, parallel::ReduceOp::sum);  // the last stage's
  if (docs.context.split())  // each context rank's chunks
    sum = parallel::all_reduce_scalar(*model.context_group(), sum, parallel::ReduceOp::sum);
  return sum / static_cast<double>(windows * S);
}

}  // namespace

template <class T>
double evaluate(model::GptModel<T>& model, const data::TokenDataset& data, std::int64_t windows,
                const Documents& documents) {
  if (model.stage().size != 1)
    throw std::logic_error("tptrain: evaluate: a pipeline stage needs its PP group");
  return evaluate_impl(model, data, windows, nullptr, documents);
}

template <class T>
double evaluate(model::GptModel<T>& model, const data::TokenDataset& data, std::int64_t windows,
                parallel::Communicator& pp, const Documents& documents) {
  return evaluate_impl(model, data, windows, &pp, documents);
}

namespace {
std::unique_ptr<data::DataBlend> open_data(const io::DataSources& sources, const std::string& key, int vocab) {
  if (sources.empty()) return nullptr;
  return std::make_unique<data::DataBlend>(data::DataBlend::open(sources, key, vocab));
}

// Shards that record their tokenizer (`tptrain tokenize` writes it into the header) under a deck
// that names another: training does not read the tokenizer, but generate and eval's bits per
// byte decode with data.tokenizer, so the mismatch is said now rather than found in a sample.
// optimizer.shard: every rank of the shard group (data x context, or parallel.shard_group of its
// ranks) holds one shard of the optimizer state ("optimizer"), and of the gradients ("gradients"),
// and of the weights ("parameters").
model::OptimizerSharding optimizer_sharding(const io::Deck& deck, const parallel::Communicator& group) {
  if (!deck.optimizer.distributed) return {};
  const std::string& mode = deck.optimizer.shard;
  return {group.rank(), group.size(), mode == "gradients" || mode == "parameters", mode == "parameters",
          deck.optimizer.reshard_after_forward};
}
}  // namespace

template <class T>
TrainingRun<T>::TrainingRun(const io::Deck& deck, const parallel::Topology& topo, RunOptions options)
    : deck_(deck),
      topo_(topo),
      options_(options),
      train_(options.synthetic_tokens > 0
                 ? std::make_unique<data::DataBlend>(data::TokenDataset::synthetic(
                       static_cast<std::size_t>(options.synthetic_tokens), deck.model.vocab_size, deck.training.seed))
                 : open_data(deck.data.train, "data.train", deck.model.vocab_size)),
      valid_(options.synthetic_tokens > 0 ? nullptr : open_data(deck.data.valid, "data.valid", deck.model.vocab_size)),
      sampler_(std::make_unique<data::BatchSampler>(*train_, deck.model.seq_length, deck.training.global_batch,
                                                    deck.training.micro_batch, topo.coords().dp,
                                                    topo.layout().data, deck.training.seed)),
      model_(model::shape_of(deck), deck.training.micro_batch, topo.tp(), deck.training.seed,
             model::PipelineStage{topo.coords().pp, topo.layout().pipeline, std::max(1, deck.parallel.virtual_stages)},
             model::recompute_from_name(deck.training.recompute), optimizer_sharding(deck, topo.shard()), topo.cp(),
             &topo.ep(), optimizer_sharding(deck, topo.expert_dp())),  // the experts': over the expert-data group
      schedule_{deck.optimizer.lr, deck.optimizer.min_lr, deck.optimizer.warmup_steps, deck.training.steps,
                deck.optimizer.decay},
      adamw_{deck.optimizer.beta1, deck.optimizer.beta2, deck.optimizer.eps, deck.optimizer.weight_decay},
      pipeline_(model_, topo.pp(), options.schedule, options.overlap_pipeline_transfers, documents_of(deck)),
      reducer_(model_, topo.dp_cp(), &topo.expert_dp(), &topo.shard(), topo.replica()),
      optimizer_(model_, &topo.shard(), &topo.ep(), &topo.expert_dp()),
      tokens_per_step_(std::int64_t(deck.training.global_batch) * deck.model.seq_length) {
  model_.bind_shard_groups(topo.shard(), &topo.expert_dp());  // optimizer.shard = "parameters"
  if (topo.world_rank() == 0) {
    for (const data::DataBlend* blend : {options.synthetic_tokens == 0 ? train_.get() : nullptr, valid_.get()})
      for (std::size_t i = 0; blend != nullptr && i < blend->size(); ++i)
        if (std::string w = data::other_tokenizer_warning(blend->dataset(i), blend->name(i), deck.data.tokenizer);
            !w.empty())
          log::warning(w);
  }
  if (valid_) {
    eval_windows_ = deck.training.eval_windows;
    for (std::size_t i = 0; i < valid_->size(); ++i)
      eval_windows_ = std::min<std::int64_t>(
          eval_windows_, static_cast<std::int64_t>(valid_->dataset(i).num_windows(deck.model.seq_length)));
    // Every evaluation reads the same windows: a token outside the vocabulary is found here, in
    // the agreed construction, not between the collectives of an evaluation.
    check_eval_windows();
  }
  if constexpr (std::is_same<T, kx::fp16>::value) {
    const auto& t = deck.training;
    scaler_.emplace(LossScalerConfig{t.loss_scale_initial, t.loss_scale_growth_factor, t.loss_scale_backoff_factor,
                                     t.loss_scale_window, t.loss_scale_hysteresis, t.loss_scale_min});
  }
  if (deck.training.skip_spikes)
    spikes_.emplace(SpikeConfig{deck.training.spike_zscore, deck.training.spike_window});
  pipeline_.reserve(micro_batches());  // every activation slot allocated before the first step
  const int P = topo.layout().pipeline;
  if (micro_batches() < P && topo.world_rank() == 0)
    log::warning(fmt::format("{} micro-batch{} per step on {} pipeline stages: most stages idle most of the time "
                             "(pipeline bubble); use training.global_batch / (micro_batch * data) >= {}",
                             micro_batches(), micro_batches() == 1 ? "" : "es", P, P));
}

template <class T>
ParameterMemory TrainingRun<T>::parameter_memory() const {
  ParameterMemory m;
  const auto bytes = [](const auto& v) { return v.span() * sizeof(typename std::decay_t<decltype(v)>::value_type); };
  m.optimizer_shards = model_.optimizer_sharding().size;
  for (const auto& b : model_.buckets()) {
    m.parameters += b.used;  // not the distributed optimizer's padding
    m.weight += b.gathered ? bytes(b.value_shard) : bytes(b.values);
    if constexpr (model::Parameter<T>::has_master_copy) m.master += bytes(b.master);
    m.gradient += b.pooled ? bytes(b.grad_shard) : bytes(b.grads);
    m.optimizer += bytes(b.exp_avg) + bytes(b.exp_avg_sq);
  }
  m.gradient += model_.gradient_pool_bytes();
  m.weight += model_.gathered_weight_bytes();
  return m;
}

template <class T>
std::string TrainingRun<T>::memory_report() const {
  constexpr double MiB = 1 << 20;
  const ParameterMemory pm = parameter_memory();
  const auto per = [&](std::size_t bytes) { return static_cast<double>(bytes) / static_cast<double>(pm.parameters); };
  const auto& ws = model_.workspace();
  return fmt::format(
      "memory of this rank: {:.1f} MiB for {} parameters, {:g} bytes each ({} weights {:g}{}, fp32 gradients {:g}, "
      "AdamW moments {:g}{}); {:.1f} MiB activations and scratch: {:.1f} saved for backward ({} micro-batch{} in "
      "flight, recompute = {}{}), {:.1f} stage tensors, {:.1f} scratch shared by all layers",
      pm.total() / MiB, pm.parameters, pm.per_parameter(), kx::precision_name<T>(), per(pm.weight),
      pm.master > 0 ? fmt::format(", fp32 master {:g}", per(pm.master)) : std::string(), per(pm.gradient),
      per(pm.optimizer),
      pm.optimizer_shards > 1
          ? fmt::format("; distributed optimizer: master{}{} and moments sharded over {} data-parallel ranks",
                        model_.gathered_weight_bytes() > 0 ? ", weights" : "",
                        model_.gradient_slots() > 0 ? ", gradients" : "", pm.optimizer_shards)
          : std::string(),
      ws.total_bytes() / MiB, ws.bytes(model::BufferCategory::activation) / MiB,
      model_.activation_slots(), model_.activation_slots() == 1 ? "" : "es", model::recompute_name(model_.recompute()),
      model_.shape().splits_sequence() ? ", sequence parallel" : "", ws.bytes(model::BufferCategory::stage) / MiB,
      ws.bytes(model::BufferCategory::scratch) / MiB) +
         "\n" + measured_memory_summary();
}

template <class T>
double TrainingRun<T>::compute_gradients(std::int64_t step) {
  const kx::ExecSpace exec;
  {
    util::PhaseScope phase(util::Phase::optimizer);
    model_.zero_grad(exec);
  }
  // Gradients of the mean loss over the GLOBAL batch: every token's loss weighs 1/(B_global S),
  // so summing the data-parallel ranks' gradients gives the full gradient.
  // fp16: the loss is multiplied by the loss scale, so that small activation gradients stay
  // above fp16's smallest normal; the optimizer divides it out (a power of two: exact).
  float scale = 1.0f / static_cast<float>(tokens_per_step_) * static_cast<float>(scaler_ ? scaler_->scale() : 1.0);
  // Test hooks (base/test_hooks.hpp): a planted gradient spike, or NaN gradients from a step on.
  if (test_hooks().spike_at_step == step + 1) scale *= 1000.0f;
  if (test_hooks().nonfinite_from_step > 0 && step + 1 >= test_hooks().nonfinite_from_step)
    scale = std::numeric_limits<float>::quiet_NaN();
  // Tokens are checked where they are read (token_dataset.hpp: the vocabulary, a file cut under
  // the job), and the pipeline takes micro-batches between collectives: every micro-batch of this
  // rank is read first, agreed.
  util::note_host_wait(util::HostWait::host_scalar_reduce);  // the agreement's MPI_Allreduce
  const int M = micro_batches();
  const std::size_t rows = static_cast<std::size_t>(deck_.training.micro_batch) * deck_.model.seq_length;
  step_inputs_.resize(rows * static_cast<std::size_t>(M));
  step_targets_.resize(rows * static_cast<std::size_t>(M));
  parallel::on_every_rank(topo_.world(), [&] {
    for (int m = 0; m < M; ++m)
      sampler_->micro_batch(step, m, &step_inputs_[rows * m], &step_targets_[rows * m]);
  });
  // Once per micro-batch (the pipeline keeps it on the device until its backward).
  const auto sample = [&](int m, std::int32_t* inputs, std::int32_t* targets) {
    std::copy_n(&step_inputs_[rows * m], rows, inputs);
    std::copy_n(&step_targets_[rows * m], rows, targets);
  };
  // Data parallelism: a bucket's gradients are final once the LAST micro-batch's backward has
  // passed it; its all-reduce then runs while the backward goes on.
  // Sharded gradients: a pooled bucket is reduce-scattered after every micro-batch
  // (GradientReducer), its sequence-parallel sums taken before each.
  const auto bucket_done = [&](int m, std::size_t b) {
    const bool pooled = model_.buckets()[b].pooled;
    // Sequence parallelism: LayerNorm and row-parallel bias gradients summed over TP first.
    if (m == M - 1 || pooled) model_.sum_sequence_parallel_gradients(exec, b);
    util::PhaseScope phase(util::Phase::dp_comm);
    if (pooled)
      reducer_.reduce_scatter(exec, b, options_.overlap_grad_reduce);
    else if (options_.overlap_grad_reduce && m == M - 1)
      reducer_.launch(exec, b);
    else
      reducer_.progress();
  };
  const auto bucket_begin = [&](int, std::size_t b) {
    util::PhaseScope phase(util::Phase::dp_comm);  // it may wait for an earlier reduce-scatter
    reducer_.begin(exec, b);
  };
  // Test hook slow_rank (base/test_hooks.hpp): this rank's work takes longer; the others wait for
  // it in the step's communication.
  if (test_hooks().slow_rank == topo_.world_rank() && test_hooks().slow_rank_seconds > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(test_hooks().slow_rank_seconds));
  double loss_sum = pipeline_.run(exec, M, scale, sample, bucket_done, bucket_begin);
  {
    util::PhaseScope phase(util::Phase::dp_comm);
    reducer_.finish(exec);
  }
  // The tied word embedding: the first stage holds the embedding's part of its gradient, the
  // last stage the output layer's (or multi-token prediction's embeddings'); both end with the
  // sum, so both copies stay identical (with a distributed optimizer too: their buckets were
  // all-reduced, see GradientReducer).
  if (topo_.in_embedding_group() && model_.shares_word_embedding()) {
    util::PhaseScope phase(util::Phase::pipeline_wait);
    parallel::all_reduce(topo_.embedding(), exec, model_.word()->grad_vector(), parallel::ReduceOp::sum);
  }
  // The last stage has the loss; every rank reports it.
  loss_sum = parallel::all_reduce_scalar(topo_.pp(), loss_sum, parallel::ReduceOp::sum);
  loss_sum = parallel::all_reduce_scalar(topo_.dp_cp(), loss_sum, parallel::ReduceOp::sum);
  return loss_sum / static_cast<double>(tokens_per_step_);
}

template <class T>
StepResult TrainingRun<T>::step(std::int64_t step) {
  util::PhaseScope step_phase(util::Phase::other);  // what no inner phase claims
  model_.discard_expert_loads();  // the balancing counts this step's routing only
  const double loss = compute_gradients(step);
  return update(step, loss);
}

template <class T>
StepResult TrainingRun<T>::update(std::int64_t step, double loss) {
  const kx::ExecSpace exec;
  StepResult r;
  r.loss = loss;
  util::PhaseScope phase(util::Phase::optimizer);
  r.grad_norm = optimizer_.grad_norm(exec, topo_.tp(), topo_.pp());
  r.lr = schedule_.at(step);
  if (scaler_) {
    r.loss_scale = scaler_->scale();
    // The loss scale multiplies only the backward: a loss that is not finite comes from a forward
    // pass that left fp16's range, and would at every scale. Skipping such steps would walk the
    // scale down and train nothing (docs/design.md, "Mixed precision"): the run stops, as with
    // fp32 and bf16. The loss is a global reduction: every rank stops here.
    if (!std::isfinite(loss))
      throw parallel::AgreedError(fmt::format(
          "step {}: the loss is {} in fp16: the forward pass exceeds fp16's range (largest value 65504), which no "
          "loss scale changes: stopping the run (try bf16, or a lower optimizer.lr)",
          step + 1, loss));
    // An overflow anywhere skips the step everywhere. The norm already agrees across ranks for
    // an overflow in a sharded tensor before the DP reduction; a replicated tensor's squares are
    // not summed over TP, and DP replicas do not reduce the norm: one flag over the world.
    int overflow_flag = std::isfinite(r.grad_norm) ? 0 : 1;
    {
      const util::CommunicationWait timed(util::HostWait::host_scalar_reduce);
      TPTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &overflow_flag, 1, MPI_INT, MPI_MAX, topo_.world()));
    }
    const bool overflow = overflow_flag != 0;
    if (overflow && r.loss_scale <= scaler_->config().min)
      throw parallel::AgreedError(fmt::format(
          "step {}: the fp16 gradients overflow even at the smallest loss scale, {} (training.loss_scale_min = {}): "
          "stopping the run (try bf16, or a lower optimizer.lr)",
          step + 1, r.loss_scale, scaler_->config().min));
    scaler_->update(overflow);
    if (overflow) {
      r.skipped = true;
      return r;
    }
    r.grad_norm /= r.loss_scale;
  }
  if (spikes_) {
    // The loss and the norm are global reductions: every rank decides the same.
    r.skip_reason = spikes_->judge(r.loss, r.grad_norm);
    if (!r.skip_reason.empty()) {
      r.skipped = true;
      r.skipped_in_a_row = spikes_->skip();
      if (r.skipped_in_a_row >= deck_.training.max_skipped_steps)
        throw parallel::AgreedError(fmt::format(
            "step {}: {} steps in a row were skipped (training.max_skipped_steps = {}), the last because {}: "
            "stopping the run; its last checkpoint holds the weights before them (try a lower optimizer.lr)",
            step + 1, r.skipped_in_a_row, deck_.training.max_skipped_steps, r.skip_reason));
      return r;
    }
    spikes_->accept(r.loss, r.grad_norm);
  }
  check_finite(step + 1, r.loss, r.grad_norm);
  const double clip = deck_.training.grad_clip;
  // As PyTorch's clip_grad_norm_, folded into AdamW's reading of the gradients (with the loss
  // scale divided out).
  const double clip_factor = clip > 0 && r.grad_norm > clip ? clip / (r.grad_norm + 1e-6) : 1.0;
  const float grad_scale = static_cast<float>(clip_factor / r.loss_scale);
  optimizer_.step(exec, adamw_, r.lr, step + 1, grad_scale);
  if (const double rate = model_.shape().moe_bias_update_rate; rate > 0)
    model_.balance_expert_biases(exec, rate, topo_.dp_cp());
  return r;
}

template <class T>
std::map<std::string, std::int64_t> TrainingRun<T>::train_state() const {
  std::map<std::string, std::int64_t> out = spikes_ ? spikes_->state() : std::map<std::string, std::int64_t>{};
  if (!scaler_) return out;
  const LossScalerState s = scaler_->get_state();
  std::int64_t bits = 0;  // the scale exactly: /train attributes are int64
  static_assert(sizeof(bits) == sizeof(s.scale), "the loss scale is a double");
  std::memcpy(&bits, &s.scale, sizeof bits);
  out["loss_scale_bits"] = bits;
  out["loss_scale_growth_tracker"] = s.growth_tracker;
  out["loss_scale_hysteresis_tracker"] = s.hysteresis_tracker;
  return out;
}

template <class T>
void TrainingRun<T>::restore_train_state(const std::map<std::string, std::int64_t>& saved) {
  if (spikes_ && !spikes_->restore(saved) && topo_.world_rank() == 0)
    log::warning("the checkpoint holds no spike-detector window (it was written without training.skip_spikes): "
                 "spikes are judged again after a warm-up of training.spike_window steps");
  if (!scaler_) return;
  const auto bits = saved.find("loss_scale_bits");
  const auto growth = saved.find("loss_scale_growth_tracker");
  const auto hysteresis = saved.find("loss_scale_hysteresis_tracker");
  if (bits == saved.end() || growth == saved.end() || hysteresis == saved.end()) {
    log::warning("the checkpoint holds no fp16 loss-scaler state (it was not written by an fp16 run): the loss "
                 "scale starts again from training.loss_scale_initial");
    return;
  }
  LossScalerState s = scaler_->get_state();
  std::memcpy(&s.scale, &bits->second, sizeof s.scale);
  s.growth_tracker = growth->second;
  s.hysteresis_tracker = hysteresis->second;
  // What set_state would refuse, named by its attribute (the caller names the file).
  if (!(std::isfinite(s.scale) && s.scale > 0))
    throw std::invalid_argument(fmt::format("/train attribute loss_scale_bits = {} is the loss scale {}: expected a "
                                            "finite number > 0",
                                            bits->second, s.scale));
  if (s.growth_tracker < 0)
    throw std::invalid_argument(
        fmt::format("/train attribute loss_scale_growth_tracker = {}: expected an integer >= 0", s.growth_tracker));
  scaler_->set_state(s);
  if (const double now = scaler_->scale(); now != s.scale)
    log::infof("the checkpoint's loss scale {} is {}: the run continues at {}", s.scale,
               now > s.scale ? "below training.loss_scale_min" : "above the largest loss scale (2^64)", now);
}

template <class T>
void TrainingRun<T>::check_eval_windows() const {
  const int S = deck_.model.seq_length;
  for (std::size_t i = 0; i < valid_->size(); ++i)
    for (std::int64_t j = 0; j < eval_windows_; ++j)
      valid_->dataset(i).check_sequence(static_cast<std::size_t>(j) * S, S);
}

template <class T>
void TrainingRun<T>::count_draws(std::int64_t steps_done) {
  if (start_drawn_.empty()) start_drawn_.assign(train_->size(), 0);
  if (steps_done < drawn_steps_ || drawn_.empty()) {
    drawn_ = start_drawn_;
    drawn_steps_ = start_step_;
  }
  for (; drawn_steps_ < steps_done; ++drawn_steps_) sampler_->count_datasets(drawn_steps_, drawn_);
}

template <class T>
std::int64_t TrainingRun<T>::drawn_sequences() const {
  return start_sequences_ + (drawn_steps_ - start_step_) * deck_.training.global_batch;
}

template <class T>
io::BlendRecord TrainingRun<T>::data_record(std::int64_t steps_done) {
  count_draws(steps_done);
  io::BlendRecord r = train_->record();
  for (std::size_t i = 0; i < r.entries.size(); ++i) r.entries[i].drawn = drawn_[i];
  r.sequences = drawn_sequences();
  return r;
}

template <class T>
std::vector<std::string> TrainingRun<T>::resume_data_use(const io::BlendRecord& saved, std::int64_t step) {
  std::vector<std::string> changes;
  if (saved.empty()) {
    start_drawn_.assign(train_->size(), 0), start_step_ = 0, start_sequences_ = 0;
  } else {
    data::BlendResume r = data::resume_blend(saved, train_->record(), "data.train");
    changes = std::move(r.changes);
    start_drawn_ = std::move(r.drawn), start_step_ = step, start_sequences_ = r.sequences;
  }
  drawn_.clear();  // counted again from the new start
  return changes;
}

template <class T>
typename TrainingRun<T>::DataUse TrainingRun<T>::data_use(std::int64_t steps_done) {
  count_draws(steps_done);
  DataUse use;
  const auto total = static_cast<double>(drawn_sequences());
  for (std::size_t i = 0; i < drawn_.size(); ++i) {
    const auto n = static_cast<double>(drawn_[i]);
    use.share.push_back(total > 0 ? n / total : 0.0);
    use.epochs.push_back(n * deck_.model.seq_length / static_cast<double>(train_->dataset(i).size()));
  }
  return use;
}

template <class T>
std::vector<model::SublayerMetrics> TrainingRun<T>::take_sublayer_metrics() {
  model::StatisticSums s = model_.take_statistics();
  if (s.empty()) return {};  // alike on every rank: the same kinds count the same sums
  // The tensor ranks of a group compute the same statistics: summed over the stages and the data
  // x context ranks only.
  std::vector<double> v = s.flat();
  for (parallel::Communicator* group : {&topo_.pp(), &topo_.dp_cp()})
    if (group->size() > 1)
      TPTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_SUM,
                                      group->mpi_comm()));
  s.assign_flat(v);
  return model::sublayer_metrics(model_.shape(), s);
}

template <class T>
double TrainingRun<T>::evaluate() {
  if (!valid_ || eval_windows_ == 0) return std::nan("");
  // Read once on every rank before the evaluation's collectives, as a step's sequences are: a
  // file cut under the job since the start is one agreed error, not one rank's abort.
  parallel::on_every_rank(topo_.world(), [&] { check_eval_windows(); });
  eval_by_dataset_.clear();
  const model::StatisticsPaused not_training(model_);  // the kinds' statistics are the training steps'
  double loss = 0.0;
  for (std::size_t i = 0; i < valid_->size(); ++i) {
    eval_by_dataset_.push_back(
        train::evaluate(model_, valid_->dataset(i), eval_windows_, topo_.pp(), documents_of(deck_)));
    loss += valid_->share(i) * eval_by_dataset_.back();
  }
  return valid_->size() == 1 ? eval_by_dataset_.front() : loss;
}

#define TPTRAIN_TRAINING_INSTANCES(T)                                                                        \
  template class TrainingRun<T>;                                                                             \
  template double evaluate(model::GptModel<T>&, const data::TokenDataset&, std::int64_t, const Documents&);  \
  template double evaluate(model::GptModel<T>&, const data::TokenDataset&, std::int64_t,                     \
                           parallel::Communicator&, const Documents&);                                       \
  template double pipeline_forward(model::GptModel<T>&, parallel::Communicator&, const kx::ExecSpace&,       \
                                   const kernels::Tokens&, const kernels::Tokens*, std::int64_t);
TPTRAIN_TRAINING_INSTANCES(float)
TPTRAIN_TRAINING_INSTANCES(kx::bf16)
TPTRAIN_TRAINING_INSTANCES(kx::fp16)
#undef TPTRAIN_TRAINING_INSTANCES

}  // namespace tptrain::train
