//===- LoopVerifier.cpp - Structural and type checks of loop IR -----------===//
#include "dynafuse/Loop/LoopText.h"

#include <algorithm>
#include <set>

namespace dynafuse {
namespace {

class KernelVerifier {
public:
  explicit KernelVerifier(const Kernel &kernel) : kernel(kernel) {}

  void run() {
    std::set<std::string> names;
    for (const LoopBuffer &param : kernel.params) {
      if (!names.insert(param.name).second)
        fail("kernel @" + kernel.name + ": duplicate buffer '%" + param.name +
             "'");
      checkSymbols(param.type.sizes, "buffer %" + param.name, {});
      checkSymbols(param.type.strides, "buffer %" + param.name, {});
    }
    for (const Instr &instr : kernel.instrs)
      if (!instr.name.empty() && !names.insert(instr.name).second)
        error(instr.where, "duplicate name '%" + instr.name + "'");
    std::vector<bool> visible(kernel.instrs.size(), false);
    walk(kernel.body, visible, {});
  }

private:
  const Kernel &kernel;
  std::set<int> seen;

  [[noreturn]] void error(const Location &where, const std::string &message) {
    fail("kernel @" + kernel.name + ": " + message, where);
  }

  void checkSymbols(const std::vector<SymExpr> &exprs, const std::string &what,
                    const std::vector<std::string> &loopVars,
                    const Location &where = {}) {
    std::set<std::string> used;
    for (const SymExpr &expr : exprs)
      expr.collectSymbols(used);
    for (const std::string &symbol : used) {
      bool known =
          std::find(kernel.symbols.begin(), kernel.symbols.end(), symbol) !=
              kernel.symbols.end() ||
          std::find(loopVars.begin(), loopVars.end(), symbol) != loopVars.end();
      if (!known)
        error(where, what + " uses '" + symbol +
                         "', which is neither a kernel symbol nor an "
                         "enclosing loop variable");
    }
  }

  void walk(const std::vector<Stmt> &block, std::vector<bool> visible,
            std::vector<std::string> loopVars) {
    for (const Stmt &stmt : block) {
      if (stmt.kind == Stmt::Kind::For) {
        checkLoop(stmt, loopVars);
        std::vector<std::string> inner = loopVars;
        inner.push_back(stmt.var);
        walk(stmt.body, visible, inner);
        continue;
      }
      if (stmt.instr < 0 || stmt.instr >= int(kernel.instrs.size()))
        error(stmt.where, "statement refers to a missing instruction");
      if (!seen.insert(stmt.instr).second)
        error(stmt.where, "instruction placed twice");
      const Instr &instr = kernel.instrs[stmt.instr];
      for (int arg : instr.args)
        if (arg < 0 || arg >= int(visible.size()) || !visible[arg])
          error(instr.where, "operand is not defined in an enclosing scope");
      checkInstr(instr, loopVars);
      visible[stmt.instr] = true;
    }
  }

  void checkLoop(const Stmt &loop, const std::vector<std::string> &loopVars) {
    bool clash = std::find(loopVars.begin(), loopVars.end(), loop.var) !=
                     loopVars.end() ||
                 std::find(kernel.symbols.begin(), kernel.symbols.end(),
                           loop.var) != kernel.symbols.end();
    if (clash)
      error(loop.where, "loop variable '" + loop.var + "' shadows a name");
    checkSymbols({loop.extent}, "loop extent", loopVars, loop.where);
  }

  DType argType(const Instr &instr, int i) {
    return kernel.instrs[instr.args[i]].type;
  }

