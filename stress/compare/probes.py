"""What is measured once per workload beside the timed rounds: the peak traced memory
of a backward pass (`peak_memory`), the node count of torch's graph (`torch_nodes`),
the timeline of profiled `backward_parallel` calls (`timeline`), and numpy's own
per-element kernel gap to PyTorch (`kernel_gap`)."""
from __future__ import annotations

import gc
import time
import tracemalloc

import numpy as np

import parallel_autograd as pa
from parallel_autograd import memory

from .machine import Contention
from .stats import seed_for


def peak_memory(w, data, config) -> tuple:
    """Traced bytes during one backward pass: (peak above the level at its start,
    absolute peak including the graph's saved values). The caching allocator is off:
    tracemalloc would not see a cached block reused."""
    gc.collect()
    tracemalloc.start()
    with memory.caching_disabled():
        return _traced(w, data, config)


def _traced(w, data, config) -> tuple:
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


KERNELS = ("sin", "cos")  # the transcendentals of wide-elementwise's sin and its backward


def _kernel_seconds(fns, x, out, calls) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        for f in fns:
            f(x, out=out)
    return (time.perf_counter() - t0) / calls


def kernel_gap(torch, n: int, cores: int, rounds: int, seed: int, calls: int = 5) -> dict:
    """numpy's own per-element kernel time against PyTorch's on the same `n` float64:
    `np.sin` then `np.cos` into a preallocated output (numpy runs ufuncs on one thread)
    against `torch.sin`/`torch.cos` with one torch thread (`torch1`, the per-core gap)
    and with `cores` threads (`torchN`, as torch runs by default), in `rounds`
    interleaved rounds of `calls` calls each. Seconds per call, every round kept, and the
    other processes' load meanwhile."""
    x = np.random.default_rng(seed_for(seed, "kernel_gap")).standard_normal(n)
    out = np.empty_like(x)
    xt, ot = torch.from_numpy(x), torch.empty(n, dtype=torch.float64)
    np_fns = [getattr(np, k) for k in KERNELS]
    t_fns = [getattr(torch, k) for k in KERNELS]
    samples = {"numpy": [], "torch1": [], "torchN": []}
    threads = torch.get_num_threads()
    meter = Contention()
    try:
        for r in range(rounds + 1):  # round 0: warm-up
            for key in list(samples)[r % 3:] + list(samples)[:r % 3]:
                if key == "numpy":
                    t = _kernel_seconds(np_fns, x, out, calls)
                else:
                    torch.set_num_threads(1 if key == "torch1" else cores)
                    t = _kernel_seconds(t_fns, xt, ot, calls)
                if r:
                    samples[key].append(t)
    finally:
        torch.set_num_threads(threads)
    return {"kernels": list(KERNELS), "n": n, "calls": calls, "samples": samples,
            "contention": meter.cores()}
