// Ring attention's schedule (src/schedule/ring_schedule.hpp) under every matching rule, for rings
// of 2 to 8 ranks: no deadlock, each step computes rank r − i's block, and every block's dK, dV sums
// reach their owner from every rank. And the simulator (tests/schedule/ring_simulator) finds the
// problems of schedules that have them.
#include <algorithm>

#include "catch.hpp"
#include "tests/schedule/ring_simulator.hpp"

namespace tptrain::schedule {
namespace {

TEST_CASE("ring attention's schedule finishes under NCCL's order, MPI's tags and per flow", "[schedule][ring]") {
  for (int C = 2; C <= 8; ++C)
    for (const bool backward : {false, true})
      for (const Matching m : {Matching::stream_order, Matching::by_tag, Matching::per_flow}) {
        INFO(C << " ranks, " << (backward ? "backward" : "forward") << ", " << matching_name(m));
        CHECK(simulate_ring(C, backward, m).empty());
      }
}

TEST_CASE("the ring's ops: C - 1 key/value transfers, C of the sums, each posted before the compute it hides",
          "[schedule][ring]") {
  for (int C = 2; C <= 5; ++C) {
    const auto count = [](const std::vector<RingOp>& ops, RingOp::Kind k, RingFlow f) {
      return std::count_if(ops.begin(), ops.end(), [&](const RingOp& o) { return o.kind == k && o.flow == f; });
    };
    const std::vector<RingOp> f = ring_forward_ops(C), b = ring_backward_ops(C);
    CHECK(count(f, RingOp::post, RingFlow::kv) == C - 1);
    CHECK(count(f, RingOp::post, RingFlow::sums) == 0);
    CHECK(count(b, RingOp::post, RingFlow::kv) == C - 1);
    CHECK(count(b, RingOp::post, RingFlow::sums) == C);
    // Every key/value post comes right before a compute (the transfer runs during it).
    for (const auto* ops : {&f, &b})
      for (std::size_t i = 0; i < ops->size(); ++i)
        if ((*ops)[i].kind == RingOp::post && (*ops)[i].flow == RingFlow::kv) {
          REQUIRE(i + 1 < ops->size());
          CHECK((*ops)[i + 1].kind == RingOp::compute);
        }
  }
  CHECK_THROWS_AS(ring_forward_ops(1), std::invalid_argument);
}

TEST_CASE("the ring simulator finds a compute before its block arrived, flows out of order and lost sums",
          "[schedule][ring]") {
  const int C = 4;
  // A rank that computes step 1 before waiting for the block it receives.
  {
    std::vector<std::vector<RingOp>> ops(C, ring_forward_ops(C));
    auto& r1 = ops[1];
    const auto wait0 = std::find_if(r1.begin(), r1.end(), [](const RingOp& o) { return o.kind == RingOp::wait; });
    REQUIRE(wait0 != r1.end());
    std::iter_swap(wait0, wait0 + 2);  // wait kv 0 <-> compute 1 (after the post of kv 1)
    CHECK_THAT(simulate_ring(ops, false, Matching::by_tag), Catch::Contains("rank 1") && Catch::Contains("computes with"));
  }
  // One rank posts its sums before the next block's keys: NCCL would pair them with the wrong flow.
  {
    std::vector<std::vector<RingOp>> ops(C, ring_backward_ops(C));
    auto& r2 = ops[2];
    // Step 1: post kv 1, compute 1, wait sums 0, add 1, post sums 1, wait kv 1; move post kv 1 after post sums 1.
    const auto kv1 = std::find_if(r2.begin(), r2.end(), [](const RingOp& o) {
      return o.kind == RingOp::post && o.flow == RingFlow::kv && o.step == 1;
    });
    const auto sums1 = std::find_if(r2.begin(), r2.end(), [](const RingOp& o) {
      return o.kind == RingOp::post && o.flow == RingFlow::sums && o.step == 1;
    });
    REQUIRE(kv1 < sums1);
    std::rotate(kv1, kv1 + 1, sums1 + 1);
    CHECK_THAT(simulate_ring(ops, true, Matching::stream_order), Catch::Contains("meets rank"));
    CHECK(simulate_ring(ops, true, Matching::by_tag).empty());  // MPI matches by tag: fine there
  }
  // A backward without its last transfer of the sums: a rank ends without its own block's.
  {
    std::vector<RingOp> b = ring_backward_ops(C);
    b.erase(std::remove_if(b.begin(), b.end(),
                           [&](const RingOp& o) { return o.flow == RingFlow::sums && o.step == C - 1; }),
            b.end());
    CHECK_THAT(simulate_ring(std::vector<std::vector<RingOp>>(C, b), true, Matching::by_tag),
               Catch::Contains("not its own block's"));
  }
  // A rank that waits for its first transfer before posting it: it and the ring behind it wait
  // forever.
  {
    std::vector<std::vector<RingOp>> ops(C, ring_forward_ops(C));
    ops[0].insert(ops[0].begin(), RingOp{RingOp::wait, 0, RingFlow::kv, 0});
    CHECK_THAT(simulate_ring(ops, false, Matching::stream_order), Catch::Contains("deadlock"));
  }
}

}  // namespace
}  // namespace tptrain::schedule
