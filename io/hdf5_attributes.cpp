#include "io/hdf5_attributes.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace tptrain::io::h5 {
namespace {

// Opens a scalar attribute of the given class; fails (into st) with a readable message if it is
// of another class or not a single value. `type` receives the attribute's file type.
Handle open_scalar_attr(hid_t loc, const char* name, H5T_class_t want, const char* want_text,
                        Handle& type, Status& st, std::string_view where) {
  const std::string what = attr_what(where, name);
  Handle attr(TPTRAIN_H5(st, H5Aopen(loc, name, H5P_DEFAULT), what), H5Aclose);
  if (!st.ok()) return attr;
  type = Handle(TPTRAIN_H5(st, H5Aget_type(attr.get()), what), H5Tclose);
  Handle space(TPTRAIN_H5(st, H5Aget_space(attr.get()), what), H5Sclose);
  if (!st.ok()) return attr;
  const H5T_class_t cls = TPTRAIN_H5(st, H5Tget_class(type.get()), what);
  const hssize_t npoints = TPTRAIN_H5(st, H5Sget_simple_extent_npoints(space.get()), what);
  if (st.ok() && (cls != want || npoints != 1)) st.fail(what + " is not " + want_text);
  // An integer whose bit precision or offset does not fit its size (a damaged type message)
  // converts to different values from one read to the next: refuse it, do not read it.
  if (st.ok() && cls == H5T_INTEGER) {
    const size_t bytes = H5Tget_size(type.get());
    const size_t precision = H5Tget_precision(type.get());
    const int offset = H5Tget_offset(type.get());
    if (bytes == 0 || bytes > 8 || precision != 8 * bytes || offset != 0)
      st.fail(what + " has a malformed integer type (" + std::to_string(bytes) + " bytes, " +
              std::to_string(precision) + "-bit precision at bit offset " + std::to_string(offset) +
              "): the file is corrupt");
  }
  return attr;
}

}  // namespace

std::string attr_what(std::string_view where, const char* name) {
  std::string s = "attribute ";
  s += where;
  s += name;
  return s;
}

bool attr_exists(hid_t loc, const char* name, Status& st, std::string_view where) {
  if (!st.ok()) return false;
  return TPTRAIN_H5(st, H5Aexists_by_name(loc, ".", name, H5P_DEFAULT), attr_what(where, name)) >
         0;
}

std::optional<std::int64_t> read_int_attr(hid_t loc, const char* name, Status& st,
                                          std::string_view where) {
  if (!st.ok()) return std::nullopt;
  Handle type;
  Handle attr = open_scalar_attr(loc, name, H5T_INTEGER, "a single integer", type, st, where);
  std::int64_t value = 0;
  if (st.ok())
    TPTRAIN_H5(st, H5Aread(attr.get(), H5T_NATIVE_INT64, &value), attr_what(where, name));
  if (!st.ok()) return std::nullopt;
  return value;
}

std::optional<std::uint64_t> read_u64_attr(hid_t loc, const char* name, Status& st,
                                           std::string_view where) {
  if (!st.ok()) return std::nullopt;
  const std::string what = attr_what(where, name);
  Handle type;
  Handle attr = open_scalar_attr(loc, name, H5T_INTEGER, "a single integer", type, st, where);
  if (!st.ok()) return std::nullopt;
  const H5T_sign_t sign = TPTRAIN_H5(st, H5Tget_sign(type.get()), what);
  if (st.ok() && sign != H5T_SGN_NONE) st.fail(what + " is not an unsigned integer");
  std::uint64_t value = 0;
  if (st.ok()) TPTRAIN_H5(st, H5Aread(attr.get(), H5T_NATIVE_UINT64, &value), what);
  if (!st.ok()) return std::nullopt;
  return value;
}

std::optional<double> read_float_attr(hid_t loc, const char* name, Status& st, std::string_view where) {
  if (!st.ok()) return std::nullopt;
  Handle type;
  Handle attr = open_scalar_attr(loc, name, H5T_FLOAT, "a single number", type, st, where);
  double value = 0;
  if (st.ok()) TPTRAIN_H5(st, H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &value), attr_what(where, name));
  if (!st.ok()) return std::nullopt;
  return value;
}

