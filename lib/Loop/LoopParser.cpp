//===- LoopParser.cpp - Text to loop IR -----------------------------------===//
#include "dynafuse/Loop/LoopText.h"

#include "dynafuse/Graph/GraphText.h"
#include "dynafuse/Support/TextCursor.h"

#include <map>

namespace dynafuse {
namespace {

class LoopParser {
public:
  LoopParser(const std::string &text, const std::string &fileName)
      : cursor(text, fileName) {}

  LoopModule parse() {
    LoopModule module;
    if (cursor.acceptWord("module"))
      parseProgram(module);
    while (!cursor.atEnd()) {
      if (!cursor.acceptWord("kernel"))
        cursor.error("expected 'kernel' or 'module'");
      Location where = cursor.location();
      module.kernels.push_back(parseKernel());
      if (countKernels(module, module.kernels.back().name) > 1)
        cursor.errorAt(where,
                       "redefinition of kernel @" + module.kernels.back().name);
    }
    return module;
  }

private:
  TextCursor cursor;
  // Per-kernel state.
  Kernel *kernel = nullptr;
  std::map<std::string, int> valuesByName;

  static int countKernels(const LoopModule &module, const std::string &name) {
    int count = 0;
    for (const Kernel &kernel : module.kernels)
      count += kernel.name == name;
    return count;
  }

  std::vector<std::string> parseSymbolList() {
    std::vector<std::string> symbols;
    if (!cursor.accept("["))
      return symbols;
    do {
      symbols.push_back(cursor.identifier("a size symbol"));
    } while (cursor.accept(","));
    cursor.expect("]");
    return symbols;
  }

  std::vector<LoopBuffer> parseBufferList() {
    std::vector<LoopBuffer> buffers;
    cursor.expect("(");
    if (cursor.accept(")"))
      return buffers;
    do {
      LoopBuffer buffer;
      buffer.name = cursor.sigilName('%', "a buffer name");
      cursor.expect(":");
      buffer.type = parseTensorType(cursor);
      buffers.push_back(buffer);
    } while (cursor.accept(","));
    cursor.expect(")");
    return buffers;
  }

  void parseProgram(LoopModule &module) {
    module.hasProgram = true;
    module.name = cursor.sigilName('@', "a module name");
    module.symbols = parseSymbolList();
    module.inputs = parseBufferList();
    cursor.expect("{");
    while (!cursor.acceptWord("return"))
      module.steps.push_back(parseStep());
    if (cursor.peek() != '}') {
      do {
        module.outputs.push_back(cursor.sigilName('%', "an output buffer"));
      } while (cursor.accept(","));
    }
    cursor.expect("}");
  }

  std::vector<std::string> parseArguments() {
    std::vector<std::string> args;
    cursor.expect("(");
    if (cursor.accept(")"))
      return args;
    do {
      args.push_back(cursor.sigilName('%', "a buffer argument"));
    } while (cursor.accept(","));
    cursor.expect(")");
    return args;
  }

  ProgramStep parseStep() {
    ProgramStep step;
    if (cursor.acceptWord("call")) {
      step.kind = ProgramStep::Kind::Call;
      step.kernel = cursor.sigilName('@', "a kernel name");
      step.args = parseArguments();
      return step;
    }
    std::vector<std::string> defined = {
        cursor.sigilName('%', "a buffer definition or 'call'")};
    while (cursor.accept(","))
      defined.push_back(cursor.sigilName('%', "a further extern result"));
    cursor.expect("=");
    step.result = defined[0];
    if (defined.size() == 1 && cursor.acceptWord("alloc")) {
      step.kind = ProgramStep::Kind::Alloc;
      step.type = parseTensorType(cursor);
      if (cursor.acceptWord("reuse"))
        step.reuse = cursor.sigilName('%', "the allocation to reuse");
      return step;
    }
    if (defined.size() == 1 && cursor.acceptWord("view")) {
      step.kind = ProgramStep::Kind::View;
      step.source = cursor.sigilName('%', "the viewed buffer");
      cursor.expect("+");
      step.offset = cursor.symExpr();
      cursor.expect(":");
      step.type = parseTensorType(cursor);
      return step;
    }
    if (!cursor.acceptWord("extern"))
      cursor.error(defined.size() == 1
                       ? "expected 'alloc', 'view' or 'extern'"
                       : "expected 'extern' (only externs define several "
                         "buffers)");
    step.kind = ProgramStep::Kind::Extern;
    step.result.clear();
    step.results = defined;
    Location opAt = cursor.location();
    std::string opText = cursor.identifier("an extern op name");
    std::optional<Op> op = findOp(opText);
    if (!op)
      cursor.errorAt(opAt, "unknown extern op '" + opText + "'");
    step.op = *op;
    step.args = parseArguments();
    step.attributes = parseAttributeDict(cursor);
    cursor.expect(":");
    for (size_t i = 0; i < defined.size(); ++i) {
      if (i)
        cursor.expect(",");
      step.types.push_back(parseTensorType(cursor));
    }
    return step;
  }

