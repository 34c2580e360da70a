"""Elementwise ops. Rules return gradients at the output's shape; the node sums
them back over broadcast dimensions and casts to each input's dtype.

Numpy scalars (`np.float64(2.0)`, `np.sqrt(d)`) are treated like Python scalars,
as PyTorch does: `float32_tensor * np.float64(2)` stays float32.
"""
from __future__ import annotations

import math

import numpy as np

from ..grad_mode import is_grad_enabled as _grad_enabled
from .. import memory as _memory
from ..memory import empty as _empty
from ..memory import pooled as P
from ..primitive import primitive, record
from ..tensor import Tensor
from . import special
from .pointwise import abs, cos, exp, log, neg, sin, sqrt, tanh  # noqa: F401  MIGRATION


def _weak(a):
    return a.item() if isinstance(a, np.generic) else a


def _binary(ufunc):
    """The forward of a binary op: numpy scalars weak, the output cached when large."""
    return _memory.ufunc(ufunc, weak=True)


# Rules and forwards allocate only the array they return: each writes its temporaries
# into that array in place (`out=`), never into `g` or a saved array. Ufuncs give numpy
# scalars for 0-d results, which cannot be written into: `_buf` makes them arrays.
# "passes" counts the sweeps over full-size arrays a rule makes.
def _buf(a):
    return a if type(a) is np.ndarray else np.asarray(a)


_BLOCK = 32768  # elements per chunk in `_fused`: 256 KiB of float64, cache resident


def _fused(kernel, like, operands, scratch=(), dtype=None):
    """`kernel(out, *operands, *scratch)` evaluated chunk by chunk; returns `out`, a new
    array shaped like `like` (of `dtype`, default `like`'s), the only full-size allocation.

    For rules that need a second temporary: chunks of `_BLOCK` elements (numpy's
    buffered iterator; broadcast operands are buffered per chunk) get chunk-sized
    `scratch` arrays of the given dtypes. Operands that are not ndarrays (Python
    scalars, weakly typed) are passed through unchanged. Small arrays: one call.
    """
    out = _empty(np.shape(like), like.dtype if dtype is None else dtype)
    if out.size <= _BLOCK:
        kernel(out, *operands, *(_empty(out.shape, d) for d in scratch))
        return out
    where = [i for i, a in enumerate(operands) if type(a) is np.ndarray]
    it = np.nditer([out] + [operands[i] for i in where],
                   flags=["external_loop", "buffered", "zerosize_ok"],
                   op_flags=[["writeonly"]] + [["readonly"]] * len(where), buffersize=_BLOCK)
    bufs = [_empty(_BLOCK, d) for d in scratch]
    args = list(operands)
    with it:
        for chunk in it:
            for i, c in zip(where, chunk[1:]):
                args[i] = c
            n = chunk[0].size
            kernel(chunk[0], *args, *(b[:n] for b in bufs))
    return out


# ---- arithmetic ------------------------------------------------------------------
def _div_y(g, ans, x, y):
    # -g * ans / y: 3 passes, one buffer
    t = _buf(P.multiply(g, ans))
    t /= y
    return np.negative(t, out=t)


# add's rules hand g on (no pass); sub/neg (-g), mul (g y, g x), div (g / y): one ufunc,
# 1 pass, the result its only allocation. Forwards: one ufunc each.
add = primitive("add", _binary(np.add),
                lambda g, ans, x, y: g,
                lambda g, ans, x, y: g)
sub = primitive("sub", _binary(np.subtract),
                lambda g, ans, x, y: g,
                lambda g, ans, x, y: P.negative(g))
mul = primitive("mul", _binary(np.multiply),
                lambda g, ans, x, y: P.multiply(g, y),
                lambda g, ans, x, y: P.multiply(g, x))
div = primitive("div", _binary(np.true_divide),
                lambda g, ans, x, y: P.divide(g, y),
                _div_y)


def _pow(x, y):
    x, y = _weak(x), _weak(y)
    if type(y) is int and y == 3 and isinstance(x, np.ndarray) and x.dtype.kind == "f":
        t = _buf(P.multiply(x, x))  # x*x*x as PyTorch (libm's pow: ~50 ns an element)
        t *= x
        return t
    return P.power(x, y)


def _pow_base(g, ans, x, y):
    """y * x**(y-1) * g; scalar exponents special-cased (at most 3 passes, one buffer)."""
    y = _weak(y)
    if type(y) not in (int, float):
        return _pow_base_array(g, ans, x, y)
    if y == 0:                      # d/dx x**0 is 0 even at x == 0
        return P.multiply(g, 0.0)
    if y == 1:
        return P.multiply(g, 1.0)
    if y == 2:                      # 2 passes
        t = _buf(P.multiply(x, 2))
        t *= g
        return t
    if y == 3:                      # 3 passes
        t = _buf(P.multiply(x, x))
        t *= 3
        t *= g
        return t
    with np.errstate(divide="ignore", invalid="ignore"):
        if y == 0.5:                # 0.5 / sqrt(x), from ans: 2 passes
            t = _buf(P.divide(0.5, ans))
        elif y == -1:               # -1 / x**2 = -ans*ans: 3 passes
            t = _buf(P.multiply(ans, ans))
            np.negative(t, out=t)
        else:                       # one power: 3 passes
            t = _buf(P.power(x, y - 1))
            t *= y
    t *= g
    return t


def _pow_base_kernel(o, g, x, y, zero):
    np.subtract(y, 1, out=o)
    np.power(x, o, out=o)
    o *= y
    np.equal(y, 0, out=zero)
    np.putmask(o, zero, 0)          # 0 where y == 0 (y * x**(y-1) is 0 * inf at x == 0)
    o *= g


