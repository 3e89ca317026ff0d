// Activation recomputation (Korthikanti et al. 2022, section 5; training.recompute): what a
// transformer block keeps from its forward for its backward.
//   none       everything, the attention scores (the S² part) included
//   selective  everything but the attention core: the backward recomputes Q Kᵀ and the softmax
//              from Q, K and the row normalisers (one GEMM); the paper's choice
//   full       only the block's input: the backward re-runs the block's forward (its
//              tensor-parallel collectives included) just before the block's backward
// Every mode computes the same values the same way, so the gradients are bitwise equal.
// Each micro-batch between its forward and its backward (pipeline schedules) keeps its own set.
#pragma once

#include <stdexcept>
#include <string>

namespace tptrain::model {

enum class Recompute { none, selective, full };

inline const char* recompute_name(Recompute r) {
  return r == Recompute::none ? "none" : r == Recompute::selective ? "selective" : "full";
}

inline Recompute recompute_from_name(const std::string& name) {
  if (name == "none") return Recompute::none;
  if (name == "selective") return Recompute::selective;
  if (name == "full") return Recompute::full;
  throw std::invalid_argument("tptrain: training.recompute = \"" + name +
                              "\": expected \"none\", \"selective\" or \"full\"");
}

}  // namespace tptrain::model
