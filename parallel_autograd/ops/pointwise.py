"""Pointwise math: one input, one output of its shape (abs ... trunc).

Each op is one declaration (`primitive.defop`): its numpy forward, its derivative as a
formula (written with the package's ops: differentiable again, for create_graph), and,
where it pays, a fused first-order kernel of the same derivative that allocates only the
array it returns (each kernel's comment counts its passes over memory).

Semantics are PyTorch's, including the gradients at the edges: sign/floor/ceil/round/trunc
have gradient 0 (recorded as a function of g, so it differentiates again to 0); abs's is
sign(x), 0 at 0.

Thread safety: pure functions of their arguments, like the other ops.
"""
from __future__ import annotations

import math

import numpy as np

from ..primitive import defop
from ..tensor import Tensor
from . import special
from ._common import P, buf, fused
from .forms import piecewise, zeros_of

__all__ = [
    "abs", "neg", "exp", "log", "sqrt", "sin", "cos", "tanh", "tan", "asin", "acos", "atan",
    "sinh", "cosh", "asinh", "acosh", "atanh", "log1p", "expm1", "log2", "log10", "exp2",
    "erf", "erfc", "reciprocal", "rsqrt", "sign", "floor", "ceil", "round", "trunc",
]

_LN2 = math.log(2.0)
_LN10 = math.log(10.0)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


# ---- sign and magnitude ---------------------------------------------------------------------
def _abs_kernel(g, ans, input):
    t = P.sign(input)               # 2 passes (in-place *= also works on 0-d scalars)
    t *= g
    return t


@defop(formula=piecewise(_abs_kernel), kernel=_abs_kernel, method=True, aliases=("absolute",))
def abs(input: Tensor) -> Tensor:  # noqa: A001  (PyTorch's name)
    """|x|; the gradient is sign(x) (0 at 0, as PyTorch)."""
    return P.abs(input)


@defop(formula=lambda g, ans, input: -g, method=True, aliases=("negative",))
def neg(input: Tensor) -> Tensor:
    """-x."""
    return P.negative(input)


# ---- exponentials and logarithms -------------------------------------------------------------
@defop(formula=lambda g, ans, input: g * ans, method=True)
def exp(input: Tensor) -> Tensor:
    """e ** x."""
    return P.exp(input)


@defop(formula=lambda g, ans, input: g / input, method=True)
def log(input: Tensor) -> Tensor:
    """The natural logarithm."""
    return P.log(input)


def _sqrt_kernel(g, ans, input):
    t = buf(P.multiply(ans, 2))     # g / (2 ans): 2 passes
    return np.divide(g, t, out=t)


@defop(formula=lambda g, ans, input: g / (ans * 2), kernel=_sqrt_kernel, method=True)
def sqrt(input: Tensor) -> Tensor:
    """The square root."""
    return P.sqrt(input)


def _log1p_kernel(g, ans, input):
    t = buf(P.add(input, 1))        # g / (x + 1): 2 passes
    return np.divide(g, t, out=t)


@defop(formula=lambda g, ans, input: g / (input + 1), kernel=_log1p_kernel, method=True,
       quiet=True)
def log1p(input: Tensor) -> Tensor:
    """log(1 + x), accurate for small x."""
    return P.log1p(input)


def _expm1_kernel(g, ans, input):
    t = buf(P.add(ans, 1))          # g (ans + 1): 2 passes
    t *= g
    return t


@defop(formula=lambda g, ans, input: g * (ans + 1), kernel=_expm1_kernel, method=True,
       quiet=True)
def expm1(input: Tensor) -> Tensor:
    """exp(x) - 1, accurate for small x."""
    return P.expm1(input)


def _log_base_kernel(ln_base):
    def kernel(g, ans, input):
        t = buf(P.multiply(input, ln_base))  # g / (x ln b): 2 passes
        return np.divide(g, t, out=t)
    return kernel


@defop(formula=lambda g, ans, input: g / (input * _LN2), kernel=_log_base_kernel(_LN2),
       method=True, quiet=True)
def log2(input: Tensor) -> Tensor:
    """The base-2 logarithm."""
    return P.log2(input)


@defop(formula=lambda g, ans, input: g / (input * _LN10), kernel=_log_base_kernel(_LN10),
       method=True, quiet=True)
def log10(input: Tensor) -> Tensor:
    """The base-10 logarithm."""
    return P.log10(input)


def _exp2_kernel(g, ans, input):
    t = buf(P.multiply(ans, _LN2))  # g ans ln 2: 2 passes
    t *= g
    return t


@defop(formula=lambda g, ans, input: g * (ans * _LN2), kernel=_exp2_kernel, method=True,
       quiet=True)
def exp2(input: Tensor) -> Tensor:
    """2 ** x."""
    return P.exp2(input)