std::optional<std::string> read_string_attr(hid_t loc, const char* name, Status& st,
                                            std::string_view where) {
  if (!st.ok()) return std::nullopt;
  const std::string what = attr_what(where, name);
  Handle type;
  Handle attr = open_scalar_attr(loc, name, H5T_STRING, "a single string", type, st, where);
  if (!st.ok()) return std::nullopt;
  const htri_t variable = TPTRAIN_H5(st, H5Tis_variable_str(type.get()), what);
  const H5T_cset_t cset = TPTRAIN_H5(st, H5Tget_cset(type.get()), what);
  if (!st.ok()) return std::nullopt;
  const std::string too_long = what + " is longer than " +
                               std::to_string(kMaxStringAttributeBytes) +
                               " bytes: the file is corrupt";
  std::string value;
  if (variable > 0) {
    // The value lives in the global heap; HDF5 gives no way to learn its length first, so it is
    // checked afterwards (a corrupt heap that makes H5Aread loop is the watchdog's case).
    Handle mem(TPTRAIN_H5(st, H5Tcopy(H5T_C_S1), what), H5Tclose);
    if (st.ok()) TPTRAIN_H5(st, H5Tset_size(mem.get(), H5T_VARIABLE), what);
    if (st.ok()) TPTRAIN_H5(st, H5Tset_cset(mem.get(), cset), what);
    char* p = nullptr;
    if (st.ok()) TPTRAIN_H5(st, H5Aread(attr.get(), mem.get(), &p), what);
    if (p != nullptr) {
      // HDF5 terminates the strings it allocates.
      const std::size_t len = ::strnlen(p, kMaxStringAttributeBytes + 1);
      if (len > kMaxStringAttributeBytes)
        st.fail(too_long);
      else
        value.assign(p, len);
      H5free_memory(p);
    } else if (st.ok()) {
      st.fail(what + " is a null string");
    }
  } else {
    const std::size_t size = H5Tget_size(type.get());
    const hsize_t stored = H5Aget_storage_size(attr.get());
    if (size == 0 || size > kMaxStringAttributeBytes) {
      st.fail(size == 0 ? what + " has a string type of size 0: the file is corrupt" : too_long);
      return std::nullopt;
    }
    if (stored != size) {
      st.fail(what + " holds " + std::to_string(stored) + " bytes for a string of " +
              std::to_string(size) + ": the file is corrupt");
      return std::nullopt;
    }
    const H5T_str_t pad = TPTRAIN_H5(st, H5Tget_strpad(type.get()), what);
    Handle mem(TPTRAIN_H5(st, H5Tcopy(type.get()), what), H5Tclose);
    std::vector<char> buf(size + 1, '\0');
    if (st.ok()) TPTRAIN_H5(st, H5Aread(attr.get(), mem.get(), buf.data()), what);
    value.assign(buf.data(), std::find(buf.data(), buf.data() + size, '\0'));
    if (pad == H5T_STR_SPACEPAD)
      while (!value.empty() && value.back() == ' ') value.pop_back();
  }
  if (!st.ok()) return std::nullopt;
  return value;
}

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

