//===- Kernel.cpp - The loop-level IR -------------------------------------===//
#include "dynafuse/Loop/Kernel.h"

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
    return true;
  default:
    return false;
  }
}

Stmt Stmt::loop(std::string var, SymExpr extent, std::vector<Stmt> body) {
  Stmt stmt;
  stmt.kind = Kind::For;
  stmt.var = std::move(var);
  stmt.extent = std::move(extent);
  stmt.body = std::move(body);
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

const LoopBuffer *LoopModule::findBuffer(const std::string &name) const {
  for (const LoopBuffer &buffer : inputs)
    if (buffer.name == name)
      return &buffer;
  for (const LoopBuffer &buffer : allocs)
    if (buffer.name == name)
      return &buffer;
  return nullptr;
}

} // namespace dynafuse
