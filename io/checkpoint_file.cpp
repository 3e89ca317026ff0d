// Parallel HDF5 checkpoint files (see checkpoint_file.hpp for the contract).
//
// One handler for every file: MPI-IO file access (H5Pset_fapl_mpio) and collective transfers
// (H5Pset_dxpl_mpio, H5FD_MPIO_COLLECTIVE). Both functions run in phases; after each phase the
// ranks agree on an error flag (agree()), so that either every rank goes on or every rank
// throws the same CheckpointError:
//
//   write: 1 validate + consistency + coverage  2 create <path>.tmp  3 attributes + datasets
//          4 data  4b checksum attributes  5 close  6 rank 0: fsync + rename to <path>
//   read:  1 validate + consistency (+ rank 0: file exists, is HDF5)  2 open
//          3 attributes + dataset checks (+ checksum attributes)  4 data
//          4b verification (optional)  5 close
//
// Checksums (see checkpoint_file.hpp) are sums of per-element terms, so a writer needs no data
// from other ranks: each rank sums the terms of the slabs it writes, and one MPI_Allreduce
// (MPI_UINT64_T, MPI_SUM) gives the dataset's checksum. A reader cannot reuse its own slabs
// (they may overlap or leave parts out), so verification reads each dataset once more, rank r
// taking the r-th of n disjoint blocks of rows, in chunks of at most 4 Mi elements.
//
// Mapping a rank's slabs to the file. HDF5 pairs the elements of the memory selection and the
// file selection in the order it iterates them, and it iterates a file selection (the union of
// OR'ed hyperslabs) in row-major order of the whole dataset, not slab by slab. The local buffer
// is slab after slab. The two orders agree when each slab lies entirely after the previous one
// in row-major order (the row-major index of its first element exceeds that of the previous
// slab's last element): true for row blocks given top to bottom, e.g. the Q, K, V rows of a
// tensor-parallel QKV weight, or a single slab of any shape. So the slabs are cut into groups
// of consecutive slabs with that property, and each group is one collective transfer (one
// OR'ed file selection, a 1-D memory space over the group's part of the buffer). Column blocks
// of the same rows, or slabs given bottom to top, take one transfer per slab. The ranks agree on
// the number of transfers per tensor (the maximum over ranks); a rank with fewer groups takes
// part in the extra transfers with an empty selection, as do ranks with write = false.
#include "io/checkpoint_file.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_set>

#if __has_include(<unistd.h>) && __has_include(<fcntl.h>)
#include <fcntl.h>
#include <unistd.h>
#define TPTRAIN_HAVE_FSYNC 1
#else
#define TPTRAIN_HAVE_FSYNC 0
#endif

#include "io/hdf5_check.hpp"

namespace tptrain::io {
namespace {

using h5::Handle;
using h5::Status;

constexpr const char* kFormat = "tptrain-checkpoint";
constexpr std::int64_t kFormatVersion = 1;
constexpr std::size_t kMaxListedProblems = 10;

// ---- MPI --------------------------------------------------------------------------------------

// MPI errors are fatal under the default error handler; with MPI_ERRORS_RETURN they throw.
void mpi_check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw CheckpointError(std::string(call) +
                        " failed: " + std::string(text, static_cast<std::size_t>(len)));
}
#define TPTRAIN_CKPT_MPI(call) mpi_check((call), #call)

struct Comm {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
};

Comm describe(MPI_Comm comm) {
  Comm c;
  c.comm = comm;
  TPTRAIN_CKPT_MPI(MPI_Comm_rank(comm, &c.rank));
  TPTRAIN_CKPT_MPI(MPI_Comm_size(comm, &c.size));
  return c;
}

void broadcast_string(const Comm& c, std::string& s, int root) {
  unsigned long long len = s.size();
  TPTRAIN_CKPT_MPI(MPI_Bcast(&len, 1, MPI_UNSIGNED_LONG_LONG, root, c.comm));
  s.resize(static_cast<std::size_t>(len));
  constexpr std::size_t chunk = INT_MAX;
  for (std::size_t off = 0; off < s.size(); off += chunk) {
    const int n = static_cast<int>(std::min(chunk, s.size() - off));
    TPTRAIN_CKPT_MPI(MPI_Bcast(s.data() + off, n, MPI_CHAR, root, c.comm));
  }
}

// End of a phase: every rank learns whether any rank failed. Returns "" when none did, else the
// message of the lowest failing rank (tagged with that rank when it is not rank 0).
std::string agree(const Comm& c, const std::string& local_error) {
  const int mine = local_error.empty() ? c.size : c.rank;
  int first = c.size;
  TPTRAIN_CKPT_MPI(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, c.comm));
  if (first == c.size) return {};
  std::string msg = c.rank == first ? local_error : std::string();
  broadcast_string(c, msg, first);
  if (first != 0) msg += " [rank " + std::to_string(first) + "]";
  return msg;
}

// ---- shapes and slabs -------------------------------------------------------------------------

std::string shape_str(const std::vector<std::uint64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(v[i]);
  }
  return s + "]";
}

std::vector<hsize_t> to_hsize(const std::vector<std::uint64_t>& v) {
  return std::vector<hsize_t>(v.begin(), v.end());
}

// One collective transfer's worth of a rank's slabs: consecutive slabs (those with elements),
// each entirely after the previous one in row-major order, and their contiguous part of the
// local buffer.
struct Group {
  std::vector<std::size_t> slabs;
  std::uint64_t offset = 0;    // first element in TensorShard::data
  std::uint64_t elements = 0;  // elements in all its slabs
};

struct Plan {
  std::vector<Group> groups;
  std::uint64_t elements = 0;  // in all the slabs this rank moves
};

constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 62;

// Checks one shard and cuts its slabs into groups. `moving`: this rank transfers its slabs (false
// for a replica that another rank writes). Returns "" or what is wrong.
std::string make_plan(const TensorShard& t, bool moving, bool writing, Plan& plan) {
  plan.groups.clear();
  plan.elements = 0;
  const std::string& name = t.name;
  if (name.empty()) return "a tensor has an empty name";
  const auto& shape = t.global_shape;
  if (shape.empty() || shape.size() > H5S_MAX_RANK)
    return name + ": global_shape " + shape_str(shape) + " must have 1 to " +
           std::to_string(H5S_MAX_RANK) + " dimensions";
  std::uint64_t total = 1;
  for (std::uint64_t d : shape) {
    if (d != 0 && total > kMaxElements / d)
      return name + ": global_shape " + shape_str(shape) + " has too many elements";
    total *= d;
  }
  if (!moving) return {};

  const std::size_t rank = shape.size();
  std::vector<std::uint64_t> stride(rank, 1);
  for (std::size_t d = rank - 1; d > 0; --d) stride[d - 1] = stride[d] * shape[d];

  std::uint64_t offset = 0;
  std::uint64_t last_hi = 0;
  for (std::size_t k = 0; k < t.slabs.size(); ++k) {
    const Hyperslab& s = t.slabs[k];
    const std::string where = name + ": slab " + std::to_string(k) + " (start " +
                              shape_str(s.start) + ", count " + shape_str(s.count) + ")";
    if (s.start.size() != rank || s.count.size() != rank)
      return where + " does not have one entry per dimension of the global shape " +
             shape_str(shape);
    std::uint64_t n = 1, lo = 0, hi = 0;
    for (std::size_t d = 0; d < rank; ++d) {
      if (s.count[d] > shape[d] || s.start[d] > shape[d] - s.count[d])
        return where + " lies outside the global shape " + shape_str(shape);
      n *= s.count[d];
    }
    if (n == 0) continue;  // nothing to move; occupies nothing in the buffer
    for (std::size_t d = 0; d < rank; ++d) {
      lo += s.start[d] * stride[d];
      hi += (s.start[d] + s.count[d] - 1) * stride[d];
    }
    if (plan.groups.empty() || lo <= last_hi) {
      Group g;
      g.offset = offset;
      plan.groups.push_back(g);
    }
    plan.groups.back().slabs.push_back(k);
    plan.groups.back().elements += n;
    last_hi = hi;
    if (offset > kMaxElements - n) return name + ": its slabs hold too many elements";
    offset += n;
  }
  if (offset > 0 && t.data == nullptr)
    return name + ": data is null, but the slabs hold " + std::to_string(offset) + " elements";
  plan.elements = offset;
  if (writing) {
    // Each element is written once: a rank's slabs must not overlap (which value would land is
    // unspecified, and the checksum would count the element twice).
    for (std::size_t a = 0; a < t.slabs.size(); ++a)
      for (std::size_t b = a + 1; b < t.slabs.size(); ++b) {
        const Hyperslab &x = t.slabs[a], &y = t.slabs[b];
        bool overlap = true;
        for (std::size_t d = 0; d < rank && overlap; ++d)
          overlap = x.count[d] > 0 && y.count[d] > 0 && x.start[d] < y.start[d] + y.count[d] &&
                    y.start[d] < x.start[d] + x.count[d];
        if (overlap)
          return name + ": slabs " + std::to_string(a) + " and " + std::to_string(b) +
                 " overlap (each element must be written once)";
      }
  }
  return {};
}

// Calls f(first, n) for each run of consecutive elements (along the last dimension) of slab s
// of a tensor of the given shape, in row-major order: first is the row-major index of the run's
// first element in the full tensor.
template <class F>
void for_each_run(const std::vector<std::uint64_t>& shape, const Hyperslab& s, F&& f) {
  const std::size_t rank = shape.size();
  for (std::size_t d = 0; d < rank; ++d)
    if (s.count[d] == 0) return;
  std::vector<std::uint64_t> stride(rank, 1);
  for (std::size_t d = rank - 1; d > 0; --d) stride[d - 1] = stride[d] * shape[d];
  std::vector<std::uint64_t> idx(rank, 0);  // position within the slab; last dim stays 0
  for (;;) {
    std::uint64_t first = 0;
    for (std::size_t d = 0; d < rank; ++d) first += (s.start[d] + idx[d]) * stride[d];
    f(first, s.count[rank - 1]);
    std::size_t d = rank - 1;
    for (;;) {
      if (d == 0) return;
      --d;
      if (++idx[d] < s.count[d]) break;
      idx[d] = 0;
    }
  }
}

// Sum of the checksum terms of the elements this rank writes of tensor t (0 for a replica).
std::uint64_t local_checksum(const TensorShard& t, bool moving) {
  if (!moving) return 0;
  std::uint64_t sum = 0;
  const float* p = t.data;
  for (const Hyperslab& s : t.slabs)
    for_each_run(t.global_shape, s, [&](std::uint64_t first, std::uint64_t n) {
      sum += checksum_run(p, n, first);
      p += n;
    });
  return sum;
}

std::string hex64(std::uint64_t v) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(v));
  return text;
}

