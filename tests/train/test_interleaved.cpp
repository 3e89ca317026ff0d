// Interleaved 1F1B (parallel.virtual_stages = v): the schedule (deadlock freedom under NCCL's and
// MPI's rules, early receives on MPI, the bubble (p − 1)/(v·m), the memory it keeps), the chunked
// model stage, and layouts with v = 2 against the one-rank run — loss, every gradient and weight, recompute modes,
// sequence parallelism, the distributed optimizer, bf16 — and checkpoints between v = 2 and v = 1.
#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <mpi.h>
#include <set>
#include <tuple>

#include "catch.hpp"
#include "src/checkpoint/model_checkpoint.hpp"
#include "src/schedule/pipeline_schedule.hpp"
#include "tests/schedule/pipeline_simulator.hpp"
#include "src/schedule/schedule_memory.hpp"
#include "src/schedule/transport.hpp"
#include "src/train/training_run.hpp"
#include "tests/model/model_test_util.hpp"
#include "tests/train/train_test_util.hpp"

using namespace tptrain;
using test::Gradients;
using test::Named;
using test::check_close;
using test::gradients_of;
using test::layout_of;
using test::logical_by_name;
using schedule::Matching;
using schedule::PipelineOp;
using schedule::PipelinePlace;
using schedule::Schedule;

namespace {

// A deck of `layers` blocks on tensor x pipeline x data with v virtual stages.
io::Deck interleaved_deck(int tensor, int pipeline, int data, int v, int steps, int layers = 4,
                          const std::string& extra = "") {
  io::Deck deck = test::pipeline_deck(tensor, pipeline, data, steps, 8, extra);
  deck.model.layers = layers;
  deck.parallel.virtual_stages = v;
  return deck;
}

struct Layout {
  int tensor, pipeline, data, layers;
};

// The layouts with v = 2 that fit the world: pipeline 2 and 4, pipeline 2 x data 2,
// tensor 2 x pipeline 2.
std::vector<Layout> interleaved_layouts() {
  const std::vector<Layout> all{{1, 2, 1, 4}, {1, 4, 1, 8}, {1, 2, 2, 4}, {2, 2, 1, 4}};
  std::vector<Layout> fit;
  for (const auto& l : all)
    if (l.tensor * l.pipeline * l.data == test::world_size()) fit.push_back(l);
  return fit;
}

}  // namespace

TEST_CASE("interleaved 1F1B: every allowed schedule is deadlock-free; the rules refuse the others",
          "[pipeline][interleaved]") {
  int checked = 0;
  for (int p = 1; p <= 8; ++p)
    for (int v = 1; v <= 4; ++v)
      for (int m = 1; m <= 4 * p + 3; ++m)
        for (const Schedule s : {Schedule::one_f_one_b, Schedule::all_forward_all_backward})
          for (const auto& [overlap, matching] : std::vector<std::pair<bool, Matching>>{
                   {false, Matching::stream_order}, {true, Matching::stream_order}, {true, Matching::by_tag},
                   {true, Matching::per_flow}}) {
            INFO("p " << p << ", v " << v << ", m " << m << ", " << schedule::schedule_name(s) << ", overlap " << overlap
                      << ", " << schedule::matching_name(matching));
            const std::string why = schedule::schedule_problem(s, p, m, v);
            const bool allowed = v == 1 || (p > 1 && s == Schedule::one_f_one_b && m % p == 0);
            CHECK(why.empty() == allowed);
            if (!allowed) {
              CHECK_THROWS_AS(schedule::pipeline_ops(s, PipelinePlace{0, p, v}, m), std::invalid_argument);
              continue;
            }
            CHECK(schedule::simulate_pipeline(s, p, m, v, overlap, matching) == "");
            ++checked;
            // Every chunk runs its backwards in micro-batch order (the gradients accumulate in
            // the order of one rank).
            for (int r = 0; r < p; ++r) {
              std::vector<int> next(static_cast<std::size_t>(v), 0);
              for (const PipelineOp& op : schedule::pipeline_ops(s, PipelinePlace{r, p, v}, m, overlap, matching))
                if (op.kind == PipelineOp::backward) CHECK(op.micro_batch == next[static_cast<std::size_t>(op.chunk)]++);
              for (int n : next) CHECK(n == m);
            }
          }
  CHECK(checked > 750);
  CHECK_THAT(schedule::schedule_problem(Schedule::one_f_one_b, 1, 4, 2), Catch::Matchers::Contains("parallel.pipeline > 1"));
  CHECK_THAT(schedule::schedule_problem(Schedule::one_f_one_b, 4, 6, 2),
             Catch::Matchers::Contains("in groups of parallel.pipeline = 4"));
}

namespace {
PipelineOp compute(PipelineOp::Kind kind, int chunk, int m) {
  PipelineOp op;
  op.kind = kind;
  op.chunk = chunk;
  op.micro_batch = m;
  return op;
}
PipelineOp post(int group, std::vector<schedule::PipelineTransfer> transfers) {
  PipelineOp op;
  op.kind = PipelineOp::post;
  op.group = group;
  op.transfers = std::move(transfers);
  return op;
}
PipelineOp wait(int group) {
  PipelineOp op;
  op.kind = PipelineOp::wait;
  op.group = group;
  return op;
}
}  // namespace

