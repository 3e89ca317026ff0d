// Internal helpers shared by the kernel headers: execution policies on the caller's execution
// space instance, compile-time view checks, host-side shape checks. Not part of the contract.
#pragma once

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/precision.hpp"
#include "kokkos_kernels/views.hpp"

namespace tptrain::kernels::detail {

// 64-bit indices throughout: flattened parameter buffers and logits can exceed 2^31 elements.
template <class Exec>
using Range = Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>;
template <class Exec>
using Range2D = Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2>, Kokkos::IndexType<std::int64_t>>;
template <class Exec>
using Teams = Kokkos::TeamPolicy<Exec>;

// Every policy below is built from extents checked here first: a negative one (an unsigned
// extent that wrapped) would give an empty range under Kokkos 3.4, a "RangePolicy bounds error"
// on std::cerr and an empty range under Kokkos 4 (an abort without its deprecated code).
inline void require_extents(const std::int64_t n0, const std::int64_t n1 = 0) {
  if (n0 < 0 || n1 < 0)
    throw std::invalid_argument("tptrain::kernels: negative extent (" + std::to_string(n0 < 0 ? n0 : n1) +
                                ") for an execution policy");
}

template <class Exec>
inline Range<Exec> range(const Exec& exec, std::int64_t n) {
  require_extents(n);
  return Range<Exec>(exec, 0, n);
}

// [n0, n1] index space of the elementwise kernels on LayoutRight [rows, cols] views. Host
// backends keep Kokkos' default tiling. On GPUs Kokkos maps threadIdx.x to index 0 and its
// default tile is 16 × 2 (CUDA): 32-thread blocks whose warps stride down rows, reading one
// element per 32-byte sector. A 1 × T tile instead gives blocks of T (up to 256) threads along
// a row: a warp reads 32 consecutive columns (coalesced). T stays a multiple of 32 (whole warps).
template <class Exec>
inline Range2D<Exec> range2d(const Exec& exec, std::int64_t n0, std::int64_t n1) {
  using point = typename Range2D<Exec>::point_type;
  using tile = typename Range2D<Exec>::tile_type;
  require_extents(n0, n1);
  if (std::is_same<typename Exec::memory_space, Kokkos::HostSpace>::value)
    return Range2D<Exec>(exec, point{{0, 0}}, point{{n0, n1}});
  const std::int64_t cols = n1 < 256 ? ((n1 + 31) / 32) * 32 : 256;
  return Range2D<Exec>(exec, point{{0, 0}}, point{{n0, n1}}, tile{{1, cols > 0 ? cols : 32}});
}

// Testing hook: a fixed team size for every team kernel (0, the default: Kokkos::AUTO). Lets
// host tests run the team barriers and team reductions with several threads per team (OpenMP),
// as GPUs do. Host-only state, read when a kernel is launched.
inline int& team_size_override() {
  static int size = 0;
  return size;
}

// Testing hook: the most bytes of level-0 team scratch a kernel may ask for (-1, the default:
// the backend's limit). 0 forces the row kernels onto their global-memory path. Host-only.
inline std::int64_t& team_scratch_limit() {
  static std::int64_t bytes = -1;
  return bytes;
}

// A team's row cache: the row kernels (layernorm.hpp, attention.hpp) read a row several times
// (reduction passes, then the output pass); keeping it in level-0 team scratch (GPU shared
// memory) reads it from global memory once. Rows too long for the per-team limit (about 40 KiB
// on CUDA, 32 KiB on host backends) fall back to reading global memory each pass, with the same
// arithmetic.
template <class Exec, class T>
using ScratchRow = Kokkos::View<T*, typename Exec::scratch_memory_space,
                                Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// Level-0 scratch bytes of a cached row of n values of T (with Kokkos' alignment padding).
template <class Exec, class T>
inline std::size_t scratch_row_bytes(const std::int64_t n) {
  return ScratchRow<Exec, T>::shmem_size(static_cast<std::size_t>(n));
}

// Whether Exec's row kernels have a scratch path at all: GPUs only, decided at compile time. On
// a host backend the row stays in the core's cache between passes anyway, and a runtime scratch
// branch in the inner loops slowed the row kernels down (docs/design.md, "Throughput
// measurement").
template <class Exec>
KOKKOS_INLINE_FUNCTION constexpr bool scratch_rows() {  // callable in kernels (team_for)
  return !Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
}

// parallel_for over [begin, end) of a TeamThreadRange that host compilers vectorise. Kokkos'
// host teams step their loops by the team size, a stride known only at run time, and GCC
// vectorises none of them; a one-thread team on a host backend (every Serial team) runs a
// unit-stride loop instead. For the loops that compute an exp (kx::exp of a float is vectorisable
// arithmetic): the softmax rows of attention, the loss rows. Same iterations, same order.
template <class Exec>
KOKKOS_INLINE_FUNCTION constexpr bool serial_teams() {
#if defined(KOKKOS_ENABLE_SERIAL)
  return std::is_same<Exec, Kokkos::Serial>::value;
#else
  return false;
#endif
}
template <class Exec, class Member, class F>
KOKKOS_FORCEINLINE_FUNCTION void team_for(const Member& team, const std::int64_t begin,
                                          const std::int64_t end, const F& f) {
  if constexpr (!scratch_rows<Exec>()) {
    // Serial's teams have one thread: no Kokkos loop beside the plain one, which GCC would
    // otherwise merge with it (into a loop it does not vectorise either).
    if (serial_teams<Exec>() || team.team_size() == 1) {
      for (std::int64_t j = begin; j < end; ++j) f(j);
      return;
    }
  }
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, begin, end), f);
}

