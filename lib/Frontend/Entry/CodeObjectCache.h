//===- CodeObjectCache.h - Compiled entries kept on code objects -*- C++
//-*-===//
//
// Decision 42: each code object carries (in co_extra) a list of entries, most
// recently hit first, plus a skip flag (set only by the skip policy and the
// recompile limit). An entry is a captured frame (guards, sources, how to
// rebuild the result) and the module compiled from its graph; or a negative
// entry: the guards and global state under which capture or compilation
// stopped, and why, so that calls like it run eagerly without another capture
// while other calls still compile.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_CODEOBJECTCACHE_H
#define DYNAFUSE_CAPTURE_CODEOBJECTCACHE_H

#include "dynafuse/Runtime/BackwardProgram.h"
#include "CapturedFrame.h"
#include "dynafuse/Frontend/FrameCompiler.h"
#include "dynafuse/Runtime/AllocationPlan.h"
#include "dynafuse/Runtime/Executor.h"

#include <Python.h>

#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dynafuse {

class PrepackedWeights;

struct CacheEntry {
  /// A compiled entry's capture; a negative entry's guards and sources.
  CapturedFrame captured;
  /// Negative entries: why calls under these guards (and the captured
  /// global state) run eagerly; empty for a compiled entry.
  std::string eagerReason;
  bool isNegative() const { return !eagerReason.empty(); }
  /// A negative entry for plain Python (the rest of a frame after a break,
  /// with no tensor work): its calls are not counted as eager frames.
  bool quiet = false;
  /// A failed run is logged once per entry.
  bool loggedRunFailure = false;
  /// The backend the entry was compiled for (part of its key).
  std::string backend;
  std::unique_ptr<CompiledModule> module;
  /// Per module output: the graph input it is (index), or -1 when computed.
  std::vector<int> outputInput;
  /// Per module output: when it is a view step of an input, the input and
  /// the view (returned sharing the input's memory, as eager does).
  using InputView = OutputView;
  std::vector<InputView> outputViews;
  /// Training entries: the backward program the run's autograd node runs
  /// (null for inference entries).
  std::shared_ptr<const BackwardProgram> backward;
  /// Training entries: the torch callables their backward's call_torch
  /// gradient steps call (a copy of the capture's, shared with the
  /// autograd nodes, which may outlive the entry; freed holding the GIL).
  std::shared_ptr<const std::vector<TorchCall>> backwardTorchCalls;
  /// Inference entries: the convolution weights their runs keep reordered
  /// for oneDNN (shared: a run's TorchContext points into it).
  std::shared_ptr<PrepackedWeights> prepackedWeights;
  /// Where its forward runs' large blocks go (null with
  /// Options::allocationPlan off).
  std::unique_ptr<AllocationPlanner> allocationPlanner;
};

struct CodeCache {
  /// Shared: a run keeps its entry alive even if another thread resets the
  /// cache while the run's call_torch steps execute Python code (which may
  /// switch threads).
  std::list<std::shared_ptr<CacheEntry>> entries;
  /// Set for code the skip policy excludes, at the recompile limit, and
  /// when the code settles into eager (Settling.h).
  bool skip = false;
  bool skippedFile = false;
  /// Skipped code whose runs (kEagerRunsToUnhook in a row) ran no compiled
  /// frame under them: it runs with the frame hook off, its callees too,
  /// at the interpreter's full speed (a fallback costs what eager costs).
  bool unhooked = false;
  /// The import machinery (importlib's frozen code): an import runs
  /// unhooked from its first run, with the module bodies it executes and
  /// what they call (a lazy import inside a compiled frame must not be
  /// captured frame by frame).
  bool importMachinery = false;
  int eagerRunsWithoutCompiled = 0;
  int compiles = 0;
  /// Per source (as described), how often an entry was dropped because the
  /// object its identity guard kept did not outlive its call (Settling.h).
  std::map<std::string, int> freshObjects;
  /// The outermost compiled call its last lookup was made in, whether a
  /// lookup missed in that call, and in how many calls in a row (of those
  /// that looked it up) a lookup missed (Settling.h).
  long lookupCall = -1;
  bool missedInLookupCall = false;
  int callsMissing = 0;
  /// The sizes its captures saw (automatic dynamic shapes).
  ShapeHistory shapes;
  /// Code generated for graph breaks in this code (break stubs, resume
  /// functions), by what it is for. A break in a resume function uses its
  /// original's: converging paths share one resume function.
  std::map<std::string, PyRef> generated;
  /// For a resume function: its original code (a weak reference) and the
  /// size of its prologue in bytes.
  PyRef origin;
  int originShift = 0;
};

constexpr int kEagerRunsToUnhook = 3;

/// Requests the co_extra slot; call once at module import.
void initializeCodeObjectCache();
/// The cache of `code`, created on first sight (the skip policy of
/// `config` decides whether it starts skipped); null when co_extra fails.
CodeCache *cacheOf(PyCodeObject *code, const CompilerConfig &config);
/// Empties every code object's cache (skipped files stay skipped).
void resetCodeCaches();
/// Makes (or finds) the stub and resume functions a break at `point` in
/// `code` needs, and the number of local slots resume functions take.
/// Throws Error when the interpreter refuses one.
void prepareResumeCode(ResumePoint &point, PyCodeObject *code,
                       const CompilerConfig &config);
/// The code's qualified name, and its file:first-line.
std::string codeName(PyCodeObject *code);
std::string codeWhere(PyCodeObject *code);

} // namespace dynafuse

#endif
