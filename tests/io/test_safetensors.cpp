// The safetensors reader and writer (io/safetensors.hpp): files built byte by byte here, not by
// the writer, are read as the format says; every hostile file is refused naming the file and the
// tensor; F16/BF16 conversions agree with the compiler's own _Float16 where there is one.
#include "catch.hpp"

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
