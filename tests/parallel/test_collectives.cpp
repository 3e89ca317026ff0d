// Each collective over Kokkos Views against hand-computed results, on whatever number of ranks
// the suite runs with (1, 2 and 4 under ctest).
#include <Kokkos_Core.hpp>
#include <mpi.h>

#include "catch.hpp"
#include "src/parallel/collectives.hpp"
#include "src/parallel/mpi_communicator.hpp"

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
