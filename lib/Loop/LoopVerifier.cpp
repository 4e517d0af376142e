//===- LoopVerifier.cpp - Structural and type checks of loop IR -----------===//
#include "dynafuse/Loop/LoopText.h"

#include <algorithm>
#include <map>
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
      checkSymbols(param.type.sizes, "buffer %" + param.name, Scope());
      checkSymbols(param.type.strides, "buffer %" + param.name, Scope());
    }
    for (size_t i = 0; i < kernel.instrs.size(); ++i) {
      const Instr &instr = kernel.instrs[i];
      if (instr.name.empty())
        continue;
      if (!names.insert(instr.name).second)
        error(instr.where, "duplicate name '%" + instr.name + "'");
      idByName[instr.name] = int(i);
    }
    Scope scope;
    scope.visible.assign(kernel.instrs.size(), false);
    walk(kernel.body, scope);
  }

private:
  /// What a statement may refer to: values defined before it in enclosing
  /// blocks, and the variables of enclosing loops and reductions.
  struct Scope {
    std::vector<bool> visible;
    std::vector<std::string> vars;
    bool hasVar(const std::string &name) const {
      return std::find(vars.begin(), vars.end(), name) != vars.end();
    }
  };

  const Kernel &kernel;
  std::set<int> seen;
  std::map<std::string, int> idByName;

  [[noreturn]] void error(const Location &where, const std::string &message) {
    fail("kernel @" + kernel.name + ": " + message, where);
  }

  bool isKernelSymbol(const std::string &name) const {
    return std::find(kernel.symbols.begin(), kernel.symbols.end(), name) !=
           kernel.symbols.end();
  }

  void checkSymbols(const std::vector<SymExpr> &exprs, const std::string &what,
                    const Scope &scope, const Location &where = {}) {
    std::set<std::string> used;
    for (const SymExpr &expr : exprs)
      expr.collectSymbols(used);
    for (const std::string &symbol : used) {
      if (symbol[0] == '%') {
        checkIndirect(symbol, what, scope, where);
        continue;
      }
      if (!isKernelSymbol(symbol) && !scope.hasVar(symbol))
        error(where, what + " uses '" + symbol +
                         "', which is neither a kernel symbol nor an "
                         "enclosing loop variable");
    }
  }

  /// "%name" in an index: an integer value visible here.
  void checkIndirect(const std::string &symbol, const std::string &what,
                     const Scope &scope, const Location &where) {
    auto found = idByName.find(symbol.substr(1));
    if (found == idByName.end() || scope.visible.empty() ||
        !scope.visible[found->second])
      error(where, what + " uses '" + symbol +
                       "', which is not a value defined before it");
    DType type = kernel.instrs[found->second].type;
    if (type != DType::I64 && type != DType::I32)
      error(where, what + " uses '" + symbol + "', which is not an integer");
  }

  void checkNewVar(const std::string &var, const Scope &scope,
                   const Location &where) {
    if (scope.hasVar(var) || isKernelSymbol(var))
      error(where, "loop variable '" + var + "' shadows a name");
  }

  void walk(const std::vector<Stmt> &block, Scope scope) {
    for (const Stmt &stmt : block) {
      switch (stmt.kind) {
      case Stmt::Kind::For: {
        checkNewVar(stmt.var, scope, stmt.where);
        checkSymbols({stmt.extent}, "loop extent", scope, stmt.where);
        Scope inner = scope;
        inner.vars.push_back(stmt.var);
        walk(stmt.body, inner);
        break;
      }
      case Stmt::Kind::Reduce:
        walkReduce(stmt, scope);
        break;
      case Stmt::Kind::Instr:
        walkInstr(stmt, scope);
        break;
      }
    }
  }

  void place(int id, const Location &where) {
    if (id < 0 || id >= int(kernel.instrs.size()))
      error(where, "statement refers to a missing instruction");
    if (!seen.insert(id).second)
      error(where, "instruction placed twice");
  }

  void walkInstr(const Stmt &stmt, Scope &scope) {
    place(stmt.instr, stmt.where);
    const Instr &instr = kernel.instrs[stmt.instr];
    for (int arg : instr.args)
      if (arg < 0 || arg >= int(scope.visible.size()) || !scope.visible[arg])
        error(instr.where, "operand is not defined in an enclosing scope");
    if (instr.op == ScalarOp::Reduced)
      error(instr.where, "'reduced' values come only from reduce statements");
    checkInstr(instr, scope);
    scope.visible[stmt.instr] = true;
  }

  void walkReduce(const Stmt &stmt, Scope &scope) {
    Scope inner = scope;
    for (size_t k = 0; k < stmt.vars.size(); ++k) {
      checkNewVar(stmt.vars[k], inner, stmt.where);
      checkSymbols({stmt.extents[k]}, "reduction extent", scope, stmt.where);
      inner.vars.push_back(stmt.vars[k]);
    }
    if (stmt.vars.size() != stmt.extents.size() || stmt.vars.empty())
      error(stmt.where, "a reduction needs one extent per variable");
    walkBody(stmt, inner);
    const std::string kind = reduceKindName(stmt.reduceKind);
    if (int(stmt.yields.size()) != reduceYieldCount(stmt.reduceKind) ||
        stmt.results.size() != stmt.yields.size())
      error(stmt.where, "reduce " + kind + " yields and defines " +
                            std::to_string(reduceYieldCount(stmt.reduceKind)) +
                            " values");
    checkReduceTypes(stmt, kind);
    for (int result : stmt.results) {
      place(result, stmt.where);
      if (kernel.instrs[result].op != ScalarOp::Reduced)
        error(stmt.where, "reduce results must be 'reduced' values");
      scope.visible[result] = true;
    }
  }

  void walkBody(const Stmt &stmt, Scope &inner) {
    // The body's values are visible to its yields only.
    Scope bodyScope = inner;
    for (const Stmt &child : stmt.body) {
      std::vector<Stmt> single = {child};
      walk(single, bodyScope);
      markDefined(child, bodyScope);
    }
    for (int yield : stmt.yields)
      if (yield < 0 || yield >= int(bodyScope.visible.size()) ||
          !bodyScope.visible[yield])
        error(stmt.where, "yielded value is not defined in the reduction");
  }

  void markDefined(const Stmt &stmt, Scope &scope) {
    if (stmt.kind == Stmt::Kind::Instr)
      scope.visible[stmt.instr] = true;
    for (int result : stmt.results)
      scope.visible[result] = true;
  }

  void checkReduceTypes(const Stmt &stmt, const std::string &kind) {
    DType value = kernel.instrs[stmt.yields[0]].type;
    bool logical = stmt.reduceKind == ReduceKind::Any ||
                   stmt.reduceKind == ReduceKind::All;
    if (logical != (value == DType::Bool))
      error(stmt.where, "reduce " + kind +
                            (logical ? " needs bool values"
                                     : " does not take bool values"));
    if (stmt.yields.size() == 2 &&
        kernel.instrs[stmt.yields[1]].type != DType::I64)
      error(stmt.where, "reduce " + kind + " needs an i64 position");
    for (size_t i = 0; i < stmt.results.size(); ++i)
      if (kernel.instrs[stmt.results[i]].type !=
          kernel.instrs[stmt.yields[i]].type)
        error(stmt.where, "reduce " + kind +
                              " results must have the types "
                              "of the yielded values");
  }

  DType argType(const Instr &instr, int i) {
    return kernel.instrs[instr.args[i]].type;
  }

  void checkInstr(const Instr &instr, const Scope &scope) {
    const std::string op = scalarOpName(instr.op);
    bool maskedLoad = instr.op == ScalarOp::Load && instr.args.size() == 1;
    if (int(instr.args.size()) != scalarOpArity(instr.op) && !maskedLoad)
      error(instr.where, "'" + op + "' has the wrong number of operands");
    if (instr.op != ScalarOp::Store && computeType(instr.type) != instr.type)
      error(instr.where, "scalar values cannot have storage type " +
                             std::string(dtypeName(instr.type)));
    if (instr.op == ScalarOp::Load || instr.op == ScalarOp::Store) {
      checkAccess(instr, scope);
      return;
    }
    if (instr.op == ScalarOp::Index) {
      if (instr.index.size() != 1 || instr.type != DType::I64)
        error(instr.where, "'index' takes one expression and gives i64");
      checkSymbols(instr.index, "index", scope, instr.where);
      return;
    }
    if (instr.op == ScalarOp::Const || instr.op == ScalarOp::Cast)
      return;
    if (instr.op == ScalarOp::Random) {
      if (argType(instr, 0) != DType::I64 || argType(instr, 1) != DType::I64 ||
          (instr.type != DType::F32 && instr.type != DType::F64))
        error(instr.where,
              "'random' takes an i64 key and counter and gives f32 or f64");
      return;
    }
    if (instr.op == ScalarOp::Select) {
      if (argType(instr, 0) != DType::Bool)
        error(instr.where, "select needs a bool condition");
      if (argType(instr, 1) != instr.type || argType(instr, 2) != instr.type)
        error(instr.where, "select operands must have the result type");
      return;
    }
    checkArithmetic(instr, op);
  }

  void checkArithmetic(const Instr &instr, const std::string &op) {
    for (size_t i = 1; i < instr.args.size(); ++i)
      if (argType(instr, int(i)) != argType(instr, 0))
        error(instr.where, "'" + op + "' operands have different types");
    DType operand = argType(instr, 0);
    DType expected = isComparison(instr.op) ? DType::Bool : operand;
    if (instr.type != expected)
      error(instr.where, "'" + op + "' must produce " + dtypeName(expected));
    if (isFloatMath(instr.op) && !isFloating(operand))
      error(instr.where, "'" + op + "' needs a floating operand");
    if (isBitwise(instr.op) && isFloating(operand))
      error(instr.where, "'" + op + "' needs integer or bool operands");
    bool logical = instr.op == ScalarOp::And || instr.op == ScalarOp::Or ||
                   instr.op == ScalarOp::Not || instr.op == ScalarOp::Xor;
    if (logical && operand != DType::Bool)
      error(instr.where, "'" + op + "' needs bool operands");
  }

  void checkAccess(const Instr &instr, const Scope &scope) {
    if (instr.buffer < 0 || instr.buffer >= int(kernel.params.size()))
      error(instr.where, "access to a missing buffer");
    const LoopBuffer &buffer = kernel.params[instr.buffer];
    if (instr.index.size() != buffer.type.rank())
      error(instr.where, "buffer %" + buffer.name + " has rank " +
                             std::to_string(buffer.type.rank()) + " but " +
                             std::to_string(instr.index.size()) +
                             " indices are given");
    checkSymbols(instr.index, "index", scope, instr.where);
    DType valueType = computeType(buffer.type.dtype);
    if (instr.op == ScalarOp::Load && instr.type != valueType)
      error(instr.where, "load from %" + buffer.name + " must produce " +
                             dtypeName(valueType));
    if (instr.op == ScalarOp::Load && instr.args.size() == 1 &&
        argType(instr, 0) != DType::Bool)
      error(instr.where, "a load mask must be bool");
    if (instr.op == ScalarOp::Store && argType(instr, 0) != valueType)
      error(instr.where, "store to %" + buffer.name + " needs a " +
                             dtypeName(valueType) + " value");
  }
};

