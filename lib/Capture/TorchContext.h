//===- TorchContext.h - Running a compiled module with ATen -----*- C++ -*-===//
//
// The execution context of compiled runs inside Python: buffers are torch
// tensors from the caching allocator, extern ops run through ATen, and
// call_torch steps call their captured callables. Every tensor it makes is
// kept (by buffer name), so a run's outputs can be handed back. Used for
// forward runs (RunEntry.cpp) and backward runs (TorchAutograd.cpp); the
// caller holds the GIL.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_TORCHCONTEXT_H
#define DYNAFUSE_CAPTURE_TORCHCONTEXT_H

#include "PyRef.h"
#include "TorchBridge.h"
#include "TorchCall.h"
#include "dynafuse/Runtime/Executor.h"

#include "dynafuse/Runtime/CachingAllocator.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dynafuse {

/// Storage and extern ops through ATen; keeps every tensor it makes so
/// outputs can be returned.
class TorchContext : public ExecutionContext {
public:
  char *allocate(const ProgramStep &step, const std::vector<int64_t> &sizes,
                 const std::vector<int64_t> &strides, bool escapes) override {
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
    tensors[step.result] = PyRef::steal(
        newTensor(sizes, step.type.dtype, step.type.device, &data));
    return data;
  }
  TorchContext(const std::vector<TorchCall> &torchCalls, void *stream)
      : torchCalls(torchCalls), stream(stream) {}
  void *deviceStream() const override { return stream; }
  void runExtern(const ProgramStep &step, const std::vector<TensorArg> &args,
                 std::vector<TensorArg> &results) override {
    const std::string &device = step.types.at(0).device;
    if (step.op == "call_torch") {
      std::vector<PyRef> kept;
      runTorchCall(torchCallOf(step), args, results, device, kept);
      for (size_t i = 0; i < kept.size(); ++i)
        tensors[step.results[i]] = kept[i];
      return;
    }
    ExternReuse reuse{weights, &step, inputs};
    runExternOp(step.op, step.attributes, args, results, device, held,
                step.results, reuse);
  }
  /// The Python tensor of buffer `name` (a module output): an allocation's,
  /// a torch call's, or an extern result's, wrapped now.
  PyRef output(const std::string &name) const {
    auto found = tensors.find(name);
    if (found != tensors.end())
      return found->second;
    PyObject *wrapped = held.wrap(name);
    if (!wrapped)
      fail("no tensor for module output %" + name);
    return PyRef::steal(wrapped);
  }
  /// Frees an intermediate after its last reader (an extern result's
  /// tensor, a scratch block back to the pool).
  void release(const std::string &buffer) override {
    tensors.erase(buffer);
    scratch.erase(buffer);
    held.release(buffer);
  }
  /// Allocations and torch calls' results, as Python tensors.
  std::map<std::string, PyRef> tensors;
  /// Extern results, as ATen tensors.
  HeldTensors held;
  /// The run's scratch buffers by name (returned to the pool when released
  /// or with the context).
  struct ReleaseBlock {
    void operator()(void *block) const {
      CachingAllocator::global().release(block);
    }
  };
  using ScratchBlock = std::unique_ptr<void, ReleaseBlock>;
  std::map<std::string, ScratchBlock> scratch;
  /// A forward run of an inference entry: the entry's prepacked weights
  /// and the run's inputs (null and empty elsewhere).
  PrepackedWeights *weights = nullptr;
  ForwardInputs inputs;
  /// The run's planned allocations (PooledTorchAllocations::run; null:
  /// scratch blocks are not planned).
  RunAllocations *run = nullptr;

private:
  const TorchCall &torchCallOf(const ProgramStep &step) const {
    auto found = step.attributes.find("call");
    const int64_t *index = found == step.attributes.end()
                               ? nullptr
                               : std::get_if<int64_t>(&found->second);
    if (!index || *index < 0 || size_t(*index) >= torchCalls.size())
      fail("call_torch step %" + step.results.at(0) +
           " names no captured callable");
    return torchCalls[size_t(*index)];
  }
  const std::vector<TorchCall> &torchCalls;
  /// torch's current CUDA stream for the cuda backend, else null.
  void *stream;
};

} // namespace dynafuse

#endif