TEST_CASE("the simulator finds deadlocks, orders NCCL would mismatch, and data used before it arrives",
          "[pipeline][interleaved]") {
  using T = schedule::PipelineTransfer;
  // Two ranks, one micro-batch, one chunk, as 1F1B runs it: finishes.
  const std::vector<PipelineOp> first{compute(PipelineOp::forward, 0, 0), post(0, {T{+1, true, 0, 0, 0}}), wait(0),
                                      post(1, {T{+1, false, 1, 0, 0}}), wait(1), compute(PipelineOp::backward, 0, 0)};
  const std::vector<PipelineOp> second{post(0, {T{-1, false, 0, 0, 0}}), wait(0), compute(PipelineOp::forward, 0, 0),
                                       compute(PipelineOp::backward, 0, 0), post(1, {T{-1, true, 1, 0, 0}}), wait(1)};
  CHECK(schedule::simulate({first, second}, 1, 1).problem == "");
  // Rank 0 waits for the gradient before it sends the activation: a deadlock.
  std::vector<PipelineOp> swapped{compute(PipelineOp::forward, 0, 0), post(0, {T{+1, false, 1, 0, 0}}), wait(0),
                                  post(1, {T{+1, true, 0, 0, 0}}), wait(1), compute(PipelineOp::backward, 0, 0)};
  CHECK_THAT(schedule::simulate({swapped, second}, 1, 1).problem, Catch::Matchers::Contains("deadlock"));
  // Two micro-batches sent in one order and received in the other (tags would match them on
  // MPI; NCCL pairs by order): refused.
  const std::vector<PipelineOp> sender{compute(PipelineOp::forward, 0, 0), compute(PipelineOp::forward, 0, 1),
                                       post(0, {T{+1, true, 0, 0, 0}, T{+1, true, 0, 1, 0}}), wait(0),
                                       post(1, {T{+1, false, 1, 0, 0}}), wait(1), compute(PipelineOp::backward, 0, 0),
                                       post(2, {T{+1, false, 1, 1, 0}}), wait(2), compute(PipelineOp::backward, 0, 1)};
  std::vector<PipelineOp> receiver{post(0, {T{-1, false, 0, 1, 0}, T{-1, false, 0, 0, 0}}), wait(0),
                                   compute(PipelineOp::forward, 0, 0), compute(PipelineOp::forward, 0, 1),
                                   compute(PipelineOp::backward, 0, 0), post(1, {T{-1, true, 1, 0, 0}}), wait(1),
                                   compute(PipelineOp::backward, 0, 1), post(2, {T{-1, true, 1, 1, 0}}), wait(2)};
  CHECK_THAT(schedule::simulate({sender, receiver}, 2, 1).problem, Catch::Matchers::Contains("another order"));
  std::swap(receiver[0].transfers[0], receiver[0].transfers[1]);
  CHECK(schedule::simulate({sender, receiver}, 2, 1).problem == "");
  // A forward whose input was received but not waited for.
  std::vector<PipelineOp> unwaited = second;
  std::swap(unwaited[1], unwaited[2]);
  CHECK_THAT(schedule::simulate({first, unwaited}, 1, 1).problem, Catch::Matchers::Contains("without its input"));
}

