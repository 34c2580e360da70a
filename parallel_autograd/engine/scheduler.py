"""Per-call state of the parallel engine and the code that runs one ready node.

State of one call (`GraphTask`), all guarded by `task.lock` unless noted:

- `slots`: node -> `Slot`, for every node that receives two or more gradient
  contributions (seeds included). A Slot sums contributions in canonical rank order
  (consumer seq descending, then input slot; seeds first), the order in which the
  sequential engine receives them, so the result is bitwise identical. A
  contribution that arrives early is parked until the ones before it are added;
  the thread holding `busy` does the numpy add outside the lock.
- `ranks`: node -> tuple of the rank of each of its outgoing edges (read-only).
- `outstanding`: ready or running items of this call not yet finished. The call is
  done when it drops to zero (never "the queue looks empty").
- `error`: the first exception (first error wins); later items are skipped but
  still counted down.
- `running`: threads executing this call's items right now; `parked`: contributions
  parked across all slots; `deferred`: queued items held back (see backpressure).

Backpressure: parked contributions are memory the sequential engine never holds.
A thread that would start a queued item of a call whose `parked >= max_parked`
while another thread still runs that call defers the item instead; deferred items
go back to the queue when the count drops or no thread runs the call. With nothing
running, the highest-seq ready node is the one every parked contribution waits
for, so progress is guaranteed.
- `staged`, `captured`: leaf/retained gradients and grad() results, appended under
  the lock and committed by the caller only after the whole pass succeeded.

Nodes with a single contribution skip the Slot entirely: the gradient goes straight
to the consumer as in the sequential engine.
"""
from __future__ import annotations

import contextvars
import threading
import time

import numpy as np

from .. import profiler
from .completion import annotate, complete_gradient


class Slot:
    """Canonical-order accumulator for one node's gradient within one call."""

    __slots__ = ("buf", "owned", "next_rank", "total", "parked", "busy")

    def __init__(self, total):
        self.buf = None
        self.owned = False
        self.next_rank = 0
        self.total = total
        self.parked = None
        self.busy = False

    def add(self, g):
        """Add `g` (caller holds `busy`, not the lock): same arithmetic as sequential."""
        if g is None:
            return
        if self.buf is None:
            self.buf = g
        elif self.owned:
            np.add(self.buf, g, out=self.buf)
        else:
            s = self.buf + g
            # 0-d arrays add to a numpy scalar, which np.add(out=) rejects
            self.buf = s if type(s) is np.ndarray else np.asarray(s)
            self.owned = True


class CallStats:
    """What one parallel call did; returned by `Engine.backward(..., stats=True)`."""

    __slots__ = ("mode", "reason", "nodes", "workers", "elapsed", "nodes_per_thread",
                 "busy_per_thread", "queue_wait", "inline_runs", "queued_runs",
                 "total_cost", "critical_path", "blas_threads")

    def __init__(self):
        self.nodes_per_thread = {}
        self.busy_per_thread = {}
        self.queue_wait = 0.0
        self.inline_runs = 0
        self.queued_runs = 0
        self.blas_threads = None
        self.total_cost = 0
        self.critical_path = 0

    @property
    def fell_back(self) -> bool:
        return self.mode == "sequential"

    def as_dict(self) -> dict:
        d = {k: getattr(self, k, None) for k in self.__slots__}
        d["fell_back"] = self.fell_back
        return d

    def __repr__(self):
        return f"CallStats({self.as_dict()})"


