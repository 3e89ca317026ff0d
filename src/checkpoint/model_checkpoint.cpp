#include "src/checkpoint/model_checkpoint.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <string_view>
#include <utility>

#include "base/agreement.hpp"
#include "base/mpi_check.hpp"
#include "io/deck_text.hpp"
#include "io/path_text.hpp"
#include "src/util/log.hpp"
#include "src/train/optimizer.hpp"
#include "src/util/memory_category.hpp"

namespace tptrain::checkpoint {

template <class T>
CheckpointTensors::CheckpointTensors(model::GptModel<T>& m, const parallel::Topology& topo,
                                     bool with_moments) {
  // DP replicas and context ranks hold identical copies: data and context rank 0 write. The
  // shards of a distributed optimizer (over data x context) are disjoint parts: every rank writes
  // its own.
  // A mixture of experts' experts: the ranks of an expert-data group hold identical copies (or,
  // sharded, disjoint parts) of their experts, so its first rank writes them, each expert rank its
  // own experts.
  const bool first_copy = topo.coords().dp == 0 && topo.coords().cp == 0;
  // Hybrid sharding: the replica groups hold the same shards; the first group writes them.
  const bool first_replica = topo.replica() == nullptr || topo.replica()->rank() == 0;
  const bool first_expert_copy = topo.coords().dp / topo.layout().expert == 0 && topo.coords().cp == 0;
  // Every rank lists every tensor of the model, in the same order (the file layer's calls are
  // collective); a pipeline stage holds slabs of its own tensors only. The last stage's tied
  // copy of embedding/word is read like the first stage's but never written (once is enough).
  struct Held {
    const model::Parameter<T>* p;
    const model::GradBucket<T>* bucket;
    std::int64_t offset;  // of p in the bucket's flat buffers
  };
  std::map<std::string, Held> mine;
  for (const auto& bucket : m.buckets())
    for (std::size_t i = 0; i < bucket.params.size(); ++i)
      mine[bucket.params[i]->name] = {bucket.params[i], &bucket, bucket.offsets[i]};
  if (mine.size() != m.parameters().size())
    throw std::logic_error("tptrain: the model's buckets do not hold each of its parameters once");
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
    const model::Parameter<T>& p = *it->second.p;
    const model::GradBucket<T>& b = *it->second.bucket;
    const std::int64_t offset = it->second.offset;
    ++matched;
    const bool w = (b.sharded() ? b.expert || first_replica : b.expert ? first_expert_copy : first_copy) &&
                   !m.is_tied_copy(&p);
    // The elements of p whose optimizer state this rank holds (all of them without a
    // distributed optimizer), and where they are in the shard's buffers.
    const std::int64_t begin = std::clamp(b.shard_begin - offset, std::int64_t(0), p.local_size());
    const std::int64_t end = std::clamp(b.shard_end - offset, begin, p.local_size());
    const auto at = begin < end ? std::make_pair(offset + begin - b.shard_begin, offset + end - b.shard_begin)
                                : std::make_pair(std::int64_t(0), std::int64_t(0));
    add("model/" + p.name, p, begin, end, Kokkos::subview(b.master, at), w);
    if (with_moments) {
      add("optimizer/exp_avg/" + p.name, p, begin, end, Kokkos::subview(b.exp_avg, at), w);
      add("optimizer/exp_avg_sq/" + p.name, p, begin, end, Kokkos::subview(b.exp_avg_sq, at), w);
    }
  }
  if (matched != mine.size())
    throw std::logic_error("tptrain: the model holds parameters that model::logical_tensors does not list");
}