def _pow_base_array(g, ans, x, y):
    # a tensor exponent: 6 passes per chunk, a chunk-sized mask
    with np.errstate(divide="ignore", invalid="ignore"):
        return _fused(_pow_base_kernel, ans, (g, x, y), (np.bool_,),
                      np.result_type(g, ans))


def _pow_exponent_kernel(o, g, x, y, ans, zero, nonneg):
    np.log(x, out=o)
    o *= ans
    np.equal(x, 0, out=zero)
    np.greater_equal(y, 0, out=nonneg)
    zero &= nonneg
    np.putmask(o, zero, 0)          # PyTorch: 0 where x == 0 and y >= 0 (0**y is flat)
    o *= g


def _pow_exponent(g, ans, x, y):
    # ans * log(x) * g: 7 passes per chunk, two chunk-sized masks
    x = np.asarray(_weak(x)) if not isinstance(x, np.ndarray) else x
    with np.errstate(divide="ignore", invalid="ignore"):
        return _fused(_pow_exponent_kernel, ans, (g, x, y, ans), (np.bool_, np.bool_),
                      np.result_type(g, ans))


pow = primitive("pow", _pow, _pow_base, _pow_exponent)


def _float(x):
    x = np.asarray(x)
    return x if x.dtype.kind in "fc" else x.astype(np.float64)


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

# ---- selection -------------------------------------------------------------------
def _clip_vjp(g, ans, x, lo, hi):
    # 1 where lo <= x <= hi, else 0: exactly where clip(x) == x (NaN: 0). 2 passes.
    if lo is not None and hi is not None and np.any(P.greater(lo, hi)):
        return g * np.zeros_like(ans)   # an empty interval: clip gives hi everywhere
    t = np.equal(ans, x, out=_empty(np.shape(ans), np.result_type(g, ans)))
    t *= g
    return t


_clip = primitive("clip", lambda x, lo, hi: np.clip(x, lo, hi), _clip_vjp)


def clip(x, min=None, max=None) -> Tensor:
    """Clamp to [min, max] (either may be None), PyTorch's clamp: x's gradient is 1 where
    min <= x <= max, else 0; a bound that is a tensor requiring grad gets the gradient
    where it is selected (x < min, x > max), as PyTorch (ops/arith's clamp_min/max)."""
    if min is None and max is None:
        raise ValueError("clip: at least one of min and max must be given")
    if any(isinstance(b, Tensor) and b.requires_grad for b in (min, max)):
        from .arith import clamp_max, clamp_min  # late: arith builds on this module
        y = x if min is None else clamp_min(x, min)
        return y if max is None else clamp_max(y, max)
    return _clip(x, lo=_weak(_raw(min)), hi=_weak(_raw(max)))


def _tie_kernel(o, g, a, b, half, loser):
    loser(a, b, out=o)              # 1 where a loses (bool written as float)
    np.subtract(1, o, out=o)        # 1 where a wins, ties, or a NaN is involved
    np.equal(a, b, out=half)
    half *= 0.5
    o -= half                       # 1, 0.5 on a tie, 0 where a loses
    o *= g


def _tie_split(g, ans, a, b, loser):
    """PyTorch's maximum/minimum rule: g where `a` wins, g/2 on a tie, 0 where it loses;
    with a NaN on either side both get g (no comparison says they lose). 6 passes per
    chunk, one chunk-sized scratch array."""
    dtype = np.result_type(g, ans)
    return _fused(lambda o, g, a, b, h: _tie_kernel(o, g, a, b, h, loser), ans,
                  (g, _weak(a), _weak(b)), (dtype,), dtype)


# Ties send the gradient half to each side, like PyTorch's maximum/minimum.
maximum = primitive("maximum", _binary(np.maximum),
                    lambda g, ans, x, y: _tie_split(g, ans, x, y, np.less),
                    lambda g, ans, x, y: _tie_split(g, ans, y, x, np.less))
minimum = primitive("minimum", _binary(np.minimum),
                    lambda g, ans, x, y: _tie_split(g, ans, x, y, np.greater),
                    lambda g, ans, x, y: _tie_split(g, ans, y, x, np.greater))
_where = primitive("where", lambda c, x, y: np.where(c, _weak(x), _weak(y)),
                   None,
                   lambda g, ans, c, x, y: np.where(c, g, 0),
                   lambda g, ans, c, x, y: np.where(c, 0, g))


def where(condition, x, y) -> Tensor:
    """`x` where `condition` else `y`, all three broadcast; the condition gets no gradient."""
    return _where(np.asarray(_raw(condition), dtype=bool), x, y)


def _raw(a):
    return a.data if isinstance(a, Tensor) else a


_DOCS = {
    add: "`x + y` (numpy broadcasting; the gradient is summed back to each shape).",
    sub: "`x - y` (numpy broadcasting).",
    mul: "`x * y` (numpy broadcasting).",
    div: "`x / y` (true division, numpy broadcasting).",
    sigmoid: "`1 / (1 + exp(-x))`.",
    silu: "`x * sigmoid(x)` (SiLU, swish).",
    relu: "`max(x, 0)`; the gradient at 0 is 0, as in PyTorch.",
    maximum: "Elementwise maximum; on a tie each side gets half the gradient (PyTorch).",
    minimum: "Elementwise minimum; on a tie each side gets half the gradient (PyTorch).",
}
for _op, _doc in _DOCS.items():
    _op.__doc__ = _doc
