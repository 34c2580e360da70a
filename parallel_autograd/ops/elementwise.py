"""Elementwise ops. Rules return gradients at the output's shape; the node sums
them back over broadcast dimensions and casts to each input's dtype.

Numpy scalars (`np.float64(2.0)`, `np.sqrt(d)`) are treated like Python scalars,
as PyTorch does: `float32_tensor * np.float64(2)` stays float32.
"""
from __future__ import annotations

import math

import numpy as np

from ..primitive import primitive, record
from ..tensor import Tensor


def _weak(a):
    return a.item() if isinstance(a, np.generic) else a


def _binary(ufunc):
    return lambda x, y: ufunc(_weak(x), _weak(y))


# ---- arithmetic ------------------------------------------------------------------
add = primitive("add", _binary(np.add),
                lambda g, ans, x, y: g,
                lambda g, ans, x, y: g)
sub = primitive("sub", _binary(np.subtract),
                lambda g, ans, x, y: g,
                lambda g, ans, x, y: -g)
mul = primitive("mul", _binary(np.multiply),
                lambda g, ans, x, y: g * y,
                lambda g, ans, x, y: g * x)
div = primitive("div", _binary(np.true_divide),
                lambda g, ans, x, y: g / y,
                lambda g, ans, x, y: -g * ans / y)
neg = primitive("neg", np.negative, lambda g, ans, x: -g)


def _pow_base(g, ans, x, y):
    # d/dx x**0 is 0 even at x == 0, where y * x**(y-1) would be 0 * inf.
    with np.errstate(divide="ignore", invalid="ignore"):
        return g * np.where(y == 0, 0, y * np.power(x, y - 1))


def _pow_exponent(g, ans, x, y):
    # PyTorch's convention: 0 where x == 0 and y >= 0 (0**y is flat there), else ans*log(x).
    with np.errstate(divide="ignore", invalid="ignore"):
        return g * np.where((x == 0) & (y >= 0), 0, ans * np.log(x))


pow = primitive("pow", _binary(np.power), _pow_base, _pow_exponent)

# ---- unary math --------------------------------------------------------------------
abs = primitive("abs", np.abs, lambda g, ans, x: g * np.sign(x))
exp = primitive("exp", np.exp, lambda g, ans, x: g * ans)
log = primitive("log", np.log, lambda g, ans, x: g / x)
sqrt = primitive("sqrt", np.sqrt, lambda g, ans, x: g / (2 * ans))
sin = primitive("sin", np.sin, lambda g, ans, x: g * np.cos(x))
cos = primitive("cos", np.cos, lambda g, ans, x: -g * np.sin(x))
tanh = primitive("tanh", np.tanh, lambda g, ans, x: g * (1 - ans * ans))


def _sigmoid(x):
    # exp of -|x| never overflows; pick the stable branch per element.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


sigmoid = primitive("sigmoid", _sigmoid, lambda g, ans, x: g * ans * (1 - ans))

# ---- activations ---------------------------------------------------------------------
relu = primitive("relu", lambda x: np.maximum(x, 0),
                 lambda g, ans, x: g * (x > 0))
_leaky_relu = primitive("leaky_relu",
                        lambda x, negative_slope: np.where(x > 0, x, x * negative_slope),
                        lambda g, ans, x, negative_slope: g * np.where(x > 0, 1, negative_slope))


def leaky_relu(x, negative_slope: float = 0.01):
    return _leaky_relu(x, negative_slope=negative_slope)


# numpy has no erf; math.erf is exact to the last bit, at ~150 ns an element.
_erf = np.vectorize(math.erf, otypes=[np.float64])
_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)


def _float(x):
    x = np.asarray(x)
    return x if x.dtype.kind in "fc" else x.astype(np.float64)


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)))


def _gelu_tanh_vjp(g, ans, x, approximate):
    t = np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x ** 3))
    d_inner = _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x ** 2)
    return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * d_inner)


def _gelu_erf_vjp(g, cdf, x):
    return g * (cdf + x * np.exp(-0.5 * x * x) * _INV_SQRT_2PI)


_gelu_tanh_op = primitive("gelu", lambda x, approximate: _gelu_tanh(_float(x)), _gelu_tanh_vjp)


def gelu(x, approximate: str = "none"):
    """GELU; `approximate="none"` is the exact erf form (PyTorch's default)."""
    if approximate == "tanh":
        return _gelu_tanh_op(x, approximate="tanh")
    if approximate != "none":
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    xd = _float(x.data if isinstance(x, Tensor) else x)
    cdf = (0.5 * (1 + _erf(xd * (1 / math.sqrt(2))))).astype(xd.dtype, copy=False)
    # The CDF is saved so backward does not evaluate erf again.
    return record("gelu", xd * cdf, (x,), (_gelu_erf_vjp,), saved=(cdf, xd))


def _silu_vjp(g, ans, x):
    s = _sigmoid(x)
    return g * s * (1 + x * (1 - s))


silu = primitive("silu", lambda x: x * _sigmoid(x), _silu_vjp)

# ---- selection -------------------------------------------------------------------
_clip = primitive("clip", lambda x, lo, hi: np.clip(x, lo, hi),
                  lambda g, ans, x, lo, hi: g * ((x >= (-np.inf if lo is None else lo))
                                                 & (x <= (np.inf if hi is None else hi))))


def clip(x, min=None, max=None):
    """Clamp to [min, max] (either may be None; bounds get no gradient); the gradient
    is 1 where min <= x <= max, else 0 (PyTorch's clamp)."""
    if min is None and max is None:
        raise ValueError("clip: at least one of min and max must be given")
    return _clip(x, lo=_weak(_raw(min)), hi=_weak(_raw(max)))


# Ties send the gradient half to each side, like PyTorch's maximum/minimum.
maximum = primitive("maximum", _binary(np.maximum),
                    lambda g, ans, x, y: g * ((x > y) + 0.5 * (x == y)),
                    lambda g, ans, x, y: g * ((y > x) + 0.5 * (x == y)))
minimum = primitive("minimum", _binary(np.minimum),
                    lambda g, ans, x, y: g * ((x < y) + 0.5 * (x == y)),
                    lambda g, ans, x, y: g * ((y < x) + 0.5 * (x == y)))
_where = primitive("where", lambda c, x, y: np.where(c, _weak(x), _weak(y)),
                   None,
                   lambda g, ans, c, x, y: np.where(c, g, 0),
                   lambda g, ans, c, x, y: np.where(c, 0, g))


def where(condition, x, y):
    """`x` where `condition` else `y`, all three broadcast; the condition gets no gradient."""
    return _where(np.asarray(_raw(condition), dtype=bool), x, y)


def _raw(a):
    return a.data if isinstance(a, Tensor) else a
