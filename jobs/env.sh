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

# The mpiexec flags a job script adds for `mpiexec -n $1` (one a line, for mapfile): under Open MPI
# as root --allow-run-as-root, more ranks than cores --oversubscribe, and no binding (ranks of
# several mpiexec calls would otherwise be bound to the same cores).
mpi_flags() {  # $1 = ranks
  local cores
  cores=$(nproc 2>/dev/null || echo 1)
  if mpiexec --version 2>/dev/null | grep -q "Open MPI\|OpenRTE"; then
    [ "$(id -u)" -eq 0 ] && printf '%s\n' --allow-run-as-root
    [ "$1" -gt "$cores" ] && printf '%s\n' --oversubscribe
    printf '%s\n' --bind-to none
  fi
  return 0
}
