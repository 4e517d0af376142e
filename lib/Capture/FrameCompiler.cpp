//===- FrameCompiler.cpp - Guarded cache of compiled frames ---------------===//
#include "FrameCompiler.h"

#include "EvalFrameHook.h"
#include "Guards.h"
#include "SymbolicInterpreter.h"
#include "TorchBridge.h"
#include "TorchThreadPool.h"
#include "dynafuse/Graph/GraphText.h"
#include "dynafuse/Loop/LoopText.h"
#include "dynafuse/Lowering/LowerGraph.h"
#include "dynafuse/Runtime/Executor.h"
#include "dynafuse/Runtime/CachingAllocator.h"
#include "dynafuse/Support/Logging.h"
#include "dynafuse/Support/ThreadPool.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <list>
#include <map>
#include <memory>

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
};

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

struct CacheEntry {
  CapturedFrame captured;
  /// The backend the entry was compiled for (part of its key).
  std::string backend;
  std::unique_ptr<CompiledModule> module;
  /// Per module output: the graph input it is (index), or -1 when computed.
  std::vector<int> outputInput;
  /// Per module output: when it is a view step of an input, the input and
  /// the view (returned sharing the input's memory, as eager does).
  struct InputView {
    int input = -1;
    std::vector<int64_t> sizes, strides;
    int64_t offset = 0;
  };
  std::vector<InputView> outputViews;
};

struct CodeCache {
  /// Shared: a run keeps its entry alive even if another thread resets the
  /// cache while the run's call_torch steps execute Python code (which may
  /// switch threads).
  std::list<std::shared_ptr<CacheEntry>> entries;
  /// Set for code the skip policy excludes, and after a graph break.
  bool skip = false;
  bool skippedFile = false;
  int compiles = 0;
};

PyObject *unsupportedErrorType = nullptr;
Py_ssize_t extraIndex = -1;
std::vector<CodeCache *> &allCaches() {
  static auto *caches = new std::vector<CodeCache *>(); // Leaked on purpose.
  return *caches;
}

void freeCodeCache(void *pointer) {
  // At interpreter shutdown compiled code may already be unusable: leak.
  if (!pointer || _Py_IsFinalizing())
    return;
  auto *cache = static_cast<CodeCache *>(pointer);
  auto &caches = allCaches();
  caches.erase(std::remove(caches.begin(), caches.end(), cache), caches.end());
  delete cache;
}

bool isSkippedFile(PyCodeObject *code, const CompilerConfig &config) {
  std::string file = PyUnicode_AsUTF8(code->co_filename);
  if (file.rfind("<frozen", 0) == 0)
    return true;
  for (const std::string &prefix : config.skipPrefixes)
    if (file.rfind(prefix, 0) == 0)
      return true;
  return false;
}

CodeCache *cacheOf(PyCodeObject *code, const CompilerConfig &config) {
  void *extra = nullptr;
  if (_PyCode_GetExtra(reinterpret_cast<PyObject *>(code), extraIndex, &extra) <
      0) {
    PyErr_Clear();
    return nullptr;
  }
  if (extra)
    return static_cast<CodeCache *>(extra);
  auto *cache = new CodeCache();
  cache->skippedFile = isSkippedFile(code, config);
  cache->skip = cache->skippedFile;
  if (_PyCode_SetExtra(reinterpret_cast<PyObject *>(code), extraIndex, cache) <
      0) {
    PyErr_Clear();
    delete cache;
    return nullptr;
  }
  allCaches().push_back(cache);
  return cache;
}

std::string codeName(PyCodeObject *code) {
  return PyUnicode_AsUTF8(code->co_qualname);
}

std::string codeWhere(PyCodeObject *code) {
  return std::string(PyUnicode_AsUTF8(code->co_filename)) + ":" +
         std::to_string(code->co_firstlineno);
}

/// One instance per registered backend, for the process (leaked).
Backend &backendNamed(const std::string &name) {
  static auto *backends = new std::map<std::string, std::unique_ptr<Backend>>();
  auto &slot = (*backends)[name];
  if (!slot)
    slot = createBackend(name);
  return *slot;
}

