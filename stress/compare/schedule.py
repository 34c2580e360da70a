"""The order of the measurements: per workload, one child per *kind* (each selected
malloc setting, then PyTorch alone when torch imports), back to back, the order
rotated from workload to workload so machine drift hits every kind alike; then, within
`--budget` seconds, more rounds for the workloads whose targets are unresolved or whose
rows were measured under other load (`targets`' `recheck`), each such batch again one
child per kind, until every target is decided, the budget is spent or a workload has
had `MAX_EXTRA_BATCHES` more batches.
"""
from __future__ import annotations

import importlib.util
import subprocess
import time
from collections import defaultdict

from .children import TORCH, run_child
from .measure import SETTINGS
from .report import log
from .samples import merge_batch
from .targets import evaluate_all
from .verdict import eta_text, progress_line

MAX_EXTRA_BATCHES = 4
CHILD_START = 1.5  # seconds to start a child and import its libraries (torch: most of it)


def torch_available(args) -> bool:
    """Whether the PyTorch columns are measured: not --no-torch and torch is installed
    (found without importing it here)."""
    return not args.no_torch and importlib.util.find_spec("torch") is not None


def kinds(args) -> list:
    """The children per workload: the selected malloc settings, then TORCH if available."""
    settings = list(SETTINGS) if args.allocator == "both" else [args.allocator]
    return settings + ([TORCH] if torch_available(args) else [])


def rotated(items: list, k: int) -> list:
    """`items` starting at index k (mod its length)."""
    k %= len(items)
    return items[k:] + items[:k]


def measure_all(args, argv) -> tuple:
    """Every workload in one child per kind, then the re-measurements: (kind -> raw,
    workload -> number of extra batches)."""
    ks = kinds(args)
    raws, seconds = {}, {}
    start = time.perf_counter()
    for i, name in enumerate(args.workloads):
        t0 = time.perf_counter()
        log(progress_line(i, len(args.workloads), name, t0 - start))
        for k in rotated(ks, i):
            try:
                child = run_child(args, k, argv, workloads=[name])
            except subprocess.CalledProcessError:
                if k != TORCH:
                    raise
                log("the PyTorch child failed (torch installed but not importable?): "
                    "no PyTorch columns; `make bench TORCH=1` reinstalls it")
                args.no_torch = True  # the next children: no attempt, no message
                ks.remove(TORCH)
                raws.pop(TORCH, None)
                continue
            merged = raws.setdefault(k, dict(child, workloads={}))
            merged["workloads"][name] = child["workloads"][name]
        seconds[name] = time.perf_counter() - t0
    for name in args.workloads:  # a batch of more rounds: timing only, and a process start
        seconds[name] = min(seconds[name], sum(
            raws[k]["workloads"][name]["phase_seconds"]["timing"] + CHILD_START for k in ks))
    return raws, remeasure(args, argv, raws, ks, seconds)


def split(raws: dict) -> tuple:
    """(setting -> raw, the PyTorch child's raw or None)."""
    return {k: v for k, v in raws.items() if k != TORCH}, raws.get(TORCH)


def open_workloads(raws: dict) -> set:
    """Workloads that more rounds could still decide a target for."""
    settings, torch = split(raws)
    return {n for ts in evaluate_all(settings, torch).values() for t in ts
            for n in t["recheck"]}


def remeasure(args, argv, raws: dict, ks: list, seconds: dict) -> dict:
    """More batches (`--reps` rounds, timing only) of the open workloads while the
    budget lasts; a batch is started only if its last duration still fits."""
    deadline = time.perf_counter() + args.budget
    extra = defaultdict(int)
    while True:
        todo = [n for n in args.workloads if n in open_workloads(raws)
                and extra[n] < MAX_EXTRA_BATCHES]
        started = False
        for n in todo:
            if time.perf_counter() + seconds[n] > deadline:
                continue
            left = eta_text(deadline - time.perf_counter())
            log(f"{n}: a target is unresolved or the row was noisy: {args.reps} more "
                f"rounds (batch {extra[n] + 2}; re-measuring budget left {left})")
            t0 = time.perf_counter()
            for k in rotated(ks, extra[n] + 1):
                batch = run_child(args, k, argv, workloads=[n], extra=("--timing-only",))
                merge_batch(raws[k]["workloads"][n], batch["workloads"][n], args.noisy,
                            raws[k]["cores"])
            seconds[n] = time.perf_counter() - t0
            extra[n] += 1
            started = True
        if not started:
            if todo:
                log(f"re-measuring stopped (budget {args.budget:.0f} s or "
                    f"{MAX_EXTRA_BATCHES} extra batches): still open: {', '.join(todo)}")
            return {n: k for n, k in extra.items() if k}
