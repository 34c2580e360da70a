"""The sequential reference engine: the whole backward pass on the caller's thread.

Kahn's algorithm with a ready queue ordered by highest `seq` first pops nodes in
exactly decreasing `seq` order (the highest-seq unvisited node always has all its
consumers done, since consumers are made after their inputs), so this engine walks
that order directly: one sort, no heap and no counters on the per-node path.
That order also makes contributions to each gradient arrive in the canonical order
(consumer seq descending, then input slot), which the parallel engine reproduces.

Thread safety: `backward` and `grad` may be called from several threads at once,
on separate graphs (leaves may be shared); graphs themselves are not locked.
"""
from __future__ import annotations

import numpy as np

from .. import profiler
from ..grad_mode import is_grad_enabled, set_grad_enabled
from .completion import annotate, commit, run_node
from .graph import Plan, plan_call


def _by_seq(node):
    return node.seq


def run_plan(plan: Plan):
    """Execute a plan on this thread; returns (staged, captured). Commits nothing."""
    pending = {}   # node -> gradient so far; popped (freed) when the node runs
    owned = set()  # nodes whose pending buffer the engine allocated (in-place add is safe)
    for node, g in plan.roots:
        _add(pending, owned, node, g)
    staged, captured = [], {}
    rec = profiler.active()
    order = sorted(plan.nodes, key=_by_seq, reverse=True)
    node = None
    prev_mode = is_grad_enabled()
    try:
        set_grad_enabled(False)  # like PyTorch without create_graph: rules, hooks record nothing
        for node in order:
            g = pending.pop(node, None)
            if g is None:
                continue
            grads = run_node(node, g, node in owned, plan, staged, captured, rec)
            if grads is None:  # a leaf, or not needed by grad()
                continue
            for nxt, gi in zip(node.next_nodes, grads):
                if gi is not None:
                    _add(pending, owned, nxt, gi)
            g = grads = gi = None  # drop our references now: lowers the peak
    except BaseException as e:
        if node is not None:
            annotate(e, node)
        raise
    finally:
        set_grad_enabled(prev_mode)
    return staged, captured


def _add(pending, owned, node, g):
    prev = pending.get(node)
    if prev is None:
        pending[node] = g          # the first contribution is kept by reference
    elif node in owned:
        np.add(prev, g, out=prev)  # our own buffer: add in place
    else:
        s = prev + g               # never write into an array we did not allocate
        # 0-d arrays add to a numpy scalar, which np.add(out=) rejects: keep ndarrays
        pending[node] = s if type(s) is np.ndarray else np.asarray(s)
        owned.add(node)


def backward(root, grad=None, retain_graph: bool = False) -> None:
    """Accumulate d(root)/d(leaf) into `.grad` of every leaf that requires grad.

    `grad` is required when `root` is not a scalar. Saved values are freed unless
    `retain_graph`. On any error no `.grad` is changed.
    """
    plan = plan_call(root, None if grad is None else [grad], retain_graph=retain_graph)
    staged, _ = run_plan(plan)
    commit(staged)


def grad(outputs, inputs, grad_outputs=None, retain_graph: bool = False,
         allow_unused: bool = False):
    """Gradients of `outputs` w.r.t. `inputs` as a list of ndarrays; no `.grad` changes.

    Only nodes on a path from the outputs to the inputs run.
    """
    inputs_list = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    plan = plan_call(outputs, grad_outputs, inputs_list, retain_graph, allow_unused)
    _, captured = run_plan(plan)
    return collect(plan, captured, inputs_list)


def collect(plan: Plan, captured: dict, inputs) -> list:
    """Order captured gradients like `inputs`: zeros if reached by no gradient,
    None if not in the graph at all (allow_unused)."""
    result = [None] * len(inputs)
    for node, positions in plan.targets.items():
        g = captured.get(node)
        for i in positions:
            t = inputs[i]
            result[i] = np.zeros(t.shape, t.dtype) if g is None else g
    return result
