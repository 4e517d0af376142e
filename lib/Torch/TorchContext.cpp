//===- TorchContext.cpp - Running a compiled module with ATen -------------===//
//
// TorchContext (TorchBridge.h): buffers of compiled runs as torch tensors or
// pool blocks, extern steps through ATen, call_torch steps through their
// captured callables (an in-place update's on the caller's tensor).
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Torch/TorchBridge.h"

#include "TorchATenOps.h"
#include "dynafuse/Loop/InPlaceUpdates.h"
#include "dynafuse/Support/Error.h"

#include <algorithm>

namespace dynafuse {

char *TorchContext::allocate(const ProgramStep &step,
                             const std::vector<int64_t> &sizes,
                             const std::vector<int64_t> &strides,
                             bool escapes) {
  if (!escapes && step.type.device == "cpu" && cachingAllocatorInUse()) {
    // Scratch: raw blocks of the pool, returned when the run ends (no
    // torch tensor, no Python object: kernels and externs take pointers).
    int64_t count = 1;
    for (int64_t size : sizes)
      count *= size;
    if (!strides.empty()) // strided: the elements up to the farthest one
      count = std::max(stridedElementSpan(sizes, strides), count);
    ScratchBlock &block = scratch[step.result];
    block.reset(CachingAllocator::global().allocate(
        size_t(count) * dtypeSize(step.type.dtype), run));
    return static_cast<char *>(block.get());
  }
  char *data = nullptr;
  if (!strides.empty()) {
    tensors[step.result] = PyRef::steal(newStridedTensor(
        sizes, strides, step.type.dtype, step.type.device, &data));
    return data;
  }
  tensors[step.result] =
      PyRef::steal(newTensor(sizes, step.type.dtype, step.type.device, &data));
  return data;
}

void TorchContext::runExtern(const ProgramStep &step,
                             const std::vector<TensorArg> &args,
                             std::vector<TensorArg> &results) {
  const std::string &device = step.types.at(0).device;
  if (step.op == Op::CallTorch) {
    std::vector<PyRef> kept;
    if (step.attributes.count("grad_inputs")) {
      if (!step.attributes.count("grad_outputs"))
        fail("call_torch gradient step without the attribute "
             "'grad_outputs'");
      runTorchCallGradient(torchCallOf(step),
                           attributeInts(step.attributes, "grad_inputs", {}),
                           attributeInts(step.attributes, "grad_outputs", {}),
                           args, results, device, kept);
    } else {
      PyObject *target = inPlaceTarget(step);
      if (!target || !runTorchCallInPlace(torchCallOf(step), target, args,
                                          results, device, kept))
        runTorchCall(torchCallOf(step), args, results, device, kept);
    }
    for (size_t i = 0; i < kept.size(); ++i)
      tensors[step.results[i]] = kept[i];
    return;
  }
  ExternReuse reuse{weights, &step, inputs};
  runExternOp(step.op, step.attributes, args, results, device, held,
              step.results, reuse);
}

PyRef TorchContext::output(const std::string &name) const {
  auto found = tensors.find(name);
  if (found != tensors.end())
    return found->second;
  PyObject *wrapped = held.wrap(name);
  if (!wrapped)
    fail("no tensor for module output %" + name);
  return PyRef::steal(wrapped);
}

void TorchContext::release(const std::string &buffer) {
  tensors.erase(buffer);
  scratch.erase(buffer);
  held.release(buffer);
}

PyObject *TorchContext::inPlaceTarget(const ProgramStep &step) const {
  if (!attributeFlag(step.attributes, kInPlaceAttribute) || !inputs.names ||
      !inputs.objects || step.args.empty())
    return nullptr;
  for (size_t i = 0; i < inputs.names->size(); ++i)
    if ((*inputs.names)[i].name == step.args[0] && i < inputs.objects->size())
      return (*inputs.objects)[i];
  return nullptr;
}

const TorchCall &TorchContext::torchCallOf(const ProgramStep &step) const {
  auto found = step.attributes.find("call");
  const int64_t *index = found == step.attributes.end()
                             ? nullptr
                             : std::get_if<int64_t>(&found->second);
  if (!index || *index < 0 || size_t(*index) >= torchCalls.size())
    fail("call_torch step %" + step.results.at(0) +
         " names no captured callable");
  return torchCalls[size_t(*index)];
}

} // namespace dynafuse
