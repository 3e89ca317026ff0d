// The one exception of the data layer.
#pragma once

#include <stdexcept>

namespace tptrain::data {

// Every problem with a data file or a request against it. The message names the file (where
// there is one) and the offending values.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace tptrain::data
