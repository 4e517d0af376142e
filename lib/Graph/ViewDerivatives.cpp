//===- ViewDerivatives.cpp - Rules of views and data movement -------------===//
//
// A view's gradient is the inverse rearrangement of the result's: reshape
// back, the inverse permutation, expand summed back. Taking part of a
// tensor (select, slice, narrow, split) puts the gradient back in its place
// with zeros around it (pad, cat); cat cuts its gradient into the operands'
// parts. Gathers (gather, index_select, embedding) add their gradient back
// at the indices: ATen's scatter-add kernels as externs, or for a gather of
// one element per row (cross entropy's pick) a pointwise select that fuses.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/Derivatives.h"

#include "dynafuse/Graph/OpRegistry.h"

namespace dynafuse {
namespace {

using Grads = std::vector<Value *>;

using ViewGradient =
    std::function<Value *(GradBuilder &, const Node &, Value *g, Value *x)>;

/// A rule for a one-operand, one-result op.
DerivativeInfo single(ViewGradient gradient) {
  DerivativeInfo info;
  info.rule = [gradient](GradBuilder &b, const Node &node, const Grads &grads) {
    Grads result(node.operands.size(), nullptr);
    Value *x = node.operands[0].value;
    if (grads[0] && isDifferentiable(x->type.dtype))
      result[0] = gradient(b, node, grads[0], x);
    return result;
  };
  return info;
}

Value *reshapeTo(GradBuilder &b, Value *g, const TensorType &type) {
  return b.emit(Op::Reshape, {g}, {{"shape", type.sizes}});
}

/// g placed at [start, start + length) of dim within zeros of x's size.
Value *padBack(GradBuilder &b, Value *g, const TensorType &x, int64_t dim,
               const SymExpr &start) {
  SymExpr after = x.sizes[size_t(dim)] - start - g->type.sizes[size_t(dim)];
  if (!start.isConstant() || !after.isConstant())
    throw Error("the gradient of a slice with symbolic bounds is not "
                "supported yet");
  if (start.constant() == 0 && after.constant() == 0)
    return g;
  std::vector<int64_t> amounts(2 * (x.rank() - size_t(dim)), 0);
  size_t pair = 2 * (x.rank() - 1 - size_t(dim));
  amounts[pair] = start.constant();
  amounts[pair + 1] = after.constant();
  return b.emit(Op::Pad, {g}, {{"pad", amounts}, {"value", 0.0}});
}

Value *sliceBack(GradBuilder &b, const Node &node, Value *g, Value *x) {
  SliceBounds bounds = sliceBounds(node);
  if (bounds.step != 1)
    throw Error("the gradient of a slice with a step is not supported yet");
  return padBack(b, g, x->type, bounds.dim, bounds.start);
}

/// split, chunk, unbind: the pieces' gradients (zeros for those without
/// one) concatenated back.
DerivativeInfo piecesRule(bool unbind) {
  DerivativeInfo info;
  info.rule = [unbind](GradBuilder &b, const Node &node, const Grads &grads) {
    Grads result(1, nullptr);
    Value *x = node.operands[0].value;
    if (!isDifferentiable(x->type.dtype))
      return result;
    int64_t dim = normalizeDim(node, node.intAttr("dim", 0), x->type.rank());
    std::vector<Operand> pieces;
    bool any = false;
    for (size_t i = 0; i < node.results.size(); ++i) {
      Value *piece = grads[i] ? grads[i] : b.zerosLike(node.results[i]->type);
      any |= grads[i] != nullptr;
      if (unbind)
        piece = b.emit(Op::Unsqueeze, {piece}, {{"dim", dim}});
      pieces.push_back(piece);
    }
    if (any)
      result[0] = pieces.size() == 1 ? pieces[0].value
                                     : b.emit(Op::Cat, pieces, {{"dim", dim}});
    return result;
  };
  return info;
}

DerivativeInfo catRule() {
  DerivativeInfo info;
  info.rule = [](GradBuilder &b, const Node &node, const Grads &grads) {
    Grads result(node.operands.size(), nullptr);
    if (!grads[0])
      return result;
    size_t rank = node.result()->type.rank();
    int64_t dim = normalizeDim(node, node.intAttr("dim", 0), rank);
    SymExpr offset = 0;
    for (size_t i = 0; i < node.operands.size(); ++i) {
      Value *x = node.operands[i].value;
      if (x->type.rank() != rank)
        continue; // a skipped 1-d empty operand
      SymExpr length = x->type.sizes[size_t(dim)];
      if (isDifferentiable(x->type.dtype))
        result[i] = b.sumTo(b.emit(Op::Slice, {grads[0]},
                                   {{"dim", dim},
                                    {"start", offset},
                                    {"end", offset + length},
                                    {"step", int64_t(1)}}),
                            x->type);
      offset = offset + length;
    }
    return result;
  };
  return info;
}

/// gather(x, dim, index): where index's extent along dim is 1 and its other
/// sizes are x's, the gradient is g where the position along dim equals the
/// index, zero elsewhere (pointwise); otherwise ATen's scatter_add.
Value *gatherGradient(GradBuilder &b, const Node &node, Value *g, Value *x) {
  const TensorType &index = node.operands[1].value->type;
  size_t rank = x->type.rank();
  size_t dim = size_t(normalizeDim(node, node.intAttr("dim", 0), rank));
  bool onePerRow = rank > 0 && index.sizes[dim] == SymExpr(1);
  for (size_t k = 0; k < rank; ++k)
    onePerRow &= k == dim || index.sizes[k] == x->type.sizes[k];
  if (!onePerRow)
    return b.emit(Op::GatherBackward, {g, node.operands[1]},
                  {{"dim", int64_t(dim)}, {"shape", x->type.sizes}});
  return b.placeAlong(g, node.operands[1].value, x->type, dim);
}

/// repeat: the tiles' gradients summed. g viewed as [r0, s0, r1, s1, ...]
/// (r: repeats, s: the operand's sizes, 1 for leading new dims), summed
/// over every r.
Value *repeatGradient(GradBuilder &b, const Node &node, Value *g, Value *x) {
  std::vector<SymExpr> repeats = symListAttr(node, "repeats", {});
  size_t lead = repeats.size() - x->type.rank();
  std::vector<SymExpr> tiled;
  std::vector<int64_t> tileDims;
  for (size_t k = 0; k < repeats.size(); ++k) {
    tileDims.push_back(int64_t(tiled.size()));
    tiled.push_back(repeats[k]);
    tiled.push_back(k < lead ? SymExpr(1) : x->type.sizes[k - lead]);
  }
  Value *tiles = b.emit(Op::Reshape, {g}, {{"shape", tiled}});
  Value *sum =
      b.emit(Op::Sum, {tiles}, {{"dims", tileDims}, {"keepdim", false}});
  return b.emit(Op::Reshape, {sum}, {{"shape", x->type.sizes}});
}

/// embedding(indices, weight): the weight's gradient, rows summed per index
/// (ATen's embedding_dense_backward), none for padding_idx.
DerivativeInfo embeddingRule() {
  DerivativeInfo info;
  info.rule = [](GradBuilder &b, const Node &node, const Grads &grads) {
    Grads result(2, nullptr);
    Value *weight = node.operands[1].value;
    if (!grads[0] || !isDifferentiable(weight->type.dtype))
      return result;
    if (!weight->type.sizes[0].isConstant())
      throw Error("needs a static number of embeddings");
    int64_t rows = weight->type.sizes[0].constant();
    int64_t padding = node.intAttr("padding_idx", -1);
    if (node.attribute("padding_idx") && padding < 0)
      padding += rows;
    result[1] = b.emit(Op::EmbeddingBackward, {grads[0], node.operands[0]},
                       {{"num_weights", rows}, {"padding_idx", padding}});
    return result;
  };
  return info;
}

/// reshape, flatten, squeeze, unsqueeze: g in the operand's shape.
Value *reshapeBack(GradBuilder &b, const Node &, Value *g, Value *x) {
  return reshapeTo(b, g, x->type);
}

Value *contiguousGradient(GradBuilder &, const Node &, Value *g, Value *) {
  return g;
}

/// permute: g permuted by the inverse permutation.
Value *permuteGradient(GradBuilder &b, const Node &node, Value *g, Value *x) {
  std::vector<int64_t> dims = intListAttr(node, "dims", {});
  std::vector<int64_t> inverse(dims.size());
  for (size_t k = 0; k < dims.size(); ++k)
    inverse[size_t(normalizeDim(node, dims[k], x->type.rank()))] = int64_t(k);
  return b.emit(Op::Permute, {g}, {{"dims", inverse}});
}

Value *transposeGradient(GradBuilder &b, const Node &node, Value *g, Value *) {
  // (A B)^T is B^T A^T: the gradient of a transposed weight (linear's)
  // comes out of the GEMM in the weight's layout, not transposed by a copy
  // afterwards.
  const Node *product = g->producer;
  if (product && product->op == Op::Mm && g->type.rank() == 2 &&
      product->operands[0].isValue() && product->operands[1].isValue()) {
    auto swapped = [&](Value *x) {
      return b.emit(Op::Transpose, {x},
                    {{"dim0", int64_t(0)}, {"dim1", int64_t(1)}});
    };
    return b.emit(Op::Mm, {swapped(product->operands[1].value),
                           swapped(product->operands[0].value)});
  }
  return b.emit(
      Op::Transpose, {g},
      {{"dim0", node.intAttr("dim0", 0)}, {"dim1", node.intAttr("dim1", 1)}});
}

Value *indexSelectGradient(GradBuilder &b, const Node &node, Value *g,
                           Value *x) {
  int64_t dim = normalizeDim(node, node.intAttr("dim", 0), x->type.rank());
  return b.emit(Op::IndexSelectBackward, {g, node.operands[1]},
                {{"dim", dim}, {"shape", x->type.sizes}});
}

Value *expandGradient(GradBuilder &b, const Node &, Value *g, Value *x) {
  return b.sumTo(g, x->type);
}

Value *selectGradient(GradBuilder &b, const Node &node, Value *g, Value *x) {
  int64_t dim = normalizeDim(node, node.intAttr("dim", 0), x->type.rank());
  SymExpr index = symAttr(node, "index", 0);
  if (index.isConstant() && index.constant() < 0)
    index = x->type.sizes[size_t(dim)] + index;
  Value *row = b.emit(Op::Unsqueeze, {g}, {{"dim", dim}});
  return padBack(b, row, x->type, dim, index);
}

Value *flipGradient(GradBuilder &b, const Node &node, Value *g, Value *) {
  return b.emit(Op::Flip, {g}, {{"dims", intListAttr(node, "dims", {})}});
}

Value *rollGradient(GradBuilder &b, const Node &node, Value *g, Value *) {
  std::vector<int64_t> shifts = intListAttr(node, "shifts", {});
  for (int64_t &shift : shifts)
    shift = -shift;
  return b.emit(Op::Roll, {g},
                {{"shifts", shifts}, {"dims", intListAttr(node, "dims", {})}});
}

/// tril / triu: the same triangle of g.
Value *triangleGradient(GradBuilder &b, const Node &node, Value *g, Value *) {
  return b.emit(node.op, {g}, {{"diagonal", node.intAttr("diagonal", 0)}});
}

Value *padGradient(GradBuilder &b, const Node &node, Value *g, Value *x) {
  std::vector<int64_t> amounts = intListAttr(node, "pad", {});
  Value *inner = g;
  for (size_t pair = 0; pair + 1 < amounts.size(); pair += 2) {
    if (amounts[pair] < 0 || amounts[pair + 1] < 0)
      throw Error("the gradient of a negative pad is not supported yet");
    int64_t dim = int64_t(x->type.rank()) - 1 - int64_t(pair / 2);
    SymExpr start = amounts[pair];
    inner = b.emit(Op::Slice, {inner},
                   {{"dim", dim},
                    {"start", start},
                    {"end", start + x->type.sizes[size_t(dim)]},
                    {"step", int64_t(1)}});
  }
  return inner;
}

} // namespace

/// The entries: from include/dynafuse/Ops/ViewOps.py, CopyingRemapOps.py
/// and DataMovementOps.py.
void addViewDerivatives(std::map<Op, DerivativeInfo> &table) {
#include "dynafuse/Ops/ViewDerivatives.inc"
}

} // namespace dynafuse
