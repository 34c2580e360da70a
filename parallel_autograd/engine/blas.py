"""BLAS thread coordination: workers x BLAS threads should not exceed the cores.

threadpoolctl limits are process-wide, so concurrent backward calls share one
reference-counted limit: the first parallel call lowers BLAS threads, the last one
to finish restores what was there before. A call asking for fewer threads than
the current limit lowers it further; nobody raises it while others hold it.

Thread safety: `acquire`/`release` may be called from any thread.
"""
from __future__ import annotations

import os
import threading
import weakref

_lock = threading.Lock()  # guards _holders, _original, _current and _controller
# token -> limit, one per parallel call holding a limit; weak, so a call that was
# cut short by Ctrl+C before it could release still lets its limit go
_holders = weakref.WeakKeyDictionary()
_original = None          # per-library thread counts to restore, or None
_current = None           # the limit in force while there are holders
_controller = None        # lazily built threadpoolctl.ThreadpoolController


def _blas_libs():
    global _controller
    if _controller is None:
        from threadpoolctl import ThreadpoolController
        _controller = ThreadpoolController()
    return [lib for lib in _controller.lib_controllers if lib.user_api == "blas"]


def current_threads() -> int | None:
    """BLAS threads of the first BLAS library found (None if there is none)."""
    with _lock:
        libs = _blas_libs()
        return libs[0].num_threads if libs else None


def available_threads() -> int:
    """BLAS threads the process had before any parallel call lowered them (1 if no BLAS)."""
    with _lock:
        if _original:
            return max(n for _, n in _original)
        libs = _blas_libs()
        return max((lib.num_threads for lib in libs), default=1)


def acquire(token, threads: int) -> None:
    """Hold a limit of at most `threads` BLAS threads until `release(token)`.

    `token` is a unique weak-referenceable object (the call). Registering it is a
    single store, release is idempotent, and a token that is garbage-collected
    without a release stops holding: a Ctrl+C anywhere around these calls cannot
    leak or double-count a holder.
    """
    global _original, _current
    with _lock:
        libs = _blas_libs()
        if not _holders and _original is not None:  # left by a vanished holder
            _restore()
        if _original is None:
            _original = [(lib, lib.num_threads) for lib in libs]
        _holders[token] = threads
        if _current is None or threads < _current:
            for lib in libs:
                lib.set_num_threads(threads)
            _current = threads


def release(token) -> None:
    with _lock:
        _holders.pop(token, None)
        if not _holders and _original is not None:
            _restore()


def _restore():
    # caller holds _lock
    global _original, _current
    for lib, n in _original:
        lib.set_num_threads(n)
    _original = None  # cleared only once restored
    _current = None


def holders() -> int:
    """Parallel calls holding a BLAS limit right now."""
    with _lock:
        return len(_holders)


def _reset_after_fork() -> None:
    """In a fork child no parallel call is running: restore limits, fresh lock."""
    global _lock, _holders, _original, _current
    _lock = threading.Lock()
    if _original is not None:
        _restore()
    _holders = weakref.WeakKeyDictionary()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
