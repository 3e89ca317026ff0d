// The model's side of the checkpoint schema (docs/design.md, "Checkpoint schema"): which hyperslab of each logical tensor
// this rank holds. /model/<name> holds weights, /optimizer/exp_avg/<name> and
// /optimizer/exp_avg_sq/<name> the AdamW moments. Replicated tensors are written by TP rank 0
// only; a vocabulary-padded embedding writes only its real rows; DP replicas other than dp 0
// write nothing. Every rank lists every tensor of the model (model::logical_tensors, from the
// model's descriptor tables, src/model/spec/block_descriptor.hpp); a pipeline stage has slabs only in
// its own, and the last stage's tied copy of embedding/word is read but not written (the first
// stage writes it).
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/checkpoint_file.hpp"
#include "io/deck.hpp"
#include "src/model/gpt_model.hpp"
#include "src/parallel/topology.hpp"
#include "src/checkpoint/run_ownership.hpp"

namespace tptrain::checkpoint {

// The slabs of the full logical tensor that hold the local elements [begin, end) of `p` (in local
// storage order, row-major; end < 0: to the last element), in that order: the rank's buffer of
// those elements is the slabs' elements, slab after slab (io::TensorShard). The whole parameter
// gives one slab per TP block; a distributed optimizer's shard covers a range that starts and
// ends inside rows: a partial first row, whole rows, a partial last row, each cut where the TP
// split changes blocks (QKV: its Q, K and V rows). Vocabulary padding rows exist locally but
// not in the file: they lie at the end of the local tensor and get no slab.
template <class T>
std::vector<io::Hyperslab> slabs_of(const model::Parameter<T>& p, std::int64_t begin = 0, std::int64_t end = -1) {
  const std::int64_t cols = p.cols();
  if (end < 0) end = p.local_size();
  std::vector<io::Hyperslab> slabs;
  const auto u = [](std::int64_t x) { return static_cast<std::uint64_t>(x); };
  const auto box = [&](std::int64_t row, std::int64_t rows, std::int64_t col, std::int64_t ncols) {
    rows = std::min(rows, p.saved_rows - row);
    if (rows <= 0 || ncols <= 0) return;
    io::Hyperslab s;
    s.start = {u(row)};
    s.count = {u(rows)};
    if (p.shape.size() > 1) {
      s.start.push_back(u(col));
      s.count.push_back(u(ncols));
    }
    slabs.push_back(std::move(s));
  };
  const int dim = p.sharding.dim;
  const auto block_end = [&](std::int64_t local) { return p.sharding.local_block_end(local, p.tp_size); };
  // Local rows [r0, r1) x local columns [c0, c1) (several rows only with whole rows), as logical boxes.
  const auto local_box = [&](std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1) {
    if (dim < 0) return box(r0, r1 - r0, c0, c1 - c0);
    if (dim == 0) {
      for (std::int64_t r = r0; r < r1;) {
        const std::int64_t stop = std::min(r1, block_end(r));
        box(p.logical_index(r), stop - r, c0, c1 - c0);
        r = stop;
      }
      return;
    }
    const bool one_run = p.sharding.blocks == 1;  // whole rows stay one box only if each row is one run
    for (std::int64_t r = r0; r < r1; r = one_run ? r1 : r + 1)
      for (std::int64_t c = c0; c < c1;) {
        const std::int64_t stop = std::min(c1, block_end(c));
        box(r, one_run ? r1 - r0 : 1, p.logical_index(c), stop - c);
        c = stop;
      }
  };
  std::int64_t i = begin;
  if (i < end && i % cols != 0) {  // a partial first row
    const std::int64_t stop = std::min(end, (i / cols + 1) * cols);
    local_box(i / cols, i / cols + 1, i % cols, stop - (i / cols) * cols);
    i = stop;
  }
  if (end - i >= cols) {  // whole rows
    local_box(i / cols, end / cols, 0, cols);
    i = (end / cols) * cols;
  }
  if (i < end) local_box(i / cols, i / cols + 1, 0, end - i);  // a partial last row
  return slabs;
}

// Weights (and optionally AdamW moments) of a model as checkpoint tensors, with the host
// buffers they are written from / read into: always fp32, the optimizer's master weights
// (the weights themselves in an fp32 run), whatever the compute precision, read from the
// buckets (model::GradBucket). With a distributed optimizer every data-parallel rank writes and
// reads the part of each tensor that its shard of the bucket holds; the file is the same.
// Where the host copies live: pinned memory on CUDA, which the device copies into at full
// bus speed and which an asynchronous write reads while training goes on.
#ifdef KOKKOS_ENABLE_CUDA
using CheckpointHostSpace = Kokkos::CudaHostPinnedSpace;
#else
using CheckpointHostSpace = Kokkos::HostSpace;
#endif

class CheckpointTensors {
 public:
  template <class T>
  CheckpointTensors(model::GptModel<T>& m, const parallel::Topology& topo, bool with_moments);
  std::vector<io::TensorShard>& shards() { return shards_; }
  void download();  // device -> host buffers
  void upload();    // host buffers -> device
  void clear();     // host buffers := 0
  std::size_t host_bytes() const;  // of the host buffers
  // "" when every host buffer is finite, else which tensor holds what where.
  std::string first_non_finite() const;

