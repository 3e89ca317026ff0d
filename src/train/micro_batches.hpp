// The micro-batches of a training step on their way to the device: each is sampled once, into
// pinned host memory (kx::StagingSpace, CudaHostPinnedSpace, on CUDA; on a host execution space
// the device views themselves), uploaded with asynchronous copies on the compute instance, and kept on the device
// from its forward to the end of its backward, where the first stage's word-embedding gradient
// reads its tokens grouped by id and the last stage's loss gradient its targets.
//
// Entries: as many as micro-batches are in flight on the rank's token-using chunk (its forward
// done, its backward not) plus one, so that the next micro-batch is sampled and its upload
// queued (prefetch) while the current one computes: double buffering in the plain case of one
// micro-batch in flight. An entry is filled again only after
//   - its previous micro-batch's backward was queued (release): the device buffers are then
//     overwritten in stream order, after the kernels that read them;
//   - the copies that read its host buffers are done: on CUDA an event recorded after them,
//     which the host waits for before it writes the host buffers (long passed in practice: the
//     backward in between ran); on other device backends a fence of the instance; on host
//     backends nothing (the copies have finished when they return).
// On host backends this is the old behaviour: sample, copy, group, compute.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kokkos_kernels/embedding.hpp"
#include "kokkos_kernels/views.hpp"
#include "src/train/documents.hpp"

namespace tptrain::train {

// One micro-batch's tokens on the device.
struct TrainingBatch {
  kernels::Tokens inputs, targets;  // [B*S]
  kernels::TokenSegments segments;  // of the inputs, when the queue groups them (first stage)
  // Packed documents (data::document_starts; empty unless the queue's Documents ask for them):
  // the first position of each token's document, its position within it, and the tokens
  // grouped by that position (the learned position embedding's gradient, first stage).
  kernels::Tokens doc_start, positions;  // [B*S]
  kernels::TokenSegments position_segments;
};


class MicroBatchQueue {
 public:
  // Writes micro-batch m's inputs and targets (its whole sequences: B·seq_length values each) into
  // host memory.
  using Sample = std::function<void(int m, std::int32_t* inputs, std::int32_t* targets)>;

  // `tokens`: B*S per micro-batch; `group_tokens`: build the segments (a rank holding the
  // embedding). No entries until reserve().
  MicroBatchQueue(std::int64_t tokens, bool group_tokens, const Documents& documents = {});
  ~MicroBatchQueue();
  MicroBatchQueue(const MicroBatchQueue&) = delete;
  MicroBatchQueue& operator=(const MicroBatchQueue&) = delete;

  // At least `entries` entries, every buffer allocated now (nothing is allocated in a step).
  void reserve(int entries);
  // Starts a step whose micro-batch m is sample(m, ...). Every entry is free again (what the
  // previous step held was released, or abandoned by an error).
  void begin_step(Sample sample, int micro_batches);
  // Micro-batch m on the device, in stream order on exec: sampled and uploaded now unless a
  // prefetch did it.
  const TrainingBatch& get(const kx::ExecSpace& exec, int m);
  // Samples m and queues its upload if an entry is free and m is in the step (else nothing).
  void prefetch(const kx::ExecSpace& exec, int m);
  // m's backward is queued: its entry may be refilled (after that backward, in stream order).
  void release(int m);

  int entries() const { return static_cast<int>(entries_.size()); }
  // Micro-batches sampled since construction (tests: once per micro-batch and step).
  std::int64_t samples() const { return samples_; }

 private:
  struct Entry;
  Entry* find(int m);
  Entry& fill(const kx::ExecSpace& exec, int m);

  std::vector<std::unique_ptr<Entry>> entries_;
  std::int64_t tokens_;  // the rank's rows of a micro-batch (context parallelism: B·2c)
  bool group_tokens_;
  Documents documents_;
  Sample sample_;
  // Context parallelism: the whole sequences sampled, and their documents (Documents::take_rows).
  std::vector<std::int32_t> full_inputs_, full_targets_, full_documents_;
  int micro_batches_ = 0;
  std::int64_t samples_ = 0;
};

}  // namespace tptrain::train
