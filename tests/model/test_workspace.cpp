// The stage workspace: one allocation per shared scratch name, byte counts by category.
#include <stdexcept>

#include "catch.hpp"
#include "src/model/workspace.hpp"

using tptrain::model::BufferCategory;
using tptrain::model::Workspace;

TEST_CASE("workspace: a shared scratch name is one allocation for every layer", "[workspace]") {
  Workspace<float> ws;
  auto a0 = ws.matrix("layers/0.x", BufferCategory::activation, 4, 3);
  auto a1 = ws.matrix("layers/1.x", BufferCategory::activation, 4, 3);
  auto s0 = ws.matrix("block.out", BufferCategory::scratch, 4, 3);
  auto s1 = ws.matrix("block.out", BufferCategory::scratch, 4, 3);
  auto p = ws.tensor4("attention.probs", BufferCategory::scratch, 2, 1, 3, 3);
  auto v = ws.vector("lm_head.loss", BufferCategory::stage, 5);
  CHECK(a0.data() != a1.data());
  CHECK(s0.data() == s1.data());
  CHECK(s0.extent(0) == 4);
  CHECK(s0.extent(1) == 3);
  CHECK(p.extent(3) == 3);
  CHECK(v.extent(0) == 5);
  REQUIRE(ws.entries().size() == 5);  // block.out once
  CHECK(ws.bytes(BufferCategory::activation) == 2 * 12 * sizeof(float));
  CHECK(ws.bytes(BufferCategory::scratch) == (12 + 18) * sizeof(float));
  CHECK(ws.bytes(BufferCategory::stage) == 5 * sizeof(float));
  CHECK(ws.total_bytes() == (24 + 30 + 5) * sizeof(float));
  // Writes through one layer's view are seen by the next: the same memory.
  Kokkos::deep_copy(s0, 2.5f);
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), s1);
  CHECK(h(3, 2) == 2.5f);
}

TEST_CASE("workspace: a shared scratch name asked for with another shape is a programming error",
          "[workspace]") {
  Workspace<double> ws;
  ws.matrix("attention.d_ctx", BufferCategory::scratch, 4, 3);
  CHECK_THROWS_AS(ws.matrix("attention.d_ctx", BufferCategory::scratch, 4, 4), std::logic_error);
}

TEST_CASE("workspace: the attention's and the MLP's scratch share one region", "[workspace]") {
  using tptrain::model::ScratchPhase;
  Workspace<float> ws(1024);
  auto d_qkv = ws.matrix("attention.d_qkv", BufferCategory::scratch, 10, 3, ScratchPhase::attention);  // 120 bytes
  auto sum = ws.vector<double>("attention.dq_sum", BufferCategory::scratch, 20, ScratchPhase::attention);
  auto a = ws.matrix("mlp.a", BufferCategory::scratch, 8, 8, ScratchPhase::mlp);
  auto out = ws.matrix("block.out", BufferCategory::scratch, 2, 2);
  // Each part from the region's start, its buffers on 128-byte boundaries.
  CHECK(static_cast<void*>(a.data()) == static_cast<void*>(d_qkv.data()));
  CHECK(reinterpret_cast<const char*>(sum.data()) - reinterpret_cast<const char*>(d_qkv.data()) == 128);
  CHECK(out.data() != a.data());
  // The region counts once, its buffers not again.
  CHECK(ws.bytes(BufferCategory::scratch) == 1024 + 4 * sizeof(float));
  CHECK(ws.total_bytes() == 1024 + 4 * sizeof(float));
  std::size_t in_region = 0;
  for (const auto& e : ws.entries()) in_region += e.in_region ? 1 : 0;
  CHECK(in_region == 3);
  // Requested again: the same view; a part beyond the region: a programming error.
  CHECK(ws.matrix("mlp.a", BufferCategory::scratch, 8, 8, ScratchPhase::mlp).data() == a.data());
  CHECK_THROWS_AS(ws.matrix("mlp.dh", BufferCategory::scratch, 200, 2, ScratchPhase::mlp), std::logic_error);
  // Without a region (a layer built on its own) each buffer is its own allocation.
  Workspace<float> apart;
  auto x = apart.matrix("attention.d_qkv", BufferCategory::scratch, 10, 3, ScratchPhase::attention);
  auto y = apart.matrix("mlp.a", BufferCategory::scratch, 8, 8, ScratchPhase::mlp);
  CHECK(x.data() != y.data());
  CHECK(apart.total_bytes() == (30 + 64) * sizeof(float));
}
