"""Dynafuse settings.

Every setting comes from one environment variable, read once, by the
compiler core, when dynafuse is imported. The core lists them once
(include/dynafuse/Support/Settings.def); ``variables()`` gives them as
(name, default, meaning), ``markdown_table()`` as README.md's Settings
table.

The settings with an attribute here start from their variables and can be
changed at run time (changes apply to the next compiled call), and
compile(options=...) accepts them by the same names:

- ``dump_dir``: folder that receives, per compiled graph, the text of every
  stage (DYNAFUSE_DUMP_DIR);
- ``recompile_limit``: compilations per code object before it runs eagerly
  for good (DYNAFUSE_RECOMPILE_LIMIT);
- ``resume_after_breaks``: whether a graph break resumes after itself, else
  its frame runs eagerly (DYNAFUSE_RESUME_AFTER_BREAKS);
- ``log``: comma-separated log topics (DYNAFUSE_LOG);
- ``automatic_dynamic_shapes``: dynamic=None's policy, a dim whose size
  changed between calls becomes symbolic at the next capture
  (DYNAFUSE_AUTOMATIC_DYNAMIC).

The others are fixed for the process once dynafuse is imported.
"""
import operator

from . import _C

#: Every variable as the core lists it: (name, default, meaning, attribute
#: name here or "").
_VARIABLES = tuple(_C.option_variables())
_from_environment = _C.environment_options()

#: The settings changed at run time, which compile(options=...) also
#: accepts: the core's list decides which they are.
SETTINGS = tuple(_from_environment)
globals().update(_from_environment)

#: The type each setting's value takes (text settings also take None).
_SETTING_TYPES = {name: (str, type(None)) if isinstance(value, str) else type(value)
                  for name, value in _from_environment.items()}
#: How an attribute's value is handed to the core: as its type (an
#: attribute set to 0 or 1 for a switch, or to None for a text, works as it
#: always has; compile(options=...) is checked strictly by check_options).
_COERCE = {name: (lambda value: str(value or "")) if isinstance(start, str) else type(start)
           for name, start in _from_environment.items()}

_applied = None
_read_settings = operator.itemgetter(*SETTINGS)


def _state():
    """The settings as they are now, in SETTINGS' order: read on every
    compiled call (a tuple, compared with the last one handed to the
    core)."""
    return _read_settings(globals())


def variables():
    """Every DYNAFUSE_* variable as (name, default, meaning)."""
    return [(name, default, meaning) for name, default, meaning, _ in _VARIABLES]


def markdown_table():
    """README.md's Settings table, made from the core's list."""
    rows = ["| Variable | Default | Meaning |", "| --- | --- | --- |"]
    for name, default, meaning, _ in _VARIABLES:
        shown = "(none)" if not default else (
            " or ".join(f"`{part}`" for part in default.split(" or ")))
        rows.append(f"| `{name}` | {shown} | {meaning} |")
    return "\n".join(rows)


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
            raise ValueError(f"unknown dynafuse option {name!r}; valid options: {', '.join(sorted(SETTINGS))}")
        expected = _SETTING_TYPES[name]
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            names = " or ".join(t.__name__ for t in (expected if isinstance(expected, tuple) else (expected,)))
            raise TypeError(f"dynafuse option {name!r} must be {names}, got {value!r}")
        if expected is int and value < 0:
            raise ValueError(f"dynafuse option {name!r} must be >= 0, got {value}")
        checked[name] = value
    return checked


def _settings(values):
    """Settings in SETTINGS' order as the core takes them: a dict by name."""
    return {name: _COERCE[name](value) for name, value in zip(SETTINGS, values)}


def _apply(core, skip_prefixes):
    """Hands the settings to the C++ core when they changed."""
    global _applied
    state = _state()
    if state == _applied:
        return
    core.configure(skip_prefixes, _settings(state))
    _applied = state


def _config_for(core, overrides, cache):
    """The core's configuration for a callable compiled with options:
    these settings over the current ones (cache: the callable's, by the
    current settings)."""
    state = _state()
    config = cache.get(state)
    if config is None:
        merged = tuple(overrides.get(name, value) for name, value in zip(SETTINGS, state))
        config = cache[state] = core.compiler_config(_settings(merged))
    return config
