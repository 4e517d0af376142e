//===- TensorType.h - dtype, symbolic shape, strides and device -*- C++ -*-===//
//
// The type of a tensor value: element type, sizes (symbolic integers), strides
// (empty means row-major contiguous) and device ("cpu", "cuda:0").
// Text form: f32[4, s0], f32[4, 8]{1, 4}, f16[8]@cuda:0, i64[] (0-dim).
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_GRAPH_TENSORTYPE_H
#define DYNAFUSE_GRAPH_TENSORTYPE_H

#include "dynafuse/Graph/DType.h"
#include "dynafuse/Support/SymExpr.h"

#include <string>
#include <vector>

namespace dynafuse {

class TextCursor;

struct TensorType {
  DType dtype = DType::F32;
  std::vector<SymExpr> sizes;
  /// Empty: contiguous row-major.
  std::vector<SymExpr> strides;
  std::string device = "cpu";

  size_t rank() const { return sizes.size(); }
  /// The explicit strides, or the row-major ones when none are set.
  std::vector<SymExpr> effectiveStrides() const;
  SymExpr numel() const;
  std::string str() const;
  bool operator==(const TensorType &other) const;
  bool operator!=(const TensorType &other) const { return !(*this == other); }
};

std::vector<SymExpr> contiguousStrides(const std::vector<SymExpr> &sizes);
/// Dense strides with the dims laid out in `order` (outermost first): each
/// stride the product of the sizes inside it. The identity order gives
/// contiguousStrides.
std::vector<SymExpr> stridesInOrder(const std::vector<SymExpr> &sizes,
                                    const std::vector<size_t> &order);
/// NCHW sizes laid out with C innermost (torch.channels_last).
std::vector<SymExpr> channelsLastStrides(const std::vector<SymExpr> &sizes);
/// 4-D with explicit strides that are channels-last (and not also
/// row-major); size-1 dims may have any stride.
bool isChannelsLast(const TensorType &type);

/// Reads a tensor type at the cursor.
TensorType parseTensorType(TextCursor &cursor);

} // namespace dynafuse

#endif
