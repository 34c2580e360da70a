"""The parallel engine: `Engine` (a long-lived service), the default engines,
`backward_parallel` and `grad_parallel`.

An `Engine` owns a persistent `WorkerPool` (num_workers - 1 threads: the calling
thread is the last worker). Each call is planned like the sequential engine's
(`plan_call`: same validation, same errors, nothing changed on failure), then the
cost model (`cost.decide`) says whether parallel execution can pay; if not, the call
runs the sequential engine's own code on the caller's thread and `stats` says why.
Otherwise a `GraphTask` runs it, with BLAS threads limited while it runs.

Thread safety: every public method may be called from any thread, concurrently,
including from inside hooks and Function.backward running on a worker (reentrant).
"""
from __future__ import annotations

import atexit
import os
import threading
import time
import weakref

from .. import intraop, locks
from ..grad_mode import run_without_grad
from . import blas, callbacks
from .cost import DecisionCache, gil_enabled, usable_cores
from .graph import renumber
from .plan import backward_seeds, collect, plan_call
from .pool import WorkerPool, on_worker_thread
from .rows import batched_grad, materialize, resolve_unused
from .sequential import backward as sequential_backward
from .sequential import run_plan
from ..locks import InterruptsDeferred
from .step import commit, release_frames
from .task import CallStats, GraphTask


class _Threshold:
    """An `Engine` threshold: an attribute whose every assignment empties the engine's
    cache of sequential verdicts (`cost.DecisionCache`), which is keyed by graph shape
    only."""

    def __set_name__(self, owner, name):
        self.slot = "_" + name

    def __get__(self, eng, owner=None):
        return self if eng is None else getattr(eng, self.slot)

    def __set__(self, eng, value):
        setattr(eng, self.slot, value)
        eng._decisions.clear()


def sequential_stats(workers: int, decision, nodes: int, elapsed: float) -> CallStats:
    """The CallStats of a call run sequentially on `decision` (its text formatted when
    read)."""
    st = CallStats()
    st.workers, st.nodes, st.elapsed = workers, nodes, elapsed
    st.mode, st.accumulation = decision.mode, decision.accumulation
    st.reason = decision
    st.total_cost, st.critical_path = decision.total_cost, decision.critical_path
    return st


# Workers of the default engine when none is asked for (None: the usable cores); set by
# `set_default_num_workers` (PyTorch's `set_num_interop_threads`).
_DEFAULT_WORKERS: list = [None]


def set_default_num_workers(n: int | None) -> None:
    """How many threads (the caller included) `Tensor.backward()` and `backward_parallel`
    use when not told (None: the usable cores, the default). Process-wide; engines
    already made keep their workers, the next call uses the default engine of `n`.
    Thread-safe (one assignment)."""
    _DEFAULT_WORKERS[0] = None if n is None else _check_workers(n)


def default_num_workers() -> int:
    """The threads a backward call uses when not told (`set_default_num_workers`)."""
    return _check_workers(None)


def _check_workers(num_workers) -> int:
    if num_workers is None:
        return _DEFAULT_WORKERS[0] or usable_cores()
    if isinstance(num_workers, bool) or not isinstance(num_workers, int):
        raise TypeError(f"num_workers must be an int >= 1 or None, got {num_workers!r}")
    if num_workers < 1:
        raise ValueError(f"num_workers must be >= 1, got {num_workers}")
    return num_workers


