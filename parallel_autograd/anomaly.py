"""Anomaly detection: PyTorch's `detect_anomaly` / `set_detect_anomaly`, a debugging mode.

While it is on:

- every op notes where it was created (`record` calls `note`): a short traceback of the
  caller's frames, the library's own left out, kept in a weak table node -> `Trace`
  (Nodes get no extra slot; with the mode off, `record` pays one ContextVar read);
- with `check_nan` (the default), backward checks every gradient a node's rule returns,
  the gradient flowing into each node (a seed, or a sum of contributions that overflowed)
  and what a tensor hook returns, for NaN and inf, and raises RuntimeError on the first
  bad one, naming the op, the input and where the op was created (`check_step`);
- any other error raised in a node's backward gets the op's creation traceback as a note.

The mode lives in a ContextVar, like grad mode: per thread, and per asyncio task. A thread
you start does not see it (Python gives a new thread an empty context; in PyTorch the mode
is process-wide), unless it runs in a copy of your context (`contextvars.copy_context()`).
The engines run a backward pass in a copy of the caller's context, their worker threads
included, so the mode in effect when backward is called applies to the whole pass.
"""
from __future__ import annotations

import contextvars
import functools
import os
import sys
import threading
import traceback
import weakref

import numpy as np

# (enabled, check_nan); PyTorch's defaults: off, check_nan True.
_MODES = {(e, c): (e, c) for e in (False, True) for c in (False, True)}
_mode: contextvars.ContextVar = contextvars.ContextVar("parallel_autograd_anomaly",
                                                       default=(False, True))
mode = _mode.get  # `mode()[0]`: on? `record`'s one check

TRACE_LIMIT = 16  # innermost frames kept per op (the library's own are left out)
_PKG = os.path.dirname(os.path.abspath(__file__)) + os.sep
_traces: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Node -> Trace
_run_node = []  # the backward step's code object (engine.step.run_node's): `backward_step`


def is_anomaly_enabled() -> bool:
    """True while anomaly detection is on (this thread / context)."""
    return _mode.get()[0]


def is_anomaly_check_nan_enabled() -> bool:
    """True when anomaly detection checks gradients for NaN and inf (PyTorch's flag: its
    value is kept while the mode is off, default True)."""
    return _mode.get()[1]


def checking() -> bool:
    """Whether a backward pass started now must check its gradients (the engines' `Sink`)."""
    m = _mode.get()
    return m[0] and m[1]


def _checked(enabled, check_nan, who: str) -> tuple:
    """The mode value for the arguments, which must be bools."""
    for name, v in (("mode", enabled), ("check_nan", check_nan)):
        if not isinstance(v, (bool, np.bool_)):
            raise TypeError(f"{who}: {name} must be a bool, got {type(v).__name__}")
    return _MODES[bool(enabled), bool(check_nan)]


class set_detect_anomaly:
    """Turn anomaly detection on or off for this thread, like PyTorch's: as a plain call
    (`pa.set_detect_anomaly(True)`: takes effect at once and stays), or as a context
    manager (`with pa.set_detect_anomaly(False):`: the previous mode comes back on exit).
    `check_nan=False` records where ops were created but checks no gradient.

    Thread safety: the mode is per thread (a ContextVar); it follows a backward call into
    the engine's worker threads, not into threads you start."""

    def __init__(self, mode: bool, check_nan: bool = True):
        new = _checked(mode, check_nan, "set_detect_anomaly")
        self.prev = _mode.get()
        _mode.set(new)

    def __enter__(self) -> "set_detect_anomaly":
        return self

    def __exit__(self, *exc) -> bool:
        _mode.set(self.prev)
        return False


class detect_anomaly:
    """Context manager / decorator: anomaly detection on inside (PyTorch's
    `torch.autograd.detect_anomaly`). Ops made inside remember where they were created;
    a backward pass started inside raises RuntimeError at the first gradient with NaN or
    inf values, naming the op and showing that place. Slow: for debugging.

    Thread safety: per thread, like `set_detect_anomaly`; one instance may be entered from
    several threads at once, or re-entered."""

    def __init__(self, check_nan: bool = True):
        self.mode = _checked(True, check_nan, "detect_anomaly")
        self._prev = threading.local()

    def __enter__(self) -> "detect_anomaly":
        self._prev.__dict__.setdefault("stack", []).append(_mode.get())
        _mode.set(self.mode)
        return self

    def __exit__(self, *exc) -> bool:
        _mode.set(self._prev.stack.pop())
        return False

    def __call__(self, fn):
        check_nan = self.mode[1]

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with detect_anomaly(check_nan):
                return fn(*args, **kwargs)

        return wrapper


# ---- forward: where each op was created ---------------------------------------------
class Trace:
    """Where an op was created: `stack` (a traceback.StackSummary, outermost first) of the
    frames outside the library; and, for an op made while another node's backward ran (a
    create_graph pass, or a rule that records), that node's name and Trace (or None)."""

    __slots__ = ("stack", "parent_name", "parent")

    def __init__(self, stack, parent_name, parent):
        self.stack = stack
        self.parent_name = parent_name
        self.parent = parent


def backward_step(fn):
    """Declare `fn` the engine's backward step (a decorator: engine.step.run_node): `note`
    stops its walk out of the caller's frames there. The engine registers itself, so this
    module, below the engine, imports none of it."""
    _run_node[:] = [fn.__code__]
    return fn