TEST_CASE("by tag (MPI) a receive posted before the group its peer needs first completes; NCCL's order deadlocks",
          "[pipeline][interleaved]") {
  using T = schedule::PipelineTransfer;
  // Rank 0 posts the receive of the gradient before it sends the activation the gradient needs.
  const std::vector<PipelineOp> early{compute(PipelineOp::forward, 0, 0), post(0, {T{+1, false, 1, 0, 0}}),
                                      post(1, {T{+1, true, 0, 0, 0}}), wait(1), wait(0),
                                      compute(PipelineOp::backward, 0, 0)};
  const std::vector<PipelineOp> second{post(0, {T{-1, false, 0, 0, 0}}), wait(0), compute(PipelineOp::forward, 0, 0),
                                       compute(PipelineOp::backward, 0, 0), post(1, {T{-1, true, 1, 0, 0}}), wait(1)};
  CHECK(schedule::simulate({early, second}, 1, 1, 1, 2, Matching::by_tag).problem == "");
  CHECK_THAT(schedule::simulate({early, second}, 1, 1, 1, 2, Matching::stream_order).problem,
             Catch::Matchers::Contains("deadlock"));
  // Waiting for the receive before posting the send deadlocks under both.
  const std::vector<PipelineOp> blocked{compute(PipelineOp::forward, 0, 0), post(0, {T{+1, false, 1, 0, 0}}), wait(0),
                                        post(1, {T{+1, true, 0, 0, 0}}), wait(1), compute(PipelineOp::backward, 0, 0)};
  CHECK_THAT(schedule::simulate({blocked, second}, 1, 1, 1, 2, Matching::by_tag).problem,
             Catch::Matchers::Contains("deadlock"));
  // With p = 2 both neighbours are one rank: a receive "from the next rank" carries the tag of
  // the activation rank 0 sends forward, and MPI would hand it over; the simulator refuses.
  std::vector<PipelineOp> wrong_side = second;
  wrong_side[0].transfers[0].peer = +1;
  CHECK_THAT(schedule::simulate({early, wrong_side}, 1, 1, 1, 2, Matching::by_tag).problem,
             Catch::Matchers::Contains("with the tag"));
  // Two micro-batches received in another order than sent: tags match them on MPI.
  const std::vector<PipelineOp> sender{compute(PipelineOp::forward, 0, 0), compute(PipelineOp::forward, 0, 1),
                                       post(0, {T{+1, true, 0, 0, 0}, T{+1, true, 0, 1, 0}}), wait(0),
                                       post(1, {T{+1, false, 1, 0, 0}}), wait(1), compute(PipelineOp::backward, 0, 0),
                                       post(2, {T{+1, false, 1, 1, 0}}), wait(2), compute(PipelineOp::backward, 0, 1)};
  const std::vector<PipelineOp> receiver{post(0, {T{-1, false, 0, 1, 0}, T{-1, false, 0, 0, 0}}), wait(0),
                                         compute(PipelineOp::forward, 0, 0), compute(PipelineOp::forward, 0, 1),
                                         compute(PipelineOp::backward, 0, 0), post(1, {T{-1, true, 1, 0, 0}}),
                                         wait(1), compute(PipelineOp::backward, 0, 1),
                                         post(2, {T{-1, true, 1, 1, 0}}), wait(2)};
  CHECK(schedule::simulate({sender, receiver}, 2, 1, 1, 2, Matching::by_tag).problem == "");
  // The model's one gradient buffer: a backward must not overwrite an input gradient still being
  // sent, and with v = 1 a gradient must not be received into it while it holds another.
  using F = PipelineOp;
  const std::vector<PipelineOp> first_stage{compute(F::forward, 0, 0), post(0, {T{+1, true, 0, 0, 0}}),
                                            compute(F::forward, 0, 1), post(1, {T{+1, true, 0, 1, 0}}), wait(0),
                                            wait(1), post(2, {T{+1, false, 1, 0, 0}}), wait(2),
                                            compute(F::backward, 0, 0), post(3, {T{+1, false, 1, 1, 0}}), wait(3),
                                            compute(F::backward, 0, 1)};
  const std::vector<PipelineOp> last_stage{post(0, {T{-1, false, 0, 0, 0}}), wait(0), compute(F::forward, 0, 0),
                                           compute(F::backward, 0, 0), post(1, {T{-1, true, 1, 0, 0}}),
                                           post(2, {T{-1, false, 0, 1, 0}}), wait(2), compute(F::forward, 0, 1),
                                           wait(1), compute(F::backward, 0, 1), post(3, {T{-1, true, 1, 1, 0}}),
                                           wait(3)};
  CHECK(schedule::simulate({first_stage, last_stage}, 2, 1, 1, 2, Matching::by_tag).problem == "");
  std::vector<PipelineOp> overwrites = last_stage;
  std::swap(overwrites[8], overwrites[9]);  // the second backward before the first gradient is sent
  CHECK_THAT(schedule::simulate({first_stage, overwrites}, 2, 1, 1, 2, Matching::by_tag).problem,
             Catch::Matchers::Contains("overwrites the gradient buffer"));
  std::vector<PipelineOp> two_in_one = first_stage;
  std::rotate(two_in_one.begin() + 8, two_in_one.begin() + 9, two_in_one.begin() + 10);  // receive 1 before backward 0
  CHECK_THAT(schedule::simulate({two_in_one, last_stage}, 2, 1, 1, 2, Matching::by_tag).problem,
             Catch::Matchers::Contains("while it holds another gradient"));
  // The schedules' early receives are why the two backends get different ops: under NCCL's rule
  // they deadlock (all-forward-all-backward: the first stage's early receive of the first
  // gradient holds back its last activation; every interleaved case).
  for (const auto& [s, p, m, v] : std::vector<std::tuple<Schedule, int, int, int>>{
           {Schedule::all_forward_all_backward, 4, 8, 1},
           {Schedule::one_f_one_b, 4, 8, 2},
           {Schedule::one_f_one_b, 2, 1, 1}}) {
    INFO(schedule::schedule_name(s) << ", p " << p << ", v " << v << ", m " << m);
    std::vector<std::vector<PipelineOp>> ops;
    for (int r = 0; r < p; ++r)
      ops.push_back(schedule::pipeline_ops(s, PipelinePlace{r, p, v}, m, true, Matching::by_tag));
    CHECK(schedule::simulate(ops, m, v, 1, 2, Matching::by_tag).problem == "");
    CHECK(schedule::simulate(ops, m, v, 1, 2, Matching::stream_order).problem != "");
    // With a lane per flow (NCCL lanes) an early receive holds back nothing the peer needs.
    CHECK(schedule::simulate(ops, m, v, 1, 2, Matching::per_flow).problem == "");
  }
  // Lanes: the rank-0 early receive completes as by tag; NCCL still pairs a lane's transfers by
  // order, so micro-batches received in another order than sent are refused.
  CHECK(schedule::simulate({early, second}, 1, 1, 1, 2, Matching::per_flow).problem == "");
  CHECK_THAT(schedule::simulate({sender, receiver}, 2, 1, 1, 2, Matching::per_flow).problem,
             Catch::Matchers::Contains("matches a lane's transfers by order"));
}

