"""One parallel backward call (`GraphTask`): its state, and the only code that writes it.

State, all guarded by `task.lock` unless noted. Gradients with several contributions
are summed in canonical order (`accumulate`), so results are bitwise identical to
the sequential engine's. Two ways, chosen per call by the cost model:

- ranked (default): one pass over the edges at set-up gives every contribution its
  rank. `slots`: node -> `Slot`, for every node that receives two or more
  contributions (seeds included). A contribution that arrives before its turn is
  parked in the slot; the thread holding `slot.busy` does the numpy add outside the
  lock. `edges`: node -> list of `(input index, next node, rank, Slot or None)` for
  each outgoing edge that carries a gradient (read-only after set-up). Workers index
  it and never call `dict.get` on it: on free-threaded 3.13 a `.get` from a thread
  other than the dict's creator whose value is a list or object was measured ~15x
  slower (2.4 us against 0.15 us), while `d[k]` stays fast.
- keyed (`keyed`; every node cheap, small gradients and fan-in, `share_cheap` only):
  no per-edge set-up at all (it costs about 4 us per node on 3.13t, as much as
  running a small node). `pending`: node -> list of `(key, grad)`, each node's entry
  guarded by one of `stripes` (32 locks, picked by the node's hash); `totals` (the
  plan's in-degrees plus seeds) is read-only. The contribution that completes the
  count takes the list and sums it in key order outside the lock. It holds every
  contribution until the last one arrives: for small gradients only.

Running state:
- `outstanding`: queued items plus running items of this call. The call is done when
  it drops to zero (never "the queue looks empty"), or when it failed and no thread
  still runs one of its items (`finished`, set once). So it must never drop to zero
  while an item still exists uncounted: every item is counted before it can be taken
  (`WorkerPool.submit`, `give_away`), and the caller's first root before the other
  roots are queued (`run_to_completion`).
- `error`: the first exception (first error wins); later items are skipped but still
  counted down. `runners`: thread ident -> items it runs now (nested: > 1).
- `parked`, `parked_bytes`: contributions parked across all slots, and the bytes they
  own. Backpressure: parked contributions are memory the sequential engine never
  holds. `full` is set while `parked >= max_parked` or `parked_bytes >=
  max_parked_bytes` (so a large contribution counts for its size, not as one of
  four); while it is set and a thread runs one of this call's items, no thread starts
  another of its queued items (`throttled`) and threads hand their inline work to the
  queue; threads are woken when it clears. With nothing running, the highest-seq
  ready node is the one every parked contribution waits for, so progress is
  guaranteed.
- `shared` (`share_cheap` only): cheap ready nodes given away for any thread of the
  call to take; a deque, atomic on its own, each item counted in `outstanding`.
- `waiting`: the caller sleeps in `wait()` (written by it only, read racily: a hint).
- `staged`, `captured`: leaf/retained gradients and grad() results; each thread
  collects its own (`Sink`) and merges them in under the lock when it stops. The
  caller commits them only after the whole pass succeeded.

The call's queued items live in the pool (`WorkerPool`, under the pool's lock); the
pool hands them back through `run`. `executor.execute` runs items and reads this
state, but changes it only through the methods here.

Thread safety: every method may be called from any thread of the call.
"""
from __future__ import annotations

import collections
import contextvars
import queue
import threading
import time

import numpy as np

from .. import memory, profiler
from .accumulate import Slot, contribution_key, seed_key, sum_in_order
from .executor import execute
from ..anomaly import add_note

_WAIT_SLICE = 0.05  # seconds; bounds how long a waiting caller ignores Ctrl+C
_LINGER = 200e-6  # seconds a thread out of work spins on a share_cheap call's `shared`


