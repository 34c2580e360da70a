"""The comparison of `backward_parallel` against the sequential engine (and PyTorch).

    python -m stress.compare [--quick] [--out f.json] [--plot f.png]
                             [--workloads a,b] [--reps N] [--allocator default|tuned|both]
                             [--python ft|PATH]

For every workload of `stress.compare.workloads` (float64, seeded; the forward pass is rebuilt
for every measurement and only the backward pass is timed, with the cyclic GC off):

- the sequential engine, `backward_parallel` at 1, 2, all cores and 2x cores workers,
  and PyTorch's `loss.backward()` on the same graph and data (when torch imports);
  a warm-up round, then `--reps` rounds (default 7) in which the configurations run
  interleaved, in an order rotated every round, so machine drift hits all alike;
  the medians are reported;
- the bound `max(work / cores, critical path)` from a profiled sequential walk
  (`stress.compare.bound`) and the efficiency `bound / parallel time`;
- the peak traced memory (tracemalloc) of the backward pass, both engines;
- minor page faults per backward pass (getrusage) and the engine's decision (`stats`).

`--allocator both` (the default) measures glibc's default malloc settings and the
opt-in tuning of `parallel_autograd.allocator.tune_allocator()` in two fresh
subprocesses and shows them side by side; `default` or `tuned` measures one setting
in this process. The targets of the benchmark issue are printed with PASS/MISS from
ratios measured in the same run. Output: markdown on stdout (progress on stderr),
JSON with `--out`, and with matplotlib a PNG with `--plot` (speedup against workers,
and the timeline of one profiled `backward_parallel` call, one lane per thread).

`--python ft` (`make bench-ft`) measures this interpreter (the "GIL" build) and the
free-threaded one, `$FT_CACHE/venv/bin/python` (default `.cache/freethreaded`, made by
`make freethreaded`; run with PYTHON_GIL unset), side by side in one report;
`--python PATH` compares against any other interpreter the same way. Every workload
is measured in a fresh child process per interpreter, the two children one after the
other, which one goes first alternating from workload to workload, so machine drift
hits both alike. The allocator setting is `default` only unless `--allocator` is
given. The report adds a side-by-side table (sequential and parallel times, speedups,
the second interpreter's engine decision, its parallel time over this one's) and two
targets for the second interpreter: tiny-nodes speedup >= 1.4x, and parallel /
sequential <= 1.03 on every workload (no workload slower than sequential, with the
3% noise allowance of target 1); the JSON holds both interpreters' measurements.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import tracemalloc

SETTINGS = ("default", "tuned")
_MALLOC_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
_TORCH_TARGETS = ("wide-matmul", "attention", "mlp-chain")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FT_SPEEDUP_TINY = 1.4  # free-threaded target (a): tiny-nodes parallel over sequential
NO_SLOWDOWN = 1.03  # target 1 and free-threaded target (b): parallel / sequential, 3% noise


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---- command line ---------------------------------------------------------------------
def parse_args(argv=None):
    from .workloads import SIZES, WORKLOADS
    p = argparse.ArgumentParser(prog="python -m stress.compare", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="smaller sizes and 3 repetitions (under a minute)")
    p.add_argument("--out", metavar="FILE.json", help="write all measurements as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="write a PNG (needs matplotlib)")
    p.add_argument("--workloads", default=",".join(WORKLOADS),
                   help="comma-separated subset of: " + ", ".join(WORKLOADS))
    p.add_argument("--reps", type=int, default=None,
                   help="timed repetitions per configuration (default 7, --quick 3)")
    p.add_argument("--allocator", choices=("default", "tuned", "both"), default=None,
                   help="malloc settings to measure (default: both, side by side; "
                        "with --python: default only)")
    p.add_argument("--python", metavar="ft|PATH", default=None,
                   help="also measure with another interpreter, side by side with this "
                        "one: 'ft' is the free-threaded build of `make freethreaded` "
                        "($FT_CACHE/venv/bin/python), or give an interpreter's path")
    p.add_argument("--size", choices=SIZES, default=None,
                   help="workload sizes (default full, --quick quick; tiny is for tests)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch column")
    p.add_argument("--timeline", metavar="WORKLOAD", default=None,
                   help="workload whose profiled parallel call is kept for the plot "
                        "(default wide-elementwise if selected)")
    p.add_argument("--noisy", type=float, default=0.25, metavar="CORES",
                   help="measure a workload again when other processes used more than "
                        "this many cores meanwhile (default 0.25)")
    p.add_argument("--retries", type=int, default=None,
                   help="how many times at most (default 1, --quick 0)")
    p.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                   help="before timing a workload, wait up to this long for other "
                        "processes to use less than --noisy cores (default 0: no wait)")
    p.add_argument("--raw-out", help=argparse.SUPPRESS)  # child mode: one setting's raw JSON
    args = p.parse_args(argv)
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in args.workloads if w not in WORKLOADS]
    if unknown or not args.workloads:
        p.error(f"unknown workload(s) {unknown}; choose from {', '.join(WORKLOADS)}")
    if args.allocator is None:
        args.allocator = "default" if args.python else "both"
    if args.python and not args.raw_out:  # (a child measures in itself only)
        args.python_path = resolve_python(args.python, p.error)
    if args.reps is None:
        args.reps = 3 if args.quick else 7
    if args.reps < 1:
        p.error("--reps must be >= 1")
    if args.retries is None:
        args.retries = 0 if args.quick else 1
    if args.size is None:
        args.size = "quick" if args.quick else "full"
    if args.timeline is None:
        wide = [w for w in args.workloads if WORKLOADS[w].branches]
        args.timeline = "wide-elementwise" if "wide-elementwise" in args.workloads else \
            (wide or args.workloads)[0]
    return args


def ft_python() -> str:
    """The free-threaded venv's interpreter that `make freethreaded` makes."""
    cache = os.environ.get("FT_CACHE") or os.path.join(".cache", "freethreaded")
    return os.path.join(ROOT, cache, "venv", "bin", "python")