namespace {
// How many receives of a rank are in flight during a compute: posted before a compute and waited
// for after it.
int receives_overlapping_compute(const std::vector<PipelineOp>& ops) {
  std::map<int, std::size_t> posted_at;  // group -> index of its post
  int n = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == PipelineOp::post) posted_at[ops[i].group] = i;
    if (ops[i].kind != PipelineOp::wait) continue;
    const std::size_t at = posted_at.at(ops[i].group);
    bool computes = false;
    for (std::size_t j = at; j < i; ++j)
      computes = computes || ops[j].kind == PipelineOp::forward || ops[j].kind == PipelineOp::backward;
    if (!computes) continue;
    for (const auto& t : ops[at].transfers) n += t.send ? 0 : 1;
  }
  return n;
}
}  // namespace

TEST_CASE("by tag (MPI) receives are posted before the compute that precedes their use", "[pipeline][interleaved]") {
  for (int p = 2; p <= 8; ++p)
    for (int v = 1; v <= 4; ++v)
      for (int m = p; m <= 4 * p; m += p)
        for (const Schedule s : {Schedule::one_f_one_b, Schedule::all_forward_all_backward}) {
          if (!schedule::schedule_problem(s, p, m, v).empty()) continue;
          INFO("p " << p << ", v " << v << ", m " << m << ", " << schedule::schedule_name(s));
          int nccl = 0, mpi = 0;
          for (int r = 0; r < p; ++r) {
            INFO("rank " << r);
            const PipelinePlace place{r, p, v};
            const int in_order = receives_overlapping_compute(schedule::pipeline_ops(s, place, m));
            const int by_tag = receives_overlapping_compute(schedule::pipeline_ops(s, place, m, true, Matching::by_tag));
            CHECK(by_tag >= in_order);
            nccl += in_order;
            mpi += by_tag;
          }
          CHECK(mpi > nccl);
        }
}

TEST_CASE("pipeline lanes: on every rank each lane carries one flow, and both ends of a flow use its lane",
          "[pipeline][interleaved]") {
  for (int p = 2; p <= 9; ++p) {
    CHECK(schedule::pipeline_lanes(p) == (p % 2 == 1 ? 6 : 4));
    for (int d = 0; d < 2; ++d)
      for (int s = 0; s < p; ++s) {  // neighbours around the ring differ
        CHECK(schedule::pipeline_lane(s, p, d) != schedule::pipeline_lane((s + 1) % p, p, d));
        CHECK(schedule::pipeline_lane(s, p, d) < schedule::pipeline_lanes(p));
      }
    for (int v = 1; v <= 2; ++v)
      for (int r = 0; r < p; ++r) {
        INFO("p " << p << ", v " << v << ", rank " << r);
        // lane -> the flows (sender, receiver, direction) this rank sends or receives on it
        std::map<int, std::set<std::tuple<int, int, int>>> flows_on;
        for (const PipelineOp& op :
             schedule::pipeline_ops(Schedule::one_f_one_b, PipelinePlace{r, p, v}, 2 * p, true, Matching::per_flow))
          for (const auto& t : op.transfers) {
            const int peer = (r + t.peer + p) % p, sender = t.send ? r : peer, receiver = t.send ? peer : r;
            flows_on[schedule::pipeline_lane(sender, p, t.direction)].insert({sender, receiver, t.direction});
          }
        CHECK(!flows_on.empty());
        for (const auto& [lane, flows] : flows_on) {
          INFO("lane " << lane);
          CHECK(flows.size() == 1);
        }
      }
  }
  CHECK(schedule::pipeline_lanes(1) == 0);
}

namespace {
// The ops with every wait right after its post: what a host that blocks on all pending transfers
// at once (a device-wide fence, e.g. bench --phases between two ops) makes of them.
std::vector<PipelineOp> waits_at_once(const std::vector<PipelineOp>& ops) {
  std::vector<PipelineOp> out;
  for (const PipelineOp& op : ops) {
    if (op.kind == PipelineOp::wait) continue;
    out.push_back(op);
    if (op.kind == PipelineOp::post) out.push_back(wait(op.group));
  }
  return out;
}
}  // namespace

TEST_CASE("with lanes, Megatron's receive places finish when the host waits for every transfer at once; early "
          "receives do not",
          "[pipeline][interleaved]") {
  int checked = 0;
  for (int p = 2; p <= 8; ++p)
    for (int v = 1; v <= 4; ++v)
      for (int m = 1; m <= 4 * p + 3; ++m)
        for (const Schedule s : {Schedule::one_f_one_b, Schedule::all_forward_all_backward}) {
          if (!schedule::schedule_problem(s, p, m, v).empty()) continue;
          INFO("p " << p << ", v " << v << ", m " << m << ", " << schedule::schedule_name(s));
          std::vector<std::vector<PipelineOp>> ops;
          for (int r = 0; r < p; ++r)
            ops.push_back(waits_at_once(schedule::pipeline_ops(s, PipelinePlace{r, p, v}, m)));
          CHECK(schedule::simulate(ops, m, v, 1, 2, Matching::per_flow).problem == "");
          ++checked;
        }
  CHECK(checked > 250);
  // Why PipelineRunner keeps Megatron's places while bench --phases fences the device: an early
  // receive waited for at once blocks the compute its own data needs (p = 2, one micro-batch:
  // rank 0's gradient receive before its forward).
  std::vector<std::vector<PipelineOp>> early;
  for (int r = 0; r < 2; ++r)
    early.push_back(waits_at_once(schedule::pipeline_ops(Schedule::one_f_one_b, PipelinePlace{r, 2, 1}, 1, true,
                                                      Matching::per_flow)));
  CHECK_THAT(schedule::simulate(early, 1, 1, 1, 2, Matching::per_flow).problem, Catch::Matchers::Contains("deadlock"));
}

