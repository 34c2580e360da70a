"""Small shared helpers: gradient comparison, priors, engine wrappers, call outcomes,
Ctrl+C on demand."""
from __future__ import annotations

import _thread
import dis
import os
import signal
import sys
import threading
import time

import numpy as np
import threadpoolctl

import parallel_autograd as pa
from parallel_autograd.engine import engine as engine_module

VARIANTS = ("queue", "inline", "shared", "default", "many_cores")
SIMULATED_CORES = 16  # what the `many_cores` variant's engine believes it has
INTERRUPT_TAG = "stress: injected interrupt"  # in every KeyboardInterrupt the harness sends


class DefaultEngine:
    """`pa.backward_parallel` / `pa.grad_parallel`: the process-wide engines with their
    default cost model (small graphs fall back to the sequential code)."""

    def __init__(self, num_workers):
        self.num_workers = num_workers

    def backward(self, root, grad=None, retain_graph=False, create_graph=False):
        return pa.backward_parallel(root, grad, num_workers=self.num_workers,
                                    retain_graph=retain_graph, create_graph=create_graph)

    def grad(self, outputs, inputs, grad_outputs=None, retain_graph=False,
             allow_unused=False, create_graph=False):
        return pa.grad_parallel(outputs, inputs, grad_outputs, retain_graph, allow_unused,
                                num_workers=self.num_workers, create_graph=create_graph)

    def close(self):
        pass

    @property
    def inner(self):
        return pa.default_engine(self.num_workers)


class simulated_cores:
    """Context manager: the engine's `usable_cores()` returns `n` while any thread is
    inside (nested and concurrent entries share one patch, all with the same `n`); the
    original is put back when the last one leaves, on error as on success. Only
    `parallel_autograd.engine.engine.usable_cores` is patched: that is where a parallel
    call reads the cores it divides between its workers and BLAS."""

    _lock = threading.Lock()  # guards _depth and _saved
    _depth = 0
    _saved = None

    def __init__(self, n: int):
        self.n = n

    def __enter__(self):
        cls = type(self)
        with cls._lock:
            if cls._depth == 0:
                cls._saved = engine_module.usable_cores
                engine_module.usable_cores = lambda n=self.n: n
            elif engine_module.usable_cores() != self.n:
                raise RuntimeError("simulated_cores entered with two different counts")
            cls._depth += 1
        return self

    def __exit__(self, *exc):
        cls = type(self)
        with cls._lock:
            cls._depth -= 1
            if cls._depth == 0:
                engine_module.usable_cores, cls._saved = cls._saved, None
        return False


_raises_lock = threading.Lock()  # guards _raises
_raises = []  # calls that ran with more BLAS threads than their caller had (bounded)
_controller = None  # threadpoolctl.ThreadpoolController, built on first use


def _blas_threads_now() -> int | None:
    """The most threads any BLAS library has now (a cached controller: microseconds)."""
    global _controller
    if _controller is None:
        _controller = threadpoolctl.ThreadpoolController()
    counts = [lib.num_threads for lib in _controller.lib_controllers
              if lib.user_api == "blas"]
    return max(counts) if counts else None


def take_blas_raises() -> list:
    """What `ManyCoresEngine` calls recorded since the last take (and forget it)."""
    with _raises_lock:
        out = _raises[:]
        _raises.clear()
        return out


class ManyCoresEngine:
    """A pa.Engine whose calls run under `simulated_cores(SIMULATED_CORES)`: each
    parallel call asks BLAS for cores // workers threads, more than the caller's
    limit (the harness pins BLAS), and must get no more than the caller had
    (engine/blas.py, invariant 1). The threads in force inside the call (its
    `CallStats.blas_threads`) are checked against the count when the call started;
    a raise is recorded for the harness (`take_blas_raises`), not raised."""

    def __init__(self, num_workers):
        self.inner = pa.Engine(num_workers, min_nodes=0, min_work=0, min_width=0,
                               inline_below=16)

    def _check(self, before, st, what):
        if st is not None and st.blas_threads is not None and before is not None \
                and st.blas_threads > before:
            with _raises_lock:
                if len(_raises) < 100:
                    _raises.append(f"{what} under {SIMULATED_CORES} simulated cores ran "
                                   f"with {st.blas_threads} BLAS thread(s); its caller "
                                   f"had {before}")

    def backward(self, root, grad=None, retain_graph=False, create_graph=False):
        before = _blas_threads_now()
        with simulated_cores(SIMULATED_CORES):
            st = self.inner.backward(root, grad, retain_graph, stats=True,
                                     create_graph=create_graph)
        self._check(before, st, f"backward x{self.inner.num_workers}")

    def grad(self, outputs, inputs, grad_outputs=None, retain_graph=False,
             allow_unused=False, create_graph=False):
        before = _blas_threads_now()
        with simulated_cores(SIMULATED_CORES):
            out, st = self.inner.grad(outputs, inputs, grad_outputs, retain_graph,
                                      allow_unused, stats=True, create_graph=create_graph)
        self._check(before, st, f"grad() x{self.inner.num_workers}")
        return out

    def close(self):
        self.inner.close()


