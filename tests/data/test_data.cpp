// Tests of the data layer: .txt / .bin reading and their errors, evaluation windows, and the
// layout-independent batch sampler. Fixture files are written at test time into a unique
// temporary folder that is removed afterwards.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include <unistd.h>

#include "catch.hpp"
#include "src/data/batch_sampler.hpp"
#include "src/data/token_dataset.hpp"
#include "tests/data/data_error_of.hpp"

namespace {

namespace fs = std::filesystem;
using tptrain::data::BatchSampler;
using tptrain::data::DataError;
using tptrain::data::TokenDataset;

// A fresh folder under the system temp directory, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    for (int attempt = 0;; ++attempt) {
      path_ = fs::temp_directory_path() /
              ("tptrain_data_test_" + std::to_string(now) + "_" + std::to_string(rd()) + "_" +
               std::to_string(attempt));
      if (fs::create_directory(path_)) break;  // false: the name exists already, try another
    }
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

void put_i32(std::vector<unsigned char>& b, std::size_t at, std::int32_t v) {
  const auto u = static_cast<std::uint32_t>(v);
  for (int k = 0; k < 4; ++k) b[at + k] = static_cast<unsigned char>(u >> (8 * k));
}

// An llm.c shard, written byte by byte in little-endian order. `claimed` is the token count in
// the header (defaults to tokens.size()).
std::vector<unsigned char> shard_bytes(const std::vector<std::uint16_t>& tokens,
                                       std::int32_t magic = 20240520, std::int32_t version = 1,
                                       std::int64_t claimed = -1) {
  std::vector<unsigned char> b(1024 + 2 * tokens.size(), 0);
  put_i32(b, 0, magic);
  put_i32(b, 4, version);
  put_i32(b, 8, static_cast<std::int32_t>(claimed < 0 ? static_cast<std::int64_t>(tokens.size()) : claimed));
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    b[1024 + 2 * i] = static_cast<unsigned char>(tokens[i] & 0xFF);
    b[1024 + 2 * i + 1] = static_cast<unsigned char>(tokens[i] >> 8);
  }
  return b;
}

using tptrain::test::data_error_of;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A .txt dataset of n pseudo-random bytes (fixed generator, so identical on every platform).
std::string write_text_corpus(const TempDir& dir, std::size_t n, const std::string& name = "corpus.txt") {
  std::vector<unsigned char> bytes(n);
  std::uint32_t x = 12345;
  for (auto& b : bytes) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<unsigned char>(x >> 24);
  }
  const std::string path = dir.file(name);
  write_bytes(path, bytes);
  return path;
}

// Concatenation of all micro-batches of all data-parallel ranks of one step, in rank-major order.
struct StepBatch {
  std::vector<std::int32_t> inputs, targets;
};

StepBatch whole_step(const TokenDataset& ds, int seq, int global, int micro, int dp,
                     std::uint64_t seed, std::int64_t step) {
  StepBatch out;
  for (int d = 0; d < dp; ++d) {
    BatchSampler sampler(ds, seq, global, micro, d, dp, seed);
    REQUIRE(sampler.micro_batches_per_step() == global / (micro * dp));
    for (int m = 0; m < sampler.micro_batches_per_step(); ++m) {
      std::vector<std::int32_t> in(static_cast<std::size_t>(micro * seq), -1);
      std::vector<std::int32_t> tg(in.size(), -1);
      sampler.micro_batch(step, m, in.data(), tg.data());
      out.inputs.insert(out.inputs.end(), in.begin(), in.end());
      out.targets.insert(out.targets.end(), tg.begin(), tg.end());
    }
  }
  return out;
}

}  // namespace

