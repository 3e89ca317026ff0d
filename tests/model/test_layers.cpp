// Every tensor-parallel layer on its own, in double precision: analytic gradients (parameters
// and the input gradient dx) against central finite differences of a scalar objective, on every
// layout the world allows (tensor = 1, and 2 and 4 under MPI). The objective is L = Σ w ⊙ y
// with a fixed random w of the layer's logical output shape; for a column-parallel output each
// rank sums its own slice and the group sums the partial sums, for a replicated output every
// rank computes the whole sum. Inputs, weights and w are drawn by LOGICAL index, so the value
// of L must also be the same for every layout (a check of each layer's sharding). The linear
// layers, LayerNorm and the block are checked again with sequence parallelism (token shards).
// Also: the conjugate operators f and g of src/parallel/mappings.hpp against hand-computed sums.
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "tests/model/model_test_util.hpp"

using namespace tptrain;

namespace {

using Real = double;
using Mat = kernels::Matrix<Real>;
using Flat = kernels::VectorUnmanaged<Real>;
using parallel::Communicator;

constexpr int kBatch = 2;  // micro-batch of the layer tests (tiny shape: N = 2 * 5 tokens)

// ---- layout-independent test data ----------------------------------------------------------

// A [rows, cols] local matrix whose column c is logical column col_of(c) of a [rows,
// logical_cols] tensor with N(0, scale²) elements drawn from (stream, logical flat index).
// Row r is logical row first_row + r (a sequence-parallel rank's token shard).
Mat logical_matrix(const std::string& label, std::int64_t rows, std::int64_t cols,
                   std::int64_t logical_cols, const std::function<std::int64_t(std::int64_t)>& col_of,
                   std::uint64_t stream, double scale, double offset = 0.0, std::int64_t first_row = 0) {
  Mat m(label, rows, cols);
  auto h = Kokkos::create_mirror_view(m);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      h(r, c) = offset + scale * model::normal_sample(stream, static_cast<std::uint64_t>(
                                                                  (first_row + r) * logical_cols + col_of(c)));
  Kokkos::deep_copy(m, h);
  return m;
}

std::int64_t same_column(std::int64_t c) { return c; }

// Draws a parameter from N(mean, stddev²) by logical index (allocate_and_initialise), so that
// every layout holds the same logical tensor. Vocabulary padding rows stay zero.
void randomise(model::Parameter<Real>& p, std::uint64_t seed, float stddev = 0.3f, double mean = 0.0) {
  p.init_std = stddev;
  model::allocate_and_initialise(p, seed);
  if (mean != 0.0) {
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.value);
    for (std::size_t i = 0; i < h.extent(0); ++i) h(i) += mean;
    Kokkos::deep_copy(p.value, h);
  }
}

// A parameter of a layer built on its own: its name, logical shape and tensor-parallel split
// (randomise() gives it its values).
model::ParameterSpec spec(const std::string& name, std::vector<std::int64_t> shape, model::TensorSplit split,
                          int blocks = 1) {
  model::ParameterSpec p;
  p.name = name;
  p.shape = std::move(shape);
  p.saved_rows = p.shape[0];
  p.split = split;
  p.blocks = blocks;
  return p;
}

Mat copy_of(const Mat& m) {
  Mat c(m.label() + ".copy", m.extent(0), m.extent(1));
  Kokkos::deep_copy(c, m);
  return c;
}

// L = Σ w ⊙ y. `sharded`: y and w are this rank's columns of a column-parallel output, and the
// partial sums are added over the TP group; otherwise y is replicated and the local sum is L.
double weighted_sum(Communicator& tp, const Mat& y, const Mat& w, bool sharded) {
  auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
  auto hw = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), w);
  double sum = 0.0;
  for (std::size_t r = 0; r < hy.extent(0); ++r)
    for (std::size_t c = 0; c < hy.extent(1); ++c) sum += hw(r, c) * hy(r, c);
  if (sharded) MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_DOUBLE, MPI_SUM, tp.mpi_comm());
  return sum;
}

// ---- the finite-difference check ------------------------------------------------------------

// Something to perturb: a flat local buffer and the analytic gradient of L with respect to it.
struct Probe {
  std::string name;
  Flat value, grad;
  // True when every TP rank holds the same logical tensor (a replicated parameter or input):
  // a perturbation is applied on every rank, and each rank's own gradient must match. False
  // for a shard: each rank in turn perturbs its element alone, and owns its gradient.
  bool replicated;
};

Probe probe(model::Parameter<Real>& p) {
  return {p.name, Flat(p.value.data(), static_cast<std::size_t>(p.local_size())),
          Flat(p.grad.data(), static_cast<std::size_t>(p.local_size())), p.replicated()};
}
Probe probe(const std::string& name, const Mat& x, const Mat& dx, bool replicated) {
  return {name, Flat(x.data(), x.size()), Flat(dx.data(), dx.size()), replicated};
}

// Compares `picks` elements of every probe (chosen by a fixed generator: the same local index
// on every rank, so every rank runs the same forwards and collectives in the same order).
// The finite difference is the fourth-order central one, (8(L(+h) - L(-h)) - (L(+2h) - L(-2h)))
// / 12h, with h = 1e-5: truncation O(h⁴) and rounding O(ε|L|/h) both stay far below 1e-6
// (the plain two-point difference with h = 1e-6 also passes, with errors up to ~1e-7).
// Error = |fd - analytic| / max(|fd|, floor), floor = 1e-2 · the largest analytic gradient of
// the tensor over the group (and never below 1e-10): relative where it matters, absolute for
// elements whose gradient is tiny (or zero, as for vocabulary padding rows).
double check_gradients(Communicator& tp, const std::vector<Probe>& probes,
                       const std::function<double()>& objective, unsigned seed, int picks = 5) {
  constexpr double h = 1e-5;
  constexpr double tolerance = 1e-6;
  std::mt19937 pick(seed);
  double worst = 0.0;
  for (const Probe& pr : probes) {
    // Analytic gradients first, as plain copies (objective() must not be able to change them).
    auto grad_view = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), pr.grad);
    const std::vector<double> grad(grad_view.data(), grad_view.data() + grad_view.extent(0));
    auto value = Kokkos::create_mirror_view(pr.value);
    Kokkos::deep_copy(value, pr.value);
    double gmax = 0.0;
    for (double g : grad) gmax = std::max(gmax, std::fabs(g));
    MPI_Allreduce(MPI_IN_PLACE, &gmax, 1, MPI_DOUBLE, MPI_MAX, tp.mpi_comm());
    const double floor = std::max(1e-2 * gmax, 1e-10);

    const auto n = static_cast<unsigned>(value.extent(0));
    for (int k = 0; k < picks; ++k) {
      const std::size_t i = pick() % n;
      const Real orig = value(i);
      for (int owner = 0; owner < (pr.replicated ? 1 : tp.size()); ++owner) {
        const bool mine = pr.replicated || tp.rank() == owner;
        auto set = [&](Real v) {
          value(i) = mine ? v : orig;
          Kokkos::deep_copy(pr.value, value);
        };
        set(orig + 2 * h);
        const double lp2 = objective();
        set(orig + h);
        const double lp1 = objective();
        set(orig - h);
        const double lm1 = objective();
        set(orig - 2 * h);
        const double lm2 = objective();
        set(orig);
        const double fd = (8.0 * (lp1 - lm1) - (lp2 - lm2)) / (12.0 * h);
        double analytic = mine ? grad[i] : 0.0;
        if (!pr.replicated)
          MPI_Allreduce(MPI_IN_PLACE, &analytic, 1, MPI_DOUBLE, MPI_SUM, tp.mpi_comm());
        const double err = std::fabs(fd - analytic) / std::max(std::fabs(fd), floor);
        INFO(pr.name << " local element " << i << " (owner rank " << owner << " of " << tp.size()
                     << "): finite difference " << fd << ", analytic " << analytic
                     << ", relative error " << err);
        CHECK(err < tolerance);
        worst = std::max(worst, err);
      }
    }
    objective();  // leave the layer's saved activations as they were (unperturbed)
  }
  return worst;
}

