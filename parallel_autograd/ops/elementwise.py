"""Elementwise ops. Rules return gradients at the output's shape; the node sums
them back over broadcast dimensions and casts to each input's dtype.

Numpy scalars (`np.float64(2.0)`, `np.sqrt(d)`) are treated like Python scalars,
as PyTorch does: `float32_tensor * np.float64(2)` stays float32.
"""
from __future__ import annotations

import math

import numpy as np

from ..grad_mode import is_grad_enabled as _grad_enabled
from ..memory import empty as _empty
from ..memory import pooled as P
from ..primitive import primitive, record
from ..tensor import Tensor
from . import special
from ._common import BLOCK, as_float, buf, fused, weak
from .pointwise import abs, cos, exp, log, neg, sin, sqrt, tanh  # noqa: F401  MIGRATION
from .pointwise import (add, clamp, div, maximum, minimum, mul, pow, sub,  # noqa: F401  MIGRATION
                        where)

clip = clamp  # MIGRATION: the old name, until the other families import ops/pointwise


# MIGRATION: the shared helpers' old names here (ops/_common.py has them), for the families
# that still import them from this module
_weak, _buf, _fused, _float, _BLOCK = weak, buf, fused, as_float, BLOCK


def _sigmoid(x):
    # 1 / (1 + exp(-x)), PyTorch's formula; exp overflows to inf for x < -709, giving
    # the exact limit 0. 4 passes, one buffer.
    t = _buf(P.negative(_float(x)))
    with np.errstate(over="ignore"):
        np.exp(t, out=t)
    t += 1
    return np.divide(1, t, out=t)


def _sigmoid_vjp(g, ans, x):
    t = _buf(P.subtract(1, ans))   # g (1 - ans) ans, PyTorch's order: 3 passes
    t *= g
    t *= ans
    return t


sigmoid = primitive("sigmoid", _sigmoid, _sigmoid_vjp)

# ---- activations ---------------------------------------------------------------------
def _relu_vjp(g, ans, x):
    t = np.greater(x, 0, out=_empty(np.shape(x), np.result_type(g, x)))  # 2 passes
    t *= g
    return t


relu = primitive("relu", lambda x: P.maximum(x, 0), _relu_vjp)


def _leaky_relu_fwd(x, negative_slope):
    # where(x > 0, x, slope x) without a mask: slope x is the larger of the two exactly
    # where x <= 0 when slope <= 1 (the smaller when slope > 1). 2 passes.
    s = _weak(negative_slope)
    t = _buf(P.multiply(x, s))
    return (np.maximum if s <= 1 else np.minimum)(t, x, out=t)


def _leaky_kernel(o, g, x, positive, slope):
    np.greater(x, 0, out=positive)
    np.multiply(g, slope, out=o)
    np.putmask(o, positive, g)


def _leaky_relu_vjp(g, ans, x, negative_slope):
    s = _weak(negative_slope)
    if 0 <= s <= 1:                 # factor max(x > 0, slope): 1 or slope. 3 passes
        t = np.greater(x, 0, out=_empty(np.shape(x), np.result_type(g, x)))
        np.maximum(t, s, out=t)
        t *= g
        return t
    return _fused(lambda o, g, x, m: _leaky_kernel(o, g, x, m, s), g, (g, x), (np.bool_,),
                  np.result_type(g, x))


_leaky_relu = primitive("leaky_relu", _leaky_relu_fwd, _leaky_relu_vjp)


def leaky_relu(x, negative_slope: float = 0.01):
    """x where x > 0, else negative_slope * x."""
    return _leaky_relu(x, negative_slope=negative_slope)


_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
_KAPPA = 0.044715


def _gelu_tanh(x):
    # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), PyTorch's order: 9 passes, one buffer
    x = _float(x)
    t = _buf(P.multiply(x, x))
    t *= x
    t *= _KAPPA
    t += x
    t *= _SQRT_2_OVER_PI
    np.tanh(t, out=t)
    t += 1
    t *= x
    t *= 0.5
    return t


def _gelu_tanh_kernel(o, g, x, th, d):
    np.multiply(x, x, out=d)
    np.multiply(d, x, out=th)
    th *= _KAPPA
    th += x
    th *= _SQRT_2_OVER_PI
    np.tanh(th, out=th)             # t = tanh(inner)
    d *= 3 * _KAPPA
    d += 1
    d *= _SQRT_2_OVER_PI            # d inner / dx
    np.multiply(th, th, out=o)
    np.subtract(1, o, out=o)
    o *= d
    o *= x
    o *= 0.5                        # 0.5 x (1 - t^2) inner'
    th += 1
    th *= 0.5                       # 0.5 (1 + t)
    o += th
    o *= g


def _gelu_tanh_vjp(g, ans, x, approximate):
    # 19 passes per chunk, two chunk-sized scratch arrays
    return _fused(_gelu_tanh_kernel, x, (g, x), (x.dtype, x.dtype), np.result_type(g, x))


def _gelu_erf_vjp(g, cdf, x):
    # g (cdf + x exp(-x^2/2) / sqrt(2 pi)): 7 passes, one buffer
    t = _buf(P.multiply(x, x))
    t *= -0.5
    np.exp(t, out=t)
    t *= x
    t *= _INV_SQRT_2PI
    t += cdf
    t *= g
    return t


_gelu_tanh_op = primitive("gelu", lambda x, approximate: _gelu_tanh(x), _gelu_tanh_vjp)


def gelu(x, approximate: str = "none"):
    """GELU; `approximate="none"` is the exact erf form (PyTorch's default).

    The exact form's CDF is `special.ndtr` (fdlibm's erfc, vectorized): 0.5 erfc(-x/sqrt 2),
    which keeps its accuracy in the lower tail. It is saved for backward; without a graph
    the output is written over it (one array allocated)."""
    if approximate == "tanh":
        return _gelu_tanh_op(x, approximate="tanh")
    if approximate != "none":
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    xd = _float(x.data if isinstance(x, Tensor) else x)
    cdf = special.ndtr(xd)
    if isinstance(x, Tensor) and x.requires_grad and _grad_enabled():
        return record("gelu", P.multiply(xd, cdf), (x,), (_gelu_erf_vjp,), saved=(cdf, xd))
    return Tensor._wrap(_buf(np.multiply(xd, cdf, out=cdf)))


def _silu(x):
    # x / (1 + exp(-x)), PyTorch's formula: 4 passes, one buffer
    x = _float(x)
    t = _buf(P.negative(x))
    with np.errstate(over="ignore"):
        np.exp(t, out=t)
    t += 1
    return np.divide(x, t, out=t)


def _silu_kernel(o, g, x, s):
    np.negative(x, out=s)
    np.exp(s, out=s)
    s += 1
    np.divide(1, s, out=s)          # sigmoid(x)
    np.subtract(1, s, out=o)
    o *= x
    o += 1
    o *= s
    o *= g                          # g s (1 + x (1 - s))


def _silu_vjp(g, ans, x):
    # 9 passes per chunk, one chunk-sized scratch array
    with np.errstate(over="ignore"):
        return _fused(_silu_kernel, x, (g, x), (x.dtype,), np.result_type(g, x))


silu = primitive("silu", _silu, _silu_vjp)

_DOCS = {
    sigmoid: "`1 / (1 + exp(-x))`.",
    silu: "`x * sigmoid(x)` (SiLU, swish).",
    relu: "`max(x, 0)`; the gradient at 0 is 0, as in PyTorch.",
}
for _op, _doc in _DOCS.items():
    _op.__doc__ = _doc
