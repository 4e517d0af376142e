//===- IndexErrors.cpp - Reporting out-of-bounds indirect indices ---------===//
#include "dynafuse/Support/IndexErrors.h"

namespace {
thread_local bool pending = false;
thread_local int64_t badIndex = 0;
thread_local int64_t badSize = 0;
} // namespace

extern "C" void dynafuse_index_error(int64_t index, int64_t size) {
  if (pending)
    return;
  pending = true;
  badIndex = index;
  badSize = size;
}

namespace dynafuse {
bool takeIndexError(std::string &message) {
  if (!pending)
    return false;
  pending = false;
  message = "index " + std::to_string(badIndex) +
            " is out of bounds for dimension of size " +
            std::to_string(badSize);
  return true;
}
} // namespace dynafuse