class ProgramVerifier {
public:
  explicit ProgramVerifier(const LoopModule &module) : module(module) {}

  void run() {
    for (const LoopBuffer &buffer : module.inputs)
      define(buffer.name, buffer.type);
    for (const ProgramStep &step : module.steps)
      check(step);
    for (const std::string &output : module.outputs)
      use(output, "returns");
  }

private:
  const LoopModule &module;
  std::map<std::string, TensorType> defined;
  std::set<std::string> allocations;

  [[noreturn]] void error(const std::string &message) {
    fail("module @" + module.name + ": " + message);
  }

  void define(const std::string &name, const TensorType &type) {
    if (!defined.insert({name, type}).second)
      error("duplicate buffer %" + name);
  }

  const TensorType &use(const std::string &name, const std::string &what) {
    auto found = defined.find(name);
    if (found == defined.end())
      error(what + " unknown buffer %" + name);
    return found->second;
  }

  void check(const ProgramStep &step) {
    switch (step.kind) {
    case ProgramStep::Kind::Alloc:
      if (!step.reuse.empty() && !allocations.count(step.reuse))
        error("%" + step.result + " reuses %" + step.reuse +
              ", which is not an earlier allocation");
      allocations.insert(step.result);
      define(step.result, step.type);
      return;
    case ProgramStep::Kind::View:
      use(step.source, "views");
      define(step.result, step.type);
      return;
    case ProgramStep::Kind::Extern:
      for (const std::string &arg : step.args)
        use(arg, "extern " + opName(step.op) + " reads");
      if (step.results.empty() || step.results.size() != step.types.size())
        error("extern " + opName(step.op) + " needs one type per result");
      for (size_t i = 0; i < step.results.size(); ++i)
        define(step.results[i], step.types[i]);
      return;
    case ProgramStep::Kind::Call:
      checkCall(step);
      return;
    }
  }

  void checkCall(const ProgramStep &call) {
    const Kernel *kernel = module.findKernel(call.kernel);
    if (!kernel)
      error("calls unknown kernel @" + call.kernel);
    if (call.args.size() != kernel->params.size())
      error("call of @" + call.kernel + " passes " +
            std::to_string(call.args.size()) + " buffers to " +
            std::to_string(kernel->params.size()) + " parameters");
    for (size_t i = 0; i < call.args.size(); ++i) {
      const TensorType &type =
          use(call.args[i], "call of @" + call.kernel + " passes");
      if (type != kernel->params[i].type)
        error("call of @" + call.kernel + " passes %" + call.args[i] +
              " of type " + type.str() + " to a parameter of type " +
              kernel->params[i].type.str());
    }
  }
};

} // namespace

void verifyKernel(const Kernel &kernel) { KernelVerifier(kernel).run(); }

void verifyLoopModule(const LoopModule &module) {
  for (const Kernel &kernel : module.kernels)
    verifyKernel(kernel);
  if (module.hasProgram)
    ProgramVerifier(module).run();
}

} // namespace dynafuse
