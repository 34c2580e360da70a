"""The parallel bound of a backward pass, from a profiled sequential walk.

`profile_graph(loss)` plans the call once with `retain_graph=True` and, after one
untimed warm-up walk, walks it like the sequential engine (decreasing `seq`,
contributions summed in the same order, by `parallel_autograd.engine.accumulate`)
several times, timing each node: its rule plus the additions of its output
gradients into their consumers' buffers (the work a worker does for that node).
Per-node times are medians over the walks. Nothing is committed to `.grad`.

The walk runs twice: once with BLAS (and intraop's kernel split) limited to one
thread, which measures each node's work on one core, and once as configured
(BLAS's threads, split kernels), which measures how fast
a node can finish when it has the machine. Then

    total    = sum of the one-core times                  (the work)
    critical = longest path through the graph, each node at its faster time
    bound    = max(total / cores, critical)

is a lower bound for any schedule of these kernels on `cores` cores that runs each
node on one thread (up to measurement noise), and `width = total / critical`
is the graph's available parallelism. Efficiency is `bound / measured time`.
Per-node engine bookkeeping is deliberately not part of the bound. `summarize` does
that arithmetic from per-node times; the critical path is the engine's own
(`parallel_autograd.engine.cost.critical_path`).
"""
from __future__ import annotations

import statistics
import time
from collections import defaultdict

from parallel_autograd import intraop
from parallel_autograd.engine.accumulate import Pending, backward_order
from parallel_autograd.engine.cost import critical_path
from parallel_autograd.engine.plan import plan_call


def _walk(plan, order, times):
    """One sequential pass over `plan` (the sequential engine's walk and canonical sum,
    without hooks or commit); appends each node's seconds to `times[node]`."""
    pending = Pending()
    for node, g in plan.roots:
        pending.add(node, g)
    perf = time.perf_counter
    for node in order:
        entry = pending.pop(node, None)
        if entry is None:
            continue
        t0 = perf()
        if node.variable is None:  # AccumulateGrad nodes only hand over their gradient
            grads = node.input_grads(entry[0])
            for nxt, gi in zip(node.next_nodes, grads):
                if gi is not None:
                    pending.add(nxt, gi)
            del grads
        del entry
        times[node].append(perf() - t0)


def _node_times(plan, order, repeats, blas_threads):
    times = defaultdict(list)
    if blas_threads is None:
        for _ in range(repeats):
            _walk(plan, order, times)
    else:  # one core's work: BLAS and the split of large kernels (intraop) limited too
        from threadpoolctl import threadpool_limits
        prev = intraop.set_num_threads(blas_threads)
        try:
            with threadpool_limits(limits=blas_threads, user_api="blas"):
                for _ in range(repeats):
                    _walk(plan, order, times)
        finally:
            intraop.set_num_threads(prev)
    return {n: statistics.median(ts) for n, ts in times.items()}


def profile_graph(loss, cores: int, repeats: int = 3) -> dict:
    """Profile the backward graph of `loss` (which must not have been run yet).

    Returns `summarize`'s dict (seconds). The graph's saved values are released at the end.
    """
    plan = plan_call(loss, retain_graph=True)
    order = backward_order(plan.nodes)
    _walk(plan, order, defaultdict(list))  # warm-up: first-touch page faults, caches
    one = _node_times(plan, order, repeats, blas_threads=1)
    full = _node_times(plan, order, repeats, blas_threads=None)
    for n in order:  # free the graph as a non-retaining backward would (leaves' sinks live on)
        if n.variable is None:
            n.saved = None
            n.released = True
    return summarize(order, one, full, cores)


def summarize(order, one: dict, full: dict, cores: int) -> dict:
    """The bound from per-node seconds: `one` with BLAS on one thread, `full` with BLAS as
    configured (a node missing from either counts 0 there), `order` the nodes in
    decreasing seq. Returns nodes, total (sum of `one`), total_blas (sum of `full`),
    critical (the engine's critical path, each node at min(one, full)), bound
    (max(total / cores, critical)), width (total / critical) and by_op (op name ->
    count, one-core seconds; most expensive first)."""
    fast = {n: min(one.get(n, 0.0), full.get(n, 0.0)) for n in order}
    total = sum(one.values())
    crit = critical_path(order, fast)
    by_op = defaultdict(lambda: [0, 0.0])
    for n in order:
        entry = by_op[n.name]
        entry[0] += 1
        entry[1] += one.get(n, 0.0)
    return {"nodes": len(order), "total": total, "total_blas": sum(full.values()),
            "critical": crit, "bound": max(total / cores, crit),
            "width": total / crit if crit else 0.0,
            "by_op": {k: {"count": c, "seconds": s}
                      for k, (c, s) in sorted(by_op.items(), key=lambda kv: -kv[1][1])}}