std::string sanitize(const std::string &name) {
  std::string clean;
  for (char c : name)
    clean += std::isalnum((unsigned char)c) ? c : '_';
  return clean;
}

/// The code's name and how many graphs this code object compiled before:
/// the same in every process that compiles the same code in the same
/// order, so kernel names, and with them the disk cache's keys (the IR
/// text), do not depend on what else the process compiled first.
std::string graphName(PyCodeObject *code, int compileIndex) {
  return sanitize(codeName(code)) + "_" + std::to_string(compileIndex);
}

void writeFile(const std::filesystem::path &path, const std::string &text) {
  std::ofstream(path) << text;
}

/// The folder that receives this graph's stages ("" when not dumping).
std::string dumpFolder(const CapturedFrame &captured,
                       const std::string &dumpDir) {
  if (dumpDir.empty())
    return "";
  // Two code objects may share a name (two lambdas): one folder each.
  static auto *used = new std::map<std::string, int>();
  int copies = (*used)[captured.graph->name]++;
  std::string folder =
      captured.graph->name + (copies ? "-" + std::to_string(copies + 1) : "");
  std::filesystem::path dir =
      std::filesystem::path(dumpDir) / folder;
  std::filesystem::create_directories(dir);
  writeFile(dir / "graph.graph", printGraph(*captured.graph));
  writeFile(dir / "replay.sh",
            "#!/bin/sh\n# Replays this graph's compilation stage by stage.\n"
            "cd \"$(dirname \"$0\")\"\n"
            "dynafuse-opt graph.graph --emit=loop --print-ir-after-all\n"
            "dynafuse-opt kernels.loop --emit=llvm\n");
  return dir.string();
}

LoopModule lowerForFrame(const Graph &graph, const std::string &dumpDir) {
  LoopModule module = lowerGraph(graph);
  if (!dumpDir.empty())
    writeFile(std::filesystem::path(dumpDir) / "kernels.loop",
              printLoopModule(module));
  return module;
}

CacheEntry::InputView inputViewOf(const LoopModule &module,
                                  const std::string &output) {
  CacheEntry::InputView view;
  const ProgramStep *step = module.definingStep(output);
  if (!step || step->kind != ProgramStep::Kind::View)
    return view;
  for (size_t i = 0; i < module.inputs.size(); ++i)
    if (module.inputs[i].name == step->source)
      view.input = int(i);
  if (view.input < 0)
    return view;
  for (const SymExpr &size : step->type.sizes)
    view.sizes.push_back(size.constant());
  for (const SymExpr &stride : step->type.effectiveStrides())
    view.strides.push_back(stride.constant());
  view.offset = step->offset.constant();
  return view;
}

/// CPU backends run host memory, the cuda backend device memory of
/// cuda:0: a graph whose buffers live elsewhere cannot be compiled for the
/// requested backend (the frame then runs eagerly, with this reason).
void requireDevicesOf(const LoopModule &module, const std::string &backend) {
  bool cuda = backend == "cuda";
  auto check = [&](const TensorType &type, const std::string &name) {
    bool ok = cuda ? type.device == "cuda:0" || type.device == "cuda"
                   : type.device == "cpu";
    if (!ok)
      throw Unsupported(
          "backend '" + backend + "' cannot run %" + name + " on " +
              type.device +
              (cuda ? " (it runs tensors on cuda:0)"
                    : " (CPU backends run CPU tensors; use backend='cuda' "
                      "or 'auto')"),
          Location{});
  };
  for (const LoopBuffer &input : module.inputs)
    check(input.type, input.name);
  for (const ProgramStep &step : module.steps) {
    if (step.kind == ProgramStep::Kind::Alloc)
      check(step.type, step.result);
    for (size_t i = 0; i < step.types.size(); ++i)
      check(step.types[i], step.results.at(i));
  }
}

