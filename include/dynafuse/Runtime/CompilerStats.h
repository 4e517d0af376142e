//===- CompilerStats.h - What the compiler and its runs counted -*- C++ -*-===//
//
// Process-wide counters of captures, cache hits, graph breaks, fallbacks and
// of what compiled runs did through ATen (prepacked weights, GEMM library
// calls, allocation plans), read by dynafuse.stats(). The frontend counts
// its events, the torch runtime (lib/Torch) its run-time ones.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_RUNTIME_COMPILERSTATS_H
#define DYNAFUSE_RUNTIME_COMPILERSTATS_H

namespace dynafuse {

struct CompilerStats {
  long captures = 0;
  long cacheHits = 0;
  long graphBreaks = 0;
  long compileFailures = 0;
  /// Frames run eagerly: at a graph break or compile failure, and each
  /// later call a negative entry sends to eager.
  long eagerFrames = 0;
  long recompileLimitHits = 0;
  /// Code objects settled into eager before their recompile limit: a
  /// guard of theirs could never hold twice (Frontend/Entry/Settling.h).
  long settledFrames = 0;
  /// Eager code objects that run with the frame hook off (nothing under
  /// them compiled in their last runs).
  long unhookedCodes = 0;
  /// Runs of compiled entries that failed (the call then ran eagerly).
  long runFailures = 0;
  /// Modules handed to a code generator (each a compile unless the disk
  /// cache has it), and captures with symbolic sizes.
  long backendCompiles = 0;
  long symbolicCaptures = 0;
  /// Convolution weights of inference entries reordered into oneDNN's
  /// layout (once per parameter version and input size;
  /// TorchPrepackedWeights.h).
  long weightPrepacks = 0;
  /// Of those, weights with their batch norm folded in (conv2d_bn).
  long batchNormFolds = 0;
  /// Convolutions run with a residual added in the convolution's step
  /// (conv2d_bn with a residual: oneDNN's post-op, or an add after ATen's
  /// convolution; every run of one counts).
  long convResidualAdds = 0;
  /// Packed convolutions whose first calls timed the packed weight against
  /// at::conv2d and chose the faster (once per packing).
  long convolutionChoices = 0;
  /// Linear layers run through the GEMM library (MKL's packed sgemm or
  /// oneDNN's inner product; every run counts), and their weights packed
  /// for it (once per parameter version and input size).
  long packedGemms = 0;
  long linearPrepacks = 0;
  /// Products of two computed tensors (mm, bmm, matmul) run through
  /// oneDNN's matmul (every run counts; TorchOneDnnMatmul.cpp).
  long oneDnnProducts = 0;
  /// Small 1x1 convolutions of channels-last inputs run as a matrix
  /// product by ATen (every run counts; TorchExternOps.cpp).
  long pointwiseConvProducts = 0;
  /// Torch calls of in-place methods run in place on the caller's tensor
  /// instead of out of place and a write-back (every run counts;
  /// Loop/InPlaceUpdates.h).
  long inPlaceUpdates = 0;
  /// Gradients of torch callables kept in training graphs, computed by
  /// torch's autograd on a recomputation (every run counts;
  /// TorchCallGradients.cpp).
  long torchCallGradients = 0;
  /// Allocation plans made from compiled runs' traces (AllocationPlan.h;
  /// a program's first run makes one, a run that strayed from it another).
  long allocationPlans = 0;
};

/// The process's counters (dynafuse.stats(); reset by dynafuse.reset()).
CompilerStats &compilerStats();

} // namespace dynafuse

#endif
