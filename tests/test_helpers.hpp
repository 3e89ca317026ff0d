// Small helpers shared by tests of different layers: whole files as bytes, and the message of
// an expected exception.
#pragma once

#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

namespace tptrain::test {

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
