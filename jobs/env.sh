# Sourced by the job scripts: run-time environment for tptrain on this machine.
#
# OpenBLAS 0.3.21 (Debian 12) does not recognise some newer x86 CPUs (e.g. a generic
# "Intel Xeon Processor" model under a hypervisor) and falls back to its Prescott (SSE3)
# kernels: about 12 GFLOP/s sgemm per core here instead of 68 GFLOP/s with the AVX-512
# ones. Unless the user chose a core type, pick it from the CPU flags.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ -r /proc/cpuinfo ]; then
  if grep -qw avx512f /proc/cpuinfo; then
    export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then
    export OPENBLAS_CORETYPE=Haswell
  fi
fi

# Threads per rank (Kokkos OpenMP builds): OpenBLAS's own pthreads and the OpenMP threads share
# the cores. Spinning, core-bound OpenMP threads then starve the BLAS threads and vice versa;
# measured on 2 cores (tiny deck, 2 threads): 4.8k tokens/s with the defaults, 8-11k with
# these. One rank per core with one thread each is faster still on CPUs (docs/design.md).
export OMP_PROC_BIND=${OMP_PROC_BIND:-false}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
