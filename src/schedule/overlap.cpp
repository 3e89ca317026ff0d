#include "src/schedule/overlap.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "src/schedule/schedule_memory.hpp"

namespace tptrain::schedule {

namespace {

bool receives(const PipelineOp& post, int direction, int chunk, int m) {
  for (const PipelineTransfer& t : post.transfers)
    if (!t.send && t.direction == direction && t.chunk == chunk && t.micro_batch == m) return true;
  return false;
}
bool sends(const PipelineOp& post, int direction, int chunk, int m) {
  for (const PipelineTransfer& t : post.transfers)
    if (t.send && t.direction == direction && (chunk < 0 || (t.chunk == chunk && t.micro_batch == m))) return true;
  return false;
}

}  // namespace

// Moves each wait to just before the first op that needs the group complete: the compute that
// reads what it received; the next backward when it sends an input gradient (the backward
// overwrites that buffer); the backward of a micro-batch whose stage output it sends (its slot
// is reused after that backward); a later post that receives into a buffer it sends from
// (v = 1: the gradient it sends and the next gradient received are the model's one gradient
// buffer). Posts keep their places and their order: the groups run in the same order.
std::vector<PipelineOp> overlapped(const std::vector<PipelineOp>& in, int chunks) {
  std::vector<PipelineOp> base;  // without waits
  for (const PipelineOp& op : in)
    if (op.kind != PipelineOp::wait) base.push_back(op);
  const auto needs = [&](const PipelineOp& post, const PipelineOp& op) {
    if (op.kind == PipelineOp::forward) return receives(post, 0, op.chunk, op.micro_batch);
    if (op.kind == PipelineOp::backward)
      return receives(post, 1, op.chunk, op.micro_batch) || sends(post, 1, -1, -1) ||
             sends(post, 0, op.chunk, op.micro_batch);
    if (op.kind == PipelineOp::post && chunks == 1) {
      for (const PipelineTransfer& t : op.transfers)
        if (!t.send && t.direction == 1 && sends(post, 1, -1, -1)) return true;
    }
    return false;
  };
  std::vector<PipelineOp> out;
  std::vector<const PipelineOp*> pending;
  const auto wait_for = [&](const PipelineOp* post) {
    PipelineOp w;
    w.kind = PipelineOp::wait;
    w.group = post->group;
    out.push_back(w);
  };
  for (const PipelineOp& op : base) {
    for (auto it = pending.begin(); it != pending.end();) {
      if (needs(**it, op)) {
        wait_for(*it);
        it = pending.erase(it);
      } else {
        ++it;
      }
    }
    out.push_back(op);
    if (op.kind == PipelineOp::post) pending.push_back(&op);
  }
  for (const PipelineOp* post : pending) wait_for(post);
  return out;
}

// Moves each receive one compute earlier where the backend matches transfers by tag (MPI): the
// receive of what the op after compute X needs, posted after X, is posted as its own group just
// before X, so that it runs during X. Only where that costs no memory and no wait: the
// micro-batches holding an activation slot (or a received-gradient buffer) of a chunk while X
// runs stay within the schedule's peak (schedule_memory is the same); with v = 1 a gradient goes
// into the model's one gradient buffer, which backwards use and gradient sends read, so it moves
// only before a forward with no gradient send posted since the last backward (in the warm-up,
// and throughout on the first stage, which sends none).
// Under NCCL's in-order groups the same move deadlocks (a rank's early receive would hold back
// the send its peer needs to produce it), so stream-ordered backends keep Megatron's places.
std::vector<PipelineOp> early_receives(const std::vector<PipelineOp>& in, int chunks) {
  std::vector<PipelineOp> base;  // without waits
  for (const PipelineOp& op : in)
    if (op.kind != PipelineOp::wait) base.push_back(op);
  std::vector<int> peak_slots;
  for (int c = 0; c < chunks; ++c) peak_slots.push_back(peak_in_flight(base, c));
  const int peak_received = peak_received_gradients(base);
  // What is held just before each op (the same bookkeeping as peak_in_flight and
  // peak_received_gradients).
  std::vector<std::vector<int>> slots_before(base.size());
  std::vector<int> received_before(base.size());
  std::vector<bool> gradient_sent_before(base.size());  // since the last backward
  {
    std::vector<std::set<int>> held(static_cast<std::size_t>(chunks));
    std::set<std::pair<int, int>> waiting;
    bool gradient_sent = false;
    for (std::size_t i = 0; i < base.size(); ++i) {
      const PipelineOp& op = base[i];
      for (const std::set<int>& h : held) slots_before[i].push_back(static_cast<int>(h.size()));
      received_before[i] = static_cast<int>(waiting.size());
      gradient_sent_before[i] = gradient_sent;
      if (op.kind == PipelineOp::post) {
        for (const PipelineTransfer& t : op.transfers) {
          if (!t.send && t.direction == 0) held[static_cast<std::size_t>(t.chunk)].insert(t.micro_batch);
          if (!t.send && t.direction == 1) waiting.insert({t.chunk, t.micro_batch});
          if (t.send && t.direction == 1) gradient_sent = true;
        }
      } else if (op.kind == PipelineOp::forward) {
        held[static_cast<std::size_t>(op.chunk)].insert(op.micro_batch);
      } else if (op.kind == PipelineOp::backward) {
        held[static_cast<std::size_t>(op.chunk)].erase(op.micro_batch);
        waiting.erase({op.chunk, op.micro_batch});
        gradient_sent = false;
      }
    }
  }
  std::vector<PipelineOp> out;
  for (std::size_t i = 0; i < base.size(); ++i) {
    const PipelineOp& x = base[i];
    if (x.kind == PipelineOp::post) {
      if (!x.transfers.empty()) out.push_back(x);
      continue;
    }
    // X is a compute; the posts up to the next compute hold the receives that may move.
    PipelineOp early;
    early.kind = PipelineOp::post;
    std::vector<int> slots = slots_before[i];
    int received = received_before[i];
    for (std::size_t j = i + 1; j < base.size() && base[j].kind == PipelineOp::post; ++j) {
      std::vector<PipelineTransfer> stay;
      for (const PipelineTransfer& t : base[j].transfers) {
        bool move = false;
        if (!t.send && t.direction == 0) {
          move = slots[static_cast<std::size_t>(t.chunk)] + 1 <= peak_slots[static_cast<std::size_t>(t.chunk)];
          if (move) ++slots[static_cast<std::size_t>(t.chunk)];
        } else if (!t.send && chunks > 1) {
          move = received + 1 <= peak_received;
          if (move) ++received;
        } else if (!t.send) {
          move = x.kind == PipelineOp::forward && !gradient_sent_before[i];
        }
        (move ? early.transfers : stay).push_back(t);
      }
      base[j].transfers = stay;
    }
    if (!early.transfers.empty()) out.push_back(early);
    out.push_back(x);
  }
  // Groups numbered in posting order, each waited for right after its post, as Builder makes
  // them (overlapped() then defers the waits).
  int group = 0;
  std::vector<PipelineOp> with_waits;
  for (PipelineOp& op : out) {
    if (op.kind == PipelineOp::post) op.group = group++;
    with_waits.push_back(op);
    if (op.kind != PipelineOp::post) continue;
    PipelineOp wait;
    wait.kind = PipelineOp::wait;
    wait.group = op.group;
    with_waits.push_back(wait);
  }
  return with_waits;
}

}  // namespace tptrain::schedule
