// A weighted blend of token datasets: data.train or data.valid written as an array of
// {path, weight} tables (io/data_sources.hpp). Megatron's, nanotron's and torchtitan's blends:
// sequence g of a step comes from dataset i with probability weight_i / sum of the weights,
// with every weight first scaled by the power of two that brings the largest into [0.5, 1), so
// that weights near the largest double (1e308 + 1e308 = Inf) give the shares they say (and all
// others exactly the shares of the unscaled sums); drawn by the batch sampler from (seed, step,
// g) alone (src/data/batch_sampler.hpp), so a blend is as layout-invariant and as exact on
// resume as one dataset.
//
// The datasets of a blend hold one kind of token: the same format (byte tokens of .txt files or
// llm.c shards), one shard version and one recorded tokenizer. A blend mixing them is refused at
// open, naming both entries: their ids would mean different text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "io/checkpoint_blend.hpp"
#include "io/data_sources.hpp"
#include "src/data/token_dataset.hpp"

namespace tptrain::data {

class DataBlend {
 public:
  // Opens every source of `sources` (TokenDataset::open; `key` is "data.train" or "data.valid",
  // for messages). Throws DataError naming the entry for what open throws, and for entries that
  // mix formats, shard versions or recorded tokenizers; std::invalid_argument for no source.
  static DataBlend open(const io::DataSources& sources, const std::string& key, int vocab_size);
  // One dataset of weight 1 (synthetic tokens).
  explicit DataBlend(TokenDataset single);

  std::size_t size() const { return datasets_.size(); }
  const TokenDataset& dataset(std::size_t i) const { return datasets_.at(i); }
  // weight_i / sum of the weights.
  double share(std::size_t i) const { return cumulative_.at(i) - (i > 0 ? cumulative_[i - 1] : 0.0); }
  // "data.train" for one dataset, "data.train[1] {path = ..., weight = ...}" in a blend.
  const std::string& name(std::size_t i) const { return names_.at(i); }
  // The running sums of the shares, the last exactly 1: dataset i takes the draws x in
  // [cumulative[i-1], cumulative[i]).
  const std::vector<double>& cumulative() const { return cumulative_; }
  // What a checkpoint records of the blend (io/checkpoint_blend.hpp): each dataset's path (the
  // deck's, resolved), tokens and weight (as the deck writes it); no sequences drawn yet.
  io::BlendRecord record() const;

 private:
  DataBlend() = default;
  std::vector<TokenDataset> datasets_;
  std::vector<double> cumulative_;
  std::vector<std::string> names_;
  std::vector<std::string> paths_;
  std::vector<double> weights_;
};

// The dataset a uniform 64-bit draw `u` picks: the first i with x < cumulative[i], x = the top
// 53 bits of u as a double in [0, 1). Exact and the same on every platform (IEEE doubles).
std::size_t pick_dataset(const std::vector<double>& cumulative, std::uint64_t u);

}  // namespace tptrain::data
