#include "io/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "io/path_text.hpp"

// The format is little-endian; elements are copied to and from memory as they are.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

namespace tptrain::io {

namespace {

struct DtypeRow {
  SafetensorsDtype dtype;
  const char* name;
  std::size_t bytes;
};
constexpr DtypeRow kDtypes[] = {
    {SafetensorsDtype::BOOL, "BOOL", 1},   {SafetensorsDtype::U8, "U8", 1},
    {SafetensorsDtype::I8, "I8", 1},       {SafetensorsDtype::F8_E5M2, "F8_E5M2", 1},
    {SafetensorsDtype::F8_E4M3, "F8_E4M3", 1}, {SafetensorsDtype::I16, "I16", 2},
    {SafetensorsDtype::U16, "U16", 2},     {SafetensorsDtype::F16, "F16", 2},
    {SafetensorsDtype::BF16, "BF16", 2},   {SafetensorsDtype::I32, "I32", 4},
    {SafetensorsDtype::U32, "U32", 4},     {SafetensorsDtype::F32, "F32", 4},
    {SafetensorsDtype::F64, "F64", 8},     {SafetensorsDtype::I64, "I64", 8},
    {SafetensorsDtype::U64, "U64", 8},
};

const DtypeRow& row_of(SafetensorsDtype dtype) {
  for (const DtypeRow& r : kDtypes)
    if (r.dtype == dtype) return r;
  throw std::logic_error("tptrain: a safetensors dtype without a row in kDtypes");
}

std::uint32_t bits_of(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  return x;
}
float float_of(std::uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// a * b, or nullopt when it does not fit in 64 bits.
std::optional<std::uint64_t> times(std::uint64_t a, std::uint64_t b) {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) return std::nullopt;
  return a * b;
}

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw SafetensorsError("safetensors file " + display_path(path) + ": " + what);
}

// One header entry, checked: {"dtype": ..., "shape": [...], "data_offsets": [begin, end]}.
SafetensorsTensorInfo tensor_entry(const std::string& path, const std::string& name, const nlohmann::json& entry,
                                   std::uint64_t data_bytes) {
  const auto bad = [&](const std::string& what) { fail(path, "tensor '" + name + "': " + what); };
  if (name.empty()) fail(path, "a tensor has an empty name");
  if (!entry.is_object()) bad("expected an object with dtype, shape and data_offsets, got " + entry.dump());
  for (const auto& [key, value] : entry.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      bad("unknown field '" + key + "' (expected dtype, shape and data_offsets)");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(key)) bad(std::string("no ") + key);
  SafetensorsTensorInfo t;
  t.name = name;
  const nlohmann::json& dtype = entry["dtype"];
  std::optional<SafetensorsDtype> d;
  if (dtype.is_string()) d = dtype_from_name(dtype.get<std::string>());
  if (!d) {
    std::string known;
    for (const DtypeRow& r : kDtypes) known += std::string(known.empty() ? "" : ", ") + r.name;
    bad("unknown dtype " + dtype.dump() + " (expected one of " + known + ")");
  }
  t.dtype = *d;
  const nlohmann::json& shape = entry["shape"];
  if (!shape.is_array()) bad("shape " + shape.dump() + " is not an array");
  for (const auto& dim : shape) {
    if (!dim.is_number_unsigned()) bad("shape " + shape.dump() + ": expected non-negative integers");
    t.shape.push_back(dim.get<std::uint64_t>());
  }
  const nlohmann::json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    bad("data_offsets " + offsets.dump() + ": expected [begin, end], two non-negative integers");
  t.begin = offsets[0].get<std::uint64_t>();
  t.end = offsets[1].get<std::uint64_t>();
  if (t.begin > t.end) bad("data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "]: begin > end");
  if (t.end > data_bytes)
    bad("data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "] reach beyond the data section, " +
        std::to_string(data_bytes) + " bytes (the file is truncated or the offsets are wrong)");
  std::optional<std::uint64_t> bytes = dtype_bytes(t.dtype);
  for (std::uint64_t dim : t.shape)
    if (bytes) bytes = times(*bytes, dim);
  if (!bytes || *bytes != t.end - t.begin)
    bad(std::string("shape ") + shape_text(t.shape) + " of " + dtype_name(t.dtype) + " needs " +
        (bytes ? std::to_string(*bytes) : std::string("more than 2^64")) + " bytes, data_offsets [" +
        std::to_string(t.begin) + ", " + std::to_string(t.end) + "] hold " + std::to_string(t.end - t.begin));
  return t;
}

}  // namespace

