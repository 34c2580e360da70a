"""Measuring in this process: every selected workload under one malloc setting.

For each workload: a warm-up round of every configuration, then `--reps` rounds in
which the configurations run interleaved, in an order rotated every round, so machine
drift hits all alike (measured again when other processes were busy); then the bound
from a profiled sequential walk, the peak traced memory of both engines and the
timeline of profiled `backward_parallel` calls. Only the backward pass is timed,
with the cyclic GC off; the forward graph is rebuilt for every measurement.

Configurations: "seq" (the sequential engine), "parN" (`backward_parallel` with N
workers), "shared" (without the GIL only: `Engine(share_cheap=True, min_work=0)`) and
"torch" (PyTorch's `loss.backward()`, when torch imports).
"""
from __future__ import annotations

import gc
import os
import resource
import statistics
import time
import tracemalloc

import parallel_autograd as pa
from parallel_autograd.engine.cost import gil_enabled, usable_cores

from .bound import profile_graph
from .machine import Contention, environment, numpy_scaling, wait_quiet
from .report import cores_text, log
from .workloads import WORKLOADS

SETTINGS = ("default", "tuned")  # malloc: glibc's defaults, tune_allocator()


def run_setting(args, setting: str) -> dict:
    """Measure every selected workload under one malloc setting (this process)."""
    tuned = None
    if setting == "tuned":
        from parallel_autograd.allocator import tune_allocator
        tuned = tune_allocator()
        log(f"[{setting}] tune_allocator() -> {tuned}")
    torch = None if args.no_torch else _import_torch()
    cores = usable_cores()
    workers = sorted({1, 2, cores, 2 * cores})
    gc.collect()
    gc.freeze()  # module objects out of the GC's way: gc.collect() before each run is cheap
    raw = {"setting": setting, "tune_allocator": tuned, "cores": cores, "workers": workers,
           "env": environment(torch), "size": args.size, "reps": args.reps,
           "seed": args.seed, "workloads": {}}
    for name in args.workloads:
        t0 = time.perf_counter()
        load0 = os.getloadavg()[0]
        r = raw["workloads"][name] = measure_workload(
            WORKLOADS[name], args, workers, cores, torch, keep_timeline=(name == args.timeline))
        r["loadavg"] = [load0, os.getloadavg()[0]]
        r["seconds"] = time.perf_counter() - t0
        log(f"[{setting}] {name}: {r['seconds']:.1f} s ("
            + ", ".join(f"{k} {v:.1f}" for k, v in r["phase_seconds"].items())
            + f"), other processes {cores_text(r['contention'])} cores")
    raw["env"]["gil_enabled"] = raw["env"]["gil_enabled"] or gil_enabled()  # still off?
    raw["numpy_scaling"] = numpy_scaling(cores, steps=3000 if args.size == "full" else 300)
    return raw


def _import_torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def configs(workers, torch) -> list:
    """The configurations timed: seq, parN for N in `workers`, shared without the GIL,
    torch when `torch` is a module."""
    shared = [] if gil_enabled() else ["shared"]
    return (["seq"] + [f"par{n}" for n in workers] + shared
            + (["torch"] if torch is not None else []))


_shared_engines: dict = {}


def _shared_engine():
    """Engine(all cores, share_cheap=True, min_work=0): cheap nodes handed between
    threads whatever the amount of work; made once per process (a persistent pool)."""
    if "e" not in _shared_engines:
        _shared_engines["e"] = pa.Engine(share_cheap=True, min_work=0)
    return _shared_engines["e"]


def _minflt() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _backward_call(w, data, config):
    """Build the forward graph for `config`: (loss, leaves, the call that runs backward)."""
    if config == "torch":
        loss, leaves = w.build_torch(data)
        return loss, leaves, loss.backward
    loss, leaves = w.build(data)
    if config == "seq":
        return loss, leaves, lambda: pa.backward(loss)
    if config == "shared":
        eng = _shared_engine()
        return loss, leaves, lambda: eng.backward(loss, stats=True)
    n = int(config[3:])
    return loss, leaves, lambda: pa.backward_parallel(loss, num_workers=n, stats=True)


def run_once(w, data, config):
    """Build the forward graph, time its backward alone: (seconds, faults, stats or None)."""
    loss, leaves, call = _backward_call(w, data, config)
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


