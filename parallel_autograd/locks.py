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
