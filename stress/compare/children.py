"""Measuring in fresh child processes. Every measurement runs in a child: one per
workload and *kind* (a malloc setting, or "torch": PyTorch alone, `--torch-only`),
scheduled by `stress.compare.schedule`; with `--python ft|PATH` one per workload and
interpreter, the two interpreters' children back to back, which one goes first
alternating from workload to workload, so machine drift hits both alike.

A child is `python -m stress.compare ... --raw-out FILE` (the measurement options of
the parent, one setting, its workloads) run from the repository root with the root on
PYTHONPATH: `stress` is not installed, and another interpreter has its own
site-packages anyway.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from .measure import SETTINGS
from .report import log
from .targets import evaluate_targets

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MALLOC_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
# options the parent handles itself (with their values): not passed on to a child
_NOT_PASSED_ON = ("--out", "--plot", "--allocator", "--raw-out", "--python", "--workloads",
                  "--timeline", "--reps", "--budget", "--report")
_FLAGS_NOT_PASSED_ON = ("--check", "--timing-only", "--torch-only", "--numpy-scaling",
                        "--no-plot", "--no-torch")
TORCH = "torch"  # the kind of the PyTorch child


def passed_on(argv) -> list:
    """The parent's arguments a child gets: the measurement options, without the output,
    plot and selection options (`--opt VALUE` and `--opt=VALUE` alike)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in _NOT_PASSED_ON:
            skip = True
        elif a in _FLAGS_NOT_PASSED_ON:
            pass
        elif a.split("=")[0] not in _NOT_PASSED_ON:
            out.append(a)
    return out


def child_env(other_python: bool) -> dict:
    """This environment without the malloc variables, the repository root first on
    PYTHONPATH; for another interpreter also without PYTHON_GIL (=0 would force the GIL
    off even past an extension that needs it, see the Makefile's FT_RUN)."""
    env = {k: v for k, v in os.environ.items() if k not in MALLOC_ENV}
    if other_python:
        env.pop("PYTHON_GIL", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    return env


def run_child(args, kind: str, argv, python=None, workloads=None, reps=None,
              extra=()) -> dict:
    """Run one kind (a malloc setting, or TORCH: PyTorch alone, under the default one) in
    a fresh interpreter (clean heap, its own malloc settings): `python` (default this
    one), on `workloads` (default all selected), `reps` rounds (default `args.reps`),
    with `extra` arguments (e.g. --timing-only). Returns the child's raw JSON."""
    fd, path = tempfile.mkstemp(suffix=".json", prefix=f"compare-{kind}-")
    os.close(fd)
    setting = ("default", "--torch-only") if kind == TORCH else (kind,)
    cmd = [python or sys.executable, "-m", "stress.compare", *passed_on(argv),
           "--allocator", *setting, "--workloads", ",".join(workloads or args.workloads),
           "--reps", str(reps or args.reps), "--timeline", args.timeline, *extra,
           # the parent's --no-torch, or set by it when torch is missing (said once there)
           *(("--no-torch",) if args.no_torch else ()),
           "--raw-out", path]
    try:
        subprocess.run(cmd, env=child_env(python is not None), check=True, cwd=ROOT)
        with open(path) as f:
            return json.load(f)
    finally:
        os.unlink(path)


def run_pythons(args, argv) -> dict:
    """This interpreter and `args.python_path`, every workload (and setting) in a child
    of each, the two children back to back, alternating which goes first."""
    settings = SETTINGS if args.allocator == "both" else (args.allocator,)
    this, other = ("GIL", "FT") if args.python == "ft" else ("this", "other")
    pythons = {this: None, other: args.python_path}  # None: this interpreter
    raws = {key: {} for key in pythons}
    turn = 0
    for s in settings:
        for name in args.workloads:
            order = list(pythons) if turn % 2 == 0 else list(pythons)[::-1]
            turn += 1
            for key in order:
                log(f"[{key} interpreter] {name}, allocator {s}")
                child = run_child(args, s, argv, python=pythons[key], workloads=[name],
                                  extra=("--numpy-scaling",))
                merged = raws[key].setdefault(s, dict(child, workloads={}, numpy_runs=[]))
                merged["workloads"][name] = child["workloads"][name]
                merged["numpy_runs"].append(child.get("numpy_scaling"))
    return {key.lower(): {
        "label": key, "executable": pythons[key] or sys.executable,
        "role": "this interpreter" if pythons[key] is None else "--python",
        "settings": raws[key],
        "targets": {s: evaluate_targets(raw) for s, raw in raws[key].items()},
    } for key in pythons}
