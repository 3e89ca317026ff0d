// Each collective over Kokkos Views against hand-computed results, on whatever number of ranks
// the suite runs with (1, 2 and 4 under ctest).
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <mpi.h>
#include <vector>

#include "catch.hpp"
#include "src/parallel/collectives.hpp"
#include "src/parallel/mpi_communicator.hpp"
#include "src/schedule/transport.hpp"
#if defined(TPTRAIN_HAVE_NCCL) && defined(KOKKOS_ENABLE_CUDA) && !defined(TPTRAIN_EXEC_SPACE)
#include "src/parallel/nccl_communicator.hpp"
#endif

using namespace tptrain;
using namespace tptrain::parallel;

namespace {

// A communicator over a duplicate of the world (the test owns it).
std::unique_ptr<Communicator> world_comm() {
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  return make_communicator(dup);
}

template <class T>
Kokkos::View<T*, kx::MemSpace> filled(const std::string& label, std::size_t n, T (*f)(std::size_t)) {
  Kokkos::View<T*, kx::MemSpace> v(label, n);
  auto h = Kokkos::create_mirror_view(v);
  for (std::size_t i = 0; i < n; ++i) h(i) = f(i);
  Kokkos::deep_copy(v, h);
  return v;
}

template <class View>
auto on_host(const View& v) {
  auto h = Kokkos::create_mirror_view(v);
  Kokkos::deep_copy(h, v);
  return h;
}


}  // namespace

TEMPLATE_TEST_CASE("all_reduce sum and max", "[parallel][collectives][mpi]", float, double,
                   std::int32_t, std::int64_t) {
  auto comm = world_comm();
  const kx::ExecSpace exec;
  const int r = comm->rank(), n = comm->size();
  // rank r holds x_i = (r + 1) * (i + 1): sum = (i+1) n(n+1)/2, max = (i+1) n.
  Kokkos::View<TestType**, Kokkos::LayoutRight, kx::MemSpace> v("v", 3, 5);
  auto h = Kokkos::create_mirror_view(v);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) h(i, j) = static_cast<TestType>((r + 1) * (i * 5 + j + 1));
  Kokkos::deep_copy(v, h);
  Kokkos::View<TestType**, Kokkos::LayoutRight, kx::MemSpace> w("w", 3, 5);  // separate buffer
  Kokkos::deep_copy(w, v);

  all_reduce(*comm, exec, v, ReduceOp::sum);
  all_reduce(*comm, exec, w, ReduceOp::max);
  auto hs = on_host(v);
  auto hm = on_host(w);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) {
      const int k = i * 5 + j + 1;
      CHECK(hs(i, j) == static_cast<TestType>(k * n * (n + 1) / 2));
      CHECK(hm(i, j) == static_cast<TestType>(k * n));
    }
}

TEST_CASE("all_gather concatenates in rank order", "[parallel][collectives][mpi]") {
  auto comm = world_comm();
  const kx::ExecSpace exec;
  const int r = comm->rank(), n = comm->size();
  Kokkos::View<float*, kx::MemSpace> send("send", 4);
  Kokkos::deep_copy(send, static_cast<float>(10 * r));
  Kokkos::View<float*, kx::MemSpace> recv("recv", 4 * static_cast<std::size_t>(n));
  all_gather(*comm, exec, send, recv);
  auto h = on_host(recv);
  for (int q = 0; q < n; ++q)
    for (int i = 0; i < 4; ++i) CHECK(h(q * 4 + i) == 10.0f * q);

  Kokkos::View<float*, kx::MemSpace> wrong("wrong", 4 * static_cast<std::size_t>(n) + 1);
  CHECK_THROWS_AS(all_gather(*comm, exec, send, wrong), std::invalid_argument);
}

