//===- ViewRulesTest.cpp - The view op table: remaps and strided forms ----===//
#include "dynafuse/Graph/ViewRules.h"

#include "dynafuse/Graph/GraphText.h"
#include "dynafuse/Graph/OpRegistry.h"

#include <gtest/gtest.h>

using namespace dynafuse;

namespace {

TensorType tensor(std::vector<SymExpr> sizes) {
  TensorType type;
  type.dtype = DType::F32;
  type.sizes = std::move(sizes);
  return type;
}

/// The contiguous strided form of a 4x6 buffer.
StridedView contiguous4x6() {
  return StridedView{{SymExpr(4), SymExpr(6)}, {SymExpr(6), SymExpr(1)},
                     SymExpr(0)};
}

std::vector<SymExpr> exprs(std::vector<int64_t> values) {
  return std::vector<SymExpr>(values.begin(), values.end());
}

TEST(ViewRules, EveryViewOpHasItsRules) {
  size_t remaps = 0;
  for (const std::string &name : registeredOpNames()) {
    const OpInfo *info = lookupOp(*findOp(name));
    if (info->kind != OpKind::View) {
      EXPECT_FALSE(info->view) << name;
      continue;
    }
    ASSERT_TRUE(info->view) << name;
    if (info->view->form != ViewForm::Remap) {
      EXPECT_FALSE(info->view->remap) << name;
      EXPECT_FALSE(info->view->strided) << name;
      continue;
    }
    EXPECT_TRUE(info->view->remap) << name;
    ++remaps;
  }
  // reshape, permute, transpose, expand, squeeze, unsqueeze, flatten,
  // select, slice, narrow, detach, contiguous, flip, roll, repeat, split,
  // chunk, unbind.
  EXPECT_EQ(remaps, 18u);
  EXPECT_EQ(lookupOp(Op::Embedding)->indexedOperand, 1);
  EXPECT_EQ(lookupOp(Op::Gather)->indexedOperand, 0);
  EXPECT_EQ(lookupOp(Op::Cat)->indexedOperand, -1);
}

TEST(ViewRules, NodesCarryTheirOpInfo) {
  Graph graph("g");
  Value *x = graph.addInput("x", tensor({4, 6}));
  Node *node = graph.addNode(Op::Transpose, {x});
  EXPECT_EQ(node->info, lookupOp(Op::Transpose));
  std::unique_ptr<Graph> parsed = parseGraph(printGraph(graph), "g");
  EXPECT_EQ(parsed->nodes[0]->info, lookupOp(Op::Transpose));
}

TEST(ViewRules, StridedFormsOfViews) {
  Graph graph("g");
  Value *x = graph.addInput("x", tensor({4, 6}));
  Node *transpose = graph.addNode(Op::Transpose, {x});
  std::optional<StridedView> t = stridedViewOf(*transpose, 0, contiguous4x6());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->sizes, exprs({6, 4}));
  EXPECT_EQ(t->strides, exprs({1, 6}));

  Node *slice = graph.addNode(
      Op::Slice, {x},
      {{"dim", int64_t(1)}, {"start", int64_t(1)}, {"step", int64_t(2)}});
  std::optional<StridedView> s = stridedViewOf(*slice, 0, contiguous4x6());
  ASSERT_TRUE(s);
  EXPECT_EQ(s->sizes, exprs({4, 3}));
  EXPECT_EQ(s->strides, exprs({6, 2}));
  EXPECT_EQ(s->offset, SymExpr(1));

  Node *split = graph.addNode(Op::Split, {x},
                              {{"dim", int64_t(0)}, {"size", int64_t(3)}});
  std::optional<StridedView> second = stridedViewOf(*split, 1, contiguous4x6());
  ASSERT_TRUE(second);
  EXPECT_EQ(second->sizes, exprs({1, 6}));
  EXPECT_EQ(second->offset, SymExpr(18));

  // A reshape of transposed data needs a copy; flip never is a view.
  Node *reshape = graph.addNode(Op::Reshape, {transpose->result()},
                                {{"shape", std::vector<int64_t>{24}}});
  EXPECT_FALSE(stridedViewOf(*reshape, 0, *t));
  Node *flip =
      graph.addNode(Op::Flip, {x}, {{"dims", std::vector<int64_t>{0}}});
  EXPECT_FALSE(stridedViewOf(*flip, 0, contiguous4x6()));
}

TEST(ViewRules, IndexRemaps) {
  Graph graph("g");
  Value *x = graph.addInput("x", tensor({4, 6}));
  SymExpr i = SymExpr::symbol("i"), j = SymExpr::symbol("j");
  Node *permute =
      graph.addNode(Op::Permute, {x}, {{"dims", std::vector<int64_t>{1, 0}}});
  EXPECT_EQ(remapViewIndex(*permute, 0, {j, i}),
            (std::vector<SymExpr>{i, j}));
  Node *select = graph.addNode(Op::Select, {x},
                               {{"dim", int64_t(0)}, {"index", int64_t(-1)}});
  EXPECT_EQ(remapViewIndex(*select, 0, {j}),
            (std::vector<SymExpr>{SymExpr(3), j}));
  Node *unbind = graph.addNode(Op::Unbind, {x}, {{"dim", int64_t(1)}});
  EXPECT_EQ(remapViewIndex(*unbind, 2, {i}),
            (std::vector<SymExpr>{i, SymExpr(2)}));
}

