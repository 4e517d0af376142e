//===- Executor.cpp - Runs a compiled LoopModule --------------------------===//
#include "dynafuse/Runtime/Executor.h"

#include "dynafuse/Loop/LoopText.h"
#include "dynafuse/Runtime/Parallel.h"
#include "dynafuse/Support/Error.h"
#include "dynafuse/Support/Logging.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace dynafuse {
namespace {

TensorArg concrete(const TensorType &type, char *data,
                   const std::map<std::string, int64_t> &env) {
  return TensorArg{data, evaluateAll(type.sizes, env),
                   evaluateAll(type.effectiveStrides(), env), type.dtype};
}

void bindInput(const LoopBuffer &buffer, const TensorArg &arg,
               std::map<std::string, int64_t> &bindings) {
  const TensorType &type = buffer.type;
  if (arg.sizes.size() != type.rank())
    fail("input %" + buffer.name + " expects rank " +
         std::to_string(type.rank()) + ", got " +
         std::to_string(arg.sizes.size()));
  for (size_t k = 0; k < type.rank(); ++k)
    if (type.sizes[k].isSymbol() && !bindings.count(type.sizes[k].symbolName()))
      bindings[type.sizes[k].symbolName()] = arg.sizes[k];
}

void checkInput(const LoopBuffer &buffer, const TensorArg &arg,
                const std::map<std::string, int64_t> &bindings) {
  const TensorType &type = buffer.type;
  std::vector<SymExpr> strides = type.effectiveStrides();
  for (size_t k = 0; k < type.rank(); ++k) {
    if (type.sizes[k].evaluate(bindings) != arg.sizes[k])
      fail("input %" + buffer.name + " dimension " + std::to_string(k) +
           " has size " + std::to_string(arg.sizes[k]) + ", expected " +
           type.sizes[k].str());
    bool matters = arg.sizes[k] > 1;
    if (matters && !arg.strides.empty() &&
        strides[k].evaluate(bindings) != arg.strides[k])
      fail("input %" + buffer.name + " dimension " + std::to_string(k) +
           " has stride " + std::to_string(arg.strides[k]) + ", expected " +
           strides[k].str());
  }
}

int64_t byteSize(const TensorType &type,
                 const std::map<std::string, int64_t> &env) {
  return type.numel().evaluate(env) * int64_t(dtypeSize(type.dtype));
}

} // namespace

CompiledModule::CompiledModule(LoopModule module, Backend &backend,
                               const CompileOptions &options)
    : loopModule(std::move(module)),
      parallelThreshold(options.parallelThreshold) {
  if (!loopModule.hasProgram)
    fail("cannot run a .loop file without a module");
  executables = backend.compile(loopModule, options);
  for (size_t k = 0; k < loopModule.kernels.size(); ++k)
    kernelIndex[loopModule.kernels[k].name] = int(k);
  // The allocation each buffer's storage comes from (through reuse and
  // views); those of outputs escape the run.
  const std::vector<ProgramStep> &steps = loopModule.steps;
  std::map<std::string, size_t> allocationOf;
  for (size_t s = 0; s < steps.size(); ++s) {
    const ProgramStep &step = steps[s];
    if (step.kind == ProgramStep::Kind::Alloc)
      allocationOf[step.result] =
          step.reuse.empty() ? s : allocationOf.count(step.reuse)
                                       ? allocationOf.at(step.reuse)
                                       : s;
    else if (step.kind == ProgramStep::Kind::View &&
             allocationOf.count(step.source))
      allocationOf[step.result] = allocationOf.at(step.source);
  }
  escapingAllocation.assign(steps.size(), false);
  for (const std::string &output : loopModule.outputs)
    if (allocationOf.count(output))
      escapingAllocation[allocationOf.at(output)] = true;
}

std::map<std::string, int64_t>
CompiledModule::bindSymbols(const std::vector<TensorArg> &inputs) const {
  if (inputs.size() != loopModule.inputs.size())
    fail("module @" + loopModule.name + " expects " +
         std::to_string(loopModule.inputs.size()) + " inputs, got " +
         std::to_string(inputs.size()));
  std::map<std::string, int64_t> bindings;
  for (size_t i = 0; i < inputs.size(); ++i)
    bindInput(loopModule.inputs[i], inputs[i], bindings);
  for (size_t i = 0; i < inputs.size(); ++i)
    checkInput(loopModule.inputs[i], inputs[i], bindings);
  return bindings;
}

/// DYNAFUSE_LOG=profile: how long each program step took.
class StepTimer {
public:
  StepTimer(bool enabled, const ProgramStep &step)
      : enabled(enabled), step(step) {
    if (enabled) // Reading the clock per step would cost every run.
      start = std::chrono::steady_clock::now();
  }
  ~StepTimer() {
    if (!enabled || step.kind == ProgramStep::Kind::View)
      return;
    double ms = std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - start)
                    .count();
    char text[32];
    std::snprintf(text, sizeof(text), "%9.3f ms  ", ms);
    logLine("profile", text + stepStr(step).substr(0, 160));
  }

private:
  bool enabled;
  const ProgramStep &step;
  std::chrono::steady_clock::time_point start;
};