TEST_CASE("reduce_scatter gives each rank the sum of its block", "[parallel][collectives][mpi]") {
  auto comm = world_comm();
  const kx::ExecSpace exec;
  const int r = comm->rank(), n = comm->size();
  // send[q*3 + i] = r + q + i on rank r; block q summed over ranks = n(q+i) + n(n-1)/2.
  Kokkos::View<double*, kx::MemSpace> send("send", 3 * static_cast<std::size_t>(n));
  auto hs = Kokkos::create_mirror_view(send);
  for (int q = 0; q < n; ++q)
    for (int i = 0; i < 3; ++i) hs(q * 3 + i) = r + q + i;
  Kokkos::deep_copy(send, hs);
  Kokkos::View<double*, kx::MemSpace> recv("recv", 3);
  reduce_scatter(*comm, exec, send, recv, ReduceOp::sum);
  auto h = on_host(recv);
  for (int i = 0; i < 3; ++i) CHECK(h(i) == n * (r + i) + n * (n - 1) / 2.0);
}

TEMPLATE_TEST_CASE("in-place reduce_scatter and all_gather over one buffer of blocks equal the two-buffer forms",
                   "[parallel][collectives][zero][mpi]", float, double) {
  auto comm = world_comm();
  const kx::ExecSpace exec;
  const int r = comm->rank(), n = comm->size();
  const std::size_t block = 5, total = block * static_cast<std::size_t>(n);
  // Integers, distinct per rank and element: every order of summation gives the exact sum.
  const auto value = [&](std::size_t i) { return static_cast<TestType>((r + 1) * 100 + static_cast<int>(i) * 3); };
  Kokkos::View<TestType*, kx::MemSpace> buf("buf", total), send("send", total), recv("recv", block);
  auto h = Kokkos::create_mirror_view(buf);
  for (std::size_t i = 0; i < total; ++i) h(i) = value(i);
  Kokkos::deep_copy(buf, h);
  Kokkos::deep_copy(send, h);
  reduce_scatter(*comm, exec, send, recv, ReduceOp::sum);
  ireduce_scatter_in_place(*comm, exec, buf, ReduceOp::sum).wait_on(exec);
  const auto mine = std::make_pair(static_cast<std::size_t>(r) * block, static_cast<std::size_t>(r + 1) * block);
  auto got = on_host(buf);
  auto want = on_host(recv);
  for (std::size_t i = 0; i < block; ++i) {
    CHECK(got(mine.first + i) == want(i));
    // sum over ranks q of (q + 1) * 100 + 3 i (i: the index in the whole buffer)
    CHECK(want(i) == static_cast<TestType>(50 * n * (n + 1) + 3 * n * static_cast<int>(mine.first + i)));
  }
  // All-gather in place: every rank's block where it belongs, against the two-buffer form.
  Kokkos::View<TestType*, kx::MemSpace> gathered("gathered", total);
  all_gather(*comm, exec, Kokkos::subview(buf, mine), gathered);
  iall_gather_in_place(*comm, exec, buf).wait_on(exec);
  auto all = on_host(buf);
  auto ref = on_host(gathered);
  for (std::size_t i = 0; i < total; ++i) {
    CHECK(all(i) == ref(i));
    CHECK(all(i) == static_cast<TestType>(50 * n * (n + 1) + 3 * n * static_cast<int>(i)));
  }
  Kokkos::View<TestType*, kx::MemSpace> odd("odd", total + 1);
  if (n > 1) CHECK_THROWS_WITH(ireduce_scatter_in_place(*comm, exec, odd, ReduceOp::sum),
                               test::contains("not a multiple of the group size"));
}

TEST_CASE("broadcast from the first and the last rank", "[parallel][collectives][mpi]") {
  auto comm = world_comm();
  const kx::ExecSpace exec;
  const int r = comm->rank(), n = comm->size();
  for (int root : {0, n - 1}) {
    Kokkos::View<std::int32_t*, kx::MemSpace> v("v", 6);
    Kokkos::deep_copy(v, r == root ? 100 + root : -1);
    broadcast(*comm, exec, v, root);
    auto h = on_host(v);
    for (int i = 0; i < 6; ++i) CHECK(h(i) == 100 + root);
  }
}