// Runs `run_case(tp)` (which returns the unperturbed objective) on tensor = 1 and on every other
// layout the world allows, and checks that the objective does not depend on the layout.
void for_each_layout(const std::function<double(int)>& run_case) {
  double reference = 0.0;
  {
    INFO("tensor = 1");
    reference = run_case(1);
  }
  for (int tp : {2, 4}) {
    if (test::world_size() % tp != 0) continue;
    INFO("tensor = " << tp);
    const double value = run_case(tp);
    INFO("objective " << value << " vs tensor = 1: " << reference);
    CHECK(std::fabs(value - reference) <= 1e-12 * std::max(1.0, std::fabs(reference)));
  }
}

void report(const char* layer, int tp, double worst) {
  INFO(layer << ", tensor = " << tp << ": worst finite-difference error " << worst);
  CHECK(worst < 1e-6);
}

// ---- the layers -----------------------------------------------------------------------------

double column_parallel_case(int tp_size, int blocks) {
  auto tp = test::tp_group(tp_size);
  const kx::ExecSpace exec;
  const std::int64_t N = 10, in = 6, out = 8 * blocks;
  model::ColumnParallelLinear<Real> layer(spec("column/weight", {out, in}, model::TensorSplit::column, blocks),
                                          spec("column/bias", {out}, model::TensorSplit::column, blocks), *tp);
  randomise(layer.weight, 1);
  randomise(layer.bias, 2);
  const std::int64_t out_local = out / tp_size;
  auto col_of = [&](std::int64_t c) { return layer.bias.logical_index(c); };
  Mat x = logical_matrix("x", N, in, in, same_column, 101, 1.0);
  Mat w = logical_matrix("w", N, out_local, out, col_of, 102, 1.0);
  Mat y("y", N, out_local), dx("dx", N, in);
  auto objective = [&] {
    layer.forward(exec, *tp, x, y);
    return weighted_sum(*tp, y, w, true);
  };
  const double L = objective();
  layer.backward(exec, *tp, copy_of(w), x, dx);
  report(blocks == 1 ? "ColumnParallelLinear" : "ColumnParallelLinear (3-block QKV)", tp_size,
         check_gradients(*tp, {probe(layer.weight), probe(layer.bias), probe("x", x, dx, true)},
                         objective, 7));
  return L;
}

double row_parallel_case(int tp_size) {
  auto tp = test::tp_group(tp_size);
  const kx::ExecSpace exec;
  const std::int64_t N = 10, in = 8, out = 6;
  model::RowParallelLinear<Real> layer(spec("row/weight", {out, in}, model::TensorSplit::row),
                                       spec("row/bias", {out}, model::TensorSplit::replicated), *tp);
  randomise(layer.weight, 3);
  randomise(layer.bias, 4);
  const std::int64_t in_local = in / tp_size;
  auto col_of = [&](std::int64_t c) { return layer.weight.logical_index(c); };
  Mat x = logical_matrix("x", N, in_local, in, col_of, 103, 1.0);
  Mat w = logical_matrix("w", N, out, out, same_column, 104, 1.0);
  Mat y("y", N, out), dx("dx", N, in_local);
  auto objective = [&] {
    layer.forward(exec, *tp, x, y);
    return weighted_sum(*tp, y, w, false);
  };
  const double L = objective();
  layer.backward(exec, *tp, copy_of(w), x, dx);
  report("RowParallelLinear", tp_size,
         check_gradients(*tp, {probe(layer.weight), probe(layer.bias), probe("x", x, dx, false)},
                         objective, 8));
  return L;
}

double layer_norm_case(int tp_size) {
  auto tp = test::tp_group(tp_size);
  const kx::ExecSpace exec;
  const std::int64_t N = 10, H = 16;
  model::Workspace<Real> ws;
  model::LayerNorm<Real> layer(spec("ln/weight", {H}, model::TensorSplit::replicated),
                               spec("ln/bias", {H}, model::TensorSplit::replicated), *tp, N, ws);
  randomise(layer.weight, 5, 0.3f, 1.0);
  randomise(layer.bias, 6);
  Mat x = logical_matrix("x", N, H, H, same_column, 105, 1.5, 0.5);
  Mat w = logical_matrix("w", N, H, H, same_column, 106, 1.0);
  Mat y("y", N, H), dx("dx", N, H);
  auto objective = [&] {
    layer.forward(exec, x, y);
    return weighted_sum(*tp, y, w, false);
  };
  const double L = objective();
  layer.backward(exec, copy_of(w), x, dx);
  report("LayerNorm", tp_size,
         check_gradients(*tp, {probe(layer.weight), probe(layer.bias), probe("x", x, dx, true)},
                         objective, 9));
  return L;
}

// Attention, MLP and the whole block: [N, H] in, [N, H] out, both replicated.
template <class Layer>
double block_case(const char* what, int tp_size, Layer& layer, Communicator& tp,
                  const std::vector<model::Parameter<Real>*>& params, std::uint64_t stream) {
  const kx::ExecSpace exec;
  const auto shape = test::tiny_shape(tp_size);
  const std::int64_t N = std::int64_t(kBatch) * shape.seq_length, H = shape.hidden;
  std::vector<Probe> probes;
  std::uint64_t seed = stream;
  for (auto* p : params) {
    const bool ln_weight = p->name.size() >= 7 && p->name.compare(p->name.size() - 7, 7, "/weight") == 0 &&
                           p->name.find("/ln_") != std::string::npos;
    randomise(*p, ++seed, 0.3f, ln_weight ? 1.0 : 0.0);
  }
  Mat x = logical_matrix("x", N, H, H, same_column, stream + 100, 1.0);
  Mat w = logical_matrix("w", N, H, H, same_column, stream + 200, 1.0);
  Mat y("y", N, H), dx("dx", N, H);
  auto objective = [&] {
    layer.forward(exec, tp, x, y);
    return weighted_sum(tp, y, w, false);
  };
  const double L = objective();
  layer.backward(exec, tp, copy_of(w), x, dx);
  for (auto* p : params) probes.push_back(probe(*p));
  probes.push_back(probe("x", x, dx, true));
  report(what, tp_size, check_gradients(tp, probes, objective, static_cast<unsigned>(stream)));
  return L;
}