std::string describe_attr(hid_t loc, const char* name) {
  Status st;
  Handle attr(TPTRAIN_H5(st, H5Aopen(loc, name, H5P_DEFAULT), name), H5Aclose);
  if (!st.ok()) return "(unreadable: " + st.error + ")";
  Handle type(TPTRAIN_H5(st, H5Aget_type(attr.get()), name), H5Tclose);
  Handle space(TPTRAIN_H5(st, H5Aget_space(attr.get()), name), H5Sclose);
  if (!st.ok()) return "(unreadable: " + st.error + ")";
  const H5T_class_t cls = H5Tget_class(type.get());
  const hssize_t npoints = H5Sget_simple_extent_npoints(space.get());
  if (npoints != 1)
    return "(" + type_text(type.get()) + ", " + std::to_string(npoints) + " values)";
  if (cls == H5T_INTEGER) {
    if (H5Tget_sign(type.get()) == H5T_SGN_NONE) {
      const auto v = read_u64_attr(loc, name, st);
      return v ? std::to_string(*v) : "(unreadable: " + st.error + ")";
    }
    const auto v = read_int_attr(loc, name, st);
    return v ? std::to_string(*v) : "(unreadable: " + st.error + ")";
  }
  if (cls == H5T_FLOAT) {
    double v = 0;
    if (TPTRAIN_H5(st, H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &v), name) < 0)
      return "(unreadable: " + st.error + ")";
    char text[40];
    std::snprintf(text, sizeof text, "%.9g", v);
    return text;
  }
  if (cls == H5T_STRING) {
    const auto text = read_string_attr(loc, name, st);
    if (!text) return "(unreadable: " + st.error + ")";
    const std::size_t nl = text->find('\n');
    if (nl == std::string::npos && text->size() <= 60) return "\"" + *text + "\"";
    return "\"" + text->substr(0, std::min<std::size_t>(nl, 40)) + "...\" (" +
           std::to_string(text->size()) + " bytes)";
  }
  return "(" + type_text(type.get()) + ")";
}

std::vector<std::string> attribute_names(hid_t loc, Status& st, std::string_view where) {
  std::vector<std::string> names;
  if (!st.ok()) return names;
  const std::string what =
      std::string("attributes of ") + (where.empty() ? std::string("/") : std::string(where));
  H5O_info_t info;
  if (TPTRAIN_H5(st, H5Oget_info2(loc, &info, H5O_INFO_NUM_ATTRS), what) < 0) return names;
  if (info.num_attrs > kMaxListedAttributes) {
    st.fail(what + ": the object claims " + std::to_string(info.num_attrs) +
            " attributes (at most " + std::to_string(kMaxListedAttributes) +
            " expected): the file is corrupt");
    return names;
  }
  for (hsize_t i = 0; i < info.num_attrs; ++i) {
    const ssize_t len = TPTRAIN_H5(
        st, H5Aget_name_by_idx(loc, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT),
        what);
    if (len < 0) return names;
    if (len == 0 || static_cast<std::size_t>(len) > kMaxAttributeNameBytes) {
      st.fail(what + ": attribute " + std::to_string(i) + " has a name of " +
              std::to_string(len) + " bytes: the file is corrupt");
      return names;
    }
    std::vector<char> buf(static_cast<std::size_t>(len) + 1, '\0');
    if (TPTRAIN_H5(st,
                   H5Aget_name_by_idx(loc, ".", H5_INDEX_NAME, H5_ITER_INC, i, buf.data(),
                                      buf.size(), H5P_DEFAULT),
                   what) < 0)
      return names;
    names.emplace_back(buf.data());
  }
  std::sort(names.begin(), names.end());
  return names;
}

void write_attr(hid_t loc, const char* name, hid_t file_type, hid_t mem_type, const void* value,
                Status& st, std::string_view where) {
  if (!st.ok()) return;
  const std::string what = attr_what(where, name);
  Handle space(TPTRAIN_H5(st, H5Screate(H5S_SCALAR), what), H5Sclose);
  if (!st.ok()) return;
  Handle attr(
      TPTRAIN_H5(st, H5Acreate2(loc, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT), what),
      H5Aclose);
  if (!st.ok()) return;
  TPTRAIN_H5(st, H5Awrite(attr.get(), mem_type, value), what);
  TPTRAIN_H5(st, H5Aclose(attr.release()), what);
}

void write_string_attr(hid_t loc, const char* name, const std::string& value, Status& st) {
  if (!st.ok()) return;
  Handle type(TPTRAIN_H5(st, H5Tcopy(H5T_C_S1), "string type"), H5Tclose);
  if (st.ok()) TPTRAIN_H5(st, H5Tset_size(type.get(), H5T_VARIABLE), "string type");
  if (st.ok()) TPTRAIN_H5(st, H5Tset_cset(type.get(), H5T_CSET_UTF8), "string type");
  const char* p = value.c_str();
  write_attr(loc, name, type.get(), type.get(), &p, st);
}

}  // namespace tptrain::io::h5
