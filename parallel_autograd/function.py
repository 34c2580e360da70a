"""User-defined ops: subclass `Function` with `forward(ctx, ...)` and `backward(ctx, grad)`.

    class Cube(pa.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3
        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * x ** 2 * g

    y = Cube.apply(t)

`forward` receives ndarrays for tensor arguments (other arguments as given) and
returns an ndarray; `backward` receives the output gradient as an ndarray and
returns one gradient (or None) per forward argument. `backward` may run on an
engine worker thread; it may itself call `backward`/`grad` (reentrant).

Higher-order gradients (`create_graph=True`), as in PyTorch: the same `backward` runs on
Tensors with grad mode on. The gradient is a Tensor, and `ctx.saved_tensors` holds
Tensors: a saved input (the very array `forward` received) or the output (the very array
it returned) is connected to the graph, anything else is a constant. A `backward` written
with the package's ops and operators (`3 * x ** 2 * g`, `pa.cos(x) * g`) is therefore
differentiable to any order; one that calls numpy functions on them fails with an error
naming the Function. Decorate such a `backward` with `once_differentiable`: it then runs
on arrays in a create_graph pass too, and differentiating its result raises.
"""
from __future__ import annotations

import numpy as np

import copy
import functools
import weakref
from typing import Callable

from .grad_mode import is_grad_enabled, no_grad
from .ops.forms import graph_input
from .primitive import record
from .tensor import Tensor

__all__ = ["Function", "FunctionCtx", "once_differentiable"]


class FunctionCtx:
    """Per-call scratch space shared by `forward` and `backward`."""

    def __init__(self, needs_input_grad):
        self.needs_input_grad = needs_input_grad
        self.saved_tensors = ()

    def save_for_backward(self, *arrays):
        self.saved_tensors = tuple(a._data if isinstance(a, Tensor) else a for a in arrays)


def once_differentiable(backward: Callable) -> Callable:
    """Decorator for a `backward` that is not differentiable again (PyTorch's): it runs
    with grad mode off; in a create_graph pass where a gradient it receives requires grad,
    its results are recorded as nodes that raise PyTorch's RuntimeError ("trying to
    differentiate twice a function that was marked with @once_differentiable") if
    differentiated. Put it under `@staticmethod`. For `pa.Function` (arrays), it also
    makes backward run on arrays in a create_graph pass and its gradients raise if
    differentiated again (see the module docstring)."""
    @functools.wraps(backward)
    def wrapper(ctx, *args):
        with no_grad():
            outputs = backward(ctx, *args)
        if not is_grad_enabled() or not any(isinstance(a, Tensor) and a.requires_grad
                                            for a in args):
            return outputs
        tup = outputs if isinstance(outputs, tuple) else (outputs,)
        wrapped = tuple(_delayed_error(o, args) for o in tup)
        return wrapped if isinstance(outputs, tuple) else wrapped[0]

    wrapper._once_differentiable = True
    return wrapper


def _delayed_error(o, args):
    """`o` recorded as a node whose backward raises, on a leaf of its own (PyTorch's
    DelayedError on a detached alias: only a pass that must run that node raises; a
    `grad` asked of other inputs does not reach it)."""
    if not isinstance(o, Tensor):
        return o

    def refuse(g, *_):
        raise RuntimeError("trying to differentiate twice a function that was marked with "
                           "@once_differentiable")

    refuse.graph = lambda g, node: refuse(g)
    alias = Tensor._wrap(o._data, None, o._vc)
    alias._requires_grad = True
    return record("Error", o._data, [alias], joint=refuse)


