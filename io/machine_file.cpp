#include "io/machine_file.hpp"

#include "io/deck_text.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

namespace tptrain::io {

namespace {

// "machine.toml:12: [device] peak_tflops_bf16": where a key is, for messages.
std::string where(const std::string& source, const toml::node& n, const std::string& key) {
  const auto line = n.source().begin.line;
  return line > 0 ? fmt::format("{}:{}: {}", source, line, key) : fmt::format("{}: {}", source, key);
}

// One table's keys: each known key read by its setter; unknown and missing keys are errors.
class TableReader {
 public:
  TableReader(const std::string& source, const toml::table& t, std::string name)
      : source_(source), table_(t), name_(std::move(name)) {}

  void number(const char* key, double& out, bool required, double least, bool strictly) {
    known_.insert(key);
    const toml::node* n = table_.get(key);
    if (!n) {
      if (required) missing(key, "a number");
      return;
    }
    std::optional<double> v;
    if (auto f = n->as_floating_point()) v = f->get();
    if (auto i = n->as_integer()) v = double(i->get());
    if (!v) throw std::invalid_argument(fmt::format("{}: expected a number", where(source_, *n, full(key))));
    if (!std::isfinite(*v) || (strictly ? !(*v > least) : !(*v >= least)))
      throw std::invalid_argument(fmt::format("{} = {}: expected a number {} {:g}", where(source_, *n, full(key)), *v,
                                              strictly ? ">" : ">=", least));
    out = *v;
  }
  // A number in (0, 1] (`what`: a fraction of the peak) or, `zero_allowed`, in [0, 1].
  void unit_interval(const char* key, double& out, bool required, bool zero_allowed, const char* what) {
    number(key, out, required, 0, !zero_allowed);
    if (const toml::node* n = table_.get(key); n && out > 1)
      throw std::invalid_argument(fmt::format("{} = {}: expected {}, in {}0, 1]", where(source_, *n, full(key)), out,
                                              what, zero_allowed ? "[" : "("));
  }
  void fraction(const char* key, double& out, bool required) {
    unit_interval(key, out, required, false, "a fraction of the peak");
  }
  void integer(const char* key, int& out, bool required) {
    known_.insert(key);
    const toml::node* n = table_.get(key);
    if (!n) {
      if (required) missing(key, "a positive integer");
      return;
    }
    const auto i = n->as_integer();
    if (!i || i->get() < 1 || i->get() > 1 << 30)
      throw std::invalid_argument(fmt::format("{}: expected a positive integer", where(source_, *n, full(key))));
    out = static_cast<int>(i->get());
  }
  void text(const char* key, std::string& out, bool required) {
    known_.insert(key);
    const toml::node* n = table_.get(key);
    if (!n) {
      if (required) missing(key, "a string");
      return;
    }
    const auto s = n->as_string();
    if (!s) throw std::invalid_argument(fmt::format("{}: expected a string", where(source_, *n, full(key))));
    out = s->get();
  }
  void skip(const char* key) { known_.insert(key); }
  // After every key was read: any other key is unknown.
  void finish() const {
    for (const auto& [k, n] : table_)
      if (!known_.count(std::string(k.str())))
        throw std::invalid_argument(fmt::format("{}: unknown key (known: {})", where(source_, n, full(std::string(k.str()))),
                                                known_list()));
  }

