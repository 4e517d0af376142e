"""What dynafuse.compile returns: a compiled function or a compiled module.

Both hold their compile settings (CompileSettings) and hand them to the
C++ core on every call: the backend, fullgraph, dynamic, and the
configuration built from compile(options=...) over dynafuse.config. A
compiled module behaves as the module it wraps: attributes, state_dict()
and the parameters' names are the original's (as torch.compile's
OptimizedModule).
"""
import dataclasses
import functools
import itertools
import os
import sysconfig
import weakref

import torch

from . import _C, config


def _skip_prefixes():
    """Code the frame hook leaves alone: torch, dynafuse and the standard
    library (but not packages installed beside it)."""
    prefixes = [os.path.dirname(torch.__file__) + os.sep,
                os.path.dirname(__file__) + os.sep]
    stdlib = sysconfig.get_paths()["stdlib"]
    for entry in sorted(os.listdir(stdlib)):
        if entry not in ("site-packages", "dist-packages"):
            prefixes.append(os.path.join(stdlib, entry))
    return prefixes


SKIP_PREFIXES = _skip_prefixes()

#: torch.compile's modes, and what each does in Dynafuse (docs/torch-compile.md).
MODES = {
    "default": "fused LLVM (or NVRTC) kernels, ATen for GEMMs and convolutions",
    "reduce-overhead": "as default: the CPU path launches no kernels to batch, "
                       "and the CUDA backend does not use CUDA graphs yet",
    "max-autotune": "as default: Dynafuse has no autotuner yet; kernels use "
                    "the cost model's choices",
    "max-autotune-no-cudagraphs": "as max-autotune",
}


@dataclasses.dataclass(frozen=True)
class CompileSettings:
    """dynafuse.compile's arguments, checked."""
    backend: str = "auto"
    fullgraph: bool = False
    dynamic: object = None
    mode: str = "default"
    options: tuple = ()  # (name, value) pairs of dynafuse.config settings

    @staticmethod
    def checked(backend, fullgraph, dynamic, mode, options):
        backends = _C.backend_choices()
        if backend not in backends:
            raise ValueError(f"unknown backend {backend!r}; choose one of {backends}")
        if dynamic not in (None, True, False):
            raise ValueError(f"dynamic must be None, True or False, got {dynamic!r}")
        if mode is None:
            mode = "default"
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose one of {sorted(MODES)} or None")
        if fullgraph not in (True, False):
            raise ValueError(f"fullgraph must be True or False, got {fullgraph!r}")
        checked = config.check_options(options)
        return CompileSettings(backend, bool(fullgraph), dynamic, mode,
                               tuple(sorted(checked.items())))


class _CallConfig:
    """The core's configuration for one compiled callable: None (the
    module's, dynafuse.config's) without options, else interned per
    effective settings."""

    def __init__(self, settings):
        self.overrides = dict(settings.options)
        self.configs = {}

    def current(self):
        config._apply(_C, SKIP_PREFIXES)
        if not self.overrides:
            return None
        return config._config_for(_C, self.overrides, self.configs)


def compiled_function(fn, settings):
    target = getattr(fn, "__code__", None)
    call_config = _CallConfig(settings)

    @functools.wraps(fn)
    def compiled(*args, **kwargs):
        return _C.call(fn, args, kwargs or None, settings.backend, settings.fullgraph,
                       target, None, settings.dynamic, call_config.current())

    compiled._dynafuse_original = fn
    compiled._dynafuse_settings = settings
    return compiled


_GLOBAL_HOOK_DICTS = ("_global_forward_hooks", "_global_forward_pre_hooks",
                      "_global_backward_hooks", "_global_backward_pre_hooks",
                      "_global_forward_hooks_always_called")


def _global_module_hooks():
    """Whether any global nn.Module hook is registered (they run around
    every module call, the wrapper's included)."""
    hooks = torch.nn.modules.module
    return any(getattr(hooks, name, None) for name in _GLOBAL_HOOK_DICTS)


def _compiled_part(module):
    """The module whose forward compiling `module` captures: under
    DistributedDataParallel wrappers, the module they wrap (DDP's own forward
    runs eagerly, as under TorchDynamo: its gradient hooks and reducer stay
    eager's, and the wrapped module's forward is the compile target)."""
    from torch.nn.parallel import DistributedDataParallel
    while isinstance(module, DistributedDataParallel):
        module = module.module
    return module


