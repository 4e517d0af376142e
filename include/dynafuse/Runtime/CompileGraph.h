//===- CompileGraph.h - Graph IR to runnable kernels, one chain -*- C++ -*-===//
//
// The only compile chain: a graph is lowered to loop IR (lowerGraph, its
// passes reported to an observer for dumps and --print-ir-after-all), then
// a backend compiles the kernels into a CompiledModule. The frame compiler,
// dynafuse-opt, dynafuse-run and the Python module all go through it.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_RUNTIME_COMPILEGRAPH_H
#define DYNAFUSE_RUNTIME_COMPILEGRAPH_H

#include "dynafuse/Lowering/LowerGraph.h"
#include "dynafuse/Runtime/Executor.h"

#include <memory>
#include <string>

namespace dynafuse {

struct GraphCompileOptions {
  /// Called after each named lowering pass with its text; may be empty.
  LoweringObserver observer;
  /// The backend that compiles the kernels: one the caller keeps (so its
  /// state is shared between modules), else one created by name; with
  /// neither the chain stops at loop IR.
  Backend *backend = nullptr;
  std::string backendName;
  /// What the backend is told (the folder its stages are dumped to).
  CompileOptions backendOptions;
};

struct CompiledGraph {
  /// The lowered module while no backend compiled it.
  LoopModule loopModule;
  /// The backend created by name (declared before `compiled`, so the
  /// module is destroyed before the backend that compiled it).
  std::unique_ptr<Backend> ownedBackend;
  /// The compiled module (owning the loop module), when a backend ran.
  std::unique_ptr<CompiledModule> compiled;

  const LoopModule &module() const {
    return compiled ? compiled->module() : loopModule;
  }
};

/// Lowers graph and, when options name a backend, compiles the result.
/// Throws Error when the graph cannot be lowered or compiled.
CompiledGraph compileGraph(const Graph &graph,
                           const GraphCompileOptions &options);

/// The backend half of the chain, for loop IR read from text: compiles
/// module with the backend options name (module is kept in the result).
CompiledGraph compileLoopModule(LoopModule module,
                                const GraphCompileOptions &options);

} // namespace dynafuse

#endif
