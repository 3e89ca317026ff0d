// tptrain inspect (see inspect.hpp). Serial HDF5 access only: H5Fopen with the default file
// access property list, which needs no MPI even when the library is the parallel build. The
// schema rules and the row-block reader are read_checkpoint's (checkpoint_schema.hpp,
// checkpoint_checksum.hpp); a ReadWatchdog bounds the time of every step, kicked after each
// block of data, so a file whose metadata makes libhdf5 loop ends with a message.
#include "io/inspect.hpp"

#include <fmt/format.h>
#include <hdf5.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "io/checkpoint_checksum.hpp"
#include "io/checkpoint_file.hpp"
#include "io/checkpoint_schema.hpp"
#include "io/checkpoint_slabs.hpp"
#include "io/hdf5_attributes.hpp"
#include "io/hdf5_check.hpp"
#include "io/read_watchdog.hpp"

namespace tptrain::io {
namespace {

using h5::Handle;
using h5::Status;

constexpr std::uint64_t kChunkElements = std::uint64_t{1} << 20;  // per read
constexpr std::size_t kDeckLines = 12;                             // deck lines shown
constexpr std::size_t kListedFailures = 5;                         // in the verdict

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

using detail::hex64;

std::string grouped(std::uint64_t v) {
  std::string digits = std::to_string(v), s;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}

std::string size_text(std::uintmax_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " bytes";
  const double kib = static_cast<double>(bytes) / 1024.0;
  if (kib < 1024) return fmt::format("{:.1f} KiB", kib);
  if (kib < 1024 * 1024) return fmt::format("{:.2f} MiB", kib / 1024);
  return fmt::format("{:.2f} GiB", kib / 1024 / 1024);
}

// ---- datasets ---------------------------------------------------------------------------------

enum class Check { kOk, kMismatch, kMissing, kNotFloat, kNotFloat32, kUnreadable };

struct DatasetReport {
  std::string name, shape, dtype;
  std::uint64_t elements = 0;
  bool numeric = false;  // statistics computed
  double sum_squares = 0;
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  std::uint64_t nans = 0;
  Check check = Check::kUnreadable;
  std::uint64_t stored = 0, computed = 0;
  std::string error;

