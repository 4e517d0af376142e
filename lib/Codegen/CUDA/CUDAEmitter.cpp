//===- CUDAEmitter.cpp - Loop IR kernels as CUDA C ------------------------===//
//
// One __global__ function per kernel, in one of three shapes:
//   Pointwise    no reduce statement: the outermost perfect loop nest is
//                flattened into a grid-stride loop over its elements and the
//                flat index delinearized (row-major, in loop order) into the
//                loop variables; inner loops that are not part of the
//                perfect nest run serially in each thread.
//   BlockReduce  reduce statements directly in the kernel body or directly
//                in its single outermost loop: one block per outer iteration
//                (grid-stride over blocks). Each such reduce is a block
//                reduction; loops at that level are spread over the block's
//                threads; scalar statements run in every thread and stores
//                at that level only in thread 0. __syncthreads separates
//                the statements that threads share.
//   Serial       reduce statements nested any other way: one thread per
//                outer iteration runs the body serially (correct, slow).
// Values are f32 for f16/bf16 storage; integer arithmetic wraps and
// division by zero gives 0, as in Loop/ScalarSemantics.cpp.
//
//===----------------------------------------------------------------------===//
#include "CUDACodegen.h"

#include "dynafuse/Loop/ScalarSemantics.h"
#include "dynafuse/Support/Error.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <sstream>

