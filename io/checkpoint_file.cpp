// Parallel HDF5 checkpoint files (see checkpoint_file.hpp for the contract): the two collective
// procedures, phase by phase. The parts live in their own files:
//   checkpoint_slabs      which slabs a rank moves, in how many collective transfers; coverage
//   checkpoint_transfer   the collective HDF5 transfers and the verifying re-read
//   checkpoint_checksum   checksums and the bounded row-block reader shared with inspect
//   checkpoint_schema     the rules a file must follow (shared with inspect)
//   checkpoint_publish    the file system: create probe, space reservation, fsync + rename
//   hdf5_attributes       reading and writing attributes defensively
//   read_watchdog         a time limit on metadata reads that libhdf5 could loop in
//   checkpoint_test_hooks the SIGKILL hook of tests/kill_resume.cmake
//
// After each phase the ranks agree on an error flag (parallel::agree_on_error), so that either
// every rank goes on or every rank throws the same CheckpointError:
//
//   write: 1 validate + consistency + coverage  2 probe, create <path>.tmp, reserve its size
//          3 attributes + datasets  4 data  4b checksum attributes  5 close
//          6 rank 0: fsync + rename to <path>
//   read:  1 validate + consistency (+ rank 0: file exists, is HDF5)  2 open
//          3 schema: attributes, datasets, checksum attributes  4 data  4b verification  5 close
//
// Every HDF5 object is held by an h5::Handle, so every error path closes what it opened. The
// file is the exception that matters: libhdf5 1.10 leaves a dangling ID behind a failed
// H5Fclose (MPI_Finalize then crashes), so the writer reserves the file's full size before HDF5
// writes anything (checkpoint_publish.hpp) and a full disk is reported while closing still works.
#include "io/checkpoint_file.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include "base/agreement.hpp"
#include "base/mpi_check.hpp"
#include "io/checkpoint_checksum.hpp"
#include "io/checkpoint_publish.hpp"
#include "io/checkpoint_schema.hpp"
#include "io/checkpoint_slabs.hpp"
#include "io/checkpoint_test_hooks.hpp"
#include "io/checkpoint_transfer.hpp"
#include "io/hdf5_attributes.hpp"
#include "io/hdf5_check.hpp"
#include "io/read_watchdog.hpp"

