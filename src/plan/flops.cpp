#include "src/plan/flops.hpp"

#include "src/model/model_flops.hpp"

namespace tptrain::plan {

double narayanan_flops_per_iteration(double B, double s, double l, double h, double V) {
  return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
}

double block_forward_flops(double B, const model::GptShape& shape) {
  return B * shape.seq_length * model::block_forward_flops_per_token(shape);
}

double attention_core_forward_flops(double B, double s, double h) { return 4.0 * B * s * s * h; }

double logits_forward_flops(double B, double s, double h, double V) { return 2.0 * B * s * h * V; }

double flops_per_iteration(const Config& c, Recompute r) {
  const model::GptShape& m = c.shape;
  const double B = c.global_batch, s = m.seq_length, h = m.hidden, l = m.layers;
  double blocks = 0;  // the forward of every block, of each of their shapes (DeepSeek-V3's dense first ones)
  for (const model::BlockShapeCount& b : model::block_shapes(m)) blocks += b.blocks * block_forward_flops(B, b.shape);
  const double logits = logits_forward_flops(B, s, h, m.padded_vocab());
  switch (r) {
    case Recompute::full: return 4.0 * blocks + 3.0 * logits;
    case Recompute::selective: return 3.0 * blocks + l * attention_core_forward_flops(B, s, h) + 3.0 * logits;
    case Recompute::none: break;
  }
  return 3.0 * blocks + 3.0 * logits;
}

double narayanan_training_seconds(double tokens, double parameters, double gpus, double flops_per_gpu,
                                  bool recomputation) {
  return (recomputation ? 8.0 : 6.0) * tokens * parameters / (gpus * flops_per_gpu);
}

double six_n_t(double parameters, double tokens) { return 6.0 * parameters * tokens; }

}  // namespace tptrain::plan
