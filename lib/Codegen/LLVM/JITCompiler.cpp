//===- JITCompiler.cpp - Optimization, code generation and the LLJIT ------===//
//
// Every compile creates its own TargetMachine (host CPU and features, PIC,
// small code model, O2), runs the new pass manager's O2 pipeline, emits an
// object file itself and hands it to the one process-wide LLJIT. Owning the
// code generation keeps concurrent compiles independent (LLJIT's default
// compiler shares one TargetMachine) and guarantees the dumped assembly is
// what runs.
//
// The LLJIT is created once (std::call_once) and intentionally leaked: it
// must outlive every kernel, including those freed at interpreter shutdown.
// Its main JITDylib holds the runtime symbols (absolute addresses); each
// compile's object goes into a fresh JITDylib that links against main, so
// kernels of the same name in different modules never clash, and the
// JITDylib is removed again when its last kernel is destroyed.
//
// The JIT links with JITLink (ObjectLinkingLayer), not LLVM 16's default
// RuntimeDyld on ELF: the small code model reaches the constant pool with
// 32-bit PC-relative offsets, so an object's sections must stay within
// 2 GiB of each other. JITLink's in-process memory manager maps each object
// as one block and reports offsets out of range; RuntimeDyld's
// SectionMemoryManager mapped code and data separately, anywhere, and
// silently truncated such offsets, so in a fragmented address space kernels
// loaded their constants from wild addresses (test/unit/
// LLVMCodePlacementTest.cpp).
//
//===----------------------------------------------------------------------===//
#include "LLVMCodegen.h"

#include "dynafuse/Support/Error.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ExecutionEngine/JITLink/EHFrameSupport.h"
#include "llvm/ExecutionEngine/Orc/Core.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/Transforms/Utils/Cloning.h"

#include <algorithm>
#include <atomic>
#include <mutex>

namespace dynafuse {
namespace llvmcg {
namespace {

std::string describe(llvm::Error error) {
  return llvm::toString(std::move(error));
}

void initializeNativeTarget() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
  });
}

llvm::orc::JITTargetMachineBuilder hostMachineBuilder() {
  initializeNativeTarget();
  llvm::orc::JITTargetMachineBuilder builder(
      llvm::Triple(llvm::sys::getProcessTriple()));
  builder.setCPU(llvm::sys::getHostCPUName().str());
  llvm::StringMap<bool> hostFeatures;
  std::vector<std::string> features;
  if (llvm::sys::getHostCPUFeatures(hostFeatures))
    for (const auto &feature : hostFeatures)
      features.push_back((feature.second ? "+" : "-") + feature.first().str());
  std::sort(features.begin(), features.end());
  builder.addFeatures(features);
  builder.setRelocationModel(llvm::Reloc::PIC_);
  builder.setCodeModel(llvm::CodeModel::Small);
  builder.setCodeGenOptLevel(llvm::CodeGenOpt::Default);
  return builder;
}

/// JITLink with in-process memory (one mapping per object) and the EH
/// frames registered, as RuntimeDyld registered them.
llvm::Expected<std::unique_ptr<llvm::orc::ObjectLayer>>
createLinkingLayer(llvm::orc::ExecutionSession &session, const llvm::Triple &) {
  auto layer = std::make_unique<llvm::orc::ObjectLinkingLayer>(session);
  layer->addPlugin(std::make_unique<llvm::orc::EHFrameRegistrationPlugin>(
      session, std::make_unique<llvm::jitlink::InProcessEHFrameRegistrar>()));
  return std::move(layer);
}

/// The process-wide JIT, created on first use and never destroyed.
llvm::orc::LLJIT &processJIT() {
  static std::once_flag once;
  static llvm::orc::LLJIT *jit = nullptr;
  static std::string problem;
  std::call_once(once, [] {
    auto created = llvm::orc::LLJITBuilder()
                       .setJITTargetMachineBuilder(hostMachineBuilder())
                       .setObjectLinkingLayerCreator(createLinkingLayer)
                       .create();
    if (!created) {
      problem = describe(created.takeError());
      return;
    }
    llvm::orc::SymbolMap symbols;
    for (const RuntimeSymbol &symbol : runtimeSymbols())
      symbols[(*created)->mangleAndIntern(symbol.name)] =
          llvm::JITEvaluatedSymbol(
              llvm::pointerToJITTargetAddress(symbol.address),
              llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable);
    llvm::orc::JITDylib &main = (*created)->getMainJITDylib();
    if (llvm::Error error =
            main.define(llvm::orc::absoluteSymbols(std::move(symbols)))) {
      problem = describe(std::move(error));
      return;
    }
    jit = created->release(); // Leaked on purpose: see the file comment.
  });
  if (!jit)
    fail("LLVM backend: cannot create the JIT: " + problem);
  return *jit;
}

