//===- TorchPackedGemms.cpp - Linear layers with MKL-packed weights -------===//
//
// Part of the torch bridge's packed weights (TorchPrepackedWeights.h).
// ATen's float32 matmul is MKL's sgemm, which copies the weight matrix into
// its packed panel layout on every call; for a few hundred rows that copy
// is a large share of the product. A linear layer's matmul (or addmm, as
// HuggingFace's Conv1D calls it) marked weight_prepacked keeps the weight
// packed by mkl::_mkl_reorder_linear_weight and runs through
// mkl::_mkl_linear (cblas_sgemm_compute on the packed matrix), as
// Inductor's freezing does.
//
// A packing is made for one row count: the cache keeps the input's sizes
// with it, and a call with other rows packs again. Measured per GEMM on
// this machine (us, at::linear vs packed; rows x K x N): 1 x 1280 x 1000
// 140 vs 169, 2 x 1280 x 1000 153 vs 155, 4 x 768 x 768 71 vs 43, 8 x 1280
// x 1000 472 vs 219, 64 x 1024 x 256 276 vs 212, 512 x 1024 x 4096 24.5
// vs 21.1 ms, 1576 x 768 x 768 10.8 vs 10.1 ms, 2048 x 768 x 768 12.9 vs
// 12.4 ms. So rows 4 to 1024: below, MKL takes its matrix-vector path and
// packing loses; above, the copy is a few percent of the product and not
// worth a second copy of the weight in memory (the packed copy costs about
// the weight's bytes).
//
//===----------------------------------------------------------------------===//
#include "TorchATenOps.h"
#include "TorchPrepackedWeights.h"

#include "dynafuse/Capture/FrameCompiler.h"

#include <ATen/core/dispatch/Dispatcher.h>

namespace dynafuse {

namespace {

constexpr int64_t kPackedGemmMinRows = 4;
constexpr int64_t kPackedGemmMaxRows = 1024;

using ReorderSignature = at::Tensor(const at::Tensor &, int64_t);
using LinearSignature = at::Tensor(const at::Tensor &, const at::Tensor &,
                                   const at::Tensor &,
                                   const std::optional<at::Tensor> &, int64_t);

/// Operator `name`'s handle typed as Signature, when ATen registers it.
template <typename Signature>
std::optional<c10::TypedOperatorHandle<Signature>> findOp(const char *name) {
  std::optional<c10::OperatorHandle> handle =
      c10::Dispatcher::singleton().findSchema({name, ""});
  if (!handle)
    return std::nullopt;
  return handle->typed<Signature>();
}

/// mkl::_mkl_reorder_linear_weight and mkl::_mkl_linear, when registered
/// (typed once: a typed call checks its signature).
struct MklLinearOps {
  std::optional<c10::TypedOperatorHandle<ReorderSignature>> reorder =
      findOp<ReorderSignature>("mkl::_mkl_reorder_linear_weight");
  std::optional<c10::TypedOperatorHandle<LinearSignature>> linear =
      findOp<LinearSignature>("mkl::_mkl_linear");
};

const MklLinearOps &mklLinearOps() {
  static const MklLinearOps ops;
  return ops;
}

} // namespace

bool packedGemmAvailable() {
  return at::hasMKL() && mklLinearOps().reorder && mklLinearOps().linear;
}

bool packedGemmRows(int64_t rows) {
  return rows >= kPackedGemmMinRows && rows <= kPackedGemmMaxRows;
}

std::optional<at::Tensor> runPackedGemm(StepWeights &weights,
                                        const ProgramStep &step,
                                        const std::vector<at::Tensor> &tensors,
                                        const ForwardInputs &inputs) {
  // matmul(x, W^T) of a linear layer, or addmm(bias, x, W^T) with beta and
  // alpha 1 (the marking's condition): the weight [N, K] is the matrix
  // argument's transpose.
  bool biased = step.op == "addmm";
  size_t matrixArg = biased ? 2 : 1;
  const at::Tensor &x = tensors.at(biased ? 1 : 0);
  const at::Tensor &matrix = tensors.at(matrixArg);
  if (!packedGemmAvailable() || x.dim() < 2 || matrix.dim() != 2 ||
      x.scalar_type() != at::kFloat || matrix.scalar_type() != at::kFloat ||
      !x.is_cpu() || x.size(-1) != matrix.size(0) || matrix.numel() == 0)
    return std::nullopt;
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d)
    rows *= x.size(d);
  std::optional<at::Tensor> bias;
  if (biased) {
    // _mkl_linear copies a bias of N elements into each row.
    const at::Tensor &given = tensors[0];
    if (given.dim() != 1 || given.size(0) != matrix.size(1) ||
        given.scalar_type() != at::kFloat)
      return std::nullopt;
    bias = given;
  }
  if (!packedGemmRows(rows))
    return std::nullopt;
  std::vector<const at::Tensor *> parameters =
      parameterSources(weights, tensors, {matrixArg}, inputs);
  if (parameters.empty())
    return std::nullopt;
  at::Tensor weight = matrix.t();
  PackedWeight &packed = copyFor(weights, *parameters[0]);
  if (!packed.current(parameters, x.sizes())) {
    packed.packed = mklLinearOps().reorder->call(weight, rows);
    packed.stamp(parameters, x.sizes());
    ++compilerStats().weightPrepacks;
  }
  ++compilerStats().packedGemms;
  return mklLinearOps().linear->call(x, packed.packed, weight, bias, rows);
}

} // namespace dynafuse
