// Serial HDF5 access only: H5Fopen with the default file access property list, which needs no
// MPI even when the library is the parallel build. The schema rules and the row-block reader are
// read_checkpoint's (checkpoint_schema.hpp, checkpoint_checksum.hpp); a ReadWatchdog bounds the
// time of every step, kicked after each block of data, so a file whose metadata makes libhdf5
// loop ends with a message.
#include "io/checkpoint_survey.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "io/checkpoint_checksum.hpp"
#include "io/checkpoint_schema.hpp"
#include "io/checkpoint_slabs.hpp"
#include "io/hdf5_attributes.hpp"
#include "io/hdf5_check.hpp"
#include "io/read_watchdog.hpp"

namespace tptrain::io {

std::string DatasetSurvey::check_text() const {
  switch (check) {
    case ChecksumCheck::ok:
      return "ok";
    case ChecksumCheck::mismatch:
      return "MISMATCH (stored " + detail::hex64(stored) + ", computed " + detail::hex64(computed) + ")";
    case ChecksumCheck::missing:
      return std::string("MISSING (no ") + kChecksumAttribute + " attribute)";
    case ChecksumCheck::not_float:
      return "n/a (not floating-point)";
    case ChecksumCheck::not_float32:
      return "n/a (not float32)";
    case ChecksumCheck::unreadable:
      break;
  }
  return "UNREADABLE (" + error + ")";
}

namespace {

using h5::Handle;
using h5::Status;

constexpr std::uint64_t kChunkElements = std::uint64_t{1} << 20;  // per read

// ---- names ------------------------------------------------------------------------------------

std::vector<std::string_view> components(std::string_view s) {
  std::vector<std::string_view> parts;
  std::size_t b = 0;
  for (;;) {
    const std::size_t e = s.find('/', b);
    parts.push_back(s.substr(b, e == std::string_view::npos ? std::string_view::npos : e - b));
    if (e == std::string_view::npos) return parts;
    b = e + 1;
  }
}

bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

// Natural order of one name component: digit runs compare as numbers ("2" < "10").
int natural_compare(std::string_view a, std::string_view b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (is_digit(a[i]) && is_digit(b[j])) {
      std::size_t i2 = i, j2 = j;
      while (i2 < a.size() && is_digit(a[i2])) ++i2;
      while (j2 < b.size() && is_digit(b[j2])) ++j2;
      std::string_view da = a.substr(i, i2 - i), db = b.substr(j, j2 - j);
      while (da.size() > 1 && da.front() == '0') da.remove_prefix(1);
      while (db.size() > 1 && db.front() == '0') db.remove_prefix(1);
      if (da.size() != db.size()) return da.size() < db.size() ? -1 : 1;
      if (const int c = da.compare(db); c != 0) return c;
      if (i2 - i != j2 - j) return i2 - i < j2 - j ? -1 : 1;
      i = i2;
      j = j2;
    } else {
      if (a[i] != b[j])
        return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]) ? -1 : 1;
      ++i;
      ++j;
    }
  }
  if (a.size() - i == b.size() - j) return 0;
  return a.size() - i < b.size() - j ? -1 : 1;
}

// Component by component, so that a group's members stay together.
bool natural_less(const std::string& a, const std::string& b) {
  const auto pa = components(a), pb = components(b);
  for (std::size_t k = 0; k < pa.size() && k < pb.size(); ++k)
    if (const int c = natural_compare(pa[k], pb[k]); c != 0) return c < 0;
  return pa.size() < pb.size();
}


// ---- values -----------------------------------------------------------------------------------

std::string shape_text(const std::vector<hsize_t>& dims) {
  return detail::shape_str(std::vector<std::uint64_t>(dims.begin(), dims.end()));
}

// ---- datasets ---------------------------------------------------------------------------------

template <class T>
void accumulate(DatasetSurvey& r, const T* v, std::size_t n) {
  for (std::size_t k = 0; k < n; ++k) {
    const double x = static_cast<double>(v[k]);
    if (std::isnan(x)) {
      ++r.nans;
      continue;
    }
    r.sum_squares += x * x;
    r.min = std::min(r.min, x);
    r.max = std::max(r.max, x);
  }
}

