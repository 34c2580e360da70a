"""Elementwise ops. Rules return gradients at the output's shape; the node sums
them back over broadcast dimensions and casts to each input's dtype."""
from __future__ import annotations

import math

import numpy as np

from ..primitive import primitive

# ---- arithmetic ------------------------------------------------------------------
add = primitive("add", np.add,
                lambda g, ans, x, y: g,
                lambda g, ans, x, y: g)
sub = primitive("sub", np.subtract,
                lambda g, ans, x, y: g,
                lambda g, ans, x, y: -g)
mul = primitive("mul", np.multiply,
                lambda g, ans, x, y: g * y,
                lambda g, ans, x, y: g * x)
div = primitive("div", np.true_divide,
                lambda g, ans, x, y: g / y,
                lambda g, ans, x, y: -g * ans / y)
neg = primitive("neg", np.negative, lambda g, ans, x: -g)


def _pow_base(g, ans, x, y):
    return g * y * np.power(x, y - 1)


def _pow_exponent(g, ans, x, y):
    with np.errstate(divide="ignore", invalid="ignore"):
        return g * ans * np.where(x > 0, np.log(np.where(x > 0, x, 1)), 0.0)


pow = primitive("pow", np.power, _pow_base, _pow_exponent)

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


_erf = np.vectorize(math.erf, otypes=[np.float64])
_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def _gelu(x, approximate):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)))
    return (0.5 * x * (1 + _erf(x / math.sqrt(2)))).astype(x.dtype, copy=False)


def _gelu_vjp(g, ans, x, approximate):
    if approximate == "tanh":
        inner = _SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)
        t = np.tanh(inner)
        d_inner = _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x ** 2)
        return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * d_inner)
    cdf = 0.5 * (1 + _erf(x / math.sqrt(2)))
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return g * (cdf + x * pdf)


_gelu_op = primitive("gelu", _gelu, _gelu_vjp)


def gelu(x, approximate: str = "none"):
    """GELU; `approximate="none"` is the exact erf form (PyTorch's default)."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _gelu_op(x, approximate=approximate)


def _silu_vjp(g, ans, x):
    s = _sigmoid(x)
    return g * s * (1 + x * (1 - s))


silu = primitive("silu", lambda x: x * _sigmoid(x), _silu_vjp)

# ---- selection -------------------------------------------------------------------
_clip = primitive("clip", lambda x, lo, hi: np.clip(x, lo, hi),
                  lambda g, ans, x, lo, hi: g * ((x >= (-np.inf if lo is None else lo))
                                                 & (x <= (np.inf if hi is None else hi))))


def clip(x, min=None, max=None):
    """Clamp to [min, max] (either may be None); gradient 1 inside, 0 outside."""
    if min is None and max is None:
        raise ValueError("clip: at least one of min and max must be given")
    return _clip(x, lo=min, hi=max)


# Ties send the gradient half to each side, like PyTorch's maximum/minimum.
maximum = primitive("maximum", np.maximum,
                    lambda g, ans, x, y: g * ((x > y) + 0.5 * (x == y)),
                    lambda g, ans, x, y: g * ((y > x) + 0.5 * (x == y)))
minimum = primitive("minimum", np.minimum,
                    lambda g, ans, x, y: g * ((x < y) + 0.5 * (x == y)),
                    lambda g, ans, x, y: g * ((y < x) + 0.5 * (x == y)))
_where = primitive("where", np.where,
                   None,
                   lambda g, ans, c, x, y: np.where(c, g, 0),
                   lambda g, ans, c, x, y: np.where(c, 0, g))


def where(condition, x, y):
    """`x` where `condition` else `y`; the condition gets no gradient."""
    if hasattr(condition, "data") and not isinstance(condition, np.ndarray):
        condition = condition.data
    return _where(np.asarray(condition, dtype=bool), x, y)
