// Whole tensors held on the host by the checkpoint-file tests, and the TensorShards that write
// or read them: rank r of n holds rows [r·rows/n, (r+1)·rows/n) of every tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/checkpoint_file.hpp"

namespace tptrain::test {

struct Tensor {
  std::string name;
  std::vector<std::uint64_t> shape;
  std::vector<float> values;  // the full tensor, row-major
};

inline std::vector<io::TensorShard> row_shards(std::vector<Tensor>& ts, int rank = 0, int ranks = 1) {
  std::vector<io::TensorShard> shards;
  for (Tensor& t : ts) {
    const std::uint64_t rows = t.shape[0];
    const std::uint64_t row = t.values.size() / rows;
    const std::uint64_t lo = rows * static_cast<std::uint64_t>(rank) / static_cast<std::uint64_t>(ranks);
    const std::uint64_t hi = rows * static_cast<std::uint64_t>(rank + 1) / static_cast<std::uint64_t>(ranks);
    io::TensorShard s;
    s.name = t.name;
    s.global_shape = t.shape;
    io::Hyperslab h;
    h.start.assign(t.shape.size(), 0);
    h.count = t.shape;
    h.start[0] = lo;
    h.count[0] = hi - lo;
    s.slabs = {h};
    s.data = t.values.data() + lo * row;
    shards.push_back(s);
  }
  return shards;
}

}  // namespace tptrain::test
