//===- Executor.cpp - Runs a compiled LoopModule --------------------------===//
#include "dynafuse/Runtime/Executor.h"

#include "dynafuse/Support/Error.h"
#include "dynafuse/Support/IndexErrors.h"

namespace dynafuse {

CompiledModule::CompiledModule(LoopModule module, Backend &backend,
                               const CompileOptions &options)
    : loopModule(std::move(module)) {
  if (!loopModule.hasProgram)
    fail("cannot run a .loop file without a module");
  executables = backend.compile(loopModule, options);
  for (const KernelCall &call : loopModule.calls) {
    for (size_t k = 0; k < loopModule.kernels.size(); ++k)
      if (loopModule.kernels[k].name == call.kernel)
        callKernel.push_back(int(k));
  }
}

namespace {

void checkInput(const LoopBuffer &buffer, const TensorArg &arg,
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

void checkShape(const LoopBuffer &buffer, const TensorArg &arg,
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

} // namespace

std::map<std::string, int64_t>
CompiledModule::bindSymbols(const std::vector<TensorArg> &inputs) const {
  if (inputs.size() != loopModule.inputs.size())
    fail("module @" + loopModule.name + " expects " +
         std::to_string(loopModule.inputs.size()) + " inputs, got " +
         std::to_string(inputs.size()));
  std::map<std::string, int64_t> bindings;
  for (size_t i = 0; i < inputs.size(); ++i)
    checkInput(loopModule.inputs[i], inputs[i], bindings);
  for (size_t i = 0; i < inputs.size(); ++i)
    checkShape(loopModule.inputs[i], inputs[i], bindings);
  return bindings;
}

void CompiledModule::run(const std::vector<TensorArg> &inputs,
                         Allocator &allocator) const {
  std::map<std::string, int64_t> bindings = bindSymbols(inputs);
  std::map<std::string, char *> addresses;
  for (size_t i = 0; i < inputs.size(); ++i)
    addresses[loopModule.inputs[i].name] = inputs[i].data;
  for (size_t a = 0; a < loopModule.allocs.size(); ++a) {
    const LoopBuffer &buffer = loopModule.allocs[a];
    std::vector<int64_t> sizes;
    for (const SymExpr &size : buffer.type.sizes)
      sizes.push_back(size.evaluate(bindings));
    addresses[buffer.name] = allocator.allocate(a, buffer, sizes);
  }
  for (size_t c = 0; c < loopModule.calls.size(); ++c) {
    const Kernel &kernel = loopModule.kernels[callKernel[c]];
    std::vector<char *> buffers;
    for (const std::string &arg : loopModule.calls[c].args)
      buffers.push_back(addresses.at(arg));
    std::vector<int64_t> symbols;
    for (const std::string &symbol : kernel.symbols)
      symbols.push_back(bindings.at(symbol));
    executables[callKernel[c]]->run(buffers.data(), symbols.data());
    std::string indexError;
    if (takeIndexError(indexError))
      fail("kernel @" + kernel.name + ": " + indexError);
  }
}

char *HostAllocator::allocate(size_t allocIndex, const LoopBuffer &buffer,
                              const std::vector<int64_t> &sizes) {
  int64_t count = 1;
  for (int64_t size : sizes)
    count *= size;
  storage.emplace_back(size_t(count) * dtypeSize(buffer.type.dtype) + 1);
  return storage.back().data();
}

} // namespace dynafuse
