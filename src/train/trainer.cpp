#include "src/train/trainer.hpp"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "io/checkpoint_file.hpp"
#include "io/metrics.hpp"
#include "src/data/batch_sampler.hpp"
#include "src/data/token_dataset.hpp"
#include "src/log.hpp"
#include "src/model/gpt_model.hpp"
#include "src/train/lr_schedule.hpp"
#include "src/train/model_checkpoint.hpp"
#include "src/train/optimizer.hpp"

namespace tptrain::train {

namespace {

using Model = model::GptModel<float>;
using Exec = kx::ExecSpace;

model::GptShape shape_of(const io::Deck& deck) {
  model::GptShape s;
  s.layers = deck.model.layers;
  s.hidden = deck.model.hidden;
  s.heads = deck.model.heads;
  s.ffn_hidden = deck.model.ffn_hidden;
  s.seq_length = deck.model.seq_length;
  s.vocab_size = deck.model.vocab_size;
  s.tensor = deck.parallel.tensor;
  return s;
}

// Every rank must agree before going on: one rank's exception ends the job everywhere with the
// message of the lowest failing rank, printed once.
template <class F>
bool on_every_rank(MPI_Comm comm, F&& f) {
  std::string problem;
  try {
    f();
  } catch (const std::exception& e) {
    problem = e.what();
  }
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  int first_bad = problem.empty() ? INT32_MAX : rank;
  MPI_Allreduce(MPI_IN_PLACE, &first_bad, 1, MPI_INT, MPI_MIN, comm);
  if (first_bad == INT32_MAX) return true;
  if (rank == first_bad) log::error(problem);
  return false;
}

// Device copies of a micro-batch's inputs and targets.
struct DeviceBatch {
  kernels::Tokens inputs, targets;
  std::vector<std::int32_t> h_inputs, h_targets;
  explicit DeviceBatch(std::int64_t n)
      : inputs("batch.inputs", n), targets("batch.targets", n),
        h_inputs(static_cast<std::size_t>(n)), h_targets(static_cast<std::size_t>(n)) {}
  void upload() {
    using Host = Kokkos::View<const int*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    Kokkos::deep_copy(inputs, Host(h_inputs.data(), h_inputs.size()));
    Kokkos::deep_copy(targets, Host(h_targets.data(), h_targets.size()));
  }
};

// Mean loss over the first `windows` evaluation windows of `data` (DESIGN.md: window j covers
// tokens [j*S, j*S+S]), in batches of the model's micro-batch size.
double evaluate(Model& model, const data::TokenDataset& data, std::int64_t windows) {
  const Exec exec;
  const int S = model.shape().seq_length;
  const int B = model.micro_batch();
  DeviceBatch batch(model.tokens());
  double sum = 0.0;
  for (std::int64_t first = 0; first < windows; first += B) {
    const std::int64_t rows = std::min<std::int64_t>(B, windows - first);
    for (int b = 0; b < B; ++b) {  // a last partial batch repeats its first window, not counted
      const std::size_t j = static_cast<std::size_t>(first + (b < rows ? b : 0));
      data.window(j, S, &batch.h_inputs[static_cast<std::size_t>(b) * S],
                  &batch.h_targets[static_cast<std::size_t>(b) * S]);
    }
    batch.upload();
    sum += model.forward(exec, batch.inputs, batch.targets, rows * S);
  }
  return sum / static_cast<double>(windows * S);
}

// Weights and AdamW moments as checkpoint tensors (host copies owned by the returned holder).
struct CheckpointTensors {
  std::vector<io::TensorShard> shards;
  std::vector<Kokkos::View<float*, Kokkos::HostSpace>> host;
  std::vector<std::pair<kernels::Vector<float>, std::size_t>> device;  // device view, host index

