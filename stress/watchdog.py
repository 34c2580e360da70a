"""Deadlines for engine calls: dump every thread's stack and break the hung call.

    wd = Watchdog(); wd.start()
    g = wd.guard(5.0, "random seed=7 workers=4")
    try:
        with g:
            engine.backward(root)
    except HangDetected:
        pass
    if g.fired: ...  # g.dump holds the faulthandler dump of every thread

When a guard outlives its deadline the watchdog thread dumps all stacks
(faulthandler, plus a thread-name legend), then raises `HangDetected` in the
guarded thread (PyThreadState_SetAsyncExc), like a Ctrl+C: only while that
thread is seen waiting (its innermost Python frame in threading.py, or not
moving between two polls: blocked in a C-level wait such as an engine caller's
sliced queue wait), so the exception lands where a Ctrl+C is expected rather
than in the middle of bookkeeping. It is raised again every
`reinject` seconds while the thread stays inside the guard (a caller may wait
again to clean up after the first one). A thread never seen waiting (a busy
loop) gets it anyway after `grace / 2`. If the thread is still inside the guard
`grace` seconds after the deadline it is stuck for good: `on_stuck(guard)` is
called once.
"""
from __future__ import annotations

import ctypes
import faulthandler
import sys
import tempfile
import threading
import time


class HangDetected(BaseException):
    """Raised in a thread whose guarded call missed its deadline."""


def dump_all_stacks() -> str:
    """Every thread's Python stack, via faulthandler, with thread names appended."""
    with tempfile.TemporaryFile(mode="w+") as f:
        faulthandler.dump_traceback(file=f, all_threads=True)
        f.flush()
        f.seek(0)
        text = f.read()
    names = [f"  0x{t.ident:016x} {t.name}{' (daemon)' if t.daemon else ''}"
             for t in threading.enumerate() if t.ident is not None]
    return text + "\nThreads:\n" + "\n".join(names) + "\n"


def _waiting(g) -> bool:
    """True if the guarded thread is blocked: its innermost Python frame is in
    threading.py/queue.py, or it has not moved since the last poll (a C-level wait
    such as SimpleQueue.get or time.sleep, or one long kernel)."""
    frame = sys._current_frames().get(g.tid)
    if frame is None:
        return False
    where = (id(frame), frame.f_lasti)
    still = where == g.last_seen
    g.last_seen = where
    return still or frame.f_code.co_filename.endswith(("threading.py", "queue.py"))


def _async_raise(tid: int, exc_type) -> int:
    return ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(tid), ctypes.py_object(exc_type) if exc_type is not None else None)


class _Dropped(BaseException):
    """Stands in for an undelivered asynchronous exception, delivered and swallowed."""


def drop_pending_async_exc() -> None:
    """Drop an asynchronous exception not yet delivered to this thread.

    Not by `PyThreadState_SetAsyncExc(tid, NULL)`: on CPython 3.11 that signals the
    interpreter-wide "asynchronous exception pending" flag, which only the delivery of one
    clears, so it stays set for good: every thread then handles "pending work" at every call
    and backward jump, and a call made under `sys.settrace` loops forever at its first
    instruction (the `alloc_work` kind hung so after a guard had fired). Replacing it with
    `_Dropped` and taking delivery here clears both."""
    try:
        if _async_raise(threading.get_ident(), _Dropped) == 1:
            while True:  # delivered at the first backward jump
                pass
    except _Dropped:
        pass


class Guard:
    def __init__(self, wd, seconds, label):
        self.wd = wd
        self.seconds = seconds
        self.label = label
        self.tid = None
        self.deadline = None
        self.fired = False
        self.fired_at = None
        self.raised = 0      # HangDetected injections so far
        self.last_seen = None
        self.raised_at = None
        self.stuck = False
        self.dump = None
        self.elapsed = None

    def __enter__(self):
        self.tid = threading.get_ident()
        self.start = time.monotonic()
        self.deadline = self.start + self.seconds
        with self.wd._lock:
            self.wd._active[id(self)] = self
        return self

    def __exit__(self, *exc):
        # A pending HangDetected may land anywhere in here: retry until cleaned up.
        while True:
            try:
                with self.wd._lock:
                    self.wd._active.pop(id(self), None)
                    fired = self.fired
                if fired:
                    drop_pending_async_exc()  # (in the guarded thread: self.tid)
                break
            except HangDetected:
                continue
        self.elapsed = time.monotonic() - self.start
        return False


class Watchdog:
    def __init__(self, grace: float = 10.0, on_stuck=None, poll: float = 0.02,
                 reinject: float = 0.5):
        self.grace = grace
        self.reinject = reinject
        self.on_stuck = on_stuck
        self.poll = poll
        self._lock = threading.Lock()  # guards _active and each guard's fired/stuck
        self._active = {}
        self._stop = threading.Event()
        self._thread = None
        self.fired = 0

    def start(self):
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="stress-watchdog",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def guard(self, seconds: float, label: str = "") -> Guard:
        return Guard(self, seconds, label)

    def _loop(self):
        while not self._stop.wait(self.poll):
            now = time.monotonic()
            stuck = []
            with self._lock:
                for g in list(self._active.values()):
                    if not g.fired and now > g.deadline:
                        g.dump = dump_all_stacks()
                        g.fired = True
                        g.fired_at = now
                        self.fired += 1
                    if not g.fired:
                        continue
                    if (not g.stuck
                            and (g.raised_at is None or now > g.raised_at + self.reinject)
                            and (_waiting(g) or now > g.fired_at + self.grace / 2)):
                        _async_raise(g.tid, HangDetected)
                        g.raised += 1
                        g.raised_at = now
                    if not g.stuck and now > g.fired_at + self.grace:
                        g.stuck = True
                        stuck.append(g)
            for g in stuck:
                if self.on_stuck is not None:
                    self.on_stuck(g)