class Engine:
    """A parallel backward service with a persistent worker pool.

    num_workers: threads working on one call, the caller included (None: usable cores).
    min_nodes, min_work, min_width: below any of these (node count, estimated work in
        element-ops, total work / critical path) a call runs sequentially.
    inline_below: ready nodes cheaper than this (element-ops) run on the thread that
        made them ready instead of going through the queue.
    max_blas_share: when BLAS has several threads and more than this share of the
        estimated work is in multithreaded (BLAS) kernels, run sequentially: BLAS
        already uses the cores, and splitting them between workers was measured to
        gain nothing (intra-op or inter-op parallelism, never both).
    max_parked, max_parked_bytes: contributions (and bytes of them) a call may hold
        parked, waiting for the canonical order, before threads stop starting its
        queued nodes while another thread runs it: bounds the memory the parallel
        engine holds beyond the sequential one (README, "Memory"). One contribution
        is always let in, whatever its size.
    limit_blas: while a call runs in parallel, cap BLAS threads at cores // workers.
    share_cheap: hand cheap ready nodes between threads too (keyed accumulation when
        every node is cheap). Can pay only without the GIL, and on CPython 3.13t it was
        measured not to (docs/benchmarks.md, free-threaded results): off unless asked for.

    `gil_enabled` is read at run time (`sys._is_gil_enabled()`; a free-threaded build
    can still run with the GIL) and reported by `stats()`. The defaults are the same
    either way: what was measured on 3.13t (docs/benchmarks.md) did not justify different ones.
    """

    def __init__(self, num_workers: int | None = None, *, min_nodes: int = 8,
                 min_work: float = 1e6, min_width: float = 1.5,
                 inline_below: float = 16384, max_blas_share: float = 0.5,
                 max_parked: int = 4, max_parked_bytes: float = 16 * 2**20,
                 limit_blas: bool = True, share_cheap: bool = False):
        self.num_workers = _check_workers(num_workers)
        # Checked at run time: a free-threaded build may still run with the GIL on.
        self.gil_enabled = gil_enabled()
        self._decisions = DecisionCache()  # a chain is decided once per graph shape
        self.min_nodes = min_nodes
        self.min_work = min_work
        self.share_cheap = share_cheap
        self.min_width = min_width
        self.inline_below = inline_below
        self.max_blas_share = max_blas_share
        self.max_parked = max_parked
        self.max_parked_bytes = max_parked_bytes
        self.limit_blas = limit_blas
        self._pool = WorkerPool(self.num_workers - 1)
        # An engine dropped without close() still stops its threads.
        weakref.finalize(self, self._pool.shutdown, False)
        self._closed = False
        self._lock = threading.Lock()  # guards _calls and _fallbacks
        locks.track(self)  # a fork child gets a fresh one
        self._calls = 0
        self._fallbacks = 0
        self._last = None  # the last call's CallStats, or what makes it (`last_stats`)

    min_nodes = _Threshold()
    min_work = _Threshold()
    min_width = _Threshold()
    inline_below = _Threshold()
    max_blas_share = _Threshold()
    share_cheap = _Threshold()
    max_parked = _Threshold()

    @property
    def last_stats(self):
        """The last call's `CallStats` (None before the first call). A call run
        sequentially leaves only its decision, node count and time, and the CallStats
        is made when read: making it on every call was a tenth of the default engine's
        fixed cost on a chain (issue 28)."""
        last = self._last
        if type(last) is not tuple:  # None, or a CallStats
            return last
        st = self._last = sequential_stats(self.num_workers, *last)
        return st

    # ---- lifecycle --------------------------------------------------------------
    def close(self) -> None:
        """Stop the worker threads (idempotent). New calls raise RuntimeError; calls
        already running finish on their callers' threads.

        Waits until this engine's workers have exited, except when called on a worker
        thread of any engine (from a hook or a Function.backward a worker runs): then
        it only tells them to stop and returns, so engines closing each other from
        their hooks cannot wait on each other."""
        self._closed = True
        self._pool.shutdown(wait=not on_worker_thread())

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        state = "closed" if self._closed else "open"
        return f"<Engine num_workers={self.num_workers} {state}>"

    # ---- public calls -------------------------------------------------------------
    def backward(self, root, grad=None, retain_graph: bool | None = None, stats: bool = False,
                 create_graph: bool = False):
        """Like `parallel_autograd.backward`, in parallel (`create_graph` too: the
        recorded graph is the sequential engine's, numbered alike). With `stats=True`
        returns the call's `CallStats`."""
        if self._closed:
            self._check_open()
        plan = plan_call(root, backward_seeds(root, grad), retain_graph=retain_graph,
                         create_graph=create_graph)
        result, st = self._run(plan, stats)
        commit(result.staged)
        return st if stats else None

    def grad(self, outputs, inputs, grad_outputs=None, retain_graph: bool | None = None,
             allow_unused: bool | None = None, stats: bool = False,
             create_graph: bool = False, *, is_grads_batched: bool = False,
             materialize_grads: bool = False):
        """Like `parallel_autograd.grad`, in parallel (same pruning, no .grad changes;
        `create_graph`, `allow_unused` and `materialize_grads` as there). With
        `is_grads_batched=True` the rows are `rows.batched_grad`'s independent passes
        over the graph, concurrent on up to `num_workers` threads when it pays (not
        through the pool; `stats` then gives None: no single call to describe)."""
        self._check_open()
        allow_unused = resolve_unused(allow_unused, materialize_grads)
        inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        if is_grads_batched:
            grads, st = batched_grad(outputs, inputs, grad_outputs, retain_graph,
                                     allow_unused, create_graph, self.num_workers), None
        else:
            plan = plan_call(outputs, grad_outputs, inputs, retain_graph, allow_unused,
                             create_graph)
            result, st = self._run(plan, stats)
            grads = collect(plan, result.captured, inputs)
        if materialize_grads:
            grads = materialize(grads, inputs, create_graph)
        return (grads, st) if stats else grads

    def stats(self) -> dict:
        """Engine-wide counters: calls, fallbacks, per-worker items/busy/idle seconds
        (read without stopping the workers, so approximate while calls run), and the
        last call's stats."""
        with self._lock:
            calls, fallbacks = self._calls, self._fallbacks
        return {"num_workers": self.num_workers, "gil_enabled": self.gil_enabled,
                "calls": calls, "fallbacks": fallbacks,
                "workers": {w.name: w.as_dict() for w in self._pool.worker_stats},
                "last_call": None if self.last_stats is None else self.last_stats.as_dict()}

    # ---- internals --------------------------------------------------------------
    def _check_open(self):
        if self._closed:
            raise RuntimeError("this Engine is closed; create a new one")

    def _run(self, plan, stats: bool = False):
        """Run `plan` (sequentially or in parallel): returns (sink-like, CallStats or
        None). A sequential verdict runs the sequential engine's own walk with nothing
        else on the path (no CallStats unless `stats`: `last_stats` makes it later)."""
        t0 = time.perf_counter()
        d = self._decisions.decide(plan, self)
        if d.order is None:
            result = run_plan(plan)
            if plan.made:  # create_graph: number the nodes the pass made (engine/graph.py)
                renumber(plan.made)
            last = (d, len(plan.in_degree), time.perf_counter() - t0)
            with self._lock:
                self._calls += 1
                self._fallbacks += 1
            self._last = last
            return result, (sequential_stats(self.num_workers, *last) if stats else None)
        return self._run_decided(plan, d, t0)

    def _run_decided(self, plan, d, t0: float):
        """`_run` for a parallel verdict."""
        st = CallStats()
        st.workers = self.num_workers
        st.nodes = len(plan.in_degree)
        st.mode, st.accumulation = d.mode, d.accumulation
        st.reason = d.reason
        st.total_cost, st.critical_path = d.total_cost, d.critical_path
        # rules and hooks record nothing; the caller's grad mode is untouched however
        # the call ends (run_without_grad: a copy of its context, which workers copy)
        try:
            result = run_without_grad(self._run_parallel, plan, d, st)
        except BaseException as e:
            # The frames the call ran (on workers and here) are in the traceback,
            # and their locals hold the graph, the task and its error (a cycle): a
            # failed call must not keep them alive past its return (reliability
            # issue, item 12), so they are cleared; the lines stay for the report.
            release_frames(e.__traceback__.tb_next)
            raise
        if plan.made:  # create_graph: number the nodes the pass made (engine/graph.py)
            renumber(plan.made)
        st.elapsed = time.perf_counter() - t0
        with self._lock:
            self._calls += 1
        self._last = st
        return result, st

    def _run_parallel(self, plan, decision, st) -> GraphTask:
        pool = self._pool
        calls = callbacks.begin()  # before the task copies this context for its workers
        task = GraphTask(plan, st, pool, self.inline_below, self.max_parked, self.share_cheap,
                         self.max_parked_bytes, calls, decision.accumulation)
        pool.start()
        ready = task.acc.prepare(decision.order)
        try:
            self._run_limited(task, ready, st)
            callbacks.finish(calls)  # queue_callback's, on this thread, before commit
            task.succeeded()
        except BaseException as e:
            callbacks.fail(calls, e)
            task.release()  # every thread has left the call (run_to_completion waits)
            raise
        return task

    def _run_limited(self, task: GraphTask, ready: list, st: CallStats) -> None:
        """Run `task` with BLAS limited and intra-op splitting off, both undone however
        the call ends. Setting them up and undoing them is done with Ctrl+C held back
        (`InterruptsDeferred`): an interrupt inside threadpoolctl's change, between the
        acquire and the `try`, or in the `finally` before the release used to leave BLAS
        lowered (or kernels unsplit) for good. Only the call itself takes it at once."""
        limit = self.limit_blas
        with InterruptsDeferred() as held:
            if limit:  # never more than the caller had (blas.py)
                st.blas_threads = blas.acquire(task, max(1, usable_cores() //
                                                         self.num_workers))
            try:
                with intraop.engine_running():  # no kernel split while the workers run
                    held.allowing(task.run_to_completion, ready)
            finally:
                if limit:
                    blas.release(task)


