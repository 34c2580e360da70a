"""Intra-op parallelism: one large elementwise kernel split over several threads.

The parallel engine runs independent nodes side by side (inter-op parallelism). A graph
with no branches to overlap, and every forward pass, runs one op at a time on one core,
where PyTorch splits each kernel over its thread pool. numpy releases the GIL inside a
ufunc's loop, so a kernel cut into contiguous ranges, one per thread, runs on all cores
with bitwise the same result (each element is computed by the same code; numpy's SIMD
loops give the same values on any subrange).

Only kernels that may pay are split: transcendental ufuncs (`sin`, `exp`, `tanh`, ...) on
at least `MIN_ELEMENTS` elements, through `memory.pooled`. Measured 2026-11-23 (2 cores,
float64, medians): `np.sin` on 200k elements 1.86 -> 0.99 ms, on 524k 4.90 -> 2.54 ms;
numpy's SIMD `exp` and `tanh` (~1 ns an element) gain little (0.17 -> 0.15 ms). Memory-bound
arithmetic (`add`, `mul`) is left alone (the threads would share one memory bandwidth),
and so is the erf family (`ops.special`: ~50 ufunc calls a chunk, two threads were slower).

Never on top of inter-op parallelism: while any parallel backward call is running
(`engine_running`), or on one of the engine's worker threads, kernels run whole on the
calling thread, as BLAS is limited there (engine/blas.py).

- `set_num_threads(n)` / `get_num_threads()`: threads a kernel may use (default: the cores
  this process may run on); 1 turns splitting off. `PARALLEL_AUTOGRAD_INTRAOP_THREADS` in
  the environment sets the default.
- The helper threads are made on first use, persistent and daemonic; a fork child makes new
  ones (the parent's do not exist there).

Floating-point errors: numpy's error modes are per thread, so each range runs under the
caller's `np.errstate`, and the errors the ranges meet are handled on the caller once all
ranges are done, exactly as numpy handles them for the unsplit call (`fperrors`): under
"raise" one FloatingPointError with numpy's message (after the output is written, as
numpy's), under "warn" one RuntimeWarning per kind from the caller, "call"/"log"/"print"
likewise. (Before, helpers ran with numpy's defaults: a bad value in a helper's range gave
inf/NaN and no error under `np.errstate(all="raise")`.) It costs ~15-20 us a split call
(measured on the loaded 2-core machine, where the hand-off itself took ~55 us).

Thread safety: `run` may be called from any thread; the helpers serve one range at a
time each, in order of submission. A Ctrl+C in the caller while helpers still work on
its ranges returns at once: the helpers finish writing into the output, which their
task keeps alive (no memory is reused under them).
"""
from __future__ import annotations

import os
import queue
import threading
from typing import Callable

import numpy as np

from . import fperrors

MIN_ELEMENTS = 1 << 16  # below this a split costs more (~20 us a hand-off) than it saves

_lock = threading.Lock()
_helpers: list = []          # [queue.SimpleQueue of tasks], one per helper thread
_threads: list = []          # the helper threads, in the same order
_running_engines = [0]       # parallel backward calls running now (engine_running)