template <class T>
void CheckpointTensors::add(const std::string& name, const model::Parameter<T>& p, std::int64_t begin,
                            std::int64_t end, const kernels::Vector<float>& v, bool writer) {
  io::TensorShard s;
  s.name = name;
  for (auto d : p.shape) s.global_shape.push_back(static_cast<std::uint64_t>(d));
  s.global_shape[0] = static_cast<std::uint64_t>(p.saved_rows);
  s.slabs = slabs_of(p, begin, end);
  // Not zeroed here: a save copies every element from the device (zeroing 12 bytes per
  // parameter first cost as much as the copy); a load zeroes them (clear()).
  util::MemoryCategoryScope as(util::MemoryCategory::checkpoint);
  host_.emplace_back(Kokkos::view_alloc(Kokkos::WithoutInitializing, name), v.extent(0));
  device_.push_back(v);
  s.data = host_.back().data();
  s.write = writer && (!p.replicated() || p.tp_rank == 0);  // replicated: written once
  shards_.push_back(std::move(s));
}

void CheckpointTensors::download() {
  for (std::size_t i = 0; i < device_.size(); ++i) Kokkos::deep_copy(host_[i], device_[i]);
}

void CheckpointTensors::clear() {
  for (auto& h : host_) Kokkos::deep_copy(h, 0.0f);
}

std::size_t CheckpointTensors::host_bytes() const {
  std::size_t n = 0;
  for (const auto& h : host_) n += h.span() * sizeof(float);
  return n;
}

void CheckpointTensors::upload() {
  for (std::size_t i = 0; i < device_.size(); ++i) Kokkos::deep_copy(device_[i], host_[i]);
}

std::string CheckpointTensors::first_non_finite() const {
  for (std::size_t i = 0; i < host_.size(); ++i) {
    const float* x = host_[i].data();
    const std::size_t n = host_[i].extent(0);
    for (std::size_t j = 0; j < n; ++j)
      if (!std::isfinite(x[j])) return fmt::format("{} holds {} at local element {}", host_[i].label(), x[j], j);
  }
  return {};
}

namespace {
// Size of a checkpoint file in MB (10^6 bytes), as rank 0 sees it (for the bandwidth log line).
double file_megabytes(MPI_Comm comm, const std::string& path) {
  std::error_code ec;
  int rank = 0;
  TPTRAIN_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  if (rank != 0) return 0.0;
  const auto bytes = std::filesystem::file_size(path, ec);
  return ec ? 0.0 : static_cast<double>(bytes) / 1e6;
}
}  // namespace

std::string checkpoint_path(const std::string& dir, std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld.h5", static_cast<long long>(step));
  return (std::filesystem::path(dir) / name).string();
}

template <class T>
PreparedCheckpoint prepare_checkpoint(model::GptModel<T>& model, const io::Deck& deck, const parallel::Topology& topo,
                                      std::int64_t step, std::int64_t tokens_seen,
                                      const std::map<std::string, std::int64_t>& train_state,
                                      const io::BlendRecord& blend, std::unique_ptr<CheckpointTensors> reuse) {
  // Phase 1 (local, then agreed): the directory exists (it was proven writable before step 1,
  // but it may have been removed since), and the weights are finite. A diverging run must
  // never publish Inf/NaN weights as its newest checkpoint: resume and eval would pick it up.
  PreparedCheckpoint c;
  c.tensors = reuse ? std::move(reuse) : std::make_unique<CheckpointTensors>(model, topo, true);
  CheckpointTensors& t = *c.tensors;
  parallel::on_every_rank(topo.world(), [&] {
    if (topo.world_rank() == 0) std::filesystem::create_directories(deck.checkpoint.dir);
    t.download();
    if (std::string bad = t.first_non_finite(); !bad.empty())
      throw std::runtime_error(fmt::format(
          "step {}: the weights are not finite ({}): the run diverged; no checkpoint written (the newest one "
          "in {} is from before); lower optimizer.lr or raise optimizer.warmup_steps",
          step, bad, io::display_path(deck.checkpoint.dir)));
  });
  io::CheckpointMeta& meta = c.meta;
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
  meta.train.insert(train_state.begin(), train_state.end());
  meta.blend = blend;
  meta.precision = kx::precision_name<T>();
  c.path = checkpoint_path(deck.checkpoint.dir, step);
  return c;
}