double attention_case(int tp_size) {
  auto tp = test::tp_group(tp_size);
  model::Workspace<Real> ws;
  model::ParallelAttention<Real> layer("attn", test::tiny_shape(tp_size), kBatch, *tp, ws);
  return block_case("ParallelAttention", tp_size, layer, *tp, layer.parameters(), 20);
}

// Multi-head latent attention on the tiny shape: 4 heads of d_q = 3 + 4 query/key features and
// d_v = 2 value features (dk != dv), latents r_q = 6 and r_kv = 5; with the queries' latent under
// YaRN (its softmax factor m(4, 1)² through mscale_all_dim), or without it under plain RoPE.
model::GptShape latent_attention_shape(int tp_size, bool q_latent) {
  auto s = test::tiny_shape(tp_size);
  s.norm = "rmsnorm";
  s.attention = "mla";
  s.position = q_latent ? "yarn" : "rope";
  s.rope_factor = 4;
  s.rope_mscale = 1;
  s.rope_mscale_all_dim = 1;
  s.rope_original_max_positions = 64;
  s.q_lora_rank = q_latent ? 6 : 0;
  s.kv_lora_rank = 5;
  s.qk_nope_head_dim = 3;
  s.qk_rope_head_dim = 4;
  s.v_head_dim = 2;
  return s;
}

struct LatentAttentionLayer {
  model::Workspace<Real> ws;
  model::MultiHeadLatentAttention<Real> layer;
  LatentAttentionLayer(const model::GptShape& s, Communicator& tp)
      : layer("attn", s, kBatch, tp, ws, model::Recompute::selective, {},
              std::make_unique<model::RotaryPosition<Real>>(s, ws)) {}
};

double latent_attention_case(int tp_size, bool q_latent) {
  auto tp = test::tp_group(tp_size);
  LatentAttentionLayer m(latent_attention_shape(tp_size, q_latent), *tp);
  return block_case(q_latent ? "MultiHeadLatentAttention" : "MultiHeadLatentAttention (no query latent)", tp_size,
                    m.layer, *tp, m.layer.parameters(), q_latent ? 24 : 25);
}

double mlp_case(int tp_size) {
  auto tp = test::tp_group(tp_size);
  const auto shape = test::tiny_shape(tp_size);
  model::Workspace<Real> ws;
  model::GeluMlp<Real> layer("mlp", shape, std::int64_t(kBatch) * shape.seq_length, *tp, ws);
  return block_case("GeluMlp", tp_size, layer, *tp, layer.parameters(), 30);
}

double relu2_mlp_case(int tp_size) {
  auto tp = test::tp_group(tp_size);
  auto shape = test::tiny_shape(tp_size);
  shape.mlp = "relu2";
  model::Workspace<Real> ws;
  model::Relu2Mlp<Real> layer("mlp", shape, std::int64_t(kBatch) * shape.seq_length, *tp, ws);
  return block_case("Relu2Mlp", tp_size, layer, *tp, layer.parameters(), 31);
}

double transformer_layer_case(int tp_size) {
  auto tp = test::tp_group(tp_size);
  model::Workspace<Real> ws;
  model::TransformerLayer<Real> layer("layers/0", test::tiny_shape(tp_size), kBatch, *tp, ws);
  return block_case("TransformerLayer", tp_size, layer, *tp, layer.parameters(), 40);
}

// RMSNorm, rotary positions and the SwiGLU MLP with linear biases: the attention projection's
// bias added before ln_2's fused residual add (RmsNorm::forward_add).
double rms_norm_with_biases_case(int tp_size) {
  auto tp = test::tp_group(tp_size);
  model::Workspace<Real> ws;
  model::GptShape shape = test::tiny_shape(tp_size);
  shape.norm = "rmsnorm";
  shape.position = "rope";
  shape.mlp = "swiglu";
  model::TransformerLayer<Real> layer("layers/0", shape, kBatch, *tp, ws);
  return block_case("TransformerLayer (RMSNorm, rope, SwiGLU, biases)", tp_size, layer, *tp, layer.parameters(), 41);
}

double embedding_case(int tp_size, int vocab) {
  auto tp = test::tp_group(tp_size);
  const kx::ExecSpace exec;
  auto shape = test::tiny_shape(tp_size);
  shape.vocab_size = vocab;
  const std::int64_t N = std::int64_t(kBatch) * shape.seq_length, H = shape.hidden;
  model::VocabParallelEmbedding<Real> layer(
      shape, *tp, std::make_unique<model::LearnedPosition<Real>>(model::model_parameter(shape, "embedding/position"), shape, *tp));
  model::Parameter<Real>& position = *layer.position->parameters().at(0);
  randomise(layer.word, 50);
  randomise(position, 51);
  const auto batch = test::random_batch(kBatch, shape.seq_length, vocab, 52);
  const kernels::Tokens tokens = batch.first;
  Mat w = logical_matrix("w", N, H, H, same_column, 153, 1.0);
  Mat y("y", N, H);
  auto objective = [&] {
    layer.forward(exec, *tp, tokens, y);
    return weighted_sum(*tp, y, w, false);
  };
  const double L = objective();
  layer.backward(exec, *tp, test::segments_of(tokens), copy_of(w));
  report("VocabParallelEmbedding", tp_size,
         check_gradients(*tp, {probe(layer.word), probe(position)}, objective, 54, 8));
  return L;
}

// The tied output layer and the vocab-parallel cross-entropy: L = mean loss over the tokens.
double output_case(int tp_size, int vocab) {
  auto tp = test::tp_group(tp_size);
  const kx::ExecSpace exec;
  auto shape = test::tiny_shape(tp_size);
  shape.vocab_size = vocab;
  const std::int64_t N = std::int64_t(kBatch) * shape.seq_length, H = shape.hidden;
  model::VocabParallelEmbedding<Real> embedding(shape, *tp);  // owner of the tied word matrix
  randomise(embedding.word, 60);
  model::Workspace<Real> ws;
  model::VocabParallelCrossEntropy<Real> head(shape, N, *tp, ws);
  const auto batch = test::random_batch(kBatch, shape.seq_length, vocab, 62);
  const kernels::Tokens targets = batch.second;
  Mat x = logical_matrix("x", N, H, H, same_column, 163, 1.0);
  Mat dx("dx", N, H);
  auto objective = [&] {
    head.logits_forward(exec, *tp, x, embedding.word);
    return head.loss_forward(exec, *tp, targets) / static_cast<double>(N);
  };
  const double L = objective();
  head.backward(exec, *tp, targets, x, embedding.word, Real(1.0 / static_cast<double>(N)), dx);
  report("tied output + VocabParallelCrossEntropy", tp_size,
         check_gradients(*tp, {probe(embedding.word), probe("x", x, dx, true)}, objective, 64, 8));
  return L;
}

// ---- sequence parallelism (Korthikanti et al. 2022) -----------------------------------------
// With parallel.sequence_parallel on tensor > 1, the tensors between the tensor-parallel regions
// are token shards: rank r holds rows [r·n, (r+1)·n) of the [N, h] activation (n = N/t), drawn
// here by logical row so that L is the same as on tensor = 1 (which runs without it). L sums each
// rank's rows over the group; an input shard is perturbed by its owner alone. Parameters that see
// only a rank's tokens (LayerNorm, row-parallel biases: Parameter::sequence_parallel_gradient)
// are summed over the group first, as the trainer does (GptModel::sum_sequence_parallel_gradients).