// Reads one dataset in blocks of rows (the reader read_checkpoint verifies with), computing the
// statistics and, for float32, the checksum; the schema's verdict on the dataset comes from
// open_dataset_checked and stored_checksum, as for a load.
DatasetSurvey survey_dataset(hid_t file, const std::string& name, std::set<std::string>& groups,
                             std::vector<float>& fbuf, std::vector<double>& dbuf,
                             ReadWatchdog& watchdog) {
  DatasetSurvey r;
  r.name = name;
  std::vector<std::string> problems;
  Handle checked = detail::open_dataset_checked(file, name, nullptr, groups, problems);
  std::optional<std::uint64_t> stored;
  if (checked.valid()) stored = detail::stored_checksum(checked.get(), name, problems);

  Status st;
  Handle dset(TPTRAIN_H5(st, H5Dopen2(file, name.c_str(), H5P_DEFAULT), name), H5Dclose);
  Handle type, space;
  if (st.ok()) type = Handle(TPTRAIN_H5(st, H5Dget_type(dset.get()), name), H5Tclose);
  if (st.ok()) space = Handle(TPTRAIN_H5(st, H5Dget_space(dset.get()), name), H5Sclose);
  const int ndims = st.ok() ? TPTRAIN_H5(st, H5Sget_simple_extent_ndims(space.get()), name) : -1;
  std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(ndims, 0)));
  if (st.ok() && ndims > 0)
    TPTRAIN_H5(st, H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), name);
  if (!st.ok()) {
    r.error = st.error;
    return r;
  }
  r.shape = shape_text(dims);
  r.dtype = h5::type_text(type.get());
  const H5T_class_t cls = H5Tget_class(type.get());
  const bool is_float32 = checked.valid();
  r.numeric = cls == H5T_FLOAT || cls == H5T_INTEGER;
  r.elements = 1;
  for (hsize_t d : dims) r.elements *= d;

  if (r.numeric && r.elements > 0) {
    const detail::RowBlocks blocks =
        detail::row_blocks(std::vector<std::uint64_t>(dims.begin(), dims.end()), 0, 1,
                           kChunkElements);
    for (std::uint64_t k = 0; k < blocks.rounds && st.ok(); ++k) {
      std::uint64_t first = 0;
      if (is_float32) {
        const std::uint64_t n = detail::read_row_block(dset.get(), blocks, k, H5T_NATIVE_FLOAT,
                                                       H5P_DEFAULT, name, fbuf, first, st);
        r.computed += checksum_run(fbuf.data(), n, first);
        accumulate(r, fbuf.data(), static_cast<std::size_t>(n));
      } else {
        const std::uint64_t n = detail::read_row_block(dset.get(), blocks, k, H5T_NATIVE_DOUBLE,
                                                       H5P_DEFAULT, name, dbuf, first, st);
        accumulate(r, dbuf.data(), static_cast<std::size_t>(n));
      }
      watchdog.kick();
    }
  }
  if (!st.ok()) {
    r.error = st.error;
    r.check = ChecksumCheck::unreadable;
    return r;
  }
  if (!is_float32) {
    r.check = cls == H5T_FLOAT || cls == H5T_INTEGER ? ChecksumCheck::not_float : ChecksumCheck::unreadable;
    r.error = problems.empty() ? std::string("not float32") : problems.front();
    if (cls == H5T_FLOAT) r.check = ChecksumCheck::not_float32;
  } else if (!stored) {
    r.check = problems.empty() ? ChecksumCheck::missing : ChecksumCheck::unreadable;
    if (!problems.empty()) r.error = problems.front();
    const std::string missing = std::string("has no ") + kChecksumAttribute;
    if (!problems.empty() && problems.front().find(missing) != std::string::npos)
      r.check = ChecksumCheck::missing;
  } else {
    r.stored = *stored;
    r.check = r.stored == r.computed ? ChecksumCheck::ok : ChecksumCheck::mismatch;
  }
  return r;
}

// ---- attributes -------------------------------------------------------------------------------

AttributeSurvey root_attribute(hid_t file, const char* name) {
  Status st;
  AttributeSurvey a;
  a.exists = h5::attr_exists(file, name, st);
  if (!a.exists)
    a.text = st.ok() ? std::string("(missing)") : "(unreadable: " + st.error + ")";
  else
    a.text = h5::describe_attr(file, name);
  return a;
}

// The attributes of group `path` ("train", "optimizer").
GroupSurvey group_attributes(hid_t file, const char* path) {
  GroupSurvey g;
  Status st;
  const htri_t exists = TPTRAIN_H5(st, H5Lexists(file, path, H5P_DEFAULT), path);
  if (exists <= 0) return g;
  Handle group(TPTRAIN_H5(st, H5Oopen(file, path, H5P_DEFAULT), path), H5Oclose);
  const std::vector<std::string> names =
      st.ok() ? h5::attribute_names(group.get(), st, std::string("/") + path)
              : std::vector<std::string>();
  if (!st.ok()) {
    g.state = GroupSurvey::unreadable;
    g.error = st.error;
    return g;
  }
  g.state = GroupSurvey::present;
  for (const std::string& n : names) g.attributes.emplace_back(n, h5::describe_attr(group.get(), n.c_str()));
  return g;
}

}  // namespace

