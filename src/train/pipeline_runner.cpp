#include "src/train/pipeline_runner.hpp"

#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <stdexcept>

#include "src/parallel/collectives.hpp"
#include "src/util/phases.hpp"

namespace tptrain::train {

double test_layer_seconds() {
  static const double seconds = [] {
    const char* s = std::getenv("TPTRAIN_TEST_LAYER_SECONDS");
    if (s == nullptr || *s == '\0') return 0.0;
    char* end = nullptr;
    const double t = std::strtod(s, &end);
    if (end == s || *end != '\0' || !(t >= 0) || t > 60)
      throw std::invalid_argument(std::string("TPTRAIN_TEST_LAYER_SECONDS = '") + s +
                                  "': expected seconds per layer between 0 and 60 (a test hook)");
    return t;
  }();
  return seconds;
}

namespace {
void sleep_for_layers(const kx::ExecSpace& exec, int layers, double factor) {
  const double t = test_layer_seconds();
  if (t <= 0) return;
  exec.fence();  // the compute first, then the hook's time: as if the layers took that long
  std::this_thread::sleep_for(std::chrono::duration<double>(t * layers * factor));
}
}  // namespace

template <class T>
PipelineRunner<T>::PipelineRunner(model::GptModel<T>& model, parallel::Communicator& pp, Schedule schedule,
                                  bool overlap)
    : model_(model),
      pp_(pp),
      schedule_(schedule),
      overlap_(overlap),
      // A backend with a communication stream (NCCL) runs the groups in order on it; the others
      // (MPI) keep a request per transfer, matched by tag.
      matching_(pp.communication_stream() != nullptr ? Matching::stream_order : Matching::by_tag) {
  if (pp.size() != model.stage().size || pp.rank() != model.stage().rank)
    throw std::logic_error("tptrain: PipelineRunner: the model is not the stage of this rank in the PP group");
}

template <class T>
PipelinePlace PipelineRunner<T>::place() const {
  return {model_.stage().rank, model_.stage().size, model_.stage().chunks};
}

template <class T>
void PipelineRunner<T>::reserve(int micro_batches) {
  const ScheduleMemory memory = schedule_memory(schedule_, place(), micro_batches, overlap_, matching_);
  for (int c = 0; c < model_.chunks(); ++c) model_.reserve_slots(memory.slots[static_cast<std::size_t>(c)], c);
  model_.reserve_received_gradients(memory.received_gradients);
}

// The slot of micro-batch m of a chunk from its first use (receiving its input, or its forward
// on the first virtual stage) to the end of its backward.
template <class T>
int PipelineRunner<T>::acquire_slot(int chunk, int m) {
  int& slot = slot_of_[static_cast<std::size_t>(chunk)][static_cast<std::size_t>(m)];
  if (slot >= 0) return slot;
  auto& free = free_[static_cast<std::size_t>(chunk)];
  if (free.empty())
    throw std::logic_error("tptrain: PipelineRunner: more micro-batches in flight than activation slots");
  slot = free.back();
  free.pop_back();
  return slot;
}

template <class T>
int PipelineRunner<T>::acquire_received(int chunk, int m) {
  int& j = received_of_[static_cast<std::size_t>(chunk)][static_cast<std::size_t>(m)];
  if (j >= 0) return j;
  if (free_received_.empty())
    throw std::logic_error("tptrain: PipelineRunner: more received gradients waiting than buffers");
  j = free_received_.back();
  free_received_.pop_back();
  return j;
}

template <class T>
double PipelineRunner<T>::run(const kx::ExecSpace& exec, int micro_batches, float scale,
                              const std::function<const DeviceBatch&(int)>& batch,
                              const std::function<void(int, std::size_t)>& bucket_done) {
  const PipelinePlace where = place();
  const std::vector<PipelineOp> ops = pipeline_ops(schedule_, where, micro_batches, overlap_, matching_);
  reserve(micro_batches);  // allocates only if reserve() was not called first
  const auto chunks = static_cast<std::size_t>(where.chunks);
  slot_of_.assign(chunks, std::vector<int>(static_cast<std::size_t>(micro_batches), -1));
  received_of_ = slot_of_;
  free_.assign(chunks, {});
  for (std::size_t c = 0; c < chunks; ++c)  // every slot is free at the start of a step (lowest first)
    for (int k = model_.activation_slots(static_cast<int>(c)); k-- > 0;) free_[c].push_back(k);
  free_received_.clear();
  for (int j = model_.received_gradients(); j-- > 0;) free_received_.push_back(j);
  const bool interleaved = where.chunks > 1;
  std::map<int, std::vector<parallel::Request>> in_flight;  // posted groups not yet waited for
  Kokkos::deep_copy(exec, loss_total_, 0.0);
  for (const PipelineOp& op : ops) {
    const int c = op.chunk, m = op.micro_batch;
    const bool uses_tokens = model_.chunk_has_embedding(c) || model_.chunk_has_head(c);
    if (op.kind == PipelineOp::forward) {
      model_.bind_slot(acquire_slot(c, m), c);
      if (uses_tokens) {
        const DeviceBatch& b = batch(m);
        model_.forward(exec, b.inputs, b.targets, loss_total_);
      } else {
        model_.forward_logits(exec, no_tokens_);
      }
      sleep_for_layers(exec, model_.chunk_layers(), 1.0);
    } else if (op.kind == PipelineOp::backward) {
      int& slot = slot_of_[static_cast<std::size_t>(c)][static_cast<std::size_t>(m)];
      model_.bind_slot(slot, c);
      if (interleaved && !model_.chunk_has_head(c)) {
        int& j = received_of_[static_cast<std::size_t>(c)][static_cast<std::size_t>(m)];
        Kokkos::deep_copy(exec, model_.output_grad(), model_.received_gradient(j));
        free_received_.push_back(j);
        j = -1;
      }
      const std::function<void(std::size_t)> done = [&](std::size_t b) {
        if (bucket_done) bucket_done(m, b);
      };
      if (uses_tokens) {
        const DeviceBatch& b = batch(m);
        model_.backward(exec, &b.segments, b.targets, scale, done);
      } else {
        model_.backward(exec, nullptr, no_tokens_, scale, done);
      }
      sleep_for_layers(exec, model_.chunk_layers(), 2.0);
      free_[static_cast<std::size_t>(c)].push_back(slot);
      slot = -1;
    } else if (op.kind == PipelineOp::post) {
      util::PhaseScope phase(util::Phase::pipeline_wait);
      const auto t0 = std::chrono::steady_clock::now();
      // One group per op: on NCCL the sends and receives of the op progress together on the PP
      // communication stream, and only the kernels queued after its wait wait for them.
      std::vector<parallel::Request>& r = in_flight[op.group];
      pp_.group_start(exec);
      for (const PipelineTransfer& t : op.transfers) {
        const int peer = (where.rank + t.peer + where.ranks) % where.ranks;
        const int tag = transfer_tag(where, t);
        // Sends read the chunk's stage output of the micro-batch's slot or the model's input
        // gradient; receives write a slot's stage input or a received-gradient buffer (v > 1) or
        // the model's output gradient (v = 1).
        kernels::Matrix<T> buffer;
        if (t.send && t.direction == 0)
          buffer = model_.chunk_output(t.chunk, slot_of_[static_cast<std::size_t>(t.chunk)][static_cast<std::size_t>(t.micro_batch)]);
        else if (t.send)
          buffer = model_.input_grad();
        else if (t.direction == 0)
          buffer = model_.chunk_input(t.chunk, acquire_slot(t.chunk, t.micro_batch));
        else
          buffer = interleaved ? model_.received_gradient(acquire_received(t.chunk, t.micro_batch)) : model_.output_grad();
        r.push_back(t.send ? parallel::isend(pp_, exec, buffer, peer, tag) : parallel::irecv(pp_, exec, buffer, peer, tag));
      }
      r.push_back(pp_.group_end());
      stats_.p2p_wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } else {
      util::PhaseScope phase(util::Phase::pipeline_wait);
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<parallel::Request>& r = in_flight.at(op.group);
      parallel::wait_all_on(r.data(), r.size(), exec);
      in_flight.erase(op.group);
      stats_.p2p_wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  }
  double loss_sum = 0.0;  // the one copy of the loss to the host in a step
  exec.fence();
  Kokkos::deep_copy(loss_sum, loss_total_);
  return loss_sum;
}

template class PipelineRunner<float>;
template class PipelineRunner<kx::bf16>;
template class PipelineRunner<kx::fp16>;

}  // namespace tptrain::train