def note(node) -> None:
    """Record where `node` is being created (`record` calls it while the mode is on).

    Walks out from the caller, keeping frames outside the library (at most the innermost
    `TRACE_LIMIT`), and stops at a backward step (`engine.step.run_node`): the frames
    beyond it are the engine's, and its node is this node's parent."""
    step = _run_node[0] if _run_node else None
    frames = []
    parent = None
    f = sys._getframe(1)
    while f is not None:
        code = f.f_code
        if code is step:
            parent = f.f_locals.get("node")
            break
        if not code.co_filename.startswith(_PKG):
            frames.append((f, f.f_lineno))
        f = f.f_back
    f = None
    stack = traceback.StackSummary.extract(iter(frames), limit=TRACE_LIMIT)
    stack.reverse()  # outermost first, as tracebacks print
    frames = None
    _traces[node] = Trace(stack, None if parent is None else parent.name,
                          None if parent is None else _traces.get(parent))


def trace_of(node) -> Trace | None:
    """The Trace recorded for `node` (None: it was made with anomaly detection off)."""
    return _traces.get(node) if _traces else None


def describe(node) -> str:
    """Where `node`'s op was created, for a message: its traceback, then, for an op made
    by another node's backward, that node's (iteratively, outermost pass last)."""
    if node.variable is not None:
        return f"It is the gradient of a leaf tensor of shape {node.variable.shape}."
    t = trace_of(node)
    if t is None:
        return (f"No traceback was recorded for {node.name!r}: it was created while anomaly "
                "detection was off (turn it on around the forward pass too).")
    parts = []
    what = "The op"
    while t is not None:
        if t.stack:
            parts.append(f"{what} was created at (most recent call last):\n"
                         + "".join(t.stack.format()).rstrip("\n"))
        if t.parent_name is None:
            break
        parts.append(f"{what} was made by the backward of {t.parent_name!r}.")
        what = f"The op {t.parent_name!r}"
        t = t.parent
        if t is None:
            parts.append(f"No traceback was recorded for {what[7:]}: it was created while "
                         "anomaly detection was off.")
    return "\n".join(parts)


def add_note(exc: BaseException, msg: str) -> None:
    """`exc.add_note(msg)` on Python 3.11+. On 3.10 the same `__notes__` list is kept
    (for code that reads it), and the note is appended to a string message too, since
    3.10's tracebacks do not print notes."""
    if hasattr(exc, "add_note"):
        exc.add_note(msg)
        return
    try:
        exc.__notes__ = [*getattr(exc, "__notes__", ()), msg]
    except AttributeError:  # an exception type that takes no attributes
        pass
    if exc.args and isinstance(exc.args[0], str):
        exc.args = (f"{exc.args[0]} [{msg}]",) + exc.args[1:]


def add_trace_note(exc: BaseException, node) -> None:
    """Add where `node`'s op was created to an error raised in its backward (if recorded)."""
    if trace_of(node) is None or getattr(exc, "_pa_traced", False):
        return
    add_note(exc, describe(node))


# ---- backward: NaN / inf checks --------------------------------------------------------
def _bad(g) -> str | None:
    """'nan', 'inf' or 'nan and inf' when the gradient `g` (array or Tensor) has such
    values, else None. One pass (`isfinite`, a 1-byte-per-element temporary; as fast as a
    sum, and no overflow warnings); only a bad gradient is looked at again."""
    if g is None:
        return None
    a = g if isinstance(g, np.ndarray) else np.asarray(g)  # a Tensor: its array (__array__)
    if a.dtype.kind not in "fc" or np.isfinite(a).all():
        return None
    nan, inf = bool(np.isnan(a).any()), bool(np.isinf(a).any())
    return "nan and inf" if nan and inf else "nan" if nan else "inf"


def _ordinal(i: int) -> str:
    suffix = "th" if 10 <= i % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(i % 10, "th")
    return f"{i}{suffix}"


def _error(node, msg: str) -> RuntimeError:
    e = RuntimeError(f"{msg}\n{describe(node)}")
    e._pa_traced = True
    return e


def check_incoming(node, g) -> None:
    """Raise if the gradient flowing into `node` has NaN/inf values: a seed passed to
    backward/grad, or the sum of its (checked) contributions overflowed."""
    kind = _bad(g)
    if kind is not None:
        raise _error(node, f"Function {node.name!r} received {kind} values in the gradient "
                           "of its output (a seed gradient passed to backward/grad, or the "
                           "sum of its gradient contributions overflowed).")


def check_hooked(node, g) -> None:
    """Raise if the tensor hooks of `node`'s output turned its gradient into NaN/inf."""
    kind = _bad(g)
    if kind is not None:
        raise _error(node, f"A hook on the gradient of {node.name!r} returned {kind} values.")


def check_step(node, g, grads) -> None:
    """After `node`'s backward step: raise RuntimeError like PyTorch's ("Function 'mul'
    returned nan values in its 0th output.") at the first input gradient in `grads`
    (arrays, or Tensors in a create_graph pass) with NaN or inf values, or if `g`, the
    gradient that flowed in, had some."""
    check_incoming(node, g)
    if grads is None:
        return
    for i, gi in enumerate(grads):
        kind = _bad(gi)
        if kind is not None:
            raise _error(node, f"Function {node.name!r} returned {kind} values in its "
                               f"{_ordinal(i)} output (the gradient of its input {i}).")
