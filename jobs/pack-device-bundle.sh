#!/bin/bash
# Packs a build of tptrain into a self-contained folder for a machine that cannot build it (a
# bare GPU machine: CUDA driver and toolkit, Python, but no MPI, HDF5 or Debian libraries), so that
# `jobs/device-check.sh --bundle DIR` there runs the benchmarks and tests without building (a CPU
# build gives a CPU bundle for `jobs/device-check.sh --rehearse`):
#
#   jobs/pack-device-bundle.sh BUILD_DIR [OUT_DIR]      (OUT_DIR defaults to device-bundle/)
#
# BUILD_DIR is a configured and built tree (jobs/check-cuda-build.sh's, or jobs/build.sh's for a
# CPU build). OUT_DIR is replaced. It receives:
#   bin/       tptrain, tptrain-bin and the test binaries of TPTRAIN_CHECK_TESTS (the ctest -R
#              regex of device-check's test step, default ^unit), stripped, RPATH $ORIGIN/../lib
#   lib/       every shared library they need that a bare machine may lack: Kokkos, Kokkos
#              Kernels, MPI, HDF5, BLAS, toml++, fmt, PCRE2, libcrypto, libstdc++ and their own
#              needs. Not bundled, because the GPU machine's driver and toolkit provide them (and
#              they are far too large to travel): glibc's libraries and the CUDA ones (libcuda,
#              libcudart, cuBLAS, NCCL, ...); env.sh finds those there.
#   openmpi/   Open MPI's plugins and help texts, found at run time through OPAL_PREFIX (when the
#              build links Open MPI): one rank runs as an MPI singleton, with no mpiexec or orted
#   tests.tsv  the test step as commands (name, timeout, environment, program, arguments),
#              ctest's own list with the build's paths replaced by the bundle's
#   MANIFEST   where it came from and what it needs of the machine: kokkos_backends (SERIAL
#              OPENMP CUDA ...), kokkos_arch, cuda_arch (90 for KOKKOS_ARCH_HOPPER90), kernels_tpls
#              (BLAS CUBLAS ...), read from the KokkosCore_config.h / KokkosKernels_config.h of
#              the installs in the build's CMakeCache; nccl; glibc_min (the newest GLIBC_x.y any
#              bundled ELF file needs, objdump -T) and glibc_min_needed_by; the CUDA libraries.
#              device-check refuses a bundle that is not CUDA for its GPU with cuBLAS.
#   env.sh     `. DIR/env.sh` sets LD_LIBRARY_PATH (the bundle first, then the machine's CUDA
#              libraries: CUDA_HOME, /usr/local/cuda, PyTorch's nvidia-* wheels), OPAL_PREFIX
#              and the Open MPI settings of a singleton run
# It prints the size of the bundle and, with the repository's (tracked and unignored files: what
# travels with it), the total: everything that travels to a lent GPU machine must fit in 64 MiB.
# Over TPTRAIN_BUNDLE_MAX_MIB (default 56; 0: no limit, for a bundle that stays here) together,
# or with TPTRAIN_BUNDLE_XZ=1 (never with 0), the files over 1 MiB are stored xz-compressed, and
# device-check unpacks them; still over the limit, the packing fails (exit 1, the folder stays).
# BLAS: TPTRAIN_BUNDLE_BLAS=openblas (default; 36 MB with
# Debian's OpenBLAS) or reference (Debian's libblas3, 0.5 MB, in OpenBLAS's place: a CUDA build's
# host BLAS calls are the Serial-backend tests' small GEMMs; its bench reports no OpenBLAS core).
set -euo pipefail
if [[ $# -lt 1 || $# -gt 2 || "$1" == -h || "$1" == --help ]]; then
  echo "usage: $0 BUILD_DIR [OUT_DIR]" >&2
  exit 2
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "$1" && pwd)
out=${2:-$root/device-bundle}
regex=${TPTRAIN_CHECK_TESTS:-^unit}
blas=${TPTRAIN_BUNDLE_BLAS:-openblas}
python=${PYTHON:-python3}
die() { echo "pack-device-bundle: $*" >&2; exit 1; }
[[ -x "$build/tptrain-bin" && -x "$build/tptrain" && -f "$build/CMakeCache.txt" ]] ||
  die "$build is not a built tptrain tree (no tptrain, tptrain-bin or CMakeCache.txt)"
case "$blas" in openblas|reference) ;; *) die "TPTRAIN_BUNDLE_BLAS=$blas: expected openblas or reference" ;; esac
for tool in ldd strip cmake ctest "$python" objdump; do
  command -v "$tool" >/dev/null || die "$tool is not on PATH (binutils: strip, objdump; CMake: cmake, ctest)"
