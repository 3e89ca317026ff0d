#include "src/data/data_blend.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "io/path_text.hpp"

namespace tptrain::data {

namespace {

// The kind of token a dataset holds, for the blend's one-kind rule.
std::string kind_of(const TokenDataset& d) {
  if (d.shard_version() == 0) return "byte tokens (.txt)";
  std::string s = describe_version(d.shard_version());
  if (d.vocabulary().recorded()) s += ", " + describe(d.vocabulary());
  return s;
}

}  // namespace

DataBlend::DataBlend(TokenDataset single) {
  datasets_.push_back(std::move(single));
  cumulative_ = {1.0};
  names_ = {"data"};
  paths_ = {datasets_.front().path()};
  weights_ = {1.0};
}

DataBlend DataBlend::open(const io::DataSources& sources, const std::string& key, int vocab_size) {
  if (sources.empty()) throw std::invalid_argument("tptrain: DataBlend::open: " + key + " names no data");
  DataBlend b;
  // Scaled by the power of two 2^-e that brings the largest weight into [0.5, 1): no sum of the
  // terms overflows (it is below the number of entries), and a power of two scales exactly, so
  // every share is the one the unscaled sums give wherever those do not overflow.
  double largest = 0.0;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const double w = sources.sources[i].weight;
    if (!(std::isfinite(w) && w > 0))  // the deck's rule; here for callers that build sources themselves
      throw std::invalid_argument(fmt::format("tptrain: DataBlend::open: {}: weight {}: expected a finite weight > 0",
                                              io::source_name(key, sources, i), w));
    largest = std::max(largest, w);
  }
  int exponent = 0;
  std::frexp(largest, &exponent);
  double total = 0.0;
  for (const io::DataSource& s : sources.sources) total += std::ldexp(s.weight, -exponent);
  double running = 0.0;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const std::string name = io::source_name(key, sources, i);
    try {
      b.datasets_.push_back(TokenDataset::open(sources.sources[i].path, vocab_size));
    } catch (const DataError& e) {
      if (!sources.is_blend()) throw;
      throw DataError(fmt::format("{}: {}", name, e.what()));
    }
    running += std::ldexp(sources.sources[i].weight, -exponent);
    b.cumulative_.push_back(running / total);
    b.names_.push_back(name);
    b.paths_.push_back(sources.sources[i].path);
    b.weights_.push_back(sources.sources[i].weight);
    const TokenDataset& first = b.datasets_.front();
    const TokenDataset& d = b.datasets_.back();
    const bool same_vocabulary = !first.vocabulary().recorded() || !d.vocabulary().recorded() ||
                                 first.vocabulary().tokenizer == d.vocabulary().tokenizer;
    if (d.shard_version() != first.shard_version() || !same_vocabulary)
      throw DataError(fmt::format("{} holds {}, but {} holds {}: a blend holds one kind of token (tokenize every "
                                  "entry with one tokenizer)",
                                  name, kind_of(d), b.names_.front(), kind_of(first)));
  }
  b.cumulative_.back() = 1.0;  // whatever the rounding of the running sums
  return b;
}

io::BlendRecord DataBlend::record() const {
  io::BlendRecord r;
  for (std::size_t i = 0; i < datasets_.size(); ++i)
    r.entries.push_back({paths_[i], static_cast<std::int64_t>(datasets_[i].size()), weights_[i], 0});
  return r;
}

std::size_t pick_dataset(const std::vector<double>& cumulative, std::uint64_t u) {
  const double x = static_cast<double>(u >> 11) * 0x1p-53;
  for (std::size_t i = 0; i + 1 < cumulative.size(); ++i)
    if (x < cumulative[i]) return i;
  return cumulative.size() - 1;
}

}  // namespace tptrain::data
