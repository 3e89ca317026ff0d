// Checkpoint files at the format level: named float32 tensors with their full logical shapes,
// written and read collectively with parallel HDF5 (MPI-IO), each rank moving only its own
// hyperslabs. This layer knows nothing of the model: the caller says which datasets exist, their
// logical shapes, and which parts of them this rank holds (schema: docs/checkpoints.md).
//
// Because every dataset holds the full logical tensor, a checkpoint written under one
// (TP, PP, DP) layout reads under any other: the reader simply asks for different slabs.
//
// File layout (format_version 2; version 1 is read too: it lacks the metadata checksum):
//   root attributes  format = "tptrain-checkpoint" (variable-length UTF-8 string)
//                    format_version = 2 (int32), step, tokens_seen (int64), deck (UTF-8 string),
//                    tp, pp, dp (int32), metadata_checksum_splitmix64 (uint64, see
//                    metadata_checksum)
//   group /train     one int64 attribute per entry of CheckpointMeta::train (e.g. step, seed,
//                    data_step); always present, possibly without attributes
//   group /train/blend  CheckpointMeta::blend, data.train's record (io/checkpoint_blend.hpp);
//                    absent when empty (and in checkpoints from before it)
//   datasets         float32 (little-endian IEEE), contiguous, full global shape, at the
//                    slash-separated path given by TensorShard::name (groups created as needed),
//                    each with the uint64 attribute checksum_splitmix64_sum (see checksum_term)
//   group /optimizer when some tensor lives under optimizer/: int64 attribute step (= root step)
// h5py reads the string attributes as str and the datasets as float32 arrays.
//
// Collective semantics and errors. Every function here is collective over `comm`: every rank
// calls it with the same path and the same list of tensors (names and global shapes, in the
// same order; slabs differ per rank). Work proceeds in phases (validate, open/create, metadata,
// data, close, rename); at the end of each phase the ranks agree on an error flag with
// MPI_Allreduce, so an error on any rank becomes a CheckpointError on every rank, with the same
// message (that of the lowest failing rank, which is rank 0 whenever rank 0 failed) and nobody
// hangs in a collective call. A rank that failed during the data phase keeps taking part in the
// remaining collective transfers with empty selections.
//
// Messages name the path and what went wrong, e.g.
//   reading checkpoint runs/x/step_00000100.h5: model/layers/0/mlp/fc/weight: checkpoint has
//   [512, 128], the deck needs [256, 128]
//   reading checkpoint runs/x/step_00000100.h5: H5Fopen failed for runs/x/step_00000100.h5:
//   truncated file: eof = ... (checkpoint_file.cpp:NNN); the file is truncated or corrupt
// A message from a rank other than 0 ends with " [rank r]". Several dataset problems found
// while reading are listed together, one per line.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/agreement.hpp"
#include "base/splitmix64.hpp"
#include "io/checkpoint_blend.hpp"

