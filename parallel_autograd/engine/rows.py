"""Independent backward passes over one retained graph ("rows"), run concurrently when it
pays: the Jacobian's rows (`autograd/functional.py`) and `grad(..., is_grads_batched=True)`
(per-sample gradients, several cotangents of one graph).

Each row is the sequential engine's pass, so every row is bitwise what a call of its own
gives, whichever thread runs it. `run_rows` times the first row on the caller's thread and
runs the others on `usable_cores()` threads only when they are estimated to take long
enough to pay for threads (`concurrent_rows`); BLAS is held at one thread meanwhile.

`grad` is the public `pa.grad` / `pa.autograd.grad`: the sequential engine's `grad` with
PyTorch's `is_grads_batched` and `materialize_grads`.

Thread safety: no module state but the two thresholds; rows only read the shared graph
(saved values are freed, if asked, after every row has ended). A graph with tensor hooks
runs its rows one by one: a hook would otherwise run concurrently with itself. A custom
Function's backward may run on several threads at once, as on the parallel engine.
"""
from __future__ import annotations

import contextvars
import threading
import time

import numpy as np

from ..grad_mode import enable_grad
from ..locks import InterruptsDeferred
from ..tensor import Tensor
from . import blas
from .cost import usable_cores
from .graph import as_graph_seed
from .plan import Plan, collect, plan_call, root_node, seed_gradient
from .sequential import grad as _grad
from .sequential import run_call

#: Rows run concurrently only when the remaining ones are estimated (from the first
#: row's time) to take at least this long: starting threads costs ~0.1 ms.
CONCURRENT_MIN_SECONDS = 5e-3
#: ... and one row takes at least this long. Under the GIL small numpy kernels do not
#: overlap: rows of 0.4 ms (a 64-input tanh MLP, hidden 128) were measured no faster
#: concurrently on 2 shared cores (1.19x [0.90, 1.43] of the one-by-one time).
ROW_MIN_SECONDS = 1e-3


def concurrent_rows(rest: int, first_seconds: float, create_graph: bool,
                    workers: int | None = None) -> int:
    """How many threads the remaining `rest` rows should use (1: this one), at most
    `workers` (None: the usable cores)."""
    if (create_graph or rest < 2 or first_seconds < ROW_MIN_SECONDS
            or first_seconds * rest < CONCURRENT_MIN_SECONDS):
        return 1
    return max(1, min(usable_cores() if workers is None else workers, rest))


def run_rows(row, n: int, serial: bool = False, workers: int | None = None) -> list:
    """[row(k) for k in range(n)]: the first on this thread, timed; the rest concurrently
    when `concurrent_rows` says it pays, never when `serial` (create_graph: the recorded
    nodes are numbered in row order, so differentiating the results again is
    deterministic)."""
    if n == 0:
        return []
    t0 = time.perf_counter()
    out = [row(0)]
    threads = concurrent_rows(n - 1, time.perf_counter() - t0, serial, workers)
    if threads < 2:
        out.extend(row(k) for k in range(1, n))
        return out
    return out + run_concurrently(row, range(1, n), threads)


class _BlasToken:
    """The weak-referenceable token `blas.acquire` keys a limit on."""


def run_concurrently(fn, items, workers: int) -> list:
    """[fn(i) for i in items] on `workers` threads (this one included), each in a copy
    of the caller's context; BLAS is held at one thread meanwhile (never raised, and
    restored after: `engine.blas`; acquired and released with Ctrl+C held back, as the
    engine does). The first error is raised after all threads end."""
    items = list(items)
    results = [None] * len(items)
    chunks = [range(w, len(items), workers) for w in range(workers)]
    errors = []

    def guarded(chunk):
        try:
            for i in chunk:
                if errors:  # another thread failed: the call fails, stop early
                    return
                results[i] = fn(items[i])
        except BaseException as e:  # reported on the caller's thread
            errors.append(e)

    def run_all():
        threads = [threading.Thread(target=contextvars.copy_context().run,
                                    args=(guarded, c), daemon=True) for c in chunks[1:]]
        for t in threads:
            t.start()
        try:
            guarded(chunks[0])
        finally:
            for t in threads:
                t.join()

    token = _BlasToken()
    with InterruptsDeferred() as held:
        blas.acquire(token, 1)
        try:
            held.allowing(run_all)
        finally:
            blas.release(token)
    if errors:
        raise errors[0]
    return results


# ---- grad(..., is_grads_batched=True) ------------------------------------------------------
def grad(outputs, inputs, grad_outputs=None, retain_graph: bool | None = None,
         allow_unused: bool | None = None, create_graph: bool = False, *,
         is_grads_batched: bool = False, materialize_grads: bool = False) -> tuple:
    """Gradients of `outputs` w.r.t. `inputs` (PyTorch's `torch.autograd.grad`): a tuple of
    Tensors, with their own graph when `create_graph=True` (differentiable again, to any
    order). No `.grad` changes. Only nodes on a path from the outputs to the inputs run.

    `allow_unused` (default: `materialize_grads`): None for an input the outputs do not
    depend on, instead of an error; `materialize_grads=True`: zeros (of the input's shape,
    as PyTorch, even when batched) instead of None.
    `is_grads_batched=True`: the first dimension of each grad_output is a batch of
    cotangents and every result gets it too: one vector-Jacobian product per row, each a
    pass over the same graph (`batched_grad`), bitwise what a call per row gives.
    Thread safety: as the sequential engine's (engine/sequential.py)."""
    allow_unused = resolve_unused(allow_unused, materialize_grads)
    if is_grads_batched:
        res = batched_grad(outputs, inputs, grad_outputs, retain_graph, allow_unused,
                           create_graph)
    else:
        res = _grad(outputs, inputs, grad_outputs, retain_graph, allow_unused, create_graph)
    return materialize(res, inputs, create_graph) if materialize_grads else res


