#include "src/train/pipeline_schedule.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>

#include "src/util/memory_category.hpp"
#include "src/util/phases.hpp"

namespace tptrain::train {

const char* schedule_name(Schedule s) {
  return s == Schedule::one_f_one_b ? "1F1B" : "all-forward-all-backward";
}

std::vector<PipelineOp> pipeline_ops(Schedule schedule, int stage, int stages, int micro_batches) {
  if (stages < 1 || stage < 0 || stage >= stages || micro_batches < 1)
    throw std::invalid_argument("tptrain: pipeline_ops: bad stage " + std::to_string(stage) + " of " +
                                std::to_string(stages) + " or micro-batch count " + std::to_string(micro_batches));
  const bool first = stage == 0, last = stage == stages - 1;
  std::vector<PipelineOp> ops;
  const auto compute = [&](PipelineOp::Kind kind, int m) {
    PipelineOp op;
    op.kind = kind;
    op.micro_batch = m;
    ops.push_back(op);
  };
  // Transfers with a stage that does not exist are dropped (and then an empty op).
  const auto comm = [&](int recv_forward, int send_forward, int recv_backward, int send_backward) {
    PipelineOp op;
    op.kind = PipelineOp::communicate;
    op.recv_forward = first ? -1 : recv_forward;
    op.send_backward = first ? -1 : send_backward;
    op.send_forward = last ? -1 : send_forward;
    op.recv_backward = last ? -1 : recv_backward;
    if (op.recv_forward >= 0 || op.send_forward >= 0 || op.recv_backward >= 0 || op.send_backward >= 0)
      ops.push_back(op);
  };
  const int M = micro_batches;
  if (schedule == Schedule::all_forward_all_backward) {
    for (int m = 0; m < M; ++m) {
      comm(m, -1, -1, -1);
      compute(PipelineOp::forward, m);
      comm(-1, m, -1, -1);
    }
    for (int m = 0; m < M; ++m) {
      comm(-1, -1, m, -1);
      compute(PipelineOp::backward, m);
      comm(-1, -1, -1, m);
    }
    return ops;
  }
  // 1F1B
  const int warmup = std::min(stages - stage - 1, M);
  const int steady = M - warmup;
  int f = 0, b = 0;
  for (int i = 0; i < warmup; ++i, ++f) {
    comm(f, -1, -1, -1);
    compute(PipelineOp::forward, f);
    comm(-1, f, -1, -1);
  }
  if (steady > 0) comm(f, -1, -1, -1);
  for (int i = 0; i < steady; ++i, ++b) {
    compute(PipelineOp::forward, f);
    comm(-1, f, b, -1);  // send_forward_recv_backward
    ++f;
    compute(PipelineOp::backward, b);
    if (i == steady - 1)
      comm(-1, -1, -1, b);  // send_backward
    else
      comm(f, -1, -1, b);  // send_backward_recv_forward
  }
  for (int i = 0; i < warmup; ++i, ++b) {
    comm(-1, -1, b, -1);
    compute(PipelineOp::backward, b);
    comm(-1, -1, -1, b);
  }
  return ops;
}

int peak_in_flight(const std::vector<PipelineOp>& ops) {
  int now = 0, peak = 0;
  for (const PipelineOp& op : ops) {
    if (op.kind == PipelineOp::forward) peak = std::max(peak, ++now);
    if (op.kind == PipelineOp::backward) --now;
  }
  return peak;
}

std::vector<PipelineTransfer> transfers_of(const PipelineOp& op) {
  // With the next stage: send, then receive; with the previous stage: receive, then send. The
  // two stages of a pair then post their halves in matching order, so that even a backend that
  // runs transfers one after the other (NCCL point-to-point on one stream) cannot deadlock.
  std::vector<PipelineTransfer> t;
  if (op.send_forward >= 0) t.push_back({+1, true, 0, op.send_forward});
  if (op.recv_backward >= 0) t.push_back({+1, false, 1, op.recv_backward});
  if (op.recv_forward >= 0) t.push_back({-1, false, 0, op.recv_forward});
  if (op.send_backward >= 0) t.push_back({-1, true, 1, op.send_backward});
  return t;
}

std::string simulate_pipeline(Schedule schedule, int stages, int micro_batches) {
  // Strict rendezvous: every transfer completes only when the peer has reached the matching
  // transfer, in the order of transfers_of (stricter than MPI's non-blocking semantics).
  struct Event {
    const PipelineOp* op;
    PipelineTransfer transfer;  // for communicate ops
  };
  std::vector<std::vector<PipelineOp>> ops;
  std::vector<std::vector<Event>> events(static_cast<std::size_t>(stages));
  for (int s = 0; s < stages; ++s) ops.push_back(pipeline_ops(schedule, s, stages, micro_batches));
  for (int s = 0; s < stages; ++s)
    for (const PipelineOp& op : ops[static_cast<std::size_t>(s)]) {
      if (op.kind != PipelineOp::communicate) {
        events[static_cast<std::size_t>(s)].push_back({&op, {}});
        continue;
      }
      for (const PipelineTransfer& t : transfers_of(op)) {
        if (s + t.peer < 0 || s + t.peer >= stages) return "stage " + std::to_string(s) + " talks to no stage";
        events[static_cast<std::size_t>(s)].push_back({&op, t});
      }
    }
  std::vector<std::size_t> pc(static_cast<std::size_t>(stages), 0);
  std::vector<std::set<int>> forwarded(static_cast<std::size_t>(stages)), backwarded(forwarded),
      have_input(forwarded), have_grad(forwarded);
  const auto at = [&](int s) -> const Event* {
    const auto su = static_cast<std::size_t>(s);
    return pc[su] < events[su].size() ? &events[su][pc[su]] : nullptr;
  };
  for (bool moved = true; moved;) {
    moved = false;
    for (int s = 0; s < stages; ++s) {
      const auto su = static_cast<std::size_t>(s);
      const Event* e = at(s);
      if (e == nullptr) continue;
      const std::string where = "stage " + std::to_string(s) + " event " + std::to_string(pc[su]) + ": ";
      const PipelineOp& op = *e->op;
      if (op.kind == PipelineOp::forward) {
        if (s > 0 && !have_input[su].count(op.micro_batch))
          return where + "forward of micro-batch " + std::to_string(op.micro_batch) + " without its input";
        if (!forwarded[su].insert(op.micro_batch).second) return where + "second forward";
      } else if (op.kind == PipelineOp::backward) {
        if (!forwarded[su].count(op.micro_batch)) return where + "backward before forward";
        if (s < stages - 1 && !have_grad[su].count(op.micro_batch))
          return where + "backward of micro-batch " + std::to_string(op.micro_batch) + " without its gradient";
        if (!backwarded[su].insert(op.micro_batch).second) return where + "second backward";
      } else {
        const PipelineTransfer& t = e->transfer;
        const Event* peer = at(s + t.peer);
        const bool matched = peer != nullptr && peer->op->kind == PipelineOp::communicate &&
                             peer->transfer.peer == -t.peer && peer->transfer.send != t.send &&
                             peer->transfer.direction == t.direction && peer->transfer.micro_batch == t.micro_batch;
        if (!matched) continue;  // waits for its peer
        const int m = t.micro_batch;
        const auto sender = static_cast<std::size_t>(t.send ? s : s + t.peer);
        const auto receiver = static_cast<std::size_t>(t.send ? s + t.peer : s);
        if (!(t.direction == 0 ? forwarded[sender].count(m) : backwarded[sender].count(m)))
          return where + "micro-batch " + std::to_string(m) + " sent before it is computed";
        (t.direction == 0 ? have_input : have_grad)[receiver].insert(m);
        ++pc[static_cast<std::size_t>(s + t.peer)];  // both sides complete the transfer
      }
      ++pc[su];
      moved = true;
    }
  }
  for (int s = 0; s < stages; ++s) {
    const auto su = static_cast<std::size_t>(s);
    if (pc[su] < events[su].size())
      return "deadlock: stage " + std::to_string(s) + " stuck at event " + std::to_string(pc[su]);
    if (static_cast<int>(forwarded[su].size()) != micro_batches ||
        static_cast<int>(backwarded[su].size()) != micro_batches)
      return "stage " + std::to_string(s) + " did not run every micro-batch";
  }
  return "";
}

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

template <class T>
GradientReducer<T>::GradientReducer(model::GptModel<T>& model, parallel::Communicator& dp)
    : model_(model), dp_(dp) {
  if (model.stage().size == 1 || model.word() == nullptr) return;
  const auto& buckets = model.buckets();
  for (std::size_t b = 0; b < buckets.size(); ++b)
    for (const model::Parameter<T>* p : buckets[b].params)
      if (p == model.word()) tied_bucket_ = b;
}

template <class T>
void GradientReducer<T>::launch(const kx::ExecSpace& exec, std::size_t bucket) {
  auto& buckets = model_.buckets();
  if (launched_.size() != buckets.size()) launched_.assign(buckets.size(), false);
  if (launched_[bucket]) return;
  launched_[bucket] = true;
  if (dp_.size() == 1) return;
  // A named Kokkos region marks the start for profilers (and for the test that the reduction
  // starts before the backward of the next bucket runs).
  const bool scatter = model_.optimizer_sharding().distributed() && bucket != tied_bucket_;
  Kokkos::Profiling::pushRegion(scatter ? reduce_scatter_region_name : launch_region_name);
  pending_.push_back(scatter ? parallel::ireduce_scatter_in_place(dp_, exec, buckets[bucket].flat, parallel::ReduceOp::sum)
                             : parallel::iall_reduce(dp_, exec, buckets[bucket].flat, parallel::ReduceOp::sum));
  Kokkos::Profiling::popRegion();
  pending_bucket_.push_back(bucket);
  ++stats_.messages;
  stats_.bytes += buckets[bucket].flat.span() * sizeof(kx::acc_t<T>);
  progress();
}


template <class T>
void GradientReducer<T>::progress() {
  if (!pending_.empty()) parallel::progress(dp_);
}

template <class T>
void GradientReducer<T>::finish(const kx::ExecSpace& exec) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  for (std::size_t b = 0; b < model_.buckets().size(); ++b) launch(exec, b);
  stats_.wait_by_bucket_s.resize(model_.buckets().size(), 0.0);
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    const auto t0 = clock::now();
    pending_[i].wait_on(exec);  // NCCL: the optimizer's kernels wait, not the host
    stats_.wait_by_bucket_s[pending_bucket_[i]] += std::chrono::duration<double>(clock::now() - t0).count();
  }
  stats_.wait_s += std::chrono::duration<double>(clock::now() - start).count();
  pending_.clear();
  pending_bucket_.clear();
  launched_.assign(model_.buckets().size(), false);
  ++stats_.steps;
}

template class PipelineRunner<float>;
template class PipelineRunner<kx::bf16>;
template class PipelineRunner<kx::fp16>;
template class GradientReducer<float>;
template class GradientReducer<kx::bf16>;
template class GradientReducer<kx::fp16>;

}  // namespace tptrain::train
