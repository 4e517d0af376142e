# ExternOps.py - The definitions of the extern ops.
#
# Ops the runtime runs through ATen (or a torch callable) rather than in a
# kernel (Graph/ExternOps.cpp holds the shape rules they name). One op(...)
# per op (see PointwiseOps.py for the generator); an extern's facets:
#   arity, attributes, shape
#       the registry entry: operand count (-1: a variable count) and the
#       ShapeRule;
#   keeps_channels_last, starts_channels_last
#       its result is channels-last when its first operand is (ATen's
#       convolutions and pools); it makes a CPU graph run channels-last
#       (conv2d);
#   canonical
#       the rewrite of the attributes torch spells several ways;
#   decompose, decomposes_when
#       the rewrite into loop-IR ops of the nodes the loop IR computes
#       better than ATen, and the test choosing them (Graph/WindowOps.cpp,
#       Graph/ExternOps.cpp);
#   derivative
#       rule("...") (a DerivativeInfo of Graph/ExternDerivatives.cpp) or
#       left out (the backward kernels themselves: no derivative);
#   aten
#       how it runs through ATen (the runtime's extern steps and graph
#       replay): an expression of the operand tensors t, the attributes a,
#       the op and the first result's sizes, or replay("...") naming a
#       function of Torch/TorchExternOps.cpp that gives every result; left
#       out for call_torch, which calls its torch callable instead.

PRODUCT = rule("productRule()")
MAX_POOL = ["kernel_size", "stride", "padding", "dilation", "ceil_mode"]
AVG_POOL = ["kernel_size", "stride", "padding", "ceil_mode",
            "count_include_pad", "divisor_override"]
ATTENTION = ["is_causal", "scale", "has_mask"]

op("mm", arity=2, shape="inferMm", derivative=PRODUCT,
   aten="at::mm(t[0], t[1])")
op("bmm", arity=2, shape="inferBmm", derivative=PRODUCT,
   aten="at::bmm(t[0], t[1])")
# matmul's and addmm's weight_prepacked (a linear layer's weight, a graph
# input, in an inference graph): the torch bridge may keep the weight packed
# for MKL's sgemm, once per parameter version.
op("matmul", arity=2, attributes=["weight_prepacked"], shape="inferMatmul",
   derivative=PRODUCT, aten="at::matmul(t[0], t[1])")
op("addmm", arity=3, attributes=["beta", "alpha", "weight_prepacked"],
   shape="inferAddmm", derivative=PRODUCT,
   aten='at::addmm(t[0], t[1], t[2], number(a, "beta", 1), '
        'number(a, "alpha", 1))')
op("baddbmm", arity=3, attributes=["beta", "alpha"], shape="inferBaddbmm",
   derivative=PRODUCT,
   aten='at::baddbmm(t[0], t[1], t[2], number(a, "beta", 1), '
        'number(a, "alpha", 1))')
# The backward kernels of convolutions, attention and indexing (training).
op("conv_backward", arity=3,
   attributes=["stride", "padding", "dilation", "groups", "output_mask"],
   shape="inferConvBackward", aten=replay("convolutionBackward"))
op("sdpa_flash", arity=-1, attributes=ATTENTION, shape="inferFlashAttention",
   derivative=rule("flashAttentionRule()"), aten=replay("flashAttention"))
op("sdpa_flash_backward", arity=-1, attributes=ATTENTION,
   shape="inferFlashAttentionBackward", aten=replay("flashAttention"))
op("gather_backward", arity=2, attributes=["dim", "shape"],
   shape="inferIndexedBackward", aten="indexedBackward(op, a, t, sizes)")
op("index_select_backward", arity=2, attributes=["dim", "shape"],
   shape="inferIndexedBackward", aten="indexedBackward(op, a, t, sizes)")
op("embedding_backward", arity=2, attributes=["num_weights", "padding_idx"],
   shape="inferEmbeddingBackward", aten="indexedBackward(op, a, t, sizes)")
# conv2d's weight_prepacked (set by the torch bridge on inference graphs
# whose weight is a parameter): the runtime may keep the weight reordered
# into oneDNN's blocked layout, once per parameter version.
op("conv1d", arity=-1, attributes=["stride", "padding", "dilation", "groups"],
   shape="inferConv1d", keeps_channels_last=True,
   derivative=rule("convolutionRule()"), aten="convolution(op, a, t)")
