//===- KernelEmitter.cpp - Loop-IR kernels to one llvm::Module ------------===//
//
// Each kernel becomes `void @name(ptr %buffers, ptr %symbols)`. The entry
// block loads every buffer's base address and every size symbol once and
// computes the strides. A splittable kernel (Runtime/Parallel.h) gets a
// second function, `@name.range(buffers, symbols, begin, end)`, running a
// range of its outer loop; `@name` calls it on the whole loop. Each `for`
// becomes a guarded bottom-tested loop over
// an i64 induction variable (the shape LLVM's loop passes like best), and
// each reduce statement a nest of such loops carrying its accumulators
// (ReduceEmitter.cpp). Index arithmetic, loads and stores are in
// MemoryAccess.cpp, scalar instructions in ScalarOps.cpp.
//
//===----------------------------------------------------------------------===//
#include "KernelEmitter.h"

#include "dynafuse/Runtime/Parallel.h"
#include "dynafuse/Support/Error.h"

#include "llvm/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

namespace dynafuse {
namespace llvmcg {

using llvm::Value;

KernelEmitter::KernelEmitter(const Kernel &kernel, llvm::Module &module,
                             llvm::TargetMachine &machine,
                             std::string vectorWidth)
    : kernel(kernel), module(module), context(module.getContext()),
      builder(context), machine(machine), vectorWidth(std::move(vectorWidth)) {
  for (size_t i = 0; i < kernel.instrs.size(); ++i)
    if (!kernel.instrs[i].name.empty())
      idByName[kernel.instrs[i].name] = int(i);
}

void KernelEmitter::emit() {
  llvm::Type *ptr = llvm::PointerType::getUnqual(context);
  auto *type = llvm::FunctionType::get(builder.getVoidTy(), {ptr, ptr},
                                       /*isVarArg=*/false);
  std::string name = llvmFunctionName(kernel);
  if (module.getFunction(name))
    fail("LLVM backend: two kernels named @" + kernel.name);
  llvm::Function *entry = llvm::Function::Create(
      type, llvm::Function::ExternalLinkage, name, module);
  splitLoop = splittableLoop(kernel);
  if (!splitLoop) {
    function = entry;
    emitBody();
    return;
  }
  // @name.range(buffers, symbols, begin, end) runs iterations [begin, end)
  // of the outer loop; @name calls it on the whole loop.
  llvm::Type *i64 = builder.getInt64Ty();
  auto *rangeType =
      llvm::FunctionType::get(builder.getVoidTy(), {ptr, ptr, i64, i64}, false);
  llvm::Function *range =
      llvm::Function::Create(rangeType, llvm::Function::ExternalLinkage,
                             rangeFunctionName(kernel), module);
  function = range;
  rangeBegin = range->getArg(2);
  rangeEnd = range->getArg(3);
  rangeBegin->setName("begin");
  rangeEnd->setName("end");
  range->addFnAttr(llvm::Attribute::NoInline);
  emitBody();

  function = entry;
  rangeBegin = rangeEnd = nullptr;
  setAttributes();
  builder.SetInsertPoint(llvm::BasicBlock::Create(context, "entry", function));
  loadArguments();
  Value *extent = emitSymExpr(splitLoop->extent);
  builder.CreateCall(range, {function->getArg(0), function->getArg(1),
                             builder.getInt64(0), extent});
  builder.CreateRetVoid();
}

void KernelEmitter::emitBody() {
  setAttributes();
  builder.SetInsertPoint(llvm::BasicBlock::Create(context, "entry", function));
  loadArguments();
  values.assign(kernel.instrs.size(), nullptr);
  emitBlock(kernel.body);
  builder.CreateRetVoid();
}

void KernelEmitter::setAttributes() {
  function->setDoesNotThrow();
  function->addFnAttr("target-cpu", machine.getTargetCPU());
  function->addFnAttr("target-features", machine.getTargetFeatureString());
  // LLVM prefers 256-bit vectors on AVX-512 CPUs; kernels here are
  // compute-bound on polynomial math (erf, exp) often enough that 512 wins:
  // gelu 4096^2 19.8 -> 13.3 ms, causal softmax 8.5 -> 2.5 ms, layer_norm
  // within noise (docs/performance.md). CodegenOptions::vectorWidth
  // (DYNAFUSE_VECTOR_WIDTH) overrides; the disk cache key holds the
  // attribute through the IR text.
  if (!vectorWidth.empty())
    function->addFnAttr("prefer-vector-width", vectorWidth);
  else if (machine.getTargetFeatureString().contains("+avx512f"))
    function->addFnAttr("prefer-vector-width", "512");
  for (unsigned i = 0; i < 2; ++i) {
    function->addParamAttr(i, llvm::Attribute::NoCapture);
    function->addParamAttr(i, llvm::Attribute::ReadOnly);
    function->addParamAttr(i, llvm::Attribute::NoAlias);
  }
  function->getArg(0)->setName("buffers");
  function->getArg(1)->setName("symbols");
}

void KernelEmitter::loadArguments() {
  llvm::Type *ptr = llvm::PointerType::getUnqual(context);
  symbols.clear();
  bases.clear();
  strides.clear();
  for (size_t j = 0; j < kernel.symbols.size(); ++j) {
    Value *address = builder.CreateConstInBoundsGEP1_64(builder.getInt64Ty(),
                                                        function->getArg(1), j);
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

//===--- Statements -------------------------------------------------------===//

void KernelEmitter::emitBlock(const std::vector<Stmt> &block) {
  for (const Stmt &stmt : block) {
    switch (stmt.kind) {
    case Stmt::Kind::For:
      emitLoop(stmt);
      break;
    case Stmt::Kind::Reduce:
      emitReduce(stmt);
      break;
    case Stmt::Kind::Instr:
      emitInstr(stmt.instr);
      break;
    }
  }
}

/// for v in 0..n { body }  becomes
///   guard:  br (0 < n), header, exit
///   header: v = phi [0, guard], [v.next, latch]
///           acc = phi [acc.in, guard], [acc.next, latch]   (per carried value)
///           body
///   latch:  v.next = v + 1; br (v.next < n), header, exit
///   exit:   acc.out = phi [acc.in, guard], [acc.next, latch]
std::vector<Value *>
KernelEmitter::emitCountedLoop(const std::string &label, const std::string &var,
                               Value *extent, llvm::ArrayRef<Value *> carriedIn,
                               LoopBody body, Value *begin) {
  llvm::BasicBlock *guard = builder.GetInsertBlock();
  auto *header = llvm::BasicBlock::Create(context, label, function);
  // Placed after the body's blocks, to read in order.
  auto *exit = llvm::BasicBlock::Create(context, label + ".exit");
  if (!begin)
    begin = builder.getInt64(0);
  builder.CreateCondBr(builder.CreateICmpSLT(begin, extent), header, exit);

  builder.SetInsertPoint(header);
  llvm::PHINode *index = builder.CreatePHI(builder.getInt64Ty(), 2, var);
  index->addIncoming(begin, guard);
  std::vector<llvm::PHINode *> carried;
  for (Value *in : carriedIn) {
    carried.push_back(builder.CreatePHI(in->getType(), 2, var + ".acc"));
    carried.back()->addIncoming(in, guard);
  }
  symbols[var] = index;
  std::vector<Value *> carriedNext =
      body(std::vector<Value *>(carried.begin(), carried.end()));
  symbols.erase(var);
  assert(carriedNext.size() == carried.size() && "one update per value");

  // The body may have added blocks: the latch is wherever it ended.
  llvm::BasicBlock *latch = builder.GetInsertBlock();
  Value *next = builder.CreateAdd(index, builder.getInt64(1), var + ".next",
                                  /*HasNUW=*/true, /*HasNSW=*/true);
  llvm::BranchInst *backEdge =
      builder.CreateCondBr(builder.CreateICmpSLT(next, extent), header, exit);
  if (latch == header)
    interleaveInnermostLoop(backEdge, extent);
  index->addIncoming(next, latch);

  exit->insertInto(function);
  builder.SetInsertPoint(exit);
  std::vector<Value *> carriedOut;
  for (size_t i = 0; i < carried.size(); ++i) {
    carried[i]->addIncoming(carriedNext[i], latch);
    llvm::PHINode *out =
        builder.CreatePHI(carried[i]->getType(), 2, var + ".acc.out");
    out->addIncoming(carriedIn[i], guard);
    out->addIncoming(carriedNext[i], latch);
    carriedOut.push_back(out);
  }
  return carriedOut;
}

/// Straight-line innermost loops of a known trip count interleave 4 (or 2)
/// vector iterations: LLVM picks 1 for bodies as long as gelu's (erf, exp),
/// whose ~30-instruction dependency chains then leave the FMA ports idle;
/// 4 independent chains measured gelu 4096^2 8.5 -> 7.1 and 7.9 -> 6.5 ms
/// (A/B in one process), softmax, layer_norm and rms-norm unchanged
/// (docs/performance.md). Short loops keep LLVM's choice, so the vector loop
/// still runs when the trip count is small.
void KernelEmitter::interleaveInnermostLoop(llvm::BranchInst *backEdge,
                                            Value *extent) {
  auto *constant = llvm::dyn_cast<llvm::ConstantInt>(extent);
  if (!constant)
    return;
  int64_t trips = constant->getSExtValue();
  llvm::Attribute width = function->getFnAttribute("prefer-vector-width");
  int64_t lanes = width.isValid() && width.getValueAsString() == "512" ? 16 : 8;
  int count = trips >= lanes * 8 ? 4 : trips >= lanes * 4 ? 2 : 0;
  if (!count)
    return;
  llvm::Metadata *interleave[] = {
      llvm::MDString::get(context, "llvm.loop.interleave.count"),
      llvm::ConstantAsMetadata::get(builder.getInt32(count))};
  llvm::Metadata *parts[] = {nullptr, llvm::MDNode::get(context, interleave)};
  llvm::MDNode *loopID = llvm::MDNode::getDistinct(context, parts);
  loopID->replaceOperandWith(0, loopID);
  backEdge->setMetadata(llvm::LLVMContext::MD_loop, loopID);
}

void KernelEmitter::emitLoop(const Stmt &loop) {
  bool ranged = &loop == splitLoop && rangeBegin;
  Value *extent = ranged ? rangeEnd : emitSymExpr(loop.extent);
  emitCountedLoop(
      "for." + loop.var, loop.var, extent, {},
      [&](llvm::ArrayRef<Value *>) {
        emitBlock(loop.body);
        return std::vector<Value *>();
      },
      ranged ? rangeBegin : nullptr);
}

void KernelEmitter::emitInstr(int id) {
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
    values[id] = emitLoad(instr, operands.empty() ? nullptr : operands[0]);
    return;
  case ScalarOp::Store:
    emitStore(instr, operands[0]);
    return;
  case ScalarOp::Index:
    values[id] = builder.CreateSExtOrTrunc(emitSymExpr(instr.index[0]),
                                           scalarType(context, instr.type));
    return;
  case ScalarOp::Reduced:
    fail("LLVM backend: kernel @" + kernel.name +
             ": 'reduced' outside a reduce statement",
         instr.where);
  default:
    values[id] = emitScalarOp(builder, instr, operandTypes, operands);
    return;
  }
}

std::string rangeFunctionName(const Kernel &kernel) {
  return llvmFunctionName(kernel) + ".range";
}

std::string llvmFunctionName(const Kernel &kernel) {
  const std::string &name = kernel.name;
  bool reserved = name.empty() || name.rfind("llvm.", 0) == 0 ||
                  name.rfind("dynafuse_", 0) == 0 || isRuntimeSymbolName(name);
  return reserved ? "dynafuse_kernel_" + name : name;
}

std::unique_ptr<llvm::Module>
emitKernels(const std::string &name, const std::vector<const Kernel *> &kernels,
            llvm::LLVMContext &context, llvm::TargetMachine &machine,
            const std::string &vectorWidth) {
  auto module = std::make_unique<llvm::Module>(name, context);
  module->setTargetTriple(machine.getTargetTriple().str());
  module->setDataLayout(machine.createDataLayout());
  for (const Kernel *kernel : kernels)
    KernelEmitter(*kernel, *module, machine, vectorWidth).emit();
  std::string problems;
  llvm::raw_string_ostream stream(problems);
  if (llvm::verifyModule(*module, &stream))
    fail("LLVM backend: generated IR for module @" + name +
         " does not verify: " + stream.str());
  return module;
}

std::unique_ptr<llvm::Module> emitLoopModule(const LoopModule &loops,
                                             llvm::LLVMContext &context,
                                             llvm::TargetMachine &machine,
                                             const std::string &vectorWidth) {
  std::vector<const Kernel *> kernels;
  for (const Kernel &kernel : loops.kernels)
    kernels.push_back(&kernel);
  return emitKernels(loops.name, kernels, context, machine, vectorWidth);
}

} // namespace llvmcg
} // namespace dynafuse
