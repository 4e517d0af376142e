//===- TorchPrepackedWeights.h - Weights kept packed between calls -*- C++ -*-===//
//
// Private to the torch bridge (compiled against PyTorch's headers). An
// inference entry keeps, per marked step, its weight in the layout the
// library computing the step reads (oneDNN's blocked layout for a
// convolution, MKL's packed matrix or oneDNN's for a GEMM), so the library
// does not repack it on every call. A packed copy stays valid while every
// parameter it was computed from is the same tensor, at the same address,
// at the same version (an in-place update, load_state_dict or an optimizer
// step bumps it), and the step's input has the sizes it was packed for.
//
// The cache is here and in TorchPrepackedWeights.cpp (with the marking of
// the graph's nodes); the convolutions (TorchPackedConvolutions.cpp) and
// the GEMMs (TorchPackedGemms.cpp) pack and run.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_TORCHPREPACKEDWEIGHTS_H
#define DYNAFUSE_CAPTURE_TORCHPREPACKEDWEIGHTS_H

#include "dynafuse/Torch/TorchBridge.h"

#include <ATen/ATen.h>
#include <c10/util/intrusive_ptr.h>

#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

namespace dynafuse {

/// Where a parameter a packed weight was computed from stood when it was
/// packed: the same tensor, at the same address, at the same version.
struct ParameterStamp {
  c10::weak_intrusive_ptr<c10::TensorImpl> tensor;
  const void *data = nullptr;
  uint32_t version = 0;

  explicit ParameterStamp(const at::Tensor &source)
      : tensor(source.getIntrusivePtr()), data(source.data_ptr()),
        version(source._version()) {}
  bool sameTensor(const at::Tensor &source) const {
    return tensor.lock().get() == source.unsafeGetTensorImpl();
  }
  bool current(const at::Tensor &source) const {
    return sameTensor(source) && data == source.data_ptr() &&
           version == source._version();
  }
};

/// Whether a convolution runs faster through its packed weight
/// (mkldnn::_convolution_pointwise) or through at::conv2d: neither wins
/// everywhere (oneDNN's packed 1x1 convolution over a 2x64x128x128 channels-
/// last input takes 10 ms on an AVX2 EPYC where ATen's takes 4.4; over
/// 2x32x128x128, 1.0 against 1.1), so the first calls of each packing time
/// both, alternately, and the faster runs from then on.
struct ConvolutionChoice {
  static constexpr int kTimedCalls = 6; ///< after one untimed call of each
  int calls = 0;
  double bestPacked = 1e30, bestATen = 1e30;
  /// Decided: whether the packed weight runs.
  std::optional<bool> packed;
};

/// One step's packed weight (and, for conv2d_bn, the bias with the batch
/// norm folded in), the parameters it was computed from and the input
/// sizes it was packed for.
struct PackedWeight {
  std::vector<ParameterStamp> stamps;
  std::vector<int64_t> inputSizes;
  at::Tensor packed;
  std::optional<at::Tensor> bias;
  /// Convolutions: the weight as packed, before the reorder (batch norm
  /// folded in), which at::conv2d takes; and the measured choice between
  /// the two (TorchPackedConvolutions.cpp), reset by each packing.
  at::Tensor plain;
  ConvolutionChoice choice;
  /// Packed for inputs of any size (a symbolic graph's varying rows),
  /// inputSizes then says nothing.
  bool anySize = false;

  /// Packed from `parameters` (in order) for an input of `sizes` (or any),
  /// and all of them unchanged since.
  bool current(const std::vector<const at::Tensor *> &parameters,
               at::IntArrayRef sizes) const;
  /// Packed from `parameters`, unchanged since, for inputs of other sizes.
  bool currentForOtherSizes(const std::vector<const at::Tensor *> &parameters,
                            at::IntArrayRef sizes) const;
  /// Packed from `parameters` (in order), all of them unchanged since.
  bool packedFrom(const std::vector<const at::Tensor *> &parameters) const;
  /// Records what a new packing was computed from.
  void stamp(const std::vector<const at::Tensor *> &parameters,
             at::IntArrayRef sizes);
};

/// A marked step's packed weights: one per model instance calling it (two
/// instances of one class share a compiled entry, and would otherwise
/// repack on every call that alternates between them), the most recently
/// used last.
struct StepWeights {
  /// Per parameter argument: the graph input it is, -1 when none is (the
  /// graph computes it: never packed). Empty before the first call.
  std::vector<int> inputs;
  std::vector<PackedWeight> copies;
};

class PrepackedWeights {
public:
  /// `gemmLibrary`: the library matrix products run through, as
  /// gemmLibraryFor resolved it (available, never Auto; nullopt: none,
  /// ATen runs them).
  explicit PrepackedWeights(std::optional<GemmLibrary> gemmLibrary)
      : library(gemmLibrary) {}
  std::optional<GemmLibrary> gemmLibrary() const { return library; }

  /// The result of marked step `step` with its weight kept packed, or
  /// nullopt when ATen should run it as usual.
  std::optional<at::Tensor> run(const ProgramStep &step,
                                const std::vector<at::Tensor> &tensors,
                                const ForwardInputs &inputs);

private:
  std::optional<GemmLibrary> library;
  std::mutex mutex;
  std::unordered_map<const ProgramStep *, StepWeights> byStep;
};

/// The caller's tensors behind step arguments `arguments` (each the graph
/// input at that address, as itself or transposed; a 2-D argument may be
/// the transpose of its input), found on the first call and checked on
/// later ones; empty when one is not a graph input.
std::vector<const at::Tensor *>
parameterSources(StepWeights &weights, const std::vector<at::Tensor> &tensors,
                 const std::vector<size_t> &arguments,
                 const ForwardInputs &inputs);

/// The copy kept for weight tensor `weight` (moved last), else a new one in
/// place of the least recently used.
PackedWeight &copyFor(StepWeights &weights, const at::Tensor &weight);

/// conv2d and conv2d_bn through oneDNN with the weight (batch norm folded
/// in) kept reordered; nullopt for a convolution ATen runs faster.
std::optional<at::Tensor>
runPackedConvolution(StepWeights &weights, const ProgramStep &step,
                     const std::vector<at::Tensor> &tensors,
                     const ForwardInputs &inputs);

/// matmul of a linear layer and addmm through `library` (as gemmLibraryFor
/// resolved it: available, not Auto): MKL's packed sgemm or oneDNN's inner
/// product; nullopt outside the rows the library is used for.
std::optional<at::Tensor> runPackedGemm(StepWeights &weights,
                                        GemmLibrary library,
                                        const ProgramStep &step,
                                        const std::vector<at::Tensor> &tensors,
                                        const ForwardInputs &inputs);

/// Rows (the product of the input's leading dims) where `library` runs a
/// linear layer of a weight of weightElements; also the marking's bounds
/// for static rows.
bool linearRowsRouted(GemmLibrary library, int64_t rows,
                      int64_t weightElements);

} // namespace dynafuse

#endif
