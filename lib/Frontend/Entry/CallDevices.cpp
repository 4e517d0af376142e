//===- CallDevices.cpp - Which device a call's tensors live on ------------===//
//
// What backend "auto" looks at (Runtime/Backend.h, resolveBackend): the
// tensors among a call's arguments, directly or inside a list, tuple or
// dict argument.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Frontend/FrameCompiler.h"

#include "dynafuse/Support/PyRef.h"
#include "dynafuse/Torch/TorchBridge.h"

namespace dynafuse {
namespace {

struct ArgumentDevices {
  bool anyTensor = false, anyCuda = false;

  void see(PyObject *object) {
    if (!isAnyTensor(object))
      return;
    anyTensor = true;
    anyCuda = anyCuda || isCudaTensor(object);
  }
  void seeArgument(PyObject *object) {
    see(object);
    if (PyList_Check(object) || PyTuple_Check(object)) {
      for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(object); ++i)
        see(PySequence_Fast_GET_ITEM(object, i));
    } else if (PyDict_Check(object)) {
      PyObject *key, *value;
      Py_ssize_t position = 0;
      while (PyDict_Next(object, &position, &key, &value))
        see(value);
    }
  }
};

} // namespace

bool callUsesCuda(PyObject *args, PyObject *kwargs, PyObject *firstTensor) {
  ArgumentDevices devices;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args); ++i)
    devices.seeArgument(PyTuple_GET_ITEM(args, i));
  if (kwargs) {
    PyObject *key, *value;
    Py_ssize_t position = 0;
    while (PyDict_Next(kwargs, &position, &key, &value))
      devices.seeArgument(value);
  }
  if (devices.anyCuda)
    return true;
  if (devices.anyTensor || !firstTensor)
    return false;
  PyRef first = PyRef::steal(PyObject_CallNoArgs(firstTensor));
  if (!first) {
    PyErr_Clear();
    return false;
  }
  return isCudaTensor(first.get());
}

} // namespace dynafuse
