//===- HalfProducts.cpp - 16-bit products computed in float32 -------------===//
//
// The graph pass `half-products-in-f32` (Passes.h). A GEMM or convolution
// of bf16 or f16 tensors accumulates in f32 and rounds its result once,
// in ATen as here; where ATen has no fast 16-bit kernel for the host (no
// AVX-512 for oneDNN's bf16, no AVX512-FP16 or AMX for f16) it runs a
// scalar loop, 20-100x slower than its f32 GEMM. The pass computes such a
// product in f32 instead: its 16-bit operands cast up (exact), the product
// in f32 (MKL or oneDNN), the result cast back (one rounding, as ATen's).
// The casts are pointwise and fuse with their neighbours; autocast's
// downcasts of f32 weights followed by these upcasts become one rounding
// kernel. The torch runtime runs the pass on CPU graphs where the host
// lacks the type's fast path, before autodiff (the backward's products
// follow in f32).
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/Passes.h"

#include "dynafuse/Graph/OpRegistry.h"

#include <map>

namespace dynafuse {
namespace {

bool isHalfProduct(const Node &node, const std::set<DType> &slowTypes) {
  switch (node.op) {
  case Op::Mm:
  case Op::Bmm:
  case Op::Matmul:
  case Op::Addmm:
  case Op::Baddbmm:
  case Op::Linear:
  case Op::Conv1d:
  case Op::Conv2d:
    break;
  default:
    return false;
  }
  if (node.results.size() != 1)
    return false;
  const TensorType &type = node.results[0]->type;
  return type.device == "cpu" && slowTypes.count(type.dtype);
}

/// Moves the node graph.addNode just appended into `ordered`.
Value *take(Graph &graph, std::vector<std::unique_ptr<Node>> &ordered,
            Node *node, bool recompute) {
  node->recompute = recompute;
  ordered.push_back(std::move(graph.nodes.back()));
  graph.nodes.pop_back();
  return node->result();
}

} // namespace

bool computeHalfProductsInFloat32(Graph &graph,
                                  const std::set<DType> &slowTypes) {
  bool any = false;
  for (const auto &node : graph.nodes)
    any |= isHalfProduct(*node, slowTypes);
  if (!any)
    return false;
  std::vector<std::unique_ptr<Node>> nodes;
  nodes.swap(graph.nodes);
  std::vector<std::unique_ptr<Node>> ordered;
  std::map<const Value *, Value *> redirected;
  for (auto &owned : nodes) {
    Node &node = *owned;
    for (Operand &operand : node.operands)
      if (operand.isValue() && redirected.count(operand.value))
        operand.value = redirected.at(operand.value);
    if (!isHalfProduct(node, slowTypes)) {
      ordered.push_back(std::move(owned));
      continue;
    }
    for (Operand &operand : node.operands) {
      if (!operand.isValue() || !isFloating(operand.value->type.dtype) ||
          operand.value->type.dtype == DType::F32 ||
          operand.value->type.dtype == DType::F64)
        continue;
      Node *up = graph.addNode(Op::Cast, {operand}, {{"dtype", DType::F32}},
                               node.location);
      operand.value = take(graph, ordered, up, node.recompute);
    }
    Value *result = node.results[0];
    DType half = result->type.dtype;
    result->type.dtype = DType::F32;
    ordered.push_back(std::move(owned));
    Node *down = graph.addNode(Op::Cast, {Operand(result)}, {{"dtype", half}},
                               node.location);
    redirected[result] = take(graph, ordered, down, node.recompute);
  }
  graph.nodes.swap(ordered);
  for (Value *&output : graph.outputs)
    if (redirected.count(output))
      output = redirected.at(output);
  return true;
}

} // namespace dynafuse
