//===- AutocastCasts.h - torch.autocast as casts in the graph ---*- C++ -*-===//
//
// Autocast is graph semantics: while it is on (in the frame's caller, or in
// a `with torch.autocast(...)` block the frame enters), a call autocast
// would cast has its arguments cast by the policy of the op table
// (python/dynafuse/ops/autocast.py): to the lower precision type, to
// float32, or to the widest type among them. The casts are graph nodes, so
// the compiled graph, its backward included, computes what eager computes,
// and runs with autocast suspended. The entry's global state guards the
// caller's autocast state; a with block inside the frame changes the
// tracer's state only, as the grad-mode blocks do.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_AUTOCASTCASTS_H
#define DYNAFUSE_CAPTURE_AUTOCASTCASTS_H

#include "OpTable.h"
#include "Var.h"
#include "dynafuse/Torch/TorchBridge.h"

#include <vector>

namespace dynafuse {
namespace capture {

class BytecodeTracer;

class AutocastCasts {
public:
  explicit AutocastCasts(BytecodeTracer &tracer) : tracer(tracer) {}

  /// Autocast as the interpreted code sees it: the caller's, then as with
  /// blocks set it; and the states to restore on leaving them.
  AutocastState state;
  std::vector<AutocastState> stack;

  /// The call of callee with its arguments cast as autocast casts them,
  /// or null when autocast leaves them as they are (it is off, the callee
  /// is not in the policy, or every argument has its type already).
  VarPtr castCall(const VarPtr &callee, const std::vector<VarPtr> &args,
                  const Keywords &keywords);
  /// The op table's autocast state queries (torch.is_autocast_enabled,
  /// torch.get_autocast_dtype and their per-device forms): `answer` is
  /// the table's ("autocast_enabled", "autocast_dtype:cpu", ...), answered
  /// from the tracer's state.
  VarPtr query(const std::string &answer, const std::vector<VarPtr> &args);
  /// torch.autocast(...) (and torch.cpu.amp.autocast(...)): a context
  /// whose with block sets the state it names; null for other callables.
  VarPtr context(PyObject *callable, const std::vector<VarPtr> &args,
                 const Keywords &keywords);
  /// BEFORE_WITH of a context made by context(): enters it (pushes the
  /// entry Var's state). Returns false for other contexts.
  bool enter(const VarPtr &context);
  /// Its __exit__: restores the state before the block. Returns false for
  /// other callees.
  bool exit(const VarPtr &callee);
  /// The __exit__ of a torch.autocast block entered before the frame
  /// resumed (object read from source): it restores the state its
  /// __enter__ saved (prev, prev_fastdtype), guarded. Null for other
  /// objects.
  VarPtr exitFromSource(PyObject *object, int source);

  /// A call_torch extern not in the policy runs with autocast suspended:
  /// that is eager's result only when autocast changes nothing inside its
  /// ATen kernel (a kernel without an autocast entry of its own calls ops
  /// autocast casts: _transformer_encoder_layer_fwd's linear layers).
  /// While autocast is on, the call runs once on zeros of its operands'
  /// types under it: when its results' dtypes differ from `metaResults`,
  /// the call keeps autocast's state to run under (call.autocast) and
  /// returns the dtypes it gives; else nothing.
  std::vector<DType> checkExtern(TorchCall &call,
                                 const std::vector<TensorType> &operandTypes,
                                 const std::vector<PyObject *> &metaResults);

private:
  BytecodeTracer &tracer;
  /// The contexts context() made: a Var's setsAutocast indexes it.
  std::vector<AutocastState> states;

  /// `value` (a tensor, or a list or tuple of them) cast to target where
  /// eligible; sets changed when a cast was emitted.
  VarPtr castArgument(const VarPtr &value, DType target, bool &changed);
  /// promote's target: the widest floating type among the arguments.
  DType promotedType(const std::vector<VarPtr> &args, const Keywords &keywords);
};

} // namespace capture
} // namespace dynafuse

#endif
