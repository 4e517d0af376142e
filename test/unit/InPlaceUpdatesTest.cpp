//===- InPlaceUpdatesTest.cpp - Which torch calls may write their input ---===//
//
// markInPlaceUpdates (Loop/InPlaceUpdates.h) on lowered graphs: a call_torch
// with an in-place form whose result is written back into its first
// argument, an input nothing else reads, is marked; every condition that
// would let the update change what another step reads, or the layout a
// kernel indexes, leaves it unmarked.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Loop/InPlaceUpdates.h"
#include "dynafuse/Graph/GraphText.h"
#include "dynafuse/Loop/LoopText.h"
#include "dynafuse/Lowering/LowerGraph.h"

#include <gtest/gtest.h>

using namespace dynafuse;

namespace {

/// A cache update: %c's new value %0 (output 1) is written back into %c.
/// `extra`: more lines before the return; `outputs`: what it returns.
std::string cacheGraph(const std::string &attributes,
                       const std::string &extra = "",
                       const std::string &outputs = "%1, %0",
                       const std::string &cacheType = "f32[4, 3]") {
  return "graph @g(%c: " + cacheType +
         ", %p: i64[1], %k: f32[1, 3]) {\n"
         "  %0 = call_torch %c, %p, %k {call = 0, " +
         attributes +
         "results = \"f32[4, 3]\", signature = \"(%0, 0, %1, %2)\", "
         "target = \"Tensor.index_copy\"} : f32[4, 3]\n"
         "  %1 = mul %0, 2.0 : f32[4, 3]\n" +
         extra + "  return " + outputs + "\n}";
}

const char *inPlaceForm = "in_place_form = \"Tensor.index_copy_\", ";

/// Whether the module's call_torch step came out marked, after the pass
/// ran with the write-back (input 0, output `output`).
bool marked(const std::string &graphText, int output = 1) {
  LoopModule module = lowerGraph(*parseGraph(graphText));
  markInPlaceUpdates(module, {{0, output}});
  verifyLoopModule(module);
  for (const ProgramStep &step : module.steps)
    if (step.kind == ProgramStep::Kind::Extern && step.op == Op::CallTorch)
      return step.attributes.count(kInPlaceAttribute) != 0;
  ADD_FAILURE() << "no call_torch step in\n" << printLoopModule(module);
  return false;
}

} // namespace

TEST(InPlaceUpdates, AWrittenBackUpdateOfAnUnreadInputIsMarked) {
  EXPECT_TRUE(marked(cacheGraph(inPlaceForm)));
}

TEST(InPlaceUpdates, TheMarkSurvivesTheLoopText) {
  LoopModule module = lowerGraph(*parseGraph(cacheGraph(inPlaceForm)));
  ASSERT_EQ(markInPlaceUpdates(module, {{0, 1}}), 1);
  std::string text = printLoopModule(module);
  EXPECT_NE(text.find("in_place = true"), std::string::npos) << text;
  EXPECT_EQ(printLoopModule(parseLoopModule(text)), text);
}

TEST(InPlaceUpdates, ACallWithoutAnInPlaceFormIsNot) {
  EXPECT_FALSE(marked(cacheGraph("")));
}

TEST(InPlaceUpdates, AnInputReadElsewhereIsNot) {
  // a kernel reads the old values: the update would change them
  EXPECT_FALSE(marked(cacheGraph(
      inPlaceForm, "  %2 = add %c, 1.0 : f32[4, 3]\n", "%1, %0, %2")));
}

TEST(InPlaceUpdates, AnInputReturnedAsItIsIsNot) {
  EXPECT_FALSE(marked(cacheGraph(inPlaceForm, "", "%1, %0, %c")));
}

TEST(InPlaceUpdates, AnOutputReturnedTwiceIsNot) {
  EXPECT_FALSE(marked(cacheGraph(inPlaceForm, "", "%1, %0, %0")));
}

TEST(InPlaceUpdates, AWriteBackOfAnotherOutputIsNot) {
  // output 0 is the product, not the call's result
  EXPECT_FALSE(marked(cacheGraph(inPlaceForm), 0));
}

TEST(InPlaceUpdates, AnInputOfAnotherLayoutIsNot) {
  // a transposed cache: the result's declared row-major layout is not the
  // input's, which kernels reading the result would index
  EXPECT_FALSE(
      marked(cacheGraph(inPlaceForm, "", "%1, %0", "f32[4, 3]{1, 4}")));
}

TEST(InPlaceUpdates, WriteBacksOutOfRangeAreSkipped) {
  LoopModule module = lowerGraph(*parseGraph(cacheGraph(inPlaceForm)));
  EXPECT_EQ(markInPlaceUpdates(module, {{7, 1}, {0, 9}, {-1, 0}}), 0);
}
