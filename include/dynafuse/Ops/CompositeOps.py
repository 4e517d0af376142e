# CompositeOps.py - The definitions of the composite ops.
#
# Ops the decompose pass rewrites into other ops before lowering
# (Graph/CompositeOps.cpp holds the rewrites they name). One op(...) per op
# (see PointwiseOps.py for the generator); a composite's facets:
#   arity, attributes, decompose, floating_only
#       the registry entry: operand count (-1: a variable count), the
#       Decomposition, and whether it takes floating inputs only (default
#       True; its result types come from decomposing it);
#   derivative
#       rule("...") (a DerivativeInfo of Graph/CompositeDerivatives.cpp),
#       "decomposed" (differentiated through its decomposition) or left out
#       (no derivative yet: capture breaks before differentiating it);
#   aten
#       graph replay's ATen fallback: an expression of t and node, or
#       replay("...") naming a ReplayRule of Torch/TorchGraphReplay.cpp;
#       left out where the decomposition replays.

REDUCING = ["dim", "dims", "keepdim"]
op("mean", arity=1, attributes=REDUCING + ["dtype"], decompose="decomposeMean",
   derivative="decomposed")
op("var", arity=1, attributes=REDUCING + ["correction"],
   decompose="decomposeVar", derivative=rule("varianceRule(false)"),
   aten=replay("spreadReplay"))
op("std", arity=1, attributes=REDUCING + ["correction"],
   decompose="decomposeStd", derivative=rule("varianceRule(true)"),
   aten=replay("spreadReplay"))
op("logsumexp", arity=1, attributes=REDUCING,
   decompose="decomposeLogSumExp", floating_only=False,
   derivative="decomposed")
# norm: its gradient at zero needs eager's special case.
op("norm", arity=1, attributes=["p"] + REDUCING, decompose="decomposeNorm")
op("softmax", arity=1, attributes=["dim"], decompose="decomposePlainSoftmax",
   derivative=rule("softmaxRule(false)"),
   aten='at::softmax(t[0], node.intAttr("dim", -1))')
op("log_softmax", arity=1, attributes=["dim"],
   decompose="decomposeLogSoftmax", derivative=rule("softmaxRule(true)"),
   aten='at::log_softmax(t[0], node.intAttr("dim", -1))')
op("layer_norm", arity=-1,
   attributes=["normalized_shape", "eps", "has_weight", "has_bias"],
   decompose="decomposeLayerNorm", derivative=rule("normRule(true)"),
   aten=replay("layerNormReplay"))
op("rms_norm", arity=-1, attributes=["normalized_shape", "eps", "has_weight"],
   decompose="decomposeRmsNorm", derivative=rule("normRule(false)"),
   aten=replay("rmsNormReplay"))
op("group_norm", arity=-1,
   attributes=["num_groups", "eps", "has_weight", "has_bias"],
   decompose="decomposeGroupNorm", derivative="decomposed")
op("batch_norm", arity=-1, attributes=["eps", "has_weight", "has_bias"],
   decompose="decomposeBatchNorm", derivative="decomposed")
op("batch_norm_train", arity=-1, attributes=["eps", "has_weight", "has_bias"],
   decompose="decomposeBatchNormTrain",
   derivative=rule("batchNormTrainRule()"),
   aten=replay("batchNormTrainReplay"))
op("nll_loss", arity=2, attributes=["ignore_index", "reduction"],
   decompose="decomposeNllLoss", derivative="decomposed")
op("cross_entropy", arity=2, attributes=["ignore_index", "reduction"],
   decompose="decomposeCrossEntropy", derivative="decomposed")
op("linear", arity=-1, attributes=["weight_prepacked"],
   decompose="decomposeLinear", derivative="decomposed")
op("stack", arity=-1, attributes=["dim"], decompose="decomposeStack",
   floating_only=False, derivative="decomposed")
# In-graph dropout: capture emits training dropout as uniform + where.
op("dropout", arity=1, attributes=["p", "training"],
   decompose="decomposeDropout", floating_only=False)
