//===- ConvolutionEpilogues.h - Batch norm folded into conv2d -*- C++ -*-===//
//
// An inference convolution whose weight oneDNN keeps prepacked
// (weight_prepacked, set by the torch bridge) and whose only reader is an
// eval-mode batch norm of parameters, optionally followed by an activation
// oneDNN applies as a post-op, becomes one `conv2d_bn` node: the runtime
// folds the batch norm into the weight and bias it prepacks (once per
// parameter version) and the activation into the convolution's own pass,
// so the convolution's result is written once, already normalized and
// activated, instead of being read and written again by an epilogue
// kernel.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_GRAPH_CONVOLUTIONEPILOGUES_H
#define DYNAFUSE_GRAPH_CONVOLUTIONEPILOGUES_H

#include "dynafuse/Graph/Graph.h"

#include <cstdint>

namespace dynafuse {

/// Dense convolutions below this many FLOPs run faster through ATen's own
/// convolution than through oneDNN with a prepacked weight (its primitive
/// is built per call): those are not prepacked.
constexpr double kPrepackMinFlops = 4e6;

/// 2 x weight elements x output positions of a 2-D convolution.
double convolutionFlops(int64_t weightElements, int64_t batch,
                        const int64_t inputSpatial[2],
                        const int64_t kernel[2], const int64_t stride[2],
                        const int64_t padding[2], const int64_t dilation[2]);

/// Whether `op` is an activation oneDNN applies as a convolution post-op
/// (relu, hardtanh, silu, hardswish, sigmoid): conv2d_bn's `activation`.
bool isPostOpActivation(Op op);

/// Rewrites conv2d {weight_prepacked} -> batch_norm [-> activation] into
/// conv2d_bn where the runtime runs the convolution through its prepacked
/// path (static sizes; depthwise, unless the convolution is a fused window
/// tap, or of kPrepackMinFlops or more), the batch norm's four tensors are
/// graph inputs and nothing else reads the intermediate results. Returns
/// whether the graph changed.
bool fuseConvolutionEpilogues(Graph &graph);

} // namespace dynafuse

#endif
