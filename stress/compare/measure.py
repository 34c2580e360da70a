"""Measuring in this process (a child of the parent, see `children`): every selected
workload under one malloc setting (`run_setting`), or PyTorch alone (`run_torch`).

For each workload: a warm-up round of every configuration, then `--reps` rounds in
which the configurations run interleaved, in an order rotated every round, so machine
drift hits all alike (measured again when other processes were busy). Each run is one
training step (`stress.compare.step`): zero the leaves' gradients, record the forward
pass, run the backward pass (and the optimizer step once there is one); the cyclic GC
is off for the step and its parts are timed on their own. Then, unless
`--timing-only` (a batch of more rounds for a workload measured before): the bound from
a profiled sequential walk, the peak traced memory of both engines, the timeline of
profiled `backward_parallel` calls, torch's node count and, in the PyTorch child on
wide-elementwise, numpy's per-element kernel gap to torch; in the default setting's
child of mlp-chain, the caching allocator's cost against the blocks in use
(`alloc_scaling`).

Configurations: "seq" (the sequential engine), "parN" (`backward_parallel` with N
workers), "shared" (without the GIL only: `Engine(share_cheap=True, min_work=0)`) and
"torch" (PyTorch's `loss.backward()`, `torch.set_num_threads(cores)`): in the PyTorch
child alone; in the default setting's process in rounds of its own after ours, each
PyTorch step right after a sequential-engine step (interleaved with ours, a PyTorch
step made the next GEMMs of ours up to 2x slower, and ours PyTorch's).
"""
from __future__ import annotations

import gc
import os
import time

import parallel_autograd as pa
from parallel_autograd.engine.cost import gil_enabled, usable_cores

from . import alloc_scaling
from .bound import profile_graph
from .machine import Contention, environment, numpy_scaling, wait_quiet
from .probes import kernel_gap, peak_memory, timeline, torch_nodes
from .report import cores_text, log
from .samples import timing_result
from .step import Session, backward_call, timed_step
from .workloads import WORKLOADS

SETTINGS = ("default", "tuned")  # malloc: glibc's defaults, tune_allocator()
TORCH_WARMUP = 3  # the PyTorch child's warm-up steps per workload


def import_torch(cores: int, quiet: bool = False):
    """torch with `cores` intra-op threads, or None when it does not import (said on
    stderr unless `quiet`)."""
    try:
        import torch
    except Exception as e:  # not installed, or installed but broken (a missing library)
        if not quiet:
            log(f"torch does not import: {type(e).__name__}: {e}")
        return None
    torch.set_num_threads(cores)
    return torch


def _raw(args, setting, cores, workers, torch, tuned=None) -> dict:
    return {"setting": setting, "tune_allocator": tuned, "cores": cores, "workers": workers,
            "env": environment(torch), "size": args.size, "reps": args.reps,
            "seed": args.seed, "noisy_limit": args.noisy, "workloads": {}}


def _measure_each(args, raw, measure) -> dict:
    """`raw["workloads"][name] = measure(workload)` for every selected workload."""
    gc.collect()
    gc.freeze()  # module objects out of the GC's way: gc.collect() before each run is cheap
    for name in args.workloads:
        t0 = time.perf_counter()
        load0 = os.getloadavg()[0]
        r = raw["workloads"][name] = measure(WORKLOADS[name])
        r["loadavg"] = [load0, os.getloadavg()[0]]
        r["seconds"] = time.perf_counter() - t0
        log(f"[{raw['setting']}] {name}: {r['seconds']:.1f} s ("
            + ", ".join(f"{k} {v:.1f}" for k, v in r["phase_seconds"].items())
            + f"), other processes {cores_text(r['contention'])} cores")
    return raw


