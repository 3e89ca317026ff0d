// HDF5 error handling and attribute readers for tptrain's HDF5 code: the parallel checkpoint
// handler (io/checkpoint_file.cpp) and the serial checkpoint inspector (io/inspect.cpp).
//
// Every HDF5 C API call goes through TPTRAIN_H5(status, call, what): when the call returns a
// negative value (hid_t, herr_t and htri_t all signal failure that way) the first failure is
// recorded in `status` as
//
//   H5Dwrite failed for model/x/weight: <innermost HDF5 message> (checkpoint_file.cpp:312)
//
// and the call's value is passed through, so that code reads like the plain C API. Nothing
// throws here: in a collective phase a rank that failed must still reach the agreement point
// (an MPI_Allreduce of the error flag), so callers test status.ok() and skip work, then agree.
//
// HDF5's automatic error-stack printing is switched off for the lifetime of an ErrorSilencer
// (and restored afterwards); the innermost entry of the stack becomes part of the message.
// Handle closes an HDF5 identifier with the right H5?close function when it goes out of scope;
// release() hands the identifier over for the closes whose errors matter (H5Fclose flushes the
// file), to be closed through TPTRAIN_H5 like any other call.
#pragma once

#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tptrain::io::h5 {

// Switches off HDF5's automatic error printing on the default error stack; restores the
// previous handler on destruction.
class ErrorSilencer {
 public:
  ErrorSilencer() {
    if (H5Eget_auto2(H5E_DEFAULT, &func_, &data_) < 0) {
      func_ = nullptr;
      data_ = nullptr;
      restore_ = false;
    }
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~ErrorSilencer() {
    if (restore_) H5Eset_auto2(H5E_DEFAULT, func_, data_);
  }
  ErrorSilencer(const ErrorSilencer&) = delete;
  ErrorSilencer& operator=(const ErrorSilencer&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
  bool restore_ = true;
};

// The description of the innermost (most specific) entry on the default error stack, e.g.
// "truncated file: eof = 2048, sblock->base_addr = 0, stored_eof = 4096"; "" when empty.
inline std::string error_detail() {
  std::string innermost;
  auto visit = [](unsigned, const H5E_error2_t* e, void* out) -> herr_t {
    if (e != nullptr && e->desc != nullptr && e->desc[0] != '\0')
      *static_cast<std::string*>(out) = e->desc;
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, visit, &innermost);
  return innermost;
}

// "H5Dwrite failed for <what>: <detail> (<file>:<line>)" from the text of the call expression.
inline std::string failure_message(const char* call_text, std::string_view what, const char* file,
                                   int line) {
  std::string_view call(call_text);
  call = call.substr(0, call.find('('));
  while (!call.empty() && call.back() == ' ') call.remove_suffix(1);
  const char* base = std::strrchr(file, '/');
  std::string msg(call);
  msg += " failed for ";
  msg += what;
  const std::string detail = error_detail();
  if (!detail.empty()) msg += ": " + detail;
  msg += " (";
  msg += base != nullptr ? base + 1 : file;
  msg += ":" + std::to_string(line) + ")";
  return msg;
}

// The first error of a phase on this rank ("" while all is well).
struct Status {
  std::string error;
  bool ok() const noexcept { return error.empty(); }
  void fail(std::string message) {
    if (error.empty()) error = std::move(message);
  }
};

template <class R>
R checked(Status& status, R result, const char* call_text, std::string_view what, const char* file,
          int line) {
  if (result < 0) status.fail(failure_message(call_text, what, file, line));
  return result;
}

// An HDF5 identifier that closes itself.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) noexcept : id_(id), closer_(closer) {}
  Handle(Handle&& other) noexcept
      : id_(std::exchange(other.id_, H5I_INVALID_HID)), closer_(other.closer_) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      close();
      id_ = std::exchange(other.id_, H5I_INVALID_HID);
      closer_ = other.closer_;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { close(); }

  hid_t get() const noexcept { return id_; }
  bool valid() const noexcept { return id_ >= 0; }
  // Gives up ownership, for a close whose status is checked:
  //   TPTRAIN_H5(st, H5Fclose(f.release()), what)
  hid_t release() noexcept { return std::exchange(id_, H5I_INVALID_HID); }
  // Closes now; returns the closer's status (0 when there was nothing to close).
  herr_t close() noexcept {
    herr_t result = 0;
    if (id_ >= 0 && closer_ != nullptr) result = closer_(id_);
    id_ = H5I_INVALID_HID;
    return result;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// Evaluates an HDF5 call; on a negative result records "<call> failed for <what>: ..." in
// `status` (first error wins). Yields the call's result.
#define TPTRAIN_H5(status, call, what) \
  ::tptrain::io::h5::checked((status), (call), #call, (what), __FILE__, __LINE__)

// ---- attributes -------------------------------------------------------------------------------
// Readers of scalar attributes. `where` names the object that holds the attribute in messages
// ("" for the root group, "/train/" for group /train, ...): "attribute /train/seed is not a
// single integer". Failures are recorded in `st`; nothing throws.

inline std::string attr_what(std::string_view where, const char* name) {
  std::string s = "attribute ";
  s += where;
  s += name;
  return s;
}

inline bool attr_exists(hid_t loc, const char* name, Status& st, std::string_view where = {}) {
  if (!st.ok()) return false;
  return TPTRAIN_H5(st, H5Aexists(loc, name), attr_what(where, name)) > 0;
}

// Opens a scalar attribute of the given class; fails (into st) with a readable message if it
// is of another class or not a single value. `type` receives the attribute's file type.
inline Handle open_scalar_attr(hid_t loc, const char* name, H5T_class_t want,
                               const char* want_text, Handle& type, Status& st,
                               std::string_view where = {}) {
  const std::string what = attr_what(where, name);
  Handle attr(TPTRAIN_H5(st, H5Aopen(loc, name, H5P_DEFAULT), what), H5Aclose);
  if (!st.ok()) return attr;
  type = Handle(TPTRAIN_H5(st, H5Aget_type(attr.get()), what), H5Tclose);
  Handle space(TPTRAIN_H5(st, H5Aget_space(attr.get()), what), H5Sclose);
  if (!st.ok()) return attr;
  const H5T_class_t cls = TPTRAIN_H5(st, H5Tget_class(type.get()), what);
  const hssize_t npoints = TPTRAIN_H5(st, H5Sget_simple_extent_npoints(space.get()), what);
  if (st.ok() && (cls != want || npoints != 1)) st.fail(what + " is not " + want_text);
  return attr;
}

inline std::optional<std::int64_t> read_int_attr(hid_t loc, const char* name, Status& st,
                                                 std::string_view where = {}) {
  if (!st.ok()) return std::nullopt;
  Handle type;
  Handle attr = open_scalar_attr(loc, name, H5T_INTEGER, "a single integer", type, st, where);
  std::int64_t value = 0;
  if (st.ok())
    TPTRAIN_H5(st, H5Aread(attr.get(), H5T_NATIVE_INT64, &value), attr_what(where, name));
  if (!st.ok()) return std::nullopt;
  return value;
}

// An unsigned 64-bit attribute (a checksum): must be an unsigned integer type of 64 bits or
// fewer, so that no value is clipped.
inline std::optional<std::uint64_t> read_u64_attr(hid_t loc, const char* name, Status& st,
                                                  std::string_view where = {}) {
  if (!st.ok()) return std::nullopt;
  const std::string what = attr_what(where, name);
  Handle type;
  Handle attr = open_scalar_attr(loc, name, H5T_INTEGER, "a single integer", type, st, where);
  if (!st.ok()) return std::nullopt;
  const H5T_sign_t sign = TPTRAIN_H5(st, H5Tget_sign(type.get()), what);
  if (st.ok() && (sign != H5T_SGN_NONE || H5Tget_size(type.get()) > 8))
    st.fail(what + " is not an unsigned integer of at most 64 bits");
  std::uint64_t value = 0;
  if (st.ok()) TPTRAIN_H5(st, H5Aread(attr.get(), H5T_NATIVE_UINT64, &value), what);
  if (!st.ok()) return std::nullopt;
  return value;
}

inline std::optional<std::string> read_string_attr(hid_t loc, const char* name, Status& st,
                                                   std::string_view where = {}) {
  if (!st.ok()) return std::nullopt;
  const std::string what = attr_what(where, name);
  Handle type;
  Handle attr = open_scalar_attr(loc, name, H5T_STRING, "a single string", type, st, where);
  if (!st.ok()) return std::nullopt;
  const htri_t variable = TPTRAIN_H5(st, H5Tis_variable_str(type.get()), what);
  const H5T_cset_t cset = TPTRAIN_H5(st, H5Tget_cset(type.get()), what);
  if (!st.ok()) return std::nullopt;
  std::string value;
  if (variable > 0) {
    Handle mem(TPTRAIN_H5(st, H5Tcopy(H5T_C_S1), what), H5Tclose);
    if (st.ok()) TPTRAIN_H5(st, H5Tset_size(mem.get(), H5T_VARIABLE), what);
    if (st.ok()) TPTRAIN_H5(st, H5Tset_cset(mem.get(), cset), what);
    char* p = nullptr;
    if (st.ok()) TPTRAIN_H5(st, H5Aread(attr.get(), mem.get(), &p), what);
    if (p != nullptr) {
      value = p;
      TPTRAIN_H5(st, H5free_memory(p), what);
    }
  } else {
    const std::size_t size = H5Tget_size(type.get());
    if (size == 0) {
      st.fail(failure_message("H5Tget_size", what, __FILE__, __LINE__));
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

// Names of the attributes of an object, in increasing name order.
inline std::vector<std::string> attribute_names(hid_t loc, Status& st, std::string_view where) {
  std::vector<std::string> names;
  if (!st.ok()) return names;
  auto collect = [](hid_t, const char* name, const H5A_info_t*, void* out) -> herr_t {
    static_cast<std::vector<std::string>*>(out)->emplace_back(name);
    return 0;
  };
  hsize_t idx = 0;
  const std::string what =
      std::string("attributes of ") + (where.empty() ? std::string("/") : std::string(where));
  TPTRAIN_H5(st, H5Aiterate2(loc, H5_INDEX_NAME, H5_ITER_INC, &idx, collect, &names), what);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace tptrain::io::h5
