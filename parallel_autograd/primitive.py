"""Defining ops: `primitive` wraps a numpy forward with one gradient rule per input.

This is the extension module for users adding ops::

    cube = primitive("cube", lambda x: x ** 3, lambda g, ans, x: g * 3 * x ** 2)

Each rule gets `(g, ans, *input_arrays, **kwargs)` and returns the gradient for
its input at the *output's* shape or the input's own shape: un-broadcasting and
dtype casts are done centrally by the node. Rules run on ndarrays and build no graph.
`record` is the lower-level call for ops that save something other than
(ans, *inputs), such as an im2col buffer.
"""
from __future__ import annotations

import numpy as np

from . import anomaly
from .grad_mode import grad_mode
from .node import Node, accumulator_for
from .tensor import Tensor


def record(name: str, out, inputs, vjps=None, saved=(), kwargs=None, joint=None, cost=None,
           threaded=False):
    """Wrap `out` in a Tensor; if any input requires grad, attach a Node.

    `inputs` are the op's differentiable arguments (Tensors or raw values); `vjps`
    gives one rule per input (None: no gradient flows there), or `joint` one rule
    for all. Only inputs that require grad get a rule: a frozen weight costs nothing.
    `cost` estimates the backward work (about ns on one core; default: output size) and
    `threaded` says the rules run multithreaded kernels (BLAS): the cost model (`engine/cost.py`).
    """
    if type(out) is not np.ndarray:
        out = np.asarray(out)
    mode = grad_mode()
    if not mode:
        if out.base is None:  # fresh memory, or an input's very array: identity decides
            for x in inputs:
                if isinstance(x, Tensor) and x.data is out:
                    return Tensor._wrap(out, None, x._vc)
            return Tensor._wrap(out, None, None)
        return Tensor._wrap(out, None, _shared_counter(out, inputs))
    # The per-op path of every forward: one pass over the inputs, lists filled in place.
    n = len(inputs)
    nexts = [None] * n
    meta = [None] * n
    rules = None if vjps is None else [None] * n
    vcs = []  # version counters of every tensor input, then the output's
    tracked = False
    root = out.base
    vc = None  # the output's: an input's when it aliases that input (see _shared_counter)
    for i in range(n):
        x = inputs[i]
        if not isinstance(x, Tensor):
            continue
        vcs.append(x._vc)
        if vc is None:
            d = x.data
            if d is out or (root is not None and (d is root or d.base is root)):
                vc = x._vc
        if x._requires_grad:
            rule = joint if rules is None else vjps[i]
            if rule is None:
                continue
            fn = x.grad_fn
            nexts[i] = fn if fn is not None else accumulator_for(x)
            data = x.data
            meta[i] = (data.shape, data.dtype)
            if rules is not None:
                rules[i] = rule
            tracked = True
    if vc is None:
        vc = [0] if root is None or _owns(root) else _shared_counter(out, inputs)
    if not tracked:
        return Tensor._wrap(out, None, vc)
    vcs.append(vc)
    size = out.size
    node = Node(name, tuple(nexts), tuple(meta), saved,
                None if rules is None else tuple(rules), joint if rules is None else None,
                kwargs, size if cost is None else cost, threaded, size, tuple(vcs))
    if mode is not True:  # a create_graph pass is recording (grad_mode.Recording)
        mode.made(node)
    if anomaly_mode()[0]:  # detect_anomaly: note where the op is created
        anomaly.note(node)
    return Tensor._wrap(out, node, vc)


anomaly_mode = anomaly.mode


def _shared_counter(out: np.ndarray, inputs) -> list:
    """The version counter of the input whose memory `out` is or views (squeeze or
    `to` that change nothing, reshape, indexing, transpose...: writing into one writes
    into the other, so a write through either must invalidate what a graph saved of the
    other), else a fresh one.

    numpy collapses a view's `base` to the array that owns the memory, so identity tests
    decide most cases in O(1); a view made through another object (as_strided's
    DummyArray, a buffer) falls back to numpy's exact bounds test. Not recognised (no op
    does it, and the test would cost every op): a result that is the owner of an
    input's memory (a user primitive returning `a.base`)."""
    root = out.base
    for x in inputs:
        if isinstance(x, Tensor):
            d = x.data
            if d is out or (root is not None and (d is root or d.base is root)):
                return x._vc
    if root is None or _owns(root):
        return [0]
    for x in inputs:
        if isinstance(x, Tensor) and np.may_share_memory(out, x.data):
            return x._vc
    return [0]


def _owns(root) -> bool:
    """`root` (an array's base) owns its memory: an array viewing it views nothing
    else, and the identity tests of `_shared_counter` saw every input that shares it."""
    return type(root) is np.ndarray and root.flags.owndata


def primitive(name: str, forward, *vjps, cost=None, threaded: bool = False):
    """Make an op from `forward(*arrays, **kwargs)` and one rule per positional input.

    `cost(ans, *arrays)` estimates backward work (about ns on one core) for the
    cost model (`engine/cost.py`); the default is the output's size. `threaded=True` marks
    ops whose rules call multithreaded kernels (BLAS).
    """

    def op(*args, **kwargs) -> Tensor:
        arrays = [a.data if isinstance(a, Tensor) else a for a in args]
        try:
            ans = forward(*arrays, **kwargs)
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from e
        if type(ans) is not np.ndarray:
            ans = np.asarray(ans)
        return record(name, ans, args, vjps, (ans, *arrays), kwargs or None, None,
                      None if cost is None else cost(ans, *arrays), threaded)

    op.__name__ = name
    op.__qualname__ = name
    op.vjps = vjps  # the rules, for their differentiable forms (`rule.graph`, ops/graph.py)
    return op