# Depthwise convolutions the loop IR computes as window taps.
op("conv2d", arity=-1,
   attributes=["stride", "padding", "dilation", "groups", "weight_prepacked"],
   shape="inferConv2d", keeps_channels_last=True, starts_channels_last=True,
   decompose="depthwiseAsWindowTaps",
   decomposes_when="depthwiseTakesWindowTaps",
   derivative=rule("convolutionRule()"), aten="convolution(op, a, t)")
# A prepacked convolution with its batch norm and activation folded in
# (fuse-conv-epilogues, inference only: no derivative).
op("conv2d_bn", arity=-1,
   attributes=["stride", "padding", "dilation", "groups", "weight_prepacked",
               "eps", "has_bias", "activation", "min_val", "max_val",
               "residual"],
   shape="inferConvBatchNorm", keeps_channels_last=True,
   starts_channels_last=True, aten="convolutionBatchNorm(a, t)")
op("max_pool2d", arity=1, attributes=MAX_POOL, shape="inferPool",
   keeps_channels_last=True, decompose="maxPoolAsWindowTaps",
   decomposes_when="maxPoolTakesWindowTaps",
   derivative=rule("poolRule(Op::MaxPool2dBackward)"),
   aten='at::max_pool2d(t[0], ints(a, "kernel_size", {1}), '
        'ints(a, "stride", {}), ints(a, "padding", {0}), '
        'ints(a, "dilation", {1}), flag(a, "ceil_mode"))')
op("avg_pool2d", arity=1, attributes=AVG_POOL, shape="inferPool",
   keeps_channels_last=True, decompose="avgPoolAsWindowTaps",
   decomposes_when="avgPoolTakesWindowTaps",
   derivative=rule("poolRule(Op::AvgPool2dBackward)"),
   aten='at::avg_pool2d(t[0], ints(a, "kernel_size", {1}), '
        'ints(a, "stride", {}), ints(a, "padding", {0}), '
        'flag(a, "ceil_mode"), countIncludePad(a), divisorOverride(a))')
# adaptive_avg_pool2d to a 1x1 output is a mean.
op("adaptive_avg_pool2d", arity=1, attributes=["output_size"],
   shape="inferAdaptivePool", keeps_channels_last=True,
   canonical="pairOutputSize", decompose="meanOfPixels",
   decomposes_when="poolsToOnePixel",
   derivative=rule("poolRule(Op::AdaptiveAvgPool2dBackward)"),
   aten='at::adaptive_avg_pool2d(t[0], ints(a, "output_size", {1}))')
op("max_pool2d_with_indices", arity=1, attributes=MAX_POOL,
   shape="inferPoolWithIndices", keeps_channels_last=True,
   derivative=rule("poolRule(Op::MaxPool2dBackward, /*savedIndices=*/true)"),
   aten=replay("maxPoolWithIndices"))
op("max_pool2d_backward", arity=-1, attributes=MAX_POOL,
   shape="inferPoolBackward", keeps_channels_last=True,
   aten="poolBackward(op, a, t)")
op("avg_pool2d_backward", arity=2, attributes=AVG_POOL,
   shape="inferPoolBackward", keeps_channels_last=True,
   aten="poolBackward(op, a, t)")
op("adaptive_avg_pool2d_backward", arity=2, attributes=["output_size"],
   shape="inferPoolBackward", keeps_channels_last=True,
   aten="poolBackward(op, a, t)")
# A torch callable kept inside the graph (TorchCall). "in_place_form": the
# in-place method the user called, when the callable is its out-of-place
# form; "in_place" (loop IR): the runtime calls that form on the caller's
# tensor (Loop/InPlaceUpdates.h). Its derivative is a call_torch of the same
# callable with "grad_inputs" (the operands whose gradients it returns) and
# "grad_outputs" (the results whose gradients follow the operands): the
# runtime differentiates the callable with torch's autograd.
op("call_torch", arity=-1,
   attributes=["target", "call", "signature", "results", "in_place_form",
               "in_place", "grad_inputs", "grad_outputs"],
   shape="inferTorchCall", derivative=rule("torchCallRule()"))
