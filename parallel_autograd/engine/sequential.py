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

from .. import profiler
from . import callbacks
from ..grad_mode import run_without_grad
from .accumulate import Pending, backward_order
from .graph import GraphPending, renumber
from .plan import Plan, backward_seeds, collect, plan_call
from .step import Sink, annotate, commit, run_node


def run_plan(plan: Plan) -> Sink:
    """Execute a plan on this thread; returns the Sink (staged, captured). Commits nothing.
    Like PyTorch without create_graph, rules and hooks record nothing: the walk runs with
    grad mode off, in a copy of the caller's context (`run_without_grad`)."""
    return run_without_grad(_walk, plan)


def _walk(plan: Plan) -> Sink:
    # gradients summed so far; popped (freed) when their node runs
    pending = Pending() if plan.positions is None else GraphPending(plan.positions, plan.made)
    for node, g in plan.roots:
        pending.add(node, g)
    calls = callbacks.begin()  # this pass's queue_callback & co (engine/callbacks.py)
    sink = Sink(plan, profiler.active(), calls)
    try:
        _run_nodes(plan, pending, sink)
        callbacks.finish(calls)
    except BaseException as e:
        callbacks.fail(calls, e)
        raise
    return sink


def _run_nodes(plan: Plan, pending, sink: Sink) -> None:
    node = None
    try:
        for node in backward_order(plan.nodes):
            entry = pending.pop(node, None)
            if entry is None:
                continue
            grads = run_node(node, entry[0], entry[1], sink)
            entry = None  # drop our reference now: lowers the peak
            if grads is None:  # a leaf, or not needed by grad()
                continue
            for nxt, gi in zip(node.next_nodes, grads):
                if gi is not None:
                    pending.add(nxt, gi)
            grads = gi = None
    except BaseException as e:
        if node is not None:
            annotate(e, node)
        raise


def run_call(plan: Plan) -> Sink:
    """`run_plan`, then (create_graph) the numbering of the nodes the pass made."""
    sink = run_plan(plan)
    if plan.made:
        renumber(plan.made)
    return sink


def backward(root, grad=None, retain_graph: bool | None = None,
             create_graph: bool = False) -> None:
    """Accumulate d(root)/d(leaf) into `.grad` of every leaf that requires grad.

    `root` may be a list of Tensors (several losses of one graph, one pass), with `grad`
    a list of one gradient (or None) per root, as `torch.autograd.backward`.
    `grad` is required when `root` is not a scalar. Saved values are freed unless
    `retain_graph` (default: `create_graph`). With `create_graph=True` the pass records
    the graph of the gradients: `.grad` becomes a Tensor that can be differentiated
    again (PyTorch's semantics; engine/graph.py). On any error no `.grad` is changed.
    """
    plan = plan_call(root, backward_seeds(root, grad), retain_graph=retain_graph,
                     create_graph=create_graph)
    commit(run_call(plan).staged)


def grad(outputs, inputs, grad_outputs=None, retain_graph: bool | None = None,
         allow_unused: bool = False, create_graph: bool = False) -> list:
    """Gradients of `outputs` w.r.t. `inputs`: a list of ndarrays, or of Tensors with
    their own graph when `create_graph=True` (differentiable again, to any order). No
    `.grad` changes. Only nodes on a path from the outputs to the inputs run.
    """
    inputs_list = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    plan = plan_call(outputs, grad_outputs, inputs_list, retain_graph, allow_unused,
                     create_graph)
    return collect(plan, run_call(plan).captured, inputs_list)
