//===- KernelEmitter.cpp - Loop-IR kernels to one llvm::Module ------------===//
//
// Each kernel becomes `void @name(ptr %buffers, ptr %symbols)`. The entry
// block loads every buffer's base address and every size symbol once and
// computes the strides; each `for` becomes a guarded bottom-tested loop over
// an i64 induction variable (the shape LLVM's loop passes like best); loads
// and stores compute `base + sum(index_k * stride_k)` in elements. Index
// expressions are emitted where they are used and left to LICM, GVN and
// SCEV to hoist and strength-reduce. Floor division and modulo follow
// Python's semantics.
//
//===----------------------------------------------------------------------===//
#include "LLVMCodegen.h"

#include "dynafuse/Support/Error.h"

#include "llvm/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

#include <map>

namespace dynafuse {
namespace llvmcg {
namespace {

using llvm::Value;

/// The in-memory element type of a buffer: bool is one byte, f16 and bf16
/// are raw 16-bit patterns converted by the runtime helpers.
llvm::Type *storageType(llvm::LLVMContext &context, DType type) {
  switch (type) {
  case DType::Bool:
    return llvm::Type::getInt8Ty(context);
  case DType::F16:
  case DType::BF16:
    return llvm::Type::getInt16Ty(context);
  default:
    return scalarType(context, type);
  }
}

class KernelEmitter {
public:
  KernelEmitter(const Kernel &kernel, llvm::Module &module,
                llvm::TargetMachine &machine)
      : kernel(kernel), module(module), context(module.getContext()),
        builder(context), machine(machine) {}

  void emit() {
    llvm::Type *ptr = llvm::PointerType::getUnqual(context);
    auto *type = llvm::FunctionType::get(builder.getVoidTy(), {ptr, ptr},
                                         /*isVarArg=*/false);
    std::string name = llvmFunctionName(kernel);
    if (module.getFunction(name))
      fail("LLVM backend: two kernels named @" + kernel.name);
    function = llvm::Function::Create(type, llvm::Function::ExternalLinkage,
                                      name, module);
    setAttributes();
    builder.SetInsertPoint(
        llvm::BasicBlock::Create(context, "entry", function));
    loadArguments();
    values.assign(kernel.instrs.size(), nullptr);
    emitBlock(kernel.body);
    builder.CreateRetVoid();
  }

private:
  const Kernel &kernel;
  llvm::Module &module;
  llvm::LLVMContext &context;
  llvm::IRBuilder<> builder;
  llvm::TargetMachine &machine;
  llvm::Function *function = nullptr;
  /// Kernel symbols and the induction variables of enclosing loops.
  std::map<std::string, Value *> symbols;
  std::vector<Value *> bases;
  std::vector<std::vector<Value *>> strides;
  std::vector<Value *> values;

  void setAttributes() {
    function->setDoesNotThrow();
    function->addFnAttr("target-cpu", machine.getTargetCPU());
    function->addFnAttr("target-features", machine.getTargetFeatureString());
    for (unsigned i = 0; i < 2; ++i) {
      function->addParamAttr(i, llvm::Attribute::NoCapture);
      function->addParamAttr(i, llvm::Attribute::ReadOnly);
      function->addParamAttr(i, llvm::Attribute::NoAlias);
    }
    function->getArg(0)->setName("buffers");
    function->getArg(1)->setName("symbols");
  }

  void loadArguments() {
    llvm::Type *ptr = llvm::PointerType::getUnqual(context);
    for (size_t j = 0; j < kernel.symbols.size(); ++j) {
      Value *address = builder.CreateConstInBoundsGEP1_64(
          builder.getInt64Ty(), function->getArg(1), j);
      symbols[kernel.symbols[j]] =
          builder.CreateLoad(builder.getInt64Ty(), address, kernel.symbols[j]);
    }
    for (size_t i = 0; i < kernel.params.size(); ++i) {
      const LoopBuffer &param = kernel.params[i];
      Value *address =
          builder.CreateConstInBoundsGEP1_64(ptr, function->getArg(0), i);
      bases.push_back(builder.CreateLoad(ptr, address, param.name + ".base"));
      std::vector<Value *> paramStrides;
      for (const SymExpr &stride : param.type.effectiveStrides())
        paramStrides.push_back(emitSymExpr(stride));
      strides.push_back(paramStrides);
    }
  }

  //===--- Symbolic integers ----------------------------------------------===//

