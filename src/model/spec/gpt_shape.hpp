// The model's logical shape (from the deck's [model]) and what one tensor-parallel rank holds.
//
// Sizes are ints (as in the deck), and so are the quantities derived from them here: token ids
// are int32, BLAS takes int dimensions and a Kokkos league counts its teams in an int. They are
// computed in 64 bits and refused with std::length_error when they do not fit (docs/design.md,
// "Index types and size limits"); element counts and offsets elsewhere are 64-bit.
#pragma once

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "src/model/spec/block_spec.hpp"
#include "base/layout_rules.hpp"

namespace tptrain::model {

// A model is configured by three values, each read straight from its deck section by the deck's
// key table (io/deck_keys.cpp): what the model is (ModelShape, [model]), how it is split over
// the ranks it computes with (ParallelLayout, the model's part of [parallel]) and which kernels
// compute it (KernelChoice, from [training]). GptShape is the three together: what a rank builds.

// The model: its block specification (src/model/spec/block_spec.hpp: norm, MLP, positions,
// biases, key/value heads, tied head, ε, θ, the mixture's sizes) and its sizes. The initial values
// make a default-constructed shape the smallest valid one; the deck's defaults are its key table's.
struct ModelShape : BlockSpec {
  int layers = 1;
  int hidden = 1;      // H
  int heads = 1;       // nh
  int ffn_hidden = 1;  // F (0 in a deck not yet resolved: 4H)
  int seq_length = 1;  // S
  int vocab_size = 1;  // V
  // The padded vocabulary is a multiple of vocab_pad_multiple * tensor (model.vocab_pad_multiple;
  // 1 here, 128 by the deck's default).
  int vocab_pad_multiple = 1;
  // Multi-token prediction (DeepSeek-V3 §2.2; model.mtp_depth = D): D sequential modules on the
  // last stage, module k predicting token i + k + 1 from module k − 1's output (the main model's
  // for k = 1) and the embedding of token i + k; their mean loss weighs λ = training.mtp_loss_coeff
  // in the training loss (src/model/multi_token_prediction.hpp).
  int mtp_depth = 0;
  double mtp_loss_coeff = 0.3;

  int head_dim() const { return heads > 0 ? hidden / heads : 0; }
  int ffn_width() const { return ffn_hidden > 0 ? ffn_hidden : 4 * hidden; }   // F, resolved
  int kv_head_count() const { return kv_heads > 0 ? kv_heads : heads; }       // 0 stands for heads
  // Multi-head latent attention's (BlockSpec): its own head widths, and the rotary tables' d_R.
  bool latent_attention() const { return attention == "mla"; }
  int qk_head_dim() const { return latent_attention() ? qk_nope_head_dim + qk_rope_head_dim : head_dim(); }
  int value_head_dim() const { return latent_attention() ? v_head_dim : head_dim(); }
  int rotary_dim() const { return latent_attention() ? qk_rope_head_dim : head_dim(); }
  // A routed expert's width F_e (0 stands for F) and the shared experts' together, n_s·F_e.
  int expert_ffn() const { return moe_ffn_hidden > 0 ? moe_ffn_hidden : ffn_width(); }
  std::int64_t shared_ffn() const { return std::int64_t(moe_shared_experts) * expert_ffn(); }
  bool take_preset_defaults() { return model::take_preset_defaults(*this); }  // block_spec.hpp
};

// The layout the model computes under; pipeline and data parallelism, which the blocks do not see,
// are the deck's own ([parallel], io::ParallelConfig extends this).
struct ParallelLayout {
  int tensor = 1;      // TP size
  // Context parallelism (parallel.context = C): each rank computes 2 chunks of S/(2C) tokens of
  // every sequence (base/context_chunks.hpp) and its attention rings over the context group
  // (src/model/ring_attention.hpp). seq_length stays S, the sequence the parameters (learned
  // positions) and the rotary tables cover; the rank's buffers hold local_seq_length() rows of it.
  int context = 1;
  // Expert parallelism (parallel.expert = ep, a mixture of experts): the E experts of every block
  // are split over ep ranks taken from the data-parallel ones, E/ep each
  // (src/model/mixture_of_experts.hpp); tokens travel to their experts by all-to-all.
  int expert = 1;
  // Megatron sequence parallelism (parallel.sequence_parallel; off for tensor = 1, where it
  // would change nothing): between the tensor-parallel regions a rank holds n = N/t of the
  // N = micro_batch * seq_length tokens (parallel/mappings.hpp).
  bool sequence_parallel = false;
};

// The kernels that compute it.
struct KernelChoice {
  // The attention core (training.attention; src/model/parallel_attention.hpp): flash, or the
  // batched GEMMs over S×S scores. It decides the attention's buffers (block_descriptor.hpp).
  bool flash_attention = true;
};

struct GptShape : ModelShape, ParallelLayout, KernelChoice {
  GptShape() = default;
  // A deck not yet resolved may leave model.ffn_hidden at 0: 4H.
  GptShape(const ModelShape& m, const ParallelLayout& p, const KernelChoice& k)
      : ModelShape(m), ParallelLayout(p), KernelChoice(k) {
    ffn_hidden = ffn_width();
  }

