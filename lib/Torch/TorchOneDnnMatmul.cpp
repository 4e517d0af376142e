//===- TorchOneDnnMatmul.cpp - Products of computed tensors via oneDNN ----===//
//
// Part of the torch bridge. Where the GEMM library is oneDNN
// (TorchPackedGemms.cpp: on AMD CPUs MKL runs its generic code), the matrix
// products of an inference graph that have no weight to pack (attention's
// q @ k^T and probabilities @ v, any mm, bmm or matmul of two computed
// tensors) run through at::native::mkldnn_matmul, which ATen exports and
// calls itself for float32 only on aarch64 or at reduced precision.
// Measured on an AMD EPYC with AVX-512, 2 threads (ms, at::bmm vs oneDNN;
// batch x M x K x N): 48 x 256 x 64 x 256 with k transposed 6.95 vs 1.78,
// 48 x 256 x 256 x 64 6.83 vs 1.34, 12 x 197 x 64 x 197 0.36 vs 0.16, 4 x
// 1024 x 1024 x 1024 86.7 vs 49.3. A call costs oneDNN about 20 us (8 x 64
// x 64 x 64: 28 vs 33 us; 1 x 32 x 32 x 32: 4 vs 21 us), so products of
// fewer than 2^22 multiply-adds stay with ATen, as do matrix-vector ones
// (M or N of 1), whose ATen path is as fast.
//
// The function is declared weak: with a torch that does not export it
// under this signature (the mangled name carries it) the address is null
// and ATen runs every product. It runs float32 through oneDNN's bf16-capable
// path, which ATen refuses on x86 CPUs with neither AVX-512 (BW, VL, DQ)
// nor AVX-NE-CONVERT (an AVX2-only EPYC): ATen runs every product there.
//
//===----------------------------------------------------------------------===//
#include "TorchATenOps.h"
#include "TorchPrepackedWeights.h"

#include "dynafuse/Runtime/CompilerStats.h"

#include <ATen/ExpandUtils.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace at::native {
// ATen/native/mkldnn/Matmul.h, which torch does not install.
__attribute__((weak)) void mkldnn_matmul(const at::Tensor &mat1,
                                         const at::Tensor &mat2,
                                         const at::Tensor &result, float beta,
                                         float alpha);
} // namespace at::native

namespace dynafuse {

namespace {

constexpr int64_t kOneDnnMatmulMinMultiplyAdds = int64_t(1) << 22;

/// What ATen's mkldnn_matmul checks before it runs (mkldnn_bf16_device_check
/// on x86): AVX-512 BW, VL and DQ, or AVX-NE-CONVERT (CPUID leaf 7,
/// subleaf 1, EDX bit 5).
bool cpuRunsOneDnnMatmul() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool runs = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq"))
      return true;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) &&
           (edx & (1u << 5)) != 0;
  }();
  return runs;
#else
  return true;
#endif
}

/// a @ b (at::matmul's semantics for operands of rank 2 and up) through
/// oneDNN, or nullopt where ATen should run it.
std::optional<at::Tensor> oneDnnMatmul(const at::Tensor &a,
                                       const at::Tensor &b) {
  if (!at::native::mkldnn_matmul || !cpuRunsOneDnnMatmul() || a.dim() < 2 ||
      b.dim() < 2 || a.scalar_type() != at::kFloat ||
      b.scalar_type() != at::kFloat || !a.is_cpu() || !b.is_cpu() ||
      a.size(-1) != b.size(-2))
    return std::nullopt;
  int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  std::vector<int64_t> batch = at::infer_size(a.sizes().slice(0, a.dim() - 2),
                                              b.sizes().slice(0, b.dim() - 2));
  int64_t batches = 1;
  for (int64_t size : batch)
    batches *= size;
  if (m <= 1 || n <= 1 || k == 0 ||
      batches * m * n * k < kOneDnnMatmulMinMultiplyAdds)
    return std::nullopt;
  std::vector<int64_t> resultSizes = batch;
  resultSizes.push_back(m);
  resultSizes.push_back(n);
  ++compilerStats().oneDnnProducts;
  if (b.dim() == 2) {
    // Rows of a (its batch dims folded in) times one matrix.
    at::Tensor rows = a.reshape({-1, k});
    at::Tensor result = at::empty({rows.size(0), n}, a.options());
    at::native::mkldnn_matmul(rows, b, result, 0.0f, 1.0f);
    return result.view(resultSizes);
  }
  auto batched = [&](const at::Tensor &operand, int64_t rows, int64_t cols) {
    std::vector<int64_t> sizes = batch;
    sizes.push_back(rows);
    sizes.push_back(cols);
    return operand.expand(sizes).reshape({batches, rows, cols});
  };
  at::Tensor result = at::empty({batches, m, n}, a.options());
  at::native::mkldnn_matmul(batched(a, m, k), batched(b, k, n), result, 0.0f,
                            1.0f);
  return result.view(resultSizes);
}

} // namespace

std::optional<at::Tensor>
runProductWithGemmLibrary(const PrepackedWeights &weights, Op op,
                          const std::vector<at::Tensor> &tensors) {
  if (weights.gemmLibrary() != GemmLibrary::OneDnn ||
      (op != Op::Matmul && op != Op::Bmm && op != Op::Mm) ||
      tensors.size() != 2)
    return std::nullopt;
  // mm and bmm take exactly 2-D and 3-D operands of one batch (ATen raises
  // otherwise); matmul broadcasts.
  if ((op == Op::Mm && (tensors[0].dim() != 2 || tensors[1].dim() != 2)) ||
      (op == Op::Bmm && (tensors[0].dim() != 3 || tensors[1].dim() != 3 ||
                         tensors[0].size(0) != tensors[1].size(0))))
    return std::nullopt;
  return oneDnnMatmul(tensors[0], tensors[1]);
}

} // namespace dynafuse
