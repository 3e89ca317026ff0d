#include "src/plan/step_simulation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "src/model/model_flops.hpp"
#include "src/model/spec/model_parameters.hpp"
#include "src/plan/collective_cost.hpp"
#include "src/plan/gemm_efficiency.hpp"
#include "src/plan/parameter_count.hpp"
#include "src/plan/schedule_cache.hpp"
#include "src/schedule/pipeline_schedule.hpp"

namespace tptrain::plan {

namespace {

constexpr double kUs = 1e6;

parallel::Layout layout_of(const Config& c) {
  parallel::Layout l;
  l.tensor = c.tensor();
  l.pipeline = c.pipeline;
  l.data = c.data;
  l.order = c.order;
  l.context = c.context();
  l.expert = c.expert();
  return l;
}

int world_rank(const parallel::Layout& l, int tp, int cp, int pp, int dp) {
  parallel::Coordinates x;
  x.tp = tp, x.cp = cp, x.pp = pp, x.dp = dp;
  return parallel::world_rank_of(x, l);
}

// The most members of a group whose ranks are listed; a larger group's span is taken as that of
// evenly spaced members (its axis's stride), which is what it is but for the context blocks of a
// data x context group.
constexpr std::int64_t kListedMembers = 1 << 16;

GroupSpan strided_span(std::int64_t members, std::int64_t stride, int devices_per_node) {
  const std::int64_t g = std::max(1, devices_per_node);
  GroupSpan s;
  s.members = members;
  // stride 0: a group of one rank (the embedding group without a pipeline)
  s.most_on_a_node = std::max<std::int64_t>(
      1, std::min(members, stride <= 0 ? members : stride >= g ? 1 : (g + stride - 1) / stride));
  s.nodes = (members + s.most_on_a_node - 1) / s.most_on_a_node;
  return s;
}

// The spans of the groups of rank (tp 0, cp 0, dp 0) of `stage`.
Spans spans_of_stage(const Config& c, int devices_per_node, int stage) {
  const parallel::Layout l = layout_of(c);
  const auto span = [&](auto&& ranks) { return span_of(ranks, devices_per_node); };
  if (c.data_context() > kListedMembers || c.world() > std::numeric_limits<int>::max() / 2) {
    const parallel::Strides st = parallel::strides_of(l);
    Spans s;
    s.tensor = strided_span(c.tensor(), 1, devices_per_node);
    s.context = strided_span(c.context(), st.context, devices_per_node);
    s.data = strided_span(c.data_context(), st.data, devices_per_node);
    s.expert = strided_span(c.expert(), st.data, devices_per_node);
    s.expert_data = strided_span(c.expert_data_context(), st.data * c.expert(), devices_per_node);
    s.embedding = strided_span(c.pipeline > 1 ? 2 : 1, st.pipeline * (c.pipeline - 1), devices_per_node);
    s.pipeline_next_across = s.pipeline_previous_across = st.pipeline * 1 >= devices_per_node;
    const std::int64_t G = c.shard_ranks();
    s.shard = strided_span(G, G <= c.context() ? st.context : st.data, devices_per_node);
    s.replica = strided_span(c.shard_replicas(), G < c.context() ? st.context * G : st.data * (G / c.context()),
                             devices_per_node);
    return s;
  }
  std::vector<std::int64_t> r;
  Spans s;
  for (int tp = 0; tp < c.tensor(); ++tp) r.push_back(world_rank(l, tp, 0, stage, 0));
  s.tensor = span(r);
  r.clear();
  for (int cp = 0; cp < c.context(); ++cp) r.push_back(world_rank(l, 0, cp, stage, 0));
  s.context = span(r);
  r.clear();
  for (int dp = 0; dp < c.data; ++dp)
    for (int cp = 0; cp < c.context(); ++cp) r.push_back(world_rank(l, 0, cp, stage, dp));
  s.data = span(r);
  r.clear();
  for (int dp = 0; dp < c.expert(); ++dp) r.push_back(world_rank(l, 0, 0, stage, dp));
  s.expert = span(r);
  r.clear();
  for (int dp = 0; dp < c.data; dp += c.expert())
    for (int cp = 0; cp < c.context(); ++cp) r.push_back(world_rank(l, 0, cp, stage, dp));
  s.expert_data = span(r);
  s.embedding = span(std::vector<std::int64_t>{world_rank(l, 0, 0, 0, 0), world_rank(l, 0, 0, c.pipeline - 1, 0)});
  // Hybrid sharding: the first G ranks of data x context (in the order dp·C + cp), and every G-th.
  const std::int64_t G = c.shard_ranks(), C = c.context();
  r.clear();
  for (std::int64_t at = 0; at < G; ++at) r.push_back(world_rank(l, 0, int(at % C), stage, int(at / C)));
  s.shard = span(r);
  r.clear();
  for (std::int64_t at = 0; at < c.data_context(); at += G) r.push_back(world_rank(l, 0, int(at % C), stage, int(at / C)));
  s.replica = span(r);
  const std::int64_t g = std::max(1, devices_per_node);
  const std::int64_t here = world_rank(l, 0, 0, stage, 0) / g;
  s.pipeline_next_across = world_rank(l, 0, 0, (stage + 1) % c.pipeline, 0) / g != here;
  s.pipeline_previous_across = world_rank(l, 0, 0, (stage + c.pipeline - 1) % c.pipeline, 0) / g != here;
  return s;
}

// A chunk's op: passes repeated (a block's, layers_per_chunk times), their seconds by stream.
struct ChunkPass {
  std::vector<std::pair<const Pass*, int>> pieces;
  std::array<double, kStreams> on{};
  double seconds = 0;
  double kernels = 0;
  double busiest_wait = 0;  // Pass::busiest_wait
};

// A time a rank computes (or its host drives a collective), and the share of its stage's ranks
// that do: all of them, or during the wait for the busiest expert rank one per expert group.
struct BusySpan {
  double start = 0, end = 0, ranks = 1;
};

struct Bucket {
  double ready = 0;
  double bytes = 0;         // fp32 gradients of the dense parameters
  double expert_bytes = 0;  // of the experts'
  bool tied = false;        // the tied word embedding's: all-reduced even when sharded
};

// One pipeline rank's state in the simulation.
struct Rank {
  int stage = 0;
  int world_rank = 0;
  Spans spans;
  BlockTimes times;
  // DeepSeek-V3's dense first blocks (model.moe_dense_layers; model::block_shape): their passes,
  // and how many lead each virtual stage's chunk.
  BlockTimes dense_times;
  std::vector<schedule::PipelineOp> ops;  // forwards and backwards, in order
  std::size_t next = 0;
  double now = 0;
  double busy = 0;  // sum of its ops' durations
  std::array<double, kStreams> on{};
  double link_free[2] = {0, 0};  // to the next rank (activations), to the previous (gradients)
  double data_free = 0;
  std::vector<Bucket> buckets;  // the reductions this backward made ready, launched at its end
  std::vector<BusySpan> computing;  // only where the node's ranks share cores (Machine::rank_time_share)
  int step_buckets = 0;         // the stage's buckets, those the optimizer updates
  double sync_end = 0, data_exposed = 0, end = 0, optimizer = 0;
};

// Processor sharing (Machine::rank_time_share < 1: a CPU node with more ranks than cores, the
// file's rates a rank's while all of them compute, 1/share ranks to a core). A rank that waits
// yields its core to the ranks on the same core (Open MPI, oversubscribed, yields in its progress
// loop), which compute faster meanwhile. The ranks are not bound, so which share a core does not
// follow the schedule: while k of the node's D ranks compute, a computing rank shares its core on
// average with 1 + (k − 1)(1/share − 1)/(D − 1) computing ranks (each of its 1/share − 1
// core-mates one of the other k − 1 computing ranks with probability (k − 1)/(D − 1)), so the
// stretch lasts share + (k − 1)(1 − share)/(D − 1) of itself: from `share` for a lone computing
// rank (the busiest expert rank) to all of it when every rank computes. A stretch in which no rank
// computes (all wait for a transfer) keeps its length. Each stage's spans count its ranks on the
// node.
double shared_cores_seconds(const std::vector<Rank>& ranks, double step, double share, double devices,
                            double stage_ranks) {
  std::vector<std::pair<double, double>> edges;  // (time, change of the computing ranks)
  for (const Rank& r : ranks)
    for (const BusySpan& b : r.computing) {
      edges.emplace_back(b.start, b.ranks * stage_ranks);
      edges.emplace_back(b.end, -b.ranks * stage_ranks);
    }
  std::sort(edges.begin(), edges.end());
  double t = 0, k = 0, shared = 0;
  const auto stretch = [&](double until) {
    if (until > t) {
      const double others = std::max(0.0, k - 1);  // computing beside one computing rank
      shared += (until - t) * (k > 1e-9 ? std::min(1.0, share + others * (1 - share) / std::max(1.0, devices - 1)) : 1.0);
    }
    t = std::max(t, until);
  };
  for (const auto& [at, change] : edges) {
    stretch(std::min(at, step));
    k += change;
  }
  stretch(step);
  return shared;
}

// model::training_flops_per_token, 6·N + 12·L·S·H, with N counted from one block's rows of each
// block shape times its blocks (the model's function lists every layer's tensors: 2 million
// layers would take seconds): a block's parameters (K of a mixture's experts), the word
// embedding or lm_head once (the logits GEMM), the final norm.
double model_flops_per_token(const model::GptShape& s) {
  double blocks = 0;
  for (const model::BlockShapeCount& b : model::block_shapes(s)) {
    const double routed = model::holds_experts(b.shape) ? std::min(s.experts_per_token, s.experts) : 0;
    for (const model::ParameterRow& r : model::block_parameter_kinds(b.shape)) {
      double size = double(model::extent(r.shape[0], b.shape));
      if (r.shape[1] != model::ParameterDim::none) size *= double(model::extent(r.shape[1], b.shape));
      blocks += b.blocks * (r.per_expert ? routed : 1.0) * size;
    }
  }
  double final_norm = 0;
  for (const model::ParameterRow& r : model::kind_parameter_rows(s, model::kFinalNormPlace))
    final_norm += double(model::extent(r.shape[0], s));
  const double n = blocks + double(s.vocab_size) * s.hidden + final_norm;
  return 6.0 * n + 12.0 * double(s.layers) * s.seq_length * s.hidden;
}

// A stage's forwards and backwards under 1F1B (interleaved).
std::vector<schedule::PipelineOp> compute_ops(int stage, int P, int v, int M) {
  return per_schedule({stage, P, v, M}, [&] {
    std::vector<schedule::PipelineOp> ops;
    for (const schedule::PipelineOp& op :
         schedule::pipeline_ops(schedule::Schedule::one_f_one_b, schedule::PipelinePlace{stage, P, v}, M))
      if (op.kind == schedule::PipelineOp::forward || op.kind == schedule::PipelineOp::backward) ops.push_back(op);
    return ops;
  });
}

}  // namespace

StepSimulation simulate_step(const Config& c, const Machine& m, io::ChromeTrace* trace) {
  const int P = c.pipeline, v = c.virtual_stages, M = c.micro_batches();
  const model::GptShape& s = c.shape;
  if (M < 1) throw std::invalid_argument("the global batch holds no micro-batch per data-parallel rank");
  if (const std::string why = schedule::schedule_problem(schedule::Schedule::one_f_one_b, P, M, v); !why.empty())
    throw std::invalid_argument(why);
  const int layers_per_chunk = s.layers / (P * v);
  const int dense_layers = model::dense_blocks_in(s, 0, s.layers);
  const auto dense_blocks = [&](int vs) { return model::dense_blocks_in(s, vs * layers_per_chunk, layers_per_chunk); };
  Config dense_config = c;
  dense_config.shape = model::block_shape(s, 0);
  // At most kMaxOps ops per rank are simulated: beyond, the steady state (every stage running one
  // forward and one backward per micro-batch) is extended by formula: each further micro-batch
  // adds the slowest stage's forward + backward to the step (and its own to each rank's parts).
  constexpr std::int64_t kMaxOps = 1 << 14;
  int M_simulated = M;
  if (std::int64_t(2) * M * v > kMaxOps) M_simulated = std::max(P, int(kMaxOps / (2 * v)) / P * P);
  const int last_virtual = P * v - 1;
  const parallel::Layout layout = layout_of(c);

  std::vector<Rank> ranks(static_cast<std::size_t>(P));
  for (int st = 0; st < P; ++st) {
    Rank& r = ranks[static_cast<std::size_t>(st)];
    r.stage = st;
    r.world_rank = world_rank(layout, 0, 0, st, 0);
    r.spans = spans_of_stage(c, m.devices, st);
    r.times = block_times(c, m, r.spans);
    if (dense_layers > 0) r.dense_times = block_times(dense_config, m, r.spans);
    r.ops = compute_ops(st, P, v, M_simulated);
  }

  // Arrival of each virtual stage's input (forward) and output gradient (backward), by micro-batch.
  const std::size_t slots = static_cast<std::size_t>(P * v) * static_cast<std::size_t>(M_simulated);
  std::vector<double> forward_in(slots, -1), backward_in(slots, -1);
  const auto slot = [&](int vs, int mb) { return static_cast<std::size_t>(vs) * M_simulated + mb; };
  // A chunk's op: the embedding, its blocks (one block's pass, repeated; the dense ones' first),
  // the head.
  const auto chunk_pass = [&](const Rank& r, int vs, bool forward) {
    const BlockTimes& t = r.times;
    const int dense = dense_blocks(vs);
    ChunkPass p;
    const auto add = [&](const Pass* x, int times) {
      if (times == 0) return;
      p.pieces.push_back({x, times});
      p.seconds += x->seconds * times;
      for (int k = 0; k < kStreams; ++k) p.on[static_cast<std::size_t>(k)] += x->on[static_cast<std::size_t>(k)] * times;
      p.kernels += double(x->kernels.size()) * times;
      p.busiest_wait += x->busiest_wait * times;
    };
    if (forward) {
      if (vs == 0) add(&t.embedding_forward, 1);
      if (!t.sharded_forward.kernels.empty()) add(&t.sharded_forward, 1);
      add(&r.dense_times.forward, dense);
      add(&t.forward, layers_per_chunk - dense);
      if (vs == last_virtual) add(&t.head_forward, 1);
    } else {
      if (vs == last_virtual) add(&t.head_backward, 1);
      add(&t.backward, layers_per_chunk - dense);
      add(&r.dense_times.backward, dense);
      if (!t.sharded_backward.kernels.empty()) add(&t.sharded_backward, 1);
      if (vs == 0) add(&t.embedding_backward, 1);
    }
    return p;
  };
  // Per (rank, chunk, direction), once: every micro-batch's op costs the same.
  std::vector<ChunkPass> passes(static_cast<std::size_t>(P * v) * 2);
  for (int st = 0; st < P; ++st)
    for (int ch = 0; ch < v; ++ch) {
      const int vs = ch * P + st;
      passes[static_cast<std::size_t>(vs) * 2] = chunk_pass(ranks[static_cast<std::size_t>(st)], vs, true);
      passes[static_cast<std::size_t>(vs) * 2 + 1] = chunk_pass(ranks[static_cast<std::size_t>(st)], vs, false);
    }
  // The trace shows every rank of a stage (they run its timeline) up to kTraceEveryRankUpTo
  // ranks in all; beyond, the stage's first rank alone.
  std::vector<std::vector<int>> traced(static_cast<std::size_t>(P));
  if (trace)
    for (int st = 0; st < P; ++st) {
      if (c.world() > kTraceEveryRankUpTo) {
        traced[static_cast<std::size_t>(st)] = {world_rank(layout, 0, 0, st, 0)};
        continue;
      }
      for (int dp = 0; dp < c.data; ++dp)
        for (int cp = 0; cp < c.context(); ++cp)
          for (int tp = 0; tp < c.tensor(); ++tp) traced[static_cast<std::size_t>(st)].push_back(world_rank(layout, tp, cp, st, dp));
    }
  const auto emit = [&](int stage, io::TraceSpan span) {
    for (const int rank : traced[static_cast<std::size_t>(stage)]) {
      span.rank = rank;
      trace->span(span);
    }
  };
  // Whether the trace shows each kernel, or each op as one span (a step of very many ops).
  double kernel_spans = 0;
  for (const ChunkPass& p : passes) kernel_spans += p.kernels * M_simulated;
  const bool expand = trace && kernel_spans * double(traced.front().size()) <= 400000;

  const double data_context = double(c.data_context()), expert_data = double(c.expert_data_context());
  // Hybrid sharding: a shard's reduce-scatter inside its group, and once a step (the last
  // micro-batch) the shard's all-reduce across the groups.
  const double replicas = double(c.shard_replicas());
  const auto reduce_seconds = [&](const Rank& r, const Bucket& b, bool last_micro_batch) {
    double t = 0;
    if (b.bytes > 0 && data_context > 1)
      t += c.distributed_optimizer && !b.tied
               ? all_gather_seconds(m, r.spans.shard, b.bytes) +
                     (last_micro_batch && replicas > 1
                          ? all_reduce_seconds(m, r.spans.replica, b.bytes / double(c.shard_ranks()))
                          : 0.0)
               : all_reduce_seconds(m, r.spans.data, b.bytes);
    if (b.expert_bytes > 0 && expert_data > 1)
      t += c.distributed_optimizer ? all_gather_seconds(m, r.spans.expert_data, b.expert_bytes)
                                   : all_reduce_seconds(m, r.spans.expert_data, b.expert_bytes);
    return t;
  };
  const double vocab_bytes = 4.0 * s.local_vocab() * double(s.hidden);
  const bool tied_copies = P > 1 && s.tie_embeddings;

  // Megatron-Core's --overlap-param-gather (Config::overlap_parameter_gather) with its default
  // --align-param-gather: the previous step's updated parameters are all-gathered beside this
  // step's first forwards, every bucket's gather dispatched at the step's start (in the order of
  // the rank's chunks and of their forwards) and the buckets (here: a block, the embedding, the
  // head) gathered one after another on the data stream; each module's pre-hook waits for its own.
  const bool gather_beside_forward = c.overlap_parameter_gather && c.distributed_optimizer && !c.shard_parameters &&
                                     data_context > 1;
  // The distributed optimizer's all-gather of `dense` and `experts` updated parameters (in the
  // compute precision) over their shard groups.
  const auto parameter_gather_seconds = [&](const Rank& r, double dense, double experts) {
    return all_gather_seconds(m, r.spans.shard, dense * c.element_bytes()) +
           (experts > 0 && expert_data > 1 ? all_gather_seconds(m, r.spans.expert_data, experts * c.element_bytes()) : 0.0);
  };
  // (gathered by, forward seconds) of each module of each of a rank's chunks, in the forward's order.
  using GatheredModules = std::vector<std::pair<double, double>>;
  const auto next_step_gathers = [&](const Rank& r) {
    const double vocabulary = parameter_gather_seconds(r, vocab_bytes / 4.0, 0);
    std::vector<GatheredModules> chunks(static_cast<std::size_t>(v));
    double gathered = 0;
    const auto module = [&](GatheredModules& chunk, double gather, double forward) {
      if (trace && gather > 0)
        emit(r.stage, io::TraceSpan{"all-gather parameters (the optimizer's)", "data", r.world_rank,
                                    static_cast<int>(Stream::data), gathered * kUs, gather * kUs});
      gathered += gather;
      chunk.emplace_back(gathered, forward);
    };
    for (int ch = 0; ch < v; ++ch) {
      const int vs = ch * P + r.stage;
      GatheredModules& chunk = chunks[static_cast<std::size_t>(ch)];
      if (vs == 0) module(chunk, vocabulary, r.times.embedding_forward.seconds);
      for (int l = 0; l < layers_per_chunk; ++l) {
        const BlockTimes& b = l < dense_blocks(vs) ? r.dense_times : r.times;
        module(chunk, parameter_gather_seconds(r, b.block_gradient_bytes / 4.0, b.block_expert_gradient_bytes / 4.0),
               b.forward.seconds);
      }
      if (vs == last_virtual) module(chunk, !s.tie_embeddings || P > 1 ? vocabulary : 0.0, r.times.head_forward.seconds);
    }
    return chunks;
  };
  std::vector<std::vector<GatheredModules>> gathers_of(ranks.size());
  if (gather_beside_forward)
    for (const Rank& r : ranks) gathers_of[static_cast<std::size_t>(r.stage)] = next_step_gathers(r);
  // What a chunk's first forward, started at `start`, waits for of its modules' gathers.
  const auto parameter_gather_wait = [&](const Rank& r, int chunk, double start) {
    double t = start, compute = 0;
    for (const auto& [gathered, forward] : gathers_of[static_cast<std::size_t>(r.stage)][static_cast<std::size_t>(chunk)]) {
      t = std::max(t, gathered) + forward;
      compute += forward;
    }
    return t - start - compute;
  };

  const bool sharing_cores = m.rank_time_share < 1;
  const auto computes = [&](Rank& r, double start, double end, double share_of_stage = 1) {
    if (sharing_cores && end > start) r.computing.push_back(BusySpan{start, end, share_of_stage});
  };

  bool progress = true;
  while (progress) {
    progress = false;
    for (Rank& r : ranks) {
      while (r.next < r.ops.size()) {
        const schedule::PipelineOp& op = r.ops[r.next];
        const bool forward = op.kind == schedule::PipelineOp::forward;
        const int vs = op.chunk * P + r.stage, mb = op.micro_batch;
        double ready = 0;
        if (forward && vs > 0) ready = forward_in[slot(vs, mb)];
        if (!forward && vs < last_virtual) ready = backward_in[slot(vs, mb)];
        if (ready < 0) break;  // its input has not been produced yet
        const ChunkPass& pass = passes[static_cast<std::size_t>(vs) * 2 + (forward ? 0 : 1)];
        double start = std::max(r.now, ready);
        if (gather_beside_forward && forward && mb == 0) {
          const double wait = parameter_gather_wait(r, op.chunk, start);  // shown before the pass
          start += wait;
          r.data_exposed += wait;
        }
        const double end = start + pass.seconds;
        if (trace) {
          if (expand) {
            double t = start;
            for (const auto& [piece, times] : pass.pieces)
              for (int i = 0; i < times; ++i)
                for (const Kernel& k : piece->kernels) {
                  emit(r.stage, io::TraceSpan{k.name, stream_name(k.stream), r.world_rank, static_cast<int>(k.stream),
                                            t * kUs, k.seconds * kUs});
                  t += k.seconds;
                }
          } else {
            emit(r.stage, io::TraceSpan{fmt::format("{} {}.{}", forward ? "forward" : "backward", mb, op.chunk), "compute",
                                      r.world_rank, 0, start * kUs, pass.seconds * kUs});
          }
        }
        computes(r, start, end - pass.busiest_wait);
        computes(r, end - pass.busiest_wait, end, 1.0 / c.expert());
        r.now = end;
        r.busy += pass.seconds;
        for (int k = 0; k < kStreams; ++k) r.on[static_cast<std::size_t>(k)] += pass.on[static_cast<std::size_t>(k)];
        // Its output to the neighbouring virtual stage, over the link (transfers in order).
        if ((forward && vs < last_virtual) || (!forward && vs > 0)) {
          const int direction = forward ? 0 : 1;
          const bool across = forward ? r.spans.pipeline_next_across : r.spans.pipeline_previous_across;
          const double t0 = std::max(end, r.link_free[direction]);
          const double t1 = t0 + point_to_point_seconds(m, across, r.times.pipeline_message_bytes);
          r.link_free[direction] = t1;
          (forward ? forward_in[slot(vs + 1, mb)] : backward_in[slot(vs - 1, mb)]) = t1;
          if (trace)
            emit(r.stage, io::TraceSpan{fmt::format("{} {}", forward ? "send activation" : "send gradient", mb), "pipeline",
                                      r.world_rank, static_cast<int>(Stream::pipeline), t0 * kUs, (t1 - t0) * kUs});
        }
        // The last micro-batch's backward finishes the chunk's gradients, bucket by bucket; with
        // sharded gradients (ZeRO-2) every micro-batch's backward reduce-scatters its buckets but
        // the word embedding's whole one (src/model/spec/gradient_buckets.hpp).
        // (FSDP reduce-scatters each block's gradients in its backward: sharded_backward.)
        const bool last_micro_batch = mb == M_simulated - 1;
        if (!forward && (last_micro_batch || c.shard_gradients) && !c.shard_parameters) {
          double t = start;
          const bool word_whole = s.tie_embeddings || s.mtp_depth > 0;
          if (vs == last_virtual) {
            t += r.times.head_backward.seconds;
            if ((!s.tie_embeddings || P > 1) && (last_micro_batch || !(P > 1 && word_whole)))
              r.buckets.push_back(Bucket{t, vocab_bytes, 0, tied_copies});
          }
          for (int l = layers_per_chunk; l-- > 0;) {  // the backward's order: the chunk's last block first
            const BlockTimes& b = l < dense_blocks(vs) ? r.dense_times : r.times;
            t += b.backward.seconds;
            r.buckets.push_back(Bucket{t, b.block_gradient_bytes, b.block_expert_gradient_bytes, false});
          }
          if (vs == 0 && (last_micro_batch || !word_whole)) r.buckets.push_back(Bucket{end, vocab_bytes, 0, tied_copies});
          if (last_micro_batch) r.step_buckets += (vs == last_virtual && (!s.tie_embeddings || P > 1) ? 1 : 0) + layers_per_chunk + (vs == 0 ? 1 : 0);
          double driven = 0;  // the host's share of the reductions, before the rank's next op
          for (const Bucket& b : r.buckets) {
            const double d = reduce_seconds(r, b, last_micro_batch);
            const double t0 = std::max(b.ready, r.data_free);
            r.data_free = t0 + d;
            driven += m.communication_host_share * d;
            if (trace && d > 0)
              emit(r.stage, io::TraceSpan{c.distributed_optimizer ? "reduce-scatter gradients" : "all-reduce gradients",
                                        "data", r.world_rank, static_cast<int>(Stream::data), t0 * kUs, d * kUs});
          }
          r.buckets.clear();  // launched
          // A host that drives its collectives (MPI without a progress thread: the gradient
          // reducer's progress() between buckets moves the bytes) computes nothing meanwhile.
          if (driven > 0) {
            computes(r, r.now, r.now + driven);
            if (trace)
              emit(r.stage, io::TraceSpan{"drive gradient reductions", "compute", r.world_rank, 0, r.now * kUs,
                                        driven * kUs});
            r.now += driven;
            r.data_exposed += driven;
          }
        }
        ++r.next;
        progress = true;
      }
    }
  }
  for (const Rank& r : ranks)
    if (r.next < r.ops.size())
      throw std::logic_error(fmt::format("step simulation: stage {} stopped at op {} of {} (a schedule that waits on itself)",
                                         r.stage, r.next, r.ops.size()));

  if (M_simulated < M) {
    double slowest = 0;
    std::vector<double> per(ranks.size(), 0);
    std::vector<std::array<double, kStreams>> per_on(ranks.size());
    for (std::size_t i = 0; i < ranks.size(); ++i)
      for (int ch = 0; ch < v; ++ch)
        for (int dir = 0; dir < 2; ++dir) {
          const ChunkPass& x = passes[static_cast<std::size_t>(ch * P + int(i)) * 2 + dir];
          per[i] += x.seconds;
          for (int k = 0; k < kStreams; ++k) per_on[i][static_cast<std::size_t>(k)] += x.on[static_cast<std::size_t>(k)];
        }
    for (const double x : per) slowest = std::max(slowest, x);
    const double more = double(M - M_simulated);
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      Rank& r = ranks[i];
      computes(r, r.now, r.now + more * slowest);  // the steady state: every stage computing
      r.now += more * slowest;
      r.data_free += more * slowest;
      r.busy += more * per[i];
      for (int k = 0; k < kStreams; ++k) r.on[static_cast<std::size_t>(k)] += more * per_on[i][static_cast<std::size_t>(k)];
    }
  }
  // After the backward: the reductions' tail, the tied embedding's sum, the gradient norm.
  for (Rank& r : ranks) {
    r.sync_end = std::max(r.now, r.data_free);
    r.data_exposed += r.sync_end - r.now;
  }
  if (tied_copies) {
    Rank& first = ranks.front();
    Rank& last = ranks.back();
    const double start = std::max(first.sync_end, last.sync_end);
    const double d = all_reduce_seconds(m, first.spans.embedding, vocab_bytes);
    for (Rank* r : {&first, &last}) {
      if (trace)
        emit(r->stage, io::TraceSpan{"all-reduce tied embedding", "data", r->world_rank, static_cast<int>(Stream::data),
                                  start * kUs, d * kUs});
      r->data_exposed += start + d - r->sync_end;  // waiting for the other copy counts as the sum's
      r->sync_end = start + d;
    }
  }
  double joined = 0;
  for (const Rank& r : ranks) joined = std::max(joined, r.sync_end);
  // The gradient norm: one scalar all-reduced over every rank (latency only).
  const GroupSpan world{c.world(), std::max<std::int64_t>(1, c.world() / std::max(1, m.devices)),
                        std::min<std::int64_t>(c.world(), m.devices)};
  joined += all_reduce_seconds(m, world, 8.0);

