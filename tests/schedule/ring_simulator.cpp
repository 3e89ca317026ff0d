#include "tests/schedule/ring_simulator.hpp"

#include <set>

namespace tptrain::schedule {

namespace {

// What a buffer holds: the block of rank `block` (-1: nothing), and for sums the ranks whose
// queries' part is in it.
struct Content {
  int block = -1;
  std::set<int> ranks;
  bool operator==(const Content& o) const { return block == o.block && ranks == o.ranks; }
};

// Buffers of a rank: kv[0], kv[1], dkv[0], dkv[1], dkv_in.
enum Buffer { kv0, kv1, dkv0, dkv1, dkv_in, buffers };
Buffer kv_buffer(int step) { return step % 2 == 0 ? kv0 : kv1; }
Buffer dkv_buffer(int step) { return step % 2 == 0 ? dkv0 : dkv1; }

struct Transfer {
  bool send;
  RingFlow flow;
  Buffer buffer;     // read (send) or written (receive)
  int index = -1;    // its place among the rank's transfers to (send) / from (receive) the peer
  int flow_index = -1;  // the same among those of its flow
  bool done = false;
};

struct Group {
  int id, step;
  RingFlow flow;
  std::vector<Transfer> transfers;
  bool done() const {
    for (const Transfer& t : transfers)
      if (!t.done) return false;
    return true;
  }
};

struct Rank {
  int pc = 0;
  std::vector<Group> groups;      // in posting order
  std::set<int> waited;           // groups waited for
  Content held[buffers];
  int sends = 0, receives = 0;    // transfers to the next rank / from the previous one
  int flow_sends[2] = {0, 0}, flow_receives[2] = {0, 0};
  Group* group(int id) {
    for (Group& g : groups)
      if (g.id == id) return &g;
    return nullptr;
  }
  // A posted transfer that has not completed and uses buffer b (sending from it or receiving into it).
  bool pending_on(Buffer b, bool sending) const {
    for (const Group& g : groups)
      for (const Transfer& t : g.transfers)
        if (!t.done && t.buffer == b && t.send == sending) return true;
    return false;
  }
};

const char* flow_name(RingFlow f) { return f == RingFlow::kv ? "kv" : "sums"; }

}  // namespace

std::string simulate_ring(const std::vector<std::vector<RingOp>>& ops, bool backward, Matching matching) {
  const int C = static_cast<int>(ops.size());
  std::vector<Rank> ranks(static_cast<std::size_t>(C));
  for (int r = 0; r < C; ++r) ranks[static_cast<std::size_t>(r)].held[kv0] = Content{r, {}};
  const auto at = [&](int r) -> Rank& { return ranks[static_cast<std::size_t>((r + C) % C)]; };
  const auto where = [&](int r, const RingOp& op) {
    return "rank " + std::to_string(r) + ", op " + std::to_string(at(r).pc) + " (" + ring_op_name(op) + ")";
  };
  for (;;) {
    bool progress = false;
    // Each rank runs until it blocks on a wait.
    for (int r = 0; r < C; ++r) {
      Rank& me = at(r);
      const auto& mine = ops[static_cast<std::size_t>(r)];
      while (me.pc < static_cast<int>(mine.size())) {
        const RingOp& op = mine[static_cast<std::size_t>(me.pc)];
        if (op.kind == RingOp::wait) {
          Group* g = me.group(op.group);
          if (g == nullptr || !g->done()) break;  // not posted yet: blocks, as a host wait would
          me.waited.insert(op.group);
        } else if (op.kind == RingOp::post) {
          if (me.group(op.group) != nullptr) return where(r, op) + ": posts group " + std::to_string(op.group) + " twice";
          const bool kv = op.flow == RingFlow::kv;
          const Buffer out = kv ? kv_buffer(op.step) : dkv_buffer(op.step), in = kv ? kv_buffer(op.step + 1) : dkv_in;
          if (me.pending_on(in, true) || me.pending_on(in, false))
            return where(r, op) + ": receives into a buffer a transfer still uses";
          if (me.held[out].block < 0) return where(r, op) + ": sends a buffer that holds nothing yet";
          if (!kv && me.held[dkv_in].block >= 0)
            return where(r, op) + ": receives sums over ones not added yet";
          Group g{op.group, op.step, op.flow, {}};
          const int f = static_cast<int>(op.flow);
          g.transfers.push_back({true, op.flow, out, me.sends++, me.flow_sends[f]++});
          g.transfers.push_back({false, op.flow, in, me.receives++, me.flow_receives[f]++});
          me.groups.push_back(g);
        } else if (op.kind == RingOp::compute) {
          const Buffer b = kv_buffer(op.step);
          const int want = ((r - op.step) % C + C) % C;
          if (me.pending_on(b, false) || me.held[b].block != want)
            return where(r, op) + ": computes with the block of rank " + std::to_string(me.held[b].block) +
                   " where it needs rank " + std::to_string(want) + "'s, received and waited for";
          if (backward) {
            const Buffer s = dkv_buffer(op.step);
            if (me.pending_on(s, true)) return where(r, op) + ": writes sums a transfer is still sending";
            me.held[s] = Content{want, {r}};
          }
        } else {  // add_sums
          const Buffer s = dkv_buffer(op.step);
          if (me.pending_on(dkv_in, false) || me.held[dkv_in].block != me.held[s].block)
            return where(r, op) + ": adds sums of block " + std::to_string(me.held[dkv_in].block) + " to block " +
                   std::to_string(me.held[s].block) + "'s";
          me.held[s].ranks.insert(me.held[dkv_in].ranks.begin(), me.held[dkv_in].ranks.end());
          me.held[dkv_in] = Content{};
        }
        ++me.pc;
        progress = true;
      }
    }
    // Transfers that can complete now: rank r's sends to r + 1 against r + 1's receives from r.
    for (int r = 0; r < C; ++r) {
      Rank& me = at(r);
      Rank& peer = at(r + 1);
      for (std::size_t gi = 0; gi < me.groups.size(); ++gi) {
        for (Transfer& s : me.groups[gi].transfers) {
          if (!s.send || s.done) continue;
          // Its partner: by order of all transfers (stream order), or of its flow (by tag, per flow).
          Transfer* partner = nullptr;
          std::size_t pg = 0;
          for (std::size_t j = 0; j < peer.groups.size() && partner == nullptr; ++j)
            for (Transfer& t : peer.groups[j].transfers)
              if (!t.send && (matching == Matching::stream_order ? t.index == s.index
                                                                  : t.flow == s.flow && t.flow_index == s.flow_index)) {
                partner = &t;
                pg = j;
                break;
              }
          if (partner == nullptr) continue;
          if (partner->flow != s.flow)
            return "rank " + std::to_string(r) + "'s send of " + flow_name(s.flow) + " meets rank " +
                   std::to_string((r + 1) % C) + "'s receive of " + flow_name(partner->flow) +
                   " (NCCL matches a pair's transfers by order)";
          const auto current = [&](const Rank& x, std::size_t g) {  // stream order: all earlier groups done
            for (std::size_t k = 0; k < g; ++k)
              if (!x.groups[k].done()) return false;
            return true;
          };
          const auto earlier_of_flow_done = [&](const Rank& x, const Transfer& t, bool send) {
            for (const Group& g : x.groups)
              for (const Transfer& u : g.transfers)
                if (u.send == send && u.flow == t.flow && u.flow_index < t.flow_index && !u.done) return false;
            return true;
          };
          bool ready = true;
          if (matching == Matching::stream_order) ready = current(me, gi) && current(peer, pg);
          if (matching == Matching::per_flow)
            ready = earlier_of_flow_done(me, s, true) && earlier_of_flow_done(peer, *partner, false);
          if (!ready) continue;
          peer.held[partner->buffer] = me.held[s.buffer];
          s.done = partner->done = true;
          progress = true;
        }
      }
    }
    bool finished = true;
    for (int r = 0; r < C; ++r) finished = finished && at(r).pc == static_cast<int>(ops[static_cast<std::size_t>(r)].size());
    if (finished) break;
    if (!progress) {
      for (int r = 0; r < C; ++r)
        if (at(r).pc < static_cast<int>(ops[static_cast<std::size_t>(r)].size()))
          return "deadlock: " + where(r, ops[static_cast<std::size_t>(r)][static_cast<std::size_t>(at(r).pc)]) +
                 " waits forever (" + matching_name(matching) + ")";
    }
  }
  for (int r = 0; r < C; ++r) {
    Rank& me = at(r);
    for (const Group& g : me.groups)
      if (!g.done() || me.waited.count(g.id) == 0)
        return "rank " + std::to_string(r) + " ends with group " + std::to_string(g.id) + " not waited for";
    if (backward) {  // its own block's sums, from every rank
      std::set<int> all;
      for (int k = 0; k < C; ++k) all.insert(k);
      if (!(me.held[dkv_in] == Content{r, all}))
        return "rank " + std::to_string(r) + " ends with the sums of block " + std::to_string(me.held[dkv_in].block) +
               " from " + std::to_string(me.held[dkv_in].ranks.size()) + " ranks, not its own block's from all " +
               std::to_string(C);
    }
  }
  return "";
}

std::string simulate_ring(int ranks, bool backward, Matching matching) {
  const std::vector<RingOp> ops = backward ? ring_backward_ops(ranks) : ring_forward_ops(ranks);
  return simulate_ring(std::vector<std::vector<RingOp>>(static_cast<std::size_t>(ranks), ops), backward, matching);
}

}  // namespace tptrain::schedule
