#include "io/metrics.hpp"

#include "io/json_line.hpp"

#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <stdexcept>

namespace tptrain::io {

std::string to_json(const MetricsRecord& r) {
  // 17 significant digits: the curve in the file is the curve of the run, bit for bit.
  JsonObject o;
  o.integer("step", r.step).number("loss", r.loss, digits(17)).number("lr", r.lr, digits(17));
  o.number("grad_norm", r.grad_norm, digits(17)).number("tokens_per_s", r.tokens_per_s, fixed(1));
  if (r.eval_loss) o.number("eval_loss", *r.eval_loss, digits(17));
  if (r.loss_scale) o.number("loss_scale", *r.loss_scale, digits(17));
  if (r.skipped) o.integer("skipped", *r.skipped);
  for (const auto& [name, value] : r.fields) o.integer(name, value);
  return o.text();
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