def _erf_kernel(factor):
    def kernel(g, ans, input):
        t = buf(P.multiply(input, input))  # g factor exp(-x^2): 5 passes
        np.negative(t, out=t)
        np.exp(t, out=t)
        t *= factor
        t *= g
        return t
    return kernel


@defop(formula=lambda g, ans, input: g * (exp(-(input * input)) * _TWO_OVER_SQRT_PI),
       kernel=_erf_kernel(_TWO_OVER_SQRT_PI), method=True, module="torch")
def erf(input: Tensor) -> Tensor:
    """The error function (fdlibm's, vectorized: `ops.special`; within ~1 ulp)."""
    return special.erf(input)


@defop(formula=lambda g, ans, input: g * (exp(-(input * input)) * -_TWO_OVER_SQRT_PI),
       kernel=_erf_kernel(-_TWO_OVER_SQRT_PI), method=True)
def erfc(input: Tensor) -> Tensor:
    """1 - erf(x), without cancellation for large x (`ops.special`)."""
    return special.erfc(input)


# ---- reciprocals and roots ------------------------------------------------------------------
def _reciprocal_kernel(g, ans, input):
    t = buf(P.multiply(ans, ans))   # -g ans^2: 3 passes
    t *= g
    return np.negative(t, out=t)


@defop(formula=lambda g, ans, input: -(g * (ans * ans)), kernel=_reciprocal_kernel,
       method=True, quiet=True)
def reciprocal(input: Tensor) -> Tensor:
    """1 / x."""
    return P.divide(1.0, input)


def _rsqrt_kernel(g, ans, input):
    t = buf(P.multiply(ans, ans))   # -0.5 g ans^3: 4 passes
    t *= ans
    t *= -0.5
    t *= g
    return t


@defop(formula=lambda g, ans, input: g * (ans * ans * ans * -0.5), kernel=_rsqrt_kernel,
       method=True, quiet=True)
def rsqrt(input: Tensor) -> Tensor:
    """1 / sqrt(x)."""
    t = buf(P.sqrt(input))          # 2 passes
    return np.divide(1, t, out=t)


# ---- trigonometric and hyperbolic -------------------------------------------------------------
def _sin_kernel(g, ans, input):
    t = P.cos(input)                # 2 passes
    t *= g
    return t


@defop(formula=lambda g, ans, input: g * cos(input), kernel=_sin_kernel, method=True)
def sin(input: Tensor) -> Tensor:
    """The sine."""
    return P.sin(input)


def _cos_kernel(g, ans, input):
    t = buf(P.sin(input))           # -sin(x) g: 3 passes
    np.negative(t, out=t)
    t *= g
    return t


@defop(formula=lambda g, ans, input: g * -sin(input), kernel=_cos_kernel, method=True)
def cos(input: Tensor) -> Tensor:
    """The cosine."""
    return P.cos(input)


def _tan_kernel(g, ans, input):
    t = buf(P.multiply(ans, ans))   # g (1 + ans^2), PyTorch's form: 3 passes
    t += 1
    t *= g
    return t


@defop(formula=lambda g, ans, input: g * (ans * ans + 1), kernel=_tan_kernel, method=True)
def tan(input: Tensor) -> Tensor:
    """The tangent."""
    return P.tan(input)


def _tanh_kernel(g, ans, input):
    t = buf(P.multiply(ans, ans))   # g (1 - ans^2): 3 passes
    np.subtract(1, t, out=t)
    t *= g
    return t


@defop(formula=lambda g, ans, input: g * (1 - ans * ans), kernel=_tanh_kernel, method=True)
def tanh(input: Tensor) -> Tensor:
    """The hyperbolic tangent."""
    return P.tanh(input)


def _asin_kernel(g, ans, input):
    t = buf(P.multiply(input, input))  # g / sqrt(1 - x^2): 4 passes
    np.subtract(1, t, out=t)
    np.sqrt(t, out=t)
    return np.divide(g, t, out=t)


@defop(formula=lambda g, ans, input: g * rsqrt(1 - input * input), kernel=_asin_kernel,
       method=True, aliases=("arcsin",), quiet=True)
def asin(input: Tensor) -> Tensor:
    """The inverse sine (NaN outside [-1, 1])."""
    return P.arcsin(input)


def _acos_kernel(g, ans, input):
    t = _asin_kernel(g, ans, input)  # -g / sqrt(1 - x^2): 5 passes
    return np.negative(t, out=t)


@defop(formula=lambda g, ans, input: -(g * rsqrt(1 - input * input)), kernel=_acos_kernel,
       method=True, aliases=("arccos",), quiet=True)
def acos(input: Tensor) -> Tensor:
    """The inverse cosine (NaN outside [-1, 1])."""
    return P.arccos(input)


