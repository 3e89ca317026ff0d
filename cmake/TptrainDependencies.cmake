# Finds every dependency of tptrain and wraps it in one interface target, tptrain::deps.
# Stops early, with a message that says what to do, on setups that cannot work
# (serial HDF5 with MPI, CUDA Kokkos without the CUDA toolkit, ...).

# --- Kokkos and Kokkos Kernels --------------------------------------------------------------
# Two kinds of installs are supported:
#  * a standard Kokkos >= 4 (Spack, modules, source build): targets Kokkos::kokkos and
#    Kokkos::kokkoskernels;
#  * Debian's Trilinos-packaged Kokkos 3.4.01: its exported Kokkos::kokkos target carries the
#    include path <prefix>/include, but the headers are in <prefix>/include/trilinos and the
#    libraries are the trilinos_kokkos* targets. We link those and add the real include path.
find_package(Kokkos REQUIRED)
find_package(KokkosKernels REQUIRED)

add_library(tptrain_kokkos INTERFACE)
if(TARGET Kokkos::kokkoskernels)
  target_link_libraries(tptrain_kokkos INTERFACE Kokkos::kokkoskernels Kokkos::kokkos)
  set(TPTRAIN_KOKKOS_FLAVOUR "standard")
elseif(TARGET trilinos_kokkoskernels)
  target_link_libraries(tptrain_kokkos INTERFACE trilinos_kokkoskernels trilinos_kokkoscontainers
                                                 trilinos_kokkoscore)
  target_include_directories(tptrain_kokkos SYSTEM INTERFACE ${KokkosKernels_INCLUDE_DIRS}
                                                             ${Kokkos_INCLUDE_DIRS})
  set(TPTRAIN_KOKKOS_FLAVOUR "Trilinos-packaged")
else()
  message(FATAL_ERROR "tptrain: found Kokkos Kernels at ${KokkosKernels_DIR} but neither the "
                      "Kokkos::kokkoskernels nor the trilinos_kokkoskernels target. Point "
                      "KokkosKernels_ROOT at a Kokkos Kernels >= 3.4 install.")
endif()

# Which backends does this Kokkos have? (Kokkos >= 4 exposes kokkos_check; read the config
# header otherwise, which works for both.)
find_file(TPTRAIN_KOKKOS_CONFIG_H KokkosCore_config.h
          HINTS ${Kokkos_INCLUDE_DIRS} ${Kokkos_DIR}/../../../include
                ${Kokkos_DIR}/../../../include/trilinos
          NO_DEFAULT_PATH)
if(NOT TPTRAIN_KOKKOS_CONFIG_H)
  find_file(TPTRAIN_KOKKOS_CONFIG_H KokkosCore_config.h PATH_SUFFIXES trilinos)
endif()
foreach(_backend CUDA OPENMP SERIAL)
  set(TPTRAIN_KOKKOS_HAS_${_backend} OFF)
  if(TPTRAIN_KOKKOS_CONFIG_H)
    file(STRINGS ${TPTRAIN_KOKKOS_CONFIG_H} _kokkos_has REGEX "^#define KOKKOS_ENABLE_${_backend}$")
    if(_kokkos_has)
      set(TPTRAIN_KOKKOS_HAS_${_backend} ON)
    endif()
  endif()
endforeach()
# The host backends besides Kokkos' default execution space (CUDA, else OpenMP, else Serial): the
# kernel and layer tests are built and run once more on each (tests/CMakeLists.txt).
set(TPTRAIN_SPACE_serial Kokkos::Serial)
set(TPTRAIN_SPACE_openmp Kokkos::OpenMP)
set(TPTRAIN_EXTRA_BACKENDS)
if(TPTRAIN_KOKKOS_HAS_OPENMP AND TPTRAIN_KOKKOS_HAS_CUDA)
  list(APPEND TPTRAIN_EXTRA_BACKENDS openmp)
endif()
if(TPTRAIN_KOKKOS_HAS_SERIAL AND (TPTRAIN_KOKKOS_HAS_OPENMP OR TPTRAIN_KOKKOS_HAS_CUDA))
  list(APPEND TPTRAIN_EXTRA_BACKENDS serial)
endif()
message(STATUS "tptrain: Kokkos ${Kokkos_VERSION} (${TPTRAIN_KOKKOS_FLAVOUR}), CUDA backend: ${TPTRAIN_KOKKOS_HAS_CUDA}, "
               "OpenMP: ${TPTRAIN_KOKKOS_HAS_OPENMP}, tests also on: ${TPTRAIN_EXTRA_BACKENDS}")

# --- MPI, parallel HDF5 ---------------------------------------------------------------------
find_package(MPI REQUIRED COMPONENTS C)

set(HDF5_PREFER_PARALLEL TRUE)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "tptrain: the HDF5 found (${HDF5_INCLUDE_DIRS}) is not parallel. tptrain writes "
                      "checkpoints collectively through MPI-IO and needs an MPI-enabled HDF5: "
                      "Debian: libhdf5-openmpi-dev; Spack: hdf5+mpi; modules: hdf5/parallel "
                      "(or set HDF5_ROOT / HDF5_C_COMPILER_EXECUTABLE=h5pcc).")
endif()
add_library(tptrain_hdf5 INTERFACE)
if(TARGET HDF5::HDF5)
  target_link_libraries(tptrain_hdf5 INTERFACE HDF5::HDF5)
else()
  target_include_directories(tptrain_hdf5 SYSTEM INTERFACE ${HDF5_INCLUDE_DIRS})
  target_link_libraries(tptrain_hdf5 INTERFACE ${HDF5_C_LIBRARIES})
  target_compile_definitions(tptrain_hdf5 INTERFACE ${HDF5_DEFINITIONS})
