//===- SharedValues.cpp - Values recomputed by several kernels ------------===//
//
// The share pass: a value that is not realized is recomputed inline by
// every kernel whose members reach it. Where several kernels reach it and
// its inline computation streams at least two full-size buffers, or
// gathers, storing it once and loading it in each kernel
// costs less than recomputing it: it is realized. Without this, a residual stream (h1 = h0 + f(h0),
// h2 = h1 + g(h1), ...) is inlined into every later layer's kernels, and
// their work grows with the square of the depth (vit_b_16's last kernel
// read 41 buffers); a T5 relative position bias (a log per element and a
// gather) was recomputed three times per layer.
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

/// What recomputing a value inline costs: the distinct buffers it streams,
/// and whether it gathers (an indirect load, with whatever computes its
/// index).
struct InlineCost {
  std::set<const Value *> streamed;
  bool gathers = false;
  /// Slices read (a pool's or depthwise convolution's window taps).
  int slices = 0;
};

/// value's inline computation, stopping at buffers.
void collectCost(const LoweringState &state, const Value *value,
                 const SymExpr &computed, InlineCost &cost,
                 std::set<const Value *> &seen) {
  if (!seen.insert(value).second)
    return;
  cost.gathers = cost.gathers || opInfoOf(*value->producer)->indexedOperand >= 0;
  cost.slices += value->producer->op == Op::Slice;
  for (const Operand &operand : value->producer->operands) {
    if (!operand.isValue())
      continue;
    if (state.isBuffer(operand.value)) {
      if (isStreamed(operand.value->type.numel(), computed))
        cost.streamed.insert(operand.value);
    } else {
      collectCost(state, operand.value, computed, cost, seen);
    }
  }
}

/// Whether storing value once beats recomputing it in each of several
/// kernels: it streams two or more full-size buffers (a store and a load
/// per kernel move less), or one through several slices (window taps: a
/// depthwise convolution read by a squeeze-excitation's mean and its
/// scaling), or it gathers (T5's relative position bias: a
/// bucket computed with a log, then an embedding row, per element, per
/// loop of each layer's softmax). Costly math alone is recomputed: exp(x -
/// max) stored by a kernel of its own would cost softmax a pass.
bool worthStoring(const LoweringState &state, const Value *value) {
  InlineCost cost;
  std::set<const Value *> seen;
  collectCost(state, value, value->type.numel(), cost, seen);
  return cost.streamed.size() >= 2 || cost.gathers ||
         (!cost.streamed.empty() && cost.slices >= 2);
}

/// Values share may realize: pointwise results and gathers (index_select,
/// embedding), which compute their elements; other views only remap an
/// index.
bool mayRealize(const Node &node) {
  OpKind kind = kindOf(node);
  return kind == OpKind::Pointwise ||
         (kind == OpKind::View && opInfoOf(node)->indexedOperand >= 0);
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
      if (steps.size() < 2 || !mayRealize(**node) ||
          !worthStoring(state, value))
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
