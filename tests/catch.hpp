// Catch2 v2 (Debian 12) and v3 (Spack, newer distributions) behind one include.
#pragma once
#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#define TPTRAIN_CATCH3 1
#else
#include <catch2/catch.hpp>
#define TPTRAIN_CATCH3 0
#endif
