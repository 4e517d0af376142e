//===- FrameCompiler.h - Guarded cache of compiled frames -------*- C++ -*-===//
//
// The C++ side of the frame hook: for each intercepted frame, check the
// cache entries on its code object (co_extra) against their guards, run a
// hit, or capture, lower, compile and cache a new entry. Every failure falls
// back to running the frame eagerly, with the reason logged once.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_FRAMECOMPILER_H
#define DYNAFUSE_CAPTURE_FRAMECOMPILER_H

#include <Python.h>

#include <string>
#include <vector>

namespace dynafuse {

struct CompilerConfig {
  std::string dumpDir;
  int recompileLimit = 8;
  /// Frames whose file starts with one of these run eagerly, untouched.
  std::vector<std::string> skipPrefixes;
};

struct CallOptions {
  std::string backend = "cpu";
  bool fullgraph = false;
  /// The code the user asked to compile: captured even where the skip policy
  /// would pass it through (an nn.Module from torch itself).
  PyObject *target = nullptr;
};

struct CompilerStats {
  long captures = 0;
  long cacheHits = 0;
  long graphBreaks = 0;
  long compileFailures = 0;
  long eagerFrames = 0;
  long recompileLimitHits = 0;
};

/// What was compiled, for dynafuse.compiled_graphs().
struct CompiledGraphInfo {
  std::string name;
  std::string where;
  int kernels = 0;
  int externCalls = 0;
  int ops = 0;
  int64_t peakIntermediateBytes = 0;
  std::vector<std::string> guards;
};

CompilerConfig &compilerConfig();
std::vector<CompiledGraphInfo> &compiledGraphs();
/// Why frames ran eagerly since the last reset ("name: reason").
std::vector<std::string> &graphBreakReasons();
CompilerStats &compilerStats();
/// Forgets every cache entry (code objects keep an empty cache).
void resetCompiledCaches();
/// Installs the frame callback; call once at module import.
void initializeFrameCompiler(PyObject *unsupportedError);

/// Calls fn(*args, **kwargs) with the hook active for this thread.
PyObject *callCompiled(PyObject *fn, PyObject *args, PyObject *kwargs,
                       const CallOptions &options);

} // namespace dynafuse

#endif
