//===- Kernel.cpp - The loop-level IR -------------------------------------===//
#include "dynafuse/Loop/Kernel.h"

#include <algorithm>

namespace dynafuse {
namespace {
struct ScalarOpInfo {
  const char *name;
  int arity;
};
const ScalarOpInfo scalarOps[] = {
#define DYNAFUSE_INFO(name, text, arity) {text, arity},
    DYNAFUSE_SCALAR_OPS(DYNAFUSE_INFO)
#undef DYNAFUSE_INFO
};
} // namespace

const char *scalarOpName(ScalarOp op) {
  return scalarOps[static_cast<int>(op)].name;
}

int scalarOpArity(ScalarOp op) { return scalarOps[static_cast<int>(op)].arity; }

bool parseScalarOp(const std::string &name, ScalarOp &op) {
  for (size_t i = 0; i < sizeof(scalarOps) / sizeof(scalarOps[0]); ++i) {
    if (name == scalarOps[i].name) {
      op = static_cast<ScalarOp>(i);
      return true;
    }
  }
  return false;
}

bool isComparison(ScalarOp op) {
  return op == ScalarOp::Eq || op == ScalarOp::Ne || op == ScalarOp::Lt ||
         op == ScalarOp::Le || op == ScalarOp::Gt || op == ScalarOp::Ge;
}

bool isFloatMath(ScalarOp op) {
  switch (op) {
  case ScalarOp::Exp:
  case ScalarOp::Log:
  case ScalarOp::Tanh:
  case ScalarOp::Sigmoid:
  case ScalarOp::Sqrt:
  case ScalarOp::Rsqrt:
  case ScalarOp::Erf:
  case ScalarOp::Exp2:
  case ScalarOp::Log1p:
  case ScalarOp::Expm1:
  case ScalarOp::Sin:
  case ScalarOp::Cos:
  case ScalarOp::Floor:
  case ScalarOp::Ceil:
  case ScalarOp::Round:
  case ScalarOp::Trunc:
  case ScalarOp::RoundF16:
  case ScalarOp::RoundBF16:
    return true;
  default:
    return false;
  }
}

bool isBitwise(ScalarOp op) {
  return op == ScalarOp::BitAnd || op == ScalarOp::BitOr ||
         op == ScalarOp::BitXor || op == ScalarOp::BitNot;
}

namespace {
const char *const reduceKindNames[] = {"sum", "prod", "max",    "min",
                                       "any", "all",  "argmax", "argmin"};
} // namespace

const char *reduceKindName(ReduceKind kind) {
  return reduceKindNames[static_cast<int>(kind)];
}

bool parseReduceKind(const std::string &name, ReduceKind &kind) {
  for (int i = 0; i < 8; ++i) {
    if (name == reduceKindNames[i]) {
      kind = static_cast<ReduceKind>(i);
      return true;
    }
  }
  return false;
}

int reduceYieldCount(ReduceKind kind) {
  return kind == ReduceKind::ArgMax || kind == ReduceKind::ArgMin ? 2 : 1;
}

bool isIndirectIndex(const SymExpr &index) {
  std::set<std::string> used;
  index.collectSymbols(used);
  for (const std::string &symbol : used)
    if (!symbol.empty() && symbol[0] == '%')
      return true;
  return false;
}

Stmt Stmt::loop(std::string var, SymExpr extent, std::vector<Stmt> body) {
  Stmt stmt;
  stmt.kind = Kind::For;
  stmt.var = std::move(var);
  stmt.extent = std::move(extent);
  stmt.body = std::move(body);
  return stmt;
}

Stmt Stmt::reduce(ReduceKind kind, std::vector<std::string> vars,
                  std::vector<SymExpr> extents, std::vector<Stmt> body,
                  std::vector<int> yields, std::vector<int> results) {
  Stmt stmt;
  stmt.kind = Kind::Reduce;
  stmt.reduceKind = kind;
  stmt.vars = std::move(vars);
  stmt.extents = std::move(extents);
  stmt.body = std::move(body);
  stmt.yields = std::move(yields);
  stmt.results = std::move(results);
  return stmt;
}

Stmt Stmt::instruction(int index) {
  Stmt stmt;
  stmt.kind = Kind::Instr;
  stmt.instr = index;
  return stmt;
}

int Kernel::addInstr(Instr instr) {
  instrs.push_back(std::move(instr));
  return int(instrs.size()) - 1;
}

int Kernel::findParam(const std::string &name) const {
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].name == name)
      return int(i);
  return -1;
}

const Kernel *LoopModule::findKernel(const std::string &name) const {
  for (const Kernel &kernel : kernels)
    if (kernel.name == name)
      return &kernel;
  return nullptr;
}

const TensorType *LoopModule::findBuffer(const std::string &name) const {
  for (const LoopBuffer &buffer : inputs)
    if (buffer.name == name)
      return &buffer.type;
  const ProgramStep *step = definingStep(name);
  if (!step || step->kind != ProgramStep::Kind::Extern)
    return step ? &step->type : nullptr;
  for (size_t i = 0; i < step->results.size(); ++i)
    if (step->results[i] == name)
      return &step->types[i];
  return nullptr;
}

const ProgramStep *LoopModule::definingStep(const std::string &name) const {
  for (const ProgramStep &step : steps) {
    if (step.kind == ProgramStep::Kind::Extern &&
        std::count(step.results.begin(), step.results.end(), name))
      return &step;
    if (step.kind != ProgramStep::Kind::Call && step.result == name)
      return &step;
  }
  return nullptr;
}

} // namespace dynafuse
