//===- MLIRBackend.cpp - The MLIR implementation of Backend --------------===//
//
// compile(): loop IR -> exported MLIR (verified) -> MLIR's lowering to the
// LLVM dialect -> ExecutionEngine (LLVM O2 for the host CPU) -> one
// KernelExecutable per kernel calling the packed wrapper of its C
// interface; a splittable kernel is compiled as its range variant only (a
// whole run passes 0 and the extent), so the executor splits its outer
// loop over threads. Optional dumps: <dumpDir>/<dumpName>.mlir (the export)
// and <dumpName>.llvm.mlir (after lowering).
//
// Calling convention: `_mlir_ciface_K(desc0*, desc1*, ..., s0, s1, ...)`,
// each memref descriptor {allocated, aligned, offset, sizes[r],
// strides[r]} built per call from the kernel ABI's buffer address and the
// parameter type's sizes and strides evaluated with the call's symbols.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Codegen/MLIR/MLIRBackend.h"

#include "MLIRCodegen.h"

#include "dynafuse/Runtime/Parallel.h"
#include "dynafuse/Support/Error.h"
#include "dynafuse/Support/IndexErrors.h"

#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"

#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/Support/TargetSelect.h"

#include <map>
#include <mutex>

namespace dynafuse {
namespace {

using namespace mlircg;

std::string errorText(llvm::Error error) {
  std::string text;
  llvm::handleAllErrors(std::move(error), [&](const llvm::ErrorInfoBase &info) {
    text += info.message();
  });
  return text;
}

class MLIRKernel : public KernelExecutable {
public:
  using Packed = void (*)(void **);

  /// `entry` is the kernel's function, or, for a splittable kernel
  /// (`outerLoop` not null), its range variant.
  MLIRKernel(std::shared_ptr<mlir::ExecutionEngine> engine, Packed entry,
             const Kernel &kernel, const Stmt *outerLoop)
      : engine(std::move(engine)), entry(entry), symbolNames(kernel.symbols),
        ranged(outerLoop != nullptr) {
    for (const LoopBuffer &param : kernel.params) {
      sizes.push_back(param.type.sizes);
      strides.push_back(param.type.effectiveStrides());
    }
    if (outerLoop)
      outerExtent = outerLoop->extent;
  }

  void run(char *const *buffers, const int64_t *symbols) const override {
    call(buffers, symbols, nullptr);
  }
  bool supportsRange() const override { return ranged; }
  void runRange(char *const *buffers, const int64_t *symbols, int64_t begin,
                int64_t end) const override {
    if (!ranged)
      return run(buffers, symbols);
    int64_t bounds[] = {begin, end};
    call(buffers, symbols, bounds);
  }

private:
  /// Packs descriptors, symbols and, for the range variant, the bounds
  /// (null: the whole outer loop), then calls.
  void call(char *const *buffers, const int64_t *symbols,
            const int64_t *bounds) const {
    std::map<std::string, int64_t> bindings;
    for (size_t j = 0; j < symbolNames.size(); ++j)
      bindings[symbolNames[j]] = symbols[j];
    int64_t range[2] = {0, 0};
    if (ranged) {
      range[0] = bounds ? bounds[0] : 0;
      range[1] = bounds ? bounds[1] : outerExtent.evaluate(bindings);
    }
    size_t count = sizes.size();
    std::vector<std::vector<int64_t>> descriptors(count);
    std::vector<void *> descriptorAddresses(count);
    std::vector<int64_t> symbolValues(symbols, symbols + symbolNames.size());
    std::vector<void *> arguments;
    for (size_t i = 0; i < count; ++i) {
      std::vector<int64_t> &words = descriptors[i];
      int64_t base = int64_t(reinterpret_cast<intptr_t>(buffers[i]));
      words = {base, base, 0};
      for (const SymExpr &size : sizes[i])
        words.push_back(size.evaluate(bindings));
      for (const SymExpr &stride : strides[i])
        words.push_back(stride.evaluate(bindings));
      descriptorAddresses[i] = words.data();
      arguments.push_back(&descriptorAddresses[i]);
    }
    for (int64_t &value : symbolValues)
      arguments.push_back(&value);
    if (ranged) {
      arguments.push_back(&range[0]);
      arguments.push_back(&range[1]);
    }
    entry(arguments.data());
  }