def peak_memory(w, data, config) -> tuple:
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


def torch_nodes(loss) -> int:
    """Nodes of a torch graph (its grad_fn objects)."""
    seen, stack = set(), [loss.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        stack.extend(f for f, _ in fn.next_functions)
    return len(seen)


def time_configs(w, data, configs, reps):
    """`reps` interleaved rounds (order rotated each round) of every configuration."""
    times = {c: [] for c in configs}
    faults = {c: [] for c in configs}
    stats = {}
    meter = Contention()
    for r in range(reps):
        k = r % len(configs)
        for c in configs[k:] + configs[:k]:
            t, f, st = run_once(w, data, c)
            times[c].append(t)
            faults[c].append(f)
            if st is not None:
                stats[c] = st.as_dict()
    return {"times": times, "faults": faults, "stats": stats, "contention": meter.cores()}


def _timed(w, data, configs, args) -> tuple:
    """Warm-up, then timed rounds, again (up to --retries) while other processes used
    more than --noisy cores: (the quietest attempt, every attempt's contention)."""
    for c in configs:  # warm-up: caches, default engines, worker threads, BLAS
        run_once(w, data, c)
    attempts = []
    for attempt in range(args.retries + 1):
        wait_quiet(args.wait_quiet, args.noisy, w.name)
        attempts.append(time_configs(w, data, configs, args.reps))
        busy = attempts[-1]["contention"]
        if busy is None or busy <= args.noisy:
            break
        if attempt < args.retries:
            log(f"  {w.name}: other processes used {busy:.2f} cores; measuring again")
    best = min(attempts, key=lambda a: a["contention"] or 0.0)
    return best, [a["contention"] for a in attempts]


def _timing_result(w, data, best, par_all) -> dict:
    """Medians, minima, speedups over seq and engine decisions from the timed rounds."""
    times, stats = best["times"], best["stats"]
    med = {c: statistics.median(ts) for c, ts in times.items()}
    return {
        "description": w.description, "branches": w.branches, "dims": data["_dims"],
        "nodes": stats[par_all]["nodes"],
        "times": times, "median": med, "min": {c: min(ts) for c, ts in times.items()},
        "speedup": {c: med["seq"] / med[c] for c in times
                    if c.startswith("par") or c == "shared"},
        "faults": {c: statistics.median(fs) for c, fs in best["faults"].items()},
        "contention": best["contention"], "stats": stats,
        "decision": {c: {"mode": s["mode"], "reason": s["reason"]} for c, s in stats.items()},
    }


def measure_workload(w, args, workers, cores, torch, keep_timeline=False) -> dict:
    """Everything the report shows about workload `w`: times of every configuration,
    the bound and efficiency, peak memory, torch's node count and the timeline."""
    t0 = time.perf_counter()
    data = w.data(args.seed, args.size)
    par_all = f"par{cores}"
    best, contentions = _timed(w, data, configs(workers, torch), args)
    res = _timing_result(w, data, best, par_all)
    res["attempts_contention"] = contentions
    phases = {"timing": time.perf_counter() - t0}
    loss, _ = w.build(data)
    res["bound"] = profile_graph(loss, cores, repeats=2 if args.quick else 3)
    res["efficiency"] = res["bound"]["bound"] / res["median"][par_all]
    del loss
    phases["bound"] = time.perf_counter() - t0 - phases["timing"]
    mem = {c: peak_memory(w, data, c) for c in ("seq", par_all)}
    res["peak_bytes"] = {c: m[0] for c, m in mem.items()}
    res["peak_bytes_absolute"] = {c: m[1] for c, m in mem.items()}
    phases["memory"] = time.perf_counter() - t0 - sum(phases.values())
    if torch is not None:
        tl, _ = w.build_torch(data)
        res["torch_nodes"] = torch_nodes(tl)
        del tl
    res["timeline"] = timeline(w, data, cores, keep_events=keep_timeline,
                               calls=1 if args.quick else 3)
    phases["timeline"] = time.perf_counter() - t0 - sum(phases.values())
    res["phase_seconds"] = phases
    return res


def timeline(w, data, cores, keep_events=False, calls=3) -> dict:
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
