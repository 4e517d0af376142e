# lit configuration for Dynafuse's textual IR tests.
import os
import sys

import lit.formats

config.name = "Dynafuse"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".graph", ".loop", ".ops"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.dynafuse_build_dir, "test", "lit")
config.substitutions.append(("dynafuse-opt", config.dynafuse_opt))
config.substitutions.append(("dynafuse-diff", config.dynafuse_diff))
config.substitutions.append(("FileCheck", config.filecheck + " --enable-var-scope"))
config.substitutions.append(("not ", config.not_tool + " "))
# The op generator (tools/dynafuse-opgen), run by the Python running lit.
_opgen = os.path.join(config.test_source_root, "..", "..", "tools",
                      "dynafuse-opgen", "dynafuse-opgen.py")
config.substitutions.append(("%opgen", f"{sys.executable} {os.path.abspath(_opgen)}"))
if config.llvm_enabled:
    config.available_features.add("llvm")
# "mlir": the MLIR export and backend are built (--emit=mlir); MLIR's own
# mlir-opt (mlir-16-tools) verifies what it prints.
if config.mlir_enabled:
    config.available_features.add("mlir")
    config.substitutions.append(("mlir-opt", config.mlir_opt))
# "cuda": the CUDA backend is built (--emit=cuda, --emit=ptx through NVRTC).
if config.cuda_enabled:
    config.available_features.add("cuda")
# NVRTC, the cache directory and the runtime's debugging and threading
# settings reach the tests through the environment.
for name in ("DYNAFUSE_NVRTC", "DYNAFUSE_CACHE_DIR", "DYNAFUSE_DISK_CACHE", "HOME",
             "DYNAFUSE_GUARD_PAGES", "DYNAFUSE_NUM_THREADS"):
    if name in os.environ:
        config.environment[name] = os.environ[name]
# "nvrtc": NVRTC also loads (probed by compiling a tiny kernel to PTX).
if config.cuda_enabled:
    import subprocess

    probe = subprocess.run(
        [config.dynafuse_opt, "-", "--emit=ptx"],
        input="kernel @probe(%x: f32[1]) {\n}\n",
        capture_output=True,
        text=True,
        env=dict(os.environ, DYNAFUSE_DISK_CACHE="0"),
    )
    if probe.returncode == 0 and ".entry" in probe.stdout:
        config.available_features.add("nvrtc")
    else:
        lit_config.note("NVRTC unavailable, skipping PTX tests: " + probe.stderr.strip())
