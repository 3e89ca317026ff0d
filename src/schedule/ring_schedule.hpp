// Ring attention's schedule (src/model/ring_attention.hpp; docs/design.md, "Context
// parallelism"): the order in which a rank of the context ring posts its transfers, computes its
// blocks and waits, as data. RingAttention executes exactly these ops, and
// tests/schedule/ring_simulator proves them deadlock-free and race-free under each backend's
// matching rule (schedule::Matching, transport.hpp), for every ring size.
//
// Step i (0 <= i < C) of a rank computes against the block of rank r − i (mod C). Two flows travel
// the ring, each transfer sending to rank r + 1 and receiving from r − 1 in one group (NCCL: one
// ncclGroupStart/End, so a ring of sends cannot wait on itself):
//   kv    K and V of a block: posted before step i's compute (sending the block held, kv[i % 2],
//         receiving the next into kv[(i + 1) % 2]), waited after it: the transfer runs during the
//         compute. C − 1 of them, forward and backward alike.
//   sums  the backward's dK and dV sums of the block held (sending dkv[i % 2], receiving the next
//         block's sums from the ranks before into dkv_in): posted after step i's compute and the
//         add of the sums that arrived for it, waited before the next step's add: it runs during
//         the next step's compute. C of them: the last brings each rank its own block's sums.
#pragma once

#include <string>
#include <vector>

namespace tptrain::schedule {

enum class RingFlow { kv = 0, sums = 1 };

struct RingOp {
  enum Kind {
    post,      // the group of `flow` for step `step`: send to r + 1, receive from r − 1
    compute,   // step `step`'s blocks (reads kv[step % 2]; backward: adds into dkv[step % 2])
    add_sums,  // backward: dkv[step % 2] += dkv_in, the block's sums from the ranks before
    wait,      // the group posted as `group`
  };
  Kind kind = compute;
  int step = 0;
  RingFlow flow = RingFlow::kv;
  int group = -1;  // post / wait: the group's number on this rank, 0, 1, ...
};

// The ops of one ring attention forward / backward over a ring of `ranks` (>= 2; std::invalid_argument
// otherwise). The same on every rank.
std::vector<RingOp> ring_forward_ops(int ranks);
std::vector<RingOp> ring_backward_ops(int ranks);

// "post kv 0", "compute 1", ... (messages, tests).
std::string ring_op_name(const RingOp& op);

}  // namespace tptrain::schedule
