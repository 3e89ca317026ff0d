#include "io/data_paths.hpp"

#include <glob.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <system_error>

namespace tptrain::io {
namespace {

namespace fs = std::filesystem;

bool token_file_name(const std::string& name) {
  if (name.empty() || name[0] == '.') return false;
  std::string ext = fs::path(name).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".bin" || ext == ".txt";
}

// A name of the validation family: one of its words (runs of letters, any case) is a usual name
// of a held-out split: llm.c's fineweb_val_000000.bin, valid.bin, VALID_0.bin, test.txt, ...
bool validation_name(const std::string& name) {
  static const char* const kWords[] = {"val", "valid", "validation", "eval", "test", "dev", "heldout"};
  std::string word;
  for (std::size_t i = 0; i <= name.size(); ++i) {
    const unsigned char c = i < name.size() ? static_cast<unsigned char>(name[i]) : 0;
    if (std::isalpha(c)) {
      word += static_cast<char>(std::tolower(c));
      continue;
    }
    for (const char* w : kWords)
      if (word == w) return true;
    word.clear();
  }
  return false;
}

// A pattern for the files named like `name`: its numbered family (train_000001.bin ->
// train_*.bin), else the name itself.
std::string family_pattern(const std::string& name) {
  const std::size_t dot = name.rfind('.');
  const std::size_t stem_end = dot == std::string::npos ? name.size() : dot;
  std::size_t digits = stem_end;
  while (digits > 0 && std::isdigit(static_cast<unsigned char>(name[digits - 1]))) --digits;
  if (digits == stem_end || digits == 0) return name;
  return name.substr(0, digits) + "*" + name.substr(stem_end);
}

bool exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(path, ec));
}

DataPaths list_folder(const std::string& folder) {
  DataPaths out;
  out.form = DataPaths::Form::folder;
  std::error_code ec;
  std::vector<std::string> names;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;  // subfolders are skipped, whatever their name (x.bin/)
    if (token_file_name(it->path().filename().string()) && !it->is_directory(type_ec))
      names.push_back(it->path().filename().string());
  }
  if (ec) {
    out.problem = "is a folder that cannot be listed: " + ec.message();
    return out;
  }
  std::sort(names.begin(), names.end());
  const auto starts = [&](const char* prefix) {
    return std::any_of(names.begin(), names.end(), [&](const std::string& n) { return n.rfind(prefix, 0) == 0; });
  };
  const auto held_out = std::find_if(names.begin(), names.end(), validation_name);
  const auto other = std::find_if_not(names.begin(), names.end(), validation_name);
  if (names.empty()) {
    out.problem = "is a folder with no .bin or .txt file in it";
  } else if (starts("train_") && starts("valid_")) {
    out.problem =
        "is a folder holding both train_*.bin and valid_*.bin shards (the output of tptrain tokenize): name one "
        "kind with a pattern, e.g. \"" + (fs::path(folder) / "train_*.bin").string() + "\"";
  } else if (held_out != names.end() && other != names.end()) {
    // Training on it would train on the validation split too.
    out.problem = "is a folder that mixes a validation split (" + *held_out + ") with other files (" + *other +
                  "): name one kind with a pattern, e.g. \"" + (fs::path(folder) / family_pattern(*other)).string() +
                  "\"";
  }
  for (const std::string& n : names) out.files.push_back((fs::path(folder) / n).string());
  return out;
}

DataPaths match_pattern(const std::string& pattern) {
  DataPaths out;
  out.form = DataPaths::Form::pattern;
  glob_t g{};
  // GLOB_NOSORT: sorted below in byte order; glob's own order follows LC_COLLATE.
  const int rc = ::glob(pattern.c_str(), GLOB_NOSORT, nullptr, &g);
  if (rc == 0)
    for (std::size_t i = 0; i < g.gl_pathc; ++i) out.files.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  if (rc == GLOB_NOMATCH || (rc == 0 && out.files.empty())) {
    out.problem = "is a pattern that matches no file";
    out.absent = true;
  } else if (rc == GLOB_ABORTED) {
    out.problem = "is a pattern whose folder cannot be read";
  } else if (rc != 0) {
    out.problem = "is a pattern that could not be matched (out of memory)";
  }
  std::sort(out.files.begin(), out.files.end());
  return out;
}

}  // namespace

bool is_data_pattern(const std::string& value) {
  return value.find_first_of("*?[") != std::string::npos && !exists(value);
}

DataPaths expand_data_paths(const std::string& value) {
  std::error_code ec;
  if (fs::is_directory(value, ec)) return list_folder(value);
  if (is_data_pattern(value)) return match_pattern(value);
  DataPaths out;
  out.files.push_back(value);
  return out;
}

const char* form_name(DataPaths::Form form) {
  switch (form) {
    case DataPaths::Form::folder: return "folder";
    case DataPaths::Form::pattern: return "pattern";
    case DataPaths::Form::file: break;
  }
  return "file";
}

}  // namespace tptrain::io
