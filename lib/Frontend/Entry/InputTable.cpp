//===- InputTable.cpp - The tensor inputs of one capture ------------------===//
#include "InputTable.h"

namespace dynafuse {
namespace capture {

Value *InputTable::ofSource(int source) const {
  auto known = inputOfSource.find(source);
  return known == inputOfSource.end() ? nullptr : known->second;
}

const std::pair<int, Value *> *InputTable::ofObject(PyObject *object) const {
  auto seen = inputOfObject.find(object);
  return seen == inputOfObject.end() ? nullptr : &seen->second;
}

void InputTable::addSource(int source, Value *value) {
  inputOfSource[source] = value;
}

void InputTable::addInput(PyObject *object, int source, Value *input,
                          bool requiresGrad) {
  inputOfSource[source] = input;
  inputOfObject[object] = {source, input};
  if (requiresGrad)
    valuesRequiringGrad.insert(input);
  sourceOfInput[input] = source;
}

int InputTable::sourceOf(const Value *input) const {
  auto known = sourceOfInput.find(input);
  return known == sourceOfInput.end() ? -1 : known->second;
}

const Value *InputTable::inputUpdatedTo(const Value *value) const {
  for (const auto &[input, latest] : latestOfInput)
    if (latest == value)
      return input;
  return nullptr;
}

void InputTable::updateInput(const Value *input, Value *value) {
  auto known = latestOfInput.find(input);
  const Value *previous = known == latestOfInput.end() ? input : known->second;
  latestOfInput[input] = value;
  for (auto &entry : inputOfSource)
    if (entry.second == previous)
      entry.second = value;
  for (auto &entry : inputOfObject)
    if (entry.second.second == previous)
      entry.second.second = value;
}

const Value *InputTable::originalInput(const Value *value) const {
  if (sourceOfInput.count(value))
    return value;
  return inputUpdatedTo(value);
}

} // namespace capture
} // namespace dynafuse
