// The message of the DataError `f` throws, or "<no DataError>" when it throws none: what the data
// tests check their messages with.
#pragma once

#include <string>

#include "src/data/data_error.hpp"

namespace tptrain::test {

template <class F>
std::string data_error_of(F&& f) {
  try {
    f();
  } catch (const data::DataError& e) {
    return e.what();
  }
  return "<no DataError>";
}

}  // namespace tptrain::test
