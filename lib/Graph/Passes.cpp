//===- Passes.cpp - Graph-to-graph transformations ------------------------===//
#include "dynafuse/Graph/Passes.h"

#include <functional>
#include <map>
#include <set>

namespace dynafuse {
namespace {

std::string operandKey(const Operand &operand) {
  if (operand.isValue())
    return "%" + operand.value->name;
  return operand.scalar.str() + ":" + std::to_string(int(operand.scalar.kind));
}

std::string nodeKey(const Node &node) {
  std::string key = node.op + "(";
  for (const Operand &operand : node.operands)
    key += operandKey(operand) + ",";
  key += "){";
  for (auto &entry : node.attributes)
    key += entry.first + "=" + attributeStr(entry.second) + ",";
  return key + "}";
}

using PassFn = std::function<bool(Graph &)>;
const std::map<std::string, PassFn> &passTable() {
  static const std::map<std::string, PassFn> table = {
      {"dce", eliminateDeadCode},
      {"cse", eliminateCommonSubexpressions},
  };
  return table;
}

} // namespace

bool eliminateDeadCode(Graph &graph) {
  std::set<const Value *> live(graph.outputs.begin(), graph.outputs.end());
  std::vector<bool> keep(graph.nodes.size(), false);
  for (size_t i = graph.nodes.size(); i-- > 0;) {
    const Node &node = *graph.nodes[i];
    for (const Value *result : node.results)
      keep[i] = keep[i] || live.count(result);
    if (!keep[i])
      continue;
    for (const Operand &operand : node.operands)
      if (operand.isValue())
        live.insert(operand.value);
  }
  std::vector<std::unique_ptr<Node>> kept;
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    if (keep[i])
      kept.push_back(std::move(graph.nodes[i]));
  bool changed = kept.size() != graph.nodes.size();
  graph.nodes = std::move(kept);
  return changed;
}

bool eliminateCommonSubexpressions(Graph &graph) {
  std::map<std::string, Node *> seen;
  std::map<const Value *, Value *> replacement;
  bool changed = false;
  for (auto &node : graph.nodes) {
    for (Operand &operand : node->operands)
      if (operand.isValue() && replacement.count(operand.value))
        operand.value = replacement[operand.value];
    auto inserted = seen.insert({nodeKey(*node), node.get()});
    if (inserted.second)
      continue;
    for (size_t r = 0; r < node->results.size(); ++r)
      replacement[node->results[r]] = inserted.first->second->results[r];
    changed = true;
  }
  for (Value *&output : graph.outputs)
    if (replacement.count(output))
      output = replacement[output];
  if (changed)
    eliminateDeadCode(graph);
  return changed;
}

bool runGraphPass(const std::string &name, Graph &graph) {
  auto found = passTable().find(name);
  if (found == passTable().end())
    fail("unknown graph pass '" + name + "'");
  return found->second(graph);
}

std::vector<std::string> graphPassNames() {
  std::vector<std::string> names;
  for (auto &entry : passTable())
    names.push_back(entry.first);
  return names;
}

} // namespace dynafuse
