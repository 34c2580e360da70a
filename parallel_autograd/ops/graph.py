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

from ..tensor import Tensor
from .forms import cast, connect, depends_on, graph_fit
from .index import index_accumulate

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





# ---- shapes and indexing: declared with their formulas (ops/shape.py, ops/index.py) ---------
scatter = index_accumulate  # MIGRATION: nn/_pool.py's name for getitem's adjoint

