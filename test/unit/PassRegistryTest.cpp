//===- PassRegistryTest.cpp - The one list of passes ----------------------===//
//
// The registry's entries are well formed (a unique name, the function of
// its input kind), in pipeline order (graph, then lowering, then loop
// passes), and lowerGraph runs exactly the passes it marks inPipeline, in
// its order.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/GraphText.h"
#include "dynafuse/Lowering/LowerGraph.h"
#include "dynafuse/Lowering/PassRegistry.h"

#include <gtest/gtest.h>

#include <set>

using namespace dynafuse;

TEST(PassRegistry, EntriesAreWellFormedAndInPipelineOrder) {
  std::set<std::string> names;
  int stage = 0;
  for (const PassInfo &pass : passRegistry()) {
    EXPECT_TRUE(names.insert(pass.name).second) << pass.name;
    EXPECT_FALSE(pass.summary.empty()) << pass.name;
    EXPECT_EQ(findPass(pass.name), &pass);
    int own = int(pass.input);
    EXPECT_GE(own, stage) << pass.name << " is out of pipeline order";
    stage = own;
    EXPECT_EQ(bool(pass.runOnGraph), pass.input == PassInput::Graph);
    EXPECT_EQ(bool(pass.printState), pass.input == PassInput::Lowering);
    EXPECT_EQ(bool(pass.runOnLoop), pass.input == PassInput::Loop);
  }
  EXPECT_EQ(findPass("no-such-pass"), nullptr);
}

TEST(PassRegistry, LowerGraphRunsThePipelineInItsOrder) {
  std::unique_ptr<Graph> graph = parseGraph(R"(graph @g(%x: f32[4, 8]) {
  %0 = softmax %x {dim = 1} : f32[4, 8]
  %1 = sum %0 {dims = [0], keepdim = false} : f32[8]
  return %1
}
)",
                                            "<test>");
  std::vector<std::string> observed;
  lowerGraph(*graph, [&](const std::string &pass, const std::string &) {
    observed.push_back(pass);
  });
  std::vector<std::string> expected;
  for (const PassInfo &pass : passRegistry())
    if (pass.inPipeline)
      expected.push_back(pass.name);
  EXPECT_EQ(observed, expected);
}
