"""The op definitions (include/dynafuse/Ops) and the Python binding
(python/dynafuse/ops) agree: every graph op the binding names is defined
(the core also refuses an unknown one when the tables load), and every
defined op is either bound to torch callables or one of the ops only the
compiler itself emits, each listed with why, so that a new op without a
binding is a decision rather than an oversight."""
import dynafuse
import dynafuse.ops

# Ops no torch callable binds directly: the compiler emits them.
COMPILER_ONLY = {
    # backward kernels, emitted by the derivative rules
    "adaptive_avg_pool2d_backward", "avg_pool2d_backward", "conv_backward",
    "embedding_backward", "gather_backward", "index_select_backward",
    "max_pool2d_backward", "sdpa_flash_backward",
    # emitted by capture for what a call does in training (batch norm with
    # running statistics, dropout's random numbers, attention that needs
    # its logsumexp, max pooling that saves its indices)
    "batch_norm_train", "uniform", "sdpa_flash", "max_pool2d_with_indices",
    # a torch callable kept whole inside the graph (TorchCall)
    "call_torch",
    # fuse-conv-epilogues' prepacked convolution with batch norm folded in
    "conv2d_bn",
    # div(rounding_mode="trunc") and slicing: capture picks them from the
    # call's arguments (div's rounding_mode, x[a:b])
    "div_trunc", "slice",
}
# Entries of the binding that are not graph ops: capture writes unflatten as
# a reshape ("overload" entries are walked into their alternatives).
BINDING_ONLY = {"unflatten"}


def _bound_ops():
    bound = set()

    def walk(spec):
        op, params = spec[0], spec[1]
        if op == "overload":
            for alternative in params:
                walk(alternative)
        else:
            bound.add(op)

    for table in (dynafuse.ops.FUNCTIONS, dynafuse.ops.METHODS):
        for spec in table.values():
            walk(spec)
    return bound


def test_every_bound_op_is_defined():
    defined = set(dynafuse._C.graph_ops())
    assert len(defined) == len(dynafuse._C.graph_ops())  # no name twice
    assert _bound_ops() - defined == BINDING_ONLY


def test_every_defined_op_is_bound_or_emitted_by_the_compiler():
    defined = set(dynafuse._C.graph_ops())
    assert COMPILER_ONLY <= defined
    assert defined - _bound_ops() == COMPILER_ONLY
