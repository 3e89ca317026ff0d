#include "src/schedule/pipeline_schedule.hpp"

#include <algorithm>
#include <stdexcept>

#include "base/layout_rules.hpp"
#include "src/schedule/overlap.hpp"

namespace tptrain::schedule {

const char* schedule_name(Schedule s) {
  return s == Schedule::one_f_one_b ? "1F1B" : "all-forward-all-backward";
}

std::string schedule_problem(Schedule schedule, int ranks, int micro_batches, int chunks) {
  if (ranks < 1 || micro_batches < 1 || chunks < 1)
    return "pipeline " + std::to_string(ranks) + ", " + std::to_string(micro_batches) + " micro-batches and " +
           std::to_string(chunks) + " virtual stages: each must be at least 1";
  if (chunks == 1) return "";
  // The interleaving rule as the deck and the planner state it (the layers are the model's).
  for (const rules::Problem& p : rules::interleave_problems(0, ranks, chunks, micro_batches)) return p.text();
  if (schedule != Schedule::one_f_one_b)
    return std::string("the ") + schedule_name(schedule) + " schedule has no interleaved form (parallel.virtual_stages = 1)";
  return "";
}

namespace {

// The schedule with each group's wait right after its post.
class Builder {
 public:
  explicit Builder(const PipelinePlace& place) : place_(place) {}

  void compute(PipelineOp::Kind kind, int chunk, int m) {
    PipelineOp op;
    op.kind = kind;
    op.chunk = chunk;
    op.micro_batch = m;
    ops_.push_back(op);
  }
  // Posts the transfers that exist (with a virtual stage on the other side).
  void group(std::vector<PipelineTransfer> transfers) {
    std::vector<PipelineTransfer> real;
    for (const PipelineTransfer& t : transfers)
      if (t.micro_batch >= 0) real.push_back(t);
    if (real.empty()) return;
    std::stable_sort(real.begin(), real.end(), [](const PipelineTransfer& a, const PipelineTransfer& b) {
      return order(a) < order(b);
    });
    PipelineOp post;
    post.kind = PipelineOp::post;
    post.transfers = real;
    post.group = groups_;
    ops_.push_back(post);
    PipelineOp wait;
    wait.kind = PipelineOp::wait;
    wait.group = groups_++;
    ops_.push_back(wait);
  }
  PipelineTransfer recv_forward(int chunk, int m) const {
    return place_.first_virtual(chunk) ? PipelineTransfer{} : PipelineTransfer{-1, false, 0, m, chunk};
  }
  PipelineTransfer send_forward(int chunk, int m) const {
    return place_.last_virtual(chunk) ? PipelineTransfer{} : PipelineTransfer{+1, true, 0, m, chunk};
  }
  PipelineTransfer recv_backward(int chunk, int m) const {
    return place_.last_virtual(chunk) ? PipelineTransfer{} : PipelineTransfer{+1, false, 1, m, chunk};
  }
  PipelineTransfer send_backward(int chunk, int m) const {
    return place_.first_virtual(chunk) ? PipelineTransfer{} : PipelineTransfer{-1, true, 1, m, chunk};
  }
  std::vector<PipelineOp>& ops() { return ops_; }

