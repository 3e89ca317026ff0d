#include "src/checkpoint/checkpoint_writer.hpp"

#include <chrono>
#include <utility>

#include "base/mpi_check.hpp"
#include "base/test_hooks.hpp"
#include "src/util/log.hpp"

namespace tptrain::checkpoint {

CheckpointWriter::CheckpointWriter(const io::Deck& deck, const parallel::Topology& topo, RunIdentity run)
    : deck_(deck), topo_(topo), run_(run) {
  if (!deck.checkpoint.async) return;
  int provided = MPI_THREAD_SINGLE;
  TPTRAIN_MPI_CHECK(MPI_Query_thread(&provided));
  // Every rank got the same level from the same library; no agreement needed.
  if (provided < MPI_THREAD_MULTIPLE) {
    if (topo.world_rank() == 0)
      log::warning("checkpoint.async = true, but this MPI library does not provide MPI_THREAD_MULTIPLE: "
                   "checkpoints are written synchronously");
    return;
  }
  TPTRAIN_MPI_CHECK(MPI_Comm_dup(topo.world(), &comm_));
  TPTRAIN_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
}

CheckpointWriter::~CheckpointWriter() {
  try {
    wait();
  } catch (const std::exception& e) {
    if (topo_.world_rank() == 0) log::error(e.what());
  }
  spare_.reset();  // the host buffers go, on the thread that made them
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void CheckpointWriter::write_and_prune(MPI_Comm comm, PreparedCheckpoint& c) {
  if (test_hooks().checkpoint_seconds > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(test_hooks().checkpoint_seconds));
  write_prepared(comm, c);
  prune_checkpoints(comm, deck_.checkpoint.dir, deck_.checkpoint.keep, run_);
}

template <class T>
void CheckpointWriter::save(model::GptModel<T>& model, std::int64_t step, std::int64_t tokens_seen,
                            const std::map<std::string, std::int64_t>& train_state, const io::BlendRecord& blend) {
  if (thread_.joinable()) {
    // At most one write in flight: this checkpoint's host copy waits for the last one's.
    const bool busy = !finished_.load() && topo_.world_rank() == 0;
    if (busy) log::infof("checkpoint of step {}: waiting for the write of step {}, still in flight", step, step_);
    const auto waited = std::chrono::steady_clock::now();
    wait();
    if (busy)
      log::infof("checkpoint of step {}: waited {:.2f} s for the write of the last one", step,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - waited).count());
  }
  const auto t0 = std::chrono::steady_clock::now();
  PreparedCheckpoint c =
      prepare_checkpoint(model, deck_, topo_, step, tokens_seen, train_state, blend, std::move(spare_));
  if (!asynchronous()) {
    write_and_prune(topo_.world(), c);
    return;
  }
  if (topo_.world_rank() == 0)
    log::infof("checkpoint of step {}: {:.0f} MB of state copied to host buffers in {:.2f} s; written in the background",
               step, static_cast<double>(c.tensors->host_bytes()) / 1e6,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  pending_ = std::move(c);
  step_ = step;
  failure_ = nullptr;
  finished_ = false;
  thread_ = std::thread([this] {
    try {
      write_and_prune(comm_, pending_);
    } catch (...) {
      failure_ = std::current_exception();
    }
    finished_ = true;
  });
}

void CheckpointWriter::wait() {
  if (!thread_.joinable()) return;
  thread_.join();
  spare_ = std::move(pending_.tensors);  // filled again by the next checkpoint
  pending_ = PreparedCheckpoint{};
  step_ = -1;
  if (std::exception_ptr f = std::exchange(failure_, nullptr)) std::rethrow_exception(f);
}

#define TPTRAIN_WRITER_INSTANCES(T)                                                              \
  template void CheckpointWriter::save(model::GptModel<T>&, std::int64_t, std::int64_t, \
                                       const std::map<std::string, std::int64_t>&, const io::BlendRecord&);
TPTRAIN_WRITER_INSTANCES(float)
TPTRAIN_WRITER_INSTANCES(kx::bf16)
TPTRAIN_WRITER_INSTANCES(kx::fp16)
#undef TPTRAIN_WRITER_INSTANCES

}  // namespace tptrain::checkpoint
