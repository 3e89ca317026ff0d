#include "src/data/batch_sampler.hpp"

#include <string>
#include <utility>

#include "base/splitmix64.hpp"

namespace tptrain::data {
namespace {

// One splitmix64 step (base/splitmix64.hpp).
constexpr std::uint64_t mix(std::uint64_t x) { return util::splitmix64(x); }

// floor(a * b / 2^64) without a 128-bit type (portable to every compiler, -Wpedantic clean).
std::uint64_t mulhi64(std::uint64_t a, std::uint64_t b) {
  const std::uint64_t a_lo = a & 0xFFFFFFFFu, a_hi = a >> 32;
  const std::uint64_t b_lo = b & 0xFFFFFFFFu, b_hi = b >> 32;
  const std::uint64_t lo_lo = a_lo * b_lo;
  const std::uint64_t hi_lo = a_hi * b_lo;
  const std::uint64_t lo_hi = a_lo * b_hi;
  const std::uint64_t hi_hi = a_hi * b_hi;
  const std::uint64_t cross = (lo_lo >> 32) + (hi_lo & 0xFFFFFFFFu) + lo_hi;
  return hi_hi + (hi_lo >> 32) + (cross >> 32);
}

[[noreturn]] void fail(const std::string& problem) {
  throw DataError("batch sampler: " + problem);
}

// A dataset that is not an entry of a blend, in messages.
std::string file_name(const TokenDataset& d) { return "data file '" + d.path() + "'"; }

// Salt of the blend's dataset draw, so that it is not the offset's hash (any odd constant; this
// one is the fractional part of sqrt(2)).
constexpr std::uint64_t kBlendSalt = 0x6A09E667F3BCC909ull;

}  // namespace

BatchSampler::BatchSampler(const TokenDataset& data, int seq_length, int global_batch,
                           int micro_batch, int dp_rank, int dp_size, std::uint64_t seed)
    : BatchSampler({&data}, {1.0}, {file_name(data)}, seq_length, global_batch, micro_batch, dp_rank, dp_size,
                   seed) {}

namespace {
std::vector<const TokenDataset*> datasets_of(const DataBlend& blend) {
  std::vector<const TokenDataset*> out;
  for (std::size_t i = 0; i < blend.size(); ++i) out.push_back(&blend.dataset(i));
  return out;
}
std::vector<std::string> names_of(const DataBlend& blend) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < blend.size(); ++i)
    out.push_back(blend.size() > 1 ? blend.name(i) : file_name(blend.dataset(i)));
  return out;
}
}  // namespace

BatchSampler::BatchSampler(const DataBlend& blend, int seq_length, int global_batch, int micro_batch,
                           int dp_rank, int dp_size, std::uint64_t seed)
    : BatchSampler(datasets_of(blend), blend.cumulative(), names_of(blend), seq_length, global_batch, micro_batch,
                   dp_rank, dp_size, seed) {}

BatchSampler::BatchSampler(std::vector<const TokenDataset*> data, std::vector<double> cumulative,
                           std::vector<std::string> names, int seq_length, int global_batch, int micro_batch,
                           int dp_rank, int dp_size, std::uint64_t seed)
    : data_(std::move(data)),
      cumulative_(std::move(cumulative)),
      seq_length_(seq_length),
      global_batch_(global_batch),
      micro_batch_(micro_batch),
      dp_rank_(dp_rank),
      dp_size_(dp_size),
      micro_batches_per_step_(0),
      seed_(seed) {
  if (seq_length <= 0) fail("seq_length must be positive, got " + std::to_string(seq_length));
  if (global_batch <= 0) fail("global_batch must be positive, got " + std::to_string(global_batch));
  if (micro_batch <= 0) fail("micro_batch must be positive, got " + std::to_string(micro_batch));
  if (dp_size <= 0) fail("data-parallel size must be positive, got " + std::to_string(dp_size));
  if (dp_rank < 0 || dp_rank >= dp_size)
    fail("data-parallel rank " + std::to_string(dp_rank) + " outside [0, " +
         std::to_string(dp_size) + ")");
  const long long per_round = static_cast<long long>(micro_batch) * dp_size;
  if (global_batch % per_round != 0)
    fail("global_batch " + std::to_string(global_batch) + " is not a multiple of micro_batch " +
         std::to_string(micro_batch) + " x data-parallel size " + std::to_string(dp_size) +
         " = " + std::to_string(per_round));
  micro_batches_per_step_ = static_cast<int>(global_batch / per_round);
  for (std::size_t i = 0; i < data_.size(); ++i)
    if (data_[i]->size() < static_cast<std::size_t>(seq_length) + 1)
      throw DataError(names[i] + ": " + std::to_string(data_[i]->size()) +
                      " tokens, too few for one training sequence of seq_length " + std::to_string(seq_length) +
                      " (needs " + std::to_string(seq_length + 1LL) + ")");
}

std::uint64_t BatchSampler::sequence_hash(std::int64_t step, int global_index) const {
  if (step < 0) fail("step must be >= 0, got " + std::to_string(step));
  if (global_index < 0 || global_index >= global_batch_)
    fail("global sequence index " + std::to_string(global_index) + " outside [0, " +
         std::to_string(global_batch_) + ")");
  std::uint64_t h = mix(seed_);
  h = mix(h ^ static_cast<std::uint64_t>(step));
  return mix(h ^ static_cast<std::uint64_t>(global_index));
}

std::size_t BatchSampler::dataset_of(std::uint64_t h) const {
  return data_.size() == 1 ? 0 : pick_dataset(cumulative_, mix(h ^ kBlendSalt));
}

std::size_t BatchSampler::sequence_dataset(std::int64_t step, int global_index) const {
  return dataset_of(sequence_hash(step, global_index));
}

void BatchSampler::count_datasets(std::int64_t step, std::vector<std::int64_t>& counts) const {
  counts.resize(data_.size(), 0);
  if (data_.size() == 1) {
    counts[0] += global_batch_;
    return;
  }
  for (int g = 0; g < global_batch_; ++g) ++counts[sequence_dataset(step, g)];
}

BatchSampler::Source BatchSampler::sequence_source(std::int64_t step, int global_index) const {
  const std::uint64_t h = sequence_hash(step, global_index);
  const std::size_t dataset = dataset_of(h);
  // Valid starts: 0 .. size - seq_length - 1 (each sequence needs seq_length + 1 tokens).
  const std::uint64_t starts =
      static_cast<std::uint64_t>(data_[dataset]->size()) - static_cast<std::uint64_t>(seq_length_);
  return {dataset, static_cast<std::size_t>(mulhi64(h, starts))};
}

std::size_t BatchSampler::sequence_offset(std::int64_t step, int global_index) const {
  return sequence_source(step, global_index).offset;
}

void BatchSampler::micro_batch(std::int64_t step, int m, std::int32_t* inputs,
                               std::int32_t* targets) const {
  if (m < 0 || m >= micro_batches_per_step_)
    fail("micro-batch " + std::to_string(m) + " outside [0, " +
         std::to_string(micro_batches_per_step_) + ")");
  const int first = dp_rank_ * (global_batch_ / dp_size_) + m * micro_batch_;
  const std::size_t s = static_cast<std::size_t>(seq_length_);
  for (int row = 0; row < micro_batch_; ++row) {
    const Source source = sequence_source(step, first + row);
    const std::size_t at = static_cast<std::size_t>(row) * s;
    data_[source.dataset]->copy_sequence(source.offset, seq_length_, inputs + at, targets + at);  // [row, 0:S]
  }
}

}  // namespace tptrain::data