namespace dynafuse {
namespace {

const char *valueType(DType type) {
  switch (type) {
  case DType::Bool:
    return "bool";
  case DType::I32:
    return "int";
  case DType::I64:
    return "long long";
  case DType::F64:
    return "double";
  default:
    return "float";
  }
}

/// Accumulator type of a reduce: bool does not shuffle, so int.
const char *accType(DType type) {
  return type == DType::Bool ? "int" : valueType(type);
}

const char *storageType(DType type) {
  switch (type) {
  case DType::Bool:
    return "unsigned char";
  case DType::F16:
    return "__half";
  case DType::BF16:
    return "__nv_bfloat16";
  default:
    return valueType(type);
  }
}

std::string floatLiteral(DType type, double value) {
  bool f32 = type != DType::F64;
  if (std::isnan(value))
    return f32 ? "__int_as_float(0x7fc00000)"
               : "__longlong_as_double(0x7ff8000000000000LL)";
  if (std::isinf(value)) {
    std::string text = f32 ? "__int_as_float(0x7f800000)"
                           : "__longlong_as_double(0x7ff0000000000000LL)";
    return value < 0 ? "(-" + text + ")" : text;
  }
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%a",
                f32 ? double(float(value)) : value);
  return std::string("(") + buffer + (f32 ? "f)" : ")");
}

std::string intLiteral(int64_t value) {
  if (value == INT64_MIN)
    return "((long long)0x8000000000000000ULL)";
  return "(" + std::to_string(value) + "LL)";
}

std::string literal(DType type, ScalarValue value) {
  if (isFloating(type))
    return floatLiteral(type, value.f);
  if (type == DType::Bool)
    return value.i ? "true" : "false";
  return std::string("((") + valueType(type) + ")" + intLiteral(value.i) + ")";
}

/// The result of 64-bit integer arithmetic `text` as a value of `type`.
std::string wrapInt(DType type, const std::string &text) {
  if (type == DType::Bool)
    return "((" + text + ") != 0)";
  return std::string("((") + valueType(type) + ")(" + text + "))";
}

std::string sanitize(const std::string &name) {
  std::string out;
  for (char c : name)
    out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

class KernelEmitter {
public:
  KernelEmitter(const Kernel &kernel, CUDAKernelInfo &info)
      : kernel(kernel), info(info) {
    for (const std::string &symbol : kernel.symbols)
      sizeSymbols.insert(symbol);
    for (size_t i = 0; i < kernel.instrs.size(); ++i)
      idByName[kernel.instrs[i].name] = int(i);
  }

  std::string emit() {
    info.name = sanitize(kernel.name);
    out << "extern \"C\" __global__ void __launch_bounds__(" << cudaBlockSize
        << ") " << info.name << "(";
    for (size_t i = 0; i < kernel.params.size(); ++i)
      out << (i ? ", " : "") << storageType(kernel.params[i].type.dtype)
          << " *p" << i;
    for (size_t j = 0; j < kernel.symbols.size(); ++j)
      out << (j || !kernel.params.empty() ? ", " : "") << "long long "
          << symbolName(kernel.symbols[j]);
    out << (kernel.params.empty() && kernel.symbols.empty() ? "" : ", ")
        << "long long *df_error) {\n";
    indent = 1;
    std::vector<int> hoisted;
    const Stmt *outer = splitLevel(kernel.body, hoisted);
    if (hasDirectReduce(kernel.body))
      emitBlockReduceKernel(nullptr, {});
    else if (outer && hasDirectReduce(outer->body))
      emitBlockReduceKernel(outer, hoisted);
    else if (!hasReduce(kernel.body))
      emitPointwiseKernel();
    else
      emitSerialKernel(outer, hoisted);
    out << "}\n";
    return out.str();
  }

private:
  const Kernel &kernel;
  CUDAKernelInfo &info;
  std::set<std::string> sizeSymbols;
  std::map<std::string, int> idByName;
  std::ostringstream out;
  int indent = 0;
  int uniqueCounter = 0;
  /// Whether the statements being emitted are shared by a whole block
  /// (stores only in thread 0).
  bool blockLevel = false;
  /// Vector path: the first lane's innermost index, and the vector
  /// component each widened load or store of the current lane uses.
  std::string laneBase;
  std::map<int, std::string> laneAccess;

  std::ostream &line() { return out << std::string(2 * indent, ' '); }
  std::string fresh(const char *stem) {
    return std::string("df_") + stem + std::to_string(uniqueCounter++);
  }

  /// The single loop of `body` when every other statement is a scalar
  /// instruction other than a store (loop-invariant code hoisted out of
  /// it, safe to recompute in every thread); those go to `hoisted`.
  const Stmt *splitLevel(const std::vector<Stmt> &body,
                         std::vector<int> &hoisted) const {
    const Stmt *loop = nullptr;
    std::vector<int> instrs;
    for (const Stmt &stmt : body) {
      if (stmt.kind == Stmt::Kind::For && !loop)
        loop = &stmt;
      else if (stmt.kind == Stmt::Kind::Instr &&
               kernel.instrs[stmt.instr].op != ScalarOp::Store)
        instrs.push_back(stmt.instr);
      else
        return nullptr;
    }
    if (loop)
      hoisted.insert(hoisted.end(), instrs.begin(), instrs.end());
    return loop;
  }

  static bool hasDirectReduce(const std::vector<Stmt> &body) {
    for (const Stmt &stmt : body)
      if (stmt.kind == Stmt::Kind::Reduce)
        return true;
    return false;
  }
  static bool hasReduce(const std::vector<Stmt> &body) {
    for (const Stmt &stmt : body)
      if (stmt.kind == Stmt::Kind::Reduce ||
          (stmt.kind == Stmt::Kind::For && hasReduce(stmt.body)))
        return true;
    return false;
  }

  std::string symbolName(const std::string &name) const {
    if (!name.empty() && name[0] == '%')
      return "((long long)" + value(indirectId(name)) + ")";
    return (sizeSymbols.count(name) ? "S_" : "L_") + sanitize(name);
  }
  int indirectId(const std::string &symbol) const {
    auto found = idByName.find(symbol.substr(1));
    if (found == idByName.end())
      fail("CUDA backend: kernel @" + kernel.name + " indexes with '" + symbol +
           "', which is not a value of the kernel");
    return found->second;
  }
  std::string value(int id) const {
    return "v_" + sanitize(kernel.instrs[id].name);
  }
  DType typeOf(int id) const { return kernel.instrs[id].type; }

  std::string expr(const SymExpr &e) const {
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

  // --- Kernel shapes -------------------------------------------------------

  /// Flattens the perfect nest of single loops at the top. With a vector
  /// plan, a uniform run-time test picks the 16-byte path.
  void emitPointwiseKernel() {
    info.shape = CUDAKernelShape::Pointwise;
    std::vector<const Stmt *> nest;
    std::vector<int> hoisted;
    const std::vector<Stmt> *body = &kernel.body;
    while (const Stmt *loop = splitLevel(*body, hoisted)) {
      nest.push_back(loop);
      body = &loop->body;
    }
    SymExpr work = 1;
    for (const Stmt *loop : nest)
      work = work * loop->extent;
    std::optional<CUDAVectorPlan> plan;
    const SymExpr *innerExtent = nest.empty() ? nullptr : &nest.back()->extent;
    bool multipleOf4 = innerExtent && (!innerExtent->isConstant() ||
                                       innerExtent->constant() % 4 == 0);
    if (multipleOf4)
      plan = planVectorAccess(kernel, nest.back()->var, *body);
    // One thread per element, or per 4 when the vector path may run (the
    // scalar fallback then strides over the grid).
    info.work = plan ? floorDiv(work + 3, 4) : work;
    std::string total = fresh("total");
    line() << "long long " << total << " = 1;\n";
    for (const Stmt *loop : nest)
      line() << total << " *= max(" << expr(loop->extent) << ", 0LL);\n";
    if (!plan) {
      emitFlatLoop(nest, hoisted, *body, total);
      return;
    }
    line() << "if (" << vectorCondition(*plan, *nest.back()) << ") {\n";
    ++indent;
    emitVectorLoop(nest, hoisted, *body, total, *plan);
    --indent;
    line() << "} else {\n";
    ++indent;
    emitFlatLoop(nest, hoisted, *body, total);
    --indent;
    line() << "}\n";
  }

  /// A grid-stride loop over the flat elements of `nest`, `lanes` at a
  /// time along the innermost loop: declares the loop variables
  /// (the innermost one is the first lane's) and leaves the loop open.
  void openFlatLoop(const std::vector<const Stmt *> &nest,
                    const std::string &total, int lanes) {
    std::string flat = fresh("flat");
    std::string count =
        lanes == 1 ? total : total + " / " + std::to_string(lanes);
    line() << "for (long long " << flat
           << " = (long long)blockIdx.x * blockDim.x + threadIdx.x; " << flat
           << " < " << count << "; " << flat
           << " += (long long)gridDim.x * blockDim.x) {\n";
    ++indent;
    std::string rest = fresh("rest");
    line() << "long long " << rest << " = " << flat << ";\n";
    for (size_t k = nest.size(); k-- > 0;) {
      std::string extent = expr(nest[k]->extent);
      bool inner = k + 1 == nest.size() && lanes > 1;
      if (inner)
        extent = "(" + extent + " / " + std::to_string(lanes) + ")";
      line() << "const long long "
             << (inner ? laneBase : symbolName(nest[k]->var)) << " = (" << rest
             << " % " << extent << ")"
             << (inner ? " * " + std::to_string(lanes) : "") << ";\n";
      line() << rest << " /= " << extent << ";\n";
    }
    line() << "(void)" << rest << ";\n";
  }

  void emitFlatLoop(const std::vector<const Stmt *> &nest,
                    const std::vector<int> &hoisted,
                    const std::vector<Stmt> &body, const std::string &total) {
    openFlatLoop(nest, total, 1);
    for (int id : hoisted)
      emitInstr(id);
    emitSerialBody(body);
    --indent;
    line() << "}\n";
  }

  /// True (uniformly, for the whole launch) when every widened access is
  /// 16-byte aligned at every group of 4: the innermost extent is a
  /// multiple of 4, each widened buffer's base is aligned and its other
  /// dims' strides are multiples of 4 elements.
  std::string vectorCondition(const CUDAVectorPlan &plan, const Stmt &inner) {
    std::string condition = "(" + expr(inner.extent) + " % 4 == 0)";
    std::set<int> buffers;
    for (const auto &[id, dim] : plan.widened) {
      int buffer = kernel.instrs[id].buffer;
      if (!buffers.insert(buffer).second)
        continue;
      condition += " && (((unsigned long long)p" + std::to_string(buffer) +
                   " & 15) == 0)";
      std::vector<SymExpr> strides =
          kernel.params[buffer].type.effectiveStrides();
      for (size_t k = 0; k < strides.size(); ++k)
        if (int(k) != dim)
          condition += " && (" + expr(strides[k]) + " % 4 == 0)";
    }
    return condition;
  }

  /// Widened loads before the lanes, the body once per lane (loads and
  /// stores of the plan read and write vector components), widened stores
  /// after.
  void emitVectorLoop(const std::vector<const Stmt *> &nest,
                      const std::vector<int> &hoisted,
                      const std::vector<Stmt> &body, const std::string &total,
                      const CUDAVectorPlan &plan) {
    static const char *components[] = {".x", ".y", ".z", ".w"};
    laneBase = fresh("lane0");
    openFlatLoop(nest, total, 4);
    std::string var = symbolName(nest.back()->var);
    for (int id : hoisted)
      emitInstr(id);
    std::map<int, std::string> vectors;
    for (const auto &[id, dim] : plan.widened) {
      const Instr &instr = kernel.instrs[id];
      vectors[id] = fresh("vec");
      std::string type = vectorType(instr);
      if (instr.op == ScalarOp::Store) {
        line() << type << " " << vectors[id] << ";\n";
        continue;
      }
      line() << "const " << type << " " << vectors[id] << " = *(const " << type
             << " *)(p" << instr.buffer << " + " << laneOffset(instr, var)
             << ");\n";
    }
    for (int lane = 0; lane < 4; ++lane) {
      line() << "{\n";
      ++indent;
      line() << "const long long " << var << " = " << laneBase << " + " << lane
             << ";\n";
      for (const auto &[id, vector] : vectors)
        laneAccess[id] = vector + components[lane];
      emitSerialBody(body);
      laneAccess.clear();
      --indent;
      line() << "}\n";
    }
    for (const auto &[id, dim] : plan.widened) {
      const Instr &instr = kernel.instrs[id];
      if (instr.op != ScalarOp::Store)
        continue;
      std::string type = vectorType(instr);
      line() << "*(" << type << " *)(p" << instr.buffer << " + "
             << laneOffset(instr, var) << ") = " << vectors[id] << ";\n";
    }
    --indent;
    line() << "}\n";
  }

  /// The 16-byte vector type of a widened access (4-byte elements).
  std::string vectorType(const Instr &instr) const {
    return kernel.params[instr.buffer].type.dtype == DType::F32 ? "float4"
                                                                : "int4";
  }

  /// The flat offset of `instr` at the first lane (its innermost variable
  /// replaced by the lane base).
  std::string laneOffset(const Instr &instr, const std::string &var) {
    std::vector<SymExpr> strides =
        kernel.params[instr.buffer].type.effectiveStrides();
    std::string offset = "0LL";
    for (size_t k = 0; k < instr.index.size(); ++k) {
      std::string index = expr(instr.index[k]);
      if (index == var)
        index = laneBase;
      offset += " + " + index + " * " + expr(strides[k]);
    }
    return "(" + offset + ")";
  }

  void emitSerialKernel(const Stmt *outer, const std::vector<int> &hoisted) {
    info.shape = CUDAKernelShape::Serial;
    info.work = outer ? outer->extent : SymExpr(1);
    std::string var = outer ? symbolName(outer->var) : fresh("one");
    std::string extent = outer ? expr(outer->extent) : "1LL";
    line() << "for (long long " << var
           << " = (long long)blockIdx.x * blockDim.x + threadIdx.x; " << var
           << " < " << extent << "; " << var
           << " += (long long)gridDim.x * blockDim.x) {\n";
    ++indent;
    for (int id : hoisted)
      emitInstr(id);
    emitSerialBody(outer ? outer->body : kernel.body);
    --indent;
    line() << "}\n";
  }

  /// One block per iteration of `outer` (or a single block when null).
  void emitBlockReduceKernel(const Stmt *outer,
                             const std::vector<int> &hoisted) {
    info.shape = CUDAKernelShape::BlockReduce;
    info.work = outer ? outer->extent : SymExpr(1);
    std::string var = outer ? symbolName(outer->var) : fresh("one");
    std::string extent = outer ? expr(outer->extent) : "1LL";
    line() << "for (long long " << var << " = blockIdx.x; " << var << " < "
           << extent << "; " << var << " += gridDim.x) {\n";
    ++indent;
    for (int id : hoisted)
      emitInstr(id);
    blockLevel = true;
    for (const Stmt &stmt : outer ? outer->body : kernel.body) {
      if (stmt.kind == Stmt::Kind::Reduce) {
        emitBlockReduce(stmt);
      } else if (stmt.kind == Stmt::Kind::For) {
        blockLevel = false;
        emitLoop(stmt, "threadIdx.x", "blockDim.x");
        blockLevel = true;
        line() << "__syncthreads();\n";
      } else {
        emitInstr(stmt.instr);
      }
    }
    blockLevel = false;
    line() << "__syncthreads();\n";
    --indent;
    line() << "}\n";
  }

  // --- Statements ------------------------------------------------------------

  void emitSerialBody(const std::vector<Stmt> &body) {
    for (const Stmt &stmt : body) {
      if (stmt.kind == Stmt::Kind::For)
        emitLoop(stmt, "0", "1");
      else if (stmt.kind == Stmt::Kind::Reduce)
        emitSerialReduce(stmt);
      else
        emitInstr(stmt.instr);
    }
  }

  void emitLoop(const Stmt &loop, const std::string &start,
                const std::string &step) {
    std::string var = symbolName(loop.var);
    line() << "for (long long " << var << " = " << start << "; " << var << " < "
           << expr(loop.extent) << "; " << var << " += " << step << ") {\n";
    ++indent;
    emitSerialBody(loop.body);
    --indent;
    line() << "}\n";
  }

  bool isArg(const Stmt &reduce) const {
    return reduce.reduceKind == ReduceKind::ArgMax ||
           reduce.reduceKind == ReduceKind::ArgMin;
  }

  /// The combiner of a non-arg reduce as an expression of a and b.
  std::string combiner(ReduceKind kind, DType type, const std::string &a,
                       const std::string &b) const {
    bool floating = isFloating(type);
    bool boolean = type == DType::Bool;
    switch (kind) {
    case ReduceKind::Sum:
      return floating ? "(" + a + " + " + b + ")"
                      : wrapInt(boolean ? DType::I32 : type,
                                boolean ? "(" + a + " + " + b + ") != 0"
                                        : "df_iadd(" + a + ", " + b + ")");
    case ReduceKind::Prod:
      return floating ? "(" + a + " * " + b + ")"
                      : wrapInt(boolean ? DType::I32 : type,
                                boolean ? "(" + a + " * " + b + ") != 0"
                                        : "df_imul(" + a + ", " + b + ")");
    case ReduceKind::Max:
      if (boolean)
        return "((int)(" + a + " || " + b + "))";
      return floating ? "df_max(" + a + ", " + b + ")"
                      : "max(" + a + ", " + b + ")";
    case ReduceKind::Min:
      if (boolean)
        return "((int)(" + a + " && " + b + "))";
      return floating ? "df_min(" + a + ", " + b + ")"
                      : "min(" + a + ", " + b + ")";
    case ReduceKind::Any:
      return "((int)(" + a + " || " + b + "))";
    case ReduceKind::All:
      return "((int)(" + a + " && " + b + "))";
    default:
      fail("CUDA backend: not a plain reduce kind");
    }
  }

  std::string identity(const Stmt &reduce, DType type) const {
    ReduceState state = reduceIdentity(reduce.reduceKind, type);
    if (type == DType::Bool)
      return state.value.i ? "1" : "0";
    return literal(type, state.value);
  }

  DType reduceType(const Stmt &reduce) const {
    return typeOf(reduce.yields[0]);
  }

  /// The accumulator updates after the body yielded; `order` is the
  /// iteration's position in the domain (arg reduces in block mode).
  void emitAccumulate(const Stmt &reduce, const std::string &acc,
                      const std::string &order) {
    DType type = reduceType(reduce);
    std::string yielded = value(reduce.yields[0]);
    if (!isArg(reduce)) {
      line() << acc << " = " << combiner(reduce.reduceKind, type, acc, yielded)
             << ";\n";
      return;
    }
    const char *greater =
        reduce.reduceKind == ReduceKind::ArgMax ? "true" : "false";
    line() << "if (df_better<" << greater << ">((" << accType(type) << ")"
           << yielded << ", " << acc << ".v)) {\n";
    line() << "  " << acc << ".v = " << yielded << ";\n";
    line() << "  " << acc << ".p = (long long)" << value(reduce.yields[1])
           << ";\n";
    if (!order.empty())
      line() << "  " << acc << ".o = " << order << ";\n";
    line() << "}\n";
  }

  void declareAccumulator(const Stmt &reduce, const std::string &acc) {
    DType type = reduceType(reduce);
    if (isArg(reduce)) {
      line() << "DfArg<" << accType(type) << "> " << acc << ";\n";
      line() << acc << ".v = " << identity(reduce, type) << "; " << acc
             << ".p = 0; " << acc << ".o = 0x7fffffffffffffffLL;\n";
      return;
    }
    line() << accType(type) << " " << acc << " = " << identity(reduce, type)
           << ";\n";
  }

  void declareResults(const Stmt &reduce) {
    for (int result : reduce.results)
      line() << valueType(typeOf(result)) << " " << value(result) << ";\n";
  }

  void assignResults(const Stmt &reduce, const std::string &acc) {
    if (isArg(reduce)) {
      line() << value(reduce.results[0]) << " = ("
             << valueType(typeOf(reduce.results[0])) << ")" << acc << ".v;\n";
      line() << value(reduce.results[1]) << " = ("
             << valueType(typeOf(reduce.results[1])) << ")" << acc << ".p;\n";
      return;
    }
    line() << value(reduce.results[0]) << " = ("
           << valueType(typeOf(reduce.results[0])) << ")" << acc << ";\n";
  }

  void emitSerialReduce(const Stmt &reduce) {
    declareResults(reduce);
    line() << "{\n";
    ++indent;
    std::string acc = fresh("acc");
    declareAccumulator(reduce, acc);
    int opened = 0;
    for (size_t k = 0; k < reduce.vars.size(); ++k, ++opened) {
      std::string var = symbolName(reduce.vars[k]);
      line() << "for (long long " << var << " = 0; " << var << " < "
             << expr(reduce.extents[k]) << "; ++" << var << ") {\n";
      ++indent;
    }
    bool saved = blockLevel;
    blockLevel = false;
    emitSerialBody(reduce.body);
    blockLevel = saved;
    emitAccumulate(reduce, acc, "");
    for (; opened > 0; --opened) {
      --indent;
      line() << "}\n";
    }
    assignResults(reduce, acc);
    --indent;
    line() << "}\n";
  }

  void emitBlockReduce(const Stmt &reduce) {
    declareResults(reduce);
    line() << "{\n";
    ++indent;
    std::string acc = fresh("acc"), total = fresh("total"),
                flat = fresh("flat");
    declareAccumulator(reduce, acc);
    line() << "long long " << total << " = 1;\n";
    for (const SymExpr &extent : reduce.extents)
      line() << total << " *= max(" << expr(extent) << ", 0LL);\n";
    line() << "for (long long " << flat << " = threadIdx.x; " << flat << " < "
           << total << "; " << flat << " += blockDim.x) {\n";
    ++indent;
    std::string rest = fresh("rest");
    line() << "long long " << rest << " = " << flat << ";\n";
    for (size_t k = reduce.vars.size(); k-- > 0;) {
      std::string extent = expr(reduce.extents[k]);
      line() << "const long long " << symbolName(reduce.vars[k]) << " = "
             << rest << " % " << extent << ";\n";
      line() << rest << " /= " << extent << ";\n";
    }
    blockLevel = false;
    emitSerialBody(reduce.body);
    blockLevel = true;
    emitAccumulate(reduce, acc, flat);
    --indent;
    line() << "}\n";
    DType type = reduceType(reduce);
    if (isArg(reduce)) {
      const char *greater =
          reduce.reduceKind == ReduceKind::ArgMax ? "true" : "false";
      std::string id = fresh("id");
      line() << "DfArg<" << accType(type) << "> " << id << ";\n";
      line() << id << ".v = " << identity(reduce, type) << "; " << id
             << ".p = 0; " << id << ".o = 0x7fffffffffffffffLL;\n";
      line() << acc << " = df_block_reduce(" << acc << ", " << id
             << ", [](DfArg<" << accType(type) << "> a, DfArg<" << accType(type)
             << "> b) { return df_arg_combine<" << greater << ">(a, b); });\n";
    } else {
      line() << acc << " = df_block_reduce(" << acc << ", (" << accType(type)
             << ")" << identity(reduce, type) << ", [](" << accType(type)
             << " a, " << accType(type) << " b) { return (" << accType(type)
             << ")" << combiner(reduce.reduceKind, type, "a", "b") << "; });\n";
    }
    assignResults(reduce, acc);
    --indent;
    line() << "}\n";
  }

  // --- Instructions ----------------------------------------------------------

  /// Declares the flat element offset of a load or store in `offset` and,
  /// for indirect indices, a bool `ok` that is false (after reporting) when
  /// one is out of bounds. Emitted inside a block opened by the caller.
  void emitAddress(const Instr &instr, const std::string &offset,
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

  void emitInstr(int id) {
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

  void emitLoad(int id) {
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

  void emitStore(const Instr &instr) {
    line() << (blockLevel ? "if (threadIdx.x == 0) {\n" : "{\n");
    ++indent;
    std::string offset = fresh("off"), ok = fresh("ok");
    emitAddress(instr, offset, ok);
    line() << "if (" << ok << ") df_st(p" << instr.buffer << " + " << offset
           << ", " << value(instr.args[0]) << ");\n";
    --indent;
    line() << "}\n";
  }

  std::string arg(const Instr &instr, int i) const {
    return value(instr.args[i]);
  }
  DType argType(const Instr &instr, int i) const {
    return typeOf(instr.args[i]);
  }

  std::string compute(const Instr &instr) const {
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
    default:
      break;
    }
    if (scalarOpArity(instr.op) == 1)
      return unary(instr.op, argType(instr, 0), arg(instr, 0));
    return binary(instr.op, argType(instr, 0), arg(instr, 0), arg(instr, 1));
  }

  static std::string cast(DType from, DType to, const std::string &x) {
    if (to == DType::Bool)
      return "(" + x + " != 0)";
    if (isFloating(to)) {
      std::string target = valueType(to);
      return isFloating(from) ? "((" + target + ")" + x + ")"
                              : "((" + target + ")(double)" + x + ")";
    }
    return wrapInt(to, "(long long)" + x);
  }

  static std::string floatMath(ScalarOp op, bool f32, const std::string &x) {
    std::string s = f32 ? "f" : "";
    std::string one = f32 ? "1.0f" : "1.0";
    switch (op) {
    case ScalarOp::Exp:
      return "exp" + s + "(" + x + ")";
    case ScalarOp::Log:
      return "log" + s + "(" + x + ")";
    case ScalarOp::Tanh:
      return "tanh" + s + "(" + x + ")";
    case ScalarOp::Erf:
      return "erf" + s + "(" + x + ")";
    case ScalarOp::Sqrt:
      return "sqrt" + s + "(" + x + ")";
    case ScalarOp::Rsqrt:
      return "(" + one + " / sqrt" + s + "(" + x + "))";
    case ScalarOp::Sigmoid:
      return "(" + one + " / (" + one + " + exp" + s + "(-" + x + ")))";
    case ScalarOp::Exp2:
      return "exp2" + s + "(" + x + ")";
    case ScalarOp::Log1p:
      return "log1p" + s + "(" + x + ")";
    case ScalarOp::Expm1:
      return "expm1" + s + "(" + x + ")";
    case ScalarOp::Sin:
      return "sin" + s + "(" + x + ")";
    case ScalarOp::Cos:
      return "cos" + s + "(" + x + ")";
    case ScalarOp::Floor:
      return "floor" + s + "(" + x + ")";
    case ScalarOp::Ceil:
      return "ceil" + s + "(" + x + ")";
    case ScalarOp::Round:
      return "rint" + s + "(" + x + ")";
    case ScalarOp::Trunc:
      return "trunc" + s + "(" + x + ")";
    default:
      fail(std::string("CUDA backend: '") + scalarOpName(op) +
           "' is not float math");
    }
  }

  static std::string unary(ScalarOp op, DType type, const std::string &x) {
    if (op == ScalarOp::Not)
      return "(!" + x + ")";
    if (op == ScalarOp::BitNot)
      return type == DType::Bool ? "(!" + x + ")"
                                 : wrapInt(type, "~(long long)" + x);
    if (isFloating(type)) {
      bool f32 = type != DType::F64;
      if (op == ScalarOp::Neg)
        return "(-" + x + ")";
      if (op == ScalarOp::Abs)
        return std::string(f32 ? "fabsf(" : "fabs(") + x + ")";
      return floatMath(op, f32, x);
    }
    if (op == ScalarOp::Neg)
      return wrapInt(type, "df_ineg(" + x + ")");
    if (op == ScalarOp::Abs)
      return wrapInt(type, "df_iabs(" + x + ")");
    fail(std::string("CUDA backend: '") + scalarOpName(op) +
         "' needs a float operand");
  }

  static std::string comparison(ScalarOp op) {
    switch (op) {
    case ScalarOp::Eq:
      return " == ";
    case ScalarOp::Ne:
      return " != ";
    case ScalarOp::Lt:
      return " < ";
    case ScalarOp::Le:
      return " <= ";
    case ScalarOp::Gt:
      return " > ";
    default:
      return " >= ";
    }
  }

  static std::string binary(ScalarOp op, DType type, const std::string &a,
                            const std::string &b) {
    if (isComparison(op))
      return "(" + a + comparison(op) + b + ")";
    if (isFloating(type)) {
      bool f32 = type != DType::F64;
      switch (op) {
      case ScalarOp::Add:
        return "(" + a + " + " + b + ")";
      case ScalarOp::Sub:
        return "(" + a + " - " + b + ")";
      case ScalarOp::Mul:
        return "(" + a + " * " + b + ")";
      case ScalarOp::Div:
        return "(" + a + " / " + b + ")";
      case ScalarOp::Max:
        return "df_max(" + a + ", " + b + ")";
      case ScalarOp::Min:
        return "df_min(" + a + ", " + b + ")";
      case ScalarOp::Pow:
        return std::string(f32 ? "powf(" : "pow(") + a + ", " + b + ")";
      case ScalarOp::Fmod:
        return std::string(f32 ? "fmodf(" : "fmod(") + a + ", " + b + ")";
      case ScalarOp::Remainder:
        return "df_frem(" + a + ", " + b + ")";
      default:
        fail(std::string("CUDA backend: '") + scalarOpName(op) +
             "' is not defined on floats");
      }
    }
    std::string la = "(long long)" + a, lb = "(long long)" + b;
    switch (op) {
    case ScalarOp::Add:
      return wrapInt(type, "df_iadd(" + la + ", " + lb + ")");
    case ScalarOp::Sub:
      return wrapInt(type, "df_isub(" + la + ", " + lb + ")");
    case ScalarOp::Mul:
      return wrapInt(type, "df_imul(" + la + ", " + lb + ")");
    case ScalarOp::Div:
      return wrapInt(type, "df_idiv(" + la + ", " + lb + ")");
    case ScalarOp::Fmod:
      return wrapInt(type, "df_ifmod(" + la + ", " + lb + ")");
    case ScalarOp::Remainder:
      return wrapInt(type, "df_mod(" + la + ", " + lb + ")");
    case ScalarOp::Pow:
      return wrapInt(type, "df_ipow(" + la + ", " + lb + ")");
    case ScalarOp::Max:
      return wrapInt(type, "max(" + la + ", " + lb + ")");
    case ScalarOp::Min:
      return wrapInt(type, "min(" + la + ", " + lb + ")");
    case ScalarOp::And:
      return wrapInt(type, "(" + a + " && " + b + ")");
    case ScalarOp::Or:
      return wrapInt(type, "(" + a + " || " + b + ")");
    case ScalarOp::Xor:
      return wrapInt(type, "((" + a + " != 0) != (" + b + " != 0))");
    case ScalarOp::BitAnd:
      return wrapInt(type, "(" + la + " & " + lb + ")");
    case ScalarOp::BitOr:
      return wrapInt(type, "(" + la + " | " + lb + ")");
    case ScalarOp::BitXor:
      return wrapInt(type, "(" + la + " ^ " + lb + ")");
    default:
      fail(std::string("CUDA backend: '") + scalarOpName(op) +
           "' is not defined on integers");
    }
  }
};

} // namespace

std::string emitCUDAKernel(const Kernel &kernel, CUDAKernelInfo &info) {
  return KernelEmitter(kernel, info).emit();
}

std::string emitCUDA(const LoopModule &module,
                     std::vector<CUDAKernelInfo> *infos) {
  std::string text = cudaPrelude();
  for (const Kernel &kernel : module.kernels) {
    CUDAKernelInfo info;
    text += "\n// kernel @" + kernel.name + "\n" + emitCUDAKernel(kernel, info);
    if (infos)
      infos->push_back(info);
  }
  return text;
}

} // namespace dynafuse
