"""The two ways a parallel call sums a node's contributions, each owning its state.

Gradients with several contributions are summed in canonical order (`accumulate`), so
results are bitwise identical to the sequential engine's. The cost model picks one way
per call (`cost.Decision.accumulation`); the call's `GraphTask` holds it as `task.acc`,
and `executor.execute` calls only `prepare`, `fanout`, `full` and `keyed` on it.

- `Ranked` (default): one pass over the edges at set-up gives every contribution its
  rank. `slots`: node -> `Slot`, for every node that receives two or more
  contributions (seeds included). A contribution that arrives before its turn is
  parked in the slot; the thread holding `slot.busy` does the numpy add outside the
  lock. `edges`: node -> list of `(input index, next node, rank, Slot or None)` for
  each outgoing edge that carries a gradient (read-only after set-up). Workers index
  it and never call `dict.get` on it: on free-threaded 3.13 a `.get` from a thread
  other than the dict's creator whose value is a list or object was measured ~15x
  slower (2.4 us against 0.15 us), while `d[k]` stays fast.
  Backpressure: `parked`, `parked_bytes` count the contributions parked across all
  slots and the bytes they own (memory the sequential engine never holds). `full` is
  set while `parked >= max_parked` or `parked_bytes >= max_parked_bytes` (so a large
  contribution counts for its size, not as one of four); the task then stops starting
  queued items and threads hand their inline work to the queue (`GraphTask.throttled`,
  `executor.yield_to_queue`), and `wake` is called when it clears.
- `Keyed` (every node cheap, small gradients and fan-in, `share_cheap` only): no
  per-edge set-up at all (it costs about 4 us per node on 3.13t, as much as running a
  small node). `pending`: node -> list of `(key, grad)`, each node's entry guarded by
  one of `stripes` (32 locks, picked by the node's hash); `totals` (the plan's
  in-degrees plus seeds) is read-only. The contribution that completes the count takes
  the list and sums it in key order outside the lock. It holds every contribution
  until the last one arrives: for small gradients only. Never `full`.

Both `prepare` methods return the ready roots as `[(node, grad, owned)]`; `fanout`
sends a node's input gradients (None: "no gradient") along its edges and appends the
consumers whose gradient is now complete to `ready`.

Thread safety: `prepare` runs on the calling thread before any worker sees the call;
`fanout` and `contribute` may run on any thread of the call at once (`Ranked` under the
task's lock, `Keyed` under its stripes); `release` runs once no thread runs the call.
"""
from __future__ import annotations

import threading

import numpy as np

from .. import memory
from .accumulate import Slot, contribution_key, seed_key, sum_in_order


class Ranked:
    """Ranked accumulation with backpressure (see the module docstring)."""

    keyed = False

    def __init__(self, plan, stats, lock, wake, max_parked: int = 4,
                 max_parked_bytes: float = float("inf")):
        self.plan = plan
        self.stats = stats          # the call's CallStats: parked_peak
        self.lock = lock            # the task's lock: guards slots and the counts
        self.wake = wake            # () -> None: wake the call's threads (full cleared)
        self.max_parked = max_parked
        self.max_parked_bytes = max_parked_bytes
        self.slots = {}
        self.edges = {}
        self.parked = 0
        self.parked_bytes = 0
        self.full = False  # parked beyond max_parked or max_parked_bytes (read racily)

    def prepare(self, order) -> list:
        """Edges for every node and Slots for multi-contribution nodes.

        `order` is the plan's running nodes in decreasing seq: the order in which
        the sequential engine sends their contributions, so numbering each node's
        incoming edges in that order (after its seeds) gives the canonical ranks.
        """
        plan = self.plan
        seeds = _count_seeds(plan.roots)
        slots = self.slots
        pos = plan.positions
        for node, n in plan.in_degree.items():
            s = seeds.get(node, 0)
            if n + s > 1:
                slots[node] = slot = Slot(n + s, None if pos is None else
                                          (2 * pos[node], plan.made))
                slot.assigned = s
        masks = plan.input_masks
        # every node a gradient can reach has an entry: workers index, never .get()
        edges = self.edges = dict.fromkeys(plan.in_degree, ())
        for node in order:
            out = []
            mask = None if masks is None else masks[node]
            for i, nxt in enumerate(node.next_nodes):
                if nxt is None or (mask is not None and not mask[i]):
                    continue
                slot = slots.get(nxt)
                if slot is None:
                    out.append((i, nxt, 0, None))
                else:
                    out.append((i, nxt, slot.assigned, slot))
                    slot.assigned += 1
            edges[node] = out
        ready = []
        for node, g in plan.roots:
            slot = slots.get(node)
            if slot is None:
                ready.append((node, g, False))
            else:
                done = self.contribute(slot, slot.next_rank, g)
                if done is not None:
                    ready.append((node,) + done)
        return ready

    def fanout(self, node, grads, ready: list) -> None:
        """Send `node`'s input gradients along its ranked edges."""
        for i, nxt, rank, slot in self.edges[node]:
            gi = None if grads is None else grads[i]
            if slot is None:
                ready.append((nxt, gi, False))
            else:
                done = self.contribute(slot, rank, gi)
                if done is not None:
                    ready.append((nxt,) + done)

    def contribute(self, slot: Slot, rank: int, g):
        """Add contribution number `rank` (None: "no gradient", still takes its turn);
        (grad, owned) when the slot is complete, else None."""
        lock = self.lock
        with lock:
            if slot.busy or rank != slot.next_rank:
                self._park(slot, rank, g)
                return None
            slot.busy = True
        unthrottled = False
        try:
            while True:
                slot.add(g)  # numpy work outside the lock; `busy` keeps others out
                with lock:
                    slot.next_rank += 1
                    if slot.next_rank == slot.total:
                        slot.busy = False
                        return slot.take()
                    parked = slot.parked
                    if parked and slot.next_rank in parked:
                        g = parked.pop(slot.next_rank)
                        self.parked -= 1
                        self.parked_bytes -= held_bytes(g)
                        if self.full and self.parked < self.max_parked \
                                and self.parked_bytes < self.max_parked_bytes:
                            self.full = False
                            unthrottled = True
                        continue
                    slot.busy = False
                    return None
        finally:
            if unthrottled:
                self.wake()

    def _park(self, slot: Slot, rank: int, g) -> None:
        # caller holds the lock
        if slot.parked is None:
            slot.parked = {}
        slot.parked[rank] = g
        self.parked += 1
        self.parked_bytes += held_bytes(g)
        if self.parked_bytes > self.stats.parked_peak:
            self.stats.parked_peak = self.parked_bytes
        self.full = (self.parked >= self.max_parked
                     or self.parked_bytes >= self.max_parked_bytes)

    def release(self) -> None:
        """Drop the slots (parked gradients) and edges of a failed call."""
        self.slots, self.edges = {}, {}
        self.plan = self.wake = None


