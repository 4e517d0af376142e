//===- RunEntry.cpp - Guards of an entry, and running it ------------------===//
#include "RunEntry.h"

#include "TorchBridge.h"

#include <map>

namespace dynafuse {
namespace {

/// Storage and extern ops through ATen; keeps every tensor it makes so
/// outputs can be returned.
class TorchContext : public ExecutionContext {
public:
  char *allocate(const ProgramStep &step,
                 const std::vector<int64_t> &sizes) override {
    char *data = nullptr;
    if (!step.type.strides.empty()) {
      std::vector<int64_t> strides;
      for (const SymExpr &stride : step.type.strides)
        strides.push_back(stride.isConstant() ? stride.constant() : 0);
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
    tensors[step.results.at(0)] = PyRef::steal(runExternOp(
        step.op, step.attributes, args, results[0], device, &results[0].data));
  }
  std::map<std::string, PyRef> tensors;

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

PyObject *buildResult(const OutputSpec &spec, const CacheEntry &entry,
                      const std::vector<PyObject *> &inputs,
                      const TorchContext &context) {
  switch (spec.kind) {
  case OutputSpec::Kind::Constant:
    return PyRef(spec.constant).release();
  case OutputSpec::Kind::Input:
    return PyRef::borrow(inputs[spec.index]).release();
  case OutputSpec::Kind::GraphOutput: {
    int input = entry.outputInput[spec.index];
    if (input >= 0)
      return PyRef::borrow(inputs[input]).release();
    const CacheEntry::InputView &view = entry.outputViews[spec.index];
    if (view.input >= 0)
      return viewOfTensor(inputs[size_t(view.input)], view.sizes, view.strides,
                          view.offset);
    const std::string &name = entry.module->module().outputs[spec.index];
    return PyRef(context.tensors.at(name)).release();
  }
  case OutputSpec::Kind::Tuple: {
    PyObject *tuple = PyTuple_New(Py_ssize_t(spec.items.size()));
    for (size_t i = 0; i < spec.items.size(); ++i)
      PyTuple_SET_ITEM(tuple, i,
                       buildResult(spec.items[i], entry, inputs, context));
    return tuple;
  }
  case OutputSpec::Kind::Dict: {
    PyObject *dict = PyDict_New();
    for (size_t i = 0; i < spec.items.size(); ++i) {
      PyObject *value = buildResult(spec.items[i], entry, inputs, context);
      PyDict_SetItemString(dict, spec.keys[i].c_str(), value);
      Py_DECREF(value);
    }
    return dict;
  }
  case OutputSpec::Kind::List: {
    PyObject *list = PyList_New(Py_ssize_t(spec.items.size()));
    for (size_t i = 0; i < spec.items.size(); ++i)
      PyList_SET_ITEM(list, i,
                      buildResult(spec.items[i], entry, inputs, context));
    return list;
  }
  }
  return nullptr;
}

} // namespace

bool guardsHold(const CacheEntry &entry, const GlobalState &now,
                SourceResolver &resolver, std::string *failed) {
  if (!(entry.captured.state == now)) {
    if (failed)
      *failed = "the global state changed (grad mode, default dtype, "
                "autocast, torch function or dispatch modes)";
    return false;
  }
  for (const Guard &guard : entry.captured.guards) {
    if (!checkGuard(guard, resolver)) {
      if (failed)
        *failed = guard.describe(entry.captured.sources);
      return false;
    }
  }
  return true;
}

PyObject *runEntry(const CacheEntry &entry, SourceResolver &resolver) {
  std::vector<PyObject *> inputs;
  std::vector<TensorArg> args;
  args.resize(entry.captured.inputSources.size());
  for (size_t i = 0; i < args.size(); ++i) {
    PyObject *object = resolver.get(entry.captured.inputSources[i]);
    tensorView(object, &args[i].data, args[i].sizes, args[i].strides);
    inputs.push_back(object);
  }
  TorchContext context(entry.captured.torchCalls, entry.backend == "cuda"
                                                      ? currentTorchCudaStream()
                                                      : nullptr);
  {
    PooledTorchAllocations pooled;
    entry.module->run(args, context);
  }
  for (const auto &[input, output] : entry.captured.writeBacks) {
    int source = entry.outputInput[size_t(output)];
    PyObject *value =
        source >= 0
            ? inputs[size_t(source)]
            : context.tensors.at(entry.module->module().outputs[size_t(output)])
                  .get();
    copyIntoTensor(inputs[size_t(input)], value);
  }
  return buildResult(entry.captured.result, entry, inputs, context);
}

} // namespace dynafuse
