// Token datasets: a whole file of tokens held on the host (plain C++17: no MPI, no Kokkos; the
// trainer copies batches to the device itself).
//
// Two formats:
//   .txt  every byte is one token (vocab 256); bytes > 127 are tokens 128..255.
//   .bin  an llm.c token shard: a header of 256 little-endian int32
//         (header[0] = magic 20240520, header[1] = version 1, header[2] = token count),
//         then `token count` little-endian uint16 tokens, and nothing after them.
//
// Evaluation windows are deterministic: window j covers tokens [j*S, j*S+S] (S+1 tokens), the
// inputs are the first S of them and the targets the last S (inputs shifted by one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace tptrain::data {

// Every problem with a data file or a request against it. The message names the file (where
// there is one) and the offending values.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// llm.c shard constants.
inline constexpr std::int32_t kShardMagic = 20240520;
inline constexpr std::int32_t kShardVersion = 1;
inline constexpr std::size_t kShardHeaderInts = 256;  // header size in int32 (1024 bytes)

class TokenDataset {
 public:
  // Reads the whole file; the format follows the extension (.txt or .bin, case-insensitive).
  // Throws DataError naming the file and the problem: missing or unreadable file (with the
  // reason: permission denied, name too long, ...), not a regular file (a FIFO or a device,
  // refused before it is read), unknown extension, vocab_size <= 0, empty file (or a shard with
  // no tokens), wrong magic (found vs expected), wrong version, a file whose size differs from
  // what its header claims (both sizes), a token >= vocab_size (the token, its index and
  // vocab_size).
  static TokenDataset open(const std::string& path, int vocab_size);
  // `n` tokens drawn uniformly from [0, min(vocab_size, 65536)) by splitmix64 from `seed`
  // (benchmarks: the same tokens on every rank and platform). path() is "(synthetic)".
  static TokenDataset synthetic(std::size_t n, int vocab_size, std::uint64_t seed);

  std::size_t size() const { return tokens_.size(); }  // number of tokens
  // Token i; throws DataError if i >= size().
  std::int32_t operator[](std::size_t i) const;
  const std::string& path() const { return path_; }

  // Number of whole evaluation windows of length seq_length: (size - 1) / seq_length
  // (0 when the file holds fewer than seq_length + 1 tokens). Throws if seq_length <= 0.
  std::size_t num_windows(int seq_length) const;
  // Fills inputs and targets (seq_length ints each) for window j: inputs[t] = token[j*S + t],
  // targets[t] = token[j*S + t + 1]. Throws DataError if j >= num_windows(seq_length).
  void window(std::size_t j, int seq_length, std::int32_t* inputs, std::int32_t* targets) const;

  // Copies tokens [offset, offset + seq_length] as inputs (first S) and targets (last S).
  // Throws DataError if the range is not inside the dataset. Used by window() and BatchSampler.
  void copy_sequence(std::size_t offset, int seq_length, std::int32_t* inputs,
                     std::int32_t* targets) const;

 private:
  std::vector<std::uint16_t> tokens_;  // uint16 is enough (llm.c vocab 50257); bytes fit too
  std::string path_;
};

}  // namespace tptrain::data