done
source_dir=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
[[ -n "$source_dir" ]] || die "no CMAKE_HOME_DIRECTORY in $build/CMakeCache.txt"

# Provided by the machine: glibc (its loader must match it) and the CUDA driver and libraries.
system_re='^(ld-linux[^/]*|linux-vdso|libc|libm|libdl|libpthread|librt|libresolv|libutil|libmvec)\.so'
cuda_re='^lib(cuda|cudart|cublas|cublasLt|nccl|nvrtc|nvJitLink|cufft|curand|cusparse|cusolver|nvidia-[a-z-]*)\.so'

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
out=$(cd "$out" && pwd)

# --- programs and the tests' commands ---------------------------------------------------------
cp "$build/tptrain" "$build/tptrain-bin" "$out/bin/"
(cd "$build" && ctest --show-only=json-v1 -R "$regex") >"$out/ctest.json" ||
  die "ctest --show-only failed in $build"
"$python" - "$out/ctest.json" "$build" "$out" >"$out/tests.tsv" <<'EOF' || die "could not list the tests"
# One line per test whose program is a binary of the build: name, timeout (s), environment
# (k=v;... or -), program relative to the bundle, arguments (tab-separated). Others (cmake -P scripts,
# mpiexec) need the build tree or a launcher and are left out, named on stderr.
import json, os, shutil, sys
tests, build, out = json.load(open(sys.argv[1]))["tests"], sys.argv[2], sys.argv[3]
for t in tests:
    cmd = t.get("command") or []
    props = {p["name"]: p["value"] for p in t.get("properties", [])}
    if not cmd or not cmd[0].startswith(build + "/") or any(build in a for a in cmd[1:]):
        print(f"pack-device-bundle: test {t['name']} runs {' '.join(cmd)}: not bundled", file=sys.stderr)
        continue
    exe = os.path.basename(cmd[0])
    shutil.copy2(cmd[0], os.path.join(out, "bin", exe))
    env = ";".join(props.get("ENVIRONMENT", [])) or "-"  # tab-separated: no empty field
    print("\t".join([t["name"], str(int(props.get("TIMEOUT", 600))), env, "bin/" + exe] + cmd[1:]))
EOF
rm "$out/ctest.json"
[[ -s "$out/tests.tsv" ]] || die "no bundled test matches $regex (ctest -N in $build lists them)"

