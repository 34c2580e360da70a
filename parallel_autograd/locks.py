"""The package's shared locks, made anew in a child process after `os.fork()`.

A lock that another thread holds when the process forks stays held forever in the
child, where that thread does not exist: the child's first op or backward would hang
on it. So every lock that module-level code or a tensor may take lives here, and
the child replaces them with fresh ones (`os.register_at_fork`); objects that own a
lock of their own register with `track` and get a fresh `_lock` too. (The worker
pools and BLAS limits reset their own state in the child: engine/pool.py, blas.py.)

- `seq`: numbering nodes on a free-threaded build (`node.next_seq`; `itertools.count`
  is not atomic without the GIL; with it, no lock is taken).
- `version`: handing out in-place write epochs (`version.bump`).
- `once`: creating a leaf's AccumulateGrad or a node's hook list exactly once.
- `grad_lock(t)`: guards `t.grad` while an engine accumulates into it; one of 64
  striped locks picked by the tensor's identity, so tensors carry no lock (they
  pickle and copy) and a fork child needs no list of tensors to repair.

Thread safety: these are the locks; take them with `with` only, never across user
code or numpy work longer than one accumulation.
"""
from __future__ import annotations

import os
import signal
import threading
import weakref

_STRIPES = 64

seq = threading.Lock()
once = threading.Lock()
version = threading.Lock()
_grad_stripes = tuple(threading.Lock() for _ in range(_STRIPES))
_tracked = weakref.WeakSet()  # objects with a `_lock` of their own


def grad_lock(t) -> threading.Lock:
    """The lock guarding accumulation into `t.grad`."""
    return _grad_stripes[(id(t) >> 4) % _STRIPES]


def track(obj) -> None:
    """Give `obj._lock` a fresh lock in a fork child."""
    _tracked.add(obj)


def _after_fork_in_child() -> None:
    global seq, once, version, _grad_stripes
    seq = threading.Lock()
    once = threading.Lock()
    version = threading.Lock()
    _grad_stripes = tuple(threading.Lock() for _ in range(_STRIPES))
    for obj in list(_tracked):
        obj._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class InterruptsDeferred:
    """On the main thread, hold back SIGINT (Ctrl+C, `_thread.interrupt_main`) while
    the block runs and deliver it to the previous handler when the block is done.
    Elsewhere (signals reach only the main thread) or with a handler that is not a
    Python callable, it does nothing. Used by the engines' write-back of `.grad` and the
    optimizers' step, so neither is left half-done by Ctrl+C."""

    __slots__ = ("old", "caught")

    def __enter__(self):
        self.old = None
        self.caught = None
        if threading.current_thread() is threading.main_thread():
            old = signal.getsignal(signal.SIGINT)
            if callable(old):
                try:
                    signal.signal(signal.SIGINT, self._hold)
                except ValueError:  # not the main interpreter: signals are not ours
                    return self
                self.old = old
        return self

    def _hold(self, signum, frame):
        self.caught = (signum, frame)

    def allowing(self, fn, *args):
        """`fn(*args)` inside the block with SIGINT delivered as usual (one held so far
        first), the hold back in place however it ends. Both swaps are inside the
        `try` and the first thing its `finally` does: an interrupt between them cannot
        leave the rest of the block unprotected (a pending one reaches the handler
        only after a swap has returned, and then it is the handler just set)."""
        if self.old is None:
            return fn(*args)
        try:
            signal.signal(signal.SIGINT, self.old)
            caught, self.caught = self.caught, None
            if caught is not None:
                self.old(*caught)  # the default handler raises KeyboardInterrupt
            return fn(*args)
        finally:
            signal.signal(signal.SIGINT, self._hold)

    def __exit__(self, *exc):
        if self.old is not None:
            signal.signal(signal.SIGINT, self.old)
            caught, self.caught = self.caught, None
            if caught is not None:
                self.old(*caught)  # the default handler raises KeyboardInterrupt
        return False
