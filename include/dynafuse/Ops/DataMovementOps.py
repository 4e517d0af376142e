# DataMovementOps.py - The definitions of the data-movement ops.
#
# Ops lowering computes element by element with their own view form (a
# fill, a pad, a concatenation, a gather; Graph/DataMovementOps.cpp). Their
# facets:
#   arity, attributes, shape, form, indexed
#       the registry entry (dataMovement): operand count (-1: one or more),
#       the ShapeRule, the ViewForm lowering computes with, and the operand
#       read at indices loaded from another (gather, index_select,
#       embedding), which lowering keeps in a buffer;
#   derivative, aten
#       as in ViewOps.py.

op("uniform", arity=1, attributes=["shape", "dtype", "offset"],
   shape="inferUniform", form="Random", derivative="none",
   aten="uniform(node, t, s)")
op("tril", arity=1, attributes=["diagonal"], shape="inferTriangle",
   form="LowerTriangle", derivative=rule("single(triangleGradient)"),
   aten='at::tril(t[0], node.intAttr("diagonal", 0))')
op("triu", arity=1, attributes=["diagonal"], shape="inferTriangle",
   form="UpperTriangle", derivative=rule("single(triangleGradient)"),
   aten='at::triu(t[0], node.intAttr("diagonal", 0))')
op("pad", arity=1, attributes=["pad", "value"], shape="inferPad", form="Pad",
   derivative=rule("single(padGradient)"),
   aten='at::constant_pad_nd(t[0], intListAttr(node, "pad", {}), '
        'floatAttr(node, "value", 0))')
op("cat", arity=-1, attributes=["dim"], shape="inferCat", form="Concat",
   derivative=rule("catRule()"), aten='at::cat(t, node.intAttr("dim", 0))')
# gather and index_select read operand 0 at loaded indices, embedding
# (torch's argument order: indices, weight) operand 1.
op("index_select", arity=2, attributes=["dim"], shape="inferIndexSelect",
   form="IndexSelect", indexed=0,
   derivative=rule("single(indexSelectGradient)"),
   aten='at::index_select(t[0], node.intAttr("dim", 0), t[1])')
op("gather", arity=2, attributes=["dim"], shape="inferGather", form="Gather",
   indexed=0, derivative=rule("single(gatherGradient)"),
   aten='at::gather(t[0], node.intAttr("dim", 0), t[1])')
# padding_idx changes only the backward (no gradient for that row).
op("embedding", arity=2, attributes=["padding_idx"], shape="inferEmbedding",
   form="Embedding", indexed=1, derivative=rule("embeddingRule()"),
   aten='at::embedding(t[1], t[0], node.intAttr("padding_idx", -1))')
op("arange", arity=0, attributes=["start", "end", "step", "dtype", "device"],
   shape="inferArange", form="Arange", derivative="none",
   aten=replay("arangeReplay"))
op("full", arity=0, attributes=["shape", "value", "dtype", "device"],
   shape="inferFull", form="Fill", derivative="none",
   aten=replay("fullReplay"))
op("full_like", arity=1, attributes=["value", "dtype"], shape="inferFullLike",
   form="Fill", derivative="none", aten=replay("fullLikeReplay"))
