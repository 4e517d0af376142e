//===- IndexErrors.h - Reporting out-of-bounds indirect indices -*- C++ -*-===//
//
// Generated code and the interpreter call dynafuse_index_error when an
// indirect index (gather, embedding) is out of bounds, and
// dynafuse_division_error for an integer division by zero; the runtime
// checks after each kernel and raises an Error naming what went wrong (the
// frame then reruns eagerly, where eager raises its own error). The flag is
// per thread.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_SUPPORT_INDEXERRORS_H
#define DYNAFUSE_SUPPORT_INDEXERRORS_H

#include <cstdint>
#include <string>

extern "C" void dynafuse_index_error(int64_t index, int64_t size);
/// An integer division or modulo by zero (eager raises ZeroDivisionError);
/// the arguments are the dividend and the divisor.
extern "C" void dynafuse_division_error(int64_t dividend, int64_t divisor);

namespace dynafuse {
/// The first error reported on this thread since the last call, if any;
/// clears it.
bool takeIndexError(std::string &message);
} // namespace dynafuse

#endif
