// bench --trace's timeline (src/driver/bench_trace.hpp): phases to streams and names, merging of
// touching intervals, times relative to the step's start; the phase clock's recording of them
// (src/util/phases.hpp) under pipeline ops.
#include <string>
#include <vector>

#include "catch.hpp"
#include "src/driver/bench_trace.hpp"
#include "src/util/phases.hpp"

using namespace tptrain;
using util::Phase;
using util::StepOp;

TEST_CASE("step ops are named as the simulated trace names them", "[bench]") {
  CHECK(driver::step_op_name({StepOp::forward, 3, 0}) == "forward 3.0");
  CHECK(driver::step_op_name({StepOp::backward, 0, 1}) == "backward 0.1");
  CHECK(driver::step_op_name({}).empty());
  CHECK(std::string(driver::trace_stream_name(driver::TraceStream::data)) == "data-parallel");
}

TEST_CASE("trace spans: a stream per communicator, touching intervals merged", "[bench]") {
  const StepOp f0{StepOp::forward, 0, 0}, b0{StepOp::backward, 0, 0};
  // A forward whose GEMM, attention and GEMM are cut by a tensor-parallel all-reduce, a backward
  // with a data-parallel bucket reduction inside, then the optimizer outside every op.
  const std::vector<util::PhaseInterval> intervals = {
      {Phase::gemm, f0, 10.0, 10.5},       {Phase::attention, f0, 10.5, 11.0}, {Phase::tp_comm, f0, 11.0, 11.25},
      {Phase::gemm, f0, 11.25, 12.0},      {Phase::gemm, b0, 12.0, 13.0},      {Phase::dp_comm, b0, 13.0, 13.5},
      {Phase::norms_elementwise, b0, 13.5, 14.0}, {Phase::optimizer, {}, 14.0, 14.5}, {Phase::other, {}, 14.5, 14.75},
  };
  driver::TraceStreams all{};
  all.fill(true);
  const std::vector<io::TraceSpan> s = driver::trace_spans(2, intervals, 10.0, all);
  REQUIRE(s.size() == 8);
  const auto is = [](const io::TraceSpan& x, const std::string& name, int stream, double start_us, double dur_us) {
    INFO(x.name << " on " << x.stream << " at " << x.start_us << " for " << x.duration_us);
    CHECK(x.name == name);
    CHECK(x.rank == 2);
    CHECK(x.stream == stream);
    CHECK(x.start_us == Approx(start_us));
    CHECK(x.duration_us == Approx(dur_us));
  };
  is(s[0], "forward 0.0", 0, 0.0, 1.0e6);  // GEMM and attention: one span
  is(s[1], "all-reduce (tensor parallel)", 1, 1.0e6, 0.25e6);
  is(s[2], "forward 0.0", 0, 1.25e6, 0.75e6);  // after the all-reduce: a span of its own
  is(s[3], "backward 0.0", 0, 2.0e6, 1.0e6);   // touches the forward, another name
  is(s[4], "all-reduce gradients", 5, 3.0e6, 0.5e6);
  is(s[5], "backward 0.0", 0, 3.5e6, 0.5e6);
  is(s[6], "optimizer", 0, 4.0e6, 0.5e6);
  is(s[7], "other", 0, 4.5e6, 0.25e6);
  CHECK(s[1].category == "tensor");
  CHECK(s[6].category == "optimizer");

  // Tensor 1 (a layout without the stream): its phase's time is the forward's, one span of 2 s.
  parallel::Layout data2;
  data2.data = 2;
  const driver::TraceStreams streams = driver::trace_streams(data2);
  CHECK_FALSE(streams[static_cast<int>(driver::TraceStream::tensor)]);
  CHECK(streams[static_cast<int>(driver::TraceStream::data)]);
  const std::vector<io::TraceSpan> t = driver::trace_spans(0, intervals, 10.0, streams);
  REQUIRE(t.size() == 6);
  CHECK(t[0].name == "forward 0.0");
  CHECK(t[0].duration_us == Approx(2.0e6));
  CHECK(t[2].name == "all-reduce gradients");
  // Context parallelism reduces the gradients over its ranks too: a data-parallel stream.
  parallel::Layout context2;
  context2.context = 2;
  CHECK(driver::trace_streams(context2)[static_cast<int>(driver::TraceStream::data)]);
}

TEST_CASE("trace spans: host gaps under 10 us between ops are no spans", "[bench]") {
  driver::TraceStreams all{};
  all.fill(true);
  const StepOp f1{StepOp::forward, 1, 0};
  // A pipeline post, 2 us of bookkeeping, its wait, 2 us, a forward; then 20 us of host work (a
  // span) and another wait: after a span of another name, not merged.
  const std::vector<util::PhaseInterval> intervals = {
      {Phase::pipeline_wait, {}, 0.0, 5e-6},      {Phase::other, {}, 5e-6, 7e-6},
      {Phase::pipeline_wait, {}, 7e-6, 100e-6},   {Phase::other, {}, 100e-6, 102e-6},
      {Phase::gemm, f1, 102e-6, 500e-6},          {Phase::other, {}, 500e-6, 520e-6},
      {Phase::pipeline_wait, {}, 520e-6, 600e-6},
  };
  const std::vector<io::TraceSpan> s = driver::trace_spans(0, intervals, 0.0, all);
  REQUIRE(s.size() == 4);
  CHECK(s[0].name == "send/recv pipeline");
  CHECK(s[0].start_us == Approx(0.0));
  CHECK(s[0].duration_us == Approx(100.0));  // post, gap, wait
  CHECK(s[1].name == "forward 1.0");
  CHECK(s[1].start_us == Approx(102.0));
  CHECK(s[2].name == "other");
  CHECK(s[2].duration_us == Approx(20.0).margin(1e-6));
  CHECK(s[3].name == "send/recv pipeline");
  CHECK(s[3].start_us == Approx(520.0));
}

TEST_CASE("the phase clock records intervals under the op they ran in", "[bench]") {
  auto& clock = util::PhaseClock::instance();
  REQUIRE_FALSE(clock.timing());
  std::vector<util::PhaseInterval> got;
  clock.record(&got);
  clock.set_timing(true);
  {
    util::PhaseScope step(Phase::other);
    {
      util::StepOpScope op(StepOp::forward, 1, 0);
      util::PhaseScope gemm(Phase::gemm);
    }
    util::PhaseScope optimizer(Phase::optimizer);
  }
  clock.set_timing(false);
  clock.record(nullptr);
  clock.reset();
  // Zero-length intervals are dropped (a clock tick may separate boundaries or not): compare the
  // non-empty ones' phases and ops, and that they follow each other without a gap.
  for (std::size_t i = 1; i < got.size(); ++i) CHECK(got[i].start == got[i - 1].end);
  for (const util::PhaseInterval& i : got) {
    if (i.phase == Phase::gemm) {
      CHECK(i.op.kind == StepOp::forward);
      CHECK(i.op.micro_batch == 1);
    }
    if (i.phase == Phase::optimizer) CHECK(i.op.kind == StepOp::none);
  }
  CHECK(clock.op().kind == StepOp::none);
}