std::map<std::string, TensorArg>
CompiledModule::run(const std::vector<TensorArg> &inputs,
                    ExecutionContext &context) const {
  std::map<std::string, int64_t> env = bindSymbols(inputs);
  std::map<std::string, TensorArg> buffers;
  for (size_t i = 0; i < inputs.size(); ++i) {
    buffers[loopModule.inputs[i].name] = inputs[i];
    buffers[loopModule.inputs[i].name].dtype = loopModule.inputs[i].type.dtype;
  }
  KernelLaunch launch;
  launch.parallelThreshold = parallelThreshold;
  launch.deviceStream = context.deviceStream();
  bool traceSteps = logEnabled("steps");
  bool profile = logEnabled("profile");
  for (const ProgramStep &step : loopModule.steps) {
    if (traceSteps)
      logLine("steps", stepStr(step));
    StepTimer timer(profile, step);
    switch (step.kind) {
    case ProgramStep::Kind::Alloc: {
      char *data =
          step.reuse.empty()
              ? context.allocate(step, evaluateAll(step.type.sizes, env),
                                 evaluateAll(step.type.strides, env),
                                 escapingAllocation[size_t(&step - &loopModule.steps[0])])
              : buffers.at(step.reuse).data;
      buffers[step.result] = concrete(step.type, data, env);
      break;
    }
    case ProgramStep::Kind::View: {
      const TensorArg &source = buffers.at(step.source);
      char *data = source.data + step.offset.evaluate(env) *
                                     int64_t(dtypeSize(step.type.dtype));
      buffers[step.result] = concrete(step.type, data, env);
      break;
    }
    case ProgramStep::Kind::Extern: {
      std::vector<TensorArg> args;
      for (const std::string &arg : step.args)
        args.push_back(buffers.at(arg));
      std::vector<TensorArg> expected;
      for (const TensorType &type : step.types)
        expected.push_back(concrete(type, nullptr, env));
      context.runExtern(step, args, expected);
      for (size_t i = 0; i < expected.size(); ++i)
        buffers[step.results[i]] = expected[i];
      break;
    }
    case ProgramStep::Kind::Call: {
      int k = kernelIndex.at(step.kernel);
      const Kernel &kernel = loopModule.kernels[k];
      std::vector<char *> pointers;
      for (const std::string &arg : step.args)
        pointers.push_back(buffers.at(arg).data);
      std::vector<int64_t> symbols;
      for (const std::string &symbol : kernel.symbols)
        symbols.push_back(env.at(symbol));
      std::string indexError =
          runKernel(kernel, *executables[k], pointers.data(), symbols.data(),
                    env, launch);
      if (!indexError.empty())
        fail("kernel @" + kernel.name + ": " + indexError);
      break;
    }
    }
  }
  return buffers;
}

int64_t CompiledModule::peakIntermediateBytes(
    const std::map<std::string, int64_t> &env) const {
  // Live range of each allocation's storage: from its first step to the
  // last step that reads it (or any buffer reusing it); outputs excluded.
  const std::vector<ProgramStep> &steps = loopModule.steps;
  std::map<std::string, std::string> storageOf;
  std::map<std::string, std::pair<size_t, size_t>> live;
  std::map<std::string, int64_t> bytes;
  for (size_t s = 0; s < steps.size(); ++s) {
    const ProgramStep &step = steps[s];
    if (step.kind == ProgramStep::Kind::Alloc) {
      std::string storage =
          step.reuse.empty() ? step.result : storageOf.at(step.reuse);
      storageOf[step.result] = storage;
      if (!live.count(storage))
        live[storage] = {s, s};
      bytes[storage] = std::max(bytes[storage], byteSize(step.type, env));
    }
    if (step.kind == ProgramStep::Kind::View && storageOf.count(step.source))
      storageOf[step.result] = storageOf[step.source];
    for (const std::string &arg : step.args)
      if (storageOf.count(arg))
        live[storageOf[arg]].second = s;
  }
  for (const std::string &output : loopModule.outputs)
    if (storageOf.count(output))
      live.erase(storageOf[output]);
  int64_t peak = 0;
  for (size_t s = 0; s < steps.size(); ++s) {
    int64_t total = 0;
    for (auto &entry : live)
      if (entry.second.first <= s && s <= entry.second.second)
        total += bytes[entry.first];
    peak = std::max(peak, total);
  }
  return peak;
}

char *HostContext::allocate(const ProgramStep &step,
                            const std::vector<int64_t> &sizes,
                            const std::vector<int64_t> &, bool) {
  int64_t count = 1;
  for (int64_t size : sizes)
    count *= size;
  size_t bytes = size_t(count) * dtypeSize(step.type.dtype);
  if (CachingAllocator::globalUsesGuardPages()) {
    // Fresh mappings are zeroed, like the buffers below.
    auto &block = guarded[step.result];
    block.reset(
        static_cast<char *>(CachingAllocator::global().allocate(bytes)));
    return block.get();
  }
  // One byte more so that an empty buffer still has an address.
  std::vector<char> &buffer = storage[step.result];
  buffer.assign(bytes + 1, 0);
  return buffer.data();
}

void HostContext::runExtern(const ProgramStep &step,
                            const std::vector<TensorArg> &,
                            std::vector<TensorArg> &) {
  fail("extern op '" + step.op +
       "' needs the torch bridge (run it from Python)");
}

} // namespace dynafuse
