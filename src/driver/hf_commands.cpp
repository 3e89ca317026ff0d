// `tptrain export` and `tptrain import`: a checkpoint as a Hugging Face GPT2LMHeadModel folder
// (config.json + model.safetensors) and back (src/train/hf_gpt2.hpp has the mapping). MPI only
// because checkpoints are read and written with parallel HDF5; one rank does the work, any
// number may take part (they hold no slabs).
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>

#include "base/agreement.hpp"
#include "base/mpi_check.hpp"
#include "io/checkpoint_file.hpp"
#include "io/deck.hpp"
#include "io/path_text.hpp"
#include "io/safetensors.hpp"
#include "src/driver/commands.hpp"
#include "src/driver/mpi_session.hpp"
#include "src/log.hpp"
#include "src/train/deck_shape.hpp"
#include "src/train/hf_gpt2.hpp"
#include "src/train/model_checkpoint.hpp"

namespace tptrain::driver {

namespace {

namespace fs = std::filesystem;
using parallel::on_every_rank;

// MPI up, then `job(rank)` under the commands' failure rule (with_agreed_failures).
template <class Job>
int run_on_every_rank(Job&& job) {
  MpiSession mpi;
  return with_agreed_failures([&] {
    job(mpi.rank);
    return 0;
  });
}

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::uint64_t elements(const std::vector<std::uint64_t>& shape) {
  std::uint64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

// Rank 0 holds the whole tensor, the others nothing (they still take part in the collective calls).
io::TensorShard whole_on_rank_0(const std::string& name, const std::vector<std::uint64_t>& shape, float* data,
                                int rank) {
  io::TensorShard s;
  s.name = name;
  s.global_shape = shape;
  s.write = rank == 0;
  if (rank == 0) {
    io::Hyperslab slab;
    slab.start.assign(shape.size(), 0);
    slab.count = shape;
    s.slabs.push_back(slab);
    s.data = data;
  }
  return s;
}

// The first non-finite value, as a message; "" if every value is finite.
std::string non_finite(const std::string& name, const std::vector<float>& x) {
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!std::isfinite(x[i])) return fmt::format("{} holds {} at element {}", name, x[i], i);
  return {};
}

void write_text_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.close();
    if (!out) throw std::runtime_error("cannot write " + io::display_path(tmp));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw std::runtime_error("cannot rename " + io::display_path(tmp) + ": " + ec.message());
}

// The deck keys a tensor's shape comes from, with their HF config names: for shape messages.
std::string shape_keys(const std::string& checkpoint_name) {
  std::string keys = "model.hidden / n_embd";
  if (checkpoint_name == "embedding/word") keys = "model.vocab_size / vocab_size, " + keys;
  if (checkpoint_name == "embedding/position") keys = "model.seq_length / n_positions, " + keys;
  if (checkpoint_name.find("/mlp/") != std::string::npos) keys += ", model.ffn_hidden / n_inner";
  return keys;
}

}  // namespace

