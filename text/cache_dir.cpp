#include "text/cache_dir.hpp"

#include <cstdlib>
#include <filesystem>

namespace tptrain::text {

std::string tptrain_cache_dir(std::string_view what) {
  namespace fs = std::filesystem;
  const char* cache = std::getenv("XDG_CACHE_HOME");
  if (cache && *cache && fs::path(cache).is_absolute()) return (fs::path(cache) / "tptrain" / what).string();
  const char* home = std::getenv("HOME");
  if (home && *home) return (fs::path(home) / ".cache" / "tptrain" / what).string();
  return {};
}

}  // namespace tptrain::text
