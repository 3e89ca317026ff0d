#include "src/train/pipeline_runner.hpp"

#include <chrono>
#include <stdexcept>

#include "src/parallel/collectives.hpp"
#include "src/util/phases.hpp"

namespace tptrain::train {

template <class T>
PipelineRunner<T>::PipelineRunner(model::GptModel<T>& model, parallel::Communicator& pp, Schedule schedule)
    : model_(model), pp_(pp), schedule_(schedule) {
  if (pp.size() != model.stage().size || pp.rank() != model.stage().rank)
    throw std::logic_error("tptrain: PipelineRunner: the model is not the stage of this rank in the PP group");
}

template <class T>
void PipelineRunner<T>::reserve(int micro_batches) {
  const int in_flight =
      peak_in_flight(pipeline_ops(schedule_, model_.stage().rank, model_.stage().size, micro_batches));
  model_.reserve_slots(in_flight);
}

// The slot of micro-batch m from its first use (receiving its input, or its forward on the first
// stage) to the end of its backward.
template <class T>
int PipelineRunner<T>::acquire_slot(int m) {
  int& slot = slot_of_[static_cast<std::size_t>(m)];
  if (slot >= 0) return slot;
  if (free_.empty())
    throw std::logic_error("tptrain: PipelineRunner: more micro-batches in flight than activation slots");
  slot = free_.back();
  free_.pop_back();
  return slot;
}

template <class T>
double PipelineRunner<T>::run(const kx::ExecSpace& exec, int micro_batches, float scale,
                           const std::function<const DeviceBatch&(int)>& batch,
                           const std::function<void(int, std::size_t)>& bucket_done) {
  const std::vector<PipelineOp> ops = pipeline_ops(schedule_, model_.stage().rank, model_.stage().size, micro_batches);
  model_.reserve_slots(peak_in_flight(ops));  // allocates only if reserve() was not called first
  slot_of_.assign(static_cast<std::size_t>(micro_batches), -1);
  free_.clear();  // every slot is free at the start of a step (lowest first)
  for (int k = model_.activation_slots(); k-- > 0;) free_.push_back(k);
  const int prev = pp_.rank() - 1, next = pp_.rank() + 1;
  const auto tag = [](int m, int direction) { return 2 * m + direction; };
  const bool uses_tokens = model_.is_first_stage() || model_.is_last_stage();
  Kokkos::deep_copy(exec, loss_total_, 0.0);
  for (const PipelineOp& op : ops) {
    if (op.kind == PipelineOp::forward) {
      const int m = op.micro_batch;
      model_.bind_slot(acquire_slot(m));
      if (uses_tokens) {
        const DeviceBatch& b = batch(m);
        model_.forward(exec, b.inputs, b.targets, loss_total_);
      } else {
        model_.forward_logits(exec, no_tokens_);
      }
    } else if (op.kind == PipelineOp::backward) {
      const int m = op.micro_batch;
      model_.bind_slot(slot_of_[static_cast<std::size_t>(m)]);
      const std::function<void(std::size_t)> done = [&](std::size_t b) {
        if (bucket_done) bucket_done(m, b);
      };
      if (uses_tokens) {
        const DeviceBatch& b = batch(m);
        model_.backward(exec, &b.segments, b.targets, scale, done);
      } else {
        model_.backward(exec, nullptr, no_tokens_, scale, done);
      }
      free_.push_back(slot_of_[static_cast<std::size_t>(m)]);
      slot_of_[static_cast<std::size_t>(m)] = -1;
    } else {
      util::PhaseScope phase(util::Phase::pipeline_wait);
      const auto t0 = std::chrono::steady_clock::now();
      // One group per op: on NCCL the sends and receives of the op progress together on the PP
      // communication stream, and only the kernels queued after the op wait for them (the next
      // forward reads the received input and overwrites the sent output).
      std::vector<parallel::Request> r;
      pp_.group_start(exec);
      for (const PipelineTransfer& t : transfers_of(op)) {
        const int peer = t.peer > 0 ? next : prev;
        const int tg = tag(t.micro_batch, t.direction);
        const int slot = t.direction == 0 ? acquire_slot(t.micro_batch) : -1;
        if (t.send)
          r.push_back(parallel::isend(pp_, exec, t.direction == 0 ? model_.stage_output(slot) : model_.input_grad(),
                                      peer, tg));
        else
          r.push_back(parallel::irecv(pp_, exec, t.direction == 0 ? model_.stage_input(slot) : model_.output_grad(),
                                      peer, tg));
      }
      r.push_back(pp_.group_end());
      parallel::wait_all_on(r.data(), r.size(), exec);
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
