//===- IndexErrors.cpp - Reporting out-of-bounds indirect indices ---------===//
#include "dynafuse/Support/IndexErrors.h"

namespace {
thread_local bool pending = false;
thread_local int64_t badIndex = 0;
thread_local int64_t badSize = 0;
thread_local bool divisionByZero = false;
} // namespace

extern "C" void dynafuse_index_error(int64_t index, int64_t size) {
  if (pending)
    return;
  pending = true;
  divisionByZero = false;
  badIndex = index;
  badSize = size;
}

extern "C" void dynafuse_division_error(int64_t dividend, int64_t) {
  if (pending)
    return;
  pending = true;
  divisionByZero = true;
  badIndex = dividend;
}

namespace dynafuse {
bool takeIndexError(std::string &message) {
  if (!pending)
    return false;
  pending = false;
  if (divisionByZero) {
    message = "integer division or modulo by zero (dividend " +
              std::to_string(badIndex) + ")";
    return true;
  }
  message = "index " + std::to_string(badIndex) +
            " is out of bounds for dimension of size " +
            std::to_string(badSize);
  return true;
}
} // namespace dynafuse
