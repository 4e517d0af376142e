//===- KernelEmitter.h - One loop-IR kernel to one LLVM function -*- C++
//-*-===//
//
// Private to lib/Codegen/LLVM. The emitter's methods are split by concept:
//   KernelEmitter.cpp  the function, its arguments, statements and loops;
//   MemoryAccess.cpp   symbolic index arithmetic, addresses, loads and stores
//                      (masks and run-time bounds checks of indirect indices);
//   ReduceEmitter.cpp  reduce statements: nested loops carrying accumulators.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_LIB_CODEGEN_LLVM_KERNELEMITTER_H
#define DYNAFUSE_LIB_CODEGEN_LLVM_KERNELEMITTER_H

#include "LLVMCodegen.h"

#include "llvm/ADT/STLFunctionalExtras.h"

#include <map>
#include <string>
#include <vector>

namespace dynafuse {
namespace llvmcg {

class KernelEmitter {
public:
  KernelEmitter(const Kernel &kernel, llvm::Module &module,
                llvm::TargetMachine &machine, std::string vectorWidth);
  void emit();

private:
  using Value = llvm::Value;
  /// Emits a loop body given the current values of the loop-carried values;
  /// returns their values for the next iteration.
  using LoopBody =
      llvm::function_ref<std::vector<Value *>(llvm::ArrayRef<Value *>)>;

  const Kernel &kernel;
  llvm::Module &module;
  llvm::LLVMContext &context;
  llvm::IRBuilder<> builder;
  llvm::TargetMachine &machine;
  /// CodegenOptions::vectorWidth ("": the host decides).
  std::string vectorWidth;
  llvm::Function *function = nullptr;
  /// Kernel symbols and the induction variables of enclosing loops.
  std::map<std::string, Value *> symbols;
  std::vector<Value *> bases;
  std::vector<std::vector<Value *>> strides;
  std::vector<Value *> values;
  /// Instruction ids by name ("7" for %7), for indirect indices.
  std::map<std::string, int> idByName;
  /// The outer loop of a splittable kernel, and while emitting the range
  /// function, its begin and end arguments.
  const Stmt *splitLoop = nullptr;
  Value *rangeBegin = nullptr;
  Value *rangeEnd = nullptr;

  //===--- KernelEmitter.cpp ----------------------------------------------===//
  /// The current function's entry block, arguments and statements.
  void emitBody();
  void setAttributes();
  void loadArguments();
  void emitBlock(const std::vector<Stmt> &block);
  /// A guarded bottom-tested loop `var in begin..extent` (begin 0 when
  /// null) named `label`, carrying `carriedIn` through phis; returns the
  /// carried values after the loop (`carriedIn` when it runs zero times).
  std::vector<Value *> emitCountedLoop(const std::string &label,
                                       const std::string &var, Value *extent,
                                       llvm::ArrayRef<Value *> carriedIn,
                                       LoopBody body, Value *begin = nullptr);
  void interleaveInnermostLoop(llvm::BranchInst *backEdge, llvm::Value *extent);
  void emitLoop(const Stmt &loop);
  void emitInstr(int id);

  //===--- MemoryAccess.cpp -----------------------------------------------===//
  Value *emitSymExpr(const SymExpr &expr);
  /// The i64 value of a "%name" symbol (i32 values sign-extended).
  Value *indirectValue(const std::string &symbol);
  Value *emitFloorDivMod(bool wantMod, Value *lhs, Value *rhs);
  Value *adjust(bool wantMod, Value *quotient, Value *remainder,
                Value *divisor);
  Value *elementAddress(const Instr &instr, llvm::ArrayRef<Value *> indices);
  /// Runs `access` on the element's address where the mask (if any) is true
  /// and every indirect index is in bounds (reporting the first that is not
  /// to dynafuse_index_error); elsewhere the result is `fallback`.
  Value *emitGuardedAccess(const Instr &instr, Value *mask, Value *fallback,
                           llvm::function_ref<Value *(Value *)> access);
  Value *emitLoad(const Instr &instr, Value *mask);
  void emitStore(const Instr &instr, Value *value);

  //===--- ReduceEmitter.cpp ----------------------------------------------===//
  void emitReduce(const Stmt &stmt);
  /// The type a reduce statement accumulates in: f64 for an f32 sum, else
  /// its yielded type.
  DType accumulatorType(const Stmt &stmt) const;
  std::vector<Value *> emitReduceDims(const Stmt &stmt, size_t dim,
                                      llvm::ArrayRef<Value *> accumulators);
};

} // namespace llvmcg
} // namespace dynafuse

#endif
