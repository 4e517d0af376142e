//===- LowerGraph.cpp - Graph IR to loop IR -------------------------------===//
//
// Steps: (1) make a buffer for each graph input and each distinct computed
// output; (2) group computed outputs by shape, one kernel per group; (3) in
// each kernel, emit every output element by recursively inlining its
// pointwise producers, memoized per (value, index) so shared producers are
// computed once per element.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Lowering/LowerGraph.h"

#include "dynafuse/Graph/OpRegistry.h"
#include "dynafuse/Lowering/PointwiseRules.h"

#include <algorithm>
#include <map>
#include <set>

namespace dynafuse {
namespace {

/// Index of an operand of shape `operandSizes` inside a result indexed by
/// `index` (right-aligned broadcasting).
std::vector<SymExpr> broadcastIndex(const std::vector<SymExpr> &index,
                                    const std::vector<SymExpr> &operandSizes) {
  size_t offset = index.size() - operandSizes.size();
  std::vector<SymExpr> result;
  for (size_t k = 0; k < operandSizes.size(); ++k)
    result.push_back(operandSizes[k] == SymExpr(1) ? SymExpr(0)
                                                   : index[offset + k]);
  return result;
}

std::string indexKey(const Value *value, const std::vector<SymExpr> &index) {
  std::string key = value->name + "[";
  for (const SymExpr &expr : index)
    key += expr.str() + ",";
  return key + "]";
}

class KernelEmitter {
public:
  KernelEmitter(Kernel &kernel, std::vector<Stmt> &block,
                const std::map<const Value *, std::string> &inputBuffers)
      : kernel(kernel), builder(kernel, block), inputBuffers(inputBuffers) {}

  int emit(const Value *value, const std::vector<SymExpr> &index) {
    std::string key = indexKey(value, index);
    auto found = memo.find(key);
    if (found != memo.end())
      return found->second;
    int result = value->producer ? emitNode(*value->producer, index)
                                 : emitInput(value, index);
    memo[key] = result;
    return result;
  }

  ScalarBuilder &scalars() { return builder; }

private:
  Kernel &kernel;
  ScalarBuilder builder;
  const std::map<const Value *, std::string> &inputBuffers;
  std::map<std::string, int> memo;

  int emitInput(const Value *value, const std::vector<SymExpr> &index) {
    const std::string &name = inputBuffers.at(value);
    int param = kernel.findParam(name);
    if (param < 0) {
      kernel.params.push_back(LoopBuffer{name, value->type});
      param = int(kernel.params.size()) - 1;
    }
    return builder.load(param, index);
  }

  int emitNode(const Node &node, const std::vector<SymExpr> &index) {
    const PointwiseRule *rule = findPointwiseRule(node.op);
    if (!rule)
      fail("no lowering for op '" + node.op + "'", node.location);
    PointwiseContext context{builder, node, operationType(node), {}};
    for (const Operand &operand : node.operands) {
      if (!operand.isValue()) {
        context.elements.push_back(-1);
        continue;
      }
      context.elements.push_back(emit(
          operand.value, broadcastIndex(index, operand.value->type.sizes)));
    }
    return builder.cast((*rule)(context),
                        computeType(node.result()->type.dtype));
  }
};

class GraphLowering {
public:
  explicit GraphLowering(const Graph &graph) : graph(graph) {}

  LoopModule run() {
    module.name = graph.name;
    module.hasProgram = true;
    declareInputs();
    declareOutputs();
    for (auto &group : groupsByShape)
      emitKernel(group.second);
    return std::move(module);
  }

private:
  const Graph &graph;
  LoopModule module;
  std::map<const Value *, std::string> bufferOf;
  std::set<std::string> usedNames;
  /// Computed outputs grouped by shape, in first-appearance order.
  std::vector<std::pair<std::string, std::vector<const Value *>>> groupsByShape;

  std::string uniqueName(const std::string &base) {
    std::string name = base;
    for (int suffix = 0; usedNames.count(name); ++suffix)
      name = base + "_" + std::to_string(suffix);
    usedNames.insert(name);
    return name;
  }

  void declareInputs() {
    std::set<std::string> symbols;
    for (const Value *input : graph.inputs) {
      bufferOf[input] = uniqueName(input->name);
      module.inputs.push_back(LoopBuffer{bufferOf[input], input->type});
      for (const SymExpr &size : input->type.sizes)
        size.collectSymbols(symbols);
      for (const SymExpr &stride : input->type.strides)
        stride.collectSymbols(symbols);
    }
    module.symbols.assign(symbols.begin(), symbols.end());
  }

  void declareOutputs() {
    for (const Value *output : graph.outputs) {
      if (!bufferOf.count(output))
        addComputedOutput(output);
      module.outputs.push_back(bufferOf[output]);
    }
  }

  void addComputedOutput(const Value *output) {
    TensorType type = output->type;
    type.strides.clear();
    bufferOf[output] = uniqueName("buf" + std::to_string(module.allocs.size()));
    module.allocs.push_back(LoopBuffer{bufferOf[output], type});
    std::string shape = type.str().substr(type.str().find('['));
    for (auto &group : groupsByShape) {
      if (group.first == shape) {
        group.second.push_back(output);
        return;
      }
    }
    groupsByShape.push_back({shape, {output}});
  }

  void emitKernel(const std::vector<const Value *> &outputs) {
    Kernel kernel;
    kernel.name = graph.name + "_k" + std::to_string(module.kernels.size());
    const std::vector<SymExpr> &sizes = outputs[0]->type.sizes;
    std::vector<SymExpr> index;
    for (size_t k = 0; k < sizes.size(); ++k)
      index.push_back(SymExpr::symbol("i" + std::to_string(k)));
    std::vector<Stmt> body;
    KernelEmitter emitter(kernel, body, bufferOf);
    for (const Value *output : outputs) {
      int value = emitter.emit(output, index);
      kernel.params.push_back(LoopBuffer{bufferOf[output], output->type});
      kernel.params.back().type.strides.clear();
      emitter.scalars().store(int(kernel.params.size()) - 1, index, value);
    }
    for (size_t k = sizes.size(); k-- > 0;)
      body = {Stmt::loop("i" + std::to_string(k), sizes[k], std::move(body))};
    kernel.body = std::move(body);
    kernel.symbols = symbolsOf(kernel);
    KernelCall call{kernel.name, {}};
    for (const LoopBuffer &param : kernel.params)
      call.args.push_back(param.name);
    module.calls.push_back(call);
    module.kernels.push_back(std::move(kernel));
  }

  std::vector<std::string> symbolsOf(const Kernel &kernel) {
    std::set<std::string> used;
    for (const LoopBuffer &param : kernel.params) {
      for (const SymExpr &size : param.type.sizes)
        size.collectSymbols(used);
      for (const SymExpr &stride : param.type.strides)
        stride.collectSymbols(used);
    }
    std::vector<std::string> symbols;
    for (const std::string &symbol : module.symbols)
      if (used.count(symbol))
        symbols.push_back(symbol);
    return symbols;
  }
};

} // namespace

LoopModule lowerGraph(const Graph &graph) { return GraphLowering(graph).run(); }

} // namespace dynafuse
