// Small helpers shared by tests of different layers: whole files as bytes, the message of an
// expected exception, and the suite's floating-point traps turned off for a scope.
#pragma once

#include <cfenv>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

namespace tptrain::test {

// The suite traps FE_INVALID and FE_DIVBYZERO (tests/main.cpp); a test whose numbers overflow or
// divide by zero on purpose turns them off while this lives: fp16 training (Inf - Inf in a
// backward is the event the loss scaler exists for), a planner fed a user's extreme numbers
// (x / 0 = inf, 0 x inf = NaN).
struct FloatingPointTrapsOff {
#if defined(__GLIBC__)
  int trapped = fedisableexcept(FE_INVALID | FE_DIVBYZERO);
  ~FloatingPointTrapsOff() {
    if (trapped > 0) feenableexcept(trapped);
  }
#endif
};

inline std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void put_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The message of the std::length_error `f` throws ("" if it throws nothing or something else).
template <class F>
std::string length_error_of(F&& f) {
  try {
    f();
  } catch (const std::length_error& e) {
    return e.what();
  } catch (...) {
    return "";
  }
  return "";
}

inline bool mentions(const std::string& message, const std::string& what) {
  return message.find(what) != std::string::npos;
}

}  // namespace tptrain::test
