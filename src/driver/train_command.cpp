#include "src/driver/train_command.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "base/agreement.hpp"
#include "io/metrics.hpp"
#include "io/metrics_writer.hpp"
#include "io/path_text.hpp"
#include "io/requeue_marker.hpp"
#include "io/run_lock.hpp"
#include "io/writable_directory.hpp"
#include "src/checkpoint/checkpoint_writer.hpp"
#include "src/checkpoint/model_checkpoint.hpp"
#include "src/checkpoint/run_ownership.hpp"
#include "src/driver/commands.hpp"
#include "src/driver/multiple_choice.hpp"
#include "src/driver/precision_dispatch.hpp"
#include "src/parallel/device_wait_clock.hpp"
#include "src/train/memory_metrics.hpp"
#include "src/train/straggler_report.hpp"
#include "src/train/training_run.hpp"
#include "src/util/host_waits.hpp"
#include "src/util/log.hpp"
#include "src/util/stop_signal.hpp"

namespace tptrain::driver {

namespace {

using parallel::on_every_rank;

std::string format_duration(double seconds) {
  const long s = std::lround(seconds);
  return s >= 3600 ? fmt::format("{}h{:02}m", s / 3600, s / 60 % 60) : fmt::format("{}m{:02}s", s / 60, s % 60);
}

// "0.80 / 0.20 of sequences, 0.01 / 0.30 epochs": a blend's use so far, for the progress line.
template <class DataUse>
std::string data_use_text(const DataUse& use) {
  return fmt::format("{:.2f} of sequences, {:.3g} epochs", fmt::join(use.share, " / "), fmt::join(use.epochs, " / "));
}

// A resume's data.train against its checkpoint's record (src/data/blend_resume.hpp): the same
// on every rank, so a refusal is every rank's. A changed blend is refused unless
// data.allow_blend_change: a deck edited by accident between two requeues would otherwise
// change the data in silence, and a deliberate change (a curriculum) is one key away.
template <class T>
void check_blend(const io::Deck& deck, train::TrainingRun<T>& run, const io::CheckpointMeta& meta,
                 const std::string& checkpoint) {
  const std::vector<std::string> changes = run.resume_data_use(meta.blend, meta.step);
  if (meta.blend.empty()) {
    log::warning(fmt::format("checkpoint {} holds no record of data.train (/train/blend; an older tptrain wrote it): "
                             "whether data.train changed since cannot be told; data_share and data_epochs are "
                             "counted from step 0 with this deck's data.train",
                             io::display_path(checkpoint)));
    return;
  }
  if (changes.empty()) return;
  const std::string list = fmt::format("  {}", fmt::join(changes, "\n  "));
  if (!deck.data.allow_blend_change)
    throw std::runtime_error(fmt::format(
        "data.train differs from the blend that checkpoint {} records:\n{}\nthe data would change from step {} on; "
        "set data.allow_blend_change = true to resume with this data.train, or restore the checkpoint's",
        io::display_path(checkpoint), list, meta.step + 1));
  log::warning(fmt::format("data.train differs from the blend that checkpoint {} records (data.allow_blend_change "
                           "= true):\n{}\nthis data.train draws from step {} on; data_share and data_epochs keep "
                           "the {} sequences drawn before",
                           io::display_path(checkpoint), list, meta.step + 1, meta.blend.sequences));
}

template <class T>
int train_as(const io::Deck& deck, const parallel::Topology& topo) {
  const auto& tc = deck.training;
  // The multiple-choice tasks, read and tokenized once, before anything is written: a bad line
  // stops the run now, not at the first scoring hours later.
  std::unique_ptr<MultipleChoiceTasks> tasks;
  if (!tc.tasks.empty() && tc.tasks_interval > 0)
    on_every_rank(topo.world(), [&] {
      tasks = std::make_unique<MultipleChoiceTasks>(load_multiple_choice_tasks(deck, tc.tasks));
    });
  else if (!tc.tasks.empty())
    log::warning("training.tasks is set but training.tasks_interval = 0: the tasks are not scored");
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
  // The checkpoint this run resumes from, if asked for and present; a run that starts from step 0
  // instead claims the folders first, before the model is built (run_ownership.hpp).
  const std::string latest =
      deck.checkpoint.resume ? checkpoint::newest_checkpoint(topo.world(), deck.checkpoint.dir) : "";
  if (latest.empty())
    on_every_rank(topo.world(), [&] {
      if (topo.world_rank() == 0) checkpoint::claim_run_directories(deck);
    });

  std::unique_ptr<train::TrainingRun<T>> run;
  on_every_rank(topo.world(), [&] { run = std::make_unique<train::TrainingRun<T>>(deck, topo); });

  const model::GptShape shape = run->model().shape();
  std::int64_t params = 0;  // logical elements, each counted once (sum over the pipeline stages)
  for (auto* p : run->model().unique_parameters()) params += (p->replicated() ? 1 : p->tp_size) * p->local_size();
  params = parallel::all_reduce_scalar(topo.pp(), params, parallel::ReduceOp::sum);
  log::infof("model: {}, {} layers, hidden {}, heads {} (kv {}), ffn {}, seq {}, vocab {} (padded {}){}: {:.2f} M "
             "parameters",
             shape.architecture, shape.layers, shape.hidden, shape.heads,
             shape.kv_head_count(), shape.ffn_hidden, shape.seq_length, shape.vocab_size, shape.padded_vocab(),
             shape.tie_embeddings ? "" : ", untied", params / 1e6);
  log::infof("training: {} steps of {} sequences ({} micro-batches of {} per data-parallel rank), {} tokens/step",
             tc.steps, tc.global_batch, run->micro_batches(), tc.micro_batch, run->tokens_per_step());
  log::info(run->memory_report());
  if (const int P = topo.layout().pipeline; P > 1) {
    const double bytes = static_cast<double>(run->model().activation_bytes());
    const double peak = parallel::all_reduce_scalar(topo.pp(), bytes, parallel::ReduceOp::max);
    const int v = run->model().chunks();
    log::infof("pipeline: {} stages of {} layers{}, {} schedule{}, bubble (p - 1)/(v m) = {:.1f} %; stage 0 keeps the "
               "activations of {} micro-batches in flight ({:.2f} MiB with its scratch); largest stage {:.2f} MiB",
               P, shape.layers / P, v > 1 ? fmt::format(" in {} chunks", v) : std::string(),
               schedule_name(run->pipeline().schedule()), v > 1 ? " interleaved" : "",
               100.0 * (P - 1) / (double(v) * run->micro_batches()), run->model().activation_slots(),
               bytes / (1 << 20), peak / (1 << 20));
  }
  if (!deck.data.valid.empty() && run->eval_windows() == 0)
    log::warning("data.valid is shorter than one evaluation window: no evaluation");

  // Resumption: the newest complete checkpoint of checkpoint.dir, if asked for and present.
  // Weights, AdamW moments and the step are all that is needed: the data order and the
  // learning rate are pure functions of (seed, step). The blend's record (/train/blend) only
  // carries the draw counts on and tells a changed data.train (check_blend).
  std::int64_t first_step = 0;
  checkpoint::RunIdentity identity;
  if (deck.checkpoint.resume) {
    if (!latest.empty()) {
      io::CheckpointMeta meta;
      on_every_rank(topo.world(), [&] { meta = checkpoint::load_weights(run->model(), topo, latest, true); });
      identity = checkpoint::resumed_run_identity(topo.world(), meta.train);
      first_step = meta.step;
      log::infof("resuming from {} (step {}, written with tensor {} x pipeline {} x data {})", latest, meta.step,
                 meta.tp, meta.pp, meta.dp);
      on_every_rank(topo.world(), [&] {
        try {
          run->restore_train_state(meta.train);
        } catch (const std::invalid_argument& e) {
          throw std::runtime_error("reading checkpoint " + io::display_path(latest) + ": " + e.what());
        }
      });
      const auto seed = meta.train.find("seed");
      if (seed != meta.train.end() && seed->second != static_cast<std::int64_t>(tc.seed))
        log::warning(fmt::format("the checkpoint was trained with training.seed = {}, this run has {}: the "
                                 "data order after step {} differs from the original run",
                                 seed->second, tc.seed, meta.step));
      if (first_step >= tc.steps) {
        log::infof("the checkpoint is at step {} >= training.steps = {}: nothing to do", first_step, tc.steps);
        return 0;
      }
      on_every_rank(topo.world(), [&] { check_blend(deck, *run, meta, latest); });
    } else {
      log::infof("checkpoint.resume: no checkpoint in {}, starting from step 0", deck.checkpoint.dir);
    }
  }
  if (latest.empty()) identity = checkpoint::new_run_identity(topo.world());
  // A start from other weights (fine-tuning): the weights only; the step, the AdamW moments, the
  // loss scale and the data order start afresh. A run that resumes has its own newer weights.
  if (const std::string& init = deck.training.init_from; !init.empty()) {
    if (!latest.empty()) {
      log::infof("training.init_from = {} is not used: the run resumes from {}", init, latest);
    } else {
      io::CheckpointMeta meta;
      on_every_rank(topo.world(), [&] {
        try {
          meta = checkpoint::load_weights(run->model(), topo, init, false);
        } catch (const std::exception& e) {
          throw std::runtime_error("training.init_from = " + io::display_path(init) + ": " + e.what());
        }
      });
      log::infof("starting from the weights of {} (step {} of the run that wrote it, tensor {} x pipeline {} x data {}): "
                 "step 0, fresh optimizer state", init, meta.step, meta.tp, meta.pp, meta.dp);
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
  // The straggler report: per log interval, each rank's own work per step (the interval less
  // its host's waits for other ranks), gathered once.
  train::StragglerReport stragglers(topo.world(), tc.straggler_factor, tc.straggler_intervals, rank_device());
  parallel::time_device_waits();  // NCCL: the device's waits for other ranks count as the host's do
  double window_waits = util::CommunicationClock::instance().seconds();
  std::int64_t window_steps = 0;
  std::int64_t skipped = 0;  // fp16 steps skipped since the last metrics line
  std::int64_t skipped_in_run = 0;
  std::int64_t end_step = tc.steps;  // earlier when a stop signal ends the run
  int stopped_by = 0;                // that signal
  // checkpoint.async: written by a thread while the steps go on (src/checkpoint/checkpoint_writer.hpp).
  checkpoint::CheckpointWriter writer(deck, topo, identity);
  const auto write_checkpoint = [&](std::int64_t done) {  // collective: the checkpoint after `done` steps
    std::map<std::string, std::int64_t> state = run->train_state();
    state[checkpoint::kRunIdAttribute] = identity.id;
    writer.save(run->model(), done, done * run->tokens_per_step(), state, run->data_record(done));
  };
  for (std::int64_t step = first_step; step < tc.steps; ++step) {
    // Not agreed on: a step is full of collectives, so a failure on some ranks only cannot wait
    // for an agreement; the top level aborts the job on it. The stops every rank sees (a
    // non-finite loss, an fp16 overflow at the smallest scale) are AgreedErrors.
    const train::StepResult r = run->step(step);
    window_tokens += run->tokens_per_step();
    ++window_steps;
    const bool spike = r.skipped && !r.skip_reason.empty();  // training.skip_spikes
    if (spike) {
      log::warning(fmt::format("step {}: skipped ({} in a row, training.max_skipped_steps = {}), the weights are not "
                               "updated: {}",
                               step + 1, r.skipped_in_a_row, tc.max_skipped_steps, r.skip_reason));
    } else if (r.skipped) {
      ++skipped;
      ++skipped_in_run;
      log::infof("step {}: fp16 gradients overflowed at loss scale {:g}: step skipped, the loss scale is now {:g}",
                 step + 1, r.loss_scale, run->loss_scaler()->scale());
    }

    const bool last = step + 1 == tc.steps;
    // A spike-skipped step always gets its record ("skipped": true).
    const bool log_now = (step + 1) % tc.log_interval == 0 || step == 0 || last || spike;
    const bool eval_now = run->eval_windows() > 0 && tc.eval_interval > 0 &&
                          ((step + 1) % tc.eval_interval == 0 || last);
    const bool tasks_now = tasks && ((step + 1) % tc.tasks_interval == 0 || last);
    if (log_now || eval_now || tasks_now) {
      kx::ExecSpace().fence();
      parallel::collect_device_waits();  // into the communication clock, before it is read
      const auto now = std::chrono::steady_clock::now();
      const double window_s = std::chrono::duration<double>(now - window_start).count();
      const double tok_s = window_tokens / window_s;
      const double waited = util::CommunicationClock::instance().seconds() - window_waits;
      const train::StepTimes times =
          stragglers.gather(std::max(0.0, window_s - waited) / static_cast<double>(window_steps));
      const double elapsed = std::chrono::duration<double>(now - start).count();
      const double eta =
          elapsed / static_cast<double>(step + 1 - first_step) * static_cast<double>(tc.steps - step - 1);
      io::MetricsRecord rec;
      rec.step = step + 1;
      rec.loss = r.loss;
      rec.lr = r.lr;
      rec.grad_norm = r.grad_norm;
      rec.tokens_per_s = tok_s;
      if (spike) rec.skip_reason = r.skip_reason;
      rec.step_times = io::MetricsRecord::StepTimes{times.max_rank, times.max_s, times.median_s};
      const std::string norm = spike       ? fmt::format("{:.3f} (skipped)", r.grad_norm)
                               : r.skipped ? std::string("overflow")
                                           : fmt::format("{:.3f}", r.grad_norm);
      std::string line = fmt::format("step {:>6}/{} | loss {:.4f} | lr {:.3e} | grad norm {} | {:.0f} tok/s | ETA {}",
                                     step + 1, tc.steps, r.loss, r.lr, norm, tok_s, format_duration(eta));
      if (run->loss_scaler() != nullptr) {
        rec.loss_scale = r.loss_scale;
        rec.skipped = skipped;
        line += fmt::format(" | loss scale {:g} | skipped {}", r.loss_scale, skipped);
        skipped = 0;
      }
      if (topo.world_size() > 1)
        line += fmt::format(" | slowest rank {} {:.3f} s/step (median {:.3f})", times.max_rank, times.max_s,
                            times.median_s);
      const typename train::TrainingRun<T>::DataUse use = run->data_use(step + 1);
      rec.data_share = use.share;
      rec.data_epochs = use.epochs;
      if (use.share.size() > 1) line += " | data " + data_use_text(use);
      if (eval_now) {
        rec.eval_loss = run->evaluate();
        line += fmt::format(" | eval loss {:.4f}", *rec.eval_loss);
        if (run->eval_loss_by_dataset().size() > 1) {
          rec.eval_loss_by_dataset = run->eval_loss_by_dataset();
          line += fmt::format(" ({:.4f})", fmt::join(rec.eval_loss_by_dataset, " / "));
        }
      }
      if (tasks_now) {
        const model::StatisticsPaused not_training(run->model());
        const MultipleChoiceResult mc =
            score_multiple_choice(run->model(), topo, *tasks, train::documents_of(deck));
        rec.mc = io::MetricsRecord::MultipleChoice{mc.accuracy(), mc.accuracy_norm(), mc.examples};
        line += fmt::format(" | mc accuracy {:.4f} (norm {:.4f}, {} examples)", mc.accuracy(), mc.accuracy_norm(),
                            mc.examples);
      }
      for (const model::SublayerMetrics& m : run->take_sublayer_metrics()) {  // collective
        rec.sublayer_fields.insert(rec.sublayer_fields.end(), m.fields.begin(), m.fields.end());
        if (!m.summary.empty()) line += " | " + m.summary;
      }
      log::info(line);
      rec.fields = train::measured_memory_fields(topo.world());  // collective: every rank logs the same steps
      on_metrics([&] { metrics->write(rec); });
      if (const std::string w = stragglers.warning(times); !w.empty()) log::warning(w);
      window_tokens = 0;
      window_steps = 0;
      window_start = std::chrono::steady_clock::now();
      window_waits = util::CommunicationClock::instance().seconds();
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
  // The run ends, or is requeued, only with its last checkpoint written: an asynchronous write
  // still in flight is waited for (and its failure is this run's, as a synchronous one's).
  if (writer.in_flight() >= 0 && topo.world_rank() == 0)
    log::infof("waiting for the checkpoint write of step {} to finish", writer.in_flight());
  writer.wait();
  on_metrics([&] { metrics->close(); });
  if (stopped_by != 0) {
    if (topo.world_rank() == 0) {
      const std::string why = io::write_requeue_marker(
          deck.run.dir, fmt::format("{}: checkpoint of step {} written ({}); resume with checkpoint.resume = true",
                                    util::signal_name(stopped_by), end_step,
                                    checkpoint::checkpoint_path(deck.checkpoint.dir, end_step)));
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
  log::info("memory at the end: " + train::measured_memory_summary());
  // fp16 only: the stops above end a run that cannot train; a run this short can still have
  // skipped every step while the scale came down from training.loss_scale_initial.
  if (skipped_in_run > 0 && skipped_in_run == end_step - first_step)
    log::warning(fmt::format("no step of this run updated the weights: all {} overflowed in fp16 and were skipped "
                             "(the loss scale is now {}); a longer run lowers the scale further, down to "
                             "training.loss_scale_min = {}",
                             skipped_in_run, run->loss_scaler()->scale(), tc.loss_scale_min));
  if (topo.layout().pipeline > 1 && end_step > first_step) {
    const auto& pp = run->pipeline().stats();
    const double steps = static_cast<double>(end_step - first_step);
    log::infof("pipeline stage 0: waited {:.2f} ms per step for its neighbours (bubble and transfers)",
               1e3 * pp.p2p_wait_s / steps);
  }
  if (const auto& dp = run->reduction_stats(); dp.steps > 0 && dp.messages > 0)
    log::infof("data-parallel gradient {}: {} buckets, {:.2f} MB per step; rank 0 waited {:.2f} ms per step "
               "for it after the backward (the rest overlapped the backward; includes waiting for slower replicas)",
               deck.optimizer.shard == "gradients" || deck.optimizer.shard == "parameters"
                   ? "reduce-scatter per micro-batch (sharded gradients)"
               : deck.optimizer.distributed        ? "reduce-scatter (distributed optimizer)"
                                                   : "all-reduce",
               dp.messages / dp.steps, static_cast<double>(dp.bytes) / static_cast<double>(dp.steps) / 1e6,
               1e3 * (dp.wait_s + dp.slot_wait_s) / static_cast<double>(dp.steps));
  if (const auto& g = run->model().gather_stats(); g.gathers > 0 && end_step > first_step) {
    const double steps = static_cast<double>(end_step - first_step);
    log::infof("sharded parameters: {} weight all-gathers, {:.2f} MB per step; rank 0 waited {:.2f} ms per step "
               "for them (the rest overlapped the previous module's compute)",
               g.gathers / std::int64_t(end_step - first_step), static_cast<double>(g.bytes) / steps / 1e6,
               1e3 * g.wait_s / steps);
  }
  return end_step < tc.steps ? util::kRequeueExitStatus : 0;
}

}  // namespace

int run_training(const io::Deck& deck, const parallel::Topology& topo) {
  return with_precision(deck.training.precision, [&](auto t) { return train_as<decltype(t)>(deck, topo); });
}

}  // namespace tptrain::driver
