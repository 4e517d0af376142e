//===- KernelExport.cpp - Loop-IR kernels as func/scf functions ----------===//
//
// A kernel becomes
//
//   func.func @k(%arg0: memref<?x64xf32, strided<[64, 1]>> {dynafuse.param = "x"},
//                ..., %arg3: index {dynafuse.symbol = "s0"})
//       attributes {llvm.emit_c_interface}
//
// one memref per parameter (its sizes and strides static where the loop
// IR's are constants), one index per size symbol. `for i in 0..E` is an
// scf.for from 0 to E step 1; a reduce statement is a nest of scf.for over
// its variables whose iter_args carry the accumulators (two for argmax and
// argmin: value and position). A float sum accumulates in f64 and is
// rounded once at the end, as the interpreter does (ScalarSemantics.h).
//
//===----------------------------------------------------------------------===//
#include "MLIRCodegen.h"

#include "dynafuse/Runtime/Parallel.h"
#include "dynafuse/Support/Error.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Verifier.h"

#include <algorithm>
#include <limits>

namespace dynafuse {
namespace mlircg {

using mlir::Value;

//===--- Types ------------------------------------------------------------===//

mlir::Type storageType(mlir::MLIRContext &context, DType type) {
  mlir::Builder b(&context);
  switch (type) {
  case DType::Bool:
    return b.getI8Type();
  case DType::F16:
    return b.getF16Type();
  case DType::BF16:
    return b.getBF16Type();
  default:
    return valueType(context, type);
  }
}

mlir::Type valueType(mlir::MLIRContext &context, DType type) {
  mlir::Builder b(&context);
  switch (type) {
  case DType::Bool:
    return b.getI1Type();
  case DType::I32:
    return b.getI32Type();
  case DType::I64:
    return b.getI64Type();
  case DType::F16:
  case DType::BF16:
  case DType::F32:
    return b.getF32Type();
  case DType::F64:
    return b.getF64Type();
  }
  fail("MLIR export: unknown dtype");
}

mlir::MemRefType memrefType(mlir::MLIRContext &context,
                            const TensorType &type) {
  std::vector<int64_t> shape, strides;
  for (const SymExpr &size : type.sizes)
    shape.push_back(size.isConstant() ? size.constant()
                                      : mlir::ShapedType::kDynamic);
  for (const SymExpr &stride : type.effectiveStrides())
    strides.push_back(stride.isConstant() ? stride.constant()
                                          : mlir::ShapedType::kDynamic);
  // An empty buffer's row-major strides can be 0 (f32[1, 0, 1]), which
  // MLIR's strided layout refuses; none of its strides is ever used.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end())
    for (int64_t &stride : strides)
      if (stride == 0)
        stride = 1;
  mlir::Type element = storageType(context, type.dtype);
  if (shape.empty())
    return mlir::MemRefType::get(shape, element);
  return mlir::MemRefType::get(
      shape, element, mlir::StridedLayoutAttr::get(&context, 0, strides));
}

std::string cInterfaceName(const Kernel &kernel, bool range) {
  return "_mlir_ciface_" + kernel.name + (range ? ".range" : "");
}

//===--- The function -----------------------------------------------------===//

KernelExporter::KernelExporter(const Kernel &kernel, mlir::ModuleOp module,
                               const Stmt *rangeLoop)
    : kernel(kernel), rangeLoop(rangeLoop), module(module), context(*module.getContext()),
      builder(module.getContext()),
      loc(mlir::NameLoc::get(builder.getStringAttr(kernel.name))),
      values(kernel.instrs.size()) {}

void KernelExporter::failAt(const std::string &message) const {
  fail("MLIR export: kernel @" + kernel.name + ": " + message);
}

void KernelExporter::run() {
  std::vector<mlir::Type> argumentTypes;
  for (const LoopBuffer &param : kernel.params)
    argumentTypes.push_back(memrefType(context, param.type));
  for (size_t j = 0; j < kernel.symbols.size(); ++j)
    argumentTypes.push_back(builder.getIndexType());
  if (rangeLoop) {
    argumentTypes.push_back(builder.getIndexType());
    argumentTypes.push_back(builder.getIndexType());
  }
  builder.setInsertionPointToEnd(module.getBody());
  auto function = builder.create<mlir::func::FuncOp>(
      loc, kernel.name + (rangeLoop ? ".range" : ""),
      builder.getFunctionType(argumentTypes, {}));
  function->setAttr("llvm.emit_c_interface", builder.getUnitAttr());
  for (size_t i = 0; i < kernel.params.size(); ++i)
    function.setArgAttr(unsigned(i), "dynafuse.param",
                        builder.getStringAttr(kernel.params[i].name));
  for (size_t j = 0; j < kernel.symbols.size(); ++j)
    function.setArgAttr(unsigned(kernel.params.size() + j), "dynafuse.symbol",
                        builder.getStringAttr(kernel.symbols[j]));

  mlir::Block *entry = function.addEntryBlock();
  builder.setInsertionPointToStart(entry);
  for (size_t i = 0; i < kernel.params.size(); ++i)
    params.push_back(entry->getArgument(unsigned(i)));
  for (size_t j = 0; j < kernel.symbols.size(); ++j)
    names[kernel.symbols[j]] =
        entry->getArgument(unsigned(kernel.params.size() + j));
  if (rangeLoop) {
    unsigned first = unsigned(kernel.params.size() + kernel.symbols.size());
    rangeBegin = entry->getArgument(first);
    rangeEnd = entry->getArgument(first + 1);
  }
  entryBlock = entry;
  emitStatements(kernel.body);
  builder.create<mlir::func::ReturnOp>(loc);
}

void KernelExporter::emitStatements(const std::vector<Stmt> &statements) {
  for (const Stmt &statement : statements) {
    switch (statement.kind) {
    case Stmt::Kind::Instr:
      emitInstruction(statement.instr);
      break;
    case Stmt::Kind::For:
      emitLoop(statement);
      break;
    case Stmt::Kind::Reduce:
      emitReduce(statement);
      break;
    }
  }
}

void KernelExporter::emitLoop(const Stmt &loop) {
  bool ranged = &loop == rangeLoop;
  Value lower = ranged ? rangeBegin : constantIndex(0);
  Value upper = ranged ? rangeEnd : emitIndex(loop.extent);
  auto forOp =
      builder.create<mlir::scf::ForOp>(loc, lower, upper, constantIndex(1));
  mlir::OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPoint(forOp.getBody()->getTerminator());
  names[loop.var] = forOp.getInductionVar();
  emitStatements(loop.body);
  names.erase(loop.var);
}

//===--- Reductions -------------------------------------------------------===//

namespace {
bool accumulatesInF64(ReduceKind kind, DType type) {
  return kind == ReduceKind::Sum && type == DType::F32;
}
bool isArg(ReduceKind kind) {
  return kind == ReduceKind::ArgMax || kind == ReduceKind::ArgMin;
}
} // namespace

Value KernelExporter::reduceIdentity(ReduceKind kind, DType type) {
  mlir::Type accumulator = accumulatesInF64(kind, type)
                               ? builder.getF64Type()
                               : valueType(context, type);
  double inf = std::numeric_limits<double>::infinity();
  bool lowest = kind == ReduceKind::Max || kind == ReduceKind::ArgMax;
  bool highest = kind == ReduceKind::Min || kind == ReduceKind::ArgMin;
  if (isFloating(type)) {
    double value = kind == ReduceKind::Prod ? 1 : lowest ? -inf
                                               : highest ? inf
                                                         : 0;
    return constantFloat(value, accumulator);
  }
  int64_t value = 0;
  if (kind == ReduceKind::Prod || kind == ReduceKind::All)
    value = 1;
  else if (type == DType::Bool)
    value = highest ? 1 : 0;
  else if (lowest)
    value = type == DType::I32 ? INT32_MIN : INT64_MIN;
  else if (highest)
    value = type == DType::I32 ? INT32_MAX : INT64_MAX;
  return constantInt(value, accumulator);
}

Value KernelExporter::combine(ReduceKind kind, DType type, Value accumulator,
                              Value value) {
  bool floating = isFloating(type);
  switch (kind) {
  case ReduceKind::Sum:
    if (accumulatesInF64(kind, type))
      value = builder.create<mlir::arith::ExtFOp>(loc, builder.getF64Type(),
                                                  value);
    // In order, as the interpreter adds (no reassoc, unlike the LLVM
    // backend's vectorized sums): the oracle keeps the reference order.
    if (floating)
      return builder.create<mlir::arith::AddFOp>(loc, accumulator, value);
    return emitIntBinary(ScalarOp::Add, type, accumulator, value);
  case ReduceKind::Prod:
    if (floating)
      return builder.create<mlir::arith::MulFOp>(loc, accumulator, value);
    return emitIntBinary(ScalarOp::Mul, type, accumulator, value);
  case ReduceKind::Max:
  case ReduceKind::Min: {
    bool max = kind == ReduceKind::Max;
    if (floating)
      return emitFloatBinary(max ? ScalarOp::Max : ScalarOp::Min, accumulator,
                             value);
    if (type == DType::Bool)
      return max ? Value(builder.create<mlir::arith::OrIOp>(loc, accumulator,
                                                            value))
                 : Value(builder.create<mlir::arith::AndIOp>(loc, accumulator,
                                                             value));
    return emitIntBinary(max ? ScalarOp::Max : ScalarOp::Min, type,
                         accumulator, value);
  }
  case ReduceKind::Any:
    return builder.create<mlir::arith::OrIOp>(loc, accumulator, value);
  case ReduceKind::All:
    return builder.create<mlir::arith::AndIOp>(loc, accumulator, value);
  case ReduceKind::ArgMax:
  case ReduceKind::ArgMin:
    break;
  }
  failAt("argmax and argmin combine two accumulators");
}

void KernelExporter::emitReduce(const Stmt &reduce) {
  ReduceKind kind = reduce.reduceKind;
  DType type = kernel.instrs[reduce.yields[0]].type;
  std::vector<Value> initial = {reduceIdentity(kind, type)};
  if (isArg(kind))
    initial.push_back(constantInt(0, builder.getI64Type()));

  // One scf.for per reduction variable, the accumulators threaded through
  // each level's iter_args; the body and the combination sit innermost.
  std::function<std::vector<Value>(size_t, std::vector<Value>)> nest =
      [&](size_t dim, std::vector<Value> accumulators) -> std::vector<Value> {
    if (dim == reduce.vars.size()) {
      emitStatements(reduce.body);
      Value yielded = values[reduce.yields[0]];
      if (!yielded)
        failAt("reduce yields a value its body does not define");
      if (!isArg(kind))
        return {combine(kind, type, accumulators[0], yielded)};
      Value position = values[reduce.yields[1]];
      Value better = argBetter(kind, type, yielded, accumulators[0]);
      return {builder.create<mlir::arith::SelectOp>(loc, better, yielded,
                                                    accumulators[0]),
              builder.create<mlir::arith::SelectOp>(loc, better, position,
                                                    accumulators[1])};
    }
    Value extent = emitIndex(reduce.extents[dim]);
    auto forOp = builder.create<mlir::scf::ForOp>(
        loc, constantIndex(0), extent, constantIndex(1), accumulators);
    {
      mlir::OpBuilder::InsertionGuard guard(builder);
      builder.setInsertionPointToEnd(forOp.getBody());
      names[reduce.vars[dim]] = forOp.getInductionVar();
      std::vector<Value> inner(forOp.getRegionIterArgs().begin(),
                               forOp.getRegionIterArgs().end());
      std::vector<Value> next = nest(dim + 1, inner);
      builder.create<mlir::scf::YieldOp>(loc, next);
      names.erase(reduce.vars[dim]);
    }
    return std::vector<Value>(forOp.getResults().begin(),
                              forOp.getResults().end());
  };
  std::vector<Value> results = nest(0, initial);
  if (accumulatesInF64(kind, type))
    results[0] = builder.create<mlir::arith::TruncFOp>(
        loc, builder.getF32Type(), results[0]);
  for (size_t r = 0; r < reduce.results.size(); ++r)
    values[reduce.results[r]] = results[r];
}

/// Whether candidate replaces best in an argmax (greater) or argmin: strictly
/// better, or the first NaN (a NaN best is never replaced).
Value KernelExporter::argBetter(ReduceKind kind, DType type,
                                           Value candidate, Value best) {
  bool greater = kind == ReduceKind::ArgMax;
  if (!isFloating(type)) {
    auto predicate = type == DType::Bool
                         ? (greater ? mlir::arith::CmpIPredicate::ugt
                                    : mlir::arith::CmpIPredicate::ult)
                         : (greater ? mlir::arith::CmpIPredicate::sgt
                                    : mlir::arith::CmpIPredicate::slt);
    return builder.create<mlir::arith::CmpIOp>(loc, predicate, candidate, best);
  }
  using P = mlir::arith::CmpFPredicate;
  Value bestIsNumber = builder.create<mlir::arith::CmpFOp>(loc, P::ORD, best, best);
  Value candidateIsNaN =
      builder.create<mlir::arith::CmpFOp>(loc, P::UNO, candidate, candidate);
  Value strictly = builder.create<mlir::arith::CmpFOp>(
      loc, greater ? P::OGT : P::OLT, candidate, best);
  Value either =
      builder.create<mlir::arith::OrIOp>(loc, candidateIsNaN, strictly);
  return builder.create<mlir::arith::AndIOp>(loc, bestIsNumber, either);
}

//===--- The module -------------------------------------------------------===//

mlir::OwningOpRef<mlir::ModuleOp> exportLoopModule(const LoopModule &module,
                                                   mlir::MLIRContext &context,
                                                   bool rangeVariants) {
  mlir::OpBuilder builder(&context);
  mlir::OwningOpRef<mlir::ModuleOp> result =
      mlir::ModuleOp::create(builder.getUnknownLoc(), module.name);
  for (const Kernel &kernel : module.kernels) {
    if (const Stmt *loop = rangeVariants ? splittableLoop(kernel) : nullptr)
      KernelExporter(kernel, *result, loop).run();
    else
      KernelExporter(kernel, *result).run();
  }
  std::string diagnostics;
  {
    mlir::ScopedDiagnosticHandler handler(
        &context, [&](mlir::Diagnostic &diagnostic) {
          diagnostics += diagnostic.str() + "\n";
          return mlir::success();
        });
    if (mlir::failed(mlir::verify(*result)))
      fail("MLIR export: the module does not verify: " + diagnostics);
  }
  return result;
}

std::string printOperation(mlir::Operation *operation) {
  std::string text;
  llvm::raw_string_ostream stream(text);
  operation->print(stream);
  stream.flush();
  return text + "\n";
}

} // namespace mlircg
} // namespace dynafuse
