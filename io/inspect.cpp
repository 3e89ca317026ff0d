// tptrain inspect (see inspect.hpp). Serial HDF5 access only: H5Fopen with the default file
// access property list, which needs no MPI even when the library is the parallel build.
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
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/checkpoint_file.hpp"
#include "io/hdf5_check.hpp"

namespace tptrain::io {
namespace {

using h5::Handle;
using h5::Status;

constexpr std::uint64_t kChunkElements = std::uint64_t{1} << 20;  // per read
constexpr std::size_t kDeckLines = 12;                             // deck lines shown
constexpr int kMaxDepth = 64;                                      // group nesting followed
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

// Every dataset below `group` (paths relative to the root, no leading slash). Links that cannot
// be followed are reported in `notes`.
void collect_datasets(hid_t group, const std::string& prefix, int depth,
                      std::vector<std::string>& datasets, std::vector<std::string>& notes,
                      Status& st) {
  const std::string where = prefix.empty() ? std::string("/") : prefix;
  H5G_info_t info;
  if (TPTRAIN_H5(st, H5Gget_info(group, &info), "group " + where) < 0) return;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len = TPTRAIN_H5(
        st, H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT),
        "group " + where);
    if (len < 0) return;
    std::vector<char> buf(static_cast<std::size_t>(len) + 1, '\0');
    if (TPTRAIN_H5(st,
                   H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, buf.data(),
                                      buf.size(), H5P_DEFAULT),
                   "group " + where) < 0)
      return;
    const std::string name(buf.data(), static_cast<std::size_t>(len));
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
      if (depth >= kMaxDepth) {
        notes.push_back(path + ": groups nested deeper than " + std::to_string(kMaxDepth) +
                        " levels are not listed");
        continue;
      }
      collect_datasets(obj.get(), path, depth + 1, datasets, notes, st);
      if (!st.ok()) return;
    }
  }
}

// ---- values -----------------------------------------------------------------------------------