namespace tptrain::io {
namespace {

using h5::Handle;
using h5::Status;
using namespace detail;

struct Comm {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
};

Comm describe(MPI_Comm comm) {
  Comm c;
  c.comm = comm;
  TPTRAIN_MPI_CHECK(MPI_Comm_rank(comm, &c.rank));
  TPTRAIN_MPI_CHECK(MPI_Comm_size(comm, &c.size));
  return c;
}

// Throws the agreed error of a phase, if any rank failed.
void agree(const Comm& c, const std::string& prefix, const std::string& local_error) {
  if (std::string m = parallel::agree_on_error(c.comm, local_error); !m.empty())
    throw CheckpointError(prefix + m);
}

void broadcast_string(const Comm& c, std::string& s, int root) {
  unsigned long long len = s.size();
  TPTRAIN_MPI_CHECK(MPI_Bcast(&len, 1, MPI_UNSIGNED_LONG_LONG, root, c.comm));
  s.resize(static_cast<std::size_t>(len));
  constexpr std::size_t chunk = INT_MAX;
  for (std::size_t off = 0; off < s.size(); off += chunk) {
    const int n = static_cast<int>(std::min(chunk, s.size() - off));
    TPTRAIN_MPI_CHECK(MPI_Bcast(s.data() + off, n, MPI_CHAR, root, c.comm));
  }
}

CheckpointMeta broadcast_meta(const Comm& c, const CheckpointMeta& in) {
  CheckpointMeta m = in;
  long long v[5] = {in.step, in.tokens_seen, in.tp, in.pp, in.dp};
  TPTRAIN_MPI_CHECK(MPI_Bcast(v, 5, MPI_LONG_LONG, 0, c.comm));
  m.step = v[0];
  m.tokens_seen = v[1];
  m.tp = static_cast<int>(v[2]);
  m.pp = static_cast<int>(v[3]);
  m.dp = static_cast<int>(v[4]);
  broadcast_string(c, m.deck, 0);
  broadcast_string(c, m.precision, 0);
  unsigned long long entries = in.train.size();
  TPTRAIN_MPI_CHECK(MPI_Bcast(&entries, 1, MPI_UNSIGNED_LONG_LONG, 0, c.comm));
  auto it = in.train.begin();
  m.train.clear();
  for (unsigned long long k = 0; k < entries; ++k) {
    std::string name;
    long long value = 0;
    if (c.rank == 0) {
      name = it->first;
      value = it->second;
      ++it;
    }
    broadcast_string(c, name, 0);
    TPTRAIN_MPI_CHECK(MPI_Bcast(&value, 1, MPI_LONG_LONG, 0, c.comm));
    m.train[name] = value;
  }
  long long counts[2] = {static_cast<long long>(in.blend.entries.size()), in.blend.sequences};
  TPTRAIN_MPI_CHECK(MPI_Bcast(counts, 2, MPI_LONG_LONG, 0, c.comm));
  m.blend.entries.resize(static_cast<std::size_t>(counts[0]));
  m.blend.sequences = counts[1];
  for (BlendEntryRecord& e : m.blend.entries) {
    broadcast_string(c, e.path, 0);
    long long numbers[2] = {e.tokens, e.drawn};
    TPTRAIN_MPI_CHECK(MPI_Bcast(numbers, 2, MPI_LONG_LONG, 0, c.comm));
    TPTRAIN_MPI_CHECK(MPI_Bcast(&e.weight, 1, MPI_DOUBLE, 0, c.comm));
    e.tokens = numbers[0];
    e.drawn = numbers[1];
  }
  return m;
}

// "" or what is wrong with the names of meta.train.
std::string check_train_names(const CheckpointMeta& meta) {
  for (const auto& entry : meta.train) {
    const std::string& name = entry.first;
    if (name.empty()) return "CheckpointMeta::train has an empty name";
    if (name.find('\0') != std::string::npos)
      return "CheckpointMeta::train: a name contains a NUL character";
  }
  return {};
}

// Why creating dataset i may have failed when HDF5's own reason is obscure: an earlier tensor's
// name is a parent group of this one's, or the other way round.
std::string name_clash(const std::vector<TensorShard>& tensors, std::size_t i) {
  const std::string& name = tensors[i].name;
  auto under = [](const std::string& child, const std::string& parent) {
    return child.size() > parent.size() && child.compare(0, parent.size(), parent) == 0 &&
           child[parent.size()] == '/';
  };
  for (std::size_t j = 0; j < i; ++j) {
    const std::string& other = tensors[j].name;
    if (under(name, other)) return " (" + other + " is a dataset, it cannot also be a group)";
    if (under(other, name)) return " (" + name + " is already a group, holding " + other + ")";
  }
  return {};
}

void write_meta(hid_t file, const CheckpointMeta& meta, Status& st) {
  const int version = static_cast<int>(kFormatVersion);
  h5::write_string_attr(file, "format", kFormat, st);
  h5::write_attr(file, "format_version", H5T_STD_I32LE, H5T_NATIVE_INT, &version, st);
  h5::write_attr(file, "step", H5T_STD_I64LE, H5T_NATIVE_INT64, &meta.step, st);
  h5::write_attr(file, "tokens_seen", H5T_STD_I64LE, H5T_NATIVE_INT64, &meta.tokens_seen, st);
  h5::write_string_attr(file, "deck", meta.deck, st);
  h5::write_string_attr(file, "precision", meta.precision, st);
  h5::write_attr(file, "tp", H5T_STD_I32LE, H5T_NATIVE_INT, &meta.tp, st);
  h5::write_attr(file, "pp", H5T_STD_I32LE, H5T_NATIVE_INT, &meta.pp, st);
  h5::write_attr(file, "dp", H5T_STD_I32LE, H5T_NATIVE_INT, &meta.dp, st);
  const std::uint64_t meta_sum = metadata_checksum(meta);
  h5::write_attr(file, kMetadataChecksumAttribute, H5T_STD_U64LE, H5T_NATIVE_UINT64, &meta_sum, st);
  if (!st.ok()) return;
  Handle train(TPTRAIN_H5(st, H5Gcreate2(file, "train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                          "group /train"),
               H5Gclose);
  for (const auto& [name, value] : meta.train)
    h5::write_attr(train.get(), name.c_str(), H5T_STD_I64LE, H5T_NATIVE_INT64, &value, st,
                   "/train/");
  write_blend(train.get(), meta.blend, st);
  if (st.ok()) TPTRAIN_H5(st, H5Gclose(train.release()), "group /train");
}

// An upper bound of the file's size: the data, plus generous room for object headers, group
// structures and the global heap that holds the strings.
std::uint64_t size_bound(const CheckpointMeta& meta, const std::vector<TensorShard>& tensors) {
  std::uint64_t bytes = (std::uint64_t{64} << 10) + 2 * meta.deck.size() + 128 * meta.train.size();
  for (const BlendEntryRecord& e : meta.blend.entries) bytes += 512 + 2 * e.path.size();
  for (const TensorShard& t : tensors) {
    std::uint64_t n = 4;
    for (std::uint64_t d : t.global_shape) n *= d;
    bytes += n + (std::uint64_t{8} << 10) + 2 * t.name.size();
  }
  return bytes;
}

// After a failed write phase on this rank: the file system's reason, when it has one.
void add_write_reason(Status& st, const std::string& tmp) {
  if (st.ok()) return;
  const std::string reason = write_failure_reason(tmp);
  if (!reason.empty() && st.error.find(reason) == std::string::npos)
    st.error = reason + ": " + tmp + " (" + st.error + ")";
}

// A file holding more than the reader asked for under the same top-level groups (a layer the
// deck does not have, a stray tensor) is another model, not a superset: refused like a
// missing dataset. Groups the reader does not read from at all (optimizer/ for eval) are not judged.
void unrequested_datasets(hid_t file, const std::vector<TensorShard>& tensors, ReadWatchdog& watchdog,
                          std::vector<std::string>& problems) {
  std::set<std::string> requested, tops;
  for (const TensorShard& t : tensors) {
    requested.insert(t.name);
    tops.insert(t.name.substr(0, t.name.find('/')));
  }
  for (const std::string& top : tops) {
    std::vector<std::string> found, notes;
    std::set<haddr_t> visited;
    Status st;
    Handle group(TPTRAIN_H5(st, H5Gopen2(file, top.c_str(), H5P_DEFAULT), "group " + top), H5Gclose);
    if (st.ok()) collect_datasets(group.get(), top, 0, found, notes, visited, &watchdog, st);
    if (!st.ok()) problems.push_back(st.error);
    problems.insert(problems.end(), notes.begin(), notes.end());
    for (const std::string& name : found)
      if (requested.count(name) == 0)
        problems.push_back(name + ": the checkpoint holds this dataset, the model being loaded has no such tensor");
  }
}

CheckpointMeta read_impl(MPI_Comm comm, const std::string& path,
                         const std::vector<TensorShard>& tensors, bool verify, ExtraDatasets extra) {
  h5::ErrorSilencer silence;
  const Comm c = describe(comm);
  const std::string prefix = "reading checkpoint " + path + ": ";

  // 1: validate; rank 0 looks at the file.
  std::vector<SlabPlan> plans;
  std::vector<int> rounds;
  agree(c, prefix,
        plan_transfers(comm, path, tensors, false, plans, rounds,
                       c.rank == 0 ? hdf5_file_problem(path) : std::string()));

  // 2 and 3 read nothing but metadata, which a corrupt file can make libhdf5 loop on.
  std::optional<ReadWatchdog> watchdog(std::in_place, path);

  // 2: open.
  Status st;
  PropertyLists pl = parallel_plists(comm, st);
  Handle file;
  if (st.ok()) {
    file = Handle(TPTRAIN_H5(st, H5Fopen(path.c_str(), H5F_ACC_RDONLY, pl.fapl.get()), path),
                  H5Fclose);
    if (!st.ok()) st.error += "; the file is truncated or corrupt";
  }
  agree(c, prefix, st.error);

  // 3: schema. From here, a thrown CheckpointError closes the datasets and then the file (the
  // handles' destructors, in reverse order; closing a file opened read-only writes nothing).
  std::vector<std::string> problems;
  const CheckpointMeta meta = check_root(file.get(), problems);
  std::vector<Handle> dsets(tensors.size());
  std::vector<std::uint64_t> stored(tensors.size(), 0);
  if (problems.empty()) {
    std::set<std::string> groups;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      dsets[i] = open_dataset_checked(file.get(), tensors[i].name, &tensors[i].global_shape,
                                      groups, problems);
      if (verify && dsets[i].valid())
        stored[i] = stored_checksum(dsets[i].get(), tensors[i].name, problems).value_or(0);
    }
    if (verify && problems.empty() &&
        std::any_of(tensors.begin(), tensors.end(),
                    [](const TensorShard& t) { return under_optimizer(t.name); }))
      check_optimizer_step(file.get(), meta.step, problems);
    if (problems.empty() && extra == ExtraDatasets::refused)
      unrequested_datasets(file.get(), tensors, *watchdog, problems);
  }
  if (!problems.empty()) st.fail(list_problems(problems));
  agree(c, prefix, st.error);
  watchdog.reset();

  // 4: data.
  for (std::size_t i = 0; i < tensors.size(); ++i)
    transfer(dsets[i].get(), tensors[i], plans[i], rounds[i], pl.dxpl.get(), false, st);
  agree(c, prefix, st.error);

  // 4b: verification: each dataset checksummed once more, in full, the ranks reading disjoint
  // row blocks (whatever slabs they asked for above); sums over the ranks against the stored.
  if (verify && !tensors.empty()) {
    std::vector<std::uint64_t> local(tensors.size(), 0), computed(tensors.size(), 0);
    std::vector<float> buf;
    for (std::size_t i = 0; i < tensors.size(); ++i)
      local[i] = checksum_share(dsets[i].get(), tensors[i], comm, pl.dxpl.get(), buf, st);
    agree(c, prefix, st.error);
    TPTRAIN_MPI_CHECK(MPI_Allreduce(local.data(), computed.data(), static_cast<int>(local.size()),
                                    MPI_UINT64_T, MPI_SUM, comm));
    for (std::size_t i = 0; i < tensors.size(); ++i)
      if (computed[i] != stored[i])
        problems.push_back(tensors[i].name + ": checksum mismatch: the file is corrupt (stored " +
                           hex64(stored[i]) + ", computed " + hex64(computed[i]) + ")");
    if (!problems.empty()) st.fail(list_problems(problems));
    agree(c, prefix, st.error);
  }

  // 5: close.
  for (std::size_t i = 0; i < tensors.size(); ++i)
    TPTRAIN_H5(st, H5Oclose(dsets[i].release()), tensors[i].name);
  TPTRAIN_H5(st, H5Fclose(file.release()), path);
  agree(c, prefix, st.error);
  return meta;
}

}  // namespace

void write_checkpoint(MPI_Comm comm, const std::string& path, const CheckpointMeta& meta_in,
                      const std::vector<TensorShard>& tensors) {
  h5::ErrorSilencer silence;
  const Comm c = describe(comm);
  const std::string tmp = path + ".tmp";
  const std::string prefix = "writing checkpoint " + path + ": ";

  // 1: validate; the metadata is rank 0's.
  std::vector<SlabPlan> plans;
  std::vector<int> rounds;
  std::string err = plan_transfers(comm, path, tensors, true, plans, rounds, std::string());
  const CheckpointMeta meta = broadcast_meta(c, meta_in);
  if (err.empty()) err = check_train_names(meta);
  agree(c, prefix, err);

  // 2: rank 0 checks that the file can be created (with the errno that MPI-IO would lose), the
  // ranks create it, rank 0 reserves its full size before HDF5 has anything to write back.
  agree(c, prefix, c.rank == 0 ? probe_create(tmp) : std::string());
  auto fail_clean = [&](const std::string& m) {
    TPTRAIN_MPI_CHECK(MPI_Barrier(comm));  // every rank has closed the file
    if (c.rank == 0) remove_quietly(tmp);
    TPTRAIN_MPI_CHECK(MPI_Barrier(comm));
    throw CheckpointError(prefix + m);
  };
  Status st;
  PropertyLists pl = parallel_plists(comm, st);
  Handle lcpl, dcpl, file;
  if (st.ok()) {
    lcpl = Handle(TPTRAIN_H5(st, H5Pcreate(H5P_LINK_CREATE), "link properties"), H5Pclose);
    if (st.ok()) TPTRAIN_H5(st, H5Pset_create_intermediate_group(lcpl.get(), 1), "link properties");
    dcpl = Handle(TPTRAIN_H5(st, H5Pcreate(H5P_DATASET_CREATE), "dataset properties"), H5Pclose);
    // Every element is written by some rank: writing fill values first would double the I/O.
    if (st.ok())
      TPTRAIN_H5(st, H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), "dataset properties");
  }
  if (st.ok())
    file = Handle(
        TPTRAIN_H5(st, H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, pl.fapl.get()), tmp),
        H5Fclose);
  if (std::string m = parallel::agree_on_error(comm, st.error); !m.empty()) {
    file.close();
    fail_clean(m);
  }
  if (std::string m = parallel::agree_on_error(
          comm, c.rank == 0 ? reserve_space(tmp, size_bound(meta, tensors)) : std::string());
      !m.empty()) {
    file.close();  // only the superblock to write: fits in what the file system had
    fail_clean(m);
  }

