// Token datasets: one token file, or a set of them read as one stream, memory-mapped (plain
// C++17 and POSIX: no MPI, no Kokkos; the trainer copies batches to the device itself).
//
// Two formats:
//   .txt  every byte is one token (vocab 256); bytes > 127 are tokens 128..255.
//   .bin  an llm.c token shard (src/data/shard_header.hpp): a header of 256 little-endian int32,
//         then `token count` little-endian tokens, uint16 (version 1) or uint32 (version 2), and
//         nothing after them. A set holds one version.
//
// A set (a folder, or a glob pattern: io/data_paths.hpp) is the concatenation of its files in
// name order: token i of the set is token i - first(k) of the file k that holds it. Sequences
// and evaluation windows may cross from one file into the next: `tptrain tokenize` (like llm.c's
// own scripts) cuts one stream of documents into shards by token count, so the concatenation is
// that stream, and a sequence across a cut is one that training on the unsharded stream would
// see. A single file is the one-file case of the same rule: its batches are those of before.
//
// Memory: every file is mapped (src/data/mapped_file.hpp), and the pages a read touches are
// released after it: a rank's resident set does not grow with the dataset, however many steps
// run. Every token is checked against vocab_size before it is used: a token >= vocab_size is a
// DataError naming the file, the token's index in that file and vocab_size. A dataset of at most
// kCheckAtOpenBytes is checked whole at open (well under a second; the error comes before any
// training); a larger one where a sequence or window is copied, since reading 20 GB on every
// rank at every start would take minutes (the trainer checks a step's sequences before the
// step, in a phase all ranks agree on: batch_sampler.hpp).
//
// Evaluation windows are deterministic: window j covers tokens [j*S, j*S+S] (S+1 tokens) of the
// stream, the inputs are the first S of them and the targets the last S (inputs shifted by one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/data/data_error.hpp"
#include "src/data/mapped_file.hpp"
#include "src/data/shard_header.hpp"

namespace tptrain::data {

class TokenDataset {
 public:
  // Opens `spec`: a .txt or .bin file, a folder of them or a glob pattern matching them
  // (io/data_paths.hpp). Reads only the .bin headers. Throws DataError naming the file (or the
  // folder or pattern) and the problem: a pattern that matches nothing, a folder with no token
  // file; a missing or unreadable file (with the reason: permission denied, name too long, ...),
  // not a regular file (a FIFO or a device, refused before it is read), unknown extension,
  // vocab_size <= 0, empty file (or a shard with no tokens), wrong magic (found vs expected),
  // wrong version, a file whose size differs from what its header claims (truncated: both
  // sizes); a set mixing .txt and .bin files, or shards whose headers record different
  // vocabularies (both files and both vocabularies) or shard versions; a recorded vocabulary larger than
  // vocab_size; for a dataset checked at open, a token >= vocab_size.
  // `check_at_open_bytes`: the largest dataset (token bytes, all files) whose tokens are checked
  // at open.
  static TokenDataset open(const std::string& spec, int vocab_size,
                           std::uint64_t check_at_open_bytes = kCheckAtOpenBytes);
  static constexpr std::uint64_t kCheckAtOpenBytes = std::uint64_t{64} << 20;
  // `n` tokens drawn uniformly from [0, vocab_size) by splitmix64 from `seed`
  // (benchmarks: the same tokens on every rank and platform), held in memory. path() is
  // "(synthetic)".
  static TokenDataset synthetic(std::size_t n, int vocab_size, std::uint64_t seed);

  TokenDataset(TokenDataset&&) noexcept;
  TokenDataset& operator=(TokenDataset&&) noexcept;
  ~TokenDataset();

  std::size_t size() const { return size_; }  // number of tokens, all files together
  // Token i; throws DataError if i >= size() or the token is >= vocab_size.
  std::int32_t operator[](std::size_t i) const;
  // What open() was given (a file, folder or pattern).
  const std::string& path() const { return path_; }
  // The files, in stream order, and where each starts in the stream.
  std::size_t file_count() const;
  const std::string& file_path(std::size_t k) const;
  std::size_t file_first_token(std::size_t k) const;
  // The vocabulary the .bin headers record (not recorded: llm.c's shards, .txt files).
  const ShardVocabulary& vocabulary() const { return vocabulary_; }
  // The shards' version (1: uint16, 2: uint32 tokens); 0 for .txt files (byte tokens).
  std::int32_t shard_version() const;

  // Number of whole evaluation windows of length seq_length: (size - 1) / seq_length
  // (0 when the data holds fewer than seq_length + 1 tokens). Throws if seq_length <= 0.
  std::size_t num_windows(int seq_length) const;
  // Fills inputs and targets (seq_length ints each) for window j: inputs[t] = token[j*S + t],
  // targets[t] = token[j*S + t + 1]. Throws DataError if j >= num_windows(seq_length).
  void window(std::size_t j, int seq_length, std::int32_t* inputs, std::int32_t* targets) const;

  // Copies tokens [offset, offset + seq_length] as inputs (first S) and targets (last S).
  // Throws DataError if the range is not inside the dataset, or for a token >= vocab_size.
  // Used by window() and BatchSampler. Safe to call from several threads at once.
  void copy_sequence(std::size_t offset, int seq_length, std::int32_t* inputs,
                     std::int32_t* targets) const;
  // Reads tokens [offset, offset + seq_length] and throws what copy_sequence would, copying
  // nothing (a sampler checks a step's sequences before a step starts: an error found there can
  // be agreed among ranks).
  void check_sequence(std::size_t offset, int seq_length) const;

 private:
  struct File;
  TokenDataset();
  // Calls visit(file, first_index_in_file, count) for the pieces of tokens [offset, offset + n).
  template <class Visit>
  void for_pieces(std::size_t offset, std::size_t n, Visit&& visit) const;
  void check_range(std::size_t offset, int seq_length) const;
  // Throws for the first token of f's [at, at + n) that is >= vocab_size; releases the pages.
  void check_tokens(const File& f, std::size_t at, std::size_t n) const;

  std::vector<File> files_;
  std::string path_;
  std::size_t size_ = 0;
  int vocab_size_ = 0;
  ShardVocabulary vocabulary_;
};

// "" when the shards of `d` record no tokenizer or that of data.tokenizer = `tokenizer`; else
// the warning that `what` (the key or option that named them) holds another tokenizer's tokens:
// generate and eval would encode and decode them with the wrong one.
std::string other_tokenizer_warning(const TokenDataset& d, const std::string& what, const std::string& tokenizer);

}  // namespace tptrain::data
