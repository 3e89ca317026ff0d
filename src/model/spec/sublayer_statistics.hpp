// What a sublayer kind counts while it trains (a mixture of experts' auxiliary losses and expert
// loads), on its way to the log and metrics.jsonl through code that knows no kind: named sums,
// added over the micro-batches and blocks of a rank (TransformerLayer::take_statistics), then over
// the ranks (train::TrainingRun::take_sublayer_metrics), and turned into metrics by the kind that
// counted them (SublayerKind::metrics, sublayer_kind.hpp). Plain data: no Kokkos, no MPI, no io.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace tptrain::model {

struct StatisticSums {
  // In the order first added, which is the same on every rank (the same kinds count the same
  // sums), so that the ranks can add them as one flat vector.
  std::vector<std::pair<std::string, std::vector<double>>> sums;

  // The sums called `name`, `size` of them, zero when new.
  std::vector<double>& at(const std::string& name, std::size_t size) {
    for (auto& [key, values] : sums)
      if (key == name) {
        if (values.size() < size) values.resize(size, 0.0);
        return values;
      }
    sums.emplace_back(name, std::vector<double>(size, 0.0));
    return sums.back().second;
  }
  const std::vector<double>& get(const std::string& name) const {
    static const std::vector<double> none;
    for (const auto& [key, values] : sums)
      if (key == name) return values;
    return none;
  }
  void add(const StatisticSums& o) {
    for (const auto& [key, values] : o.sums) {
      std::vector<double>& mine = at(key, values.size());
      for (std::size_t i = 0; i < values.size(); ++i) mine[i] += values[i];
    }
  }
  bool empty() const { return sums.empty(); }

  // Every sum in one vector (for a reduction over the ranks), and back.
  std::vector<double> flat() const {
    std::vector<double> out;
    for (const auto& entry : sums) out.insert(out.end(), entry.second.begin(), entry.second.end());
    return out;
  }
  void assign_flat(const std::vector<double>& v) {
    std::size_t at_value = 0;
    for (auto& entry : sums)
      for (double& x : entry.second) x = v.at(at_value++);
  }
};

// One metric of metrics.jsonl (io/metrics.hpp writes it knowing no kind): its key, its values
// and how they are written.
struct MetricField {
  enum Form { number, integer, integers };
  std::string key;
  std::vector<double> values;  // one for a number or an integer, the list for integers
  Form form = number;
  int digits = 17;             // significant digits of a number
};

// A kind's metrics from its sums over every rank: the fields metrics.jsonl records and the
// clause the training log adds to the step's line.
struct SublayerMetrics {
  std::vector<MetricField> fields;
  std::string summary;
};

}  // namespace tptrain::model
