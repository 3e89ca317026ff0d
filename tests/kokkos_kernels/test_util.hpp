// Helpers for the kernel tests: random host data, device upload/download through host mirrors,
// error measures, central finite differences.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kokkos_kernels/detail.hpp"
#include "kokkos_kernels/precision.hpp"
#include "kokkos_kernels/views.hpp"

namespace tptrain::kernels::test {

// Runs every team kernel with `size` threads per team while it lives (detail::team_size_override),
// and restores Kokkos::AUTO team sizes even when a check throws.
struct TeamSizeGuard {
  explicit TeamSizeGuard(int size) { detail::team_size_override() = size; }
  ~TeamSizeGuard() { detail::team_size_override() = 0; }
  TeamSizeGuard(const TeamSizeGuard&) = delete;
  TeamSizeGuard& operator=(const TeamSizeGuard&) = delete;
};

// Caps the level-0 team scratch of the row kernels (0: every row kernel takes its global-memory
// path) for the lifetime of the guard.
struct ScratchLimitGuard {
  explicit ScratchLimitGuard(std::int64_t bytes) { detail::team_scratch_limit() = bytes; }
  ~ScratchLimitGuard() { detail::team_scratch_limit() = -1; }
  ScratchLimitGuard(const ScratchLimitGuard&) = delete;
  ScratchLimitGuard& operator=(const ScratchLimitGuard&) = delete;
};

// The team sizes a team-size sweep (TeamSizeGuard) runs on Exec: on host backends 1, 2, 4 up to
// the threads Exec has (Serial: 1); on GPUs whole warps, 32, 64 and 128 (Kokkos' CUDA team
// reductions of dynamically sized types refuse teams smaller than a warp).
template <class Exec>
std::vector<int> team_sizes(const Exec& exec) {
  if (!Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible) return {32, 64, 128};
  std::vector<int> sizes;
  for (int ts = 1; ts <= std::min(4, static_cast<int>(exec.concurrency())); ts *= 2) sizes.push_back(ts);
  return sizes;
}

using HostVec = std::vector<double>;  // row-major host data, always double

// Tolerance for comparing a kernel in T with a double reference (max normwise relative error).
// 16-bit T: outputs rounded to 8 (bf16) or 11 (fp16) significant bits, 2^-8 and 2^-11 relative.
template <class T>
constexpr double tol() {
  if (std::is_same<T, kx::bf16>::value) return 1.0 / 256;
  if (std::is_same<T, kx::fp16>::value) return 1.0 / 2048;
  return sizeof(T) == sizeof(float) ? 1e-5 : 1e-12;
}

// Uniform random values in [lo, hi), rounded to T so that kernel and reference see the same
// inputs.
template <class T>
HostVec random_vec(std::mt19937& rng, std::size_t n, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  HostVec v(n);
  for (auto& x : v) x = static_cast<double>(static_cast<T>(dist(rng)));
  return v;
}

inline double max_abs(const HostVec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// max_i |got_i - ref_i| / max(max_i |ref_i|, floor)  (normwise relative error; absolute when
// everything is 0). For accumulated results pass the size of what was accumulated onto as floor,
// so that cancellation in ref does not count as kernel error.
inline double max_rel_err(const HostVec& got, const HostVec& ref, double floor = 0.0) {
  if (got.size() != ref.size()) return 1e300;
  double diff = 0, scale = floor;
  for (std::size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, std::fabs(got[i] - ref[i]));
    scale = std::max(scale, std::fabs(ref[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

// max_i |got_i - ref_i| / |ref_i| over the entries with ref_i != 0 (elementwise relative error:
// catches precision lost in small entries, which the normwise measure would hide).
inline double max_elementwise_rel_err(const HostVec& got, const HostVec& ref) {
  if (got.size() != ref.size()) return 1e300;
  double err = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (ref[i] != 0) err = std::max(err, std::fabs(got[i] - ref[i]) / std::fabs(ref[i]));
  }
  return err;
}

// Bitwise equality of two device views' contents.
inline bool bitwise_equal(const HostVec& a, const HostVec& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!(a[i] == b[i])) return false;  // doubles hold float values exactly
  }
  return true;
}

// ---- device <-> host, always through host mirrors --------------------------------------------
template <class T>
Matrix<T> to_device(const HostVec& h, std::size_t rows, std::size_t cols,
                    const std::string& label = "m") {
  Matrix<T> d(label, rows, cols);
  auto m = Kokkos::create_mirror_view(d);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) m(i, j) = static_cast<T>(h[i * cols + j]);
  Kokkos::deep_copy(d, m);
  return d;
}

template <class T>
Vector<T> to_device(const HostVec& h, const std::string& label = "v") {
  Vector<T> d(label, h.size());
  auto m = Kokkos::create_mirror_view(d);
  for (std::size_t i = 0; i < h.size(); ++i) m(i) = static_cast<T>(h[i]);
  Kokkos::deep_copy(d, m);
  return d;
}

inline Tokens tokens_to_device(const std::vector<int>& h) {
  Tokens d("tokens", h.size());
  auto m = Kokkos::create_mirror_view(d);
  for (std::size_t i = 0; i < h.size(); ++i) m(i) = h[i];
  Kokkos::deep_copy(d, m);
  return d;
}

// Any rank-1, -2 or -4 view (any layout) to row-major host doubles.
template <class V>
HostVec to_host(const V& v) {
  auto m = Kokkos::create_mirror_view(v);
  Kokkos::deep_copy(m, v);
  HostVec h;
  h.reserve(v.size());
  constexpr int rank = static_cast<int>(V::rank);
  if constexpr (rank == 1) {
    for (std::size_t i = 0; i < m.extent(0); ++i) h.push_back(static_cast<double>(m(i)));
  } else if constexpr (rank == 2) {
    for (std::size_t i = 0; i < m.extent(0); ++i)
      for (std::size_t j = 0; j < m.extent(1); ++j) h.push_back(static_cast<double>(m(i, j)));
  } else {
    static_assert(rank == 4, "to_host: rank 1, 2 or 4");
    for (std::size_t a = 0; a < m.extent(0); ++a)
      for (std::size_t b = 0; b < m.extent(1); ++b)
        for (std::size_t c = 0; c < m.extent(2); ++c)
          for (std::size_t d = 0; d < m.extent(3); ++d)
            h.push_back(static_cast<double>(m(a, b, c, d)));
  }
  return h;
}

inline double dot(const HostVec& a, const HostVec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Gradient of f at x by central differences, one entry at a time.
inline HostVec fd_gradient(const std::function<double(const HostVec&)>& f, HostVec x,
                           double h = 1e-6) {
  HostVec g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = f(x);
    x[i] = x0 - h;
    const double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

// Tolerance for finite-difference checks in double (truncation ~h², cancellation ~eps/h).
constexpr double fd_tol = 1e-6;

}  // namespace tptrain::kernels::test