const char* dtype_name(SafetensorsDtype dtype) { return row_of(dtype).name; }
std::size_t dtype_bytes(SafetensorsDtype dtype) { return row_of(dtype).bytes; }
std::optional<SafetensorsDtype> dtype_from_name(std::string_view name) {
  for (const DtypeRow& r : kDtypes)
    if (name == r.name) return r.dtype;
  return std::nullopt;
}

std::uint64_t SafetensorsTensorInfo::elements() const {
  std::uint64_t n = 1;
  for (std::uint64_t d : shape) n *= d;  // bounded: the reader checked shape x dtype = end - begin
  return n;
}

SafetensorsReader::SafetensorsReader(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  const auto status = std::filesystem::status(path_, ec);
  if (status.type() == std::filesystem::file_type::not_found) fail(path_, "no such file");
  if (ec) fail(path_, ec.message());
  if (status.type() != std::filesystem::file_type::regular) fail(path_, "not a regular file");
  const std::uint64_t size = std::filesystem::file_size(path_, ec);
  if (ec) fail(path_, ec.message());
  std::ifstream in(path_, std::ios::binary);
  if (!in) fail(path_, std::string("cannot open: ") + std::strerror(errno));
  if (size < 8) fail(path_, std::to_string(size) + " bytes: too short for the 8-byte header length");
  unsigned char length_bytes[8];
  in.read(reinterpret_cast<char*>(length_bytes), 8);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | length_bytes[i];
  if (n > kMaxSafetensorsHeaderBytes)
    fail(path_, "header length " + std::to_string(n) + " exceeds the format's limit of " +
                    std::to_string(kMaxSafetensorsHeaderBytes) + " bytes (not a safetensors file, or a damaged one)");
  if (n > size - 8)
    fail(path_, "header length " + std::to_string(n) + " reaches beyond the end of the file (" + std::to_string(size) +
                    " bytes): the file is truncated or not a safetensors file");
  if (n < 2) fail(path_, "header length " + std::to_string(n) + ": too short for a JSON object");
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  if (!in) fail(path_, "cannot read the header");
  if (header[0] != '{') fail(path_, "the header does not start with '{' (not a safetensors file)");
  data_start_ = 8 + n;
  const std::uint64_t data_bytes = size - data_start_;

  // nlohmann keeps the last of two equal keys; the format forbids them, so the parser's key
  // events at the top level are counted.
  std::set<std::string> seen;
  std::string duplicate;
  const auto count_keys = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 && !seen.insert(parsed.get<std::string>()).second &&
        duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(header, count_keys);
  } catch (const nlohmann::json::exception& e) {
    fail(path_, std::string("the header is not valid JSON: ") + e.what());
  }
  if (!json.is_object()) fail(path_, "the header is not a JSON object");
  if (!duplicate.empty()) fail(path_, "tensor '" + duplicate + "' is named twice in the header");
  for (const auto& [name, entry] : json.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(path_, "__metadata__ is not an object of strings");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) fail(path_, "__metadata__ '" + key + "' is " + value.dump() + ", not a string");
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    tensors_.push_back(tensor_entry(path_, name, entry, data_bytes));
  }
  // The data section is the tensors' ranges laid end to end: no overlap, no gap, nothing after.
  std::sort(tensors_.begin(), tensors_.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t at = 0;
  const SafetensorsTensorInfo* previous = nullptr;
  for (const SafetensorsTensorInfo& t : tensors_) {
    if (t.begin < at)
      fail(path_, "tensor '" + t.name + "' (bytes " + std::to_string(t.begin) + ".." + std::to_string(t.end) +
                      ") overlaps tensor '" + previous->name + "' (bytes " + std::to_string(previous->begin) + ".." +
                      std::to_string(previous->end) + ")");
    if (t.begin > at)
      fail(path_, "tensor '" + t.name + "' starts at byte " + std::to_string(t.begin) + " of the data section, " +
                      "but the data before it ends at " + std::to_string(at) + " (a gap no tensor covers)");
    at = t.end;
    previous = &t;
  }
  if (at != data_bytes)
    fail(path_, "the tensors cover " + std::to_string(at) + " bytes of the data section, the file holds " +
                    std::to_string(data_bytes) + " (trailing bytes no tensor covers)");
}