class CallStats:
    """What one parallel call did; returned by `Engine.backward(..., stats=True)`."""

    FIELDS = ("mode", "reason", "nodes", "workers", "elapsed", "nodes_per_thread",
              "busy_per_thread", "queue_wait", "inline_runs", "queued_runs",
              "total_cost", "critical_path", "blas_threads", "accumulation",
              "parked_peak")
    __slots__ = tuple(f for f in FIELDS if f != "reason") + ("_reason",)

    def __init__(self):
        self.nodes_per_thread = {}
        self.busy_per_thread = {}
        self.queue_wait = 0.0
        self.inline_runs = 0
        self.queued_runs = 0
        self.blas_threads = None
        self.accumulation = None
        self.parked_peak = 0  # most bytes held parked at once (ranked accumulation)
        self.total_cost = 0
        self.critical_path = 0
        self._reason = None

    @property
    def reason(self) -> str:
        """Why the call ran as it did, in words (formatted when read: a `Decision`'s
        text costs microseconds, a chain's whole fixed cost is a few)."""
        r = self._reason
        return r if r is None or isinstance(r, str) else r.reason

    @reason.setter
    def reason(self, value) -> None:
        """A str, or an object with a `reason` attribute (a `cost.Decision`)."""
        self._reason = value

    @property
    def fell_back(self) -> bool:
        """True when the call ran on the sequential engine's code."""
        return self.mode == "sequential"

    def as_dict(self) -> dict:
        """Every field, plus `fell_back`."""
        d = {k: getattr(self, k, None) for k in self.FIELDS}
        d["fell_back"] = self.fell_back
        return d

    def __repr__(self):
        return f"CallStats({self.as_dict()})"


