//===- LoweringState.cpp - What lowering's passes hand each other ---------===//
#include "dynafuse/Lowering/LoweringState.h"

namespace dynafuse {
namespace {

/// Realized values in graph order (the state keeps them in sets).
std::vector<const Value *> realizedInOrder(const LoweringState &state) {
  std::vector<const Value *> values;
  for (const auto &node : state.graph.nodes)
    for (const Value *result : node->results)
      if (state.realized.count(result))
        values.push_back(result);
  return values;
}

std::string joinIndices(const std::vector<size_t> &order) {
  std::string text;
  for (size_t k = 0; k < order.size(); ++k)
    text += (k ? ", " : "") + std::to_string(order[k]);
  return text;
}

} // namespace

OpKind kindOf(const Node &node) {
  const OpInfo *info = opInfoOf(node);
  if (!info)
    fail("unknown op '" + opName(node.op) + "'", node.location);
  return info->kind;
}

void LoweringState::resetPlacement() {
  convolutionsChannelsLast = false;
  orderOf.clear();
  bufferTypes.clear();
  steps.clear();
  stepOf.clear();
  module = LoopModule();
  bufferOf.clear();
  usedNames.clear();
  viewCounter = 0;
}

const TensorType &LoweringState::bufferType(const Value *value) const {
  auto found = bufferTypes.find(value);
  return found == bufferTypes.end() ? value->type : found->second;
}

std::string printRealized(const LoweringState &state) {
  std::string text = "realized @" + state.graph.name + " {\n";
  for (const Value *value : realizedInOrder(state))
    text += "  %" + value->name + " = " + opName(value->producer->op) + " : " +
            value->type.str() + "\n";
  return text + "}\n";
}

std::string printLayouts(const LoweringState &state) {
  std::string text = "layouts @" + state.graph.name;
  if (state.convolutionsChannelsLast)
    text += " convolutions-channels-last";
  text += " {\n";
  for (const Value *value : realizedInOrder(state)) {
    text += "  %" + value->name + " : " + state.bufferType(value).str();
    auto order = state.orderOf.find(value);
    if (order != state.orderOf.end())
      text += " order [" + joinIndices(order->second) + "]";
    text += "\n";
  }
  return text + "}\n";
}

std::string printSchedule(const LoweringState &state) {
  std::string text = "schedule @" + state.graph.name + " {\n";
  for (size_t s = 0; s < state.steps.size(); ++s) {
    const LoweringStep &step = state.steps[s];
    text += "  step " + std::to_string(s) + ": ";
    std::vector<const Value *> values = step.members;
    if (step.externNode) {
      text += "extern " + opName(step.externNode->op);
      values.assign(step.externNode->results.begin(),
                    step.externNode->results.end());
    } else {
      text += "kernel";
    }
    for (size_t k = 0; k < values.size(); ++k)
      text += (k ? ", %" : " %") + values[k]->name;
    text += "\n";
  }
  return text + "}\n";
}

std::string printShared(const LoweringState &state) {
  std::string text = "shared @" + state.graph.name + " {\n";
  for (const Value *value : realizedInOrder(state)) {
    auto found = state.shared.find(value);
    if (found != state.shared.end())
      text += "  %" + value->name + " = " + opName(value->producer->op) +
              " : " + value->type.str() + " // reached by " +
              std::to_string(found->second) + " kernels\n";
  }
  return text + "}\n";
}

} // namespace dynafuse
