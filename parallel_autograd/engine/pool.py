"""A persistent pool of worker threads running the ready nodes of parallel calls.

Each call (`GraphTask`) has its own ready queue, a heap of
`[-seq, tiebreak, node, grad, owned, enqueued_at]`: later-created nodes first,
like PyTorch, which frees saved values early and keeps the order deterministic.
`_lock` (a plain Lock, only ever used with `with`) guards every call's queue,
`_active` (calls with queued items), `_idle` (wake-up queues of sleeping
workers), `_shutdown` and `_threads`.

Sleeping and waking use only C-level primitives (`queue.SimpleQueue` tokens), never
`threading.Condition`, whose Python code a Ctrl+C can interrupt half-way, leaving
its lock or waiter list inconsistent. A sleeper registers its queue in `_idle`
under the lock, then waits for a token with a timeout; whoever makes work
available takes a sleeper out of `_idle` and puts a token. Tokens persist, so a
wake-up sent before the sleeper waits is not lost; stray tokens only cause an
extra look at the queues.

Workers take the best item of any call that is not throttled. A thread waiting
for its own call (`run_until`) runs only that call's items: never another caller's
rules or hooks, and a backward started from inside a worker (reentrant) always
makes progress because its caller can run all of its items itself.

Thread safety: `submit`, `run_until`, `wake`, `queued` and `shutdown` may be called
from any thread.
"""
from __future__ import annotations

import heapq
import itertools
import os
import queue
import threading
import time
import weakref

from ..grad_mode import set_grad_enabled
from .scheduler import execute

_WAIT_SLICE = 0.05  # seconds; bounds how long a waiting caller ignores Ctrl+C
_IDLE_TIMEOUT = 1.0  # seconds; a sleeping worker re-checks (and sees a dropped pool)
_LINGER = 200e-6  # seconds a thread out of work spins on a share_cheap call's `shared`
_pools = weakref.WeakSet()


class WorkerStats:
    """Counters of one worker thread; written only by that thread."""

    __slots__ = ("name", "items", "busy", "idle")

    def __init__(self, name):
        self.name, self.items, self.busy, self.idle = name, 0, 0.0, 0.0

    def as_dict(self):
        return {"items": self.items, "busy": self.busy, "idle": self.idle}


class WorkerPool:
    def __init__(self, num_threads: int, name: str = "pa-worker"):
        self.num_threads = num_threads
        self.name = name
        self._init_state()
        _pools.add(self)

    def _init_state(self):
        self._lock = threading.Lock()  # guards _active, every task.queue, _idle,
        #                                _shutdown and _threads
        self._active = []              # calls with queued items
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
    def threads(self):
        return list(self._threads)

    def queued(self) -> int:
        """Items waiting in the queues of all calls (a snapshot, for checks and stats)."""
        with self._lock:
            return sum(len(t.queue) for t in self._active)

    # ---- queue ------------------------------------------------------------------
    def submit(self, task, node, g, owned) -> None:
        """Queue a ready node of `task` (never refused: a running call must finish)."""
        task.add_outstanding(1)
        item = [-node.seq, next(self._tiebreak), node, g, owned, time.perf_counter()]
        with self._lock:
            heapq.heappush(task.queue, item)
            if len(task.queue) == 1:
                self._active.append(task)
            self._ensure_started()
            sleeper = self._idle.pop() if self._idle else None
        task.signal.put(None)  # its caller may be waiting for this
        if sleeper is not None:
            sleeper.put(None)

    def wake(self, task) -> None:
        """`task` became runnable again or finished: every waiter re-checks."""
        with self._lock:
            sleepers, self._idle = self._idle, []
        task.signal.put(None)
        for q in sleepers:
            q.put(None)

    def _pop(self, task):
        # caller holds _lock. The best item of `task`, or None if it has none or is
        # throttled.
        q = task.queue
        if not q or task.throttled():
            return None
        item = heapq.heappop(q)
        if not q and task in self._active:  # absent if Ctrl+C cut a submit short
            self._active.remove(task)
        return item

    def _pop_any(self):
        # caller holds _lock. The highest-priority item among unthrottled calls.
        best = None
        for task in self._active:
            if task.queue and not task.throttled() and (
                    best is None or task.queue[0] < best.queue[0]):
                best = task
        if best is None:
            return None, None
        return best, self._pop(best)

    # ---- running ----------------------------------------------------------------
    def run_until(self, task) -> None:
        """Run `task`'s queued items on the calling thread until it is finished."""
        signal = task.signal
        while not task.finished:
            with self._lock:
                item = self._pop(task)
            if item is not None:
                self.run_item(task, item)
                item = None
                continue
            if task.share_cheap and linger(task):
                self.run_shared(task)
                continue
            task.waiting = True  # threads running this call may hand it work
            try:
                signal.get(timeout=_WAIT_SLICE)  # C-level wait: safe under Ctrl+C
            except queue.Empty:
                pass
            finally:
                task.waiting = False

    def run_item(self, task, item) -> None:
        """Run one popped item; the gradient is handed over, not kept here."""
        try:
            task.begin()
            task.note_dequeued(time.perf_counter() - item[5])
            if task.error is None:
                first = [item[2], item[3], item[4]]
                item[3] = None
                task.context.copy().run(execute, task, first, self)
        except BaseException as e:  # e.g. Ctrl+C outside a rule: the call fails
            task.fail(e, None)
            raise
        finally:
            task.end()


    def run_shared(self, task) -> None:
        """Take a node from `task.shared` (if still there) and run it here."""
        try:
            node, g, owned = task.shared.popleft()
        except IndexError:
            return
        try:
            task.begin()
            if task.error is None:
                first = [node, g, owned]
                g = None
                task.context.copy().run(execute, task, first, self)
        except BaseException as e:
            task.fail(e, None)
            raise
        finally:
            task.end()


def linger(task) -> bool:
    """Spin up to _LINGER seconds for `task.shared` to get work; True if it did.

    Only with share_cheap (no GIL): a thread that just ran out of work often gets
    more within microseconds, sooner than a sleeping thread can be woken."""
    shared = task.shared
    deadline = time.perf_counter() + _LINGER
    while not shared:
        if task.finished or task.error is not None or time.perf_counter() > deadline:
            return False
        # Yield between looks: without the GIL a tight loop over objects another
        # thread uses makes their reference counts contend and slows that thread.
        time.sleep(0)
    return True


def _worker(pool_ref, st):
    set_grad_enabled(False)  # rules run on ndarrays; hooks on workers record no graph
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
        t1 = time.perf_counter()
        st.idle += t1 - t0
        try:
            pool.run_item(task, item)
            while task.share_cheap and linger(task):
                pool.run_shared(task)
        except BaseException:  # never lose a worker; the error is recorded on the task
            pass
        del pool, task, item  # keep nothing alive while idle
        st.items += 1
        st.busy += time.perf_counter() - t1


def _reset_pools_after_fork():
    # The child has only the forking thread: old workers, locks and queues are gone.
    for pool in list(_pools):
        pool._init_state()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_pools_after_fork)