namespace tptrain::io {

// A box in the full logical tensor: elements start[d] .. start[d]+count[d]-1 in dimension d.
// start and count have one entry per dimension of the tensor.
struct Hyperslab {
  std::vector<std::uint64_t> start, count;
};

// One tensor as one rank sees it. The rank's local buffer holds the elements of its slabs, slab
// after slab, each slab row-major. Several slabs express e.g. the QKV weight of a
// tensor-parallel rank (its Q rows, its K rows, its V rows are three separate row blocks).
// Slabs of one rank may come in any order; elements covered by two slabs of the same rank are
// read into both places. When writing, every element must be written exactly once (by one
// rank, with write = true): write_checkpoint rejects overlapping slabs of one rank and element
// counts that do not add up to the tensor's size; two ranks writing the same element while
// another one is missed is not detected there (the checksum of the file is then wrong, and
// read_checkpoint reports it).
struct TensorShard {
  std::string name;                         // dataset path, e.g. "model/layers/0/attn/qkv/weight"
  std::vector<std::uint64_t> global_shape;  // full logical shape, e.g. {3*H, H}; at least 1-D
  std::vector<Hyperslab> slabs;             // may be empty (rank holds nothing of it)
  float* data = nullptr;                    // host buffer, sum of slab element counts
  // false: this rank holds a replica that another rank writes; it still takes part in the
  // collective call with an empty selection (replicated tensors are written once, not once per
  // rank). Reading ignores this flag: every rank reads all of its slabs.
  bool write = true;
};

// Root attributes of a checkpoint, and the attributes of its /train group.
struct CheckpointMeta {
  std::int64_t step = 0;
  std::int64_t tokens_seen = 0;
  std::string deck;            // the resolved deck text
  // Root attribute "precision": the compute precision of the run that wrote it ("fp32", "bf16",
  // "fp16"; files without it are fp32). For people and tools: the tensors are fp32 master copies
  // whatever it says, so any precision loads any checkpoint.
  std::string precision = "fp32";
  int tp = 1, pp = 1, dp = 1;  // layout at save time
  // What exact resumption needs besides the tensors (e.g. "step", "seed", "data_step"): the int64
  // attributes of group /train, by name. Names are non-empty and contain no NUL character.
  std::map<std::string, std::int64_t> train;
  // data.train's entries and the sequences drawn from each (group /train/blend); empty when not
  // recorded (checkpoints from before the record; files written without a training run).
  BlendRecord blend;
};

// ---- checksums ----------------------------------------------------------------------------------
// Every dataset carries the uint64 attribute kChecksumAttribute, the wrapping (mod 2^64) sum over
// all its elements of checksum_term(bits, i), where bits is the element's float32 bit pattern and
// i its row-major index in the full logical tensor:
//   checksum_term(bits, i) = splitmix64(bits ^ splitmix64(i))
//   splitmix64(x): x += 0x9E3779B97F4A7C15; x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9;
//                  x = (x ^ (x >> 27)) * 0x94D049BB133111EB; return x ^ (x >> 31)
// A sum of per-element terms does not depend on how the tensor was split among the ranks that
// wrote it (each writing rank sums the terms of its slabs, MPI_SUM over the ranks), and any
// single changed element changes it (splitmix64 is a bijection).
inline constexpr char kChecksumAttribute[] = "checksum_splitmix64_sum";

using util::splitmix64;  // base/splitmix64.hpp
std::uint64_t checksum_term(std::uint32_t bits, std::uint64_t index) noexcept;
// Sum of the terms of n consecutive elements whose row-major indices are first, first+1, ...
std::uint64_t checksum_run(const float* data, std::uint64_t n, std::uint64_t first) noexcept;

// The metadata carries a checksum too, the root attribute kMetadataChecksumAttribute
// (format_version 2): a flipped byte in the deck, the step or a /train value would otherwise load
// silently as another run's state. It seals the attributes sealed_attributes() lists: every root
// attribute but format (checked by value), format_version (which selects this recipe), precision
// (informational, and in the sealed deck text) and the checksum itself; and every /train
// attribute, and every /train/blend attribute when there is that group. It hashes the text
// "format_version=2\n" followed by their lines, "step=S\ntokens_seen=N\ntp=T\npp=P\ndp=D\n" +
// "train.<name>=<v>\n" for each /train attribute in name order + "train.blend.<name>=<v>\n" for
// each /train/blend attribute in the order of detail::blend_attribute_texts (none without the
// group, so that the files from before it hash as they did) + "deck=" + the deck text, as
//   h = 0; for each 8-byte little-endian word w of the text (the last one zero-padded):
//   h = splitmix64(h ^ w); then h = splitmix64(h ^ length in bytes).
inline constexpr char kMetadataChecksumAttribute[] = "metadata_checksum_splitmix64";
std::uint64_t metadata_checksum(const CheckpointMeta& meta) noexcept;

// One attribute the metadata checksum seals: its path from the root ("step", "train/seed") and
// its line of the hashed text. metadata_checksum hashes exactly these lines, in this order, so
// that a test can change each sealed attribute alone (tests/io/test_metadata_checksum.cpp).
struct SealedAttribute {
  std::string path;
  std::string line;
};
std::vector<SealedAttribute> sealed_attributes(const CheckpointMeta& meta);

// Thrown by every rank of the communicator with the same message (see above): an agreed
// failure, which the job reports once and ends cleanly on, not a one-rank failure to abort on.
class CheckpointError : public parallel::AgreedError {
 public:
  using AgreedError::AgreedError;
};

// Collective over comm. Rank 0 first checks that <path>.tmp can be created ("permission denied:
// <path>.tmp") and reserves its full size (a full disk or a file size limit is reported here,
// by its errno text: "No space left on device"). Writes <path>.tmp with the MPI-IO driver and collective transfers
// (creating groups as needed; datasets are float32 with the full global shape and no fill
// value), closes it, then rank 0 renames it to <path> (after an fsync; std::rename is atomic on
// POSIX) and the ranks synchronise once more. The metadata written is rank 0's (train included).
// Together the ranks must write every element of every tensor exactly once: the slabs with
// write = true of one rank must not overlap, and their element counts summed over the ranks
// must equal the tensor's size (checked before anything is created). After the data, each
// dataset gets its checksum attribute (terms of the written slabs, summed over the ranks). On
// any error the .tmp is removed, <path> is left as it was (it is never touched before the
// rename), and every rank throws CheckpointError.
void write_checkpoint(MPI_Comm comm, const std::string& path, const CheckpointMeta& meta,
                      const std::vector<TensorShard>& tensors);

// Collective over comm. Opens <path> read-only with the MPI-IO driver, checks the schema
// (io/checkpoint_schema.hpp: format, format_version, the required root attributes, /train),
// checks that every tensor exists as a float32 dataset whose shape equals global_shape, then reads each rank's slabs into its data (collective transfers).
// With `verify` (the default) every requested dataset must carry its checksum attribute, and
// after the read the ranks checksum each of these datasets once more, in full (rank r reads
// the r-th of n disjoint row blocks, in bounded chunks), and compare the sum with the stored
// value; a tensor under optimizer/ also needs the /optimizer step attribute, equal to the root
// step. Returns the metadata (train included). Errors (missing file, not HDF5, truncated or
// corrupt file, wrong format, unsupported format_version, missing dataset, shape mismatch,
// missing checksum, checksum mismatch "model/x: checksum mismatch: the file is corrupt (stored
// 0x..., computed 0x...)") are thrown as CheckpointError on every rank with the same message;
// after a checksum mismatch the contents of the buffers are unspecified. Opening and the schema
// checks run under a ReadWatchdog (io/read_watchdog.hpp): a file whose damaged metadata makes
// libhdf5 loop ends the process with a message instead of hanging.
// With ExtraDatasets::refused, a dataset of the file that `tensors` does not list, under a
// top-level group that `tensors` reads from (model/, optimizer/), is an error too: a model's load
// lists its whole model, so such a dataset means another model (an extra layer group).
enum class ExtraDatasets { ignored, refused };
CheckpointMeta read_checkpoint(MPI_Comm comm, const std::string& path,
                               const std::vector<TensorShard>& tensors, bool verify = true,
                               ExtraDatasets extra = ExtraDatasets::ignored);

// Collective over comm. read_checkpoint without tensors: the attributes only (nothing verified).
CheckpointMeta read_checkpoint_meta(MPI_Comm comm, const std::string& path);

// "" when `path` is a readable HDF5 file, else why not, without the path ("no such file",
// "not a regular file", "not an HDF5 file", ...): callers say which file and what for.
std::string hdf5_file_problem(const std::string& path);

}  // namespace tptrain::io
