//===- CheckpointRegions.cpp - torch.utils.checkpoint in the graph --------===//
//
// checkpoint's own options bind as its signature does; the ones that change
// what the region computes are refused unless they hold their defaults
// (context_fn, debug, respect_saved_tensors_hooks), and the reentrant form
// refuses keyword arguments for the function as eager does (ValueError).
// preserve_rng_state needs nothing: dropout's counter-based masks repeat
// when the backward recomputes them from the same seed and offsets.
//
//===----------------------------------------------------------------------===//
#include "CheckpointRegions.h"

#include "BytecodeTracer.h"

#include <set>

namespace dynafuse {
namespace capture {

bool CheckpointRegions::anyRequiresGrad(
    const std::vector<VarPtr> &values) const {
  for (const VarPtr &value : values) {
    if (value->kind == Var::Kind::Tensor &&
        tracer.inputs.requiresGrad(tracer.latestValue(value->tensor)))
      return true;
    if (value->kind == Var::Kind::Tuple && anyRequiresGrad(value->items))
      return true;
  }
  return false;
}

VarPtr CheckpointRegions::call(PyObject *callable,
                               const std::vector<VarPtr> &args,
                               const Keywords &keywords) {
  static PyObject *checkpointSlot = nullptr, *noopSlot = nullptr;
  PyObject *checkpoint =
      lookupOnce(checkpointSlot, "torch.utils.checkpoint", "checkpoint");
  if (!checkpoint || callable != checkpoint)
    return nullptr;
  PyObject *noop =
      lookupOnce(noopSlot, "torch.utils.checkpoint", "noop_context_fn");
  std::vector<VarPtr> functionArgs(args.begin() + (args.empty() ? 0 : 1),
                                   args.end());
  VarPtr function = args.empty() ? nullptr : args[0];
  Keywords functionKeywords;
  bool reentrant = true; // eager's default (with a warning)
  auto isConstant = [](const VarPtr &value, PyObject *object) {
    return value->kind == Var::Kind::Constant && value->object.get() == object;
  };
  for (const auto &[name, value] : keywords) {
    if (name == "function" && !function) {
      function = value;
    } else if (name == "use_reentrant") {
      if (isConstant(value, Py_None))
        continue;
      if (!isConstant(value, Py_True) && !isConstant(value, Py_False))
        tracer.unsupported("checkpoint's use_reentrant is not a constant");
      reentrant = value->object.get() == Py_True;
    } else if (name == "preserve_rng_state" || name == "determinism_check" ||
               name == "early_stop") {
      continue; // the values are the same either way
    } else if (name == "context_fn") {
      if (!(value->object && value->object.get() == noop))
        tracer.unsupported("checkpoint with a context_fn");
    } else if (name == "debug") {
      if (!isConstant(value, Py_False))
        tracer.unsupported("checkpoint with debug=True");
    } else if (name == "respect_saved_tensors_hooks") {
      if (!isConstant(value, Py_None))
        tracer.unsupported("checkpoint with respect_saved_tensors_hooks");
    } else {
      functionKeywords[name] = value;
    }
  }
  if (!function)
    tracer.unsupported("checkpoint without a function (its decorator form)");
  if (reentrant && !functionKeywords.empty())
    tracer.unsupported("reentrant checkpoint with keyword arguments (eager "
                       "raises ValueError)");
  bool gradModeBefore = tracer.gradMode;
  // Reentrant: no input requiring grad means results requiring none.
  if (reentrant && !anyRequiresGrad(functionArgs))
    tracer.gradMode = false;
  std::set<const Node *> before;
  for (const auto &node : tracer.result.graph->nodes)
    before.insert(node.get());
  VarPtr result;
  try {
    result = tracer.callAny(function, functionArgs, functionKeywords);
  } catch (...) {
    tracer.gradMode = gradModeBefore;
    throw;
  }
  tracer.gradMode = gradModeBefore;
  for (const auto &node : tracer.result.graph->nodes)
    if (!before.count(node.get()))
      node->recompute = true;
  return result;
}

} // namespace capture
} // namespace dynafuse
