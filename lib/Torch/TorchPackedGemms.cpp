//===- TorchPackedGemms.cpp - Linear layers with packed weights -----------===//
//
// Part of the torch bridge's packed weights (TorchPrepackedWeights.h). A
// linear layer's matmul (or addmm, as HuggingFace's Conv1D calls it) marked
// weight_prepacked runs through one of two libraries, chosen once per
// entry (DYNAFUSE_GEMM_LIBRARY, gemmLibraryFor):
//
// - MKL: ATen's float32 matmul is MKL's sgemm, which copies the weight into
//   its packed panel layout on every call. The step keeps the weight packed
//   by mkl::_mkl_reorder_linear_weight and runs mkl::_mkl_linear
//   (cblas_sgemm_compute), as Inductor's freezing does. Measured on an
//   Intel CPU (us, at::linear vs packed; rows x K x N): 1 x 1280 x 1000 140
//   vs 169, 2 x 1280 x 1000 153 vs 155, 4 x 768 x 768 71 vs 43, 8 x 1280 x
//   1000 472 vs 219, 64 x 1024 x 256 276 vs 212, 512 x 1024 x 4096 24.5 vs
//   21.1 ms, 1576 x 768 x 768 10.8 vs 10.1 ms. So rows 4 to 1024: below,
//   MKL's matrix-vector path is faster; above, the copy is a few percent of
//   the product, not worth a second copy of the weight in memory.
// - oneDNN: on AMD CPUs MKL runs its generic code (an AMD EPYC with
//   AVX-512, 2 threads: 117-179 GFLOP/s at 1024 rows, packed or not), where
//   oneDNN's inner product (mkldnn::_linear_pointwise) reaches 290-420.
//   Measured there (ms, at::linear / oneDNN, weight reordered once /
//   oneDNN, weight as it is): 2 x 768 x 768 0.104 / 0.029 / 0.061, 8 x 1280
//   x 1000 0.268 / 0.072 / 0.118, 256 x 768 x 768 1.65 / 0.77 / 0.82, 1024 x
//   768 x 3072 33.1 / 15.0 / 14.6, 1576 x 768 x 3072 53.0 / 18.7 / 22.0,
//   4096 x 1024 x 4096 224 / 108 / 114; 1 row 0.045 for all three. A call
//   costs oneDNN about 20 us whatever its size (us, at::linear / oneDNN
//   packed: 16 x 64 x 96 6.5 / 19.9, 8 x 256 x 256 16.9 / 24.1, 32 x 256 x
//   256 31.5 / 22.0, 16 x 512 x 512 72.6 / 42.7). So rows 2 and up, of
//   2^20 multiply-adds or more (on hosts with AVX-512; see below); the
//   weight is kept reordered
//   (mkldnn::_reorder_linear_weight) up to 1024 rows, and read as it is
//   above, where oneDNN's own reorder per call costs a few percent and a
//   second copy of the weight would cost its bytes of memory.
//
// Without AVX-512 (an AMD EPYC with AVX2 only, 2 threads) oneDNN's call
// costs 25-30 us and its products are no faster than ATen's on small
// weights (us, at::linear / oneDNN packed; rows x K x N): 128 x 64 x 128
// 31.7 / 55.7, 8 x 256 x 256 40.1 / 71.3, 128 x 256 x 256 138 / 148, but
// 2 x 768 x 768 172 / 95, 32 x 768 x 768 474 / 331, 16 x 768 x 3072 1087
// / 698. There a product goes through oneDNN when its weight has 2^18
// elements or more, whatever its rows.
//
// A packed copy is made for one input size: the cache keeps the sizes with
// it, and a call with others packs again.
//
//===----------------------------------------------------------------------===//
#include "TorchATenOps.h"
#include "TorchPrepackedWeights.h"

#include "dynafuse/Runtime/CompilerStats.h"

#include <ATen/core/dispatch/Dispatcher.h>

