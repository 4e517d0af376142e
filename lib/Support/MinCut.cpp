//===- MinCut.cpp - Minimum s-t cut of a small capacitated graph ----------===//
#include "dynafuse/Support/MinCut.h"

#include <algorithm>
#include <queue>

namespace dynafuse {

FlowNetwork::FlowNetwork(int vertices) : adjacency(size_t(vertices)) {}

void FlowNetwork::addEdge(int from, int to, int64_t capacity) {
  capacity = std::min(capacity, kInfinite);
  adjacency[size_t(from)].push_back(int(edges.size()));
  edges.push_back({to, capacity});
  adjacency[size_t(to)].push_back(int(edges.size()));
  edges.push_back({from, 0});
}

bool FlowNetwork::levelGraph(int source, int sink) {
  level.assign(adjacency.size(), -1);
  std::queue<int> frontier;
  level[size_t(source)] = 0;
  frontier.push(source);
  while (!frontier.empty()) {
    int vertex = frontier.front();
    frontier.pop();
    for (int e : adjacency[size_t(vertex)]) {
      const Edge &edge = edges[size_t(e)];
      if (edge.capacity > 0 && level[size_t(edge.to)] < 0) {
        level[size_t(edge.to)] = level[size_t(vertex)] + 1;
        frontier.push(edge.to);
      }
    }
  }
  return level[size_t(sink)] >= 0;
}

int64_t FlowNetwork::push(int vertex, int sink, int64_t limit) {
  if (vertex == sink)
    return limit;
  for (int &i = next[size_t(vertex)]; i < int(adjacency[size_t(vertex)].size());
       ++i) {
    int e = adjacency[size_t(vertex)][size_t(i)];
    Edge &edge = edges[size_t(e)];
    if (edge.capacity <= 0 ||
        level[size_t(edge.to)] != level[size_t(vertex)] + 1)
      continue;
    int64_t pushed = push(edge.to, sink, std::min(limit, edge.capacity));
    if (pushed > 0) {
      edge.capacity -= pushed;
      edges[size_t(e ^ 1)].capacity += pushed;
      return pushed;
    }
  }
  return 0;
}

int64_t FlowNetwork::maxFlow(int source, int sink) {
  int64_t flow = 0;
  while (flow < kInfinite && levelGraph(source, sink)) {
    next.assign(adjacency.size(), 0);
    while (int64_t pushed = push(source, sink, kInfinite)) {
      flow += pushed;
      if (flow >= kInfinite)
        break;
    }
  }
  // The cut's source side is what the residual graph still reaches: the
  // last level graph's vertices (built afresh if the loop stopped early at
  // an unbounded flow).
  if (flow >= kInfinite)
    levelGraph(source, sink);
  reachable.assign(adjacency.size(), false);
  for (size_t vertex = 0; vertex < adjacency.size(); ++vertex)
    reachable[vertex] = level[vertex] >= 0;
  return flow;
}

} // namespace dynafuse
