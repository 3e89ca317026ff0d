#include "io/checkpoint_schema.hpp"

#include <climits>

#include "io/checkpoint_checksum.hpp"
#include "io/checkpoint_slabs.hpp"
#include "io/hdf5_attributes.hpp"

namespace tptrain::io::detail {
namespace {

using h5::Handle;
using h5::Status;

constexpr std::size_t kMaxListedProblems = 10;

// Runs one check with its own Status; an HDF5 failure becomes a problem.
template <class F>
auto checked(std::vector<std::string>& problems, F&& f) {
  Status st;
  auto result = f(st);
  if (!st.ok()) problems.push_back(st.error);
  return result;
}

const char* class_text(H5T_class_t cls) {
  switch (cls) {
    case H5T_INTEGER:
      return "integer data";
    case H5T_STRING:
      return "strings";
    case H5T_COMPOUND:
      return "compound data";
    case H5T_FLOAT:
      return "floating-point data";
    default:
      return "non-numeric data";
  }
}

// Is `path` (relative to the root) a link to an object of the given type? Adds a problem naming
// `subject` when it is missing or of another type.
Handle open_object(hid_t file, const std::string& path, H5I_type_t want, const char* want_text,
                   const std::string& subject, std::vector<std::string>& problems) {
  Status st;
  const htri_t exists = TPTRAIN_H5(st, H5Lexists(file, path.c_str(), H5P_DEFAULT), path);
  if (!st.ok()) {
    problems.push_back(st.error);
    return {};
  }
  if (exists == 0) {
    problems.push_back(subject);
    return {};
  }
  Handle obj(TPTRAIN_H5(st, H5Oopen(file, path.c_str(), H5P_DEFAULT), path), H5Oclose);
  const H5I_type_t type = st.ok() ? TPTRAIN_H5(st, H5Iget_type(obj.get()), path) : H5I_BADID;
  if (!st.ok()) {
    problems.push_back(st.error);
    return {};
  }
  if (type != want) {
    problems.push_back(path + " is not a " + want_text);
    return {};
  }
  return obj;
}

}  // namespace

CheckpointMeta check_root(hid_t file, std::vector<std::string>& problems) {
  CheckpointMeta meta;
  const bool has_format =
      checked(problems, [&](Status& st) { return h5::attr_exists(file, "format", st); });
  if (!problems.empty()) return meta;
  if (!has_format) {
    problems.push_back("not a tptrain checkpoint: the file has no format attribute");
    return meta;
  }
  const auto format =
      checked(problems, [&](Status& st) { return h5::read_string_attr(file, "format", st); });
  if (!format) return meta;
  if (*format != kFormat) {
    problems.push_back("not a tptrain checkpoint: its format attribute is \"" +
                       format->substr(0, 100) + "\", expected \"" + kFormat + "\"");
    return meta;
  }
  auto required_int = [&](const char* name) -> std::optional<std::int64_t> {
    return checked(problems, [&](Status& st) -> std::optional<std::int64_t> {
      if (!h5::attr_exists(file, name, st)) {
        if (st.ok()) problems.push_back(std::string("the checkpoint has no ") + name + " attribute");
        return std::nullopt;
      }
      return h5::read_int_attr(file, name, st);
    });
  };
  const auto version = required_int("format_version");
  if (version && (*version < kOldestFormatVersion || *version > kFormatVersion)) {
    problems.push_back("format_version " + std::to_string(*version) +
                       " is not supported (this build reads format_version " +
                       std::to_string(kOldestFormatVersion) + " to " + std::to_string(kFormatVersion) + ")");
    return meta;
  }
  meta.step = required_int("step").value_or(0);
  meta.tokens_seen = required_int("tokens_seen").value_or(0);
  auto small_int = [&](const char* name) -> int {
    const auto v = required_int(name);
    if (!v) return 0;
    if (*v < 1 || *v > INT_MAX) {
      problems.push_back(std::string("attribute ") + name + " = " + std::to_string(*v) +
                         " is out of range (expected 1 to " + std::to_string(INT_MAX) + ")");
      return 0;
    }
    return static_cast<int>(*v);
  };
  meta.tp = small_int("tp");
  meta.pp = small_int("pp");
  meta.dp = small_int("dp");
  checked(problems, [&](Status& st) {
    if (!h5::attr_exists(file, "deck", st)) {
      if (st.ok()) problems.push_back("the checkpoint has no deck attribute");
    } else {
      meta.deck = h5::read_string_attr(file, "deck", st).value_or(std::string());
    }
    return 0;
  });
  checked(problems, [&](Status& st) {  // optional: checkpoints from before mixed precision are fp32
    if (h5::attr_exists(file, "precision", st))
      meta.precision = h5::read_string_attr(file, "precision", st).value_or(std::string("fp32"));
    return 0;
  });

  // /train: always written; every attribute an integer.
  Handle train =
      open_object(file, "train", H5I_GROUP, "group", "the checkpoint has no /train group",
                  problems);
  if (train.valid())
    checked(problems, [&](Status& st) {
      for (const std::string& name : h5::attribute_names(train.get(), st, "/train")) {
        const auto v = h5::read_int_attr(train.get(), name.c_str(), st, "/train/");
        if (!v) break;
        meta.train[name] = *v;
      }
      return 0;
    });
  if (train.valid()) meta.blend = read_blend(train.get(), problems);
  // format_version 2 seals the metadata: checked once everything it covers has been read. A file
  // that says version 1 but carries the seal is checked too, so that one changed byte in
  // format_version cannot switch the check off.
  if (version && problems.empty())
    checked(problems, [&](Status& st) {
      if (!h5::attr_exists(file, kMetadataChecksumAttribute, st)) {
        if (st.ok() && *version >= 2)
          problems.push_back(std::string("the checkpoint has no ") + kMetadataChecksumAttribute + " attribute");
        return 0;
      }
      const auto stored = h5::read_u64_attr(file, kMetadataChecksumAttribute, st);
      const std::uint64_t computed = metadata_checksum(meta);
      if (stored && *stored != computed)
        problems.push_back("the metadata is corrupt: " + std::string(kMetadataChecksumAttribute) + " is " +
                           hex64(*stored) + ", the attributes hash to " + hex64(computed) +
                           " (a root or /train attribute changed since the checkpoint was written)");
      return 0;
    });
  return meta;
}

Handle open_dataset_checked(hid_t file, const std::string& name,
                            const std::vector<std::uint64_t>* want_shape,
                            std::set<std::string>& groups, std::vector<std::string>& problems) {
  // Each parent must exist and be a group, or H5Lexists on the child fails.
  for (std::size_t p = name.find('/'); p != std::string::npos; p = name.find('/', p + 1)) {
    if (p == 0 || name[p - 1] == '/') continue;
    const std::string parent = name.substr(0, p);
    if (groups.count(parent) != 0) continue;
    std::vector<std::string> found;
    Handle g = open_object(file, parent, H5I_GROUP, "group",
                           name + ": no such dataset in the checkpoint (no group " + parent + ")",
                           found);
    if (!g.valid()) {
      if (!found.empty() && found.back() == parent + " is not a group")
        found.back() = name + ": no such dataset in the checkpoint (" + parent + " is not a group)";
      problems.insert(problems.end(), found.begin(), found.end());
      return {};
    }
    groups.insert(parent);
  }
  std::vector<std::string> found;
  Handle obj = open_object(file, name, H5I_DATASET, "dataset",
                           name + ": no such dataset in the checkpoint", found);
  if (!obj.valid()) {
    if (!found.empty() && found.back() == name + " is not a dataset")
      found.back() = name + ": is not a dataset in the checkpoint";
    problems.insert(problems.end(), found.begin(), found.end());
    return {};
  }
  Status st;
  Handle space(TPTRAIN_H5(st, H5Dget_space(obj.get()), name), H5Sclose);
  const int ndims = st.ok() ? TPTRAIN_H5(st, H5Sget_simple_extent_ndims(space.get()), name) : -1;
  std::vector<hsize_t> dims(static_cast<std::size_t>(ndims > 0 ? ndims : 0));
  if (ndims > 0) TPTRAIN_H5(st, H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), name);
  Handle dtype;
  if (st.ok()) dtype = Handle(TPTRAIN_H5(st, H5Dget_type(obj.get()), name), H5Tclose);
  const H5T_class_t cls = st.ok() ? TPTRAIN_H5(st, H5Tget_class(dtype.get()), name) : H5T_NO_CLASS;
  if (!st.ok()) {
    problems.push_back(st.error);
    return {};
  }
  const std::vector<std::uint64_t> shape(dims.begin(), dims.end());
  if (want_shape != nullptr && shape != *want_shape) {
    problems.push_back(name + ": checkpoint has " + shape_str(shape) + ", the deck needs " +
                       shape_str(*want_shape));
    return {};
  }
  if (ndims < 1) {
    problems.push_back(name + ": is a scalar, expected a tensor of at least one dimension");
    return {};
  }
  // IEEE binary32 exactly: a float type with damaged precision or exponent fields would convert
  // to other values than were written.
  const bool ieee32 =
      H5Tequal(dtype.get(), H5T_IEEE_F32LE) > 0 || H5Tequal(dtype.get(), H5T_IEEE_F32BE) > 0;
  if (cls != H5T_FLOAT || !ieee32) {
    problems.push_back(name + ": checkpoint holds " +
                       (cls == H5T_FLOAT ? h5::type_text(dtype.get()) + " data"
                                         : std::string(class_text(cls))) +
                       ", expected float32");
    return {};
  }
  return obj;
}