const SafetensorsTensorInfo* SafetensorsReader::find(const std::string& name) const {
  for (const SafetensorsTensorInfo& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

std::vector<std::uint8_t> SafetensorsReader::read_bytes(const SafetensorsTensorInfo& t) const {
  std::vector<std::uint8_t> bytes(t.end - t.begin);
  std::ifstream in(path_, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(data_start_ + t.begin));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!in) fail(path_, "tensor '" + t.name + "': cannot read its " + std::to_string(bytes.size()) + " bytes");
  return bytes;
}

// The scales' own layout is checked before any byte is read: a scale tensor of another shape
// would pair blocks with the wrong scales, and nothing downstream could tell.
std::vector<float> SafetensorsReader::dequantise_fp8_blocks(const SafetensorsTensorInfo& t) const {
  const std::string scale_name = t.name + std::string(kFp8ScaleSuffix);
  const SafetensorsTensorInfo* scale = find(scale_name);
  if (scale == nullptr)
    fail(path_, "tensor '" + t.name + "' is F8_E4M3 without its block scales '" + scale_name +
                    "' (DeepSeek-V3's fp8 checkpoints hold, beside each F8_E4M3 weight, one scale per " +
                    std::to_string(kFp8WeightBlockSize) + " x " + std::to_string(kFp8WeightBlockSize) +
                    " block in '<name>" + std::string(kFp8ScaleSuffix) + "'; the file lacks it)");
  if (t.shape.size() != 2)
    fail(path_, "tensor '" + t.name + "' is F8_E4M3 of shape " + shape_text(t.shape) + ": block scales ('" +
                    scale_name + "') are defined for 2-D weights only");
  const std::string of_weight = "tensor '" + scale_name + "', the block scales of F8_E4M3 tensor '" + t.name +
                                "' of shape " + shape_text(t.shape) + ", ";
  if (scale->dtype != SafetensorsDtype::F32 && scale->dtype != SafetensorsDtype::BF16)
    fail(path_, of_weight + "is " + dtype_name(scale->dtype) + ": expected F32 or BF16");
  const std::uint64_t rows = t.shape[0], cols = t.shape[1];
  const auto blocks = [](std::uint64_t n) { return (n + kFp8WeightBlockSize - 1) / kFp8WeightBlockSize; };
  const std::vector<std::uint64_t> expected{blocks(rows), blocks(cols)};
  if (scale->shape != expected)
    fail(path_, of_weight + "has shape " + shape_text(scale->shape) + ": expected " + shape_text(expected) +
                    " (one per " + std::to_string(kFp8WeightBlockSize) + " x " + std::to_string(kFp8WeightBlockSize) +
                    " block)");
  const std::vector<float> scales = read_float32(scale_name);  // F32 or BF16: widened exactly
  const std::vector<std::uint8_t> bytes = read_bytes(t);
  // All 256 values once: the decode is then a lookup per element.
  float value_of[256];
  for (int b = 0; b < 256; ++b) value_of[b] = float8_e4m3fn_to_float(static_cast<std::uint8_t>(b));
  std::vector<float> out(rows * cols);
  for (std::uint64_t r = 0; r < rows; ++r) {
    const float* scale_row = &scales[(r / kFp8WeightBlockSize) * expected[1]];
    for (std::uint64_t c = 0; c < cols; ++c)
      out[r * cols + c] = value_of[bytes[r * cols + c]] * scale_row[c / kFp8WeightBlockSize];
  }
  return out;
}

std::vector<float> SafetensorsReader::read_float32(const std::string& name) const {
  const SafetensorsTensorInfo* t = find(name);
  if (t == nullptr) fail(path_, "no tensor '" + name + "'");
  const SafetensorsDtype d = t->dtype;
  if (d == SafetensorsDtype::F8_E4M3) return dequantise_fp8_blocks(*t);
  if (d == SafetensorsDtype::F8_E5M2)
    fail(path_, "tensor '" + name + "' is F8_E5M2: not read (of the 8-bit floats, only F8_E4M3 with its '<name>" +
                    std::string(kFp8ScaleSuffix) + "' block scales, DeepSeek-V3's layout, is)");
  if (d != SafetensorsDtype::F32 && d != SafetensorsDtype::F16 && d != SafetensorsDtype::BF16 &&
      d != SafetensorsDtype::F64)
    fail(path_, "tensor '" + name + "' is " + dtype_name(d) +
                    ": expected a floating-point dtype (F32, F16, BF16, F64, or F8_E4M3 with its block scales)");
  const std::vector<std::uint8_t> bytes = read_bytes(*t);
  const std::uint64_t n = t->elements();
  std::vector<float> out(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    if (d == SafetensorsDtype::F32) {
      std::memcpy(&out[i], &bytes[4 * i], 4);
    } else if (d == SafetensorsDtype::F64) {
      double x;
      std::memcpy(&x, &bytes[8 * i], 8);
      out[i] = static_cast<float>(x);
    } else {
      std::uint16_t h;
      std::memcpy(&h, &bytes[2 * i], 2);
      out[i] = d == SafetensorsDtype::F16 ? half_to_float(h) : bfloat16_to_float(h);
    }
  }
  return out;
}

std::vector<std::uint8_t> safetensors_encode(const float* values, std::uint64_t count, SafetensorsDtype dtype) {
  std::vector<std::uint8_t> out;
  if (dtype == SafetensorsDtype::F32) {
    out.resize(4 * count);
    if (count > 0) std::memcpy(out.data(), values, 4 * count);
    return out;
  }
  if (dtype == SafetensorsDtype::F8_E4M3) {
    out.resize(count);
    for (std::uint64_t i = 0; i < count; ++i) out[i] = float_to_float8_e4m3fn(values[i]);
    return out;
  }
  if (dtype != SafetensorsDtype::F16 && dtype != SafetensorsDtype::BF16)
    throw std::invalid_argument(std::string("tptrain: safetensors_encode: cannot write float32 values as ") +
                                dtype_name(dtype));
  out.resize(2 * count);
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint16_t h = dtype == SafetensorsDtype::F16 ? float_to_half(values[i]) : float_to_bfloat16(values[i]);
    std::memcpy(&out[2 * i], &h, 2);
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t at = 0;
  for (const SafetensorsTensor& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || header.contains(t.name))
      fail(path, "cannot write a tensor named '" + t.name + "' (empty, reserved or given twice)");
    std::uint64_t bytes = dtype_bytes(t.dtype);
    for (std::uint64_t d : t.shape) bytes *= d;
    if (bytes != t.bytes.size())
      fail(path, "tensor '" + t.name + "': shape " + shape_text(t.shape) + " of " + dtype_name(t.dtype) + " needs " +
                     std::to_string(bytes) + " bytes, " + std::to_string(t.bytes.size()) + " were given");
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  // Bytes that are not UTF-8 (a file name in the metadata) are written as U+FFFD: JSON is UTF-8.
  std::string text = header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned, as the Python writer does
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail(tmp, std::string("cannot create: ") + std::strerror(errno));
    unsigned char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(text.size()) >> (8 * i));
    out.write(reinterpret_cast<const char*>(length), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const SafetensorsTensor& t : tensors)
      out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
    out.close();
    if (!out) {
      const std::string why = std::strerror(errno);
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
      fail(tmp, "cannot write: " + why);
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) fail(path, "cannot rename " + display_path(tmp) + " to it: " + ec.message());
}

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa x 2^-24, exact in float
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return float_of(sign | 0x7f800000u | (mantissa << 13));  // Inf, NaN (payload kept)
  return float_of(sign | ((exponent + 112) << 23) | (mantissa << 13));        // rebias 15 -> 127
}