  std::shared_ptr<mlir::ExecutionEngine> engine;
  Packed entry;
  std::vector<std::string> symbolNames;
  bool ranged;
  SymExpr outerExtent;
  std::vector<std::vector<SymExpr>> sizes, strides;
};

/// Engines already built, by the exported module's text: a graph compiled
/// again (dynafuse.reset(), a recompile with the same kernels) reuses its
/// code, as the LLVM backend's disk cache lets it, and only when that cache
/// is on (DYNAFUSE_DISK_CACHE=0 makes every compile cold in both).
/// Process-lifetime like the LLVM backend's JIT; bounded, it starts over
/// when full.
class EngineCache {
public:
  std::shared_ptr<mlir::ExecutionEngine> find(const std::string &key) {
    std::lock_guard<std::mutex> lock(mutex);
    auto found = engines.find(key);
    return found == engines.end() ? nullptr : found->second;
  }
  void add(const std::string &key,
           std::shared_ptr<mlir::ExecutionEngine> engine) {
    std::lock_guard<std::mutex> lock(mutex);
    if (engines.size() >= kCapacity)
      engines.clear();
    engines[key] = std::move(engine);
  }

private:
  static constexpr size_t kCapacity = 64; // about 0.6 MB each
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<mlir::ExecutionEngine>> engines;
};

EngineCache &engineCache() {
  static EngineCache cache;
  return cache;
}

std::shared_ptr<mlir::ExecutionEngine> buildEngine(mlir::ModuleOp lowered) {
  // LLVM's target registry leaves registration races to its callers.
  static std::once_flag targetsInitialized;
  std::call_once(targetsInitialized, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
  auto machineBuilder = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!machineBuilder)
    fail("MLIR backend: " + errorText(machineBuilder.takeError()));
  auto machine = machineBuilder->createTargetMachine();
  if (!machine)
    fail("MLIR backend: " + errorText(machine.takeError()));
  auto optimize = mlir::makeOptimizingTransformer(2, 0, machine->get());
  mlir::ExecutionEngineOptions engineOptions;
  engineOptions.transformer = optimize;
  engineOptions.jitCodeGenOptLevel = llvm::CodeGenOpt::Default;
  engineOptions.enableGDBNotificationListener = false;
  engineOptions.enablePerfNotificationListener = false;
  auto created = mlir::ExecutionEngine::create(lowered, engineOptions);
  if (!created)
    fail("MLIR backend: " + errorText(created.takeError()));
  std::shared_ptr<mlir::ExecutionEngine> engine = std::move(*created);
  engine->registerSymbols([](llvm::orc::MangleAndInterner interner) {
    llvm::orc::SymbolMap symbols;
    symbols[interner("dynafuse_index_error")] = llvm::JITEvaluatedSymbol(
        llvm::pointerToJITTargetAddress(&dynafuse_index_error),
        llvm::JITSymbolFlags::Exported);
    symbols[interner("dynafuse_division_error")] = llvm::JITEvaluatedSymbol(
        llvm::pointerToJITTargetAddress(&dynafuse_division_error),
        llvm::JITSymbolFlags::Exported);
    return symbols;
  });
  return engine;
}

class MLIRBackend : public Backend {
public:
  std::string name() const override { return "mlir"; }

  std::vector<std::unique_ptr<KernelExecutable>>
  compile(const LoopModule &module, const CompileOptions &options) override {
    std::unique_ptr<mlir::MLIRContext> context = createContext();
    mlir::OwningOpRef<mlir::ModuleOp> exported =
        exportLoopModule(module, *context, /*rangeVariants=*/true);
    std::string key = printOperation(*exported);
    bool dumping = !options.dumpDir.empty();
    bool cached = !dumping && !options.codegen.diskCacheDir.empty();
    if (dumping)
      writeDumpFile(options.dumpDir, options.dumpName + ".mlir", key, "MLIR");
    std::shared_ptr<mlir::ExecutionEngine> engine =
        cached ? engineCache().find(key) : nullptr;
    if (!engine) {
      lowerToLLVMDialect(*exported);
      if (dumping)
        writeDumpFile(options.dumpDir, options.dumpName + ".llvm.mlir",
                      printOperation(*exported), "MLIR");
      if (module.kernels.empty())
        return {};
      engine = buildEngine(*exported);
      if (cached)
        engineCache().add(key, engine);
    }

    std::vector<std::unique_ptr<KernelExecutable>> kernels;
    for (const Kernel &kernel : module.kernels) {
      const Stmt *outer = splittableLoop(kernel);
      auto entry =
          engine->lookupPacked(cInterfaceName(kernel, outer != nullptr));
      if (!entry)
        fail("MLIR backend: kernel @" + kernel.name + ": " +
             errorText(entry.takeError()));
      kernels.push_back(
          std::make_unique<MLIRKernel>(engine, *entry, kernel, outer));
    }
    return kernels;
  }
};

} // namespace

std::string exportMLIR(const LoopModule &module) {
  std::unique_ptr<mlir::MLIRContext> context = createContext();
  mlir::OwningOpRef<mlir::ModuleOp> exported =
      exportLoopModule(module, *context);
  return printOperation(*exported);
}

std::string lowerMLIRToLLVMDialect(const LoopModule &module) {
  std::unique_ptr<mlir::MLIRContext> context = createContext();
  mlir::OwningOpRef<mlir::ModuleOp> exported =
      exportLoopModule(module, *context);
  lowerToLLVMDialect(*exported);
  return printOperation(*exported);
}

std::unique_ptr<Backend> createMLIRBackend() {
  return std::make_unique<MLIRBackend>();
}

void registerMLIRBackend() {
  registerBackend("mlir", [] { return createMLIRBackend(); });
}

} // namespace dynafuse