std::optional<std::uint64_t> stored_checksum(hid_t dset, const std::string& name,
                                             std::vector<std::string>& problems) {
  return checked(problems, [&](Status& st) -> std::optional<std::uint64_t> {
    if (!h5::attr_exists(dset, kChecksumAttribute, st, name + "/")) {
      if (st.ok())
        problems.push_back(name + ": has no " + kChecksumAttribute +
                           " attribute: the file is corrupt or was not written by tptrain");
      return std::nullopt;
    }
    return h5::read_u64_attr(dset, kChecksumAttribute, st, name + "/");
  });
}

void check_optimizer_step(hid_t file, std::int64_t step, std::vector<std::string>& problems) {
  Handle opt = open_object(file, "optimizer", H5I_GROUP, "group",
                           "the checkpoint has no /optimizer group", problems);
  if (!opt.valid()) return;
  checked(problems, [&](Status& st) {
    if (!h5::attr_exists(opt.get(), "step", st, "/optimizer/")) {
      if (st.ok()) problems.push_back("optimizer: the group has no step attribute");
      return 0;
    }
    const auto s = h5::read_int_attr(opt.get(), "step", st, "/optimizer/");
    if (s && *s != step)
      problems.push_back("optimizer: the optimizer state is from step " + std::to_string(*s) +
                         ", the checkpoint from step " + std::to_string(step));
    return 0;
  });
}