void write_prepared(MPI_Comm comm, PreparedCheckpoint& c) {
  const auto t0 = std::chrono::steady_clock::now();
  io::write_checkpoint(comm, c.path, c.meta, c.tensors->shards());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::infof("checkpoint {} written in {:.2f} s ({:.0f} MB/s)", c.path, s, file_megabytes(comm, c.path) / s);
}

template <class T>
void save_checkpoint(model::GptModel<T>& model, const io::Deck& deck, const parallel::Topology& topo,
                     std::int64_t step, std::int64_t tokens_seen, const std::map<std::string, std::int64_t>& train_state,
                     const io::BlendRecord& blend) {
  PreparedCheckpoint c = prepare_checkpoint(model, deck, topo, step, tokens_seen, train_state, blend);
  write_prepared(topo.world(), c);
}

namespace {

// The [model] keys of a deck that make a model's shape, with the field each fills: what a
// checkpoint's deck attribute is read for and compared on.
constexpr std::pair<const char*, int model::GptShape::*> kShapeKeys[] = {
    {"layers", &model::GptShape::layers},         {"heads", &model::GptShape::heads},
    {"hidden", &model::GptShape::hidden},         {"ffn_hidden", &model::GptShape::ffn_hidden},
    {"vocab_size", &model::GptShape::vocab_size}, {"seq_length", &model::GptShape::seq_length}};

}  // namespace

model::GptShape checkpoint_model_shape(const std::string& deck_text) {
  std::vector<std::string> keys;
  for (const auto& [key, field] : kShapeKeys) keys.emplace_back(key);
  std::map<std::string, std::optional<std::int64_t>> saved;
  try {
    saved = io::deck_text_integers(deck_text, "model", keys);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("its deck attribute ") + e.what());
  }
  model::GptShape shape;
  std::string missing;
  for (const auto& [key, field] : kShapeKeys) {
    const auto value = saved[key];
    if (!value || *value < 1 || *value > INT32_MAX)
      missing += std::string(missing.empty() ? "" : ", ") + "model." + key;
    else
      shape.*field = static_cast<int>(*value);
  }
  if (!missing.empty()) throw std::runtime_error("its deck attribute lacks a valid " + missing);
  // The block specification's keys: a deck from before model.architecture (issue 23) is a gpt2
  // one, tied, kv_heads = heads; one from before the choice keys (issue 31) has its preset's.
  // The kinds' keys of a section ("model", or "training": a mixture's loss weights), added to
  // `names`, and the deck's values of `wanted` in the section.
  const auto with_kind_keys = [](std::vector<std::string> names, std::string_view section) {
    for (const model::OwnedKindKey& k : model::kind_keys())
      if (section == k.key->section) names.emplace_back(k.key->key);
    return names;
  };
  const auto scalars = [&](const char* section, const std::vector<std::string>& wanted) {
    try {
      return io::deck_text_scalars(deck_text, section, wanted);
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string("its deck attribute ") + e.what());
    }
  };
  std::vector<std::string> spec_keys = {"architecture", "kv_heads", "tie_embeddings", "qkv_bias", "linear_bias",
                                       "mtp_depth"};
  for (const model::SublayerSlot slot : model::kSublayerSlots) spec_keys.emplace_back(model::slot_key(slot));
  std::map<std::string, std::optional<std::string>> arch = scalars("model", with_kind_keys(spec_keys, "model"));
  const std::string name = arch["architecture"].value_or("gpt2");
  const model::BlockPreset* preset = model::block_preset(name);
  if (!preset)
    throw std::runtime_error("its deck attribute names model.architecture = \"" + name + "\", expected one of " +
                             model::block_preset_names());
  static_cast<model::BlockSpec&>(shape) = preset->spec;
  for (const model::SublayerSlot slot : model::kSublayerSlots) {
    const std::string key = model::slot_key(slot);
    if (!arch[key]) continue;
    const std::vector<std::string_view> names = model::kind_names(slot);
    if (std::find(names.begin(), names.end(), *arch[key]) == names.end())
      throw std::runtime_error("its deck attribute has an unknown model." + key + " = \"" + *arch[key] + "\"");
    model::slot_value(shape, slot) = *arch[key];
  }
  const auto boolean = [&](const char* key, bool& member) {
    if (arch[key]) member = *arch[key] == "true";
  };
  boolean("qkv_bias", shape.qkv_bias);
  boolean("linear_bias", shape.linear_bias);
  boolean("tie_embeddings", shape.tie_embeddings);
  // The kinds' keys, of [model] and [training]: a deck from before a kind has none of its keys
  // (the deck's defaults, as a deck that leaves them out reads).
  std::map<std::string, std::optional<std::string>> training = scalars("training", with_kind_keys({}, "training"));
  std::string key = "model.kv_heads";
  try {
    shape.kv_heads = arch["kv_heads"] ? std::stoi(*arch["kv_heads"]) : shape.heads;
    key = "model.mtp_depth";  // multi-token prediction's modules are tensors of the checkpoint (none before it)
    shape.mtp_depth = arch["mtp_depth"] ? std::stoi(*arch["mtp_depth"]) : 0;
    if (shape.mtp_depth < 0) throw std::invalid_argument("negative");
    key = "model.kv_heads";
    for (const model::OwnedKindKey& owned : model::kind_keys()) {
      const model::KindKey& k = *owned.key;
      key = std::string(k.section) + "." + k.key;
      const std::optional<std::string>& text = std::string_view(k.section) == "model" ? arch[k.key] : training[k.key];
      model::set_kind_key(k, shape, text ? &*text : nullptr);
    }
  } catch (const std::exception&) {
    throw std::runtime_error("its deck attribute lacks a valid " + key);
  }
  // Its kinds' rules and their keys' ranges.
  for (const rules::Problem& p : model::sublayer_problems(shape))
    throw std::runtime_error("its deck attribute breaks a rule of its model: " + p.text());
  if (shape.kv_heads < 1) throw std::runtime_error("its deck attribute lacks a valid model.kv_heads");
  return shape;
}

