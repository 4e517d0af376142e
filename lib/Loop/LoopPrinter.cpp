//===- LoopPrinter.cpp - Loop IR to text ----------------------------------===//
#include "dynafuse/Loop/LoopText.h"

#include "dynafuse/Support/TextCursor.h"

namespace dynafuse {
namespace {

std::string symbolList(const std::vector<std::string> &symbols) {
  if (symbols.empty())
    return "";
  std::string text = "[";
  for (size_t i = 0; i < symbols.size(); ++i)
    text += (i ? ", " : "") + symbols[i];
  return text + "]";
}

std::string bufferList(const std::vector<LoopBuffer> &buffers) {
  std::string text = "(";
  for (size_t i = 0; i < buffers.size(); ++i)
    text += (i ? ", %" : "%") + buffers[i].name + ": " + buffers[i].type.str();
  return text + ")";
}

std::string indexStr(const std::vector<SymExpr> &index) {
  std::string text = "[";
  for (size_t i = 0; i < index.size(); ++i)
    text += (i ? ", " : "") + index[i].str();
  return text + "]";
}

std::string constStr(const Instr &instr) {
  if (isFloating(instr.type))
    return formatFloatLiteral(instr.floatValue);
  if (instr.type == DType::Bool)
    return instr.intValue ? "true" : "false";
  return std::to_string(instr.intValue);
}

class KernelPrinter {
public:
  explicit KernelPrinter(const Kernel &kernel) : kernel(kernel) {}

  std::string print() {
    out = "kernel @" + kernel.name + symbolList(kernel.symbols) +
          bufferList(kernel.params) + " {\n";
    printBlock(kernel.body, 1);
    return out + "}\n";
  }

private:
  const Kernel &kernel;
  std::string out;

  void printBlock(const std::vector<Stmt> &block, int depth) {
    for (const Stmt &stmt : block) {
      std::string indent(2 * depth, ' ');
      if (stmt.kind == Stmt::Kind::Instr) {
        out += indent + instrStr(kernel.instrs[stmt.instr]) + "\n";
        continue;
      }
      if (stmt.kind == Stmt::Kind::Reduce) {
        printReduce(stmt, depth);
        continue;
      }
      out +=
          indent + "for " + stmt.var + " in 0.." + stmt.extent.str() + " {\n";
      printBlock(stmt.body, depth + 1);
      out += indent + "}\n";
    }
  }

  void printReduce(const Stmt &stmt, int depth) {
    std::string indent(2 * depth, ' ');
    out += indent;
    for (size_t i = 0; i < stmt.results.size(); ++i)
      out += (i ? ", " : "") + argName(stmt.results[i]);
    out += std::string(" = reduce ") + reduceKindName(stmt.reduceKind) + " (";
    for (size_t k = 0; k < stmt.vars.size(); ++k)
      out += (k ? ", " : "") + stmt.vars[k] + " in 0.." + stmt.extents[k].str();
    out += ") {\n";
    printBlock(stmt.body, depth + 1);
    out += indent + "  yield";
    for (size_t i = 0; i < stmt.yields.size(); ++i)
      out += (i ? ", " : " ") + argName(stmt.yields[i]);
    out += "\n" + indent + "} :";
    for (size_t i = 0; i < stmt.results.size(); ++i)
      out += (i ? ", " : " ") +
             std::string(dtypeName(kernel.instrs[stmt.results[i]].type));
    out += "\n";
  }

  std::string argName(int index) const {
    return "%" + kernel.instrs[index].name;
  }

  std::string instrStr(const Instr &instr) const {
    const std::string buffer =
        instr.buffer >= 0 ? "%" + kernel.params[instr.buffer].name : "";
    if (instr.op == ScalarOp::Store)
      return "store " + buffer + indexStr(instr.index) + ", " +
             argName(instr.args[0]);
    std::string text = "%" + instr.name + " = " + scalarOpName(instr.op);
    if (instr.op == ScalarOp::Load) {
      text += " " + buffer + indexStr(instr.index);
      if (!instr.args.empty())
        text += " mask " + argName(instr.args[0]);
      return text + " : " + dtypeName(instr.type);
    }
    if (instr.op == ScalarOp::Const)
      text += " " + constStr(instr);
    if (instr.op == ScalarOp::Index)
      text += " " + instr.index.at(0).str();
    for (size_t i = 0; i < instr.args.size(); ++i)
      text += (i ? ", " : " ") + argName(instr.args[i]);
    return text + " : " + dtypeName(instr.type);
  }
};

std::string argumentList(const std::vector<std::string> &args) {
  std::string text = "(";
  for (size_t i = 0; i < args.size(); ++i)
    text += (i ? ", %" : "%") + args[i];
  return text + ")";
}

std::string printProgram(const LoopModule &module) {
  std::string out = "module @" + module.name + symbolList(module.symbols) +
                    bufferList(module.inputs) + " {\n";
  for (const ProgramStep &step : module.steps)
    out += "  " + stepStr(step) + "\n";
  out += "  return";
  for (size_t i = 0; i < module.outputs.size(); ++i)
    out += (i ? ", %" : " %") + module.outputs[i];
  return out + "\n}\n";
}

} // namespace

std::string stepStr(const ProgramStep &step) {
  switch (step.kind) {
  case ProgramStep::Kind::Alloc:
    return "%" + step.result + " = alloc " + step.type.str() +
           (step.reuse.empty() ? "" : " reuse %" + step.reuse);
  case ProgramStep::Kind::View:
    return "%" + step.result + " = view %" + step.source + " + " +
           step.offset.str() + " : " + step.type.str();
  case ProgramStep::Kind::Extern: {
    std::string text;
    for (size_t i = 0; i < step.results.size(); ++i)
      text += (i ? ", %" : "%") + step.results[i];
    text += " = extern " + opName(step.op) + argumentList(step.args);
    if (!step.attributes.empty()) {
      text += " {";
      bool first = true;
      for (auto &entry : step.attributes) {
        text += (first ? "" : ", ") + entry.first + " = " +
                attributeStr(entry.second);
        first = false;
      }
      text += "}";
    }
    text += " :";
    for (size_t i = 0; i < step.types.size(); ++i)
      text += (i ? ", " : " ") + step.types[i].str();
    return text;
  }
  case ProgramStep::Kind::Call:
    return "call @" + step.kernel + argumentList(step.args);
  }
  return "";
}

std::string printKernel(const Kernel &kernel) {
  return KernelPrinter(kernel).print();
}

std::string printLoopModule(const LoopModule &module) {
  std::string out = module.hasProgram ? printProgram(module) : "";
  for (const Kernel &kernel : module.kernels)
    out += (out.empty() ? "" : "\n") + printKernel(kernel);
  return out;
}

} // namespace dynafuse
