#include "src/schedule/ring_schedule.hpp"

#include <stdexcept>

namespace tptrain::schedule {

namespace {

void check(int ranks) {
  if (ranks < 2) throw std::invalid_argument("tptrain: a ring of " + std::to_string(ranks) + " ranks (at least 2)");
}

}  // namespace

std::vector<RingOp> ring_forward_ops(int ranks) {
  check(ranks);
  std::vector<RingOp> ops;
  int groups = 0;
  for (int i = 0; i < ranks; ++i) {
    const bool pass = i + 1 < ranks;
    const int g = pass ? groups++ : -1;
    if (pass) ops.push_back({RingOp::post, i, RingFlow::kv, g});
    ops.push_back({RingOp::compute, i});
    if (pass) ops.push_back({RingOp::wait, i, RingFlow::kv, g});
  }
  return ops;
}

std::vector<RingOp> ring_backward_ops(int ranks) {
  check(ranks);
  std::vector<RingOp> ops;
  int groups = 0, sums = -1;  // the sums group posted last step
  for (int i = 0; i < ranks; ++i) {
    const bool pass = i + 1 < ranks;
    const int g = pass ? groups++ : -1;
    if (pass) ops.push_back({RingOp::post, i, RingFlow::kv, g});
    ops.push_back({RingOp::compute, i});
    if (sums >= 0) {
      ops.push_back({RingOp::wait, i - 1, RingFlow::sums, sums});
      ops.push_back({RingOp::add_sums, i});
    }
    sums = groups++;
    ops.push_back({RingOp::post, i, RingFlow::sums, sums});
    if (pass) ops.push_back({RingOp::wait, i, RingFlow::kv, g});
  }
  ops.push_back({RingOp::wait, ranks - 1, RingFlow::sums, sums});
  return ops;
}

std::string ring_op_name(const RingOp& op) {
  const char* flow = op.flow == RingFlow::kv ? "kv" : "sums";
  switch (op.kind) {
    case RingOp::post: return std::string("post ") + flow + " " + std::to_string(op.step);
    case RingOp::compute: return "compute " + std::to_string(op.step);
    case RingOp::add_sums: return "add sums " + std::to_string(op.step);
    case RingOp::wait: return std::string("wait ") + flow + " " + std::to_string(op.step);
  }
  return "?";
}

}  // namespace tptrain::schedule