TEST_CASE("txt dataset: every byte is a token, read as unsigned", "[data]") {
  TempDir dir;
  const std::string path = dir.file("bytes.txt");
  const std::vector<unsigned char> bytes = {0, 'A', 127, 128, 200, 255, '\n', 'z'};
  write_bytes(path, bytes);

  const TokenDataset ds = TokenDataset::open(path, 256);
  REQUIRE(ds.size() == bytes.size());
  CHECK(ds.path() == path);
  for (std::size_t i = 0; i < bytes.size(); ++i) CHECK(ds[i] == static_cast<std::int32_t>(bytes[i]));
  CHECK(ds[4] == 200);
  CHECK(ds[5] == 255);
  CHECK_THROWS_AS(ds[bytes.size()], DataError);

  // A vocabulary smaller than a byte that occurs is an error naming token, index and vocab: at
  // open for a small dataset, else when the token is read (token_dataset.hpp).
  const TokenDataset narrow = TokenDataset::open(path, 128, 0);
  CHECK(narrow[2] == 127);
  for (const std::string& msg : {data_error_of([&] { TokenDataset::open(path, 128); }), data_error_of([&] { narrow[3]; })}) {
    CHECK(contains(msg, path));
    CHECK(contains(msg, "token 128"));
    CHECK(contains(msg, "index 3"));
    CHECK(contains(msg, "vocab_size 128"));
  }
  CHECK_NOTHROW(TokenDataset::open(path, 128, bytes.size() - 1));  // one byte more than checked at open
}

// A shard cut shorter under a running job (issue 30: train and eval --data died of SIGBUS, exit
// 135, with a backtrace): the read that faults is a DataError naming the file; the process lives.
TEST_CASE("datasets: a file truncated under its mapping is an error naming it, not SIGBUS", "[data]") {
  TempDir dir;
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::string txt = write_text_corpus(dir, 8 * page, "cut.txt");
  const TokenDataset ds = TokenDataset::open(txt, 256, 0);  // nothing read at open
  std::vector<std::int32_t> in(16), out(16);
  ds.copy_sequence(0, 16, in.data(), out.data());
  REQUIRE(::truncate(txt.c_str(), static_cast<off_t>(page)) == 0);
  for (const std::string& msg :
       {data_error_of([&] { ds.copy_sequence(6 * page, 16, in.data(), out.data()); }),
        data_error_of([&] { ds.check_sequence(5 * page, 16); }), data_error_of([&] { ds[7 * page]; })}) {
    CHECK(contains(msg, txt));
    CHECK(contains(msg, "became shorter than its " + std::to_string(8 * page) + " bytes while it was read"));
  }
  ds.copy_sequence(0, 16, in.data(), out.data());  // what is still there reads as before

  const std::vector<std::uint16_t> tokens(4 * page, 7);
  const std::string bin = dir.file("cut.bin");
  write_bytes(bin, shard_bytes(tokens));
  const TokenDataset shard = TokenDataset::open(bin, 50257, 0);
  REQUIRE(::truncate(bin.c_str(), 2048) == 0);
  CHECK(contains(data_error_of([&] { shard.check_sequence(3 * page, 16); }), "cut.bin': became shorter"));
}

TEST_CASE("bin dataset: a valid llm.c shard round-trips", "[data]") {
  TempDir dir;
  const std::string path = dir.file("shard.bin");
  const std::vector<std::uint16_t> tokens = {50256, 0, 1, 255, 256, 0x1234, 0xAB00, 50000, 7};
  write_bytes(path, shard_bytes(tokens));

  const TokenDataset ds = TokenDataset::open(path, 50257);
  REQUIRE(ds.size() == tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) CHECK(ds[i] == static_cast<std::int32_t>(tokens[i]));
  CHECK(ds[5] == 4660);   // 0x1234: little-endian byte order
  CHECK(ds[6] == 43776);  // 0xAB00

  // The full uint16 range fits.
  const std::string wide = dir.file("wide.bin");
  write_bytes(wide, shard_bytes({65535, 0}));
  CHECK(TokenDataset::open(wide, 65536)[0] == 65535);
}

