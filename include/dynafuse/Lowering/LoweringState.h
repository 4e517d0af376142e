//===- LoweringState.h - What lowering's passes hand each other -*- C++ -*-===//
//
// Lowering from graph IR to loop IR is a list of passes over one explicit
// state: the graph (already decomposed), which values live in buffers
// ("realized"), the layout of each realized value, the program steps the
// scheduler grouped them into, and the loop module emission builds with the
// buffer names it chose. Each pass reads what earlier passes decided and
// fills in its own part; nothing is global.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_LOWERING_LOWERINGSTATE_H
#define DYNAFUSE_LOWERING_LOWERINGSTATE_H

#include "dynafuse/Graph/Graph.h"
#include "dynafuse/Graph/OpRegistry.h"
#include "dynafuse/Loop/Kernel.h"

#include <map>
#include <set>
#include <string>
#include <vector>

namespace dynafuse {

/// A program step in the making: one kernel (a group of realized values
/// over one iteration space) or one extern op.
struct LoweringStep {
  const Node *externNode = nullptr;
  std::vector<const Value *> members;
};

struct LoweringState {
  explicit LoweringState(const Graph &graph) : graph(graph) {}

  const Graph &graph;

  /// Realization (RealizationPolicy.cpp): values that live in buffers
  /// besides graph inputs. Grows until emission can place every value.
  std::set<const Value *> realized;

  /// Share (SharedValues.cpp): the realized values share added, each with
  /// the number of kernels that would have recomputed it inline.
  std::map<const Value *, size_t> shared;

  /// Layout (LayoutChoice.cpp): whether 2-D convolutions produce
  /// channels-last buffers, and per realized value its dims from outermost
  /// to innermost and its buffer type with matching strides (where it
  /// differs from the graph type).
  bool convolutionsChannelsLast = false;
  std::map<const Value *, std::vector<size_t>> orderOf;
  std::map<const Value *, TensorType> bufferTypes;

  /// Schedule (FusionScheduler.cpp): the program's steps in order, and the
  /// step computing each realized value.
  std::vector<LoweringStep> steps;
  std::map<const Value *, int> stepOf;

  /// Emission (ProgramEmission.cpp): the loop module, the buffer name of
  /// every input and realized value, and the names already taken.
  LoopModule module;
  std::map<const Value *, std::string> bufferOf;
  std::set<std::string> usedNames;
  int viewCounter = 0;

  /// Forgets what layout, schedule and emission decided (before they run
  /// again on a larger realized set).
  void resetPlacement();

  /// The type value's buffer was given (its chosen layout).
  const TensorType &bufferType(const Value *value) const;
  /// Graph inputs and realized values.
  bool isBuffer(const Value *value) const {
    return !value->producer || realized.count(value);
  }
};

/// The kind of node's op; throws Error naming the node for an unknown op.
OpKind kindOf(const Node &node);

/// The state's decisions as text, for --print-ir-after-all: the realized
/// values, the buffer layouts, the program steps, the values share added.
std::string printRealized(const LoweringState &state);
std::string printLayouts(const LoweringState &state);
std::string printSchedule(const LoweringState &state);
std::string printShared(const LoweringState &state);

} // namespace dynafuse

#endif