constexpr std::int64_t kSpTokens = 8;  // N: divisible by 1, 2 and 4

model::GptShape sequence_parallel_shape(int tp_size) {
  auto s = test::tiny_shape(tp_size);
  s.seq_length = static_cast<int>(kSpTokens / kBatch);
  s.sequence_parallel = true;
  return s;
}

// This rank's first token row and its number of rows.
std::pair<std::int64_t, std::int64_t> token_shard(const Communicator& tp) {
  const std::int64_t n = kSpTokens / tp.size();
  return {tp.rank() * n, n};
}

model::SequenceParallelBuffers<Real> sp_buffers(const Communicator& tp, std::int64_t width) {
  if (tp.size() == 1) return {};
  return {Mat("sp.gathered", kSpTokens, width), Mat("sp.partial", kSpTokens, width)};
}

void sum_sequence_parallel_gradients(Communicator& tp, const std::vector<model::Parameter<Real>*>& params) {
  const kx::ExecSpace exec;
  for (auto* p : params)
    if (p->sequence_parallel_gradient) parallel::sum_sequence_parallel_gradient(tp, exec, p->grad_vector());
}

// Gathers the token shard x on entry; the input gradient is reduce-scattered back to it.
double column_parallel_sp_case(int tp_size) {
  auto tp = test::tp_group(tp_size);
  const kx::ExecSpace exec;
  const std::int64_t N = kSpTokens, in = 6, out = 8;
  const auto [first, n] = token_shard(*tp);
  model::ColumnParallelLinear<Real> layer(spec("column/weight", {out, in}, model::TensorSplit::column),
                                          spec("column/bias", {out}, model::TensorSplit::column), *tp);
  layer.sp = sp_buffers(*tp, in);
  randomise(layer.weight, 1);
  randomise(layer.bias, 2);
  const std::int64_t out_local = out / tp_size;
  auto col_of = [&](std::int64_t c) { return layer.bias.logical_index(c); };
  Mat x = logical_matrix("x", n, in, in, same_column, 101, 1.0, 0.0, first);
  Mat w = logical_matrix("w", N, out_local, out, col_of, 102, 1.0);
  Mat y("y", N, out_local), dx("dx", n, in);
  auto objective = [&] {
    layer.forward(exec, *tp, x, y);
    return weighted_sum(*tp, y, w, true);
  };
  const double L = objective();
  layer.backward(exec, *tp, copy_of(w), x, dx);
  report("ColumnParallelLinear, sequence parallel", tp_size,
         check_gradients(*tp, {probe(layer.weight), probe(layer.bias), probe("x", x, dx, false)},
                         objective, 17));
  return L;
}

// Reduce-scatters its output to token shards; their gradients are all-gathered in the backward.
double row_parallel_sp_case(int tp_size) {
  auto tp = test::tp_group(tp_size);
  const kx::ExecSpace exec;
  const std::int64_t N = kSpTokens, in = 8, out = 6;
  const auto [first, n] = token_shard(*tp);
  // The bias acts on this rank's tokens only: its gradient is summed over the group.
  model::ParameterSpec bias = spec("row/bias", {out}, model::TensorSplit::replicated);
  bias.sequence_parallel_gradient = tp_size > 1;
  model::RowParallelLinear<Real> layer(spec("row/weight", {out, in}, model::TensorSplit::row), bias, *tp);
  layer.sp = sp_buffers(*tp, out);
  randomise(layer.weight, 3);
  randomise(layer.bias, 4);
  const std::int64_t in_local = in / tp_size;
  auto col_of = [&](std::int64_t c) { return layer.weight.logical_index(c); };
  Mat x = logical_matrix("x", N, in_local, in, col_of, 103, 1.0);
  Mat w = logical_matrix("w", n, out, out, same_column, 104, 1.0, 0.0, first);
  Mat y("y", n, out), dx("dx", N, in_local);
  auto objective = [&] {
    layer.forward(exec, *tp, x, y);
    return weighted_sum(*tp, y, w, true);
  };
  const double L = objective();
  layer.backward(exec, *tp, copy_of(w), x, dx);
  sum_sequence_parallel_gradients(*tp, {&layer.weight, &layer.bias});
  report("RowParallelLinear, sequence parallel", tp_size,
         check_gradients(*tp, {probe(layer.weight), probe(layer.bias), probe("x", x, dx, false)},
                         objective, 18));
  return L;
}

// Each rank normalises its own tokens; gamma and beta gradients are summed over the group.
double layer_norm_sp_case(int tp_size) {
  auto tp = test::tp_group(tp_size);
  const kx::ExecSpace exec;
  const std::int64_t H = 16;
  const auto [first, n] = token_shard(*tp);
  model::Workspace<Real> ws;
  model::ParameterSpec gamma = spec("ln/weight", {H}, model::TensorSplit::replicated);
  model::ParameterSpec beta = spec("ln/bias", {H}, model::TensorSplit::replicated);
  gamma.sequence_parallel_gradient = beta.sequence_parallel_gradient = tp_size > 1;
  model::LayerNorm<Real> layer(gamma, beta, *tp, n, ws);
  randomise(layer.weight, 5, 0.3f, 1.0);
  randomise(layer.bias, 6);
  Mat x = logical_matrix("x", n, H, H, same_column, 105, 1.5, 0.5, first);
  Mat w = logical_matrix("w", n, H, H, same_column, 106, 1.0, 0.0, first);
  Mat y("y", n, H), dx("dx", n, H);
  auto objective = [&] {
    layer.forward(exec, x, y);
    return weighted_sum(*tp, y, w, true);
  };
  const double L = objective();
  layer.backward(exec, copy_of(w), x, dx);
  sum_sequence_parallel_gradients(*tp, {&layer.weight, &layer.bias});
  report("LayerNorm, sequence parallel", tp_size,
         check_gradients(*tp, {probe(layer.weight), probe(layer.bias), probe("x", x, dx, false)},
                         objective, 19));
  return L;
}

// The whole block as the model builds it from a shape with sequence_parallel on: token-shard
// input and output, LayerNorms and residual adds on the shard.
double transformer_layer_sp_case(int tp_size) {
  auto tp = test::tp_group(tp_size);
  const kx::ExecSpace exec;
  const auto shape = sequence_parallel_shape(tp_size);
  const std::int64_t H = shape.hidden;
  const auto [first, n] = token_shard(*tp);
  model::Workspace<Real> ws;
  model::TransformerLayer<Real> layer("layers/0", shape, kBatch, *tp, ws);
  REQUIRE(layer.rows_ == n);
  const auto params = layer.parameters();
  std::uint64_t seed = 60;
  for (auto* p : params) {
    const bool ln_weight = p->name.find("/ln_") != std::string::npos &&
                           p->name.compare(p->name.size() - 7, 7, "/weight") == 0;
    randomise(*p, ++seed, 0.3f, ln_weight ? 1.0 : 0.0);
  }
  Mat x = logical_matrix("x", n, H, H, same_column, 160, 1.0, 0.0, first);
  Mat w = logical_matrix("w", n, H, H, same_column, 260, 1.0, 0.0, first);
  Mat y("y", n, H), dx("dx", n, H);
  auto objective = [&] {
    layer.forward(exec, *tp, x, y);
    return weighted_sum(*tp, y, w, true);
  };
  const double L = objective();
  layer.backward(exec, *tp, copy_of(w), x, dx);
  sum_sequence_parallel_gradients(*tp, params);
  std::vector<Probe> probes;
  for (auto* p : params) probes.push_back(probe(*p));
  probes.push_back(probe("x", x, dx, false));
  report("TransformerLayer, sequence parallel", tp_size, check_gradients(*tp, probes, objective, 60));
  return L;
}

}  // namespace