TEST_CASE("bin dataset: every malformed shard is a clear error", "[data]") {
  TempDir dir;
  const std::vector<std::uint16_t> tokens(100, 3);

  SECTION("bad magic names found and expected values") {
    const std::string path = dir.file("magic.bin");
    write_bytes(path, shard_bytes(tokens, 20240521));
    const std::string msg = data_error_of([&] { TokenDataset::open(path, 256); });
    CHECK(contains(msg, path));
    CHECK(contains(msg, "magic"));
    CHECK(contains(msg, "20240521"));
    CHECK(contains(msg, "20240520"));
  }
  SECTION("bad version") {
    const std::string path = dir.file("version.bin");
    write_bytes(path, shard_bytes(tokens, 20240520, 2));
    const std::string msg = data_error_of([&] { TokenDataset::open(path, 256); });
    CHECK(contains(msg, path));
    CHECK(contains(msg, "version 2"));
  }
  SECTION("truncated: header claims more tokens than present") {
    const std::string path = dir.file("short.bin");
    write_bytes(path, shard_bytes(tokens, 20240520, 1, 150));  // 100 present, 150 claimed
    const std::string msg = data_error_of([&] { TokenDataset::open(path, 256); });
    CHECK(contains(msg, path));
    CHECK(contains(msg, "shorter"));
    CHECK(contains(msg, "1324"));  // 1024 + 2*150 claimed
    CHECK(contains(msg, "1224"));  // 1024 + 2*100 present
  }
  SECTION("trailing bytes beyond the claimed tokens") {
    const std::string path = dir.file("long.bin");
    write_bytes(path, shard_bytes(tokens, 20240520, 1, 60));
    const std::string msg = data_error_of([&] { TokenDataset::open(path, 256); });
    CHECK(contains(msg, "longer"));
    CHECK(contains(msg, "1144"));
    CHECK(contains(msg, "1224"));
  }
  SECTION("file shorter than the header itself") {
    const std::string path = dir.file("stub.bin");
    std::vector<unsigned char> b = shard_bytes(tokens);
    b.resize(100);
    write_bytes(path, b);
    const std::string msg = data_error_of([&] { TokenDataset::open(path, 256); });
    CHECK(contains(msg, path));
    CHECK(contains(msg, "header"));
    CHECK(contains(msg, "100 bytes"));
  }
  SECTION("token >= vocab_size names the token, its index and the vocabulary") {
    const std::string path = dir.file("vocab.bin");
    std::vector<std::uint16_t> bad = tokens;
    bad[42] = 300;
    write_bytes(path, shard_bytes(bad));
    // A large dataset: found where a sequence holding it is copied or checked, not at open.
    const TokenDataset ds = TokenDataset::open(path, 256, 0);
    std::vector<std::int32_t> in(100), tg(100);
    CHECK_NOTHROW(ds.copy_sequence(0, 40, in.data(), tg.data()));  // tokens 0..40
    CHECK_NOTHROW(ds.check_sequence(43, 50));
    for (const std::string& msg : {data_error_of([&] { TokenDataset::open(path, 256); }),  // small: at open
                                   data_error_of([&] { ds.copy_sequence(0, 42, in.data(), tg.data()); }),
                                   data_error_of([&] { ds.copy_sequence(42, 1, in.data(), tg.data()); }),
                                   data_error_of([&] { ds.check_sequence(30, 20); }),
                                   data_error_of([&] { ds.window(1, 40, in.data(), tg.data()); })}) {
      CHECK(contains(msg, path));
      CHECK(contains(msg, "token 300"));
      CHECK(contains(msg, "index 42"));
      CHECK(contains(msg, "vocab_size 256"));
    }
    const TokenDataset wide = TokenDataset::open(path, 301);
    CHECK_NOTHROW(wide.copy_sequence(0, 99, in.data(), tg.data()));
  }
  SECTION("a shard with zero tokens") {
    const std::string path = dir.file("zero.bin");
    write_bytes(path, shard_bytes({}));
    const std::string msg = data_error_of([&] { TokenDataset::open(path, 256); });
    CHECK(contains(msg, path));
    CHECK(contains(msg, "no tokens"));
  }
}

