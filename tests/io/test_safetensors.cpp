// The safetensors reader and writer (io/safetensors.hpp): files built byte by byte here, not by
// the writer, are read as the format says; every hostile file is refused naming the file and the
// tensor; F16/BF16 conversions agree with the compiler's own _Float16 where there is one;
// float8_e4m3fn agrees with its definition for every bit pattern, and DeepSeek-V3's block-scaled
// F8_E4M3 weights read back as fp8 x scale_inv.
#include "catch.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "data/scratch_dir.hpp"
#include "io/safetensors.hpp"

using namespace tptrain::io;
using Catch::Matchers::Contains;

namespace {

std::string le64(std::uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<std::size_t>(i)] = static_cast<char>(n >> (8 * i));
  return s;
}

std::string floats(std::initializer_list<float> xs) {
  std::string s;
  for (float x : xs) s.append(reinterpret_cast<const char*>(&x), 4);
  return s;
}

// A file of `header` (its true length unless `length` says otherwise) and `data`.
std::string make_file(const tptrain::test::ScratchDir& dir, const std::string& name, const std::string& header,
                      const std::string& data, std::uint64_t length = UINT64_MAX) {
  const std::string path = dir.file(name);
  std::ofstream out(path, std::ios::binary);
  out << le64(length == UINT64_MAX ? header.size() : length) << header << data;
  return path;
}

// The reader's message for the file, or "" if it reads.
std::string refusal(const std::string& path) {
  try {
    SafetensorsReader r(path);
    for (const auto& t : r.tensors()) (void)r.read_float32(t.name);
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  return "";
}

const std::string kTwo = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

}  // namespace

TEST_CASE("safetensors: a file built by hand reads as the format says", "[io][safetensors]") {
  tptrain::test::ScratchDir dir("safetensors");
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]},)"
      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"h":{"dtype":"F16","shape":[],"data_offsets":[24,26]},)"
      R"("z":{"dtype":"BF16","shape":[0,3],"data_offsets":[26,26]}})";
  const std::string half_two = std::string("\x00\x40", 2);  // 2.0 in binary16
  const std::string path = make_file(dir, "hand.safetensors", header + "  ",
                                     floats({-1.5f, 0.25f}) + floats({1, 2, 3, 4}) + half_two);
  SafetensorsReader r(path);
  REQUIRE(r.tensors().size() == 4);
  CHECK(r.tensors()[0].name == "b");  // by offset
  CHECK(r.metadata().at("format") == "pt");
  CHECK(r.find("w")->shape == std::vector<std::uint64_t>{2, 2});
  CHECK(r.read_float32("w") == std::vector<float>{1, 2, 3, 4});
  CHECK(r.read_float32("b") == std::vector<float>{-1.5f, 0.25f});
  CHECK(r.read_float32("h") == std::vector<float>{2.0f});
  CHECK(r.read_float32("z").empty());
  CHECK(r.find("missing") == nullptr);
}

TEST_CASE("safetensors: what the writer writes reads back bit for bit, with an aligned header", "[io][safetensors]") {
  tptrain::test::ScratchDir dir("safetensors");
  const std::vector<float> w{1.0f, -0.0f, 3.14159274f, 1e-30f, -65504.0f, std::numeric_limits<float>::denorm_min()};
  std::vector<SafetensorsTensor> tensors;
  tensors.push_back({"layer.weight", SafetensorsDtype::F32, {2, 3}, safetensors_encode(w.data(), 6, SafetensorsDtype::F32)});
  tensors.push_back({"layer.bf16", SafetensorsDtype::BF16, {6}, safetensors_encode(w.data(), 6, SafetensorsDtype::BF16)});
  tensors.push_back({"layer.f16", SafetensorsDtype::F16, {3, 2}, safetensors_encode(w.data(), 6, SafetensorsDtype::F16)});
  tensors.push_back({"empty", SafetensorsDtype::F32, {0}, {}});
  const std::string path = dir.file("out.safetensors");
  write_safetensors(path, tensors, {{"producer", "tptrain"}});
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n % 8 == 0);
  CHECK(bytes.size() == 8 + n + 24 + 12 + 12);
  CHECK(bytes[8] == '{');
  SafetensorsReader r(path);
  CHECK(r.metadata().at("producer") == "tptrain");
  const auto f32 = r.read_float32("layer.weight");
  CHECK(std::memcmp(f32.data(), w.data(), 24) == 0);
  const auto bf = r.read_float32("layer.bf16");
  const auto h = r.read_float32("layer.f16");
  for (std::size_t i = 0; i < w.size(); ++i) {
    CHECK(bf[i] == bfloat16_to_float(float_to_bfloat16(w[i])));
    CHECK(h[i] == half_to_float(float_to_half(w[i])));
  }
  CHECK(h[4] == -65504.0f);
  CHECK(h[3] == 0.0f);  // 1e-30 is below half's smallest subnormal
  CHECK(r.read_float32("empty").empty());
  CHECK(!std::filesystem::exists(path + ".tmp"));
  // Names the format reserves or repeats, and byte counts that do not fit the shape.
  CHECK_THROWS_WITH(write_safetensors(dir.file("x"), {{"__metadata__", SafetensorsDtype::F32, {0}, {}}}),
                    Contains("'__metadata__'"));
  CHECK_THROWS_WITH(write_safetensors(dir.file("x"), {tensors[3], tensors[3]}), Contains("'empty'"));
  CHECK_THROWS_WITH(write_safetensors(dir.file("x"), {{"short", SafetensorsDtype::F32, {2}, {0, 0, 0, 0}}}),
                    Contains("'short'") && Contains("needs 8 bytes, 4 were given"));
}

