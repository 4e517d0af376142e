//===- ExternDerivatives.cpp - Rules of GEMM externs ----------------------===//
//
// The gradients of matrix products are matrix products again (ATen's GEMMs
// on transposed views, no copies): for C = A B, dA = dC B^T and
// dB = A^T dC, with batch dims broadcast back by summing. Convolutions and
// pools differentiate through extern ops that run ATen's own backward
// kernels (conv_backward, one node for every gradient it computes;
// *_pool2d_backward, reading the forward's input). A torch callable kept
// in the graph differentiates through torch's autograd at run time.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/Derivatives.h"

#include "dynafuse/Graph/OpRegistry.h"

namespace dynafuse {
namespace {

using Grads = std::vector<Value *>;

/// The last two dims of x swapped.
Value *transposed(GradBuilder &b, Value *x) {
  int64_t rank = int64_t(x->type.rank());
  return b.emit(Op::Transpose, {x}, {{"dim0", rank - 2}, {"dim1", rank - 1}});
}

/// x with every dim but the last merged: [prod(leading), last].
Value *asMatrix(GradBuilder &b, Value *x) {
  if (x->type.rank() == 2)
    return x;
  SymExpr rows = 1;
  for (size_t k = 0; k + 1 < x->type.rank(); ++k)
    rows = rows * x->type.sizes[k];
  std::vector<SymExpr> shape = {rows, x->type.sizes.back()};
  return b.emit(Op::Reshape, {x}, {{"shape", shape}});
}

bool wants(const Node &node, size_t i) {
  return node.operands[i].isValue() &&
         isDifferentiable(node.operands[i].value->type.dtype);
}

/// dA and dB of A @ B (matmul's broadcasting rules, ranks >= 2).
std::pair<Value *, Value *> productGradients(GradBuilder &b, Value *g,
                                            Value *a, Value *c, bool wantA,
                                            bool wantB) {
  size_t ra = a->type.rank(), rb = c->type.rank();
  Value *ga = nullptr, *gb = nullptr;
  auto unsqueeze = [&](Value *x, int64_t dim) {
    return b.emit(Op::Unsqueeze, {x}, {{"dim", dim}});
  };
  auto squeezeLast = [&](Value *x) {
    int64_t last = int64_t(x->type.rank()) - 1;
    return b.emit(Op::Squeeze, {x}, {{"dims", std::vector<int64_t>{last}}});
  };
  if (ra == 1 && rb == 1) { // a dot product
    if (wantA)
      ga = b.emit(Op::Mul, {g, c});
    if (wantB)
      gb = b.emit(Op::Mul, {g, a});
    return {ga, gb};
  }
  if (ra == 1) { // a [K] @ b [..., K, N] = [..., N]
    Value *column = unsqueeze(g, int64_t(g->type.rank())); // [..., N, 1]
    if (wantA)
      ga = b.sumTo(squeezeLast(b.emit(Op::Matmul, {c, column})), a->type);
    if (wantB)
      gb = b.sumTo(b.emit(Op::Mul, {unsqueeze(a, 1), // [K, 1] * [..., 1, N]
                                    unsqueeze(g, int64_t(g->type.rank()) - 1)}),
                   c->type);
    return {ga, gb};
  }
  if (rb == 1) { // a [..., M, K] @ b [K] = [..., M]
    Value *column = unsqueeze(g, int64_t(g->type.rank())); // [..., M, 1]
    if (wantA)
      ga = b.sumTo(b.emit(Op::Mul, {column, c}), a->type);
    if (wantB) {
      Value *rows = asMatrix(b, a);                       // [M', K]
      Value *flat =
          b.emit(Op::Reshape, {g},
                 {{"shape", std::vector<SymExpr>{rows->type.sizes[0]}}});
      gb = b.emit(Op::Matmul, {transposed(b, rows), flat}); // [K]
    }
    return {ga, gb};
  }
  if (wantA)
    ga = b.sumTo(b.emit(Op::Matmul, {g, transposed(b, c)}), a->type);
  if (wantB) {
    if (rb == 2) // A's batch dims fold into the GEMM's rows
      gb = b.sumTo(
          b.emit(Op::Mm, {transposed(b, asMatrix(b, a)), asMatrix(b, g)}),
          c->type);
    else
      gb = b.sumTo(b.emit(Op::Matmul, {transposed(b, a), g}), c->type);
  }
  return {ga, gb};
}

DerivativeInfo productRule() {
  DerivativeInfo info;
  info.rule = [](GradBuilder &b, const Node &node, const Grads &grads) {
    Grads result(node.operands.size(), nullptr);
    if (!grads[0])
      return result;
    // addmm / baddbmm: beta * bias + alpha * (m1 @ m2).
    size_t first = node.operands.size() == 3 ? 1 : 0;
    double beta = floatAttr(node, "beta", 1.0);
    double alpha = floatAttr(node, "alpha", 1.0);
    Value *g = grads[0];
    if (first == 1 && wants(node, 0))
      result[0] =
          b.sumTo(beta == 1 ? g : b.emit(Op::Mul, {g, Scalar::ofFloat(beta)}),
                  node.operands[0].value->type);
    Value *scaled =
        alpha == 1 ? g : b.emit(Op::Mul, {g, Scalar::ofFloat(alpha)});
    auto [ga, gb] = productGradients(b, scaled, node.operands[first].value,
                                     node.operands[first + 1].value,
                                     wants(node, first), wants(node, first + 1));
    result[first] = ga;
    result[first + 1] = gb;
    return result;
  };
  return info;
}

/// conv1d/conv2d(x, w[, b]): one conv_backward node computes the
/// gradients wanted (ATen's convolution_backward).
DerivativeInfo convolutionRule() {
  DerivativeInfo info;
  info.rule = [](GradBuilder &b, const Node &node, const Grads &grads) {
    Grads result(node.operands.size(), nullptr);
    if (!grads[0])
      return result;
    auto wanted = [&](size_t i) {
      return i < node.operands.size() && wants(node, i) &&
             b.wantsGradient(node.operands[i].value);
    };
    std::vector<int64_t> mask = {wanted(0), wanted(1), wanted(2)};
    if (!mask[0] && !mask[1] && !mask[2])
      return result;
    std::map<std::string, Attribute> attributes = {{"output_mask", mask}};
    for (const char *name : {"stride", "padding", "dilation", "groups"})
      if (const Attribute *value = node.attribute(name))
        attributes[name] = *value;
    Node *backward = b.graph.addNode(
        Op::ConvBackward,
        {grads[0], node.operands[0].value, node.operands[1].value},
        std::move(attributes), node.location);
    size_t next = 0;
    for (size_t i = 0; i < 3; ++i)
      if (mask[i])
        result[i] = backward->results[next++];
    return result;
  };
  return info;
}

/// A pool's input gradient: its ATen backward kernel on (g, x), with the
/// forward's attributes; max_pool2d_with_indices (what capture emits for a
/// pool whose input requires grad) also passes its saved indices.
DerivativeInfo poolRule(Op backwardOp, bool savedIndices = false) {
  DerivativeInfo info;
  info.rule = [backwardOp, savedIndices](GradBuilder &b, const Node &node,
                                         const Grads &grads) {
    Grads result(1, nullptr);
    if (!grads[0] || !wants(node, 0))
      return result;
    std::vector<Operand> operands = {grads[0], node.operands[0].value};
    if (savedIndices)
      operands.push_back(node.results[1]);
    result[0] = b.emit(backwardOp, operands, node.attributes);
    return result;
  };
  return info;
}

/// sdpa_flash: ATen's flash backward from the saved output and logsumexp
/// (the mask gets no gradient: capture writes attention whose mask requires
/// grad in graph ops instead).
DerivativeInfo flashAttentionRule() {
  DerivativeInfo info;
  info.rule = [](GradBuilder &b, const Node &node, const Grads &grads) {
    Grads result(node.operands.size(), nullptr);
    if (grads[1])
      throw Error("the logsumexp of attention gets no gradient");
    if (!grads[0])
      return result;
    std::vector<Operand> operands = {grads[0], node.operands[0],
                                     node.operands[1], node.operands[2],
                                     node.results[0], node.results[1]};
    if (node.operands.size() > 3)
      operands.push_back(node.operands[3]);
    Node *backward = b.graph.addNode(Op::SdpaFlashBackward, operands,
                                     node.attributes, node.location);
    for (size_t i = 0; i < 3; ++i)
      result[i] = backward->results[i];
    return result;
  };
  return info;
}

/// call_torch: a call_torch of the same callable that differentiates it
/// with torch's autograd at run time (recomputing it on the saved operands:
/// capture admits only callables without randomness whose gradient runs
/// on meta tensors). Operands: the forward's, then the gradients of the
/// results that got one; results: the gradients of the floating operands
/// wanted, in their dense layout.
DerivativeInfo torchCallRule() {
  DerivativeInfo info;
  info.rule = [](GradBuilder &b, const Node &node, const Grads &grads) {
    Grads result(node.operands.size(), nullptr);
    std::vector<Operand> operands = node.operands;
    std::vector<int64_t> gradOutputs, gradInputs;
    for (size_t j = 0; j < grads.size(); ++j)
      if (grads[j]) {
        gradOutputs.push_back(int64_t(j));
        operands.push_back(grads[j]);
      }
    std::string types;
    for (size_t i = 0; i < node.operands.size(); ++i)
      if (wants(node, i) && b.wantsGradient(node.operands[i].value)) {
        gradInputs.push_back(int64_t(i));
        TensorType type = node.operands[i].value->type;
        type.strides.clear();
        types += (types.empty() ? "" : ", ") + type.str();
      }
    if (gradOutputs.empty() || gradInputs.empty())
      return result;
    std::map<std::string, Attribute> attributes = {
        {"call", *node.attribute("call")},
        {"signature", node.stringAttr("signature", "")},
        {"target", "grad of " + node.stringAttr("target", "")},
        {"results", types},
        {"grad_inputs", gradInputs},
        {"grad_outputs", gradOutputs}};
    Node *backward = b.graph.addNode(Op::CallTorch, std::move(operands),
                                     std::move(attributes), node.location);
    for (size_t k = 0; k < gradInputs.size(); ++k)
      result[size_t(gradInputs[k])] = backward->results[k];
    return result;
  };
  return info;
}

} // namespace

/// The entries: from include/dynafuse/Ops/ExternOps.py.
void addExternDerivatives(std::map<Op, DerivativeInfo> &table) {
#include "dynafuse/Ops/ExternDerivatives.inc"
}

} // namespace dynafuse