TEST_CASE("datasets: missing, empty and unknown files are clear errors", "[data]") {
  TempDir dir;
  const std::string missing = dir.file("nowhere.txt");
  std::string msg = data_error_of([&] { TokenDataset::open(missing, 256); });
  CHECK(contains(msg, missing));
  CHECK(contains(msg, "no such file"));

  const std::string folder = dir.file("folder.txt");  // a folder is a set: this one is empty
  fs::create_directory(folder);
  msg = data_error_of([&] { TokenDataset::open(folder, 256); });
  CHECK(contains(msg, folder));
  CHECK(contains(msg, "folder with no .bin or .txt file"));

  const std::string empty_txt = dir.file("empty.txt");
  const std::string empty_bin = dir.file("empty.bin");
  write_bytes(empty_txt, {});
  write_bytes(empty_bin, {});
  CHECK(contains(data_error_of([&] { TokenDataset::open(empty_txt, 256); }), "empty file"));
  CHECK(contains(data_error_of([&] { TokenDataset::open(empty_bin, 256); }), "empty file"));

  const std::string other = dir.file("tokens.dat");
  write_bytes(other, {1, 2, 3});
  msg = data_error_of([&] { TokenDataset::open(other, 256); });
  CHECK(contains(msg, other));
  CHECK(contains(msg, "unknown extension '.dat'"));

  const std::string upper = dir.file("UPPER.TXT");
  write_bytes(upper, {1, 2, 3});
  CHECK(TokenDataset::open(upper, 256).size() == 3);

  CHECK(contains(data_error_of([&] { TokenDataset::open(upper, 0); }), "vocab_size"));
  write_bytes(dir.file("tokens"), {1, 2, 3});
  CHECK(contains(data_error_of([&] { TokenDataset::open(dir.file("tokens"), 256); }), "unknown extension ''"));
}

TEST_CASE("evaluation windows: count, contents and range", "[data]") {
  TempDir dir;
  const std::string path = dir.file("digits.txt");
  write_bytes(path, {'0', '1', '2', '3', '4', '5', '6', '7', '8', '9'});  // 10 tokens
  const TokenDataset ds = TokenDataset::open(path, 256);

  CHECK(ds.num_windows(3) == 3);  // (10 - 1) / 3
  CHECK(ds.num_windows(4) == 2);
  CHECK(ds.num_windows(9) == 1);  // size == S + 1: exactly one window
  CHECK(ds.num_windows(10) == 0);
  CHECK(ds.num_windows(1) == 9);
  CHECK_THROWS_AS(ds.num_windows(0), DataError);

  std::int32_t in[3], tg[3];
  ds.window(0, 3, in, tg);
  CHECK(std::vector<std::int32_t>(in, in + 3) == std::vector<std::int32_t>{'0', '1', '2'});
  CHECK(std::vector<std::int32_t>(tg, tg + 3) == std::vector<std::int32_t>{'1', '2', '3'});
  ds.window(2, 3, in, tg);  // tokens [6, 9]
  CHECK(std::vector<std::int32_t>(in, in + 3) == std::vector<std::int32_t>{'6', '7', '8'});
  CHECK(std::vector<std::int32_t>(tg, tg + 3) == std::vector<std::int32_t>{'7', '8', '9'});

  const std::string msg = data_error_of([&] { ds.window(3, 3, in, tg); });
  CHECK(contains(msg, path));
  CHECK(contains(msg, "window 3"));
  CHECK_THROWS_AS(ds.window(0, 10, in, tg), DataError);
}

TEST_CASE("batch sampler: same arguments give the same batch; seed and step change it", "[data]") {
  TempDir dir;
  const TokenDataset ds = TokenDataset::open(write_text_corpus(dir, 10000), 256);
  const int seq = 16, global = 8, micro = 2;

  const BatchSampler a(ds, seq, global, micro, 0, 1, 1234);
  const BatchSampler b(ds, seq, global, micro, 0, 1, 1234);
  std::vector<std::int32_t> in_a(micro * seq), tg_a(micro * seq), in_b(micro * seq), tg_b(micro * seq);
  for (std::int64_t step : {0, 1, 77}) {
    for (int m = 0; m < a.micro_batches_per_step(); ++m) {
      a.micro_batch(step, m, in_a.data(), tg_a.data());
      b.micro_batch(step, m, in_b.data(), tg_b.data());
      CHECK(in_a == in_b);
      CHECK(tg_a == tg_b);
    }
  }

  auto offsets = [&](const BatchSampler& s, std::int64_t step) {
    std::vector<std::size_t> o;
    for (int g = 0; g < global; ++g) o.push_back(s.sequence_offset(step, g));
    return o;
  };
  const BatchSampler other_seed(ds, seq, global, micro, 0, 1, 1235);
  CHECK(offsets(a, 0) == offsets(b, 0));
  CHECK(offsets(a, 0) != offsets(other_seed, 0));
  CHECK(offsets(a, 0) != offsets(a, 1));
  CHECK(offsets(a, 1) != offsets(a, 2));
  // Sequences of one step are not all the same one.
  const auto o = offsets(a, 5);
  CHECK(std::set<std::size_t>(o.begin(), o.end()).size() > 1);

  // The batch holds exactly the tokens at the sampled offsets.
  a.micro_batch(3, 1, in_a.data(), tg_a.data());
  for (int row = 0; row < micro; ++row) {
    const std::size_t off = a.sequence_offset(3, micro + row);
    for (int t = 0; t < seq; ++t) {
      CHECK(in_a[row * seq + t] == ds[off + t]);
      CHECK(tg_a[row * seq + t] == ds[off + t + 1]);
    }
  }
}

