//===- FrameCompiler.cpp - The frame hook's callback ----------------------===//
//
// For each intercepted frame: find the cache entries on its code object,
// run the first whose guards hold (RunEntry), or compile a new one
// (CompileFrame); every failure falls back to running the frame eagerly,
// with the reason logged once (or raised with fullgraph=True).
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Frontend/FrameCompiler.h"

#include "CodeObjectCache.h"
#include "CompileFrame.h"
#include "EvalFrameHook.h"
#include "RunEntry.h"
#include "Settling.h"
#include "dynafuse/Runtime/CachingAllocator.h"
#include "dynafuse/Support/Logging.h"
#include "dynafuse/Support/ThreadPool.h"
#include "dynafuse/Torch/TorchBridge.h"

#include <algorithm>
#include <atomic>

namespace dynafuse {
namespace {

/// A compiled call running on a thread: its options, and whether the hook
/// is turned off for it. Lives on callCompiled's stack.
struct ActiveCall {
  const CallOptions &options;
  /// Starts at the outer call's count: a compiled call made while the hook
  /// is off (from an extern step's Python code) stays uncompiled.
  int suppressed = 0;
  ActiveCall *outer = nullptr;
  /// Which outermost compiled call this is part of (one count for the
  /// whole process: Settling.h's "calls").
  long epoch = 0;
};

/// Outermost compiled calls made so far.
std::atomic<long> outermostCalls{0};

/// The one thread-scoped slot of the frame compiler: the innermost compiled
/// call active on this thread, null when none. It cannot be an argument:
/// CPython calls the eval-frame hook (C) with nothing of ours, and the hook
/// is installed for the whole interpreter while any thread runs a compiled
/// call, so the callback must find its own thread's call.
thread_local ActiveCall *activeCall = nullptr;

/// Turns the hook off for this call while capture, guards or compiled code
/// run (torch's and nn.Module's Python code would otherwise re-enter it).
struct SuppressHook {
  explicit SuppressHook(ActiveCall &call) : call(call) { ++call.suppressed; }
  ~SuppressHook() { --call.suppressed; }
  ActiveCall &call;
};

PyObject *unsupportedErrorType = nullptr;

PyObject *raiseUnsupported(const std::string &message) {
  PyErr_SetString(unsupportedErrorType, message.c_str());
  return nullptr;
}

/// Runs a compiled entry. A failure while it runs (an extern raising, an
/// index out of range) leaves the entry in place for the inputs that work:
/// this call runs eagerly, which raises eager's own error.
PyObject *runCompiledEntry(const std::shared_ptr<CacheEntry> &shared,
                           SourceResolver &resolver, DynafuseFrame *frame,
                           BreakState *pending, int *handled) {
  CacheEntry &entry = *shared;
  try {
    PyObject *result = runEntry(shared, resolver, frame, pending);
    *handled = 1;
    return result;
  } catch (const std::exception &error) {
    if (PyErr_Occurred())
      PyErr_Clear();
    ++compilerStats().runFailures;
    if (!entry.loggedRunFailure)
      logLine("graph_breaks", "running " + entry.captured.graph->name +
                                  " failed: " + error.what() +
                                  "; the call runs eagerly");
    entry.loggedRunFailure = true;
    *handled = 0;
    return nullptr;
  }
}

/// What the cache had for a call: nothing, a compiled entry (run), or a
/// negative entry (the call runs eagerly).
enum class Lookup { Miss, Compiled, Eager };

/// Finds the most recently hit entry whose guards hold and acts on it.
PyObject *runCachedEntry(CodeCache &cache, DynafuseFrame *frame,
                         const CallOptions &options, long epoch, Lookup *lookup,
                         BreakState *pending, int *handled) {
  std::string firstFailure;
  // With the recompiles log on, every entry's failed guard, not only the
  // first entry's: a symbolic entry's failure is what explains a recompile.
  const bool logEveryFailure = logEnabled("recompiles");
  std::vector<std::string> otherFailures;
  const GlobalState now = GlobalState::current(); // once per call
  // Entries that can never run again (Settling.h), and the sources whose
  // fresh objects made them so.
  std::vector<std::shared_ptr<CacheEntry>> dead;
  std::vector<std::string> freshSources;
  // Whether the first entry failed on a value guard (not on a tensor's
  // type or sizes, which the dynamic-shapes policy and the recompile limit
  // answer, nor on the global state). An int symbol specialized to its
  // value (a list index, a loop count: `s0 == 3`) is a value guard too:
  // the next capture would specialize it again.
  bool firstFailedOnValue = false;
  for (auto it = cache.entries.begin(); it != cache.entries.end(); ++it) {
    std::shared_ptr<CacheEntry> entry = *it;
    if (entry->backend != options.backend)
      continue;
    // dynamic=False runs only graphs of static sizes.
    if (entry->captured.symbolic &&
        options.dynamic == CallOptions::DynamicShapes::Never)
      continue;
    SourceResolver resolver(entry->captured.sources, frame);
    const bool first = firstFailure.empty();
    std::string otherFailure;
    std::string *failure = first             ? &firstFailure
                           : logEveryFailure ? &otherFailure
                                             : nullptr;
    const Guard *failed = nullptr;
    if (!guardsHold(*entry, now, resolver, failure, &failed)) {
      if (!first && failure)
        otherFailures.push_back((entry->captured.graph
                                     ? entry->captured.graph->name
                                     : std::string("an eager entry")) +
                                ": " + otherFailure);
      if (first)
        firstFailedOnValue = failed && failed->kind != Guard::Kind::Tensor &&
                             (failed->kind != Guard::Kind::Shape ||
                              failed->shape.specializesInt);
      if (failed && canNeverHoldAgain(*failed)) {
        dead.push_back(entry);
        freshSources.push_back(
            entry->captured.sources.at(size_t(failed->source))
                .describe(entry->captured.sources));
      }
      // A guard may run Python (__eq__), and another thread may have reset
      // the cache meanwhile: stop when this entry left it.
      if (std::find(cache.entries.begin(), cache.entries.end(), entry) ==
          cache.entries.end())
        break;
      continue;
    }
    auto still = std::find(cache.entries.begin(), cache.entries.end(), entry);
    if (still != cache.entries.end())
      cache.entries.splice(cache.entries.begin(), cache.entries, still);
    if (options.fullgraph && entry->captured.resume) {
      // Compiled for a call that allowed breaks: fullgraph refuses it.
      *lookup = Lookup::Eager;
      *handled = 1;
      return raiseUnsupported("fullgraph=True: graph break: " +
                              entry->captured.resume->where.str() + ": " +
                              entry->captured.resume->reason);
    }
    noteLookup(cache, frame->code, epoch, false);
    if (entry->isNegative()) {
      *lookup = Lookup::Eager;
      if (options.fullgraph) {
        *handled = 1;
        return raiseUnsupported("fullgraph=True: " + entry->eagerReason);
      }
      if (!entry->quiet)
        ++compilerStats().eagerFrames;
      return nullptr;
    }
    *lookup = Lookup::Compiled;
    ++compilerStats().cacheHits;
    return runCompiledEntry(entry, resolver, frame, pending, handled);
  }
  for (const auto &entry : dead)
    cache.entries.remove(entry);
  if (!options.fullgraph &&
      (settleOnFreshObjects(cache, frame->code, freshSources) ||
       noteLookup(cache, frame->code, epoch, firstFailedOnValue,
                  firstFailure))) {
    *lookup = Lookup::Eager;
    return nullptr;
  }
  if (!cache.entries.empty() || !dead.empty())
    logLine("recompiles", "recompiling " + codeName(frame->code) + " at " +
                              codeWhere(frame->code) +
                              ": guard failed: " + firstFailure);
  for (const std::string &other : otherFailures)
    logLine("recompiles", "  and " + other);
  return nullptr;
}

bool reachedRecompileLimit(CodeCache &cache, PyCodeObject *code,
                           int recompileLimit) {
  if (cache.compiles < recompileLimit)
    return false;
  cache.skip = true;
  ++compilerStats().recompileLimitHits;
  logLine("recompiles", codeName(code) + " hit the recompile limit (" +
                            std::to_string(recompileLimit) +
                            "); it runs eagerly from now on");
  return true;
}

/// Cache lookup, then capture and compile; throws on graph breaks and
/// compile failures.
PyObject *compiledCall(CodeCache &cache, DynafuseFrame *frame,
                       const CallOptions &options, long epoch,
                       BreakState *pending, int *handled) {
  Lookup lookup = Lookup::Miss;
  PyObject *result =
      runCachedEntry(cache, frame, options, epoch, &lookup, pending, handled);
  if (lookup != Lookup::Miss)
    return result;
  if (reachedRecompileLimit(cache, frame->code,
                            options.config->options.recompileLimit))
    return nullptr;
  std::shared_ptr<CacheEntry> entry =
      compileFrame(frame, options, cache.compiles++, cache.shapes);
  cache.entries.push_front(entry);
  SourceResolver resolver(entry->captured.sources, frame);
  if (entry->captured.symbolic &&
      !guardsHold(*entry, GlobalState::current(), resolver, nullptr)) {
    // The guards bind the size symbols the run evaluates; they hold for
    // the frame just captured unless the capture misjudged it.
    logLine("graph_breaks", "the guards of " + entry->captured.graph->name +
                                " fail for the call it was captured from; "
                                "the call runs eagerly");
    *handled = 0;
    return nullptr;
  }
  return runCompiledEntry(entry, resolver, frame, pending, handled);
}

/// A negative entry: calls under `guards` run eagerly (or raise with
/// fullgraph=True) without another capture; other calls still compile.
void addNegativeEntry(CodeCache &cache, const CallOptions &options,
                      const std::string &reason, const BreakGuards &guards,
                      bool quiet = false) {
  auto entry = std::make_shared<CacheEntry>();
  entry->quiet = quiet;
  entry->backend = options.backend;
  entry->eagerReason = reason;
  entry->captured.state = guards.state;
  entry->captured.sources = guards.sources;
  entry->captured.guards = guards.guards;
  cache.entries.push_front(std::move(entry));
}

/// Logs a failure, or raises it when fullgraph=True. Returns the frame
/// callback's result. With the guards it happened under, later calls under
/// them skip capture (a negative entry); without, the next call tries again
/// (bounded by the recompile limit).
PyObject *fallBack(CodeCache &cache, DynafuseFrame *frame,
                   const CallOptions &options, const std::string &message,
                   const std::shared_ptr<const BreakGuards> &guards,
                   int *handled) {
  if (guards)
    addNegativeEntry(cache, options, message, *guards);
  if (options.fullgraph) {
    *handled = 1;
    return raiseUnsupported("fullgraph=True: " + message);
  }
  graphBreakReasons().push_back(message);
  logLine("graph_breaks", message + "; the frame runs eagerly");
  ++compilerStats().eagerFrames;
  return nullptr;
}

/// Cache lookup, capture and compile, with every failure turned into a
/// fallback (or fullgraph's error).
PyObject *compiledFrame(CodeCache &cache, DynafuseFrame *frame,
                        const CallOptions &options, long epoch,
                        BreakState *pending, int *handled) {
  try {
    return compiledCall(cache, frame, options, epoch, pending, handled);
  } catch (const Unsupported &error) {
    if (error.quiet && error.guards && !options.fullgraph) {
      addNegativeEntry(cache, options, error.what(), *error.guards, true);
      return nullptr;
    }
    ++compilerStats().graphBreaks;
    return fallBack(cache, frame, options,
                    "graph break in " + codeName(frame->code) + ": " +
                        error.what(),
                    error.guards, handled);
  } catch (const std::exception &error) {
    ++compilerStats().compileFailures;
    if (PyErr_Occurred())
      PyErr_Clear();
    *handled = 0;
    auto *failure = dynamic_cast<const CompileFailure *>(&error);
    return fallBack(cache, frame, options,
                    "compiling " + codeName(frame->code) + " at " +
                        codeWhere(frame->code) + " failed: " + error.what(),
                    failure ? failure->guards : nullptr, handled);
  }
}

PyObject *onFrame(DynafuseFrame *frame, int *handled) {
  ActiveCall *call = activeCall;
  if (!call || call->suppressed)
    return nullptr;
  const CallOptions &options = call->options;
  CodeCache *cache = cacheOf(frame->code, *options.config);
  if (cache && cache->skippedFile &&
      reinterpret_cast<PyObject *>(frame->code) == options.target)
    cache->skippedFile = cache->skip = cache->unhooked = false;
  if (!cache)
    return nullptr;
  if (cache->skip) {
    // Eager code: observed until its runs show nothing under it compiles,
    // then run with the hook off (and so everything it calls).
    *handled = cache->unhooked ? DYNAFUSE_FRAME_RUNS_UNHOOKED
                               : DYNAFUSE_FRAME_RUNS_REPORTED;
    return nullptr;
  }
  BreakState pending;
  PyObject *result = nullptr;
  {
    SuppressHook suppress(*call);
    result =
        compiledFrame(*cache, frame, options, call->epoch, &pending, handled);
  }
  if (!pending.point)
    return result;
  // The code after a graph break runs with the hook active: what it calls
  // is compiled, and the resume function is captured in turn.
  Py_XDECREF(result);
  return continueAfterBreak(pending);
}

void onFrameReport(PyCodeObject *code, long nestedHandled) {
  ActiveCall *call = activeCall;
  if (!call)
    return;
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback); // the frame may have raised
  CodeCache *cache = cacheOf(code, *call->options.config);
  if (cache && cache->skip) {
    cache->eagerRunsWithoutCompiled =
        nestedHandled > 0 ? 0 : cache->eagerRunsWithoutCompiled + 1;
    bool unhooked = cache->eagerRunsWithoutCompiled >= kEagerRunsToUnhook;
    if (unhooked && !cache->unhooked)
      ++compilerStats().unhookedCodes;
    cache->unhooked = unhooked;
  }
  PyErr_Restore(type, value, traceback);
}

} // namespace