std::uint16_t float_to_half(float f) {
  std::uint32_t x = bits_of(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu));  // NaN, quiet
  if (x >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to Inf
  if (x < 0x38800000u) {  // below 2^-14: a subnormal half, m x 2^-24 (the scaling is exact; rint ties to even)
    const float m = std::nearbyint(float_of(x) * 16777216.0f);
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(m));
  }
  std::uint32_t h = ((((x >> 23) - 112u) << 10) | ((x & 0x7fffffu) >> 13));
  const std::uint32_t rest = x & 0x1fffu;  // the 13 bits dropped: round to nearest, ties to even
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent, as it should
  return static_cast<std::uint16_t>(sign | h);
}

float bfloat16_to_float(std::uint16_t b) { return float_of(static_cast<std::uint32_t>(b) << 16); }

std::uint16_t float_to_bfloat16(float f) {
  const std::uint32_t x = bits_of(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // NaN, quiet
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);  // nearest, ties to even
}

// E4M3FN from its definition (OCP OFP8 spec): the fields are read as numbers and scaled with
// ldexp, which is exact here (at most 4 significant bits, exponents -9..8).
float float8_e4m3fn_to_float(std::uint8_t b) {
  const bool negative = (b & 0x80u) != 0;
  const int exponent = (b >> 3) & 0xf;
  const int mantissa = b & 0x7;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (exponent == 15 && mantissa == 7) return negative ? -nan : nan;  // S.1111.111, the only NaNs
  // Subnormal: 2^-6 x m/8 = m x 2^-9. Normal: 2^(e-7) x (1 + m/8) = (8 + m) x 2^(e-10).
  const float magnitude = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -9)
                                        : std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
  return negative ? -magnitude : magnitude;
}