// Σ_{begin <= j < end} f(j) over a TeamThreadRange, as a T. On a one-thread host team the f(j)
// of 16 consecutive j are computed in one loop that GCC vectorises, then added one by one: the
// same sum, bit for bit, as the plain loop in j order (a float sum itself is never vectorised
// without -ffast-math, and neither is anything computed in its loop).
template <class Exec, class T, class Member, class F>
KOKKOS_FORCEINLINE_FUNCTION T team_sum(const Member& team, const std::int64_t begin,
                                       const std::int64_t end, const F& f) {
  T sum = 0;
  if constexpr (!scratch_rows<Exec>()) {
    if (serial_teams<Exec>() || team.team_size() == 1) {
      constexpr int width = 16;
      std::int64_t j = begin;
      for (; j + width <= end; j += width) {
        T v[width];
        for (int k = 0; k < width; ++k) v[k] = f(j + k);
        for (int k = 0; k < width; ++k) sum += v[k];
      }
      for (; j < end; ++j) sum += f(j);
      return sum;
    }
  }
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, begin, end), [&](const std::int64_t j, T& acc) { acc += f(j); }, sum);
  return sum;
}

// Whether `bytes` of level-0 scratch fit in one team of Exec (team_scratch_limit() >= 0: that
// limit instead, so that GPU tests can force the global-memory path).
template <class Exec>
inline bool fits_team_scratch(const std::size_t bytes) {
  const std::int64_t limit = team_scratch_limit() >= 0
                                 ? team_scratch_limit()
                                 : static_cast<std::int64_t>(Teams<Exec>::scratch_size_max(0));
  return bytes <= static_cast<std::size_t>(limit);
}

// The largest value of the 32-bit int that Kokkos leagues and BLAS dimensions are counted in.
constexpr std::int64_t int_limit = std::numeric_limits<int>::max();

// The most teams one league of Exec may hold. Kokkos counts leagues in an int, but its host
// backends with a team chunk size (OpenMP, Threads) pick it in the TeamPolicy constructor by
// doubling `chunk` while `chunk * 100 * concurrency < league`, all in int (set_auto_chunk_size,
// Kokkos 4.6): a league above 100 * 2^24 (at concurrency 1) overflows that product and the
// constructor never returns. 2^30 stays below the overflow for every concurrency.
template <class Exec>
constexpr std::int64_t league_limit() {
#if defined(KOKKOS_ENABLE_OPENMP)
  if (std::is_same<Exec, Kokkos::OpenMP>::value) return std::int64_t(1) << 30;
#endif
#if defined(KOKKOS_ENABLE_THREADS)
  if (std::is_same<Exec, Kokkos::Threads>::value) return std::int64_t(1) << 30;
#endif
#if defined(KOKKOS_ENABLE_CUDA)
  // Kokkos' CUDA TeamPolicy refuses a league >= the grid's x limit, 2^31 - 1 (seen on an H200).
  if (std::is_same<Exec, Kokkos::Cuda>::value) return int_limit - 1;
#endif
  return int_limit;
}