struct Fnv1a {
  std::uint64_t h = 14695981039346656037ull;
  void bytes(const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  void u64(std::uint64_t v) { bytes(&v, sizeof v); }
  void str(const std::string& s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
};

// Phase 1, on every rank: validates the shards, checks that all ranks pass the same path and
// the same tensor list (names and global shapes, in order), and agrees on the number of
// collective transfers per tensor. Returns this rank's error ("" if none); `rounds` is only
// meaningful when no rank reports an error.
std::string prepare(const Comm& c, const std::string& path, const std::vector<TensorShard>& tensors,
                    bool writing, std::vector<Plan>& plans, std::vector<int>& rounds,
                    std::string error) {
  plans.assign(tensors.size(), Plan{});
  std::unordered_set<std::string_view> names;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const TensorShard& t = tensors[i];
    std::string e = make_plan(t, !writing || t.write, writing, plans[i]);
    if (e.empty() && writing && !names.insert(t.name).second)
      e = t.name + ": appears twice in the list of tensors";
    if (!e.empty()) {
      plans[i].groups.clear();
      if (error.empty()) error = std::move(e);
    }
  }

  Fnv1a f;
  f.str(path);
  f.u64(tensors.size());
  for (const TensorShard& t : tensors) {
    f.str(t.name);
    f.u64(t.global_shape.size());
    for (std::uint64_t d : t.global_shape) f.u64(d);
  }
  unsigned long long mine[2] = {f.h, ~f.h}, all[2] = {0, 0};
  TPTRAIN_CKPT_MPI(MPI_Allreduce(mine, all, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, c.comm));
  const bool same = all[0] == ~all[1];  // max == min over the ranks
  rounds.assign(tensors.size(), 0);
  if (!same) {
    if (error.empty())
      error =
          "the ranks disagree on the path or on the list of tensors (names and global "
          "shapes, in the same order on every rank)";
    return error;
  }
  std::vector<int> local(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i)
    local[i] = static_cast<int>(plans[i].groups.size());
  if (!local.empty())
    TPTRAIN_CKPT_MPI(MPI_Allreduce(local.data(), rounds.data(), static_cast<int>(local.size()),
                                   MPI_INT, MPI_MAX, c.comm));
  if (!writing) return error;

  // Every element written exactly once: the written element counts add up to the tensor's size.
  // The last entry counts the ranks with an error already, whose counts mean nothing.
  std::vector<std::uint64_t> counts(tensors.size() + 1, 0), sums(tensors.size() + 1, 0);
  for (std::size_t i = 0; i < tensors.size(); ++i) counts[i] = plans[i].elements;
  counts.back() = error.empty() ? 0 : 1;
  TPTRAIN_CKPT_MPI(MPI_Allreduce(counts.data(), sums.data(), static_cast<int>(counts.size()),
                                 MPI_UINT64_T, MPI_SUM, c.comm));
  if (sums.back() != 0) return error;
  for (std::size_t i = 0; i < tensors.size() && error.empty(); ++i) {
    std::uint64_t total = 1;
    for (std::uint64_t d : tensors[i].global_shape) total *= d;
    if (sums[i] != total)
      error = tensors[i].name + ": the ranks write " + std::to_string(sums[i]) +
              " elements of its " + std::to_string(total) + " " + shape_str(tensors[i].global_shape) +
              " (every element must be written exactly once, by one rank)";
  }
  return error;
}

// ---- data transfer ----------------------------------------------------------------------------

// `rounds` collective transfers of one dataset. Every rank makes all of them, even after an
// error (with nothing selected then), so that nobody is left waiting in a collective call.
void transfer(hid_t dset, const TensorShard& t, const Plan& plan, int rounds, hid_t dxpl,
              bool writing, Status& st) {
  if (rounds == 0) return;
  Handle fspace(TPTRAIN_H5(st, H5Dget_space(dset), t.name), H5Sclose);
  if (!fspace.valid()) return;
  for (int r = 0; r < rounds; ++r) {
    const Group* g = st.ok() && static_cast<std::size_t>(r) < plan.groups.size()
                         ? &plan.groups[static_cast<std::size_t>(r)]
                         : nullptr;
    if (g != nullptr) {
      H5S_seloper_t op = H5S_SELECT_SET;
      for (std::size_t k : g->slabs) {
        const auto start = to_hsize(t.slabs[k].start);
        const auto count = to_hsize(t.slabs[k].count);
        if (TPTRAIN_H5(
                st,
                H5Sselect_hyperslab(fspace.get(), op, start.data(), nullptr, count.data(), nullptr),
                t.name) < 0) {
          g = nullptr;
          break;
        }
        op = H5S_SELECT_OR;
      }
    }
    if (g == nullptr) TPTRAIN_H5(st, H5Sselect_none(fspace.get()), t.name);
    const hsize_t n = g != nullptr ? static_cast<hsize_t>(g->elements) : 0;
    Handle mspace(TPTRAIN_H5(st, H5Screate_simple(1, &n, nullptr), t.name), H5Sclose);
    if (g == nullptr && mspace.valid()) TPTRAIN_H5(st, H5Sselect_none(mspace.get()), t.name);
    float dummy = 0.0f;
    float* buf = g != nullptr ? t.data + g->offset : &dummy;
    if (writing)
      TPTRAIN_H5(st, H5Dwrite(dset, H5T_NATIVE_FLOAT, mspace.get(), fspace.get(), dxpl, buf),
                 t.name);
    else
      TPTRAIN_H5(st, H5Dread(dset, H5T_NATIVE_FLOAT, mspace.get(), fspace.get(), dxpl, buf),
                 t.name);
  }
}

// ---- attributes -------------------------------------------------------------------------------

using h5::attr_exists;
using h5::read_int_attr;
using h5::read_string_attr;
using h5::read_u64_attr;

void write_attr(hid_t loc, const char* name, hid_t file_type, hid_t mem_type, const void* value,
                Status& st, std::string_view where = {}) {
  if (!st.ok()) return;
  const std::string what = h5::attr_what(where, name);
  Handle space(TPTRAIN_H5(st, H5Screate(H5S_SCALAR), what), H5Sclose);
  if (!st.ok()) return;
  Handle attr(
      TPTRAIN_H5(st, H5Acreate2(loc, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT), what),
      H5Aclose);
  if (!st.ok()) return;
  TPTRAIN_H5(st, H5Awrite(attr.get(), mem_type, value), what);
  TPTRAIN_H5(st, H5Aclose(attr.release()), what);
}

// Variable-length UTF-8 string type (h5py reads it as str).
Handle utf8_string_type(Status& st) {
  Handle type(TPTRAIN_H5(st, H5Tcopy(H5T_C_S1), "string type"), H5Tclose);
  if (!st.ok()) return type;
  TPTRAIN_H5(st, H5Tset_size(type.get(), H5T_VARIABLE), "string type");
  TPTRAIN_H5(st, H5Tset_cset(type.get(), H5T_CSET_UTF8), "string type");
  return type;
}

void write_string_attr(hid_t loc, const char* name, const std::string& value, Status& st) {
  if (!st.ok()) return;
  Handle type = utf8_string_type(st);
  const char* p = value.c_str();
  write_attr(loc, name, type.get(), type.get(), &p, st);
}

void write_meta(hid_t file, const CheckpointMeta& meta, Status& st) {
  const int version = static_cast<int>(kFormatVersion);
  write_string_attr(file, "format", kFormat, st);
  write_attr(file, "format_version", H5T_STD_I32LE, H5T_NATIVE_INT, &version, st);
  write_attr(file, "step", H5T_STD_I64LE, H5T_NATIVE_INT64, &meta.step, st);
  write_attr(file, "tokens_seen", H5T_STD_I64LE, H5T_NATIVE_INT64, &meta.tokens_seen, st);
  write_string_attr(file, "deck", meta.deck, st);
  write_attr(file, "tp", H5T_STD_I32LE, H5T_NATIVE_INT, &meta.tp, st);
  write_attr(file, "pp", H5T_STD_I32LE, H5T_NATIVE_INT, &meta.pp, st);
  write_attr(file, "dp", H5T_STD_I32LE, H5T_NATIVE_INT, &meta.dp, st);
  if (!st.ok()) return;
  Handle train(TPTRAIN_H5(st, H5Gcreate2(file, "train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                          "group /train"),
               H5Gclose);
  for (const auto& [name, value] : meta.train)
    write_attr(train.get(), name.c_str(), H5T_STD_I64LE, H5T_NATIVE_INT64, &value, st, "/train/");
  if (st.ok()) TPTRAIN_H5(st, H5Gclose(train.release()), "group /train");
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

// A tensor under /optimizer (whose group then carries the step attribute)?
bool under_optimizer(const std::string& name) {
  const std::size_t b = name.find_first_not_of('/');
  return b != std::string::npos && name.compare(b, 10, "optimizer/") == 0;
}

// Reads and checks the root attributes.
CheckpointMeta read_meta(hid_t file, Status& st) {
  CheckpointMeta meta;
  if (!attr_exists(file, "format", st)) {
    if (st.ok()) st.fail("not a tptrain checkpoint: the file has no format attribute");
    return meta;
  }
  const auto format = read_string_attr(file, "format", st);
  if (!format) return meta;
  if (*format != kFormat) {
    st.fail("not a tptrain checkpoint: its format attribute is \"" + *format + "\", expected \"" +
            kFormat + "\"");
    return meta;
  }
  auto required_int = [&](const char* name) -> std::int64_t {
    if (!st.ok()) return 0;
    if (!attr_exists(file, name, st)) {
      if (st.ok()) st.fail(std::string("the checkpoint has no ") + name + " attribute");
      return 0;
    }
    return read_int_attr(file, name, st).value_or(0);
  };
  const std::int64_t version = required_int("format_version");
  if (!st.ok()) return meta;
  if (version != kFormatVersion) {
    st.fail("format_version " + std::to_string(version) + " is not supported (this build reads " +
            "format_version " + std::to_string(kFormatVersion) + ")");
    return meta;
  }
  meta.step = required_int("step");
  meta.tokens_seen = required_int("tokens_seen");
  auto small_int = [&](const char* name) -> int {
    const std::int64_t v = required_int(name);
    if (st.ok() && (v < INT_MIN || v > INT_MAX))
      st.fail(std::string("attribute ") + name + " = " + std::to_string(v) + " is out of range");
    return static_cast<int>(v);
  };
  meta.tp = small_int("tp");
  meta.pp = small_int("pp");
  meta.dp = small_int("dp");
  if (st.ok()) {
    if (!attr_exists(file, "deck", st)) {
      if (st.ok()) st.fail("the checkpoint has no deck attribute");
    } else {
      meta.deck = read_string_attr(file, "deck", st).value_or(std::string());
    }
  }
  // /train: every attribute an integer. Absent in files written before it existed.
  if (!st.ok()) return meta;
  const htri_t has_train = TPTRAIN_H5(st, H5Lexists(file, "train", H5P_DEFAULT), "group /train");
  if (!st.ok() || has_train == 0) return meta;
  Handle train(TPTRAIN_H5(st, H5Gopen2(file, "train", H5P_DEFAULT), "group /train"), H5Gclose);
  for (const std::string& name : h5::attribute_names(train.get(), st, "/train")) {
    const auto v = read_int_attr(train.get(), name.c_str(), st, "/train/");
    if (!v) break;
    meta.train[name] = *v;
  }
  return meta;
}

// ---- datasets on reading ----------------------------------------------------------------------

const char* class_text(H5T_class_t cls) {
  switch (cls) {
    case H5T_INTEGER:
      return "integer data";
    case H5T_STRING:
      return "strings";
    case H5T_COMPOUND:
      return "compound data";
    default:
      return "non-numeric data";
  }
}

// Opens the dataset of one tensor and checks it. A missing dataset, a non-dataset object, a
// shape or type mismatch is added to `problems` (and yields an invalid handle); HDF5 failures
// go to st.
Handle open_checked(hid_t file, const TensorShard& t, std::set<std::string>& groups,
                    std::vector<std::string>& problems, Status& st) {
  const std::string& name = t.name;
  // Each parent must exist and be a group, or H5Lexists on the child fails.
  for (std::size_t p = name.find('/'); p != std::string::npos; p = name.find('/', p + 1)) {
    if (p == 0 || name[p - 1] == '/') continue;
    const std::string parent = name.substr(0, p);
    if (groups.count(parent) != 0) continue;
    const htri_t exists = TPTRAIN_H5(st, H5Lexists(file, parent.c_str(), H5P_DEFAULT), parent);
    if (!st.ok()) return {};
    if (exists == 0) {
      problems.push_back(name + ": no such dataset in the checkpoint (no group " + parent + ")");
      return {};
    }
    Handle obj(TPTRAIN_H5(st, H5Oopen(file, parent.c_str(), H5P_DEFAULT), parent), H5Oclose);
    if (!st.ok()) return {};
    const H5I_type_t type = TPTRAIN_H5(st, H5Iget_type(obj.get()), parent);
    if (!st.ok()) return {};
    if (type != H5I_GROUP) {
      problems.push_back(name + ": no such dataset in the checkpoint (" + parent +
                         " is not a group)");
      return {};
    }
    groups.insert(parent);
  }
  const htri_t exists = TPTRAIN_H5(st, H5Lexists(file, name.c_str(), H5P_DEFAULT), name);
  if (!st.ok()) return {};
  if (exists == 0) {
    problems.push_back(name + ": no such dataset in the checkpoint");
    return {};
  }
  Handle obj(TPTRAIN_H5(st, H5Oopen(file, name.c_str(), H5P_DEFAULT), name), H5Oclose);
  if (!st.ok()) return {};
  const H5I_type_t type = TPTRAIN_H5(st, H5Iget_type(obj.get()), name);
  if (!st.ok()) return {};
  if (type != H5I_DATASET) {
    problems.push_back(name + ": is not a dataset in the checkpoint");
    return {};
  }
  Handle space(TPTRAIN_H5(st, H5Dget_space(obj.get()), name), H5Sclose);
  if (!st.ok()) return {};
  const int ndims = TPTRAIN_H5(st, H5Sget_simple_extent_ndims(space.get()), name);
  if (!st.ok()) return {};
  std::vector<hsize_t> dims(static_cast<std::size_t>(ndims));
  if (ndims > 0) TPTRAIN_H5(st, H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), name);
  if (!st.ok()) return {};
  const std::vector<std::uint64_t> shape(dims.begin(), dims.end());
  if (shape != t.global_shape) {
    problems.push_back(name + ": checkpoint has " + shape_str(shape) + ", the deck needs " +
                       shape_str(t.global_shape));
    return {};
  }
  Handle dtype(TPTRAIN_H5(st, H5Dget_type(obj.get()), name), H5Tclose);
  if (!st.ok()) return {};
  const H5T_class_t cls = TPTRAIN_H5(st, H5Tget_class(dtype.get()), name);
  if (!st.ok()) return {};
  if (cls != H5T_FLOAT) {
    problems.push_back(name + ": checkpoint holds " + class_text(cls) +
                       ", expected floating-point data");
    return {};
  }
  return obj;
}

std::string list_problems(const std::vector<std::string>& problems) {
  if (problems.size() == 1) return problems.front();
  std::string s = std::to_string(problems.size()) + " problems with the checkpoint's datasets:";
  for (std::size_t i = 0; i < problems.size() && i < kMaxListedProblems; ++i)
    s += "\n  " + problems[i];
  if (problems.size() > kMaxListedProblems)
    s += "\n  ... and " + std::to_string(problems.size() - kMaxListedProblems) + " more";
  return s;
}

// ---- files ------------------------------------------------------------------------------------

// Rank 0: removes <path>.tmp after every rank has closed it.
void remove_tmp(const Comm& c, const std::string& tmp) {
  TPTRAIN_CKPT_MPI(MPI_Barrier(c.comm));
  if (c.rank == 0) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
  }
  TPTRAIN_CKPT_MPI(MPI_Barrier(c.comm));
}

#if TPTRAIN_HAVE_FSYNC
// fsync(2) of a file or directory. Failures that mean "not supported here" are ignored.
std::string sync_path(const std::string& p, bool directory) {
  const int fd = ::open(p.c_str(), O_RDONLY | (directory ? O_DIRECTORY : 0));
  if (fd < 0) return directory ? std::string() : "cannot open " + p + ": " + std::strerror(errno);
  std::string err;
  if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS && errno != ENOTSUP)
    err = "fsync of " + p + " failed: " + std::strerror(errno);
  ::close(fd);
  return directory ? std::string() : err;
}
#endif

// Rank 0, after every rank closed the file: make it durable, then give it its final name.
std::string publish(const std::string& tmp, const std::string& path) {
#if TPTRAIN_HAVE_FSYNC
  if (std::string e = sync_path(tmp, false); !e.empty()) return e;
#endif
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return "cannot rename " + tmp + " to " + path + ": " + std::strerror(errno);
#if TPTRAIN_HAVE_FSYNC
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  sync_path(dir.empty() ? std::string(".") : dir.string(), true);
#endif
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

// Property lists of the one handler: MPI-IO file access, collective transfers.
struct PropertyLists {
  Handle fapl, dxpl;
};

PropertyLists parallel_plists(MPI_Comm comm, Status& st) {
  PropertyLists p;
  p.fapl = Handle(TPTRAIN_H5(st, H5Pcreate(H5P_FILE_ACCESS), "file access properties"), H5Pclose);
  if (st.ok())
    TPTRAIN_H5(st, H5Pset_fapl_mpio(p.fapl.get(), comm, MPI_INFO_NULL), "file access properties");
  p.dxpl = Handle(TPTRAIN_H5(st, H5Pcreate(H5P_DATASET_XFER), "transfer properties"), H5Pclose);
  if (st.ok())
    TPTRAIN_H5(st, H5Pset_dxpl_mpio(p.dxpl.get(), H5FD_MPIO_COLLECTIVE), "transfer properties");
  return p;
}

CheckpointMeta broadcast_meta(const Comm& c, const CheckpointMeta& in) {
  CheckpointMeta m = in;
  long long v[5] = {in.step, in.tokens_seen, in.tp, in.pp, in.dp};
  TPTRAIN_CKPT_MPI(MPI_Bcast(v, 5, MPI_LONG_LONG, 0, c.comm));
  m.step = v[0];
  m.tokens_seen = v[1];
  m.tp = static_cast<int>(v[2]);
  m.pp = static_cast<int>(v[3]);
  m.dp = static_cast<int>(v[4]);
  broadcast_string(c, m.deck, 0);
  unsigned long long entries = in.train.size();
  TPTRAIN_CKPT_MPI(MPI_Bcast(&entries, 1, MPI_UNSIGNED_LONG_LONG, 0, c.comm));
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
    TPTRAIN_CKPT_MPI(MPI_Bcast(&value, 1, MPI_LONG_LONG, 0, c.comm));
    m.train[name] = value;
  }
  return m;
}

// Verification of one dataset: this rank's checksum terms of rows [begin, end) of dimension 0,
// read in `rounds` collective transfers of at most chunk_rows rows each (the same number on
// every rank; a rank with no rows left takes part with an empty selection).
struct VerifyPlan {
  std::uint64_t begin = 0, end = 0, row_elements = 0, chunk_rows = 1;
  std::uint64_t rounds = 0;
};

constexpr std::uint64_t kVerifyChunkElements = std::uint64_t{1} << 22;  // 16 MiB of float32

VerifyPlan verify_plan(const std::vector<std::uint64_t>& shape, const Comm& c) {
  VerifyPlan v;
  const std::uint64_t rows = shape[0];
  v.row_elements = 1;
  for (std::size_t d = 1; d < shape.size(); ++d) v.row_elements *= shape[d];
  if (rows == 0 || v.row_elements == 0) return v;
  const auto n = static_cast<std::uint64_t>(c.size), r = static_cast<std::uint64_t>(c.rank);
  const std::uint64_t base = rows / n, extra = rows % n;
  v.begin = r * base + std::min(r, extra);
  v.end = v.begin + base + (r < extra ? 1 : 0);
  v.chunk_rows = std::max<std::uint64_t>(1, kVerifyChunkElements / v.row_elements);
  const std::uint64_t most = base + (extra > 0 ? 1 : 0);  // rows of the largest block
  v.rounds = (most + v.chunk_rows - 1) / v.chunk_rows;
  return v;
}

std::uint64_t verify_dataset(hid_t dset, const TensorShard& t, const Comm& c, hid_t dxpl,
                             std::vector<float>& buf, Status& st) {
  const VerifyPlan v = verify_plan(t.global_shape, c);
  std::uint64_t sum = 0;
  if (v.rounds == 0) return 0;
  Handle fspace(TPTRAIN_H5(st, H5Dget_space(dset), t.name), H5Sclose);
  if (!fspace.valid()) return 0;
  for (std::uint64_t k = 0; k < v.rounds; ++k) {
    const std::uint64_t lo = std::min(v.end, v.begin + k * v.chunk_rows);
    const std::uint64_t hi = std::min(v.end, lo + v.chunk_rows);
    const bool some = st.ok() && hi > lo;
    const hsize_t n = some ? static_cast<hsize_t>((hi - lo) * v.row_elements) : 0;
    if (some) {
      std::vector<hsize_t> start(t.global_shape.size(), 0), count = to_hsize(t.global_shape);
      start[0] = lo;
      count[0] = hi - lo;
      TPTRAIN_H5(st,
                 H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start.data(), nullptr,
                                     count.data(), nullptr),
                 t.name);
      if (buf.size() < n) buf.resize(n);
    }
    if (!some || !st.ok()) TPTRAIN_H5(st, H5Sselect_none(fspace.get()), t.name);
    Handle mspace(TPTRAIN_H5(st, H5Screate_simple(1, &n, nullptr), t.name), H5Sclose);
    if ((!some || !st.ok()) && mspace.valid()) TPTRAIN_H5(st, H5Sselect_none(mspace.get()), t.name);
    float dummy = 0.0f;
    const bool reading = some && st.ok();
    TPTRAIN_H5(st,
               H5Dread(dset, H5T_NATIVE_FLOAT, mspace.get(), fspace.get(), dxpl,
                       reading ? buf.data() : &dummy),
               t.name);
    if (reading && st.ok()) sum += checksum_run(buf.data(), n, lo * v.row_elements);
  }
  return sum;
}