def run_setting(args, setting: str) -> dict:
    """Measure every selected workload under one malloc setting (this process); torch
    in this process too in the default setting (for the in-process column)."""
    tuned = None
    if setting == "tuned":
        from parallel_autograd.allocator import tune_allocator
        tuned = tune_allocator()
        log(f"[{setting}] tune_allocator() -> {tuned}")
    cores = usable_cores()
    # quiet: the PyTorch child says why torch does not import (once, not per workload)
    torch = None if args.no_torch or setting != "default" else import_torch(cores, quiet=True)
    workers = sorted({1, 2, cores, 2 * cores})
    raw = _raw(args, setting, cores, workers, torch, tuned)
    _measure_each(args, raw, lambda w: measure_workload(
        w, args, workers, cores, torch, keep_timeline=(w.name == args.timeline)))
    if (setting == "default" and alloc_scaling.WORKLOAD in raw["workloads"]
            and not getattr(args, "timing_only", False)):
        t0 = time.perf_counter()
        rounds = args.reps if args.size == "tiny" else max(args.reps, 5 if args.quick else 7)
        raw["workloads"][alloc_scaling.WORKLOAD]["alloc_scaling"] = alloc_scaling.measure(
            args.size, rounds, args.seed)
        log(f"[{setting}] the caching allocator against the blocks in use: "
            f"{time.perf_counter() - t0:.1f} s")
    raw["env"]["gil_enabled"] = raw["env"]["gil_enabled"] or gil_enabled()  # still off?
    if args.numpy_scaling:
        raw["numpy_scaling"] = numpy_scaling(cores, steps=3000 if args.size == "full" else 300)
    return raw


def run_torch(args) -> dict:
    """PyTorch alone in this process (the PyTorch child): every selected workload's
    training step, with its own warm-up, and numpy's kernel gap on wide-elementwise."""
    cores = usable_cores()
    torch = import_torch(cores)
    if torch is None:
        raise SystemExit("--torch-only: no PyTorch measurements")
    raw = _raw(args, "torch", cores, [], torch)
    _measure_each(args, raw, lambda w: measure_torch(w, args, torch, cores))
    return raw


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


def sessions_for(w, data, configs) -> dict:
    """One session per library (persistent leaves), by configuration."""
    pa_s = Session(w, data) if any(c != "torch" for c in configs) else None
    t_s = Session(w, data, torch=True) if "torch" in configs else None
    return {c: (t_s if c == "torch" else pa_s) for c in configs}


def time_configs(sessions: dict, configs, reps, rotate: bool = True) -> dict:
    """`reps` interleaved rounds (order rotated each round unless `rotate` is False) of
    every configuration: per configuration the seconds of forward, backward and step,
    the backward's page faults, and the last stats of each parallel configuration."""
    samples = {k: {c: [] for c in configs} for k in ("forward", "times", "step", "faults")}
    calls = {c: backward_call(c, _shared_engine) for c in configs}
    stats = {}
    meter = Contention()
    for r in range(reps):
        k = r % len(configs) if rotate else 0
        for c in configs[k:] + configs[:k]:
            out = timed_step(sessions[c], calls[c])
            for key, field in (("forward", "forward"), ("times", "backward"),
                               ("step", "step"), ("faults", "faults")):
                samples[key][c].append(out[field])
            if out["stats"] is not None:
                stats[c] = out["stats"].as_dict()
    return {**samples, "stats": stats, "contention": meter.cores(), "rounds": reps}


def timed(name, sessions, configs, args, warmup=1, rotate=True) -> tuple:
    """Warm-up, then timed rounds, again (up to --retries) while other processes used
    more than --noisy cores: (the quietest attempt, every attempt's contention)."""
    for _ in range(warmup):  # warm-up: caches, default engines, worker threads, BLAS
        for c in configs:
            timed_step(sessions[c], backward_call(c, _shared_engine))
    attempts = []
    for attempt in range(args.retries + 1):
        wait_quiet(args.wait_quiet, args.noisy, name)
        attempts.append(time_configs(sessions, configs, args.reps, rotate))
        busy = attempts[-1]["contention"]
        if busy is None or busy <= args.noisy:
            break
        if attempt < args.retries:
            log(f"  {name}: other processes used {busy:.2f} cores; measuring again")
    best = min(attempts, key=lambda a: a["contention"] or 0.0)
    return best, [a["contention"] for a in attempts]


