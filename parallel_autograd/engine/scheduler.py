"""Per-call state of the parallel engine and the code that runs one ready node.

State of one call (`GraphTask`), all guarded by `task.lock` unless noted.
Gradients with several contributions are summed in canonical order (consumer seq
descending, then input slot; seeds first), the order in which the sequential
engine receives them, so results are bitwise identical. Two ways, chosen per call:

- keyed (`task.keyed`, every node cheap, small gradients and fan-in: see
  `Engine._keyed_fits`; with `share_cheap` only): no per-edge set-up at all. `pending`:
  node -> list of `(key, grad)` contributions, each node's entry guarded by one of
  `task.stripes` (32 locks, picked by the node's hash: two threads rarely want the
  same one); `totals` (the plan's in-degrees plus seeds) is read-only. The
  contribution that completes the count takes the list, sorts it by key and sums it
  outside the lock. Holds every contribution until the last one arrives, which is
  fine for small gradients only; the set-up costs nothing (a per-edge pass costs
  about 4 us per node on 3.13t, as much as running a small node).
- ranked (otherwise): `slots` and `edges` below, set up by one pass over the edges;
  contributions are added as soon as their turn comes, with backpressure.

- `slots`: node -> `Slot`, for every node that receives two or more gradient
  contributions (seeds included), ranked mode. A Slot sums contributions in rank
  order. A contribution that arrives early is parked until the ones before it are added;
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
- `shared`: with `share_cheap`, cheap ready nodes given away for any thread of the
  call to take (see `execute`); a deque, atomic on its own.

Backpressure: parked contributions are memory the sequential engine never holds.
While a call has `parked >= max_parked` and a thread runs one of its items, no
thread starts another of its queued items (`throttled`); the items stay queued and
threads are woken when that ends. With nothing running, the highest-seq ready node
is the one every parked contribution waits for, so progress is guaranteed.
- `staged`, `captured`: leaf/retained gradients and grad() results; each `execute`
  collects its own and merges them in under the lock when it ends. The caller
  commits them only after the whole pass succeeded.

Nodes with a single contribution skip the Slot entirely: the gradient goes straight
to the consumer as in the sequential engine.
"""
from __future__ import annotations

import collections
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
        if g is not None:
            self.buf, self.owned = add_gradient(self.buf, self.owned, g)


def add_gradient(buf, owned, g):
    """`buf + g` as the sequential engine computes it: the first contribution is kept
    by reference, the second makes a new (owned) array, later ones add in place."""
    if buf is None:
        return g, False
    if owned:
        np.add(buf, g, out=buf)
        return buf, True
    s = buf + g
    # 0-d arrays add to a numpy scalar, which np.add(out=) rejects
    return (s if type(s) is np.ndarray else np.asarray(s)), True


def sum_in_order(entries):
    """Sum keyed contributions `[(key, grad or None)]` in key order: (grad, owned)."""
    entries.sort(key=_key)  # keys are unique: arrays are never compared
    buf, owned = None, False
    for _, g in entries:
        if g is not None:
            buf, owned = add_gradient(buf, owned, g)
    return buf, owned


def _key(entry):
    return entry[0]


# Keyed mode: contribution keys sort in canonical order. Input slot i of the node
# with sequence number seq gets (-seq << 24) + i; seed j gets SEED_KEY + j (first).
_KEY_SHIFT = 24
_SEED_KEY = -(1 << 200)