  Value *emitSymExpr(const SymExpr &expr) {
    switch (expr.kind()) {
    case SymExpr::Kind::Constant:
      return builder.getInt64(expr.constant());
    case SymExpr::Kind::Symbol: {
      auto found = symbols.find(expr.symbolName());
      if (found == symbols.end())
        fail("LLVM backend: kernel @" + kernel.name + " uses unbound symbol '" +
             expr.symbolName() + "'");
      return found->second;
    }
    case SymExpr::Kind::Add:
    case SymExpr::Kind::Mul: {
      bool add = expr.kind() == SymExpr::Kind::Add;
      Value *result = nullptr;
      for (const SymExpr &operand : expr.operands()) {
        Value *value = emitSymExpr(operand);
        if (!result)
          result = value;
        else if (add)
          result = builder.CreateNSWAdd(result, value);
        else
          result = builder.CreateNSWMul(result, value);
      }
      return result ? result : builder.getInt64(add ? 0 : 1);
    }
    case SymExpr::Kind::FloorDiv:
    case SymExpr::Kind::Mod:
      return emitFloorDivMod(expr.kind() == SymExpr::Kind::Mod,
                             emitSymExpr(expr.operands()[0]),
                             emitSymExpr(expr.operands()[1]));
    }
    fail("LLVM backend: unknown symbolic expression kind");
  }

  /// Python's // and %: truncating sdiv/srem, then adjusted by one divisor
  /// when the remainder is nonzero and its sign differs from the divisor's.
  /// Unless the divisor is a constant other than 0 and -1, it is guarded: 0
  /// (an invalid program) yields garbage instead of a trap, and -1 is
  /// handled without dividing so that MIN // -1 cannot trap either.
  Value *emitFloorDivMod(bool wantMod, Value *lhs, Value *rhs) {
    auto *constant = llvm::dyn_cast<llvm::ConstantInt>(rhs);
    if (constant && !constant->isZero() && !constant->isMinusOne()) {
      Value *quotient = builder.CreateSDiv(lhs, rhs);
      Value *remainder = builder.CreateSRem(lhs, rhs);
      return adjust(wantMod, quotient, remainder, rhs);
    }
    Value *isZero = builder.CreateICmpEQ(rhs, builder.getInt64(0));
    Value *isMinusOne = builder.CreateICmpEQ(rhs, builder.getInt64(-1));
    Value *divisor = builder.CreateSelect(builder.CreateOr(isZero, isMinusOne),
                                          builder.getInt64(1), rhs);
    Value *quotient = builder.CreateSDiv(lhs, divisor);
    Value *remainder = builder.CreateSRem(lhs, divisor);
    Value *result = adjust(wantMod, quotient, remainder, divisor);
    Value *byMinusOne = wantMod ? builder.getInt64(0) : builder.CreateNeg(lhs);
    return builder.CreateSelect(isMinusOne, byMinusOne, result);
  }

  Value *adjust(bool wantMod, Value *quotient, Value *remainder,
                Value *divisor) {
    Value *zero = builder.getInt64(0);
    Value *inexact = builder.CreateICmpNE(remainder, zero);
    Value *signsDiffer =
        builder.CreateICmpSLT(builder.CreateXor(remainder, divisor), zero);
    Value *fix = builder.CreateAnd(inexact, signsDiffer);
    if (wantMod)
      return builder.CreateSelect(fix, builder.CreateAdd(remainder, divisor),
                                  remainder);
    return builder.CreateSub(quotient,
                             builder.CreateZExt(fix, builder.getInt64Ty()));
  }

  //===--- Statements -----------------------------------------------------===//

  void emitBlock(const std::vector<Stmt> &block) {
    for (const Stmt &stmt : block) {
      if (stmt.kind == Stmt::Kind::For)
        emitLoop(stmt);
      else
        emitInstr(stmt.instr);
    }
  }

  /// for v in 0..n { body }  becomes
  ///   guard:  br (0 < n), header, exit
  ///   header: v = phi [0, guard], [v.next, latch]; body
  ///   latch:  v.next = v + 1; br (v.next < n), header, exit
  void emitLoop(const Stmt &loop) {
    Value *extent = emitSymExpr(loop.extent);
    llvm::BasicBlock *guard = builder.GetInsertBlock();
    auto *header =
        llvm::BasicBlock::Create(context, "for." + loop.var, function);
    auto *exit = llvm::BasicBlock::Create(context, "for." + loop.var + ".exit",
                                          function);
    Value *zero = builder.getInt64(0);
    builder.CreateCondBr(builder.CreateICmpSLT(zero, extent), header, exit);

    builder.SetInsertPoint(header);
    llvm::PHINode *var = builder.CreatePHI(builder.getInt64Ty(), 2, loop.var);
    var->addIncoming(zero, guard);
    symbols[loop.var] = var;
    emitBlock(loop.body);
    symbols.erase(loop.var);

    // The body may have added blocks: the latch is wherever it ended.
    llvm::BasicBlock *latch = builder.GetInsertBlock();
    Value *next =
        builder.CreateAdd(var, builder.getInt64(1), loop.var + ".next",
                          /*HasNUW=*/true, /*HasNSW=*/true);
    builder.CreateCondBr(builder.CreateICmpSLT(next, extent), header, exit);
    var->addIncoming(next, latch);
    builder.SetInsertPoint(exit);
  }

