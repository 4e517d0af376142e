//===- InputTable.h - The tensor inputs of one capture ---------*- C++ -*-===//
//
// The tracer's bookkeeping of graph inputs: which input each source and each
// tensor object reached is (one input per object, however many sources lead
// to it), the source each input was first read from, the inputs that
// require grad, the latest value of each input updated in place (written
// back after the run). Guards and refusals stay with the tracer; this only
// records and answers.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_INPUTTABLE_H
#define DYNAFUSE_CAPTURE_INPUTTABLE_H

#include "dynafuse/Support/PyRef.h"
#include "dynafuse/Graph/Graph.h"

#include <map>
#include <set>
#include <utility>

namespace dynafuse {
namespace capture {

class InputTable {
public:
  /// The value a source's tensor is (the latest value of its input), or
  /// null when no input was read from the source yet.
  Value *ofSource(int source) const;
  /// The first source and the value of a tensor object already seen, or
  /// null.
  const std::pair<int, Value *> *ofObject(PyObject *object) const;
  /// Another source leading to an input already seen (value).
  void addSource(int source, Value *value);
  /// A new graph input, read from object through source.
  void addInput(PyObject *object, int source, Value *input,
                bool requiresGrad);

  /// Tensor inputs by source, and by the object seen (and its first source).
  const std::map<int, Value *> &bySource() const { return inputOfSource; }
  const std::map<PyObject *, std::pair<int, Value *>> &byObject() const {
    return inputOfObject;
  }

  /// Whether value is a graph input, and the source it was first read from
  /// (-1 when it is none).
  bool isInput(const Value *value) const {
    return sourceOfInput.count(value) != 0;
  }
  int sourceOf(const Value *input) const;
  /// Whether value requires grad in the graph being captured: an input
  /// requiring grad read by a frame that started in grad mode, or a
  /// differentiable result computed (in grad mode) from one.
  bool requiresGrad(const Value *value) const {
    return valuesRequiringGrad.count(value) != 0;
  }
  void markRequiresGrad(const Value *value) {
    valuesRequiringGrad.insert(value);
  }

  /// An in-place update of a graph input (or of its latest value): later
  /// reads of its source see the new value.
  void updateInput(const Value *input, Value *value);
  /// The input a value is the latest value of (after in-place updates).
  const Value *inputUpdatedTo(const Value *value) const;
  /// The graph input a value is, or is the latest in-place value of.
  const Value *originalInput(const Value *value) const;
  /// Inputs updated in place: the latest value of each, by input.
  const std::map<const Value *, Value *> &latestValues() const {
    return latestOfInput;
  }

private:
  std::set<const Value *> valuesRequiringGrad;
  std::map<const Value *, Value *> latestOfInput;
  std::map<int, Value *> inputOfSource;
  std::map<PyObject *, std::pair<int, Value *>> inputOfObject;
  std::map<const Value *, int> sourceOfInput;
};

} // namespace capture
} // namespace dynafuse

#endif
