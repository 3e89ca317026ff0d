#include "src/train/pipeline_schedule.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>

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

}  // namespace tptrain::train