TEST_CASE("the simulated bubble is (p - 1)/(v m)", "[pipeline][interleaved]") {
  for (int p = 2; p <= 8; ++p)
    for (int v = 1; v <= 4; ++v)
      for (int m = p; m <= 4 * p; m += p)
        for (const auto& [overlap, matching] : std::vector<std::pair<bool, Matching>>{
                 {false, Matching::stream_order}, {true, Matching::stream_order}, {true, Matching::by_tag},
                   {true, Matching::per_flow}})
          for (const double backward : {1.0, 2.0}) {
            INFO("p " << p << ", v " << v << ", m " << m << ", overlap " << overlap << ", t_b/t_f " << backward
                      << ", " << schedule::matching_name(matching));
            const schedule::PipelineSimulation sim =
                schedule::simulate(Schedule::one_f_one_b, p, m, v, overlap, 1.0, backward, matching);
            REQUIRE(sim.problem == "");
            CHECK(sim.busy_time == m * v * (1.0 + backward));
            CHECK(std::fabs(sim.bubble() - double(p - 1) / (v * m)) < 1e-12);
          }
  // The decks of the issue and beyond: GPT-3 175B's p = 16, m = 192 with v = 2 (3.9 %), deeper
  // pipelines and more chunks.
  for (const auto& [p, m, v] : std::vector<std::array<int, 3>>{{16, 192, 2}, {16, 64, 3}, {12, 36, 4}, {32, 64, 2}}) {
    INFO("p " << p << ", v " << v << ", m " << m);
    for (const Matching matching : {Matching::stream_order, Matching::by_tag, Matching::per_flow}) {
      const schedule::PipelineSimulation sim = schedule::simulate(Schedule::one_f_one_b, p, m, v, true, 1, 2, matching);
      REQUIRE(sim.problem == "");
      CHECK(std::fabs(sim.bubble() - double(p - 1) / (v * m)) < 1e-12);
    }
  }
  // All-forward-all-backward has the same bubble (p − 1)/m; fewer micro-batches than stages more.
  CHECK(std::fabs(schedule::simulate(Schedule::all_forward_all_backward, 4, 8, 1).bubble() - 3.0 / 8) < 1e-12);
  CHECK(std::fabs(schedule::simulate(Schedule::all_forward_all_backward, 4, 8, 1, true, 1, 2, Matching::by_tag).bubble() -
                  3.0 / 8) < 1e-12);
  CHECK(schedule::simulate(Schedule::one_f_one_b, 4, 2, 1).bubble() > 3.0 / 2 - 1e-12);
}

TEST_CASE("interleaved 1F1B keeps per chunk what schedule_memory says, for any number of micro-batches",
          "[pipeline][interleaved]") {
  for (int p = 2; p <= 8; ++p)
    for (int v = 1; v <= 4; ++v)
      for (int r = 0; r < p; ++r)
        for (int m = p; m <= p * (v + 4); m += p)
          for (const auto& [overlap, matching] : std::vector<std::pair<bool, Matching>>{
                   {false, Matching::stream_order}, {true, Matching::stream_order}, {true, Matching::by_tag},
                   {true, Matching::per_flow}}) {
            INFO("p " << p << ", v " << v << ", rank " << r << ", m " << m << ", overlap " << overlap
                      << ", " << schedule::matching_name(matching));
            const PipelinePlace place{r, p, v};
            const auto ops = schedule::pipeline_ops(Schedule::one_f_one_b, place, m, overlap, matching);
            const schedule::ScheduleMemory memory =
                schedule::schedule_memory(Schedule::one_f_one_b, place, m, overlap, matching);
            REQUIRE(static_cast<int>(memory.slots.size()) == v);
            for (int c = 0; c < v; ++c) CHECK(memory.slots[static_cast<std::size_t>(c)] == schedule::peak_in_flight(ops, c));
            CHECK(memory.received_gradients == (v > 1 ? schedule::peak_received_gradients(ops) : 0));
            // Early receives cost nothing: the plan (which assumes NCCL) holds for MPI runs too.
            const schedule::ScheduleMemory nccl = schedule::schedule_memory(Schedule::one_f_one_b, place, m);
            CHECK(memory.slots == nccl.slots);
            CHECK(memory.received_gradients == nccl.received_gradients);
          }
  // Early receives cost no memory under all-forward-all-backward and any 1F1B micro-batch count
  // either.
  for (int p = 2; p <= 8; ++p)
    for (int r = 0; r < p; ++r)
      for (int m = 1; m <= 4 * p + 3; ++m)
        for (const Schedule s : {Schedule::one_f_one_b, Schedule::all_forward_all_backward}) {
          INFO(schedule::schedule_name(s) << ", p " << p << ", rank " << r << ", m " << m);
          const PipelinePlace place{r, p, 1};
          const auto ops = schedule::pipeline_ops(s, place, m, true, Matching::by_tag);
          const schedule::ScheduleMemory nccl = schedule::schedule_memory(s, place, m);
          CHECK(schedule::peak_in_flight(ops) == nccl.slots.at(0));
          CHECK(schedule::schedule_memory(s, place, m, true, Matching::by_tag).slots == nccl.slots);
        }
  // Rank 0 keeps the most: p·2 micro-batches on its first chunk once m >= 2p (Megatron's warm-up).
  CHECK(schedule::schedule_memory(Schedule::one_f_one_b, PipelinePlace{0, 4, 2}, 192).slots == std::vector<int>{8, 4});
}