CheckpointMeta read_impl(MPI_Comm comm, const std::string& path,
                         const std::vector<TensorShard>& tensors, bool verify) {
  h5::ErrorSilencer silence;
  const Comm c = describe(comm);
  const std::string prefix = "reading checkpoint " + path + ": ";

  // 1: validate; rank 0 looks at the file.
  std::vector<Plan> plans;
  std::vector<int> rounds;
  std::string err = prepare(c, path, tensors, false, plans, rounds,
                            c.rank == 0 ? hdf5_file_problem(path) : std::string());
  if (std::string m = agree(c, err); !m.empty()) throw CheckpointError(prefix + m);

  // 2: open.
  Status st;
  PropertyLists pl = parallel_plists(comm, st);
  Handle file;
  if (st.ok()) {
    file = Handle(TPTRAIN_H5(st, H5Fopen(path.c_str(), H5F_ACC_RDONLY, pl.fapl.get()), path),
                  H5Fclose);
    if (!st.ok()) st.error += "; the file is truncated or corrupt";
  }
  if (std::string m = agree(c, st.error); !m.empty()) throw CheckpointError(prefix + m);

  // 3: attributes, datasets.
  std::vector<Handle> dsets(tensors.size());
  auto abandon = [&](const std::string& m) {
    dsets.clear();
    file.close();  // collective; every rank has the file open here
    throw CheckpointError(prefix + m);
  };
  const CheckpointMeta meta = read_meta(file.get(), st);
  std::vector<std::string> problems;
  std::set<std::string> groups;
  std::vector<std::uint64_t> stored(tensors.size(), 0);
  for (std::size_t i = 0; i < tensors.size() && st.ok(); ++i) {
    dsets[i] = open_checked(file.get(), tensors[i], groups, problems, st);
    if (!verify || !dsets[i].valid()) continue;
    if (!attr_exists(dsets[i].get(), kChecksumAttribute, st, tensors[i].name + "/")) {
      if (st.ok())
        problems.push_back(tensors[i].name + ": has no " + kChecksumAttribute +
                           " attribute: the file is corrupt or was not written by tptrain");
      continue;
    }
    stored[i] = read_u64_attr(dsets[i].get(), kChecksumAttribute, st, tensors[i].name + "/")
                    .value_or(0);
  }
  if (verify && st.ok() && std::any_of(tensors.begin(), tensors.end(), [](const TensorShard& t) {
        return under_optimizer(t.name);
      })) {
    // The optimizer state must belong to the checkpoint's step. (Its group exists: a tensor
    // under it was found, or is already listed as missing.)
    const htri_t has = TPTRAIN_H5(st, H5Lexists(file.get(), "optimizer", H5P_DEFAULT), "optimizer");
    if (st.ok() && has > 0) {
      Handle opt(TPTRAIN_H5(st, H5Oopen(file.get(), "optimizer", H5P_DEFAULT), "optimizer"),
                 H5Oclose);
      if (st.ok() && !attr_exists(opt.get(), "step", st, "/optimizer/")) {
        if (st.ok()) problems.push_back("optimizer: the group has no step attribute");
      } else if (st.ok()) {
        const auto step = read_int_attr(opt.get(), "step", st, "/optimizer/");
        if (step && *step != meta.step)
          problems.push_back("optimizer: the optimizer state is from step " +
                             std::to_string(*step) + ", the checkpoint from step " +
                             std::to_string(meta.step));
      }
    }
  }
  if (st.ok() && !problems.empty()) st.fail(list_problems(problems));
  if (std::string m = agree(c, st.error); !m.empty()) abandon(m);

  // 4: data.
  for (std::size_t i = 0; i < tensors.size(); ++i)
    transfer(dsets[i].get(), tensors[i], plans[i], rounds[i], pl.dxpl.get(), false, st);
  if (std::string m = agree(c, st.error); !m.empty()) abandon(m);

  // 4b: verification: each dataset checksummed once more, in full, the ranks reading disjoint
  // row blocks (whatever slabs they asked for above); sums over the ranks against the stored.
  if (verify && !tensors.empty()) {
    std::vector<std::uint64_t> local(tensors.size(), 0), computed(tensors.size(), 0);
    std::vector<float> buf;
    for (std::size_t i = 0; i < tensors.size(); ++i)
      local[i] = verify_dataset(dsets[i].get(), tensors[i], c, pl.dxpl.get(), buf, st);
    if (std::string m = agree(c, st.error); !m.empty()) abandon(m);
    TPTRAIN_CKPT_MPI(MPI_Allreduce(local.data(), computed.data(), static_cast<int>(local.size()),
                                   MPI_UINT64_T, MPI_SUM, c.comm));
    for (std::size_t i = 0; i < tensors.size(); ++i)
      if (computed[i] != stored[i])
        problems.push_back(tensors[i].name + ": checksum mismatch: the file is corrupt (stored " +
                           hex64(stored[i]) + ", computed " + hex64(computed[i]) + ")");
    if (!problems.empty()) st.fail(list_problems(problems));
    if (std::string m = agree(c, st.error); !m.empty()) abandon(m);
  }

  // 5: close.
  for (std::size_t i = 0; i < tensors.size(); ++i)
    TPTRAIN_H5(st, H5Oclose(dsets[i].release()), tensors[i].name);
  TPTRAIN_H5(st, H5Fclose(file.release()), path);
  if (std::string m = agree(c, st.error); !m.empty()) throw CheckpointError(prefix + m);
  return meta;
}

