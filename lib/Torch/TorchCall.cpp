//===- TorchCall.cpp - Torch callables kept inside the graph --------------===//
#include "dynafuse/Torch/TorchBridge.h"

#include "dynafuse/Runtime/CompilerStats.h"
#include "dynafuse/Support/Error.h"

namespace dynafuse {
namespace {

std::string reprOf(PyObject *object) {
  PyRef text = PyRef::steal(PyObject_Repr(object));
  if (!text) {
    PyErr_Clear();
    return "<?>";
  }
  return PyUnicode_AsUTF8(text.get());
}

PyObject *buildArg(const CallArg &arg, const std::vector<PyObject *> &tensors) {
  switch (arg.kind) {
  case CallArg::Kind::Operand:
    return PyRef::borrow(tensors.at(size_t(arg.operand))).release();
  case CallArg::Kind::Constant:
    return PyRef(arg.constant).release();
  case CallArg::Kind::Tuple:
  case CallArg::Kind::List: {
    bool list = arg.kind == CallArg::Kind::List;
    Py_ssize_t count = Py_ssize_t(arg.items.size());
    PyObject *sequence = list ? PyList_New(count) : PyTuple_New(count);
    for (Py_ssize_t i = 0; i < count; ++i) {
      PyObject *item = buildArg(arg.items[size_t(i)], tensors);
      if (list)
        PyList_SET_ITEM(sequence, i, item);
      else
        PyTuple_SET_ITEM(sequence, i, item);
    }
    return sequence;
  }
  }
  return nullptr;
}

PyObject *emptyResult(TensorArg &result, const std::string &device) {
  int64_t count = 1;
  for (int64_t size : result.sizes)
    count *= size;
  if (count != 0)
    fail("is None where capture saw a tensor");
  return newTensor(result.sizes, result.dtype, device, &result.data);
}

} // namespace

std::string CallArg::str() const {
  switch (kind) {
  case Kind::Operand:
    return "%" + std::to_string(operand);
  case Kind::Constant:
    return reprOf(constant.get());
  case Kind::Tuple:
  case Kind::List: {
    std::string text = kind == Kind::List ? "[" : "(";
    for (size_t i = 0; i < items.size(); ++i)
      text += (i ? ", " : "") + items[i].str();
    if (kind == Kind::Tuple && items.size() == 1)
      text += ",";
    return text + (kind == Kind::List ? "]" : ")");
  }
  }
  return "";
}

std::string TorchCall::signature() const {
  std::string text = "(";
  for (size_t i = 0; i < args.size(); ++i)
    text += (i ? ", " : "") + args[i].str();
  for (size_t i = 0; i < keywords.size(); ++i)
    text += (args.empty() && i == 0 ? "" : ", ") + keywords[i].first + "=" +
            keywords[i].second.str();
  return text + ")";
}

std::pair<PyRef, PyRef>
TorchCall::arguments(const std::vector<PyObject *> &tensors) const {
  PyRef positional = PyRef::steal(PyTuple_New(Py_ssize_t(args.size())));
  for (size_t i = 0; i < args.size(); ++i)
    PyTuple_SET_ITEM(positional.get(), Py_ssize_t(i),
                     buildArg(args[i], tensors));
  PyRef named = PyRef::steal(PyDict_New());
  for (const auto &[name, arg] : keywords) {
    PyRef value = PyRef::steal(buildArg(arg, tensors));
    PyDict_SetItemString(named.get(), name.c_str(), value.get());
  }
  return {std::move(positional), std::move(named)};
}

PyObject *TorchCall::invoke(const std::vector<PyObject *> &tensors,
                            bool inPlace) const {
  auto [positional, named] = arguments(tensors);
  std::optional<AutocastApplied> underAutocast;
  if (autocast)
    underAutocast.emplace(*autocast);
  return PyObject_Call(inPlace ? inPlaceCallable.get() : callable.get(),
                       positional.get(), named.get());
}

bool flattenResult(PyObject *result, std::vector<PyObject *> &slots) {
  if (isAnyTensor(result) || result == Py_None) {
    slots.push_back(result == Py_None ? nullptr : result);
    return true;
  }
  if (!PyTuple_Check(result) && !PyList_Check(result))
    return false;
  PyRef items = PyRef::steal(PySequence_Fast(result, "a result sequence"));
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(items.get()); ++i)
    if (!flattenResult(PySequence_Fast_GET_ITEM(items.get(), i), slots))
      return false;
  return true;
}