int export_checkpoint(const ExportOptions& o) {
  return run_on_every_rank([&](int rank) {
    const MPI_Comm world = MPI_COMM_WORLD;
    const io::CheckpointMeta meta = io::read_checkpoint_meta(world, o.checkpoint);
    model::GptShape shape;
    on_every_rank(world, [&] {
      try {
        shape = train::checkpoint_model_shape(meta.deck);
      } catch (const std::exception& e) {
        throw std::runtime_error("checkpoint " + io::display_path(o.checkpoint) + ": " + e.what());
      }
    });
    const fs::path out(o.out);
    on_every_rank(world, [&] {
      if (rank != 0) return;
      for (const char* name : {"model.safetensors", "config.json"})
        if (fs::exists(out / name))
          throw std::runtime_error("--out " + io::display_path(o.out) + " already holds " + name +
                                   ": export does not overwrite (remove it or choose another folder)");
      fs::create_directories(out);
    });
    // The logical tensors, whatever layout and precision wrote the checkpoint: the fp32 master
    // weights, whole (model_checkpoint.hpp).
    const std::vector<train::HfTensor> tensors = train::hf_gpt2_tensors(shape);
    std::vector<std::vector<float>> values(tensors.size());
    std::vector<io::TensorShard> shards;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (rank == 0) values[i].resize(elements(tensors[i].checkpoint_shape));
      shards.push_back(whole_on_rank_0("model/" + tensors[i].checkpoint_name, tensors[i].checkpoint_shape,
                                       values[i].data(), rank));
    }
    io::read_checkpoint(world, o.checkpoint, shards, true, io::ExtraDatasets::refused);
    std::uint64_t parameters = 0;
    on_every_rank(world, [&] {
      if (rank != 0) return;
      std::vector<io::SafetensorsTensor> st;
      for (std::size_t i = 0; i < tensors.size(); ++i) {
        if (std::string bad = non_finite(tensors[i].checkpoint_name, values[i]); !bad.empty())
          throw std::runtime_error("checkpoint " + io::display_path(o.checkpoint) + ": " + bad + ": not exported");
        const std::vector<float> hf = train::to_hf(tensors[i], values[i]);
        std::vector<float>().swap(values[i]);
        st.push_back({tensors[i].hf_name, io::SafetensorsDtype::F32, tensors[i].hf_shape(),
                      io::safetensors_encode(hf.data(), hf.size(), io::SafetensorsDtype::F32)});
        parameters += hf.size();
      }
      // "format": "pt" is what transformers' from_pretrained asks of a safetensors file.
      io::write_safetensors((out / "model.safetensors").string(), st,
                            {{"format", "pt"},
                             {"producer", "tptrain"},
                             {"source_checkpoint", o.checkpoint},
                             {"source_step", std::to_string(meta.step)}});
      try {
        write_text_file((out / "config.json").string(), train::hf_gpt2_config(shape, shape.vocab_size >= 50257));
      } catch (...) {  // half a model folder would block the next try ("already holds")
        std::error_code ignored;
        fs::remove(out / "model.safetensors", ignored);
        throw;
      }
    });
    log::infof("exported {} (step {}, written with tensor {} x pipeline {} x data {}, {}) to {}: {} tensors, {:.2f} M "
               "parameters, float32, GPT2LMHeadModel layout (lm_head tied to transformer.wte)",
               o.checkpoint, meta.step, meta.tp, meta.pp, meta.dp, meta.precision, o.out, tensors.size(),
               parameters / 1e6);
  });
}