def _torch_beside_numpy(name, sessions, args, best) -> None:
    """PyTorch in this process, each step right after a sequential-engine step (as in
    the benchmark's rounds before PyTorch had its own process), in rounds of its own:
    a PyTorch step changes the next GEMMs' time and numpy's BLAS threads PyTorch's, so
    these rounds stay apart from ours. Adds the "torch" series to `best` (the seq
    samples of these rounds are dropped) and keeps the larger other load."""
    beside, _ = timed(name, sessions, ["seq", "torch"], args, rotate=False)
    for key in ("forward", "times", "step", "faults"):
        best[key]["torch"] = beside[key]["torch"]
    loads = [c for c in (best["contention"], beside["contention"]) if c is not None]
    best["contention"] = max(loads) if loads else None


def measure_workload(w, args, workers, cores, torch, keep_timeline=False) -> dict:
    """Everything the report shows about workload `w` in one malloc setting: times of
    every configuration; unless `args.timing_only` the bound and efficiency, peak
    memory, torch's node count and the timeline."""
    t0 = time.perf_counter()
    data = w.data(args.seed, args.size)
    cfgs = configs(workers, torch)
    sessions = sessions_for(w, data, cfgs)
    best, contentions = timed(w.name, sessions, cfgs[:-1] if torch else cfgs, args)
    if torch is not None:
        _torch_beside_numpy(w.name, sessions, args, best)
    res = timing_result(best, cores, w.description, w.branches, data["_dims"])
    res["attempts_contention"] = contentions
    phases = {"timing": time.perf_counter() - t0}
    res["phase_seconds"] = phases
    if getattr(args, "timing_only", False):
        return res
    loss, _ = w.build(data)
    res["bound"] = profile_graph(loss, cores, repeats=2 if args.quick else 3)
    del loss
    res["efficiency"] = res["bound"]["bound"] / res["median"][f"par{cores}"]
    phases["bound"] = time.perf_counter() - t0 - phases["timing"]
    mem = {c: peak_memory(w, data, c) for c in ("seq", f"par{cores}")}
    res["peak_bytes"] = {c: m[0] for c, m in mem.items()}
    res["peak_bytes_absolute"] = {c: m[1] for c, m in mem.items()}
    phases["memory"] = time.perf_counter() - t0 - sum(phases.values())
    if torch is not None:
        res["torch_nodes"] = torch_nodes(w.build_torch(data)[0])
    res["timeline"] = timeline(w, data, cores, keep_events=keep_timeline,
                               calls=1 if args.quick else 3)
    phases["timeline"] = time.perf_counter() - t0 - sum(phases.values())
    return res


def measure_torch(w, args, torch, cores) -> dict:
    """PyTorch's training step on workload `w` (the PyTorch child), its node count and,
    on wide-elementwise, numpy's per-element kernel gap to torch."""
    t0 = time.perf_counter()
    data = w.data(args.seed, args.size)
    best, contentions = timed(w.name, sessions_for(w, data, ["torch"]), ["torch"], args,
                              warmup=TORCH_WARMUP)
    res = timing_result(best, cores, w.description, w.branches, data["_dims"])
    res["attempts_contention"] = contentions
    res["phase_seconds"] = {"timing": time.perf_counter() - t0}
    if w.name == "wide-elementwise":  # also in a batch of more rounds: the quietest is kept
        res["kernel_gap"] = kernel_gap(torch, data["_dims"]["n"], cores,
                                       rounds=max(args.reps, 7), seed=args.seed)
        res["phase_seconds"]["kernel_gap"] = time.perf_counter() - t0 - \
            res["phase_seconds"]["timing"]
    if not getattr(args, "timing_only", False):
        res["torch_nodes"] = torch_nodes(w.build_torch(data)[0])
    return res
