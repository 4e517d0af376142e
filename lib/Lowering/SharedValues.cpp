//===- SharedValues.cpp - Values recomputed by several kernels ------------===//
//
// The share pass: a value that is not realized is recomputed inline by
// every kernel whose members reach it. Where several kernels reach it and
// its inline computation streams at least two full-size buffers, storing
// it once and loading it in each kernel moves less memory than recomputing
// it: it is realized. Without this, a residual stream (h1 = h0 + f(h0),
// h2 = h1 + g(h1), ...) is inlined into every later layer's kernels, and
// their work grows with the square of the depth (vit_b_16's last kernel
// read 41 buffers).
//
// The decision works on the schedule just made: the kernels reaching each
// value are counted from the steps' members backwards through the graph,
// in reverse graph order, so a value realized here stops the count for
// what it computes from (those are then reached by its own kernel only).
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Lowering/LoweringPasses.h"

#include <map>
#include <set>

namespace dynafuse {
namespace {

/// Whether a buffer of `read` elements is streamed, not broadcast, by a
/// computation over `computed` elements (at least half as many elements;
/// symbolic counts are assumed streamed).
bool isStreamed(const SymExpr &read, const SymExpr &computed) {
  if (!read.isConstant() || !computed.isConstant())
    return true;
  return 2 * read.constant() >= computed.constant();
}

/// The buffers value's inline computation streams, stopping at buffers.
void collectStreamedReads(const LoweringState &state, const Value *value,
                          const SymExpr &computed,
                          std::set<const Value *> &reads,
                          std::set<const Value *> &seen) {
  if (!seen.insert(value).second)
    return;
  for (const Operand &operand : value->producer->operands) {
    if (!operand.isValue())
      continue;
    if (state.isBuffer(operand.value)) {
      if (isStreamed(operand.value->type.numel(), computed))
        reads.insert(operand.value);
    } else {
      collectStreamedReads(state, operand.value, computed, reads, seen);
    }
  }
}

size_t streamedReads(const LoweringState &state, const Value *value) {
  std::set<const Value *> reads, seen;
  collectStreamedReads(state, value, value->type.numel(), reads, seen);
  return reads.size();
}

} // namespace

bool realizeSharedValues(LoweringState &state) {
  const Graph &graph = state.graph;
  // Each extern node's step, and a step of its own for each value realized
  // here (it will be computed by some kernel; one of its own is the count's
  // assumption).
  std::map<const Node *, int> stepOfExtern;
  for (size_t s = 0; s < state.steps.size(); ++s)
    if (state.steps[s].externNode)
      stepOfExtern[state.steps[s].externNode] = int(s);
  int nextStep = int(state.steps.size());
  std::map<const Value *, int> stepOfNew;

  // reaching[v]: the steps whose members compute v inline.
  std::map<const Value *, std::set<int>> reaching;
  auto stepsOfUse = [&](const Node &user, std::set<int> &into) {
    if (kindOf(user) == OpKind::Extern) {
      into.insert(stepOfExtern.at(&user));
      return;
    }
    for (const Value *result : user.results) {
      if (!state.isBuffer(result)) {
        const std::set<int> &inner = reaching[result];
        into.insert(inner.begin(), inner.end());
        continue;
      }
      auto scheduled = state.stepOf.find(result);
      auto added = stepOfNew.find(result);
      if (scheduled != state.stepOf.end())
        into.insert(scheduled->second);
      else if (added != stepOfNew.end())
        into.insert(added->second);
    }
  };

  std::map<const Value *, std::vector<const Node *>> users;
  for (const auto &node : graph.nodes)
    for (const Operand &operand : node->operands)
      if (operand.isValue())
        users[operand.value].push_back(node.get());

  bool changed = false;
  for (auto node = graph.nodes.rbegin(); node != graph.nodes.rend(); ++node) {
    for (const Value *value : (*node)->results) {
      if (state.isBuffer(value))
        continue;
      std::set<int> &steps = reaching[value];
      for (const Node *user : users[value])
        stepsOfUse(*user, steps);
      if (steps.size() < 2 || kindOf(**node) != OpKind::Pointwise ||
          streamedReads(state, value) < 2)
        continue;
      state.realized.insert(value);
      state.shared[value] = steps.size();
      stepOfNew[value] = nextStep++;
      changed = true;
    }
  }
  return changed;
}

} // namespace dynafuse