// Test hook for crash safety: with TPTRAIN_TEST_KILL_IN_CHECKPOINT=<step> in the environment,
// the job kills itself (SIGKILL, no clean-up) halfway through writing the datasets of that
// step's checkpoint — as a job killed at its wall-clock limit would be.
void kill_hook(std::int64_t step) {
  const char* at = std::getenv("TPTRAIN_TEST_KILL_IN_CHECKPOINT");
  if (at == nullptr || std::strtoll(at, nullptr, 10) != step) return;
  std::fprintf(stderr, "tptrain: TPTRAIN_TEST_KILL_IN_CHECKPOINT=%s: killing the job mid-write\n", at);
  std::fflush(stderr);
  std::raise(SIGKILL);
}

}  // namespace


std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::uint64_t checksum_term(std::uint32_t bits, std::uint64_t index) noexcept {
  return splitmix64(bits ^ splitmix64(index));
}

std::uint64_t checksum_run(const float* data, std::uint64_t n, std::uint64_t first) noexcept {
  static_assert(sizeof(float) == sizeof(std::uint32_t), "float32 checksums need a 32-bit float");
  std::uint64_t sum = 0;
  for (std::uint64_t k = 0; k < n; ++k) {
    std::uint32_t bits;
    std::memcpy(&bits, data + k, sizeof bits);
    sum += checksum_term(bits, first + k);
  }
  return sum;
}

