//===- MLIRCodegen.h - Internals of the MLIR export and backend -*- C++ -*-===//
//
// KernelExporter turns one loop-IR kernel into a `func.func` built with
// MLIR's OpBuilder; its methods are split by concern: statements and
// reductions (KernelExport.cpp), scalar instructions (ScalarExport.cpp),
// index arithmetic, loads and stores (MemoryExport.cpp). LowerToLLVM.cpp
// holds MLIR's conversion pipeline to the LLVM dialect.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CODEGEN_MLIR_MLIRCODEGEN_H
#define DYNAFUSE_CODEGEN_MLIR_MLIRCODEGEN_H

#include "dynafuse/Loop/Kernel.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace dynafuse {
namespace mlircg {

/// A context with every dialect the export and the lowering use loaded.
std::unique_ptr<mlir::MLIRContext> createContext();

/// The kernels of `module` as a verified MLIR module. With `rangeVariants`
/// (the backend's own use), each splittable kernel (Runtime/Parallel.h) is
/// `@NAME.range` instead, taking two more index arguments, the begin and end
/// of its outer loop, so the executor can split it over threads (a whole
/// run passes 0 and the extent; one function per kernel keeps compile time
/// down).
mlir::OwningOpRef<mlir::ModuleOp> exportLoopModule(const LoopModule &module,
                                                   mlir::MLIRContext &context,
                                                   bool rangeVariants = false);

/// MLIR's passes from the exported dialects down to the LLVM dialect.
void lowerToLLVMDialect(mlir::ModuleOp module);

std::string printOperation(mlir::Operation *operation);

/// Element type of a buffer in memory: bool is i8, f16 and bf16 are MLIR's
/// half types.
mlir::Type storageType(mlir::MLIRContext &context, DType type);
/// Type of a scalar value: bool is i1; f16 and bf16 compute in f32.
mlir::Type valueType(mlir::MLIRContext &context, DType type);
/// memref with the buffer's sizes and a strided layout (static where the
/// type's sizes and strides are constants, `?` where they are symbolic).
mlir::MemRefType memrefType(mlir::MLIRContext &context,
                            const TensorType &type);

/// The name of the C-interface wrapper MLIR generates for a kernel (or for
/// its range variant).
std::string cInterfaceName(const Kernel &kernel, bool range = false);

class KernelExporter {
public:
  /// `rangeLoop`: the kernel's splittable outer loop, to build the range
  /// variant, whose extra arguments bound it; null for the kernel itself.
  KernelExporter(const Kernel &kernel, mlir::ModuleOp module,
                 const Stmt *rangeLoop = nullptr);
  /// Builds the kernel's function at the end of the module.
  void run();

private:
  // KernelExport.cpp: statements, loops and reductions.
  void emitStatements(const std::vector<Stmt> &statements);
  void emitLoop(const Stmt &loop);
  void emitReduce(const Stmt &reduce);
  mlir::Value reduceIdentity(ReduceKind kind, DType type);
  mlir::Value combine(ReduceKind kind, DType type, mlir::Value accumulator,
                      mlir::Value value);
  mlir::Value argBetter(ReduceKind kind, DType type, mlir::Value candidate,
                        mlir::Value best);

  // ScalarExport.cpp: one instruction each.
  void emitInstruction(int index);
  mlir::Value emitConstant(const Instr &instr);
  mlir::Value emitCast(DType from, DType to, mlir::Value value);
  mlir::Value truncateToInt64(mlir::Value x);
  mlir::Value emitUnary(ScalarOp op, DType type, mlir::Value x);
  mlir::Value emitFloatBinary(ScalarOp op, mlir::Value a, mlir::Value b);
  mlir::Value emitIntBinary(ScalarOp op, DType type, mlir::Value a,
                            mlir::Value b);
  mlir::Value emitRandom(DType type, mlir::Value key, mlir::Value counter);

  // MemoryExport.cpp: index expressions, loads and stores.
  mlir::Value emitIndex(const SymExpr &expr);
  mlir::Value emitFloorDivMod(bool wantMod, mlir::Value lhs, mlir::Value rhs,
                              const SymExpr &divisor);
  mlir::Value indirectIndex(const std::string &symbol);
  /// `func.func private @dynafuse_index_error(i64, i64)`, once per module.
  void declareErrorReport(const char *name);
  void declareIndexError();
  /// Declares dynafuse_division_error (an integer division by zero).
  void declareDivisionError();
  mlir::Value emitLoad(const Instr &instr);
  void emitStore(const Instr &instr);
  /// Runs `access` on the element's indices inside the scf.if nest of the
  /// instruction's mask and indirect-index bounds checks; outside them the
  /// result is `fallback` (null for stores).
  mlir::Value emitGuarded(const Instr &instr, mlir::Value mask,
                          mlir::Value fallback,
                          const std::function<mlir::Value(
                              const std::vector<mlir::Value> &)> &access);

  // Small builders.
  mlir::Value constantIndex(int64_t value);
  mlir::Value constantInt(int64_t value, mlir::Type type);
  /// An f32's bits rounded to the nearest bf16 (ties to even; a NaN stays
  /// a quiet NaN): the bf16 is the upper half of the i32 returned.
  mlir::Value bf16RoundedBits(mlir::Value f32);
  mlir::Value constantFloat(double value, mlir::Type type);
  mlir::Value constant(mlir::TypedAttr value);
  /// Builds an scf.if; each branch callback returns its yielded value
  /// (null when resultType is null).
  mlir::Value emitIf(mlir::Value condition, mlir::Type resultType,
                     const std::function<mlir::Value()> &thenBranch,
                     const std::function<mlir::Value()> &elseBranch);
  [[noreturn]] void failAt(const std::string &message) const;

  const Kernel &kernel;
  const Stmt *rangeLoop;
  mlir::Value rangeBegin, rangeEnd;
  mlir::ModuleOp module;
  mlir::MLIRContext &context;
  mlir::OpBuilder builder;
  mlir::Location loc;
  std::vector<mlir::Value> params;
  /// Size symbols and loop variables in scope, by name.
  std::map<std::string, mlir::Value> names;
  /// Instruction index -> its value, once emitted.
  std::vector<mlir::Value> values;
  /// Constants made so far, all at the top of the entry block (the last
  /// one is `lastConstant`).
  llvm::DenseMap<mlir::Attribute, mlir::Value> constants;
  mlir::Block *entryBlock = nullptr;
  mlir::Operation *lastConstant = nullptr;
};

} // namespace mlircg
} // namespace dynafuse

#endif
