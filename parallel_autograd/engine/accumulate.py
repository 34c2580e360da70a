"""The canonical sum: how contributions to one gradient are added, in one place.

Every engine result is bitwise equal to the sequential engine's because every path
that sums gradients (the sequential walk, the parallel engine's ranked and keyed
accumulation, the benchmark's profiled walk) uses the functions below:

- Order: contributions to a node's gradient are summed seeds first (in argument
  order), then by consumer `seq` descending, then by input slot. Walking nodes in
  `backward_order` (decreasing `seq`) delivers them in exactly that order, which is
  why the sequential engine needs no sorting; the parallel engine reproduces it with
  ranks (`Slot`) or sort keys (`contribution_key`, `seed_key`, `sum_in_order`).
- Arithmetic (`add_gradient`): the first contribution is kept by reference; the
  second makes a new array the engine owns; later ones are added in place into that
  buffer only (never into an array the engine did not allocate, which a user or a
  saved value may hold); a 0-d sum stays an ndarray.

Thread safety: the functions are pure or act on arguments the caller owns; `Pending`
and `Slot` are not locked (one walking thread, or the parallel engine's own locks).
"""
from __future__ import annotations

import operator

import numpy as np

from ..grad_mode import Recording, run_recording
from ..memory import pooled as _pooled


def seq_key(node) -> int:
    """Sort key of a node: its creation number (`Node.seq`)."""
    return node.seq


def backward_order(nodes) -> list:
    """`nodes` in decreasing `seq`: a valid backward order (a node's consumers were
    created after it) and the order that delivers contributions canonically."""
    return sorted(nodes, key=seq_key, reverse=True)


def add_gradient(buf, owned: bool, g):
    """`buf + g` by the canonical arithmetic; returns `(sum, owned)`.

    `buf` is None before the first contribution, `owned` says whether the engine
    allocated `buf` (only then is it written in place).
    """
    if buf is None:
        return g, False
    if owned:
        np.add(buf, g, out=buf)
        return buf, True
    s = _pooled.add(buf, g)  # the sum's memory is the engine's (cached when large)
    # 0-d arrays add to a numpy scalar, which np.add(out=) rejects: keep ndarrays
    return (s if type(s) is np.ndarray else np.asarray(s)), True


class Pending(dict):
    """Gradients being summed during one walk in `backward_order`: node -> (sum, owned).

    Used by the sequential engine and the benchmark's profiled walk; contributions
    arrive in canonical order by construction, so `add` never sorts. Read a node's
    sum with `pop(node, None)` (a dict's own, in C: this is the per-node path).
    """

    __slots__ = ()

    def add(self, node, g) -> None:
        """Add contribution `g` to `node`'s sum."""
        prev = self.get(node)
        self[node] = (g, False) if prev is None else add_gradient(prev[0], prev[1], g)


class Slot:
    """Ranked accumulation of one node's gradient in the parallel engine: the
    contributions get ranks 0..total-1 in canonical order (seeds first) and are added
    in rank order. Locking, parking of early arrivals and the `busy` hand-over are the
    call's (`GraphTask.contribute`); `add` is the arithmetic, done outside any lock."""

    __slots__ = ("buf", "owned", "next_rank", "total", "parked", "busy", "assigned", "graph")

    def __init__(self, total: int, graph=None):
        self.buf = None
        self.owned = False
        self.next_rank = 0
        self.total = total
        self.parked = None    # rank -> gradient that arrived before its turn
        self.busy = False     # a thread is adding (outside the lock)
        self.assigned = 0     # ranks handed out so far while the call is set up
        self.graph = graph    # create_graph: (2 * the node's position, Plan.made)

    def add(self, g) -> None:
        if g is None:  # "no gradient" still takes its turn
            return
        if self.graph is None:
            self.buf, self.owned = add_gradient(self.buf, self.owned, g)
        else:  # a recorded sum, tagged with the node's position and this rank
            self.buf = graph_add(self.buf, g, (self.graph[0], self.next_rank), self.graph[1])

    def take(self):
        """The completed sum `(gradient, owned)`; the slot lets go of it."""
        g, self.buf = self.buf, None
        return g, self.owned


# Keyed accumulation: each contribution carries a key that sorts in canonical order.
# Input slot i of the node numbered seq gets (-seq << 24) + i; seed j gets SEED_KEY + j.
_KEY_SHIFT = 24
_SEED_KEY = -(1 << 200)


def contribution_key(node, slot: int) -> int:
    """Sort key of the contribution `node` sends through its input `slot`."""
    return (-node.seq << _KEY_SHIFT) + slot


def seed_key(j: int) -> int:
    """Sort key of the seed gradient of the call's output number `j` (before all others)."""
    return _SEED_KEY + j


def sum_in_order(entries: list):
    """Sum keyed contributions `[(key, grad or None)]` in key order: `(grad, owned)`."""
    entries.sort(key=_entry_key)  # keys are unique: arrays are never compared
    buf, owned = None, False
    for _, g in entries:
        if g is not None:
            buf, owned = add_gradient(buf, owned, g)
    return buf, owned


def _entry_key(entry):
    return entry[0]


def graph_add(buf, g, tag: tuple, out: list):
    """`buf + g` recorded (the `add` op) under `tag`; `g` when `buf` is None."""
    if buf is None:
        return g
    return run_recording(Recording(tag, out), operator.add, buf, g)
