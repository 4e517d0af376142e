//===- NodeRewrites.cpp - Passes that replace nodes in place --------------===//
#include "dynafuse/Graph/NodeRewrites.h"

namespace dynafuse {

Value *NodeRewriter::add(Op op, std::vector<Operand> operands,
                         std::map<std::string, Attribute> attributes) {
  Node *added = graph.addNode(op, std::move(operands), std::move(attributes),
                              node.location);
  added->recompute = node.recompute;
  ordered.push_back(std::move(graph.nodes.back()));
  graph.nodes.pop_back();
  return added->result();
}

Value *NodeRewriter::keep() {
  ordered.push_back(std::move(owned));
  return node.result();
}

bool rewriteNodes(
    Graph &graph, const std::function<bool(const Node &)> &matches,
    const std::function<Value *(Node &, NodeRewriter &)> &rewrite) {
  bool any = false;
  for (const auto &node : graph.nodes)
    any |= matches(*node);
  if (!any)
    return false;
  std::vector<std::unique_ptr<Node>> nodes;
  nodes.swap(graph.nodes);
  std::vector<std::unique_ptr<Node>> ordered;
  std::map<const Value *, Value *> redirected;
  for (auto &owned : nodes) {
    Node &node = *owned;
    for (Operand &operand : node.operands)
      if (operand.isValue() && redirected.count(operand.value))
        operand.value = redirected.at(operand.value);
    if (!matches(node)) {
      ordered.push_back(std::move(owned));
      continue;
    }
    const Value *result = node.results.at(0);
    NodeRewriter rewriter(graph, owned, ordered);
    Value *replacement = rewrite(node, rewriter);
    if (replacement != result)
      redirected[result] = replacement;
  }
  graph.nodes.swap(ordered);
  for (Value *&output : graph.outputs)
    if (redirected.count(output))
      output = redirected.at(output);
  return true;
}

} // namespace dynafuse
