#include "io/metrics.hpp"

#include "io/deck_text.hpp"

#include <cmath>
#include <fmt/format.h>

namespace tptrain::io {

std::string to_json(const MetricsRecord& r) {
  // 17 significant digits: the curve in the file is the curve of the run, bit for bit.
  const std::string grad_norm = std::isfinite(r.grad_norm) ? fmt::format("{:.17g}", r.grad_norm) : "null";
  std::string s = fmt::format(R"({{"step": {}, "loss": {:.17g}, "lr": {:.17g}, "grad_norm": {}, "tokens_per_s": {:.1f})",
                              r.step, r.loss, r.lr, grad_norm, r.tokens_per_s);
  if (r.eval_loss) s += fmt::format(R"(, "eval_loss": {:.17g})", *r.eval_loss);
  if (r.loss_scale) s += fmt::format(R"(, "loss_scale": {:.17g})", *r.loss_scale);
  if (r.skipped) s += fmt::format(R"(, "skipped": {})", *r.skipped);
  for (const auto& [name, value] : r.fields) s += fmt::format(", {}: {}", json_string(name), value);
  return s + "}";
}

}  // namespace tptrain::io
