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

int64_t stridedElementSpan(const std::vector<int64_t> &sizes,
                           const std::vector<int64_t> &strides) {
  int64_t span = 1;
  for (size_t k = 0; k < sizes.size() && k < strides.size(); ++k) {
    if (sizes[k] == 0)
      return 0;
    span += (sizes[k] - 1) * strides[k];
  }
  return span;
}
namespace {

TensorArg concrete(const TensorType &type, char *data,
                   const std::map<std::string, int64_t> &env) {
  return TensorArg{data, evaluateAll(type.sizes, env),
                   evaluateAll(type.effectiveStrides(), env), type.dtype};
}

/// concrete(), from the sizes and strides evaluated at construction when
/// they are constants.
template <typename Layout>
TensorArg concreteOf(const TensorType &type, const Layout &layout, char *data,
                     const std::map<std::string, int64_t> &env) {
  if (layout.constant)
    return TensorArg{data, layout.sizes, layout.strides, type.dtype};
  return concrete(type, data, env);
}

} // namespace

void bindSizeSymbols(const TensorType &type, const std::vector<int64_t> &sizes,
                     std::map<std::string, int64_t> &bindings) {
  for (size_t k = 0; k < type.rank() && k < sizes.size(); ++k)
    if (type.sizes[k].isSymbol() && !bindings.count(type.sizes[k].symbolName()))
      bindings[type.sizes[k].symbolName()] = sizes[k];
}