  // AdamW, bucket by bucket; with the distributed optimizer each updated bucket is all-gathered
  // (in the compute precision) while the next is updated.
  const StageParameters parameters = stage_parameters(s, P, c.virtual_stages);
  const double bytes_per_parameter = c.precision == "fp32" ? 28.0 : 30.0;  // read w, g, m, v; write w, m, v (+ bf16 copy)
  for (Rank& r : ranks) {
    const double dense = double(parameters.dense_of(r.stage)), experts = double(parameters.experts_of(r.stage));
    const bool sharded = c.distributed_optimizer || c.shard_parameters;
    const double shard_dense = sharded ? dense / data_context : dense;
    const double shard_experts = sharded ? experts / expert_data : experts;
    const int nb = std::max(1, r.step_buckets);
    // Besides AdamW's pass, two over the fp32 gradients that every step runs: the gradient norm
    // (training.grad_clip; its scaling is folded into AdamW's read) reads the rank's shard, and
    // zero_grad before the next step's backward writes all of the rank's gradients.
    const double gradient_passes = optimizer_seconds(m, 4.0 * (shard_dense + shard_experts)) +
                                   optimizer_seconds(m, 4.0 * (c.shard_gradients ? shard_dense + shard_experts : dense + experts));
    const double update = optimizer_seconds(m, (shard_dense + shard_experts) * bytes_per_parameter) +
                          (nb - 1) * m.kernel_overhead_us * 1e-6 + gradient_passes;
    double t = joined, gathers = joined;
    for (int b = 0; b < nb; ++b) {
      const double u = update / nb;
      if (trace)
        emit(r.stage, io::TraceSpan{"optimizer", "compute", r.world_rank, 0, t * kUs, u * kUs});
      t += u;
      if (c.distributed_optimizer && !c.shard_parameters && data_context > 1 && !gather_beside_forward) {
        const double g = parameter_gather_seconds(r, dense / nb, experts / nb);
        const double g0 = std::max(t, gathers);
        gathers = g0 + g;
        t += m.communication_host_share * g;  // the host driving the gather updates nothing meanwhile
        r.data_exposed += m.communication_host_share * g;
        if (trace)
          emit(r.stage, io::TraceSpan{"all-gather parameters", "data", r.world_rank, static_cast<int>(Stream::data), g0 * kUs,
                                    g * kUs});
      }
    }
    r.optimizer = update;
    computes(r, joined, t);
    r.end = std::max(t, gathers);
    r.data_exposed += r.end - t;
  }

