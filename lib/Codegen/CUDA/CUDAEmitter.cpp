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

#include "CUDAInstructionEmitter.h"
#include "CUDAScalarText.h"

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

using namespace cudatext;

class KernelEmitter : CUDAInstructionEmitter {
public:
  KernelEmitter(const Kernel &kernel, CUDAKernelInfo &info)
      : CUDAInstructionEmitter(kernel), info(info) {}

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
  CUDAKernelInfo &info;

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