std::string type_text(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const std::size_t bits = 8 * H5Tget_size(type);
  std::string s;
  switch (cls) {
    case H5T_FLOAT:
      s = "float" + std::to_string(bits);
      break;
    case H5T_INTEGER:
      s = (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(bits);
      break;
    case H5T_STRING:
      return "string";
    case H5T_COMPOUND:
      return "compound";
    case H5T_ARRAY:
      return "array";
    case H5T_ENUM:
      return "enum";
    default:
      return "other";
  }
  if (H5Tget_order(type) == H5T_ORDER_BE) s += "be";
  return s;
}

std::string shape_text(const std::vector<hsize_t>& dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

std::string hex64(std::uint64_t v) { return fmt::format("0x{:016x}", v); }

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

// A one-line description of any attribute's value (scalars in full, arrays by type and size).
std::string attr_text(hid_t loc, const std::string& name) {
  Status st;
  Handle attr(TPTRAIN_H5(st, H5Aopen(loc, name.c_str(), H5P_DEFAULT), name), H5Aclose);
  if (!st.ok()) return "(unreadable: " + st.error + ")";
  Handle type(TPTRAIN_H5(st, H5Aget_type(attr.get()), name), H5Tclose);
  Handle space(TPTRAIN_H5(st, H5Aget_space(attr.get()), name), H5Sclose);
  if (!st.ok()) return "(unreadable: " + st.error + ")";
  const H5T_class_t cls = H5Tget_class(type.get());
  const hssize_t npoints = H5Sget_simple_extent_npoints(space.get());
  if (npoints != 1) return fmt::format("({} of {} values)", type_text(type.get()), npoints);
  if (cls == H5T_INTEGER) {
    if (H5Tget_sign(type.get()) == H5T_SGN_NONE) {
      std::uint64_t v = 0;
      if (H5Aread(attr.get(), H5T_NATIVE_UINT64, &v) < 0) return "(unreadable)";
      return std::to_string(v);
    }
    std::int64_t v = 0;
    if (H5Aread(attr.get(), H5T_NATIVE_INT64, &v) < 0) return "(unreadable)";
    return std::to_string(v);
  }
  if (cls == H5T_FLOAT) {
    double v = 0;
    if (H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &v) < 0) return "(unreadable)";
    return fmt::format("{:.9g}", v);
  }
  if (cls == H5T_STRING) {
    const auto text = h5::read_string_attr(loc, name.c_str(), st);
    if (!text) return "(unreadable: " + st.error + ")";
    const std::size_t nl = text->find('\n');
    if (nl == std::string::npos && text->size() <= 60) return "\"" + *text + "\"";
    return fmt::format("\"{}...\" ({} bytes)", text->substr(0, std::min<std::size_t>(nl, 40)),
                       text->size());
  }
  return "(" + type_text(type.get()) + ")";
}

// ---- datasets ---------------------------------------------------------------------------------

enum class Check { kOk, kMismatch, kMissing, kNotFloat, kUnreadable };

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

DatasetReport inspect_dataset(hid_t file, const std::string& name, std::vector<float>& fbuf,
                              std::vector<double>& dbuf) {
  DatasetReport r;
  r.name = name;
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
  r.dtype = type_text(type.get());
  const H5T_class_t cls = H5Tget_class(type.get());
  const bool is_float = cls == H5T_FLOAT;
  r.numeric = is_float || cls == H5T_INTEGER;
  r.elements = 1;
  for (hsize_t d : dims) r.elements *= d;

  const htri_t has_sum = H5Aexists(dset.get(), kChecksumAttribute);
  std::optional<std::uint64_t> stored;
  if (has_sum > 0) stored = h5::read_u64_attr(dset.get(), kChecksumAttribute, st, name + "/");
  if (!st.ok()) {
    r.error = st.error;
    return r;
  }

  if (r.numeric && r.elements > 0) {
    // Blocks of whole rows of dimension 0 (a scalar dataset is one block).
    const std::uint64_t rows = ndims > 0 ? dims[0] : 1;
    const std::uint64_t row_elements = ndims > 0 ? r.elements / rows : 1;
    const std::uint64_t chunk_rows = std::max<std::uint64_t>(1, kChunkElements / row_elements);
    for (std::uint64_t lo = 0; lo < rows && st.ok(); lo += chunk_rows) {
      const std::uint64_t hi = std::min(rows, lo + chunk_rows);
      const hsize_t n = static_cast<hsize_t>((hi - lo) * row_elements);
      Handle mspace;
      if (ndims > 0) {
        std::vector<hsize_t> start(dims.size(), 0), count = dims;
        start[0] = lo;
        count[0] = hi - lo;
        TPTRAIN_H5(st,
                   H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr,
                                       count.data(), nullptr),
                   name);
        mspace = Handle(TPTRAIN_H5(st, H5Screate_simple(1, &n, nullptr), name), H5Sclose);
      }
      if (!st.ok()) break;
      const hid_t ms = ndims > 0 ? mspace.get() : H5S_ALL;
      const hid_t fs = ndims > 0 ? space.get() : H5S_ALL;
      if (is_float) {
        fbuf.resize(n);
        if (TPTRAIN_H5(st, H5Dread(dset.get(), H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, fbuf.data()),
                       name) < 0)
          break;
        r.computed += checksum_run(fbuf.data(), n, lo * row_elements);
        accumulate(r, fbuf.data(), n);
      } else {
        dbuf.resize(n);
        if (TPTRAIN_H5(st,
                       H5Dread(dset.get(), H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, dbuf.data()),
                       name) < 0)
          break;
        accumulate(r, dbuf.data(), n);
      }
    }
  }
  if (!st.ok()) {
    r.error = st.error;
    r.check = Check::kUnreadable;
    return r;
  }
  if (!is_float)
    r.check = Check::kNotFloat;
  else if (!stored)
    r.check = Check::kMissing;
  else {
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
  for (const std::string& n : names) print_attr_line(out, n, attr_text(group.get(), n));
}

// Root attributes; returns what makes the file not a valid tptrain checkpoint ("" if nothing).
std::string print_root(std::ostream& out, hid_t file) {
  std::string problem;
  auto note = [&](const std::string& p) {
    if (problem.empty()) problem = p;
  };
  Status st;
  // format, format_version
  std::string format_line;
  if (!h5::attr_exists(file, "format", st)) {
    format_line = "(missing: not a tptrain checkpoint)";
    note("not a tptrain checkpoint: the file has no format attribute");
  } else {
    const auto f = h5::read_string_attr(file, "format", st);
    format_line = f ? *f : "(unreadable)";
    if (!f || *f != "tptrain-checkpoint")
      note("not a tptrain checkpoint: its format attribute is " + attr_text(file, "format"));
  }
  st = Status{};
  if (!h5::attr_exists(file, "format_version", st)) {
    format_line += ", format_version (missing)";
    note("the file has no format_version attribute");
  } else {
    const auto v = h5::read_int_attr(file, "format_version", st);
    format_line += ", format_version " + (v ? std::to_string(*v) : std::string("(unreadable)"));
    if (!v || *v != 1)
      note("format_version " + attr_text(file, "format_version") +
           " is not supported (this build reads format_version 1)");
  }
  print_attr_line(out, "format", format_line);

  auto int_line = [&](const char* name) -> std::string {
    Status s;
    if (!h5::attr_exists(file, name, s)) {
      note(std::string("the file has no ") + name + " attribute");
      return "(missing)";
    }
    return attr_text(file, name);
  };
  print_attr_line(out, "step", int_line("step"));
  print_attr_line(out, "tokens_seen", int_line("tokens_seen"));
  print_attr_line(out, "layout",
                  "tp " + int_line("tp") + ", pp " + int_line("pp") + ", dp " + int_line("dp") +
                      " (at save time)");

  st = Status{};
  if (!h5::attr_exists(file, "deck", st)) {
    print_attr_line(out, "deck", "(missing)");
    note("the file has no deck attribute");
  } else if (const auto deck = h5::read_string_attr(file, "deck", st)) {
    std::vector<std::string_view> lines;
    std::string_view rest(*deck);
    while (!rest.empty()) {
      const std::size_t nl = rest.find('\n');
      lines.push_back(rest.substr(0, nl));
      if (nl == std::string_view::npos) break;
      rest.remove_prefix(nl + 1);
    }
    print_attr_line(out, "deck",
                    fmt::format("{} bytes, {} lines{}", deck->size(), lines.size(),
                                lines.size() > kDeckLines
                                    ? fmt::format(" (first {}):", kDeckLines)
                                    : std::string(lines.empty() ? "" : ":")));
    for (std::size_t i = 0; i < lines.size() && i < kDeckLines; ++i)
      out << (lines[i].empty() ? "    |" : "    | ") << lines[i] << '\n';
    if (lines.size() > kDeckLines) out << "    | ...\n";
  } else {
    print_attr_line(out, "deck", "(unreadable: " + st.error + ")");
    note("the deck attribute is unreadable");
  }

  // Any other root attribute.
  st = Status{};
  for (const std::string& n : h5::attribute_names(file, st, "/")) {
    static const char* const known[] = {"format", "format_version", "step", "tokens_seen",
                                        "tp",     "pp",             "dp",   "deck"};
    if (std::find(std::begin(known), std::end(known), n) == std::end(known))
      print_attr_line(out, n, attr_text(file, n));
  }
  return problem;
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

int inspect_checkpoint(const std::string& path, std::ostream& out, std::ostream& err) {
  h5::ErrorSilencer silence;
  if (const std::string e = hdf5_file_problem(path); !e.empty()) {
    err << path << ": " << e << '\n';
    return 1;
  }
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
  const std::string root_problem = print_root(out, file.get());
  print_group_attrs(out, file.get(), "train");
  print_group_attrs(out, file.get(), "optimizer");

  std::vector<std::string> names, notes;
  collect_datasets(file.get(), "", 0, names, notes, st);
  if (!st.ok()) {
    err << "cannot list the datasets of " << path << ": " << st.error << '\n';
    return 1;
  }
  std::sort(names.begin(), names.end(), natural_less);
  std::vector<DatasetReport> reports;
  std::vector<float> fbuf;
  std::vector<double> dbuf;
  std::uint64_t elements = 0;
  for (const std::string& n : names) {
    reports.push_back(inspect_dataset(file.get(), n, fbuf, dbuf));
    elements += reports.back().elements;
  }
  out << "datasets: " << reports.size() << ", " << grouped(elements) << " elements\n";
  if (!reports.empty()) print_table(out, reports);
  for (const std::string& n : notes) out << "  note: " << n << '\n';

  std::vector<const DatasetReport*> failed;
  for (const DatasetReport& r : reports)
    if (r.fails()) failed.push_back(&r);
  std::string verdict;
  if (!root_problem.empty()) verdict = root_problem;
  if (!failed.empty()) {
    std::string list;
    for (std::size_t i = 0; i < failed.size() && i < kListedFailures; ++i) {
      const DatasetReport& r = *failed[i];
      list += (i > 0 ? ", " : "") + r.name + " (" +
              (r.check == Check::kMismatch   ? "checksum mismatch"
               : r.check == Check::kMissing  ? "no checksum"
               : r.check == Check::kNotFloat ? "not floating-point"
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

int inspect_checkpoint(const std::string& path, std::ostream& out) {
  return inspect_checkpoint(path, out, std::cerr);
}

}  // namespace tptrain::io
