// `tptrain export` and `tptrain import`: a checkpoint as a Hugging Face model folder
// (config.json + model.safetensors: GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM,
// MixtralForCausalLM or DeepseekV3ForCausalLM, by model.architecture) and back, from one
// model.safetensors or the shards of model.safetensors.index.json, fp8 ones included
// (io/safetensors_folder.hpp; src/checkpoint/hf_format.hpp has the architecture's mapping). MPI only
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
#include "io/deck_text.hpp"
#include "io/path_text.hpp"
#include "io/safetensors.hpp"
#include "io/safetensors_folder.hpp"
#include "src/driver/commands.hpp"
#include "src/driver/mpi_session.hpp"
#include "src/util/log.hpp"
#include "src/model/shape_of_deck.hpp"
#include "src/checkpoint/hf_format.hpp"
#include "src/checkpoint/model_checkpoint.hpp"

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

// The model's checkpoint tensors, each once, in checkpoint order, and for each HF tensor the
// index of its checkpoint tensor (several HF tensors are rows of one: Llama's q|k|v, gate|up).
struct CheckpointTensors {
  std::vector<std::string> names;
  std::vector<std::vector<std::uint64_t>> shapes;
  std::vector<std::size_t> of_hf;
};
CheckpointTensors checkpoint_tensors(const std::vector<checkpoint::HfTensor>& tensors) {
  CheckpointTensors c;
  for (const checkpoint::HfTensor& t : tensors) {
    if (c.names.empty() || c.names.back() != t.checkpoint_name) {
      c.names.push_back(t.checkpoint_name);
      c.shapes.push_back(t.checkpoint_shape);
    }
    c.of_hf.push_back(c.names.size() - 1);
  }
  return c;
}

// The Hugging Face form of `shape`, or the same error on every rank (`what`: whose model).
checkpoint::HfFormat hf_format_on_every_rank(MPI_Comm world, const model::GptShape& shape, const std::string& what,
                                             const checkpoint::HfTrainingChoices& training = {}) {
  std::optional<checkpoint::HfFormat> format;
  on_every_rank(world, [&] {
    try {
      format = checkpoint::hf_format(shape, training);
    } catch (const std::exception& e) {
      throw std::runtime_error(what + ": no Hugging Face form: " + e.what());
    }
  });
  return *format;
}

}  // namespace

