#include "src/train/micro_batches.hpp"

#include <stdexcept>
#include <string>
#include <type_traits>

#include "src/util/host_waits.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif

namespace tptrain::train {

namespace {

constexpr bool host_memory() { return Kokkos::SpaceAccessibility<Kokkos::HostSpace, kx::MemSpace>::accessible; }

#if defined(KOKKOS_ENABLE_CUDA)
constexpr bool cuda_events() { return std::is_same<kx::ExecSpace, Kokkos::Cuda>::value; }
// exec's stream, for a CUDA instance (a template, so that other instances never name it).
template <class Exec>
cudaStream_t stream_of(const Exec& exec) {
  if constexpr (std::is_same<Exec, Kokkos::Cuda>::value)
    return exec.cuda_stream();
  else
    return nullptr;
}
void cuda_check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw std::runtime_error(std::string("tptrain: ") + what + ": " + cudaGetErrorString(rc));
}
#else
constexpr bool cuda_events() { return false; }
#endif

}  // namespace

struct MicroBatchQueue::Entry {
  TrainingBatch batch;
  // The host side of inputs and targets: pinned on CUDA; on host execution spaces (also in a
  // CUDA build) the device views themselves (create_mirror_view), so that nothing is copied.
  using Staging = std::conditional_t<host_memory(), kx::MemSpace, kx::StagingSpace>;
  Kokkos::View<int*, Staging> h_inputs, h_targets, h_doc_start, h_positions;
  int micro_batch = -1;  // the micro-batch it holds, -1: free
  bool copies_queued = false;  // copies that read the host buffers were queued
#if defined(KOKKOS_ENABLE_CUDA)
  cudaEvent_t copied = nullptr;  // recorded after them
#endif

  Entry(std::int64_t tokens, bool group_tokens, const Documents& documents) {
    const auto n = static_cast<std::size_t>(tokens);
    batch.inputs = kernels::Tokens(Kokkos::view_alloc(Kokkos::WithoutInitializing, "batch.inputs"), n);
    batch.targets = kernels::Tokens(Kokkos::view_alloc(Kokkos::WithoutInitializing, "batch.targets"), n);
    h_inputs = Kokkos::create_mirror_view(Staging(), batch.inputs);
    h_targets = Kokkos::create_mirror_view(Staging(), batch.targets);
    if (group_tokens) batch.segments.reserve(tokens);
    if (documents.doc_starts()) {
      batch.doc_start = kernels::Tokens(Kokkos::view_alloc(Kokkos::WithoutInitializing, "batch.doc_start"), n);
      h_doc_start = Kokkos::create_mirror_view(Staging(), batch.doc_start);
    }
    if (documents.positions()) {
      batch.positions = kernels::Tokens(Kokkos::view_alloc(Kokkos::WithoutInitializing, "batch.positions"), n);
      h_positions = Kokkos::create_mirror_view(Staging(), batch.positions);
      if (documents.group_positions) batch.position_segments.reserve(tokens);
    }
#if defined(KOKKOS_ENABLE_CUDA)
    if (cuda_events()) cuda_check(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming), "cudaEventCreate");
#endif
  }
  ~Entry() {
#if defined(KOKKOS_ENABLE_CUDA)
    if (copied != nullptr) cudaEventDestroy(copied);
#endif
  }
  Entry(const Entry&) = delete;
  Entry& operator=(const Entry&) = delete;

  // The host buffers may be written: the copies queued from them are done.
  void host_buffers_free(const kx::ExecSpace& exec) {
    if (host_memory()) {
      // The device views are the host buffers: the kernels that read them (an earlier backward)
      // must be done. Serial and OpenMP kernels have finished when they return: no wait.
      kx::fence(exec, "tptrain::MicroBatchQueue: entry free");
      return;
    }
    if (!copies_queued) return;
    util::note_host_wait(util::HostWait::batch_buffer_reuse);
#if defined(KOKKOS_ENABLE_CUDA)
    if (cuda_events()) {
      cuda_check(cudaEventSynchronize(copied), "cudaEventSynchronize");
      return;
    }
#endif
    kx::fence(exec, "tptrain::MicroBatchQueue: host buffers free");  // another device backend
  }
  void record_copies(const kx::ExecSpace& exec) {
    copies_queued = true;
#if defined(KOKKOS_ENABLE_CUDA)
    if (cuda_events()) cuda_check(cudaEventRecord(copied, stream_of(exec)), "cudaEventRecord");
#endif
    (void)exec;
  }
};

