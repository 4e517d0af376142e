"""Dynafuse settings.

Every setting comes from one environment variable, read once, by the
compiler core, when dynafuse is imported (README.md has the same table):

=============================  ==========  ====================================
Variable                       Default     Meaning
=============================  ==========  ====================================
DYNAFUSE_LOG                   (none)      comma-separated log channels on
                                           stderr: graph_breaks, guards,
                                           recompiles, compile, steps,
                                           profile, or all
DYNAFUSE_DUMP_DIR              (none)      folder that receives, per compiled
                                           graph, the text of every stage
DYNAFUSE_RECOMPILE_LIMIT       8           compilations per code object before
                                           it runs eagerly for good
DYNAFUSE_RESUME_AFTER_BREAKS   1           0: a graph break runs its frame
                                           eagerly instead of compiling the
                                           graph before it and resuming after
                                           it
DYNAFUSE_AUTOMATIC_DYNAMIC     1           0: dynamic=None compiles every
                                           new size statically instead of
                                           making the dims whose size
                                           changed symbolic
DYNAFUSE_DISK_CACHE            1           0 turns the on-disk kernel cache off
DYNAFUSE_CACHE_DIR             $XDG_CACHE_HOME/dynafuse or ~/.cache/dynafuse
                                           folder of the on-disk kernel cache
DYNAFUSE_NUM_THREADS           (none)      threads of Dynafuse's own pool;
                                           unset: torch's intra-op threads
                                           (outside Python: the hardware's
                                           count)
DYNAFUSE_PARALLEL_THRESHOLD    32768       innermost iterations below which a
                                           kernel runs on one thread
DYNAFUSE_VECTOR_WIDTH          (none)      LLVM prefer-vector-width for
                                           kernels; unset: 512 on AVX-512,
                                           else LLVM's choice
DYNAFUSE_HUGE_PAGES            off         large blocks on huge pages: off,
                                           hugetlb (the reserved pool), thp
DYNAFUSE_GUARD_PAGES           0           1: every block Dynafuse allocates is
                                           fenced by guard pages and never
                                           reused; all: torch's CPU
                                           allocations too
DYNAFUSE_CACHING_ALLOCATOR     1           0: tensors Dynafuse creates come
                                           from at::empty, not the pool
DYNAFUSE_PREPACK_WEIGHTS       1           0: inference convolutions and
                                           linear layers keep no packed copy
                                           of their weights (oneDNN and MKL
                                           pack them on every call; less
                                           memory, slower)
DYNAFUSE_GEMM_LIBRARY          auto        library running the float32
                                           matrix products of inference
                                           graphs: mkl (packed sgemm for
                                           linear layers, ATen's for the
                                           rest), onednn, or auto (MKL on
                                           Intel CPUs, oneDNN elsewhere)
DYNAFUSE_FOLD_BATCH_NORM       1           0: prepacked convolutions leave
                                           their batch norm and activation
                                           to a fused kernel instead of
                                           folding them into oneDNN's call
DYNAFUSE_ALLOCATION_PLAN       1           0: a compiled run's large blocks
                                           are placed by the pool's heap as
                                           they come instead of by a plan
                                           made from an earlier run
DYNAFUSE_ALLOCATOR_CACHE_MB    2048        most megabytes of freed blocks the
                                           pool keeps
DYNAFUSE_ALLOCATOR_IDLE_S      10          seconds after which an unused
                                           cached block is unmapped
DYNAFUSE_NVRTC                 (none)      path of libnvrtc, the only one
                                           tried; unset: the build's, then
                                           libnvrtc.so.13
DYNAFUSE_CUDA_INCLUDE          (none)      include folders NVRTC searches
                                           first (;-separated)
=============================  ==========  ====================================

The five attributes below start from their variables and can be changed at
run time; changes apply to the next compiled call. The others are fixed for
the process once dynafuse is imported. ``variables()`` lists them all as the
core knows them (name, default, meaning).
"""
from . import _C

_from_environment = _C.environment_options()

#: Folder that receives, per compiled graph, the text of every stage.
dump_dir = _from_environment["dump_dir"]
#: Compilations per code object before it runs eagerly for good.
recompile_limit = _from_environment["recompile_limit"]
#: Whether a graph break resumes after itself (else its frame runs eagerly).
resume_after_breaks = _from_environment["resume_after_breaks"]
#: Comma-separated log topics: graph_breaks, guards, recompiles, compile,
#: steps, profile, all.
log = _from_environment["log"]
#: dynamic=None's policy: a dim whose size changed between calls becomes
#: symbolic at the next capture (False: every new size compiles statically).
automatic_dynamic_shapes = _from_environment["automatic_dynamic_shapes"]

_applied = None

#: The settings above, which compile(options=...) also accepts.
SETTINGS = ("dump_dir", "recompile_limit", "resume_after_breaks", "log",
            "automatic_dynamic_shapes")
_SETTING_TYPES = {"dump_dir": (str, type(None)), "recompile_limit": int,
                  "resume_after_breaks": bool, "log": (str, type(None)),
                  "automatic_dynamic_shapes": bool}


def variables():
    """Every DYNAFUSE_* variable as (name, default, meaning)."""
    return _C.option_variables()


def check_options(options):
    """Validates compile(options=...): a dict of settings named in
    SETTINGS, each of its type; returns a copy."""
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise TypeError(f"options must be a dict of dynafuse settings, got {type(options).__name__}")
    checked = {}
    for name, value in options.items():
        if name not in _SETTING_TYPES:
            raise ValueError(f"unknown dynafuse option {name!r}; valid options: {', '.join(SETTINGS)}")
        expected = _SETTING_TYPES[name]
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            names = " or ".join(t.__name__ for t in (expected if isinstance(expected, tuple) else (expected,)))
            raise TypeError(f"dynafuse option {name!r} must be {names}, got {value!r}")
        if name == "recompile_limit" and value < 0:
            raise ValueError(f"dynafuse option 'recompile_limit' must be >= 0, got {value}")
        checked[name] = value
    return checked


#: The settings in the order the core's configure() and compiler_config()
#: take them.
_ORDER = ("dump_dir", "recompile_limit", "log", "resume_after_breaks",
          "automatic_dynamic_shapes")


def _current():
    """The settings as they are now, in _ORDER (read on every compiled
    call: a tuple, converted only when it changed)."""
    return (dump_dir, recompile_limit, log, resume_after_breaks, automatic_dynamic_shapes)


def _arguments(values):
    """Settings in _ORDER as the core takes them."""
    dump, limit, topics, resume, automatic = values
    return (str(dump or ""), int(limit), str(topics or ""), bool(resume), bool(automatic))


def _apply(core, skip_prefixes):
    """Hands the settings to the C++ core when they changed."""
    global _applied
    state = _current()
    if state == _applied:
        return
    core.configure(skip_prefixes, *_arguments(state))
    _applied = state


def _config_for(core, overrides, cache):
    """The core's configuration for a callable compiled with options:
    these settings over the current ones (cache: the callable's, by the
    current settings)."""
    state = _current()
    config = cache.get(state)
    if config is None:
        merged = tuple(overrides.get(name, value) for name, value in zip(_ORDER, state))
        config = cache[state] = core.compiler_config(*_arguments(merged))
    return config