  std::string check_text() const {
    switch (check) {
      case Check::kOk:
        return "ok";
      case Check::kMismatch:
        return "MISMATCH (stored " + hex64(stored) + ", computed " + hex64(computed) + ")";
      case Check::kMissing:
        return std::string("MISSING (no ") + kChecksumAttribute + " attribute)";
      case Check::kNotFloat:
        return "n/a (not floating-point)";
      case Check::kNotFloat32:
        return "n/a (not float32)";
      case Check::kUnreadable:
        break;
    }
    return "UNREADABLE (" + error + ")";
  }
  bool fails() const { return check != Check::kOk; }
};

template <class T>
void accumulate(DatasetReport& r, const T* v, std::size_t n) {
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
DatasetReport inspect_dataset(hid_t file, const std::string& name, std::set<std::string>& groups,
                              std::vector<float>& fbuf, std::vector<double>& dbuf,
                              ReadWatchdog& watchdog) {
  DatasetReport r;
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
    r.check = Check::kUnreadable;
    return r;
  }
  if (!is_float32) {
    r.check = cls == H5T_FLOAT || cls == H5T_INTEGER ? Check::kNotFloat : Check::kUnreadable;
    r.error = problems.empty() ? std::string("not float32") : problems.front();
    if (cls == H5T_FLOAT) r.check = Check::kNotFloat32;
  } else if (!stored) {
    r.check = problems.empty() ? Check::kMissing : Check::kUnreadable;
    if (!problems.empty()) r.error = problems.front();
    const std::string missing = std::string("has no ") + kChecksumAttribute;
    if (!problems.empty() && problems.front().find(missing) != std::string::npos)
      r.check = Check::kMissing;
  } else {
    r.stored = *stored;
    r.check = r.stored == r.computed ? Check::kOk : Check::kMismatch;
  }
  return r;
}

std::string number(double v) { return fmt::format("{:.6g}", v); }

// ---- output -----------------------------------------------------------------------------------

void print_attr_line(std::ostream& out, std::string_view label, const std::string& value) {
  out << "  " << fmt::format("{:<12} {}", label, value) << '\n';
}

// The attributes of group `path` ("train", "optimizer"), one per line, or "(absent)".
void print_group_attrs(std::ostream& out, hid_t file, const char* path) {
  out << "/" << path << '\n';
  Status st;
  const htri_t exists = TPTRAIN_H5(st, H5Lexists(file, path, H5P_DEFAULT), path);
  if (exists <= 0) {
    out << "  (absent)\n";
    return;
  }
  Handle group(TPTRAIN_H5(st, H5Oopen(file, path, H5P_DEFAULT), path), H5Oclose);
  const std::vector<std::string> names =
      st.ok() ? h5::attribute_names(group.get(), st, std::string("/") + path)
              : std::vector<std::string>();
  if (!st.ok()) {
    out << "  (unreadable: " << st.error << ")\n";
    return;
  }
  if (names.empty()) out << "  (no attributes)\n";
  for (const std::string& n : names) print_attr_line(out, n, h5::describe_attr(group.get(), n.c_str()));
}

// Root attributes as stored (each one that exists, described for people), then the deck's
// first lines. The verdict on them is check_root's, not this function's.
void print_root(std::ostream& out, hid_t file, const CheckpointMeta& meta, bool deck_read) {
  auto value = [&](const char* name) -> std::string {
    Status st;
    if (!h5::attr_exists(file, name, st))
      return st.ok() ? std::string("(missing)") : "(unreadable: " + st.error + ")";
    return h5::describe_attr(file, name);
  };
  std::string format = value("format");
  if (format.size() >= 2 && format.front() == '"' && format.back() == '"')
    format = format.substr(1, format.size() - 2);
  print_attr_line(out, "format", format + ", format_version " + value("format_version"));
  print_attr_line(out, "step", value("step"));
  print_attr_line(out, "tokens_seen", value("tokens_seen"));
  print_attr_line(out, "layout", "tp " + value("tp") + ", pp " + value("pp") + ", dp " +
                                     value("dp") + " (at save time)");
  {
    Status st;  // written since mixed precision; older checkpoints were all fp32
    print_attr_line(out, "precision", h5::attr_exists(file, "precision", st) ? value("precision")
                                                                              : std::string("fp32 (no attribute)"));
  }
  if (!deck_read) {
    print_attr_line(out, "deck", value("deck"));
    return;
  }
  std::vector<std::string_view> lines;
  std::string_view rest(meta.deck);
  while (!rest.empty()) {
    const std::size_t nl = rest.find('\n');
    lines.push_back(rest.substr(0, nl));
    if (nl == std::string_view::npos) break;
    rest.remove_prefix(nl + 1);
  }
  print_attr_line(out, "deck",
                  fmt::format("{} bytes, {} lines{}", meta.deck.size(), lines.size(),
                              lines.size() > kDeckLines ? fmt::format(" (first {}):", kDeckLines)
                                                        : std::string(lines.empty() ? "" : ":")));
  for (std::size_t i = 0; i < lines.size() && i < kDeckLines; ++i)
    out << (lines[i].empty() ? "    |" : "    | ") << lines[i] << '\n';
  if (lines.size() > kDeckLines) out << "    | ...\n";
}

void print_table(std::ostream& out, const std::vector<DatasetReport>& reports) {
  struct Row {
    std::string cells[7];
  };
  std::vector<Row> rows;
  rows.push_back(Row{{"name", "shape", "dtype", "l2_norm", "min", "max", "checksum"}});
  for (const DatasetReport& r : reports) {
    Row row{{r.name, r.shape, r.dtype, "-", "-", "-", r.check_text()}};
    if (r.numeric && r.elements > 0 && r.check != Check::kUnreadable) {
      row.cells[3] = number(std::sqrt(r.sum_squares));
      if (r.nans < r.elements) {
        row.cells[4] = number(r.min);
        row.cells[5] = number(r.max);
      }
      if (r.nans > 0) row.cells[6] += fmt::format("  [{} NaN]", r.nans);
    }
    rows.push_back(std::move(row));
  }
  std::size_t width[7] = {};
  for (const Row& row : rows)
    for (std::size_t c = 0; c < 7; ++c) width[c] = std::max(width[c], row.cells[c].size());
  for (const Row& row : rows) {
    std::string line = " ";
    for (std::size_t c = 0; c < 7; ++c) {
      line += ' ';
      if (c == 6)
        line += row.cells[c];
      else if (c >= 3 && c <= 5)  // numbers right-aligned
        line += fmt::format("{:>{}}", row.cells[c], width[c]) + ' ';
      else
        line += fmt::format("{:<{}}", row.cells[c], width[c]) + ' ';
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << '\n';
  }
}

}  // namespace

int inspect_checkpoint(const std::string& path, std::ostream& out, std::ostream& err,
                       const ExpectedDatasets& expected) {
  h5::ErrorSilencer silence;
  if (const std::string e = hdf5_file_problem(path); !e.empty()) {
    err << path << ": " << e << '\n';
    return 1;
  }
  ReadWatchdog watchdog(path);
  Status st;
  // Default (serial) file access: no MPI needed.
  Handle file(TPTRAIN_H5(st, H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), path), H5Fclose);
  if (!st.ok()) {
    err << "cannot open " << path << ": " << st.error << "; the file is truncated or corrupt\n";
    return 1;
  }
  std::error_code ec;
  const std::uintmax_t bytes = std::filesystem::file_size(path, ec);
  out << "checkpoint " << path;
  if (!ec) out << " (" << size_text(bytes) << ")";
  out << '\n';