  Value *elementAddress(const Instr &instr) {
    const LoopBuffer &param = kernel.params[instr.buffer];
    Value *offset = nullptr;
    for (size_t k = 0; k < instr.index.size(); ++k) {
      Value *term = emitSymExpr(instr.index[k]);
      Value *stride = strides[instr.buffer][k];
      auto *constant = llvm::dyn_cast<llvm::ConstantInt>(stride);
      if (!constant || !constant->isOne())
        term = builder.CreateNSWMul(term, stride);
      offset = offset ? builder.CreateNSWAdd(offset, term) : term;
    }
    if (!offset)
      return bases[instr.buffer];
    return builder.CreateInBoundsGEP(storageType(context, param.type.dtype),
                                     bases[instr.buffer], offset);
  }

  Value *emitLoad(const Instr &instr) {
    DType dtype = kernel.params[instr.buffer].type.dtype;
    Value *raw =
        builder.CreateLoad(storageType(context, dtype), elementAddress(instr));
    switch (dtype) {
    case DType::Bool:
      return builder.CreateIsNotNull(raw);
    case DType::F16:
      return callRuntimeFunction(builder, "dynafuse_f16_to_f32", {raw});
    case DType::BF16:
      return callRuntimeFunction(builder, "dynafuse_bf16_to_f32", {raw});
    default:
      return raw;
    }
  }

  void emitStore(const Instr &instr, Value *value) {
    DType dtype = kernel.params[instr.buffer].type.dtype;
    switch (dtype) {
    case DType::Bool:
      value = builder.CreateZExt(value, builder.getInt8Ty());
      break;
    case DType::F16:
      value = callRuntimeFunction(builder, "dynafuse_f32_to_f16", {value});
      break;
    case DType::BF16:
      value = callRuntimeFunction(builder, "dynafuse_f32_to_bf16", {value});
      break;
    default:
      break;
    }
    builder.CreateStore(value, elementAddress(instr));
  }

  void emitInstr(int id) {
    const Instr &instr = kernel.instrs[id];
    std::vector<Value *> operands;
    std::vector<DType> operandTypes;
    for (int arg : instr.args) {
      if (!values[arg])
        fail("LLVM backend: kernel @" + kernel.name +
                 ": operand used before its definition",
             instr.where);
      operands.push_back(values[arg]);
      operandTypes.push_back(kernel.instrs[arg].type);
    }
    switch (instr.op) {
    case ScalarOp::Const:
      values[id] = emitConstant(builder, instr);
      return;
    case ScalarOp::Load:
      values[id] = emitLoad(instr);
      return;
    case ScalarOp::Store:
      emitStore(instr, operands[0]);
      return;
    default:
      values[id] = emitScalarOp(builder, instr, operandTypes, operands);
      return;
    }
  }
};

} // namespace

std::string llvmFunctionName(const Kernel &kernel) {
  const std::string &name = kernel.name;
  bool reserved = name.empty() || name.rfind("llvm.", 0) == 0 ||
                  name.rfind("dynafuse_", 0) == 0 || isRuntimeSymbolName(name);
  return reserved ? "dynafuse_kernel_" + name : name;
}

std::unique_ptr<llvm::Module> emitLoopModule(const LoopModule &loops,
                                             llvm::LLVMContext &context,
                                             llvm::TargetMachine &machine) {
  auto module = std::make_unique<llvm::Module>(loops.name, context);
  module->setTargetTriple(machine.getTargetTriple().str());
  module->setDataLayout(machine.createDataLayout());
  for (const Kernel &kernel : loops.kernels)
    KernelEmitter(kernel, *module, machine).emit();
  std::string problems;
  llvm::raw_string_ostream stream(problems);
  if (llvm::verifyModule(*module, &stream))
    fail("LLVM backend: generated IR for module @" + loops.name +
         " does not verify: " + stream.str());
  return module;
}

} // namespace llvmcg
} // namespace dynafuse