 private:
  std::string full(const std::string& key) const { return name_ + "." + key; }
  std::string known_list() const {
    std::string s;
    for (const std::string& k : known_) s += (s.empty() ? "" : ", ") + k;
    return s;
  }
  [[noreturn]] void missing(const char* key, const char* what) const {
    throw std::invalid_argument(fmt::format("{}: {}: missing (expected {})", source_, full(key), what));
  }
  const std::string& source_;
  const toml::table& table_;
  std::string name_;
  std::set<std::string> known_;
};

const toml::table& section(const std::string& source, const toml::table& root, const char* name) {
  const toml::node* n = root.get(name);
  if (!n) throw std::invalid_argument(fmt::format("{}: [{}]: missing section", source, name));
  const toml::table* t = n->as_table();
  if (!t) throw std::invalid_argument(fmt::format("{}: expected a table [{}]", where(source, *n, name), name));
  return *t;
}

}  // namespace

MachineFile parse_machine_file(const std::string& text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(text, std::string_view{source});
  } catch (const toml::parse_error& e) {
    throw std::invalid_argument(fmt::format("{}:{}: {}", source, e.source().begin.line, e.description()));
  }
  for (const auto& [k, n] : root) {
    const std::string key(k.str());
    if (key != "machine" && key != "device" && key != "node" && key != "network" && key != "gemm")
      throw std::invalid_argument(
          fmt::format("{}: unknown section (known: machine, device, node, network, gemm)", where(source, n, key)));
  }
  MachineFile m;
  m.path = source;
  {
    TableReader r(source, section(source, root, "machine"), "machine");
    r.text("name", m.name, true);
    r.text("source", m.source, true);
    r.finish();
  }
  {
    TableReader r(source, section(source, root, "device"), "device");
    r.text("name", m.device_name, true);
    r.number("peak_tflops_bf16", m.peak_tflops_bf16, true, 0, true);
    r.number("peak_tflops_fp16", m.peak_tflops_fp16, true, 0, true);
    r.number("peak_tflops_fp32", m.peak_tflops_fp32, true, 0, true);
    r.number("memory_gib", m.memory_gib, true, 0, true);
    r.number("memory_bandwidth_gbs", m.memory_bandwidth_gbs, true, 0, true);
    r.integer("compute_units", m.compute_units, true);
    r.number("kernel_overhead_us", m.kernel_overhead_us, false, 0, false);
    r.number("kernel_bandwidth_gbs", m.kernel_bandwidth_gbs, false, 0, false);
    r.number("optimizer_bandwidth_gbs", m.optimizer_bandwidth_gbs, false, 0, false);
    r.finish();
  }
  {
    TableReader r(source, section(source, root, "node"), "node");
    r.integer("devices", m.devices, true);
    r.number("link_bandwidth_gbs", m.link_bandwidth_gbs, true, 0, true);
    r.number("link_latency_us", m.link_latency_us, true, 0, false);
    r.number("collective_bandwidth_gbs", m.collective_bandwidth_gbs, false, 0, false);
    r.unit_interval("communication_host_share", m.communication_host_share, false, true, "a share");
    r.unit_interval("rank_time_share", m.rank_time_share, false, false, "a share of a core");
    r.finish();
  }
  {
    TableReader r(source, section(source, root, "network"), "network");
    r.number("bandwidth_gbs", m.network_bandwidth_gbs, true, 0, true);
    r.number("latency_us", m.network_latency_us, true, 0, false);
    r.finish();
  }
  {
    const toml::table& gemm = section(source, root, "gemm");
    TableReader r(source, gemm, "gemm");
    r.fraction("max_efficiency", m.max_efficiency, true);
    r.integer("tile_m", m.tile_m, true);
    r.integer("tile_n", m.tile_n, true);
    r.fraction("attention_efficiency", m.attention_efficiency, false);
    r.skip("measured");
    r.skip("measured_attention");
    r.finish();
    // Each row of [[gemm.<key>]]: its precision checked, the rest read by `read`.
    const auto rows_of = [&](const char* key, auto&& read) {
      const toml::node* n = gemm.get(key);
      if (!n) return;
      const std::string what = std::string("gemm.") + key;
      const toml::array* rows = n->as_array();
      if (!rows || !rows->is_array_of_tables())
        throw std::invalid_argument(fmt::format("{}: expected [[{}]] tables", where(source, *n, what), what));
      for (const toml::node& row : *rows) {
        TableReader e(source, *row.as_table(), what);
        std::string precision;
        e.text("precision", precision, true);
        if (precision != "bf16" && precision != "fp16" && precision != "fp32")
          throw std::invalid_argument(fmt::format("{} = \"{}\": expected \"bf16\", \"fp16\" or \"fp32\"",
                                                  where(source, *row.as_table()->get("precision"), what + ".precision"),
                                                  precision));
        read(e, precision);
        e.finish();
      }
    };
    rows_of("measured", [&](TableReader& e, const std::string& precision) {
      MeasuredGemm g;
      g.precision = precision;
      e.number("m", g.m, true, 1, false);
      e.number("n", g.n, true, 1, false);
      e.number("k", g.k, true, 1, false);
      e.fraction("efficiency", g.efficiency, true);
      m.measured.push_back(g);
    });
    rows_of("measured_attention", [&](TableReader& e, const std::string& precision) {
      MeasuredAttention a;
      a.precision = precision;
      e.number("length", a.length, true, 1, false);
      e.fraction("efficiency", a.efficiency, true);
      m.measured_attention.push_back(a);
    });
  }
  return m;
}

