//===- CUDAInstructionEmitter.cpp - Loop IR instructions as CUDA C --------===//
#include "CUDAInstructionEmitter.h"

#include "CUDAScalarText.h"
#include "dynafuse/Support/Error.h"

namespace dynafuse {

using namespace cudatext;

std::string
CUDAInstructionEmitter::symbolName(const std::string &name) const {
  if (!name.empty() && name[0] == '%')
    return "((long long)" + value(indirectId(name)) + ")";
  return (sizeSymbols.count(name) ? "S_" : "L_") + sanitize(name);
}
int CUDAInstructionEmitter::indirectId(const std::string &symbol) const {
  auto found = idByName.find(symbol.substr(1));
  if (found == idByName.end())
    fail("CUDA backend: kernel @" + kernel.name + " indexes with '" + symbol +
         "', which is not a value of the kernel");
  return found->second;
}
std::string CUDAInstructionEmitter::value(int id) const {
  return "v_" + sanitize(kernel.instrs[id].name);
}
std::string CUDAInstructionEmitter::expr(const SymExpr &e) const {
  switch (e.kind()) {
  case SymExpr::Kind::Constant:
    return intLiteral(e.constant());
  case SymExpr::Kind::Symbol:
    return symbolName(e.symbolName());
  case SymExpr::Kind::Add:
  case SymExpr::Kind::Mul: {
    std::string text = "(";
    const char *op = e.kind() == SymExpr::Kind::Add ? " + " : " * ";
    for (size_t i = 0; i < e.operands().size(); ++i)
      text += (i ? op : "") + expr(e.operands()[i]);
    return text + ")";
  }
  case SymExpr::Kind::FloorDiv:
    return "df_floordiv(" + expr(e.operands()[0]) + ", " +
           expr(e.operands()[1]) + ")";
  case SymExpr::Kind::Mod:
    return "df_mod(" + expr(e.operands()[0]) + ", " + expr(e.operands()[1]) +
           ")";
  }
  fail("CUDA backend: unknown symbolic expression kind");
}

void CUDAInstructionEmitter::emitAddress(const Instr &instr,
                                         const std::string &offset,
                                         const std::string &ok) {
  const TensorType &type = kernel.params[instr.buffer].type;
  std::vector<SymExpr> strides = type.effectiveStrides();
  line() << "long long " << offset << " = 0;\n";
  line() << "bool " << ok << " = true;\n";
  for (size_t k = 0; k < instr.index.size(); ++k) {
    std::string index = fresh("idx");
    line() << "const long long " << index << " = " << expr(instr.index[k])
           << ";\n";
    if (isIndirectIndex(instr.index[k])) {
      std::string size = expr(type.sizes[k]);
      line() << "if (" << index << " < 0 || " << index << " >= " << size
             << ") { if (" << ok << ") df_report(df_error, " << index << ", "
             << size << "); " << ok << " = false; }\n";
    }
    line() << offset << " += " << index << " * " << expr(strides[k]) << ";\n";
  }
}

void CUDAInstructionEmitter::emitInstr(int id) {
  const Instr &instr = kernel.instrs[id];
  switch (instr.op) {
  case ScalarOp::Reduced:
    return;
  case ScalarOp::Load:
    if (laneAccess.count(id)) {
      line() << "const " << valueType(instr.type) << " " << value(id)
             << " = (" << valueType(instr.type) << ")" << laneAccess[id]
             << ";\n";
      return;
    }
    return emitLoad(id);
  case ScalarOp::Store:
    if (laneAccess.count(id)) {
      line() << laneAccess[id] << " = " << value(instr.args[0]) << ";\n";
      return;
    }
    return emitStore(instr);
  default:
    line() << "const " << valueType(instr.type) << " " << value(id) << " = "
           << compute(instr) << ";\n";
  }
}

void CUDAInstructionEmitter::emitLoad(int id) {
  const Instr &instr = kernel.instrs[id];
  const char *type = valueType(instr.type);
  line() << type << " " << value(id) << " = (" << type << ")0;\n";
  bool masked = !instr.args.empty();
  line() << (masked ? "if (" + value(instr.args[0]) + ") {\n" : "{\n");
  ++indent;
  std::string offset = fresh("off"), ok = fresh("ok");
  emitAddress(instr, offset, ok);
  line() << "if (" << ok << ") " << value(id) << " = (" << type << ")df_ld(p"
         << instr.buffer << " + " << offset << ");\n";
  --indent;
  line() << "}\n";
}

void CUDAInstructionEmitter::emitStore(const Instr &instr) {
  line() << (blockLevel ? "if (threadIdx.x == 0) {\n" : "{\n");
  ++indent;
  std::string offset = fresh("off"), ok = fresh("ok");
  emitAddress(instr, offset, ok);
  line() << "if (" << ok << ") df_st(p" << instr.buffer << " + " << offset
         << ", " << value(instr.args[0]) << ");\n";
  --indent;
  line() << "}\n";
}

std::string CUDAInstructionEmitter::arg(const Instr &instr, int i) const {
  return value(instr.args[i]);
}
DType CUDAInstructionEmitter::argType(const Instr &instr, int i) const {
  return typeOf(instr.args[i]);
}

std::string CUDAInstructionEmitter::compute(const Instr &instr) const {
  switch (instr.op) {
  case ScalarOp::Const:
    return literal(instr.type, constantValue(instr));
  case ScalarOp::Index:
    return expr(instr.index[0]);
  case ScalarOp::Cast:
    return cast(argType(instr, 0), instr.type, arg(instr, 0));
  case ScalarOp::Select:
    return "(" + arg(instr, 0) + " ? " + arg(instr, 1) + " : " +
           arg(instr, 2) + ")";
  case ScalarOp::Random:
    return std::string("(") + (instr.type == DType::F64 ? "double" : "float") +
           ")df_random(" + arg(instr, 0) + ", " + arg(instr, 1) + ")";
  default:
    break;
  }
  if (scalarOpArity(instr.op) == 1)
    return unary(instr.op, argType(instr, 0), arg(instr, 0));
  return binary(instr.op, argType(instr, 0), arg(instr, 0), arg(instr, 1));
}

} // namespace dynafuse