def _call_module(module, *args, **kwargs):
    return module(*args, **kwargs)


_module_callers = weakref.WeakKeyDictionary()


def _module_caller(module_type):
    """A function calling its first argument, of a code object of its own
    per module class: the frame a compiled module's calls are captured
    from. The module's call (its hooks, then its forward) is traced inside
    it, so a call runs none of nn.Module's call machinery in Python. As
    with the forward's own code object, instances of one class share its
    entries (guarded by type, weights as inputs) and its recompile limit."""
    caller = _module_callers.get(module_type)
    if caller is None:
        # Named after the class: dumps, explain() and stats name the module.
        qualname = getattr(module_type, "__qualname__", module_type.__name__)
        code = _call_module.__code__.replace(co_name="__call__",
                                             co_qualname=qualname + ".__call__")
        caller = type(_call_module)(code, _call_module.__globals__, "__call__")
        _module_callers[module_type] = caller
    return caller


def _first_parameter_or_buffer(module):
    """What backend "auto" looks at when no argument is a tensor: the
    module's first parameter or buffer (None when it has neither)."""
    return next(itertools.chain(module.parameters(), module.buffers()), None)


class CompiledModule(torch.nn.Module):
    """Wraps a module; calling it runs the module under the frame hook.
    Attribute reads, state_dict(), load_state_dict() and the names of
    parameters and buffers are the wrapped module's (load_state_dict also
    takes torch.compile's "_orig_mod."-prefixed keys).

    A call goes to forward without nn.Module's call machinery when the
    wrapper has no hooks of its own (hooks on the wrapped module run, traced
    with it). Under DistributedDataParallel wrappers, DDP's forward runs
    eagerly and the module under it is the captured frame (_compiled_part)."""

    def __init__(self, module, settings):
        super().__init__()
        self._orig_mod = module
        self._dynafuse_settings = settings
        self._dynafuse_call_config = _CallConfig(settings)

    def _run(self):
        """What a call runs, bound once per wrapper (a copy of the wrapper,
        whose dict holds the original's, binds its own)."""
        bound = self.__dict__.get("_dynafuse_run")
        if bound is None or bound[0]() is not self:
            bound = self.__dict__["_dynafuse_run"] = (weakref.ref(self), self._runner())
        return bound[1]

    def _runner(self):
        """What a call runs, with everything fixed per module bound once:
        the frame to capture, the settings, the device probe."""
        module = self._orig_mod
        settings = self._dynafuse_settings
        current_config = self._dynafuse_call_config.current
        # Nothing bound here refers to the wrapper, which holds this runner:
        # a wrapper (and its module's memory) goes when its last reference
        # does, not at the next cycle collection.
        first_tensor = (functools.partial(_first_parameter_or_buffer, module)
                        if settings.backend == "auto" else None)
        backend, fullgraph, dynamic = settings.backend, settings.fullgraph, settings.dynamic
        call = _C.call
        part = _compiled_part(module)
        if part is not module:  # DDP's forward runs eagerly around it
            function, leading = module, ()
            target = getattr(type(part).forward, "__code__", None)
        else:
            function = _module_caller(type(module))
            leading, target = (module,), function.__code__

        def run(args, kwargs):
            return call(function, leading + args, kwargs or None, backend, fullgraph,
                        target, first_tensor, dynamic, current_config())
        return run

    def __call__(self, *args, **kwargs):
        if (self._forward_hooks or self._forward_pre_hooks or self._backward_hooks
                or self._backward_pre_hooks or _global_module_hooks()):
            return super().__call__(*args, **kwargs)
        return self._run()(args, kwargs)

    def forward(self, *args, **kwargs):
        return self._run()(args, kwargs)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "_orig_mod":
                raise
            return getattr(self._modules["_orig_mod"], name)

    def state_dict(self, *args, **kwargs):
        return self._orig_mod.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict=True, assign=False):
        prefix = "_orig_mod."
        if state_dict and all(key.startswith(prefix) for key in state_dict):
            state_dict = type(state_dict)((key[len(prefix):], value)
                                          for key, value in state_dict.items())
        return self._orig_mod.load_state_dict(state_dict, strict=strict, assign=assign)

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        return self._orig_mod.named_parameters(prefix, recurse, remove_duplicate)

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        return self._orig_mod.named_buffers(prefix, recurse, remove_duplicate)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(dir(self._orig_mod)))

    def __repr__(self):
        return f"dynafuse.CompiledModule({self._orig_mod!r})"