def resolve_python(value: str, error) -> str:
    """`--python` to an interpreter path; `error(message)` exits when there is none."""
    if value == "ft":
        path = ft_python()
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            error(f"--python ft: no free-threaded interpreter at {path}; build it first "
                  "with `make freethreaded` (tools/build_freethreaded.sh)")
        return path
    path = value if os.sep in value else shutil.which(value)
    if not path or not (os.path.isfile(path) and os.access(path, os.X_OK)):
        error(f"--python {value}: not an executable interpreter")
    return os.path.abspath(path)


# ---- one setting, measured in this process ---------------------------------------------
def run_setting(args, setting: str) -> dict:
    """Measure every selected workload under one malloc setting (this process)."""
    tuned = None
    if setting == "tuned":
        from parallel_autograd.allocator import tune_allocator
        tuned = tune_allocator()
        log(f"[{setting}] tune_allocator() -> {tuned}")
    import numpy as np

    import parallel_autograd as pa
    from parallel_autograd.engine.cost import usable_cores

    from .workloads import WORKLOADS
    torch = None if args.no_torch else _import_torch()
    cores = usable_cores()
    workers = sorted({1, 2, cores, 2 * cores})
    gc.collect()
    gc.freeze()  # module objects out of the GC's way: gc.collect() before each run is cheap
    raw = {"setting": setting, "tune_allocator": tuned, "cores": cores, "workers": workers,
           "env": _environment(np, torch), "size": args.size, "reps": args.reps,
           "seed": args.seed, "workloads": {}}
    for name in args.workloads:
        t0 = time.perf_counter()
        load0 = os.getloadavg()[0]
        r = raw["workloads"][name] = measure_workload(
            WORKLOADS[name], args, workers, cores, pa, torch,
            keep_timeline=(name == args.timeline))
        r["loadavg"] = [load0, os.getloadavg()[0]]
        r["seconds"] = time.perf_counter() - t0
        log(f"[{setting}] {name}: {r['seconds']:.1f} s ("
            + ", ".join(f"{k} {v:.1f}" for k, v in r["phase_seconds"].items())
            + f"), other processes {_cores(r['contention'])} cores")
    raw["env"]["gil_enabled"] = raw["env"]["gil_enabled"] or _gil_enabled()  # still off?
    raw["numpy_scaling"] = numpy_scaling(np, cores, steps=3000 if args.size == "full" else 300)
    return raw


def numpy_scaling(np, threads, sizes=(64, 2048), steps=3000, reps=3) -> dict:
    """The ceiling for graphs of small nodes on this machine and interpreter: `threads`
    threads each running `steps` of `a = tanh(a * 1.0001 + 0.1)` on `size` elements,
    against one thread running them all (the free-threaded issue's own experiment).
    Returns {size: speedup}, medians of `reps`. No engine involved."""
    import threading

    def loop(size, n):
        a, c1, c2 = np.ones(size), float("1.0001"), float("0.1")  # thread-private
        for _ in range(n):
            a = np.tanh(a * c1 + c2)

    out = {}
    for size in sizes:
        one, many = [], []
        for _ in range(reps):
            t = time.perf_counter()
            loop(size, steps * threads)
            one.append(time.perf_counter() - t)
            ths = [threading.Thread(target=loop, args=(size, steps)) for _ in range(threads)]
            t = time.perf_counter()
            for th in ths:
                th.start()
            for th in ths:
                th.join()
            many.append(time.perf_counter() - t)
        out[str(size)] = statistics.median(one) / statistics.median(many)
    return out


def _scaling_line(label: str, raws) -> str:
    """Median over children of numpy_scaling, one line."""
    per = {}
    for raw in raws:
        for size, v in (raw.get("numpy_scaling") or {}).items():
            per.setdefault(size, []).append(v)
    if not per:
        return f"- {label}: not measured"
    cores = next(iter(raws))["cores"]
    parts = [f"{int(size):,} elements {statistics.median(v):.2f}x" for size, v in per.items()]
    return (f"- {label}: numpy alone, {cores} threads vs 1 running `tanh(a * 1.0001 + 0.1)` "
            f"loops: " + ", ".join(parts) + f" (median of {len(next(iter(per.values())))} "
            "measurements, one per workload run)")


