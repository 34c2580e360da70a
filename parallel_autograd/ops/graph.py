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
from . import elementwise as E
from .forms import cast, connect, depends_on, graph_fit
from .forms import piecewise as _piecewise
from . import linalg as L
from . import shape as S
from .index import index_accumulate
from . import special

__all__ = ["graph_fit", "cast", "ndtr", "depends_on", "connect"]


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



# ---- elementwise ---------------------------------------------------------------------
_set(E.add, lambda g, ans, x, y: g, lambda g, ans, x, y: g)
_set(E.sub, lambda g, ans, x, y: g, lambda g, ans, x, y: -g)
_set(E.mul, lambda g, ans, x, y: g * y, lambda g, ans, x, y: g * x)
_set(E.div, lambda g, ans, x, y: g / y, lambda g, ans, x, y: -(g * ans) / y)
_set(E.sigmoid, lambda g, ans, x: g * (ans * (1 - ans)))
_set(E.silu, lambda g, ans, x: g * _silu_slope(x))
for _op in (E.relu, E._leaky_relu, E._clip, E.maximum, E.minimum):
    _set(_op, *[_piecewise(rule) for rule in _op.vjps])
_set(E._where, None, lambda g, ans, c, x, y: E.where(c, g, 0.0),
     lambda g, ans, c, x, y: E.where(c, 0.0, g))


def _silu_slope(x):
    s = E.sigmoid(x)
    return s * (1 + x * (1 - s))


def _pow_base(g, ans, x, y):
    """y x^(y-1) g; 0 where y == 0 (0 * inf at x == 0 otherwise)."""
    if isinstance(y, Tensor) or np.ndim(y):
        zero = _arr(y) == 0
        slope = E.where(zero, 0.0, y * E.pow(x, y - 1))
        return g * slope
    y = E._weak(y)
    if y == 0:
        return g * 0.0
    if y == 1:
        return g * 1.0
    if y == 2:
        return g * (x * 2)
    return g * (E.pow(x, y - 1) * y)


def _pow_exponent(g, ans, x, y):
    """g x^y log(x); 0 where x == 0 and y >= 0 (PyTorch's choice: 0**y is flat there)."""
    xs = _arr(x)
    flat = (xs == 0) & (_arr(y) >= 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = g * (ans * E.log(x))
    return E.where(flat, 0.0, value) if np.any(flat) else value


_set(E.pow, _pow_base, _pow_exponent)


def _gelu_tanh_slope(x):
    # d/dx 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
    u = (x + x * x * x * E._KAPPA) * E._SQRT_2_OVER_PI
    t = E.tanh(u)
    du = (x * x * (3 * E._KAPPA) + 1) * E._SQRT_2_OVER_PI
    return (t + 1) * 0.5 + x * (1 - t * t) * du * 0.5


_set(E._gelu_tanh_op, lambda g, ans, x, approximate: g * _gelu_tanh_slope(x))


def _phi(x):
    """The standard normal density, with ops."""
    return E.exp(x * x * -0.5) * E._INV_SQRT_2PI


ndtr = primitive("ndtr", lambda x: special.ndtr(np.asarray(x, dtype=np.float64)
                                                if np.asarray(x).dtype.kind != "f"
                                                else x),
                 lambda g, ans, x: g * np.exp(x * x * -0.5) * E._INV_SQRT_2PI)
ndtr.vjps[0].graph = lambda g, ans, x: g * _phi(x)
ndtr.__doc__ = "The standard normal CDF, differentiable (its derivative is the density)."


def _gelu_erf(g, node):
    # gelu saves (cdf, x): d/dx x ndtr(x) = ndtr(x) + x phi(x)
    from .forms import graph_input
    x = graph_input(node, 0, node.saved[1])
    return g * (ndtr(x) + x * _phi(x))


E._gelu_erf_vjp.graph_node = _gelu_erf


# ---- shapes and indexing: declared with their formulas (ops/shape.py, ops/index.py) ---------
scatter = index_accumulate  # MIGRATION: nn/_pool.py's name for getitem's adjoint


# ---- matrix products -------------------------------------------------------------------
def _swap(x):
    return S.swapaxes(_t(x), -1, -2)


def _matmul_a(g, ans, a, b):
    nb = np.ndim(_arr(b))
    if np.ndim(_arr(a)) == 1:
        if nb == 1:
            return g * b
        return S.squeeze(L.matmul(S.unsqueeze(g, -2), _swap(b)), -2)
    if nb == 1:
        return S.unsqueeze(g, -1) * b
    return L.matmul(g, _swap(b))


def _matmul_b(g, ans, a, b):
    na = np.ndim(_arr(a))
    if np.ndim(_arr(b)) == 1:
        if na == 1:
            return g * a
        return S.squeeze(L.matmul(_swap(a), S.unsqueeze(g, -1)), -1)
    if na == 1:
        return S.unsqueeze(_t(a), -1) * S.unsqueeze(g, -2)
    return L.matmul(_swap(a), g)


_set(L.matmul, _matmul_a, _matmul_b)