std::string takePythonError() {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  std::string text =
      type ? reinterpret_cast<PyTypeObject *>(type)->tp_name : "unknown error";
  if (value)
    text += ": " + [&] {
      PyRef message = PyRef::steal(PyObject_Str(value));
      return message ? std::string(PyUnicode_AsUTF8(message.get()))
                     : std::string("?");
    }();
  PyErr_Clear();
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  return text.substr(0, text.find('\n'));
}

void runTorchCall(const TorchCall &call, const std::vector<TensorArg> &args,
                  std::vector<TensorArg> &results, const std::string &device,
                  std::vector<PyRef> &kept) {
  std::vector<PyRef> views;
  std::vector<PyObject *> inputs;
  for (const TensorArg &arg : args) {
    views.push_back(PyRef::steal(wrapTensorView(arg, device)));
    inputs.push_back(views.back().get());
  }
  PyRef output = PyRef::steal(call.invoke(inputs));
  if (!output)
    fail(call.target + " failed: " + takePythonError());
  std::vector<PyObject *> slots;
  if (!flattenResult(output.get(), slots) ||
      slots.size() != call.resultOfSlot.size())
    fail(call.target + " returned a result of another structure than at "
                       "capture");
  kept.assign(results.size(), PyRef());
  for (size_t slot = 0; slot < slots.size(); ++slot) {
    int index = call.resultOfSlot[slot];
    if (index < 0 && !slots[slot])
      continue;
    if (index < 0)
      fail(call.target + " returned a tensor where capture saw None");
    TensorArg &result = results[size_t(index)];
    try {
      kept[size_t(index)] =
          PyRef::steal(slots[slot] ? adoptTorchResult(slots[slot], inputs,
                                                      result, &result.data)
                                   : emptyResult(result, device));
    } catch (const Error &error) {
      fail(call.target + " result " + std::to_string(index) + " " +
           error.bareMessage());
    }
  }
}

bool runTorchCallInPlace(const TorchCall &call, PyObject *target,
                         const std::vector<TensorArg> &args,
                         std::vector<TensorArg> &results,
                         const std::string &device, std::vector<PyRef> &kept) {
  if (!call.inPlaceCallable || results.size() != 1 ||
      call.resultOfSlot != std::vector<int>{0} || args.empty())
    return false;
  char *data = nullptr;
  std::vector<int64_t> sizes, strides;
  tensorView(target, &data, sizes, strides);
  if (sizes != results[0].sizes || strides != results[0].strides)
    return false;
  std::vector<PyRef> views;
  std::vector<PyObject *> inputs = {target};
  for (size_t i = 1; i < args.size(); ++i) {
    views.push_back(PyRef::steal(wrapTensorView(args[i], device)));
    inputs.push_back(views.back().get());
  }
  // Under the caller's grad mode, as eager's in-place call ran (an
  // inference entry: nothing it updates needs grad).
  PyRef output = PyRef::steal(call.invoke(inputs, /*inPlace=*/true));
  if (!output)
    fail(call.target + "_ failed: " + takePythonError());
  if (output.get() != target)
    fail(call.target + "_ returned another tensor than the one it updates");
  results[0].data = data;
  kept.assign(1, PyRef::borrow(target));
  ++compilerStats().inPlaceUpdates;
  return true;
}

} // namespace dynafuse
