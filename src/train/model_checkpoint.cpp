#include "src/train/model_checkpoint.hpp"

#include <chrono>
#include <filesystem>

#include "src/log.hpp"

namespace tptrain::train {

CheckpointTensors::CheckpointTensors(model::GptModel<float>& m, const parallel::Topology& topo,
                                     bool with_moments) {
  const bool writer = topo.coords().dp == 0;  // DP replicas hold identical copies
  for (model::Parameter<float>* p : m.parameters()) {
    add("model/" + p->name, *p, p->value, writer);
    if (with_moments) {
      add("optimizer/exp_avg/" + p->name, *p, p->exp_avg, writer);
      add("optimizer/exp_avg_sq/" + p->name, *p, p->exp_avg_sq, writer);
    }
  }
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
  const std::string path = checkpoint_path(deck.checkpoint.dir, step);
  const auto t0 = std::chrono::steady_clock::now();
  io::write_checkpoint(topo.world(), path, meta, t.shards());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::infof("checkpoint {} written in {:.2f} s", path, s);
}

io::CheckpointMeta load_weights(model::GptModel<float>& model, const parallel::Topology& topo,
                                const std::string& path) {
  CheckpointTensors t(model, topo, false);
  io::CheckpointMeta meta = io::read_checkpoint(topo.world(), path, t.shards());
  t.upload();
  return meta;
}

}  // namespace tptrain::train
