//===- LLVMBackend.cpp - The LLVM implementation of Backend ---------------===//
//
// compile(): loop IR -> llvm::Modules (verified; a large module's kernels
// in parts compiled on threads of their own) -> [on-disk cache, keyed by
// the part's IR text, CPU, features and version] -> O2 -> optional dumps
// (<dumpDir>/<dumpName>.ll and .s, the module in one part) -> object code
// (stored in the cache) in the JIT -> one KernelExecutable per kernel, each
// keeping its part's loaded code alive.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Codegen/LLVM/LLVMBackend.h"

#include "LLVMCodegen.h"

#include "dynafuse/Runtime/DiskCache.h"
#include "dynafuse/Runtime/Parallel.h"
#include "dynafuse/Support/Error.h"
#include "dynafuse/Support/ThreadPool.h"

#include <algorithm>
#include <exception>
#include <optional>
#include <thread>

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

/// A module's kernels compiled as one object.
struct CompiledPart {
  std::vector<size_t> kernels; // indices into LoopModule::kernels
  llvm::SmallVector<char, 0> object;
  bool fromCache = false;
  std::exception_ptr failure;
};

/// Code below which a module compiles in one part: a thread and a target
/// machine per part cost more than they save on small modules.
constexpr size_t kMinPartInstrs = 1500;

/// The kernels' instruction counts, a measure of the code LLVM optimizes.
size_t kernelCost(const Kernel &kernel) {
  return kernel.instrs.size() + kernel.body.size() + 1;
}

/// Kernels dealt into at most `threads` parts of about equal cost (the
/// largest first, each to the lightest part), each part in module order.
std::vector<CompiledPart> partitionKernels(const LoopModule &module,
                                           int threads) {
  size_t total = 0;
  std::vector<size_t> order(module.kernels.size());
  for (size_t i = 0; i < order.size(); ++i) {
    order[i] = i;
    total += kernelCost(module.kernels[i]);
  }
  size_t count = std::min({size_t(std::max(threads, 1)), order.size(),
                           std::max<size_t>(1, total / kMinPartInstrs)});
  std::vector<CompiledPart> parts(std::max<size_t>(count, 1));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return kernelCost(module.kernels[a]) > kernelCost(module.kernels[b]);
  });
  std::vector<size_t> load(parts.size(), 0);
  for (size_t kernel : order) {
    size_t lightest =
        std::min_element(load.begin(), load.end()) - load.begin();
    parts[lightest].kernels.push_back(kernel);
    load[lightest] += kernelCost(module.kernels[kernel]);
  }
  for (CompiledPart &part : parts)
    std::sort(part.kernels.begin(), part.kernels.end());
  return parts;
}

class LLVMBackend : public Backend {
public:
  std::string name() const override { return "llvm"; }

  /// Large modules compile in parts on threads of their own (one
  /// LLVMContext and target machine each; LLVM's optimization and code
  /// generation take most of a large model's first call), each part an
  /// object of its own in the JIT. Dumps need the whole module's IR and
  /// assembly in one file: they compile it as one part.
  std::vector<std::unique_ptr<KernelExecutable>>
  compile(const LoopModule &module, const CompileOptions &options) override {
    std::vector<CompiledPart> parts =
        options.dumpDir.empty()
            ? partitionKernels(module, configuredThreadCount())
            : partitionKernels(module, 1);
    std::vector<std::thread> workers;
    for (size_t i = 1; i < parts.size(); ++i)
      workers.emplace_back(
          [&, i] { compileGuarded(module, parts[i], options, false); });
    compileGuarded(module, parts[0], options, !options.dumpDir.empty());
    for (std::thread &worker : workers)
      worker.join();
    for (CompiledPart &part : parts)
      if (part.failure)
        std::rethrow_exception(part.failure);
    if (module.kernels.empty())
      return {};
    std::vector<std::unique_ptr<KernelExecutable>> kernels(
        module.kernels.size());
    for (CompiledPart &part : parts) {
      std::vector<std::unique_ptr<KernelExecutable>> linked;
      try {
        linked = link(module, part);
      } catch (const Error &) {
        if (!part.fromCache)
          throw;
        // Loadable entries are checksummed; recompile whatever fails.
        compilePart(module, part, options, false, /*readCache=*/false);
        linked = link(module, part);
      }
      for (size_t k = 0; k < part.kernels.size(); ++k)
        kernels[part.kernels[k]] = std::move(linked[k]);
    }
    return kernels;
  }

private:
  static void compileGuarded(const LoopModule &module, CompiledPart &part,
                             const CompileOptions &options, bool dump) {
    try {
      compilePart(module, part, options, dump, /*readCache=*/true);
    } catch (...) {
      part.failure = std::current_exception();
    }
  }

  /// One part's object: from the disk cache, or emitted, optimized (and
  /// dumped) and compiled.
  static void compilePart(const LoopModule &module, CompiledPart &part,
                          const CompileOptions &options, bool dump,
                          bool readCache) {
    std::unique_ptr<llvm::TargetMachine> machine = createHostTargetMachine();
    llvm::LLVMContext context;
    std::vector<const Kernel *> kernels;
    for (size_t index : part.kernels)
      kernels.push_back(&module.kernels[index]);
    std::unique_ptr<llvm::Module> ir = emitKernels(
        module.name, kernels, context, *machine, options.codegen.vectorWidth);
    if (kernels.empty() && !dump)
      return;
    // Dumps need the optimized IR and assembly: they bypass the cache.
    DiskCache cache(dump ? "" : options.codegen.diskCacheDir);
    std::string key = cacheKey(*ir, *machine);
    if (std::optional<std::string> cached =
            readCache ? cache.load(key) : std::nullopt) {
      part.object.assign(cached->begin(), cached->end());
      part.fromCache = true;
      return;
    }
    optimizeModule(*ir, *machine);
    if (dump) {
      writeDumpFile(options.dumpDir, options.dumpName + ".ll",
                    printModule(*ir), "LLVM");
      writeDumpFile(options.dumpDir, options.dumpName + ".s",
                    emitAssemblyText(*ir, *machine), "LLVM");
    }
    if (kernels.empty())
      return;
    part.object = emitObjectFile(*ir, *machine);
    part.fromCache = false;
    cache.store(key, std::string(part.object.begin(), part.object.end()));
  }

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

  /// The part's kernels, in its order, from its object in the JIT.
  static std::vector<std::unique_ptr<KernelExecutable>>
  link(const LoopModule &module, const CompiledPart &part) {
    std::vector<std::unique_ptr<KernelExecutable>> kernels;
    std::shared_ptr<LoadedObject> code =
        loadObjectFile(part.object, module.name);
    for (size_t index : part.kernels) {
      const Kernel &kernel = module.kernels[index];
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