TEST_CASE("ColumnParallelLinear gradients match finite differences", "[model][layers][mpi]") {
  SECTION("one block") { for_each_layout([](int tp) { return column_parallel_case(tp, 1); }); }
  SECTION("three blocks (QKV)") { for_each_layout([](int tp) { return column_parallel_case(tp, 3); }); }
}

TEST_CASE("RowParallelLinear gradients match finite differences", "[model][layers][mpi]") {
  for_each_layout(row_parallel_case);
}

TEST_CASE("LayerNorm gradients match finite differences", "[model][layers][mpi]") {
  for_each_layout(layer_norm_case);
}

TEST_CASE("ParallelAttention gradients match finite differences", "[model][layers][mpi]") {
  for_each_layout(attention_case);
}

TEST_CASE("MultiHeadLatentAttention gradients match finite differences", "[model][layers][mla][mpi]") {
  SECTION("queries through a latent, YaRN") { for_each_layout([](int tp) { return latent_attention_case(tp, true); }); }
  SECTION("one query projection, RoPE") { for_each_layout([](int tp) { return latent_attention_case(tp, false); }); }
}

// A plain DeepSeek-V3 attention in double on the host, from Hugging Face's DeepseekV3Attention:
// per token the latents, their RMSNorms, the up-projections, rotate-half on the last d_R of each
// query head and on the shared k_R, causal softmax(q·k · m² / √d_q) over the values, o_proj.
TEST_CASE("MultiHeadLatentAttention equals a plain DeepSeek-V3 attention (dk != dv, the softmax factor)",
          "[model][layers][mla]") {
  const bool q_latent = GENERATE(true, false);
  INFO("queries through a latent: " << q_latent);
  auto tp = test::tp_group(1);
  const kx::ExecSpace exec;
  const model::GptShape s = latent_attention_shape(1, q_latent);
  LatentAttentionLayer m(s, *tp);
  std::uint64_t seed = 90;
  for (auto* p : m.layer.parameters()) randomise(*p, ++seed, 0.3f, p->name.find("_norm/") != std::string::npos ? 1.0 : 0.0);
  const int S = s.seq_length, H = s.hidden, nh = s.heads, rq = s.q_lora_rank, rkv = s.kv_lora_rank,
            dn = s.qk_nope_head_dim, dr = s.qk_rope_head_dim, dv = s.v_head_dim, dq = dn + dr;
  const std::int64_t N = std::int64_t(kBatch) * S;
  Mat x = logical_matrix("x", N, H, H, same_column, 190, 1.0);
  Mat y("y", N, H);
  m.layer.forward(exec, *tp, x, y);
  const auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  const auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);

  std::vector<std::vector<double>> w;
  for (auto* p : m.layer.parameters()) w.push_back(test::logical(*p, false, *tp));
  const auto weight = [&](const char* row) -> const std::vector<double>& {
    const auto params = m.layer.parameters();
    for (std::size_t i = 0; i < params.size(); ++i)
      if (params[i]->name == std::string("attn/") + row) return w[i];
    FAIL("no parameter " << row);
    return w[0];
  };
  const auto project = [](const std::vector<double>& W, const std::vector<double>& in, int out) {
    std::vector<double> o(static_cast<std::size_t>(out), 0.0);
    const std::size_t width = in.size();
    for (int r = 0; r < out; ++r)
      for (std::size_t c = 0; c < width; ++c) o[r] += W[r * width + c] * in[c];
    return o;
  };
  const auto rms_norm = [&](std::vector<double> v, int n, const std::vector<double>& g) {
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += v[i] * v[i];
    const double r = 1.0 / std::sqrt(ss / n + 1e-6);  // the latent norms' ε, HF's whatever rms_norm_eps
    for (int i = 0; i < n; ++i) v[i] *= r * g[i];
    return v;
  };
  const std::vector<double> omega = model::position_kind(s).rotary.inverse(s, dr);
  const double amplitude = model::position_kind(s).rotary.amplitude(s);
  const auto rotate = [&](double* v, int position) {
    for (int i = 0; i < dr / 2; ++i) {
      const double c = amplitude * std::cos(position * omega[i]), sn = amplitude * std::sin(position * omega[i]);
      const double a = v[i], b = v[i + dr / 2];
      v[i] = a * c - b * sn;
      v[i + dr / 2] = b * c + a * sn;
    }
  };
  const double mscale = q_latent ? 0.1 * 1.0 * std::log(4.0) + 1.0 : 1.0;
  const double scale = mscale * mscale / std::sqrt(double(dq));
  std::vector<std::vector<double>> q(N), k(N), v(N);
  for (std::int64_t t = 0; t < N; ++t) {
    std::vector<double> xt(H);
    for (int c = 0; c < H; ++c) xt[c] = hx(t, c);
    q[t] = q_latent ? project(weight("q_up/weight"), rms_norm(project(weight("q_down/weight"), xt, rq), rq,
                                                              weight("q_norm/weight")),
                              nh * dq)
                    : project(weight("q/weight"), xt, nh * dq);
    std::vector<double> latent = project(weight("kv_down/weight"), xt, rkv + dr);
    std::vector<double> k_rope(latent.begin() + rkv, latent.end());
    latent.resize(rkv);
    const std::vector<double> kv = project(weight("kv_up/weight"), rms_norm(latent, rkv, weight("kv_norm/weight")),
                                           nh * (dn + dv));
    const int position = int(t % S);
    rotate(k_rope.data(), position);
    k[t].assign(std::size_t(nh) * dq, 0.0);
    v[t].assign(std::size_t(nh) * dv, 0.0);
    for (int h = 0; h < nh; ++h) {
      rotate(q[t].data() + h * dq + dn, position);
      for (int e = 0; e < dn; ++e) k[t][h * dq + e] = kv[h * (dn + dv) + e];
      for (int e = 0; e < dr; ++e) k[t][h * dq + dn + e] = k_rope[e];
      for (int e = 0; e < dv; ++e) v[t][h * dv + e] = kv[h * (dn + dv) + dn + e];
    }
  }
  double worst = 0;
  for (std::int64_t t = 0; t < N; ++t) {
    const std::int64_t first = t - t % S;
    std::vector<double> o(std::size_t(nh) * dv, 0.0);
    for (int h = 0; h < nh; ++h) {
      std::vector<double> p;
      double most = -1e300, sum = 0;
      for (std::int64_t j = first; j <= t; ++j) {
        double dot = 0;
        for (int e = 0; e < dq; ++e) dot += q[t][h * dq + e] * k[j][h * dq + e];
        p.push_back(dot * scale);
        most = std::max(most, p.back());
      }
      for (double& e : p) sum += (e = std::exp(e - most));
      for (std::int64_t j = first; j <= t; ++j)
        for (int e = 0; e < dv; ++e) o[h * dv + e] += p[j - first] / sum * v[j][h * dv + e];
    }
    const std::vector<double> expected = project(weight("proj/weight"), o, H);
    for (int c = 0; c < H; ++c) worst = std::max(worst, std::fabs(hy(t, c) - expected[c]));
  }
  INFO("largest difference from the plain attention " << worst);
  CHECK(worst < 1e-12);
}