  kill_if_testing_crash_at_step(meta.step, "created");
  // From here every error path closes the datasets, then the file, then removes it.
  std::vector<Handle> dsets(tensors.size());
  auto abandon = [&](const std::string& m) {
    dsets.clear();
    file.close();
    fail_clean(m);
  };

  // 3: attributes, groups, datasets (collective metadata operations, same on every rank).
  write_meta(file.get(), meta, st);
  for (std::size_t i = 0; i < tensors.size() && st.ok(); ++i) {
    const TensorShard& t = tensors[i];
    const auto dims = to_hsize(t.global_shape);
    Handle space(
        TPTRAIN_H5(st, H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                   t.name),
        H5Sclose);
    if (!st.ok()) break;
    dsets[i] = Handle(TPTRAIN_H5(st,
                                 H5Dcreate2(file.get(), t.name.c_str(), H5T_IEEE_F32LE, space.get(),
                                            lcpl.get(), dcpl.get(), H5P_DEFAULT),
                                 t.name),
                      H5Oclose);
    if (!st.ok()) st.error += name_clash(tensors, i);
  }
  if (st.ok() && std::any_of(tensors.begin(), tensors.end(),
                             [](const TensorShard& t) { return under_optimizer(t.name); })) {
    Handle opt(TPTRAIN_H5(st, H5Gopen2(file.get(), "optimizer", H5P_DEFAULT), "group /optimizer"),
               H5Gclose);
    h5::write_attr(opt.get(), "step", H5T_STD_I64LE, H5T_NATIVE_INT64, &meta.step, st,
                   "/optimizer/");
  }
  if (std::string m = parallel::agree_on_error(comm, st.error); !m.empty()) abandon(m);