// In a binade [2^E, 2^(E+1)) E4M3 has 8 values 2^(E-3) apart; below 2^-6 (the smallest normal)
// the spacing stays 2^-9 (subnormals). So |f| / 2^(E-3), with E = max(floor(log2 |f|), -6), is
// rounded to an integer q (ties to even: rint in the default rounding mode); q = 16 is the next
// binade's 8, and q < 8 only happens in the subnormal range, where q is the encoding itself.
std::uint8_t float_to_float8_e4m3fn(float f) {
  const std::uint8_t sign = std::signbit(f) ? 0x80u : 0x00u;
  if (std::isnan(f)) return static_cast<std::uint8_t>(sign | 0x7fu);
  const float magnitude = std::fabs(f);
  constexpr float kMaxFinite = 448.0f;  // S.1111.110
  if (magnitude >= kMaxFinite) return static_cast<std::uint8_t>(sign | 0x7eu);  // saturate (Inf too)
  constexpr int kMinNormalExponent = -6;  // exponent field 1, bias 7
  int e = magnitude < std::ldexp(1.0f, kMinNormalExponent) ? kMinNormalExponent : std::ilogb(magnitude);
  int q = static_cast<int>(std::rint(std::ldexp(magnitude, 3 - e)));  // exact scaling, then one rounding
  if (q == 16) {
    q = 8;
    ++e;
  }
  if (q < 8) return static_cast<std::uint8_t>(sign | q);  // zero or subnormal: exponent field 0
  // A magnitude below 448 rounds at most to 448 (e = 8, q = 14): never the NaN pattern.
  return static_cast<std::uint8_t>(sign | ((e + 7) << 3) | (q - 8));
}

}  // namespace tptrain::io
