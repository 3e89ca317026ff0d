// Checkpoints of a training run, written in the foreground or in the background
// (checkpoint.async; docs/design.md, "Asynchronous checkpoints").
//
// A checkpoint step copies the state (fp32 master weights, AdamW moments; the /train attributes:
// scaler, spike window, data position = the step; /train/blend, data.train and the sequences
// drawn per dataset) to host buffers the checkpoint owns (pinned on CUDA) and checks it,
// collectively, as a synchronous checkpoint does. Then:
// - synchronous: the file is written there and then (io::write_checkpoint over the world);
// - asynchronous: a thread writes it with the same collective layout, the same phases and the
//   same atomic rename, over a duplicate of the world communicator (its collectives never meet
//   the training's), while the main thread trains on. MPI must provide MPI_THREAD_MULTIPLE
//   (the training commands ask for it); without it the writer says so and writes synchronously.
//   The thread touches no Kokkos and no device: only the host buffers, HDF5 and MPI. HDF5 is
//   not thread-safe in Debian's build, so nothing else calls it while a write is in flight (the
//   main thread reads checkpoints only at start-up, before the first write).
//
// At most one write is in flight: the next checkpoint waits for it first (and says so), as do
// wait() (the run's end, a stop signal before the requeue) and the destructor. A failed write
// is the CheckpointError it is today, agreed on every rank by io::write_checkpoint; it surfaces
// at that wait, on every rank, and the previous checkpoint is untouched (the new file never got
// its name). The host buffers stay with the writer, on the main thread, and the next checkpoint
// fills them again: the host copy is held from the first asynchronous checkpoint on.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "io/deck.hpp"
#include "src/checkpoint/model_checkpoint.hpp"
#include "src/checkpoint/run_ownership.hpp"
#include "src/parallel/topology.hpp"

namespace tptrain::checkpoint {

class CheckpointWriter {
 public:
  // Collective over the world (the duplicate communicator of an asynchronous writer).
  CheckpointWriter(const io::Deck& deck, const parallel::Topology& topo, RunIdentity run);
  // Waits for a write in flight; its failure is logged, not thrown (the run is ending anyway).
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Collective: the checkpoint after `step` steps, then the old ones pruned
  // (checkpoint.keep). Asynchronous: returns once the state is on the host and the write has
  // started, after waiting for the previous write.
  template <class T>
  void save(model::GptModel<T>& model, std::int64_t step, std::int64_t tokens_seen,
            const std::map<std::string, std::int64_t>& train_state, const io::BlendRecord& blend = {});
  // Returns when no write is in flight; rethrows the failure of the last one (a CheckpointError,
  // agreed by the write itself: the same on every rank, so no further communication is needed).
  void wait();

  bool asynchronous() const { return comm_ != MPI_COMM_NULL; }
  // The step of the write in flight, -1 when none.
  std::int64_t in_flight() const { return thread_.joinable() ? step_ : -1; }

 private:
  void write_and_prune(MPI_Comm comm, PreparedCheckpoint& c);
  const io::Deck& deck_;
  const parallel::Topology& topo_;
  RunIdentity run_;
  MPI_Comm comm_ = MPI_COMM_NULL;  // the writer thread's duplicate of the world
  std::thread thread_;
  PreparedCheckpoint pending_;  // owned here, freed on the main thread after the join
  // The host buffers of the last write, kept for the next (asynchronous writes only: a
  // synchronous checkpoint frees them at once, as before).
  std::unique_ptr<CheckpointTensors> spare_;
  std::exception_ptr failure_;
  std::atomic<bool> finished_{false};  // the thread is done (joined or not): no wait to announce
  std::int64_t step_ = -1;
};

}  // namespace tptrain::checkpoint