TEST_CASE("GeluMlp gradients match finite differences", "[model][layers][mpi]") {
  for_each_layout(mlp_case);
}

// A kind added as its own files and a registry line (docs/design.md, "Sublayer kinds"): squared
// ReLU against its definition, then the MLP's gradients, and a block made with it.
TEST_CASE("Relu2Mlp: relu(h)² and its gradients match their definition and finite differences",
          "[model][layers][mpi]") {
  const kx::ExecSpace exec;
  Mat h("h", 1, 5), a("a", 1, 5), da("da", 1, 5);
  auto hh = Kokkos::create_mirror_view(h);
  const Real in[5] = {-2.0, -0.5, 0.0, 0.5, 3.0};
  for (int j = 0; j < 5; ++j) hh(0, j) = in[j];
  Kokkos::deep_copy(h, hh);
  Kokkos::deep_copy(da, Real(1));
  kernels::squared_relu_forward(exec, h, a);
  kernels::squared_relu_backward(exec, da, h, da);  // in place, as the MLP runs it
  const auto ah = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  const auto dh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), da);
  const Real want_a[5] = {0.0, 0.0, 0.0, 0.25, 9.0}, want_dh[5] = {0.0, 0.0, 0.0, 1.0, 6.0};
  for (int j = 0; j < 5; ++j) {
    CHECK(ah(0, j) == want_a[j]);
    CHECK(dh(0, j) == want_dh[j]);
  }
  for_each_layout(relu2_mlp_case);
  auto tp = test::tp_group(1);
  auto shape = test::tiny_shape(1);
  shape.mlp = "relu2";
  model::Workspace<Real> ws;
  model::TransformerLayer<Real> layer("layers/0", shape, kBatch, *tp, ws);
  CHECK(layer.parameters().size() == model::block_parameter_rows(shape).size());
}

TEST_CASE("TransformerLayer gradients match finite differences", "[model][layers][mpi]") {
  for_each_layout(transformer_layer_case);
}

TEST_CASE("TransformerLayer with RMSNorm and biases: gradients match finite differences", "[model][layers][mpi]") {
  for_each_layout(rms_norm_with_biases_case);
}

TEST_CASE("VocabParallelEmbedding gradients match finite differences", "[model][layers][mpi]") {
  // vocab 11: padding on 2 and 4 ranks; vocab 9 on 4 ranks: the last rank holds only padding.
  for (int vocab : {11, 9}) {
    INFO("vocab " << vocab);
    for_each_layout([vocab](int tp) { return embedding_case(tp, vocab); });
  }
}

TEST_CASE("tied output + VocabParallelCrossEntropy gradients match finite differences",
          "[model][layers][mpi]") {
  for (int vocab : {11, 9}) {
    INFO("vocab " << vocab);
    for_each_layout([vocab](int tp) { return output_case(tp, vocab); });
  }
}

TEST_CASE("conjugate operators f and g", "[model][layers][mpi]") {
  const kx::ExecSpace exec;
  for (int tp_size : {1, 2, 4}) {
    if (test::world_size() % tp_size != 0) continue;
    INFO("tensor = " << tp_size);
    auto tp = test::tp_group(tp_size);
    const int r = tp->rank(), n = tp->size();
    // Rank r holds (r + 1) · 100 + i (exact in float and double): the sum over the group is
    // 100 · n(n+1)/2 + n · i.
    auto own = [&](int i) { return (r + 1) * 100.0 + i; };
    auto summed = [&](int i) { return 100.0 * n * (n + 1) / 2 + double(n) * i; };
    auto fresh_vector = [&] {
      kernels::Vector<double> v("v", 5);
      auto h = Kokkos::create_mirror_view(v);
      for (int i = 0; i < 5; ++i) h(i) = own(i);
      Kokkos::deep_copy(v, h);
      return v;
    };
    auto fresh_matrix = [&] {
      kernels::Matrix<float> m("m", 2, 3);
      auto h = Kokkos::create_mirror_view(m);
      for (int i = 0; i < 6; ++i) h(i / 3, i % 3) = static_cast<float>(own(i));
      Kokkos::deep_copy(m, h);
      return m;
    };
    auto check_vector = [&](const kernels::Vector<double>& v, bool reduced) {
      auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
      for (int i = 0; i < 5; ++i) CHECK(h(i) == (reduced ? summed(i) : own(i)));
    };
    auto check_matrix = [&](const kernels::Matrix<float>& m, bool reduced) {
      auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), m);
      for (int i = 0; i < 6; ++i)
        CHECK(static_cast<double>(h(i / 3, i % 3)) == (reduced ? summed(i) : own(i)));
    };
    {
      INFO("f = copy_to_tp_region forward: identity");
      auto v = fresh_vector();
      auto m = fresh_matrix();
      parallel::copy_to_tp_region_forward(*tp, exec, v);
      parallel::copy_to_tp_region_forward(*tp, exec, m);
      check_vector(v, false);
      check_matrix(m, false);
    }
    {
      INFO("f = copy_to_tp_region backward: all-reduce (sum)");
      auto v = fresh_vector();
      auto m = fresh_matrix();
      parallel::copy_to_tp_region_backward(*tp, exec, v);
      parallel::copy_to_tp_region_backward(*tp, exec, m);
      check_vector(v, true);
      check_matrix(m, true);
    }
    {
      INFO("g = reduce_from_tp_region forward: all-reduce (sum)");
      auto v = fresh_vector();
      auto m = fresh_matrix();
      parallel::reduce_from_tp_region_forward(*tp, exec, v);
      parallel::reduce_from_tp_region_forward(*tp, exec, m);
      check_vector(v, true);
      check_matrix(m, true);
    }
    {
      INFO("g = reduce_from_tp_region backward: identity");
      auto v = fresh_vector();
      auto m = fresh_matrix();
      parallel::reduce_from_tp_region_backward(*tp, exec, v);
      parallel::reduce_from_tp_region_backward(*tp, exec, m);
      check_vector(v, false);
      check_matrix(m, false);
    }
  }
}

TEST_CASE("sequence-parallel layers: gradients match finite differences", "[model][layers][sequence_parallel][mpi]") {
  SECTION("ColumnParallelLinear") { for_each_layout(column_parallel_sp_case); }
  SECTION("RowParallelLinear") { for_each_layout(row_parallel_sp_case); }
  SECTION("LayerNorm") { for_each_layout(layer_norm_sp_case); }
  SECTION("TransformerLayer") { for_each_layout(transformer_layer_sp_case); }
}

// ---- the mixture of experts (src/model/mixture_of_experts.hpp) -------------------------------