  static constexpr std::int64_t int_limit = std::numeric_limits<int>::max();

  const BlockSpec& spec() const { return *this; }
  int local_kv_heads() const { return kv_head_count() / tensor; }
  // Q, K and V stacked: (nh + 2·nkv)·d rows of the QKV weight (3H without grouped-query attention).
  std::int64_t qkv_width() const { return (std::int64_t(heads) + 2 * std::int64_t(kv_head_count())) * head_dim(); }
  std::int64_t kv_width() const { return std::int64_t(kv_head_count()) * head_dim(); }  // nkv·d
  std::int64_t local_qkv_width() const { return qkv_width() / tensor; }
  // Megatron pads the vocabulary to a multiple of make-vocab-size-divisible-by (128) times the
  // TP size, so that every rank's block of the logits GEMM, V_padded/tp, is a multiple of the
  // pad (tensor cores want multiples of 8); padded logits are masked out. Checkpoints hold the
  // vocab_size logical rows, so the padding can change between runs.
  // Throws std::length_error if the padded vocabulary does not fit in an int.
  int padded_vocab() const {
    const std::int64_t m = std::int64_t(vocab_pad_multiple) * tensor;
    const std::int64_t padded = (std::int64_t(vocab_size) + m - 1) / m * m;
    if (padded > int_limit)
      throw std::length_error("tptrain: model.vocab_size = " + std::to_string(vocab_size) +
                              " padded to a multiple of model.vocab_pad_multiple = " +
                              std::to_string(vocab_pad_multiple) + " times parallel.tensor = " +
                              std::to_string(tensor) + " is " +
                              std::to_string(padded) + " rows, beyond the limit " + std::to_string(int_limit) +
                              " of int32 token ids");
    return static_cast<int>(padded);
  }
  int local_vocab() const { return padded_vocab() / tensor; }    // rows of wte on one rank
  int local_heads() const { return heads / tensor; }
  int local_hidden() const { return hidden / tensor; }           // Hl = local heads * d
  int local_ffn() const { return ffn_hidden / tensor; }
  int local_expert_ffn() const { return expert_ffn() / tensor; }
  std::int64_t local_shared_ffn() const { return shared_ffn() / tensor; }
  bool splits_sequence() const { return sequence_parallel && tensor > 1; }
  // The tokens of a sequence on one rank: S, or S/C with context parallelism.
  int local_seq_length() const { return seq_length / context; }
  // Token rows of the residual stream and LayerNorm on one rank, for `tokens` tokens.
  std::int64_t sequence_rows(std::int64_t tokens) const { return splits_sequence() ? tokens / tensor : tokens; }
  // < padded_vocab() for every rank of the group, so it fits as well.
  int vocab_start(int tp_rank) const { return tp_rank * local_vocab(); }
  // Real (non-padding) vocabulary rows held by a rank.
  int valid_vocab(int tp_rank) const {
    const int v = vocab_size - vocab_start(tp_rank);
    return v < 0 ? 0 : (v > local_vocab() ? local_vocab() : v);
  }