def default_engine_factory(num_workers: int, variant: str):
    """The engines the harness checks. `queue`: every node through the shared queue
    (thresholds 0, inline_below=0: ranked accumulation); `inline`: parallel always,
    nodes under 16 elements inline; `shared`: every node of these small graphs cheap
    (keyed accumulation) and handed between threads (`share_cheap`) on any build;
    `default`: backward_parallel as users call it; `many_cores`: `inline`'s set-up
    believing it has 16 cores (`ManyCoresEngine`)."""
    if variant == "queue":
        return pa.Engine(num_workers, min_nodes=0, min_work=0, min_width=0, inline_below=0)
    if variant == "inline":
        return pa.Engine(num_workers, min_nodes=0, min_work=0, min_width=0, inline_below=16)
    if variant == "shared":
        return pa.Engine(num_workers, min_nodes=0, min_work=0, min_width=0, share_cheap=True)
    if variant == "default":
        return DefaultEngine(num_workers)
    if variant == "many_cores":
        return ManyCoresEngine(num_workers)
    raise ValueError(f"unknown engine variant {variant!r} (known: {', '.join(VARIANTS)})")


def underlying(engine):
    """The pa.Engine behind a harness engine (or None if it is something else)."""
    inner = getattr(engine, "inner", engine)
    return inner if isinstance(inner, pa.Engine) else None


def diff(ref, got, what: str):
    """None if `got` is bitwise `ref` (NaN-aware), else a description. Tensors (`.grad`,
    `grad()` results) are compared by their arrays, with an array or a Tensor; two Tensors
    must also agree on having a graph (a create_graph pass's) or not."""
    if ref is None and got is None:
        return None
    if ref is None or got is None:
        return (f"{what}: expected {'no gradient' if ref is None else 'a gradient'}, got "
                f"{'None' if got is None else f'an array {got.shape}'}")
    if isinstance(ref, pa.Tensor) and isinstance(got, pa.Tensor) and \
            (ref.grad_fn is None) != (got.grad_fn is None):  # create_graph: recorded
        return (f"{what}: expected a Tensor {'without' if ref.grad_fn is None else 'with'} "
                f"a graph, got one {'without' if got.grad_fn is None else 'with'}")
    ref = np.asarray(ref.numpy() if isinstance(ref, pa.Tensor) else ref)
    got = np.asarray(got.numpy() if isinstance(got, pa.Tensor) else got)
    if ref.shape != got.shape or ref.dtype != got.dtype:
        return f"{what}: expected {ref.dtype}{ref.shape}, got {got.dtype}{got.shape}"
    if not np.array_equal(ref, got, equal_nan=ref.dtype.kind in "fc"):
        bad = ~((ref == got) | (np.isnan(ref) & np.isnan(got)))
        with np.errstate(invalid="ignore"):
            err = np.nanmax(np.abs(ref - got)) if bad.any() else 0.0
        return (f"{what}: {int(bad.sum())}/{ref.size} elements differ "
                f"(max abs diff {err:.3g})")
    if np.ascontiguousarray(ref).tobytes() != np.ascontiguousarray(got).tobytes():
        return f"{what}: equal values but different bits (signed zeros or NaN payloads)"
    return None


def diff_all(refs, gots, what) -> list:
    """`diff` of each pair of `refs` and `gots` (item `j` named `what(j)`, or
    f"{what} {j}" when `what` is a string), plus a line if the counts differ: the
    problems found, none if every array is bitwise its reference."""
    name = what if callable(what) else (lambda j: f"{what} {j}")
    refs, gots = list(refs), list(gots)
    problems = [d for d in (diff(r, g, name(j)) for j, (r, g) in enumerate(zip(refs, gots)))
                if d]
    if len(refs) != len(gots):
        problems.append(f"{len(gots)} results for {len(refs)} expected")
    return problems