class CallStats:
    """What one parallel call did; returned by `Engine.backward(..., stats=True)`."""

    __slots__ = ("mode", "reason", "nodes", "workers", "elapsed", "nodes_per_thread",
                 "busy_per_thread", "queue_wait", "inline_runs", "queued_runs",
                 "total_cost", "critical_path", "blas_threads", "accumulation")

    def __init__(self):
        self.nodes_per_thread = {}
        self.busy_per_thread = {}
        self.queue_wait = 0.0
        self.inline_runs = 0
        self.queued_runs = 0
        self.blas_threads = None
        self.accumulation = None
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
        # guards slots, outstanding, runners, parked, error, stats, staged and
        # captured (pending: the striped locks below)
        self.lock = threading.Lock()
        self.queue = []  # heap of this call's queued items; guarded by the pool's lock
        self.signal = queue.SimpleQueue()  # wake-up tokens for the thread waiting on it
        self.outstanding = 0
        self.runners = {}  # thread ident -> items it is executing now (nested: > 1)
        self.parked = 0
        self.max_parked = max_parked
        self.wake = wake or _no_wake  # wake(task): waiting threads re-check (the pool's)
        self.keyed = False  # keyed or ranked accumulation (module docstring)
        self.pending = {}
        self.stripes = ()  # keyed mode: 32 locks guarding `pending` entries
        self.totals = {}
        self.slots = {}
        self.edges = {}
        self.error = None
        self.error_node = None
        self.staged = []
        self.captured = {}
        self.stats = stats
        self.inline_below = inline_below
        self.share_cheap = False  # hand cheap nodes to idle workers (free-threaded builds)
        self.waiting = False  # caller waits in run_until; written by it only, read racily (hint)
        self.shared = collections.deque()  # share_cheap: ready nodes up for grabs;
        #   each counts in `outstanding`. deque append/popleft are atomic (with or
        #   without the GIL), so it needs no lock of ours.
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

    def prepare_keyed(self):
        """Keyed mode set-up: only the seeds. Returns the ready roots."""
        plan = self.plan
        self.keyed = True
        self.stripes = tuple(threading.Lock() for _ in range(32))
        totals = self.totals = plan.dependencies
        ready = []
        seeds = {}
        for node, g in plan.roots:
            seeds[node] = seeds.get(node, 0) + 1
        if any(totals[node] or n > 1 for node, n in seeds.items()):
            totals = self.totals = dict(totals)  # never change the plan's own counts
            for node, n in seeds.items():
                totals[node] += n
        for j, (node, g) in enumerate(plan.roots):
            if totals[node] <= 1:
                ready.append((node, g, False))
            else:
                entries = self.pending.setdefault(node, [])
                entries.append((_SEED_KEY + j, g))
                if len(entries) == totals[node]:  # several seeds and nothing else
                    del self.pending[node]
                    ready.append((node,) + sum_in_order(entries))
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
    kept for this thread when it has nothing else to do.

    With `task.share_cheap` (no GIL: small kernels do overlap), this thread gives
    away the oldest cheap node on its stack (the root of the biggest unexplored
    subgraph): to the pool if a worker sleeps, else into `task.shared` when that is
    empty, where threads working on or lingering for this call look first (one
    deque operation, no lock, no wake-up). When its stack is empty it takes work
    from `task.shared` before returning.

    The caller brackets this with `task.begin()` / `task.end()`; errors are
    recorded on the task.
    """
    plan = task.plan.view()
    staged, captured = [], {}  # this thread's; merged into the task's at the end
    edges = task.edges
    keyed, totals, pending = task.keyed, task.totals, task.pending
    stripes = task.stripes
    masks = plan.input_masks
    inline_below = task.inline_below
    rec = task.profile
    push = pool.submit
    share = task.share_cheap
    shared = task.shared
    stack = [(first[0], first[1], first[2])]  # cheap ready nodes, run depth-first
    first[1] = None
    heavy = None  # one heavy ready node kept for this thread
    t_start = time.perf_counter()
    ran = runs = absorbed = 0
    try:
        while True:
            if stack:
                node, g, owned = stack.pop()
            elif heavy is not None:
                (node, g, owned), heavy = heavy, None
            elif share and shared:
                try:
                    node, g, owned = shared.popleft()
                except IndexError:  # another thread took it first
                    break
                absorbed += 1
            else:
                break
            if not runs & 7 and task.error is not None:  # (not every node: see view())
                break  # the call failed: drop the rest of this thread's local work
            runs += 1
            ready = stack if keyed else []  # keyed: every node is cheap
            try:
                grads = None
                if g is not None:  # else nothing flowed here: pass "no gradient" on
                    grads = run_node(node, g, owned, plan, staged, captured, rec)
                    ran += grads is not None
                g = None  # drop our reference now: lowers the peak
                if not keyed:
                    for i, nxt, k, slot in edges[node]:
                        gi = None if grads is None else grads[i]
                        if slot is None:
                            ready.append((nxt, gi, False))
                        elif task.contribute(slot, k, gi):
                            ready.append((nxt, slot.buf, slot.owned))
                            slot.buf = None
                elif masks is None or node in masks:  # else pruned: sends nothing
                    mask = None if masks is None else masks[node]
                    base = -node.seq << _KEY_SHIFT
                    for i, nxt in enumerate(node.next_nodes):
                        if nxt is None or (mask is not None and not mask[i]):
                            continue
                        gi = None if grads is None else grads[i]
                        total = totals[nxt]
                        if total == 1:
                            ready.append((nxt, gi, False))
                            continue
                        with stripes[hash(nxt) & 31]:
                            if nxt in pending:
                                entries = pending[nxt]
                                entries.append((base + i, gi))
                                if len(entries) < total:
                                    continue
                                del pending[nxt]
                            else:
                                pending[nxt] = [(base + i, gi)]
                                continue
                        ready.append((nxt,) + sum_in_order(entries))
                        entries = None
                grads = gi = None
            except BaseException as e:
                annotate(e, node)
                task.fail(e, node)
                break
            if keyed:
                ready = None
            else:
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
            if share and len(stack) > 1:
                if pool._idle:  # wake a sleeping worker with it (re-read: wake() replaces it)
                    push(task, *stack.pop(0))
                elif not shared:  # keep one item where this call's idle threads look
                    task.add_outstanding(1)
                    shared.append(stack.pop(0))
                    if task.waiting:
                        task.signal.put(None)
    finally:
        stats = task.stats
        tid = threading.current_thread().name
        with task.lock:
            task.outstanding -= absorbed  # stolen items ran here (end() counts ours)
            task.staged.extend(staged)
            task.captured.update(captured)
            stats.nodes_per_thread[tid] = stats.nodes_per_thread.get(tid, 0) + ran
            stats.busy_per_thread[tid] = stats.busy_per_thread.get(tid, 0.0) + \
                time.perf_counter() - t_start
            stats.inline_runs += max(runs - 1, 0)  # all but the item we started with
