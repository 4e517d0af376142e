//===- LoopInterpreter.h - Reference execution of loop IR -------*- C++ -*-===//
//
// Executes a kernel directly, one scalar at a time, with the same semantics
// every backend must match (f32 math rounded to f32, NaN-propagating
// max/min, truncating float-to-int casts). Slow by design: it is the oracle
// backends are tested against, and the backend used when LLVM is absent.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_LOOP_LOOPINTERPRETER_H
#define DYNAFUSE_LOOP_LOOPINTERPRETER_H

#include "dynafuse/Loop/Kernel.h"

#include <cstdint>

namespace dynafuse {

/// Same ABI as KernelExecutable::run: buffers[i] is element 0 of param i,
/// symbols[j] the value of kernel.symbols[j].
void interpretLoopKernel(const Kernel &kernel, char *const *buffers,
                     const int64_t *symbols);

} // namespace dynafuse

#endif