std::map<std::string, std::vector<std::uint64_t>> checkpoint_datasets(const model::GptShape& shape) {
  std::map<std::string, std::vector<std::uint64_t>> out;
  for (const model::LogicalTensor& t : model::logical_tensors(shape)) {
    const std::vector<std::uint64_t> dims(t.shape.begin(), t.shape.end());
    for (const char* prefix : {"model/", "optimizer/exp_avg/", "optimizer/exp_avg_sq/"}) out[prefix + t.name] = dims;
  }
  return out;
}

namespace {

// The model a checkpoint was trained as (its resolved deck), against the model of this job.
// Tensor shapes alone do not tell models apart: a different number of heads has the same QKV
// shapes, and a deck with fewer layers reads the first layers of a deeper one.
void check_model_shape(const io::CheckpointMeta& meta, const model::GptShape& mine, const std::string& path) {
  model::GptShape saved;
  try {
    saved = checkpoint_model_shape(meta.deck);
  } catch (const std::exception& e) {
    throw std::runtime_error("checkpoint " + io::display_path(path) + ": the model it holds is unknown: " + e.what());
  }
  std::string problems;
  // The block specification's choices, not the preset's name: a deck that spells out a preset's
  // choices under another name holds the same tensors.
  const auto differs = [&](const char* key, const std::string& a, const std::string& b) {
    if (a != b) problems += fmt::format("\n  model.{}: the checkpoint has {}, the deck has {}", key, a, b);
  };
  differs("norm", saved.norm, mine.norm);
  differs("mlp", saved.mlp, mine.mlp);
  differs("position", saved.position, mine.position);
  differs("qkv_bias", saved.qkv_bias ? "true" : "false", mine.qkv_bias ? "true" : "false");
  differs("linear_bias", saved.linear_bias ? "true" : "false", mine.linear_bias ? "true" : "false");
  for (const auto& [key, field] : kShapeKeys)
    if (saved.*field != mine.*field)
      problems += fmt::format("\n  model.{}: the checkpoint has {}, the deck has {}", key, saved.*field, mine.*field);
  if (saved.kv_head_count() != mine.kv_head_count())
    problems += fmt::format("\n  model.kv_heads: the checkpoint has {}, the deck has {}", saved.kv_head_count(),
                            mine.kv_head_count());
  if (model::holds_experts(saved) && model::holds_experts(mine) &&
      (saved.experts != mine.experts || saved.experts_per_token != mine.experts_per_token))
    problems += fmt::format("\n  model.experts, model.experts_per_token: the checkpoint has {}, {}, the deck has {}, {}",
                            saved.experts, saved.experts_per_token, mine.experts, mine.experts_per_token);
  if (saved.tie_embeddings != mine.tie_embeddings)
    problems += fmt::format("\n  model.tie_embeddings: the checkpoint has {}, the deck has {}", saved.tie_embeddings,
                            mine.tie_embeddings);
  if (!problems.empty())
    throw std::runtime_error("checkpoint " + io::display_path(path) +
                             " holds a different model than the deck describes:" + problems);
}

}  // namespace