  Kernel parseKernel() {
    Kernel result;
    kernel = &result;
    valuesByName.clear();
    result.name = cursor.sigilName('@', "a kernel name");
    result.symbols = parseSymbolList();
    result.params = parseBufferList();
    result.body = parseBlock();
    verifyKernel(result);
    kernel = nullptr;
    return result;
  }

  std::vector<Stmt> parseBlock() {
    cursor.expect("{");
    std::vector<Stmt> block;
    while (!cursor.accept("}")) {
      if (cursor.atEnd())
        cursor.error("expected '}'");
      block.push_back(parseStmt());
    }
    return block;
  }

  Stmt parseStmt() {
    Location where = cursor.location();
    if (cursor.acceptWord("for"))
      return parseFor(where);
    if (cursor.acceptWord("store")) {
      Stmt stmt = Stmt::instruction(kernel->addInstr(parseStore(where)));
      stmt.where = where;
      return stmt;
    }
    std::vector<std::pair<std::string, Location>> names;
    do {
      Location nameAt = cursor.location();
      names.push_back(
          {cursor.sigilName('%', "a result name, 'for' or 'store'"), nameAt});
      if (valuesByName.count(names.back().first))
        cursor.errorAt(nameAt, "redefinition of '%" + names.back().first + "'");
    } while (cursor.accept(","));
    cursor.expect("=");
    Location opAt = cursor.location();
    std::string opName = cursor.identifier("a scalar op or 'reduce'");
    if (opName == "reduce")
      return parseReduce(names, where);
    if (names.size() != 1)
      cursor.errorAt(where, "only 'reduce' defines several values");
    Stmt stmt = Stmt::instruction(
        kernel->addInstr(parseInstr(names[0].first, opName, opAt, where)));
    stmt.where = where;
    return stmt;
  }

  Stmt parseFor(const Location &where) {
    std::string var = cursor.identifier("a loop variable");
    if (!cursor.acceptWord("in"))
      cursor.error("expected 'in'");
    if (cursor.integer() != 0)
      cursor.errorAt(where, "loops start at 0");
    cursor.expect("..");
    SymExpr extent = cursor.symExpr();
    Stmt loop = Stmt::loop(var, extent, parseBlock());
    loop.where = where;
    return loop;
  }

  Stmt parseReduce(const std::vector<std::pair<std::string, Location>> &names,
                   const Location &where) {
    Location kindAt = cursor.location();
    std::string kindName = cursor.identifier("a reduction kind");
    ReduceKind kind;
    if (!parseReduceKind(kindName, kind))
      cursor.errorAt(kindAt, "unknown reduction kind '" + kindName + "'");
    std::vector<std::string> vars;
    std::vector<SymExpr> extents;
    cursor.expect("(");
    do {
      vars.push_back(cursor.identifier("a reduction variable"));
      if (!cursor.acceptWord("in"))
        cursor.error("expected 'in'");
      if (cursor.integer() != 0)
        cursor.errorAt(where, "reductions start at 0");
      cursor.expect("..");
      extents.push_back(cursor.symExpr());
    } while (cursor.accept(","));
    cursor.expect(")");
    cursor.expect("{");
    std::vector<Stmt> body;
    while (!cursor.acceptWord("yield")) {
      if (cursor.atEnd())
        cursor.error("expected 'yield'");
      body.push_back(parseStmt());
    }
    std::vector<int> yields;
    do {
      yields.push_back(useValue());
    } while (cursor.accept(","));
    cursor.expect("}");
    cursor.expect(":");
    std::vector<int> results;
    for (size_t i = 0; i < names.size(); ++i) {
      if (i)
        cursor.expect(",");
      Instr result;
      result.op = ScalarOp::Reduced;
      result.name = names[i].first;
      result.type = parseScalarType();
      result.where = names[i].second;
      valuesByName[result.name] = int(kernel->instrs.size());
      results.push_back(kernel->addInstr(result));
    }
    Stmt stmt =
        Stmt::reduce(kind, vars, extents, std::move(body), yields, results);
    stmt.where = where;
    return stmt;
  }