void emitFile(llvm::Module &module, llvm::TargetMachine &machine,
              llvm::raw_pwrite_stream &stream, llvm::CodeGenFileType kind) {
  llvm::legacy::PassManager passes;
  if (machine.addPassesToEmitFile(passes, stream, nullptr, kind))
    fail("LLVM backend: the target cannot emit this file type");
  passes.run(module);
}

} // namespace

std::unique_ptr<llvm::TargetMachine> createHostTargetMachine() {
  auto machine = hostMachineBuilder().createTargetMachine();
  if (!machine)
    fail("LLVM backend: no target machine for the host: " +
         describe(machine.takeError()));
  return std::move(*machine);
}

void optimizeModule(llvm::Module &module, llvm::TargetMachine &machine) {
  llvm::LoopAnalysisManager loopAnalyses;
  llvm::FunctionAnalysisManager functionAnalyses;
  llvm::CGSCCAnalysisManager sccAnalyses;
  llvm::ModuleAnalysisManager moduleAnalyses;
  // Clang's O2 turns both vectorizers on; PassBuilder's defaults do not.
  llvm::PipelineTuningOptions tuning;
  tuning.LoopVectorization = true;
  tuning.SLPVectorization = true;
  llvm::PassBuilder passBuilder(&machine, tuning);
  passBuilder.registerModuleAnalyses(moduleAnalyses);
  passBuilder.registerCGSCCAnalyses(sccAnalyses);
  passBuilder.registerFunctionAnalyses(functionAnalyses);
  passBuilder.registerLoopAnalyses(loopAnalyses);
  passBuilder.crossRegisterProxies(loopAnalyses, functionAnalyses, sccAnalyses,
                                   moduleAnalyses);
  llvm::ModulePassManager passes =
      passBuilder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2);
  passes.run(module, moduleAnalyses);
}

std::string printModule(const llvm::Module &module) {
  std::string text;
  llvm::raw_string_ostream stream(text);
  module.print(stream, nullptr);
  return stream.str();
}

std::string emitAssemblyText(const llvm::Module &module,
                             llvm::TargetMachine &machine) {
  std::unique_ptr<llvm::Module> copy = llvm::CloneModule(module);
  llvm::SmallString<0> text;
  llvm::raw_svector_ostream stream(text);
  emitFile(*copy, machine, stream, llvm::CGFT_AssemblyFile);
  return std::string(text.str());
}

llvm::SmallVector<char, 0> emitObjectFile(llvm::Module &module,
                                          llvm::TargetMachine &machine) {
  llvm::SmallVector<char, 0> object;
  llvm::raw_svector_ostream stream(object);
  emitFile(module, machine, stream, llvm::CGFT_ObjectFile);
  return object;
}

LoadedObject::~LoadedObject() {
  llvm::consumeError(library.getExecutionSession().removeJITDylib(library));
}

void *LoadedObject::lookup(const std::string &name) const {
  auto address = processJIT().lookup(library, name);
  if (!address)
    fail("LLVM backend: cannot find the code of '" + name +
         "': " + describe(address.takeError()));
  return address->toPtr<void *>();
}

std::shared_ptr<LoadedObject> loadObjectFile(llvm::SmallVector<char, 0> object,
                                             const std::string &name) {
  llvm::orc::LLJIT &jit = processJIT();
  static std::atomic<uint64_t> counter{0};
  std::string libraryName =
      "dynafuse." + name + "." + std::to_string(counter++);
  auto library = jit.createJITDylib(libraryName);
  if (!library)
    fail("LLVM backend: " + describe(library.takeError()));
  library->addToLinkOrder(jit.getMainJITDylib());
  std::shared_ptr<LoadedObject> loaded(new LoadedObject(*library));
  auto buffer = llvm::MemoryBuffer::getMemBufferCopy(
      llvm::StringRef(object.data(), object.size()), libraryName);
  if (llvm::Error error = jit.addObjectFile(*library, std::move(buffer)))
    fail("LLVM backend: cannot load the object code of " + name + ": " +
         describe(std::move(error)));
  return loaded;
}

} // namespace llvmcg
} // namespace dynafuse
