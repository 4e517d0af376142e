//===- ExternOps.cpp - Ops run by ATen, not generated ---------------------===//
//
// Matrix multiplies, convolutions and pooling have tuned libraries: lowering
// turns them into extern steps the runtime hands to ATen, with the pointwise
// work around them fused into generated kernels. Their shape rules live
// here; every extern op computes in its (floating) input dtype. call_torch
// runs any torch callable the compiler cannot lower, with the result types
// capture declared.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/ConvolutionEpilogues.h"
#include "dynafuse/Graph/OpRegistry.h"
#include "dynafuse/Support/TextCursor.h"

namespace dynafuse {
namespace {

void requireFloat(const Node &node) {
  DType first = operandType(node, 0).dtype;
  if (!isFloating(first))
    opError(node,
            std::string("needs floating inputs, got ") + dtypeName(first));
  for (size_t i = 1; i < node.operands.size(); ++i)
    if (operandType(node, i).dtype != first)
      opError(node, "inputs must have the same dtype");
}

void requireRank(const Node &node, size_t i, size_t rank) {
  if (operandType(node, i).rank() != rank)
    opError(node, "operand " + std::to_string(i) + " must have " +
                      std::to_string(rank) + " dims");
}

void requireEqual(const Node &node, const SymExpr &a, const SymExpr &b,
                  const std::string &what) {
  if (a != b)
    opError(node, what + " do not match (" + a.str() + " vs " + b.str() + ")");
}

std::vector<TensorType> inferMm(const Node &node) {
  requireFloat(node);
  requireRank(node, 0, 2);
  requireRank(node, 1, 2);
  const TensorType &a = operandType(node, 0), &b = operandType(node, 1);
  requireEqual(node, a.sizes[1], b.sizes[0], "inner dimensions");
  return {likeFirstOperand(node, {a.sizes[0], b.sizes[1]})};
}

std::vector<TensorType> inferBmm(const Node &node) {
  requireFloat(node);
  requireRank(node, 0, 3);
  requireRank(node, 1, 3);
  const TensorType &a = operandType(node, 0), &b = operandType(node, 1);
  requireEqual(node, a.sizes[0], b.sizes[0], "batch sizes");
  requireEqual(node, a.sizes[2], b.sizes[1], "inner dimensions");
  return {likeFirstOperand(node, {a.sizes[0], a.sizes[1], b.sizes[2]})};
}

std::vector<TensorType> inferMatmul(const Node &node) {
  requireFloat(node);
  std::vector<SymExpr> a = operandType(node, 0).sizes;
  std::vector<SymExpr> b = operandType(node, 1).sizes;
  if (a.empty() || b.empty())
    opError(node, "both operands need at least one dimension");
  bool vectorA = a.size() == 1, vectorB = b.size() == 1;
  if (vectorA)
    a.insert(a.begin(), SymExpr(1));
  if (vectorB)
    b.push_back(SymExpr(1));
  requireEqual(node, a.back(), b[b.size() - 2], "inner dimensions");
  std::vector<SymExpr> batchA(a.begin(), a.end() - 2);
  std::vector<SymExpr> batchB(b.begin(), b.end() - 2);
  std::vector<SymExpr> sizes = broadcastShapes(batchA, batchB, node.location);
  if (!vectorA)
    sizes.push_back(a[a.size() - 2]);
  if (!vectorB)
    sizes.push_back(b.back());
  return {likeFirstOperand(node, sizes)};
}

/// addmm / baddbmm: bias + product (mm / bmm); the bias broadcasts to the
/// product.
std::vector<TensorType> inferBiasedProduct(const Node &node, Op productOp,
                                           const ShapeRule &inferProduct) {
  requireFloat(node);
  Node product;
  product.op = productOp;
  product.operands = {node.operands[1], node.operands[2]};
  product.location = node.location;
  TensorType type = inferProduct(product)[0];
  std::vector<SymExpr> broadcast =
      broadcastShapes(type.sizes, operandType(node, 0).sizes, node.location);
  if (broadcast != type.sizes)
    opError(node, "the bias does not broadcast to the product");
  return {type};
}

int64_t staticSize(const Node &node, const SymExpr &size) {
  if (!size.isConstant())
    opError(node, "needs static spatial sizes");
  return size.constant();
}

int64_t windowOutput(const Node &node, int64_t size, int64_t kernel,
                     int64_t stride, int64_t padding, int64_t dilation,
                     bool ceilMode) {
  std::optional<int64_t> out =
      windowCount(size, kernel, stride, padding, dilation, ceilMode);
  if (!out)
    opError(node, "the window does not fit the input");
  return *out;
}

/// ATen's convolutions and pools keep a channels-last input's layout (the
/// ops registered with keepsChannelsLast).
TensorType keepChannelsLast(const Node &node, TensorType type) {
  if (isChannelsLast(operandType(node, 0)) && type.rank() == 4)
    type.strides = channelsLastStrides(type.sizes);
  return type;
}

/// conv1d (spatial = 1) and conv2d (spatial = 2); conv2d_bn's first
/// `convOperands` operands, then per-channel tensors up to `channelsEnd`.
std::vector<TensorType> inferConv(const Node &node, size_t spatial,
                                  size_t convOperands, size_t channelsEnd) {
  requireFloat(node);
  requireRank(node, 0, spatial + 2);
  requireRank(node, 1, spatial + 2);
  const TensorType &x = operandType(node, 0), &w = operandType(node, 1);
  int64_t groups = node.intAttr("groups", 1);
  boolAttr(node, "weight_prepacked", false); // checks its type
  std::vector<int64_t> stride = perDim(node, "stride", spatial, 1);
  std::vector<int64_t> padding = perDim(node, "padding", spatial, 0);
  std::vector<int64_t> dilation = perDim(node, "dilation", spatial, 1);
  if (groups <= 0 ||
      staticSize(node, x.sizes[1]) != staticSize(node, w.sizes[1]) * groups)
    opError(node, "input channels do not match weight channels * groups");
  std::vector<SymExpr> sizes = {x.sizes[0], w.sizes[0]};
  for (size_t d = 0; d < spatial; ++d)
    sizes.push_back(
        SymExpr(windowOutput(node, staticSize(node, x.sizes[2 + d]),
                             staticSize(node, w.sizes[2 + d]), stride[d],
                             padding[d], dilation[d], false)));
  for (size_t i = 2; i < channelsEnd; ++i) {
    requireRank(node, i, 1);
    requireEqual(node, operandType(node, i).sizes[0], w.sizes[0],
                 i < convOperands ? "bias and output channels"
                                  : "batch norm tensor and output channels");
  }
  return {keepChannelsLast(node, likeFirstOperand(node, sizes))};
}

std::vector<TensorType> inferConvolution(const Node &node, size_t spatial) {
  if (node.operands.size() < 2 || node.operands.size() > 3)
    opError(node, "takes input, weight and an optional bias");
  return inferConv(node, spatial, node.operands.size(), node.operands.size());
}

/// conv2d_bn (ConvolutionEpilogues.h): input, weight, [bias], running mean,
/// running variance, batch norm weight and bias, [residual]; has_bias says
/// whether the convolution's bias is there, residual whether a tensor of
/// the result's type is added before the activation.
std::vector<TensorType> inferConvBatchNorm(const Node &node) {
  size_t convOperands = boolAttr(node, "has_bias", false) ? 3 : 2;
  bool residual = boolAttr(node, "residual", false);
  if (node.operands.size() != convOperands + 4 + (residual ? 1 : 0))
    opError(node, "takes input, weight, a bias if has_bias, the batch "
                  "norm's mean, variance, weight and bias, and a residual "
                  "if residual");
  std::string activation = node.stringAttr("activation", "none");
  std::optional<Op> activationOp = findOp(activation);
  if (activation != "none" &&
      !(activationOp && isPostOpActivation(*activationOp)))
    opError(node, "unknown activation '" + activation + "'");
  if (residual && activation != "none" && activationOp != Op::Relu)
    opError(node, "a residual takes relu or no activation after it, not " +
                      activation);
  floatAttr(node, "eps", 1e-5); // checks its type
  std::vector<TensorType> result =
      inferConv(node, 2, convOperands, convOperands + 4);
  if (residual) {
    const TensorType &other = operandType(node, node.operands.size() - 1);
    if (other.sizes != result[0].sizes || other.dtype != result[0].dtype)
      opError(node, "needs a residual of the result's sizes and dtype");
  }
  return result;
}

std::vector<TensorType> inferPool(const Node &node) {
  requireFloat(node);
  const TensorType &x = operandType(node, 0);
  if (x.rank() != 3 && x.rank() != 4)
    opError(node, "needs a 3-D or 4-D input");
  std::vector<int64_t> kernel = perDim(node, "kernel_size", 2, 1);
  std::vector<int64_t> stride = intListAttr(node, "stride", {});
  if (stride.empty())
    stride = kernel;
  if (stride.size() == 1)
    stride.assign(2, stride[0]);
  std::vector<int64_t> padding = perDim(node, "padding", 2, 0);
  std::vector<int64_t> dilation = perDim(node, "dilation", 2, 1);
  bool ceilMode = boolAttr(node, "ceil_mode", false);
  std::vector<SymExpr> sizes(x.sizes.begin(), x.sizes.end() - 2);
  for (size_t d = 0; d < 2; ++d) {
    if (padding[d] * 2 > kernel[d])
      opError(node, "padding must be at most half the kernel size");
    sizes.push_back(SymExpr(
        windowOutput(node, staticSize(node, x.sizes[x.rank() - 2 + d]),
                     kernel[d], stride[d], padding[d], dilation[d], ceilMode)));
  }
  return {keepChannelsLast(node, likeFirstOperand(node, sizes))};
}

std::vector<TensorType> inferAdaptivePool(const Node &node) {
  requireFloat(node);
  const TensorType &x = operandType(node, 0);
  if (x.rank() != 3 && x.rank() != 4)
    opError(node, "needs a 3-D or 4-D input");
  std::vector<int64_t> output = perDim(node, "output_size", 2, 1);
  std::vector<SymExpr> sizes(x.sizes.begin(), x.sizes.end() - 2);
  for (int64_t size : output)
    sizes.push_back(SymExpr(size));
  return {keepChannelsLast(node, likeFirstOperand(node, sizes))};
}

/// adaptive_avg_pool2d(x, 7) means output_size (7, 7), which is what ATen
/// takes.
void pairOutputSize(std::map<std::string, Attribute> &attributes) {
  auto found = attributes.find("output_size");
  if (found == attributes.end())
    return;
  if (auto *size = std::get_if<int64_t>(&found->second)) {
    found->second = std::vector<int64_t>{*size, *size};
    return;
  }
  auto *sizes = std::get_if<std::vector<int64_t>>(&found->second);
  if (sizes && sizes->size() == 1)
    found->second = std::vector<int64_t>{sizes->front(), sizes->front()};
}

/// adaptive_avg_pool2d to a 1x1 output is the mean over the two spatial
/// dims: the loop IR computes it fused with its producer (the global pool
/// of every classifier, the squeeze-excitation blocks of mobilenet_v3 and
/// efficientnet), where ATen's pool would read a buffer it must first be
/// given. Only for results without explicit strides (a channels-last
/// typed result keeps ATen's layout) and constant non-empty spatial dims
/// (ATen raises on an empty one, where a mean would give NaN).
bool poolsToOnePixel(const Node &node) {
  const TensorType &x = operandType(node, 0);
  if (intListAttr(node, "output_size", {}) != std::vector<int64_t>{1, 1} ||
      node.results.empty() || !node.results[0]->type.strides.empty() ||
      x.rank() < 3)
    return false;
  for (size_t k = x.rank() - 2; k < x.rank(); ++k)
    if (!x.sizes[k].isConstant() || x.sizes[k].constant() <= 0)
      return false;
  return true;
}

std::vector<Value *> meanOfPixels(Graph &graph, const Node &node) {
  int64_t rank = int64_t(operandType(node, 0).rank());
  Node *mean = graph.addNode(
      Op::Mean, {node.operands[0]},
      {{"dims", std::vector<int64_t>{rank - 2, rank - 1}}, {"keepdim", true}},
      node.location);
  mean->recompute = node.recompute;
  return mean->results;
}

void requireIntegerIndex(const Node &node, size_t i) {
  DType dtype = operandType(node, i).dtype;
  if (isFloating(dtype) || dtype == DType::Bool)
    opError(node, "operand " + std::to_string(i) +
                      " (the indices) must be an integer tensor");
}

/// conv_backward(grad, input, weight): the gradients of conv1d/conv2d that
/// output_mask selects (input, weight, bias), in that order, as ATen's
/// convolution_backward computes them.
std::vector<TensorType> inferConvBackward(const Node &node) {
  requireFloat(node);
  const TensorType &x = operandType(node, 1), &w = operandType(node, 2);
  if (x.rank() < 3 || x.rank() != w.rank() ||
      operandType(node, 0).rank() != x.rank())
    opError(node, "needs gradient, input and weight of one rank (3 or more)");
  std::vector<int64_t> mask = intListAttr(node, "output_mask", {});
  if (mask.size() != 3)
    opError(node, "'output_mask' needs 3 values (input, weight, bias)");
  std::vector<TensorType> types;
  if (mask[0])
    types.push_back(x);
  if (mask[1])
    types.push_back(w);
  if (mask[2])
    types.push_back(likeFirstOperand(node, {w.sizes[0]}));
  if (types.empty())
    opError(node, "'output_mask' selects no gradient");
  for (TensorType &type : types)
    type.strides.clear();
  return types;
}

/// max_pool2d_with_indices: the pool and, for its backward, the flat index
/// (within its plane) of each window's maximum, as ATen returns them.
std::vector<TensorType> inferPoolWithIndices(const Node &node) {
  TensorType pooled = inferPool(node)[0];
  TensorType indices = pooled;
  indices.dtype = DType::I64;
  return {pooled, indices};
}

/// max_pool2d_backward / avg_pool2d_backward /
/// adaptive_avg_pool2d_backward(grad, input): the input's gradient;
/// max_pool2d_backward takes the forward's indices as a third operand, or
/// recomputes them.
std::vector<TensorType> inferPoolBackward(const Node &node) {
  if (node.operands.size() != 2 &&
      !(node.op == Op::MaxPool2dBackward && node.operands.size() == 3))
    opError(node, "takes the gradient and the input" +
                      std::string(node.op == Op::MaxPool2dBackward
                                      ? " (and optionally the indices)"
                                      : ""));
  for (size_t i = 0; i < 2; ++i)
    if (!isFloating(operandType(node, i).dtype) ||
        operandType(node, i).dtype != operandType(node, 0).dtype)
      opError(node, "needs a floating gradient and input of one dtype");
  if (node.operands.size() == 3) {
    requireIntegerIndex(node, 2);
    if (operandType(node, 2).sizes != operandType(node, 0).sizes)
      opError(node, "the indices need the gradient's sizes");
  }
  TensorType type = operandType(node, 1);
  if (operandType(node, 0).rank() != type.rank())
    opError(node, "the gradient and the input need the same rank");
  type.strides.clear();
  return {keepChannelsLast(node, type)};
}

/// gather_backward / index_select_backward {dim, shape}(grad, index): the
/// gradient of the gathered input (of sizes `shape`), grad added at the
/// indices (ATen's scatter_add / index_add, so repeated indices sum).
std::vector<TensorType> inferIndexedBackward(const Node &node) {
  const TensorType &grad = operandType(node, 0);
  if (!isFloating(grad.dtype))
    opError(node, "needs a floating gradient");
  requireIntegerIndex(node, 1);
  std::vector<SymExpr> shape = symListAttr(node, "shape", {});
  if (shape.size() != grad.rank())
    opError(node, "'shape' needs one size per dim of the gradient");
  normalizeDim(node, node.intAttr("dim", 0), grad.rank());
  TensorType type = likeFirstOperand(node, shape);
  type.strides.clear();
  return {type};
}

/// embedding_backward {num_weights, padding_idx}(grad, indices): the
/// weight's gradient, [num_weights, embedding dim], rows summed per index
/// (none for padding_idx).
std::vector<TensorType> inferEmbeddingBackward(const Node &node) {
  const TensorType &grad = operandType(node, 0);
  if (!isFloating(grad.dtype) || grad.rank() < 1)
    opError(node, "needs a floating gradient");
  requireIntegerIndex(node, 1);
  int64_t rows = node.intAttr("num_weights", -1);
  if (rows < 0)
    opError(node, "needs the attribute 'num_weights'");
  TensorType type = likeFirstOperand(node, {SymExpr(rows), grad.sizes.back()});
  type.strides.clear();
  return {type};
}

/// sdpa_flash(q, k, v[, mask]) {is_causal, scale, has_mask}: attention
/// by ATen's CPU flash kernel, which also returns the rows' logsumexp for
/// the backward (what capture emits for scaled_dot_product_attention in
/// training). q [B, H, L, E], k and v [B, H, S, E]; the mask, additive and
/// of q's dtype, broadcasts to [B, H, L, S].
std::vector<TensorType> inferFlashAttention(const Node &node) {
  requireFloat(node);
  for (size_t i = 0; i < 3; ++i)
    requireRank(node, i, 4);
  const TensorType &q = operandType(node, 0), &k = operandType(node, 1),
                   &v = operandType(node, 2);
  for (size_t d : {0, 1})
    requireEqual(node, k.sizes[d], q.sizes[d], "batch and head sizes");
  requireEqual(node, v.sizes[0], q.sizes[0], "batch sizes");
  requireEqual(node, v.sizes[1], q.sizes[1], "head counts");
  requireEqual(node, k.sizes[3], q.sizes[3], "head sizes");
  requireEqual(node, v.sizes[3], q.sizes[3], "head sizes");
  requireEqual(node, v.sizes[2], k.sizes[2], "key and value lengths");
  bool masked = boolAttr(node, "has_mask", false);
  if (node.operands.size() != (masked ? 4u : 3u))
    opError(node, "takes q, k, v and, with has_mask, the mask");
  if (masked) {
    std::vector<SymExpr> scores = {q.sizes[0], q.sizes[1], q.sizes[2],
                                   k.sizes[2]};
    if (broadcastShapes(scores, operandType(node, 3).sizes, node.location) !=
        scores)
      opError(node, "the mask does not broadcast to the scores");
  }
  TensorType out = likeFirstOperand(node, q.sizes);
  out.strides.clear();
  // ATen lays the logsumexp out as [B, L, H].
  TensorType rows = likeFirstOperand(node, {q.sizes[0], q.sizes[1], q.sizes[2]});
  rows.dtype = q.dtype == DType::F64 ? DType::F64 : DType::F32;
  rows.strides = {q.sizes[2] * q.sizes[1], SymExpr(1), q.sizes[1]};
  return {out, rows};
}

/// sdpa_flash_backward(g, q, k, v, out, logsumexp[, mask]): dq, dk, dv.
std::vector<TensorType> inferFlashAttentionBackward(const Node &node) {
  bool masked = boolAttr(node, "has_mask", false);
  if (node.operands.size() != (masked ? 7u : 6u))
    opError(node, "takes the gradient, q, k, v, the output, the logsumexp "
                  "and, with has_mask, the mask");
  std::vector<TensorType> types;
  for (size_t i = 1; i < 4; ++i) {
    TensorType type = operandType(node, i);
    if (!isFloating(type.dtype) || type.rank() != 4)
      opError(node, "q, k and v must be 4-D floating tensors");
    type.strides.clear();
    types.push_back(type);
  }
  return types;
}

/// call_torch: a torch callable run as is; capture declares its result
/// types (found by running it on meta tensors) in the attribute "results",
/// e.g. "f32[2, 10, 16], f32[2, 10, 10]".
std::vector<TensorType> inferTorchCall(const Node &node) {
  std::string declared = node.stringAttr("results", "");
  if (declared.empty())
    opError(node, "needs the attribute 'results' (its result types)");
  TextCursor cursor(declared, node.location.file);
  std::vector<TensorType> types;
  try {
    do {
      types.push_back(parseTensorType(cursor));
    } while (cursor.accept(","));
    if (!cursor.atEnd())
      cursor.error("expected ',' or the end of the result types");
  } catch (const Error &error) {
    opError(node, "malformed 'results': " + error.bareMessage());
  }
  return types;
}

OpInfo externOp(Op name, int arity, std::vector<std::string> attributes,
                ShapeRule infer) {
  return shapedOp(name, OpKind::Extern, arity, std::move(attributes),
                  std::move(infer));
}

} // namespace

std::vector<int64_t> perDim(const Node &node, const std::string &name,
                            size_t count, int64_t fallback) {
  std::vector<int64_t> values = intListAttr(node, name, {fallback});
  if (values.size() == 1)
    values.assign(count, values[0]);
  if (values.size() != count)
    opError(node, "'" + name + "' needs " + std::to_string(count) + " values");
  return values;
}

std::optional<int64_t> windowCount(int64_t size, int64_t kernel,
                                   int64_t stride, int64_t padding,
                                   int64_t dilation, bool ceilMode) {
  int64_t span = size + 2 * padding - dilation * (kernel - 1) - 1;
  if (span < 0 || stride <= 0)
    return std::nullopt;
  int64_t out = (ceilMode ? (span + stride - 1) / stride : span / stride) + 1;
  if (ceilMode && (out - 1) * stride >= size + padding)
    --out;
  return out;
}

namespace {

std::vector<TensorType> inferAddmm(const Node &node) {
  return inferBiasedProduct(node, Op::Mm, inferMm);
}

std::vector<TensorType> inferBaddbmm(const Node &node) {
  return inferBiasedProduct(node, Op::Bmm, inferBmm);
}

std::vector<TensorType> inferConv1d(const Node &node) {
  return inferConvolution(node, 1);
}

std::vector<TensorType> inferConv2d(const Node &node) {
  return inferConvolution(node, 2);
}

} // namespace

/// The entries: from include/dynafuse/Ops/ExternOps.py.
void addExternOps(std::vector<OpInfo> &table) {
#include "dynafuse/Ops/ExternOps.inc"
}

} // namespace dynafuse
