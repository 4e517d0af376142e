//===- LoopInterpreterBackend.cpp - The loop-IR interpreter as a backend --===//
//
// Backend "interp": runs kernels through the reference interpreter. Always
// available, including builds without LLVM.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Loop/LoopInterpreter.h"
#include "dynafuse/Runtime/Backend.h"
#include "dynafuse/Runtime/Executor.h"

namespace dynafuse {
namespace {

class InterpretedKernel : public KernelExecutable {
public:
  explicit InterpretedKernel(Kernel kernel) : kernel(std::move(kernel)) {}
  void run(char *const *buffers, const int64_t *symbols) const override {
    interpretLoopKernel(kernel, buffers, symbols);
  }

private:
  Kernel kernel;
};

class LoopInterpreterBackend : public Backend {
public:
  std::string name() const override { return "interp"; }
  std::vector<std::unique_ptr<KernelExecutable>>
  compile(const LoopModule &module, const CompileOptions &) override {
    std::vector<std::unique_ptr<KernelExecutable>> kernels;
    for (const Kernel &kernel : module.kernels)
      kernels.push_back(std::make_unique<InterpretedKernel>(kernel));
    return kernels;
  }
};

} // namespace

void registerBuiltinBackends() {
  registerBackend("interp",
                  [] { return std::make_unique<LoopInterpreterBackend>(); });
}

} // namespace dynafuse
