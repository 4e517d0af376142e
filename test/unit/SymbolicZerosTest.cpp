//===- SymbolicZerosTest.cpp - Backward graphs without some tangents ------===//
//
// withZeroInputs on small backward-shaped graphs: values linear in a zero
// tangent vanish, sums pass their other term on, an op not linear in it
// reads a zero fill, and an output reached only from zeros is a fill.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/GraphText.h"
#include "dynafuse/Graph/SymbolicZeros.h"

#include <gtest/gtest.h>

using namespace dynafuse;

namespace {

const char *kTwoTangents = R"(graph @b(%x: f32[3, 4], %t0: f32[3, 4], %t1: f32[4]) {
  %d = exp %x : f32[3, 4]
  %e = expand %t1 {shape = [3, 4]} : f32[3, 4]
  %p = mul %e, %d : f32[3, 4]
  %q = mul %t0, %d : f32[3, 4]
  %s = add %q, %p : f32[3, 4]
  %n = sub %p, %t0 : f32[3, 4]
  %r = sum %p {dims = [0], keepdim = false} : f32[4]
  %m = maximum %p, %x : f32[3, 4]
  return %s, %n, %r, %m
}
)";

std::string reduced(const char *text, std::vector<bool> zero) {
  std::unique_ptr<Graph> graph = parseGraph(text);
  return printGraph(*withZeroInputs(*graph, zero));
}

TEST(SymbolicZeros, LinearValuesOfAZeroTangentVanish) {
  std::string text = reduced(kTwoTangents, {false, false, true});
  SCOPED_TRACE(text);
  // t1 feeds expand, mul, the sum's second term and the reduction: none
  // of them is left, and nothing reads t1.
  EXPECT_EQ(text.find("%t1 {"), std::string::npos);
  EXPECT_EQ(text.find("expand"), std::string::npos);
  EXPECT_EQ(text.find("add"), std::string::npos);
  // s is q itself; n = 0 - t0 is neg t0; r is a zero fill; maximum is not
  // linear in p, so it reads a fill of p's type.
  EXPECT_NE(text.find("neg %t0"), std::string::npos);
  EXPECT_NE(text.find("%zero_r = full"), std::string::npos);
  EXPECT_NE(text.find("%zero_p = full"), std::string::npos);
  EXPECT_NE(text.find("maximum %zero_p, %x"), std::string::npos);
  EXPECT_NE(text.find("return %q, %n, %zero_r, %m"), std::string::npos);
}

TEST(SymbolicZeros, NoZeroInputChangesNothing) {
  std::unique_ptr<Graph> graph = parseGraph(kTwoTangents);
  EXPECT_EQ(printGraph(*withZeroInputs(*graph, {false, false, false})),
            printGraph(*graph));
}

TEST(SymbolicZeros, EveryTangentZeroLeavesFills) {
  std::string text = reduced(kTwoTangents, {false, true, true});
  SCOPED_TRACE(text);
  EXPECT_EQ(text.find("exp"), std::string::npos); // only fills are read
  EXPECT_NE(text.find("return %zero_s, %zero_n, %zero_r, %m"),
            std::string::npos);
}

TEST(SymbolicZeros, InputsStayForTheBinding) {
  std::unique_ptr<Graph> graph = parseGraph(kTwoTangents);
  std::unique_ptr<Graph> result = withZeroInputs(*graph, {false, true, true});
  ASSERT_EQ(result->inputs.size(), 3u);
  EXPECT_EQ(result->inputs[2]->name, "t1");
  EXPECT_EQ(result->outputs.size(), 4u);
}

} // namespace