  DType parseScalarType() {
    Location typeAt = cursor.location();
    std::string typeName = cursor.identifier("a scalar type");
    std::optional<DType> type = parseDType(typeName);
    if (!type)
      cursor.errorAt(typeAt, "unknown dtype '" + typeName + "'");
    return *type;
  }

  int useValue() {
    Location where = cursor.location();
    std::string name = cursor.sigilName('%', "a value");
    auto found = valuesByName.find(name);
    if (found == valuesByName.end())
      cursor.errorAt(where, "use of undefined value '%" + name + "'");
    return found->second;
  }

  int useBuffer() {
    Location where = cursor.location();
    std::string name = cursor.sigilName('%', "a buffer");
    int index = kernel->findParam(name);
    if (index < 0)
      cursor.errorAt(where, "unknown buffer '%" + name + "'");
    return index;
  }

  std::vector<SymExpr> parseIndex() {
    std::vector<SymExpr> index;
    cursor.expect("[");
    if (cursor.accept("]"))
      return index;
    do {
      index.push_back(cursor.symExpr());
    } while (cursor.accept(","));
    cursor.expect("]");
    return index;
  }

  Instr parseStore(const Location &where) {
    Instr instr;
    instr.where = where;
    instr.op = ScalarOp::Store;
    instr.buffer = useBuffer();
    instr.index = parseIndex();
    cursor.expect(",");
    instr.args.push_back(useValue());
    return instr;
  }

  Instr parseInstr(const std::string &name, const std::string &opName,
                   const Location &opAt, const Location &where) {
    Instr instr;
    instr.where = where;
    instr.name = name;
    if (!parseScalarOp(opName, instr.op) || instr.op == ScalarOp::Store ||
        instr.op == ScalarOp::Reduced)
      cursor.errorAt(opAt, "unknown scalar op '" + opName + "'");
    parseOperands(instr);
    cursor.expect(":");
    instr.type = parseScalarType();
    valuesByName[instr.name] = int(kernel->instrs.size());
    return instr;
  }

  void parseOperands(Instr &instr) {
    if (instr.op == ScalarOp::Load) {
      instr.buffer = useBuffer();
      instr.index = parseIndex();
      if (cursor.acceptWord("mask"))
        instr.args.push_back(useValue());
      return;
    }
    if (instr.op == ScalarOp::Const) {
      parseLiteral(instr);
      return;
    }
    if (instr.op == ScalarOp::Index) {
      instr.index.push_back(cursor.symExpr());
      return;
    }
    for (int i = 0; i < scalarOpArity(instr.op); ++i) {
      if (i)
        cursor.expect(",");
      instr.args.push_back(useValue());
    }
  }

  void parseLiteral(Instr &instr) {
    if (cursor.acceptWord("true")) {
      instr.intValue = 1;
      return;
    }
    if (cursor.acceptWord("false"))
      return;
    TextCursor::Number number = cursor.number();
    instr.floatValue =
        number.isFloat ? number.floatValue : double(number.intValue);
    instr.intValue =
        number.isFloat ? int64_t(number.floatValue) : number.intValue;
  }
};

} // namespace

LoopModule parseLoopModule(const std::string &text,
                           const std::string &fileName) {
  LoopModule module = LoopParser(text, fileName).parse();
  verifyLoopModule(module);
  return module;
}

} // namespace dynafuse
