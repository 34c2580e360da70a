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

    mode: "sequential" or "parallel"; reason: why, in words (formatted when read: the
    sequential verdict of a chain is on the per-call path, its text is not).
    order: the running nodes in decreasing seq (parallel only, else None).
    accumulation: "ranked" or "keyed" (parallel only, else None).
    total_cost, critical_path: the estimates it was based on (0 where not computed).
    """

    __slots__ = ("mode", "_reason", "_args", "order", "accumulation", "total_cost",
                 "critical_path")

    def __init__(self, reason: str, total_cost: float = 0, critical_path: float = 0,
                 *args):
        self.mode = "sequential"
        self._reason = reason  # a str.format template when args are given
        self._args = args
        self.order = None
        self.accumulation = None
        self.total_cost = total_cost
        self.critical_path = critical_path

    @property
    def reason(self) -> str:
        return self._reason.format(*self._args) if self._args else self._reason


def decide(plan, cfg) -> Decision:
    """Run `plan` in parallel or not, with the thresholds of `cfg` (an `Engine`:
    num_workers, min_nodes, min_work, min_width, inline_below, max_blas_share,
    share_cheap, max_parked)."""
    nodes = plan.in_degree
    if cfg.num_workers == 1:
        return _NUM_WORKERS_1
    if len(nodes) < cfg.min_nodes:
        return Decision("small graph ({} nodes < min_nodes={})", 0, 0, len(nodes),
                        cfg.min_nodes)
    total = biggest = 0
    for n in nodes:
        c = n.cost
        total += c
        if c > biggest:
            biggest = c
    all_cheap = biggest < cfg.inline_below
    if all_cheap and not cfg.share_cheap and len({n for n, _ in plan.roots}) <= 1:
        return Decision("every node is cheap (< inline_below={:.3g}): one thread would "
                        "run them all", total, 0, cfg.inline_below)
    if total < cfg.min_work:
        return Decision("little work ({:.3g} < min_work={:.3g})", total, 0, total,
                        cfg.min_work)
    threaded = sum(n.cost for n in nodes if n.threaded)
    if threaded > cfg.max_blas_share * total and blas.available_threads() > 1:
        return Decision(BLAS_BOUND, total, 0, threaded / total)
    order = backward_order(nodes if plan.runs is None else plan.runs)
    cp = critical_path(order)
    width = total / cp if cp else 0.0
    if width < cfg.min_width:
        return Decision("no width (work / critical path = {:.2f} < {})", total, cp, width,
                        cfg.min_width)
    d = Decision(f"width {width:.2f}", total, cp)
    d.mode, d.order = "parallel", order
    # create_graph sums by rank (recorded adds tagged by rank: engine/graph.py)
    keyed = (all_cheap and cfg.share_cheap and plan.positions is None
             and keyed_fits(plan, cfg))
    d.accumulation = "keyed" if keyed else "ranked"
    return d


_NUM_WORKERS_1 = Decision("num_workers=1")
BLAS_BOUND = ("BLAS-bound ({:.0%} of the work is in multithreaded BLAS kernels, which "
              "already use the cores)")


class DecisionCache:
    """The sequential verdicts of one engine, by graph shape: a training loop builds
    the same graph every step, and a chain's verdict ("no width", "BLAS-bound", ...)
    costs `decide` a pass over every node (about 50 ns a node, 1-2% of a chain of small
    nodes). A call whose shape (`shape_key`: node and root counts, the root's op and
    sizes around it, pruning, create_graph) had a sequential verdict reuses it, and
    every `RECHECK`-th such call decides again in full, so a graph whose costs changed
    under the same shape is found out within that many calls; a "BLAS-bound" verdict is
    reused only while BLAS still has several threads. Parallel verdicts are never
    reused (their node order is per call, and such calls are long). The engine's
    thresholds are not in the key: the engine empties its cache (`clear`) when one is
    set (`Engine`'s threshold properties), so a hit costs one small tuple and one dict
    lookup (issue 28: the default engine within 1% of the sequential one on chains).

    A wrong reuse can only cost time: both modes give bitwise the same results.
    Thread safety: dict reads and writes are atomic; concurrent calls may race on an
    entry's hit count, which only moves when the next full check happens.
    """

    RECHECK = 32   # every RECHECK-th hit of an entry decides again in full
    SIZE = 64      # shapes kept; the cache is emptied when full

    __slots__ = ("_entries",)

    def __init__(self):
        self._entries = {}  # shape_key -> [Decision, hits]

    def clear(self) -> None:
        """Forget every verdict (a threshold changed)."""
        self._entries = {}

    def decide(self, plan, cfg) -> Decision:
        """`decide(plan, cfg)`, or the verdict of the last call of this shape. `cfg`
        is the `Engine` (its thresholds read past their properties: this is the
        per-call path of every chain)."""
        roots = plan.roots
        nodes = len(plan.in_degree)
        if not roots or cfg.num_workers == 1 or nodes < cfg._min_nodes:
            return decide(plan, cfg)  # O(1) verdicts, or nothing to key on
        # the shape (see `shape_key`), built here: a call less on the per-call path
        root = roots[0][0]
        nxt = root.next_nodes
        first = nxt[0] if nxt else None
        runs = plan.runs
        key = (nodes, len(roots), root.name, root.size, -1 if first is None else first.size,
               -1 if runs is None else len(runs), plan.positions is None)
        entry = self._entries.get(key)
        if entry is not None:
            hits = entry[1] = entry[1] + 1
            d = entry[0]
            if hits % self.RECHECK and (d._reason is not BLAS_BOUND_AGAIN
                                        or blas.available_threads() > 1):
                return d
        return self._decide_again(plan, cfg, key, entry)

    def _decide_again(self, plan, cfg, key, entry) -> Decision:
        d = decide(plan, cfg)
        entries = self._entries
        if d.order is not None:
            entries.pop(key, None)
            return d
        again = Decision(_AGAIN.get(d._reason, d._reason + " (as before for this graph "
                                    "shape)"), d.total_cost, d.critical_path, *d._args)
        if entry is not None:
            entry[0] = again
        else:
            if len(entries) >= self.SIZE:
                entries.clear()
            entries[key] = [again, 0]
        return d


def shape_key(plan) -> tuple:
    """What identifies a graph's shape for `DecisionCache`, in O(1): the counts of
    nodes, roots and running nodes, the first root's op and size and its first input's
    size (it changes with the batch), and create_graph. (`DecisionCache.decide` builds
    the same tuple inline; `tests/test_engine_decisions.py` checks they agree.)"""
    root = plan.roots[0][0]
    nxt = root.next_nodes
    first = nxt[0] if nxt else None
    runs = plan.runs
    return (len(plan.in_degree), len(plan.roots), root.name, root.size,
            -1 if first is None else first.size, -1 if runs is None else len(runs),
            plan.positions is None)


BLAS_BOUND_AGAIN = BLAS_BOUND + " (as before for this graph shape)"
_AGAIN = {BLAS_BOUND: BLAS_BOUND_AGAIN}


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