TEST_CASE("non-blocking collectives overlap and complete on wait", "[parallel][collectives][mpi]") {
  auto comm = world_comm();
  const kx::ExecSpace exec;
  const int n = comm->size();
  Kokkos::View<float*, kx::MemSpace> a("a", 1000), b("b", 1000);
  Kokkos::deep_copy(a, 1.0f);
  Kokkos::deep_copy(b, 2.0f);
  Request ra = iall_reduce(*comm, exec, a, ReduceOp::sum);
  Request rb = iall_reduce(*comm, exec, b, ReduceOp::max);
  rb.wait();
  ra.wait();
  ra.wait();  // idempotent
  auto ha = on_host(a);
  auto hb = on_host(b);
  CHECK(ha(0) == static_cast<float>(n));
  CHECK(ha(999) == static_cast<float>(n));
  CHECK(hb(500) == 2.0f);
  CHECK(all_reduce_scalar(*comm, 1.5, ReduceOp::sum) == 1.5 * n);
#if defined(TPTRAIN_HAVE_NCCL) && defined(KOKKOS_ENABLE_CUDA) && !defined(TPTRAIN_EXEC_SPACE)
  const bool nccl = std::is_same<kx::ExecSpace, Kokkos::Cuda>::value;
#else
  const bool nccl = false;
#endif
  CHECK(std::string(comm->backend_name()) == (nccl ? "nccl" : "mpi"));
#if defined(TPTRAIN_HAVE_NCCL) && defined(KOKKOS_ENABLE_CUDA) && !defined(TPTRAIN_EXEC_SPACE)
  // Device collectives run on the communicator's own stream, not on the compute instance's.
  if (nccl) {
    CHECK(comm->communication_stream() != nullptr);
    CHECK(comm->communication_stream() != static_cast<const void*>(exec.cuda_stream()));
  }
#endif
}

// Sends and receives of one exchange go in one group: NCCL runs point-to-point calls of one stream
// one after the other, so a receive posted alone before its rank's send would wait forever (on one
// rank: a send to itself outside a group is refused as invalid usage).
TEST_CASE("a grouped exchange around a ring completes for the consumer instance", "[parallel][collectives][mpi]") {
  auto comm = world_comm();
  const kx::ExecSpace exec;
  const int r = comm->rank(), n = comm->size();
  Kokkos::View<float*, kx::MemSpace> out("out", 16), in("in", 16), back("back", 16);
  Kokkos::deep_copy(out, static_cast<float>(r));
  std::vector<Request> reqs;
  // Send right and receive from the left as one group (NCCL: ncclGroupStart/End).
  comm->group_start(exec);
  reqs.push_back(isend(*comm, exec, out, (r + 1) % n, 3));
  reqs.push_back(irecv(*comm, exec, in, (r + n - 1) % n, 3));
  reqs.push_back(comm->group_end());
  wait_all_on(reqs.data(), reqs.size(), exec);
  for (const auto& q : reqs) CHECK_FALSE(q.pending());
  // A kernel queued on the consumer instance after wait_on reads the received data.
  Kokkos::parallel_for("tptrain::test::consume", Kokkos::RangePolicy<kx::ExecSpace>(exec, 0, 16),
                       KOKKOS_LAMBDA(int i) { back(i) = 2.0f * in(i); });
  exec.fence();
  auto h = on_host(back);
  for (int i = 0; i < 16; ++i) CHECK(h(i) == 2.0f * static_cast<float>((r + n - 1) % n));
}

// Lanes (Communicator::open_lanes): each rank posts its receive from the left before its send to
// the right, not grouped. In one NCCL queue every rank's receive would hold back its send: a ring
// of waits. On the pipeline's lanes (schedule::pipeline_lane: the flow's sender decides) the receive
// and the send are on different lanes and both complete; MPI opens none and matches by tag.
TEST_CASE("lanes: a receive posted before the send behind it completes", "[parallel][collectives][mpi]") {
  auto comm = world_comm();
  const int r = comm->rank(), n = comm->size();
  if (n < 2) return;  // a transfer to itself is NCCL's invalid usage outside a group
  const int lanes = comm->open_lanes(schedule::pipeline_lanes(n));
  CHECK((lanes == 0) == (std::string(comm->backend_name()) == "mpi"));
  CHECK(comm->open_lanes(schedule::pipeline_lanes(n)) == lanes);  // again: nothing more to open
  const kx::ExecSpace exec;
  Kokkos::View<float*, kx::MemSpace> out("out", 64), in("in", 64);
  Kokkos::deep_copy(out, static_cast<float>(r));
  const int left = (r + n - 1) % n, right = (r + 1) % n;
  for (int round = 0; round < 3; ++round) {  // in order on each lane, round after round
    Request received = irecv(*comm, exec, in, left, 7, lanes > 0 ? schedule::pipeline_lane(left, n, 0) : -1);
    Request sent = isend(*comm, exec, out, right, 7, lanes > 0 ? schedule::pipeline_lane(r, n, 0) : -1);
    received.wait_on(exec);
    sent.wait_on(exec);
    auto h = on_host(in);
    CHECK(h(0) == static_cast<float>(left));
    CHECK(h(63) == static_cast<float>(left));
  }
}

