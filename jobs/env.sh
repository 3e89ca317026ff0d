# Sourced by the job scripts: run-time environment for tptrain on this machine.
#
# OpenBLAS 0.3.21 (Debian 12) does not recognise some newer x86 CPUs (e.g. a generic
# "Intel Xeon Processor" model under a hypervisor) and falls back to its Prescott (SSE3)
# kernels, several times slower than the AVX-512 ones (docs/design.md, "Throughput
# measurement"). Unless the user chose a core type, pick it from the CPU flags.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ -r /proc/cpuinfo ]; then
  if grep -qw avx512f /proc/cpuinfo; then
    export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then
    export OPENBLAS_CORETYPE=Haswell
  fi
fi

# Threads per rank (Kokkos OpenMP builds): OpenBLAS's own pthreads and the OpenMP threads share
# the cores. Spinning, core-bound OpenMP threads then starve the BLAS threads and vice versa
# (docs/design.md, "Throughput measurement"). One rank per core with one thread each is faster
# still on CPUs.
export OMP_PROC_BIND=${OMP_PROC_BIND:-false}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
