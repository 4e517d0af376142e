//===- Module.cpp - The dynafuse._C extension module ----------------------===//
//
// Entry points the Python package calls: running a function under the frame
// hook, configuring the compiler, handing over the op tables, statistics,
// and IR utilities for tests and tools. Plain C API: the module is small and
// the hook path must not pay for a binding layer.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Codegen/Backends.h"
#include "dynafuse/Frontend/FrameCompiler.h"
#include "dynafuse/Graph/GraphText.h"
#include "dynafuse/Graph/OpId.h"
#include "dynafuse/Loop/LoopText.h"
#include "dynafuse/Runtime/CachingAllocator.h"
#include "dynafuse/Runtime/CompileGraph.h"
#include "dynafuse/Runtime/DiskCache.h"
#include "dynafuse/Runtime/Executor.h"
#include "dynafuse/Support/Error.h"
#include "dynafuse/Support/Logging.h"
#include "dynafuse/Support/Options.h"

#include "RuntimeSettings.h"

#include <cstdlib>
#include <map>

using namespace dynafuse;

namespace {

PyObject *unsupportedError = nullptr;
PyObject *irError = nullptr;

/// The compiler's configuration: the Options this module read from the
/// environment when it was loaded (the only place the extension reads the
/// environment), updated by dynafuse.config through configure(). Every
/// compiled call is handed a pointer to it.
CompilerConfig &moduleConfig() {
  static auto *config = new CompilerConfig(); // Leaked: frames may outlive us.
  return *config;
}

/// The configurations of compile(options=...): the module's configuration
/// with other run-time settings (`options`: the module's options with
/// those), one per distinct settings and never freed (code
/// objects' caches and resume functions compiled under one keep pointing
/// at it).
const CompilerConfig *internedConfig(const Options &options) {
  static auto *configs = new std::map<std::string, CompilerConfig>();
  auto [it, inserted] =
      configs->try_emplace(runtimeSettingsKey(options), moduleConfig());
  if (inserted)
    it->second.options = options;
  return &it->second;
}

const char *const configCapsuleName = "dynafuse.CompilerConfig";

/// Log topics another configuration than the module's enables for the
/// length of one call, then the module's again.
class ScopedLogTopics {
public:
  explicit ScopedLogTopics(const CompilerConfig *config)
      : changed(config != &moduleConfig() &&
                config->options.logChannels !=
                    moduleConfig().options.logChannels) {
    if (changed)
      setLogTopics(config->options.logChannels);
  }
  ~ScopedLogTopics() {
    if (changed)
      setLogTopics(moduleConfig().options.logChannels);
  }

private:
  bool changed;
};

PyObject *pyCall(PyObject *, PyObject *args) {
  PyObject *fn, *callArgs, *callKwargs, *target = Py_None, *probe = Py_None;
  PyObject *dynamic = Py_None, *configCapsule = Py_None;
  const char *backend;
  int fullgraph;
  if (!PyArg_ParseTuple(args, "OO!Osp|OOOO", &fn, &PyTuple_Type, &callArgs,
                        &callKwargs, &backend, &fullgraph, &target, &probe,
                        &dynamic, &configCapsule))
    return nullptr;
  if (callKwargs == Py_None)
    callKwargs = nullptr;
  CallOptions options;
  try {
    BackendResolution resolved = resolveBackend(backend, [&] {
      return callUsesCuda(callArgs, callKwargs,
                          probe == Py_None ? nullptr : probe);
    });
    options.backend = resolved.choice;
    options.registeredBackend = resolved.registered;
  } catch (const Error &error) {
    PyErr_SetString(PyExc_ValueError, error.what());
    return nullptr;
  }
  options.fullgraph = fullgraph;
  options.dynamic = dynamic == Py_None ? CallOptions::DynamicShapes::Automatic
                    : PyObject_IsTrue(dynamic)
                        ? CallOptions::DynamicShapes::Always
                        : CallOptions::DynamicShapes::Never;
  options.target = target == Py_None ? nullptr : target;
  options.config = &moduleConfig();
  if (configCapsule != Py_None) {
    options.config = static_cast<const CompilerConfig *>(
        PyCapsule_GetPointer(configCapsule, configCapsuleName));
    if (!options.config)
      return nullptr;
  }
  ScopedLogTopics logTopics(options.config);
  return callCompiled(fn, callArgs, callKwargs, options);
}

/// compiler_config(settings): a configuration for call() with these
/// run-time settings (a dict by their Python names; RuntimeSettings.h) and
/// the module's others.
PyObject *pyCompilerConfig(PyObject *, PyObject *settings) {
  Options options = moduleConfig().options;
  if (!applyRuntimeSettings(settings, options))
    return nullptr;
  return PyCapsule_New(const_cast<CompilerConfig *>(internedConfig(options)),
                       configCapsuleName, nullptr);
}

/// configure(skip_prefixes, settings): the module's configuration from
/// dynafuse.config (settings: a dict of the run-time settings by name).
PyObject *pyConfigure(PyObject *, PyObject *args) {
  PyObject *skipPrefixes, *settings;
  if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &skipPrefixes,
                        &PyDict_Type, &settings))
    return nullptr;
  CompilerConfig &config = moduleConfig();
  Options options = config.options;
  if (!applyRuntimeSettings(settings, options))
    return nullptr;
  std::vector<std::string> prefixes;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(skipPrefixes); ++i) {
    PyObject *item = PyList_GET_ITEM(skipPrefixes, i);
    if (!PyUnicode_Check(item)) {
      PyErr_SetString(PyExc_TypeError, "skip prefixes must be strings");
      return nullptr;
    }
    prefixes.push_back(PyUnicode_AsUTF8(item));
  }
  config.options = options;
  config.skipPrefixes = std::move(prefixes);
  setLogTopics(options.logChannels);
  Py_RETURN_NONE;
}

