// Weighted blends (src/data/data_blend.hpp) and the sampler over them (batch_sampler.hpp).
#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "io/data_sources.hpp"
#include "src/data/batch_sampler.hpp"
#include "src/data/blend_resume.hpp"
#include "src/data/data_blend.hpp"
#include "tests/data/data_error_of.hpp"
#include "tests/data/scratch_dir.hpp"

namespace {

using tptrain::data::BatchSampler;
using tptrain::data::DataBlend;
using tptrain::data::DataError;
using tptrain::data::pick_dataset;
using tptrain::data::TokenDataset;
using tptrain::io::DataSources;

// A .txt file of n bytes, every byte `b` (so that a sequence says which dataset it came from).
std::string text_file(const tptrain::test::ScratchDir& dir, const std::string& name, std::size_t n, char b) {
  const std::string path = dir.file(name);
  std::ofstream(path, std::ios::binary) << std::string(n, b);
  return path;
}

DataSources blend_of(std::vector<std::pair<std::string, double>> entries) {
  DataSources d;
  for (auto& [path, weight] : entries) d.sources.push_back({path, weight});
  return d;
}

using tptrain::test::data_error_of;

}  // namespace

TEST_CASE("pick_dataset: the first dataset whose running share exceeds the draw", "[data][blend]") {
  const std::vector<double> c{0.25, 0.75, 1.0};
  CHECK(pick_dataset(c, 0) == 0);
  CHECK(pick_dataset(c, (std::uint64_t{1} << 62) - 2048) == 0);  // just below 0.25
  CHECK(pick_dataset(c, std::uint64_t{1} << 62) == 1);           // exactly 0.25
  CHECK(pick_dataset(c, std::uint64_t{3} << 62) == 2);           // exactly 0.75
  CHECK(pick_dataset(c, ~std::uint64_t{0}) == 2);
  CHECK(pick_dataset({1.0}, ~std::uint64_t{0}) == 0);
}

TEST_CASE("blend: shares within 0.03 of the weights, pure in (seed, step), layout-invariant", "[data][blend]") {
  tptrain::test::ScratchDir dir("tptrain_blend");
  const std::string a = text_file(dir, "a.txt", 5000, 'a'), b = text_file(dir, "b.txt", 3000, 'b');
  const DataBlend blend = DataBlend::open(blend_of({{a, 4.0}, {b, 1.0}}), "data.train", 256);
  REQUIRE(blend.size() == 2);
  CHECK(blend.share(0) == Approx(0.8));
  CHECK(blend.share(1) == Approx(0.2));
  CHECK(blend.cumulative().back() == 1.0);
  const int S = 16, global = 8;
  const BatchSampler one(blend, S, global, 8, 0, 1, 1234);
  std::vector<std::int64_t> counts;
  for (std::int64_t step = 0; step < 200; ++step) one.count_datasets(step, counts);
  REQUIRE(counts.size() == 2);
  CHECK(counts[0] + counts[1] == 200 * global);
  CHECK(std::abs(static_cast<double>(counts[0]) / (200.0 * global) - 0.8) <= 0.03);

  // Every sequence holds its dataset's byte: the draw and the copy agree, and two data-parallel
  // ranks of 2 micro-batches read what one rank reads.
  const BatchSampler r0(blend, S, global, 2, 0, 2, 1234), r1(blend, S, global, 2, 1, 2, 1234);
  std::vector<std::int32_t> all(global * S), all_t(global * S), part(2 * S), part_t(2 * S);
  for (std::int64_t step : {0, 7, 199}) {
    one.micro_batch(step, 0, all.data(), all_t.data());
    std::vector<std::int64_t> step_counts;
    one.count_datasets(step, step_counts);
    std::int64_t from_a = 0;
    for (int g = 0; g < global; ++g) {
      const std::size_t i = one.sequence_dataset(step, g);
      from_a += i == 0;
      CHECK(all[static_cast<std::size_t>(g) * S] == (i == 0 ? 'a' : 'b'));
    }
    CHECK(from_a == step_counts[0]);
    for (int rank = 0; rank < 2; ++rank)
      for (int m = 0; m < 2; ++m) {
        (rank == 0 ? r0 : r1).micro_batch(step, m, part.data(), part_t.data());
        const std::size_t first = static_cast<std::size_t>(rank * 4 + m * 2) * S;
        CHECK(std::vector<std::int32_t>(all.begin() + first, all.begin() + first + 2 * S) == part);
      }
  }
}

TEST_CASE("blend: weights whose sum overflows a double still give the shares they say", "[data][blend]") {
  // Issue 49: 1.5e308 + 1.5e308 is Inf, and w / Inf = 0 put every draw on the last entry.
  tptrain::test::ScratchDir dir("tptrain_blend");
  const std::string a = text_file(dir, "a.txt", 4096, 'a'), b = text_file(dir, "b.txt", 4096, 'b'),
                    c = text_file(dir, "c.txt", 4096, 'c');
  const DataBlend two = DataBlend::open(blend_of({{a, 1.5e308}, {b, 1.5e308}}), "data.valid", 256);
  CHECK(two.share(0) == 0.5);
  CHECK(two.share(1) == 0.5);
  const DataBlend three = DataBlend::open(blend_of({{a, 1e308}, {b, 1e308}, {c, 1e308}}), "data.train", 256);
  for (std::size_t i = 0; i < 3; ++i) CHECK(three.share(i) == Approx(1.0 / 3).epsilon(1e-15));
  CHECK(three.cumulative().back() == 1.0);
  // The largest and the smallest weights together: the small share is the ratio, not 0 or NaN.
  const DataBlend wide = DataBlend::open(blend_of({{a, 1.7e308}, {b, 1.7e300}}), "data.train", 256);
  CHECK(wide.share(1) == Approx(1e-8).epsilon(1e-6));  // a difference of running sums near 1
  // And the draws follow: about a third of 3 x 400 sequences from each.
  const BatchSampler sampler(three, 16, 8, 8, 0, 1, 7);
  std::vector<std::int64_t> counts;
  for (std::int64_t step = 0; step < 150; ++step) sampler.count_datasets(step, counts);
  for (const std::int64_t n : counts) CHECK(std::abs(static_cast<double>(n) / 1200.0 - 1.0 / 3) <= 0.05);
}