  StepSimulation out;
  for (const Rank& r : ranks) out.step_seconds = std::max(out.step_seconds, r.end);
  // With shared cores every part of the breakdown shrinks in the step's proportion (which part
  // lent its core is not tracked).
  double shared = 1;
  if (sharing_cores) {
    const double node_ranks = double(std::min<std::int64_t>(c.world(), m.devices));
    const double simulated = out.step_seconds;
    out.step_seconds = shared_cores_seconds(ranks, simulated, m.rank_time_share, m.devices, node_ranks / P);
    shared = out.step_seconds / simulated;
  }
  out.peak_flops = peak_flops(m, c.precision);
  out.model_flops = model_flops_per_token(s) * double(c.global_batch) * s.seq_length;
  out.mfu = out.model_flops / (out.step_seconds * double(c.world()) * out.peak_flops);
  double least_idle = std::numeric_limits<double>::infinity();
  for (const Rank& r : ranks) {
    StepBreakdown b;
    b.stage = r.stage;
    b.world_rank = r.world_rank;
    b.compute = r.on[static_cast<std::size_t>(Stream::compute)];
    b.tensor = r.on[static_cast<std::size_t>(Stream::tensor)];
    b.context = r.on[static_cast<std::size_t>(Stream::context)];
    b.expert = r.on[static_cast<std::size_t>(Stream::expert)];
    b.data = r.data_exposed + r.on[static_cast<std::size_t>(Stream::data)];
    b.optimizer = r.optimizer;
    for (double* part : {&b.compute, &b.tensor, &b.context, &b.expert, &b.data, &b.optimizer}) *part *= shared;
    b.bubble = std::max(0.0, out.step_seconds - b.compute - b.tensor - b.context - b.expert - b.data - b.optimizer);
    out.stages.push_back(b);
    if (b.bubble < least_idle) least_idle = b.bubble, out.most_loaded = b;
    out.average.compute += b.compute / P;
    out.average.tensor += b.tensor / P;
    out.average.context += b.context / P;
    out.average.expert += b.expert / P;
    out.average.bubble += b.bubble / P;
    out.average.data += b.data / P;
    out.average.optimizer += b.optimizer / P;
  }
  if (trace)
    for (const Rank& r : ranks)
      for (const int rank : traced[static_cast<std::size_t>(r.stage)])
        for (int k = 0; k < kStreams; ++k) trace->track(io::TraceTrack{rank, k, stream_name(static_cast<Stream>(k))});
  return out;
}

}  // namespace tptrain::plan

