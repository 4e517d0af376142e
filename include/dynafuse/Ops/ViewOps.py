# ViewOps.py - The definitions of the views that remap indices.
#
# One op(...) per op (see PointwiseOps.py for the generator). A view's
# facets:
#   attributes, shape, remap, strided, sequence
#       the registry entry (remapView of Graph/ViewOps.cpp): the ShapeRule,
#       the IndexRemap computing operand indices from result indices, and
#       the StridedRule giving the result as a strided view of the operand
#       (None where there is none); sequence: the results are the items of
#       one tuple (split, chunk, unbind);
#   derivative
#       rule("...") (a DerivativeInfo expression of
#       Graph/ViewDerivatives.cpp) or "none";
#   aten
#       graph replay's ATen fallback: an expression of t, node and s (the
#       run's symbol values), or replay("...") naming a ReplayRule of
#       Torch/TorchGraphReplay.cpp.

op("reshape", attributes=["shape"], shape="inferReshape",
   remap="remapReshape", strided="stridedReshape",
   derivative=rule("single(reshapeBack)"),
   aten="at::reshape(t[0], sizesOf(node.result(), s))")
op("permute", attributes=["dims"], shape="inferPermute",
   remap="remapPermute", strided="stridedPermute",
   derivative=rule("single(permuteGradient)"),
   aten='t[0].permute(intListAttr(node, "dims", {}))')
op("transpose", attributes=["dim0", "dim1"], shape="inferTranspose",
   remap="remapTranspose", strided="stridedTranspose",
   derivative=rule("single(transposeGradient)"),
   aten=replay("transposeReplay"))
op("expand", attributes=["shape"], shape="inferExpand", remap="remapExpand",
   strided="stridedExpand", derivative=rule("single(expandGradient)"),
   aten="t[0].expand(sizesOf(node.result(), s))")
op("squeeze", attributes=["dims"], shape="inferSqueeze",
   remap="remapSqueeze", strided="stridedSqueeze",
   derivative=rule("single(reshapeBack)"), aten=replay("squeezeReplay"))
op("unsqueeze", attributes=["dim"], shape="inferUnsqueeze",
   remap="remapUnsqueeze", strided="stridedUnsqueeze",
   derivative=rule("single(reshapeBack)"),
   aten='t[0].unsqueeze(node.intAttr("dim", 0))')
op("flatten", attributes=["start_dim", "end_dim"], shape="inferFlatten",
   remap="remapReshape", strided="stridedReshape",
   derivative=rule("single(reshapeBack)"),
   aten='t[0].flatten(node.intAttr("start_dim", 0), node.intAttr("end_dim", -1))')
op("select", attributes=["dim", "index"], shape="inferSelect",
   remap="remapSelect", strided="stridedSelect",
   derivative=rule("single(selectGradient)"),
   aten='t[0].select(node.intAttr("dim", 0), node.intAttr("index", 0))')
op("slice", attributes=["dim", "start", "end", "step"], shape="inferSlice",
   remap="remapSlice", strided="stridedSlice",
   derivative=rule("single(sliceBack)"), aten=replay("sliceReplay"))
op("narrow", attributes=["dim", "start", "length"], shape="inferSlice",
   remap="remapSlice", strided="stridedSlice",
   derivative=rule("single(sliceBack)"), aten=replay("sliceReplay"))
op("detach", shape="inferSameShape", remap="remapIdentity",
   strided="stridedIdentity", derivative="none", aten="t[0].detach()")
op("contiguous", shape="inferSameShape", remap="remapIdentity",
   strided="noStridedForm", derivative=rule("single(contiguousGradient)"),
   aten="t[0].contiguous()")
op("split", attributes=["dim", "size", "sizes"], shape="inferSplit",
   remap="remapSplit", strided="stridedSplit", sequence=True,
   derivative=rule("piecesRule(false)"), aten=replay("piecesReplay"))
op("chunk", attributes=["dim", "chunks"], shape="inferSplit",
   remap="remapSplit", strided="stridedSplit", sequence=True,
   derivative=rule("piecesRule(false)"), aten=replay("piecesReplay"))
op("unbind", attributes=["dim"], shape="inferUnbind", remap="remapUnbind",
   strided="stridedUnbind", sequence=True,
   derivative=rule("piecesRule(true)"),
   aten=replay("unbindReplay"))