 private:
  template <class T>
  void add(const std::string& name, const model::Parameter<T>& p, std::int64_t begin, std::int64_t end,
           const kernels::Vector<float>& v, bool writer);
  std::vector<io::TensorShard> shards_;
  std::vector<Kokkos::View<float*, CheckpointHostSpace>> host_;
  std::vector<kernels::Vector<float>> device_;
};

// The model shape (layers, heads, hidden, ffn_hidden, vocab_size, seq_length) of a checkpoint,
// from its deck attribute; throws when the text does not state them.
model::GptShape checkpoint_model_shape(const std::string& deck_text);

// Every dataset a checkpoint of `shape` holds (weights and both AdamW moments), with its shape.
std::map<std::string, std::vector<std::uint64_t>> checkpoint_datasets(const model::GptShape& shape);

// <checkpoint.dir>/step_<8-digit step>.h5
std::string checkpoint_path(const std::string& dir, std::int64_t step);

// A checkpoint whose state has been copied to host buffers, ready to be written: what an
// asynchronous write holds while training goes on (src/checkpoint/checkpoint_writer.hpp).
struct PreparedCheckpoint {
  std::unique_ptr<CheckpointTensors> tensors;
  io::CheckpointMeta meta;
  std::string path;
};

// Collective over the world: copies weights and moments of `step` to host buffers and checks
// them, with the checkpoint folder made. Refuses (AgreedError on every rank) non-finite weights
// or moments. `train_state`: more /train attributes that exact resumption needs (the fp16 loss
// scaler's state); `blend`: data.train's record, /train/blend (TrainingRun::data_record; empty:
// none written). `reuse`: the buffers of an earlier checkpoint of this model, filled again
// instead of allocated (an asynchronous writer keeps them: pinned memory is slow to allocate).
template <class T>
PreparedCheckpoint prepare_checkpoint(model::GptModel<T>& model, const io::Deck& deck, const parallel::Topology& topo,
                                      std::int64_t step, std::int64_t tokens_seen,
                                      const std::map<std::string, std::int64_t>& train_state = {},
                                      const io::BlendRecord& blend = {},
                                      std::unique_ptr<CheckpointTensors> reuse = nullptr);
// Collective over `comm` (the world's ranks, or a duplicate of the world): writes a prepared
// checkpoint (io::write_checkpoint: CheckpointError on every rank on failure) and logs it.
// Touches no Kokkos, only the host buffers: safe on a thread of its own.
void write_prepared(MPI_Comm comm, PreparedCheckpoint& c);

// Both, at once: the synchronous checkpoint.
template <class T>
void save_checkpoint(model::GptModel<T>& model, const io::Deck& deck, const parallel::Topology& topo,
                     std::int64_t step, std::int64_t tokens_seen,
                     const std::map<std::string, std::int64_t>& train_state = {}, const io::BlendRecord& blend = {});

// Collective: this rank's shard of every weight — and with `with_moments` of the AdamW
// moments — from any checkpoint, whatever layout wrote it (resharding). Throws (the same on
// every rank) when the checkpoint's model (layers, heads, hidden, ffn_hidden, vocab_size,
// seq_length in its deck) differs from `model`'s, or when it holds non-finite values.
// The fp32 master weights are read; a bf16/fp16 model then rounds its compute copy from them.
// With a distributed optimizer each rank reads the master weights of its shard only, and the
// whole compute copy comes from them by the all-gather that ends a step.
template <class T>
io::CheckpointMeta load_weights(model::GptModel<T>& model, const parallel::Topology& topo,
                                const std::string& path, bool with_moments = false);

// The newest complete checkpoint (step_<8 or more digits>.h5; never a .tmp) in `dir`, or "" if
// none or if `dir` does not exist. Collective: rank 0 of `comm` looks, everyone gets its answer;
// a directory that cannot be listed throws AgreedError on every rank.
std::string newest_checkpoint(MPI_Comm comm, const std::string& dir);

// Complete checkpoints of `dir` (step_<8 or more digits>.h5, regular files), oldest first; on the
// calling rank alone. A directory that does not exist holds none; one that cannot be listed is
// an error (resuming from step 0 instead would silently throw away the run's progress, and
// pruning would silently keep everything).
std::vector<std::string> complete_checkpoints(const std::string& dir);

// Rank 0 deletes all but the newest `keep` complete checkpoints of `dir` that belong to `run`
// (src/checkpoint/run_ownership.hpp); other runs' checkpoints are left alone.
void prune_checkpoints(MPI_Comm comm, const std::string& dir, int keep, const RunIdentity& run);

}  // namespace tptrain::checkpoint
