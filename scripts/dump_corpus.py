"""Dumps what the compiler makes of a broad corpus into one folder, so that a
refactoring that must not change behaviour can be checked byte for byte:

    .venv/bin/python scripts/dump_corpus.py /tmp/before      # on the old tree
    .venv/bin/python scripts/dump_corpus.py /tmp/after       # on the new one
    diff -r /tmp/before /tmp/after

It writes
- lit/<test>.<n>.out: the output of each RUN line of test/lit up to its first
  pipe (dynafuse-opt and dynafuse-diff on the lit corpus);
- models/<name>/: DYNAFUSE_DUMP_DIR's dumps (graph, loop IR, LLVM IR,
  assembly) of the models of benchmarks/graph_counts.py (15 torchvision
  models and hand-written transformer blocks) and of the transformers models
  of benchmarks/library_models.py;
- fuzz/<mode>-<seed>-<index>/: the dumps of random programs
  (test/fuzz/programs.py) in inference and in training.
Paths of the build and of the corpus are replaced by placeholders.
"""
import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"


def run_lines(path):
    """The RUN lines of a lit test, continuation lines joined."""
    lines, current = [], ""
    for line in path.read_text().splitlines():
        match = re.search(r"RUN:\s?(.*)$", line)
        if not match:
            continue
        text = match.group(1)
        if text.rstrip().endswith("\\"):
            current += text.rstrip()[:-1] + " "
            continue
        lines.append(current + text)
        current = ""
    return lines


def dump_lit(out):
    tools = {"dynafuse-opt": BUILD / "tools" / "dynafuse-opt" / "dynafuse-opt",
             "dynafuse-diff": BUILD / "tools" / "dynafuse-diff" / "dynafuse-diff"}
    for name, path in list(tools.items()):
        if not path.exists():
            found = list(BUILD.rglob(name))
            tools[name] = found[0] if found else path
    for test in sorted((ROOT / "test" / "lit").rglob("*")):
        if test.suffix not in (".graph", ".loop"):
            continue
        relative = test.relative_to(ROOT / "test" / "lit")
        for number, line in enumerate(run_lines(test)):
            command = line.split("|", 1)[0].strip()
            if not re.search(r"\bdynafuse-(opt|diff)\b", command):
                continue
            command = re.sub(r"^not\s+", "", command).replace("%s", str(test))
            command = command.replace("%t", "/tmp/dump_corpus_t")
            for name, path in tools.items():
                command = re.sub(rf"(?<![\w/-]){name}\b", str(path), command)
            result = subprocess.run(command, shell=True, capture_output=True, text=True,
                                    env=dict(os.environ, DYNAFUSE_DISK_CACHE="0"))
            text = (result.stdout + "\n--- stderr ---\n" + result.stderr
                    + f"\n--- exit {result.returncode} ---\n")
            target = out / "lit" / f"{relative}.{number}.out"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text.replace(str(ROOT), "<root>"))


def compile_and_run(dynafuse, torch, name, module, args, kwargs, out):
    dynafuse.reset()
    dynafuse.config.dump_dir = str(out / "models" / name)
    compiled = dynafuse.compile(module)
    with torch.no_grad():
        compiled(*args, **kwargs)


def dump_models(out, with_transformers):
    import torch
    import dynafuse
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import graph_counts
    import library_models
    for name, make, shape in graph_counts.models(None):
        torch.manual_seed(0)
        compile_and_run(dynafuse, torch, re.sub(r"\W+", "_", name), make(),
                        (torch.randn(shape),), {}, out)
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("transformers is not installed: its models are not dumped")
        with_transformers = False
    if with_transformers:
        for name, make, inputs in library_models.transformers_models(None):
            torch.manual_seed(0)
            args, kwargs = inputs()
            compile_and_run(dynafuse, torch, re.sub(r"\W+", "_", name), make(), args, kwargs,
                            out)
    dynafuse.config.dump_dir = None


def dump_fuzz(out, count):
    import dynafuse
    sys.path.insert(0, str(ROOT / "test" / "fuzz"))
    import oracle
    import programs
    for mode in ("inference", "training"):
        for index in range(count):
            program = programs.generate(1, index, mode)
            dynafuse.config.dump_dir = str(out / "fuzz" / f"{mode}-1-{index}")
            try:
                oracle.check(program)
            except Exception as error:  # a harness error is recorded, not fatal
                (out / "fuzz").mkdir(parents=True, exist_ok=True)
                (out / "fuzz" / f"{mode}-1-{index}.error").write_text(repr(error))
    dynafuse.config.dump_dir = None


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--fuzz-programs", type=int, default=300)
    parser.add_argument("--skip-models", action="store_true")
    parser.add_argument("--skip-transformers", action="store_true")
    args = parser.parse_args()
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    os.environ["DYNAFUSE_DISK_CACHE"] = "0"
    dump_lit(args.out)
    if not args.skip_models:
        dump_models(args.out, not args.skip_transformers)
    dump_fuzz(args.out, args.fuzz_programs)
    files = sum(1 for path in args.out.rglob("*") if path.is_file())
    print(f"{files} files under {args.out}")


if __name__ == "__main__":
    main()
