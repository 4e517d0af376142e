//===- CompileFrame.h - Capture and compile a frame into an entry -*- C++
//-*-===//
//
// The compile pipeline of one frame: capture its bytecode into a graph
// (BytecodeTracer, CapturedFrame.h), lower it, check its devices against the
// backend, compile it with the call's backend, and record what was compiled.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_COMPILEFRAME_H
#define DYNAFUSE_CAPTURE_COMPILEFRAME_H

#include "CodeObjectCache.h"

#include <memory>

namespace dynafuse {

/// A compile failure after capture (a lowering or backend error), with the
/// capture's guards: calls under them run eagerly, others still compile.
class CompileFailure : public Error {
public:
  CompileFailure(const std::string &message,
                 std::shared_ptr<const BreakGuards> guards)
      : Error(message), guards(std::move(guards)) {}
  std::shared_ptr<const BreakGuards> guards;
};

/// A new entry for `frame`, the `compileIndex`-th compiled from its code
/// object, whose captures so far saw `history` (updated). Throws
/// Unsupported on graph breaks and CompileFailure on compile failures, each
/// carrying the guards it happened under when capture got that far. A
/// capture with symbolic sizes that breaks or fails is redone with static
/// sizes (and the code's later captures are static).
std::unique_ptr<CacheEntry> compileFrame(DynafuseFrame *frame,
                                         const CallOptions &options,
                                         int compileIndex,
                                         ShapeHistory &history);

} // namespace dynafuse

#endif