namespace tptrain::plan {

double compute_lower_bound(const Config& c, const Machine& m) {
  // A chunk's blocks forward and backward, F + B; the last stage cannot start before P − 1 chunk
  // forwards have passed the stages before it, runs its M·v chunks of both, and its last backward
  // then crosses P − 1 chunks back: (M·v + P − 1)·(F + B), 1F1B's bubble included. A block costs
  // at least the cheapest of the model's block shapes (DeepSeek-V3's dense first blocks). Ranks
  // sharing cores (Machine::rank_time_share) may run up to 1/share times faster than that.
  const auto compute = [](const Pass& p) { return p.on[static_cast<std::size_t>(Stream::compute)]; };
  double block = std::numeric_limits<double>::infinity();
  for (const model::BlockShapeCount& b : model::block_shapes(c.shape)) {
    Config shaped = c;
    shaped.shape = b.shape;
    // Without spans the collectives cost nothing, nor the SMs they take from the GEMMs: still a bound.
    const BlockTimes t = block_times(shaped, m, Spans{});
    block = std::min(block, compute(t.forward) + compute(t.backward));
  }
  const double chunk_layers = double(c.shape.layers / (c.pipeline * c.virtual_stages));
  return m.rank_time_share * (double(c.micro_batches()) * c.virtual_stages + c.pipeline - 1) * chunk_layers * block;
}

std::string trace_note(const Config& c) {
  if (c.world() <= kTraceEveryRankUpTo) return "";
  return fmt::format("the trace shows one rank per pipeline stage ({} of {}): beyond {} ranks every tensor, context "
                     "and data rank of a stage, which runs the same timeline, is left out",
                     c.pipeline, c.world(), kTraceEveryRankUpTo);
}

}  // namespace tptrain::plan