TEST_CASE("a model stage of v chunks holds virtual stages c·p + r", "[pipeline][interleaved][model]") {
  auto self = test::tp_group(1);
  model::GptShape shape = test::tiny_shape(1);
  shape.layers = 8;
  CHECK_THROWS_WITH(model::GptModel<float>(shape, 1, *self, 5, model::PipelineStage{0, 2, 3}),
                    test::contains("multiple of parallel.pipeline * parallel.virtual_stages"));
  CHECK_THROWS_WITH(model::GptModel<float>(shape, 1, *self, 5, model::PipelineStage{0, 1, 2}),
                    test::contains("parallel.virtual_stages = 2: expected 1 with parallel.pipeline = 1"));
  const int P = 2, v = 2;
  std::set<std::string> names;
  for (int r = 0; r < P; ++r) {
    model::GptModel<float> stage(shape, 2, *self, 5, model::PipelineStage{r, P, v});
    CHECK(stage.local_layers() == 4);
    for (int c = 0; c < v; ++c) CHECK(stage.chunk_first_layer(c) == (c * P + r) * 2);
    CHECK(stage.chunk_has_embedding(0) == (r == 0));
    CHECK_FALSE(stage.chunk_has_embedding(1));
    CHECK(stage.chunk_has_head(1) == (r == P - 1));
    CHECK_FALSE(stage.chunk_has_head(0));
    // Buckets in backward order: head, chunk 1's blocks down, chunk 0's blocks down, embedding.
    std::vector<std::string> buckets;
    for (const auto& b : stage.buckets()) buckets.push_back(b.name);
    const std::vector<std::string> want =
        r == 0 ? std::vector<std::string>{"layers/5", "layers/4", "layers/1", "layers/0", "embedding"}
               : std::vector<std::string>{"head", "layers/7", "layers/6", "layers/3", "layers/2"};
    CHECK(buckets == want);
    for (auto* p : stage.unique_parameters()) CHECK(names.insert(p->name).second);
    CHECK((stage.tied_copy() != nullptr) == (r == P - 1));
  }
  CHECK(names.size() == model::logical_tensors(shape).size());
}

TEST_CASE("v = 2: every layout gives the one-rank loss, gradients and gradient norm", "[pipeline][interleaved][mpi]") {
  for (const Layout& l : interleaved_layouts()) {
    INFO("tensor " << l.tensor << " x pipeline " << l.pipeline << " x data " << l.data << ", v = 2");
    const io::Deck ref_deck = interleaved_deck(1, 1, 1, 1, 4, l.layers);
    const io::Deck deck = interleaved_deck(l.tensor, l.pipeline, l.data, 2, 4, l.layers);
    // As for v = 1 (test_pipeline.cpp): 1e-5 at step 0, 1e-4 after two AdamW steps.
    for (const auto& [step, tol] : {std::pair<int, double>{0, 1e-5}, {2, 1e-4}}) {
      const Gradients ref = gradients_of(ref_deck, MPI_COMM_SELF, step);
      const Gradients got = gradients_of(deck, MPI_COMM_WORLD, step);
      INFO("step " << step << ": loss " << got.loss << " vs " << ref.loss << ", norm " << got.norm << " vs " << ref.norm);
      CHECK(std::fabs(got.loss - ref.loss) <= 1e-5 * std::fabs(ref.loss));
      CHECK(std::fabs(got.norm - ref.norm) <= tol * ref.norm);
      check_close(got.grads, ref.grads, tol);
    }
  }
}