class GraphTask:
    """One parallel backward call. See the module docstring for its state."""

    def __init__(self, plan, stats, inline_below, max_parked=4, requeue=None):
        self.plan = plan
        # guards slots, outstanding, running, parked, deferred, error, stats, staged and
        # captured (the last two are appended to by complete_gradient: list.append and
        # dict item assignment are atomic in CPython, with or without the GIL)
        self.lock = threading.Lock()
        self.running = 0
        self.parked = 0
        self.max_parked = max_parked
        self.deferred = []
        self.requeue = requeue  # callable(list of items): put deferred items back
        self.slots = {}
        self.ranks = {}
        self.outstanding = 0
        self.error = None
        self.error_node = None
        self.staged = []
        self.captured = {}
        self.stats = stats
        self.inline_below = inline_below
        self.done = threading.Event()
        self.context = contextvars.copy_context()
        self.profile = profiler.active()

    # ---- set-up ---------------------------------------------------------------
    def prepare(self, order):
        """Ranks for every edge and Slots for multi-contribution nodes.

        `order` is the plan's running nodes in decreasing seq: the order in which
        the sequential engine would send their contributions.
        """
        plan = self.plan
        counts = {}
        for node, g in plan.roots:
            counts[node] = counts.get(node, 0) + 1
        needed, masks = plan.needed, plan.input_masks
        ranks = self.ranks
        for node in order:
            r = []
            mask = None if masks is None else masks.get(node)
            for i, nxt in enumerate(node.next_nodes):
                if nxt is None or (mask is not None and not mask[i]):
                    r.append(-1)
                    continue
                k = counts.get(nxt, 0)
                counts[nxt] = k + 1
                r.append(k)
            ranks[node] = r
        slots = self.slots
        for node, total in counts.items():
            if total > 1:
                slots[node] = Slot(total)
        ready = []
        for node, g in plan.roots:
            slot = slots.get(node)
            if slot is None:
                ready.append((node, g, False))
            else:
                if self.contribute(slot, slot.next_rank, g):
                    ready.append((node, slot.buf, slot.owned))
        return ready

    # ---- accumulation ---------------------------------------------------------
    def contribute(self, slot, rank, g) -> bool:
        """Add contribution number `rank`; True if this completed the gradient."""
        lock = self.lock
        with lock:
            if slot.busy or rank != slot.next_rank:
                if slot.parked is None:
                    slot.parked = {}
                slot.parked[rank] = g
                self.parked += 1
                return False
            slot.busy = True
        released = None
        try:
            while True:
                slot.add(g)  # numpy work outside the lock; `busy` keeps others out
                with lock:
                    slot.next_rank += 1
                    if slot.next_rank == slot.total:
                        slot.busy = False
                        return True
                    parked = slot.parked
                    if parked and slot.next_rank in parked:
                        g = parked.pop(slot.next_rank)
                        self.parked -= 1
                        if self.parked < self.max_parked and self.deferred:
                            released, self.deferred = self.deferred, []
                        continue
                    slot.busy = False
                    return False
        finally:
            if released:
                self.requeue(released)

    # ---- backpressure (see the module docstring) -----------------------------------
    def defer_if_throttled(self, item) -> bool:
        """True if `item` was held back; caller holds the pool's condition."""
        with self.lock:
            if self.parked >= self.max_parked and self.running > 0 and self.error is None:
                self.deferred.append(item)
                return True
            self.running += 1  # the caller runs it now
            return False

    def note_dequeued(self, waited: float):
        with self.lock:
            self.stats.queue_wait += waited
            self.stats.queued_runs += 1

    def start_running(self):
        with self.lock:
            self.running += 1

    def stop_running(self):
        with self.lock:
            self.running -= 1
            released = None
            if self.deferred and (self.running == 0 or self.parked < self.max_parked):
                released, self.deferred = self.deferred, []
        if released:
            self.requeue(released)

    # ---- bookkeeping ----------------------------------------------------------
    def fail(self, exc, node):
        with self.lock:
            if self.error is None:
                self.error = exc
                self.error_node = node

    def add_outstanding(self, n):
        with self.lock:
            self.outstanding += n

    def finish_items(self, n) -> bool:
        """Count down `n` finished items; True (and `done` set) when the call ends."""
        with self.lock:
            self.outstanding -= n
            finished = self.outstanding == 0
        if finished:
            self.done.set()
        return finished


def execute(task, node, g, owned, push):
    """Run a ready node and every cheap node it makes ready, on this thread.

    Expensive ready nodes go to `push(task, node, g, owned)` (the shared queue),
    except one kept for this thread. Returns True if this finished the call.
    """
    plan = task.plan
    retain = plan.retain_graph
    masks = plan.input_masks
    ranks, slots = task.ranks, task.slots
    inline_below = task.inline_below
    rec = task.profile
    stack = [(node, g, owned)]  # cheap ready nodes, run depth-first
    tid = threading.current_thread().name
    finished = 0
    t_start = time.perf_counter()
    ran = 0
    heavy = None  # one heavy ready node kept for this thread; run once cheap work is done
    while stack or heavy is not None:
        if stack:
            node, g, owned = stack.pop()
        else:
            (node, g, owned), heavy = heavy, None
        ready = []
        grads = gi = None
        if task.error is None:
            try:
                if g is not None:
                    g = complete_gradient(node, g, owned, plan, task.staged, task.captured)
                if g is None:
                    grads = None  # nothing flowed here, or the rule must not run
                else:
                    t0 = time.perf_counter() if rec is not None else 0.0
                    grads = node.input_grads(g, None if masks is None else masks[node])
                    if not retain:
                        node.saved = None
                        node.released = True
                    if rec is not None:
                        rec.record(node.name, t0)
                    ran += 1
                r = ranks.get(node)
                if r is not None:
                    for i, nxt in enumerate(node.next_nodes):
                        k = r[i]
                        if k < 0:
                            continue
                        gi = None if grads is None else grads[i]
                        slot = slots.get(nxt)
                        if slot is None:
                            ready.append((nxt, gi, False))
                        elif task.contribute(slot, k, gi):
                            ready.append((nxt, slot.buf, slot.owned))
                            slot.buf = None
            except BaseException as e:
                annotate(e, node)
                task.fail(e, node)
                ready = []
            g = grads = gi = None  # drop our references now: lowers the peak
        if ready:
            task.add_outstanding(len(ready))
            for item in ready:
                nxt, gi = item[0], item[1]
                if gi is None or nxt.variable is not None or nxt.cost < inline_below:
                    stack.append(item)
                elif heavy is None:
                    heavy = item
                else:
                    push(task, *item)
        finished += 1
    stats = task.stats
    with task.lock:
        stats.nodes_per_thread[tid] = stats.nodes_per_thread.get(tid, 0) + ran
        stats.busy_per_thread[tid] = stats.busy_per_thread.get(tid, 0.0) + \
            time.perf_counter() - t_start
        stats.inline_runs += finished - 1  # all but the item this call started with
    return task.finish_items(finished)