def _import_torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _environment(np, torch) -> dict:
    from threadpoolctl import threadpool_info
    from parallel_autograd.allocator import glibc_version
    return {"python": platform.python_version(), "executable": sys.executable,
            "free_threaded_build": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
            "gil_enabled": _gil_enabled(), "numpy": np.__version__,
            "torch": None if torch is None else torch.__version__,
            "torch_threads": None if torch is None else torch.get_num_threads(),
            "blas": [{k: lib.get(k) for k in ("internal_api", "version", "num_threads")}
                     for lib in threadpool_info() if lib.get("user_api") == "blas"],
            "glibc": glibc_version(), "machine": platform.machine(),
            "cpu_count": os.cpu_count()}


def _gil_enabled() -> bool:
    """False only on a free-threaded build whose GIL is still off (an extension that is not
    marked free-threading-safe turns it back on when imported)."""
    gil = getattr(sys, "_is_gil_enabled", None)
    return True if gil is None else bool(gil())


def _configs(workers, torch) -> list:
    # without the GIL, also the opt-in sharing of cheap nodes (Engine(share_cheap=True))
    shared = [] if _gil_enabled() else ["shared"]
    return (["seq"] + [f"par{n}" for n in workers] + shared
            + (["torch"] if torch is not None else []))


_shared_engines: dict = {}


def _shared_engine(pa):
    """Engine(all cores, share_cheap=True, min_work=0): cheap nodes handed between
    threads whatever the amount of work; made once per process (a persistent pool)."""
    if "e" not in _shared_engines:
        _shared_engines["e"] = pa.Engine(share_cheap=True, min_work=0)
    return _shared_engines["e"]


def _minflt() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def run_once(w, data, config, pa):
    """Build the forward graph, time its backward alone: (seconds, faults, stats or None)."""
    if config == "torch":
        loss, leaves = w.build_torch(data)
        call = loss.backward
    else:
        loss, leaves = w.build(data)
        if config == "seq":
            def call():
                pa.backward(loss)
        elif config == "shared":
            eng = _shared_engine(pa)

            def call():
                return eng.backward(loss, stats=True)
        else:
            n = int(config[3:])

            def call():
                return pa.backward_parallel(loss, num_workers=n, stats=True)
    gc.collect()
    gc.disable()
    try:
        f0 = _minflt()
        t0 = time.perf_counter()
        st = call()
        t = time.perf_counter() - t0
        faults = _minflt() - f0
    finally:
        gc.enable()
    del call, loss, leaves
    return t, faults, st


def peak_memory(w, data, config, pa) -> tuple:
    """Traced bytes during one backward pass: (peak above the level at its start,
    absolute peak including the graph's saved values)."""
    gc.collect()
    tracemalloc.start()
    try:
        loss, leaves = w.build(data)
        gc.collect()
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        if config == "seq":
            pa.backward(loss)
        else:
            pa.backward_parallel(loss, num_workers=int(config[3:]))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    del loss, leaves
    return peak - base, peak


