#include "io/metrics.hpp"

#include "io/json_line.hpp"

#include <cmath>
#include <fmt/format.h>

namespace tptrain::io {

std::string to_json(const MetricsRecord& r) {
  // 17 significant digits: the curve in the file is the curve of the run, bit for bit.
  JsonObject o;
  o.integer("step", r.step).number("loss", r.loss, digits(17)).number("lr", r.lr, digits(17));
  o.number("grad_norm", r.grad_norm, digits(17)).number("tokens_per_s", r.tokens_per_s, fixed(1));
  if (r.eval_loss) o.number("eval_loss", *r.eval_loss, digits(17));
  if (!r.eval_loss_by_dataset.empty()) o.numbers("eval_loss_by_dataset", r.eval_loss_by_dataset, digits(17));
  if (r.mc) {
    o.number("mc_accuracy", r.mc->accuracy, digits(17)).number("mc_accuracy_norm", r.mc->accuracy_norm, digits(17));
    o.integer("mc_examples", r.mc->examples);
  }
  if (r.loss_scale) o.number("loss_scale", *r.loss_scale, digits(17));
  if (r.skip_reason) {
    o.boolean("skipped", true).string("skip_reason", *r.skip_reason);
    if (r.skipped) o.integer("overflow_skipped", *r.skipped);
  } else if (r.skipped) {
    o.integer("skipped", *r.skipped);
  }
  if (r.step_times) {
    o.integer("step_time_max_rank", r.step_times->max_rank);
    o.number("step_time_max_s", r.step_times->max_s, digits(6));
    o.number("step_time_median_s", r.step_times->median_s, digits(6));
  }
  if (!r.data_share.empty()) {
    o.numbers("data_share", r.data_share, digits(6));
    o.numbers("data_epochs", r.data_epochs, digits(6));
  }
  for (const model::MetricField& f : r.sublayer_fields) {
    switch (f.form) {
      case model::MetricField::number: o.number(f.key, f.values.at(0), digits(f.digits)); break;
      case model::MetricField::integer: o.integer(f.key, static_cast<std::int64_t>(f.values.at(0))); break;
      case model::MetricField::integers: {
        std::vector<std::int64_t> v;
        for (const double x : f.values) v.push_back(static_cast<std::int64_t>(x));
        o.integers(f.key, v);
        break;
      }
    }
  }
  for (const auto& [name, value] : r.fields) o.integer(name, value);
  return o.text();
}

}  // namespace tptrain::io