def leaf_diffs(refs, leaves) -> list:
    """`diff_all` of reference gradients against the leaves' `.grad`, each named by
    index, shape and dtype."""
    return diff_all(refs, [t.grad for t in leaves],
                    lambda j: f"leaf {j} {leaves[j].shape} {leaves[j].dtype}")


def make_priors(leaves, rng, p_none: float = 0.5):
    """Per leaf: None, or an array already in .grad before the call (tests +=)."""
    out = []
    for t in leaves:
        if not t.requires_grad or rng.random() < p_none:
            out.append(None)
        else:
            out.append(np.asarray(rng.standard_normal(t.shape), dtype=t.dtype))
    return out


def set_grads(leaves, priors):
    for t, p in zip(leaves, priors):
        t.grad = None if p is None else p.copy()


def unchanged(leaves, before_objs, before_vals):
    """Problems if any .grad is no longer the same object with the same bits."""
    problems = []
    for i, (t, obj, val) in enumerate(zip(leaves, before_objs, before_vals)):
        if t.grad is not obj:
            problems.append(f"leaf {i} {t.shape}: .grad was replaced by a failed call")
        elif val is not None:  # the same object: compare its array (a recorded
            # create_graph gradient keeps its graph; only the values can have changed)
            g = t.grad
            d = diff(val, g.numpy() if isinstance(g, pa.Tensor) else g, f"leaf {i}")
            if d:
                problems.append(d + " (modified by a failed call)")
    return problems


def snapshot(leaves):
    """Each leaf's `.grad` object and a copy of its value (Tensors: of their array)."""
    objs = [t.grad for t in leaves]
    vals = [None if g is None else
            g.numpy().copy() if isinstance(g, pa.Tensor) else g.copy()
            for g in objs]
    return objs, vals


class Outcome:
    """What one guarded call did."""

    __slots__ = ("value", "exc", "hang", "broken", "dump", "elapsed")

    def __init__(self):
        self.value = None
        self.exc = None
        self.hang = False      # the watchdog fired (deadline missed)
        self.broken = False    # ... and its HangDetected ended the call
        self.dump = None
        self.elapsed = 0.0

    def describe(self):
        if self.hang:
            return "hang"
        if self.exc is not None:
            return f"{type(self.exc).__name__}: {self.exc}"
        return "ok"


class Interrupter:
    """Ctrl+C on demand, main thread only: inside the block, `send()` (from any thread)
    or `after(delay)` sends SIGINT to the main thread, whose handler raises
    `KeyboardInterrupt(tag)`. On exit it waits for the timer and until every SIGINT
    sent has reached the handler (which, from then on, only records it), then puts the
    previous handler back: nothing sent can land later as a real Ctrl+C (a Timer
    cancelled too late used to). Its KeyboardInterrupt leaving the block is swallowed:
    the block's own `except KeyboardInterrupt` may not have been entered yet."""

    def __init__(self, tag: str = INTERRUPT_TAG):
        self.tag = tag
        self.sent = threading.Event()
        self.fired = threading.Event()
        self.timer = None
        self.old = None
        self.exiting = False

    def _handler(self, signum, frame):
        self.fired.set()
        # Not once __exit__ began (it sets `exiting` first; the frame check covers a
        # signal landing before that first statement).
        if not self.exiting and (frame is None
                                 or frame.f_code is not Interrupter.__exit__.__code__):
            raise KeyboardInterrupt(self.tag)

    def send(self) -> None:
        self.sent.set()
        _thread.interrupt_main()

    def after(self, delay: float) -> None:
        self.timer = threading.Timer(delay, self.send)
        self.timer.start()

    def __enter__(self):
        self.old = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc):
        self.exiting = True
        end = time.monotonic() + 5.0
        if self.timer is not None:
            self.timer.join()
        while self.sent.is_set() and not self.fired.is_set() and time.monotonic() < end:
            time.sleep(0.0005)
        signal.signal(signal.SIGINT, self.old)
        # ours, landed in the block outside the caller's try (e.g. a timer of ~0 s
        # firing before it): swallowed, like one caught there
        return isinstance(exc[1], KeyboardInterrupt) and str(exc[1]) == self.tag


