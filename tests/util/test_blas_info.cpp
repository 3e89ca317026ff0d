// The BLAS check of `tptrain bench`: slow OpenBLAS kernel families are named, fitting ones not.
#include "catch.hpp"
#include "src/util/blas_info.hpp"

using tptrain::util::blas_kernel_warning;

TEST_CASE("OpenBLAS kernels below the CPU's vector width are reported", "[bench]") {
  CHECK_THAT(blas_kernel_warning("Haswell", "avx512f"), tptrain::test::contains("OPENBLAS_CORETYPE=SkylakeX"));
  CHECK_THAT(blas_kernel_warning("Prescott", "avx512f"), tptrain::test::contains("half speed or worse"));
  CHECK_THAT(blas_kernel_warning("Prescott", "avx2"), tptrain::test::contains("OPENBLAS_CORETYPE=Haswell"));
  CHECK_THAT(blas_kernel_warning("Sandybridge", "avx2"), tptrain::test::contains("Sandybridge"));
  CHECK(blas_kernel_warning("SkylakeX", "avx512f").empty());
  CHECK(blas_kernel_warning("Haswell", "avx2").empty());
  CHECK(blas_kernel_warning("Zen", "avx2").empty());
  CHECK(blas_kernel_warning("", "avx2").empty());  // not OpenBLAS: nothing to judge
}
