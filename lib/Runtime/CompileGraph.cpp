//===- CompileGraph.cpp - Graph IR to runnable kernels, one chain ---------===//
#include "dynafuse/Runtime/CompileGraph.h"


namespace dynafuse {

CompiledGraph compileLoopModule(LoopModule module,
                                const GraphCompileOptions &options) {
  CompiledGraph result;
  Backend *backend = options.backend;
  if (!backend && !options.backendName.empty()) {
    result.ownedBackend = createBackend(options.backendName);
    backend = result.ownedBackend.get();
  }
  if (!backend) {
    result.loopModule = std::move(module);
    return result;
  }
  result.compiled = std::make_unique<CompiledModule>(
      std::move(module), *backend, options.backendOptions);
  return result;
}

CompiledGraph compileGraph(const Graph &graph,
                           const GraphCompileOptions &options) {
  return compileLoopModule(lowerGraph(graph, options.observer), options);
}

} // namespace dynafuse