  CheckpointTensors(Model& m, const parallel::Topology& topo, bool with_moments) {
    const bool writer = topo.coords().dp == 0;
    for (model::Parameter<float>* p : m.parameters()) {
      add("model/" + p->name, *p, p->value, writer);
      if (with_moments) {
        add("optimizer/exp_avg/" + p->name, *p, p->exp_avg, writer);
        add("optimizer/exp_avg_sq/" + p->name, *p, p->exp_avg_sq, writer);
      }
    }
  }
  void add(const std::string& name, const model::Parameter<float>& p, const kernels::Vector<float>& v,
           bool writer) {
    io::TensorShard s;
    s.name = name;
    for (auto d : p.shape) s.global_shape.push_back(static_cast<std::uint64_t>(d));
    s.global_shape[0] = static_cast<std::uint64_t>(p.saved_rows);
    s.slabs = slabs_of(p);
    host.emplace_back(Kokkos::view_alloc(Kokkos::WithoutInitializing, name), v.extent(0));
    device.emplace_back(v, host.size() - 1);
    s.data = host.back().data();
    s.write = writer && (!p.replicated() || p.tp_rank == 0);
    shards.push_back(std::move(s));
  }
  void download() {
    for (auto& [v, i] : device) Kokkos::deep_copy(host[i], v);
  }
  void upload() {
    for (auto& [v, i] : device) Kokkos::deep_copy(v, host[i]);
  }
};

std::string checkpoint_path(const io::Deck& deck, std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld.h5", static_cast<long long>(step));
  return (std::filesystem::path(deck.checkpoint.dir) / name).string();
}

void save_checkpoint(Model& model, const io::Deck& deck, const parallel::Topology& topo,
                     std::int64_t step, std::int64_t tokens_seen) {
  if (topo.world_rank() == 0) std::filesystem::create_directories(deck.checkpoint.dir);
  MPI_Barrier(topo.world());
  CheckpointTensors t(model, topo, true);
  t.download();
  io::CheckpointMeta meta;
  meta.step = step;
  meta.tokens_seen = tokens_seen;
  meta.deck = deck.to_toml();
  meta.tp = topo.layout().tensor;
  meta.pp = topo.layout().pipeline;
  meta.dp = topo.layout().data;
  const std::string path = checkpoint_path(deck, step);
  const auto t0 = std::chrono::steady_clock::now();
  io::write_checkpoint(topo.world(), path, meta, t.shards);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::infof("checkpoint {} written in {:.2f} s", path, s);
}

void load_weights(Model& model, const parallel::Topology& topo, const std::string& path) {
  CheckpointTensors t(model, topo, false);
  io::read_checkpoint(topo.world(), path, t.shards);
  t.upload();
}

std::string format_duration(double seconds) {
  const long s = std::lround(seconds);
  return s >= 3600 ? fmt::format("{}h{:02}m", s / 3600, s / 60 % 60) : fmt::format("{}m{:02}s", s / 60, s % 60);
}

}  // namespace

int run_training(const io::Deck& deck, const parallel::Topology& topo) {
  const Exec exec;
  const model::GptShape shape = shape_of(deck);
  const auto& tc = deck.training;
  if (topo.layout().pipeline > 1) {
    log::error("parallel.pipeline > 1 is not implemented yet (pipeline parallelism is planned)");
    return 2;
  }

  std::optional<data::TokenDataset> train_data, valid_data;
  std::optional<data::BatchSampler> sampler;
  if (!on_every_rank(topo.world(), [&] {
        train_data = data::TokenDataset::open(deck.data.train, shape.vocab_size);
        if (!deck.data.valid.empty()) valid_data = data::TokenDataset::open(deck.data.valid, shape.vocab_size);
        sampler.emplace(*train_data, shape.seq_length, tc.global_batch, tc.micro_batch, topo.coords().dp,
                        topo.layout().data, tc.seed);
      }))
    return 1;

  Model model(shape, tc.micro_batch, topo.tp(), tc.seed);
  std::int64_t params = 0;
  for (auto* p : model.parameters()) params += (p->replicated() ? 1 : p->tp_size) * p->local_size();
  log::infof("model: {} layers, hidden {}, heads {}, ffn {}, seq {}, vocab {} (padded {}): {:.2f} M parameters",
             shape.layers, shape.hidden, shape.heads, shape.ffn_hidden, shape.seq_length,
             shape.vocab_size, shape.padded_vocab(), params / 1e6);

  const std::int64_t eval_windows =
      valid_data ? std::min<std::int64_t>(tc.eval_windows, static_cast<std::int64_t>(valid_data->num_windows(shape.seq_length))) : 0;
  if (valid_data && eval_windows == 0) log::warning("data.valid is shorter than one evaluation window: no evaluation");

  io::MetricsWriter metrics(topo.world_rank() == 0 ? deck.run.dir : "");
  const LrSchedule schedule{deck.optimizer.lr, deck.optimizer.min_lr, deck.optimizer.warmup_steps, tc.steps,
                            deck.optimizer.decay};
  const AdamWConfig adamw{deck.optimizer.beta1, deck.optimizer.beta2, deck.optimizer.eps,
                          deck.optimizer.weight_decay};
  const auto parameters = model.parameters();
  const int micro_batches = sampler->micro_batches_per_step();
  const std::int64_t tokens_per_step = std::int64_t(tc.global_batch) * shape.seq_length;
  DeviceBatch batch(model.tokens());

  log::infof("training: {} steps of {} sequences ({} micro-batches of {} per data-parallel rank), {} tokens/step",
             tc.steps, tc.global_batch, micro_batches, tc.micro_batch, tokens_per_step);
  const auto start = std::chrono::steady_clock::now();
  auto window_start = start;
  std::int64_t window_tokens = 0;
  for (std::int64_t step = 0; step < tc.steps; ++step) {
    Kokkos::Profiling::pushRegion("tptrain::train::step");
    model.zero_grad(exec);
    double loss_sum = 0.0;
    // Gradients of the mean loss over the global batch: each token's loss weighs 1/(B_global S).
    const float scale = 1.0f / static_cast<float>(tokens_per_step);
    for (int m = 0; m < micro_batches; ++m) {
      sampler->micro_batch(step, m, batch.h_inputs.data(), batch.h_targets.data());
      batch.upload();
      loss_sum += model.forward(exec, batch.inputs, batch.targets);
      model.backward(exec, batch.inputs, batch.targets, scale);
    }
    loss_sum = parallel::all_reduce_scalar(topo.dp(), loss_sum, parallel::ReduceOp::sum);
    const double loss = loss_sum / static_cast<double>(tokens_per_step);
    const double grad_norm = global_grad_norm(exec, parameters, topo.tp());
    if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
      log::error(fmt::format("step {}: loss = {}, gradient norm = {}: stopping (try a lower "
                             "optimizer.lr or training.grad_clip)", step + 1, loss, grad_norm));
      return 1;
    }
    if (tc.grad_clip > 0 && grad_norm > tc.grad_clip)  // PyTorch clip_grad_norm_
      scale_gradients(exec, parameters, static_cast<float>(tc.grad_clip / (grad_norm + 1e-6)));
    const double lr = schedule.at(step);
    adamw_step(exec, parameters, adamw, lr, step + 1);
    Kokkos::Profiling::popRegion();
    window_tokens += tokens_per_step;

    const bool last = step + 1 == tc.steps;
    const bool log_now = (step + 1) % tc.log_interval == 0 || step == 0 || last;
    const bool eval_now = eval_windows > 0 && ((tc.eval_interval > 0 && (step + 1) % tc.eval_interval == 0) || last);
    if (!log_now && !eval_now) continue;
    exec.fence();
    const auto now = std::chrono::steady_clock::now();
    const double tok_s = window_tokens / std::chrono::duration<double>(now - window_start).count();
    const double elapsed = std::chrono::duration<double>(now - start).count();
    const double eta = elapsed / static_cast<double>(step + 1) * static_cast<double>(tc.steps - step - 1);
    io::MetricsRecord rec{step + 1, loss, lr, grad_norm, tok_s, std::nullopt};
    std::string line = fmt::format("step {:>6}/{} | loss {:.4f} | lr {:.3e} | grad norm {:.3f} | {:.0f} tok/s | ETA {}",
                                   step + 1, tc.steps, loss, lr, grad_norm, tok_s, format_duration(eta));
    if (eval_now) {
      rec.eval_loss = evaluate(model, *valid_data, eval_windows);
      line += fmt::format(" | eval loss {:.4f}", *rec.eval_loss);
    }
    log::info(line);
    metrics.write(rec);
    window_tokens = 0;
    window_start = std::chrono::steady_clock::now();
    if (deck.checkpoint.interval > 0 && (step + 1) % deck.checkpoint.interval == 0 && !last)
      save_checkpoint(model, deck, topo, step + 1, (step + 1) * tokens_per_step);
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log::infof("trained {} steps in {:.1f} s ({:.0f} tokens/s)", tc.steps, total,
             static_cast<double>(tc.steps * tokens_per_step) / total);
  bool saved = on_every_rank(topo.world(), [&] {
    save_checkpoint(model, deck, topo, tc.steps, tc.steps * tokens_per_step);
  });
  return saved ? 0 : 1;
}

int run_eval(const io::Deck& deck, const parallel::Topology& topo, const std::string& checkpoint,
             const std::string& data_path, int windows) {
  const model::GptShape shape = shape_of(deck);
  const std::string path = data_path.empty() ? deck.data.valid : data_path;
  std::optional<data::TokenDataset> data;
  std::int64_t n = windows > 0 ? windows : deck.training.eval_windows;
  if (!on_every_rank(topo.world(), [&] {
        if (path.empty()) throw std::runtime_error("no evaluation data: the deck has no data.valid and no --data was given");
        data = data::TokenDataset::open(path, shape.vocab_size);
        const auto available = static_cast<std::int64_t>(data->num_windows(shape.seq_length));
        if (available < n)
          throw std::runtime_error(fmt::format("{} holds {} windows of {} tokens, {} were asked for", path,
                                               available, shape.seq_length + 1, n));
      }))
    return 1;
  Model model(shape, deck.training.micro_batch, topo.tp(), deck.training.seed);
  if (!on_every_rank(topo.world(), [&] { load_weights(model, topo, checkpoint); })) return 1;
  const double loss = evaluate(model, *data, n);
  log::infof("eval: {} windows of {} tokens from {}: mean loss {:.6f} nats/token", n, shape.seq_length, path, loss);
  log::infof("{{\"eval_loss\": {:.9g}, \"windows\": {}, \"tokens\": {}}}", loss, n, n * shape.seq_length);
  return 0;
}

int run_generate(const io::Deck& deck, const parallel::Topology& topo, const std::string& checkpoint,
                 const SampleOptions& o) {
  model::GptShape shape = shape_of(deck);
  const Exec exec;
  Model model(shape, 1, topo.tp(), deck.training.seed);
  if (!on_every_rank(topo.world(), [&] { load_weights(model, topo, checkpoint); })) return 1;
  std::vector<std::int32_t> context;
  for (unsigned char c : o.prompt) context.push_back(c);
  if (context.empty()) context.push_back('\n');
  for (std::int32_t t : context)
    if (t >= shape.vocab_size) {
      log::error(fmt::format("the prompt has byte {} but the model's vocabulary has {} tokens", t, shape.vocab_size));
      return 1;
    }
  const int S = shape.seq_length;
  const int Vl = shape.local_vocab();
  DeviceBatch batch(S);
  kernels::Vector<float> row("generate.row", Vl), full("generate.full", shape.padded_vocab());
  std::mt19937_64 rng(o.seed);  // same seed on every rank: every rank draws the same token
  std::string text = o.prompt;
  for (int i = 0; i < o.tokens; ++i) {
    // The last S tokens of the context, left-aligned; causal attention makes the padding after
    // position `last` irrelevant.
    const std::size_t first = context.size() > static_cast<std::size_t>(S) ? context.size() - S : 0;
    const int last = static_cast<int>(context.size() - first) - 1;
    std::fill(batch.h_inputs.begin(), batch.h_inputs.end(), 0);
    std::copy(context.begin() + static_cast<std::ptrdiff_t>(first), context.end(), batch.h_inputs.begin());
    batch.upload();
    model.forward_logits(exec, batch.inputs);
    Kokkos::deep_copy(exec, row, Kokkos::subview(model.local_logits(), last, Kokkos::ALL()));
    parallel::all_gather(topo.tp(), exec, row, full);  // one row only, for sampling
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), full);
    std::vector<std::pair<double, int>> cand;
    for (int v = 0; v < shape.vocab_size; ++v) cand.emplace_back(h(v), v);
    std::sort(cand.begin(), cand.end(), [](auto& a, auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
    if (o.top_k > 0 && static_cast<std::size_t>(o.top_k) < cand.size()) cand.resize(static_cast<std::size_t>(o.top_k));
    int next = cand.front().second;
    if (o.temperature > 0) {
      std::vector<double> w;
      for (auto& c : cand) w.push_back(std::exp((c.first - cand.front().first) / o.temperature));
      std::discrete_distribution<int> pick(w.begin(), w.end());
      next = cand[static_cast<std::size_t>(pick(rng))].second;
    }
    context.push_back(next);
    text += static_cast<char>(next);
  }
  log::info(text);
  return 0;
}

}  // namespace tptrain::train