void write_checkpoint(MPI_Comm comm, const std::string& path, const CheckpointMeta& meta_in,
                      const std::vector<TensorShard>& tensors) {
  h5::ErrorSilencer silence;
  const Comm c = describe(comm);
  const std::string tmp = path + ".tmp";
  const std::string prefix = "writing checkpoint " + path + ": ";

  // 1: validate; the metadata is rank 0's.
  std::vector<Plan> plans;
  std::vector<int> rounds;
  std::string err = prepare(c, path, tensors, true, plans, rounds, std::string());
  const CheckpointMeta meta = broadcast_meta(c, meta_in);
  if (err.empty()) err = check_train_names(meta);
  if (std::string m = agree(c, err); !m.empty()) throw CheckpointError(prefix + m);

  // 2: create <path>.tmp (truncating a stale one).
  Status st;
  PropertyLists pl = parallel_plists(comm, st);
  Handle lcpl, dcpl;
  if (st.ok()) {
    lcpl = Handle(TPTRAIN_H5(st, H5Pcreate(H5P_LINK_CREATE), "link properties"), H5Pclose);
    if (st.ok()) TPTRAIN_H5(st, H5Pset_create_intermediate_group(lcpl.get(), 1), "link properties");
    dcpl = Handle(TPTRAIN_H5(st, H5Pcreate(H5P_DATASET_CREATE), "dataset properties"), H5Pclose);
    // Every element is written by some rank: writing fill values first would double the I/O.
    if (st.ok())
      TPTRAIN_H5(st, H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), "dataset properties");
  }
  Handle file;
  if (st.ok())
    file = Handle(
        TPTRAIN_H5(st, H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, pl.fapl.get()), tmp),
        H5Fclose);
  if (std::string m = agree(c, st.error); !m.empty()) {
    file.close();
    remove_tmp(c, tmp);
    throw CheckpointError(prefix + m);
  }

  std::vector<Handle> dsets(tensors.size());
  auto abandon = [&](const std::string& m) {
    dsets.clear();
    file.close();  // collective; every rank has the file open here
    remove_tmp(c, tmp);
    throw CheckpointError(prefix + m);
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
    write_attr(opt.get(), "step", H5T_STD_I64LE, H5T_NATIVE_INT64, &meta.step, st, "/optimizer/");
  }
  if (std::string m = agree(c, st.error); !m.empty()) abandon(m);

  // 4: data.
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    transfer(dsets[i].get(), tensors[i], plans[i], rounds[i], pl.dxpl.get(), true, st);
    if (i == tensors.size() / 2) kill_hook(meta.step);
  }
  if (std::string m = agree(c, st.error); !m.empty()) abandon(m);

  // 4b: checksums, after the data: the terms of each rank's written slabs, summed over the
  // ranks (replicas not written add nothing). Attributes are written collectively, same values
  // on every rank.
  std::vector<std::uint64_t> sums(tensors.size(), 0);
  {
    std::vector<std::uint64_t> local(tensors.size(), 0);
    for (std::size_t i = 0; i < tensors.size(); ++i)
      local[i] = local_checksum(tensors[i], tensors[i].write);
    if (!local.empty())
      TPTRAIN_CKPT_MPI(MPI_Allreduce(local.data(), sums.data(), static_cast<int>(local.size()),
                                     MPI_UINT64_T, MPI_SUM, c.comm));
  }
  for (std::size_t i = 0; i < tensors.size() && st.ok(); ++i)
    write_attr(dsets[i].get(), kChecksumAttribute, H5T_STD_U64LE, H5T_NATIVE_UINT64, &sums[i], st,
               tensors[i].name + "/");
  if (std::string m = agree(c, st.error); !m.empty()) abandon(m);

  // 5: close (H5Fclose flushes).
  for (std::size_t i = 0; i < tensors.size(); ++i)
    TPTRAIN_H5(st, H5Oclose(dsets[i].release()), tensors[i].name);
  TPTRAIN_H5(st, H5Fclose(file.release()), tmp);
  if (std::string m = agree(c, st.error); !m.empty()) {
    remove_tmp(c, tmp);
    throw CheckpointError(prefix + m);
  }

  // 6: rank 0 gives the complete file its name; the agreement is the final barrier.
  const std::string rename_error = c.rank == 0 ? publish(tmp, path) : std::string();
  if (std::string m = agree(c, rename_error); !m.empty()) {
    remove_tmp(c, tmp);
    throw CheckpointError(prefix + m);
  }
}

CheckpointMeta read_checkpoint(MPI_Comm comm, const std::string& path,
                               const std::vector<TensorShard>& tensors, bool verify) {
  return read_impl(comm, path, tensors, verify);
}

CheckpointMeta read_checkpoint_meta(MPI_Comm comm, const std::string& path) {
  return read_impl(comm, path, {}, false);
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
    if (!in) return std::string("cannot be opened for reading: ") + std::strerror(errno);
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