 private:
  // Activations before gradients: with p = 2 both neighbours are one rank, and NCCL pairs a
  // rank's sends to a peer with the peer's receives from it by their order alone.
  static int order(const PipelineTransfer& t) { return 2 * t.direction + (t.peer > 0 ? 0 : 1); }
  PipelinePlace place_;
  std::vector<PipelineOp> ops_;
  int groups_ = 0;
};

void one_f_one_b(Builder& b, int stage, int stages, int M) {
  const int warmup = std::min(stages - stage - 1, M);
  const int steady = M - warmup;
  int f = 0, k = 0;
  for (int i = 0; i < warmup; ++i, ++f) {
    b.group({b.recv_forward(0, f)});
    b.compute(PipelineOp::forward, 0, f);
    b.group({b.send_forward(0, f)});
  }
  if (steady > 0) b.group({b.recv_forward(0, f)});
  for (int i = 0; i < steady; ++i, ++k) {
    b.compute(PipelineOp::forward, 0, f);
    b.group({b.send_forward(0, f), b.recv_backward(0, k)});  // send_forward_recv_backward
    ++f;
    b.compute(PipelineOp::backward, 0, k);
    if (i == steady - 1)
      b.group({b.send_backward(0, k)});
    else
      b.group({b.send_backward(0, k), b.recv_forward(0, f)});  // send_backward_recv_forward
  }
  for (int i = 0; i < warmup; ++i, ++k) {
    b.group({b.recv_backward(0, k)});
    b.compute(PipelineOp::backward, 0, k);
    b.group({b.send_backward(0, k)});
  }
}

void all_forward_all_backward(Builder& b, int M) {
  for (int m = 0; m < M; ++m) {
    b.group({b.recv_forward(0, m)});
    b.compute(PipelineOp::forward, 0, m);
    b.group({b.send_forward(0, m)});
  }
  for (int m = 0; m < M; ++m) {
    b.group({b.recv_backward(0, m)});
    b.compute(PipelineOp::backward, 0, m);
    b.group({b.send_backward(0, m)});
  }
}

// Megatron's forward_backward_pipelining_with_interleaving (without its overlap_p2p_comm): the
// k-th forward of the rank is chunk (k mod p·v)/p, micro-batch (k / p·v)·p + k mod p; the k-th
// backward the same from the last chunk down.
void interleaved(Builder& b, const PipelinePlace& place, int M) {
  const int p = place.ranks, v = place.chunks, total = M * v;
  const auto chunk_of = [&](int k, bool forward) {
    const int c = (k % (p * v)) / p;
    return forward ? c : v - 1 - c;
  };
  const auto micro_batch_of = [&](int k) { return (k / (p * v)) * p + k % p; };
  const auto recv_f = [&](int k) {
    return k < total ? b.recv_forward(chunk_of(k, true), micro_batch_of(k)) : PipelineTransfer{};
  };
  const auto recv_b = [&](int k) {
    return k < total ? b.recv_backward(chunk_of(k, false), micro_batch_of(k)) : PipelineTransfer{};
  };
  const int warmup = M == p ? total : std::min((p - place.rank - 1) * 2 + (v - 1) * p, total);
  b.group({recv_f(0)});
  for (int k = 0; k < warmup; ++k) {
    const int c = chunk_of(k, true), m = micro_batch_of(k);
    b.compute(PipelineOp::forward, c, m);
    b.group({b.send_forward(c, m), recv_f(k + 1), k == warmup - 1 ? recv_b(0) : PipelineTransfer{}});
  }
  for (int kb = 0; kb < total - warmup; ++kb) {
    const int kf = kb + warmup;
    const int cf = chunk_of(kf, true), mf = micro_batch_of(kf);
    const int cb = chunk_of(kb, false), mb = micro_batch_of(kb);
    b.compute(PipelineOp::forward, cf, mf);
    b.compute(PipelineOp::backward, cb, mb);
    // send_forward_backward_recv_forward_backward
    b.group({b.send_forward(cf, mf), b.send_backward(cb, mb), recv_f(kf + 1), recv_b(kb + 1)});
  }
  for (int kb = total - warmup; kb < total; ++kb) {
    const int c = chunk_of(kb, false), m = micro_batch_of(kb);
    b.compute(PipelineOp::backward, c, m);
    b.group({b.send_backward(c, m), recv_b(kb + 1)});
  }
}

}  // namespace

std::vector<PipelineOp> pipeline_ops(Schedule schedule, const PipelinePlace& place, int micro_batches, bool overlap,
                                     Matching matching) {
  if (place.ranks < 1 || place.rank < 0 || place.rank >= place.ranks || place.chunks < 1 || micro_batches < 1)
    throw std::invalid_argument("tptrain: pipeline_ops: bad stage " + std::to_string(place.rank) + " of " +
                                std::to_string(place.ranks) + ", " + std::to_string(place.chunks) +
                                " chunks or micro-batch count " + std::to_string(micro_batches));
  if (const std::string why = schedule_problem(schedule, place.ranks, micro_batches, place.chunks); !why.empty())
    throw std::invalid_argument("tptrain: " + why);
  Builder b(place);
  if (place.chunks > 1)
    interleaved(b, place, micro_batches);
  else if (schedule == Schedule::one_f_one_b)
    one_f_one_b(b, place.rank, place.ranks, micro_batches);
  else
    all_forward_all_backward(b, micro_batches);
  if (!overlap) return b.ops();
  return overlapped(matching != Matching::stream_order ? early_receives(b.ops(), place.chunks) : b.ops(), place.chunks);
}

std::vector<PipelineOp> pipeline_ops(Schedule schedule, int stage, int stages, int micro_batches) {
  return pipeline_ops(schedule, PipelinePlace{stage, stages, 1}, micro_batches);
}

}  // namespace tptrain::schedule
