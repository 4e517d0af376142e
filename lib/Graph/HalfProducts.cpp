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

#include "dynafuse/Graph/NodeRewrites.h"
#include "dynafuse/Graph/OpRegistry.h"

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

} // namespace

bool computeHalfProductsInFloat32(Graph &graph,
                                  const std::set<DType> &slowTypes) {
  return rewriteNodes(
      graph, [&](const Node &node) { return isHalfProduct(node, slowTypes); },
      [](Node &node, NodeRewriter &rewriter) {
        for (Operand &operand : node.operands) {
          if (!operand.isValue() || !isFloating(operand.value->type.dtype) ||
              operand.value->type.dtype == DType::F32 ||
              operand.value->type.dtype == DType::F64)
            continue;
          operand.value =
              rewriter.add(Op::Cast, {operand}, {{"dtype", DType::F32}});
        }
        Value *result = node.results[0];
        DType half = result->type.dtype;
        result->type.dtype = DType::F32;
        return rewriter.add(Op::Cast, {Operand(rewriter.keep())},
                            {{"dtype", half}});
      });
}

} // namespace dynafuse
