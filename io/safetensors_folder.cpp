#include "io/safetensors_folder.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>

#include "io/deck_path.hpp"
#include "io/path_text.hpp"

namespace tptrain::io {

namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw SafetensorsError("safetensors index " + display_path(path) + ": " + what);
}

// The index's weight_map, checked as JSON: name -> a file name of the folder, and the files in the
// order they are first named.
struct WeightMap {
  std::map<std::string, std::string> file_of;
  std::vector<std::string> files;
};
WeightMap read_weight_map(const std::string& path) {
  std::string text;
  // DeepSeek-V3's index (91,000 names) is 9 MB; the bound is the safetensors header's.
  if (const std::string problem = read_regular_file(path, kMaxSafetensorsHeaderBytes, text); !problem.empty())
    fail(path, problem);
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path, std::string("not valid JSON: ") + e.what());
  }
  if (!json.is_object() || !json.contains("weight_map") || !json["weight_map"].is_object())
    fail(path, "expected a JSON object with a \"weight_map\" object (tensor name -> shard file)");
  WeightMap m;
  for (const auto& [name, file] : json["weight_map"].items()) {
    if (!file.is_string())
      fail(path, "weight_map '" + name + "' is " + file.dump() + ", not the file name of a shard");
    const std::string f = file.get<std::string>();
    // A shard is a file of the folder: a path would read outside it.
    if (f.empty() || f == "." || f == ".." || f.find('/') != std::string::npos || f.find('\\') != std::string::npos)
      fail(path, "weight_map '" + name + "' names \"" + f + "\": expected a file name of the index's folder");
    if (m.file_of.emplace(name, f).second &&
        std::find(m.files.begin(), m.files.end(), f) == m.files.end())
      m.files.push_back(f);
  }
  if (m.files.empty()) fail(path, "the weight_map names no tensor");
  return m;
}

}  // namespace

SafetensorsFolder::SafetensorsFolder(const std::string& dir) {
  const std::string single = (fs::path(dir) / kSafetensorsFile).string();
  const std::string index = (fs::path(dir) / kSafetensorsIndexFile).string();
  std::error_code ec;
  const bool has_single = fs::exists(single, ec), has_index = fs::exists(index, ec);
  if (has_single && has_index)
    throw SafetensorsError("Hugging Face folder " + display_path(dir) + " holds both " + kSafetensorsFile + " and " +
                           kSafetensorsIndexFile + ": one model, one way of storing it (remove the other)");
  if (!has_single && !has_index)
    throw SafetensorsError("Hugging Face folder " + display_path(dir) + ": no " + kSafetensorsFile + " or " +
                           kSafetensorsIndexFile + " (the model's weights)");
  source_ = has_single ? single : index;
  if (has_single) {
    files_.emplace_back(single);
  } else {
    const WeightMap m = read_weight_map(index);
    for (const std::string& f : m.files) files_.emplace_back((fs::path(dir) / f).string());
    // Each side of the index against the other: a name the index puts in a shard that lacks it,
    // or a shard's tensor the index puts elsewhere, would read another tensor than it says.
    for (const auto& [name, file] : m.file_of) {
      const std::size_t i = static_cast<std::size_t>(std::find(m.files.begin(), m.files.end(), file) - m.files.begin());
      if (files_[i].find(name) == nullptr)
        fail(index, "weight_map puts '" + name + "' in " + file + ", which has no such tensor");
    }
    for (std::size_t i = 0; i < files_.size(); ++i)
      for (const SafetensorsTensorInfo& t : files_[i].tensors())
        if (const auto at = m.file_of.find(t.name); at == m.file_of.end() || at->second != m.files[i])
          fail(index, "tensor '" + t.name + "' of " + m.files[i] + " is " +
                          (at == m.file_of.end() ? "not in the weight_map" : "mapped to " + at->second));
  }
  // Each name once: a file's header names it once, and the index puts it in one shard.
  for (std::size_t i = 0; i < files_.size(); ++i)
    for (const SafetensorsTensorInfo& t : files_[i].tensors()) {
      file_of_.emplace(t.name, i);
      tensors_.push_back(&t);
    }
}

const SafetensorsTensorInfo* SafetensorsFolder::find(const std::string& name) const {
  const auto at = file_of_.find(name);
  return at == file_of_.end() ? nullptr : files_[at->second].find(name);
}

const SafetensorsReader& SafetensorsFolder::file_of(const std::string& name) const {
  const auto at = file_of_.find(name);
  if (at == file_of_.end()) throw SafetensorsError(display_path(source_) + ": no tensor '" + name + "'");
  return files_[at->second];
}

const std::string& SafetensorsFolder::path_of(const std::string& name) const { return file_of(name).path(); }

bool SafetensorsFolder::is_block_scales(const std::string& name) const {
  const std::size_t n = name.size(), suffix = kFp8ScaleSuffix.size();
  if (n <= suffix || name.compare(n - suffix, suffix, kFp8ScaleSuffix) != 0) return false;
  const SafetensorsTensorInfo* weight = find(name.substr(0, n - suffix));
  return weight != nullptr && weight->dtype == SafetensorsDtype::F8_E4M3;
}

std::vector<float> SafetensorsFolder::read_float32(const std::string& name) const {
  const SafetensorsReader& file = file_of(name);
  const std::string scales = name + std::string(kFp8ScaleSuffix);
  if (file.find(name)->dtype == SafetensorsDtype::F8_E4M3 && find(scales) != nullptr && file.find(scales) == nullptr)
    throw SafetensorsError("tensor '" + name + "' of " + display_path(file.path()) + " is F8_E4M3 and its block scales '" +
                           scales + "' are in " + display_path(path_of(scales)) +
                           ": tptrain reads a weight's scales from the weight's own shard, as DeepSeek's checkpoints "
                           "hold them");
  return file.read_float32(name);
}

}  // namespace tptrain::io
