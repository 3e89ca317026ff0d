// The folder of GPT-2's vocabulary for the tests tagged [gpt2] (hidden: ctest runs them as
// `text_gpt2`, after the `gpt2_vocab` fixture has run jobs/fetch-gpt2-vocab.sh).
#pragma once

#include <filesystem>
#include <string>

#include "catch.hpp"
#include "text/gpt2_files.hpp"

namespace tptrain::test {

inline std::string gpt2_vocabulary_dir() {
  const std::string dir = text::default_gpt2_dir();
  for (const std::string& path : text::gpt2_file_paths(dir))
    if (!std::filesystem::is_regular_file(path))
      FAIL("GPT-2's vocabulary is not in " << dir << " (" << path << "): run jobs/fetch-gpt2-vocab.sh");
  return dir;
}

}  // namespace tptrain::test
