// The table of deck keys (see io/deck_keys.hpp). The order of rows is the order of the resolved
// deck and of the tables in docs/deck-reference.md, which tests/io/test_deck.cpp prints from them.
#include "io/deck_keys.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>

#include "src/model/spec/block_spec.hpp"
#include "src/model/spec/sublayer_kinds.hpp"
#include "io/deck.hpp"
#include "io/read_watchdog.hpp"

namespace tptrain::io {

namespace {

template <auto Section, auto Member>
auto& member(Deck& d) {
  return (d.*Section).*Member;
}

constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();

KeyDefault integer(std::int64_t v) { return v; }
KeyDefault number(double v) { return v; }
KeyDefault text(std::string_view v) { return v; }
KeyDefault boolean(bool v) { return v; }

using M = model::ModelShape;
using P = ParallelConfig;
using T = TrainingConfig;
using O = OptimizerConfig;
using D = DataConfig;
using C = CheckpointConfig;
using R = RunConfig;

// model.architecture's values: the presets' names (src/model/spec/block_spec.hpp).
Choice preset_choice() {
  std::size_t n = 0;
  const model::BlockPreset* p = model::block_presets(n);
  Choice c;
  for (std::size_t i = 0; i < n; ++i) c.values.push_back(p[i].name);
  return c;
}

// model.architecture's meaning, from the presets' own descriptions.
const std::string& architecture_doc() {
  static const std::string doc = [] {
    std::size_t n = 0;
    const model::BlockPreset* p = model::block_presets(n);
    std::string d = "the block specification's preset (src/model/spec/block_spec.hpp): ";
    for (std::size_t i = 0; i < n; ++i) d += fmt::format("{}\"{}\" ({})", i ? ", " : "", p[i].name, p[i].what);
    return d + "; the keys below that default to the preset's override its choices";
  }();
  return doc;
}

// The values of the key that chooses `slot`'s kind (model.norm, model.position, model.mlp): the
// kinds of the registry (src/model/spec/sublayer_kinds.hpp), and what each is, from the kinds' own
// descriptions.
Choice slot_choice(model::SublayerSlot slot) {
  Choice c;
  for (const std::string_view name : model::kind_names(slot)) c.values.emplace_back(name);
  return c;
}
// (The docs live as long as the key table: one text per slot.)
std::string_view slot_doc(model::SublayerSlot slot, std::string_view what) {
  static std::map<model::SublayerSlot, std::string> docs;
  std::string& d = docs[slot];
  d = fmt::format("{}, a sublayer kind (src/model/spec/sublayer_kinds.hpp): ", what);
  bool first = true;
  for (const model::SublayerKind* k : model::kSublayerKinds)
    if (k->slot == slot) {
      d += fmt::format("{}\"{}\" ({})", first ? "" : ", ", k->name, k->what);
      first = false;
    }
  return d;
}

std::vector<DeckKey> make_keys() {
  const IntRange at_least_1{1, std::nullopt, {}};
  const IntRange at_least_0{0, std::nullopt, {}};
  const NumberRange non_negative{0.0, true, std::nullopt, {}};
  const NumberRange positive{0.0, false, std::nullopt, {}};
  const NumberRange unit{0.0, true, 1.0, {}};
  return {
      {"model", "architecture", text("gpt2"), preset_choice(), architecture_doc(),
       &member<&Deck::model, &M::architecture>},
      {"model", "norm", Derived{"the preset's"}, slot_choice(model::SublayerSlot::norm),
       slot_doc(model::SublayerSlot::norm, "the blocks' and the final norm"), &member<&Deck::model, &M::norm>},
      {"model", "mlp", Derived{"the preset's"}, slot_choice(model::SublayerSlot::mlp),
       slot_doc(model::SublayerSlot::mlp, "the MLP"), &member<&Deck::model, &M::mlp>},
      {"model", "position", Derived{"the preset's"}, slot_choice(model::SublayerSlot::position),
       slot_doc(model::SublayerSlot::position, "the positions"), &member<&Deck::model, &M::position>},
      {"model", "attention", Derived{"the preset's"}, slot_choice(model::SublayerSlot::attention),
       slot_doc(model::SublayerSlot::attention, "the attention"), &member<&Deck::model, &M::attention>},
      {"model", "qkv_bias", Derived{"the preset's"}, AnyBoolean{}, "biases on the q, k and v projections",
       &member<&Deck::model, &M::qkv_bias>},
      {"model", "linear_bias", Derived{"the preset's"}, AnyBoolean{},
       "biases on the attention output and MLP projections; LayerNorm always has its bias (model.norm = "
       "\"layernorm\" needs linear_bias = true)",
       &member<&Deck::model, &M::linear_bias>},
      {"model", "layers", integer(4), at_least_1, "transformer blocks",
       &member<&Deck::model, &M::layers>},
      {"model", "hidden", integer(128), at_least_1, "model width H",
       &member<&Deck::model, &M::hidden>},
      {"model", "heads", integer(4), at_least_1, "attention heads; head_dim = hidden / heads",
       &member<&Deck::model, &M::heads>},
      {"model", "kv_heads", Derived{"model.heads"}, IntRange{1, std::nullopt, "(leave it out for model.heads)"},
       "key/value heads (grouped-query attention): a divisor of model.heads and a multiple of "
       "parallel.tensor",
       &member<&Deck::model, &M::kv_heads>},
      {"model", "ffn_hidden", Derived{"4 * model.hidden"},
       IntRange{1, std::nullopt, "(leave it out for the default 4 * model.hidden)"}, "MLP width F",
       &member<&Deck::model, &M::ffn_hidden>},
      {"model", "seq_length", integer(128), at_least_1, "context length S in tokens",
       &member<&Deck::model, &M::seq_length>},
      {"model", "vocab_size", integer(256), IntRange{2, kIntMax, {}},
       "logical vocabulary: 256 for byte-level .txt data, 50257 for GPT-2 .bin shards",
       &member<&Deck::model, &M::vocab_size>},
      {"model", "vocab_pad_multiple", integer(128), at_least_1,
       "the vocabulary is padded to a multiple of vocab_pad_multiple * parallel.tensor rows (Megatron's "
       "make-vocab-size-divisible-by), so that the logits GEMM has tensor-core shapes; padded rows are masked",
       &member<&Deck::model, &M::vocab_pad_multiple>},
      {"model", "tie_embeddings", Derived{"the preset's"}, AnyBoolean{},
       "the output layer is the word embedding (tied) or its own lm_head/weight",
       &member<&Deck::model, &M::tie_embeddings>},
      {"model", "mtp_depth", integer(0), IntRange{0, std::nullopt, "(0 = none)"},
       "multi-token prediction modules (DeepSeek-V3 §2.2), on the last pipeline stage: module k predicts token "
       "i + k + 1 from module k - 1's output and token i + k's embedding, through one block and the shared output "
       "layer; not part of generation; needs parallel.context = 1",
       &member<&Deck::model, &M::mtp_depth>},

      {"parallel", "tensor", integer(1), at_least_1, "Megatron tensor-parallel ranks",
       &member<&Deck::parallel, &P::tensor>},
      {"parallel", "context", integer(1), at_least_1,
       "context-parallel ranks (ring attention, Megatron-Core's context parallelism): each sequence is cut into "
       "2 * context chunks, a rank computes chunks r and 2 * context - 1 - r, and the keys and values travel the "
       "ring of the context group; needs model.seq_length divisible by 2 * context and flash attention (training.attention "
       "not \"batched\")",
       &member<&Deck::parallel, &P::context>},
      {"parallel", "expert", integer(1), at_least_1,
       "expert-parallel ranks (model.mlp = \"moe\"): taken from the data-parallel ranks (a divisor of "
       "parallel.data), they split each block's experts (model.experts a multiple of it) and exchange tokens by "
       "all-to-all; expert gradients are averaged over the data / expert ranks that hold the same experts",
       &member<&Deck::parallel, &P::expert>},
      {"parallel", "pipeline", integer(1), at_least_1, "pipeline stages",
       &member<&Deck::parallel, &P::pipeline>},
      {"parallel", "data", integer(1), at_least_1, "data-parallel replicas",
       &member<&Deck::parallel, &P::data>},
      {"parallel", "shard_group", integer(0), at_least_0,
       "hybrid sharding (HSDP): with optimizer.shard != \"none\", shard over groups of this many consecutive "
       "data x context ranks (a divisor of parallel.data x parallel.context) and replicate across the groups: "
       "gradients reduce-scattered inside a group, then all-reduced across groups; 0: one group of all of them. "
       "A group sits inside a node when parallel.tensor x parallel.context x (tp-dp-pp order, or pipeline 1) "
       "times it fits one; not with a mixture of experts",
       &member<&Deck::parallel, &P::shard_group>},
      {"parallel", "sequence_parallel", boolean(false), AnyBoolean{},
       "split LayerNorm, residual and dropout-free activations along the sequence over the tensor-parallel "
       "group (Korthikanti et al. 2022); needs model.seq_length divisible by parallel.tensor",
       &member<&Deck::parallel, &P::sequence_parallel>},
      {"parallel", "order", text("tp-pp-dp"), Choice{{"tp-pp-dp", "tp-dp-pp", "tp-cp-pp-dp", "tp-cp-dp-pp"}},
       "rank order, fastest axis first: tp-pp-dp (pipeline stages of a replica on neighbouring ranks) or "
       "tp-dp-pp (Megatron's: data-parallel replicas on neighbouring ranks, pipeline slowest); the context "
       "axis always follows tensor, and the orders may be spelled with it: tp-cp-pp-dp, tp-cp-dp-pp",
       &member<&Deck::parallel, &P::order>},
      {"parallel", "virtual_stages", integer(1), at_least_1,
       "model chunks per pipeline rank (interleaved 1F1B, Narayanan et al. 2021): the bubble shrinks from "
       "(p - 1)/m to (p - 1)/(v m) for v times the point-to-point messages; > 1 needs parallel.pipeline > 1, "
       "model.layers a multiple of pipeline * virtual_stages and micro-batches per step a multiple of pipeline",
       &member<&Deck::parallel, &P::virtual_stages>},
      {"parallel", "nccl_pipeline_lanes", boolean(true), AnyBoolean{},
       "NCCL builds: the pipeline's transfers on a lane (an NCCL communicator and stream) per flow, so that "
       "the flows do not wait for each other; false: one in-order queue (a fallback for a system where "
       "concurrent NCCL communicators misbehave); MPI builds ignore it",
       &member<&Deck::parallel, &P::nccl_pipeline_lanes>},
      {"parallel", "mpi_device_memory", text("auto"), Choice{{"auto", "on", "off"}},
       "MPI backend on a GPU: whether MPI is handed device pointers (CUDA-aware MPI); \"auto\" asks the MPI "
       "library, \"on\"/\"off\" override its answer (off: staged through pinned host buffers, e.g. for a "
       "library that reports support but crashes on it); host builds ignore it",
       &member<&Deck::parallel, &P::mpi_device_memory>},

      {"training", "global_batch", integer(16), at_least_1,
       "sequences per optimizer step, over all data-parallel ranks",
       &member<&Deck::training, &T::global_batch>},
      {"training", "micro_batch", integer(4), at_least_1,
       "sequences per forward/backward on one data-parallel rank",
       &member<&Deck::training, &T::micro_batch>},
      {"training", "steps", integer(300), at_least_1, "optimizer steps",
       &member<&Deck::training, &T::steps>},
      {"training", "seed", integer(1234), at_least_0,
       "initial weights and data order, the same for every layout",
       &member<&Deck::training, &T::seed>},
      {"training", "precision", text("fp32"), Choice{{"fp32", "bf16", "fp16"}},
       "compute precision: fp32, or bf16/fp16 with fp32 master weights (mixed precision)",
       &member<&Deck::training, &T::precision>},
      // fp16's dynamic loss scaler (Megatron's DynamicGradScaler, its defaults): read with every
      // precision, used only with fp16 (bf16 has fp32's exponent range and needs no scaling).
      // The bounds are src/train/loss_scaler.hpp's (kMaxLossScale, kMaxGrowthFactor,
      // kMinBackoffFactor; tests/train/test_loss_scaler.cpp holds them equal), where they are
      // explained: past them the scale would leave the range the trainer can use (or become
      // infinite), or jump across fp16's whole exponent range in a step or two.
      {"training", "loss_scale_initial", number(4294967296.0), NumberRange{0.0, false, 0x1p64, "(at most 2^64)", true},
       "fp16 only: starting loss scale (2^32)",
       &member<&Deck::training, &T::loss_scale_initial>},
      {"training", "loss_scale_window", integer(1000), at_least_1,
       "fp16 only: steps without overflow before the loss scale grows",
       &member<&Deck::training, &T::loss_scale_window>},
      {"training", "loss_scale_hysteresis", integer(2), at_least_1,
       "fp16 only: overflowing steps (since the last growth) before the loss scale shrinks",
       &member<&Deck::training, &T::loss_scale_hysteresis>},
      {"training", "loss_scale_min", number(1.0), positive,
       "fp16 only: the loss scale never shrinks below this",
       &member<&Deck::training, &T::loss_scale_min>},
      {"training", "loss_scale_growth_factor", number(2.0), NumberRange{1.0, false, 1024.0, {}, true},
       "fp16 only: factor applied to the loss scale after loss_scale_window clean steps",
       &member<&Deck::training, &T::loss_scale_growth_factor>},
      {"training", "loss_scale_backoff_factor", number(0.5), NumberRange{0x1p-10, true, 1.0, "(at least 1/1024)"},
       "fp16 only: factor applied to the loss scale when it shrinks",
       &member<&Deck::training, &T::loss_scale_backoff_factor>},
      {"training", "recompute", text("selective"), Choice{{"none", "selective", "full"}},
       "activation recomputation: none keeps every activation, selective recomputes the attention core (the "
       "S^2 part), full keeps only each block's input and recomputes the block in the backward",
       &member<&Deck::training, &T::recompute>},
      {"training", "attention", text("default"), Choice{{"default", "flash", "batched"}},
       "attention core: flash (tiled online softmax, no S^2 buffer; the default on CPUs) or batched (GEMMs over "
       "stored S^2 scores; the default on GPUs until measured); default: the backend's choice (flash under "
       "parallel.context > 1)",
       &member<&Deck::training, &T::attention>},
      {"training", "grad_clip", number(1.0), NumberRange{0.0, true, std::nullopt, "(0 = off)"},
       "global gradient-norm clip", &member<&Deck::training, &T::grad_clip>},
      {"training", "mtp_loss_coeff", number(0.3), NumberRange{0.0, true, std::nullopt, ""},
       "the weight lambda of the multi-token prediction modules' mean loss in the training loss (model.mtp_depth > "
       "0; DeepSeek-V3: 0.3, then 0.1); logged as mtp_loss",
       &member<&Deck::model, &M::mtp_loss_coeff>},
      {"training", "log_interval", integer(10), at_least_1, "steps between metric lines",
       &member<&Deck::training, &T::log_interval>},
      {"training", "eval_interval", integer(100), IntRange{0, std::nullopt, "(0 = never)"},
       "steps between evaluations on data.valid", &member<&Deck::training, &T::eval_interval>},
      {"training", "eval_windows", integer(16), at_least_1,
       "validation windows of seq_length tokens per evaluation",
       &member<&Deck::training, &T::eval_windows>},
      {"training", "tasks", text(""), PathRule{true, false},
       "a multiple-choice task file (JSON Lines of {\"context\", \"endings\", \"label\"}, as tptrain eval --tasks "
       "reads) scored every training.tasks_interval steps and at the last: mc_accuracy, mc_accuracy_norm and "
       "mc_examples in metrics.jsonl; \"\" = none",
       &member<&Deck::training, &T::tasks>},
      {"training", "tasks_interval", integer(0), IntRange{0, std::nullopt, "(0 = never)"},
       "steps between multiple-choice evaluations on training.tasks", &member<&Deck::training, &T::tasks_interval>},
      {"training", "skip_spikes", boolean(false), AnyBoolean{},
       "skip an optimizer step whose loss or gradient norm is a spike (more than training.spike_zscore "
       "standard deviations above the mean of the last training.spike_window accepted steps) or not finite, "
       "as llm.c does; the step's batch is consumed",
       &member<&Deck::training, &T::skip_spikes>},
      {"training", "spike_zscore", number(6.0), NumberRange{0.0, false, std::nullopt, {}},
       "training.skip_spikes: how many standard deviations above the window's mean a spike is",
       &member<&Deck::training, &T::spike_zscore>},
      {"training", "spike_window", integer(100), IntRange{2, 1000, {}},
       "training.skip_spikes: accepted steps whose loss and gradient norm make the mean (spikes are judged "
       "once the window is full)",
       &member<&Deck::training, &T::spike_window>},
      {"training", "max_skipped_steps", integer(10), at_least_1,
       "training.skip_spikes: the run stops with exit 1 at this many skipped steps in a row",
       &member<&Deck::training, &T::max_skipped_steps>},
      {"training", "straggler_factor", number(1.5), NumberRange{1.0, false, std::nullopt, {}},
       "a rank whose step time (its own work, the waits for other ranks left out) exceeds this times the "
       "median for training.straggler_intervals log intervals in a row gets a warning naming its host and GPU",
       &member<&Deck::training, &T::straggler_factor>},
      {"training", "straggler_intervals", integer(3), at_least_1,
       "log intervals in a row a rank must be slow for the straggler warning",
       &member<&Deck::training, &T::straggler_intervals>},
      {"training", "init_from", text(""), PathRule{true, false},
       "a checkpoint whose weights start the run (e.g. from tptrain import): weights only, step 0, fresh "
       "optimizer and data order; \"\" = initialise from training.seed; a checkpoint to resume from wins",
       &member<&Deck::training, &T::init_from>},

      {"optimizer", "lr", number(3e-3), positive, "peak learning rate",
       &member<&Deck::optimizer, &O::lr>},
      {"optimizer", "min_lr", Derived{"optimizer.lr / 10"}, non_negative,
       "learning rate at the last step", &member<&Deck::optimizer, &O::min_lr>},
      {"optimizer", "warmup_steps", integer(30), at_least_0, "linear warmup steps",
       &member<&Deck::optimizer, &O::warmup_steps>},
      {"optimizer", "decay", text("cosine"), Choice{{"cosine", "linear", "constant"}},
       "schedule after warmup", &member<&Deck::optimizer, &O::decay>},
      {"optimizer", "weight_decay", number(0.1), non_negative, "AdamW decoupled weight decay",
       &member<&Deck::optimizer, &O::weight_decay>},
      {"optimizer", "beta1", number(0.9), unit, "Adam first-moment decay",
       &member<&Deck::optimizer, &O::beta1>},
      {"optimizer", "beta2", number(0.95), unit, "Adam second-moment decay",
       &member<&Deck::optimizer, &O::beta2>},
      {"optimizer", "eps", number(1e-8), positive, "Adam epsilon",
       &member<&Deck::optimizer, &O::eps>},
      {"optimizer", "distributed", boolean(false), AnyBoolean{},
       "shard AdamW's state (fp32 master weights and moments) over the data-parallel group (ZeRO-1): "
       "gradients are reduce-scattered, updated weights all-gathered; the spelling of optimizer.shard = "
       "\"optimizer\"",
       &member<&Deck::optimizer, &O::distributed>},
      {"optimizer", "shard", Derived{"\"optimizer\" with optimizer.distributed, else \"none\""},
       Choice{{"none", "optimizer", "gradients", "parameters"}},
       "what each data-parallel rank (data x context; experts: the expert-data group) keeps only its shard of: "
       "\"optimizer\" the fp32 master weights and AdamW moments (ZeRO-1), \"gradients\" those and the fp32 "
       "gradients, reduce-scattered after every micro-batch's backward of each block (ZeRO-2), \"parameters\" "
       "those and the compute weights, each block's all-gathered before its forward and its backward, the next "
       "block's prefetched (ZeRO-3, FSDP)",
       &member<&Deck::optimizer, &O::shard>},
      {"optimizer", "reshard_after_forward", boolean(true), AnyBoolean{},
       "with optimizer.shard = \"parameters\": free each block's gathered weights after its forward and gather "
       "them again for its backward (true), or keep them from the forward to the backward (false: one gather "
       "per micro-batch instead of two, the whole model's weights held at once, as FSDP2's option)",
       &member<&Deck::optimizer, &O::reshard_after_forward>},

      {"data", "train", Required{}, PathRule{false, true},
       "the training data, a .txt file (byte-level tokens) or a .bin llm.c token shard, or a folder "
       "or glob pattern of them (one stream, in name order), relative to the deck's folder; or a weighted blend "
       "of such paths, [{path = ..., weight = ...}, ...]: each sequence comes from entry i with probability "
       "weight_i / sum of weights",
       &member<&Deck::data, &D::train>},
      {"data", "valid", text(""), PathRule{true, true},
       "validation tokens (\"\" = none), a path or a blend as data.train (evaluated per entry, eval_loss weighted)",
       &member<&Deck::data, &D::valid>},
      {"data", "allow_blend_change", boolean(false), AnyBoolean{},
       "a resume whose data.train differs from the one its checkpoint records (an entry added or removed, a "
       "weight, a size in tokens, an order, a path) goes on, with a warning that lists the changes: the new "
       "blend draws from the checkpoint's step on; without it such a resume is refused, naming the changes",
       &member<&Deck::data, &D::allow_blend_change>},
      {"data", "tokenizer", text("bytes"), Choice{{"bytes", "gpt2", "cl100k_base", "o200k_base"}, "tiktoken:"},
       "how text becomes tokens: \"bytes\" (byte b is token b), \"gpt2\" (GPT-2's byte-level BPE, 50,257 ids), "
       "tiktoken's \"cl100k_base\" (100,277 ids) or \"o200k_base\" (200,019 ids), or \"tiktoken:PATH\", a "
       "tiktoken rank file (Llama 3's tokenizer.model) relative to the deck's folder, with "
       "data.tokenizer_pattern; model.vocab_size must hold the tokenizer's ids",
       &member<&Deck::data, &D::tokenizer>},
      {"data", "tokenizer_dir", text(""), PathRule{true, false},
       "folder of GPT-2's encoder.json and vocab.bpe, or of cl100k_base.tiktoken and o200k_base.tiktoken "
       "(\"\" = the cache folder that jobs/setup-deps.sh fills, ${XDG_CACHE_HOME:-$HOME/.cache}/tptrain/gpt2 "
       "or .../tiktoken)",
       &member<&Deck::data, &D::tokenizer_dir>},
      {"data", "tokenizer_pattern", text(""), Choice{{"", "cl100k", "o200k", "llama3"}},
       "pre-tokenization pattern of data.tokenizer = \"tiktoken:PATH\" (required there, \"\" otherwise): "
       "\"cl100k\", \"o200k\" or \"llama3\" (cl100k's pattern with Llama 3's 256 special tokens)",
       &member<&Deck::data, &D::tokenizer_pattern>},
      {"data", "document_mask", boolean(false), AnyBoolean{},
       "attention stays within each document of a packed sequence: a token sees the tokens from its "
       "document's <|endoftext|> on (either attention core; not with data.tokenizer = \"bytes\")",
       &member<&Deck::data, &D::document_mask>},
      {"data", "reset_positions", boolean(false), AnyBoolean{},
       "position ids (learned or rotary) restart at 0 at each document's <|endoftext|>; the first, "
       "partial document of a sequence starts at 0 (not with data.tokenizer = \"bytes\")",
       &member<&Deck::data, &D::reset_positions>},

      {"checkpoint", "dir", Derived{"<run.dir>/checkpoints"}, PathRule{false, false},
       "checkpoint folder", &member<&Deck::checkpoint, &C::dir>},
      {"checkpoint", "interval", integer(0), IntRange{0, std::nullopt, "(0 = only at the end)"},
       "steps between checkpoints", &member<&Deck::checkpoint, &C::interval>},
      {"checkpoint", "keep", integer(3), at_least_1, "newest checkpoints kept",
       &member<&Deck::checkpoint, &C::keep>},
      {"checkpoint", "resume", boolean(false), AnyBoolean{},
       "continue from the newest checkpoint in checkpoint.dir",
       &member<&Deck::checkpoint, &C::resume>},
      {"checkpoint", "overwrite", boolean(false), AnyBoolean{},
       "a run that starts from step 0 where an earlier run left checkpoints (checkpoint.dir) or "
       "metrics.jsonl (run.dir) deletes them first; false: such a start is refused (train --fresh sets "
       "it with checkpoint.resume = false)",
       &member<&Deck::checkpoint, &C::overwrite>},
      {"checkpoint", "metadata_timeout_s", number(ReadWatchdog::kDefaultSeconds), positive,
       "seconds a checkpoint's metadata read may take before the job ends with an error (a corrupt HDF5 "
       "file can make libhdf5 loop; io/read_watchdog.hpp)",
       &member<&Deck::checkpoint, &C::metadata_timeout_s>},
      {"checkpoint", "async", boolean(false), AnyBoolean{},
       "write checkpoints in the background: the state is copied to host buffers and training goes on "
       "while a thread writes the file (at most one write in flight; exit and stop signals wait for it)",
       &member<&Deck::checkpoint, &C::async>},

      {"run", "dir", text("runs/default"), PathRule{false, false}, "run outputs",
       &member<&Deck::run, &R::dir>},
  };
}

}  // namespace

std::string DeckKey::name() const { return std::string(section) + "." + std::string(key); }

KeyType DeckKey::type() const {
  if (std::holds_alternative<PathRule>(rule)) return KeyType::Path;
  if (std::holds_alternative<Choice>(rule)) return KeyType::String;
  if (std::holds_alternative<NumberRange>(rule)) return KeyType::Number;
  if (std::holds_alternative<AnyBoolean>(rule)) return KeyType::Boolean;
  return KeyType::Integer;
}

namespace {

// A sublayer kind's key (its description's, src/model/spec/sublayer_kind.hpp) as a row.
DeckKey kind_key(const model::KindKey& k) {
  if (k.text != nullptr)
    return {k.section, k.key, text(k.default_text),
            Choice{std::vector<std::string_view>(k.choices.begin(), k.choices.end())}, k.doc, k.text};
  if (k.flag != nullptr) return {k.section, k.key, boolean(k.default_value != 0), AnyBoolean{}, k.doc, k.flag};
  if (k.integer != nullptr)
    return {k.section, k.key, integer(static_cast<std::int64_t>(k.default_value)),
            IntRange{static_cast<std::int64_t>(k.lowest),
                     std::isinf(k.highest) ? std::nullopt : std::optional<std::int64_t>(std::int64_t(k.highest) - 1),
                     k.note},
            k.doc, k.integer};
  const std::optional<double> highest = std::isinf(k.highest) ? std::nullopt : std::optional<double>(k.highest);
  return {k.section, k.key, number(k.default_value), NumberRange{k.lowest, k.lowest_inclusive, highest, k.note},
          k.doc, k.number};
}

// The table with the kinds' keys in it (each once), in the registry's order: at the end of
// [model], and in [training] (weights of terms of the training loss) after training.grad_clip.
std::vector<DeckKey> with_kind_keys(std::vector<DeckKey> keys) {
  std::string_view after_model, after_training = "grad_clip";
  for (const DeckKey& k : keys)
    if (k.section == "model") after_model = k.key;
  for (const model::OwnedKindKey& owned : model::kind_keys()) {
    const model::KindKey& k = *owned.key;
    std::string_view& after = std::string_view(k.section) == "model" ? after_model : after_training;
    const auto at = std::find_if(keys.begin(), keys.end(),
                                 [&](const DeckKey& row) { return row.section == k.section && row.key == after; });
    keys.insert(at == keys.end() ? at : at + 1, kind_key(k));
    after = k.key;
  }
  return keys;
}

}  // namespace

const std::vector<DeckKey>& deck_keys() {
  static const std::vector<DeckKey> keys = with_kind_keys(make_keys());
  return keys;
}

const std::vector<std::string_view>& deck_sections() {
  static const std::vector<std::string_view> sections = [] {
    std::vector<std::string_view> out;
    for (const DeckKey& k : deck_keys())
      if (std::find(out.begin(), out.end(), k.section) == out.end()) out.push_back(k.section);
    return out;
  }();
  return sections;
}

const DeckKey* find_deck_key(std::string_view section, std::string_view key) {
  for (const DeckKey& k : deck_keys())
    if (k.section == section && k.key == key) return &k;
  return nullptr;
}

}  // namespace tptrain::io