endif()

# --- small header libraries ------------------------------------------------------------------
find_package(tomlplusplus REQUIRED)
find_package(CLI11 REQUIRED)
find_package(fmt REQUIRED)

# --- text: PCRE2 (Unicode classes of GPT-2's pre-tokenizer, UTF-8 checks), nlohmann-json, libcrypto
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(TPTRAIN_PCRE2 QUIET IMPORTED_TARGET libpcre2-8)
endif()
if(NOT TARGET PkgConfig::TPTRAIN_PCRE2)
  message(FATAL_ERROR "tptrain: PCRE2 (libpcre2-8, found through pkg-config) is missing; the GPT-2 "
                      "tokenizer needs it. Debian: libpcre2-dev (jobs/setup-deps.sh); Spack: pcre2; or put "
                      "the folder of libpcre2-8.pc on PKG_CONFIG_PATH.")
endif()
add_library(tptrain_pcre2 INTERFACE)
target_link_libraries(tptrain_pcre2 INTERFACE PkgConfig::TPTRAIN_PCRE2)
find_package(nlohmann_json 3 QUIET)
if(NOT nlohmann_json_FOUND)
  message(FATAL_ERROR "tptrain: nlohmann-json 3 is missing (the tokenizer's vocabulary and JSON Lines "
                      "input). Debian: nlohmann-json3-dev (jobs/setup-deps.sh); Spack: nlohmann-json; or set "
                      "nlohmann_json_ROOT.")
endif()
add_library(tptrain_json INTERFACE)
target_link_libraries(tptrain_json INTERFACE nlohmann_json::nlohmann_json)
# OpenSSL's libcrypto: the SHA-256 of tiktoken's named rank files (text/sha256.hpp).
find_package(OpenSSL QUIET COMPONENTS Crypto)
if(NOT TARGET OpenSSL::Crypto)
  message(FATAL_ERROR "tptrain: OpenSSL's libcrypto is missing (the SHA-256 check of tiktoken's rank files). "
                      "Debian: libssl-dev (jobs/setup-deps.sh); Spack: openssl; or set OPENSSL_ROOT_DIR.")
endif()

# --- CUDA toolkit, cuBLAS, NCCL: only when Kokkos has CUDA ----------------------------------
set(TPTRAIN_HAVE_NCCL OFF)
if(TPTRAIN_KOKKOS_HAS_CUDA)
  find_package(CUDAToolkit REQUIRED)
  if(NOT TPTRAIN_ENABLE_NCCL STREQUAL "OFF")
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS $ENV{NCCL_ROOT} ${NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
              PATH_SUFFIXES include)
    find_library(NCCL_LIBRARY nccl HINTS $ENV{NCCL_ROOT} ${NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR}
                 PATH_SUFFIXES lib lib64)
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      add_library(tptrain_nccl INTERFACE)
      target_include_directories(tptrain_nccl SYSTEM INTERFACE ${NCCL_INCLUDE_DIR})
      target_link_libraries(tptrain_nccl INTERFACE ${NCCL_LIBRARY} CUDA::cudart)
      set(TPTRAIN_HAVE_NCCL ON)
    else()
      message(FATAL_ERROR "tptrain: Kokkos has CUDA but NCCL was not found (nccl.h / libnccl). "
                          "Set NCCL_ROOT, `module load nccl`, or configure with "
                          "-DTPTRAIN_ENABLE_NCCL=OFF to use MPI for device collectives.")
    endif()
  endif()
elseif(TPTRAIN_ENABLE_NCCL STREQUAL "ON")
  message(FATAL_ERROR "tptrain: TPTRAIN_ENABLE_NCCL=ON needs a Kokkos with the CUDA backend.")
endif()
message(STATUS "tptrain: NCCL collectives: ${TPTRAIN_HAVE_NCCL}")

# Host-only dependencies (no Kokkos): io/ links only these, so that with a CUDA Kokkos its
# sources are compiled by the host compiler (toml++ does not compile under nvcc).
add_library(tptrain_host_deps INTERFACE)
# We use MPI's C API only; keep the deprecated C++ bindings (and their warnings) out.
target_compile_definitions(tptrain_host_deps INTERFACE OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
target_link_libraries(tptrain_host_deps INTERFACE MPI::MPI_C tptrain_hdf5 tomlplusplus::tomlplusplus
                      CLI11::CLI11 fmt::fmt)

add_library(tptrain_deps INTERFACE)
add_library(tptrain::deps ALIAS tptrain_deps)
target_link_libraries(tptrain_deps INTERFACE tptrain_kokkos tptrain_host_deps)
# Every multiply and add rounds as written, on the host and on the device (no contraction into
# FMAs): two code paths that compute the same formula (the bucket and the per-parameter AdamW, a
# LayerNorm row read from team scratch or from global memory, a recomputed forward) then give the
# same bits on every backend, also with -march=native. The kernels are memory-bound and the GEMMs
# (BLAS, cuBLAS) are not affected. Seen without it: the bucket AdamW's weights differed from the
# per-parameter update in the last bit on an H200, and the LayerNorm scratch path from the global
# one with -march=native on x86.
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(tptrain_deps INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>)
endif()
if(TPTRAIN_KOKKOS_HAS_CUDA)
  target_compile_options(tptrain_deps INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-fmad=false>)
endif()
if(TPTRAIN_HAVE_NCCL)
  target_link_libraries(tptrain_deps INTERFACE tptrain_nccl CUDA::cublas)
  target_compile_definitions(tptrain_deps INTERFACE TPTRAIN_HAVE_NCCL=1)
elseif(TPTRAIN_KOKKOS_HAS_CUDA)
  target_link_libraries(tptrain_deps INTERFACE CUDA::cublas)
endif()
