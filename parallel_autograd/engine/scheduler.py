"""Per-call state of the parallel engine and the code that runs one ready node.

State of one call (`GraphTask`), all guarded by `task.lock` unless noted:

- `slots`: node -> `Slot`, for every node that receives two or more gradient
  contributions (seeds included). A Slot sums contributions in canonical rank order
  (consumer seq descending, then input slot; seeds first), the order in which the
  sequential engine receives them, so the result is bitwise identical. A
  contribution that arrives early is parked until the ones before it are added;
  the thread holding `busy` does the numpy add outside the lock.
- `edges`: node -> list of `(input index, next node, rank, Slot or None)` for
  each outgoing edge that carries a gradient (read-only). Workers index it and
  never call `dict.get` on it: on free-threaded 3.13 a `.get` from a thread other
  than the dict's creator whose value is a list or object was measured ~15x slower
  (2.4 us against 0.15 us), while `d[k]` stays fast.
- `outstanding`: queued items plus running `execute` calls of this call. The call
  is done when it drops to zero (never "the queue looks empty"), or when it failed
  and no thread still runs one of its items.
- `error`: the first exception (first error wins); later items are skipped but
  still counted down.
- `runners`: threads executing this call's items right now; `parked`: contributions
  parked across all slots.
- `queue`: this call's ready heavy nodes, a heap guarded by the pool's lock.

Backpressure: parked contributions are memory the sequential engine never holds.
While a call has `parked >= max_parked` and a thread runs one of its items, no
thread starts another of its queued items (`throttled`); the items stay queued and
threads are woken when that ends. With nothing running, the highest-seq ready node
is the one every parked contribution waits for, so progress is guaranteed.
- `staged`, `captured`: leaf/retained gradients and grad() results, appended under
  the lock and committed by the caller only after the whole pass succeeded.

Nodes with a single contribution skip the Slot entirely: the gradient goes straight
to the consumer as in the sequential engine.
"""
from __future__ import annotations

import contextvars
import queue
import threading
import time

import numpy as np

from .. import profiler
from .completion import annotate, run_node


class Slot:
    """Canonical-order accumulator for one node's gradient within one call."""

    __slots__ = ("buf", "owned", "next_rank", "total", "parked", "busy", "assigned")

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

    def __init__(self, plan, stats, inline_below, max_parked=4, wake=None):
        self.plan = plan
        # guards slots, outstanding, running, parked, error and stats; staged and
        # captured are appended to by complete_gradient (list.append and dict item
        # assignment are atomic in CPython, with or without the GIL)
        self.lock = threading.Lock()
        self.queue = []  # heap of this call's queued items; guarded by the pool's lock
        self.signal = queue.SimpleQueue()  # wake-up tokens for the thread waiting on it
        self.outstanding = 0
        self.runners = {}  # thread ident -> items it is executing now (nested: > 1)
        self.parked = 0
        self.max_parked = max_parked
        self.wake = wake or _no_wake  # wake(task): waiting threads re-check (the pool's)
        self.slots = {}
        self.edges = {}
        self.error = None
        self.error_node = None
        self.staged = []
        self.captured = {}
        self.stats = stats
        self.inline_below = inline_below
        self.share_cheap = False  # hand cheap nodes to idle workers (free-threaded builds)
        self.finished = False  # set once, under the lock (see _check_done)
        self.context = contextvars.copy_context()
        self.profile = profiler.active()

    # ---- set-up ---------------------------------------------------------------
    def prepare(self, order):
        """Edges for every node and Slots for multi-contribution nodes; returns the
        ready roots as (node, grad, owned).

        `order` is the plan's running nodes in decreasing seq: the order in which
        the sequential engine sends their contributions, so numbering each node's
        incoming edges in that order (after its seeds) gives the canonical ranks.
        """
        plan = self.plan
        seeds = {}
        for node, g in plan.roots:
            seeds[node] = seeds.get(node, 0) + 1
        slots = self.slots
        for node, n in plan.dependencies.items():
            if n > 1 or (n and node in seeds):
                slots[node] = Slot(n + seeds.get(node, 0))
        for node, n in seeds.items():
            if n > 1 and node not in slots:
                slots[node] = Slot(n + plan.dependencies[node])
        for node, slot in slots.items():
            slot.assigned = seeds.get(node, 0)
        masks = plan.input_masks
        # every node a gradient can reach has an entry: workers index, never .get()
        edges = self.edges = dict.fromkeys(plan.nodes, ())
        for node in order:
            out = []
            mask = None if masks is None else masks[node]
            for i, nxt in enumerate(node.next_nodes):
                if nxt is None or (mask is not None and not mask[i]):
                    continue
                if nxt in slots:
                    slot = slots[nxt]
                    k = slot.assigned
                    slot.assigned = k + 1
                    out.append((i, nxt, k, slot))
                else:
                    out.append((i, nxt, 0, None))
            edges[node] = out
        ready = []
        for node, g in plan.roots:
            slot = slots.get(node)
            if slot is None:
                ready.append((node, g, False))
            elif self.contribute(slot, slot.next_rank, g):
                ready.append((node, slot.buf, slot.owned))
                slot.buf = None
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
        unthrottled = False
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
                        if self.parked == self.max_parked - 1:
                            unthrottled = True
                        continue
                    slot.busy = False
                    return False
        finally:
            if unthrottled:
                self.wake(self)

    # ---- running state ----------------------------------------------------------
    def throttled(self) -> bool:
        """Backpressure: too many parked contributions while another thread runs
        this call. Read without the lock: every change that can end it is followed
        by `wake()`, and waits are bounded."""
        return self.parked >= self.max_parked and bool(self.runners)

    # begin/end keep `runners` exact even if Ctrl+C lands anywhere in between: each
    # changes it with one store, and end() undoes only what begin() did.
    def begin(self) -> None:
        """This thread starts executing one of this call's items."""
        tid = threading.get_ident()
        with self.lock:
            self.runners[tid] = self.runners.get(tid, 0) + 1

    def end(self) -> None:
        """The item this thread took is finished (however it ended, even if
        `begin` was interrupted before it counted)."""
        tid = threading.get_ident()
        with self.lock:
            n = self.runners.get(tid, 0)
            if n > 1:
                self.runners[tid] = n - 1
            elif n == 1:
                del self.runners[tid]
            self.outstanding -= 1
            done = self._check_done()
            wake = done or (not self.runners and self.parked >= self.max_parked)
        if wake:
            self.wake(self)

    def abandon(self) -> None:
        """The calling thread stops working on this call (after Ctrl+C): drop its
        runner entries so the call can end without it."""
        with self.lock:
            self.runners.pop(threading.get_ident(), None)
            done = self._check_done()
        if done:
            self.wake(self)

    def add_outstanding(self, n: int) -> None:
        with self.lock:
            self.outstanding += n

    def fail(self, exc, node) -> None:
        """Record the first error; later items of this call are skipped."""
        with self.lock:
            if self.error is None:
                self.error = exc
                self.error_node = node
            done = self._check_done()
        if done:
            self.wake(self)

    def _check_done(self) -> bool:
        # caller holds self.lock. Done: nothing queued or running, or failed and
        # no thread still runs one of its items (queued leftovers are skipped).
        if self.outstanding == 0 or (self.error is not None and not self.runners):
            self.finished = True
            return True
        return False

    def note_dequeued(self, waited: float) -> None:
        with self.lock:
            self.stats.queue_wait += waited
            self.stats.queued_runs += 1