template <class T>
io::CheckpointMeta load_weights(model::GptModel<T>& model, const parallel::Topology& topo,
                                const std::string& path, bool with_moments) {
  CheckpointTensors t(model, topo, with_moments);
  // Elements no slab covers (vocabulary padding rows) are not read, and must go back to the
  // device as the zeros they are.
  t.clear();
  const auto t0 = std::chrono::steady_clock::now();
  // The same metadata on every rank, so the shape check throws everywhere or nowhere.
  check_model_shape(io::read_checkpoint_meta(topo.world(), path), model.shape(), path);
  io::CheckpointMeta meta = io::read_checkpoint(topo.world(), path, t.shards(), true, io::ExtraDatasets::refused);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double megabytes = 0;  // the tensors read (every rank its part; together each tensor once)
  for (const io::TensorShard& shard : t.shards()) {
    double n = 4e-6;
    for (auto d : shard.global_shape) n *= static_cast<double>(d);
    megabytes += n;
  }
  log::infof("checkpoint {} read and verified in {:.2f} s ({:.0f} MB of tensors, {:.0f} MB/s)", path, s,
             megabytes, megabytes / s);
  // Checksums prove the file holds what was written, not that it was worth writing (files from
  // before this check, or from other tools): Inf/NaN weights are refused, not evaluated.
  // Agreed: ranks read different parts, and the all-gather below needs every rank.
  parallel::on_every_rank(topo.world(), [&] {
    if (std::string bad = t.first_non_finite(); !bad.empty())
      throw std::runtime_error("checkpoint " + io::display_path(path) + " holds non-finite values: " + bad);
  });
  t.upload();
  train::values_from_master(kx::ExecSpace(), model, topo.shard(), &topo.expert_dp());
  return meta;
}

namespace {

// step_<digits>.h5 -> step; -1 for any other name. checkpoint_path pads to 8 digits, so later
// steps have more: every step of an int64 is recognised, and ordering is by number.
std::int64_t step_of_name(const std::string& name) {
  constexpr std::size_t prefix = 5, suffix = 3;  // "step_", ".h5"
  if (name.size() < prefix + 8 + suffix || name.size() > prefix + 19 + suffix || name.rfind("step_", 0) != 0 ||
      name.compare(name.size() - suffix, suffix, ".h5") != 0)
    return -1;
  std::int64_t step = 0;
  for (std::size_t i = prefix; i < name.size() - suffix; ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    if (step > (INT64_MAX - 9) / 10) return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

}  // namespace

std::vector<std::string> complete_checkpoints(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec) && !ec) return {};
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::filesystem::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::int64_t step = step_of_name(it->path().filename().string());
    std::error_code type_ec;
    if (step < 0) continue;
    if (it->is_regular_file(type_ec))
      found.emplace_back(step, it->path().string());
    else  // named like a checkpoint, but a directory or a link to nothing: say so, skip it
      log::warning("ignoring " + io::display_path(it->path().string()) +
                   ": named like a checkpoint but not a regular file");
  }
  if (ec)
    throw std::runtime_error("checkpoint.dir = " + io::display_path(dir) + ": cannot list its checkpoints: " +
                             ec.message());
  std::sort(found.begin(), found.end());
  std::vector<std::string> paths;
  for (auto& f : found) paths.push_back(std::move(f.second));
  return paths;
}

