//===- MatrixVectorProducts.cpp - One-row products as fused reductions ----===//
//
// The graph pass `matrix-vector-products` (Passes.h). A decode step's
// linear layers multiply one row by a weight: a matrix-vector product that
// reads every weight element once. ATen's sgemv reads a small weight
// (cycled through the last-level cache, as a decoder's are step after
// step) at 7-9 GB/s on an AVX2 EPYC; the same product as a sum over K of
// the row times the weight's rows, one fused reduction kernel with the
// output dim parallel, reads it at 10-19 GB/s (us, ATen / reduction:
// 256 x 768 101 / 58, 768 x 3072 700 / 484, 8000 x 256 884 / 432), and
// its prologue (a norm's scale, a cast) fuses into it. The pass rewrites a
// float matmul (or addmm with alpha and beta 1, HF's Conv1D) whose left
// operand has one row (every dim but the last is 1) and whose right
// operand is a 2-D matrix, unless the torch runtime marked it
// weight_prepacked (a weight large enough that oneDNN's packed product
// reads it at bandwidth): a @ B becomes sum(a.unsqueeze(-2) *
// B.transpose(0, 1), -1) (plus the bias), equal up to the order of the
// additions. A matrix laid out [K, N] is read row by row: the sum over
// its outer dim becomes a column reduction (column-reductions). CPU
// products only.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/Passes.h"

#include "dynafuse/Graph/NodeRewrites.h"
#include "dynafuse/Graph/OpRegistry.h"

namespace dynafuse {
namespace {

/// The operand index of the row (the matrix follows it): matmul(a, B), or
/// addmm(bias, a, B) with alpha and beta 1 (HF's Conv1D); -1 otherwise.
int rowOperand(const Node &node) {
  if (node.op == Op::Matmul && node.operands.size() == 2)
    return 0;
  if (node.op == Op::Addmm && node.operands.size() == 3 &&
      floatAttr(node, "alpha", 1) == 1 && floatAttr(node, "beta", 1) == 1)
    return 1;
  return -1;
}

bool isMatrixVectorProduct(const Node &node) {
  int at = rowOperand(node);
  if (at < 0 || node.results.size() != 1 ||
      boolAttr(node, "weight_prepacked", false))
    return false;
  for (const Operand &operand : node.operands)
    if (!operand.isValue())
      return false;
  const TensorType &result = node.results[0]->type;
  // On a GPU cuBLAS's gemv is at bandwidth already.
  if ((result.dtype != DType::F32 && result.dtype != DType::F64) ||
      result.device != "cpu")
    return false;
  const TensorType &row = node.operands[size_t(at)].value->type;
  const TensorType &matrix = node.operands[size_t(at) + 1].value->type;
  if (row.dtype != result.dtype || matrix.dtype != result.dtype ||
      matrix.rank() != 2 || row.rank() == 0)
    return false;
  for (size_t k = 0; k + 1 < row.rank(); ++k)
    if (row.sizes[k] != SymExpr(1))
      return false;
  return true;
}

} // namespace

bool matrixVectorProductsAsReductions(Graph &graph) {
  return rewriteNodes(
      graph, isMatrixVectorProduct, [](Node &node, NodeRewriter &rewriter) {
        size_t at = size_t(rowOperand(node));
        Value *row = node.operands[at].value;
        int64_t rank = int64_t(row->type.rank());
        Value *spread =
            rewriter.add(Op::Unsqueeze, {Operand(row)},
                         {{"dim", rank == 1 ? int64_t(0) : rank - 1}});
        Value *rows =
            rewriter.add(Op::Transpose, {node.operands[at + 1]},
                         {{"dim0", int64_t(0)}, {"dim1", int64_t(1)}});
        Value *terms =
            rewriter.add(Op::Mul, {Operand(spread), Operand(rows)}, {});
        Value *sum = rewriter.add(
            Op::Sum, {Operand(terms)},
            {{"dims", std::vector<int64_t>{-1}}, {"keepdim", false}});
        if (node.op == Op::Addmm)
          sum = rewriter.add(Op::Add, {Operand(sum), node.operands[0]}, {});
        if (sum->type != node.results[0]->type)
          fail("matrix-vector-products: " + sum->type.str() + " for the " +
                   node.results[0]->type.str() + " product",
               node.location);
        return sum;
      });
}

} // namespace dynafuse
