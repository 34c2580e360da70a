"""One parallel backward call (`GraphTask`): its state, and the only code that writes it.

State, all guarded by `task.lock` unless noted. How contributions are summed (ranked
or keyed, chosen per call by the cost model) is the call's accumulation strategy,
`acc` (engine/strategy.py), which owns its own state; the task reads only its `full`
(backpressure) and releases it when the call fails.

Running state:
- `outstanding`: queued items plus running items of this call. The call is done when
  it drops to zero (never "the queue looks empty"), or when it failed and no thread
  still runs one of its items (`finished`, set once). So it must never drop to zero
  while an item still exists uncounted: every item is counted before it can be taken
  (`WorkerPool.submit`, `give_away`), and the caller's first root before the other
  roots are queued (`run_to_completion`).
- `error`: the first exception (first error wins); later items are skipped but still
  counted down. `runners`: thread ident -> items it runs now (nested: > 1).
- backpressure: while `acc.full` (ranked accumulation: too many contributions or
  bytes parked, memory the sequential engine never holds) is set and a thread runs one
  of this call's items, no thread starts another of its queued items (`throttled`)
  and threads hand their inline work to the queue; threads are woken when it clears.
  With nothing running, the highest-seq ready node is the one every parked
  contribution waits for, so progress is guaranteed.
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
import functools
import contextvars
import queue
import threading
import time


from .. import profiler
from .strategy import Keyed, Ranked
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
                 max_parked_bytes: float = float("inf"), calls=None,
                 accumulation: str = "ranked"):
        self.plan = plan
        self.calls = calls  # the pass's PassCallbacks (engine/callbacks.py)
        self.stats = stats
        self.pool = pool
        self.inline_below = inline_below
        self.share_cheap = share_cheap
        # guards outstanding, runners, error, stats, staged and captured (and the
        # ranked strategy's slots and counts)
        self.lock = threading.Lock()
        self.signal = queue.SimpleQueue()  # wake-up tokens for the caller in wait()
        self.outstanding = 0
        self.runners = {}
        if accumulation == "keyed":
            self.acc = Keyed(plan)
        else:
            self.acc = Ranked(plan, stats, self.lock, functools.partial(pool.wake, self),
                              max_parked, max_parked_bytes)
        self.error = None
        self.staged = []
        self.captured = {}
        self.waiting = False
        self.shared = collections.deque()
        self.finished = False
        self.context = contextvars.copy_context()
        self.profile = profiler.active()

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
        return self.acc.full and bool(self.runners)

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
            wake = done or (not self.runners and self.acc.full)
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
            self.acc.release()
            self.staged, self.captured = [], {}
            self.shared.clear()

    def succeeded(self) -> None:
        """The call ended well (every thread has left its items): drop what holds the
        graph (the plan, the strategy's slots and edges, the context the workers ran in)
        and keep only the results the caller commits (`staged`, `captured`). A worker
        still holds the task object for a moment after its last item (until its loop
        drops it), and the graph must not live on through it: a loaded machine
        preempts that worker long enough for a create_graph leak check to see the
        recorded nodes alive (the stress harness's `leak`, CI 2026-11-27)."""
        with self.lock:
            self.plan = self.calls = self.context = None
            self.acc.release()

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
