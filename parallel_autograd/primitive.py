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

from .grad_mode import is_grad_enabled
from .node import Node, accumulator_for
from .tensor import Tensor


def record(name, out, inputs, vjps=None, saved=(), kwargs=None, joint=None, cost=None,
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
    if not is_grad_enabled():
        return Tensor._wrap(out)
    next_nodes = []
    meta = []
    used = []
    tracked = False
    for i, x in enumerate(inputs):
        rule = joint if vjps is None else vjps[i]
        if rule is not None and isinstance(x, Tensor) and x.requires_grad:
            next_nodes.append(x.grad_fn if x.grad_fn is not None else accumulator_for(x))
            meta.append((x.data.shape, x.data.dtype))
            used.append(rule)
            tracked = True
        else:
            next_nodes.append(None)
            meta.append(None)
            used.append(None)
    if not tracked:
        return Tensor._wrap(out)
    if joint is not None:
        node = Node(name, tuple(next_nodes), tuple(meta), saved, joint=joint,
                    kwargs=kwargs, cost=out.size if cost is None else cost, threaded=threaded,
                    size=out.size)
    else:
        node = Node(name, tuple(next_nodes), tuple(meta), saved, vjps=tuple(used),
                    kwargs=kwargs, cost=out.size if cost is None else cost, threaded=threaded,
                    size=out.size)
    return Tensor._wrap(out, node)


def primitive(name, forward, *vjps, cost=None, threaded=False):
    """Make an op from `forward(*arrays, **kwargs)` and one rule per positional input.

    `cost(ans, *arrays)` estimates backward work (about ns on one core) for the
    cost model (`engine/cost.py`); the default is the output's size. `threaded=True` marks
    ops whose rules call multithreaded kernels (BLAS).
    """

    def op(*args, **kwargs):
        arrays = [a.data if isinstance(a, Tensor) else a for a in args]
        try:
            ans = forward(*arrays, **kwargs)
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from e
        ans = np.asarray(ans)
        c = None if cost is None else cost(ans, *arrays)
        return record(name, ans, args, vjps, (ans, *arrays), kwargs or None, cost=c,
                      threaded=threaded)

    op.__name__ = name
    op.__qualname__ = name
    return op
