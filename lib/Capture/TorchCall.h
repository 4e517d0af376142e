//===- TorchCall.h - Torch callables kept inside the graph ------*- C++ -*-===//
//
// A torch op the compiler cannot lower stays in the graph as a call_torch
// extern node instead of splitting it. The callable and its arguments, with
// graph operands in place of tensors, are kept with the captured frame;
// capture finds the result types by calling it on meta tensors, and every
// run calls it on views of the step's buffers.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_TORCHCALL_H
#define DYNAFUSE_CAPTURE_TORCHCALL_H

#include "PyRef.h"
#include "dynafuse/Runtime/Executor.h"

#include <Python.h>

#include <string>
#include <utility>
#include <vector>

namespace dynafuse {

/// One argument: a graph operand, a constant, or a tuple or list of them.
struct CallArg {
  enum class Kind { Operand, Constant, Tuple, List };
  Kind kind = Kind::Constant;
  /// Operand: the index among the node's operands.
  int operand = -1;
  PyRef constant;
  std::vector<CallArg> items;

  /// "%0", "768", "(%1, None)".
  std::string str() const;
};

struct TorchCall {
  PyRef callable;
  /// What the user called, e.g. "torch._native_multi_head_attention".
  std::string target;
  std::vector<CallArg> args;
  std::vector<std::pair<std::string, CallArg>> keywords;
  /// Per slot of the flattened result (see flattenResult): the graph
  /// result it holds, or -1 for None.
  std::vector<int> resultOfSlot;

  /// "(%0, %1, 768, need_weights=False)".
  std::string signature() const;
  /// Calls the callable with tensors[i] for operand i. Returns a new
  /// reference, or null with the Python error set.
  PyObject *invoke(const std::vector<PyObject *> &tensors) const;
};

/// The slots of a callable's result in order: a tensor, None (null), or
/// tuples and lists of them, nested. False when it holds anything else.
bool flattenResult(PyObject *result, std::vector<PyObject *> &slots);

/// Fetches and clears the pending Python error as "Type: message".
std::string takePythonError();

/// Runs call on views of args; fills in each result's data and keeps the
/// tensors holding it in `kept` (one per result). A result that comes back
/// None where capture saw an empty tensor (ops whose meta kernel returns
/// empty tensors for results they leave out) is an empty tensor.
void runTorchCall(const TorchCall &call, const std::vector<TensorArg> &args,
                  std::vector<TensorArg> &results, const std::string &device,
                  std::vector<PyRef> &kept);

} // namespace dynafuse

#endif