// Weights after 6 AdamW steps: one rank's within 5e-4 of each tensor's largest element, for
// v = 2 as for v = 1 on the same layout: AdamW's m/sqrt(v) turns the fp32 rounding of a tiny
// gradient element into a step of up to lr (measured with v = 1 and v = 2 on pipeline 2 x data 2:
// 1.7e-4; a wrong gradient moves the weights by O(lr) = 1e-2 relative). The loss curve of v = 2
// is v = 1's bit for bit (each chunk accumulates its micro-batches in the same order).
TEST_CASE("v = 2: every weight after 6 steps, the loss curve and evaluation equal one rank; the tied copies stay equal",
          "[pipeline][interleaved][mpi]") {
  const int steps = 6;
  for (const Layout& l : interleaved_layouts())
    for (const bool zero : {false, true}) {
      if (zero && l.data == 1) continue;  // the distributed optimizer shards over data
      INFO("tensor " << l.tensor << " x pipeline " << l.pipeline << " x data " << l.data << ", v = 2"
                     << (zero ? ", distributed optimizer" : ""));
      const io::Deck ref_deck = interleaved_deck(1, 1, 1, 1, steps, l.layers);
      io::Deck deck = interleaved_deck(l.tensor, l.pipeline, l.data, 2, steps, l.layers);
      deck.optimizer.distributed = zero;
      io::Deck plain = deck;
      plain.parallel.virtual_stages = 1;
      parallel::Topology self(MPI_COMM_SELF, parallel::Layout{});
      train::TrainingRun ref(ref_deck, self);
      parallel::Topology topo(MPI_COMM_WORLD, layout_of(deck));
      train::TrainingRun run(deck, topo), without(plain, topo);
      for (int s = 0; s < steps; ++s) {
        const double want = ref.step(s).loss, got = run.step(s).loss;
        INFO("step " << s + 1 << ": " << got << " vs " << want);
        CHECK(std::fabs(got - want) <= 1e-5 * want);
        CHECK(without.step(s).loss == got);
      }
      CHECK(std::fabs(run.evaluate() - ref.evaluate()) <= 1e-5 * ref.evaluate());
      const Named want = logical_by_name(ref.model(), self.tp(), false);
      check_close(logical_by_name(run.model(), topo.tp(), false), want, 5e-4);
      check_close(logical_by_name(without.model(), topo.tp(), false), want, 5e-4);
      if (topo.in_embedding_group()) {  // bitwise: chunk 0 of rank 0 and chunk v − 1 of rank p − 1
        CHECK(test::tied_embedding_copies_identical(run.model(), topo));
      }
    }
}

TEST_CASE("v = 2: every recompute mode, with and without sequence parallelism, gives recompute = none's gradients "
          "bit for bit, and overlapped transfers those of waiting at once",
          "[pipeline][interleaved][recompute][mpi]") {
  for (const Layout& l : interleaved_layouts())
    for (const bool sp : {false, true}) {
      if (sp && l.tensor == 1) continue;
      INFO("tensor " << l.tensor << " x pipeline " << l.pipeline << " x data " << l.data << ", v = 2"
                     << (sp ? ", sequence parallel" : ""));
      const auto deck_of = [&](const char* mode) {
        io::Deck d = interleaved_deck(l.tensor, l.pipeline, l.data, 2, 4, l.layers);
        d.parallel.sequence_parallel = sp;
        d.training.recompute = mode;
        return d;
      };
      const Gradients none = gradients_of(deck_of("none"), MPI_COMM_WORLD, 1);
      for (const char* mode : {"selective", "full"}) {
        INFO("recompute = " << mode);
        const Gradients got = gradients_of(deck_of(mode), MPI_COMM_WORLD, 1);
        CHECK(got.loss == none.loss);
        CHECK(got.norm == none.norm);
        CHECK(got.grads == none.grads);
      }
      // The same gradients with every transfer completed right after it was posted.
      const io::Deck deck = deck_of("selective");
      parallel::Topology topo(MPI_COMM_WORLD, layout_of(deck));
      train::RunOptions at_once;
      at_once.overlap_pipeline_transfers = false;
      train::TrainingRun run(deck, topo, at_once);
      run.step(0);
      CHECK(run.compute_gradients(1) == none.loss);
      CHECK(logical_by_name(run.model(), topo.tp(), true) == none.grads);
      // And the one-rank gradients within the layouts' tolerance (sequence parallelism included).
      if (sp) {
        io::Deck ref_deck = interleaved_deck(1, 1, 1, 1, 4, l.layers);
        check_close(none.grads, gradients_of(ref_deck, MPI_COMM_SELF, 1).grads, 1e-4);
      }
    }
}

TEST_CASE("v = 2 in bf16 gives the one-rank bf16 loss, gradients and norm", "[pipeline][interleaved][mixed][mpi]") {
  for (const Layout& l : interleaved_layouts()) {
    INFO("tensor " << l.tensor << " x pipeline " << l.pipeline << " x data " << l.data << ", v = 2, bf16");
    io::Deck ref_deck = interleaved_deck(1, 1, 1, 1, 4, l.layers);
    io::Deck deck = interleaved_deck(l.tensor, l.pipeline, l.data, 2, 4, l.layers);
    ref_deck.training.precision = deck.training.precision = "bf16";
    const Gradients ref = gradients_of<kx::bf16>(ref_deck, MPI_COMM_SELF, 0);
    const Gradients got = gradients_of<kx::bf16>(deck, MPI_COMM_WORLD, 0);
    // The tolerances of the v = 1 bf16 layouts (test_pipeline.cpp): tensor parallelism rounds
    // partial sums to bf16, pipeline and data parallelism only sum fp32 differently.
    const double tol = l.tensor == 1 ? 1e-6 : 2e-2, loss_tol = l.tensor == 1 ? 1e-6 : 1e-4;
    CHECK(std::fabs(got.loss - ref.loss) <= loss_tol * std::fabs(ref.loss));
    CHECK(std::fabs(got.norm - ref.norm) <= tol * ref.norm);
    check_close(got.grads, ref.grads, tol);
  }
}

