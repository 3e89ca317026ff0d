#include "tests/schedule/pipeline_simulator.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <tuple>

#include "src/schedule/transport.hpp"

namespace tptrain::schedule {

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

}  // namespace tptrain::schedule
