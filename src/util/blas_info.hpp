// Which BLAS the host GEMMs run on, and whether it runs at the speed of this CPU. OpenBLAS picks
// its kernels from the CPU model and falls back to old ones (Prescott: SSE3) on CPUs it does not
// know, e.g. a generic model name under a hypervisor: an AVX-512 machine then runs sgemm at a
// quarter of its speed. The user's fix is OPENBLAS_CORETYPE (jobs/env.sh sets it).
#pragma once

#include <string>

namespace tptrain::util {

struct BlasInfo {
  std::string library;  // "OpenBLAS 0.3.21 ..." or "unknown BLAS"
  std::string core;     // OpenBLAS kernel family ("Haswell", "SkylakeX", ...); empty if unknown
  std::string cpu;      // the widest x86 vector extension of this CPU ("avx512f", "avx2", ...)
  int threads = 0;      // BLAS threads (0: unknown)
  std::string warning;  // non-empty when the kernels are below what this CPU can run
};

BlasInfo blas_info();

// The warning for OpenBLAS kernels `core` on a CPU whose widest vector extension is `cpu`
// ("avx512f", "avx2", ...); empty when the kernels use the CPU's vector units.
std::string blas_kernel_warning(const std::string& core, const std::string& cpu);

}  // namespace tptrain::util