TEST_CASE("batch sampler: the documented hash gives these offsets (format is frozen)", "[data]") {
  // Pinned values of offset = mulhi64(mix(mix(mix(seed) ^ step) ^ g), size - seq_length),
  // computed independently from the formula in batch_sampler.hpp. A change here changes the
  // data order of every run (and of resumed runs): do not update without saying why.
  TempDir dir;
  const TokenDataset ds = TokenDataset::open(write_text_corpus(dir, 1000003), 256);
  const BatchSampler s(ds, 128, 4, 1, 0, 1, 1234);
  const std::size_t expected[3][4] = {
      {323061, 706492, 93379, 203538},
      {596721, 849114, 536588, 341534},
      {353504, 451521, 931356, 605064},
  };
  for (int step = 0; step < 3; ++step)
    for (int g = 0; g < 4; ++g) CHECK(s.sequence_offset(step, g) == expected[step][g]);
}

TEST_CASE("batch sampler: the global order does not depend on the data-parallel layout", "[data]") {
  TempDir dir;
  const TokenDataset ds = TokenDataset::open(write_text_corpus(dir, 5000), 256);
  const int seq = 12, global = 8;
  const std::uint64_t seed = 42;

  for (std::int64_t step : {0, 1, 9, 1000}) {
    // Reference: the offsets in global order, and one rank doing the whole batch at once.
    const BatchSampler ref_sampler(ds, seq, global, global, 0, 1, seed);
    std::vector<std::int32_t> ref_in, ref_tg;
    for (int g = 0; g < global; ++g) {
      const std::size_t off = ref_sampler.sequence_offset(step, g);
      for (int t = 0; t < seq; ++t) {
        ref_in.push_back(ds[off + t]);
        ref_tg.push_back(ds[off + t + 1]);
      }
    }
    const StepBatch one = whole_step(ds, seq, global, global, 1, seed, step);
    REQUIRE(one.inputs == ref_in);
    REQUIRE(one.targets == ref_tg);

    for (int dp : {1, 2, 4}) {
      for (int micro : {1, 2}) {
        INFO("step " << step << ", dp_size " << dp << ", micro_batch " << micro);
        const StepBatch got = whole_step(ds, seq, global, micro, dp, seed, step);
        CHECK(got.inputs == ref_in);
        CHECK(got.targets == ref_tg);
      }
    }
  }

  // Rank d's sequence_offset agrees with everyone's: offsets are global, not per rank.
  const BatchSampler r0(ds, seq, global, 1, 0, 4, seed);
  const BatchSampler r3(ds, seq, global, 1, 3, 4, seed);
  for (int g = 0; g < global; ++g) CHECK(r0.sequence_offset(7, g) == r3.sequence_offset(7, g));
}