namespace dynafuse {

namespace {

constexpr int64_t kMklPackedMinRows = 4;
constexpr int64_t kOneDnnMinRows = 2;
constexpr int64_t kOneDnnMinMultiplyAdds = int64_t(1) << 20;
/// A matrix-vector product (one row: a decode step) goes through oneDNN
/// with the weight packed for one row when the weight has this many
/// elements: read from memory rather than cache (a decoder's weights cycle
/// through the last-level cache each step), ATen's sgemv reaches 8-20 GB/s
/// and oneDNN's 9-29 on an AVX2 EPYC (us, weights cycled through 32 MB
/// of L3, ATen / oneDNN: 256 x 768 99 / 88, 768 x 256 62 / 67, 768 x 2048
/// 441 / 280, 256 x 8000 814 / 359, 768 x 3072 630 / 327).
constexpr int64_t kOneDnnVectorMinWeight = int64_t(1) << 18;
/// Above this many rows neither library keeps a packed copy.
constexpr int64_t kPackedMaxRows = 1024;

using MklReorderSignature = at::Tensor(const at::Tensor &, int64_t);
using MklLinearSignature = at::Tensor(const at::Tensor &, const at::Tensor &,
                                      const at::Tensor &,
                                      const std::optional<at::Tensor> &,
                                      int64_t);
using OneDnnReorderSignature = at::Tensor(const at::Tensor &,
                                          std::optional<int64_t>);
using OneDnnLinearSignature =
    at::Tensor(const at::Tensor &, const at::Tensor &,
               const std::optional<at::Tensor> &, c10::string_view,
               c10::List<std::optional<at::Scalar>>,
               std::optional<c10::string_view>);

/// Operator `name`'s handle typed as Signature, when ATen registers it.
template <typename Signature>
std::optional<c10::TypedOperatorHandle<Signature>> findOp(const char *name) {
  std::optional<c10::OperatorHandle> handle =
      c10::Dispatcher::singleton().findSchema({name, ""});
  if (!handle)
    return std::nullopt;
  return handle->typed<Signature>();
}

/// The packing and linear ops of both libraries, when registered (typed
/// once: a typed call checks its signature).
struct LinearOps {
  std::optional<c10::TypedOperatorHandle<MklReorderSignature>> mklReorder =
      findOp<MklReorderSignature>("mkl::_mkl_reorder_linear_weight");
  std::optional<c10::TypedOperatorHandle<MklLinearSignature>> mklLinear =
      findOp<MklLinearSignature>("mkl::_mkl_linear");
  std::optional<c10::TypedOperatorHandle<OneDnnReorderSignature>>
      oneDnnReorder = findOp<OneDnnReorderSignature>(
          "mkldnn::_reorder_linear_weight");
  std::optional<c10::TypedOperatorHandle<OneDnnLinearSignature>> oneDnnLinear =
      findOp<OneDnnLinearSignature>("mkldnn::_linear_pointwise");
};

const LinearOps &linearOps() {
  static const LinearOps ops;
  return ops;
}

bool mklAvailable() {
  return at::hasMKL() && linearOps().mklReorder && linearOps().mklLinear;
}

bool oneDnnAvailable() {
  return at::hasMKLDNN() && linearOps().oneDnnReorder &&
         linearOps().oneDnnLinear;
}

/// Whether the CPU has 512-bit vectors (AVX-512F), where oneDNN's
/// products of small weights beat ATen's.
bool wideVectorCpu() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool wide = [] {
    __builtin_cpu_init();
    return bool(__builtin_cpu_supports("avx512f"));
  }();
  return wide;
#else
  return true;
#endif
}

/// Whether oneDNN, rather than ATen, runs a linear layer's product of
/// `rows` rows (measured: the banner).
bool oneDnnRunsProduct(int64_t rows, int64_t inner, int64_t outer) {
  // Without AVX-512 products of any rows follow the matrix-vector rule
  // (the banner's measurements put the crossing at the same weight size).
  int64_t weightElements = inner * outer;
  if (rows == 1 || !wideVectorCpu())
    return weightElements >= kOneDnnVectorMinWeight;
  return rows * weightElements >= kOneDnnMinMultiplyAdds;
}

bool intelCpu() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_is("intel");
#else
  return false;
#endif
}

} // namespace