# ---- default engines ------------------------------------------------------------
_default_lock = threading.Lock()  # guards _defaults
_defaults: dict = {}


def default_engine(num_workers: int | None = None) -> Engine:
    """The process-wide engine for `num_workers` (made on first use, closed at exit)."""
    n = _check_workers(num_workers)
    eng = _defaults.get(n)
    if eng is None or eng.closed:
        with _default_lock:
            eng = _defaults.get(n)
            if eng is None or eng.closed:
                eng = _defaults[n] = Engine(n)
    return eng


_TENSOR_BACKWARD = ["parallel"]  # what Tensor.backward() runs on (set_default_engine)


def set_default_engine(engine) -> None:
    """Choose what `Tensor.backward()` (`loss.backward()`) runs on, process-wide:

    - "parallel" (the default): `backward_parallel` on all usable cores. Its cost
      model runs a graph sequentially when parallelism cannot pay, and results are
      bitwise the sequential engine's either way; measured as fast or faster than
      the sequential engine on every workload of the benchmark (README, Benchmark);
    - "sequential": the reference engine (`pa.backward`);
    - an `Engine`: that engine (its workers and thresholds).

    `pa.backward` stays sequential and `backward_parallel` parallel whatever is set.
    Thread safety: one assignment; a backward already running keeps its engine.
    """
    if isinstance(engine, str):
        if engine not in ("parallel", "sequential"):
            raise ValueError(f"set_default_engine: expected 'parallel', 'sequential' or an "
                             f"Engine, got {engine!r}")
    elif not isinstance(engine, Engine):
        raise TypeError(f"set_default_engine: expected 'parallel', 'sequential' or an "
                        f"Engine, got {type(engine).__name__}")
    _TENSOR_BACKWARD[0] = engine


