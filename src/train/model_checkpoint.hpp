// The model's side of the checkpoint schema (docs/design.md, "Checkpoint schema"): which hyperslab of each logical tensor
// this rank holds. /model/<name> holds weights, /optimizer/exp_avg/<name> and
// /optimizer/exp_avg_sq/<name> the AdamW moments. Replicated tensors are written by TP rank 0
// only; a vocabulary-padded embedding writes only its real rows; DP replicas other than dp 0
// write nothing. Every rank lists every tensor of the model (model::logical_tensors); a
// pipeline stage has slabs only in its own, and the last stage's tied copy of embedding/word
// is read but not written (the first stage writes it).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "io/checkpoint_file.hpp"
#include "io/deck.hpp"
#include "src/model/gpt_model.hpp"
#include "src/parallel/topology.hpp"

namespace tptrain::train {

// Rank-local slabs of `p` in the full logical tensor, in local storage order.
template <class T>
std::vector<io::Hyperslab> slabs_of(const model::Parameter<T>& p) {
  const std::vector<std::int64_t> local = p.local_shape();
  auto u = [](std::int64_t x) { return static_cast<std::uint64_t>(x); };
  std::vector<io::Hyperslab> slabs;
  if (p.replicated()) {
    io::Hyperslab s;
    s.start.assign(p.shape.size(), 0);
    for (std::size_t d = 0; d < p.shape.size(); ++d) s.count.push_back(u(d == 0 ? p.saved_rows : p.shape[d]));
    slabs.push_back(s);
    return slabs;
  }
  const std::size_t dim = static_cast<std::size_t>(p.sharding.dim);
  const std::int64_t block_local = local[dim] / p.sharding.blocks;
  for (int b = 0; b < p.sharding.blocks; ++b) {
    io::Hyperslab s;
    s.start.assign(p.shape.size(), 0);
    s.count.resize(p.shape.size());
    for (std::size_t d = 0; d < p.shape.size(); ++d) s.count[d] = u(d == 0 ? p.saved_rows : p.shape[d]);
    const std::int64_t start = p.logical_index(b * block_local);
    std::int64_t count = block_local;
    if (dim == 0 && start + count > p.saved_rows) count = std::max<std::int64_t>(0, p.saved_rows - start);
    if (count == 0) continue;  // a rank holding only vocabulary padding
    s.start[dim] = u(start);
    s.count[dim] = u(count);
    slabs.push_back(s);
  }
  return slabs;
}

// Weights (and optionally AdamW moments) of a model as checkpoint tensors, with the host
// buffers they are written from / read into: always fp32, the optimizer's master weights
// (Parameter::master, the weights themselves in an fp32 run), whatever the compute precision.
class CheckpointTensors {
 public:
  template <class T>
  CheckpointTensors(model::GptModel<T>& m, const parallel::Topology& topo, bool with_moments);
  std::vector<io::TensorShard>& shards() { return shards_; }
  void download();  // device -> host buffers
  void upload();    // host buffers -> device
  // "" when every host buffer is finite, else which tensor holds what where.
  std::string first_non_finite() const;

 private:
  template <class T>
  void add(const std::string& name, const model::Parameter<T>& p, const kernels::Vector<float>& v, bool writer);
  std::vector<io::TensorShard> shards_;
  std::vector<Kokkos::View<float*, Kokkos::HostSpace>> host_;
  std::vector<kernels::Vector<float>> device_;
};

// The model shape (layers, heads, hidden, ffn_hidden, vocab_size, seq_length) of a checkpoint,
// from its deck attribute; throws when the text does not state them.
model::GptShape checkpoint_model_shape(const std::string& deck_text);

// Every dataset a checkpoint of `shape` holds (weights and both AdamW moments), with its shape.
std::map<std::string, std::vector<std::uint64_t>> checkpoint_datasets(const model::GptShape& shape);

// <checkpoint.dir>/step_<8-digit step>.h5
std::string checkpoint_path(const std::string& dir, std::int64_t step);

// Collective over the world: weights, moments and metadata of `step`. Refuses (AgreedError on
// every rank) non-finite weights or moments. `train_state`: more /train attributes that exact
// resumption needs (the fp16 loss scaler's state).
template <class T>
void save_checkpoint(model::GptModel<T>& model, const io::Deck& deck, const parallel::Topology& topo,
                     std::int64_t step, std::int64_t tokens_seen,
                     const std::map<std::string, std::int64_t>& train_state = {});

// Collective: this rank's shard of every weight — and with `with_moments` of the AdamW
// moments — from any checkpoint, whatever layout wrote it (resharding). Throws (the same on
// every rank) when the checkpoint's model (layers, heads, hidden, ffn_hidden, vocab_size,
// seq_length in its deck) differs from `model`'s, or when it holds non-finite values.
// The fp32 master weights are read; a bf16/fp16 model then rounds its compute copy from them.
template <class T>
io::CheckpointMeta load_weights(model::GptModel<T>& model, const parallel::Topology& topo,
                                const std::string& path, bool with_moments = false);

// The newest complete checkpoint (step_<8 or more digits>.h5; never a .tmp) in `dir`, or "" if
// none or if `dir` does not exist. Collective: rank 0 of `comm` looks, everyone gets its answer;
// a directory that cannot be listed throws AgreedError on every rank.
std::string newest_checkpoint(MPI_Comm comm, const std::string& dir);

// Rank 0 deletes all but the newest `keep` complete checkpoints of `dir`.
void prune_checkpoints(MPI_Comm comm, const std::string& dir, int keep);

}  // namespace tptrain::train
