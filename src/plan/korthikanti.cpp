#include "src/plan/korthikanti.hpp"

namespace tptrain::plan {

const char* korthikanti_case_name(KorthikantiCase k) {
  switch (k) {
    case KorthikantiCase::no_parallelism: return "no parallelism";
    case KorthikantiCase::tensor: return "tensor parallel";
    case KorthikantiCase::tensor_sequence: return "tensor + sequence parallel";
    case KorthikantiCase::tensor_selective: return "tensor parallel + selective recompute";
    case KorthikantiCase::tensor_sequence_selective: return "tensor + sequence parallel + selective recompute";
    case KorthikantiCase::full_recompute: return "full recompute";
  }
  return "";
}

double korthikanti_table2(KorthikantiCase k, double s, double b, double h, double a, double t) {
  const double sbh = s * b * h;
  switch (k) {
    case KorthikantiCase::no_parallelism: return sbh * (34 + 5 * a * s / h);
    case KorthikantiCase::tensor: return sbh * (10 + 24 / t + 5 * a * s / (h * t));
    case KorthikantiCase::tensor_sequence: return sbh * (34 / t + 5 * a * s / (h * t));
    case KorthikantiCase::tensor_selective: return sbh * (10 + 24 / t);
    case KorthikantiCase::tensor_sequence_selective: return sbh * 34 / t;
    case KorthikantiCase::full_recompute: return 2 * sbh;
  }
  return 0;
}

const std::vector<KorthikantiTensor>& korthikanti_inventory() {
  // Section 4.1: attention 11sbh + 5as²b, MLP 19sbh, two LayerNorm inputs 4sbh.
  static const std::vector<KorthikantiTensor> inventory{
      {"attention: QKV input", 2, 0, false, false},
      {"attention: Q and K", 4, 0, true, false},
      {"attention: softmax output", 0, 2, true, true},
      {"attention: softmax dropout mask", 0, 1, true, true},
      {"attention: dropout output", 0, 2, true, true},
      {"attention: V", 2, 0, true, false},
      {"attention: projection input", 2, 0, true, false},
      {"attention: projection dropout mask", 1, 0, false, false},
      {"MLP: input", 2, 0, false, false},
      {"MLP: GELU input", 8, 0, true, false},
      {"MLP: GELU output", 8, 0, true, false},
      {"MLP: dropout mask", 1, 0, false, false},
      {"LayerNorm 1 input", 2, 0, false, false},
      {"LayerNorm 2 input", 2, 0, false, false},
  };
  return inventory;
}

double korthikanti_from_inventory(KorthikantiCase k, double s, double b, double h, double a, double t) {
  if (k == KorthikantiCase::full_recompute) return 2 * s * b * h;
  if (k == KorthikantiCase::no_parallelism) t = 1;
  const bool sequence = k == KorthikantiCase::tensor_sequence || k == KorthikantiCase::tensor_sequence_selective;
  const bool selective = k == KorthikantiCase::tensor_selective || k == KorthikantiCase::tensor_sequence_selective;
  double bytes = 0;
  for (const KorthikantiTensor& x : korthikanti_inventory()) {
    if (selective && x.attention_core) continue;
    const double size = x.sbh_coefficient * s * b * h + x.score_coefficient * a * s * s * b;
    bytes += (x.split_by_tensor || sequence) ? size / t : size;
  }
  return bytes;
}

KorthikantiCase korthikanti_case(const Config& c) {
  if (c.recompute == Recompute::full) return KorthikantiCase::full_recompute;
  const bool selective = c.recompute == Recompute::selective;
  if (c.sequence_parallel)
    return selective ? KorthikantiCase::tensor_sequence_selective : KorthikantiCase::tensor_sequence;
  if (c.tensor() == 1 && !selective) return KorthikantiCase::no_parallelism;
  return selective ? KorthikantiCase::tensor_selective : KorthikantiCase::tensor;
}

}  // namespace tptrain::plan