// A source path that is not UTF-8 (issue 30: export failed with nlohmann-json's raw exception,
// naming no file): JSON holds UTF-8, so such bytes are written as U+FFFD.
TEST_CASE("safetensors: metadata that is not UTF-8 is written with replacement characters", "[io][safetensors]") {
  tptrain::test::ScratchDir dir("safetensors_utf8");
  const std::string path = dir.file("out.safetensors");
  write_safetensors(path, {}, {{"source_checkpoint", "/runs/caf\xE9/step_00000004.h5"}});
  CHECK(SafetensorsReader(path).metadata().at("source_checkpoint") == "/runs/caf\xEF\xBF\xBD/step_00000004.h5");
}

TEST_CASE("safetensors: hostile files are refused, naming the file and the tensor", "[io][safetensors]") {
  tptrain::test::ScratchDir dir("safetensors");
  const std::string data = floats({1, 2});
  struct Case {
    const char* file;
    std::string header, data;
    std::uint64_t length;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases{
      {"short", "", "abc", 0, {}},  // written below: fewer than 8 bytes in all
      {"length_beyond_file", kTwo, data, 4096, {"header length 4096 reaches beyond the end of the file"}},
      {"length_huge", kTwo, data, 1ull << 40, {"exceeds the format's limit"}},
      {"not_json", "{\"a\": [1, 2", "", UINT64_MAX, {"the header is not valid JSON"}},
      {"not_object", "[1, 2, 3]", "", UINT64_MAX, {"does not start with '{'"}},
      {"truncated", kTwo, floats({1}), UINT64_MAX, {"tensor 'a'", "reach beyond the data section, 4 bytes"}},
      {"trailing", kTwo, data + "xx", UINT64_MAX, {"trailing bytes"}},
      {"overlap",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       data, UINT64_MAX, {"tensor 'b'", "overlaps tensor 'a'"}},
      {"gap", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data, UINT64_MAX,
       {"tensor 'a' starts at byte 4", "gap"}},
      {"unknown_dtype", R"({"a":{"dtype":"F31","shape":[2],"data_offsets":[0,8]}})", data, UINT64_MAX,
       {"tensor 'a'", "unknown dtype \"F31\""}},
      {"wrong_dtype_size", R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})", data, UINT64_MAX,
       {"tensor 'a'", "shape [2] of F64 needs 16 bytes", "hold 8"}},
      {"duplicate", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       data, UINT64_MAX, {"tensor 'a' is named twice"}},
      {"negative_shape", R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data, UINT64_MAX,
       {"tensor 'a'", "expected non-negative integers"}},
      {"huge_shape", R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", data,
       UINT64_MAX, {"tensor 'a'", "more than 2^64"}},
      {"offsets_reversed", R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", data, UINT64_MAX,
       {"tensor 'a'", "begin > end"}},
      {"no_offsets", R"({"a":{"dtype":"F32","shape":[2]}})", data, UINT64_MAX, {"tensor 'a'", "no data_offsets"}},
      {"extra_field", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", data, UINT64_MAX,
       {"tensor 'a'", "unknown field 'x'"}},
      {"metadata_number", R"({"__metadata__":{"n":1},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data,
       UINT64_MAX, {"__metadata__ 'n' is 1, not a string"}},
      {"integer_tensor", R"({"a":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})", data, UINT64_MAX,
       {"tensor 'a' is I32: expected a floating-point dtype"}},
      {"empty_name", R"({"":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data, UINT64_MAX,
       {"empty name"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.file);
    std::string path;
    if (std::string(c.file) == "short") {
      path = dir.file("short.safetensors");
      std::ofstream(path, std::ios::binary) << "abc";
    } else {
      path = make_file(dir, std::string(c.file) + ".safetensors", c.header, c.data, c.length);
    }
    const std::string message = refusal(path);
    CAPTURE(message);
    CHECK_THAT(message, Contains(std::string(c.file) + ".safetensors"));
    for (const std::string& e : c.expected) CHECK_THAT(message, Contains(e));
    if (std::string(c.file) == "short") CHECK_THAT(message, Contains("too short for the 8-byte header length"));
  }
  CHECK_THAT(refusal(dir.file("absent.safetensors")), Contains("absent.safetensors: no such file"));
  CHECK_THAT(refusal(dir.path()), Contains("not a regular file"));
  CHECK(refusal(make_file(dir, "good.safetensors", kTwo, data)).empty());
}