namespace {

// The router's variants: Mixtral's; DeepSeek-V3's (sigmoid scores, 3 of 8 experts from the 2 best
// of 4 groups, renormalised and scaled by 2.5, an expert bias that only chooses; its experts
// fine-grained, 12 wide where F is 32, and 2 shared ones; its balance loss per sequence); sigmoid
// unnormalised.
enum class Routing { mixtral, deepseek, sigmoid_unnormalised };

model::GptShape moe_shape(int tp, double capacity = 0.0, bool sequence_parallel = false,
                          Routing routing = Routing::mixtral) {
  model::GptShape s = sequence_parallel ? sequence_parallel_shape(tp) : test::tiny_shape(tp);
  s.layers = 1;  // the losses' block average is then the block's own
  s.mlp = "moe";
  s.linear_bias = false;
  s.experts = 4;
  s.experts_per_token = 2;
  s.moe_capacity_factor = capacity;
  if (routing != Routing::mixtral) s.moe_score_function = "sigmoid";
  if (routing == Routing::deepseek) {
    s.experts = 8;
    s.experts_per_token = 3;
    s.moe_groups = 4;
    s.moe_groups_per_token = 2;
    s.moe_routed_scaling = 2.5;
    s.moe_ffn_hidden = 12;
    s.moe_shared_experts = 2;
    s.moe_aux_loss_per_sequence = true;
  }
  if (routing == Routing::sigmoid_unnormalised) {
    s.moe_norm_topk_prob = false;
    s.moe_routed_scaling = 1.5;
  }
  return s;
}

// An expert bias of the sizes balancing gives (DeepSeek-V3's γ = 0.001 per step, some steps).
void set_expert_bias(model::MixtureOfExperts<Real>& layer, Routing routing) {
  if (routing != Routing::deepseek) return;
  layer.router.expert_bias = kernels::Vector<Real>("expert_bias", layer.shape_.experts);
  auto h = Kokkos::create_mirror_view(layer.router.expert_bias);
  for (int e = 0; e < layer.shape_.experts; ++e) h(e) = 0.02 * (e % 3) - 0.015;
  Kokkos::deep_copy(layer.router.expert_bias, h);
}

// The smallest gap, over the tokens, between the k-th and the (k+1)-th router probability: a
// finite difference is only meaningful when no perturbation can change a token's top k.
double top_k_gap(const model::MixtureOfExperts<Real>& layer) {
  auto p = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), layer.saved->routing.probs);
  auto b = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), layer.router.expert_bias);
  const int E = layer.shape_.experts, k = layer.shape_.experts_per_token;
  double gap = 1.0;
  for (std::size_t t = 0; t < p.extent(0); ++t) {
    std::vector<double> row(static_cast<std::size_t>(E));
    for (int e = 0; e < E; ++e) row[e] = p(t, e) + (b.extent(0) > 0 ? b(e) : 0.0);
    std::sort(row.rbegin(), row.rend());
    if (k < E) gap = std::min(gap, row[k - 1] - row[k]);
  }
  return gap;
}

// L = Σ w ⊙ y + a · aux + z · z_loss, the losses' gradients through the layer's own weights.
double moe_case(int tp_size, double capacity, bool sequence_parallel, Routing routing = Routing::mixtral) {
  auto tp = test::tp_group(tp_size);
  const kx::ExecSpace exec;
  const auto shape = moe_shape(tp_size, capacity, sequence_parallel, routing);
  const std::int64_t N = std::int64_t(kBatch) * shape.seq_length, H = shape.hidden;
  const auto [first, n] = sequence_parallel ? token_shard(*tp) : std::make_pair(std::int64_t(0), N);
  model::Workspace<Real> ws;
  model::MixtureOfExperts<Real> layer("mlp", shape, N, *tp, ws, 0);
  layer.loss_weights = {0.1, routing == Routing::mixtral ? 0.05 : 0.0};  // the z-loss is the softmax's
  if (routing == Routing::deepseek) {  // G = 1 here: the gap below is of the whole top k
    layer.router.routing.groups = 1;
    layer.router.routing.groups_per_token = 1;
  }
  set_expert_bias(layer, routing);
  layer.micro_batch_weight = 1.0;
  const auto params = layer.parameters();
  std::uint64_t seed = 70;
  for (auto* p : params) randomise(*p, ++seed, 0.3f);
  Mat x = logical_matrix("x", n, H, H, same_column, 170, 1.0, 0.0, first);
  Mat w = logical_matrix("w", n, H, H, same_column, 270, 1.0, 0.0, first);
  Mat y("y", n, H), dx("dx", n, H);
  auto objective = [&] {
    layer.forward(exec, *tp, x, y);
    const model::MoeStatistics s = layer.take_statistics();
    return weighted_sum(*tp, y, w, sequence_parallel) + layer.loss_weights.aux * s.aux_loss_sum +
           layer.loss_weights.z * s.z_loss_sum;
  };
  const double L = objective();
  INFO("the top-k gap " << top_k_gap(layer) << " must exceed the perturbations' effect");
  REQUIRE(top_k_gap(layer) > 1e-3);
  layer.backward(exec, *tp, copy_of(w), x, dx);
  std::vector<Probe> probes;
  for (auto* p : params) probes.push_back(probe(*p));
  probes.push_back(probe("x", x, dx, !sequence_parallel));
  report(sequence_parallel ? "MixtureOfExperts, sequence parallel" : "MixtureOfExperts", tp_size,
         check_gradients(*tp, probes, objective, 70, 8));
  return L;
}

}  // namespace

TEST_CASE("MixtureOfExperts gradients match finite differences", "[model][layers][moe][mpi]") {
  SECTION("dropless") { for_each_layout([](int tp) { return moe_case(tp, 0.0, false); }); }
  SECTION("capacity factor 0.75: some copies dropped") {
    for_each_layout([](int tp) { return moe_case(tp, 0.75, false); });
  }
  SECTION("sequence parallel") { for_each_layout([](int tp) { return moe_case(tp, 0.0, true); }); }
  SECTION("sigmoid scores, renormalised and scaled, an expert bias; fine-grained and shared experts; the "
          "sequence-wise balance loss") {
    for_each_layout([](int tp) { return moe_case(tp, 0.0, false, Routing::deepseek); });
  }
  SECTION("sigmoid scores, unnormalised and scaled") {
    for_each_layout([](int tp) { return moe_case(tp, 0.0, false, Routing::sigmoid_unnormalised); });
  }
}

