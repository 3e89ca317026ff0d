// Catch2 v2 (Debian 12) and v3 (Spack, newer distributions) behind one include.
#pragma once
#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#define TPTRAIN_CATCH3 1
#else
#include <catch2/catch.hpp>
#define TPTRAIN_CATCH3 0
#endif

#include <string>

namespace tptrain::test {
// A substring matcher under the Catch2 v2 and v3 names.
inline auto contains(const std::string& s) {
#if TPTRAIN_CATCH3
  return Catch::Matchers::ContainsSubstring(s);
#else
  return Catch::Matchers::Contains(s);
#endif
}
}  // namespace tptrain::test