# --- Open MPI's run-time files, when the program links Open MPI -------------------------------
ompi_prefix="" ompi_plugins=""
if grep -q 'libmpi\.so' <<<"$(ldd "$build/tptrain-bin")" && command -v ompi_info >/dev/null &&
   grep -q "Open MPI" <<<"$(ompi_info --version 2>/dev/null)"; then
  path_of() { ompi_info --path "$1" --parsable | sed -n "s/^path:$1:\(.*\)/\1/p"; }
  ompi_prefix=$(path_of prefix)
  pkglibdir=$(path_of pkglibdir)
  pkgdatadir=$(path_of pkgdatadir)
  [[ "$pkglibdir" == "$ompi_prefix"/* && "$pkgdatadir" == "$ompi_prefix"/* ]] ||
    die "Open MPI's plugins ($pkglibdir) are not under its prefix ($ompi_prefix): OPAL_PREFIX cannot relocate them"
  ompi_plugins="$out/openmpi/${pkglibdir#"$ompi_prefix"/}"
  mkdir -p "$ompi_plugins" "$out/openmpi/${pkgdatadir#"$ompi_prefix"/}"
  cp -r "$pkgdatadir/." "$out/openmpi/${pkgdatadir#"$ompi_prefix"/}/"
  # One rank needs no network (UCX, libfabric, verbs, PSM, hcoll) and no external PMIx server
  # (a singleton takes the isolated pmix component): plugins that need those libraries stay
  # behind, with the libraries they would drag in. Everything else is small (4.9 MB on Debian).
  # OpenSHMEM's plugins (liboshmem) serve no MPI program either.
  skip_re='lib(ucp|ucs|uct|ucm|fabric|ibverbs|rdmacm|psm[0-9_a-z]*|hcoll|pmix|munge|cuda|slurm|pmi[0-9]?|oshmem|nl-3)\.so'
  for f in "$pkglibdir"/mca_*.so; do
    grep -Eq "$skip_re" <<<"$(ldd "$f" 2>/dev/null)" && continue
    cp "$f" "$ompi_plugins/"
  done
fi

# --- shared libraries: the closure of every bundled ELF file's needs ---------------------------
# ldd under the build's own search path (RPATH/RUNPATH, LD_LIBRARY_PATH) resolves each need; a
# need ldd cannot resolve here stops the packing, except the CUDA ones (the GPU machine's).
cuda_needed=""
queue=("$out"/bin/*)
[[ -n "$ompi_plugins" ]] && queue+=("$ompi_plugins"/*.so)
declare -A seen=()
while [[ ${#queue[@]} -gt 0 ]]; do
  f=${queue[0]}
  queue=("${queue[@]:1}")
  [[ "$(head -c 4 "$f" | tail -c 3)" == ELF ]] || continue
  while read -r soname arrow path _; do
    [[ "$arrow" == "=>" ]] || continue
    [[ "$soname" =~ $system_re ]] && continue
    if [[ "$soname" =~ $cuda_re ]]; then
      [[ " $cuda_needed " == *" $soname "* ]] || cuda_needed="$cuda_needed $soname"
      continue
    fi
    [[ -n "${seen[$soname]:-}" ]] && continue
    seen[$soname]=1
    [[ "$path" != "not" ]] || die "$(basename "$f") needs $soname, which ldd does not find here"
    src=$path
    # reference: the netlib BLAS (libc alone) under the name the program asks for, OpenBLAS's
    # (libopenblas.so.0) or the alternative's (libblas.so.3): the same Fortran BLAS symbols.
    if [[ "$soname" =~ ^lib(open)?blas\.so && "$blas" == reference ]]; then
      reference=(/usr/lib/*/blas/libblas.so.3)
      src=${reference[0]}
      [[ -e "$src" ]] || die "TPTRAIN_BUNDLE_BLAS=reference needs Debian's libblas3 (/usr/lib/*/blas/libblas.so.3)"
    fi
    if [[ "$soname" == liblapack.so.3 && "$blas" == reference ]]; then  # OpenBLAS's needs its internals
      reference=(/usr/lib/*/lapack/liblapack.so.3)
      src=${reference[0]}
      [[ -e "$src" ]] || die "TPTRAIN_BUNDLE_BLAS=reference needs Debian's liblapack3 (/usr/lib/*/lapack/liblapack.so.3)"
    fi
    cp -L "$src" "$out/lib/$soname"
    queue+=("$out/lib/$soname")
  done < <(ldd "$f" 2>/dev/null)
done
cuda_needed=${cuda_needed# }

# RPATH $ORIGIN/../lib for the programs and $ORIGIN for the libraries, where the file has one to
# replace (CMake rewrites it in place, no longer than it was; a file without one relies on
# env.sh's LD_LIBRARY_PATH).
cat >"$out/rpath.cmake" <<'EOF'
file(READ_ELF "${F}" RUNPATH _old)
if(NOT _old)
  file(READ_ELF "${F}" RPATH _old)
endif()
if(_old)
  string(REPLACE ";" ":" _old "${_old}")  # READ_ELF gives a list, the file holds a path
  file(RPATH_CHANGE FILE "${F}" OLD_RPATH "${_old}" NEW_RPATH "${NEW}")
endif()
EOF
set_rpath() {  # set_rpath FILE NEW
  cmake -DF="$1" -DNEW="$2" -P "$out/rpath.cmake" >/dev/null 2>&1 ||
    echo "pack-device-bundle: note: could not set the RPATH of $1 (env.sh's LD_LIBRARY_PATH finds its libraries)" >&2
}
# shellcheck disable=SC2016  # $ORIGIN is the loader's, not the shell's
for f in "$out"/bin/*; do
  strip --strip-unneeded "$f" 2>/dev/null || true
  set_rpath "$f" '$ORIGIN/../lib'
done
# shellcheck disable=SC2016
for f in "$out"/lib/*; do
  chmod u+w "$f"
  strip --strip-unneeded "$f" 2>/dev/null || true
  set_rpath "$f" '$ORIGIN'
done

rm "$out/rpath.cmake"

# The newest glibc symbol version any bundled ELF file asks for (objdump -T: its dynamic
# symbols' GLIBC_x.y versions), and which file: the machine's glibc must be at least as new.
glibc_max="" glibc_file=""
for f in "$out"/bin/* "$out"/lib/* ${ompi_plugins:+"$ompi_plugins"/*}; do
  [[ "$(head -c 4 "$f" | tail -c 3)" == ELF ]] || continue
  v=$(objdump -T "$f" 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -u -V | tail -n 1 || true)  # a static program: none
  [[ -n "$v" ]] || continue
  if [[ -z "$glibc_max" || "$(printf '%s\n%s\n' "$glibc_max" "$v" | sort -V | tail -n 1)" != "$glibc_max" ]]; then
    glibc_max=$v glibc_file=${f#"$out"/}
  fi
done
[[ -n "$glibc_max" ]] || die "no GLIBC_ symbol version in the bundle's ELF files (objdump -T): cannot say which glibc it needs"
nccl=OFF
[[ " $cuda_needed " == *" libnccl.so."* ]] && nccl=ON
commit=$(git -C "$source_dir" rev-parse --short HEAD 2>/dev/null || echo unknown)
# What the build was compiled against, from the configuration headers of the Kokkos and Kokkos
# Kernels it found (CMakeCache's Kokkos_DIR / KokkosKernels_DIR: PREFIX/lib/cmake/Kokkos,
# PREFIX/lib/x86_64-linux-gnu/cmake/Kokkos, Trilinos' include/trilinos): the backends
# (KOKKOS_ENABLE_CUDA, ...), the architectures (KOKKOS_ARCH_HOPPER90: cuda_arch 90) and Kokkos
# Kernels' TPLs (KOKKOSKERNELS_ENABLE_TPL_CUBLAS: CUBLAS). device-check refuses a bundle that is
# not CUDA for the GPU's architecture with cuBLAS.
find_config() {  # find_config CMAKE_DIR HEADER: the header of the install that holds CMAKE_DIR
  local d=$1 _up inc
  for _up in 1 2 3 4 5 6; do
    d=$(dirname "$d")
    for inc in "$d/include" "$d/include/trilinos" "$d/include/kokkos"; do
      [[ -f "$inc/$2" ]] && { echo "$inc/$2"; return 0; }
    done
  done
  return 1
}
cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt" | head -n 1; }
kokkos_config=$(find_config "$(cache Kokkos_DIR)" KokkosCore_config.h) ||
  die "no KokkosCore_config.h above Kokkos_DIR=$(cache Kokkos_DIR) (CMakeCache.txt): cannot say what the build is"
kernels_dir=$(cache KokkosKernels_DIR)
kernels_config=$(find_config "${kernels_dir:-$(cache Kokkos_DIR)}" KokkosKernels_config.h) ||
  die "no KokkosKernels_config.h above KokkosKernels_DIR=$kernels_dir (CMakeCache.txt)"
kokkos_version=$(sed -n 's/^#define KOKKOS_VERSION \([0-9]*\)$/\1/p' "$kokkos_config" | head -n 1)
[[ -n "$kokkos_version" ]] && kokkos_version="$((kokkos_version / 10000)).$((kokkos_version / 100 % 100)).$((kokkos_version % 100))"
backends=$(sed -n 's/^#define KOKKOS_ENABLE_\(SERIAL\|OPENMP\|THREADS\|CUDA\|HIP\|SYCL\|HPX\|OPENMPTARGET\|OPENACC\)$/\1/p' \
           "$kokkos_config" | tr '\n' ' ' | sed 's/ $//')
[[ -n "$backends" ]] || die "$kokkos_config names no Kokkos backend (KOKKOS_ENABLE_SERIAL, _OPENMP, _CUDA, ...)"
kokkos_arch=$(sed -n 's/^#define KOKKOS_ARCH_\([A-Z0-9_]*\)$/\1/p' "$kokkos_config" | tr '\n' ' ' | sed 's/ $//')
# The GPU architecture Kokkos compiled for (KOKKOS_ARCH_HOPPER90: 90), empty without CUDA.
cuda_arch=$(sed -n 's/^#define KOKKOS_ARCH_\(KEPLER\|MAXWELL\|PASCAL\|VOLTA\|TURING\|AMPERE\|ADA\|HOPPER\|BLACKWELL\)\([0-9][0-9]*\)$/\2/p' \
            "$kokkos_config" | head -n 1)
kernels_tpls=$(sed -n 's/^#define KOKKOSKERNELS_ENABLE_TPL_\([A-Z0-9_]*\)$/\1/p' "$kernels_config" | awk '!seen[$0]++' |
              tr '\n' ' ' | sed 's/ $//')
if [[ " $backends " == *" CUDA "* ]]; then
  [[ -n "$cuda_arch" ]] || echo "pack-device-bundle: WARNING: a CUDA Kokkos without a KOKKOS_ARCH_<GPU> in $kokkos_config: device-check refuses it" >&2
  [[ " $kernels_tpls " == *" CUBLAS "* ]] ||
    echo "pack-device-bundle: WARNING: Kokkos Kernels without cuBLAS ($kernels_config: TPLs $kernels_tpls): device-check refuses it (KokkosKernels_ENABLE_TPL_CUBLAS=ON)" >&2
else
  echo "pack-device-bundle: note: Kokkos $backends, no CUDA: a CPU bundle (jobs/device-check.sh --rehearse runs it; a GPU run refuses it)"
fi
{
  echo "created=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "build_dir=$build"
  echo "source_dir=$source_dir"
  echo "commit=$commit"
  echo "tests_regex=$regex"
  echo "glibc_min=$glibc_max"
  echo "glibc_min_needed_by=$glibc_file"
  echo "cuda_libraries=$cuda_needed"
  echo "kokkos_version=$kokkos_version"
  echo "kokkos_backends=$backends"
  echo "kokkos_arch=$kokkos_arch"
  echo "cuda_arch=$cuda_arch"
  echo "kokkos_config=$kokkos_config"
  echo "kernels_tpls=$kernels_tpls"
  echo "kernels_config=$kernels_config"
  echo "nccl=$nccl"
  echo "blas=$blas"
  echo "openmpi=${ompi_prefix:+yes}"
} >"$out/MANIFEST"

cat >"$out/env.sh" <<'EOF'
# . THIS_FILE: the environment of the bundle's programs (written by jobs/pack-device-bundle.sh).
tptrain_bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The machine's CUDA libraries the programs need (MANIFEST: cuda_libraries), searched in the
# toolkit, the loader's cache and PyTorch's nvidia-* wheels; each folder found joins the path.
tptrain_cuda_path=""
for tptrain_lib in $(sed -n 's/^cuda_libraries=//p' "$tptrain_bundle/MANIFEST"); do
  tptrain_dir=""
  for d in "${CUDA_HOME:-/usr/local/cuda}/lib64" "${CUDA_HOME:-/usr/local/cuda}/targets/x86_64-linux/lib" \
           /usr/local/cuda/lib64 /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu \
           /usr/lib64; do
    [ -e "$d/$tptrain_lib" ] && { tptrain_dir=$d; break; }
  done
  if [ -z "$tptrain_dir" ] && command -v python3 >/dev/null 2>&1; then
    tptrain_dir=$(python3 - "$tptrain_lib" 2>/dev/null <<'PY'
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()]
for r in roots:
    for hit in sorted(glob.glob(os.path.join(r, "nvidia", "**", sys.argv[1]), recursive=True)):
        print(os.path.dirname(hit)); sys.exit(0)
PY
)
  fi
  if [ -n "$tptrain_dir" ]; then
    case ":$tptrain_cuda_path:" in *":$tptrain_dir:"*) ;; *) tptrain_cuda_path="$tptrain_cuda_path:$tptrain_dir" ;; esac
  fi
done
export LD_LIBRARY_PATH="$tptrain_bundle/lib$tptrain_cuda_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ -d "$tptrain_bundle/openmpi" ]; then
  # Open MPI finds its plugins and help texts under OPAL_PREFIX; one rank is a singleton that
  # starts no daemon (ess_singleton_isolated), talks to itself only (btl self), and ignores the
  # network plugins that were left behind.
  export OPAL_PREFIX="$tptrain_bundle/openmpi"
  export OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_pmix=isolated OMPI_MCA_btl=self OMPI_MCA_pml=ob1
  export OMPI_MCA_mca_base_component_show_load_errors=0 OMPI_MCA_btl_base_warn_component_unused=0
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
unset tptrain_lib tptrain_dir tptrain_cuda_path
EOF

# What travels to a lent GPU machine is the repository (its tracked files and the untracked ones
# git does not ignore) and the carried bundle, 64 MiB at most; 56 MiB leaves room (the device
# tool counts its own way). Over TPTRAIN_BUNDLE_MAX_MIB (default 56) together, or with
# TPTRAIN_BUNDLE_XZ=1 (never with 0), the files over 1 MiB are stored xz-compressed (OpenBLAS: 36
# MB to 4): device-check unpacks them into its work folder with Python's lzma before use. Still
# over it, the packing fails (the folder stays, to look at); TPTRAIN_BUNDLE_MAX_MIB=0: no limit
# (a bundle that never travels, e.g. the rehearsal's).
limit_mib=${TPTRAIN_BUNDLE_MAX_MIB:-56}
[[ "$limit_mib" =~ ^[0-9]+$ ]] || die "TPTRAIN_BUNDLE_MAX_MIB=$limit_mib: expected a whole number of MiB"
out_rel=""
[[ "$out" == "$source_dir"/* ]] && out_rel=${out#"$source_dir"/}
repo_size=$(git -C "$source_dir" ls-files -z --cached --others --exclude-standard 2>/dev/null |
            { if [[ -n "$out_rel" ]]; then grep -zv "^$out_rel/"; else cat; fi; } |
            (cd "$source_dir" && du -cb --files0-from=- 2>/dev/null) | tail -n 1 | cut -f1)
if [[ -z "$repo_size" ]]; then
  repo_size=$(du -sb --exclude=.git --exclude=build --exclude='build-*' --exclude=runs --exclude=data \
              --exclude=device-bundle "$source_dir" | cut -f1)
  echo "pack-device-bundle: note: $source_dir is not a git checkout: its size is estimated with du" >&2
fi
size=$(du -sb "$out" | cut -f1)
compress=${TPTRAIN_BUNDLE_XZ:-auto}
if [[ "$compress" == auto ]]; then
  compress=0
  [[ "$limit_mib" != 0 && $((size + repo_size)) -gt $((limit_mib * 1048576)) ]] && compress=1
fi
if [[ "$compress" == 1 ]]; then
  command -v xz >/dev/null || die "the bundle is $((size / 1048576)) MiB and xz (xz-utils) is missing to compress it"
  echo "pack-device-bundle: $((size / 1048576)) MiB: compressing the files over 1 MiB (xz)"
  find "$out/bin" "$out/lib" -type f -size +1M -print0 | xargs -0 -r xz -T0 -6
  echo "compressed=xz" >>"$out/MANIFEST"
else
  echo "compressed=no" >>"$out/MANIFEST"
fi
size=$(du -sb "$out" | cut -f1)
total=$((size + repo_size))
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
echo "size_bytes=$size" >>"$out/MANIFEST"
echo "pack-device-bundle: $out: $(mib "$size") MiB ($size bytes); with the repository ($(mib "$repo_size") MiB): $(mib "$total") MiB$([[ "$limit_mib" == 0 ]] && echo " (no limit: TPTRAIN_BUNDLE_MAX_MIB=0)" || echo " of the $limit_mib MiB allowed")"
echo "pack-device-bundle: tests: $(cut -f1 "$out/tests.tsv" | tr '\n' ' ')"
echo "pack-device-bundle: Kokkos $kokkos_version $backends${cuda_arch:+ sm_$cuda_arch}; Kokkos Kernels TPLs: ${kernels_tpls:-none}; NCCL $nccl"
echo "pack-device-bundle: machine needs glibc >= $glibc_max ($glibc_file) and CUDA libraries: ${cuda_needed:-none}"
find "$out" -type f -printf '%s\t%P\n' | sort -n -r | sed -n 1,12p  # sed, not head: head leaves sort a SIGPIPE, fatal under pipefail
if [[ "$limit_mib" != 0 && $total -gt $((limit_mib * 1048576)) ]]; then
  die "the repository and the bundle are $(mib "$total") MiB, over $limit_mib MiB: they will not travel to a lent GPU machine (TPTRAIN_BUNDLE_BLAS=reference saves 4 MB compressed, 36 MB not; TPTRAIN_BUNDLE_MAX_MIB=0 for a bundle that stays here)"
fi