std::vector<std::string> &graphBreakReasons() {
  static auto *reasons = new std::vector<std::string>();
  return *reasons;
}

std::vector<CompiledGraphInfo> &compiledGraphs() {
  static auto *graphs = new std::vector<CompiledGraphInfo>();
  return *graphs;
}

void resetCompiledCaches() {
  resetCodeCaches();
  compilerStats() = CompilerStats();
  compiledGraphs().clear();
  graphBreakReasons().clear();
  settledReasons().clear();
}

void initializeFrameCompiler(PyObject *unsupportedError,
                             const Options &options) {
  unsupportedErrorType = unsupportedError;
  initializeCodeObjectCache();
  dynafuse_set_frame_callback(onFrame, onFrameReport);
  CachingAllocator::configureGlobal(options);
  configureThreadPool(options.numThreads);
  installTorchAllocators(options);
  useTorchThreadPool(options.numThreads);
}

PyObject *callCompiled(PyObject *fn, PyObject *args, PyObject *kwargs,
                       const CallOptions &options) {
  ActiveCall call{options, activeCall ? activeCall->suppressed : 0, activeCall,
                  activeCall ? activeCall->epoch : ++outermostCalls};
  activeCall = &call;
  dynafuse_hook_enter();
  PyObject *result = PyObject_Call(fn, args, kwargs);
  dynafuse_hook_exit();
  activeCall = call.outer;
  return result;
}

} // namespace dynafuse
