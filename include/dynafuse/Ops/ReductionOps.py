# ReductionOps.py - The definitions of the reductions.
#
# One op(...) per op (see PointwiseOps.py for the generator); a reduction's
# facets:
#   entry, attributes, shape
#       the registry entry: entry(Op::X, {attributes}, shape), where entry
#       is reduction or extremeReduction (which also rewrites a reduction of
#       bools into one of i32) and shape the ShapeRule, both of
#       Graph/ReductionOps.cpp;
#   lowering
#       the ReduceKind the loop IR reduces with (Lowering/ElementEmitter.cpp);
#   derivative
#       rule("...") (a DerivativeInfo expression of
#       Graph/ReductionDerivatives.cpp), "none" (not differentiable) or left
#       out (no derivative yet: capture breaks before differentiating it);
#   aten
#       graph replay's ATen fallback: replay("...") naming a ReplayRule of
#       Torch/TorchGraphReplay.cpp, or an expression of t and node; left out
#       where there is none.

SUMS = ["dim", "dims", "keepdim", "dtype"]
EXTREMES = ["dim", "dims", "keepdim", "whole"]
LOGICAL = ["dim", "dims", "keepdim"]
# sum and prod: integers and bool accumulate in i64 unless "dtype" says.
op("sum", entry="reduction", attributes=SUMS, shape="inferSum",
   lowering="Sum", derivative=rule("reductionRule(sumGradient)"),
   aten=replay("sumReplay"))
# prod: zeros need eager's special case in its derivative.
op("prod", entry="reduction", attributes=SUMS, shape="inferSum",
   lowering="Prod")
op("amax", entry="extremeReduction", attributes=EXTREMES,
   shape="inferExtreme", lowering="Max",
   derivative=rule("reductionRule(extremeGradient, wholeExtremeGradient)"),
   aten='at::amax(t[0], reducedDims(node), boolAttr(node, "keepdim", false))')
op("amin", entry="extremeReduction", attributes=EXTREMES,
   shape="inferExtreme", lowering="Min",
   derivative=rule("reductionRule(extremeGradient, wholeExtremeGradient)"),
   aten='at::amin(t[0], reducedDims(node), boolAttr(node, "keepdim", false))')
op("any", entry="reduction", attributes=LOGICAL, shape="inferLogical",
   lowering="Any", derivative="none", aten=replay("anyOrAllReplay"))
op("all", entry="reduction", attributes=LOGICAL, shape="inferLogical",
   lowering="All", derivative="none", aten=replay("anyOrAllReplay"))
op("argmax", entry="reduction", attributes=["dim", "keepdim"],
   shape="inferArg", lowering="ArgMax", derivative="none",
   aten=replay("argExtremeReplay"))
op("argmin", entry="reduction", attributes=["dim", "keepdim"],
   shape="inferArg", lowering="ArgMin", derivative="none",
   aten=replay("argExtremeReplay"))
# torch.max(x, dim) / torch.min(x, dim): values and indices.
op("max_dim", entry="extremeReduction", attributes=["dim", "keepdim"],
   shape="inferValuesAndIndices", lowering="ArgMax",
   derivative=rule("selectingRule()"), aten=replay("extremeDimReplay"))
op("min_dim", entry="extremeReduction", attributes=["dim", "keepdim"],
   shape="inferValuesAndIndices", lowering="ArgMin",
   derivative=rule("selectingRule()"), aten=replay("extremeDimReplay"))