CheckpointSurvey survey_checkpoint(const std::string& path, const ExpectedDatasets& expected) {
  h5::ErrorSilencer silence;
  if (const std::string e = hdf5_file_problem(path); !e.empty()) throw std::runtime_error(path + ": " + e);
  ReadWatchdog watchdog(path);
  Status st;
  // Default (serial) file access: no MPI needed.
  Handle file(TPTRAIN_H5(st, H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), path), H5Fclose);
  if (!st.ok())
    throw std::runtime_error("cannot open " + path + ": " + st.error + "; the file is truncated or corrupt");
  CheckpointSurvey s;
  std::error_code ec;
  const std::uintmax_t bytes = std::filesystem::file_size(path, ec);
  if (!ec) s.bytes = bytes;

  // The schema, as a load checks it; every problem is listed, not only the first.
  std::vector<std::string>& problems = s.problems;
  s.meta = detail::check_root(file.get(), problems);
  s.is_checkpoint = problems.empty() || problems.front().rfind("not a tptrain checkpoint", 0) != 0;
  Status deck_st;
  s.deck_read = s.is_checkpoint && h5::attr_exists(file.get(), "deck", deck_st) &&
                std::none_of(problems.begin(), problems.end(), [](const std::string& p) {
                  return p.find("attribute deck") != std::string::npos;
                });
  for (const char* name : {"format", "format_version", "step", "tokens_seen", "tp", "pp", "dp", "precision", "deck"})
    s.root[name] = root_attribute(file.get(), name);
  s.train = group_attributes(file.get(), "train");
  s.optimizer = group_attributes(file.get(), "optimizer");
  watchdog.kick();

  std::vector<std::string> names, notes;
  std::set<haddr_t> visited;
  detail::collect_datasets(file.get(), "", 0, names, notes, visited, &watchdog, st);
  if (!st.ok()) {
    s.list_error = "cannot list the datasets of " + path + ": " + st.error;
    return s;
  }
  std::sort(names.begin(), names.end(), natural_less);
  std::vector<float> fbuf;
  std::vector<double> dbuf;
  std::set<std::string> groups;
  for (const std::string& n : names) {
    s.datasets.push_back(survey_dataset(file.get(), n, groups, fbuf, dbuf, watchdog));
    s.elements += s.datasets.back().elements;
  }
  const std::vector<DatasetSurvey>& reports = s.datasets;
  if (s.is_checkpoint && expected && s.deck_read) {
    // The datasets the checkpoint's own deck implies: none missing, none extra, each its shape
    // (a load would refuse the first two or read a different model).
    try {
      const ExpectedDatasets::result_type want = expected(s.meta.deck);
      std::map<std::string, const DatasetSurvey*> have;
      for (const DatasetSurvey& r : reports) have[r.name] = &r;
      for (const auto& [name, shape] : want) {
        const auto it = have.find(name);
        if (it == have.end())
          problems.push_back(name + ": missing (the model of the checkpoint's deck has it, shape " +
                             detail::shape_str(shape) + ")");
        else if (it->second->shape != detail::shape_str(shape))
          problems.push_back(name + ": shape " + it->second->shape + ", the checkpoint's deck implies " +
                             detail::shape_str(shape));
      }
      for (const DatasetSurvey& r : reports)
        if (!want.count(r.name)) problems.push_back(r.name + ": not part of the model the checkpoint's deck describes");
    } catch (const std::exception& e) {
      problems.push_back(std::string("the deck attribute does not describe a model: ") + e.what());
    }
  }
  // Checksums prove the file holds what was written; Inf/NaN weights are refused by every load.
  for (const DatasetSurvey& r : reports)
    if (r.numeric && (r.nans > 0 || (r.elements > 0 && (std::isinf(r.min) || std::isinf(r.max)))))
      problems.push_back(r.name + ": holds non-finite values (" +
                         (r.nans > 0 ? std::to_string(r.nans) + " NaN" : std::string("Inf")) +
                         "): eval, generate and resume refuse it");
  if (s.is_checkpoint) {
    if (names.empty()) problems.push_back("the checkpoint holds no datasets");
    if (std::any_of(names.begin(), names.end(), detail::under_optimizer))
      detail::check_optimizer_step(file.get(), s.meta.step, problems);
  }
  problems.insert(problems.end(), notes.begin(), notes.end());
  return s;
}

}  // namespace tptrain::io
