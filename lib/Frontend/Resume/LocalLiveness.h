//===- LocalLiveness.h - Which locals a code object may still read -*- C++ -*-===//
//
// At a graph break the resume function gets the frame's locals as
// arguments; a local no path reads again before writing it is dead, and is
// passed as None instead of being kept alive (a dead intermediate tensor
// would otherwise have to be computed into memory by the graph before the
// break). Backward dataflow over the decoded instructions, with jumps and
// exception-handler edges.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_LOCALLIVENESS_H
#define DYNAFUSE_CAPTURE_LOCALLIVENESS_H

#include "Tracer/Bytecode.h"

#include <map>
#include <vector>

namespace dynafuse {

/// Per instruction (by index in `instructions`), which of the first
/// `locals` slots may be read before they are written from that
/// instruction on.
std::vector<std::vector<bool>>
liveLocals(const std::vector<Instruction> &instructions,
           const std::map<int, int> &indexOfOffset,
           const std::vector<ExceptionTableEntry> &handlers, int locals);

} // namespace dynafuse

#endif