def _default_threads() -> int:
    env = os.environ.get("PARALLEL_AUTOGRAD_INTRAOP_THREADS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            pass
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


_num_threads = [_default_threads()]


def set_num_threads(n: int) -> int:
    """Threads one kernel may use (1: never split). Returns the previous value.
    Process-wide; thread-safe."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"set_num_threads: n must be an int >= 1, got {n!r}")
    with _lock:
        prev, _num_threads[0] = _num_threads[0], n
    return prev


def helper_threads() -> list:
    """The persistent helper threads started so far (at most get_num_threads() - 1; they
    live as long as the process, like BLAS's). Thread-safe (a copy)."""
    with _lock:
        return list(_threads)


def get_num_threads() -> int:
    """Threads one kernel may use (`set_num_threads`)."""
    return _num_threads[0]


class engine_running:
    """Context manager the parallel engine holds while it runs a call: kernels are not
    split meanwhile (its threads already use the cores). Thread-safe."""

    def __enter__(self):
        with _lock:
            _running_engines[0] += 1

    def __exit__(self, *exc):
        with _lock:
            _running_engines[0] -= 1


_thread_role = threading.local()  # .worker is True on every engine pool's worker threads


def on_worker_thread() -> bool:
    """True on a worker thread of any engine pool (e.g. inside a hook a worker runs)."""
    return getattr(_thread_role, "worker", False)


def mark_worker_thread() -> None:
    """Mark the calling thread as an engine pool's worker (`engine.pool`'s threads do, first
    thing): a kernel there runs whole, the pool's threads being the parallelism."""
    _thread_role.worker = True


def threads_for(n: int) -> int:
    """How many threads a kernel over `n` elements may use now (1: run it whole)."""
    t = _num_threads[0]
    if t <= 1 or n < MIN_ELEMENTS or _running_engines[0]:
        return 1
    if on_worker_thread():
        return 1
    return max(1, min(t, n // (MIN_ELEMENTS // 2)))


def _helper(tasks: queue.SimpleQueue) -> None:
    while True:
        fn, lo, hi, done = tasks.get()
        try:
            fn(lo, hi)
            done.put(None)
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            done.put(e)
        # the job's closure holds the kernel's input and output arrays: an idle helper
        # must not keep them alive until its next job
        fn = done = None


def _ensure_helpers(k: int) -> list:
    with _lock:
        while len(_helpers) < k:
            q: queue.SimpleQueue = queue.SimpleQueue()
            t = threading.Thread(target=_helper, args=(q,), name=f"pa-intraop-{len(_helpers)}",
                             daemon=True)
            t.start()
            _threads.append(t)
            _helpers.append(q)
        return _helpers[:k]


def run(fn: Callable[[int, int], None], n: int, threads: int) -> None:
    """`fn(lo, hi)` over `[0, n)` cut into `threads` contiguous ranges, the first on the
    calling thread, the others on helper threads; returns when all are done and raises
    the first error. The ranges' bounds are multiples of 64 elements (cache lines).

    Every range runs under the caller's `np.errstate`, and the floating-point errors
    the ranges meet are handled on the caller once all are done, as numpy handles them
    for one unsplit call (`fperrors.Deferred`, merged): one FloatingPointError, one
    warning per kind, whichever range met it."""
    if threads <= 1:
        fn(0, n)
        return
    step = -(-n // threads)
    step += -step % 64
    bounds = [(lo, min(lo + step, n)) for lo in range(0, n, step)]
    fpe = fperrors.Deferred()

    def part(lo: int, hi: int) -> None:
        with fpe.recording(lo):
            fn(lo, hi)

    done: queue.SimpleQueue = queue.SimpleQueue()
    for q, (lo, hi) in zip(_ensure_helpers(len(bounds) - 1), bounds[1:]):
        q.put((part, lo, hi, done))
    error = None
    try:
        part(*bounds[0])
    except BaseException as e:  # noqa: BLE001 - raised after the helpers finished
        error = e
    for _ in bounds[1:]:
        e = done.get()
        if error is None and e is not None:
            error = e
    if error is not None:
        raise error
    fpe.replay(merged=True, stacklevel=2)


def unary(f: np.ufunc, x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """`f(x, out=out)` split over threads when that pays (x and out C-contiguous, same
    shape); bitwise numpy's result."""
    n = x.size
    t = threads_for(n)
    if t <= 1 or not (x.flags.c_contiguous and out.flags.c_contiguous and out.shape == x.shape):
        return f(x, out=out)
    xf, of = x.reshape(-1), out.reshape(-1)
    run(lambda lo, hi: f(xf[lo:hi], out=of[lo:hi]), n, t)
    return out


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()
    _helpers.clear()
    _threads.clear()
    _running_engines[0] = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