bool under_optimizer(const std::string& name) {
  const std::size_t b = name.find_first_not_of('/');
  return b != std::string::npos && name.compare(b, 10, "optimizer/") == 0;
}

std::string list_problems(const std::vector<std::string>& problems) {
  if (problems.size() == 1) return problems.front();
  std::string s = std::to_string(problems.size()) + " problems with the checkpoint:";
  for (std::size_t i = 0; i < problems.size() && i < kMaxListedProblems; ++i)
    s += "\n  " + problems[i];
  if (problems.size() > kMaxListedProblems)
    s += "\n  ... and " + std::to_string(problems.size() - kMaxListedProblems) + " more";
  return s;
}

namespace {
constexpr int kMaxDepth = 64;                                      // group nesting followed
constexpr hsize_t kMaxLinks = hsize_t{1} << 20;                    // per group
constexpr std::size_t kMaxLinkName = 4096;                         // bytes
}  // namespace

void collect_datasets(hid_t group, const std::string& prefix, int depth,
                      std::vector<std::string>& datasets, std::vector<std::string>& notes,
                      std::set<haddr_t>& visited, ReadWatchdog* watchdog, Status& st) {
  const std::string where = prefix.empty() ? std::string("/") : prefix;
  H5G_info_t info;
  if (TPTRAIN_H5(st, H5Gget_info(group, &info), "group " + where) < 0) return;
  if (info.nlinks > kMaxLinks) {
    notes.push_back("group " + where + " claims " + std::to_string(info.nlinks) +
                    " links: the file is corrupt");
    return;
  }
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    if (watchdog != nullptr) watchdog->kick();
    const ssize_t len = TPTRAIN_H5(
        st, H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT),
        "group " + where);
    if (len < 0) return;
    if (len == 0 || static_cast<std::size_t>(len) > kMaxLinkName) {
      notes.push_back("group " + where + ": link " + std::to_string(i) + " has a name of " +
                      std::to_string(len) + " bytes: the file is corrupt");
      continue;
    }
    std::vector<char> buf(static_cast<std::size_t>(len) + 1, '\0');
    if (TPTRAIN_H5(st,
                   H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, buf.data(),
                                      buf.size(), H5P_DEFAULT),
                   "group " + where) < 0)
      return;
    const std::string name(buf.data());
    const std::string path = prefix.empty() ? name : prefix + "/" + name;
    Status local;
    Handle obj(TPTRAIN_H5(local, H5Oopen(group, name.c_str(), H5P_DEFAULT), path), H5Oclose);
    if (!local.ok()) {
      notes.push_back(path + ": cannot be opened (" + local.error + ")");
      continue;
    }
    const H5I_type_t type = H5Iget_type(obj.get());
    if (type == H5I_DATASET) {
      datasets.push_back(path);
    } else if (type == H5I_GROUP) {
      H5O_info_t oinfo;
      if (TPTRAIN_H5(local, H5Oget_info2(obj.get(), &oinfo, H5O_INFO_BASIC), path) < 0) {
        notes.push_back(path + ": cannot be described (" + local.error + ")");
        continue;
      }
      if (!visited.insert(oinfo.addr).second) {
        notes.push_back(path + ": links to a group listed before: the file is corrupt");
        continue;
      }
      if (depth >= kMaxDepth) {
        notes.push_back(path + ": groups nested deeper than " + std::to_string(kMaxDepth) +
                        " levels are not listed");
        continue;
      }
      collect_datasets(obj.get(), path, depth + 1, datasets, notes, visited, watchdog, st);
      if (!st.ok()) return;
    } else {
      notes.push_back(path + ": is neither a group nor a dataset");
    }
  }
}

}  // namespace tptrain::io::detail
