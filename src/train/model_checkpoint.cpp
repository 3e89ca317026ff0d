#include "src/train/model_checkpoint.hpp"

#include <chrono>
#include <algorithm>
#include <filesystem>
#include <map>

#include "src/log.hpp"

namespace tptrain::train {

CheckpointTensors::CheckpointTensors(model::GptModel<float>& m, const parallel::Topology& topo,
                                     bool with_moments) {
  const bool writer = topo.coords().dp == 0;  // DP replicas hold identical copies
  // Every rank lists every tensor of the model, in the same order (the file layer's calls are
  // collective); a pipeline stage holds slabs of its own tensors only. The last stage's tied
  // copy of embedding/word is read like the first stage's but never written (once is enough).
  std::map<std::string, model::Parameter<float>*> mine;
  for (model::Parameter<float>* p : m.parameters()) mine[p->name] = p;
  const auto absent = [&](const std::string& name, const std::vector<std::int64_t>& shape) {
    io::TensorShard s;
    s.name = name;
    for (auto d : shape) s.global_shape.push_back(static_cast<std::uint64_t>(d));
    s.write = false;
    shards_.push_back(std::move(s));
  };
  std::size_t matched = 0;
  for (const model::LogicalTensor& t : model::logical_tensors(m.shape())) {
    const auto it = mine.find(t.name);
    if (it == mine.end()) {
      absent("model/" + t.name, t.shape);
      if (with_moments) {
        absent("optimizer/exp_avg/" + t.name, t.shape);
        absent("optimizer/exp_avg_sq/" + t.name, t.shape);
      }
      continue;
    }
    const model::Parameter<float>& p = *it->second;
    ++matched;
    const bool w = writer && !m.is_tied_copy(&p);
    add("model/" + p.name, p, p.value, w);
    if (with_moments) {
      add("optimizer/exp_avg/" + p.name, p, p.exp_avg, w);
      add("optimizer/exp_avg_sq/" + p.name, p, p.exp_avg_sq, w);
    }
  }
  if (matched != mine.size())
    throw std::logic_error("tptrain: the model holds parameters that model::logical_tensors does not list");
}

void CheckpointTensors::add(const std::string& name, const model::Parameter<float>& p,
                            const kernels::Vector<float>& v, bool writer) {
  io::TensorShard s;
  s.name = name;
  for (auto d : p.shape) s.global_shape.push_back(static_cast<std::uint64_t>(d));
  s.global_shape[0] = static_cast<std::uint64_t>(p.saved_rows);
  s.slabs = slabs_of(p);
  host_.emplace_back(Kokkos::view_alloc(Kokkos::WithoutInitializing, name), v.extent(0));
  device_.push_back(v);
  s.data = host_.back().data();
  s.write = writer && (!p.replicated() || p.tp_rank == 0);  // replicated: written once
  shards_.push_back(std::move(s));
}

void CheckpointTensors::download() {
  for (std::size_t i = 0; i < device_.size(); ++i) Kokkos::deep_copy(host_[i], device_[i]);
}

void CheckpointTensors::upload() {
  for (std::size_t i = 0; i < device_.size(); ++i) Kokkos::deep_copy(device_[i], host_[i]);
}

namespace {
// Size of a checkpoint file in MB (10^6 bytes), as rank 0 sees it (for the bandwidth log line).
double file_megabytes(const parallel::Topology& topo, const std::string& path) {
  std::error_code ec;
  if (topo.world_rank() != 0) return 0.0;
  const auto bytes = std::filesystem::file_size(path, ec);
  return ec ? 0.0 : static_cast<double>(bytes) / 1e6;
}
}  // namespace

std::string checkpoint_path(const std::string& dir, std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld.h5", static_cast<long long>(step));
  return (std::filesystem::path(dir) / name).string();
}

void save_checkpoint(model::GptModel<float>& model, const io::Deck& deck, const parallel::Topology& topo,
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
  // What exact resumption needs besides weights and moments: the data order and every random
  // draw are pure functions of (seed, step), so the RNG state is the seed and the data position
  // is the step.
  meta.train = {{"step", step}, {"seed", static_cast<std::int64_t>(deck.training.seed)}, {"data_step", step}};
  const std::string path = checkpoint_path(deck.checkpoint.dir, step);
  const auto t0 = std::chrono::steady_clock::now();
  io::write_checkpoint(topo.world(), path, meta, t.shards());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::infof("checkpoint {} written in {:.2f} s ({:.0f} MB/s)", path, s, file_megabytes(topo, path) / s);
}

io::CheckpointMeta load_weights(model::GptModel<float>& model, const parallel::Topology& topo,
                                const std::string& path, bool with_moments) {
  CheckpointTensors t(model, topo, with_moments);
  const auto t0 = std::chrono::steady_clock::now();
  io::CheckpointMeta meta = io::read_checkpoint(topo.world(), path, t.shards());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double megabytes = 0;  // the tensors read (every rank its part; together each tensor once)
  for (const io::TensorShard& shard : t.shards()) {
    double n = 4e-6;
    for (auto d : shard.global_shape) n *= static_cast<double>(d);
    megabytes += n;
  }
  log::infof("checkpoint {} read and verified in {:.2f} s ({:.0f} MB of tensors, {:.0f} MB/s)", path, s,
             megabytes, megabytes / s);
  t.upload();
  return meta;
}

namespace {

// Complete checkpoints of `dir`, oldest first (the 8-digit step makes name order step order).
std::vector<std::string> complete_checkpoints(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() == 16 && name.rfind("step_", 0) == 0 && name.compare(13, 3, ".h5") == 0 &&
        entry.is_regular_file())
      found.push_back(entry.path().string());
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

std::string newest_checkpoint(MPI_Comm comm, const std::string& dir) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::string newest;
  if (rank == 0) {
    const auto all = complete_checkpoints(dir);
    if (!all.empty()) newest = all.back();
  }
  int length = static_cast<int>(newest.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, comm);
  newest.resize(static_cast<std::size_t>(length));
  MPI_Bcast(newest.data(), length, MPI_CHAR, 0, comm);
  return newest;
}

void prune_checkpoints(MPI_Comm comm, const std::string& dir, int keep) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank != 0) return;
  const auto all = complete_checkpoints(dir);
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < all.size(); ++i) {
    std::error_code ec;
    std::filesystem::remove(all[i], ec);
    if (ec) log::warning("could not delete old checkpoint " + all[i] + ": " + ec.message());
  }
}

}  // namespace tptrain::train
