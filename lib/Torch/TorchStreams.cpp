//===- TorchStreams.cpp - Torch's current CUDA stream ---------------------===//
//
// Part of the torch bridge (TorchBridge.h): the stream the cuda backend
// queues a graph's kernels on, read from torch through Python (no CUDA
// headers needed).
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Torch/TorchBridge.h"

#include "dynafuse/Support/PyRef.h"

#include "dynafuse/Support/Error.h"

namespace dynafuse {

void *currentTorchCudaStream() {
  static PyObject *currentStream = nullptr;
  PyObject *function =
      lookupOnce(currentStream, "torch.cuda", "current_stream");
  if (!function)
    fail("torch.cuda.current_stream is not available");
  // Device 0's stream whatever torch's current device is: the cuda backend
  // runs tensors on cuda:0.
  PyRef device = PyRef::steal(PyLong_FromLong(0));
  PyRef stream = PyRef::steal(PyObject_CallOneArg(function, device.get()));
  PyRef handle = PyRef::steal(
      stream ? PyObject_GetAttrString(stream.get(), "cuda_stream") : nullptr);
  if (!handle) {
    PyErr_Clear();
    fail("cannot read torch's current CUDA stream");
  }
  void *pointer = PyLong_AsVoidPtr(handle.get());
  if (PyErr_Occurred()) {
    PyErr_Clear();
    fail("torch's current CUDA stream is not a handle");
  }
  return pointer;
}

} // namespace dynafuse
