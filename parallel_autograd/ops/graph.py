"""Differentiable forms of the ops' rules, for `create_graph=True` (higher-order gradients).

The rules the engines run by default are numpy kernels (fused, written in place): fast,
but they build no graph. Each has here a one-line twin written with the package's own ops
(`rule.graph(g, ans, *inputs, **kwargs)` on Tensors), which a create_graph pass runs
instead (`Node.graph_grads`): the gradient it returns is recorded, and since these twins
use only ops that have twins themselves, it can be differentiated again, to any order.
`ans` is a Tensor whose grad_fn is the node itself, each input a Tensor routed to where
its gradient goes (a leaf is the leaf), so `exp`'s `g * ans` or `tanh`'s
`g * (1 - ans * ans)` differentiate correctly. Inputs that take no gradient are passed as
saved (arrays, constants). Rules whose value is g times a piecewise-constant factor
(relu, abs, clip, maximum, max, ...) use the fast rule with g = 1 for that factor.

This is PyTorch's design (`derivatives.yaml`: backward formulas written with
differentiable ops) and HIPS autograd's (vjps in `autograd.numpy`), kept apart from the
fast path so create_graph=False costs nothing more. Every op's second derivative is
checked by `gradgradcheck` in tests/test_higher_order.py.

Thread safety: the forms are pure functions of their arguments.
"""
from __future__ import annotations

import numpy as np

from ..primitive import primitive
from ..tensor import Tensor
from .forms import cast, connect, depends_on, graph_fit
from . import shape as S

__all__ = ["graph_fit", "cast", "depends_on", "connect"]


def _arr(x):
    return x.data if isinstance(x, Tensor) else np.asarray(x)


def _t(x) -> Tensor:
    """A Tensor: x itself, or a constant."""
    return x if isinstance(x, Tensor) else Tensor._wrap(np.asarray(x))


def _set(op, *forms) -> None:
    """Attach each differentiable form to the op's rule at the same position."""
    for rule, form in zip(op.vjps, forms):
        if rule is not None and form is not None:
            rule.graph = form





# ---- shapes and indexing -----------------------------------------------------------------
def _shape_of(x) -> tuple:
    return np.shape(_arr(x))


_set(S._reshape, lambda g, ans, x, shape: S.reshape(g, _shape_of(x)))
_set(S._transpose, lambda g, ans, x, axes:
     S._transpose(g, axes=None if axes is None else tuple(int(i) for i in np.argsort(axes))))
_set(S._broadcast, lambda g, ans, x, shape: g)  # graph_fit sums it back
_set(S._squeeze, lambda g, ans, x, axis: S.reshape(g, _shape_of(x)))
_set(S._unsqueeze, lambda g, ans, x, axis: S.reshape(g, _shape_of(x)))


class _Shape:
    """Stands for an array of a given shape and dtype where a rule reads only those."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype


scatter = primitive("scatter",
                    lambda g, index, shape: S._getitem_vjp(g, None, _Shape(shape, None), index),
                    lambda gg, ans, g, index, shape: np.asarray(gg[index]))
scatter.vjps[0].graph = lambda gg, ans, g, index, shape: S.getitem(gg, index)
scatter.__doc__ = "`zeros(shape)` with `g` added at `index` (getitem's adjoint)."
_set(S._getitem, lambda g, ans, x, index: scatter(g, index=index, shape=_shape_of(x)))
_set(S._pad, lambda g, ans, x, pad_width, mode, value:
     S.getitem(g, tuple(slice(lo, lo + n) for (lo, _), n in zip(pad_width, _shape_of(x)))))