TEST_CASE("safetensors: binary16 and bfloat16 conversions round to nearest even", "[io][safetensors]") {
  // Every half that is not a NaN survives half -> float -> half.
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0) continue;
    if (float_to_half(half_to_float(static_cast<std::uint16_t>(h))) != h) FAIL("half " << h);
  }
  CHECK(half_to_float(0x3c00) == 1.0f);
  CHECK(half_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(half_to_float(0xfbff) == -65504.0f);
  CHECK(float_to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);       // a tie goes to even
  CHECK(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);   // a tie goes to even (up)
  CHECK(float_to_half(65519.0f) == 0x7bff);
  CHECK(float_to_half(65520.0f) == 0x7c00);
  CHECK(std::isnan(half_to_float(float_to_half(std::nanf("")))));
  CHECK(float_to_bfloat16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);  // tie to even
  CHECK(float_to_bfloat16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);
  CHECK(std::isnan(bfloat16_to_float(float_to_bfloat16(std::nanf("")))));
  for (std::uint32_t b = 0; b < 0x10000u; ++b)
    if ((b & 0x7f80u) != 0x7f80u && float_to_bfloat16(bfloat16_to_float(static_cast<std::uint16_t>(b))) != b)
      FAIL("bfloat16 " << b);
#if defined(__FLT16_MAX__)
  // The compiler's conversion is the reference for floats of every magnitude.
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> any;
  for (int i = 0; i < 200000; ++i) {
    const std::uint32_t bits = any(rng);
    if ((bits & 0x7fffffffu) > 0x7f800000u) continue;  // NaN (by its bits: comparing a signalling NaN traps here)
    float f;
    std::memcpy(&f, &bits, 4);
    const _Float16 reference = static_cast<_Float16>(f);
    std::uint16_t expected;
    std::memcpy(&expected, &reference, 2);
    if (float_to_half(f) != expected) FAIL("float bits " << bits << ": " << float_to_half(f) << " vs " << expected);
  }
#endif
}

namespace {

// E4M3FN written out from the OCP definition, in double, independently of the library:
// S.EEEE.MMM is (-1)^S 2^(E-7) (1 + M/8) for E >= 1, (-1)^S 2^-6 (M/8) for E = 0, and NaN for
// S.1111.111 (no infinities).
double e4m3fn_by_definition(std::uint8_t b) {
  const double sign = (b & 0x80) ? -1.0 : 1.0;
  const int e = (b >> 3) & 0xf, m = b & 0x7;
  if (e == 15 && m == 7) return std::copysign(std::numeric_limits<double>::quiet_NaN(), sign);
  if (e == 0) return sign * std::pow(2.0, -6) * (m / 8.0);
  return sign * std::pow(2.0, e - 7) * (1.0 + m / 8.0);
}

// The nearest finite E4M3FN pattern to x by searching all of them: ties go to the pattern whose
// last bit is 0 (the even mantissa), magnitudes beyond 448 to +-448.
std::uint8_t nearest_e4m3fn(float x) {
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::min(std::fabs(static_cast<double>(x)), 448.0);
  std::uint8_t best = 0;
  for (std::uint8_t b = 1; b <= 0x7e; ++b) {
    const double d = std::fabs(e4m3fn_by_definition(b) - a), d_best = std::fabs(e4m3fn_by_definition(best) - a);
    if (d < d_best || (d == d_best && (b & 1) == 0)) best = b;
  }
  return static_cast<std::uint8_t>(sign | best);
}

std::vector<float> e4m3fn_values(const std::vector<std::uint8_t>& bytes) {
  std::vector<float> v;
  for (std::uint8_t b : bytes) v.push_back(static_cast<float>(e4m3fn_by_definition(b)));
  return v;
}

}  // namespace

