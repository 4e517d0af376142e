"""Dynafuse settings. Each starts from an environment variable and can be
changed at run time; changes apply to the next compiled call."""
import os

#: Folder that receives, per compiled graph, the text of every stage.
dump_dir = os.environ.get("DYNAFUSE_DUMP_DIR", "")
#: Compilations per code object before it runs eagerly for good.
recompile_limit = int(os.environ.get("DYNAFUSE_RECOMPILE_LIMIT", "8"))
#: Comma-separated log topics: graph_breaks, guards, recompiles, compile, all.
log = os.environ.get("DYNAFUSE_LOG", "")

_applied = None


def _apply(core, skip_prefixes):
    """Hands the settings to the C++ core when they changed."""
    global _applied
    state = (dump_dir, recompile_limit, log)
    if state == _applied:
        return
    core.configure(str(dump_dir or ""), int(recompile_limit), skip_prefixes, str(log))
    _applied = state
