"""What happens when a node's gradient is complete, shared by both engines.

`run_node` is the per-node step of both engines. `complete_gradient` runs the tensor hooks, records captures and leaf/retained
gradients (staged, never written yet), and gives the engine the gradient its rule
must run on (None if it must not run). `commit` writes staged gradients to `.grad` only after the whole
pass succeeded, so a failed call leaves every `.grad` exactly as it was.
"""
from __future__ import annotations

import sys
import threading

import numpy as np

_retained_lock = threading.Lock()  # guards .grad of non-leaf tensors (retain_grad)


def run_hooks(node, g):
    """Apply the tensor hooks of `node`'s output in registration order."""
    for hook in list(node.pre_hooks):
        try:
            r = hook(g)
        except BaseException as e:
            annotate(e, node, "a hook on the gradient of")
            raise
        if r is not None:
            if hasattr(r, "data") and not isinstance(r, np.ndarray):
                r = r.data
            r = np.asarray(r)
            if r.shape != g.shape:
                e = ValueError(f"hook on the gradient of {node.name} returned shape "
                               f"{r.shape}, expected {g.shape}")
                annotate(e, node, "a hook on the gradient of")  # not "the backward of"
                raise e
            if r.dtype != g.dtype:
                r = r.astype(g.dtype)
            g = r
    return g


def complete_gradient(node, g, owned, plan, staged, captured):
    """Handle a complete gradient `g` of `node`; returns the gradient the node's
    rule must run on (after the tensor hooks), or None if the rule must not run.

    `owned` says whether `g` is a buffer the engine allocated (safe to keep as .grad).
    Appends to `staged` (tensor, grad, owned) and fills `captured` (node -> grad).
    """
    if node.pre_hooks:
        g = run_hooks(node, g)
        owned = False  # a hook saw (and may keep) g: it must not become .grad as is
    if node.retained is not None and plan.accumulate:
        t = node.retained()
        if t is not None:
            staged.append((t, g, owned))
    if plan.targets and node in plan.targets:
        captured[node] = g
    if node.variable is not None:
        if plan.accumulate:
            staged.append((node.variable, g, owned))
        return None
    return g if plan.runs is None or node in plan.runs else None


def run_node(node, g, owned, plan, staged, captured, rec):
    """Complete `node`'s gradient (`complete_gradient`) and run its rule: the input
    gradients, or None if the rule must not run. Frees the saved values unless
    retain_graph and records the rule in the profiler `rec` (None: off). The per-node
    step both engines share."""
    g = complete_gradient(node, g, owned, plan, staged, captured)
    if g is None:
        return None
    t0 = rec.now() if rec is not None else 0.0
    masks = plan.input_masks
    grads = node.input_grads(g, None if masks is None else masks[node])
    if not plan.retain_graph:
        node.saved = None
        node.released = True
    if rec is not None:
        rec.record(node.name, t0)
    return grads


def commit(staged) -> None:
    """Add staged gradients into `.grad` (leaf accumulation, under each leaf's lock).

    A first gradient is adopted without a copy when the engine allocated it or
    nothing else refers to it (PyTorch's AccumulateGrad steals the same way);
    otherwise `.grad` gets a copy, so it never aliases a user's or a saved array.
    """
    _check_existing_grads(staged)  # before writing any: a failed commit changes nothing
    for t, g, owned in staged:
        lock = t._grad_lock or _retained_lock
        with lock:
            if t.grad is None:
                t.grad = g if owned or _unshared(g) else g.copy()
            else:
                t.grad += g


def _check_existing_grads(staged) -> None:
    """Reject a `.grad` the user assigned that the gradient cannot be added into."""
    for t, g, _ in staged:
        cur = t.grad
        if cur is None:
            continue
        if not isinstance(cur, np.ndarray):
            raise TypeError(f".grad of a tensor of shape {t.shape} is a {type(cur).__name__}, "
                            "not an ndarray: cannot accumulate into it")
        if cur.shape != g.shape:
            raise ValueError(f".grad of a tensor of shape {t.shape} has shape {cur.shape}: "
                             f"cannot accumulate a gradient of shape {g.shape} into it")
        if not np.can_cast(g.dtype, cur.dtype, "same_kind"):
            raise TypeError(f".grad of a tensor of shape {t.shape} has dtype {cur.dtype}: "
                            f"cannot accumulate a {g.dtype} gradient into it")
        if not cur.flags.writeable:
            raise ValueError(f".grad of a tensor of shape {t.shape} is read-only: "
                             "cannot accumulate into it in place")


def _unshared(g) -> bool:
    # References when no one else holds g: the staged tuple, commit's loop
    # variable, this parameter and getrefcount's argument (calibrated below).
    return g.base is None and g.flags.writeable and sys.getrefcount(g) <= _SOLE_REFS


def _calibrate() -> int:
    staged = [(None, np.empty(1), False)]
    for _, g, _ in staged:
        return _count(g)


def _count(g):
    return sys.getrefcount(g)


_SOLE_REFS = _calibrate()


def annotate(exc: BaseException, node, where: str = "the backward of") -> None:
    """Name the failing op on the exception (once), keeping its type."""
    if getattr(exc, "_pa_annotated", False):
        return
    msg = f"raised in {where} {node.name} (node seq {node.seq})"
    try:
        exc._pa_annotated = True
        exc.autograd_op = node.name
    except AttributeError:
        pass
    if hasattr(exc, "add_note"):
        exc.add_note(msg)
    elif exc.args and isinstance(exc.args[0], str):
        exc.args = (f"{exc.args[0]} [{msg}]",) + exc.args[1:]