#if defined(TPTRAIN_HAVE_NCCL) && defined(KOKKOS_ENABLE_CUDA) && !defined(TPTRAIN_EXEC_SPACE)
TEST_CASE("NCCL: the events of collectives come from a pool that stops growing", "[parallel][collectives][mpi]") {
  auto comm = world_comm();
  auto* nccl = dynamic_cast<NcclCommunicator*>(comm.get());
  if (nccl == nullptr) return;
  const kx::ExecSpace exec;
  Kokkos::View<float*, kx::MemSpace> a("a", 256);
  const auto some_collectives = [&] {
    std::vector<Request> pending;
    for (int i = 0; i < 4; ++i) pending.push_back(iall_reduce(*comm, exec, a, ReduceOp::sum));
    wait_all_on(pending.data(), pending.size(), exec);
    all_reduce(*comm, exec, a, ReduceOp::max);
    exec.fence();
  };
  some_collectives();
  const std::size_t created = nccl->events_created();
  CHECK(created <= 5);  // at most one per operation in flight at once
  for (int i = 0; i < 3; ++i) some_collectives();
  CHECK(nccl->events_created() == created);
}
#endif

TEST_CASE("Request: wait_on completes, then() runs once, a dropped request is completed", "[parallel][collectives]") {
  const kx::ExecSpace exec;
  int host_waits = 0, device_waits = 0, thens = 0;
  {
    Request r([&] { ++host_waits; }, [&](const kx::ExecSpace&) { ++device_waits; });
    Request chained = std::move(r).then([&] { ++thens; });
    CHECK_FALSE(r.pending());
    chained.wait_on(exec);
    chained.wait_on(exec);  // idempotent
    chained.wait();
  }
  CHECK(host_waits == 0);
  CHECK(device_waits == 1);
  CHECK(thens == 1);
  {
    Request host_only([&] { ++host_waits; });
    host_only.wait_on(exec);  // no device completion: the host one
  }
  CHECK(host_waits == 1);
  { Request dropped([&] { ++host_waits; }, [&](const kx::ExecSpace&) { ++device_waits; }); }
  CHECK(host_waits == 2);  // the destructor completes on the host
  CHECK(device_waits == 1);
}

TEST_CASE("staging buffers are reused, one per pending operation", "[parallel][collectives]") {
  StagingPool pool;
  {
    auto a = pool.acquire(1000);
    auto b = pool.acquire(10);  // a is busy: a second buffer
    CHECK(a.get() != b.get());
    CHECK(pool.allocations() == 2);
  }
  for (int i = 0; i < 5; ++i) {  // the steady state of a step allocates nothing
    auto a = pool.acquire(800);
    auto b = pool.acquire(10);
    CHECK(a.get() != b.get());
  }
  CHECK(pool.allocations() == 2);
  auto big = pool.acquire(4000);  // larger than any: a free buffer grows
  CHECK(pool.allocations() == 3);
}

// ---- 16-bit floats (mixed precision): bits move unchanged, reductions are float arithmetic ----

namespace {

template <class T>
T from_bits(std::uint16_t bits) {
  T v;
  v.bits = bits;
  return v;
}

// Unit roundoff of the storage type: a rounding to nearest changes a value by at most u·|value|.
template <class T>
constexpr double unit_roundoff() {
  return std::is_same<T, kx::bf16>::value ? 1.0 / 256.0 : 1.0 / 2048.0;  // 2^-8, 2^-11
}

}  // namespace

