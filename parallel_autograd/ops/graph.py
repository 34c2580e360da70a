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
from . import linalg as L
from . import reduce as R
from . import shape as S
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


def _zeros_of_g(g, ans, f, x):
    t = np.empty(np.shape(g), np.result_type(g))   # 1 pass (x's shape: the node sums to it)
    t.fill(0)
    return t


# the factor (a constant array f) as a function of an input x with derivative 0, as
# PyTorch's threshold_backward or sgn: the gradient of a piecewise-linear op is then part of
# the graph wherever its input is, and differentiating it again gives zeros, not "not part
# of the graph"; chained once per input that takes a gradient
_factor_of = primitive("piecewise_factor", lambda f, x: f, lambda g, ans, f, x: g, _zeros_of_g)
_set(_factor_of, lambda g, ans, f, x: g, lambda g, ans, f, x: E.where(np.True_, 0.0, g))


def depends_on(value: np.ndarray, *inputs):
    """`value` (an array) as a function with derivative 0 of each of `inputs` that is a
    Tensor requiring grad (`value` itself if none is): for the differentiable form of a
    rule whose factor is piecewise constant in an input, so that the gradient it returns
    is part of the graph wherever that input is, as in PyTorch."""
    for x in inputs:
        if isinstance(x, Tensor) and x.requires_grad:
            value = _factor_of(value, x)
    return value


def connect(t: Tensor, *inputs) -> Tensor:
    """`t` (a gradient made of g and constants, e.g. scattered by saved indices) times
    ones that depend with derivative 0 on each of `inputs` requiring grad: the same
    values, now part of the graph wherever those inputs are."""
    ones = depends_on(np.ones(t.shape, t.dtype), *inputs)
    return t * ones if isinstance(ones, Tensor) else t


def _piecewise(rule):
    """The form of a rule that is g times a factor that is constant where it is
    differentiable: the factor from the fast rule at g = 1, as a zero-derivative function
    of the inputs that take a gradient (`depends_on`), then g times it (recorded)."""
    def form(g, ans, *inputs, **kwargs):
        ones = np.ones(ans.shape, ans.dtype)
        factor = np.asarray(rule(ones, ans.data, *[_arr(x) for x in inputs], **kwargs))
        return g * depends_on(factor, *inputs)
    return form


# ---- casts and fitting a gradient to its input ------------------------------------
cast = primitive("cast", lambda x, dtype: np.asarray(x).astype(dtype),
                 lambda g, ans, x, dtype: g)  # the node casts back to x's dtype
cast.vjps[0].graph = lambda g, ans, x, dtype: g
cast.__doc__ = "`x` converted to `dtype` (the gradient is converted back)."


def graph_fit(g, shape: tuple, dtype, opname: str = "op") -> Tensor:
    """`Node.input_grads`'s un-broadcasting and cast, with ops (recorded): `g` summed
    back to `shape` over broadcast dimensions and cast to `dtype`."""
    g = _t(g)
    if g.shape != shape:
        ndiff = g.ndim - len(shape)
        if ndiff < 0:
            raise ValueError(f"{opname}: gradient of shape {g.shape} cannot be reduced to "
                             f"input shape {shape}")
        if ndiff:
            g = R.sum(g, axis=tuple(range(ndiff)))
        axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
        if axes:
            g = R.sum(g, axis=axes, keepdims=True)
        if g.shape != shape:
            raise ValueError(f"{opname}: gradient of shape {g.shape} does not match input "
                             f"shape {shape}")
    if g.dtype != dtype:
        g = cast(g, dtype=dtype)
    return g


# ---- elementwise ---------------------------------------------------------------------
_set(E.add, lambda g, ans, x, y: g, lambda g, ans, x, y: g)
_set(E.sub, lambda g, ans, x, y: g, lambda g, ans, x, y: -g)
_set(E.mul, lambda g, ans, x, y: g * y, lambda g, ans, x, y: g * x)
_set(E.div, lambda g, ans, x, y: g / y, lambda g, ans, x, y: -(g * ans) / y)
_set(E.neg, lambda g, ans, x: -g)
_set(E.exp, lambda g, ans, x: g * ans)
_set(E.log, lambda g, ans, x: g / x)
_set(E.sqrt, lambda g, ans, x: g / (ans * 2))
_set(E.sin, lambda g, ans, x: g * E.cos(x))
_set(E.cos, lambda g, ans, x: g * -E.sin(x))
_set(E.tanh, lambda g, ans, x: g * (1 - ans * ans))
_set(E.sigmoid, lambda g, ans, x: g * (ans * (1 - ans)))
_set(E.silu, lambda g, ans, x: g * _silu_slope(x))
for _op in (E.abs, E.relu, E._leaky_relu, E._clip, E.maximum, E.minimum):
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
    from ..node import graph_input
    x = graph_input(node, 0, node.saved[1])
    return g * (ndtr(x) + x * _phi(x))


E._gelu_erf_vjp.graph_node = _gelu_erf


# ---- reductions ------------------------------------------------------------------------
def _kept(g, x_shape, axis, keepdims):
    """A reduced gradient reshaped to broadcast against the input (`R._restore`)."""
    return S.reshape(_t(g), R._restore(_arr(g), x_shape, axis, keepdims).shape)


def _expand(g, x, axis, keepdims):
    return S.broadcast_to(_kept(g, np.shape(_arr(x)), axis, keepdims), np.shape(_arr(x)))


def _count(x, ans) -> float:
    return _arr(x).size / max(ans.size, 1)


_set(R._sum, lambda g, ans, x, axis, keepdims: _expand(g, x, axis, keepdims))
_set(R._mean, lambda g, ans, x, axis, keepdims: _expand(g, x, axis, keepdims) / _count(x, ans))


def _extremum(rule):
    def form(g, ans, x, axis, keepdims):
        factor = rule(np.ones(ans.shape, ans.dtype), ans.data, _arr(x), axis, keepdims)
        return _expand(g, x, axis, keepdims) * np.asarray(factor)
    return form


_set(R._max, _extremum(R._max.vjps[0]))
_set(R._min, _extremum(R._min.vjps[0]))
_set(R._var, lambda g, ans, x, axis, keepdims, ddof:
     _kept(g, x.shape, axis, keepdims) * (x - R.mean(x, axis=axis, keepdims=True))
     * _dof_scale(_count(x, ans), ddof))


def _dof_scale(n: float, ddof) -> np.float64:
    """2 / (n - ddof); n == ddof gives inf, as PyTorch's (var's rule in ops/reduce.py)."""
    with np.errstate(divide="ignore"):
        return np.float64(2.0) / (n - ddof)
_set(R._lse, lambda g, ans, x, axis, keepdims:
     _kept(g, x.shape, axis, keepdims) * E.exp(x - _kept(ans, x.shape, axis, keepdims)))
_set(R._softmax_op, lambda g, ans, x, axis:
     ans * (g - R.sum(g * ans, axis=axis, keepdims=True)))
_set(R._log_softmax_op, lambda g, ans, x, axis:
     g - E.exp(ans) * R.sum(g, axis=axis, keepdims=True))


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
