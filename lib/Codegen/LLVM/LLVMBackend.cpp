//===- LLVMBackend.cpp - The LLVM implementation of Backend ---------------===//
//
// compile(): loop IR -> one llvm::Module (verified) -> [on-disk cache,
// keyed by the module's IR text, CPU, features and version] -> O2 ->
// optional dumps (<dumpDir>/<dumpName>.ll and .s) -> object code (stored in
// the cache) in the JIT -> one KernelExecutable per kernel, each keeping
// the loaded code alive.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Codegen/LLVM/LLVMBackend.h"

#include "LLVMCodegen.h"

#include "dynafuse/Runtime/DiskCache.h"
#include "dynafuse/Runtime/Parallel.h"
#include "dynafuse/Support/Error.h"

#include <optional>

namespace dynafuse {
namespace {

using namespace llvmcg;

class LLVMKernel : public KernelExecutable {
public:
  using Entry = void (*)(char *const *, const int64_t *);
  using RangeEntry = void (*)(char *const *, const int64_t *, int64_t, int64_t);

  LLVMKernel(std::shared_ptr<LoadedObject> code, Entry entry,
             RangeEntry rangeEntry)
      : code(std::move(code)), entry(entry), rangeEntry(rangeEntry) {}

  void run(char *const *buffers, const int64_t *symbols) const override {
    entry(buffers, symbols);
  }
  bool supportsRange() const override { return rangeEntry != nullptr; }
  void runRange(char *const *buffers, const int64_t *symbols, int64_t begin,
                int64_t end) const override {
    if (!rangeEntry)
      return run(buffers, symbols);
    rangeEntry(buffers, symbols, begin, end);
  }

private:
  std::shared_ptr<LoadedObject> code;
  Entry entry;
  RangeEntry rangeEntry;
};

class LLVMBackend : public Backend {
public:
  std::string name() const override { return "llvm"; }

  std::vector<std::unique_ptr<KernelExecutable>>
  compile(const LoopModule &module, const CompileOptions &options) override {
    std::unique_ptr<llvm::TargetMachine> machine = createHostTargetMachine();
    llvm::LLVMContext context;
    std::unique_ptr<llvm::Module> ir =
        emitLoopModule(module, context, *machine, options.codegen.vectorWidth);
    if (module.kernels.empty() && options.dumpDir.empty())
      return {};
    // Dumps need the optimized IR and assembly: they bypass the cache.
    DiskCache cache(options.dumpDir.empty() ? options.codegen.diskCacheDir
                                            : "");
    std::string key = cacheKey(*ir, *machine);
    if (std::optional<std::string> cached = cache.load(key)) {
      try {
        return link(module,
                    llvm::SmallVector<char, 0>(cached->begin(), cached->end()));
      } catch (const Error &) {
        // Loadable entries are checksummed; recompile whatever fails.
      }
    }
    optimizeModule(*ir, *machine);
    if (!options.dumpDir.empty()) {
      writeDumpFile(options.dumpDir, options.dumpName + ".ll",
                    printModule(*ir), "LLVM");
      writeDumpFile(options.dumpDir, options.dumpName + ".s",
                    emitAssemblyText(*ir, *machine), "LLVM");
    }
    if (module.kernels.empty())
      return {};
    llvm::SmallVector<char, 0> object = emitObjectFile(*ir, *machine);
    cache.store(key, std::string(object.begin(), object.end()));
    return link(module, std::move(object));
  }

private:
  /// Everything the object code depends on. Bump kCodegenRevision when the
  /// optimization pipeline or code generation options change.
  static std::string cacheKey(const llvm::Module &ir,
                              llvm::TargetMachine &machine) {
    static const char kCodegenRevision[] = "2";
    return std::string("dynafuse ") + DYNAFUSE_VERSION_STRING + " codegen " +
           kCodegenRevision + "\ncpu " + machine.getTargetCPU().str() +
           "\nfeatures " + machine.getTargetFeatureString().str() + "\n" +
           printModule(ir);
  }

  static std::vector<std::unique_ptr<KernelExecutable>>
  link(const LoopModule &module, llvm::SmallVector<char, 0> object) {
    std::vector<std::unique_ptr<KernelExecutable>> kernels;
    std::shared_ptr<LoadedObject> code =
        loadObjectFile(std::move(object), module.name);
    for (const Kernel &kernel : module.kernels) {
      auto entry = reinterpret_cast<LLVMKernel::Entry>(
          code->lookup(llvmFunctionName(kernel)));
      LLVMKernel::RangeEntry range = nullptr;
      if (splittableLoop(kernel))
        range = reinterpret_cast<LLVMKernel::RangeEntry>(
            code->lookup(rangeFunctionName(kernel)));
      kernels.push_back(std::make_unique<LLVMKernel>(code, entry, range));
    }
    return kernels;
  }
};

} // namespace

std::unique_ptr<Backend> createLLVMBackend() {
  return std::make_unique<LLVMBackend>();
}

void registerLLVMBackend() {
  registerBackend("llvm", [] { return createLLVMBackend(); });
}

std::string emitLLVMIR(const LoopModule &module, bool optimized,
                       const CodegenOptions &codegen) {
  std::unique_ptr<llvm::TargetMachine> machine = createHostTargetMachine();
  llvm::LLVMContext context;
  std::unique_ptr<llvm::Module> ir =
      emitLoopModule(module, context, *machine, codegen.vectorWidth);
  if (optimized)
    optimizeModule(*ir, *machine);
  return printModule(*ir);
}

std::string emitAssembly(const LoopModule &module,
                         const CodegenOptions &codegen) {
  std::unique_ptr<llvm::TargetMachine> machine = createHostTargetMachine();
  llvm::LLVMContext context;
  std::unique_ptr<llvm::Module> ir =
      emitLoopModule(module, context, *machine, codegen.vectorWidth);
  optimizeModule(*ir, *machine);
  return emitAssemblyText(*ir, *machine);
}

} // namespace dynafuse
