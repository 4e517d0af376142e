//===- NodeRewrites.h - Passes that replace nodes in place ------*- C++ -*-===//
//
// The skeleton of a graph pass that replaces some single-result nodes by a
// few others where they stand (HalfProducts.cpp, MatrixVectorProducts.cpp):
// the nodes are rebuilt in order; a matched node's rewrite adds its new
// nodes (each with the node's location and recompute mark), may keep the
// node itself among them, and gives the value that replaces its result for
// every later reader and output.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_GRAPH_NODEREWRITES_H
#define DYNAFUSE_GRAPH_NODEREWRITES_H

#include "dynafuse/Graph/Graph.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dynafuse {

/// What a rewrite of one node builds with.
class NodeRewriter {
public:
  NodeRewriter(Graph &graph, std::unique_ptr<Node> &owned,
               std::vector<std::unique_ptr<Node>> &ordered)
      : graph(graph), owned(owned), ordered(ordered), node(*owned) {}
  /// A new node after those added so far; its (single) result.
  Value *add(Op op, std::vector<Operand> operands,
             std::map<std::string, Attribute> attributes);
  /// The node itself, after those added so far; its result.
  Value *keep();

private:
  Graph &graph;
  std::unique_ptr<Node> &owned;
  std::vector<std::unique_ptr<Node>> &ordered;
  Node &node;
};

/// Rebuilds graph's nodes in order, each matched node (its operands already
/// redirected) replaced by what rewrite adds; rewrite returns the value
/// that stands for the node's result. Whether any node matched.
bool rewriteNodes(
    Graph &graph, const std::function<bool(const Node &)> &matches,
    const std::function<Value *(Node &, NodeRewriter &)> &rewrite);

} // namespace dynafuse

#endif