namespace {

void bindInput(const LoopBuffer &buffer, const TensorArg &arg,
               std::map<std::string, int64_t> &bindings) {
  const TensorType &type = buffer.type;
  if (arg.sizes.size() != type.rank())
    fail("input %" + buffer.name + " expects rank " +
         std::to_string(type.rank()) + ", got " +
         std::to_string(arg.sizes.size()));
  bindSizeSymbols(type, arg.sizes, bindings);
}

/// Checks an input against its expected sizes (numbers: a static layout's,
/// or the type's evaluated with the call's bindings) and strides (strideOf
/// gives dim k's, asked only for dims whose stride matters).
template <typename StrideOf>
void checkInput(const LoopBuffer &buffer, const TensorArg &arg,
                const std::vector<int64_t> &sizes, const StrideOf &strideOf) {
  const TensorType &type = buffer.type;
  // An empty tensor's strides are never read (an autograd tangent of one
  // comes with any strides).
  bool empty = false;
  for (int64_t size : arg.sizes)
    empty = empty || size == 0;
  for (size_t k = 0; k < type.rank(); ++k) {
    if (sizes[k] != arg.sizes[k])
      fail("input %" + buffer.name + " dimension " + std::to_string(k) +
           " has size " + std::to_string(arg.sizes[k]) + ", expected " +
           type.sizes[k].str());
    bool matters = arg.sizes[k] > 1 && !empty;
    if (matters && !arg.strides.empty() && strideOf(k) != arg.strides[k])
      fail("input %" + buffer.name + " dimension " + std::to_string(k) +
           " has stride " + std::to_string(arg.strides[k]) + ", expected " +
           type.effectiveStrides()[k].str());
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
  std::map<std::string, int> kernelIndex;
  for (size_t k = 0; k < loopModule.kernels.size(); ++k)
    kernelIndex[loopModule.kernels[k].name] = int(k);
  std::map<std::string, int> slotOf;
  for (const LoopBuffer &input : loopModule.inputs)
    slotOf.emplace(input.name, int(slotOf.size()));
  auto use = [&](const std::string &name) {
    auto found = slotOf.find(name);
    if (found == slotOf.end())
      fail("module @" + loopModule.name + " uses %" + name +
           " before it is defined");
    return found->second;
  };
  auto define = [&](const std::string &name) {
    int slot = int(slotOf.size());
    slotOf[name] = slot; // a redefinition takes a new slot
    return slot;
  };
  // Each buffer's storage, created by an allocation or an extern result
  // and reached through reuse and views: its steps from creation to the
  // last read. Storage an output holds escapes the run; the rest is
  // released after its last reader.
  std::map<int, size_t> lifetimeOf; // slot -> index into lifetimes
  auto touch = [&](int slot, size_t s) {
    auto found = lifetimeOf.find(slot);
    if (found != lifetimeOf.end())
      lifetimes[found->second].lastStep = s;
  };
  auto created = [&](int slot, const std::string &name, size_t s) {
    lifetimeOf[slot] = lifetimes.size();
    StorageLifetime lifetime;
    lifetime.name = name;
    lifetime.firstStep = lifetime.lastStep = s;
    lifetimes.push_back(lifetime);
  };
  for (size_t s = 0; s < loopModule.steps.size(); ++s) {
    const ProgramStep &step = loopModule.steps[s];
    StepSlots slots;
    switch (step.kind) {
    case ProgramStep::Kind::Alloc:
      if (!step.reuse.empty())
        slots.reuse = use(step.reuse);
      slots.result = define(step.result);
      if (slots.reuse >= 0 && lifetimeOf.count(slots.reuse)) {
        lifetimeOf[slots.result] = lifetimeOf.at(slots.reuse);
        touch(slots.result, s);
      } else {
        created(slots.result, step.result, s);
      }
      lifetimes[lifetimeOf.at(slots.result)].allocations.push_back(s);
      break;
    case ProgramStep::Kind::View:
      slots.source = use(step.source);
      slots.result = define(step.result);
      if (lifetimeOf.count(slots.source))
        lifetimeOf[slots.result] = lifetimeOf.at(slots.source);
      touch(slots.source, s);
      break;
    case ProgramStep::Kind::Extern:
      for (const std::string &arg : step.args)
        slots.args.push_back(use(arg));
      for (int arg : slots.args)
        touch(arg, s);
      for (const std::string &result : step.results) {
        slots.results.push_back(define(result));
        created(slots.results.back(), result, s);
      }
      break;
    case ProgramStep::Kind::Call: {
      auto found = kernelIndex.find(step.kernel);
      if (found == kernelIndex.end())
        fail("module @" + loopModule.name + " calls unknown kernel @" +
             step.kernel);
      slots.kernel = found->second;
      for (const std::string &arg : step.args)
        slots.args.push_back(use(arg));
      for (int arg : slots.args)
        touch(arg, s);
      break;
    }
    }
    if (step.kind == ProgramStep::Kind::Extern)
      for (const TensorType &type : step.types)
        slots.layouts.push_back(staticLayout(type));
    else if (step.kind != ProgramStep::Kind::Call)
      slots.layouts.push_back(staticLayout(step.type));
    plan.push_back(std::move(slots));
  }
  for (const LoopBuffer &input : loopModule.inputs)
    inputLayouts.push_back(staticLayout(input.type));
  for (const std::string &output : loopModule.outputs) {
    int slot = use(output);
    outputSlots.push_back(slot);
    if (lifetimeOf.count(slot))
      lifetimes[lifetimeOf.at(slot)].escapes = true;
  }
  for (const StorageLifetime &lifetime : lifetimes) {
    if (!lifetime.allocations.empty())
      plan[lifetime.firstStep].escapes = lifetime.escapes;
    if (!lifetime.escapes)
      plan[lifetime.lastStep].releases.push_back(lifetime.name);
  }
  slotCount = slotOf.size();
}

CompiledModule::StaticLayout
CompiledModule::staticLayout(const TensorType &type) {
  // Effective strides are the declared ones, or contiguous ones when none
  // are declared.
  StaticLayout layout;
  std::vector<SymExpr> strides = type.effectiveStrides();
  if (!allConstant(type.sizes) || !allConstant(strides))
    return layout;
  layout.constant = true;
  layout.sizes = evaluateAll(type.sizes, {});
  layout.strides = evaluateAll(strides, {});
  if (!type.strides.empty())
    layout.declaredStrides = layout.strides;
  return layout;
}

std::map<std::string, int64_t>
CompiledModule::bindSymbols(const std::vector<TensorArg> &inputs,
                            const std::map<std::string, int64_t> &known) const {
  if (inputs.size() != loopModule.inputs.size())
    fail("module @" + loopModule.name + " expects " +
         std::to_string(loopModule.inputs.size()) + " inputs, got " +
         std::to_string(inputs.size()));
  std::map<std::string, int64_t> bindings = known;
  for (size_t i = 0; i < inputs.size(); ++i)
    bindInput(loopModule.inputs[i], inputs[i], bindings);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const StaticLayout &layout = inputLayouts[i];
    const TensorType &type = loopModule.inputs[i].type;
    if (layout.constant) {
      checkInput(loopModule.inputs[i], inputs[i], layout.sizes,
                 [&](size_t k) { return layout.strides[k]; });
      continue;
    }
    std::vector<SymExpr> strides = type.effectiveStrides();
    checkInput(loopModule.inputs[i], inputs[i],
               evaluateAll(type.sizes, bindings),
               [&](size_t k) { return strides[k].evaluate(bindings); });
  }
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

std::vector<TensorArg>
CompiledModule::run(const std::vector<TensorArg> &inputs,
                    ExecutionContext &context,
                    const std::map<std::string, int64_t> &known) const {
  std::map<std::string, int64_t> env = bindSymbols(inputs, known);
  std::vector<TensorArg> buffers(slotCount);
  for (size_t i = 0; i < inputs.size(); ++i) {
    buffers[i] = inputs[i];
    buffers[i].dtype = loopModule.inputs[i].type.dtype;
  }
  KernelLaunch launch;
  launch.parallelThreshold = parallelThreshold;
  launch.deviceStream = context.deviceStream();
  bool traceSteps = logEnabled("steps");
  bool profile = logEnabled("profile");
  std::vector<TensorArg> args, expected;
  std::vector<char *> pointers;
  std::vector<int64_t> symbols;
  for (size_t s = 0; s < loopModule.steps.size(); ++s) {
    const ProgramStep &step = loopModule.steps[s];
    const StepSlots &slots = plan[s];
    if (traceSteps)
      logLine("steps", stepStr(step));
    StepTimer timer(profile, step);
    switch (step.kind) {
    case ProgramStep::Kind::Alloc: {
      const StaticLayout &layout = slots.layouts[0];
      char *data =
          slots.reuse >= 0 ? buffers[size_t(slots.reuse)].data
          : layout.constant
              ? context.allocate(step, layout.sizes, layout.declaredStrides,
                                 slots.escapes)
              : context.allocate(step, evaluateAll(step.type.sizes, env),
                                 evaluateAll(step.type.strides, env),
                                 slots.escapes);
      buffers[size_t(slots.result)] = concreteOf(step.type, layout, data, env);
      break;
    }
    case ProgramStep::Kind::View: {
      const TensorArg &source = buffers[size_t(slots.source)];
      char *data = source.data + step.offset.evaluate(env) *
                                     int64_t(dtypeSize(step.type.dtype));
      buffers[size_t(slots.result)] =
          concreteOf(step.type, slots.layouts[0], data, env);
      break;
    }
    case ProgramStep::Kind::Extern: {
      args.clear();
      for (int arg : slots.args)
        args.push_back(buffers[size_t(arg)]);
      expected.clear();
      for (size_t r = 0; r < step.types.size(); ++r)
        expected.push_back(
            concreteOf(step.types[r], slots.layouts[r], nullptr, env));
      context.runExtern(step, args, expected);
      for (size_t i = 0; i < expected.size(); ++i)
        buffers[size_t(slots.results[i])] = std::move(expected[i]);
      break;
    }
    case ProgramStep::Kind::Call: {
      const Kernel &kernel = loopModule.kernels[size_t(slots.kernel)];
      pointers.clear();
      for (int arg : slots.args)
        pointers.push_back(buffers[size_t(arg)].data);
      symbols.clear();
      for (const std::string &symbol : kernel.symbols)
        symbols.push_back(env.at(symbol));
      std::string indexError =
          runKernel(kernel, *executables[size_t(slots.kernel)],
                    pointers.data(), symbols.data(), env, launch);
      if (!indexError.empty())
        fail("kernel @" + kernel.name + ": " + indexError);
      break;
    }
    }
    for (const std::string &name : slots.releases)
      context.release(name);
  }
  std::vector<TensorArg> outputs;
  for (int slot : outputSlots)
    outputs.push_back(buffers[size_t(slot)]);
  return outputs;
}

int64_t CompiledModule::peakIntermediateBytes(
    const std::map<std::string, int64_t> &env) const {
  // The allocations' storage (not extern results, not outputs) live at
  // each step, from the plan's lifetimes.
  std::vector<int64_t> live(loopModule.steps.size(), 0);
  for (const StorageLifetime &lifetime : lifetimes) {
    if (lifetime.escapes || lifetime.allocations.empty())
      continue;
    int64_t bytes = 0;
    for (size_t s : lifetime.allocations)
      bytes = std::max(bytes, byteSize(loopModule.steps[s].type, env));
    for (size_t s = lifetime.firstStep; s <= lifetime.lastStep; ++s)
      live[s] += bytes;
  }
  int64_t peak = 0;
  for (int64_t bytes : live)
    peak = std::max(peak, bytes);
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
  fail("extern op '" + opName(step.op) +
       "' needs the torch bridge (run it from Python)");
}

} // namespace dynafuse