int import_checkpoint(const ImportOptions& o) {
  return run_on_every_rank([&](int rank) {
    const MPI_Comm world = MPI_COMM_WORLD;
    std::optional<io::Deck> deck;
    on_every_rank(world, [&] {
      try {
        deck = io::load_deck(o.deck.deck, o.deck.overrides, io::DataFiles::ignored);
      } catch (const std::exception& e) {
        throw std::runtime_error("invalid deck " + io::display_path(o.deck.deck) + ":\n" + e.what());
      }
    });
    model::GptShape shape = train::shape_of(*deck);
    shape.tensor = 1;  // the checkpoint's logical tensors do not depend on the layout
    shape.sequence_parallel = false;
    const std::vector<train::HfTensor> tensors = train::hf_gpt2_tensors(shape);
    std::vector<std::vector<float>> values(tensors.size());
    std::uint64_t largest = 0;
    for (const auto& t : tensors) largest = std::max(largest, elements(t.checkpoint_shape));
    const fs::path dir(o.dir);
    on_every_rank(world, [&] {
      if (rank != 0) return;
      if (fs::exists(o.out))
        throw std::runtime_error("--out " + io::display_path(o.out) +
                                 " already exists: import does not overwrite (remove it or choose another name)");
      const train::HfGpt2Config config = train::read_hf_gpt2_config((dir / "config.json").string());
      if (std::string diff = train::hf_config_mismatch(config, shape); !diff.empty())
        throw std::runtime_error("the Hugging Face model in " + io::display_path(o.dir) +
                                 " is not the model of the deck " + io::display_path(o.deck.deck) + ":\n" + diff);
      const io::SafetensorsReader file((dir / "model.safetensors").string());
      const std::string where = io::display_path(file.path());
      // HF's own gpt2 has no "transformer." prefix; save_pretrained writes it. Both are accepted.
      std::map<std::string, std::string> by_key;  // name without the prefix -> name in the file
      std::vector<std::string> problems;
      const std::regex buffer(R"(h\.[0-9]+\.attn\.(bias|masked_bias))");  // causal-mask buffers, not weights
      std::set<std::string> wanted;
      for (const auto& t : tensors) wanted.insert(t.hf_name.substr(std::string("transformer.").size()));
      for (const io::SafetensorsTensorInfo& t : file.tensors()) {
        const std::string key = t.name.rfind("transformer.", 0) == 0 ? t.name.substr(12) : t.name;
        if (std::regex_match(key, buffer)) continue;
        if (!by_key.emplace(key, t.name).second)
          problems.push_back(fmt::format("{}: both {} and {} are in the file", where, by_key[key], t.name));
        if (!wanted.count(key) && key != "lm_head.weight")
          problems.push_back(fmt::format("{}: {} is not a tensor of GPT-2 with the deck's shape (model.layers = {})",
                                         where, t.name, shape.layers));
      }
      for (std::size_t i = 0; i < tensors.size(); ++i) {
        const train::HfTensor& t = tensors[i];
        const auto it = by_key.find(t.hf_name.substr(12));
        if (it == by_key.end()) {
          problems.push_back(fmt::format("{}: no {} (with or without the prefix \"transformer.\")", where, t.hf_name));
          continue;
        }
        const io::SafetensorsTensorInfo& info = *file.find(it->second);
        std::vector<std::uint64_t> want = t.hf_shape();
        // More positions than the deck's context: the first seq_length rows are the ones it uses.
        const bool positions = t.checkpoint_name == "embedding/position";
        const bool fits = info.shape == want || (positions && info.shape.size() == 2 && info.shape[1] == want[1] &&
                                                 info.shape[0] >= want[0]);
        if (!fits) {
          problems.push_back(fmt::format("{}: {} has shape {}, the deck needs {} ({})", where, it->second,
                                         shape_text(info.shape), shape_text(want), shape_keys(t.checkpoint_name)));
          continue;
        }
        std::vector<float> hf = file.read_float32(it->second);
        hf.resize(elements(want));
        if (std::string bad = non_finite(it->second, hf); !bad.empty()) problems.push_back(where + ": " + bad);
        values[i] = train::from_hf(t, hf);
      }
      // A tied lm_head is a copy of wte; a different one is a model tptrain cannot hold.
      if (const auto head = by_key.find("lm_head.weight"); head != by_key.end() && problems.empty()) {
        const std::vector<float> h = file.read_float32(head->second);
        const std::vector<float>& wte = values.at(0);  // embedding/word: the first tensor of the model
        if (h.size() != wte.size() || std::memcmp(h.data(), wte.data(), 4 * h.size()) != 0)
          problems.push_back(where + ": lm_head.weight differs from transformer.wte.weight: tptrain's output layer "
                             "is tied to the word embedding");
      }
      if (!problems.empty()) {
        std::string all;
        for (const auto& p : problems) all += (all.empty() ? "" : "\n") + p;
        throw std::runtime_error(all);
      }
      fs::create_directories(fs::absolute(o.out).parent_path());
    });
    // A step-0 checkpoint: the weights, zero AdamW moments (what a fresh optimizer holds), so
    // that every tool that reads checkpoints (eval, generate, inspect, resume) takes it.
    const std::vector<float> zeros(rank == 0 ? largest : 0, 0.0f);
    std::vector<io::TensorShard> shards;
    for (const char* group : {"model/", "optimizer/exp_avg/", "optimizer/exp_avg_sq/"})
      for (std::size_t i = 0; i < tensors.size(); ++i) {
        float* data = std::string(group) == "model/" ? values[i].data() : const_cast<float*>(zeros.data());
        shards.push_back(whole_on_rank_0(group + tensors[i].checkpoint_name, tensors[i].checkpoint_shape, data, rank));
      }
    io::CheckpointMeta meta;
    meta.deck = deck->to_toml();
    meta.precision = "fp32";  // the tensors; the deck says how a run computes with them
    meta.train = {{"step", 0}, {"seed", static_cast<std::int64_t>(deck->training.seed)}, {"data_step", 0}};
    io::write_checkpoint(world, o.out, meta, shards);
    log::infof("imported {} into {}: {} tensors of the deck {} ({} layers, hidden {}, heads {}, vocab {}, seq {}), "
               "step 0; start a run from it with training.init_from",
               o.dir, o.out, tensors.size(), o.deck.deck, shape.layers, shape.hidden, shape.heads, shape.vocab_size,
               shape.seq_length);
  });
}

}  // namespace tptrain::driver
