#include "src/train/pipeline_schedule.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>

namespace tptrain::train {

const char* schedule_name(Schedule s) {
  return s == Schedule::one_f_one_b ? "1F1B" : "all-forward-all-backward";
}

const char* matching_name(Matching m) {
  switch (m) {
    case Matching::stream_order: return "in order (NCCL)";
    case Matching::by_tag: return "by tag (MPI)";
    case Matching::per_flow: return "per flow (NCCL lanes)";
  }
  return "?";
}

namespace {
int lane_colours(int ranks) { return ranks % 2 == 1 ? 3 : 2; }
}  // namespace

int pipeline_lane(int sender, int ranks, int direction) {
  // A ring of even length takes 2 colours alternately; an odd one needs a third for its last
  // rank, whose neighbours (ranks - 2 and 0) both have colour 0.
  const int colour = ranks % 2 == 1 && sender == ranks - 1 ? 2 : sender % 2;
  return direction * lane_colours(ranks) + colour;
}

int pipeline_lanes(int ranks) { return ranks > 1 ? 2 * lane_colours(ranks) : 0; }

int peer_chunk(const PipelinePlace& place, const PipelineTransfer& t) {
  // Over the wrap from the last rank to rank 0 the chunk changes: activations go from chunk c of
  // rank p − 1 to chunk c + 1 of rank 0, gradients back.
  if (t.peer > 0 && place.rank == place.ranks - 1) return t.chunk + 1;
  if (t.peer < 0 && place.rank == 0) return t.chunk - 1;
  return t.chunk;
}

int transfer_tag(const PipelinePlace& place, const PipelineTransfer& t) {
  const int receiver_chunk = t.send ? peer_chunk(place, t) : t.chunk;
  return 2 * (t.micro_batch * place.chunks + receiver_chunk) + t.direction;
}

std::string schedule_problem(Schedule schedule, int ranks, int micro_batches, int chunks) {
  if (ranks < 1 || micro_batches < 1 || chunks < 1)
    return "pipeline " + std::to_string(ranks) + ", " + std::to_string(micro_batches) + " micro-batches and " +
           std::to_string(chunks) + " virtual stages: each must be at least 1";
  if (chunks == 1) return "";
  if (ranks == 1)
    return "parallel.virtual_stages = " + std::to_string(chunks) +
           " needs parallel.pipeline > 1 (model chunks interleave over the pipeline's ranks)";
  if (schedule != Schedule::one_f_one_b)
    return std::string("the ") + schedule_name(schedule) + " schedule has no interleaved form (parallel.virtual_stages = 1)";
  if (micro_batches % ranks != 0)
    return std::to_string(micro_batches) + " micro-batches per step (training.global_batch / (training.micro_batch * "
           "parallel.data)) is not a multiple of parallel.pipeline = " + std::to_string(ranks) +
           ", which the interleaved schedule (parallel.virtual_stages = " + std::to_string(chunks) + ") needs";
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

int peak_in_flight(const std::vector<PipelineOp>& ops, int chunk) {
  // A micro-batch holds its slot from its input's receive (or its forward) to its backward.
  std::set<int> held;
  int peak = 0;
  for (const PipelineOp& op : ops) {
    if (op.kind == PipelineOp::post) {
      for (const PipelineTransfer& t : op.transfers)
        if (!t.send && t.direction == 0 && t.chunk == chunk) held.insert(t.micro_batch);
    } else if (op.chunk == chunk && op.kind == PipelineOp::forward) {
      held.insert(op.micro_batch);
    } else if (op.chunk == chunk && op.kind == PipelineOp::backward) {
      held.erase(op.micro_batch);
    }
    peak = std::max(peak, static_cast<int>(held.size()));
  }
  return peak;
}

int peak_received_gradients(const std::vector<PipelineOp>& ops) {
  int now = 0, peak = 0;
  std::set<std::pair<int, int>> waiting;
  for (const PipelineOp& op : ops) {
    if (op.kind == PipelineOp::post) {
      for (const PipelineTransfer& t : op.transfers)
        if (!t.send && t.direction == 1) waiting.insert({t.chunk, t.micro_batch});
    } else if (op.kind == PipelineOp::backward) {
      waiting.erase({op.chunk, op.micro_batch});
    }
    now = static_cast<int>(waiting.size());
    peak = std::max(peak, now);
  }
  return peak;
}

int ScheduleMemory::total_slots() const {
  int n = 0;
  for (int s : slots) n += s;
  return n;
}

ScheduleMemory schedule_memory(Schedule schedule, const PipelinePlace& place, int micro_batches, bool overlap,
                               Matching matching) {
  ScheduleMemory out;
  if (place.chunks == 1 && schedule == Schedule::one_f_one_b) {
    out.slots = {std::min(place.ranks - place.rank, micro_batches)};  // 1F1B's warm-up + 1
    return out;
  }
  int m = micro_batches;
  if (place.chunks > 1) m = std::min(m, place.ranks * (place.chunks + 1));
  const std::vector<PipelineOp> ops = pipeline_ops(schedule, place, m, overlap, matching);
  for (int c = 0; c < place.chunks; ++c) out.slots.push_back(peak_in_flight(ops, c));
  if (place.chunks > 1) out.received_gradients = peak_received_gradients(ops);
  return out;
}

double PipelineSimulation::bubble() const {
  double most = 0;
  for (double t : idle_time) most = std::max(most, t);
  return busy_time > 0 ? most / busy_time : 0.0;
}

PipelineSimulation simulate(Schedule schedule, int ranks, int micro_batches, int chunks, bool overlap,
                            double forward_time, double backward_time, Matching matching) {
  if (const std::string why = schedule_problem(schedule, ranks, micro_batches, chunks); !why.empty()) {
    PipelineSimulation result;
    result.problem = why;
    return result;
  }
  std::vector<std::vector<PipelineOp>> ops;
  for (int r = 0; r < ranks; ++r)
    ops.push_back(pipeline_ops(schedule, PipelinePlace{r, ranks, chunks}, micro_batches, overlap, matching));
  return simulate(ops, micro_batches, chunks, forward_time, backward_time, matching);
}

PipelineSimulation simulate(const std::vector<std::vector<PipelineOp>>& ops, int micro_batches, int chunks,
                            double forward_time, double backward_time, Matching matching) {
  PipelineSimulation result;
  const int ranks = static_cast<int>(ops.size());
  struct Group {
    const PipelineOp* post = nullptr;
    std::vector<bool> done;
    std::vector<double> done_at;
    double posted_at = 0, started_at = 0, completed_at = -1;
    bool waited = false;
  };
  struct Rank {
    PipelinePlace place;
    std::vector<PipelineOp> ops;
    std::size_t pc = 0;
    double clock = 0;
    std::map<int, Group> groups;
    std::deque<int> queue;  // posted, not yet complete, in posting order
    double queue_free_at = 0;
    std::set<std::pair<int, int>> forwarded, backwarded, have_input, have_grad;
    // The model's one gradient buffer (GptModel::output_grad / input_grad): a backward leaves
    // its input gradient there until the wait of the group that sends it; with v = 1 a gradient
    // is also received there, from its post to its backward.
    bool gradient_being_sent = false, gradient_being_received = false;
  };
  result.computes.resize(ops.size());
  using Key = std::tuple<int, int, int>;  // direction, receiving chunk, micro-batch
  std::map<std::pair<int, int>, std::vector<Key>> sent, received;  // (from, to) -> in posting order
  // per_flow: the posted, unmatched transfers of each flow (from, to, direction), in posting order.
  struct Posted {
    int rank, group;
    std::size_t index;
  };
  struct Flow {
    std::deque<Posted> sends, receives;
    double free_at = 0;  // its last transfer's completion
  };
  std::map<std::tuple<int, int, int>, Flow> flows;
  std::vector<Rank> rs(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    rs[static_cast<std::size_t>(r)].place = PipelinePlace{r, ranks, chunks};
    rs[static_cast<std::size_t>(r)].ops = ops[static_cast<std::size_t>(r)];
  }
  const auto rank_of = [&](int r, int peer) { return ((r + peer) % ranks + ranks) % ranks; };
  const auto where = [&](int r) {
    return "rank " + std::to_string(r) + " op " + std::to_string(rs[static_cast<std::size_t>(r)].pc) + ": ";
  };
  const auto name = [](int chunk, int m) {
    return "micro-batch " + std::to_string(m) + " of chunk " + std::to_string(chunk);
  };
  const auto start_head = [&](Rank& x) {
    if (x.queue.empty()) return;
    Group& g = x.groups[x.queue.front()];
    g.started_at = std::max(g.posted_at, x.queue_free_at);
  };
  // The groups whose transfers may meet now: the front of the queue in order, any posted by tag.
  const auto open_groups = [&](const Rank& x) {
    return matching == Matching::stream_order ? std::min<std::size_t>(1, x.queue.size()) : x.queue.size();
  };
  for (bool moved = true; moved;) {
    moved = false;
    // Per flow (NCCL lanes): the first unmatched send of each flow with its first unmatched
    // receive, which must expect it, once both are posted.
    for (auto& [key, flow] : flows)
      while (matching == Matching::per_flow && !flow.sends.empty() && !flow.receives.empty()) {
        const Posted s = flow.sends.front(), v = flow.receives.front();
        Group& gs = rs[static_cast<std::size_t>(s.rank)].groups[s.group];
        Group& gv = rs[static_cast<std::size_t>(v.rank)].groups[v.group];
        const PipelineTransfer& t = gs.post->transfers[s.index];
        const PipelineTransfer& u = gv.post->transfers[v.index];
        if (u.micro_batch != t.micro_batch || u.chunk != peer_chunk(rs[static_cast<std::size_t>(s.rank)].place, t)) {
          result.problem = "rank " + std::to_string(s.rank) + " sends " + name(t.chunk, t.micro_batch) + " where rank " +
                           std::to_string(v.rank) + " receives " + name(u.chunk, u.micro_batch) +
                           " next on their lane (NCCL matches a lane's transfers by order)";
          return result;
        }
        const double at = std::max({gs.started_at, gv.started_at, flow.free_at});
        gs.done[s.index] = gv.done[v.index] = true;
        gs.done_at[s.index] = gv.done_at[v.index] = at;
        flow.free_at = at;
        flow.sends.pop_front();
        flow.receives.pop_front();
        moved = true;
      }
    // Transfers between posted groups. In order (NCCL): only the groups at the front of both
    // ranks' queues. By tag (MPI): any posted groups; a send meets the first receive its peer
    // posted from this rank with its tag (MPI's (source, tag) matching), which must expect it.
    for (int r = 0; r < ranks && matching != Matching::per_flow; ++r) {
      Rank& a = rs[static_cast<std::size_t>(r)];
      const std::size_t open_a = open_groups(a);
      for (std::size_t ia = 0; ia < open_a; ++ia) {
        Group& ga = a.groups[a.queue[ia]];
        for (std::size_t i = 0; i < ga.done.size(); ++i) {
          const PipelineTransfer& t = ga.post->transfers[i];
          if (ga.done[i] || (matching == Matching::by_tag && !t.send)) continue;
          const int q = rank_of(r, t.peer);
          Rank& b = rs[static_cast<std::size_t>(q)];
          const std::size_t open_b = open_groups(b);
          bool matched = false;
          for (std::size_t ib = 0; ib < open_b && !matched; ++ib) {
            Group& gb = b.groups[b.queue[ib]];
            for (std::size_t j = 0; j < gb.done.size(); ++j) {
              const PipelineTransfer& u = gb.post->transfers[j];
              if (gb.done[j] || u.send == t.send || (q == r && &ga == &gb && i == j)) continue;
              const bool same = u.peer == -t.peer && u.direction == t.direction && u.micro_batch == t.micro_batch &&
                                u.chunk == peer_chunk(a.place, t) && t.chunk == peer_chunk(b.place, u);
              if (matching == Matching::by_tag) {
                if (rank_of(q, u.peer) != r || transfer_tag(b.place, u) != transfer_tag(a.place, t)) continue;
                if (!same) {
                  result.problem = "rank " + std::to_string(r) + " sends " + name(t.chunk, t.micro_batch) +
                                   " with the tag rank " + std::to_string(q) + " receives " +
                                   name(u.chunk, u.micro_batch) + " under";
                  return result;
                }
              } else if (!same) {
                continue;
              }
              const double at = std::max(ga.started_at, gb.started_at);
              ga.done[i] = gb.done[j] = true;
              ga.done_at[i] = gb.done_at[j] = at;
              moved = matched = true;
              break;
            }
          }
        }
      }
    }
    if (matching != Matching::stream_order)  // every complete group, wherever it is in the queue
      for (Rank& x : rs)
        for (auto it = x.queue.begin(); it != x.queue.end();) {
          Group& g = x.groups[*it];
          if (std::find(g.done.begin(), g.done.end(), false) != g.done.end()) {
            ++it;
            continue;
          }
          g.completed_at = g.started_at;
          for (double at : g.done_at) g.completed_at = std::max(g.completed_at, at);
          it = x.queue.erase(it);
          moved = true;
        }
    for (Rank& x : rs)
      while (!x.queue.empty()) {
        Group& g = x.groups[x.queue.front()];
        if (std::find(g.done.begin(), g.done.end(), false) != g.done.end()) break;
        g.completed_at = g.started_at;
        for (double at : g.done_at) g.completed_at = std::max(g.completed_at, at);
        x.queue_free_at = g.completed_at;
        x.queue.pop_front();
        start_head(x);
        moved = true;
      }
    // Each rank's program as far as it goes.
    for (int r = 0; r < ranks; ++r) {
      Rank& x = rs[static_cast<std::size_t>(r)];
      while (x.pc < x.ops.size()) {
        const PipelineOp& op = x.ops[x.pc];
        const std::pair<int, int> cm{op.chunk, op.micro_batch};
        if (op.kind == PipelineOp::forward) {
          // Its input must come from a group already waited for (the host does not block here).
          if (!x.place.first_virtual(op.chunk) && !x.have_input.count(cm)) {
            result.problem = where(r) + "forward of " + name(op.chunk, op.micro_batch) + " without its input";
            return result;
          }
          if (!x.forwarded.insert(cm).second) {
            result.problem = where(r) + "second forward of " + name(op.chunk, op.micro_batch);
            return result;
          }
          result.computes[static_cast<std::size_t>(r)].push_back({x.clock, x.clock + forward_time, op});
          x.clock += forward_time;
        } else if (op.kind == PipelineOp::backward) {
          if (!x.forwarded.count(cm)) {
            result.problem = where(r) + "backward before forward of " + name(op.chunk, op.micro_batch);
            return result;
          }
          if (!x.place.last_virtual(op.chunk) && !x.have_grad.count(cm)) {
            result.problem = where(r) + "backward of " + name(op.chunk, op.micro_batch) + " without its gradient";
            return result;
          }
          if (!x.backwarded.insert(cm).second) {
            result.problem = where(r) + "second backward of " + name(op.chunk, op.micro_batch);
            return result;
          }
          if (x.gradient_being_sent) {
            result.problem = where(r) + "backward of " + name(op.chunk, op.micro_batch) +
                             " overwrites the gradient buffer before the input gradient in it is sent";
            return result;
          }
          x.gradient_being_received = false;
          x.gradient_being_sent = !x.place.first_virtual(op.chunk);
          result.computes[static_cast<std::size_t>(r)].push_back({x.clock, x.clock + backward_time, op});
          x.clock += backward_time;
        } else if (op.kind == PipelineOp::post) {
          Group& g = x.groups[op.group];
          if (g.post != nullptr) {
            result.problem = where(r) + "group " + std::to_string(op.group) + " posted twice";
            return result;
          }
          g.post = &op;
          g.done.assign(op.transfers.size(), false);
          g.done_at.assign(op.transfers.size(), 0.0);
          g.posted_at = x.clock;
          for (std::size_t i = 0; i < op.transfers.size(); ++i) {
            const PipelineTransfer& t = op.transfers[i];
            const int q = rank_of(r, t.peer);
            if (matching == Matching::per_flow) {
              Flow& flow = flows[{t.send ? r : q, t.send ? q : r, t.direction}];
              (t.send ? flow.sends : flow.receives).push_back({r, op.group, i});
            }
            if (t.send) {
              const std::pair<int, int> what{t.chunk, t.micro_batch};
              if (!(t.direction == 0 ? x.forwarded : x.backwarded).count(what)) {
                result.problem = where(r) + name(t.chunk, t.micro_batch) + " sent before it is computed";
                return result;
              }
              sent[{r, q}].push_back({t.direction, peer_chunk(x.place, t), t.micro_batch});
            } else {
              received[{q, r}].push_back({t.direction, t.chunk, t.micro_batch});
              if (t.direction == 1 && chunks == 1) {
                if (x.gradient_being_sent || x.gradient_being_received) {
                  result.problem = where(r) + "receives the gradient of " + name(t.chunk, t.micro_batch) +
                                   " into the gradient buffer while it holds another gradient";
                  return result;
                }
                x.gradient_being_received = true;
              }
            }
          }
          x.queue.push_back(op.group);
          if (matching != Matching::stream_order)
            g.started_at = g.posted_at;
          else if (x.queue.size() == 1)
            start_head(x);
        } else {
          const auto it = x.groups.find(op.group);
          if (it == x.groups.end() || it->second.waited) {
            result.problem = where(r) + "wait for group " + std::to_string(op.group) + " that is not pending";
            return result;
          }
          Group& g = it->second;
          if (g.completed_at < 0) break;
          g.waited = true;
          x.clock = std::max(x.clock, g.completed_at);
          for (const PipelineTransfer& t : g.post->transfers) {
            if (!t.send) (t.direction == 0 ? x.have_input : x.have_grad).insert({t.chunk, t.micro_batch});
            if (t.send && t.direction == 1) x.gradient_being_sent = false;
          }
        }
        ++x.pc;
        moved = true;
      }
    }
  }
  const int expected = micro_batches * chunks;
  for (int r = 0; r < ranks; ++r) {
    const Rank& x = rs[static_cast<std::size_t>(r)];
    if (x.pc < x.ops.size()) {
      result.problem = "deadlock: " + where(r) + "stuck";
      return result;
    }
    for (const auto& kv : x.groups)
      if (!kv.second.waited) {
        result.problem = "rank " + std::to_string(r) + " never waits for group " + std::to_string(kv.first);
        return result;
      }
    if (static_cast<int>(x.forwarded.size()) != expected || static_cast<int>(x.backwarded.size()) != expected) {
      result.problem = "rank " + std::to_string(r) + " did not run every micro-batch of every chunk";
      return result;
    }
  }
  for (const auto& kv : sent)
    if (matching == Matching::stream_order && received[kv.first] != kv.second) {
      result.problem = "rank " + std::to_string(kv.first.first) + " sends to rank " + std::to_string(kv.first.second) +
                       " in another order than that rank receives (NCCL matches by order)";
      return result;
    }
  result.busy_time = expected * (forward_time + backward_time);
  for (const Rank& x : rs) result.step_time = std::max(result.step_time, x.clock);
  for (int r = 0; r < ranks; ++r) result.idle_time.push_back(result.step_time - result.busy_time);
  return result;
}

std::string draw(const PipelineSimulation& sim) {
  std::string out;
  for (std::size_t r = 0; r < sim.computes.size(); ++r) {
    const auto units = static_cast<std::size_t>(sim.step_time + 0.5);
    std::vector<std::string> cells(units, " .  ");
    for (const PipelineSimulation::Slot& s : sim.computes[r]) {
      const auto at = static_cast<std::size_t>(s.start + 0.5), end = static_cast<std::size_t>(s.end + 0.5);
      for (std::size_t u = at; u < end && u < units; ++u) cells[u] = "--  ";
      if (at < units)
        cells[at] = std::string(s.op.kind == PipelineOp::forward ? "F" : "B") + std::to_string(s.op.micro_batch) +
                    static_cast<char>('a' + s.op.chunk) + " ";
    }
    out += "rank " + std::to_string(r) + " |";
    for (const std::string& c : cells) out += c;
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += "\n";
  }
  return out;
}

std::string simulate_pipeline(Schedule schedule, int stages, int micro_batches, int chunks, bool overlap,
                              Matching matching) {
  return simulate(schedule, stages, micro_batches, chunks, overlap, 1, 2, matching).problem;
}

}  // namespace tptrain::train
