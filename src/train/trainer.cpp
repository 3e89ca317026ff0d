#include "src/train/trainer.hpp"

#include <chrono>
#include <cmath>
#include <random>

#include "base/agreement.hpp"
#include "io/json_line.hpp"
#include "io/metrics.hpp"
#include "io/metrics_writer.hpp"
#include "io/requeue_marker.hpp"
#include "io/run_lock.hpp"
#include "io/writable_directory.hpp"
#include "src/log.hpp"
#include "src/train/memory_metrics.hpp"
#include "src/train/model_checkpoint.hpp"
#include "src/train/precision_dispatch.hpp"
#include "src/train/training_run.hpp"
#include "src/util/stop_signal.hpp"

namespace tptrain::train {

namespace {

using parallel::on_every_rank;

model::PipelineStage stage_of(const parallel::Topology& topo) {
  return model::PipelineStage{topo.coords().pp, topo.layout().pipeline};
}

std::string format_duration(double seconds) {
  const long s = std::lround(seconds);
  return s >= 3600 ? fmt::format("{}h{:02}m", s / 3600, s / 60 % 60) : fmt::format("{}m{:02}s", s / 60, s % 60);
}

template <class T>
int train_as(const io::Deck& deck, const parallel::Topology& topo) {
  const auto& tc = deck.training;
  // Before any work: the output directories are writable, so that hours of training never end
  // in a checkpoint that cannot be written. Rank 0 creates them and owns them for the run; then
  // the other ranks, which write their slabs of every checkpoint, try checkpoint.dir too.
  std::unique_ptr<io::RunLock> lock;
  on_every_rank(topo.world(), [&] {
    if (topo.world_rank() != 0) return;
    io::prepare_writable_directory(deck.run.dir, "run.dir");
    io::prepare_writable_directory(deck.checkpoint.dir, "checkpoint.dir");
    lock = std::make_unique<io::RunLock>(std::vector<std::string>{deck.run.dir, deck.checkpoint.dir}, log::warning);
    io::remove_requeue_marker(deck.run.dir);  // only a stop of this run may leave one
  });
  on_every_rank(topo.world(), [&] {
    if (topo.world_rank() != 0) io::prepare_writable_directory(deck.checkpoint.dir, "checkpoint.dir");
  });

  std::unique_ptr<TrainingRun<T>> run;
  on_every_rank(topo.world(), [&] { run = std::make_unique<TrainingRun<T>>(deck, topo); });

  const model::GptShape shape = run->model().shape();
  std::int64_t params = 0;  // logical elements, each counted once (sum over the pipeline stages)
  for (auto* p : run->model().unique_parameters()) params += (p->replicated() ? 1 : p->tp_size) * p->local_size();
  params = parallel::all_reduce_scalar(topo.pp(), params, parallel::ReduceOp::sum);
  log::infof("model: {} layers, hidden {}, heads {}, ffn {}, seq {}, vocab {} (padded {}): {:.2f} M parameters",
             shape.layers, shape.hidden, shape.heads, shape.ffn_hidden, shape.seq_length, shape.vocab_size,
             shape.padded_vocab(), params / 1e6);
  log::infof("training: {} steps of {} sequences ({} micro-batches of {} per data-parallel rank), {} tokens/step",
             tc.steps, tc.global_batch, run->micro_batches(), tc.micro_batch, run->tokens_per_step());
  log::info(run->memory_report());
  if (const int P = topo.layout().pipeline; P > 1) {
    const double bytes = static_cast<double>(run->model().activation_bytes());
    const double peak = parallel::all_reduce_scalar(topo.pp(), bytes, parallel::ReduceOp::max);
    log::infof("pipeline: {} stages of {} layers, {} schedule; stage 0 keeps the activations of {} micro-batches in "
               "flight ({:.2f} MiB with its scratch); largest stage {:.2f} MiB",
               P, shape.layers / P, schedule_name(run->pipeline().schedule()), run->model().activation_slots(),
               bytes / (1 << 20), peak / (1 << 20));
  }
  if (!deck.data.valid.empty() && run->eval_windows() == 0)
    log::warning("data.valid is shorter than one evaluation window: no evaluation");

  // Resumption: the newest complete checkpoint of checkpoint.dir, if asked for and present.
  // Weights, AdamW moments and the step are all that is needed: the data order and the
  // learning rate are pure functions of (seed, step).
  std::int64_t first_step = 0;
  if (deck.checkpoint.resume) {
    const std::string latest = newest_checkpoint(topo.world(), deck.checkpoint.dir);
    if (!latest.empty()) {
      io::CheckpointMeta meta;
      on_every_rank(topo.world(), [&] { meta = load_weights(run->model(), topo, latest, true); });
      first_step = meta.step;
      run->restore_train_state(meta.train);
      log::infof("resuming from {} (step {}, written with tensor {} x pipeline {} x data {})", latest, meta.step,
                 meta.tp, meta.pp, meta.dp);
      const auto seed = meta.train.find("seed");
      if (seed != meta.train.end() && seed->second != static_cast<std::int64_t>(tc.seed))
        log::warning(fmt::format("the checkpoint was trained with training.seed = {}, this run has {}: the "
                                 "data order after step {} differs from the original run",
                                 seed->second, tc.seed, meta.step));
      if (first_step >= tc.steps) {
        log::infof("the checkpoint is at step {} >= training.steps = {}: nothing to do", first_step, tc.steps);
        return 0;
      }
    } else {
      log::infof("checkpoint.resume: no checkpoint in {}, starting from step 0", deck.checkpoint.dir);
    }
  }

  std::unique_ptr<io::MetricsWriter> metrics;
  on_every_rank(topo.world(), [&] {
    metrics = std::make_unique<io::MetricsWriter>(topo.world_rank() == 0 ? deck.run.dir : "", first_step, log::warning);
  });
  // A record that cannot be written (a full disk) stops the run, as a checkpoint that cannot
  // be written does: records are never lost in silence, and the resumed run logs every step
  // after its checkpoint again.
  const auto on_metrics = [&](auto&& f) {
    on_every_rank(topo.world(), [&] {
      try {
        f();
      } catch (const io::MetricsWriteError& e) {
        throw std::runtime_error(fmt::format("{}: the run stops here; once there is room, run again with "
                                             "checkpoint.resume = true (the steps after the newest checkpoint "
                                             "are trained and logged again)",
                                             e.what()));
      }
    });
  };

  const auto start = std::chrono::steady_clock::now();
  auto window_start = start;
  std::int64_t window_tokens = 0;
  std::int64_t skipped = 0;  // fp16 steps skipped since the last metrics line
  std::int64_t end_step = tc.steps;  // earlier when a stop signal ends the run
  int stopped_by = 0;                // that signal
  const auto write_checkpoint = [&](std::int64_t done) {  // collective: the checkpoint after `done` steps
    save_checkpoint(run->model(), deck, topo, done, done * run->tokens_per_step(), run->train_state());
    prune_checkpoints(topo.world(), deck.checkpoint.dir, deck.checkpoint.keep);
  };
  for (std::int64_t step = first_step; step < tc.steps; ++step) {
    // Not agreed on: a step is full of collectives, so a failure on some ranks only (one that
    // is not an AgreedError, like a non-finite loss) cannot wait for an agreement; the top level
    // aborts the job on it.
    const StepResult r = run->step(step);
    window_tokens += run->tokens_per_step();
    if (r.skipped) {
      ++skipped;
      log::infof("step {}: fp16 gradients overflowed at loss scale {:g}: step skipped, the loss scale is now {:g}",
                 step + 1, r.loss_scale, run->loss_scaler()->scale());
    }

    const bool last = step + 1 == tc.steps;
    const bool log_now = (step + 1) % tc.log_interval == 0 || step == 0 || last;
    const bool eval_now = run->eval_windows() > 0 && tc.eval_interval > 0 &&
                          ((step + 1) % tc.eval_interval == 0 || last);
    if (log_now || eval_now) {
      kx::ExecSpace().fence();
      const auto now = std::chrono::steady_clock::now();
      const double tok_s = window_tokens / std::chrono::duration<double>(now - window_start).count();
      const double elapsed = std::chrono::duration<double>(now - start).count();
      const double eta =
          elapsed / static_cast<double>(step + 1 - first_step) * static_cast<double>(tc.steps - step - 1);
      io::MetricsRecord rec{step + 1, r.loss, r.lr, r.grad_norm, tok_s, std::nullopt, std::nullopt, std::nullopt, {}};
      const std::string norm = r.skipped ? std::string("overflow") : fmt::format("{:.3f}", r.grad_norm);
      std::string line = fmt::format("step {:>6}/{} | loss {:.4f} | lr {:.3e} | grad norm {} | {:.0f} tok/s | ETA {}",
                                     step + 1, tc.steps, r.loss, r.lr, norm, tok_s, format_duration(eta));
      if (run->loss_scaler() != nullptr) {
        rec.loss_scale = r.loss_scale;
        rec.skipped = skipped;
        line += fmt::format(" | loss scale {:g} | skipped {}", r.loss_scale, skipped);
        skipped = 0;
      }
      if (eval_now) {
        rec.eval_loss = run->evaluate();
        line += fmt::format(" | eval loss {:.4f}", *rec.eval_loss);
      }
      log::info(line);
      rec.fields = measured_memory_fields(topo.world());  // collective: every rank logs the same steps
      on_metrics([&] { metrics->write(rec); });
      window_tokens = 0;
      window_start = std::chrono::steady_clock::now();
    }
    const bool checkpoint_now = last || (deck.checkpoint.interval > 0 && (step + 1) % deck.checkpoint.interval == 0);
    if (checkpoint_now) write_checkpoint(step + 1);
    // Asked to stop (util/stop_signal.hpp): after the last step the run is complete anyway. A
    // signal received during start-up or an evaluation is seen here too, so the run stops after
    // step 1 at the latest and every stop leaves a checkpoint newer than the one it resumed from.
    if (last) continue;
    if (const int signal = parallel::agree_on_stop_signal(topo.world(), util::stop_signal_received())) {
      if (!checkpoint_now) write_checkpoint(step + 1);
      stopped_by = signal;
      end_step = step + 1;
      break;
    }
  }
  on_metrics([&] { metrics->close(); });
  if (stopped_by != 0) {
    if (topo.world_rank() == 0) {
      const std::string why = io::write_requeue_marker(
          deck.run.dir, fmt::format("{}: checkpoint of step {} written ({}); resume with checkpoint.resume = true",
                                    util::signal_name(stopped_by), end_step,
                                    checkpoint_path(deck.checkpoint.dir, end_step)));
      if (!why.empty())
        log::warning("cannot write the requeue marker " + why + ": the job scripts requeue on exit status " +
                     std::to_string(util::kRequeueExitStatus) + " only");
    }
    log::infof("received {}: checkpoint of step {} written; exiting with status {} so the job is requeued",
               util::signal_name(stopped_by), end_step, util::kRequeueExitStatus);
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log::infof("trained steps {}..{} in {:.1f} s ({:.0f} tokens/s)", first_step + 1, end_step, total,
             static_cast<double>((end_step - first_step) * run->tokens_per_step()) / total);
  log::info("memory at the end: " + measured_memory_summary());
  if (topo.layout().pipeline > 1 && end_step > first_step) {
    const auto& pp = run->pipeline().stats();
    const double steps = static_cast<double>(end_step - first_step);
    log::infof("pipeline stage 0: waited {:.2f} ms per step for its neighbours (bubble and transfers)",
               1e3 * pp.p2p_wait_s / steps);
  }
  if (const auto& dp = run->reduction_stats(); dp.steps > 0 && dp.messages > 0)
    log::infof("data-parallel gradient {}: {} buckets, {:.2f} MB per step; rank 0 waited {:.2f} ms per step "
               "for it after the backward (the rest overlapped the backward; includes waiting for slower replicas)",
               deck.optimizer.distributed ? "reduce-scatter (distributed optimizer)" : "all-reduce",
               dp.messages / dp.steps, static_cast<double>(dp.bytes) / static_cast<double>(dp.steps) / 1e6,
               1e3 * dp.wait_s / static_cast<double>(dp.steps));
  return end_step < tc.steps ? util::kRequeueExitStatus : 0;
}

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
    model = std::make_unique<Model>(shape, deck.training.micro_batch, topo.tp(), deck.training.seed, stage_of(topo));
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

template <class T>
int generate_as(const io::Deck& deck, const parallel::Topology& topo, const std::string& checkpoint,
                const SampleOptions& o) {
  using Model = model::GptModel<T>;
  const model::GptShape shape = shape_of(deck);
  const kx::ExecSpace exec;
  std::unique_ptr<Model> model_ptr;
  on_every_rank(topo.world(), [&] {
    model_ptr = std::make_unique<Model>(shape, 1, topo.tp(), deck.training.seed, stage_of(topo));
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
    int next = 0;
    if (model.is_last_stage()) {  // the logits are on the last pipeline stage
      Kokkos::deep_copy(exec, row, Kokkos::subview(model.local_logits(), last, Kokkos::ALL()));
      parallel::all_gather(model.tp(), exec, row, full);  // one row of logits, for sampling only
      auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), full);
      std::vector<std::pair<double, int>> cand;
      for (int v = 0; v < shape.vocab_size; ++v) cand.emplace_back(h(v), v);  // padding excluded
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

// Each command runs the model in the deck's training.precision; checkpoints hold fp32 master
// weights, so any of them evaluates or samples from any checkpoint.
int run_training(const io::Deck& deck, const parallel::Topology& topo) {
  return with_precision(deck.training.precision, [&](auto t) { return train_as<decltype(t)>(deck, topo); });
}

int run_eval(const io::Deck& deck, const parallel::Topology& topo, const std::string& checkpoint,
             const std::string& data, int windows) {
  return with_precision(deck.training.precision,
                        [&](auto t) { return eval_as<decltype(t)>(deck, topo, checkpoint, data, windows); });
}

int run_generate(const io::Deck& deck, const parallel::Topology& topo, const std::string& checkpoint,
                 const SampleOptions& options) {
  return with_precision(deck.training.precision,
                        [&](auto t) { return generate_as<decltype(t)>(deck, topo, checkpoint, options); });
}

}  // namespace tptrain::train
