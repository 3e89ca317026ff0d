// The whole model: finite-difference gradients (double), and every tensor-parallel layout
// against tensor = 1 (fp32): same initial weights, same loss, same gradients.
#include <cmath>

#include "catch.hpp"
#include "tests/model/model_test_util.hpp"

using namespace tptrain;
using tptrain::test::logical;

namespace {

// Central finite differences of the mean loss against the analytic gradient, for a few
// elements of every parameter (chosen by a fixed generator), on every layout the world allows.
// `sequence_parallel`: with parallel.sequence_parallel (seq_length 4, which every tensor size
// divides), the gradients of the parameters that see a rank's tokens only summed over the group
// as the trainer sums them.
// `llama`: the tiny shape as a llama model (RMSNorm, rotary grouped-query attention with 2
// key/value heads where the tensor size allows, SwiGLU, untied head).
// `deepseek`: the tiny shape as DeepSeek-V3 (multi-head latent attention, a dense first block
// and a mixture of 4 sigmoid-routed experts with a shared one) with 2 multi-token prediction
// modules: the objective is the training loss, the main mean loss plus λ/D times the modules'
// losses over the same denominator.
template <class T>
void check_gradients_by_finite_differences(int tp_size, bool sequence_parallel = false, bool llama = false,
                                           bool deepseek = false) {
  auto tp = test::tp_group(tp_size);
  auto shape = test::tiny_shape(tp_size);
  if (llama) {
    static_cast<model::BlockSpec&>(shape) = model::block_preset("llama")->spec;
    shape.kv_heads = tp_size <= 2 ? 2 : 4;
    shape.tie_embeddings = false;
    shape.rope_theta = 100.0;  // large angles at the tiny sequence's few positions
  }
  if (deepseek) {
    static_cast<model::BlockSpec&>(shape) = model::block_preset("deepseek_v3")->spec;
    shape.rope_theta = 100.0;
    shape.q_lora_rank = 6;
    shape.kv_lora_rank = 5;
    shape.qk_nope_head_dim = 3;
    shape.qk_rope_head_dim = 4;
    shape.v_head_dim = 2;
    shape.experts = 4;
    shape.moe_ffn_hidden = 8;
    shape.moe_shared_experts = 1;
    shape.moe_dense_layers = 1;
    shape.moe_score_function = "sigmoid";
    shape.mtp_depth = 2;
    shape.mtp_loss_coeff = 0.5;
  }
  if (sequence_parallel) {
    shape.seq_length = 4;
    shape.sequence_parallel = true;
  }
  const int B = 2;
  model::GptModel<T> m(shape, B, *tp, 42);
  test::randomise(m, 0.3f, 7);
  const auto batch = test::random_batch(B, shape.seq_length, shape.vocab_size, 3);
  const kernels::Tokens x = batch.first, y = batch.second;  // not a structured binding: the lambda below captures them
  const kx::ExecSpace exec;
  const double N = B * shape.seq_length;
  // The objective's sum over the tokens: the training forward's, with the modules' losses.
  Kokkos::View<double, kx::MemSpace> total("total");
  const auto loss_sum = [&] {
    if (!deepseek) return m.forward(exec, x, y);
    Kokkos::deep_copy(total, 0.0);
    m.forward(exec, x, y, total);
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), total);
    return h() + shape.mtp_loss_coeff / shape.mtp_depth * m.take_statistics().get("mtp.loss_sum").at(0);
  };

  m.zero_grad(exec);
  loss_sum();
  const auto segments = test::segments_of(x);
  m.backward(exec, &segments, y, T(1.0 / N));
  for (std::size_t b = 0; b < m.buckets().size(); ++b) m.sum_sequence_parallel_gradients(exec, b);

  std::mt19937 pick(11);
  double worst = 0.0;
  for (auto* p : m.parameters()) {
    auto grad = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p->grad);
    auto value = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p->value);
    for (int k = 0; k < 4; ++k) {
      // Same element on every rank of the group (a perturbation must be seen by all of them
      // for replicated tensors; for sharded ones each rank perturbs its own shard's element).
      const std::int64_t i = static_cast<std::int64_t>(pick() % static_cast<unsigned>(p->local_size()));
      const T h = T(1e-5);
      const T orig = value(i);
      // Only TP rank `owner` perturbs a sharded tensor; all ranks perturb a replicated one.
      for (int owner = 0; owner < (p->replicated() ? 1 : tp->size()); ++owner) {
        const bool mine = p->replicated() || tp->rank() == owner;
        auto set = [&](T v) {
          value(i) = mine ? v : orig;
          Kokkos::deep_copy(p->value, value);
        };
        set(orig + h);
        const double lp = loss_sum() / N;
        set(orig - h);
        const double lm = loss_sum() / N;
        set(orig);
        const double fd = (lp - lm) / (2.0 * static_cast<double>(h));
        double analytic = mine ? static_cast<double>(grad(i)) : 0.0;
        MPI_Allreduce(MPI_IN_PLACE, &analytic, 1, MPI_DOUBLE, MPI_SUM, tp->mpi_comm());
        if (p->replicated()) analytic /= tp->size();
        const double err = std::fabs(fd - analytic) / std::max(1e-3, std::fabs(fd));
        INFO(p->name << " element " << i << " owner " << owner << ": finite difference " << fd
                     << ", analytic " << analytic);
        CHECK(err < 1e-5);
        worst = std::max(worst, err);
      }
    }
  }
  INFO("worst relative error " << worst);
  CHECK(worst < 1e-5);
}

}  // namespace