TEST_CASE("safetensors: every float8_e4m3fn bit pattern is the value the OCP format defines",
          "[io][safetensors][fp8]") {
  int nans = 0;
  for (int i = 0; i < 256; ++i) {
    const auto b = static_cast<std::uint8_t>(i);
    CAPTURE(i);
    const float f = float8_e4m3fn_to_float(b);
    const double expected = e4m3fn_by_definition(b);
    if (std::isnan(expected)) {
      CHECK(std::isnan(f));
      CHECK(std::signbit(f) == ((b & 0x80) != 0));
      CHECK(std::isnan(float8_e4m3fn_to_float(float_to_float8_e4m3fn(f))));
      ++nans;
      continue;
    }
    CHECK(static_cast<double>(f) == expected);
    CHECK(std::signbit(f) == ((b & 0x80) != 0));  // -0 (0x80) included
    CHECK(float_to_float8_e4m3fn(f) == b);        // every finite value, and both zeros, round-trips
  }
  CHECK(nans == 2);  // 0x7F and 0xFF only
  CHECK(std::isnan(float8_e4m3fn_to_float(0x7f)));
  CHECK(std::isnan(float8_e4m3fn_to_float(0xff)));
  CHECK(float8_e4m3fn_to_float(0x7e) == 448.0f);   // the largest finite
  CHECK(float8_e4m3fn_to_float(0xfe) == -448.0f);
  CHECK(float8_e4m3fn_to_float(0x78) == 256.0f);   // 0x78 is 2^8, not infinity: there is none
  CHECK(float8_e4m3fn_to_float(0x38) == 1.0f);
  CHECK(float8_e4m3fn_to_float(0x08) == std::ldexp(1.0f, -6));  // smallest normal
  CHECK(float8_e4m3fn_to_float(0x07) == 7 * std::ldexp(1.0f, -9));  // largest subnormal
  CHECK(float8_e4m3fn_to_float(0x01) == std::ldexp(1.0f, -9));  // smallest subnormal
  CHECK(float8_e4m3fn_to_float(0x00) == 0.0f);
}