def _torch_nodes(loss) -> int:
    seen, stack = set(), [loss.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        stack.extend(f for f, _ in fn.next_functions)
    return len(seen)


class Contention:
    """CPU time used by other processes (and the hypervisor) while we measure.

    From /proc/stat (all CPUs busy, steal included) minus this process's own CPU time
    (every thread), over wall time: 0.0 is a quiet machine, 1.0 a core's worth of
    competing work. None where /proc/stat is unavailable.
    """

    def __init__(self):
        self.start = self._snapshot()

    @staticmethod
    def _snapshot():
        try:
            with open("/proc/stat") as f:
                fields = [int(v) for v in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        hz = os.sysconf("SC_CLK_TCK")
        # user nice system idle iowait irq softirq steal (guest time is inside user)
        busy = sum(fields[i] for i in (0, 1, 2, 5, 6, 7) if i < len(fields)) / hz
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return busy, ru.ru_utime + ru.ru_stime, time.perf_counter()

    def cores(self):
        end = self._snapshot()
        if self.start is None or end is None or end[2] <= self.start[2]:
            return None
        foreign = (end[0] - self.start[0]) - (end[1] - self.start[1])
        return max(0.0, foreign / (end[2] - self.start[2]))


def wait_quiet(limit: float, noisy: float, name: str) -> None:
    """Sleep in 2-second windows until other processes use <= `noisy` cores (or `limit`
    seconds have passed)."""
    t0 = time.perf_counter()
    busy = None
    while time.perf_counter() - t0 < limit:
        meter = Contention()
        time.sleep(2.0)
        busy = meter.cores()
        if busy is None or busy <= noisy:
            break
    waited = time.perf_counter() - t0
    if waited > 2.5:
        log(f"  {name}: waited {waited:.0f} s for a quieter machine "
            f"(other processes last used {busy:.2f} cores)")


def time_configs(w, data, configs, reps, pa):
    """`reps` interleaved rounds (order rotated each round) of every configuration."""
    times = {c: [] for c in configs}
    faults = {c: [] for c in configs}
    stats = {}
    meter = Contention()
    for r in range(reps):
        k = r % len(configs)
        for c in configs[k:] + configs[:k]:
            t, f, st = run_once(w, data, c, pa)
            times[c].append(t)
            faults[c].append(f)
            if st is not None:
                stats[c] = st.as_dict()
    return {"times": times, "faults": faults, "stats": stats, "contention": meter.cores()}


def measure_workload(w, args, workers, cores, pa, torch, keep_timeline=False) -> dict:
    from .bound import profile_graph
    t0 = time.perf_counter()
    data = w.data(args.seed, args.size)
    configs = _configs(workers, torch)
    par_all = f"par{cores}"
    for c in configs:  # warm-up: caches, default engines, worker threads, BLAS
        run_once(w, data, c, pa)
    attempts = []
    for attempt in range(args.retries + 1):
        wait_quiet(args.wait_quiet, args.noisy, w.name)
        attempts.append(time_configs(w, data, configs, args.reps, pa))
        busy = attempts[-1]["contention"]
        if busy is None or busy <= args.noisy:
            break
        if attempt < args.retries:
            log(f"  {w.name}: other processes used {busy:.2f} cores; measuring again")
    best = min(attempts, key=lambda a: a["contention"] or 0.0)
    times, stats = best["times"], best["stats"]
    med = {c: statistics.median(ts) for c, ts in times.items()}
    phases = {"timing": time.perf_counter() - t0}
    loss, _ = w.build(data)
    prof = profile_graph(loss, cores, repeats=2 if args.quick else 3)
    del loss
    phases["bound"] = time.perf_counter() - t0 - phases["timing"]
    mem = {c: peak_memory(w, data, c, pa) for c in ("seq", par_all)}
    phases["memory"] = time.perf_counter() - t0 - sum(phases.values())
    res = {
        "description": w.description, "branches": w.branches, "dims": data["_dims"],
        "nodes": stats[par_all]["nodes"],
        "times": times, "median": med, "min": {c: min(ts) for c, ts in times.items()},
        "speedup": {c: med["seq"] / med[c] for c in configs
                    if c.startswith("par") or c == "shared"},
        "faults": {c: statistics.median(fs) for c, fs in best["faults"].items()},
        "contention": best["contention"],
        "attempts_contention": [a["contention"] for a in attempts],
        "bound": prof, "efficiency": prof["bound"] / med[par_all],
        "peak_bytes": {c: m[0] for c, m in mem.items()},
        "peak_bytes_absolute": {c: m[1] for c, m in mem.items()}, "stats": stats,
        "decision": {c: {"mode": s["mode"], "reason": s["reason"]} for c, s in stats.items()},
    }
    if torch is not None:
        tl, _ = w.build_torch(data)
        res["torch_nodes"] = _torch_nodes(tl)
        del tl
    res["timeline"] = timeline(w, data, cores, pa, keep_events=keep_timeline,
                               calls=1 if args.quick else 3)
    phases["timeline"] = time.perf_counter() - t0 - sum(phases.values())
    res["phase_seconds"] = phases
    return res


def timeline(w, data, cores, pa, keep_events=False, calls=3) -> dict:
    """Profile `calls` `backward_parallel` calls (all cores) and keep the one of median
    wall time: lanes (nodes, busy seconds per thread), and its events if asked."""
    runs = []
    for _ in range(calls):
        loss, leaves = w.build(data)
        gc.collect()
        meter = Contention()
        with pa.profile() as prof:
            t0 = time.perf_counter() - prof.t0
            st = pa.backward_parallel(loss, num_workers=cores, stats=True)
            t1 = time.perf_counter() - prof.t0
        runs.append((t1 - t0, t0, st.mode, prof.events, meter.cores()))
        del loss, leaves
    wall, t0, mode, events, busy = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
    lanes = {}
    for e in events:
        lane = lanes.setdefault(e["thread"], {"nodes": 0, "busy": 0.0})
        lane["nodes"] += 1
        lane["busy"] += e["end"] - e["start"]
    out = {"wall": wall, "mode": mode, "lanes": lanes, "contention": busy}
    if keep_events:
        out["events"] = [{"name": e["name"], "thread": e["thread"],
                          "start": e["start"] - t0, "end": e["end"] - t0} for e in events]
    return out


# ---- targets ------------------------------------------------------------------------------
def evaluate_targets(raw: dict) -> list:
    """The six targets of the issue, from one setting's measurements (same run)."""
    wl = raw["workloads"]
    par = f"par{raw['cores']}"
    setting = raw["setting"]
    out = []

    def add(tid, text, ok, detail):
        out.append({"id": tid, "target": text, "detail": detail,
                    "status": "n/a" if ok is None else ("PASS" if ok else "MISS")})

    ratios = {n: r["median"][par] / r["median"]["seq"] for n, r in wl.items()}
    worst = max(ratios, key=ratios.get)
    add(1, f"parallel / sequential <= {NO_SLOWDOWN} on every workload",
        all(v <= NO_SLOWDOWN for v in ratios.values()),
        f"worst {worst} {ratios[worst]:.3f}; over: " +
        (", ".join(f"{n} {v:.3f}" for n, v in ratios.items() if v > NO_SLOWDOWN) or "none"))
    need = 1.5 if setting == "tuned" else 1.25
    if "wide-elementwise" in wl:
        s = wl["wide-elementwise"]["speedup"][par]
        add(2, f"wide-elementwise speedup >= {need}x ({setting} allocator)", s >= need,
            f"{s:.2f}x")
    else:
        add(2, f"wide-elementwise speedup >= {need}x", None, "not run")
    present = [n for n in _TORCH_TARGETS if n in wl]
    if not present or "torch" not in wl[present[0]]["median"]:
        add(3, "wide-matmul, attention, mlp-chain faster than PyTorch backward()", None,
            "torch not run")
    else:
        r = {n: wl[n]["median"][par] / wl[n]["median"]["torch"] for n in present}
        add(3, "wide-matmul, attention, mlp-chain faster than PyTorch backward()",
            all(v < 1 for v in r.values()),
            ", ".join(f"{n} {v:.2f}x torch's time" for n, v in r.items()))
    t = wl.get("tiny-nodes")
    if t is None or "torch" not in t["median"]:
        add(4, "tiny-nodes: sequential time per node <= PyTorch's", None, "not run")
    else:
        ours = t["median"]["seq"] / t["nodes"]
        theirs = t["median"]["torch"] / t["torch_nodes"]
        add(4, "tiny-nodes: sequential time per node <= PyTorch's", ours <= theirs,
            f"{ours * 1e6:.1f} us ({t['nodes']} nodes) vs {theirs * 1e6:.1f} us "
            f"({t['torch_nodes']} nodes)")
    wide = {n: r["efficiency"] for n, r in wl.items() if r["bound"]["width"] >= 2}
    add(5, "efficiency (bound / parallel time) >= 0.85 where width >= 2",
        all(v >= 0.85 for v in wide.values()) if wide else None,
        ", ".join(f"{n} {v:.2f}" for n, v in wide.items()) or "no workload with width >= 2")
    mem = {n: r["peak_bytes"][par] / max(r["peak_bytes"]["seq"], 1) for n, r in wl.items()}
    worst = max(mem, key=mem.get)
    add(6, "peak memory of backward_parallel <= 1.5x the sequential engine's",
        all(v <= 1.5 for v in mem.values()),
        f"worst {worst} {mem[worst]:.2f}x; over: " +
        (", ".join(f"{n} {v:.2f}x" for n, v in mem.items() if v > 1.5) or "none"))
    return out


def evaluate_ft_targets(raw: dict, label: str = "FT") -> list:
    """The free-threaded issue's targets, from the second interpreter's measurements:
    (a) tiny-nodes parallel speedup over sequential >= 1.4x, (b) parallel / sequential
    <= 1.03 on every workload (target 1's wording and noise allowance)."""
    wl = raw["workloads"]
    par = f"par{raw['cores']}"
    out = []

    def add(tid, text, ok, detail):
        out.append({"id": tid, "target": text, "detail": detail,
                    "status": "n/a" if ok is None else ("PASS" if ok else "MISS")})

    text = (f"tiny-nodes: {label} parallel speedup over {label} sequential >= "
            f"{FT_SPEEDUP_TINY}x")
    if "tiny-nodes" in wl:
        s = wl["tiny-nodes"]["speedup"][par]
        add("a", text, s >= FT_SPEEDUP_TINY, f"{s:.2f}x")
    else:
        add("a", text, None, "not run")
    ratios = {n: r["median"][par] / r["median"]["seq"] for n, r in wl.items()}
    worst = max(ratios, key=ratios.get)
    add("b", f"{label} parallel / {label} sequential <= {NO_SLOWDOWN} on every workload",
        all(v <= NO_SLOWDOWN for v in ratios.values()),
        f"worst {worst} {ratios[worst]:.3f}; over: " +
        (", ".join(f"{n} {v:.3f}" for n, v in ratios.items() if v > NO_SLOWDOWN) or "none"))
    return out


# ---- reporting ------------------------------------------------------------------------------
def _ms(t):
    return f"{t * 1e3:.1f}"


def _cores(c):
    return "n/a" if c is None else f"{c:.2f}"


def _mib(b):
    return f"{b / 2**20:.1f}" if b >= 2**20 else f"{b / 2**20:.3f}"


def _decision(d) -> str:
    if d["mode"] == "parallel":
        return f"parallel ({d['reason']})"
    reason = d["reason"].split(" (")[0]
    return f"sequential: {reason}"


def setting_table(raw: dict) -> str:
    cores, workers = raw["cores"], raw["workers"]
    par = f"par{cores}"
    torch = any("torch" in r["median"] for r in raw["workloads"].values())
    wcols = [f"{n}w{' (all)' if n == cores else ''}" for n in workers]
    head = (["workload", "nodes", "width", "seq ms"] + [f"par {c} ms" for c in wcols] +
            ["par/seq", "bound ms", "eff"] + (["torch ms"] if torch else []) +
            ["peak seq MiB", "peak par MiB", "decision (all cores)", "other load"])
    rows = []
    for name, r in raw["workloads"].items():
        m = r["median"]
        row = [name, str(r["nodes"]), f"{r['bound']['width']:.1f}", _ms(m["seq"])]
        row += [f"{_ms(m[f'par{n}'])} ({r['speedup'][f'par{n}']:.2f}x)" for n in workers]
        row += [f"{m[par] / m['seq']:.3f}", _ms(r["bound"]["bound"]), f"{r['efficiency']:.2f}"]
        if torch:
            row.append(_ms(m["torch"]) if "torch" in m else "n/a")
        row += [_mib(r["peak_bytes"]["seq"]), _mib(r["peak_bytes"][par]),
                _decision(r["decision"][par]), _cores(r["contention"])]
        rows.append(row)
    return _markdown(head, rows)


def allocator_table(raws: dict) -> str:
    names = list(raws["default"]["workloads"])
    par = f"par{raws['default']['cores']}"
    head = ["workload"]
    for s in SETTINGS:
        head += [f"seq ms ({s})", f"par ms ({s})", f"speedup ({s})", f"faults par ({s})"]
    rows = []
    for n in names:
        row = [n]
        for s in SETTINGS:
            r = raws[s]["workloads"][n]
            row += [_ms(r["median"]["seq"]), _ms(r["median"][par]),
                    f"{r['speedup'][par]:.2f}x", f"{r['faults'][par]:.0f}"]
        rows.append(row)
    return _markdown(head, rows)


def targets_text(targets: list) -> str:
    return "\n".join(f"- {t['status']:4s} {t['id']}. {t['target']}: {t['detail']}"
                     for t in targets)


def _markdown(head, rows) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


_LEGEND = (
    "Times: backward pass only, milliseconds; `par Nw` is `backward_parallel(num_workers=N)`"
    " with its speedup over the sequential engine; `par/seq` at all cores; `bound` = "
    "max(one-core work / cores, critical path) from a profiled sequential walk, `eff` = "
    "bound / parallel time, `width` = work / critical path; peak = tracemalloc peak above "
    "the level at the start of backward; `other load` = cores' worth of CPU used by other "
    "processes while timing (0 = quiet machine).")


def report(result: dict) -> str:
    raws = result["settings"]
    first = next(iter(raws.values()))
    env = first["env"]
    blas = ", ".join(f"{b['internal_api']} {b['version']} ({b['num_threads']} threads)"
                     for b in env["blas"]) or "none"
    torch = f"torch {env['torch']} ({env['torch_threads']} threads)" if env["torch"] \
        else "torch not installed"
    parts = [f"# Backward pass: parallel vs sequential engine ({result['meta']['date']})", "",
             f"`{result['meta']['command']}`: {first['cores']} usable cores, "
             f"Python {env['python']}, numpy {env['numpy']}, BLAS {blas}, {torch}; "
             f"sizes {first['size']}, median of {first['reps']} after a warm-up.", "",
             _LEGEND, ""]
    for s, raw in raws.items():
        tuned = "" if s == "default" else f" (tune_allocator() -> {raw['tune_allocator']})"
        parts += [f"## Allocator: {s}{tuned}", "", setting_table(raw), "",
                  "Targets:", targets_text(result["targets"][s]), ""]
    if len(raws) == 2:
        parts += ["## Allocator settings side by side", "", allocator_table(raws), ""]
    return "\n".join(parts)


def _env_line(label: str, env: dict) -> str:
    blas = ", ".join(f"{b['internal_api']} {b['version']} ({b['num_threads']} threads)"
                     for b in env["blas"]) or "none"
    torch = f"torch {env['torch']} ({env['torch_threads']} threads)" if env["torch"] \
        else "no torch"
    build = "free-threaded build" if env.get("free_threaded_build") else "GIL build"
    gil = "enabled" if env.get("gil_enabled", True) else "disabled"
    return (f"- {label}: `{env.get('executable')}`: Python {env['python']} ({build}, GIL "
            f"{gil}), numpy {env['numpy']}, BLAS {blas}, {torch}")


def pythons_table(raws: dict) -> str:
    """Per workload: both interpreters' sequential and parallel (all cores) times, the
    second's engine decision and its parallel time over the first's."""
    (la, a), (lb, b) = raws.items()
    pa_, pb = f"par{a['cores']}", f"par{b['cores']}"
    head = ["workload", "nodes"]
    for lab in (la, lb):
        head += [f"{lab} seq ms", f"{lab} par ms", f"{lab} speedup"]
    shared = any("shared" in r["median"] for r in b["workloads"].values())
    if shared:  # measured only without the GIL
        head.append(f"{lb} share_cheap ms")
    head += [f"{lb} decision", f"{lb} par / {la} par", f"other load ({la} / {lb})"]
    rows = []
    for n, ra in a["workloads"].items():
        rb = b["workloads"][n]
        row = [n, str(ra["nodes"])]
        for r, par in ((ra, pa_), (rb, pb)):
            row += [_ms(r["median"]["seq"]), _ms(r["median"][par]),
                    f"{r['speedup'][par]:.2f}x"]
        if shared:
            row.append(f"{_ms(rb['median']['shared'])} ({rb['speedup']['shared']:.2f}x)"
                       if "shared" in rb["median"] else "n/a")
        row += [_decision(rb["decision"][pb]),
                f"{rb['median'][pb] / ra['median'][pa_]:.2f}",
                f"{_cores(ra['contention'])} / {_cores(rb['contention'])}"]
        rows.append(row)
    return _markdown(head, rows)


def report_pythons(result: dict) -> str:
    interp = result["interpreters"]
    ia, ib = interp.values()  # this interpreter, then the --python one
    la, lb = ia["label"], ib["label"]
    sa = next(iter(ia["settings"].values()))
    title = (f"# Backward pass: parallel vs sequential engine, {la} and {lb} interpreters "
             f"side by side ({result['meta']['date']})")
    how = (f"`{result['meta']['command']}`: {sa['cores']} usable cores; sizes {sa['size']}, "
           f"median of {sa['reps']} after a warm-up. Each workload is measured in a fresh "
           f"process per interpreter, the two one after the other (which goes first "
           f"alternates per workload).")
    parts = [title, "", how, ""]
    for i in (ia, ib):
        parts.append(_env_line(i["label"], next(iter(i["settings"].values()))["env"]))
    notes = []
    gil = {i["label"]: any(r["env"].get("gil_enabled", True) for r in i["settings"].values())
           for i in (ia, ib)}
    if lb == "FT" and gil[lb]:
        notes.append(f"note: the GIL was enabled in the {lb} runs: not a free-threaded "
                     "measurement (an extension turned it on, or not a free-threaded build)")
    if la == "GIL" and not gil[la]:
        notes.append(f"note: the GIL was disabled in the {la} runs: run the comparison "
                     "from a GIL build (`make bench-ft` uses .venv's interpreter)")
    parts += ([""] + notes if notes else []) + [""]
    legend = (f"Times: backward pass only, milliseconds, median; `par` is "
              f"`backward_parallel` at all cores (the default engine), `speedup` = seq / par "
              f"within one interpreter; `{lb} share_cheap` (without the GIL only) is "
              f"`Engine(share_cheap=True, min_work=0)`, the opt-in sharing of cheap "
              f"nodes, with its speedup; `{lb} decision` is the default engine's choice "
              f"(`stats`); `{lb} par / {la} par` below 1 means {lb}'s parallel pass is "
              f"faster; `other load` = cores' worth of CPU used by other processes while "
              f"timing (0 = quiet machine).")
    parts += [legend, ""]
    parts.append("Ceiling for small nodes (how far two threads can overlap small numpy "
                 "kernels at all, measured beside each workload):")
    for i in (ia, ib):
        runs = [r for raw in i["settings"].values() for r in raw.get("numpy_runs", []) if r]
        raws = [{"cores": next(iter(i["settings"].values()))["cores"], "numpy_scaling": r}
                for r in runs]
        parts.append(_scaling_line(i["label"], raws))
    parts.append("")
    for s in ia["settings"]:
        parts += [f"## {la} vs {lb} (allocator: {s})", "",
                  pythons_table({la: ia["settings"][s], lb: ib["settings"][s]}), "",
                  f"Targets ({lb} interpreter, free-threaded issue):",
                  targets_text(result["ft_targets"][s]), ""]
    parts += ["Per-interpreter detail below. " + _LEGEND, ""]
    for i in (ia, ib):
        for s, raw in i["settings"].items():
            tuned = "" if s == "default" else f" (tune_allocator() -> {raw['tune_allocator']})"
            parts += [f"## {i['label']} detail: allocator {s}{tuned}", "",
                      setting_table(raw), "", "Targets:", targets_text(i["targets"][s]), ""]
    return "\n".join(parts)


# ---- plot ------------------------------------------------------------------------------------
def plot(result: dict, path: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("--plot needs matplotlib: pip install 'parallel_autograd[compare]'")
        return
    if "interpreters" in result:  # --python: every (interpreter, setting) as one series
        raws = {f"{i['label']}, {s}": raw for i in result["interpreters"].values()
                for s, raw in i["settings"].items()}
    else:
        raws = result["settings"]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 10),
                                   gridspec_kw={"height_ratios": [1, 1.1]})
    styles = dict(zip(raws, ("-", "--", ":", "-.")))
    colors = {}
    for s, raw in raws.items():
        ws = raw["workers"]
        for i, (name, r) in enumerate(raw["workloads"].items()):
            c = colors.setdefault(name, f"C{len(colors) % 10}")
            ax1.plot(ws, [r["speedup"][f"par{n}"] for n in ws], styles.get(s, "-"),
                     marker="o", color=c, label=f"{name} ({s})")
    ax1.axhline(1.0, color="gray", lw=0.8)
    ax1.set_xlabel("num_workers")
    ax1.set_ylabel("speedup over sequential engine")
    ax1.set_xticks(next(iter(raws.values()))["workers"])
    names = {"-": "solid", "--": "dashed", ":": "dotted", "-.": "dash-dot"}
    ax1.set_title("backward_parallel speedup (" + "; ".join(
        f"{names[st]}: {s}" for s, st in styles.items()) + ")")  # "; ": s has commas
    ax1.legend(fontsize=7, ncol=2)
    # with --python, the timeline of the other interpreter (the free-threaded one) if kept
    _plot_timeline(ax2, dict(reversed(raws.items())) if "interpreters" in result else raws)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_timeline(ax, raws) -> None:
    for s, raw in raws.items():
        for name, r in raw["workloads"].items():
            events = r["timeline"].get("events")
            if events:
                break
        else:
            continue
        break
    else:
        ax.set_title("no timeline recorded")
        return
    lanes = sorted({e["thread"] for e in events}, key=lambda t: (t != "MainThread", t))
    ops = sorted({e["name"] for e in events})
    color = {op: f"C{i % 10}" for i, op in enumerate(ops)}
    for y, lane in enumerate(lanes):
        for op in ops:
            bars = [(e["start"] * 1e3, (e["end"] - e["start"]) * 1e3) for e in events
                    if e["thread"] == lane and e["name"] == op]
            if bars:
                ax.broken_barh(bars, (y - 0.4, 0.8), color=color[op])
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels(lanes)
    ax.set_xlabel("ms since the call started")
    ax.set_title(f"timeline of one backward_parallel call (median of those profiled): {name}, "
                 f"{s} malloc, {raw['cores']} workers, {r['timeline']['wall'] * 1e3:.1f} ms")
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=color[o], label=o) for o in ops], fontsize=7,
              ncol=min(len(ops), 6), loc="upper right")


