//===- Passes.cpp - Graph-to-graph transformations ------------------------===//
#include "dynafuse/Graph/Passes.h"

#include "dynafuse/Graph/ConvolutionEpilogues.h"
#include "dynafuse/Graph/OpRegistry.h"

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
  std::string key = opName(node.op) + "(";
  for (const Operand &operand : node.operands)
    key += operandKey(operand) + ",";
  key += "){";
  for (auto &entry : node.attributes)
    key += entry.first + "=" + attributeStr(entry.second) + ",";
  return key + "}";
}

/// Whether merging `duplicate` into `kept` would make two graph outputs one
/// value: eager returns two tensors there (`return x * 2, x * 2`, two
/// `torch.zeros` caches), and one buffer behind both would let a write into
/// one show through the other. `claimed` holds the values some output is
/// (or will be, after earlier merges) and grows when a merge goes ahead.
bool mergesTwoOutputs(const Node &duplicate, const Node &kept,
                      const std::set<const Value *> &outputs,
                      std::set<const Value *> &claimed) {
  // A view that is an output stays a node of its own (it costs nothing):
  // merged into one that another op reads through a buffer, it would be
  // returned as that buffer, not as a view of its base.
  const OpInfo *info = opInfoOf(duplicate);
  if (info && info->kind == OpKind::View)
    for (const Value *result : duplicate.results)
      if (outputs.count(result))
        return true;
  for (size_t r = 0; r < duplicate.results.size(); ++r)
    if (outputs.count(duplicate.results[r]) &&
        claimed.count(kept.results[r]))
      return true;
  for (size_t r = 0; r < duplicate.results.size(); ++r)
    if (outputs.count(duplicate.results[r]))
      claimed.insert(kept.results[r]);
  return false;
}

} // namespace

std::set<const Value *> liveValues(const Graph &graph) {
  std::set<const Value *> live(graph.outputs.begin(), graph.outputs.end());
  for (size_t i = graph.nodes.size(); i-- > 0;) {
    const Node &node = *graph.nodes[i];
    bool read = false;
    for (const Value *result : node.results)
      read = read || live.count(result);
    if (!read)
      continue;
    for (const Operand &operand : node.operands)
      if (operand.isValue())
        live.insert(operand.value);
  }
  return live;
}

bool eliminateDeadCode(Graph &graph) {
  std::set<const Value *> live = liveValues(graph);
  std::vector<std::unique_ptr<Node>> kept;
  for (auto &node : graph.nodes) {
    bool keep = false;
    for (const Value *result : node->results)
      keep = keep || live.count(result);
    if (keep)
      kept.push_back(std::move(node));
  }
  bool changed = kept.size() != graph.nodes.size();
  graph.nodes = std::move(kept);
  return changed;
}

bool eliminateCommonSubexpressions(Graph &graph) {
  std::map<std::string, Node *> seen;
  std::map<const Value *, Value *> replacement;
  const std::set<const Value *> outputs(graph.outputs.begin(),
                                        graph.outputs.end());
  std::set<const Value *> claimed = outputs;
  bool changed = false;
  for (auto &node : graph.nodes) {
    for (Operand &operand : node->operands)
      if (operand.isValue() && replacement.count(operand.value))
        operand.value = replacement[operand.value];
    auto inserted = seen.insert({nodeKey(*node), node.get()});
    if (inserted.second ||
        mergesTwoOutputs(*node, *inserted.first->second, outputs, claimed))
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

namespace {

bool decomposes(const Node &node, const CompositeFilter &which) {
  const OpInfo *info = opInfoOf(node);
  if (!info || (which && !which(node)))
    return false;
  return info->kind == OpKind::Composite ||
         (info->decompose && info->decomposesWhen &&
          info->decomposesWhen(node));
}

bool hasComposites(const Graph &graph, const CompositeFilter &which) {
  for (const auto &node : graph.nodes)
    if (decomposes(*node, which))
      return true;
  return false;
}

/// One rebuild: composites replaced by their decompositions, other nodes
/// copied (with fresh names).
void decomposeOnce(Graph &graph, const CompositeFilter &which) {
  Graph rebuilt(graph.name);
  std::map<const Value *, Value *> remap;
  for (const Value *input : graph.inputs)
    remap[input] = rebuilt.addInput(input->name, input->type);
  for (const auto &node : graph.nodes) {
    Node copy;
    copy.op = node->op;
    copy.attributes = node->attributes;
    copy.location = node->location;
    copy.recompute = node->recompute;
    for (const Operand &operand : node->operands)
      copy.operands.push_back(operand.isValue()
                                  ? Operand(remap.at(operand.value))
                                  : Operand(operand.scalar));
    std::vector<Value *> results;
    if (decomposes(*node, which)) {
      results = opInfoOf(*node)->decompose(rebuilt, copy);
    } else {
      std::vector<TensorType> types;
      std::vector<std::string> names;
      for (const Value *result : node->results) {
        types.push_back(result->type);
        names.push_back(rebuilt.freshName());
      }
      Node *kept = rebuilt.addNodeWithTypes(
          copy.op, copy.operands, copy.attributes, types, names, copy.location);
      kept->recompute = copy.recompute;
      results = kept->results;
    }
    if (results.size() != node->results.size())
      fail("decomposition of '" + opName(node->op) +
               "' gave the wrong result count",
           node->location);
    for (size_t r = 0; r < results.size(); ++r) {
      if (results[r]->type != node->results[r]->type)
        fail("decomposition of '" + opName(node->op) + "' gives " +
                 results[r]->type.str() + " instead of " +
                 node->results[r]->type.str(),
             node->location);
      remap[node->results[r]] = results[r];
    }
  }
  for (const Value *output : graph.outputs)
    rebuilt.outputs.push_back(remap.at(output));
  graph.swapContents(rebuilt);
}

} // namespace

bool decomposeComposites(Graph &graph, const CompositeFilter &which) {
  bool changed = false;
  for (int round = 0; hasComposites(graph, which); ++round) {
    if (round > 8)
      fail("decompositions do not terminate");
    decomposeOnce(graph, which);
    changed = true;
  }
  return changed;
}

} // namespace dynafuse