def _atan_kernel(g, ans, input):
    t = buf(P.multiply(input, input))  # g / (1 + x^2): 3 passes
    t += 1
    return np.divide(g, t, out=t)


@defop(formula=lambda g, ans, input: g / (input * input + 1), kernel=_atan_kernel,
       method=True, aliases=("arctan",))
def atan(input: Tensor) -> Tensor:
    """The inverse tangent."""
    return P.arctan(input)


def _sinh_kernel(g, ans, input):
    t = buf(P.cosh(input))          # g cosh(x): 2 passes
    t *= g
    return t


@defop(formula=lambda g, ans, input: g * cosh(input), kernel=_sinh_kernel, method=True,
       quiet=True)
def sinh(input: Tensor) -> Tensor:
    """The hyperbolic sine."""
    return P.sinh(input)


def _cosh_kernel(g, ans, input):
    t = buf(P.sinh(input))          # g sinh(x): 2 passes
    t *= g
    return t


@defop(formula=lambda g, ans, input: g * sinh(input), kernel=_cosh_kernel, method=True,
       quiet=True)
def cosh(input: Tensor) -> Tensor:
    """The hyperbolic cosine."""
    return P.cosh(input)


def _asinh_kernel(g, ans, input):
    t = buf(P.multiply(input, input))  # g / sqrt(x^2 + 1): 4 passes
    t += 1
    np.sqrt(t, out=t)
    return np.divide(g, t, out=t)


@defop(formula=lambda g, ans, input: g * rsqrt(input * input + 1), kernel=_asinh_kernel,
       method=True, aliases=("arcsinh",), quiet=True)
def asinh(input: Tensor) -> Tensor:
    """The inverse hyperbolic sine."""
    return P.arcsinh(input)


def _acosh_kernel(g, ans, input):
    t = buf(P.multiply(input, input))  # g / sqrt(x^2 - 1): 4 passes
    t -= 1
    np.sqrt(t, out=t)
    return np.divide(g, t, out=t)


@defop(formula=lambda g, ans, input: g * rsqrt(input * input - 1), kernel=_acosh_kernel,
       method=True, aliases=("arccosh",), quiet=True)
def acosh(input: Tensor) -> Tensor:
    """The inverse hyperbolic cosine (NaN below 1)."""
    return P.arccosh(input)


def _atanh_kernel(g, ans, input):
    t = buf(P.multiply(input, input))  # g / (1 - x^2): 3 passes
    np.subtract(1, t, out=t)
    return np.divide(g, t, out=t)


@defop(formula=lambda g, ans, input: g / (1 - input * input), kernel=_atanh_kernel,
       method=True, aliases=("arctanh",), quiet=True)
def atanh(input: Tensor) -> Tensor:
    """The inverse hyperbolic tangent (NaN outside [-1, 1])."""
    return P.arctanh(input)


# ---- piecewise constant: gradient 0 -------------------------------------------------------
def _zero(g, ans, input, **_):
    """0, recorded as a function of g (a further backward through it gives 0)."""
    return zeros_of(g)


def _sign_kernel(o, x, negative):
    np.greater(x, 0, out=o)
    np.less(x, 0, out=negative)
    o -= negative                   # (x > 0) - (x < 0): 0 for NaN and -0.0, as PyTorch


@defop(formula=_zero, method=True)
def sign(input: Tensor) -> Tensor:
    """-1, 0 or 1 by the sign of x (0 for NaN, as PyTorch); the gradient is 0."""
    x = np.asarray(input)
    return fused(_sign_kernel, x, (x,), (np.bool_,))  # 3 passes a chunk, a chunk-sized mask


@defop(formula=_zero, method=True)
def floor(input: Tensor) -> Tensor:
    """The largest integer <= x; the gradient is 0."""
    return P.floor(input)


@defop(formula=_zero, method=True)
def ceil(input: Tensor) -> Tensor:
    """The smallest integer >= x; the gradient is 0."""
    return P.ceil(input)


@defop(formula=_zero, method=True, aliases=("fix",))
def trunc(input: Tensor) -> Tensor:
    """x rounded toward zero; the gradient is 0."""
    return P.trunc(input)


@defop(formula=_zero, method=True)
def round(input: Tensor, *, decimals: int = 0) -> Tensor:  # noqa: A001  (PyTorch's name)
    """x rounded to `decimals` decimal places, halves to even (PyTorch's `round`); the
    gradient is 0. Shadows Python's `round`, so it is `pa.round` or `t.round()`, not
    star-imported."""
    if isinstance(decimals, bool) or not isinstance(decimals, (int, np.integer)):
        raise TypeError(f"round: decimals must be an int, got {decimals!r}")
    if decimals == 0:
        return P.rint(input)        # half to even, as PyTorch
    return np.round(input, int(decimals))  # x * 10^d rounded / 10^d