class Function:
    """A user-defined op with its own backward, like `torch.autograd.Function`:
    subclass it with static `forward(ctx, *args)` (on arrays; `ctx.save_for_backward`
    keeps what backward needs) and `backward(ctx, *grads)` (one gradient per input,
    None where there is none), then call `MyOp.apply(*args)`. `backward` may run on
    a worker thread of the parallel engine."""

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError

    @classmethod
    def apply(cls, *args, **kwargs):
        needs = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        ctx = FunctionCtx(needs)
        raw = [a._data if isinstance(a, Tensor) else a for a in args]
        with no_grad():
            out = cls.forward(ctx, *raw, **kwargs)
        if isinstance(out, Tensor):
            out = out._data
        if isinstance(out, (tuple, list)):  # np.asarray would silently stack them
            raise TypeError(f"{cls.__name__}.forward returned a {type(out).__name__}: a "
                            "Function has exactly one output (return one array)")
        out = np.asarray(out)
        # what the differentiable form connects to the graph: the inputs and the output,
        # by identity (ids are safe: every array saved is alive as long as ctx is)
        ctx._graph_ids = (tuple(id(a) for a in raw), id(out))
        # ctx travels as the node's saved value (not in the closure), so the engine
        # frees ctx.saved_tensors with the node's other saved values after backward.
        return record(cls.__name__, out, args, saved=(ctx,), joint=_joint(cls))


# Function subclass -> its joint rule, made once per class (weak: classes made in a loop
# or a test go away; a race makes one twice, harmlessly)
_JOINTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _joint(cls):
    joint = _JOINTS.get(cls)
    if joint is None or joint.backward is not cls.backward:
        joint = _JOINTS[cls] = _make_joint(cls)
    return joint


def _make_joint(cls):
    backward, name = cls.backward, cls.__name__

    def joint(g, ctx):
        grads = backward(ctx, g)
        grads = grads if isinstance(grads, tuple) else (grads,)
        return tuple(x._data if isinstance(x, Tensor) else x for x in grads)

    def graph(g, node):
        if getattr(backward, "_once_differentiable", False):
            return _once(joint, name, g, node)
        return _on_tensors(backward, name, g, node)

    joint.backward = backward
    joint.graph = graph
    return joint


def _on_tensors(backward, name: str, g: Tensor, node) -> tuple:
    """`backward` on Tensors (create_graph): ctx.saved_tensors with the saved inputs and
    output as Tensors on the graph (see the module docstring)."""
    ctx = node.saved[0]
    input_ids, out_id = ctx._graph_ids
    saved = []
    for a in ctx.saved_tensors:
        if id(a) == out_id:
            a = Tensor._wrap(a, node)
        elif id(a) in input_ids:
            a = graph_input(node, input_ids.index(id(a)), a)
        saved.append(a)
    view = copy.copy(ctx)
    view.saved_tensors = tuple(saved)
    try:
        grads = backward(view, g)
    except (TypeError, AttributeError) as e:
        raise RuntimeError(
            f"create_graph: {name}.backward failed on Tensors ({type(e).__name__}: {e}). "
            f"In a create_graph pass its gradient and saved tensors are Tensors, so it must "
            f"use parallel_autograd ops (pa.cos, not np.cos); or decorate it with "
            f"@pa.once_differentiable (its gradient then cannot be differentiated again)"
        ) from e
    grads = grads if isinstance(grads, tuple) else (grads,)
    for i, gi in enumerate(grads):
        if gi is not None and not isinstance(gi, Tensor) and i < len(node.next_nodes) \
                and node.next_nodes[i] is not None:
            raise RuntimeError(
                f"create_graph: {name}.backward returned a {type(gi).__name__} for input "
                f"{i}, not a Tensor, so that gradient cannot be differentiated again: "
                f"compute it with parallel_autograd ops on the Tensors it is given, or "
                f"decorate backward with @pa.once_differentiable")
    return grads


def _once(joint, name: str, g: Tensor, node) -> tuple:
    """A once_differentiable backward in a create_graph pass: run on arrays; each gradient
    recorded as a node (on g and the inputs) whose backward raises."""
    grads = joint(g._data, node.saved[0])

    def refuse(gg, *_):
        raise RuntimeError(f"{name}.backward is marked once_differentiable: its gradient "
                           f"cannot be differentiated again")

    refuse.graph = lambda gg, n: refuse(gg)
    inputs = [g] + [graph_input(node, i, np.broadcast_to(np.zeros((), meta[1]), meta[0]))
                    for i, meta in enumerate(node.input_meta) if meta is not None]
    return tuple(None if gi is None else
                 record(f"{name}Backward", np.asarray(gi), inputs, joint=refuse)
                 for gi in grads)