MachineFile read_machine_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument(fmt::format("{}: cannot read the machine file", path));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_machine_file(text.str(), path);
}

// ---- the writer -------------------------------------------------------------------------------

namespace writer {

// Each line of `note` as a comment line.
std::string comment(const std::string& note) {
  std::string out;
  std::size_t from = 0;
  while (from < note.size()) {
    std::size_t to = note.find('\n', from);
    if (to == std::string::npos) to = note.size();
    out += "# " + note.substr(from, to - from) + "\n";
    from = to + 1;
  }
  return out;
}

// A TOML float always (3.0, not 3: a reader may insist on the type), 6 significant digits.
std::string num(double x) {
  std::string s = fmt::format("{:.6g}", x);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

}  // namespace writer

std::string machine_file_toml(const MachineFile& m) {
  using writer::comment;
  using writer::num;
  std::string t;
  t += "[machine]\n";
  t += "name = " + toml_string(m.name) + "\n";
  t += "source = " + toml_string(m.source) + "\n\n";
  t += comment(m.device_note);
  t += "[device]\n";
  t += "name = " + toml_string(m.device_name) + "\n";
  t += "peak_tflops_bf16 = " + num(m.peak_tflops_bf16) + "\n";
  t += "peak_tflops_fp16 = " + num(m.peak_tflops_fp16) + "\n";
  t += "peak_tflops_fp32 = " + num(m.peak_tflops_fp32) + "\n";
  t += "memory_gib = " + num(m.memory_gib) + "\n";
  t += "memory_bandwidth_gbs = " + num(m.memory_bandwidth_gbs) + "\n";
  t += fmt::format("compute_units = {}\n", m.compute_units);
  if (m.kernel_overhead_us > 0) t += "kernel_overhead_us = " + num(m.kernel_overhead_us) + "\n";
  if (m.kernel_bandwidth_gbs > 0) t += "kernel_bandwidth_gbs = " + num(m.kernel_bandwidth_gbs) + "\n";
  if (m.optimizer_bandwidth_gbs > 0) t += "optimizer_bandwidth_gbs = " + num(m.optimizer_bandwidth_gbs) + "\n";
  t += "\n";
  t += comment(m.node_note);
  t += "[node]\n";
  t += fmt::format("devices = {}\n", m.devices);
  t += "link_bandwidth_gbs = " + num(m.link_bandwidth_gbs) + "\n";
  t += "link_latency_us = " + num(m.link_latency_us) + "\n";
  if (m.collective_bandwidth_gbs > 0) t += "collective_bandwidth_gbs = " + num(m.collective_bandwidth_gbs) + "\n";
  if (m.communication_host_share > 0) t += "communication_host_share = " + num(m.communication_host_share) + "\n";
  if (m.rank_time_share < 1) t += "rank_time_share = " + num(m.rank_time_share) + "\n";
  t += "\n";
  t += comment(m.network_note);
  t += "[network]\n";
  t += "bandwidth_gbs = " + num(m.network_bandwidth_gbs) + "\n";
  t += "latency_us = " + num(m.network_latency_us) + "\n\n";
  t += comment(m.gemm_note);
  t += "[gemm]\n";
  t += "max_efficiency = " + num(m.max_efficiency) + "\n";
  t += fmt::format("tile_m = {}\ntile_n = {}\n", m.tile_m, m.tile_n);
  if (m.attention_efficiency > 0) t += "attention_efficiency = " + num(m.attention_efficiency) + "\n";
  for (const MeasuredGemm& g : m.measured) {
    t += "\n";
    if (!g.comment.empty()) t += comment(g.comment);
    t += "[[gemm.measured]]\n";
    t += "precision = " + toml_string(g.precision) + "\n";
    t += fmt::format("m = {}\nn = {}\nk = {}\n", static_cast<long long>(g.m), static_cast<long long>(g.n),
                     static_cast<long long>(g.k));
    t += "efficiency = " + num(g.efficiency) + "\n";
  }
  for (const MeasuredAttention& a : m.measured_attention) {
    t += "\n";
    if (!a.comment.empty()) t += comment(a.comment);
    t += "[[gemm.measured_attention]]\n";
    t += "precision = " + toml_string(a.precision) + "\n";
    t += fmt::format("length = {}\n", static_cast<long long>(a.length));
    t += "efficiency = " + num(a.efficiency) + "\n";
  }
  return t;
}

}  // namespace tptrain::io
