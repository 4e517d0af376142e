//===- LowerToLLVM.cpp - MLIR's own pipeline down to the LLVM dialect -----===//
//
// The exported module goes down with upstream passes only:
//   math.expm1, math.log1p -> call @expm1f, @log1pf (see lowerToLibmCall)
//   convert-math-to-llvm      exp, exp2, log, sqrt, pow, roundeven, ... to
//                             LLVM intrinsics
//   convert-math-to-libm      tanh, erf (calls of tanhf, erff, ...)
//   convert-scf-to-cf         loops and ifs to blocks
//   arith-expand              floordivsi, maxf/minf to plain arith
//   convert-memref-to-llvm    descriptors, strided addressing
//   convert-func-to-llvm      the C interface wrappers
//   convert-arith-to-llvm, convert-cf-to-llvm, reconcile-unrealized-casts
//
//===----------------------------------------------------------------------===//
#include "MLIRCodegen.h"

#include "dynafuse/Support/Error.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MathToLibm/MathToLibm.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"

namespace dynafuse {
namespace mlircg {

std::unique_ptr<mlir::MLIRContext> createContext() {
  mlir::DialectRegistry registry;
  registry.insert<mlir::func::FuncDialect, mlir::scf::SCFDialect,
                  mlir::memref::MemRefDialect, mlir::arith::ArithDialect,
                  mlir::math::MathDialect, mlir::cf::ControlFlowDialect,
                  mlir::LLVM::LLVMDialect>();
  mlir::registerLLVMDialectTranslation(registry);
  // No threads of MLIR's own: kernels compile on the caller's thread.
  auto context = std::make_unique<mlir::MLIRContext>(
      registry, mlir::MLIRContext::Threading::DISABLED);
  context->loadAllAvailableDialects();
  return context;
}

namespace {

/// Replaces every `Op` with a call of libm's `f32Name` or `f64Name`.
/// MLIR 16's math-to-llvm would write expm1 as exp(x) - 1 and log1p as
/// log(1 + x), losing the digits these functions exist for, and its
/// math-to-libm marks math.exp illegal without lowering it; so these two go
/// to libm first, then math-to-llvm, then math-to-libm for the rest.
template <typename Op>
void lowerToLibmCall(mlir::ModuleOp module, const char *f32Name,
                     const char *f64Name) {
  std::vector<Op> found;
  module.walk([&](Op op) { found.push_back(op); });
  mlir::OpBuilder builder(module.getContext());
  for (Op op : found) {
    mlir::Type type = op.getType();
    std::string callee = type.isF32() ? f32Name : f64Name;
    if (!module.lookupSymbol(callee)) {
      mlir::OpBuilder::InsertionGuard guard(builder);
      builder.setInsertionPointToStart(module.getBody());
      auto declaration = builder.create<mlir::func::FuncOp>(
          op.getLoc(), callee, builder.getFunctionType({type}, {type}));
      declaration.setPrivate();
    }
    builder.setInsertionPoint(op);
    auto call = builder.create<mlir::func::CallOp>(
        op.getLoc(), callee, mlir::TypeRange{type},
        mlir::ValueRange{op.getOperand()});
    op.getResult().replaceAllUsesWith(call.getResult(0));
    op.erase();
  }
}

} // namespace

void lowerToLLVMDialect(mlir::ModuleOp module) {
  lowerToLibmCall<mlir::math::ExpM1Op>(module, "expm1f", "expm1");
  lowerToLibmCall<mlir::math::Log1pOp>(module, "log1pf", "log1p");
  mlir::PassManager passes(module.getContext());
  passes.addPass(mlir::createConvertMathToLLVMPass());
  passes.addPass(mlir::createConvertMathToLibmPass());
  passes.addPass(mlir::createConvertSCFToCFPass());
  passes.addPass(mlir::arith::createArithExpandOpsPass());
  passes.addPass(mlir::createMemRefToLLVMConversionPass());
  passes.addPass(mlir::createConvertFuncToLLVMPass());
  passes.addPass(mlir::createArithToLLVMConversionPass());
  passes.addPass(mlir::cf::createConvertControlFlowToLLVMPass());
  passes.addPass(mlir::createReconcileUnrealizedCastsPass());
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(
      module.getContext(), [&](mlir::Diagnostic &diagnostic) {
        diagnostics += diagnostic.str() + "\n";
        return mlir::success();
      });
  if (mlir::failed(passes.run(module)))
    fail("MLIR backend: lowering to the LLVM dialect failed: " + diagnostics);
}

} // namespace mlircg
} // namespace dynafuse
