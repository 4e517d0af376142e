//===- FrameCompiler.h - The frontend's public interface --------*- C++ -*-===//
//
// What the Python module (python/src) sees of the frontend: running a
// function with the frame hook active, the compiler's configuration, the op
// tables, and what was compiled. Behind it (lib/Frontend): for each
// intercepted frame, check the cache entries on its code object (co_extra)
// against their guards, run a hit, or capture, lower, compile and cache a
// new entry. Every failure falls back to running the frame eagerly, with the
// reason logged once.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_FRONTEND_FRAMECOMPILER_H
#define DYNAFUSE_FRONTEND_FRAMECOMPILER_H

#include "dynafuse/Runtime/CompilerStats.h"
#include "dynafuse/Support/Options.h"

#include <Python.h>

#include <string>
#include <vector>

namespace dynafuse {

/// How frames are compiled: owned by the boundary (the Python module),
/// which fills it from the Options it read and from dynafuse.config, and
/// hands it to every compiled call.
struct CompilerConfig {
  /// dumpDir, recompileLimit, codegen and parallelThreshold are used here.
  Options options;
  /// Frames whose file starts with one of these run eagerly, untouched.
  std::vector<std::string> skipPrefixes;
};

struct CallOptions {
  /// The backend asked for, "auto" resolved (cache entries are keyed by
  /// it), and the registered backend implementing it (resolveBackend).
  std::string backend = "cpu";
  std::string registeredBackend = "interp";
  bool fullgraph = false;
  /// dynafuse.compile's dynamic=: None (Automatic: static first, then the
  /// dims whose size changed), True (Always: every dim of the frame's
  /// tensor arguments), False (Never).
  enum class DynamicShapes { Automatic, Always, Never };
  DynamicShapes dynamic = DynamicShapes::Automatic;
  /// The code the user asked to compile: captured even where the skip policy
  /// would pass it through (an nn.Module from torch itself).
  PyObject *target = nullptr;
  /// The compiler's configuration (outlives the call).
  const CompilerConfig *config = nullptr;
};

/// What was compiled, for dynafuse.compiled_graphs().
struct CompiledGraphInfo {
  std::string name;
  std::string where;
  /// Kernel calls a run makes, and the kernels compiled for them
  /// (identical ones merged).
  int kernels = 0;
  int distinctKernels = 0;
  int externCalls = 0;
  int ops = 0;
  int64_t peakIntermediateBytes = 0;
  std::vector<std::string> guards;
  /// A training entry: a forward and a backward module (issue 16); the
  /// counts above are the forward's.
  bool training = false;
  int backwardKernels = 0;
  int backwardExternCalls = 0;
};

std::vector<CompiledGraphInfo> &compiledGraphs();
/// Why frames ran eagerly since the last reset ("name: reason").
std::vector<std::string> &graphBreakReasons();
/// Code objects settled into eager since the last reset, with why
/// (Frontend/Entry/Settling.h).
std::vector<std::string> &settledReasons();
/// Forgets every cache entry (code objects keep an empty cache).
void resetCompiledCaches();
/// Installs the frame callback and configures the process-wide pieces
/// (torch allocators, thread pool) from `options`; call once at module
/// import.
void initializeFrameCompiler(PyObject *unsupportedError,
                             const Options &options);

/// What backend "auto" asks (resolveBackend): whether a tensor argument of
/// the call (or one inside a list, tuple or dict argument) is on a CUDA
/// device; with no tensor argument, `firstTensor()` (a module's first
/// parameter or buffer; may be null; called only then) decides.
bool callUsesCuda(PyObject *args, PyObject *kwargs, PyObject *firstTensor);

/// Hands over the op tables of python/dynafuse/ops (see
/// lib/Frontend/Tracer/OpTable.h); stateQueries and polyfills may be null.
/// Throws Error on a malformed table.
void setOpTables(PyObject *functions, PyObject *methods,
                 PyObject *stateQueries = nullptr,
                 PyObject *polyfills = nullptr, PyObject *autocast = nullptr);

/// The bytecode decoder's view of a code object, for tests that compare it
/// with the interpreter's own `dis`: a list of (offset, opname, arg, jump
/// target or -1) tuples. New reference; null with an exception set when
/// `code` is not a code object or cannot be decoded.
PyObject *decodedInstructions(PyObject *code);

/// Calls fn(*args, **kwargs) with the hook active for this thread; frames
/// it runs are compiled with `options` (and options.config).
PyObject *callCompiled(PyObject *fn, PyObject *args, PyObject *kwargs,
                       const CallOptions &options);

} // namespace dynafuse

#endif
