"""A persistent pool of worker threads running the queued ready nodes of parallel calls.

The pool owns the ready queues: one per call (`GraphTask`), a heap of
`[-seq, tiebreak, node, grad, owned, enqueued_at]`: later-created nodes first,
like PyTorch, which frees saved values early and keeps the order deterministic.
`_lock` (a plain Lock, only ever used with `with`) guards `_queues` (call -> heap,
for calls with queued items, in the order they got their first), `_idle` (wake-up
queues of sleeping workers), `_shutdown` and `_threads`.

Sleeping and waking use only C-level primitives (`queue.SimpleQueue` tokens), never
`threading.Condition`, whose Python code a Ctrl+C can interrupt half-way, leaving
its lock or waiter list inconsistent. A sleeper registers its queue in `_idle`
under the lock, then waits for a token with a timeout; whoever makes work
available takes a sleeper out of `_idle` and puts a token. Tokens persist, so a
wake-up sent before the sleeper waits is not lost; stray tokens only cause an
extra look at the queues.

Workers take the best item of any call that is not throttled and run it through
the call (`task.run`). A thread waiting for its own call (`GraphTask.wait`) pops
only that call's items (`pop`): never another caller's rules or hooks, and a
backward started from inside a worker (reentrant) always makes progress because its
caller can run all of its items itself. The pool knows of a call only `run`, `help`,
`throttled`, `signal` and `add_outstanding`.

Thread safety: every public method may be called from any thread.
"""
from __future__ import annotations

import heapq
import itertools
import os
import queue
import threading
import time
import weakref

from ..grad_mode import set_mode
from ..intraop import mark_worker_thread, on_worker_thread  # noqa: F401  (engine.py's too)

_IDLE_TIMEOUT = 1.0  # seconds; a sleeping worker re-checks (and sees a dropped pool)
_pools = weakref.WeakSet()


class WorkerStats:
    """Counters of one worker thread; written only by that thread."""

    __slots__ = ("name", "items", "busy", "idle")

    def __init__(self, name):
        self.name, self.items, self.busy, self.idle = name, 0, 0.0, 0.0

    def as_dict(self):
        return {"items": self.items, "busy": self.busy, "idle": self.idle}


class WorkerPool:
    """`num_threads` daemon workers (started on first use) and the calls' ready queues."""

    def __init__(self, num_threads: int, name: str = "pa-worker"):
        self.num_threads = num_threads
        self.name = name
        self._init_state()
        _pools.add(self)

    def _init_state(self):
        self._lock = threading.Lock()  # guards _queues, _idle, _shutdown and _threads
        self._queues = {}              # call -> heap of its queued items (non-empty)
        self._idle = []                # SimpleQueues of sleeping workers
        self._tiebreak = itertools.count()
        self._shutdown = False
        self._threads = []
        self.worker_stats = []

    # ---- lifecycle --------------------------------------------------------------
    def _ensure_started(self):
        # caller holds _lock
        if self._threads or self.num_threads == 0 or self._shutdown:
            return
        for i in range(self.num_threads):
            st = WorkerStats(f"{self.name}-{i}")
            t = threading.Thread(target=_worker, name=st.name, daemon=True,
                                 args=(weakref.ref(self), st))
            self.worker_stats.append(st)
            self._threads.append(t)
            t.start()

    def start(self) -> None:
        """Start the worker threads if they are not running (idempotent)."""
        with self._lock:
            self._ensure_started()

    def shutdown(self, wait: bool = True) -> None:
        """Stop the workers once they find no work (idempotent). Calls still running
        finish on their callers' threads."""
        with self._lock:
            self._shutdown = True
            threads = list(self._threads)
            sleepers, self._idle = self._idle, []
        for q in sleepers:
            q.put(None)
        if wait and threading.current_thread() not in threads:
            for t in threads:
                t.join()

    @property
    def threads(self) -> list:
        """The worker threads (empty before the first parallel call)."""
        return list(self._threads)

    def queued(self) -> int:
        """Items waiting in the queues of all calls (a snapshot, for checks and stats)."""
        with self._lock:
            return sum(len(q) for q in self._queues.values())

    def has_sleeper(self) -> bool:
        """A worker is asleep waiting for work (a hint, read without the lock)."""
        return bool(self._idle)

    # ---- queue ------------------------------------------------------------------
    def submit(self, task, node, g, owned) -> None:
        """Queue a ready node of `task` (never refused: a running call must finish)."""
        task.add_outstanding(1)
        item = [-node.seq, next(self._tiebreak), node, g, owned, time.perf_counter()]
        with self._lock:
            q = self._queues.get(task)
            if q is None:
                q = self._queues[task] = []
            heapq.heappush(q, item)
            self._ensure_started()
            sleeper = self._idle.pop() if self._idle else None
        task.signal.put(None)  # its caller may be waiting for this
        if sleeper is not None:
            sleeper.put(None)

    def discard(self, task) -> None:
        """Drop every queued item of `task` (a failed call: they would be skipped, and
        each holds its node and gradient until a worker gets to it)."""
        with self._lock:
            self._queues.pop(task, None)

    def wake(self, task) -> None:
        """`task` became runnable again or finished: every waiter re-checks."""
        with self._lock:
            sleepers, self._idle = self._idle, []
        task.signal.put(None)
        for q in sleepers:
            q.put(None)

    def pop(self, task):
        """The best queued item of `task` as `([node, grad, owned], seconds queued)`,
        or None if it has none or is throttled."""
        with self._lock:
            return self._pop(task)

    def _pop(self, task):
        # caller holds _lock
        q = self._queues.get(task)
        if not q or task.throttled():
            return None
        entry = heapq.heappop(q)
        if not q:
            del self._queues[task]
        return entry[2:5], time.perf_counter() - entry[5]

    def _pop_any(self):
        # caller holds _lock. The highest-priority item among unthrottled calls.
        best = best_q = None
        for task, q in self._queues.items():
            if q and not task.throttled() and (best is None or q[0] < best_q[0]):
                best, best_q = task, q
        if best is None:
            return None, None
        return best, self._pop(best)


def _worker(pool_ref, st):
    mark_worker_thread()
    set_mode(False)  # rules run on ndarrays; hooks on workers record no graph
    wakeup = queue.SimpleQueue()
    while True:
        t0 = time.perf_counter()
        while True:
            pool = pool_ref()
            if pool is None:
                return
            with pool._lock:
                task, item = pool._pop_any()
                if item is None and not pool._shutdown:
                    pool._idle.append(wakeup)
            if item is not None or pool._shutdown:
                break
            del pool
            try:
                wakeup.get(timeout=_IDLE_TIMEOUT)
            except queue.Empty:
                pass
            pool = pool_ref()
            if pool is None:
                return
            with pool._lock:
                if wakeup in pool._idle:
                    pool._idle.remove(wakeup)
            del pool
        if item is None:
            return
        del pool  # the call holds the pool while it runs
        t1 = time.perf_counter()
        st.idle += t1 - t0
        try:
            task.run(*item)
            item = None
            task.help()
        except BaseException:  # never lose a worker; the error is recorded on the task
            pass
        del task, item  # keep nothing alive while idle
        st.items += 1
        st.busy += time.perf_counter() - t1


def _reset_pools_after_fork():
    # The child has only the forking thread: old workers, locks and queues are gone.
    for pool in list(_pools):
        pool._init_state()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_pools_after_fork)
