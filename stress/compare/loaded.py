"""The competing-load row (issue 28, item 5): a float32 training step timed on a quiet
machine and while a fixed competing load runs, for ours and for PyTorch.

The step is `mnist-cnn-f32`'s (`stress.compare.programs`: pytorch/examples' MNIST `Net`,
zero_grad + forward + `loss.backward()` (our default engine) + Adam), each library alone
in its own child process (`python -m stress.compare.loaded --child pa|torch ...`), on
the usable cores (torch: `set_num_threads(cores)`; numpy's BLAS at its default). The
load is a second process spinning on one core (`SPINNER`, a Python busy loop), started
and stopped by the child: each round times `STEPS` steps quiet and `STEPS` steps loaded
(the spinner started `SETTLE` s before), which phase goes first alternating by round; a
phase's sample is the median of its steps. Per library: loaded / quiet, paired by round,
with its 95% bootstrap interval, and the cores it kept busy in both phases (its CPU
time over the phase's wall time: a library whose threads spin while waiting keeps it
high, and under load the spinning takes CPU from its useful work), and what its threads
burn in the `IDLE` s of sleep after a quiet phase (the spinning itself, measurable
even on a busy machine). Ours runs twice (`COLUMNS`): as is, and with
`OPENBLAS_THREAD_TIMEOUT=4` in its environment, so numpy's OpenBLAS threads sleep as soon
as they are idle instead of spin-waiting after each GEMM. PyTorch's pool collapsed when
another process used the cores (issue 28: a 9 ms step took 112-680 ms).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

WORKLOAD = "mnist-cnn-f32"
ROW = "loaded-step"
STEPS = 3          # steps per phase and round
SETTLE = 0.3       # seconds between starting the spinner and timing
IDLE = 0.1         # seconds of sleep after a quiet phase, its CPU time measured
SPINNER = [sys.executable, "-c", "while True: pass"]
LIBS = ("pa", "torch")
# the children, by column: (library, environment added). "pa-nospin": ours with numpy's
# OpenBLAS told to put its idle threads to sleep at once (their default is to spin-wait
# ~2^28 cycles after each GEMM: `OPENBLAS_THREAD_TIMEOUT`, read when OpenBLAS loads)
COLUMNS = {"pa": ("pa", {}), "pa-nospin": ("pa", {"OPENBLAS_THREAD_TIMEOUT": "4"}),
           "torch": ("torch", {})}
LABELS = {"pa": "ours", "pa-nospin": "ours, OPENBLAS_THREAD_TIMEOUT=4", "torch": "PyTorch"}
MAX_LOADED = 2.0   # target 14: our loaded / quiet step time at most this


class Spinner:
    """A second process spinning on one core while the `with` block runs."""

    def __enter__(self):
        self.proc = subprocess.Popen(SPINNER, stdin=subprocess.DEVNULL)
        time.sleep(SETTLE)
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()
        return False


def _phase(session, backward, steps: int) -> tuple:
    """(median wall seconds of `steps` steps, the process's CPU time over the wall time
    of the phase: the cores' worth its threads kept busy)."""
    from .step import timed_step
    walls = []
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(steps):
        walls.append(timed_step(session, backward)["step"])
    return statistics.median(walls), (time.process_time() - c0) / (time.perf_counter() - t0)


def _idle_cores() -> float:
    """The process's CPU time over IDLE seconds of sleep right after a step: what its
    idle threads burn (0 when they sleep; BLAS or OpenMP threads that spin-wait)."""
    c0, t0 = time.process_time(), time.perf_counter()
    time.sleep(IDLE)
    return (time.process_time() - c0) / (time.perf_counter() - t0)


def measure(lib: str, size: str, reps: int, seed: int) -> dict:
    """Quiet and loaded rounds of `lib`'s step (this process): the raw JSON."""
    from parallel_autograd.engine.cost import usable_cores

    from .machine import Contention
    from .step import Session
    from .workloads import WORKLOADS
    cores = usable_cores()
    if lib == "torch":
        import torch
        torch.set_num_threads(cores)
    w = WORKLOADS[WORKLOAD]
    session = Session(w, w.data(seed, size), torch=(lib == "torch"))
    backward = lambda loss: loss.backward()  # noqa: E731  (what users run)
    _phase(session, backward, 2 * STEPS)  # warm-up
    out = {k: [] for k in ("quiet", "loaded", "quiet_cores", "loaded_cores", "idle_cores")}
    meter = Contention()
    for r in range(reps):
        for phase in (("quiet", "loaded") if r % 2 == 0 else ("loaded", "quiet")):
            if phase == "loaded":
                with Spinner():
                    wall, cpu = _phase(session, backward, STEPS)
            else:
                wall, cpu = _phase(session, backward, STEPS)
                out["idle_cores"].append(_idle_cores())
            out[phase].append(wall)
            out[f"{phase}_cores"].append(cpu)
    return {"lib": lib, "cores": cores, "size": size, "reps": reps, "seed": seed,
            "workload": WORKLOAD, "steps_per_phase": STEPS, **out,
            "openblas_thread_timeout": os.environ.get("OPENBLAS_THREAD_TIMEOUT"),
            "contention_with_spinner": meter.cores()}


def child_main(argv=None) -> int:
    """`python -m stress.compare.loaded --child LIB ...`: measure, write the JSON."""
    p = argparse.ArgumentParser(prog="python -m stress.compare.loaded")
    p.add_argument("--child", choices=LIBS, required=True)
    p.add_argument("--size", choices=("full", "quick", "tiny"), default="full")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--raw-out", required=True)
    a = p.parse_args(argv)
    raw = measure(a.child, a.size, a.reps, a.seed)
    with open(a.raw_out, "w") as f:
        json.dump(raw, f)
    return 0


def run(size: str, reps: int, seed: int, log, with_torch: bool) -> dict:
    """Every column of `COLUMNS` (PyTorch's when `with_torch`), each in a fresh child:
    {column: raw}."""
    out = {}
    for col, (lib, env) in COLUMNS.items():
        if lib == "torch" and not with_torch:
            continue
        log(f"[{ROW}] {LABELS[col]}: {WORKLOAD} step, quiet and beside a spinning process")
        try:
            out[col] = _run_child(lib, env, size, reps, seed)
        except subprocess.CalledProcessError:
            if lib == "pa":
                raise
            log(f"[{ROW}] the PyTorch child failed: no PyTorch column")
    return out


def _run_child(lib: str, env: dict, size: str, reps: int, seed: int) -> dict:
    from .children import ROOT, child_env
    fd, path = tempfile.mkstemp(suffix=".json", prefix=f"compare-loaded-{lib}-")
    os.close(fd)
    cmd = [sys.executable, "-m", "stress.compare.loaded", "--child", lib, "--size", size,
           "--reps", str(reps), "--seed", str(seed), "--raw-out", path]
    try:
        subprocess.run(cmd, env=dict(child_env(False), **env), check=True, cwd=ROOT)
        with open(path) as f:
            return json.load(f)
    finally:
        os.unlink(path)


# ---- ratios, the report's section and the target -------------------------------------------
def ratio(loaded: dict, lib: str):
    """`lib`'s loaded / quiet step time, paired by round."""
    from .stats import ratio_interval, seed_for
    r = loaded[lib]
    return ratio_interval(r["loaded"], r["quiet"], seed_for(r["seed"], ROW, lib), True)


def table(loaded: dict) -> str:
    """One line per library: quiet and loaded step (ms), their ratio, cores kept busy."""
    from .report import markdown, ms
    from .stats import ratio_text
    head = ["library", "quiet step ms", "loaded step ms", "loaded / quiet",
            "cores busy quiet", "cores busy loaded", "cores busy idle after a step"]
    rows = [[LABELS[lib], ms(statistics.median(r["quiet"])),
             ms(statistics.median(r["loaded"])), ratio_text(ratio(loaded, lib)),
             f"{statistics.median(r['quiet_cores']):.2f}",
             f"{statistics.median(r['loaded_cores']):.2f}",
             f"{statistics.median(r['idle_cores']):.3f}"]
            for lib, r in loaded.items()]
    return markdown(head, rows)


def section(loaded) -> list:
    """`## A step beside a competing load` as lines (none when not run)."""
    if not loaded:
        return []
    r = loaded["pa"]
    return [f"## A training step beside a competing load ({ROW})", "",
            f"`{WORKLOAD}`'s step (zero_grad, forward, `loss.backward()`, Adam; sizes "
            f"{r['size']}) on {r['cores']} cores, each library alone in its own process: "
            f"{r['reps']} rounds of {r['steps_per_phase']} steps quiet and "
            f"{r['steps_per_phase']} steps while a second process spins on one core "
            "(started and stopped by the benchmark), medians; `loaded / quiet` paired by "
            "round. `cores busy`: the process's CPU time (all its threads) over the phase's "
            "wall time, median over rounds: threads that spin while they wait keep it "
            "high under load, taking CPU from the useful work; `idle after a step`: the "
            f"same over {IDLE * 1e3:.0f} ms of sleep after a quiet phase (0: its threads "
            "sleep when there is no work). `ours, OPENBLAS_THREAD_TIMEOUT=4`: ours again, "
            "numpy's OpenBLAS threads put to sleep as soon as they are idle (by default "
            "they spin-wait after each GEMM).", "",
            table(loaded), ""]


def evaluate_target(loaded, noisy_limit=None) -> dict:
    """Target 14: our step beside the spinning process at most MAX_LOADED x the quiet one."""
    from .stats import PASS, MISS
    from .targets import all_of, check, target
    text = (f"competing load: our training step beside a process spinning on one core <= "
            f"{MAX_LOADED}x the quiet step")
    if not loaded:
        return target(14, text, None, "not run")
    t = all_of(14, text, [check(ROW, ratio(loaded, "pa"), "<=", MAX_LOADED)],
               "loaded / quiet")
    if "torch" in loaded:
        t["detail"] += f"; PyTorch's {ratio(loaded, 'torch').point:.2f}x"
    return dict(t, recheck=[]) if t["status"] in (PASS, MISS) else t


if __name__ == "__main__":
    sys.exit(child_main())