class Keyed:
    """Keyed accumulation (see the module docstring)."""

    keyed = True
    full = False  # holds every contribution until its node is complete: no backpressure

    def __init__(self, plan):
        self.plan = plan
        self.stripes = tuple(threading.Lock() for _ in range(32))
        self.pending = {}
        self.totals = plan.in_degree

    def prepare(self, order=None) -> list:
        """The only set-up is the seeds."""
        plan = self.plan
        totals = self.totals
        seeds = _count_seeds(plan.roots)
        if any(totals[node] or n > 1 for node, n in seeds.items()):
            totals = self.totals = dict(totals)  # never change the plan's own counts
            for node, n in seeds.items():
                totals[node] += n
        ready = []
        for j, (node, g) in enumerate(plan.roots):
            if totals[node] <= 1:
                ready.append((node, g, False))
            else:
                entries = self.pending.setdefault(node, [])
                entries.append((seed_key(j), g))
                if len(entries) == totals[node]:  # several seeds and nothing else
                    del self.pending[node]
                    ready.append((node,) + sum_in_order(entries))
        return ready

    def fanout(self, node, grads, ready: list) -> None:
        """Send `node`'s input gradients along its edges, read from the node and
        pruned by the plan's input masks (no per-edge set-up)."""
        masks = self.plan.input_masks
        mask = None
        if masks is not None:
            if node not in masks:  # pruned: sends nothing (`in`, then `[]`: see edges)
                return
            mask = masks[node]
        totals = self.totals
        for i, nxt in enumerate(node.next_nodes):
            if nxt is None or (mask is not None and not mask[i]):
                continue
            gi = None if grads is None else grads[i]
            if totals[nxt] == 1:
                ready.append((nxt, gi, False))
                continue
            done = self.contribute(nxt, node, i, gi)
            if done is not None:
                ready.append((nxt,) + done)

    def contribute(self, node, sender, slot: int, g):
        """Keyed accumulation of what `sender` sends through its input `slot` to `node`
        (whose total is more than one)."""
        entry = (contribution_key(sender, slot), g)
        with self.stripes[hash(node) & 31]:
            entries = self.pending.get(node)
            if entries is None:
                self.pending[node] = [entry]
                return None
            entries.append(entry)
            if len(entries) < self.totals[node]:
                return None
            del self.pending[node]
        return sum_in_order(entries)

    def release(self) -> None:
        """Drop the pending contributions of a failed call."""
        self.pending, self.totals = {}, {}
        self.plan = None


def held_bytes(g) -> int:
    """Bytes a parked contribution keeps alive: an array that owns its data, or views a
    block of the caching allocator (`memory`), counts its size; another view (e.g. a
    broadcast seed) counts 0, its base is owned elsewhere."""
    if g is None:
        return 0
    if type(g) is not np.ndarray:  # a create_graph gradient (a Tensor)
        g = g._data
    return g.nbytes if g.base is None or memory.is_block(g.base) else 0


def _count_seeds(roots) -> dict:
    seeds = {}
    for node, _ in roots:
        seeds[node] = seeds.get(node, 0) + 1
    return seeds
