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

#include <map>
#include <string>
#include <vector>

namespace dynafuse {

/// Storage and extern ops through ATen; keeps every tensor it makes so
/// outputs can be returned.
class TorchContext : public ExecutionContext {
public:
  char *allocate(const ProgramStep &step, const std::vector<int64_t> &sizes,
                 const std::vector<int64_t> &strides) override {
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
    std::vector<PyObject *> made =
        runExternOp(step.op, step.attributes, args, results, device, reuse);
    for (size_t i = 0; i < made.size(); ++i)
      tensors[step.results.at(i)] = PyRef::steal(made[i]);
  }
  std::map<std::string, PyRef> tensors;
  /// A forward run of an inference entry: the entry's prepacked weights
  /// and the run's inputs (null and empty elsewhere).
  PrepackedWeights *weights = nullptr;
  ForwardInputs inputs;

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