std::optional<GemmLibrary> gemmLibraryFor(GemmLibrary requested) {
  auto available = [](GemmLibrary library) {
    return library == GemmLibrary::Mkl ? mklAvailable() : oneDnnAvailable();
  };
  if (requested == GemmLibrary::Auto)
    requested = intelCpu() ? GemmLibrary::Mkl : GemmLibrary::OneDnn;
  GemmLibrary other = requested == GemmLibrary::Mkl ? GemmLibrary::OneDnn
                                                    : GemmLibrary::Mkl;
  if (available(requested))
    return requested;
  if (available(other))
    return other;
  return std::nullopt;
}

bool linearRowsRouted(GemmLibrary library, int64_t rows,
                      int64_t weightElements) {
  if (library == GemmLibrary::Mkl)
    return rows >= kMklPackedMinRows && rows <= kPackedMaxRows;
  return rows >= kOneDnnMinRows ||
         (rows == 1 && weightElements >= kOneDnnVectorMinWeight);
}

std::optional<at::Tensor> runPackedGemm(StepWeights &weights,
                                        GemmLibrary library,
                                        const ProgramStep &step,
                                        const std::vector<at::Tensor> &tensors,
                                        const ForwardInputs &inputs) {
  // matmul(x, W^T) of a linear layer, or addmm(bias, x, W^T) with beta and
  // alpha 1 (the marking's condition): the weight [N, K] is the matrix
  // argument's transpose.
  bool biased = step.op == Op::Addmm;
  size_t matrixArg = biased ? 2 : 1;
  const at::Tensor &x = tensors.at(biased ? 1 : 0);
  const at::Tensor &matrix = tensors.at(matrixArg);
  if (x.dim() < 2 || matrix.dim() != 2 || x.scalar_type() != at::kFloat ||
      matrix.scalar_type() != at::kFloat || !x.is_cpu() ||
      x.size(-1) != matrix.size(0) || matrix.numel() == 0)
    return std::nullopt;
  bool mkl = library == GemmLibrary::Mkl;
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d)
    rows *= x.size(d);
  std::optional<at::Tensor> bias;
  if (biased) {
    // Both libraries add a bias of N elements to each row.
    const at::Tensor &given = tensors[0];
    if (given.dim() != 1 || given.size(0) != matrix.size(1) ||
        given.scalar_type() != at::kFloat)
      return std::nullopt;
    bias = given;
  }
  if (!linearRowsRouted(library, rows, matrix.numel()) ||
      (!mkl && !oneDnnRunsProduct(rows, matrix.size(0), matrix.size(1))))
    return std::nullopt;
  std::vector<const at::Tensor *> parameters =
      parameterSources(weights, tensors, {matrixArg}, inputs);
  if (parameters.empty())
    return std::nullopt;
  at::Tensor weight = matrix.t();
  c10::List<std::optional<at::Scalar>> noScalars;
  if (!mkl && rows > kPackedMaxRows) {
    ++compilerStats().packedGemms;
    return linearOps().oneDnnLinear->call(x, weight, bias, "none", noScalars,
                                          std::nullopt);
  }
  PackedWeight &packed = copyFor(weights, *parameters[0]);
  if (!packed.current(parameters, x.sizes())) {
    // Rows that vary between calls (a symbolic graph serving requests of
    // many sizes) would repack the weight on every call: oneDNN packs it
    // once for any rows. MKL's packing is for one row count (its products
    // are marked for static rows only): should they vary, ATen runs them.
    bool varying = packed.currentForOtherSizes(parameters, x.sizes());
    if (varying && mkl)
      return std::nullopt;
    WeightPackingAllocations packing;
    packed.packed = mkl ? linearOps().mklReorder->call(weight, rows)
                        : linearOps().oneDnnReorder->call(
                              weight, varying ? std::nullopt
                                              : std::optional<int64_t>(rows));
    packed.stamp(parameters, x.sizes());
    packed.anySize = varying;
    ++compilerStats().linearPrepacks;
  }
  ++compilerStats().packedGemms;
  if (mkl)
    return linearOps().mklLinear->call(x, packed.packed, weight, bias, rows);
  return linearOps().oneDnnLinear->call(x, packed.packed, bias, "none",
                                        noScalars, std::nullopt);
}

} // namespace dynafuse