TEST_CASE("safetensors: float_to_float8_e4m3fn rounds to nearest even and saturates at 448", "[io][safetensors][fp8]") {
  // Between every two neighbouring finite values: the midpoint goes to the even pattern, a float
  // either side of it to the nearer value (the midpoints have 5 significant bits: exact floats).
  for (std::uint8_t b = 0; b < 0x7e; ++b) {
    for (int sign : {0x00, 0x80}) {
      const auto lo = static_cast<std::uint8_t>(sign | b), hi = static_cast<std::uint8_t>(sign | (b + 1));
      const float mid = (float8_e4m3fn_to_float(lo) + float8_e4m3fn_to_float(hi)) / 2;
      CAPTURE(int(lo), mid);
      CHECK(float_to_float8_e4m3fn(mid) == ((lo & 1) == 0 ? lo : hi));
      CHECK(float_to_float8_e4m3fn(std::nextafter(mid, 0.0f)) == lo);
      CHECK(float_to_float8_e4m3fn(std::nextafter(mid, sign ? -1000.0f : 1000.0f)) == hi);
    }
  }
  CHECK(float_to_float8_e4m3fn(1.0625f) == 0x38);                     // 1 + 1/16: tie, down to 1.0
  CHECK(float_to_float8_e4m3fn(1.1875f) == 0x3a);                     // 1 + 3/16: tie, up to 1.25
  CHECK(float_to_float8_e4m3fn(std::ldexp(1.0f, -10)) == 0x00);       // half the smallest subnormal
  CHECK(float_to_float8_e4m3fn(std::ldexp(3.0f, -10)) == 0x02);       // 1.5 subnormal steps: to 2
  CHECK(float_to_float8_e4m3fn(std::ldexp(15.0f, -10)) == 0x08);      // largest subnormal + half: the smallest normal
  CHECK(float_to_float8_e4m3fn(std::numeric_limits<float>::denorm_min()) == 0x00);
  CHECK(float_to_float8_e4m3fn(-std::numeric_limits<float>::denorm_min()) == 0x80);  // -0 keeps its sign
  CHECK(float_to_float8_e4m3fn(432.0f) == 0x7e);                      // between 416 and 448: tie to 448
  // Saturation: everything beyond 448 is +-448 (PyTorch's cast would give NaN from 480 on).
  for (float big : {448.5f, 464.0f, 480.0f, 1e6f, std::numeric_limits<float>::max(),
                    std::numeric_limits<float>::infinity()}) {
    CAPTURE(big);
    CHECK(float_to_float8_e4m3fn(big) == 0x7e);
    CHECK(float_to_float8_e4m3fn(-big) == 0xfe);
  }
  CHECK(float_to_float8_e4m3fn(std::nanf("")) == 0x7f);
  CHECK(float_to_float8_e4m3fn(-std::nanf("")) == 0xff);
  // Floats of every magnitude up to 2^9 against the search over all patterns.
  std::mt19937 rng(11);
  std::uniform_int_distribution<std::uint32_t> bits(0, 0x44000000u);  // 0 .. 512.0f, log-uniform-ish
  for (int i = 0; i < 20000; ++i) {
    std::uint32_t x = bits(rng) | (i % 2 ? 0x80000000u : 0u);
    float f;
    std::memcpy(&f, &x, 4);
    if (float_to_float8_e4m3fn(f) != nearest_e4m3fn(f))
      FAIL("float bits " << x << ": " << int(float_to_float8_e4m3fn(f)) << " vs " << int(nearest_e4m3fn(f)));
  }
}

TEST_CASE("safetensors: DeepSeek-V3 F8_E4M3 weights read as fp8 x their 128x128 block scale_inv",
          "[io][safetensors][fp8]") {
  tptrain::test::ScratchDir dir("safetensors_fp8");
  // 130 x 260: the last row block is 2 rows, the last column block 4 columns, so [2, 3] scales.
  const std::uint64_t rows = 130, cols = 260;
  const std::string name = "model.layers.3.mlp.experts.7.gate_proj.weight";
  std::vector<std::uint8_t> stored(rows * cols);
  for (std::uint64_t r = 0; r < rows; ++r)  // every row holds all 256 patterns (13 is odd)
    for (std::uint64_t c = 0; c < cols; ++c) stored[r * cols + c] = static_cast<std::uint8_t>(r * 7 + c * 13);
  const std::vector<float> weight = e4m3fn_values(stored);
  const std::vector<std::uint8_t> encoded = safetensors_encode(weight.data(), weight.size(), SafetensorsDtype::F8_E4M3);
  REQUIRE(encoded == stored);  // the NaN patterns too: a NaN's sign survives
  const std::vector<float> scale_inv{0.5f, 1.0f / 3, 2.5e-4f, 7.0f, 1.1e-3f, 3.0e5f};  // row-major [2, 3]
  for (SafetensorsDtype scale_dtype : {SafetensorsDtype::F32, SafetensorsDtype::BF16}) {
    CAPTURE(dtype_name(scale_dtype));
    const std::string path = dir.file(std::string("fp8_") + dtype_name(scale_dtype) + ".safetensors");
    const std::vector<std::uint8_t> scale_bytes = safetensors_encode(scale_inv.data(), 6, scale_dtype);
    write_safetensors(path, {{name, SafetensorsDtype::F8_E4M3, {rows, cols}, encoded},
                             {name + "_scale_inv", scale_dtype, {2, 3}, scale_bytes}});
    SafetensorsReader r(path);
    CHECK(r.find(name)->dtype == SafetensorsDtype::F8_E4M3);
    const std::vector<float> scales = r.read_float32(name + "_scale_inv");
    const std::vector<float> w = r.read_float32(name);
    REQUIRE(w.size() == rows * cols);
    std::uint64_t mismatches = 0, nans = 0, nan_patterns = 0;
    for (std::uint8_t b : stored) nan_patterns += (b & 0x7f) == 0x7f;
    for (std::uint64_t row = 0; row < rows; ++row)
      for (std::uint64_t c = 0; c < cols; ++c) {
        const std::uint64_t i = row * cols + c;
        // 4 x 24 significant bits: the double product is exact, and float32 rounds it once.
        const double s = scales[(row / 128) * 3 + c / 128];
        const double product = e4m3fn_by_definition(stored[i]) * s;
        if (std::isnan(product)) {
          nans += 1;
          mismatches += !std::isnan(w[i]);
        } else {
          mismatches += w[i] != static_cast<float>(product);
        }
      }
    CHECK(mismatches == 0);
    CHECK(nans == nan_patterns);  // the NaN patterns stay NaN, whatever their scale
    if (scale_dtype == SafetensorsDtype::BF16) CHECK(scales[1] == bfloat16_to_float(float_to_bfloat16(1.0f / 3)));
    else CHECK(scales == scale_inv);
    // The last block, 2 x 4: the corner element has the last scale.
    CHECK(w[129 * cols + 259] == static_cast<float>(e4m3fn_by_definition(stored[129 * cols + 259]) * scales[5]));
  }
}