TEST_CASE("GPT model gradients match finite differences (double)", "[model][gradcheck][mpi]") {
  for (int tp : {1, 2, 4}) {
    if (test::world_size() % tp != 0) continue;
    INFO("tensor = " << tp);
    check_gradients_by_finite_differences<double>(tp);
  }
}

TEST_CASE("llama model gradients match finite differences (double)", "[model][gradcheck][llama][mpi]") {
  for (int tp : {1, 2, 4}) {
    if (test::world_size() % tp != 0) continue;
    INFO("tensor = " << tp);
    check_gradients_by_finite_differences<double>(tp, false, true);
    if (tp > 1) {
      INFO("sequence parallel");
      check_gradients_by_finite_differences<double>(tp, true, true);
    }
  }
}

TEST_CASE("DeepSeek-V3 model with multi-token prediction: gradients match finite differences (double)",
          "[model][gradcheck][mtp][mpi]") {
  for (int tp : {1, 2}) {
    if (test::world_size() % tp != 0) continue;
    INFO("tensor = " << tp);
    check_gradients_by_finite_differences<double>(tp, false, false, true);
    if (tp > 1) {
      INFO("sequence parallel");
      check_gradients_by_finite_differences<double>(tp, true, false, true);
    }
  }
}

TEST_CASE("GPT model gradients match finite differences with sequence parallelism (double)",
          "[model][gradcheck][sequence_parallel][mpi]") {
  for (int tp : {2, 4}) {
    if (test::world_size() % tp != 0) continue;
    INFO("tensor = " << tp << ", sequence parallel");
    check_gradients_by_finite_differences<double>(tp, true);
  }
}

TEST_CASE("tensor-parallel layouts reproduce tensor = 1 (fp32)", "[model][layouts][mpi]") {
  const kx::ExecSpace exec;
  const int B = 3;
  auto self = test::tp_group(1);
  const auto shape1 = test::tiny_shape(1);
  model::GptModel<float> ref(shape1, B, *self, 2024);
  auto [x, y] = test::random_batch(B, shape1.seq_length, shape1.vocab_size, 5);
  ref.zero_grad(exec);
  const double ref_loss = ref.forward(exec, x, y);
  const auto segments = test::segments_of(x);
  ref.backward(exec, &segments, y, 1.0f / (B * shape1.seq_length));
  const auto ref_params = ref.parameters();

  for (int tp_size : {2, 4}) {
    if (test::world_size() % tp_size != 0) continue;
    INFO("tensor = " << tp_size);
    auto tp = test::tp_group(tp_size);
    model::GptModel<float> m(test::tiny_shape(tp_size), B, *tp, 2024);
    const auto params = m.parameters();
    REQUIRE(params.size() == ref_params.size());
    // Same logical initial weights, bit for bit.
    for (std::size_t k = 0; k < params.size(); ++k) {
      INFO(params[k]->name);
      REQUIRE(params[k]->name == ref_params[k]->name);
      CHECK(logical(*params[k], false, *tp) == logical(*ref_params[k], false, *self));
    }
    m.zero_grad(exec);
    const double loss = m.forward(exec, x, y);
    m.backward(exec, &segments, y, 1.0f / (B * shape1.seq_length));
    CHECK(std::fabs(loss - ref_loss) <= 1e-5 * std::fabs(ref_loss));
    for (std::size_t k = 0; k < params.size(); ++k) {
      const auto g = logical(*params[k], true, *tp);
      const auto r = logical(*ref_params[k], true, *self);
      double scale = 0.0, diff = 0.0;
      for (std::size_t i = 0; i < g.size(); ++i) {
        scale = std::max(scale, std::fabs(r[i]));
        diff = std::max(diff, std::fabs(g[i] - r[i]));
      }
      INFO(params[k]->name << ": max |diff| " << diff << ", max |grad| " << scale);
      CHECK(diff <= 1e-5 * scale + 1e-12);
    }
  }
}

TEST_CASE("the first stage's backward needs its input tokens grouped by id", "[model]") {
  const kx::ExecSpace exec;
  auto self = test::tp_group(1);
  const auto shape = test::tiny_shape(1);
  model::GptModel<float> m(shape, 1, *self, 3);
  auto [x, y] = test::random_batch(1, shape.seq_length, shape.vocab_size, 4);
  m.forward(exec, x, y);
  CHECK_THROWS_WITH(m.backward(exec, nullptr, y, 1.0f), test::contains("grouped by id"));
}