def _no_wake(task):
    pass


def execute(task, first, pool):
    """Run a ready node and every cheap node it makes ready, on this thread.

    `first` is a list [node, grad, owned]; its grad is taken out of it, so the
    caller keeps no reference to a gradient this thread will free. Heavy ready
    nodes go to `pool.submit(task, node, g, owned)` (the call's queue), except one
    kept for this thread when it has nothing else to do. With `task.share_cheap`
    (no GIL: small kernels do overlap), the oldest cheap node on this thread's stack
    is handed to the pool whenever a worker sleeps, so idle workers get whole
    subgraphs. The caller brackets this with `task.begin()` / `task.end()`; errors
    are recorded on the task.
    """
    plan = task.plan
    edges = task.edges
    inline_below = task.inline_below
    rec = task.profile
    push = pool.submit
    idle = pool._idle if task.share_cheap else None  # read racily: only a hint
    stack = [(first[0], first[1], first[2])]  # cheap ready nodes, run depth-first
    first[1] = None
    heavy = None  # one heavy ready node kept for this thread
    t_start = time.perf_counter()
    ran = runs = 0
    try:
        while stack or heavy is not None:
            if stack:
                node, g, owned = stack.pop()
            else:
                (node, g, owned), heavy = heavy, None
            if task.error is not None:
                break  # the call failed: drop the rest of this thread's local work
            runs += 1
            ready = []
            try:
                grads = None
                if g is not None:  # else nothing flowed here: pass "no gradient" on
                    grads = run_node(node, g, owned, plan, task.staged, task.captured, rec)
                    ran += grads is not None
                g = None  # drop our reference now: lowers the peak
                for i, nxt, k, slot in edges[node]:
                    gi = None if grads is None else grads[i]
                    if slot is None:
                        ready.append((nxt, gi, False))
                    elif task.contribute(slot, k, gi):
                        ready.append((nxt, slot.buf, slot.owned))
                        slot.buf = None
                grads = gi = None
            except BaseException as e:
                annotate(e, node)
                task.fail(e, node)
                break
            hand_off = []
            for item in ready:
                nxt = item[0]
                if item[1] is None or nxt.variable is not None or nxt.cost < inline_below:
                    stack.append(item)
                else:
                    hand_off.append(item)
            ready = item = None
            if hand_off:
                if heavy is None and not stack:
                    heavy = hand_off.pop(0)  # nothing else to do here: keep one
                for item in hand_off:
                    push(task, *item)
                hand_off = item = None
            if idle and len(stack) > 1:
                push(task, *stack.pop(0))
    finally:
        stats = task.stats
        tid = threading.current_thread().name
        with task.lock:
            stats.nodes_per_thread[tid] = stats.nodes_per_thread.get(tid, 0) + ran
            stats.busy_per_thread[tid] = stats.busy_per_thread.get(tid, 0.0) + \
                time.perf_counter() - t_start
            stats.inline_runs += max(runs - 1, 0)  # all but the item we started with