def resolve_unused(allow_unused: bool | None, materialize_grads: bool) -> bool:
    """`allow_unused` as PyTorch resolves it: None means `materialize_grads`."""
    if materialize_grads and allow_unused is False:
        raise ValueError("Expected allow_unused to be True or not passed when "
                         "materialize_grads=True, but got: allow_unused=False.")
    return bool(materialize_grads if allow_unused is None else allow_unused)


def materialize(res: tuple, inputs, create_graph: bool) -> tuple:
    """`materialize_grads`: zeros shaped like the input where the result is None."""
    ins = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    return tuple(Tensor(np.zeros(t.shape, t.dtype), requires_grad=create_graph)
                 if r is None else r for r, t in zip(res, ins))


def batched_grad(outputs, inputs, grad_outputs, retain_graph: bool | None,
                 allow_unused: bool, create_graph: bool, workers: int | None = None) -> tuple:
    """`grad` with `is_grads_batched=True`: row k of every grad_output is one call's
    cotangents. The call is planned once (validated before any rule runs); the rows are
    the sequential engine's passes over the retained graph, concurrent on up to `workers`
    threads when `run_rows` says it pays, else (and with `create_graph`, or with tensor
    hooks in the graph) one by one. The saved values are freed after the last row unless
    `retain_graph` (default `create_graph`); after a failed row the graph is kept and
    nothing was written anywhere (grad() writes no `.grad`)."""
    outs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    ins = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    gos, n = batched_cotangents(outs, grad_outputs)
    retain = create_graph if retain_graph is None else bool(retain_graph)
    plan = plan_call(outs, [_row(g, 0, create_graph) for g in gos], ins, True, allow_unused,
                     create_graph)
    kept = {node for node, _ in plan.roots}
    nodes = [root_node(t) for t in outs]

    def row(k):
        roots = []
        for i, (t, node, g) in enumerate(zip(outs, nodes, gos)):
            if node in kept:
                gk = _row(g, k, create_graph)
                seed = seed_gradient(t, gk, i)
                roots.append((node, as_graph_seed(gk, seed) if create_graph else seed))
        p = plan.with_roots(roots)
        return collect(p, run_call(p).captured, ins)

    one_by_one = create_graph or any(node.pre_hooks for node in plan.nodes)
    results = run_rows(row, n, one_by_one, workers)
    if not retain:
        release(plan)
    return tuple(_stack([r[j] for r in results], ins[j], n, create_graph)
                 for j in range(len(ins)))


def batched_cotangents(outs: list, grad_outputs) -> tuple[list, int]:
    """The grad_outputs of an `is_grads_batched` call, one per output, checked as PyTorch
    checks them (errors of its types), and the batch size."""
    gos = list(grad_outputs) if isinstance(grad_outputs, (list, tuple)) else \
        [grad_outputs] * (1 if grad_outputs is not None else len(outs))
    for g in gos:  # PyTorch checks the items' types first
        if g is not None and not isinstance(g, (Tensor, np.ndarray)):
            raise TypeError(f"gradients can be either Tensors or None, but got "
                            f"{type(g).__name__}")
    if len(gos) != len(outs):
        raise ValueError(f"got {len(gos)} grad_outputs for {len(outs)} outputs")
    sizes = []
    for i, (t, g) in enumerate(zip(outs, gos)):
        if g is None:
            if isinstance(t, Tensor) and t.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            raise ValueError(f"is_grads_batched=True: grad_outputs[{i}] is None; give a "
                             "cotangent per row, the batch dimension first")
        if g.ndim == 0 or g.shape[0] == 0:
            raise IndexError(f"is_grads_batched=True: grad_outputs[{i}] has shape "
                             f"{tuple(g.shape)}: no batch dimension of at least one row")
        if isinstance(t, Tensor) and tuple(g.shape[1:]) != tuple(t.shape):
            raise RuntimeError(
                "If `is_grads_batched=True`, we interpret the first dimension of each "
                "grad_output as the batch dimension. The sizes of the remaining dimensions "
                "are expected to match the shape of corresponding output, but a mismatch "
                f"was detected: grad_output[{i}] has a shape of {tuple(g.shape[1:])} and "
                f"output[{i}] has a shape of {tuple(t.shape)}.")
        sizes.append(g.shape[0])
    if len(set(sizes)) > 1:
        raise ValueError("vmap: Expected all tensors to have the same size in the mapped "
                         f"dimension, got sizes {sizes} for the mapped dimension")
    return gos, sizes[0]


def _row(g, k: int, create_graph: bool):
    """Row k of a batched grad_output: recorded (differentiable with respect to `g`) when
    the call records the graph of its gradients, else a view of the array."""
    if create_graph and isinstance(g, Tensor):
        return g[k]
    return (g._data if isinstance(g, Tensor) else g)[k]


def _stack(rows: list, like: Tensor, n: int, create_graph: bool):
    """The rows' gradients of one input as one batched result (None if unused)."""
    if rows[0] is None:
        return None
    if not create_graph:
        return Tensor._wrap(np.stack([r._data for r in rows]))
    # Differentiable without importing an op family (the engine's layer): index_put
    # into zeros records one node a row; their gradients are the rows' slices.
    with enable_grad():  # the results have their graph whatever the caller's mode
        out = Tensor._wrap(np.zeros((n,) + tuple(like.shape), rows[0].dtype))
        for k, r in enumerate(rows):
            out[k] = r
    return out


def release(plan: Plan) -> None:
    """Free the saved values of every node whose rule the call ran (what a pass without
    `retain_graph` frees as it goes)."""
    for node in plan.nodes if plan.runs is None else plan.runs:
        node.saved = None
        node.released = True