std::unique_ptr<CacheEntry> compileFrame(DynafuseFrame *frame,
                                         const CallOptions &options,
                                         int compileIndex) {
  auto entry = std::make_unique<CacheEntry>();
  entry->backend = options.backend;
  entry->captured = captureFrame(frame, graphName(frame->code, compileIndex));
  ++compilerStats().captures;
  const Graph &graph = *entry->captured.graph;
  if (graph.nodes.empty())
    throw Unsupported("the frame computes nothing on tensors",
                      Location{PyUnicode_AsUTF8(frame->code->co_filename),
                               frame->code->co_firstlineno, 0});
  CompileOptions compileOptions = compileOptionsFrom(options.config->options);
  compileOptions.dumpDir =
      dumpFolder(entry->captured, options.config->options.dumpDir);
  LoopModule module = lowerForFrame(graph, compileOptions.dumpDir);
  logLine("compile", "compiled " + graph.name + " (" +
                         std::to_string(module.kernels.size()) +
                         " kernels) from " + codeWhere(frame->code));
  for (const std::string &output : module.outputs) {
    int input = -1;
    for (size_t i = 0; i < module.inputs.size(); ++i)
      if (module.inputs[i].name == output)
        input = int(i);
    entry->outputInput.push_back(input);
    entry->outputViews.push_back(inputViewOf(module, output));
  }
  CompiledGraphInfo info;
  info.name = graph.name;
  info.where = codeWhere(frame->code);
  info.kernels = int(module.kernels.size());
  info.ops = int(graph.nodes.size());
  for (const Guard &guard : entry->captured.guards)
    info.guards.push_back(guard.describe(entry->captured.sources));
  if (logEnabled("guards")) {
    std::string text = "guards of " + graph.name + ":";
    for (const std::string &guard : info.guards)
      text += "\n  " + guard;
    logLine("guards", text);
  }
  for (const ProgramStep &step : module.steps)
    info.externCalls += step.kind == ProgramStep::Kind::Extern;
  requireDevicesOf(module, options.backend);
  entry->module = std::make_unique<CompiledModule>(
      std::move(module), backendNamed(options.registeredBackend),
      compileOptions);
  info.peakIntermediateBytes = entry->module->peakIntermediateBytes({});
  compiledGraphs().push_back(info);
  return entry;
}

bool guardsHold(const CacheEntry &entry, SourceResolver &resolver,
                std::string *failed) {
  if (!globalStateMatches(entry.captured)) {
    if (failed)
      *failed = "grad mode or default dtype changed";
    return false;
  }
  for (const Guard &guard : entry.captured.guards) {
    if (!checkGuard(guard, resolver)) {
      if (failed)
        *failed = guard.describe(entry.captured.sources);
      return false;
    }
  }
  return true;
}

/// Storage and extern ops through ATen; keeps every tensor it makes so
/// outputs can be returned.
class TorchContext : public ExecutionContext {
public:
  char *allocate(const ProgramStep &step,
                 const std::vector<int64_t> &sizes) override {
    char *data = nullptr;
    if (!step.type.strides.empty()) {
      std::vector<int64_t> strides;
      for (const SymExpr &stride : step.type.strides)
        strides.push_back(stride.isConstant() ? stride.constant() : 0);
      tensors[step.result] = PyRef::steal(newStridedTensor(
          sizes, strides, step.type.dtype, step.type.device, &data));
      return data;
    }
    tensors[step.result] = PyRef::steal(
        newTensor(sizes, step.type.dtype, step.type.device, &data));
    return data;
  }
  TorchContext(const std::vector<TorchCall> &torchCalls, void *stream)
      : torchCalls(torchCalls), stream(stream) {}
  void *deviceStream() const override { return stream; }
  void runExtern(const ProgramStep &step, const std::vector<TensorArg> &args,
                 std::vector<TensorArg> &results) override {
    const std::string &device = step.types.at(0).device;
    if (step.op == "call_torch") {
      std::vector<PyRef> kept;
      runTorchCall(torchCallOf(step), args, results, device, kept);
      for (size_t i = 0; i < kept.size(); ++i)
        tensors[step.results[i]] = kept[i];
      return;
    }
    tensors[step.results.at(0)] = PyRef::steal(runExternOp(
        step.op, step.attributes, args, results[0], device, &results[0].data));
  }
  std::map<std::string, PyRef> tensors;

private:
  const TorchCall &torchCallOf(const ProgramStep &step) const {
    auto found = step.attributes.find("call");
    const int64_t *index = found == step.attributes.end()
                               ? nullptr
                               : std::get_if<int64_t>(&found->second);
    if (!index || *index < 0 || size_t(*index) >= torchCalls.size())
      fail("call_torch step %" + step.results.at(0) +
           " names no captured callable");
    return torchCalls[size_t(*index)];
  }
  const std::vector<TorchCall> &torchCalls;
  /// torch's current CUDA stream for the cuda backend, else null.
  void *stream;
};

