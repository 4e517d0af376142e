//===- IndexErrors.h - Reporting out-of-bounds indirect indices -*- C++ -*-===//
//
// Generated code and the interpreter call dynafuse_index_error when an
// indirect index (gather, embedding) is out of bounds; the runtime checks
// after each kernel and raises an Error naming the index and the size. The
// flag is per thread.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_SUPPORT_INDEXERRORS_H
#define DYNAFUSE_SUPPORT_INDEXERRORS_H

#include <cstdint>
#include <string>

extern "C" void dynafuse_index_error(int64_t index, int64_t size);

namespace dynafuse {
/// The first error reported on this thread since the last call, if any;
/// clears it.
bool takeIndexError(std::string &message);
} // namespace dynafuse

#endif
