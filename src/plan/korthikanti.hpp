// Activation memory per transformer layer as Korthikanti et al. 2022 ("Reducing Activation
// Recomputation in Large Transformer Models") count it: Table 2's closed forms, and the section
// 4.1 inventory they come from. Their model has dropout and 16-bit activations (2 bytes, masks 1
// byte); tptrain has no dropout, so its own inventory (src/plan/activation_memory.hpp) differs:
// `tptrain plan` prints this figure beside its own for comparison with the paper.
#pragma once

#include <string>
#include <vector>

#include "src/plan/plan_config.hpp"

namespace tptrain::plan {

// The rows of Table 2.
enum class KorthikantiCase {
  no_parallelism,             // sbh(34 + 5as/h)
  tensor,                     // sbh(10 + 24/t + 5as/(ht))
  tensor_sequence,            // sbh(34/t + 5as/(ht))
  tensor_selective,           // sbh(10 + 24/t)
  tensor_sequence_selective,  // sbh·34/t
  full_recompute,             // 2sbh
};
const char* korthikanti_case_name(KorthikantiCase k);

// Table 2, bytes per layer for one micro-batch of b sequences (s sequence, h hidden, a heads,
// t tensor-parallel ranks).
double korthikanti_table2(KorthikantiCase k, double s, double b, double h, double a, double t);

// Section 4.1, one entry per stored tensor: bytes = sbh·sbh_coefficient + as²b·score_coefficient.
// `split_by_tensor`: the tensor lives in the tensor-parallel region (divided by t); the others are
// replicated over the group unless sequence parallelism splits them. `attention_core`: what
// selective recomputation drops (softmax output, its dropout mask and output).
struct KorthikantiTensor {
  std::string name;
  double sbh_coefficient = 0;
  double score_coefficient = 0;
  bool split_by_tensor = false;
  bool attention_core = false;
};
const std::vector<KorthikantiTensor>& korthikanti_inventory();
// Table 2 rebuilt from the inventory (full recompute: the layer input, 2sbh).
double korthikanti_from_inventory(KorthikantiCase k, double s, double b, double h, double a, double t);

// The row for a configuration: full recompute, else by sequence parallelism and selective
// recomputation (t = 1 without sequence parallelism is "no parallelism": 10 + 24/1 = 34).
KorthikantiCase korthikanti_case(const Config& c);

}  // namespace tptrain::plan