def in_call_bracket(code) -> bool:
    """Code a parallel call runs on its caller's thread around the pass itself: the set-up
    and tear-down in engine/engine.py (`_run_parallel`, `_run_limited`), the BLAS limits
    (engine/blas.py, and threadpoolctl under it), intra-op's `engine_running` (intraop.py)
    and the SIGINT hold (`InterruptsDeferred` in locks.py). Where an interrupt used
    to leave BLAS lowered for good (reliability issue, item 11)."""
    name = code.co_filename
    if name.endswith(("threadpoolctl.py", os.path.join("engine", "blas.py"),
                      os.path.join("parallel_autograd", "intraop.py"))):
        return True
    if name.endswith(os.path.join("engine", "engine.py")):
        return code.co_name in ("_run_parallel", "_run_limited")
    return (name.endswith(os.path.join("engine", "step.py"))
            and code.co_name in ("__enter__", "__exit__", "allowing", "_hold"))


def _checks_signals_after(opname: str) -> bool:
    """Whether CPython (3.11+) handles pending signals right after this instruction: a
    call (a C function's return; a Python function's start is its own `call` event) or a
    jump back. Nowhere else: e.g. not between a `with` block's last statement and the
    call that releases its lock."""
    return (opname.startswith("CALL") and not opname.startswith("CALL_INTRINSIC")) \
        or opname.startswith("JUMP_BACKWARD")


class LineTrigger:
    """Counts the lines the calling thread executes in code `where(code)` says is in scope
    (a trace function, so only where no other tracer is set: `available()`), and with
    `interrupt_at=n` sends SIGINT (`_thread.interrupt_main`) as line n starts, delivered
    where CPython would handle a real one arriving then: at the next point where it
    handles signals (after a call returns, at a Python function's start, at a jump back;
    opcode tracing finds it), in whatever frame execution has reached by then, through
    the handler in force there (a held-back SIGINT stays held). Raising at the line itself
    would land where no signal can (before a `with` block's lock is released, say).
    `count` is the lines seen; `fired_at` is `(file, line, function)` of line n. Main
    thread only."""

    def __init__(self, where, interrupt_at: int | None = None):
        self.where = where
        self.at = interrupt_at
        self.count = 0
        self.fired_at = None
        self.armed = False     # line n started: deliver at the next handling point
        self._scope = {}       # code -> in scope (a dict lookup per call, not a path check)
        self._prev = {}        # frame -> the opcode it ran last, once armed
        self._traced = []      # frames given opcode tracing when armed

    @staticmethod
    def available() -> bool:
        return sys.gettrace() is None

    def _call(self, frame, event, arg):
        if self.armed:
            return self._deliver(frame)  # a Python function's start handles signals
        code = frame.f_code
        inside = self._scope.get(code)
        if inside is None:
            inside = self._scope[code] = bool(self.where(code))
        return self._line if inside else None

    def _line(self, frame, event, arg):
        if self.armed:
            return self._opcode(frame, event, arg)
        if event == "line":
            self.count += 1
            if self.count == self.at:
                c = frame.f_code
                self.fired_at = (os.path.basename(c.co_filename), frame.f_lineno, c.co_name)
                self._arm(frame)
        return self._line

    def _arm(self, frame):
        self.armed = True
        f = frame
        while f is not None:  # execution may return to any caller before the point
            f.f_trace = self._opcode
            f.f_trace_opcodes = True
            self._traced.append(f)
            f = f.f_back

    def _opcode(self, frame, event, arg):
        if not self.armed:
            return None
        if event == "opcode":
            prev = self._prev.get(frame)
            if prev is not None and _checks_signals_after(prev):
                return self._deliver(frame)
            self._prev[frame] = dis.opname[frame.f_code.co_code[frame.f_lasti]]
        return self._opcode

    def _deliver(self, frame) -> None:
        """Send the SIGINT; handled right here, in the trace function, so its exception
        (if the handler in force raises) comes out where the traced code is now. Returns
        None: this frame is traced no more."""
        self.armed = False
        self._prev.clear()
        _thread.interrupt_main()

    def __enter__(self):
        sys.settrace(self._call)
        return self

    def __exit__(self, *exc):
        sys.settrace(None)
        self.armed = False
        for f in self._traced:
            f.f_trace_opcodes = False
            f.f_trace = None
        self._traced.clear()
        return False