  // 4: data.
  const std::size_t half = tensors.size() / 2;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (i == half) kill_if_testing_crash_at_step(meta.step, "data");
    transfer(dsets[i].get(), tensors[i], plans[i], rounds[i], pl.dxpl.get(), true, st);
  }
  if (st.ok()) st.error = failure_if_testing(meta.step);
  add_write_reason(st, tmp);
  if (std::string m = parallel::agree_on_error(comm, st.error); !m.empty()) abandon(m);

  // 4b: checksums, after the data: the terms of each rank's written slabs, summed over the
  // ranks (replicas not written add nothing). Attributes are written collectively, same values
  // on every rank.
  std::vector<std::uint64_t> sums(tensors.size(), 0);
  {
    std::vector<std::uint64_t> local(tensors.size(), 0);
    for (std::size_t i = 0; i < tensors.size(); ++i)
      local[i] = tensors[i].write ? shard_checksum(tensors[i]) : 0;
    if (!local.empty())
      TPTRAIN_MPI_CHECK(MPI_Allreduce(local.data(), sums.data(), static_cast<int>(local.size()),
                                      MPI_UINT64_T, MPI_SUM, comm));
  }
  for (std::size_t i = 0; i < tensors.size() && st.ok(); ++i)
    h5::write_attr(dsets[i].get(), kChecksumAttribute, H5T_STD_U64LE, H5T_NATIVE_UINT64, &sums[i],
                   st, tensors[i].name + "/");
  if (std::string m = parallel::agree_on_error(comm, st.error); !m.empty()) abandon(m);

  // 5: close (H5Fflush writes the metadata back while the file is still ours to close cleanly
  // on failure; H5Fclose then has nothing left to write).
  for (std::size_t i = 0; i < tensors.size(); ++i)
    TPTRAIN_H5(st, H5Oclose(dsets[i].release()), tensors[i].name);
  TPTRAIN_H5(st, H5Fflush(file.get(), H5F_SCOPE_GLOBAL), tmp);
  add_write_reason(st, tmp);
  if (std::string m = parallel::agree_on_error(comm, st.error); !m.empty()) abandon(m);
  TPTRAIN_H5(st, H5Fclose(file.release()), tmp);
  add_write_reason(st, tmp);
  if (std::string m = parallel::agree_on_error(comm, st.error); !m.empty()) fail_clean(m);

  kill_if_testing_crash_at_step(meta.step, "rename");
  // 6: rank 0 gives the complete file its name; the agreement is the final barrier.
  if (std::string m = parallel::agree_on_error(
          comm, c.rank == 0 ? publish(tmp, path) : std::string());
      !m.empty())
    fail_clean(m);
}