int export_checkpoint(const ExportOptions& o) {
  return run_on_every_rank([&](int rank) {
    const MPI_Comm world = MPI_COMM_WORLD;
    const io::CheckpointMeta meta = io::read_checkpoint_meta(world, o.checkpoint);
    model::GptShape shape;
    checkpoint::HfTrainingChoices training;
    on_every_rank(world, [&] {
      try {
        shape = checkpoint::checkpoint_model_shape(meta.deck);  // its kinds' keys too
        training = checkpoint::hf_training_choices(shape);
      } catch (const std::exception& e) {
        throw std::runtime_error("checkpoint " + io::display_path(o.checkpoint) + ": " + e.what());
      }
    });
    const fs::path out(o.out);
    on_every_rank(world, [&] {
      if (rank != 0) return;
      for (const char* name : {io::kSafetensorsFile, io::kSafetensorsIndexFile, "config.json"})
        if (fs::exists(out / name))
          throw std::runtime_error("--out " + io::display_path(o.out) + " already holds " + name +
                                   ": export does not overwrite (remove it or choose another folder)");
    });
    // The logical tensors, whatever layout and precision wrote the checkpoint: the fp32 master
    // weights, whole (model_checkpoint.hpp). A model without a Hugging Face form is refused on
    // every rank alike.
    const checkpoint::HfFormat format =
        hf_format_on_every_rank(world, shape, "checkpoint " + io::display_path(o.checkpoint), training);
    if (!format.export_caveat.empty() && rank == 0) log::warning(o.checkpoint + " was " + format.export_caveat);
    const CheckpointTensors ck = checkpoint_tensors(format.tensors);
    std::vector<std::vector<float>> values(ck.names.size());
    std::vector<io::TensorShard> shards;
    for (std::size_t i = 0; i < ck.names.size(); ++i) {
      if (rank == 0) values[i].resize(elements(ck.shapes[i]));
      shards.push_back(whole_on_rank_0("model/" + ck.names[i], ck.shapes[i], values[i].data(), rank));
    }
    io::read_checkpoint(world, o.checkpoint, shards, true, io::ExtraDatasets::refused);
    std::uint64_t parameters = 0;
    on_every_rank(world, [&] {
      if (rank != 0) return;
      for (std::size_t i = 0; i < ck.names.size(); ++i)
        if (std::string bad = non_finite(ck.names[i], values[i]); !bad.empty())
          throw std::runtime_error("checkpoint " + io::display_path(o.checkpoint) + ": " + bad + ": not exported");
      std::vector<io::SafetensorsTensor> st;
      for (std::size_t i = 0; i < format.tensors.size(); ++i) {
        const checkpoint::HfTensor& t = format.tensors[i];
        const std::vector<float> hf = checkpoint::to_hf(t, values[ck.of_hf[i]]);
        // The checkpoint tensor is not needed once its last HF piece is encoded.
        if (i + 1 == format.tensors.size() || ck.of_hf[i + 1] != ck.of_hf[i]) std::vector<float>().swap(values[ck.of_hf[i]]);
        st.push_back({t.hf_name, io::SafetensorsDtype::F32, t.hf_shape(),
                      io::safetensors_encode(hf.data(), hf.size(), io::SafetensorsDtype::F32)});
        parameters += hf.size();
      }
      // The folder is made only now that everything is read and checked: a failed export leaves
      // none behind (nor half a model folder, which would block the next try: "already holds").
      std::error_code ec;
      const bool made = !fs::exists(out, ec) && fs::create_directories(out);
      try {
        // "format": "pt" is what transformers' from_pretrained asks of a safetensors file.
        io::write_safetensors((out / "model.safetensors").string(), st,
                              {{"format", "pt"},
                               {"producer", "tptrain"},
                               {"source_checkpoint", o.checkpoint},
                               {"source_step", std::to_string(meta.step)}});
        write_text_file((out / "config.json").string(), format.config_json);
      } catch (...) {
        std::error_code ignored;
        fs::remove(out / "model.safetensors", ignored);
        if (made) fs::remove(out, ignored);
        throw;
      }
    });
    log::infof("exported {} (step {}, written with tensor {} x pipeline {} x data {}, {}) to {}: {} tensors, {:.2f} M "
               "parameters, float32, {} layout{}",
               o.checkpoint, meta.step, meta.tp, meta.pp, meta.dp, meta.precision, o.out, format.tensors.size(),
               parameters / 1e6, format.architecture,
               format.tied_to.empty() ? "" : " (lm_head tied to " + format.tied_to + ")");
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
    model::GptShape shape = model::shape_of(*deck);
    shape.tensor = 1;  // the checkpoint's logical tensors do not depend on the layout
    shape.sequence_parallel = false;
    const checkpoint::HfFormat format =
        hf_format_on_every_rank(world, shape, "the deck " + io::display_path(o.deck.deck));
    const CheckpointTensors ck = checkpoint_tensors(format.tensors);
    std::vector<std::vector<float>> values(ck.names.size());
    std::uint64_t largest = 0;
    for (const auto& c : ck.shapes) largest = std::max(largest, elements(c));
    const fs::path dir(o.dir);
    on_every_rank(world, [&] {
      if (rank != 0) return;
      if (fs::exists(o.out))
        throw std::runtime_error("--out " + io::display_path(o.out) +
                                 " already exists: import does not overwrite (remove it or choose another name)");
      const checkpoint::HfConfigReading config = format.read_config((dir / "config.json").string(), shape);
      if (!config.mismatch.empty())
        throw std::runtime_error("the Hugging Face model in " + io::display_path(o.dir) +
                                 " is not the model of the deck " + io::display_path(o.deck.deck) + ":\n" +
                                 config.mismatch);
      std::vector<checkpoint::HfTensor> tensors = format.tensors;
      if (!config.interleaved_rows)  // the file's rotary rows are in the checkpoint's order
        for (checkpoint::HfTensor& t : tensors) t.interleaved = {};
      const io::SafetensorsFolder files(o.dir);
      const std::string where = io::display_path(files.source());
      const auto where_is = [&](const std::string& name) { return io::display_path(files.path_of(name)); };
      const std::string& prefix = format.prefix;
      // Hugging Face's own base-model files have no prefix; save_pretrained writes it. Both are accepted.
      const auto key_of = [&](const std::string& name) {
        return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
      };
      std::map<std::string, std::string> by_key;  // name without the prefix -> name in the file
      std::vector<std::string> problems;
      // Not weights of the model: buffers, and the blocks after its own (multi-token prediction)
      // beyond the deck's model.mtp_depth, and the deck's modules' copies of the embedding and
      // the output layer.
      std::string skipped = "(" + format.ignored_buffers + ")";
      for (int i = 0; i < config.skipped_layers; ++i)
        skipped += i < shape.mtp_depth
                       ? fmt::format("|layers\\.{}\\.(embed_tokens|shared_head\\.head)\\..+", shape.layers + i)
                       : fmt::format("|layers\\.{}\\..+", shape.layers + i);
      const std::regex buffer(skipped);
      const std::string tied_head = "lm_head.weight";
      std::set<std::string> wanted;
      for (const auto& t : tensors) wanted.insert(key_of(t.hf_name));
      for (const io::SafetensorsTensorInfo* t : files.tensors()) {
        const std::string key = key_of(t->name);
        if (std::regex_match(key, buffer) || files.is_block_scales(t->name)) continue;
        if (!by_key.emplace(key, t->name).second)
          problems.push_back(fmt::format("{}: both {} and {} are in the file", where, by_key[key], t->name));
        if (!wanted.count(key) && !(key == tied_head && !format.tied_to.empty()))
          problems.push_back(fmt::format("{}: {} is not a tensor of {} with the deck's shape (model.layers = {}{})",
                                         where_is(t->name), t->name, format.architecture, shape.layers,
                                         model::kind_sizes_text(shape)));
      }
      for (std::size_t i = 0; i < ck.names.size(); ++i) values[i].resize(elements(ck.shapes[i]));
      for (std::size_t i = 0; i < tensors.size(); ++i) {
        const checkpoint::HfTensor& t = tensors[i];
        const auto it = by_key.find(key_of(t.hf_name));
        if (it == by_key.end()) {
          problems.push_back(t.hf_name.rfind(prefix, 0) == 0
                                 ? fmt::format("{}: no {} (with or without the prefix \"{}\")", where, t.hf_name, prefix)
                                 : fmt::format("{}: no {}", where, t.hf_name));
          continue;
        }
        const io::SafetensorsTensorInfo& info = *files.find(it->second);
        std::vector<std::uint64_t> want = t.hf_shape();
        // More positions than the deck's context: the first seq_length rows are the ones it uses.
        const bool positions = t.checkpoint_name == "embedding/position";
        const bool fits = info.shape == want || (positions && info.shape.size() == 2 && info.shape[1] == want[1] &&
                                                 info.shape[0] >= want[0]);
        if (!fits) {
          problems.push_back(fmt::format("{}: {} has shape {}, the deck needs {} ({})", where_is(it->second), it->second,
                                         shape_text(info.shape), shape_text(want), format.shape_keys(t.checkpoint_name)));
          continue;
        }
        std::vector<float> hf = files.read_float32(it->second);
        hf.resize(elements(want));
        if (std::string bad = non_finite(it->second, hf); !bad.empty())
          problems.push_back(where_is(it->second) + ": " + bad);
        checkpoint::from_hf(t, hf, values[ck.of_hf[i]]);
      }
      // A tied lm_head is a copy of the word embedding; a different one is a model tptrain cannot hold.
      if (const auto head = by_key.find(tied_head); head != by_key.end() && !format.tied_to.empty() && problems.empty()) {
        const std::vector<float> h = files.read_float32(head->second);
        const std::vector<float>& word = values.at(0);  // embedding/word: the first tensor of the model
        if (h.size() != word.size() || std::memcmp(h.data(), word.data(), 4 * h.size()) != 0)
          problems.push_back(fmt::format("{}: {} differs from {}: tptrain's output layer is tied to the word embedding "
                                         "(config.json tie_word_embeddings)",
                                         where_is(head->second), head->second, format.tied_to));
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
      for (std::size_t i = 0; i < ck.names.size(); ++i) {
        float* data = std::string(group) == "model/" ? values[i].data() : const_cast<float*>(zeros.data());
        shards.push_back(whole_on_rank_0(group + ck.names[i], ck.shapes[i], data, rank));
      }
    io::CheckpointMeta meta;
    meta.deck = deck->to_toml();
    meta.precision = "fp32";  // the tensors; the deck says how a run computes with them
    meta.train = {{"step", 0}, {"seed", static_cast<std::int64_t>(deck->training.seed)}, {"data_step", 0}};
    io::write_checkpoint(world, o.out, meta, shards);
    log::infof("imported {} into {}: {} tensors of the deck {} ({} layers, hidden {}, heads {}, vocab {}, seq {}{}), "
               "step 0; start a run from it with training.init_from",
               o.dir, o.out, ck.names.size(), o.deck.deck, shape.layers, shape.hidden, shape.heads, shape.vocab_size,
               shape.seq_length,
               model::kind_sizes_text(shape));
  });
}

}  // namespace tptrain::driver
