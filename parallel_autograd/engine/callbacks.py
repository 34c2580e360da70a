"""What code running inside a backward pass can ask of the engine running it (both engines).

A pass is one `backward`/`grad` call. Code that runs during it (a tensor hook, a grad-ready
hook, a `Function.backward`) may:

- `queue_callback(fn)`: run `fn()` once every node of the pass has run, on the thread that
  called backward, before anything is written to `.grad` (PyTorch's
  `Variable._execution_engine.queue_callback`). Callbacks run in the order queued; one may
  queue more. If one raises, the call fails and no `.grad` changes.
- `current_pass()`: the running pass's `PassCallbacks`, for library code. Besides
  `queue_callback` it has `on_failure(fn)`: `fn(exc)` runs on the calling thread when the pass
  fails (a rule, hook or queued callback raised; once every thread of the pass stopped), before
  the error propagates (a write-back refused after the pass, e.g. a `.grad` of the wrong
  shape, is the caller's error alone: the pass itself completed); and
  `add_progress(fn)`: `fn()` is called by whichever thread is about to run a node, until the
  pass ends. That is how `DistributedDataParallel` keeps MPI's non-blocking all-reduces moving
  while the backward computes (MPI makes no progress unless someone calls into it).

Each pass has its own `PassCallbacks`, found through a context variable that the engines set in
the pass's own context (which their workers copy), so nested and concurrent passes never see
each other's. With nothing registered, a pass costs one object and one truth test per node.

Thread safety: every method may be called from any thread of the pass (list appends); the
callbacks themselves run on the threads stated above.
"""
from __future__ import annotations

import contextvars
from typing import Callable

from ..anomaly import add_note

_current: contextvars.ContextVar["PassCallbacks | None"] = contextvars.ContextVar(
    "parallel_autograd_pass", default=None)


class PassCallbacks:
    """The callbacks of one backward pass. `progress` is read by the per-node step (truthy
    only when something registered)."""

    __slots__ = ("final", "failure", "progress")

    def __init__(self):
        self.final: list = []
        self.failure: list = []
        self.progress: list = []

    def queue_callback(self, fn: Callable[[], None]) -> None:
        """Run `fn()` after the pass's last node, before its write-back (see module doc)."""
        _check_callable(fn, "queue_callback")
        self.final.append(fn)

    def on_failure(self, fn: Callable[[BaseException], None]) -> None:
        """Run `fn(exc)` if the pass fails, before `exc` propagates (see module doc)."""
        _check_callable(fn, "on_failure")
        self.failure.append(fn)

    def add_progress(self, fn: Callable[[], None]) -> None:
        """Call `fn()` before each node the pass runs, from the thread running it."""
        _check_callable(fn, "add_progress")
        self.progress.append(fn)


def _check_callable(fn, what: str) -> None:
    if not callable(fn):
        raise TypeError(f"{what}: expected a callable, got {type(fn).__name__}")


def current_pass() -> PassCallbacks | None:
    """The `PassCallbacks` of the backward pass this code runs in, or None outside any."""
    return _current.get()


def queue_callback(fn: Callable[[], None]) -> None:
    """Run `fn()` once every node of the running backward pass has run, on the thread that
    called backward, before any `.grad` is written; if it raises, the call fails and no
    `.grad` changes (PyTorch's `Variable._execution_engine.queue_callback`). Only from code
    that runs during a pass (a hook, a Function.backward): RuntimeError elsewhere.
    Thread safety: callable from any thread of the pass."""
    calls = _current.get()
    if calls is None:
        raise RuntimeError("queue_callback: no backward pass is running in this context "
                           "(call it from a hook or a Function.backward)")
    calls.queue_callback(fn)


def begin() -> PassCallbacks:
    """Start a pass in the current context (which must be the pass's own copy)."""
    calls = PassCallbacks()
    _current.set(calls)
    return calls


def finish(calls: PassCallbacks) -> None:
    """Run the pass's queued callbacks (in order, including any they queue)."""
    final = calls.final
    i = 0
    while i < len(final):
        final[i]()
        i += 1


def fail(calls: PassCallbacks, exc: BaseException) -> None:
    """Tell the pass's failure callbacks about `exc`. A callback that raises does not hide
    `exc`: its error becomes a note on `exc`, and the others still run."""
    for fn in list(calls.failure):
        try:
            fn(exc)
        except BaseException as e:  # noqa: BLE001 (reported on exc, which propagates)
            add_note(exc, f"a failure callback of the pass raised {type(e).__name__}: {e}")


def poke(progress: list) -> None:
    """Call the pass's progress callbacks (the per-node step does, when any exist)."""
    for fn in progress:
        fn()
