//===- PointwiseOps.cpp - The pointwise ops of the graph IR ---------------===//
//
// Elementwise ops: operands broadcast, dtypes follow the op's TypeRule. The
// entries come from include/dynafuse/Ops/PointwiseOps.py (generated into
// PointwiseOps.inc); this file holds the checks they name.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/OpRegistry.h"

namespace dynafuse {
namespace {

void verifyHardtanh(const Node &node) {
  if (floatAttr(node, "min_val", -1.0) > floatAttr(node, "max_val", 1.0))
    opError(node, "min_val cannot be greater than max_val");
}

void verifyClamp(const Node &node) {
  if (!boolAttr(node, "has_min", true) && !boolAttr(node, "has_max", true))
    opError(node, "at least one of min and max must be given");
  if (!node.operands[0].isValue())
    opError(node, "the input must be a tensor");
  // Eager's clamp_min and clamp_max of a bool tensor take bools; its clamp
  // and its scalar bounds do not.
  if (promotedOperandType(node) == DType::Bool &&
      ((boolAttr(node, "has_min", true) && boolAttr(node, "has_max", true)) ||
       !node.operands.back().isValue()))
    opError(node, "clamp of bools is implemented for one tensor bound only");
}

void verifyMaskedFill(const Node &node) {
  operandType(node, 0);
  if (operandType(node, 1).dtype != DType::Bool)
    opError(node, "the mask must be a bool tensor");
  const Operand &value = node.operands[2];
  if (value.isValue() && value.value->type.rank() != 0)
    opError(node, "the fill value must be a number or a 0-dim tensor");
}

} // namespace

void addPointwiseOps(std::vector<OpInfo> &table) {
#include "dynafuse/Ops/PointwiseOps.inc"
}

} // namespace dynafuse
