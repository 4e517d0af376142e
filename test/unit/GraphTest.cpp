//===- GraphTest.cpp - Graph IR data structures, inference, text ----------===//
#include "dynafuse/Graph/GraphText.h"
#include "dynafuse/Graph/OpRegistry.h"
#include "dynafuse/Graph/Passes.h"

#include <gtest/gtest.h>

using namespace dynafuse;

namespace {
TensorType tensor(DType dtype, std::vector<SymExpr> sizes) {
  TensorType type;
  type.dtype = dtype;
  type.sizes = std::move(sizes);
  return type;
}
} // namespace

TEST(DType, PromotionLattice) {
  EXPECT_EQ(promoteTypes(DType::I32, DType::F16), DType::F16);
  EXPECT_EQ(promoteTypes(DType::F16, DType::BF16), DType::F32);
  EXPECT_EQ(promoteTypes(DType::Bool, DType::I32), DType::I32);
  EXPECT_EQ(promoteTypes(DType::I64, DType::I32), DType::I64);
  EXPECT_EQ(promoteTypes(DType::F32, DType::F64), DType::F64);
  EXPECT_EQ(computeType(DType::BF16), DType::F32);
  EXPECT_EQ(parseDType("bf16"), DType::BF16);
  EXPECT_FALSE(parseDType("u8").has_value());
}

TEST(Graph, InferenceFollowsTorchPromotion) {
  Graph graph("g");
  Value *ints = graph.addInput("i", tensor(DType::I32, {4}));
  Value *halves = graph.addInput("h", tensor(DType::F16, {3, 1}));
  Value *scalar = graph.addInput("s", tensor(DType::F64, {}));
  // A Python float does not raise an integer tensor above the default float.
  EXPECT_EQ(
      graph.addNode(Op::Mul, {ints, Scalar::ofFloat(2.5)})->result()->type,
      tensor(DType::F32, {4}));
  // A Python int keeps the tensor's dtype.
  EXPECT_EQ(graph.addNode(Op::Add, {ints, Scalar::ofInt(7)})->result()->type,
            tensor(DType::I32, {4}));
  // A 0-dim f64 does not promote an f16 tensor; shapes broadcast.
  EXPECT_EQ(graph.addNode(Op::Add, {halves, scalar})->result()->type,
            tensor(DType::F16, {3, 1}));
  EXPECT_EQ(graph.addNode(Op::Add, {halves, ints})->result()->type,
            tensor(DType::F16, {3, 4}));
  EXPECT_EQ(graph.addNode(Op::Div, {ints, ints})->result()->type.dtype,
            DType::F32);
  EXPECT_EQ(
      graph.addNode(Op::Lt, {ints, Scalar::ofFloat(0.5)})->result()->type.dtype,
      DType::Bool);
}

TEST(Graph, InvalidNodesAreRejected) {
  Graph graph("g");
  Value *a = graph.addInput("a", tensor(DType::F32, {4}));
  Value *b = graph.addInput("b", tensor(DType::F32, {3}));
  Value *flags = graph.addInput("c", tensor(DType::Bool, {4}));
  EXPECT_THROW(graph.addNode(Op::Add, {a, b}), Error);
  EXPECT_THROW(graph.addNode(Op::Neg, {flags}), Error);
  EXPECT_THROW(graph.addNode(Op::Where, {a, a, a}), Error);
  Value *ints = graph.addInput("i", tensor(DType::I32, {4}));
  // A tensor exponent for numbers (an integer to a negative power is 0,
  // 1 or -1), not for two bools (eager has no such pow).
  EXPECT_NO_THROW(graph.addNode(Op::Pow, {a, a}));
  EXPECT_NO_THROW(graph.addNode(Op::Pow, {ints, ints}));
  EXPECT_THROW(graph.addNode(Op::Pow, {flags, flags}), Error);
  EXPECT_THROW(graph.addNode(Op::Pow, {ints, Scalar::ofInt(-1)}), Error);
  EXPECT_THROW(graph.addNode(Op::Exp, {a}, {{"bogus", int64_t(1)}}), Error);
  EXPECT_THROW(graph.addInput("a", tensor(DType::F32, {1})), Error);
}

TEST(Graph, PrintParseRoundTripIsExact) {
  Graph graph("rt");
  Value *x =
      graph.addInput("x", tensor(DType::F32, {SymExpr::symbol("s0"), 4}));
  Node *node =
      graph.addNode(Op::Gelu, {x}, {{"approximate", std::string("tanh")}},
                    Location{"m.py", 7, 0});
  Node *scaled = graph.addNode(Op::Mul, {node->result(), Scalar::ofFloat(0.1)});
  graph.outputs = {scaled->result()};
  std::string text = printGraph(graph);
  std::unique_ptr<Graph> parsed = parseGraph(text);
  EXPECT_EQ(printGraph(*parsed), text);
  verifyGraph(*parsed);
  EXPECT_NE(text.find("loc(\"m.py\":7)"), std::string::npos);
}