TEST_CASE("blend: one dataset samples as the plain dataset", "[data][blend]") {
  tptrain::test::ScratchDir dir("tptrain_blend");
  const std::string a = text_file(dir, "a.txt", 4096, 'a');
  const TokenDataset plain = TokenDataset::open(a, 256);
  const DataBlend blend = DataBlend::open(DataSources(a), "data.train", 256);
  const BatchSampler x(plain, 32, 8, 8, 0, 1, 99), y(blend, 32, 8, 8, 0, 1, 99);
  for (std::int64_t step = 0; step < 50; ++step)
    for (int g = 0; g < 8; ++g) {
      CHECK(x.sequence_offset(step, g) == y.sequence_offset(step, g));
      CHECK(y.sequence_dataset(step, g) == 0);
    }
}

TEST_CASE("blend: mixed kinds of tokens and short datasets are refused naming the entry", "[data][blend]") {
  tptrain::test::ScratchDir dir("tptrain_blend");
  const std::string a = text_file(dir, "a.txt", 4096, 'a');
  // An llm.c version-1 shard of 100 tokens.
  const std::string shard = dir.file("s.bin");
  {
    std::vector<std::int32_t> header(256, 0);
    header[0] = 20240520, header[1] = 1, header[2] = 100;
    std::ofstream out(shard, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    const std::vector<std::uint16_t> tokens(100, 7);
    out.write(reinterpret_cast<const char*>(tokens.data()), 200);
  }
  std::string msg = data_error_of([&] { DataBlend::open(blend_of({{a, 1.0}, {shard, 1.0}}), "data.train", 256); });
  CHECK_THAT(msg, Catch::Contains("data.train[1] {path = \"" + shard + "\", weight = 1.0} holds version 1"));
  CHECK_THAT(msg, Catch::Contains("but data.train[0] {path = \"" + a + "\", weight = 1.0} holds byte tokens"));
  msg = data_error_of([&] { DataBlend::open(blend_of({{a, 1.0}, {dir.file("none.txt"), 1.0}}), "data.valid", 256); });
  CHECK_THAT(msg, Catch::StartsWith("data.valid[1] {path = "));
  const std::string small = text_file(dir, "small.txt", 10, 'b');
  const DataBlend b = DataBlend::open(blend_of({{a, 1.0}, {small, 1.0}}), "data.train", 256);
  msg = data_error_of([&] { BatchSampler(b, 16, 8, 8, 0, 1, 1); });
  CHECK_THAT(msg, Catch::StartsWith("data.train[1] {path = "));
  CHECK_THAT(msg, Catch::Contains("10 tokens, too few for one training sequence of seq_length 16"));
}

TEST_CASE("blend resume: every change of data.train named, the draws carried over by path", "[data][blend]") {
  using tptrain::data::resume_blend;
  using tptrain::io::BlendRecord;
  BlendRecord saved;
  saved.entries = {{"/d/a.txt", 4096, 3, 30}, {"/d/b.txt", 2048, 4, 40}, {"/d/z.txt", 300, 2, 10}};
  saved.sequences = 85;  // 5 from an entry an earlier resume removed
  SECTION("the same blend: no change, every count as recorded") {
    BlendRecord now = saved;
    for (auto& e : now.entries) e.drawn = 0;
    const auto r = resume_blend(saved, now, "data.train");
    CHECK(r.changes.empty());
    CHECK(r.drawn == std::vector<std::int64_t>{30, 40, 10});
    CHECK(r.sequences == 85);
  }
  SECTION("weights, sizes, order, paths, added and removed entries") {
    BlendRecord now;
    now.entries = {{"/d/b.txt", 2048, 99, 0},   // was [1], weight 4 -> 99
                   {"/e/x.txt", 4096, 3, 0},    // at [1] where the checkpoint's [1] (b) moved away: added
                   {"/d/a.txt", 8192, 3, 0},    // was [0], grew
                   {"/d/c.txt", 512, 1, 0}};    // added
    const auto r = resume_blend(saved, now, "data.train");
    CHECK(r.drawn == std::vector<std::int64_t>{40, 0, 30, 0});
    CHECK(r.sequences == 85);
    CHECK(r.changes == std::vector<std::string>{
                           "data.train[0] \"/d/b.txt\": was data.train[1], weight 4 -> 99",
                           "data.train[1] \"/e/x.txt\": added (weight 3, 4096 tokens)",
                           "data.train[2] \"/d/a.txt\": was data.train[0], 4096 -> 8192 tokens",
                           "data.train[3] \"/d/c.txt\": added (weight 1, 512 tokens)",
                           "\"/d/z.txt\" (data.train[2] of the checkpoint, weight 2, 300 tokens): removed (10 sequences "
                           "were drawn from it)"});
  }
  SECTION("a file moved: matched by its index, its draws kept") {
    BlendRecord now = saved;
    now.entries[2].path = "/scratch/z.txt";
    for (auto& e : now.entries) e.drawn = 0;
    const auto r = resume_blend(saved, now, "data.train");
    CHECK(r.drawn == std::vector<std::int64_t>{30, 40, 10});
    CHECK(r.changes == std::vector<std::string>{"data.train[2] \"/scratch/z.txt\": path was \"/d/z.txt\""});
  }
}
