//===- TorchCallGradients.cpp - Gradients of torch callables --------------===//
//
// A torch callable kept in a training graph (call_torch) has no derivative
// rule of the compiler's: its gradient step (torchCallRule in
// Graph/ExternDerivatives.cpp) calls it again on the saved operands, as
// leaves requiring grad, and asks torch's autograd for the operands'
// gradients from the results' (a tape of its own, freed when the step
// ends). Capture admits a callable only when that is sound: it draws no
// random numbers (a recomputation would draw others), an ATen operator is
// known for it to tell, and its gradient runs on meta tensors
// (dynafuse/torch_call_gradients.py).
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Torch/TorchBridge.h"

#include "dynafuse/Runtime/CompilerStats.h"
#include "dynafuse/Support/Error.h"
#include "dynafuse/Support/PyRef.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>

namespace dynafuse {

void runTorchCallGradient(const TorchCall &call,
                          const std::vector<int64_t> &gradInputs,
                          const std::vector<int64_t> &gradOutputs,
                          const std::vector<TensorArg> &args,
                          std::vector<TensorArg> &results,
                          const std::string &device, std::vector<PyRef> &kept) {
  if (args.size() < gradOutputs.size() || results.size() != gradInputs.size())
    fail("the gradient of " + call.target + " has " +
         std::to_string(args.size()) + " operands and " +
         std::to_string(results.size()) + " results for " +
         std::to_string(gradOutputs.size()) + " result gradients and " +
         std::to_string(gradInputs.size()) + " operand gradients");
  size_t forwardCount = args.size() - gradOutputs.size();
  at::AutoGradMode gradEnabled(true);
  std::vector<PyRef> operands;
  std::vector<PyObject *> objects;
  std::vector<at::Tensor> leaves;
  for (size_t i = 0; i < forwardCount; ++i) {
    PyRef view = PyRef::steal(wrapTensorView(args[i], device));
    if (std::find(gradInputs.begin(), gradInputs.end(), int64_t(i)) !=
        gradInputs.end()) {
      at::Tensor leaf = THPVariable_Unpack(view.get()).detach();
      leaf.requires_grad_(true);
      leaves.push_back(leaf);
      view = PyRef::steal(THPVariable_Wrap(std::move(leaf)));
    }
    operands.push_back(std::move(view));
    objects.push_back(operands.back().get());
  }
  PyRef output = PyRef::steal(call.invoke(objects));
  if (!output)
    fail("recomputing " + call.target +
         " for its gradient failed: " + takePythonError());
  std::vector<PyObject *> slots;
  if (!flattenResult(output.get(), slots) ||
      slots.size() != call.resultOfSlot.size())
    fail(call.target + " returned a result of another structure than at "
                       "capture");
  std::vector<at::Tensor> differentiated, gradients;
  // Every tensor the step was handed: a gradient sharing one's memory (an
  // identity's gradient is the incoming one) gets its own, as the executor
  // frees an argument's buffer after its last reader.
  std::vector<PyObject *> handed = objects;
  for (size_t k = 0; k < gradOutputs.size(); ++k) {
    auto slot = std::find(call.resultOfSlot.begin(), call.resultOfSlot.end(),
                          int(gradOutputs[k]));
    if (slot == call.resultOfSlot.end())
      fail("the gradient of " + call.target + " names result " +
           std::to_string(gradOutputs[k]) + ", which it does not have");
    PyObject *result = slots[size_t(slot - call.resultOfSlot.begin())];
    if (!result)
      continue;
    const at::Tensor &tensor = THPVariable_Unpack(result);
    if (!tensor.requires_grad())
      continue; // a result torch does not differentiate (an index)
    differentiated.push_back(tensor);
    operands.push_back(
        PyRef::steal(wrapTensorView(args[forwardCount + k], device)));
    handed.push_back(operands.back().get());
    gradients.push_back(THPVariable_Unpack(operands.back().get()));
  }
  std::vector<at::Tensor> inputGradients;
  std::string failure;
  if (!differentiated.empty()) {
    // The engine runs without the GIL (it refuses a caller holding it).
    PyThreadState *thread = PyEval_SaveThread();
    try {
      inputGradients = torch::autograd::grad(
          differentiated, leaves, gradients, /*retain_graph=*/false,
          /*create_graph=*/false, /*allow_unused=*/true);
    } catch (const c10::Error &error) {
      failure = error.what_without_backtrace();
    } catch (const std::exception &error) {
      failure = error.what();
    }
    PyEval_RestoreThread(thread);
  }
  if (!failure.empty())
    fail("the gradient of " + call.target + " failed: " + failure);
  ++compilerStats().torchCallGradients;
  kept.assign(results.size(), PyRef());
  at::NoGradGuard noGrad;
  for (size_t k = 0; k < results.size(); ++k) {
    at::Tensor gradient =
        k < inputGradients.size() && inputGradients[k].defined()
            ? inputGradients[k]
            : at::zeros_like(leaves.at(k));
    PyRef wrapped = PyRef::steal(THPVariable_Wrap(std::move(gradient)));
    try {
      kept[k] = PyRef::steal(adoptTorchResult(wrapped.get(), handed, results[k],
                                              &results[k].data));
    } catch (const Error &error) {
      fail("the gradient of " + call.target + " for operand " +
           std::to_string(gradInputs[k]) + " " + error.bareMessage());
    }
  }
}

std::string
torchCallGradientRefusal(const TorchCall &call,
                         const std::vector<TensorType> &operandTypes,
                         const std::vector<size_t> &requiringGrad) {
  std::vector<PyRef> metas;
  std::vector<PyObject *> objects;
  PyRef leaves = PyRef::steal(PyList_New(0));
  for (size_t i = 0; i < operandTypes.size(); ++i) {
    metas.push_back(PyRef::steal(newMetaTensor(operandTypes[i])));
    if (std::find(requiringGrad.begin(), requiringGrad.end(), i) !=
        requiringGrad.end()) {
      PyRef leaf = PyRef::steal(
          PyObject_CallMethod(metas.back().get(), "requires_grad_", nullptr));
      if (!leaf)
        return "its operands cannot require grad: " + takePythonError();
      PyList_Append(leaves.get(), metas.back().get());
    }
    objects.push_back(metas.back().get());
  }
  auto [positional, named] = call.arguments(objects);
  PyRef module =
      PyRef::steal(PyImport_ImportModule("dynafuse.torch_call_gradients"));
  PyRef refusal =
      module ? PyRef::steal(PyObject_CallMethod(
                   module.get(), "refusal", "OOOO", call.callable.get(),
                   positional.get(), named.get(), leaves.get()))
             : PyRef();
  if (!refusal)
    return "probing its gradient failed: " + takePythonError();
  return refusal.get() == Py_None ? "" : PyUnicode_AsUTF8(refusal.get());
}

} // namespace dynafuse
