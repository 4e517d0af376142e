//===- MinCut.h - Minimum s-t cut of a small capacitated graph -*- C++ -*-===//
//
// A directed graph with int64 capacities, its maximum flow from a source
// to a sink (Dinic's algorithm) and the minimum cut that flow certifies:
// the vertices still reachable from the source in the residual graph. The
// training split uses it to choose what the forward saves for the backward
// (lib/Graph/Autodiff.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_SUPPORT_MINCUT_H
#define DYNAFUSE_SUPPORT_MINCUT_H

#include <cstdint>
#include <vector>

namespace dynafuse {

class FlowNetwork {
public:
  /// Capacity that no cut pays: an edge that must not be cut.
  static constexpr int64_t kInfinite = int64_t(1) << 60;

  explicit FlowNetwork(int vertices);
  int vertexCount() const { return int(adjacency.size()); }
  /// Adds an edge from -> to; capacities of parallel edges add up.
  void addEdge(int from, int to, int64_t capacity);
  /// Maximum flow from source to sink; afterwards sourceSide() tells the
  /// minimum cut (a flow of kInfinite or more means no finite cut exists).
  int64_t maxFlow(int source, int sink);
  /// After maxFlow: whether each vertex is reachable from the source in the
  /// residual graph (the source side of the minimum cut nearest the source).
  const std::vector<bool> &sourceSide() const { return reachable; }

private:
  struct Edge {
    int to;
    int64_t capacity;
  };
  bool levelGraph(int source, int sink);
  int64_t push(int vertex, int sink, int64_t limit);

  std::vector<Edge> edges; // edge i and i ^ 1 are each other's reverse
  std::vector<std::vector<int>> adjacency;
  std::vector<int> level, next;
  std::vector<bool> reachable;
};

} // namespace dynafuse

#endif
