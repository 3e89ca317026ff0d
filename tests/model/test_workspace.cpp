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