  // The schema, as a load checks it; every problem is listed, not only the first.
  std::vector<std::string> problems;
  const CheckpointMeta meta = detail::check_root(file.get(), problems);
  const bool is_checkpoint =
      problems.empty() || problems.front().rfind("not a tptrain checkpoint", 0) != 0;
  Status deck_st;
  const bool deck_read = is_checkpoint && h5::attr_exists(file.get(), "deck", deck_st) &&
                         std::none_of(problems.begin(), problems.end(), [](const std::string& p) {
                           return p.find("attribute deck") != std::string::npos;
                         });
  print_root(out, file.get(), meta, deck_read);
  print_group_attrs(out, file.get(), "train");
  print_group_attrs(out, file.get(), "optimizer");
  watchdog.kick();

  std::vector<std::string> names, notes;
  std::set<haddr_t> visited;
  detail::collect_datasets(file.get(), "", 0, names, notes, visited, &watchdog, st);
  if (!st.ok()) {
    err << "cannot list the datasets of " << path << ": " << st.error << '\n';
    return 1;
  }
  std::sort(names.begin(), names.end(), natural_less);
  std::vector<DatasetReport> reports;
  std::vector<float> fbuf;
  std::vector<double> dbuf;
  std::set<std::string> groups;
  std::uint64_t elements = 0;
  for (const std::string& n : names) {
    reports.push_back(inspect_dataset(file.get(), n, groups, fbuf, dbuf, watchdog));
    elements += reports.back().elements;
  }
  if (is_checkpoint && expected && deck_read) {
    // The datasets the checkpoint's own deck implies: none missing, none extra, each its shape
    // (a load would refuse the first two or read a different model).
    try {
      const ExpectedDatasets::result_type want = expected(meta.deck);
      std::map<std::string, const DatasetReport*> have;
      for (const DatasetReport& r : reports) have[r.name] = &r;
      for (const auto& [name, shape] : want) {
        const auto it = have.find(name);
        if (it == have.end())
          problems.push_back(name + ": missing (the model of the checkpoint's deck has it, shape " +
                             detail::shape_str(shape) + ")");
        else if (it->second->shape != detail::shape_str(shape))
          problems.push_back(name + ": shape " + it->second->shape + ", the checkpoint's deck implies " +
                             detail::shape_str(shape));
      }
      for (const DatasetReport& r : reports)
        if (!want.count(r.name)) problems.push_back(r.name + ": not part of the model the checkpoint's deck describes");
    } catch (const std::exception& e) {
      problems.push_back(std::string("the deck attribute does not describe a model: ") + e.what());
    }
  }
  // Checksums prove the file holds what was written; Inf/NaN weights are refused by every load.
  for (const DatasetReport& r : reports)
    if (r.numeric && (r.nans > 0 || (r.elements > 0 && (std::isinf(r.min) || std::isinf(r.max)))))
      problems.push_back(r.name + ": holds non-finite values (" +
                         (r.nans > 0 ? std::to_string(r.nans) + " NaN" : std::string("Inf")) +
                         "): eval, generate and resume refuse it");
  if (is_checkpoint) {
    if (names.empty()) problems.push_back("the checkpoint holds no datasets");
    if (std::any_of(names.begin(), names.end(), detail::under_optimizer))
      detail::check_optimizer_step(file.get(), meta.step, problems);
  }
  out << "datasets: " << reports.size() << ", " << grouped(elements) << " elements\n";
  if (!reports.empty()) print_table(out, reports);
  problems.insert(problems.end(), notes.begin(), notes.end());
  for (const std::string& p : problems) out << "  problem: " << p << '\n';

  std::vector<const DatasetReport*> failed;
  for (const DatasetReport& r : reports)
    if (r.fails()) failed.push_back(&r);
  std::string verdict;
  for (std::size_t i = 0; i < problems.size() && i < kListedFailures; ++i)
    verdict += (i > 0 ? "; " : "") + problems[i];
  if (problems.size() > kListedFailures)
    verdict += fmt::format("; and {} more problems", problems.size() - kListedFailures);
  if (!failed.empty()) {
    std::string list;
    for (std::size_t i = 0; i < failed.size() && i < kListedFailures; ++i) {
      const DatasetReport& r = *failed[i];
      list += (i > 0 ? ", " : "") + r.name + " (" +
              (r.check == Check::kMismatch     ? "checksum mismatch"
               : r.check == Check::kMissing    ? "no checksum"
               : r.check == Check::kNotFloat   ? "not floating-point"
               : r.check == Check::kNotFloat32 ? "not float32"
                                               : "unreadable") +
              ")";
    }
    if (failed.size() > kListedFailures)
      list += fmt::format(", and {} more", failed.size() - kListedFailures);
    const std::string datasets = fmt::format("{} of {} datasets fail verification: {}",
                                             failed.size(), reports.size(), list);
    verdict = verdict.empty() ? datasets : verdict + "; " + datasets;
  }
  if (verdict.empty()) {
    out << "OK: " << reports.size() << " datasets, every checksum verifies\n";
    return 0;
  }
  out << "FAILED: " << verdict << '\n';
  err << path << ": " << verdict << '\n';
  return 1;
}

int inspect_checkpoint(const std::string& path, std::ostream& out, const ExpectedDatasets& expected) {
  return inspect_checkpoint(path, out, std::cerr, expected);
}

}  // namespace tptrain::io