  void checkInstr(const Instr &instr, const std::vector<std::string> &vars) {
    const std::string op = scalarOpName(instr.op);
    if (int(instr.args.size()) != scalarOpArity(instr.op))
      error(instr.where, "'" + op + "' has the wrong number of operands");
    if (instr.op != ScalarOp::Store && computeType(instr.type) != instr.type)
      error(instr.where, "scalar values cannot have storage type " +
                             std::string(dtypeName(instr.type)));
    if (instr.op == ScalarOp::Load || instr.op == ScalarOp::Store) {
      checkAccess(instr, vars);
      return;
    }
    if (instr.op == ScalarOp::Const || instr.op == ScalarOp::Cast)
      return;
    if (instr.op == ScalarOp::Select) {
      if (argType(instr, 0) != DType::Bool)
        error(instr.where, "select needs a bool condition");
      if (argType(instr, 1) != instr.type || argType(instr, 2) != instr.type)
        error(instr.where, "select operands must have the result type");
      return;
    }
    for (size_t i = 1; i < instr.args.size(); ++i)
      if (argType(instr, int(i)) != argType(instr, 0))
        error(instr.where, "'" + op + "' operands have different types");
    DType operand = argType(instr, 0);
    DType expected = isComparison(instr.op) ? DType::Bool : operand;
    if (instr.type != expected)
      error(instr.where, "'" + op + "' must produce " + dtypeName(expected));
    if (isFloatMath(instr.op) && !isFloating(operand))
      error(instr.where, "'" + op + "' needs a floating operand");
    bool logical = instr.op == ScalarOp::And || instr.op == ScalarOp::Or ||
                   instr.op == ScalarOp::Not;
    if (logical && operand != DType::Bool)
      error(instr.where, "'" + op + "' needs bool operands");
  }

  void checkAccess(const Instr &instr, const std::vector<std::string> &vars) {
    if (instr.buffer < 0 || instr.buffer >= int(kernel.params.size()))
      error(instr.where, "access to a missing buffer");
    const LoopBuffer &buffer = kernel.params[instr.buffer];
    if (instr.index.size() != buffer.type.rank())
      error(instr.where, "buffer %" + buffer.name + " has rank " +
                             std::to_string(buffer.type.rank()) + " but " +
                             std::to_string(instr.index.size()) +
                             " indices are given");
    checkSymbols(instr.index, "index", vars, instr.where);
    DType valueType = computeType(buffer.type.dtype);
    if (instr.op == ScalarOp::Load && instr.type != valueType)
      error(instr.where, "load from %" + buffer.name + " must produce " +
                             dtypeName(valueType));
    if (instr.op == ScalarOp::Store && argType(instr, 0) != valueType)
      error(instr.where, "store to %" + buffer.name + " needs a " +
                             dtypeName(valueType) + " value");
  }
};

void verifyProgram(const LoopModule &module) {
  std::set<std::string> names;
  for (const LoopBuffer &buffer : module.inputs)
    if (!names.insert(buffer.name).second)
      fail("module @" + module.name + ": duplicate buffer %" + buffer.name);
  for (const LoopBuffer &buffer : module.allocs)
    if (!names.insert(buffer.name).second)
      fail("module @" + module.name + ": duplicate buffer %" + buffer.name);
  for (const KernelCall &call : module.calls) {
    const Kernel *kernel = module.findKernel(call.kernel);
    if (!kernel)
      fail("module @" + module.name + " calls unknown kernel @" + call.kernel);
    if (call.args.size() != kernel->params.size())
      fail("call of @" + call.kernel + " passes " +
           std::to_string(call.args.size()) + " buffers to " +
           std::to_string(kernel->params.size()) + " parameters");
    for (size_t i = 0; i < call.args.size(); ++i) {
      const LoopBuffer *buffer = module.findBuffer(call.args[i]);
      if (!buffer)
        fail("call of @" + call.kernel + " passes unknown buffer %" +
             call.args[i]);
      if (buffer->type != kernel->params[i].type)
        fail("call of @" + call.kernel + " passes %" + call.args[i] +
             " of type " + buffer->type.str() + " to a parameter of type " +
             kernel->params[i].type.str());
    }
  }
  for (const std::string &output : module.outputs)
    if (!module.findBuffer(output))
      fail("module @" + module.name + " returns unknown buffer %" + output);
}

} // namespace

void verifyKernel(const Kernel &kernel) { KernelVerifier(kernel).run(); }

void verifyLoopModule(const LoopModule &module) {
  for (const Kernel &kernel : module.kernels)
    verifyKernel(kernel);
  if (module.hasProgram)
    verifyProgram(module);
}

} // namespace dynafuse