TEST_CASE("batch sampler: offsets stay in range for tiny datasets", "[data]") {
  TempDir dir;
  const int seq = 8;

  SECTION("size == seq_length + 1: offset is always 0") {
    const TokenDataset ds = TokenDataset::open(write_text_corpus(dir, seq + 1), 256);
    const BatchSampler s(ds, seq, 4, 2, 0, 1, 99);
    for (std::int64_t step = 0; step < 200; ++step)
      for (int g = 0; g < 4; ++g) REQUIRE(s.sequence_offset(step, g) == 0);
    std::vector<std::int32_t> in(2 * seq), tg(2 * seq);
    s.micro_batch(3, 1, in.data(), tg.data());
    for (int t = 0; t < seq; ++t) {
      CHECK(in[t] == ds[t]);
      CHECK(in[seq + t] == ds[t]);
      CHECK(tg[t] == ds[t + 1]);
    }
  }
  SECTION("a few valid starts: all reached, none past the end") {
    const int starts = 5;  // size = seq + starts -> offsets 0..starts-1
    const TokenDataset ds = TokenDataset::open(write_text_corpus(dir, seq + starts), 256);
    const BatchSampler s(ds, seq, 8, 8, 0, 1, 7);
    std::vector<int> hits(starts, 0);
    for (std::int64_t step = 0; step < 500; ++step)
      for (int g = 0; g < 8; ++g) {
        const std::size_t off = s.sequence_offset(step, g);
        REQUIRE(off < static_cast<std::size_t>(starts));
        ++hits[off];
      }
    // 4000 draws over 5 values: each near 800 when uniform.
    for (int k = 0; k < starts; ++k) {
      INFO("offset " << k << " drawn " << hits[k] << " times of 4000");
      CHECK(hits[k] > 650);
      CHECK(hits[k] < 950);
    }
  }
}

TEST_CASE("batch sampler: targets are the inputs shifted by one", "[data]") {
  TempDir dir;
  const TokenDataset ds = TokenDataset::open(write_text_corpus(dir, 3000), 256);
  const int seq = 32, micro = 4;
  const BatchSampler s(ds, seq, 16, micro, 1, 2, 2024);  // 2 micro-batches per step
  REQUIRE(s.micro_batches_per_step() == 2);
  std::vector<std::int32_t> in(micro * seq), tg(micro * seq);
  for (std::int64_t step = 0; step < 5; ++step)
    for (int m = 0; m < 2; ++m) {
      s.micro_batch(step, m, in.data(), tg.data());
      for (int row = 0; row < micro; ++row) {
        const int g = 1 * (16 / 2) + m * micro + row;
        const std::size_t off = s.sequence_offset(step, g);
        for (int t = 0; t + 1 < seq; ++t) REQUIRE(tg[row * seq + t] == in[row * seq + t + 1]);
        REQUIRE(in[row * seq] == ds[off]);
        REQUIRE(tg[row * seq + seq - 1] == ds[off + seq]);
      }
    }
}

TEST_CASE("batch sampler: invalid configurations are clear errors", "[data]") {
  TempDir dir;
  const TokenDataset ds = TokenDataset::open(write_text_corpus(dir, 100, "small.txt"), 256);

  std::string msg = data_error_of([&] { BatchSampler(ds, 100, 8, 1, 0, 1, 1); });  // needs 101
  CHECK(contains(msg, ds.path()));
  CHECK(contains(msg, "101"));
  CHECK_NOTHROW(BatchSampler(ds, 99, 8, 1, 0, 1, 1));

  msg = data_error_of([&] { BatchSampler(ds, 8, 8, 3, 0, 1, 1); });
  CHECK(contains(msg, "not a multiple"));
  CHECK_THROWS_AS(BatchSampler(ds, 8, 8, 2, 0, 3, 1), DataError);   // 8 % (2*3)
  CHECK_THROWS_AS(BatchSampler(ds, 8, 8, 1, 4, 4, 1), DataError);   // dp_rank == dp_size
  CHECK_THROWS_AS(BatchSampler(ds, 8, 8, 1, -1, 4, 1), DataError);
  CHECK_THROWS_AS(BatchSampler(ds, 0, 8, 1, 0, 1, 1), DataError);
  CHECK_THROWS_AS(BatchSampler(ds, 8, 0, 1, 0, 1, 1), DataError);
  CHECK_THROWS_AS(BatchSampler(ds, 8, 8, 0, 0, 1, 1), DataError);

  const BatchSampler s(ds, 8, 8, 2, 1, 2, 1);
  CHECK(s.micro_batches_per_step() == 2);
  std::vector<std::int32_t> in(16), tg(16);
  CHECK_THROWS_AS(s.micro_batch(0, 2, in.data(), tg.data()), DataError);
  CHECK_THROWS_AS(s.micro_batch(0, -1, in.data(), tg.data()), DataError);
  CHECK_THROWS_AS(s.micro_batch(-1, 0, in.data(), tg.data()), DataError);
  CHECK_THROWS_AS(s.sequence_offset(0, 8), DataError);
}
