//===- FusionScheduler.cpp - Realized values grouped into kernels ---------===//
//
// The schedule pass: walks the graph in order; an extern op is a step of
// its own, placed after the steps computing its operands; a realized value
// joins the first kernel over the same iteration space (sizes, device,
// loop order) whose members it does not depend on except through
// same-shape pointwise ops (or, for a keepdim reduction, at its own output
// index), else starts a kernel of its own.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Lowering/LoweringPasses.h"

#include "dynafuse/Lowering/StridedView.h"

#include <algorithm>
#include <functional>

namespace dynafuse {
namespace {

/// How a value reaches a realized value: not at all, only through
/// same-shape pointwise ops (so one kernel can compute both), or otherwise.
enum class Reach { None, Direct, Indirect };

/// The buffers value's computation reads, stopping at buffers.
void collectDeps(const LoweringState &state, const Value *value,
                 std::set<const Value *> &deps, std::set<const Value *> &seen) {
  if (!seen.insert(value).second)
    return;
  for (const Operand &operand : value->producer->operands) {
    if (!operand.isValue())
      continue;
    if (state.isBuffer(operand.value))
      deps.insert(operand.value);
    else
      collectDeps(state, operand.value, deps, seen);
  }
}

/// How from's computation reaches target (from itself is not a stop).
Reach reach(const LoweringState &state, const Value *from,
            const Value *target, const std::vector<SymExpr> &shape) {
  const Node &node = *from->producer;
  bool direct = kindOf(node) == OpKind::Pointwise && from->type.sizes == shape;
  Reach result = Reach::None;
  for (const Operand &operand : node.operands) {
    if (!operand.isValue())
      continue;
    Reach inner = Reach::None;
    if (operand.value == target)
      inner = narrowsToHalfPrecision(target) ? Reach::Indirect : Reach::Direct;
    else if (!state.isBuffer(operand.value))
      inner = reach(state, operand.value, target, shape);
    if (inner == Reach::Indirect || (inner == Reach::Direct && !direct))
      return Reach::Indirect;
    if (inner == Reach::Direct)
      result = Reach::Direct;
  }
  return result;
}

/// Whether a keepdim reduction reads `target` (of the reduction's own
/// sizes) only at the reduction's output index: through pointwise ops whose
/// sizes match the result's except along the reduced dims, along which
/// target has size 1. A batch norm's per-channel sum of g * (x - mean) *
/// rstd reads the per-channel rstd so. A kernel that computes target at an
/// index can then compute the reduction at that index after it.
bool readsAtOwnIndex(const LoweringState &state, const Value *value,
                     const Value *target) {
  const Node &node = *value->producer;
  // A reduction target would be computed again inline (emission does not
  // reuse a member reduction inside another's body).
  if (!target->producer || kindOf(*target->producer) != OpKind::Pointwise)
    return false;
  if (kindOf(node) != OpKind::Reduction || node.results.size() != 1 ||
      !boolAttr(node, "keepdim", false) ||
      target->type.sizes != value->type.sizes || !node.operands[0].isValue())
    return false;
  const std::vector<SymExpr> &out = value->type.sizes;
  std::vector<int64_t> dims = reducedDims(node);
  auto reduced = [&](size_t k) {
    return std::find(dims.begin(), dims.end(), int64_t(k)) != dims.end();
  };
  std::function<bool(const Value *)> atOwnIndex = [&](const Value *v) {
    if (v == target || !v->producer || state.isBuffer(v) ||
        reach(state, v, target, v->type.sizes) == Reach::None)
      return true;
    if (kindOf(*v->producer) != OpKind::Pointwise || v->type.rank() != out.size())
      return false;
    for (size_t k = 0; k < out.size(); ++k)
      if (!reduced(k) && v->type.sizes[k] != out[k])
        return false;
    for (const Operand &operand : v->producer->operands)
      if (operand.isValue() && !atOwnIndex(operand.value))
        return false;
    return true;
  };
  return atOwnIndex(node.operands[0].value);
}

bool sameSpace(const LoweringState &state, const Value *a,
               const Value *b) {
  return a->type.sizes == b->type.sizes && a->type.device == b->type.device &&
         state.orderOf.at(a) == state.orderOf.at(b);
}

int earliestStep(const LoweringState &state,
                 const std::set<const Value *> &deps) {
  int earliest = 0;
  for (const Value *dep : deps) {
    auto found = state.stepOf.find(dep);
    if (found != state.stepOf.end())
      earliest = std::max(earliest, found->second + 1);
  }
  return earliest;
}

void scheduleExtern(LoweringState &state, const Node &node) {
  std::set<const Value *> deps;
  for (const Operand &operand : node.operands) {
    BufferView viewed;
    if (!describeView(operand.value, state.realized, viewed))
      fail("extern operand is not a buffer view", node.location);
    deps.insert(viewed.base);
  }
  int earliest = earliestStep(state, deps);
  LoweringStep step;
  step.externNode = &node;
  state.steps.push_back(step);
  int index = std::max(earliest, int(state.steps.size()) - 1);
  for (const Value *result : node.results)
    state.stepOf[result] = index;
}

/// value may join step s when every buffer it depends on is computed
/// earlier, or is a member of s reached only through same-shape pointwise
/// ops (then the kernel computes it inline).
bool canJoin(const LoweringState &state, const Value *value,
             const std::set<const Value *> &deps, int s) {
  for (const Value *dep : deps) {
    auto found = state.stepOf.find(dep);
    if (found == state.stepOf.end() || found->second < s)
      continue;
    if (found->second > s)
      return false;
    if (reach(state, value, dep, value->type.sizes) != Reach::Direct &&
        !readsAtOwnIndex(state, value, dep))
      return false;
  }
  return true;
}

void scheduleKernelValue(LoweringState &state, const Value *value) {
  std::set<const Value *> deps, seen;
  collectDeps(state, value, deps, seen);
  for (size_t s = 0; s < state.steps.size(); ++s) {
    LoweringStep &step = state.steps[s];
    if (step.externNode || !sameSpace(state, step.members[0], value))
      continue;
    if (canJoin(state, value, deps, int(s))) {
      step.members.push_back(value);
      state.stepOf[value] = int(s);
      return;
    }
  }
  state.steps.push_back(LoweringStep{nullptr, {value}});
  state.stepOf[value] = int(state.steps.size()) - 1;
}

} // namespace

void scheduleSteps(LoweringState &state) {
  for (const auto &node : state.graph.nodes) {
    if (kindOf(*node) == OpKind::Extern) {
      scheduleExtern(state, *node);
      continue;
    }
    for (const Value *result : node->results)
      if (state.realized.count(result))
        scheduleKernelValue(state, result);
  }
}

} // namespace dynafuse
