// Deterministic sampling of training sequences, independent of the parallel layout.
//
// Sequence g (0 <= g < global_batch) of optimizer step `step` starts at
//     offset(seed, step, g) = mulhi64(h, N),   N = size - seq_length  (number of valid starts)
//     h = mix(mix(mix(seed) ^ uint64(step)) ^ uint64(g))
// where mix is the splitmix64 step (x += 0x9E3779B97F4A7C15, then the splitmix64 finaliser)
// and mulhi64(h, N) = floor(h * N / 2^64), so offset is uniform in [0, size - seq_length - 1]
// (bias < N / 2^64) and identical on every platform and standard library. The sequence covers
// tokens [offset, offset + seq_length]: inputs the first S, targets the last S.
//
// `size` and the offsets are those of the whole dataset: for a set of shards, of the stream of
// every shard in name order (token_dataset.hpp), so a sequence may run from one shard into the
// next, and a dataset that is one file samples exactly as before shards existed.
//
// A blend (src/data/data_blend.hpp) first draws the dataset of the sequence from the same hash:
//     dataset(seed, step, g) = pick_dataset(cumulative shares, mix(h ^ kBlendSalt))
// and the offset is then mulhi64(h, N_dataset). With one dataset there is no draw, and the
// offsets are those of before blends existed.
//
// Nothing depends on what was sampled before: a step's batch is a pure function of
// (seed, step), so resuming at step k only needs k, and every (tensor, pipeline, data) layout
// sees the same sequences in the same global order.
//
// Data-parallel rank d of D takes global sequences [d*global_batch/D, (d+1)*global_batch/D);
// micro-batch m of that share takes the next micro_batch sequences:
//     g = d*global_batch/D + m*micro_batch + row,   0 <= row < micro_batch.
#pragma once

#include <cstddef>
#include <cstdint>

#include <vector>

#include "src/data/data_blend.hpp"
#include "src/data/token_dataset.hpp"

namespace tptrain::data {

class BatchSampler {
 public:
  // Keeps a reference to `data`, which must outlive the sampler.
  // Throws DataError if the dataset has fewer than seq_length + 1 tokens, if a size is not
  // positive, if dp_rank is outside [0, dp_size), or if global_batch is not a multiple of
  // micro_batch * dp_size.
  BatchSampler(const TokenDataset& data, int seq_length, int global_batch, int micro_batch,
               int dp_rank, int dp_size, std::uint64_t seed);
  // The same over a blend (which must outlive the sampler); the size check names the dataset.
  BatchSampler(const DataBlend& blend, int seq_length, int global_batch, int micro_batch,
               int dp_rank, int dp_size, std::uint64_t seed);

  // Gradient-accumulation steps: global_batch / (micro_batch * dp_size).
  int micro_batches_per_step() const { return micro_batches_per_step_; }

  // Fills inputs and targets, each micro_batch * seq_length ints, row-major
  // [micro_batch, seq_length]; targets are the inputs shifted by one token.
  // Throws DataError if step < 0 or m is outside [0, micro_batches_per_step()), and what the
  // dataset's reads throw (a token >= vocab_size, a file cut under the job): the trainer reads
  // every micro-batch of a step in a phase all ranks agree on, before the step's collectives.
  void micro_batch(std::int64_t step, int m, std::int32_t* inputs, std::int32_t* targets) const;

  // Start of global sequence global_index of `step` (see the formula above); exposed for tests.
  // Throws DataError if step < 0 or global_index is outside [0, global_batch).
  std::size_t sequence_offset(std::int64_t step, int global_index) const;
  // The dataset of the blend that global sequence global_index of `step` comes from (0 for one
  // dataset). Same preconditions as sequence_offset.
  std::size_t sequence_dataset(std::int64_t step, int global_index) const;
  // Adds to counts[i] (one per dataset) the sequences of the whole global batch of `step` that
  // dataset i gives: the same on every rank, without communication (training's data_share).
  void count_datasets(std::int64_t step, std::vector<std::int64_t>& counts) const;

 private:
  BatchSampler(std::vector<const TokenDataset*> data, std::vector<double> cumulative,
               std::vector<std::string> names, int seq_length, int global_batch, int micro_batch, int dp_rank,
               int dp_size, std::uint64_t seed);
  std::uint64_t sequence_hash(std::int64_t step, int global_index) const;
  // Both of a sequence, from one hash.
  struct Source {
    std::size_t dataset, offset;
  };
  Source sequence_source(std::int64_t step, int global_index) const;
  std::size_t dataset_of(std::uint64_t h) const;
  std::vector<const TokenDataset*> data_;
  std::vector<double> cumulative_;  // DataBlend::cumulative()
  int seq_length_;
  int global_batch_;
  int micro_batch_;
  int dp_rank_;
  int dp_size_;
  int micro_batches_per_step_;
  std::uint64_t seed_;
};

}  // namespace tptrain::data
