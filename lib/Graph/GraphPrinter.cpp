//===- GraphPrinter.cpp - Graph IR to text --------------------------------===//
#include "dynafuse/Graph/GraphText.h"

namespace dynafuse {
namespace {

std::string operandStr(const Operand &operand) {
  return operand.isValue() ? "%" + operand.value->name : operand.scalar.str();
}

std::string nodeStr(const Node &node) {
  std::string text = "  ";
  for (size_t i = 0; i < node.results.size(); ++i)
    text += (i ? ", %" : "%") + node.results[i]->name;
  text += " = " + opName(node.op);
  for (size_t i = 0; i < node.operands.size(); ++i)
    text += (i ? ", " : " ") + operandStr(node.operands[i]);
  text += printAttributeDict(node.attributes) + " :";
  for (size_t i = 0; i < node.results.size(); ++i)
    text += (i ? ", " : " ") + node.results[i]->type.str();
  if (node.recompute)
    text += " recompute";
  if (node.location.known())
    text += " loc(\"" + node.location.file +
            "\":" + std::to_string(node.location.line) + ")";
  return text + "\n";
}

} // namespace

std::string printAttributeDict(const std::map<std::string, Attribute> &dict) {
  if (dict.empty())
    return "";
  std::string text = " {";
  bool first = true;
  for (auto &entry : dict) {
    text +=
        (first ? "" : ", ") + entry.first + " = " + attributeStr(entry.second);
    first = false;
  }
  return text + "}";
}

std::string printGraph(const Graph &graph) {
  std::string text = "graph @" + graph.name + "(";
  for (size_t i = 0; i < graph.inputs.size(); ++i)
    text += (i ? ", %" : "%") + graph.inputs[i]->name + ": " +
            graph.inputs[i]->type.str();
  text += ") {\n";
  for (const auto &node : graph.nodes)
    text += nodeStr(*node);
  text += "  return";
  for (size_t i = 0; i < graph.outputs.size(); ++i)
    text += (i ? ", %" : " %") + graph.outputs[i]->name;
  return text + "\n}\n";
}

} // namespace dynafuse
