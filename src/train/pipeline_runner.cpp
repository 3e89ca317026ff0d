#include "src/train/pipeline_runner.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <tuple>
#include <string>
#include <thread>
#include <stdexcept>

#include "base/test_hooks.hpp"
#include "src/parallel/collectives.hpp"
#include "src/schedule/schedule_memory.hpp"
#include "src/schedule/transport.hpp"
#include "src/util/host_waits.hpp"
#include "src/util/phases.hpp"

namespace tptrain::train {

using schedule::pipeline_lane;
using schedule::pipeline_lanes;
using schedule::ScheduleMemory;

namespace {
// The test hook layer_seconds = t (> 0, base/test_hooks.hpp): every forward of a chunk also
// sleeps t per block, every backward 2t per block, so that measured step times show the
// schedule's bubble above the noise of a shared machine (docs/planning.md, "The bubble, measured").
void sleep_for_layers(const kx::ExecSpace& exec, int layers, double factor) {
  const double t = test_hooks().layer_seconds;
  if (t <= 0) return;
  exec.fence();  // the compute first, then the hook's time: as if the layers took that long
  std::this_thread::sleep_for(std::chrono::duration<double>(t * layers * factor));
}
}  // namespace

namespace {
// How the PP backend matches transfers. MPI keeps a request per transfer, matched by tag. A
// backend with a communication stream (NCCL) runs its groups in order on it; with a lane per
// flow (Communicator::open_lanes, collective: every rank of the group gets here) the flows do
// not wait for each other. A communicator made with parallel.nccl_pipeline_lanes = false opens
// none and keeps the one in-order queue (a fallback, e.g. for a system where concurrent NCCL
// communicators misbehave; src/parallel/communicator.hpp, CommunicatorOptions).
Matching matching_of(parallel::Communicator& pp) {
  if (pp.communication_stream() == nullptr) return Matching::by_tag;
  const int lanes = pipeline_lanes(pp.size());
  return lanes > 0 && pp.open_lanes(lanes) == lanes ? Matching::per_flow : Matching::stream_order;
}
}  // namespace

// The queue's documents: the rank's chunks of each sequence (context parallelism); the learned
// position gradient of positions other than the rows' places needs the tokens grouped by position
// where the embedding is.
template <class T>
Documents queue_documents(const model::GptModel<T>& model, Documents d) {
  d.seq_length = model.shape().seq_length;
  d.context = model.context_chunks();
  d.group_positions = d.positions() && model.chunk_has_embedding(0) && model.embedding_adds_positions();
  return d;
}

template <class T>
PipelineRunner<T>::PipelineRunner(model::GptModel<T>& model, parallel::Communicator& pp, Schedule schedule,
                                  bool overlap, const Documents& documents)
    : model_(model),
      pp_(pp),
      schedule_(schedule),
      overlap_(overlap),
      matching_(matching_of(pp)),
      documents_(queue_documents(model, documents).any()),
      batches_(model.tokens(), model.chunk_groups_tokens(0) || model.chunk_groups_tokens(model.chunks() - 1),
               queue_documents(model, documents)) {
  if (pp.size() != model.stage().size || pp.rank() != model.stage().rank)
    throw std::logic_error("tptrain: PipelineRunner: the model is not the stage of this rank in the PP group");
  if (matching_ == Matching::per_flow) connect_lanes();
}

// One element over every flow this rank's schedule uses, waited for on the host: NCCL connects
// a pair of ranks at its first transfer, which may allocate and synchronise the device; done
// here, it cannot meet a receive posted early and waiting on another lane (NCCL, "Using
// multiple NCCL communicators concurrently"). Every flow has one send and one receive, each on
// a lane of its own: they complete whatever the order.
template <class T>
void PipelineRunner<T>::connect_lanes() {
  const PipelinePlace where = place();
  std::set<std::tuple<int, bool, int>> flows;  // peer offset, send, direction
  for (const PipelineOp& op : pipeline_ops(schedule_, where, where.ranks))
    for (const PipelineTransfer& t : op.transfers) flows.insert({t.peer, t.send, t.direction});
  const kx::ExecSpace exec;
  const Kokkos::View<T*, kx::MemSpace> probe("pipeline.lane_probe", flows.size() + 1);
  std::vector<parallel::Request> requests;
  std::size_t received = 0;
  for (const auto& [offset, send, direction] : flows) {
    const int peer = (where.rank + offset + where.ranks) % where.ranks;
    const int lane = pipeline_lane(send ? where.rank : peer, where.ranks, direction);
    const auto one = [&](std::size_t i) { return Kokkos::subview(probe, std::make_pair(i, i + 1)); };
    requests.push_back(send ? parallel::isend(pp_, exec, one(0), peer, 0, lane)
                            : parallel::irecv(pp_, exec, one(++received), peer, 0, lane));
  }
  parallel::wait_all(requests.data(), requests.size());
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
  // The token chunks' micro-batches in flight (at most their slots), and one more: the next
  // micro-batch is sampled and uploaded during the current forward.
  int in_flight = 0;
  for (int c = 0; c < model_.chunks(); ++c)
    if (uses_tokens(c))
      in_flight = std::max(in_flight, memory.slots[static_cast<std::size_t>(c)]);
  if (in_flight > 0) batches_.reserve(in_flight + 1);
}

template <class T>
bool PipelineRunner<T>::uses_tokens(int chunk) const {
  return documents_ || model_.chunk_has_embedding(chunk) || model_.chunk_has_head(chunk);
}

// Micro-batch b's documents for chunk c's next forward or backward.
template <class T>
void PipelineRunner<T>::bind_documents(int chunk, const TrainingBatch& b) {
  if (!documents_) return;
  const bool grouped = b.position_segments.capacity() > 0 && model_.chunk_has_embedding(chunk);
  model_.bind_documents(b.doc_start, b.positions, grouped ? &b.position_segments : nullptr);
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
                              const MicroBatchQueue::Sample& sample,
                              const std::function<void(int, std::size_t)>& bucket_done,
                              const std::function<void(int, std::size_t)>& bucket_begin) {
  const PipelinePlace where = place();
  // bench --phases fences the whole device at every phase boundary, which on NCCL waits for
  // every transfer posted so far: a receive posted early would then be waited for before the
  // compute its own data needs (schedule::simulate finds the deadlock; Megatron's places finish).
  // While the phases are timed the receives keep those places, still on their lanes.
  const Matching placement =
      matching_ == Matching::per_flow && util::PhaseClock::instance().timing() ? Matching::stream_order : matching_;
  const std::vector<PipelineOp> ops = pipeline_ops(schedule_, where, micro_batches, overlap_, placement);
  reserve(micro_batches);  // allocates only if reserve() was not called first
  const auto chunks = static_cast<std::size_t>(where.chunks);
  slot_of_.assign(chunks, std::vector<int>(static_cast<std::size_t>(micro_batches), -1));
  received_of_ = slot_of_;
  free_.assign(chunks, {});
  for (std::size_t c = 0; c < chunks; ++c)  // every slot is free at the start of a step (lowest first)
    for (int k = model_.activation_slots(static_cast<int>(c)); k-- > 0;) free_[c].push_back(k);
  free_received_.clear();
  for (int j = model_.received_gradients(); j-- > 0;) free_received_.push_back(j);
  batches_.begin_step(sample, micro_batches);
  const bool interleaved = where.chunks > 1;
  std::map<int, std::vector<parallel::Request>> in_flight;  // posted groups not yet waited for
  Kokkos::deep_copy(exec, loss_total_, 0.0);
  for (const PipelineOp& op : ops) {
    const int c = op.chunk, m = op.micro_batch;
    const bool tokens = uses_tokens(c);
    if (op.kind == PipelineOp::forward) {
      const util::StepOpScope traced(util::StepOp::forward, m, c);  // bench --trace's label
      model_.bind_slot(acquire_slot(c, m), c);
      if (tokens) {
        const TrainingBatch& b = batches_.get(exec, m);
        bind_documents(c, b);
        model_.forward(exec, b.inputs, b.targets, loss_total_);
        // A token chunk forwards its micro-batches in order: the next one's sampling (host) runs
        // while this forward's kernels do, its upload is queued behind them.
        batches_.prefetch(exec, m + 1);
      } else {
        model_.forward_logits(exec, no_tokens_);
      }
      sleep_for_layers(exec, model_.chunk_layers(), 1.0);
    } else if (op.kind == PipelineOp::backward) {
      const util::StepOpScope traced(util::StepOp::backward, m, c);
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
      const std::function<void(std::size_t)> begin = [&](std::size_t b) {
        if (bucket_begin) bucket_begin(m, b);
      };
      if (tokens) {
        const TrainingBatch& b = batches_.get(exec, m);  // kept since its forward: not sampled again
        bind_documents(c, b);
        model_.backward(exec, model_.chunk_groups_tokens(c) ? &b.segments : nullptr, b.targets, scale, done, begin);
        batches_.release(m);
      } else {
        model_.backward(exec, nullptr, no_tokens_, scale, done, begin);
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
      // Per flow (NCCL lanes): each transfer on its flow's lane, not grouped (a group would join
      // the lanes' streams).
      const bool lanes = matching_ == Matching::per_flow;
      if (!lanes) pp_.group_start(exec);
      for (const PipelineTransfer& t : op.transfers) {
        const int peer = (where.rank + t.peer + where.ranks) % where.ranks;
        const int tag = transfer_tag(where, t);
        const int lane = lanes ? pipeline_lane(t.send ? where.rank : peer, where.ranks, t.direction) : -1;
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
        r.push_back(t.send ? parallel::isend(pp_, exec, buffer, peer, tag, lane)
                           : parallel::irecv(pp_, exec, buffer, peer, tag, lane));
      }
      if (!lanes) r.push_back(pp_.group_end());
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
  // The one copy of the loss to the host in a step: a wait for exec alone (a deep_copy into a
  // plain double would fence the whole device, the data-parallel reductions still running behind
  // the backward included).
  double loss_sum = 0.0;
  util::note_host_wait(util::HostWait::loss_to_host);
  Kokkos::deep_copy(exec, Kokkos::View<double, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(&loss_sum),
                    loss_total_);
  exec.fence();
  return loss_sum;
}

template class PipelineRunner<float>;
template class PipelineRunner<kx::bf16>;
template class PipelineRunner<kx::fp16>;

}  // namespace tptrain::train