CheckpointMeta read_checkpoint(MPI_Comm comm, const std::string& path,
                               const std::vector<TensorShard>& tensors, bool verify,
                               ExtraDatasets extra) {
  return read_impl(comm, path, tensors, verify, extra);
}

CheckpointMeta read_checkpoint_meta(MPI_Comm comm, const std::string& path) {
  return read_impl(comm, path, {}, false, ExtraDatasets::ignored);
}

std::string hdf5_file_problem(const std::string& path) {
  namespace fs = std::filesystem;
  h5::ErrorSilencer silence;
  std::error_code ec;
  const fs::file_status s = fs::status(path, ec);
  if (!fs::exists(s)) return "no such file";
  if (!fs::is_regular_file(s)) return "not a regular file";
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      if (errno == EACCES || errno == EPERM) return "permission denied";
      return std::string("cannot be opened for reading: ") + std::strerror(errno);
    }
  }
  Status st;
#if H5_VERSION_GE(1, 12, 0)
  const htri_t is_hdf5 = TPTRAIN_H5(st, H5Fis_accessible(path.c_str(), H5P_DEFAULT), path);
#else
  const htri_t is_hdf5 = TPTRAIN_H5(st, H5Fis_hdf5(path.c_str()), path);
#endif
  if (!st.ok()) return st.error;
  if (is_hdf5 == 0) return "not an HDF5 file";
  return {};
}

}  // namespace tptrain::io