TEST_CASE("safetensors: F8_E4M3 without well-formed block scales is refused, naming both tensors",
          "[io][safetensors][fp8]") {
  tptrain::test::ScratchDir dir("safetensors_fp8");
  const std::vector<float> zeros(130 * 260, 0.0f);
  const auto fp8 = [&](std::vector<std::uint64_t> shape) {
    std::uint64_t n = 1;
    for (std::uint64_t d : shape) n *= d;
    return SafetensorsTensor{"w", SafetensorsDtype::F8_E4M3, shape,
                             safetensors_encode(zeros.data(), n, SafetensorsDtype::F8_E4M3)};
  };
  const auto scale = [&](std::vector<std::uint64_t> shape, SafetensorsDtype dtype = SafetensorsDtype::F32) {
    std::uint64_t n = 1;
    for (std::uint64_t d : shape) n *= d;
    return SafetensorsTensor{"w_scale_inv", dtype, shape, safetensors_encode(zeros.data(), n, dtype)};
  };
  struct Case {
    const char* file;
    std::vector<SafetensorsTensor> tensors;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases{
      {"missing", {fp8({130, 260})}, {"tensor 'w' is F8_E4M3 without its block scales 'w_scale_inv'"}},
      {"short_scale", {fp8({130, 260}), scale({1, 3})},
       {"tensor 'w_scale_inv', the block scales of F8_E4M3 tensor 'w' of shape [130, 260]",
        "has shape [1, 3]: expected [2, 3]"}},
      {"transposed_scale", {fp8({130, 260}), scale({3, 2})}, {"'w_scale_inv'", "has shape [3, 2]: expected [2, 3]"}},
      {"flat_scale", {fp8({130, 260}), scale({6})}, {"'w_scale_inv'", "has shape [6]: expected [2, 3]"}},
      {"f16_scale", {fp8({130, 260}), scale({2, 3}, SafetensorsDtype::F16)},
       {"tensor 'w_scale_inv', the block scales of F8_E4M3 tensor 'w'", "is F16: expected F32 or BF16"}},
      {"flat_weight", {fp8({260}), scale({3})}, {"tensor 'w' is F8_E4M3 of shape [260]", "'w_scale_inv'", "2-D"}},
      {"e5m2", {{"w", SafetensorsDtype::F8_E5M2, {2}, {0x3c, 0x40}}}, {"tensor 'w' is F8_E5M2: not read"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.file);
    const std::string path = dir.file(std::string(c.file) + ".safetensors");
    write_safetensors(path, c.tensors);
    std::string message;
    try {
      (void)SafetensorsReader(path).read_float32("w");
    } catch (const SafetensorsError& e) {
      message = e.what();
    }
    CAPTURE(message);
    CHECK_THAT(message, Contains(std::string(c.file) + ".safetensors"));
    for (const std::string& e : c.expected) CHECK_THAT(message, Contains(e));
  }
  // A well-formed pair reads, zeros times zeros; and the writer still refuses F8_E5M2.
  const std::string good = dir.file("good.safetensors");
  write_safetensors(good, {fp8({130, 260}), scale({2, 3})});
  CHECK(SafetensorsReader(good).read_float32("w") == zeros);
  CHECK_THROWS_AS(safetensors_encode(zeros.data(), 1, SafetensorsDtype::F8_E5M2), std::invalid_argument);
}