def get_default_engine() -> "str | Engine":
    """What `Tensor.backward()` runs on: "parallel", "sequential" or an `Engine`."""
    return _TENSOR_BACKWARD[0]


def tensor_backward(root, grad=None, retain_graph: bool | None = None,
                    create_graph: bool = False) -> None:
    """`Tensor.backward()`: on the engine `set_default_engine` chose."""
    target = _TENSOR_BACKWARD[0]
    if target == "sequential":
        sequential_backward(root, grad, retain_graph=retain_graph, create_graph=create_graph)
    else:
        eng = _tensor_default() if target == "parallel" else target
        eng.backward(root, grad, retain_graph=retain_graph, create_graph=create_graph)


_TENSOR_DEFAULT = [None, 0]  # the engine Tensor.backward() ran on, calls since looked up
_RECOUNT = 256


def _tensor_default() -> Engine:
    """`default_engine()` for `Tensor.backward()`, without counting the usable cores (a
    system call, about 1 us: 1% of a small chain's backward) on every call: the engine
    is looked up again every `_RECOUNT` calls (so a changed CPU affinity is seen within
    that many) and whenever it was closed. Races between threads only cause an extra
    lookup."""
    eng, calls = _TENSOR_DEFAULT
    if eng is None or calls >= _RECOUNT or eng._closed:
        eng = default_engine()
        _TENSOR_DEFAULT[:] = [eng, 0]
    else:
        _TENSOR_DEFAULT[1] = calls + 1
    return eng


def backward_parallel(root, grad=None, num_workers: int | None = None,
                      retain_graph: bool | None = None, stats: bool = False,
                      create_graph: bool = False):
    """`backward` on the parallel engine: same results, bit for bit (`create_graph`
    included).

    Safe to call from many threads at once and from inside hooks or
    Function.backward (reentrant).
    """
    return default_engine(num_workers).backward(root, grad, retain_graph, stats,
                                                create_graph=create_graph)


def grad_parallel(outputs, inputs, grad_outputs=None, retain_graph: bool | None = None,
                  allow_unused: bool | None = None, num_workers: int | None = None,
                  create_graph: bool = False, stats: bool = False, *,
                  is_grads_batched: bool = False, materialize_grads: bool = False):
    """`grad` on the parallel engine (`create_graph`, `is_grads_batched` and
    `materialize_grads` as in `grad`). With `stats=True` returns `(grads, CallStats)`,
    as `Engine.grad` and `backward_parallel` do.

    Safe to call from many threads at once and from inside hooks or Function.backward
    (reentrant)."""
    return default_engine(num_workers).grad(
        outputs, inputs, grad_outputs, retain_graph, allow_unused, stats,
        create_graph=create_graph, is_grads_batched=is_grads_batched,
        materialize_grads=materialize_grads)


def _after_fork_in_child() -> None:
    global _default_lock
    _default_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def _close_defaults():
    for eng in list(_defaults.values()):
        eng.close()