std::string newest_checkpoint(MPI_Comm comm, const std::string& dir) {
  int rank = 0;
  TPTRAIN_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  std::string newest;
  parallel::on_every_rank(comm, [&] {
    if (rank != 0) return;
    const auto all = complete_checkpoints(dir);
    if (!all.empty()) newest = all.back();
  });
  int length = static_cast<int>(newest.size());
  TPTRAIN_MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT, 0, comm));
  newest.resize(static_cast<std::size_t>(length));
  TPTRAIN_MPI_CHECK(MPI_Bcast(newest.data(), length, MPI_CHAR, 0, comm));
  return newest;
}

void prune_checkpoints(MPI_Comm comm, const std::string& dir, int keep, const RunIdentity& run) {
  int rank = 0;
  TPTRAIN_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  if (rank != 0) return;
  std::vector<std::string> all;
  try {
    all = complete_checkpoints(dir);
  } catch (const std::exception& e) {  // the new checkpoint is safe; old ones merely stay
    log::warning(std::string("not pruning old checkpoints: ") + e.what());
    return;
  }
  // This run's own, by /train/run_id: a checkpoint another run wrote (copied in, or left by a
  // run before checkpoint.overwrite) is never rotated away, whatever its step.
  std::vector<std::string> own;
  for (const std::string& path : all) {
    try {
      const io::CheckpointMeta meta = io::read_checkpoint_meta(MPI_COMM_SELF, path);
      const auto id = meta.train.find(kRunIdAttribute);
      if (run.owns(id == meta.train.end() ? 0 : id->second)) own.push_back(path);
    } catch (const std::exception& e) {  // unreadable: not known to be this run's, so kept
      log::warning("not pruning " + io::display_path(path) + ": " + e.what());
    }
  }
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < own.size(); ++i) {
    std::error_code ec;
    std::filesystem::remove(own[i], ec);
    if (ec) log::warning("could not delete old checkpoint " + own[i] + ": " + ec.message());
  }
}

// The precisions a run can train in (training.precision).
#define TPTRAIN_CHECKPOINT_INSTANCES(T)                                                                   \
  template CheckpointTensors::CheckpointTensors(model::GptModel<T>&, const parallel::Topology&, bool);   \
  template PreparedCheckpoint prepare_checkpoint(model::GptModel<T>&, const io::Deck&,                    \
                                                 const parallel::Topology&, std::int64_t, std::int64_t,   \
                                                 const std::map<std::string, std::int64_t>&,              \
                                                 const io::BlendRecord&, std::unique_ptr<CheckpointTensors>); \
  template void save_checkpoint(model::GptModel<T>&, const io::Deck&, const parallel::Topology&,          \
                                std::int64_t, std::int64_t, const std::map<std::string, std::int64_t>&,  \
                                const io::BlendRecord&);                                                  \
  template io::CheckpointMeta load_weights(model::GptModel<T>&, const parallel::Topology&, const std::string&, bool);
TPTRAIN_CHECKPOINT_INSTANCES(float)
TPTRAIN_CHECKPOINT_INSTANCES(kx::bf16)
TPTRAIN_CHECKPOINT_INSTANCES(kx::fp16)
#undef TPTRAIN_CHECKPOINT_INSTANCES

}  // namespace tptrain::checkpoint
