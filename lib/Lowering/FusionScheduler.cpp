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

/// The buffers a kernel step reads or writes, per step (members and the
/// buffers they read).
using TouchedBuffers = std::vector<std::set<const Value *>>;

/// A value that shares no data with a kernel's members joins it only while
/// the kernel touches at most this many buffers of a large iteration
/// space: each is a stream of its own, and dozens of streams whose bases
/// lie at the same offsets modulo the page alias in the L1 cache (nine
/// layer norms' recomputations in one backward kernel: 27 streams of 256
/// KiB ran at a tenth of the bandwidth). Small spaces keep fusing: there
/// a kernel's call costs more than its streams.
constexpr size_t kMaxIndependentStreams = 12;
constexpr int64_t kLargeSpace = int64_t(1) << 15;

/// Whether a value reading `deps` shares no buffer with a kernel that
/// touches `touched` (the value itself is not scheduled yet).
bool independentOf(const std::set<const Value *> &touched,
                   const std::set<const Value *> &deps) {
  for (const Value *dep : deps)
    if (touched.count(dep))
      return false;
  return true;
}

bool largeSpace(const Value *value) {
  SymExpr count = value->type.numel();
  return !count.isConstant() || count.constant() >= kLargeSpace;
}

void scheduleKernelValue(LoweringState &state, const Value *value,
                         TouchedBuffers &touched) {
  std::set<const Value *> deps, seen;
  collectDeps(state, value, deps, seen);
  for (size_t s = 0; s < state.steps.size(); ++s) {
    LoweringStep &step = state.steps[s];
    if (step.externNode || !sameSpace(state, step.members[0], value))
      continue;
    if (!canJoin(state, value, deps, int(s)))
      continue;
    if (largeSpace(value) && independentOf(touched[s], deps) &&
        touched[s].size() + deps.size() + 1 > kMaxIndependentStreams)
      continue;
    step.members.push_back(value);
    state.stepOf[value] = int(s);
    touched[s].insert(deps.begin(), deps.end());
    touched[s].insert(value);
    return;
  }
  state.steps.push_back(LoweringStep{nullptr, {value}});
  state.stepOf[value] = int(state.steps.size()) - 1;
  touched.resize(state.steps.size());
  touched.back().insert(deps.begin(), deps.end());
  touched.back().insert(value);
}

} // namespace

void scheduleSteps(LoweringState &state) {
  TouchedBuffers touched(state.steps.size());
  for (const auto &node : state.graph.nodes) {
    if (kindOf(*node) == OpKind::Extern) {
      scheduleExtern(state, *node);
      touched.resize(state.steps.size());
      continue;
    }
    for (const Value *result : node->results)
      if (state.realized.count(result))
        scheduleKernelValue(state, result, touched);
  }
}

} // namespace dynafuse