class GraphTask:
    """One parallel backward call. See the module docstring for its state."""

    def __init__(self, plan, stats: CallStats, pool, inline_below: float,
                 max_parked: int = 4, share_cheap: bool = False,
                 max_parked_bytes: float = float("inf"), calls=None):
        self.plan = plan
        self.calls = calls  # the pass's PassCallbacks (engine/callbacks.py)
        self.stats = stats
        self.pool = pool
        self.inline_below = inline_below
        self.max_parked = max_parked
        self.max_parked_bytes = max_parked_bytes
        self.share_cheap = share_cheap
        # guards slots, outstanding, runners, parked, error, stats, staged and
        # captured (pending: the striped locks)
        self.lock = threading.Lock()
        self.signal = queue.SimpleQueue()  # wake-up tokens for the caller in wait()
        self.outstanding = 0
        self.runners = {}
        self.parked = 0
        self.parked_bytes = 0
        self.full = False  # parked beyond max_parked or max_parked_bytes (read racily)
        self.keyed = False
        self.pending = {}
        self.stripes = ()
        self.totals = {}
        self.slots = {}
        self.edges = {}
        self.error = None
        self.staged = []
        self.captured = {}
        self.waiting = False
        self.shared = collections.deque()
        self.finished = False
        self.context = contextvars.copy_context()
        self.profile = profiler.active()

    # ---- set-up: both return the ready roots as [(node, grad, owned)] -------------
    def prepare_ranked(self, order) -> list:
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

    def prepare_keyed(self) -> list:
        """Keyed accumulation: the only set-up is the seeds."""
        plan = self.plan
        self.keyed = True
        self.stripes = tuple(threading.Lock() for _ in range(32))
        totals = self.totals = plan.in_degree
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

    # ---- accumulation: both return (grad, owned) when complete, else None ---------
    def contribute(self, slot: Slot, rank: int, g):
        """Add contribution number `rank` (None: "no gradient", still takes its turn)."""
        lock = self.lock
        with lock:
            if slot.busy or rank != slot.next_rank:
                if slot.parked is None:
                    slot.parked = {}
                slot.parked[rank] = g
                self.parked += 1
                self.parked_bytes += held_bytes(g)
                if self.parked_bytes > self.stats.parked_peak:
                    self.stats.parked_peak = self.parked_bytes
                self.full = (self.parked >= self.max_parked
                             or self.parked_bytes >= self.max_parked_bytes)
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
                self.pool.wake(self)

    def contribute_keyed(self, node, sender, slot: int, g):
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

    # ---- running ------------------------------------------------------------------
    def run_to_completion(self, ready: list) -> None:
        """Run the call from its ready roots on the calling thread (queued items go to
        the pool's workers too) until it is finished; raises the call's error."""
        pool = self.pool
        try:
            if ready:
                first = list(ready.pop())
                # Counted before any other root is queued: `finished` is set for good
                # the first time `outstanding` is 0, and a worker may run the queued
                # roots to their end before this thread starts its own (the call would
                # end early: wait() returns while workers still run its items).
                self.add_outstanding(1)
                for item in ready:
                    pool.submit(self, *item)
                ready = None
                self.run(first)
                first = None
                self.wait()
        except BaseException as e:  # e.g. Ctrl+C: cancel the call's remaining items
            self.fail(e)
            self.abandon()
            self.wait()  # done once no other thread runs its items
            raise
        if self.error is not None:
            raise self.error

    def run(self, first: list, waited: float | None = None) -> None:
        """Run item `first` ([node, grad, owned], already counted in `outstanding`) and
        all it makes ready that stays on this thread; `waited`: seconds it was queued.
        The grad is taken out of `first`, so the caller keeps no reference to it."""
        try:
            self.begin()
            if waited is not None:
                self.note_dequeued(waited)
            if self.error is None:
                self.context.copy().run(execute, self, first)
        except BaseException as e:  # e.g. Ctrl+C outside a rule: the call fails
            # This frame stays in the error's traceback, and the worker loop holds the
            # same list: drop the node (and through it the graph) from both now.
            first.clear()
            self.fail(e)
            raise
        finally:
            self.end()

    def wait(self) -> None:
        """Run this call's queued (and shared) items on the calling thread until the
        call is finished; never another call's."""
        pool, signal = self.pool, self.signal
        while not self.finished:
            item = pool.pop(self)
            if item is not None:
                self.run(*item)
                item = None
                continue
            if self.share_cheap and self.linger():
                self.run_shared()
                continue
            self.waiting = True  # threads running this call may hand it work
            try:
                signal.get(timeout=_WAIT_SLICE)  # C-level wait: safe under Ctrl+C
            except queue.Empty:
                pass
            finally:
                self.waiting = False

    def help(self) -> None:
        """A worker that ran one of this call's items keeps taking shared ones while
        they come (share_cheap only)."""
        while self.share_cheap and self.linger():
            self.run_shared()

    def run_shared(self) -> None:
        """Take an item from `shared` (if still there) and run it here."""
        try:
            first = list(self.shared.popleft())  # no other reference to its grad stays
        except IndexError:
            return
        self.run(first)

    def linger(self) -> bool:
        """Spin up to _LINGER seconds for `shared` to get work; True if it did.

        Only with share_cheap (no GIL): a thread that just ran out of work often gets
        more within microseconds, sooner than a sleeping thread can be woken."""
        shared = self.shared
        deadline = time.perf_counter() + _LINGER
        while not shared:
            if self.finished or self.error is not None or time.perf_counter() > deadline:
                return False
            # Yield between looks: without the GIL a tight loop over objects another
            # thread uses makes their reference counts contend and slows that thread.
            time.sleep(0)
        return True

    def give_away(self, stack: list) -> None:
        """share_cheap: hand the oldest item of a thread's stack (the root of its biggest
        unexplored subgraph) to a sleeping worker, or else into `shared` if that is
        empty, where threads working on or lingering for this call look first."""
        if self.pool.has_sleeper():
            self.pool.submit(self, *stack.pop(0))
        elif not self.shared:
            self.add_outstanding(1)
            self.shared.append(stack.pop(0))
            if self.waiting:
                self.signal.put(None)

    # ---- bookkeeping --------------------------------------------------------------
    def throttled(self) -> bool:
        """Backpressure: too many parked contributions (or bytes) while another
        thread runs this call. Read without the lock: every change that can end it is
        followed by `wake()`, and waits are bounded."""
        return self.full and bool(self.runners)

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
            wake = done or (not self.runners and self.full)
        if wake:
            self.pool.wake(self)

    def release(self) -> None:
        """Drop everything the failed call holds (its plan and through it the graph,
        gradients in slots, staged and captured results, its error), once no thread runs
        its items any more: frames of the call stay in the error's traceback with this
        task among their locals, and the task must not keep the graph alive through them
        (reliability issue, item 12). The task is finished for good after this. A
        worker that took one of its items off the queue just before still holds it until
        it sees the error and skips it (microseconds, unless the machine is loaded)."""
        self.pool.discard(self)  # queued items still hold their nodes and gradients
        with self.lock:
            self.finished = True
            self.error = None
            self.plan = self.calls = self.context = None
            self.slots, self.edges, self.pending, self.totals = {}, {}, {}, {}
            self.staged, self.captured = [], {}
            self.shared.clear()

    def abandon(self) -> None:
        """The calling thread stops working on this call (after Ctrl+C): drop its
        runner entries so the call can end without it."""
        with self.lock:
            self.runners.pop(threading.get_ident(), None)
            done = self._check_done()
        if done:
            self.pool.wake(self)

    def add_outstanding(self, n: int) -> None:
        """`n` more items of this call exist (queued or shared)."""
        with self.lock:
            self.outstanding += n

    def fail(self, exc: BaseException) -> None:
        """Record the first error (in time); later items of this call are skipped.
        Errors other threads raise meanwhile are kept as notes on the first."""
        with self.lock:
            if self.error is None:
                self.error = exc
            elif exc is not self.error:
                _note_other_error(self.error, exc)
            done = self._check_done()
        if done:
            self.pool.wake(self)

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

    def merge(self, sink, ran: int, runs: int, absorbed: int, busy: float) -> None:
        """One `execute` ends: merge what its thread produced and did. `ran`: rules run,
        `runs`: items taken, `absorbed`: of them taken from `shared` (their count
        in `outstanding` ends here; `end()` counts the item the thread started with)."""
        stats = self.stats
        tid = threading.current_thread().name
        with self.lock:
            self.outstanding -= absorbed
            self.staged.extend(sink.staged)
            self.captured.update(sink.captured)
            stats.nodes_per_thread[tid] = stats.nodes_per_thread.get(tid, 0) + ran
            stats.busy_per_thread[tid] = stats.busy_per_thread.get(tid, 0.0) + busy
            stats.inline_runs += max(runs - 1, 0)  # all but the item it started with


_MAX_NOTED = 8  # other threads' errors noted on the raised one


def _note_other_error(first: BaseException, other: BaseException) -> None:
    others = getattr(first, "other_errors", None)
    if others is None:
        try:
            first.other_errors = others = []
        except AttributeError:  # an exception type that takes no attributes
            return
    if len(others) >= _MAX_NOTED:
        return
    others.append(other)
    where = getattr(other, "autograd_op", None)
    add_note(first, f"also raised on another thread while this call failed: "
                    f"{type(other).__name__}: {other}" + (f" (in {where})" if where else ""))


def held_bytes(g) -> int:
    """Bytes a parked contribution keeps alive: an array that owns its data, or views a
    block of the caching allocator (`memory`), counts its size; another view (e.g. a
    broadcast seed) counts 0, its base is owned elsewhere."""
    if g is None:
        return 0
    if type(g) is not np.ndarray:  # a create_graph gradient (a Tensor)
        g = g.data
    return g.nbytes if g.base is None or memory.is_block(g.base) else 0


def _count_seeds(roots) -> dict:
    seeds = {}
    for node, _ in roots:
        seeds[node] = seeds.get(node, 0) + 1
    return seeds