TEST_CASE("a checkpoint of an interleaved run loads into v = 1 and back", "[pipeline][interleaved][checkpoint][mpi]") {
  const int n = test::world_size();
  const int steps = 6, k = 3;
  test::SharedTempDir dir;
  const std::string extra = "[checkpoint]\ndir = \"" + dir.path() + "\"\nkeep = 10\n";
  struct Side {
    int tensor, pipeline, data, v;
  };
  std::vector<std::pair<Side, Side>> pairs;
  if (n == 2) pairs = {{{1, 2, 1, 2}, {1, 2, 1, 1}}, {{1, 2, 1, 1}, {1, 2, 1, 2}}, {{1, 2, 1, 2}, {1, 1, 2, 1}}};
  if (n == 4) pairs = {{{1, 4, 1, 2}, {1, 2, 2, 1}}, {{2, 2, 1, 1}, {1, 4, 1, 2}}, {{1, 2, 2, 2}, {2, 2, 1, 2}}};
  if (pairs.empty()) return;
  const int layers = 8;
  const io::Deck ref_deck = interleaved_deck(1, 1, 1, 1, steps, layers, extra);
  const auto reference = test::loss_curve(ref_deck, MPI_COMM_SELF, steps);
  int id = 0;
  for (const auto& [save, load] : pairs) {
    INFO("saved with " << save.tensor << "x" << save.pipeline << "x" << save.data << " v " << save.v
                       << ", resumed with " << load.tensor << "x" << load.pipeline << "x" << load.data << " v "
                       << load.v);
    const int file_step = 100 * ++id + k;
    {
      const io::Deck deck = interleaved_deck(save.tensor, save.pipeline, save.data, save.v, steps, layers, extra);
      parallel::Topology topo(MPI_COMM_WORLD, layout_of(deck));
      train::TrainingRun run(deck, topo);
      for (int s = 0; s < k; ++s) run.step(s);
      checkpoint::save_checkpoint(run.model(), deck, topo, file_step, 0);
    }
    const std::string file = checkpoint::checkpoint_path(dir.path(), file_step);
    const io::Deck deck = interleaved_deck(load.tensor, load.pipeline, load.data, load.v, steps, layers, extra);
    parallel::Topology topo(MPI_COMM_WORLD, layout_of(deck));
    train::TrainingRun run(deck, topo);
    checkpoint::load_weights(run.model(), topo, file, true);
    {
      parallel::Topology self(MPI_COMM_SELF, parallel::Layout{});
      train::TrainingRun whole(ref_deck, self);
      checkpoint::load_weights(whole.model(), self, file, true);
      const Named want = logical_by_name(whole.model(), self.tp(), false);
      for (const auto& [name, got] : logical_by_name(run.model(), topo.tp(), false)) {
        INFO(name);
        CHECK(got == want.at(name));  // bitwise the file's tensors
      }
    }
    for (int s = k; s < steps; ++s) {
      const double loss = run.step(s).loss;
      INFO("step " << s + 1);
      CHECK(std::fabs(loss - reference[static_cast<std::size_t>(s)]) <= 1e-5 * reference[static_cast<std::size_t>(s)]);
    }
  }
}

TEST_CASE("docs/design.md draws the interleaved schedule the simulator runs (p = 2, v = 2, m = 4)",
          "[pipeline][interleaved][docs]") {
  std::ifstream in(std::string(TPTRAIN_SOURCE_DIR) + "/docs/design.md");
  REQUIRE(in);
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string interleaved = schedule::draw(schedule::simulate(Schedule::one_f_one_b, 2, 4, 2, true, 1, 1));
  const std::string plain = schedule::draw(schedule::simulate(Schedule::one_f_one_b, 2, 4, 1, true, 2, 2));
  INFO(interleaved << plain);
  CHECK(doc.find("```\n" + interleaved + "```") != std::string::npos);
  CHECK(doc.find("```\n" + plain + "```") != std::string::npos);
}

TEST_CASE("deferred transfer waits and early receives give the gradients of waiting at once, under 1F1B, "
          "all-forward-all-backward and interleaved 1F1B",
          "[pipeline][interleaved][mpi]") {
  const int n = test::world_size();
  parallel::Topology topo(MPI_COMM_WORLD, layout_of(interleaved_deck(1, n, 1, 1, 4)));
  for (const int v : {1, 2})
    for (const Schedule schedule : {Schedule::one_f_one_b, Schedule::all_forward_all_backward}) {
      if (v > 1 && (schedule != Schedule::one_f_one_b || n == 1)) continue;  // v > 1 needs 2 stages
      INFO(schedule::schedule_name(schedule) << " on " << n << " stages, v = " << v);
      const io::Deck deck = interleaved_deck(1, n, 1, v, 4, 2 * n * v);
      train::RunOptions overlapped{schedule, true}, at_once{schedule, true};
      at_once.overlap_pipeline_transfers = false;
      train::TrainingRun a(deck, topo, overlapped), b(deck, topo, at_once);
      // The MPI backend matches by tag, so the overlapped run posts its receives a compute early
      // where that is free (pipeline_schedule.hpp); so does NCCL with a lane per flow.
      CHECK(a.pipeline().matching() ==
            (std::string(topo.pp().backend_name()) == "mpi" ? Matching::by_tag : Matching::per_flow));
      for (int s = 0; s < 2; ++s) CHECK(a.step(s).loss == b.step(s).loss);
      CHECK(a.compute_gradients(2) == b.compute_gradients(2));
      CHECK(logical_by_name(a.model(), topo.tp(), true) == logical_by_name(b.model(), topo.tp(), true));
    }
}