MicroBatchQueue::MicroBatchQueue(std::int64_t tokens, bool group_tokens, const Documents& documents)
    : tokens_(tokens), group_tokens_(group_tokens), documents_(documents) {}

MicroBatchQueue::~MicroBatchQueue() = default;

void MicroBatchQueue::reserve(int entries) {
  while (static_cast<int>(entries_.size()) < entries) entries_.push_back(std::make_unique<Entry>(tokens_, group_tokens_, documents_));
}

void MicroBatchQueue::begin_step(Sample sample, int micro_batches) {
  sample_ = std::move(sample);
  micro_batches_ = micro_batches;
  for (auto& e : entries_) e->micro_batch = -1;
}

MicroBatchQueue::Entry* MicroBatchQueue::find(int m) {
  for (auto& e : entries_)
    if (e->micro_batch == m) return e.get();
  return nullptr;
}

MicroBatchQueue::Entry& MicroBatchQueue::fill(const kx::ExecSpace& exec, int m) {
  Entry* e = find(-1);
  if (e == nullptr)
    throw std::logic_error("tptrain: MicroBatchQueue: micro-batch " + std::to_string(m) + " finds all " +
                           std::to_string(entries_.size()) + " entries in flight");
  e->host_buffers_free(exec);
  if (documents_.context.split()) {
    // Context parallelism: whole sequences sampled, the rank's chunks of them kept.
    const std::int64_t sequences = tokens_ / documents_.local_length();
    full_inputs_.resize(static_cast<std::size_t>(sequences * documents_.seq_length));
    full_targets_.resize(full_inputs_.size());
    sample_(m, full_inputs_.data(), full_targets_.data());
    documents_.take_rows(sequences, full_inputs_.data(), full_targets_.data(), e->h_inputs.data(), e->h_targets.data(),
                         e->h_doc_start.size() ? e->h_doc_start.data() : nullptr,
                         e->h_positions.size() ? e->h_positions.data() : nullptr, full_documents_);
  } else {
    sample_(m, e->h_inputs.data(), e->h_targets.data());
    if (documents_.any())
      documents_.derive(e->h_inputs.data(), tokens_, e->h_doc_start.data(), e->h_positions.data());
  }
  ++samples_;
  // Stream-ordered on exec, after the kernels that still read the entry's previous tokens.
  Kokkos::deep_copy(exec, e->batch.inputs, e->h_inputs);
  Kokkos::deep_copy(exec, e->batch.targets, e->h_targets);
  if (group_tokens_) e->batch.segments.build(exec, e->h_inputs.data(), tokens_);
  if (documents_.any()) {
    if (e->batch.doc_start.size() > 0) Kokkos::deep_copy(exec, e->batch.doc_start, e->h_doc_start);
    if (e->batch.positions.size() > 0) Kokkos::deep_copy(exec, e->batch.positions, e->h_positions);
    if (documents_.group_positions) e->batch.position_segments.build(exec, e->h_positions.data(), tokens_);
  }
  e->record_copies(exec);
  e->micro_batch = m;
  return *e;
}

const TrainingBatch& MicroBatchQueue::get(const kx::ExecSpace& exec, int m) {
  if (Entry* e = find(m)) return e->batch;
  return fill(exec, m).batch;
}

void MicroBatchQueue::prefetch(const kx::ExecSpace& exec, int m) {
  if (m < 0 || m >= micro_batches_ || find(m) != nullptr || find(-1) == nullptr) return;
  fill(exec, m);
}

void MicroBatchQueue::release(int m) {
  Entry* e = find(m);
  if (e == nullptr)
    throw std::logic_error("tptrain: MicroBatchQueue: release of micro-batch " + std::to_string(m) + ", which it does not hold");
  e->micro_batch = -1;
}

}  // namespace tptrain::train
