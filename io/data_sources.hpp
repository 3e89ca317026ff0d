// What data.train and data.valid name: one token path (a file, folder or glob: io/data_paths.hpp),
// or a weighted blend of them, written as a TOML array of tables
//     train = [{path = "web/train_*.bin", weight = 0.7}, {path = "code/", weight = 0.3}]
// (or [[data.train]] tables). Each sequence of a blend comes from source i with probability
// weight_i / sum of the weights (src/data/batch_sampler.hpp). One source is the single path of
// before, whatever its weight: it is printed as a plain path and samples as one.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tptrain::io {

struct DataSource {
  std::string path;  // absolute once the deck is read
  double weight = 1.0;
};

struct DataSources {
  std::vector<DataSource> sources;  // empty: none ("")

  DataSources() = default;
  // One source of weight 1 ("" = none), so that a plain path reads and assigns as before.
  DataSources(std::string path) {  // NOLINT(google-explicit-constructor): a path is one source
    if (!path.empty()) sources.push_back({std::move(path), 1.0});
  }
  DataSources(const char* path) : DataSources(std::string(path)) {}  // NOLINT(google-explicit-constructor)

  bool empty() const { return sources.empty(); }
  std::size_t size() const { return sources.size(); }
  // More than one source: sampled by weight, logged per source.
  bool is_blend() const { return sources.size() > 1; }
  // The one path ("" when empty); for a blend, its entries as the deck writes them. Messages only.
  std::string text() const;

  friend bool operator==(const DataSources& a, const DataSources& b);
  friend bool operator!=(const DataSources& a, const DataSources& b) { return !(a == b); }
  // A single source equals its path (tests and callers compare with a path).
  friend bool operator==(const DataSources& a, const std::string& path) { return a == DataSources(path); }
};

// "data.train[1] {path = "code/", weight = 0.3}" for source i of the key `key`; just `key` when
// the value is a single path.
std::string source_name(const std::string& key, const DataSources& d, std::size_t i);

}  // namespace tptrain::io
