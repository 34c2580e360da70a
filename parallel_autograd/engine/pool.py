"""A persistent pool of worker threads pulling ready nodes from one shared queue.

The queue is a heap of `(-seq, tiebreak, task, node, grad, owned)`: later-created
nodes first, like PyTorch, which frees saved values early and keeps the order
deterministic. It is guarded by `_cond`; every state change happens under it and
is followed by a notify, and every wait re-checks its predicate in a loop.

Callers take part: `run_until(task)` pops and runs items (of any call, which is
what keeps a backward started from inside a worker from deadlocking) until its
own call is done, waiting in short slices so Ctrl+C is handled promptly.

Thread safety: `submit`, `run_until` and `shutdown` may be called from any thread.
"""
from __future__ import annotations

import heapq
import itertools
import os
import threading
import time
import weakref

from ..grad_mode import set_grad_enabled
from .scheduler import execute

_WAIT_SLICE = 0.05  # seconds; bounds how long a waiting caller ignores Ctrl+C
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
        self._cond = threading.Condition()  # guards _queue, _shutdown, _threads
        self._queue = []
        self._tiebreak = itertools.count()
        self._shutdown = False
        self._threads = []
        self.worker_stats = []

    # ---- lifecycle --------------------------------------------------------------
    def _ensure_started(self):
        # caller holds _cond
        if self._threads or self.num_threads == 0:
            return
        for i in range(self.num_threads):
            st = WorkerStats(f"{self.name}-{i}")
            t = threading.Thread(target=_worker, name=st.name, daemon=True,
                                 args=(self._cond, weakref.ref(self), st))
            self.worker_stats.append(st)
            self._threads.append(t)
            t.start()

    def shutdown(self, wait: bool = True) -> None:
        """Stop the workers once the queue is drained (idempotent)."""
        with self._cond:
            self._shutdown = True
            threads = list(self._threads)
            self._cond.notify_all()
        if wait:
            me = threading.current_thread()
            for t in threads:
                if t is not me:
                    t.join()

    @property
    def threads(self):
        return list(self._threads)

    # ---- work -------------------------------------------------------------------
    def submit(self, task, node, g, owned) -> None:
        with self._cond:
            if self._shutdown:
                raise RuntimeError("cannot schedule work: the engine is closed")
            self._ensure_started()
            heapq.heappush(self._queue, (-node.seq, next(self._tiebreak), task, node, g,
                                         owned, time.perf_counter()))
            self._cond.notify()

    def requeue(self, items) -> None:
        """Put deferred items back in the queue (see backpressure in scheduler.py)."""
        with self._cond:
            for item in items:
                heapq.heappush(self._queue, item)
            self._cond.notify_all()

    def _pop(self, task=None):
        """Pop the next item to run, skipping deferred ones; None if nothing is left.

        Caller holds _cond. Increments the item's task.running when it returns it.
        """
        queue = self._queue
        while queue:
            item = heapq.heappop(queue)
            if not item[2].defer_if_throttled(item):
                return item
        return None

    def task_finished(self) -> None:
        """Wake callers waiting for their call to end."""
        with self._cond:
            self._cond.notify_all()

    def run_until(self, task) -> None:
        """Run queued items on the calling thread until `task` is done."""
        cond = self._cond
        while not task.done.is_set():
            with cond:
                item = self._pop()
                while item is None and not task.done.is_set():
                    cond.wait(_WAIT_SLICE)
                    item = self._pop()
                if task.done.is_set() and item is None:
                    return
            self.run_item(item)
            item = None  # do not keep the item's gradient alive while waiting

    def run_item(self, item) -> int:
        """Run a popped item (its task.running was already incremented by _pop)."""
        _, _, task, node, g, owned, t_enq = item
        task.note_dequeued(time.perf_counter() - t_enq)
        try:
            if task.error is not None:
                finished = task.finish_items(1)  # cancelled: skip, but count it down
            else:
                finished = task.context.copy().run(execute, task, node, g, owned,
                                                   self.submit)
        finally:
            task.stop_running()
        if finished:
            self.task_finished()
        return finished


def _worker(cond, pool_ref, st):
    set_grad_enabled(False)  # rules run on ndarrays; hooks on workers record no graph
    while True:
        t0 = time.perf_counter()
        with cond:
            while True:
                pool = pool_ref()
                if pool is None:
                    return
                item = pool._pop()
                if item is not None:
                    break
                if pool._shutdown:
                    return
                del pool
                cond.wait(1.0)  # re-check now and then: a dropped pool ends its workers
        t1 = time.perf_counter()
        st.idle += t1 - t0
        try:
            pool.run_item(item)
        except BaseException:  # never lose a worker; errors are recorded on the task
            pass
        del pool, item  # do not keep the item's gradient alive while idle
        st.items += 1
        st.busy += time.perf_counter() - t1


def _reset_pools_after_fork():
    # The child has only the forking thread: old workers, locks and queues are gone.
    for pool in list(_pools):
        pool._init_state()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_pools_after_fork)
