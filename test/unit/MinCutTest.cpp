//===- MinCutTest.cpp - Maximum flow and the minimum cut it gives ---------===//
#include "dynafuse/Support/MinCut.h"

#include <gtest/gtest.h>

using namespace dynafuse;

namespace {

// The classic example: max flow 23 (CLRS figure 26.1).
TEST(MinCut, TextbookNetwork) {
  FlowNetwork network(6);
  network.addEdge(0, 1, 16);
  network.addEdge(0, 2, 13);
  network.addEdge(2, 1, 4);
  network.addEdge(1, 3, 12);
  network.addEdge(3, 2, 9);
  network.addEdge(2, 4, 14);
  network.addEdge(4, 3, 7);
  network.addEdge(3, 5, 20);
  network.addEdge(4, 5, 4);
  EXPECT_EQ(network.maxFlow(0, 5), 23);
  // The cut nearest the source: {0, 1, 2, 4} against {3, 5}
  // (12 + 7 + 4 = 23).
  std::vector<bool> expected = {true, true, true, false, true, false};
  EXPECT_EQ(network.sourceSide(), expected);
}

// A chain where the cheapest edge is in the middle; an unbounded edge is
// never cut, and parallel edges add up.
TEST(MinCut, ChainCutsItsCheapestEdge) {
  FlowNetwork network(4);
  network.addEdge(0, 1, FlowNetwork::kInfinite);
  network.addEdge(1, 2, 3);
  network.addEdge(1, 2, 2);
  network.addEdge(2, 3, 8);
  EXPECT_EQ(network.maxFlow(0, 3), 5);
  std::vector<bool> expected = {true, true, false, false};
  EXPECT_EQ(network.sourceSide(), expected);
}

// Ties: the cut nearest the source wins (the training split then
// recomputes as much as costs nothing more).
TEST(MinCut, TiesGoToTheCutNearestTheSource) {
  FlowNetwork network(4);
  network.addEdge(0, 1, 4);
  network.addEdge(1, 2, 4);
  network.addEdge(2, 3, 4);
  EXPECT_EQ(network.maxFlow(0, 3), 4);
  std::vector<bool> expected = {true, false, false, false};
  EXPECT_EQ(network.sourceSide(), expected);
}

TEST(MinCut, UnboundedPathsReportNoFiniteCut) {
  FlowNetwork network(3);
  network.addEdge(0, 1, FlowNetwork::kInfinite);
  network.addEdge(1, 2, FlowNetwork::kInfinite);
  EXPECT_GE(network.maxFlow(0, 2), FlowNetwork::kInfinite);
  FlowNetwork disconnected(3);
  disconnected.addEdge(0, 1, 5);
  EXPECT_EQ(disconnected.maxFlow(0, 2), 0);
  std::vector<bool> expected = {true, true, false};
  EXPECT_EQ(disconnected.sourceSide(), expected);
}

} // namespace
