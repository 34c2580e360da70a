"""BLAS thread coordination: while a call runs in parallel, workers x BLAS threads
should not exceed the cores.

threadpoolctl limits are process-wide, so concurrent parallel calls share one
limit, counted by holders: the first holder lowers BLAS threads, the last one to
let go restores them. Invariants (each has a test in tests/test_reliability.py):

1. Never raise a limit. A holder asking for `n` threads gets `min(n, threads in force
   when the first holder came)` per library; a library already at or below that is
   not touched. A caller's own `threadpool_limits(1)` therefore stays 1 inside the call.
2. Restore exactly what was changed, once: when the last holder lets go, each library
   this module lowered is set back to the count it had, unless someone else changed
   it since (their setting is kept). After every call has returned, BLAS threads are
   as before the first one started.
3. A holder that vanishes without a release holds nothing: holders are weak
   references, and the next acquire or release restores if none is left. (The engine
   itself acquires and releases with Ctrl+C held back, `Engine._run_limited`: an
   interrupt inside threadpoolctl's change used to leave BLAS lowered and unrecorded, so
   no later call restored it. A change is also recorded before it is made.)
4. Which thread changes a count does not matter. threadpoolctl (3.8+) lets only one
   "controlling" thread change OpenBLAS's (pthreads) count and silently ignores the
   others: the thread that first set a limit keeps control while it lives. So every
   change here takes control only for itself and gives it back right after, the way
   `threadpool_limits` does (`CONTROLLING_THREAD_OWNERSHIP`), reads the count back,
   and counts a change only if it took effect. A caller's `threadpool_limits` context
   active on another thread keeps control: then nothing is lowered (or restored)
   until it ends, and its own exit restores what it saw.
5. Fork: no change is in progress while the process forks (the fork waits for
   `_lock`), and the child, which runs no parallel call, restores and starts fresh.

Thread safety: every function may be called from any thread; `_lock` guards the state.
"""
from __future__ import annotations

import contextlib
import os
import threading
import weakref

import threadpoolctl

_lock = threading.Lock()  # guards _holders, _changed, _target and _controller
# token -> requested threads, one per parallel call holding a limit; weak (invariant 3)
_holders = weakref.WeakKeyDictionary()
_changed = []        # [(lib, count before, count we set)] for libraries we lowered
_target = None       # the lowest count requested by the current holders
_before = None       # per-library counts when the first current holder came, or None
_controller = None   # threadpoolctl.ThreadpoolController, built on first use
# threadpoolctl's per-thread ownership count of the controlling thread (3.8+), else None
_OWNERSHIP = getattr(threadpoolctl, "CONTROLLING_THREAD_OWNERSHIP", None)


_libs = None  # the controller's BLAS libraries (a tuple), listed once with it


def _blas_libs():
    # caller holds _lock. The controller lists the libraries loaded when it was built and
    # never changes: the BLAS ones are picked out once (this is on the per-call path of a
    # reused "BLAS-bound" verdict, `cost.DecisionCache`).
    global _controller, _libs
    if _libs is None:
        if _controller is None:
            _controller = threadpoolctl.ThreadpoolController()
        _libs = tuple(lib for lib in _controller.lib_controllers if lib.user_api == "blas")
    return _libs


def _set(lib, n: int) -> bool:
    """Set `lib` to `n` threads from this thread; True if it took effect (invariant 4)."""
    if _OWNERSHIP is not None:
        _OWNERSHIP.increment()
    try:
        lib.set_num_threads(n)
    finally:
        if _OWNERSHIP is not None:
            _OWNERSHIP.decrement()  # gives control back unless this thread had it before
    return lib.num_threads == n


def current_threads() -> int | None:
    """BLAS threads of the first BLAS library found (None if there is none)."""
    with _lock:
        libs = _blas_libs()
        return libs[0].num_threads if libs else None


def available_threads() -> int:
    """BLAS threads the process had before parallel calls lowered them (1 if no BLAS)."""
    with _lock:
        if _before is not None:
            return max((n for _, n in _before), default=1)
        return max((lib.num_threads for lib in _blas_libs()), default=1)


def acquire(token, threads: int) -> int:
    """Hold a limit of at most `threads` BLAS threads until `release(token)`; returns
    the threads in force for the call now (never more than were in force before).

    `token` is a unique weak-referenceable object (the call). Registering it is a
    single store and release is idempotent. Not safe against an exception raised inside
    (Ctrl+C): callers on the main thread hold SIGINT back around both (the engine does).
    """
    global _target, _before
    with _lock:
        libs = _blas_libs()
        if not _holders and _before is not None:  # left by a vanished holder
            _restore()
        if _before is None:
            _before = [(lib, lib.num_threads) for lib in libs]
        _holders[token] = threads
        if _target is None or threads < _target:
            _target = threads
            _lower(threads)
        return max((lib.num_threads for lib in libs), default=1)