// Mixtral's block written plainly on the host (modeling_mixtral's MixtralSparseMoeBlock, in
// double), and DeepSeek-V3's (modeling_deepseek_v3's DeepseekV3MoE: DeepseekV3TopkRouter's sigmoid
// scores, the bias added to choose, groups scored by their two best, the others' scores masked to
// 0, the chosen scores renormalised + 1e-20 and scaled; experts of moe_intermediate_size, and the
// shared experts' MLP added; the sequence-wise balance loss of DeepSeek-V3 eqs. 17-20): the
// layer's output and its load-balancing loss against it, and the dropless count.
TEST_CASE("MixtureOfExperts equals a plain Mixtral block, and DeepSeek-V3's router; dropless keeps k copies per token",
          "[model][layers][moe]") {
  const Routing routing = GENERATE(Routing::mixtral, Routing::deepseek, Routing::sigmoid_unnormalised);
  INFO("routing " << int(routing));
  auto tp = test::tp_group(1);
  const kx::ExecSpace exec;
  const auto shape = moe_shape(1, 0.0, false, routing);
  const int E = shape.experts, k = shape.experts_per_token, F = shape.expert_ffn();
  const std::int64_t N = std::int64_t(kBatch) * shape.seq_length, H = shape.hidden;
  model::Workspace<Real> ws;
  model::MixtureOfExperts<Real> layer("mlp", shape, N, *tp, ws, 0);
  std::uint64_t seed = 80;
  for (auto* p : layer.parameters()) randomise(*p, ++seed, 0.3f);
  set_expert_bias(layer, routing);
  auto bias = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), layer.router.expert_bias);
  const bool sigmoid = shape.moe_score_function == "sigmoid";
  const int G = shape.moe_groups, per_group = E / G;
  Mat x = logical_matrix("x", N, H, H, same_column, 180, 1.0);
  Mat y("y", N, H);
  layer.forward(exec, *tp, x, y);
  const model::MoeStatistics stats = layer.take_statistics();
  const auto host = [](const auto& v) { return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v); };
  auto hx = host(x), hy = host(y);
  auto wr = host(layer.router.weight.value);
  REQUIRE(layer.shared.has_value() == (shape.moe_shared_experts > 0));
  // out += scale · down(silu(gate x)·up x) of token t through an MLP `width` wide, its gate|up
  // [2·width, H] and down [H, width] weights.
  const auto add_swiglu = [&](const auto& w13, const auto& w2, int width, std::int64_t t, double scale,
                              std::vector<double>& out) {
    std::vector<double> act(width);
    for (int f = 0; f < width; ++f) {
      double g = 0.0, u = 0.0;
      for (std::int64_t h = 0; h < H; ++h) {
        g += w13(f * H + h) * hx(t, h);
        u += w13((width + f) * H + h) * hx(t, h);
      }
      act[f] = g / (1.0 + std::exp(-g)) * u;
    }
    for (std::int64_t h = 0; h < H; ++h) {
      double d = 0.0;
      for (int f = 0; f < width; ++f) d += w2(h * width + f) * act[f];
      out[h] += scale * d;
    }
  };
  double worst = 0.0;
  // Per sequence (the micro-batch's kBatch sequences of S tokens): the copies routed to each
  // expert and the normalised scores' sums.
  const std::int64_t S = shape.seq_length;
  std::vector<double> routed(E, 0.0);
  std::vector<std::vector<double>> routed_seq(kBatch, std::vector<double>(E, 0.0)),
      p_seq(kBatch, std::vector<double>(E, 0.0));
  for (std::int64_t t = 0; t < N; ++t) {
    std::vector<double> logit(E), p(E);
    double m = -1e300, sum = 0.0;
    for (int e = 0; e < E; ++e) {
      logit[e] = 0.0;
      for (std::int64_t h = 0; h < H; ++h) logit[e] += hx(t, h) * wr(e * H + h);
      m = std::max(m, logit[e]);
    }
    for (int e = 0; e < E; ++e) sum += std::exp(logit[e] - m);
    for (int e = 0; e < E; ++e) p[e] = sigmoid ? 1.0 / (1.0 + std::exp(-logit[e])) : std::exp(logit[e] - m) / sum;
    // Choice scores: p + bias; the groups ranked by their two best, the first moe_groups_per_token kept.
    std::vector<double> choice(E);
    for (int e = 0; e < E; ++e) choice[e] = p[e] + (bias.extent(0) > 0 ? bias(e) : 0.0);
    std::vector<int> groups(G);
    std::vector<double> group_score(G);
    for (int q = 0; q < G; ++q) {
      std::vector<double> c(choice.begin() + q * per_group, choice.begin() + (q + 1) * per_group);
      std::sort(c.rbegin(), c.rend());
      group_score[q] = c[0] + c[1];
      groups[q] = q;
    }
    std::stable_sort(groups.begin(), groups.end(), [&](int a, int b) { return group_score[a] > group_score[b]; });
    for (int r = shape.moe_groups_per_token; r < G; ++r)
      for (int e = groups[r] * per_group; e < (groups[r] + 1) * per_group; ++e) choice[e] = 0.0;
    std::vector<int> order(E);
    for (int e = 0; e < E; ++e) order[e] = e;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return choice[a] > choice[b]; });
    double chosen = 0.0;
    for (int j = 0; j < k; ++j) chosen += p[order[j]];
    const double denominator = shape.moe_norm_topk_prob ? chosen + (sigmoid ? 1e-20 : 0.0) : 1.0;
    std::vector<double> out(H, 0.0);
    for (int j = 0; j < k; ++j) {
      const int e = order[j];
      routed[e] += 1;
      routed_seq[t / S][e] += 1;
      // Renormalised over the top k, scaled.
      add_swiglu(host(layer.experts[e].fc.weight.value), host(layer.experts[e].proj.weight.value), F, t,
                 shape.moe_routed_scaling * p[e] / denominator, out);
    }
    if (layer.shared)  // unweighted
      add_swiglu(host(layer.shared->fc.weight.value), host(layer.shared->proj.weight.value), int(shape.shared_ffn()), t,
                 1.0, out);
    for (std::int64_t h = 0; h < H; ++h) worst = std::max(worst, std::fabs(out[h] - hy(t, h)));
    double total = 0.0;  // the aux loss's probabilities: sigmoid scores normalised per token
    for (int e = 0; e < E; ++e) total += p[e];
    for (int e = 0; e < E; ++e) p_seq[t / S][e] += sigmoid ? p[e] / (total + 1e-20) : p[e];
  }
  INFO("largest difference from the plain block: " << worst);
  CHECK(worst < 1e-12);
  // Switch's E Σ f_e P_e over the micro-batch, or DeepSeek-V3's Σ f_e P_e per sequence with
  // f_e = E/(k S) · its copies routed to e, averaged over the sequences.
  double aux = 0.0;
  for (int e = 0; e < E; ++e) {
    double count = 0.0, p = 0.0;
    for (int b = 0; b < kBatch; ++b) {
      count += routed_seq[b][e];
      p += p_seq[b][e];
      if (shape.moe_aux_loss_per_sequence)
        aux += double(E) / (k * double(S)) * routed_seq[b][e] * p_seq[b][e] / double(S) / kBatch;
    }
    if (!shape.moe_aux_loss_per_sequence) aux += double(E) * count / double(N) * p / double(N);
  }
  REQUIRE(kBatch > 1);  // sequences to tell the two apart
  CHECK(std::fabs(stats.aux_loss_sum - aux) < 1e-12);
  std::int64_t copies = 0;
  for (int e = 0; e < E; ++e) {
    CHECK(stats.tokens_per_expert[e] == static_cast<std::int64_t>(routed[e]));
    copies += stats.tokens_per_expert[e];
  }
  CHECK(copies == k * N);  // dropless: no copy lost
  CHECK(stats.dropped == 0);
  CHECK(layer.saved->copies.kept == k * N);
}