// Kokkos counts the teams of a league in an int: narrowing a larger count wraps it (2^31 rows
// became a negative league that ran no team, 2^32 + 3 a league of 3), so refuse it instead.
template <class Exec>
inline int league_size(std::int64_t league, const char* kernel) {
  constexpr std::int64_t limit = league_limit<Exec>();
  if (league < 0 || league > limit) {
    throw std::length_error(std::string("tptrain::kernels::") + kernel + ": " +
                            std::to_string(league) +
                            " rows, one Kokkos team each, exceed the league limit " +
                            std::to_string(limit) +
                            (limit == int_limit ? " (a 32-bit int)" : " of this Kokkos backend"));
  }
  return static_cast<int>(league);
}

// One team per league entry (rows of a row-wise reduction); team size left to Kokkos. Build the
// policy before the first launch of a kernel family, so that a refused size leaves every
// output untouched.
template <class Exec>
inline Teams<Exec> teams(const Exec& exec, std::int64_t league, const char* kernel = "teams") {
  const int n = league_size<Exec>(league, kernel);
  const int size = team_size_override();
  return size > 0 ? Teams<Exec>(exec, n, size) : Teams<Exec>(exec, n, Kokkos::AUTO);
}

// The policy of a row kernel that may keep `bytes` per row in level-0 scratch (a team per row,
// as teams()): `cached` when Exec has a scratch path and the rows fit, and then the policy asks
// for the scratch. The kernel still tests scratch_rows<Exec>() itself, at compile time.
template <class Exec>
struct RowTeams {
  Teams<Exec> policy;
  bool cached;
};
template <class Exec>
inline RowTeams<Exec> row_teams(const Exec& exec, const std::int64_t rows, const std::size_t bytes,
                                const char* kernel) {
  RowTeams<Exec> t{teams(exec, rows, kernel), scratch_rows<Exec>() && fits_team_scratch<Exec>(bytes)};
  if (t.cached) t.policy.set_scratch_size(0, Kokkos::PerTeam(bytes));
  return t;
}

// BLAS (OpenBLAS, cuBLAS) takes dimensions and leading dimensions as 32-bit ints; a larger
// extent would reach it negative or truncated.
template <class V>
void require_blas_dims(const V& v, const char* kernel, const char* name) {
  for (int r = 0; r < 2; ++r) {
    const std::size_t extent = v.extent(r), stride = v.stride(r);
    const std::size_t worst = extent > stride ? extent : stride;
    if (worst > static_cast<std::size_t>(int_limit)) {
      throw std::length_error(std::string("tptrain::kernels::") + kernel + ": " + name +
                              (extent >= stride ? ".extent(" : ".stride(") + std::to_string(r) +
                              ") = " + std::to_string(worst) + " exceeds the BLAS limit " +
                              std::to_string(int_limit) + " (a 32-bit int)");
    }
  }
}

// Column blocking for kernels in which a thread walks down columns (column sums, attention
// rows): on host memory spaces a thread takes a block of adjacent columns (one pass over
// contiguous row segments: cache friendly), on GPUs one column per thread (adjacent threads read
// adjacent addresses: coalesced). Each column is still summed in the same order, so results are
// bitwise identical for any block width. Kernels take it as a defaulted template parameter
// `int CB = ColumnBlock<Exec>::value`; tests force CB = 1 on the host to check the GPU ordering.
template <class Exec>
struct ColumnBlock {
  static constexpr int value =
      std::is_same<typename Exec::memory_space, Kokkos::HostSpace>::value ? 64 : 1;
};

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Compile-time checks every kernel makes on its view arguments.
template <class Exec, class V, int Rank>
constexpr void check_view() {
  static_assert(Kokkos::is_view<V>::value, "tptrain::kernels: argument must be a Kokkos::View");
  // V::rank: an enum in Kokkos 3.4, an integral_constant in 4.x (V::Rank is deprecated there).
  static_assert(static_cast<int>(V::rank) == Rank, "tptrain::kernels: view has the wrong rank");
  static_assert(Kokkos::SpaceAccessibility<Exec, typename V::memory_space>::accessible,
                "tptrain::kernels: view is not accessible from the execution space");
}

// Output views must be writable.
template <class V>
constexpr void check_writable() {
  static_assert(!std::is_const<typename V::value_type>::value,
                "tptrain::kernels: output view must not have a const value type");
}

// Host-side shape check: shape mismatches are programming errors, cheap to catch here.
inline void require(bool ok, const char* kernel, const char* what) {
  if (!ok) {
    throw std::invalid_argument(std::string("tptrain::kernels::") + kernel + ": " + what);
  }
}

}  // namespace tptrain::kernels::detail
