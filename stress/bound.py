"""The parallel bound of a backward pass, from a profiled sequential walk.

`profile_graph(loss)` plans the call once with `retain_graph=True` and, after one
untimed warm-up walk, walks it like the sequential engine (decreasing `seq`, contributions summed in the same
order) several times, timing each node: its rule plus the additions of its output
gradients into their consumers' buffers (the work a worker does for that node).
Per-node times are medians over the walks. Nothing is committed to `.grad`.

The walk runs twice: once with BLAS limited to one thread, which measures each
node's work on one core, and once with BLAS as configured, which measures how fast
a node can finish when it has the machine. Then

    total    = sum of the one-core times                  (the work)
    critical = longest path through the graph, each node at its faster time
    bound    = max(total / cores, critical)

is a lower bound for any schedule of these kernels on `cores` cores that runs each
node on one thread (up to measurement noise), and `width = total / critical`
is the graph's available parallelism. Efficiency is `bound / measured time`.
Per-node engine bookkeeping is deliberately not part of the bound.
"""
from __future__ import annotations

import statistics
import time
from collections import defaultdict

import numpy as np

from parallel_autograd.engine.graph import plan_call


def _walk(plan, order, times):
    """One sequential pass over `plan`; appends each node's seconds to `times[node]`."""
    pending, owned = {}, set()
    for node, g in plan.roots:
        _add(pending, owned, node, g)
    perf = time.perf_counter
    for node in order:
        g = pending.pop(node, None)
        if g is None:
            continue
        t0 = perf()
        if node.variable is None:  # AccumulateGrad nodes only hand over their gradient
            grads = node.input_grads(g)
            for nxt, gi in zip(node.next_nodes, grads):
                if gi is not None:
                    _add(pending, owned, nxt, gi)
            del grads
        del g
        times[node].append(perf() - t0)


def _add(pending, owned, node, g):
    prev = pending.get(node)
    if prev is None:
        pending[node] = g
    elif node in owned:
        np.add(prev, g, out=prev)
    else:
        pending[node] = prev + g
        owned.add(node)


def _node_times(plan, order, repeats, blas_threads):
    times = defaultdict(list)
    if blas_threads is None:
        for _ in range(repeats):
            _walk(plan, order, times)
    else:
        from threadpoolctl import threadpool_limits
        with threadpool_limits(limits=blas_threads, user_api="blas"):
            for _ in range(repeats):
                _walk(plan, order, times)
    return {n: statistics.median(ts) for n, ts in times.items()}


def critical_path(order, t) -> float:
    """Longest path (sum of `t[node]`) from a root; `order` is decreasing seq."""
    start = {}
    longest = 0.0
    for node in order:
        finish = start.get(node, 0.0) + t.get(node, 0.0)
        if finish > longest:
            longest = finish
        for nxt in node.next_nodes:
            if nxt is not None and start.get(nxt, 0.0) < finish:
                start[nxt] = finish
    return longest


def profile_graph(loss, cores: int, repeats: int = 3) -> dict:
    """Profile the backward graph of `loss` (which must not have been run yet).

    Returns a dict (seconds): nodes, total, critical, bound, width, total_blas
    (sum of per-node times with BLAS as configured) and by_op (op name -> count,
    one-core seconds). The graph's saved values are released at the end.
    """
    plan = plan_call(loss, retain_graph=True)
    order = sorted(plan.nodes, key=lambda n: n.seq, reverse=True)
    _walk(plan, order, defaultdict(list))  # warm-up: first-touch page faults, caches
    one = _node_times(plan, order, repeats, blas_threads=1)
    full = _node_times(plan, order, repeats, blas_threads=None)
    fast = {n: min(one.get(n, 0.0), full.get(n, 0.0)) for n in order}
    total = sum(one.values())
    crit = critical_path(order, fast)
    by_op = defaultdict(lambda: [0, 0.0])
    for n in order:
        entry = by_op[n.name]
        entry[0] += 1
        entry[1] += one.get(n, 0.0)
    for n in order:  # free the graph as a non-retaining backward would (leaves' sinks live on)
        if n.variable is None:
            n.saved = None
            n.released = True
    return {"nodes": len(order), "total": total, "total_blas": sum(full.values()),
            "critical": crit, "bound": max(total / cores, crit),
            "width": total / crit if crit else 0.0,
            "by_op": {k: {"count": c, "seconds": s}
                      for k, (c, s) in sorted(by_op.items(), key=lambda kv: -kv[1][1])}}
