// HDF5 error handling for tptrain's HDF5 code: the parallel checkpoint handler
// (io/checkpoint_file.cpp and its parts) and the serial survey of a checkpoint for inspect
// (io/checkpoint_survey.cpp).
// Attribute readers and writers are in io/hdf5_attributes.hpp.
//
// Every HDF5 C API call goes through TPTRAIN_H5(status, call, what): when the call returns a
// negative value (hid_t, herr_t and htri_t all signal failure that way) the first failure is
// recorded in `status` as
//
//   H5Dwrite failed for model/x/weight: <innermost HDF5 message> (checkpoint_file.cpp:312)
//
// When the error stack carries the operating system's reason (the sec2 driver's "errno = 28,
// error message = 'No space left on device'", the MPI-IO driver's "MPI_ERR_ACCESS: permission
// denied"), it comes first, because that is what a user can act on:
//
//   H5Fcreate failed for ck/step_00000002.h5.tmp: permission denied: ck/step_00000002.h5.tmp (...)
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

// The operating system's reason for the failure on the default error stack, when HDF5 passed
// it on: the errno text of the sec2 driver, or a plain rendering of the MPI-IO error class.
// MPI_ERR_OTHER ("known error not in list") carries no reason and yields "".
inline std::string system_reason() {
  std::string reason;
  auto visit = [](unsigned, const H5E_error2_t* e, void* out) -> herr_t {
    auto& r = *static_cast<std::string*>(out);
    if (!r.empty() || e == nullptr || e->desc == nullptr) return 0;
    const std::string_view d(e->desc);
    constexpr std::string_view errno_tag = "error message = '";
    if (const std::size_t p = d.find(errno_tag); p != std::string_view::npos) {
      const std::size_t b = p + errno_tag.size(), q = d.find('\'', b);
      if (q != std::string_view::npos) r = std::string(d.substr(b, q - b));
      return 0;
    }
    static const char* const kMpi[][2] = {
        {"MPI_ERR_ACCESS", "permission denied"},
        {"MPI_ERR_NO_SPACE", "No space left on device"},
        {"MPI_ERR_QUOTA", "Disk quota exceeded"},
        {"MPI_ERR_NO_SUCH_FILE", "No such file or directory"},
        {"MPI_ERR_READ_ONLY", "Read-only file system"},
        {"MPI_ERR_FILE_IN_USE", "file in use"},
        {"MPI_ERR_BAD_FILE", "bad file name"},
        {"MPI_ERR_IO", "Input/output error"},
    };
    for (const auto& m : kMpi)
      if (d.find(m[0]) != std::string_view::npos) {
        r = m[1];
        return 0;
      }
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, visit, &reason);
  return reason;
}

// "H5Dwrite failed for <what>: [<reason>: ]<detail> (<file>:<line>)" from the text of the call
// expression; a permission problem reads "permission denied: <what>".
inline std::string failure_message(const char* call_text, std::string_view what, const char* file,
                                   int line) {
  std::string_view call(call_text);
  call = call.substr(0, call.find('('));
  while (!call.empty() && call.back() == ' ') call.remove_suffix(1);
  const char* base = std::strrchr(file, '/');
  std::string msg(call);
  msg += " failed for ";
  msg += what;
  const std::string reason = system_reason();
  if (!reason.empty()) {
    msg += ": " + reason;
    if (reason == "permission denied") {
      msg += ": ";
      msg += what;
    }
  }
  const std::string detail = error_detail();
  if (!detail.empty() && detail != reason) msg += (reason.empty() ? ": " : "; ") + detail;
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

}  // namespace tptrain::io::h5
