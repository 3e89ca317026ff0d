#include "text/gpt2_files.hpp"

#include <filesystem>

#include "text/cache_dir.hpp"

namespace tptrain::text {

std::string default_gpt2_dir() { return tptrain_cache_dir("gpt2"); }

std::string gpt2_dir_or_default(const std::string& dir) { return dir.empty() ? default_gpt2_dir() : dir; }

std::vector<std::string> gpt2_file_paths(const std::string& dir) {
  namespace fs = std::filesystem;
  return {(fs::path(dir) / kGpt2EncoderFile).string(), (fs::path(dir) / kGpt2MergesFile).string()};
}

std::string gpt2_files_hint() {
  return "jobs/setup-deps.sh (or jobs/fetch-gpt2-vocab.sh) fetches them into " +
         (default_gpt2_dir().empty() ? std::string("${XDG_CACHE_HOME:-$HOME/.cache}/tptrain/gpt2")
                                     : default_gpt2_dir());
}

}  // namespace tptrain::text
