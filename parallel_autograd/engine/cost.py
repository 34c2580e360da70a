"""The cost model: whether a backward call can gain from running in parallel.

Ops estimate their backward work when they record a node (`Node.cost`, about
nanoseconds on one core; default: the output's size) and mark rules that run
multithreaded BLAS kernels (`Node.threaded`). `decide` reads those estimates and the
engine's thresholds and returns a `Decision`: run sequentially (and why), or in
parallel with which accumulation. The machine constants live in the leaf module
`parallel_autograd/costs.py` (the ops read them too, without importing the engine).

Thread safety: everything here is pure, except that `decide` asks `blas` for the
process's BLAS thread count.
"""
from __future__ import annotations

import os
import sys

# the machine constants' home is the leaf `costs`; re-exported here for the engine's callers
from ..costs import BLAS_FLOPS_PER_NS, gemm_cost  # noqa: F401
from . import blas
from .accumulate import backward_order


def usable_cores() -> int:
    """CPUs this process may run on (affinity-aware where the OS says)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def gil_enabled() -> bool:
    """False on a free-threaded CPython running without the GIL."""
    check = getattr(sys, "_is_gil_enabled", None)
    return True if check is None else bool(check())


class Decision:
    """What `decide` concluded for one call.

    mode: "sequential" or "parallel"; reason: why, in words.
    order: the running nodes in decreasing seq (parallel only, else None).
    accumulation: "ranked" or "keyed" (parallel only, else None).
    total_cost, critical_path: the estimates it was based on (0 where not computed).
    """

    __slots__ = ("mode", "reason", "order", "accumulation", "total_cost", "critical_path")

    def __init__(self, reason: str, total_cost: float = 0, critical_path: float = 0):
        self.mode = "sequential"
        self.reason = reason
        self.order = None
        self.accumulation = None
        self.total_cost = total_cost
        self.critical_path = critical_path


def decide(plan, cfg) -> Decision:
    """Run `plan` in parallel or not, with the thresholds of `cfg` (an `Engine`:
    num_workers, min_nodes, min_work, min_width, inline_below, max_blas_share,
    share_cheap, max_parked)."""
    nodes = plan.in_degree
    if cfg.num_workers == 1:
        return Decision("num_workers=1")
    if len(nodes) < cfg.min_nodes:
        return Decision(f"small graph ({len(nodes)} nodes < min_nodes={cfg.min_nodes})")
    total = biggest = 0
    for n in nodes:
        c = n.cost
        total += c
        if c > biggest:
            biggest = c
    all_cheap = biggest < cfg.inline_below
    if all_cheap and not cfg.share_cheap and len({n for n, _ in plan.roots}) <= 1:
        return Decision(f"every node is cheap (< inline_below={cfg.inline_below:.3g}): "
                        "one thread would run them all", total)
    if total < cfg.min_work:
        return Decision(f"little work ({total:.3g} < min_work={cfg.min_work:.3g})", total)
    threaded = sum(n.cost for n in nodes if n.threaded)
    if threaded > cfg.max_blas_share * total and blas.available_threads() > 1:
        return Decision(f"BLAS-bound ({threaded / total:.0%} of the work is in multithreaded "
                        f"BLAS kernels, which already use the cores)", total)
    order = backward_order(nodes if plan.runs is None else plan.runs)
    cp = critical_path(order)
    width = total / cp if cp else 0.0
    if width < cfg.min_width:
        return Decision(f"no width (work / critical path = {width:.2f} < {cfg.min_width})",
                        total, cp)
    d = Decision(f"width {width:.2f}", total, cp)
    d.mode, d.order = "parallel", order
    # create_graph sums by rank (recorded adds tagged by rank: engine/graph.py)
    keyed = (all_cheap and cfg.share_cheap and plan.positions is None
             and keyed_fits(plan, cfg))
    d.accumulation = "keyed" if keyed else "ranked"
    return d


def critical_path(order, costs: dict | None = None) -> float:
    """The most expensive path through the nodes in `order` (decreasing seq): the sum
    of `Node.cost` along it, or of `costs[node]` (0 if absent) when given."""
    longest = {}
    cp = 0
    for node in order:
        c = longest.get(node, 0) + (node.cost if costs is None else costs.get(node, 0))
        if c > cp:
            cp = c
        for nxt in node.next_nodes:
            if nxt is not None and longest.get(nxt, 0) < c:
                longest[nxt] = c
    return cp


def keyed_fits(plan, cfg) -> bool:
    """Keyed accumulation holds every contribution to a gradient until the last
    arrives: use it only if no node's fan-in times its gradient size exceeds
    max_parked * inline_below elements (node costs do not bound that: a leaf's sink
    costs 0, and a sum or an indexing op sends back its input's size)."""
    cap = cfg.max_parked * cfg.inline_below
    for node, fan_in in plan.in_degree.items():
        if fan_in > 1 and node.size * fan_in > cap:
            return False
    return True
