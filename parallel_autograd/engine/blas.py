"""BLAS thread coordination: workers x BLAS threads should not exceed the cores.

threadpoolctl limits are process-wide, so concurrent backward calls share one
reference-counted limit: the first parallel call lowers BLAS threads, the last one
to finish restores what was there before. A call asking for fewer threads than
the current limit lowers it further; nobody raises it while others hold it.

Thread safety: `acquire`/`release` may be called from any thread.
"""
from __future__ import annotations

import threading

_lock = threading.Lock()  # guards _holders, _original, _current and _controller
_holders = 0              # parallel calls currently holding a limit
_original = None          # per-library thread counts to restore, or None
_current = None           # the limit in force while _holders > 0
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
        if _holders and _original:
            return max(n for _, n in _original)
        libs = _blas_libs()
        return max((lib.num_threads for lib in libs), default=1)


def acquire(threads: int) -> None:
    """Hold a limit of at most `threads` BLAS threads until `release()`."""
    global _holders, _original, _current
    with _lock:
        libs = _blas_libs()
        if _holders == 0:
            _original = [(lib, lib.num_threads) for lib in libs]
            _current = None
        if _current is None or threads < _current:
            for lib in libs:
                lib.set_num_threads(threads)
            _current = threads
        _holders += 1


def release() -> None:
    global _holders, _original, _current
    with _lock:
        _holders -= 1
        if _holders == 0 and _original is not None:
            for lib, n in _original:
                lib.set_num_threads(n)
            _original = None
            _current = None


def _reset_after_fork() -> None:
    """In a fork child no parallel call is running: restore limits, fresh lock."""
    global _lock, _holders, _original, _current
    _lock = threading.Lock()
    if _holders and _original is not None:
        for lib, n in _original:
            lib.set_num_threads(n)
    _holders, _original, _current = 0, None, None
