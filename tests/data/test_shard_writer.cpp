// The output side of `tptrain tokenize`: a token stream cut into llm.c shards, written in any
// order by any number of writers (src/data/shard_writer.hpp), and read back by TokenDataset.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "src/data/shard_writer.hpp"
#include "src/data/token_dataset.hpp"
#include "test_helpers.hpp"
#include "tests/data/scratch_dir.hpp"

using namespace tptrain::data;
using tptrain::test::file_bytes;
using tptrain::test::ScratchDir;

namespace {

std::vector<std::string> names(const std::vector<ShardFile>& files) {
  std::vector<std::string> out;
  for (const auto& f : files) out.push_back(f.name + ":" + std::to_string(f.tokens));
  return out;
}

std::vector<std::uint32_t> stream(std::size_t n, std::uint32_t vocab = 65536) {
  std::vector<std::uint32_t> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = static_cast<std::uint32_t>((i * 7919 + 13) % vocab);
  return t;
}

}  // namespace

TEST_CASE("shards: valid first, then train, each full but the last", "[data]") {
  using V = std::vector<std::string>;
  CHECK(names(shard_files({5, 10, {}, kShardVersionU16}, 33)) ==
        V{"valid_000000.bin:5", "train_000000.bin:10", "train_000001.bin:10", "train_000002.bin:8"});
  CHECK(names(shard_files({0, 10, {}, kShardVersionU16}, 20)) == V{"train_000000.bin:10", "train_000001.bin:10"});
  CHECK(names(shard_files({25, 10, {}, kShardVersionU16}, 30)) ==
        V{"valid_000000.bin:10", "valid_000001.bin:10", "valid_000002.bin:5", "train_000000.bin:5"});
  CHECK(names(shard_files({40, 10, {}, kShardVersionU16}, 30)).size() == 3);  // all valid: the caller refuses that
  CHECK_THROWS_AS(ShardWriter("/tmp", ShardLayout{0, 0, {}, kShardVersionU16}), DataError);
  CHECK_THROWS_AS(ShardWriter("/tmp", ShardLayout{0, kMaxShardTokens + 1, {}, kShardVersionU16}), DataError);
}

TEST_CASE("shards: ranges written in any order, by several writers, give one writer's files", "[data]") {
  const ShardLayout layout{37, 100, {}, kShardVersionU16};
  const auto tokens = stream(1234);
  ScratchDir one("tptrain_shards"), many("tptrain_shards");
  {
    ShardWriter w(one.path(), layout);
    w.write(0, tokens.data(), tokens.size());
    w.close();
  }
  {
    // Ranges of random lengths, shuffled, spread over three writers (three ranks).
    std::mt19937 rng(5);
    std::vector<std::pair<std::size_t, std::size_t>> ranges;
    for (std::size_t at = 0; at < tokens.size();) {
      const std::size_t n = std::min<std::size_t>(tokens.size() - at, rng() % 150);
      ranges.emplace_back(at, n);
      at += n;
    }
    std::shuffle(ranges.begin(), ranges.end(), rng);
    std::vector<std::unique_ptr<ShardWriter>> writers;
    for (int k = 0; k < 3; ++k) writers.push_back(std::make_unique<ShardWriter>(many.path(), layout));
    for (std::size_t i = 0; i < ranges.size(); ++i)
      writers[i % 3]->write(ranges[i].first, tokens.data() + ranges[i].first, ranges[i].second);
    for (auto& w : writers) w->close();
  }
  write_shard_headers(one.path(), layout, tokens.size());
  write_shard_headers(many.path(), layout, tokens.size());
  std::vector<std::uint32_t> read_back;
  for (const ShardFile& f : shard_files(layout, tokens.size())) {
    INFO(f.name);
    REQUIRE(file_bytes(many.file(f.name)) == file_bytes(one.file(f.name)));
    // The reader of training data takes them: header, size and tokens.
    const TokenDataset ds = TokenDataset::open(many.file(f.name), 65536);
    REQUIRE(ds.size() == f.tokens);
    for (std::size_t i = 0; i < ds.size(); ++i) read_back.push_back(static_cast<std::uint32_t>(ds[i]));
  }
  CHECK(read_back == tokens);
}

TEST_CASE("shards: version 2 holds uint32 ids, written and read back by every reader", "[data]") {
  CHECK(shard_version_for(256) == kShardVersionU16);
  CHECK(shard_version_for(50257) == kShardVersionU16);
  CHECK(shard_version_for(65536) == kShardVersionU16);  // ids 0 .. 65535 fit uint16
  CHECK(shard_version_for(65537) == kShardVersionU32);
  CHECK(shard_version_for(200019) == kShardVersionU32);
  const ShardLayout layout{50, 100, shard_vocabulary("gpt2", 200019), kShardVersionU32};
  const auto tokens = stream(345, 200019);
  ScratchDir dir("tptrain_shards");
  {
    ShardWriter w(dir.path(), layout);
    w.write(0, tokens.data(), 200);
    w.write(200, tokens.data() + 200, tokens.size() - 200);
    w.close();
  }
  write_shard_headers(dir.path(), layout, tokens.size());
  const std::string first = file_bytes(dir.file("valid_000000.bin"));
  REQUIRE(first.size() == 1024 + 4 * 50);
  const auto byte = [&](std::size_t i) { return static_cast<std::uint32_t>(static_cast<unsigned char>(first[i])); };
  CHECK(byte(4) == 2);  // header[1], little-endian
  // Token 7 of the stream, little-endian uint32 after the header.
  const std::uint32_t t7 = byte(1024 + 28) | byte(1024 + 29) << 8 | byte(1024 + 30) << 16 | byte(1024 + 31) << 24;
  CHECK(t7 == tokens[7]);
  std::vector<std::uint32_t> read_back;
  bool above_uint16 = false;
  for (const ShardFile& f : shard_files(layout, tokens.size())) {
    const TokenDataset ds = TokenDataset::open(dir.file(f.name), 200019);
    for (std::size_t i = 0; i < ds.size(); ++i) {
      read_back.push_back(static_cast<std::uint32_t>(ds[i]));
      above_uint16 = above_uint16 || ds[i] > 65535;
    }
  }
  CHECK(read_back == tokens);
  CHECK(above_uint16);
  // The set as one stream, through the sequence copy training uses.
  const TokenDataset set = TokenDataset::open(dir.file("train_*.bin"), 200019);
  std::vector<std::int32_t> in(16), out(16);
  set.copy_sequence(90, 16, in.data(), out.data());
  for (std::size_t i = 0; i < 16; ++i) CHECK(static_cast<std::uint32_t>(in[i]) == tokens[50 + 90 + i]);
  CHECK_THROWS_AS(ShardWriter(dir.path(), ShardLayout{0, 10, {}, 3}), DataError);
}

TEST_CASE("shards: a header is refused when tokens are missing", "[data]") {
  const ShardLayout layout{0, 10, {}, kShardVersionU16};
  const auto tokens = stream(25);
  ScratchDir dir("tptrain_shards");
  ShardWriter w(dir.path(), layout);
  w.write(0, tokens.data(), 12);  // 12 .. 24 never written: train_000001.bin is short
  w.close();
  try {
    write_shard_headers(dir.path(), layout, tokens.size());
    FAIL("no exception");
  } catch (const DataError& e) {
    CHECK_THAT(std::string(e.what()), tptrain::test::contains("train_000001.bin' is 1028 bytes, expected 1044 for 10 tokens: some tokens were not written"));
  }
}