def _lower(threads: int) -> None:
    # caller holds _lock. Lower every library above `threads` (invariant 1). A change
    # is recorded before it is made (and the record undone if it did not take effect),
    # so an exception in the middle of threadpoolctl's change cannot lose it.
    for lib, before in _before:
        if lib.num_threads <= threads:
            continue
        for i, (other, first, ours) in enumerate(_changed):
            if other is lib:
                _changed[i] = (lib, first, threads)
                if not _set(lib, threads):
                    _changed[i] = (lib, first, ours)
                break
        else:
            _changed.append((lib, before, threads))
            if not _set(lib, threads):
                _changed.pop()


def release(token) -> None:
    """Let go of `token`'s limit (idempotent); the last holder restores."""
    with _lock:
        _holders.pop(token, None)
        if not _holders and _before is not None:
            _restore()


def _restore():
    # caller holds _lock (invariant 2). A library someone else changed since is left
    # as they set it; a restore that does not take effect (another thread controls
    # OpenBLAS) is not retried: that thread's own restore decides.
    global _target, _before
    for lib, before, ours in _changed:
        if lib.num_threads == ours:
            _set(lib, before)
    _changed.clear()
    _before = None
    _target = None


def set_threads(n: int) -> None:
    """Set every BLAS library to `n` threads (`pa.set_num_threads`). While parallel calls
    hold a lower limit it stays in force, and `n` is what their release restores."""
    global _before
    with _lock:
        libs = _blas_libs()
        if not _holders and _before is not None:  # left by a vanished holder
            _restore()
        if _before is None:
            for lib in libs:
                _set(lib, n)
            return
        _before = [(lib, n) for lib, _ in _before]
        lowered = {id(lib) for lib, _, _ in _changed}
        _changed[:] = [(lib, n, ours) for lib, _, ours in _changed]
        for lib in libs:
            if id(lib) not in lowered:
                _set(lib, min(n, _target))


class limited:
    """`with limited(n):` holds BLAS at most `n` threads for the block (`acquire` /
    `release` on the object itself as token, so the invariants above hold: never
    raised, the last holder restores). For kernels whose GEMMs are too small to pay a
    thread hand-off (`nn._conv`). Process-wide like every BLAS limit: another thread's
    GEMMs meanwhile get at most `n` threads too. Cost: ~10 us when BLAS is at or below
    `n` already (a parallel backward's workers), ~60 us when it changes (measured on
    2 loaded cores; holding Ctrl+C back around both, as the engine does, would add
    ~100 us). A Ctrl+C landing inside leaves at worst a vanished holder or a lowered
    count with none, which the next acquire or release restores (invariant 3)."""

    __slots__ = ("threads", "__weakref__")

    def __init__(self, threads: int) -> None:
        self.threads = threads

    def __enter__(self) -> limited:
        acquire(self, self.threads)
        return self

    def __exit__(self, *exc) -> bool:
        release(self)
        return False


# The small-GEMM rule (`one_thread`): OpenBLAS gives a GEMM MNK / 2^18 threads at most
# (interface/gemm.c: SMP_THRESHOLD_MIN * GEMM_MULTITHREAD_THRESHOLD), so below 2^19
# multiply-adds it runs on one thread anyway and a switch would only cost. On loaded cores
# a threaded call waits for its helper to be scheduled: 2 threads took 50-850x one
# thread's time for Linear's 1-19M multiply-adds and 2.4-18x for conv's 38-268M (load ~12
# on 2 cores, 2026-11-28, `docs/benchmarks.md`). The bound stays 2^25 all the same: on
# an idle machine the larger GEMMs gain from every core (up to ~2x here, up to the core
# count on a bigger machine), and a shapes-only rule cannot see the load. Above it,
# `pa.set_num_threads(1)` is the remedy on a busy machine.
SERIAL_MACS = 1 << 19
ONE_THREAD_MACS = 1 << 25
_ANY_THREADS = contextlib.nullcontext()


def one_thread(macs: int, low: int = SERIAL_MACS, high: int = ONE_THREAD_MACS):
    """The context GEMMs of `macs` multiply-adds each run in: BLAS held at one thread
    (`limited(1)`) from `low` to `high`, else BLAS as it is. Enter it once around a
    kernel's loop of GEMMs (the switch costs ~60 us when it changes the count). The rule
    reads shapes only, and BLAS's bytes do not depend on its threads under it (OpenBLAS's
    threaded driver blocks the inner dimension differently), so both engines stay
    bitwise equal."""
    return limited(1) if low <= macs < high else _ANY_THREADS


def holders() -> int:
    """Parallel calls holding a BLAS limit right now."""
    with _lock:
        return len(_holders)


def _before_fork() -> None:
    _lock.acquire()  # no change is half-done while the process forks (invariant 5)


def _after_fork_in_parent() -> None:
    _lock.release()


def _after_fork_in_child() -> None:
    """The child runs no parallel call: restore what was lowered, start fresh."""
    global _lock, _holders
    _lock = threading.Lock()
    _holders = weakref.WeakKeyDictionary()
    if _before is not None:
        _restore()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)
