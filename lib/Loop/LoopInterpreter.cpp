//===- LoopInterpreter.cpp - Reference execution of loop IR ---------------===//
#include "dynafuse/Loop/LoopInterpreter.h"

#include "dynafuse/Loop/ScalarSemantics.h"
#include "dynafuse/Support/Error.h"
#include "dynafuse/Support/IndexErrors.h"

#include <map>
#include <set>

namespace dynafuse {
namespace {

class LoopKernelInterpreter {
public:
  LoopKernelInterpreter(const Kernel &kernel, char *const *buffers,
                    const int64_t *symbols)
      : kernel(kernel), buffers(buffers), values(kernel.instrs.size()) {
    for (size_t j = 0; j < kernel.symbols.size(); ++j)
      bindings[kernel.symbols[j]] = symbols[j];
    for (const LoopBuffer &param : kernel.params) {
      std::vector<int64_t> strides, sizes;
      for (const SymExpr &stride : param.type.effectiveStrides())
        strides.push_back(stride.evaluate(bindings));
      for (const SymExpr &size : param.type.sizes)
        sizes.push_back(size.evaluate(bindings));
      paramStrides.push_back(strides);
      paramSizes.push_back(sizes);
    }
    for (size_t i = 0; i < kernel.instrs.size(); ++i)
      if (!kernel.instrs[i].name.empty())
        idByName["%" + kernel.instrs[i].name] = int(i);
  }

  void run() { runBlock(kernel.body); }

private:
  const Kernel &kernel;
  char *const *buffers;
  std::vector<ScalarValue> values;
  std::map<std::string, int64_t> bindings;
  std::map<std::string, int> idByName;
  std::vector<std::vector<int64_t>> paramStrides;
  std::vector<std::vector<int64_t>> paramSizes;

  void runBlock(const std::vector<Stmt> &block) {
    for (const Stmt &stmt : block) {
      switch (stmt.kind) {
      case Stmt::Kind::Instr:
        execute(kernel.instrs[stmt.instr], stmt.instr);
        break;
      case Stmt::Kind::For: {
        int64_t extent = stmt.extent.evaluate(bindings);
        for (int64_t i = 0; i < extent; ++i) {
          bindings[stmt.var] = i;
          runBlock(stmt.body);
        }
        bindings.erase(stmt.var);
        break;
      }
      case Stmt::Kind::Reduce:
        runReduce(stmt);
        break;
      }
    }
  }

  void runReduce(const Stmt &stmt) {
    DType type = kernel.instrs[stmt.yields[0]].type;
    ReduceState state = reduceIdentity(stmt.reduceKind, type);
    reduceOver(stmt, 0, state, type);
    reduceFinish(stmt.reduceKind, type, state);
    values[stmt.results[0]] = state.value;
    if (stmt.results.size() > 1)
      values[stmt.results[1]] = state.position;
    for (const std::string &var : stmt.vars)
      bindings.erase(var);
  }

  void reduceOver(const Stmt &stmt, size_t dim, ReduceState &state,
                  DType type) {
    if (dim == stmt.vars.size()) {
      runBlock(stmt.body);
      ScalarValue position =
          stmt.yields.size() > 1 ? values[stmt.yields[1]] : ScalarValue();
      reduceCombine(stmt.reduceKind, type, state, values[stmt.yields[0]],
                    position);
      return;
    }
    int64_t extent = stmt.extents[dim].evaluate(bindings);
    for (int64_t i = 0; i < extent; ++i) {
      bindings[stmt.vars[dim]] = i;
      reduceOver(stmt, dim + 1, state, type);
    }
  }

  /// Binds the "%value" symbols an expression uses to their current values.
  void bindValues(const SymExpr &expr) {
    std::set<std::string> used;
    expr.collectSymbols(used);
    for (const std::string &symbol : used)
      if (symbol[0] == '%')
        bindings[symbol] = values[idByName.at(symbol)].i;
  }

  /// Null when an indirect index is out of bounds (reported).
  char *address(const Instr &instr) {
    const LoopBuffer &param = kernel.params[instr.buffer];
    int64_t offset = 0;
    for (size_t k = 0; k < instr.index.size(); ++k) {
      bindValues(instr.index[k]);
      int64_t index = instr.index[k].evaluate(bindings);
      bool indirect = isIndirectIndex(instr.index[k]);
      if (indirect && (index < 0 || index >= paramSizes[instr.buffer][k])) {
        dynafuse_index_error(index, paramSizes[instr.buffer][k]);
        return nullptr;
      }
      offset += index * paramStrides[instr.buffer][k];
    }
    return buffers[instr.buffer] +
           offset * int64_t(dtypeSize(param.type.dtype));
  }

  ScalarValue arg(const Instr &instr, int i) { return values[instr.args[i]]; }
  DType argType(const Instr &instr, int i) {
    return kernel.instrs[instr.args[i]].type;
  }

  void execute(const Instr &instr, int id) {
    switch (instr.op) {
    case ScalarOp::Load:
      values[id] = load(instr);
      return;
    case ScalarOp::Store:
      if (char *target = address(instr))
        storeElement(kernel.params[instr.buffer].type.dtype, target,
                     arg(instr, 0));
      return;
    case ScalarOp::Const:
      values[id] = constantValue(instr);
      return;
    case ScalarOp::Index:
      bindValues(instr.index[0]);
      values[id] = ScalarValue{0, instr.index[0].evaluate(bindings)};
      return;
    case ScalarOp::Cast:
      values[id] = evalCast(argType(instr, 0), instr.type, arg(instr, 0));
      return;
    case ScalarOp::Select:
      values[id] = arg(instr, 0).i ? arg(instr, 1) : arg(instr, 2);
      return;
    case ScalarOp::Random:
      values[id] = ScalarValue{counterRandom(arg(instr, 0).i, arg(instr, 1).i), 0};
      return;
    case ScalarOp::Reduced:
      return;
    default:
      break;
    }
    DType type = argType(instr, 0);
    values[id] = scalarOpArity(instr.op) == 1
                     ? evalUnary(instr.op, type, arg(instr, 0))
                     : evalBinary(instr.op, type, arg(instr, 0), arg(instr, 1));
  }

  ScalarValue load(const Instr &instr) {
    if (!instr.args.empty() && !arg(instr, 0).i)
      return ScalarValue();
    char *source = address(instr);
    if (!source)
      return ScalarValue();
    return loadElement(kernel.params[instr.buffer].type.dtype, source);
  }
};

} // namespace

void interpretLoopKernel(const Kernel &kernel, char *const *buffers,
                     const int64_t *symbols) {
  LoopKernelInterpreter(kernel, buffers, symbols).run();
}

} // namespace dynafuse