PyObject *buildResult(const OutputSpec &spec, const CacheEntry &entry,
                      const std::vector<PyObject *> &inputs,
                      const TorchContext &context) {
  switch (spec.kind) {
  case OutputSpec::Kind::Constant:
    return PyRef(spec.constant).release();
  case OutputSpec::Kind::Input:
    return PyRef::borrow(inputs[spec.index]).release();
  case OutputSpec::Kind::GraphOutput: {
    int input = entry.outputInput[spec.index];
    if (input >= 0)
      return PyRef::borrow(inputs[input]).release();
    const CacheEntry::InputView &view = entry.outputViews[spec.index];
    if (view.input >= 0)
      return viewOfTensor(inputs[size_t(view.input)], view.sizes, view.strides,
                          view.offset);
    const std::string &name = entry.module->module().outputs[spec.index];
    return PyRef(context.tensors.at(name)).release();
  }
  case OutputSpec::Kind::Tuple: {
    PyObject *tuple = PyTuple_New(Py_ssize_t(spec.items.size()));
    for (size_t i = 0; i < spec.items.size(); ++i)
      PyTuple_SET_ITEM(tuple, i,
                       buildResult(spec.items[i], entry, inputs, context));
    return tuple;
  }
  case OutputSpec::Kind::Dict: {
    PyObject *dict = PyDict_New();
    for (size_t i = 0; i < spec.items.size(); ++i) {
      PyObject *value = buildResult(spec.items[i], entry, inputs, context);
      PyDict_SetItemString(dict, spec.keys[i].c_str(), value);
      Py_DECREF(value);
    }
    return dict;
  }
  case OutputSpec::Kind::List: {
    PyObject *list = PyList_New(Py_ssize_t(spec.items.size()));
    for (size_t i = 0; i < spec.items.size(); ++i)
      PyList_SET_ITEM(list, i,
                      buildResult(spec.items[i], entry, inputs, context));
    return list;
  }
  }
  return nullptr;
}

PyObject *runEntry(const CacheEntry &entry, SourceResolver &resolver) {
  std::vector<PyObject *> inputs;
  std::vector<TensorArg> args;
  args.resize(entry.captured.inputSources.size());
  for (size_t i = 0; i < args.size(); ++i) {
    PyObject *object = resolver.get(entry.captured.inputSources[i]);
    tensorView(object, &args[i].data, args[i].sizes, args[i].strides);
    inputs.push_back(object);
  }
  TorchContext context(entry.captured.torchCalls,
                       entry.backend == "cuda" ? currentTorchCudaStream()
                                               : nullptr);
  {
    PooledTorchAllocations pooled;
    entry.module->run(args, context);
  }
  for (const auto &[input, output] : entry.captured.writeBacks) {
    int source = entry.outputInput[size_t(output)];
    PyObject *value =
        source >= 0
            ? inputs[size_t(source)]
            : context.tensors.at(entry.module->module().outputs[size_t(output)])
                  .get();
    copyIntoTensor(inputs[size_t(input)], value);
  }
  return buildResult(entry.captured.result, entry, inputs, context);
}

PyObject *raiseUnsupported(const std::string &message) {
  PyErr_SetString(unsupportedErrorType, message.c_str());
  return nullptr;
}

