// The safetensors format (Hugging Face, https://huggingface.co/docs/safetensors): named tensors
// in one file, read without executing anything. Layout:
//   bytes [0, 8)        N, the header's length, unsigned 64-bit little-endian
//   bytes [8, 8+N)      the header, a UTF-8 JSON object: for every tensor
//                         "name": {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}
//                       and optionally "__metadata__": {"key": "value", ...} (strings only);
//                       the writer pads it with spaces to a multiple of 8 bytes
//   bytes [8+N, EOF)    the data section: each tensor's elements, row-major, little-endian, at
//                       [begin, end) relative to the section's start
//
// The reader is strict, as the reference implementation (the safetensors crate's validation) is:
// a header length beyond the file, a header that is not one JSON object, a duplicated name, an
// unknown dtype, a shape or offsets that are not non-negative integers, a byte range that does not
// hold exactly shape x dtype bytes, ranges that overlap, leave a gap or do not reach the end of
// the file are refused with a SafetensorsError naming the file and the tensor. This layer knows
// file formats only: which tensors a model needs, and their meaning, is the caller's.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tptrain::io {

// Every message says which file, and which tensor when one is at fault.
class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The element types of the format (the crate's Dtype). F32, F16, BF16, F64 and F8_E4M3 convert to
// float32 here; the others (F8_E5M2 too) are read in the header and refused by read_float32.
enum class SafetensorsDtype { BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64 };

const char* dtype_name(SafetensorsDtype dtype);
std::size_t dtype_bytes(SafetensorsDtype dtype);
std::optional<SafetensorsDtype> dtype_from_name(std::string_view name);  // "F32" -> F32; nullopt if unknown

// The safetensors crate's bound on the header (MAX_HEADER_SIZE): a longer one is refused
// before it is read.
inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// DeepSeek-V3 publishes its linear weights as F8_E4M3 with one float32 (or BF16) scale per
// 128 x 128 block, in a tensor named "<weight>_scale_inv" of shape [ceil(rows/128),
// ceil(cols/128)]: w[r][c] = fp8(w[r][c]) * scale_inv[r / 128][c / 128]. The block is the model's
// config.json quantization_config.weight_block_size, [128, 128] for DeepSeek-V3 (and R1).
inline constexpr std::uint64_t kFp8WeightBlockSize = 128;
inline constexpr std::string_view kFp8ScaleSuffix = "_scale_inv";

struct SafetensorsTensorInfo {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::F32;
  std::vector<std::uint64_t> shape;  // [] is a scalar (one element)
  std::uint64_t begin = 0, end = 0;  // bytes of the data section
  std::uint64_t elements() const;
};

// Opens and validates a file's header; the data is read on demand.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(std::string path);

  const std::string& path() const { return path_; }
  // In the order of their data (by data_offsets).
  const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const SafetensorsTensorInfo* find(const std::string& name) const;  // nullptr if absent

  // The tensor's elements as float32: F32 as stored, F16 and BF16 widened (exact), F64 rounded to
  // nearest, F8_E4M3 dequantised with its block scales "<name>_scale_inv" (kFp8WeightBlockSize:
  // a 2-D weight, the scales F32 or BF16 of shape [ceil(rows/128), ceil(cols/128)]; each element
  // is the float32 product fp8 x scale, rounded once). An F8_E4M3 tensor without its scales, or
  // with scales of another shape or dtype, other dtypes (F8_E5M2 included) and absent names are
  // a SafetensorsError.
  std::vector<float> read_float32(const std::string& name) const;

 private:
  std::vector<std::uint8_t> read_bytes(const SafetensorsTensorInfo& t) const;  // its data, as stored
  std::vector<float> dequantise_fp8_blocks(const SafetensorsTensorInfo& t) const;

  std::string path_;
  std::uint64_t data_start_ = 0;
  std::vector<SafetensorsTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: its elements already encoded, little-endian (safetensors_encode).
struct SafetensorsTensor {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::F32;
  std::vector<std::uint64_t> shape;
  std::vector<std::uint8_t> bytes;
};

// float32 values as `dtype` (F32, BF16, F16 or F8_E4M3; the narrower ones rounded to nearest,
// ties to even, F8_E4M3 saturating at +-448 as float_to_float8_e4m3fn does; NaN stays NaN).
// F8_E4M3 is written as given, unscaled: its "<name>_scale_inv" is the caller's tensor to add.
// Other dtypes: std::invalid_argument.
std::vector<std::uint8_t> safetensors_encode(const float* values, std::uint64_t count, SafetensorsDtype dtype);

// Writes `path` through <path>.tmp and a rename, so that `path` is never half-written: the header
// (tensors in the given order, data in that order, no gaps; metadata as __metadata__), padded
// with spaces to a multiple of 8 bytes, then the data. Refuses (SafetensorsError) duplicate or
// empty names, the name __metadata__, and byte counts that do not match shape x dtype.
void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// IEEE binary16 / bfloat16 bit patterns <-> float32 (exported for the tests).
float half_to_float(std::uint16_t h);
std::uint16_t float_to_half(float f);
float bfloat16_to_float(std::uint16_t b);
std::uint16_t float_to_bfloat16(float f);

// OCP 8-bit floating point (OFP8) E4M3, "float8_e4m3fn" in PyTorch and ml_dtypes (fn: finite, with
// NaN): 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits. Exponent 1..15: (-1)^s 2^(e-7)
// (1 + m/8); exponent 0: subnormal (-1)^s 2^-6 (m/8); no infinities, and S.1111.111 (0x7F, 0xFF)
// is NaN, so the largest finite value is S.1111.110 = 448. Every one is exact in float32.
float float8_e4m3fn_to_float(std::uint8_t b);
// Rounded to nearest, ties to even. Magnitudes beyond 448, infinities included, saturate to +-448
// (the OCP spec's saturating conversion; PyTorch's .to(torch.float8_e4m3fn) instead makes NaN of
// magnitudes >= 480, the midpoint above 448). NaN gives NaN (0x7F, with the float's sign).
std::uint8_t float_to_float8_e4m3fn(float f);

}  // namespace tptrain::io
