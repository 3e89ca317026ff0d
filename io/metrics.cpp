#include "io/metrics.hpp"

#include "io/deck_text.hpp"

#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <stdexcept>

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

MetricsWriter::MetricsWriter(const std::string& dir, std::int64_t resumed_step) {
  if (dir.empty()) return;
  std::filesystem::create_directories(dir);
  path_ = (std::filesystem::path(dir) / "metrics.jsonl").string();
  std::string kept;
  if (resumed_step > 0) {
    std::ifstream in(path_);
    std::string line;
    const std::string key = "{\"step\": ";
    while (std::getline(in, line)) {
      if (line.rfind(key, 0) != 0) continue;
      if (std::stoll(line.substr(key.size())) <= resumed_step) kept += line + '\n';
    }
  }
  out_.open(path_, std::ios::trunc);
  out_ << kept;
  if (!out_) throw std::runtime_error("cannot open " + path_ + " for writing");
}

void MetricsWriter::write(const MetricsRecord& r) {
  if (!out_.is_open()) return;
  out_ << to_json(r) << '\n';
  out_.flush();
}

}  // namespace tptrain::io