// The reduction operation itself, on every rank count (MPI_Reduce_local applies it without
// communication). Integer addition of the bit patterns would give 0x3f80 + 0x3f80 = 0x7f00 (about
// 1.7e38) for bf16 1 + 1, and an unsigned maximum would pick -1 (0xbf80) over 2 (0x4000).
TEMPLATE_TEST_CASE("16-bit reductions are float arithmetic rounded to nearest even and not integer sums",
                   "[parallel][collectives][mpi]", kx::bf16, kx::fp16) {
  const DataType type = data_type_of<TestType>();
  CHECK(size_of(type) == 2);
  // One ulp above 1 is 2^-7 (bf16) or 2^-10 (fp16); adding half an ulp is a tie: even wins.
  const float ulp = std::is_same<TestType, kx::bf16>::value ? 1.0f / 128 : 1.0f / 1024;
  std::vector<TestType> in = {TestType(1.0f), TestType(ulp / 2), TestType(ulp / 2), TestType(-3.0f)};
  std::vector<TestType> inout = {TestType(1.0f), TestType(1.0f), TestType(1.0f + ulp), TestType(0.5f)};
  MPI_Reduce_local(in.data(), inout.data(), 4, mpi_type(type), mpi_op(ReduceOp::sum, type));
  CHECK(float(inout[0]) == 2.0f);
  CHECK(float(inout[1]) == 1.0f);               // 1 + ulp/2: tie, down to the even 1
  CHECK(float(inout[2]) == 1.0f + 2 * ulp);     // (1 + ulp) + ulp/2: tie, up to the even 1 + 2 ulp
  CHECK(float(inout[3]) == -2.5f);

  const TestType nan = from_bits<TestType>(std::is_same<TestType, kx::bf16>::value ? 0x7fc0 : 0x7e00);
  std::vector<TestType> a = {TestType(-1.0f), TestType(2.0f), nan, TestType(0.0f)};
  std::vector<TestType> b = {TestType(2.0f), TestType(-1.0f), TestType(1.0f), nan};
  MPI_Reduce_local(a.data(), b.data(), 4, mpi_type(type), mpi_op(ReduceOp::max, type));
  CHECK(float(b[0]) == 2.0f);
  CHECK(float(b[1]) == 2.0f);
  CHECK(std::isnan(float(b[2])));  // NaN propagates (an overflow check must still see it)
  CHECK(std::isnan(float(b[3])));
}

// Values that are small integers: every partial sum is exact in bf16 (integers up to 256) and
// fp16 (up to 2048), so the result must equal the exact sum whatever order the ranks add in.
TEMPLATE_TEST_CASE("16-bit all_reduce sum and max are exact on representable sums",
                   "[parallel][collectives][mpi]", kx::bf16, kx::fp16) {
  auto comm = world_comm();
  const kx::ExecSpace exec;
  const int r = comm->rank(), n = comm->size();
  // rank r holds (r + 1)(i + 1): sum (i+1) n(n+1)/2 <= 16 * 10 on 4 ranks, max (i+1) n.
  Kokkos::View<TestType*, kx::MemSpace> v("v", 16), w("w", 16);
  auto h = Kokkos::create_mirror_view(v);
  for (int i = 0; i < 16; ++i) h(i) = TestType(static_cast<float>((r + 1) * (i + 1)));
  Kokkos::deep_copy(v, h);
  Kokkos::deep_copy(w, h);
  all_reduce(*comm, exec, v, ReduceOp::sum);
  all_reduce(*comm, exec, w, ReduceOp::max);
  auto hs = on_host(v);
  auto hm = on_host(w);
  for (int i = 0; i < 16; ++i) {
    CHECK(float(hs(i)) == static_cast<float>((i + 1) * n * (n + 1) / 2));
    CHECK(float(hm(i)) == static_cast<float>((i + 1) * n));
  }
  // Every rank holds 1: 1 + 1 + ... must be n (integer addition of the bits would not be).
  Kokkos::View<TestType*, kx::MemSpace> ones("ones", 5);
  Kokkos::deep_copy(ones, TestType(1.0f));
  all_reduce(*comm, exec, ones, ReduceOp::sum);
  auto ho = on_host(ones);
  for (int i = 0; i < 5; ++i) CHECK(float(ho(i)) == static_cast<float>(n));
}

