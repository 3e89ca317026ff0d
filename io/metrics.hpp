// <run.dir>/metrics.jsonl: one JSON object per logged step (docs/design.md, "Run outputs"), written by rank 0
// (io/metrics_writer.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "src/model/spec/sublayer_statistics.hpp"

namespace tptrain::io {

struct MetricsRecord {
  std::int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0;
  std::optional<double> eval_loss;
  // training.tasks on its steps: the multiple-choice accuracy, per byte, and the examples scored
  // ("mc_accuracy", "mc_accuracy_norm", "mc_examples").
  struct MultipleChoice {
    double accuracy = 0, accuracy_norm = 0;
    std::int64_t examples = 0;
  };
  std::optional<MultipleChoice> mc;
  // fp16 runs: the loss scale of the step and how many steps since the previous record were
  // skipped because their gradients overflowed.
  std::optional<double> loss_scale;
  std::optional<std::int64_t> skipped;
  // Further integer fields, written last in this order under the caller's names (io/ does not
  // know what they mean; the trainer's are the measured memory, mem_<category>_bytes, ...).
  std::vector<std::pair<std::string, std::int64_t>> fields;
  // training.skip_spikes: this step did not update the weights, and why ("skipped": true,
  // "skip_reason": ...; an fp16 run's count above is then "overflow_skipped").
  std::optional<std::string> skip_reason;
  // The straggler report over the log interval (src/train/straggler_report.hpp): the slowest
  // rank, its step time and the median over the ranks, in seconds of their own work per step.
  struct StepTimes {
    std::int64_t max_rank = 0;
    double max_s = 0, median_s = 0;
  };
  std::optional<StepTimes> step_times;
  // What the block's sublayer kinds measured over the interval (src/model/spec/sublayer_statistics.hpp),
  // in the kinds' order; a mixture of experts gives "moe_aux_loss", "moe_z_loss",
  // "moe_load_max_over_mean", "moe_dropped" and "moe_tokens_per_expert" (a list, expert by expert).
  // The writer knows no kind: each field says its key and how it is written.
  std::vector<model::MetricField> sublayer_fields;
  // Per dataset of data.train (one entry without a blend): the share of the sequences drawn so
  // far and the epochs (tokens drawn / the dataset's tokens); "data_share", "data_epochs".
  std::vector<double> data_share, data_epochs;
  // A data.valid blend's loss per dataset ("eval_loss_by_dataset"), with eval_loss their weighted mean.
  std::vector<double> eval_loss_by_dataset;
};

// JSON line of a record: {"step": 10, "loss": ..., "lr": ..., "grad_norm": ..., "tokens_per_s": ...[, "eval_loss": ...]
// [, "mc_accuracy": ..., "mc_accuracy_norm": ..., "mc_examples": ...]
// [, "loss_scale": ..., "skipped": ...][, "<field>": <integer>, ...]}. A value that is not finite (the
// loss or grad_norm of an fp16 step that overflowed) is null (io/json_line.hpp).
std::string to_json(const MetricsRecord& r);

}  // namespace tptrain::io
