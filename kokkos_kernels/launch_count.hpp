// Launch counting (issue 22's launch budget): how many device kernels, BLAS calls and
// collectives a piece of the program issues, as a CUDA build would issue them.
//  * kernels: every Kokkos parallel_for / parallel_reduce / parallel_scan, through the Kokkos
//    Tools begin callbacks that LaunchCounting installs while it lives;
//  * BLAS: one per GEMM call at the GEMM wrappers (gemm.hpp, batched_gemm.hpp): one
//    cublas*gemm / cublasGemm*BatchedEx on CUDA. A strided- or pointer-batched call is one,
//    even where the host backend loops over the batch;
//  * collectives: one per operation started at the parallel layer's communicator API
//    (src/parallel/collectives.hpp). This header knows nothing of what they are.
// Counts go to the current site (enter_site / SiteScope): the model tags a layer's forward and
// backward so that a bench reports launches per layer; everything else lands in site 0.
//
// Coexisting with a user's Kokkos Tools (KOKKOS_TOOLS_LIBS, the NVTX connector under nsys):
// counting is off unless a LaunchCounting object lives, and then it CHAINS: it reads the current
// event set (Kokkos::Tools::Experimental::get_callbacks), installs begin callbacks that count
// and then call the tool's own begin callback with the same arguments (so the tool still sees
// and numbers every kernel), and restores the saved event set when it ends. Only begin
// callbacks are installed: Kokkos 3.4 calls them without a fence; Kokkos 4 fences before a
// begin callback unless a loaded tool declared it needs none (requires_global_fencing), so
// counted work is fenced there: count in steps of their own, never in timed ones (tptrain
// bench does). Host state only, never touched inside a kernel. Not thread-safe: one counting
// session at a time, opened and closed on the thread that launches.
// Kokkos 3.4 and 4.x have the same API here (Kokkos::Tools::Experimental::{get,set}_callbacks,
// set_begin_parallel_{for,reduce,scan}_callback).
#pragma once

#include <array>
#include <cstdint>
#include <stdexcept>

#include <Kokkos_Core.hpp>

namespace tptrain::kernels {

struct LaunchCounts {
  std::int64_t kernels = 0, blas = 0, collectives = 0;
  // The budget of issue 22 counts kernels and BLAS calls together.
  std::int64_t compute() const { return kernels + blas; }
  LaunchCounts& operator+=(const LaunchCounts& o) {
    kernels += o.kernels;
    blas += o.blas;
    collectives += o.collectives;
    return *this;
  }
  LaunchCounts operator-(const LaunchCounts& o) const {
    return {kernels - o.kernels, blas - o.blas, collectives - o.collectives};
  }
};

namespace launch_count {

enum class Kind { kernel, blas, collective };
constexpr int max_sites = 8;

namespace detail {
struct State {
  bool active = false;
  int site = 0;
  std::array<LaunchCounts, max_sites> counts{};
  std::array<std::int64_t, max_sites> entries{};  // how often each site was entered
  Kokkos::Tools::Experimental::EventSet saved{};   // the event set before counting began
};
inline State& state() {
  static State s;
  return s;
}
}  // namespace detail

inline bool active() { return detail::state().active; }

inline void record(Kind kind) {
  detail::State& s = detail::state();
  if (!s.active) return;
  LaunchCounts& c = s.counts[s.site];
  if (kind == Kind::kernel) ++c.kernels;
  else if (kind == Kind::blas) ++c.blas;
  else ++c.collectives;
}

// Counts of one site so far, and how often it was entered.
inline LaunchCounts at(int site) { return detail::state().counts.at(site); }
inline std::int64_t entries(int site) { return detail::state().entries.at(site); }
inline LaunchCounts total() {
  LaunchCounts t;
  for (const LaunchCounts& c : detail::state().counts) t += c;
  return t;
}

// Counts from here on go to `site` (1 .. max_sites-1; 0 is "elsewhere") until the returned
// previous site is restored. Cheap enough to leave in every layer call: two integer stores.
inline int enter_site(int site) {
  detail::State& s = detail::state();
  const int previous = s.site;
  s.site = site;
  ++s.entries.at(site);
  return previous;
}
inline void leave_site(int previous) { detail::state().site = previous; }

class SiteScope {
 public:
  explicit SiteScope(int site) : previous_(enter_site(site)) {}
  ~SiteScope() { leave_site(previous_); }
  SiteScope(const SiteScope&) = delete;
  SiteScope& operator=(const SiteScope&) = delete;

 private:
  int previous_;
};

namespace detail {
inline void begin_for(const char* name, std::uint32_t device, std::uint64_t* id) {
  record(Kind::kernel);
  if (auto chained = state().saved.begin_parallel_for) chained(name, device, id);
}
inline void begin_reduce(const char* name, std::uint32_t device, std::uint64_t* id) {
  record(Kind::kernel);
  if (auto chained = state().saved.begin_parallel_reduce) chained(name, device, id);
}
inline void begin_scan(const char* name, std::uint32_t device, std::uint64_t* id) {
  record(Kind::kernel);
  if (auto chained = state().saved.begin_parallel_scan) chained(name, device, id);
}
}  // namespace detail

}  // namespace launch_count

// While it lives, launches are counted (from zero); see the header comment. Needs Kokkos
// initialised.
class LaunchCounting {
 public:
  LaunchCounting() {
    namespace kt = Kokkos::Tools::Experimental;
    launch_count::detail::State& s = launch_count::detail::state();
    if (s.active) throw std::logic_error("tptrain::kernels::LaunchCounting: counting is already on");
    s = launch_count::detail::State{};
    s.saved = kt::get_callbacks();
    kt::set_begin_parallel_for_callback(&launch_count::detail::begin_for);
    kt::set_begin_parallel_reduce_callback(&launch_count::detail::begin_reduce);
    kt::set_begin_parallel_scan_callback(&launch_count::detail::begin_scan);
    s.active = true;
  }
  ~LaunchCounting() {
    launch_count::detail::State& s = launch_count::detail::state();
    s.active = false;
    s.site = 0;
    Kokkos::Tools::Experimental::set_callbacks(s.saved);
  }
  LaunchCounting(const LaunchCounting&) = delete;
  LaunchCounting& operator=(const LaunchCounting&) = delete;
};

}  // namespace tptrain::kernels