TEST(ViewRules, ZeroSizesNeedNoModulo) {
  // repeat and roll take the index modulo the input's sizes; along a zero
  // size there is no element to read, and the index stays as it is.
  Graph graph("g");
  Value *x = graph.addInput("x", tensor({0, 3}));
  SymExpr i = SymExpr::symbol("i"), j = SymExpr::symbol("j");
  Node *repeat = graph.addNode(Op::Repeat, {x},
                               {{"repeats", std::vector<int64_t>{2, 2, 2}}});
  EXPECT_EQ(repeat->result()->type.sizes, exprs({2, 0, 6}));
  EXPECT_EQ(remapViewIndex(*repeat, 0, {SymExpr(0), i, j}),
            (std::vector<SymExpr>{i, mod(j, SymExpr(3))}));
  Node *roll = graph.addNode(Op::Roll, {x},
                             {{"shifts", std::vector<int64_t>{1, 2}},
                              {"dims", std::vector<int64_t>{0, 1}}});
  EXPECT_EQ(remapViewIndex(*roll, 0, {i, j}),
            (std::vector<SymExpr>{i, mod(j + 1, SymExpr(3))}));
  Node *flatRoll = graph.addNode(Op::Roll, {x}, {{"shifts", int64_t(1)}});
  EXPECT_EQ(remapViewIndex(*flatRoll, 0, {i, j}),
            (std::vector<SymExpr>{i, j}));
}

TEST(ViewRules, SqueezeDropsListedSizeOneDims) {
  Graph graph("g");
  Value *x = graph.addInput("x", tensor({1, 3, 1}));
  auto squeezed = [&](std::map<std::string, Attribute> attributes) {
    return graph.addNode(Op::Squeeze, {x}, std::move(attributes))
        ->result()
        ->type.sizes;
  };
  EXPECT_EQ(squeezed({}), exprs({3}));
  EXPECT_EQ(squeezed({{"dims", int64_t(-1)}}), exprs({1, 3}));
  EXPECT_EQ(squeezed({{"dims", std::vector<int64_t>{0, 1}}}), exprs({3, 1}));
  // squeeze(x, ()): no dims listed, none dropped.
  EXPECT_EQ(squeezed({{"dims", std::vector<int64_t>{}}}), exprs({1, 3, 1}));
}

TEST(ViewRules, PiecesAreSequences) {
  for (Op name : {Op::Split, Op::Chunk, Op::Unbind})
    EXPECT_TRUE(lookupOp(name)->resultsAreSequence) << opName(name);
  for (Op name : {Op::Select, Op::MaxDim, Op::Reshape})
    EXPECT_FALSE(lookupOp(name)->resultsAreSequence) << opName(name);
}

} // namespace

TEST(ViewRules, ReshapesOfStridedDataWithSymbolicSizes) {
  SymExpr s = SymExpr::symbol("s0");
  // A transposed [s, 4] buffer: strides [1, s].
  StridedView transposed{{s, SymExpr(4)}, {SymExpr(1), s}, SymExpr(0)};
  // Splitting (and adding size-1 dims) is a view of any layout.
  std::optional<StridedView> split =
      reshapedView({SymExpr(1), s, SymExpr(2), SymExpr(2)}, transposed);
  ASSERT_TRUE(split);
  EXPECT_EQ(split->strides[1], SymExpr(1));
  EXPECT_EQ(split->strides[2], s * SymExpr(2));
  EXPECT_EQ(split->strides[3], s);
  // Merging dims whose strides are not row-major is not.
  EXPECT_FALSE(reshapedView({s * SymExpr(4)}, transposed));
  // Nor is a split whose sizes match no run of the old dims.
  EXPECT_FALSE(reshapedView({SymExpr(2), s * SymExpr(2)}, transposed));
  // Constant sizes keep ATen's rule: every other column of a [4, 13]
  // buffer splits its rows, but its rows and columns do not merge.
  StridedView everyOther{exprs({4, 6}), exprs({13, 2}), SymExpr(0)};
  std::optional<StridedView> rows = reshapedView(exprs({2, 2, 6}), everyOther);
  ASSERT_TRUE(rows);
  EXPECT_EQ(rows->strides, exprs({26, 13, 2}));
  EXPECT_FALSE(reshapedView(exprs({24}), everyOther));
  // Every other column of a [4, 12] buffer does (row stride 12 = 6 * 2).
  StridedView merging{exprs({4, 6}), exprs({12, 2}), SymExpr(0)};
  std::optional<StridedView> flat = reshapedView(exprs({24}), merging);
  ASSERT_TRUE(flat);
  EXPECT_EQ(flat->strides, exprs({2}));
}
