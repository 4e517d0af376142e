//===- TorchATenOps.h - Graph ops run by ATen ---------------------*- C++ -*-===//
//
// Private to the torch bridge (compiled against PyTorch's headers): the ATen
// calls of graph ops. Extern steps of a compiled module run their op this
// way on views of its buffers (TorchExternOps.cpp); a training graph's
// forward is replayed this way, node by node with autograd recording, when
// a backward asks for gradients of gradients (TorchGraphReplay.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_TORCHATENOPS_H
#define DYNAFUSE_CAPTURE_TORCHATENOPS_H

#include "dynafuse/Torch/TorchBridge.h"
#include "dynafuse/Graph/Graph.h"

#include <ATen/ATen.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dynafuse {

/// The results of extern op `op` computed by ATen from tensors: one for
/// most, several for the backward kernels and the pools with indices.
/// firstSizes: the sizes of the op's first result (the backward kernels of
/// gathers need the input's). Throws Error for an op ATen does not run.
std::vector<at::Tensor>
externResultsWithATen(Op op, const std::map<std::string, Attribute> &attributes,
                      const std::vector<at::Tensor> &tensors,
                      const std::vector<int64_t> &firstSizes);

/// A list attribute of one value per spatial dim (a single value repeats;
/// absent: `fallback` for each). Throws Error when it is not integers.
std::vector<int64_t> perDim(const std::map<std::string, Attribute> &attributes,
                            const char *name, size_t spatial,
                            int64_t fallback);

/// A number attribute (an integer is converted), `fallback` when absent.
/// Throws Error when it is not a number.
double attributeNumber(const std::map<std::string, Attribute> &attributes,
                       const std::string &name, double fallback);
/// A boolean attribute, false when absent. Throws Error when it is not a
/// boolean.
bool attributeFlag(const std::map<std::string, Attribute> &attributes,
                   const std::string &name);
/// An integer list attribute (one integer is a list of one), `fallback`
/// when absent. Throws Error when it is not integers.
std::vector<int64_t>
attributeInts(const std::map<std::string, Attribute> &attributes,
              const std::string &name, std::vector<int64_t> fallback);
/// A string attribute, `fallback` when absent. Throws Error when it is not
/// a string.
std::string attributeText(const std::map<std::string, Attribute> &attributes,
                          const std::string &name,
                          const std::string &fallback);

/// Marked step `step` on tensors with its weight kept packed in `weights`
/// (TorchPrepackedWeights.h: conv2d and conv2d_bn through oneDNN, a linear
/// layer's matmul and addmm through MKL's packed sgemm); nullopt when ATen
/// should run it as usual (a small convolution, rows where packing does
/// not pay, a weight that is not a graph input, no oneDNN or MKL).
std::optional<at::Tensor>
runWithPrepackedWeight(PrepackedWeights &weights, const ProgramStep &step,
                       const std::vector<at::Tensor> &tensors,
                       const ForwardInputs &inputs);

/// Matrix product step `op` (mm, bmm, matmul) of an inference entry
/// through the entry's GEMM library where it is oneDNN
/// (TorchOneDnnMatmul.cpp); nullopt when ATen should run it (another
/// library, a small or matrix-vector product, not float32 CPU).
std::optional<at::Tensor>
runProductWithGemmLibrary(const PrepackedWeights &weights, Op op,
                          const std::vector<at::Tensor> &tensors);

/// Runs graph on inputs (one per graph input) node by node with ATen's
/// differentiable ops and returns its outputs. With grad mode on, autograd
/// records every step, so the outputs can be differentiated (twice) with
/// respect to the inputs, as eager's would. Each step's result is checked
/// against its node's type (sizes; a dtype that differs is cast to the
/// node's). Throws Error naming the node for an op it cannot replay.
std::vector<at::Tensor> replayGraphWithATen(const Graph &graph,
                                            const std::vector<at::Tensor> &inputs);

} // namespace dynafuse

#endif