  // Throws std::invalid_argument if a size is not positive or the shape does not divide over
  // the TP group, std::length_error if a dimension derived from it does not fit in an int.
  void validate() const {
    const auto positive = [](const char* key, int value) {
      if (value < 1)
        throw std::invalid_argument(std::string("tptrain: ") + key + " = " + std::to_string(value) +
                                    ": expected a positive size");
    };
    positive("model.layers", layers);
    positive("model.hidden", hidden);
    positive("model.heads", heads);
    positive("model.ffn_hidden", ffn_hidden);
    positive("model.seq_length", seq_length);
    positive("model.vocab_size", vocab_size);
    positive("model.vocab_pad_multiple", vocab_pad_multiple);
    positive("parallel.tensor", tensor);
    positive("parallel.context", context);
    positive("parallel.expert", expert);
    // The layout's rules, stated by their owner (base/layout_rules.hpp); expert parallelism's
    // needs the kinds (sublayer_kinds.hpp, validate_kinds).
    std::vector<rules::Problem> broken;
    for (std::vector<rules::Problem> more :
         {rules::context_problems(seq_length, context), rules::head_problems(hidden, heads),
          rules::tensor_split_problems(heads, ffn_hidden, tensor, moe_ffn_hidden)})
      broken.insert(broken.end(), more.begin(), more.end());
    for (const rules::Problem& p : broken) throw std::invalid_argument("tptrain: " + p.text());
    if (mtp_depth < 0)
      throw std::invalid_argument("tptrain: model.mtp_depth = " + std::to_string(mtp_depth) + ": expected >= 0");
    if (mtp_depth > 0 && context > 1)
      throw std::invalid_argument("tptrain: model.mtp_depth = " + std::to_string(mtp_depth) +
                                  ": multi-token prediction runs without context parallelism (parallel.context = 1): "
                                  "its shifted tokens cross the chunks of a sequence");
    if (mtp_depth >= seq_length)
      throw std::invalid_argument("tptrain: model.mtp_depth = " + std::to_string(mtp_depth) +
                                  ": expected below model.seq_length = " + std::to_string(seq_length) +
                                  " (module k predicts k + 1 tokens ahead within the window)");
    if (context > 1 && !flash_attention)
      throw std::invalid_argument("tptrain: parallel.context > 1 runs flash attention only (set training.attention = "
                                  "\"flash\")");
    const int kv = kv_head_count();
    if (kv < 1) throw std::invalid_argument("tptrain: model.kv_heads = " + std::to_string(kv) + ": expected >= 1");
    for (const rules::Problem& p : rules::kv_head_problems(heads, kv, tensor))
      throw std::invalid_argument("tptrain: " + p.text());
    for (const rules::Problem& p : rules::sequence_parallel_problems(seq_length, context, tensor, splits_sequence()))
      throw std::invalid_argument("tptrain: " + p.text());
    // The QKV weight has 3H rows (logical and, with tensor = 1, local: a BLAS dimension).
    const std::int64_t qkv_rows = 3 * std::int64_t(hidden);
    if (qkv_rows > int_limit)
      throw std::length_error("tptrain: 3 * model.hidden = " + std::to_string(qkv_rows) +
                              " QKV rows exceed the limit " + std::to_string(int_limit) +
                              " of a BLAS dimension (model.hidden <= " + std::to_string(int_limit / 3) + ")");
    (void)padded_vocab();
  }

  // validate() plus the limits that depend on the micro-batch: its tokens B*S are a BLAS
  // dimension and the league of the row-wise kernels, and its attention rows B*(nh/tp)*S (one
  // Kokkos team each) form one league. Throws before anything is allocated.
  void validate(int micro_batch) const {
    validate();
    if (micro_batch < 1)
      throw std::invalid_argument("tptrain: training.micro_batch = " + std::to_string(micro_batch) +
                                  ": expected a positive size");
    const std::int64_t tokens = std::int64_t(micro_batch) * local_seq_length();
    if (tokens > int_limit)
      throw std::length_error("tptrain: training.micro_batch * model.seq_length = " +
                              std::to_string(micro_batch) + " * " + std::to_string(seq_length) + " = " +
                              std::to_string(tokens) + " tokens exceed the limit " +
                              std::to_string(int_limit) + " of a BLAS dimension and a Kokkos league");
    const std::int64_t rows = tokens * local_heads();
    if (rows > int_limit)
      throw std::length_error("tptrain: training.micro_batch * model.heads / parallel.tensor * "
                              "model.seq_length = " + std::to_string(rows) +
                              " attention rows exceed the limit " + std::to_string(int_limit) +
                              " of a Kokkos league (one team per row)");
  }
};

}  // namespace tptrain::model
