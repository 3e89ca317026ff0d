// The weights of a Hugging Face model folder, whichever way they are stored: one
// model.safetensors, or the shards model.safetensors.index.json names — its "weight_map", tensor
// name -> file of the folder, as save_pretrained writes a large model and as DeepSeek publishes
// DeepSeek-V3 (163 shards) — read as one set of named tensors (io/safetensors.hpp reads each file).
// DeepSeek's F8_E4M3 weights are read as float32 with their "<name>_scale_inv" block scales, which
// are no tensors of their own. File formats only: which tensors a model needs is the caller's.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "io/safetensors.hpp"

namespace tptrain::io {

inline constexpr const char* kSafetensorsFile = "model.safetensors";
inline constexpr const char* kSafetensorsIndexFile = "model.safetensors.index.json";

class SafetensorsFolder {
 public:
  // Opens `dir`'s model.safetensors, or the index and every shard it names, validating each file's
  // header (SafetensorsReader). The index must be a JSON object whose "weight_map" maps names to
  // file names of the folder (no paths), and agree with the shards: each name in its file, each
  // tensor of a shard mapped to that shard. A folder with both files, or neither, is refused.
  // Throws SafetensorsError naming the file and the tensor.
  explicit SafetensorsFolder(const std::string& dir);

  // model.safetensors or model.safetensors.index.json: where a missing tensor was looked for.
  const std::string& source() const { return source_; }
  // Every tensor of every file, the block scales included: the shards in the index's order of
  // first mention, each file's tensors in data order.
  const std::vector<const SafetensorsTensorInfo*>& tensors() const { return tensors_; }
  const SafetensorsTensorInfo* find(const std::string& name) const;  // nullptr if absent
  const std::string& path_of(const std::string& name) const;        // the file holding it

  // Whether `name` is "<w>_scale_inv" for an F8_E4M3 tensor w of the folder: part of w, not a
  // tensor of the model.
  bool is_block_scales(const std::string& name) const;

  // SafetensorsReader::read_float32 of its file. An F8_E4M3 weight whose scales the index puts in
  // another shard is refused (its file's reader dequantises with the scales beside it, as
  // DeepSeek's shards hold them).
  std::vector<float> read_float32(const std::string& name) const;

 private:
  const SafetensorsReader& file_of(const std::string& name) const;  // absent: SafetensorsError

  std::string source_;
  std::vector<SafetensorsReader> files_;
  std::map<std::string, std::size_t> file_of_;  // tensor -> index in files_
  std::vector<const SafetensorsTensorInfo*> tensors_;
};

}  // namespace tptrain::io
