// The model FLOP count behind MFU (tptrain bench): GPT-2 124M's published figures.
#include "catch.hpp"
#include "src/train/model_flops.hpp"

using namespace tptrain;

TEST_CASE("model FLOPs per token: 6N + 12LSH, N without the position embedding", "[bench]") {
  model::GptShape s;  // GPT-2 124M
  s.layers = 12;
  s.hidden = 768;
  s.heads = 12;
  s.ffn_hidden = 3072;
  s.seq_length = 1024;
  s.vocab_size = 50257;
  // 124,439,808 parameters (PyTorch's count of GPT-2 small) less the 1024 x 768 position embedding.
  CHECK(train::flops_parameters(s) == 124439808.0 - 1024.0 * 768.0);
  CHECK(train::training_flops_per_token(s) == 6.0 * 123653376.0 + 12.0 * 12 * 1024 * 768);
  // A recomputed forward is a third of the training step's matrix work, less what the forward
  // does not multiply: biases and LayerNorm weights (about 0.1 % of N here).
  const double forward = train::forward_flops_per_token(s, 12, true);
  CHECK(forward * 3 == Approx(train::training_flops_per_token(s)).epsilon(2e-3));
  CHECK(train::forward_flops_per_token(s, 6, false) * 2 ==
        Approx(train::forward_flops_per_token(s, 12, false)));
}
