// Helpers of the Hugging Face tests (tests/train/test_hf_*.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "src/checkpoint/hf_tensors.hpp"

namespace tptrain::test {

// Each Hugging Face piece of `tensors` taken from its checkpoint tensor and written back (to_hf,
// from_hf): true when every checkpoint element is rebuilt, by exactly its piece. Every element of
// every checkpoint tensor differs, so a piece read from or written to another row shows.
inline bool hf_pieces_go_back(const std::vector<checkpoint::HfTensor>& tensors) {
  std::map<std::string, std::vector<float>> original, rebuilt;
  for (const checkpoint::HfTensor& t : tensors) {
    std::vector<float>& x = original[t.checkpoint_name];
    std::uint64_t n = 1;
    for (const std::uint64_t d : t.checkpoint_shape) n *= d;
    for (std::uint64_t i = x.size(); i < n; ++i) x.push_back(static_cast<float>(i) + 0.5f * static_cast<float>(original.size()));
  }
  for (const checkpoint::HfTensor& t : tensors) {
    const std::vector<float>& x = original.at(t.checkpoint_name);
    std::vector<float>& back = rebuilt[t.checkpoint_name];
    back.resize(x.size(), -1.0f);
    checkpoint::from_hf(t, checkpoint::to_hf(t, x), back);
  }
  return rebuilt == original;
}

}  // namespace tptrain::test