def _jsonable(o):
    return o.item() if hasattr(o, "item") else str(o)


# ---- driver -----------------------------------------------------------------------------------
_NOT_PASSED_ON = ("--out", "--plot", "--allocator", "--raw-out", "--python", "--workloads",
                  "--timeline")


def _child(args, setting: str, argv, python=None, workloads=None) -> dict:
    """Run one setting in a fresh interpreter (clean heap, its own malloc settings):
    `python` (default this one), on `workloads` (default all selected)."""
    fd, path = tempfile.mkstemp(suffix=".json", prefix=f"compare-{setting}-")
    os.close(fd)
    pass_on = []
    skip = False
    for a in argv:  # keep the measurement options, drop output/plot/selection options
        if skip:
            skip = False
            continue
        if a in _NOT_PASSED_ON:
            skip = True
            continue
        if a.split("=")[0] in _NOT_PASSED_ON:
            continue
        pass_on.append(a)
    env = {k: v for k, v in os.environ.items() if k not in _MALLOC_ENV}
    if python is not None:  # another interpreter: PYTHON_GIL=0 would force the GIL off
        env.pop("PYTHON_GIL", None)  # even past an extension that needs it (Makefile FT_RUN)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    cmd = [python or sys.executable, "-m", "stress.compare", *pass_on, "--allocator", setting,
           "--workloads", ",".join(workloads or args.workloads), "--timeline", args.timeline,
           "--raw-out", path]
    try:
        subprocess.run(cmd, env=env, check=True, cwd=ROOT)
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
                child = _child(args, s, argv, python=pythons[key], workloads=[name])
                merged = raws[key].setdefault(s, dict(child, workloads={}, numpy_runs=[]))
                merged["workloads"][name] = child["workloads"][name]
                merged["numpy_runs"].append(child.get("numpy_scaling"))
    return {key.lower(): {
        "label": key, "executable": pythons[key] or sys.executable,
        "role": "this interpreter" if pythons[key] is None else "--python",
        "settings": raws[key],
        "targets": {s: evaluate_targets(raw) for s, raw in raws[key].items()},
    } for key in pythons}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    t0 = time.perf_counter()
    if args.raw_out:  # child mode
        raw = run_setting(args, args.allocator)
        with open(args.raw_out, "w") as f:
            json.dump(raw, f, default=_jsonable)
        return 0
    if args.python:
        return _main_pythons(args, argv, t0)
    if args.allocator == "both":
        raws = {s: _child(args, s, argv) for s in SETTINGS}
    else:
        if args.allocator == "default" and any(k in os.environ for k in _MALLOC_ENV):
            log("note: MALLOC_*_ environment variables are set; 'default' is not glibc's "
                "default in this process")
        raws = {args.allocator: run_setting(args, args.allocator)}
    result = {"meta": _meta(argv), "settings": raws,
              "targets": {s: evaluate_targets(raw) for s, raw in raws.items()}}
    return _finish(args, result, report, t0)


def _meta(argv, **extra) -> dict:
    return {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "command": "python -m stress.compare " + " ".join(argv), **extra,
            "malloc_env": {k: os.environ[k] for k in _MALLOC_ENV if k in os.environ},
            "seconds": None}


def _finish(args, result, render, t0) -> int:
    """Print the report, write --out and --plot."""
    result["meta"]["seconds"] = time.perf_counter() - t0
    print(render(result), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1, default=_jsonable)
    if args.plot:
        plot(result, args.plot)
    log(f"done in {result['meta']['seconds']:.0f} s")
    return 0


def _main_pythons(args, argv, t0) -> int:
    interp = run_pythons(args, argv)
    other = list(interp.values())[1]
    result = {
        "meta": _meta(argv, python=args.python),
        "interpreters": interp,
        "ft_targets": {s: evaluate_ft_targets(raw, other["label"])
                       for s, raw in other["settings"].items()},
    }
    return _finish(args, result, report_pythons, t0)

