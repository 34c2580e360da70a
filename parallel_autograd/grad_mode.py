"""Grad mode: a per-thread switch that decides whether ops record a graph.

Like PyTorch, the mode is per thread: `no_grad()` in one thread does not affect
another (each thread starts with recording on). It lives in a `ContextVar`, which is
per thread here, and per asyncio task. The engines run a backward pass with recording
off in a copy of the caller's context (`run_without_grad`): `Context.run` restores
the caller's context in C however the call ends, so a Ctrl+C landing at any moment,
even in the last instructions of the call, cannot leave the caller's mode off.
"""
from __future__ import annotations

import contextvars
import functools
import threading

_enabled: contextvars.ContextVar = contextvars.ContextVar("parallel_autograd_grad_enabled",
                                                          default=True)


def is_grad_enabled() -> bool:
    """True when ops on tensors that require grad record graph nodes (this thread)."""
    return bool(_enabled.get())


def grad_mode():
    """This thread's raw mode: False, True, or a `Recording` (truthy) while a
    create_graph backward pass runs a rule on this thread. For `record`."""
    return _enabled.get()


def set_mode(mode: bool) -> None:
    """Set this thread's grad mode (the engines' internal switch; users call
    `set_grad_enabled`). Turning it on when it is on keeps the current value: inside a
    create_graph pass that is a `Recording`, which must keep noting the nodes made."""
    if mode and _enabled.get():
        return
    _enabled.set(bool(mode))


def run_without_grad(fn, *args):
    """`fn(*args)` with recording off, in a copy of the caller's context: the caller's
    mode is untouched whatever happens inside, an interrupt included."""
    return contextvars.copy_context().run(_call_without_grad, fn, args)


def _call_without_grad(fn, args):
    _enabled.set(False)
    return fn(*args)


class Recording:
    """Grad mode while a `create_graph` backward pass runs a rule, a hook or an
    accumulation: on (truthy, so ops record), and every node made is noted as
    `(tag, k, node)` in `out` (k counts this recording's nodes). The engines renumber
    the nodes a pass made by (tag, k) when it ends (`engine/graph.py`), so the graph a
    parallel pass records is numbered as the sequential pass numbers it, whatever order
    the threads made the nodes in. One per rule call, on one thread."""

    __slots__ = ("tag", "k", "out")

    def __init__(self, tag: tuple, out: list):
        self.tag = tag
        self.k = 0
        self.out = out

    def made(self, node) -> None:
        """Note `node`, made under this recording (list.append: thread-safe)."""
        self.out.append((self.tag, self.k, node))
        self.k += 1


def run_recording(recording: Recording, fn, *args):
    """`fn(*args)` with this thread's grad mode set to `recording`, then restored."""
    token = _enabled.set(recording)
    try:
        return fn(*args)
    finally:
        _enabled.reset(token)


class set_grad_enabled:
    """Turn recording on or off for this thread, like PyTorch's: as a plain call
    (`pa.set_grad_enabled(False)`: takes effect at once and stays), or as a context
    manager (`with pa.set_grad_enabled(False):`: the previous mode comes back on exit)."""

    def __init__(self, mode: bool):
        self.prev = _enabled.get()  # raw: a Recording comes back as itself
        set_mode(mode)

    def __enter__(self) -> "set_grad_enabled":
        return self

    def __exit__(self, *exc) -> bool:
        _enabled.set(self.prev)
        return False


class _GradModeContext:
    _mode = True

    def __init__(self):
        # Previous modes, per thread and stacked: one instance may be entered from
        # several threads at once, or re-entered while already active.
        self._prev = threading.local()

    def __enter__(self):
        self._prev.__dict__.setdefault("stack", []).append(_enabled.get())
        set_mode(self._mode)
        return self

    def __exit__(self, *exc):
        _enabled.set(self._prev.stack.pop())
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with type(self)():
                return fn(*args, **kwargs)

        return wrapper


class no_grad(_GradModeContext):
    """Context manager / decorator: ops in this thread record no graph."""

    _mode = False


class enable_grad(_GradModeContext):
    """Context manager / decorator: re-enables recording inside `no_grad`."""

    _mode = True


# ---- inference mode (PyTorch's `inference_mode`): no_grad here ---------------------------------
_inference: contextvars.ContextVar = contextvars.ContextVar("parallel_autograd_inference",
                                                            default=False)


def is_inference_mode_enabled() -> bool:
    """True inside `inference_mode()` (this thread)."""
    return _inference.get()


class inference_mode:
    """PyTorch's `inference_mode(mode=True)`: a context manager or decorator (with or
    without parentheses). With `mode` True, ops record no graph (as `no_grad`: there is no
    lighter mode here; tensors made inside are ordinary tensors, which PyTorch's
    inference tensors are not) and `is_inference_mode_enabled()` is True; with `mode`
    False, recording is on (PyTorch's) and inference mode off. Per thread; nests."""

    def __new__(cls, mode=True):
        if callable(mode) and not isinstance(mode, bool):  # @inference_mode, bare
            return cls()(mode)
        return super().__new__(cls)

    def __init__(self, mode: bool = True) -> None:
        self.mode = bool(mode)
        self._prev = threading.local()

    def __enter__(self) -> None:
        self._prev.__dict__.setdefault("stack", []).append(
            (_enabled.get(), _inference.get()))
        set_mode(not self.mode)
        _inference.set(self.mode)

    def __exit__(self, *exc) -> bool:
        grad, inf = self._prev.stack.pop()
        _enabled.set(grad)
        _inference.set(inf)
        return False

    def __call__(self, fn):
        mode = self.mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with inference_mode(mode):
                return fn(*args, **kwargs)

        return wrapper
