// Packed documents (data.document_mask with data.reset_positions): a sequence holding the tail of
// one document and a whole second one, opened by its end-of-text token, gives each document's
// logits and loss as if it were alone in a sequence of its own, for learned positions (GPT-2) and
// rotary ones with grouped-query attention (Llama), on both attention cores (flash and batched),
// and its gradients match finite differences
// (the position gradient grouped by document position included); without the masks it does not.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "catch.hpp"
#include "src/data/document_starts.hpp"
#include "src/model/gpt_model.hpp"
#include "tests/model/model_test_util.hpp"

namespace tptrain {
namespace {

constexpr int kEndOfText = 3;  // the document token of this test's vocabulary
constexpr int S = 16;

kernels::Tokens device_tokens(const std::vector<int>& h) {
  kernels::Tokens d("tokens", h.size());
  auto m = Kokkos::create_mirror_view(d);
  for (std::size_t i = 0; i < h.size(); ++i) m(i) = h[i];
  Kokkos::deep_copy(d, m);
  return d;
}

std::vector<double> host_of(const kernels::Matrix<double>& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<double>(h.data(), h.data() + h.size());
}

struct Pass {
  std::vector<double> logits;  // [S, V_padded]
  double loss = 0;             // summed over the first `count` tokens
};

// The forward of one sequence; with `documents` its document starts and positions
// (data::document_starts) bound, as train::PipelineRunner binds a micro-batch's.
struct Sequence {
  kernels::Tokens x, y, doc, pos;
  kernels::TokenSegments word, position;
  Sequence(const std::vector<int>& inputs, const std::vector<int>& targets) {
    std::vector<std::int32_t> d(S), p(S);
    data::document_starts(inputs.data(), 1, S, kEndOfText, d.data(), p.data());
    x = device_tokens(inputs);
    y = device_tokens(targets);
    doc = device_tokens(d);
    pos = device_tokens(p);
    word = test::segments_of(x);
    position = test::segments_of(pos);
  }
  void bind(model::GptModel<double>& m, bool documents) const {
    if (documents) m.bind_documents(doc, pos, &position);
    else m.bind_documents({}, {}, nullptr);
  }
};

Pass run(model::GptModel<double>& m, const Sequence& q, int count, bool documents) {
  const kx::ExecSpace exec;
  q.bind(m, documents);
  Pass r;
  r.loss = m.forward(exec, q.x, q.y, std::int64_t(count));
  r.logits = host_of(m.local_logits());
  m.bind_documents({}, {}, nullptr);
  return r;
}

double max_diff(const std::vector<double>& a, std::size_t a0, const std::vector<double>& b, std::size_t b0,
                std::size_t n) {
  double worst = 0;
  for (std::size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(a[a0 + i] - b[b0 + i]));
  return worst;
}

}  // namespace

TEST_CASE("packed documents give each document's logits and loss as if alone", "[model][documents]") {
  for (const char* preset : {"gpt2", "llama"})
  for (const bool flash : {true, false}) {
    INFO(preset << (flash ? ", flash" : ", batched core"));
    auto tp = test::tp_group(1);
    model::GptShape shape = test::tiny_shape(1);
    static_cast<model::BlockSpec&>(shape) = model::block_preset(preset)->spec;
    if (shape.position == "rope") shape.kv_heads = 2;
    shape.seq_length = S;
    shape.flash_attention = flash;
    model::GptModel<double> m(shape, 1, *tp, 3);
    test::randomise(m, 0.4f, 17);
    // Document A's tail at positions 0..6, then document B: <|endoftext|> at 7 and 8 more tokens.
    const std::vector<int> a{5, 1, 8, 2, 9, 4, 6}, b{kEndOfText, 7, 2, 10, 1, 5, 8, 0, 6};
    std::vector<int> packed(a), next;
    packed.insert(packed.end(), b.begin(), b.end());
    for (int i = 0; i < S; ++i) next.push_back((packed[i] * 7 + 3) % shape.vocab_size);  // any targets
    // Each document alone at positions 0..: the rest of its sequence is filler the causal mask
    // hides from it (and whose loss is not counted).
    std::vector<int> alone_a(a), alone_b(b), targets_a(next.begin(), next.begin() + 7),
        targets_b(next.begin() + 7, next.end());
    alone_a.resize(S, 2);
    alone_b.resize(S, 2);
    targets_a.resize(S, 0);
    targets_b.resize(S, 0);
    const Sequence both_q(packed, next), a_q(alone_a, targets_a), b_q(alone_b, targets_b);
    const Pass both = run(m, both_q, S, true);
    const Pass only_a = run(m, a_q, 7, false);
    const Pass only_b = run(m, b_q, 9, false);
    const std::size_t V = static_cast<std::size_t>(shape.local_vocab());
    CHECK(max_diff(both.logits, 0, only_a.logits, 0, 7 * V) <= 1e-12);
    CHECK(max_diff(both.logits, 7 * V, only_b.logits, 0, 9 * V) <= 1e-12);
    CHECK(both.loss == Approx(only_a.loss + only_b.loss).epsilon(1e-12));
    // Without the masks document B sees document A (and its positions go on from 7): its logits differ.
    const Pass unmasked = run(m, both_q, S, false);
    CHECK(max_diff(unmasked.logits, 7 * V, only_b.logits, 0, 9 * V) > 1e-3);

    // The backward with the masks and restarted positions, against central differences of the loss.
    const kx::ExecSpace exec;
    both_q.bind(m, true);
    m.zero_grad(exec);
    m.forward(exec, both_q.x, both_q.y);
    m.backward(exec, &both_q.word, both_q.y, 1.0);
    std::mt19937 pick(5);
    for (auto* p : m.parameters()) {
      auto grad = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p->grad);
      auto value = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p->value);
      for (int k = 0; k < 3; ++k) {
        const std::int64_t i = static_cast<std::int64_t>(pick() % static_cast<unsigned>(p->local_size()));
        const double h = 1e-5, orig = value(i);
        const auto loss_at = [&](double v) {
          value(i) = v;
          Kokkos::deep_copy(p->value, value);
          return m.forward(exec, both_q.x, both_q.y);
        };
        const double fd = (loss_at(orig + h) - loss_at(orig - h)) / (2 * h);
        loss_at(orig);
        INFO(p->name << " element " << i << ": finite difference " << fd << ", analytic " << grad(i));
        CHECK(std::fabs(fd - grad(i)) / std::max(1e-3, std::fabs(fd)) < 1e-5);
      }
    }
    m.bind_documents({}, {}, nullptr);
  }
}

TEST_CASE("document starts and positions restart at each end-of-text token", "[data][documents]") {
  const std::vector<std::int32_t> tokens{4, kEndOfText, 5, 6, kEndOfText, kEndOfText, 7, 8,  // sequence 0
                                         9, 9, 9, 9, 9, kEndOfText, 1, 2};                   // sequence 1
  std::vector<std::int32_t> doc(16), pos(16);
  data::document_starts(tokens.data(), 2, 8, kEndOfText, doc.data(), pos.data());
  CHECK(doc == std::vector<std::int32_t>{0, 1, 1, 1, 4, 5, 5, 5, 0, 0, 0, 0, 0, 5, 5, 5});
  CHECK(pos == std::vector<std::int32_t>{0, 0, 1, 2, 0, 0, 1, 2, 0, 1, 2, 3, 4, 0, 1, 2});
}

}  // namespace tptrain