// Generic values: the backend adds the P rounded inputs in some order, rounding each of the P-1
// partial sums once (MPI: our operation; NCCL: float accumulate, round per step). Each rounding moves
// a partial sum by at most u·|partial| <= u·Σ|x_r|(1+u)^(P-2), so |result - Σ x_r| <=
// (P-1)·u·Σ|x_r|·(1+u)^(P-2), plus nothing else: the inputs themselves are exact 16-bit values and
// their float sum is exact here (few terms, nearby exponents). Every rank must end with the same bits
// (data-parallel replicas stay identical).
TEMPLATE_TEST_CASE("16-bit all_reduce sum of generic values is within P-1 roundings and identical on every rank",
                   "[parallel][collectives][mpi]", kx::bf16, kx::fp16) {
  auto comm = world_comm();
  const kx::ExecSpace exec;
  const int r = comm->rank(), n = comm->size();
  const int len = 64;
  auto input = [](int rank, int i) {
    return TestType(0.1f * static_cast<float>(rank + 1) + 0.37f * static_cast<float>(i % 11) -
                    1.3f + 0.013f * static_cast<float>(i));
  };
  Kokkos::View<TestType*, kx::MemSpace> v("v", len);
  auto h = Kokkos::create_mirror_view(v);
  for (int i = 0; i < len; ++i) h(i) = input(r, i);
  Kokkos::deep_copy(v, h);
  all_reduce(*comm, exec, v, ReduceOp::sum);
  auto hs = on_host(v);
  const double u = unit_roundoff<TestType>();
  for (int i = 0; i < len; ++i) {
    double exact = 0, magnitude = 0;
    for (int q = 0; q < n; ++q) {
      exact += float(input(q, i));
      magnitude += std::fabs(float(input(q, i)));
    }
    const double bound = (n - 1) * u * magnitude * std::pow(1 + u, std::max(n - 2, 0));
    CHECK(std::fabs(float(hs(i)) - exact) <= bound);
  }
  Kokkos::View<TestType*, kx::MemSpace> all("all", static_cast<std::size_t>(len) * n);
  all_gather(*comm, exec, v, all);
  auto ha = on_host(all);
  for (int q = 0; q < n; ++q)
    for (int i = 0; i < len; ++i) CHECK(ha(q * len + i).bits == hs(i).bits);
}

TEST_CASE("bf16 reduce_scatter gives each rank the sum of its block", "[parallel][collectives][mpi]") {
  auto comm = world_comm();
  const kx::ExecSpace exec;
  const int r = comm->rank(), n = comm->size();
  // send[q*3 + i] = r + q + i on rank r; block q summed = n(q+i) + n(n-1)/2 (small integers: exact).
  Kokkos::View<kx::bf16*, kx::MemSpace> send("send", 3 * static_cast<std::size_t>(n));
  auto hs = Kokkos::create_mirror_view(send);
  for (int q = 0; q < n; ++q)
    for (int i = 0; i < 3; ++i) hs(q * 3 + i) = kx::bf16(static_cast<float>(r + q + i));
  Kokkos::deep_copy(send, hs);
  Kokkos::View<kx::bf16*, kx::MemSpace> recv("recv", 3);
  reduce_scatter(*comm, exec, send, recv, ReduceOp::sum);
  auto h = on_host(recv);
  for (int i = 0; i < 3; ++i) CHECK(float(h(i)) == static_cast<float>(n * (r + i) + n * (n - 1) / 2));
}