/// Runs the most recently hit entry whose guards hold; *hit says whether
/// one did.
PyObject *runCachedEntry(CodeCache &cache, DynafuseFrame *frame,
                         const std::string &backend, bool *hit) {
  std::string firstFailure;
  for (auto it = cache.entries.begin(); it != cache.entries.end(); ++it) {
    std::shared_ptr<CacheEntry> entry = *it;
    if (entry->backend != backend)
      continue;
    SourceResolver resolver(entry->captured.sources, frame);
    std::string *failure = firstFailure.empty() ? &firstFailure : nullptr;
    if (!guardsHold(*entry, resolver, failure)) {
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
    *hit = true;
    ++compilerStats().cacheHits;
    return runEntry(*entry, resolver);
  }
  if (!cache.entries.empty())
    logLine("recompiles", "recompiling " + codeName(frame->code) + " at " +
                              codeWhere(frame->code) +
                              ": guard failed: " + firstFailure);
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
                       const CallOptions &options, int *handled) {
  bool hit = false;
  PyObject *result = runCachedEntry(cache, frame, options.backend, &hit);
  if (hit) {
    *handled = 1;
    return result;
  }
  if (reachedRecompileLimit(cache, frame->code,
                            options.config->options.recompileLimit))
    return nullptr;
  std::shared_ptr<CacheEntry> entry =
      compileFrame(frame, options, cache.compiles++);
  cache.entries.push_front(entry);
  SourceResolver resolver(entry->captured.sources, frame);
  result = runEntry(*entry, resolver);
  *handled = 1;
  return result;
}

/// Logs a failure, or raises it when fullgraph=True. Returns the frame
/// callback's result.
PyObject *fallBack(CodeCache &cache, DynafuseFrame *frame,
                   const CallOptions &options, const std::string &message,
                   int *handled) {
  if (options.fullgraph) {
    *handled = 1;
    return raiseUnsupported("fullgraph=True: " + message);
  }
  cache.skip = true;
  graphBreakReasons().push_back(message);
  logLine("graph_breaks", message + "; the frame runs eagerly");
  ++compilerStats().eagerFrames;
  return nullptr;
}

PyObject *onFrame(DynafuseFrame *frame, int *handled) {
  ActiveCall *call = activeCall;
  if (!call || call->suppressed)
    return nullptr;
  const CallOptions &options = call->options;
  CodeCache *cache = cacheOf(frame->code, *options.config);
  if (cache && cache->skippedFile &&
      reinterpret_cast<PyObject *>(frame->code) == options.target)
    cache->skippedFile = cache->skip = false;
  if (!cache || cache->skip)
    return nullptr;
  SuppressHook suppress(*call);
  try {
    return compiledCall(*cache, frame, options, handled);
  } catch (const Unsupported &error) {
    ++compilerStats().graphBreaks;
    return fallBack(*cache, frame, options,
                    "graph break in " + codeName(frame->code) + ": " +
                        error.what(),
                    handled);
  } catch (const std::exception &error) {
    ++compilerStats().compileFailures;
    if (PyErr_Occurred())
      PyErr_Clear();
    *handled = 0;
    return fallBack(*cache, frame, options,
                    "compiling " + codeName(frame->code) + " at " +
                        codeWhere(frame->code) + " failed: " + error.what(),
                    handled);
  }
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

CompilerStats &compilerStats() {
  static CompilerStats stats;
  return stats;
}

void resetCompiledCaches() {
  for (CodeCache *cache : allCaches()) {
    cache->entries.clear();
    cache->skip = cache->skippedFile;
    cache->compiles = 0;
  }
  compilerStats() = CompilerStats();
  compiledGraphs().clear();
  graphBreakReasons().clear();
}

void initializeFrameCompiler(PyObject *unsupportedError,
                             const Options &options) {
  unsupportedErrorType = unsupportedError;
  extraIndex = _PyEval_RequestCodeExtraIndex(freeCodeCache);
  dynafuse_set_frame_callback(onFrame);
  CachingAllocator::configureGlobal(options);
  configureThreadPool(options.numThreads);
  installTorchAllocators(options);
  useTorchThreadPool(options.numThreads);
}

PyObject *callCompiled(PyObject *fn, PyObject *args, PyObject *kwargs,
                       const CallOptions &options) {
  ActiveCall call{options, activeCall ? activeCall->suppressed : 0,
                  activeCall};
  activeCall = &call;
  dynafuse_hook_enter();
  PyObject *result = PyObject_Call(fn, args, kwargs);
  dynafuse_hook_exit();
  activeCall = call.outer;
  return result;
}

} // namespace dynafuse
