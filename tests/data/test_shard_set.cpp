// Datasets of many shards (src/data/token_dataset.hpp): a folder or a glob pattern read as one
// stream of tokens in name order, memory-mapped; the batch sampler and the evaluation windows
// over such a stream; every refusal of a bad set, by name.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "catch.hpp"
#include "src/data/batch_sampler.hpp"
#include "src/data/shard_writer.hpp"
#include "src/data/token_dataset.hpp"
#include "tests/data/scratch_dir.hpp"
#include "tests/data/data_error_of.hpp"

using namespace tptrain::data;
using tptrain::test::ScratchDir;

namespace {

namespace fs = std::filesystem;

std::vector<std::uint32_t> stream(std::size_t n, std::uint32_t vocab = 50257) {
  std::vector<std::uint32_t> t(n);
  std::uint32_t x = 2024;
  for (auto& v : t) {
    x = x * 1664525u + 1013904223u;
    v = (x >> 8) % vocab;
  }
  return t;
}

// An llm.c shard of `tokens` with header ints `extra` (index -> value) set, written directly,
// in shard version `version` (1: uint16 tokens, 2: uint32).
void write_shard(const std::string& path, const std::vector<std::uint32_t>& tokens,
                 std::vector<std::pair<int, std::int32_t>> extra = {}, std::int32_t version = kShardVersionU16) {
  const std::size_t width = static_cast<std::size_t>(shard_token_bytes(version));
  std::vector<unsigned char> b(1024 + width * tokens.size(), 0);
  const auto put = [&](int at, std::int32_t v) {
    const auto u = static_cast<std::uint32_t>(v);
    for (int k = 0; k < 4; ++k) b[4 * at + k] = static_cast<unsigned char>(u >> (8 * k));
  };
  put(0, kShardMagic);
  put(1, version);
  put(2, static_cast<std::int32_t>(tokens.size()));
  for (const auto& [at, v] : extra) put(at, v);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    for (std::size_t k = 0; k < width; ++k) b[1024 + width * i + k] = static_cast<unsigned char>(tokens[i] >> (8 * k));
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  REQUIRE(out.good());
}

// `tokens` cut into shards of `shard_tokens` the way tptrain tokenize cuts them (ShardWriter).
void write_set(const std::string& dir, const std::vector<std::uint32_t>& tokens, std::uint64_t shard_tokens,
               ShardVocabulary vocabulary = {}) {
  const std::size_t ids = vocabulary.recorded() ? static_cast<std::size_t>(vocabulary.size) : 65536;
  const ShardLayout layout{0, shard_tokens, vocabulary, shard_version_for(ids)};
  ShardWriter w(dir, layout);
  w.write(0, tokens.data(), tokens.size());
  w.close();
  write_shard_headers(dir, layout, tokens.size());
}

using tptrain::test::data_error_of;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Every micro-batch of every data-parallel rank of one step, in rank-major order.
std::vector<std::int32_t> whole_step(const TokenDataset& ds, int seq, int global, int micro, int dp,
                                     std::uint64_t seed, std::int64_t step) {
  std::vector<std::int32_t> out;
  for (int d = 0; d < dp; ++d) {
    const BatchSampler sampler(ds, seq, global, micro, d, dp, seed);
    for (int m = 0; m < sampler.micro_batches_per_step(); ++m) {
      std::vector<std::int32_t> in(static_cast<std::size_t>(micro * seq)), tg(in.size());
      sampler.micro_batch(step, m, in.data(), tg.data());
      for (int r = 0; r < micro; ++r) {
        out.insert(out.end(), in.begin() + r * seq, in.begin() + (r + 1) * seq);
        out.push_back(tg[static_cast<std::size_t>((r + 1) * seq - 1)]);  // the last target
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("shard set: a folder and a pattern read as the stream, in name order", "[data]") {
  ScratchDir dir("tptrain_shard_set");
  const auto tokens = stream(1000);
  write_set(dir.path(), tokens, 97);  // 11 shards, the last of 30 tokens
  // What a folder leaves out: hidden files, other extensions, and a subfolder of shards.
  write_shard(dir.file(".hidden.bin"), {1, 2, 3});
  std::ofstream(dir.file("README.md")) << "not tokens";
  fs::create_directory(dir.file("sub"));
  write_shard(dir.file("sub/train_999999.bin"), {1, 2, 3});

  for (const std::string& spec : {dir.path(), dir.path() + "/", dir.file("train_*.bin"), dir.file("train_0000??.bin"),
                                  dir.file("train_0000[0-9][0-9].bin")}) {
    INFO(spec);
    const TokenDataset ds = TokenDataset::open(spec, 50257);
    CHECK(ds.path() == spec);
    REQUIRE(ds.size() == tokens.size());
    REQUIRE(ds.file_count() == 11);
    for (std::size_t k = 0; k < ds.file_count(); ++k) {
      CHECK(fs::path(ds.file_path(k)).filename() == fmt::format("train_{:06d}.bin", k));
      CHECK(ds.file_first_token(k) == 97 * k);
    }
    for (std::size_t i = 0; i < tokens.size(); ++i) REQUIRE(ds[i] == static_cast<std::int32_t>(tokens[i]));
    CHECK_FALSE(ds.vocabulary().recorded());
  }
  // Byte order, not the locale's collation: "B" sorts before "a".
  ScratchDir text("tptrain_shard_set");
  std::ofstream(text.file("a.txt")) << "aa";
  std::ofstream(text.file("B.txt")) << "BBB";
  const TokenDataset ds = TokenDataset::open(text.path(), 256);
  REQUIRE(ds.size() == 5);
  CHECK(ds[0] == 'B');
  CHECK(ds[3] == 'a');
}

TEST_CASE("shard set: sequences and windows cross shards; a set samples as its stream in one file", "[data]") {
  ScratchDir sharded("tptrain_shard_set"), single("tptrain_shard_set");
  const auto tokens = stream(5000);
  write_set(sharded.path(), tokens, 333);
  write_shard(single.file("all.bin"), tokens);
  const TokenDataset set = TokenDataset::open(sharded.path(), 50257);
  const TokenDataset one = TokenDataset::open(single.file("all.bin"), 50257);
  REQUIRE(set.size() == one.size());

  // A sequence across the cut at 333 (and one across two cuts) is the stream's.
  for (std::size_t offset : {300u, 330u, 332u, 333u, 600u}) {
    const int seq = 400;
    std::vector<std::int32_t> in(seq), tg(seq);
    set.copy_sequence(offset, seq, in.data(), tg.data());
    for (int t = 0; t < seq; ++t) {
      REQUIRE(in[t] == static_cast<std::int32_t>(tokens[offset + t]));
      REQUIRE(tg[t] == static_cast<std::int32_t>(tokens[offset + t + 1]));
    }
  }

  // The same batches as the one file, for every step, layout and seed (the sampler sees the same
  // stream), and the windows are the same windows.
  for (const std::uint64_t seed : {1u, 1234u})
    for (const std::int64_t step : {0, 1, 17, 4000})
      for (const int dp : {1, 2, 4}) {
        INFO("seed " << seed << " step " << step << " dp " << dp);
        CHECK(whole_step(set, 64, 8, 2, dp, seed, step) == whole_step(one, 64, 8, 2, dp, seed, step));
      }
  for (const int seq : {1, 50, 333, 334, 1000}) {
    REQUIRE(set.num_windows(seq) == one.num_windows(seq));
    REQUIRE(set.num_windows(seq) == (tokens.size() - 1) / seq);
    std::vector<std::int32_t> a(seq), at(seq), b(seq), bt(seq);
    for (std::size_t j = 0; j < set.num_windows(seq); ++j) {
      set.window(j, seq, a.data(), at.data());
      one.window(j, seq, b.data(), bt.data());
      REQUIRE(a == b);
      REQUIRE(at == bt);
      REQUIRE(a[0] == static_cast<std::int32_t>(tokens[j * seq]));
      REQUIRE(at[seq - 1] == static_cast<std::int32_t>(tokens[j * seq + seq]));
    }
  }
}

TEST_CASE("shard set: the global batch does not depend on the data-parallel layout, and resumes exactly", "[data]") {
  ScratchDir dir("tptrain_shard_set");
  const auto tokens = stream(20000);
  write_set(dir.path(), tokens, 1500);
  const TokenDataset ds = TokenDataset::open(dir.file("train_*.bin"), 50257);
  const int seq = 32, global = 16;
  const std::uint64_t seed = 77;

  for (const std::int64_t step : {0, 3, 999}) {
    // Reference: the documented offsets read from the stream itself.
    const BatchSampler ref(ds, seq, global, global, 0, 1, seed);
    std::vector<std::int32_t> expected;
    std::set<std::size_t> shards_touched;
    for (int g = 0; g < global; ++g) {
      const std::size_t off = ref.sequence_offset(step, g);
      for (int t = 0; t <= seq; ++t) expected.push_back(tokens[off + t]);
      shards_touched.insert(off / 1500);
    }
    CHECK(shards_touched.size() > 3);  // the batch does draw from many shards
    for (const int dp : {1, 2, 4, 8})
      for (const int micro : {1, 2}) {
        if (global % (dp * micro) != 0) continue;
        INFO("step " << step << ", dp " << dp << ", micro " << micro);
        CHECK(whole_step(ds, seq, global, micro, dp, seed, step) == expected);
      }
  }

  // Resume: a sampler made afresh at step k (a restarted job, the dataset opened again) gives
  // the batches that a sampler which ran steps 0 .. k-1 gives; nothing carries over.
  const BatchSampler running(ds, seq, global, 4, 1, 2, seed);
  std::vector<std::vector<std::int32_t>> ran;
  for (std::int64_t step = 0; step < 12; ++step)
    for (int m = 0; m < running.micro_batches_per_step(); ++m) {
      std::vector<std::int32_t> in(4 * seq), tg(4 * seq);
      running.micro_batch(step, m, in.data(), tg.data());
      in.insert(in.end(), tg.begin(), tg.end());
      ran.push_back(in);
    }
  const TokenDataset reopened = TokenDataset::open(dir.path(), 50257);
  const BatchSampler resumed(reopened, seq, global, 4, 1, 2, seed);
  for (std::int64_t step = 7; step < 12; ++step)
    for (int m = 0; m < resumed.micro_batches_per_step(); ++m) {
      std::vector<std::int32_t> in(4 * seq), tg(4 * seq);
      resumed.micro_batch(step, m, in.data(), tg.data());
      in.insert(in.end(), tg.begin(), tg.end());
      CHECK(in == ran[static_cast<std::size_t>(step * resumed.micro_batches_per_step() + m)]);
    }
}

TEST_CASE("shard set: a single file gives the batches it gave when it was read whole", "[data]") {
  // The reader before memory mapping: the whole file in a vector, sequence g of step s at the
  // frozen offsets of batch_sampler.hpp (pinned in test_data.cpp).
  ScratchDir dir("tptrain_shard_set");
  const auto tokens = stream(3001);
  write_shard(dir.file("one.bin"), tokens);
  std::ifstream in(dir.file("one.bin"), std::ios::binary);
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::int32_t> whole;
  for (std::size_t i = 1024; i + 1 < bytes.size(); i += 2) whole.push_back(bytes[i] | bytes[i + 1] << 8);
  const TokenDataset ds = TokenDataset::open(dir.file("one.bin"), 50257);
  const int seq = 100;
  const BatchSampler s(ds, seq, 4, 2, 0, 1, 1234);
  for (std::int64_t step = 0; step < 20; ++step)
    for (int m = 0; m < 2; ++m) {
      std::vector<std::int32_t> got(2 * seq), tg(2 * seq);
      s.micro_batch(step, m, got.data(), tg.data());
      for (int r = 0; r < 2; ++r) {
        const std::size_t off = s.sequence_offset(step, 2 * m + r);
        REQUIRE(off <= whole.size() - seq - 1);
        for (int t = 0; t < seq; ++t) {
          REQUIRE(got[r * seq + t] == whole[off + t]);
          REQUIRE(tg[r * seq + t] == whole[off + t + 1]);
        }
      }
    }
}

TEST_CASE("shard set: the vocabulary a shard header records", "[data]") {
  ScratchDir dir("tptrain_shard_set");
  const auto tokens = stream(100, 256);
  write_set(dir.path(), tokens, 40, shard_vocabulary("gpt2", 50257));
  std::ifstream in(dir.file("train_000001.bin"), std::ios::binary);
  std::int32_t header[5];
  in.read(reinterpret_cast<char*>(header), sizeof header);
  CHECK(header[0] == kShardMagic);  // the host is little-endian, as the format
  CHECK(header[2] == 40);
  CHECK(header[3] == 50257);  // kShardVocabSizeInt
  CHECK(header[4] == 2);      // kShardTokenizerInt: gpt2
  const TokenDataset ds = TokenDataset::open(dir.path(), 50257);
  CHECK(ds.vocabulary() == shard_vocabulary("gpt2", 50257));
  CHECK(describe(ds.vocabulary()) == "gpt2, 50257 tokens");
  CHECK(describe(shard_vocabulary("bytes", 256)) == "bytes, 256 tokens");
  CHECK(contains(data_error_of([] { shard_vocabulary("sentencepiece", 32000); }), "no id"));

  // A model smaller than the recorded vocabulary is refused at open, naming both sizes.
  const std::string msg = data_error_of([&] { TokenDataset::open(dir.path(), 50000); });
  CHECK(contains(msg, "train_000000.bin"));
  CHECK(contains(msg, "gpt2, 50257 tokens"));
  CHECK(contains(msg, "vocab_size 50000"));
  CHECK(contains(msg, "model.vocab_size >= 50257"));

  // llm.c's own shards (nothing recorded) mix with recorded ones.
  write_shard(dir.file("train_000009.bin"), {1, 2, 3});
  CHECK(TokenDataset::open(dir.path(), 50257).size() == 103);
}

TEST_CASE("shard set: every bad set is refused by name", "[data]") {
  ScratchDir dir("tptrain_shard_set");
  const auto tokens = stream(300);
  write_set(dir.path(), tokens, 100, shard_vocabulary("gpt2", 50257));  // train_000000 .. 02

  SECTION("a pattern that matches nothing names the pattern") {
    const std::string pattern = dir.file("trian_*.bin");
    const std::string msg = data_error_of([&] { TokenDataset::open(pattern, 50257); });
    CHECK(contains(msg, "data '" + pattern + "'"));
    CHECK(contains(msg, "matches no file"));
  }
  SECTION("a folder with no token file") {
    ScratchDir empty("tptrain_shard_set");
    std::ofstream(empty.file("notes.md")) << "x";
    const std::string msg = data_error_of([&] { TokenDataset::open(empty.path(), 50257); });
    CHECK(contains(msg, empty.path()));
    CHECK(contains(msg, "no .bin or .txt file"));
  }
  SECTION("a folder of both train and valid shards (tokenize's output) names a pattern to use") {
    write_shard(dir.file("valid_000000.bin"), {1, 2});
    const std::string msg = data_error_of([&] { TokenDataset::open(dir.path(), 50257); });
    CHECK(contains(msg, "both train_*.bin and valid_*.bin"));
    CHECK(contains(msg, dir.file("train_*.bin")));
    CHECK(TokenDataset::open(dir.file("valid_*.bin"), 50257).size() == 2);
  }
  SECTION("a truncated shard names the file and both sizes") {
    fs::resize_file(dir.file("train_000001.bin"), 1024 + 2 * 100 - 6);
    const std::string msg = data_error_of([&] { TokenDataset::open(dir.path(), 50257); });
    CHECK(contains(msg, dir.file("train_000001.bin")));
    CHECK(contains(msg, "truncated"));
    CHECK(contains(msg, "1224 bytes"));
    CHECK(contains(msg, "1218 bytes"));
  }
  SECTION("a shard with the wrong magic names the file, found and expected") {
    write_shard(dir.file("train_000002.bin"), {1, 2, 3}, {{0, 20240802}});
    const std::string msg = data_error_of([&] { TokenDataset::open(dir.file("train_*"), 50257); });
    CHECK(contains(msg, dir.file("train_000002.bin")));
    CHECK(contains(msg, "bad magic number 20240802, expected 20240520"));
  }
  SECTION("a shard with the wrong version") {
    write_shard(dir.file("train_000002.bin"), {1, 2, 3}, {{1, 3}});
    const std::string msg = data_error_of([&] { TokenDataset::open(dir.path(), 50257); });
    CHECK(contains(msg, dir.file("train_000002.bin")));
    CHECK(contains(msg, "unsupported shard version 3, expected 1 (uint16 tokens) or 2 (uint32 tokens)"));
  }
  SECTION("shards of two versions name both files and both versions") {
    write_shard(dir.file("train_000003.bin"), {1, 2, 3}, {{3, 50257}, {4, 2}}, kShardVersionU32);
    const std::string msg = data_error_of([&] { TokenDataset::open(dir.path(), 50257); });
    CHECK(contains(msg, "mixes shard versions"));
    CHECK(contains(msg, dir.file("train_000000.bin") + "' is version 1 (uint16 tokens)"));
    CHECK(contains(msg, dir.file("train_000003.bin") + "' is version 2 (uint32 tokens)"));
  }
  SECTION("llm.c's own Llama 3 shards (magic 20240801, version 7) read as version 2") {
    ScratchDir l3("tptrain_shard_set");
    const std::vector<std::uint32_t> ids = stream(64, 128256);
    write_shard(l3.file("train_000000.bin"), ids, {{0, 20240801}, {1, 7}}, kShardVersionU32);
    write_shard(l3.file("train_000001.bin"), ids, {}, kShardVersionU32);  // tptrain's own version 2 beside it
    const TokenDataset ds = TokenDataset::open(l3.path(), 128256);
    REQUIRE(ds.size() == 128);
    for (std::size_t i = 0; i < 64; ++i) REQUIRE(ds[i] == static_cast<std::int32_t>(ids[i]));
    write_shard(l3.file("train_000001.bin"), ids, {{0, 20240801}, {1, 1}}, kShardVersionU32);
    CHECK(contains(data_error_of([&] { TokenDataset::open(l3.path(), 128256); }),
                   "magic number 20240801 (llm.c's Llama 3 shards) with version 1: expected version 7"));
  }
  SECTION("a version-1 header that records a vocabulary uint16 cannot hold") {
    ScratchDir big("tptrain_shard_set");
    write_shard(big.file("train_000000.bin"), {1, 2, 3}, {{3, 100277}, {4, 2}});
    const std::string msg = data_error_of([&] { TokenDataset::open(big.path(), 100277); });
    CHECK(contains(msg, big.file("train_000000.bin")));
    CHECK(contains(msg, "in version 1 (uint16 tokens), which holds ids up to 65535 only"));
  }
  SECTION("shards of two vocabularies name both files and both vocabularies") {
    write_shard(dir.file("train_000003.bin"), {1, 2, 3}, {{3, 256}, {4, 1}});
    const std::string msg = data_error_of([&] { TokenDataset::open(dir.path(), 50257); });
    CHECK(contains(msg, "mixes vocabularies"));
    CHECK(contains(msg, dir.file("train_000000.bin") + "' records gpt2, 50257 tokens"));
    CHECK(contains(msg, dir.file("train_000003.bin") + "' records bytes, 256 tokens"));
  }
  SECTION("the same size from another tokenizer is another vocabulary") {
    write_shard(dir.file("train_000003.bin"), {1, 2, 3}, {{3, 50257}, {4, 9}});
    CHECK(contains(data_error_of([&] { TokenDataset::open(dir.path(), 50257); }), "records tokenizer id 9, 50257 tokens"));
  }
  SECTION(".txt and .bin in one set") {
    std::ofstream(dir.file("train_000003.txt")) << "bytes";
    const std::string msg = data_error_of([&] { TokenDataset::open(dir.path(), 50257); });
    CHECK(contains(msg, "mixes .txt files"));
    CHECK(contains(msg, dir.file("train_000003.txt")));
  }
  SECTION("a pattern matching a file that is not a token file names it") {
    std::ofstream(dir.file("train_notes.md")) << "x";
    const std::string msg = data_error_of([&] { TokenDataset::open(dir.file("train_*"), 50257); });
    CHECK(contains(msg, dir.file("train_notes.md")));
    CHECK(contains(msg, "unknown extension '.md'"));
  }
  SECTION("version 2: a truncated shard and a token outside the vocabulary") {
    ScratchDir v2("tptrain_shard_set");
    std::vector<std::uint32_t> ids = stream(100, 128256);
    ids[41] = 128256;  // one past Llama 3's vocabulary
    write_shard(v2.file("train_000000.bin"), ids, {{3, 128256}, {4, 2}}, kShardVersionU32);
    CHECK(contains(data_error_of([&] { TokenDataset::open(v2.path(), 128256); }),
                   "token 128256 at index 41 is >= vocab_size 128256"));
    ids[41] = 0x80000001u;  // above INT32_MAX: refused, not read as a negative id
    write_shard(v2.file("train_000000.bin"), ids, {{3, 128256}, {4, 2}}, kShardVersionU32);
    CHECK(contains(data_error_of([&] { TokenDataset::open(v2.path(), 128256); }), "at index 41 is >= vocab_size 128256"));
    ids[41] = 128255;
    write_shard(v2.file("train_000000.bin"), ids, {{3, 128256}, {4, 2}}, kShardVersionU32);
    CHECK(TokenDataset::open(v2.path(), 128256)[41] == 128255);
    fs::resize_file(v2.file("train_000000.bin"), 1024 + 4 * 100 - 2);
    const std::string msg = data_error_of([&] { TokenDataset::open(v2.path(), 128256); });
    CHECK(contains(msg, v2.file("train_000000.bin")));
    CHECK(contains(msg, "shorter than its header claims (truncated): header says 100 tokens of 4 bytes (version 2 "
                        "(uint32 tokens)) = 1424 bytes, file has 1422 bytes"));
  }
  SECTION("a token outside the vocabulary names its file and its index in that file") {
    std::vector<std::uint32_t> bad(50, 7);
    bad[17] = 60000;
    write_shard(dir.file("train_000003.bin"), bad);
    CHECK(contains(data_error_of([&] { TokenDataset::open(dir.path(), 50257); }), "token 60000 at index 17"));
    const TokenDataset ds = TokenDataset::open(dir.path(), 50257, 0);  // as if large: open reads no token
    std::vector<std::int32_t> in(40), tg(40);
    const std::string msg = data_error_of([&] { ds.copy_sequence(290, 40, in.data(), tg.data()); });
    CHECK(contains(msg, dir.file("train_000003.bin")));
    CHECK(contains(msg, "token 60000 at index 17 is >= vocab_size 50257"));
    CHECK(data_error_of([&] { ds.check_sequence(290, 40); }) == msg);
    const BatchSampler s(ds, 40, 64, 64, 0, 1, 3);
    std::vector<std::int32_t> batch_in(64 * 40), batch_tg(batch_in.size());
    CHECK(contains(data_error_of([&] {
                     for (std::int64_t step = 0; step < 100; ++step) s.micro_batch(step, 0, batch_in.data(), batch_tg.data());
                   }),
                   "token 60000"));
  }
}