// Moving data must not touch it: NaN payloads, signed zeros, subnormals and infinities arrive with
// the same bits.
TEMPLATE_TEST_CASE("16-bit all_gather and broadcast and send/recv move the bits unchanged",
                   "[parallel][collectives][mpi]", kx::bf16, kx::fp16) {
  auto comm = world_comm();
  const kx::ExecSpace exec;
  const int r = comm->rank(), n = comm->size();
  const std::uint16_t patterns[] = {0x7fc1, 0xffff, 0x8000, 0x0001, 0x7c00, 0x7f80, 0x3c00, 0x1234};
  auto bits = [&](int rank, int i) {
    return static_cast<std::uint16_t>(patterns[i % 8] ^ ((rank << 1) & 0x6) ^ (i >= 8 ? 0x0100 : 0));
  };
  Kokkos::View<TestType*, kx::MemSpace> send("send", 16);
  auto h = Kokkos::create_mirror_view(send);
  for (int i = 0; i < 16; ++i) h(i) = from_bits<TestType>(bits(r, i));
  Kokkos::deep_copy(send, h);

  Kokkos::View<TestType*, kx::MemSpace> gathered("gathered", 16 * static_cast<std::size_t>(n));
  all_gather(*comm, exec, send, gathered);
  auto hg = on_host(gathered);
  for (int q = 0; q < n; ++q)
    for (int i = 0; i < 16; ++i) CHECK(hg(q * 16 + i).bits == bits(q, i));

  Kokkos::View<TestType*, kx::MemSpace> b("b", 16);
  Kokkos::deep_copy(b, send);
  broadcast(*comm, exec, b, n - 1);
  auto hb = on_host(b);
  for (int i = 0; i < 16; ++i) CHECK(hb(i).bits == bits(n - 1, i));

  Kokkos::View<TestType*, kx::MemSpace> in("in", 16);
  std::vector<Request> reqs;
  comm->group_start(exec);
  reqs.push_back(isend(*comm, exec, send, (r + 1) % n, 5));
  reqs.push_back(irecv(*comm, exec, in, (r + n - 1) % n, 5));
  reqs.push_back(comm->group_end());
  wait_all_on(reqs.data(), reqs.size(), exec);
  auto hi = on_host(in);
  for (int i = 0; i < 16; ++i) CHECK(hi(i).bits == bits((r + n - 1) % n, i));
}

// Rank r sends (r + q) % 3 elements to rank q (zero for some pairs), each element naming its
// sender, its receiver and its index: every block arrives whole, in rank order, where the counts
// say; and all_to_all_counts exchanges the counts themselves.
TEST_CASE("all_to_all moves uneven blocks, empty ones included", "[parallel][collectives][moe][mpi]") {
  auto comm = world_comm();
  const kx::ExecSpace exec;
  const int r = comm->rank(), n = comm->size();
  const auto count = [](int from, int to) { return static_cast<std::size_t>((from + to) % 3); };
  std::vector<std::int64_t> send_counts(static_cast<std::size_t>(n));
  std::vector<std::size_t> sc(static_cast<std::size_t>(n)), rc(static_cast<std::size_t>(n));
  std::size_t send_total = 0, recv_total = 0;
  for (int q = 0; q < n; ++q) {
    sc[q] = count(r, q);
    rc[q] = count(q, r);
    send_counts[q] = static_cast<std::int64_t>(sc[q]);
    send_total += sc[q];
    recv_total += rc[q];
  }
  const std::vector<std::int64_t> received = all_to_all_counts(*comm, send_counts);
  for (int q = 0; q < n; ++q) CHECK(received[q] == static_cast<std::int64_t>(rc[q]));
  Kokkos::View<double*, kx::MemSpace> send("send", std::max<std::size_t>(send_total, 1));
  Kokkos::View<double*, kx::MemSpace> recv("recv", std::max<std::size_t>(recv_total, 1));
  auto hs = Kokkos::create_mirror_view(send);
  std::size_t at = 0;
  for (int q = 0; q < n; ++q)
    for (std::size_t i = 0; i < sc[q]; ++i) hs(at++) = 1000.0 * r + 10.0 * q + double(i);
  Kokkos::deep_copy(send, hs);
  iall_to_all(*comm, exec, send, sc, recv, rc).wait_on(exec);
  auto hr = on_host(recv);
  at = 0;
  for (int q = 0; q < n; ++q)
    for (std::size_t i = 0; i < rc[q]; ++i) CHECK(hr(at++) == 1000.0 * q + 10.0 * r + double(i));
  std::vector<std::size_t> wrong(static_cast<std::size_t>(n) + 1, 0);
  CHECK_THROWS_AS(iall_to_all(*comm, exec, send, wrong, recv, rc), std::invalid_argument);
}