TEST(Graph, CloneIsDeepAndIndependent) {
  Graph graph("cl");
  Value *x =
      graph.addInput("x", tensor(DType::F32, {SymExpr::symbol("s0"), 4}));
  Node *node =
      graph.addNode(Op::Gelu, {x}, {{"approximate", std::string("tanh")}},
                    Location{"m.py", 7, 0});
  Node *split = graph.addNode(Op::Split, {node->result()},
                              {{"size", int64_t(2)}, {"dim", int64_t(1)}});
  Node *sum = graph.addNode(Op::Add, {split->results[0], split->results[1]});
  graph.outputs = {sum->result(), split->results[1]};
  std::string text = printGraph(graph);

  std::unique_ptr<Graph> copy = graph.clone();
  EXPECT_EQ(printGraph(*copy), text);
  verifyGraph(*copy);
  ASSERT_EQ(copy->nodes.size(), graph.nodes.size());
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node &cloned = *copy->nodes[i];
    for (const Value *result : cloned.results) {
      EXPECT_EQ(result->producer, &cloned);
      EXPECT_EQ(copy->findValue(result->name), result);
      EXPECT_EQ(graph.findValue(result->name)->producer, graph.nodes[i].get());
    }
    for (const Operand &operand : cloned.operands) {
      if (operand.isValue()) {
        EXPECT_EQ(copy->findValue(operand.value->name), operand.value);
      }
    }
  }
  EXPECT_EQ(copy->nodes[0]->location.line, 7);

  // Changing the clone leaves the original as it was.
  copy->nodes[0]->attributes["approximate"] = std::string("none");
  copy->inputs[0]->name = "renamed";
  copy->outputs.pop_back();
  Node *extra = copy->addNode(Op::Neg, {copy->outputs[0]});
  copy->outputs[0] = extra->result();
  eliminateDeadCode(*copy);
  EXPECT_EQ(printGraph(graph), text);
  EXPECT_NE(printGraph(*copy), text);
  verifyGraph(graph);
}

TEST(Graph, ParseErrorsCarryLineAndColumn) {
  try {
    parseGraph(
        "graph @f(%x: f32[4]) {\n  %0 = exp %q : f32[4]\n  return %0\n}\n",
        "in.graph");
    FAIL() << "expected an error";
  } catch (const Error &error) {
    EXPECT_EQ(error.location().line, 2);
    EXPECT_EQ(error.location().column, 12);
    EXPECT_NE(std::string(error.what()).find("in.graph:2:12"),
              std::string::npos);
  }
}

TEST(GraphPasses, CseThenDce) {
  Graph graph("p");
  Value *x = graph.addInput("x", tensor(DType::F32, {8}));
  Value *e1 = graph.addNode(Op::Exp, {x})->result();
  Value *e2 = graph.addNode(Op::Exp, {x})->result();
  graph.addNode(Op::Tanh, {x});
  graph.outputs = {graph.addNode(Op::Add, {e1, e2})->result()};
  EXPECT_TRUE(eliminateCommonSubexpressions(graph));
  EXPECT_EQ(graph.nodes.size(), 2u);
  EXPECT_EQ(graph.nodes[1]->operands[0].value,
            graph.nodes[1]->operands[1].value);
  EXPECT_FALSE(eliminateDeadCode(graph));
  verifyGraph(graph);
}

TEST(TensorType, StridesInOrderAreDenseInThatOrder) {
  SymExpr s0 = SymExpr::symbol("s0"), s1 = SymExpr::symbol("s1");
  std::vector<SymExpr> sizes = {s0, 4, s1};
  EXPECT_EQ(stridesInOrder(sizes, {0, 1, 2}), contiguousStrides(sizes));
  // Dim 0 innermost (a transposed layout), then dim 2, then dim 1.
  std::vector<SymExpr> strides = stridesInOrder(sizes, {1, 2, 0});
  EXPECT_EQ(strides[0].str(), "1");
  EXPECT_EQ(strides[2].str(), "s0");
  EXPECT_EQ(strides[1].str(), "s0*s1");
  std::vector<SymExpr> nchw = {2, 3, 5, 7};
  EXPECT_EQ(stridesInOrder(nchw, {0, 2, 3, 1}), channelsLastStrides(nchw));
}