PyObject *pySetOpTables(PyObject *, PyObject *args) {
  PyObject *functions, *methods, *stateQueries = nullptr, *polyfills = nullptr,
                                 *autocast = nullptr;
  if (!PyArg_ParseTuple(args, "O!O!|O!O!O!", &PyDict_Type, &functions,
                        &PyDict_Type, &methods, &PyDict_Type, &stateQueries,
                        &PyDict_Type, &polyfills, &PyDict_Type, &autocast))
    return nullptr;
  try {
    setOpTables(functions, methods, stateQueries, polyfills, autocast);
  } catch (const Error &error) {
    PyErr_SetString(PyExc_ValueError, error.what());
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyObject *pyStats(PyObject *, PyObject *) {
  const CompilerStats &stats = compilerStats();
  return Py_BuildValue(
      "{s:l,s:l,s:l,s:l,s:l,s:l,s:l,s:l,s:l,s:l,s:l,s:l,s:l,s:l,s:l,s:l,s:l,"
      "s:l,s:l,s:l,s:l,s:l,s:l}",
      "captures", stats.captures, "cache_hits", stats.cacheHits, "graph_breaks",
      stats.graphBreaks, "compile_failures", stats.compileFailures,
      "eager_frames", stats.eagerFrames, "recompile_limit_hits",
      stats.recompileLimitHits, "settled_frames", stats.settledFrames,
      "run_failures", stats.runFailures, "backend_compiles",
      stats.backendCompiles, "symbolic_captures", stats.symbolicCaptures,
      "disk_cache_hits", long(DiskCache::stats().hits), "weight_prepacks",
      stats.weightPrepacks, "batch_norm_folds", stats.batchNormFolds,
      "conv_residual_adds", stats.convResidualAdds, "convolution_choices",
      stats.convolutionChoices, "packed_gemms", stats.packedGemms,
      "linear_prepacks", stats.linearPrepacks, "onednn_products",
      stats.oneDnnProducts, "pointwise_conv_products",
      stats.pointwiseConvProducts, "allocation_plans", stats.allocationPlans,
      "unhooked_codes", stats.unhookedCodes, "in_place_updates",
      stats.inPlaceUpdates, "torch_call_gradients", stats.torchCallGradients);
}

PyObject *pyMemoryStats(PyObject *, PyObject *) {
  AllocatorStats stats = CachingAllocator::global().stats();
  return Py_BuildValue(
      "{s:n,s:n,s:n,s:L,s:L,s:L,s:L,s:L}", "bytes_in_use",
      Py_ssize_t(stats.bytesInUse), "bytes_cached",
      Py_ssize_t(stats.bytesCached), "bytes_mapped",
      Py_ssize_t(stats.bytesMapped), "hits", (long long)stats.hits, "misses",
      (long long)stats.misses, "trimmed", (long long)stats.trimmed,
      "planned_allocations", (long long)stats.plannedAllocations,
      "plan_conflicts", (long long)stats.planConflicts);
}

PyObject *pyGraphs(PyObject *, PyObject *) {
  PyObject *list = PyList_New(0);
  for (const CompiledGraphInfo &info : compiledGraphs()) {
    PyObject *guards = PyList_New(0);
    for (const std::string &guard : info.guards) {
      PyObject *text = PyUnicode_FromString(guard.c_str());
      PyList_Append(guards, text);
      Py_DECREF(text);
    }
    PyObject *item = Py_BuildValue(
        "{s:s,s:s,s:i,s:i,s:i,s:i,s:L,s:N,s:O,s:i,s:i}", "name",
        info.name.c_str(), "where", info.where.c_str(), "kernels",
        info.kernels, "distinct_kernels", info.distinctKernels,
        "extern_calls", info.externCalls, "ops", info.ops,
        "peak_intermediate_bytes", (long long)info.peakIntermediateBytes,
        "guards", guards, "training", info.training ? Py_True : Py_False,
        "backward_kernels", info.backwardKernels, "backward_extern_calls",
        info.backwardExternCalls);
    PyList_Append(list, item);
    Py_DECREF(item);
  }
  return list;
}

PyObject *listOfStrings(const std::vector<std::string> &texts) {
  PyObject *list = PyList_New(0);
  for (const std::string &text : texts) {
    PyObject *item = PyUnicode_FromString(text.c_str());
    PyList_Append(list, item);
    Py_DECREF(item);
  }
  return list;
}

PyObject *pyBreakReasons(PyObject *, PyObject *) {
  return listOfStrings(graphBreakReasons());
}

PyObject *pySettledReasons(PyObject *, PyObject *) {
  return listOfStrings(settledReasons());
}

PyObject *pyReset(PyObject *, PyObject *) {
  resetCompiledCaches();
  Py_RETURN_NONE;
}

/// Runs fn on IR text and converts dynafuse errors to dynafuse.IRError.
template <typename Fn> PyObject *textTransform(PyObject *args, Fn fn) {
  const char *text;
  if (!PyArg_ParseTuple(args, "s", &text))
    return nullptr;
  try {
    return PyUnicode_FromString(fn(std::string(text)).c_str());
  } catch (const Error &error) {
    PyErr_SetString(irError, error.what());
    return nullptr;
  }
}

PyObject *pyLowerGraph(PyObject *, PyObject *args) {
  return textTransform(args, [](const std::string &text) {
    std::unique_ptr<Graph> graph = parseGraph(text, "<graph>");
    return printLoopModule(
        compileGraph(*graph, GraphCompileOptions()).module());
  });
}

/// The run-time settings dynafuse.config starts from: what the environment
/// set when the module was loaded, by their Python names.
PyObject *pyEnvironmentOptions(PyObject *, PyObject *) {
  return runtimeSettingsOf(moduleConfig().options);
}

/// Every graph op's name, in Ops.def's order (the op definitions').
PyObject *pyGraphOps(PyObject *, PyObject *) {
  PyObject *list = PyList_New(0);
  for (size_t i = 0; i < opCount; ++i) {
    PyObject *name = PyUnicode_FromString(opName(static_cast<Op>(i)).c_str());
    PyList_Append(list, name);
    Py_DECREF(name);
  }
  return list;
}

/// Every DYNAFUSE_* variable as (name, default, meaning, Python name or
/// "").
PyObject *pyOptionVariables(PyObject *, PyObject *) {
  PyObject *list = PyList_New(0);
  for (const OptionVariable &variable : optionVariables()) {
    PyObject *item = Py_BuildValue("(ssss)", variable.name,
                                   variable.defaultValue, variable.meaning,
                                   variable.pythonName);
    PyList_Append(list, item);
    Py_DECREF(item);
  }
  return list;
}

PyObject *pyDecodeInstructions(PyObject *, PyObject *code) {
  return decodedInstructions(code);
}

PyObject *pyBackendChoices(PyObject *, PyObject *) {
  const std::vector<std::string> &choices = backendChoices();
  PyObject *tuple = PyTuple_New(Py_ssize_t(choices.size()));
  for (size_t i = 0; i < choices.size(); ++i)
    PyTuple_SET_ITEM(tuple, i, PyUnicode_FromString(choices[i].c_str()));
  return tuple;
}

PyObject *pyBackends(PyObject *, PyObject *) {
  std::vector<std::string> names = backendNames();
  PyObject *list = PyList_New(0);
  for (const std::string &name : names) {
    PyObject *item = PyUnicode_FromString(name.c_str());
    PyList_Append(list, item);
    Py_DECREF(item);
  }
  return list;
}

PyMethodDef methods[] = {
    {"call", pyCall, METH_VARARGS,
     "call(fn, args, kwargs, backend, fullgraph[, target_code[, "
     "first_tensor[, dynamic[, config]]]]): run fn under the frame hook; "
     "target_code is captured even inside torch's files; backend 'auto' "
     "looks at the tensor arguments, else calls first_tensor(); config: "
     "from compiler_config(), else the module's"},
    {"configure", pyConfigure, METH_VARARGS,
     "configure(skip_prefixes, settings): the run-time settings, a dict by "
     "their dynafuse.config names"},
    {"compiler_config", pyCompilerConfig, METH_O,
     "compiler_config(settings): a configuration with these run-time "
     "settings for one compiled callable, passed to call()"},
    {"set_op_tables", pySetOpTables, METH_VARARGS,
     "set_op_tables(functions, methods[, state_queries[, polyfills[, "
     "autocast]]])"},
    {"stats", pyStats, METH_NOARGS, "compiler counters"},
    {"memory_stats", pyMemoryStats, METH_NOARGS, "caching allocator counters"},
    {"reset", pyReset, METH_NOARGS, "forget all compiled code"},
    {"graphs", pyGraphs, METH_NOARGS, "what was compiled since the last reset"},
    {"settled_reasons", pySettledReasons, METH_NOARGS,
     "code objects settled into eager since reset(), with why"},
    {"break_reasons", pyBreakReasons, METH_NOARGS,
     "why frames ran eagerly since the last reset"},
    {"lower_graph", pyLowerGraph, METH_VARARGS,
     "graph IR text -> loop IR text"},
    {"backends", pyBackends, METH_NOARGS, "registered backend names"},
    {"decode_instructions", pyDecodeInstructions, METH_O,
     "code -> the capture decoder's [(offset, opname, arg, jump target)]"},
    {"backend_choices", pyBackendChoices, METH_NOARGS,
     "what compile(backend=...) accepts"},
    {"graph_ops", pyGraphOps, METH_NOARGS,
     "every graph op's name (include/dynafuse/Ops)"},
    {"environment_options", pyEnvironmentOptions, METH_NOARGS,
     "the run-time settings as the environment set them, by name"},
    {"option_variables", pyOptionVariables, METH_NOARGS,
     "every DYNAFUSE_* variable as (name, default, meaning, python name)"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef moduleDef = {PyModuleDef_HEAD_INIT, "dynafuse._C",
                         "Dynafuse's compiler core.", -1, methods};

} // namespace

PyMODINIT_FUNC PyInit__C() {
  PyObject *module = PyModule_Create(&moduleDef);
  if (!module)
    return nullptr;
  unsupportedError = PyErr_NewExceptionWithDoc(
      "dynafuse.Unsupported",
      "Raised with fullgraph=True when code cannot be captured as one graph.",
      PyExc_RuntimeError, nullptr);
  irError = PyErr_NewExceptionWithDoc("dynafuse.IRError",
                                      "Malformed or invalid IR text.",
                                      PyExc_ValueError, nullptr);
  PyModule_AddObject(module, "Unsupported", unsupportedError);
  Py_INCREF(unsupportedError);
  PyModule_AddObject(module, "IRError", irError);
  Py_INCREF(irError);
  PyModule_AddStringConstant(module, "version", DYNAFUSE_VERSION_STRING);
  PyModule_AddStringConstant(module, "torch_version", DYNAFUSE_TORCH_VERSION);
  registerAllBackends();
  // The extension's boundary: the one place it reads the environment.
  Options &options = moduleConfig().options;
  options = readOptions([](const char *name) { return std::getenv(name); });
  setLogTopics(options.logChannels);
  initializeFrameCompiler(unsupportedError, options);
  return module;
}
