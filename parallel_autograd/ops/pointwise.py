"""Pointwise ops: math on one input (abs ... trunc), arithmetic on two or more broadcast
inputs (add ... logaddexp2), selection (maximum, minimum, where, clamp).

Each op is one declaration (`primitive.defop`): its numpy forward, its derivative as a
formula (written with the package's ops: differentiable again, for create_graph), and,
where it pays, a fused first-order kernel of the same derivative that allocates only the
array it returns (each kernel's comment counts its passes over memory).

Semantics are PyTorch's, including the gradients at the edges: sign/floor/ceil/round/trunc
have gradient 0 (recorded as a function of g, so it differentiates again to 0); abs's is
sign(x), 0 at 0. Binary ops broadcast (the node sums each gradient back to its input's
shape); numpy scalars count as Python scalars (weakly typed: `float32 * np.float64(2)`
stays float32, as PyTorch's Python scalars do). Gradients from PyTorch's derivatives.yaml:
- maximum/minimum: g to the larger (smaller) side, g/2 to each on a tie, g to both where a
  NaN is involved; clamp: g where min <= x <= max, and to a tensor bound where it is
  selected (min where x < min < max, max where x > max or max < min);
- div with a rounding mode, floor_divide: 0 (PyTorch has no derivative for floor_divide);
  fmod / remainder: g and -g trunc(x / y) (floor(x / y)); copysign: g sign ratio, 0 at 0,
  and 0 for the sign source;
- lerp: g (1 - weight), g weight, g (end - start); nan_to_num: g where x is finite.
Exceptions follow PyTorch's types: RuntimeError for an integer division by zero (fmod,
remainder, floor or trunc division), a float alpha with integer tensors, integer addcdiv,
clamp without bounds; NotImplementedError (a RuntimeError) for frac/lerp of integers.

Thread safety: pure functions of their arguments, like the other ops.
"""
from __future__ import annotations

import math

import numpy as np

from ..dtypes import promote_operands
from ..memory import ufunc
from ..primitive import composite, defop
from ..tensor import Tensor
from . import special
from ._common import P, buf, empty, fused, raw, weak
from .forms import cast, piecewise, zeros_of

__all__ = [
    "abs", "neg", "exp", "log", "sqrt", "sin", "cos", "tanh", "tan", "asin", "acos", "atan",
    "sinh", "cosh", "asinh", "acosh", "atanh", "log1p", "expm1", "log2", "log10", "exp2",
    "erf", "erfc", "reciprocal", "rsqrt", "sign", "floor", "ceil", "round", "trunc",
    "add", "sub", "mul", "div", "true_divide", "floor_divide", "fmod", "remainder", "pow",
    "float_power", "square", "positive", "atan2", "hypot", "logaddexp", "logaddexp2",
    "copysign", "frac", "signbit", "lerp", "addcmul", "addcdiv", "nan_to_num", "maximum",
    "minimum", "where", "clamp", "clamp_min", "clamp_max",
]

_LN2 = math.log(2.0)
_LN10 = math.log(10.0)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


# ---- sign and magnitude ---------------------------------------------------------------------
def _abs_chunk(o, g, x, negative):
    _sign_kernel(o, x, negative)    # sign(x), 0 for NaN (PyTorch's sgn)
    o *= g


def _abs_kernel(g, ans, input):
    # g sign(x): 4 passes a chunk, a chunk-sized mask
    return fused(_abs_chunk, input, (g, input), (np.bool_,), np.result_type(g, input))


@defop(formula=piecewise(_abs_kernel), kernel=_abs_kernel, method=True, aliases=("absolute",),
       dtypes="numeric")
def abs(input: Tensor) -> Tensor:  # noqa: A001  (PyTorch's name)
    """|x|; the gradient is g sign(x): 0 at 0 and at NaN, as PyTorch's."""
    return P.abs(input)


@defop(formula=lambda g, ans, input: -g, method=True, aliases=("negative",))
def neg(input: Tensor) -> Tensor:
    """-x (a bool tensor is refused: RuntimeError, as PyTorch)."""
    if type(input) is np.ndarray and input.dtype.kind == "b":
        raise RuntimeError("neg: Negation, the `-` operator, on a bool tensor is not "
                           "supported; use `~` or logical_not() to invert it")
    return P.negative(input)


# ---- exponentials and logarithms -------------------------------------------------------------
@defop(formula=lambda g, ans, input: g * ans, method=True, int_to_float=True)
def exp(input: Tensor) -> Tensor:
    """e ** x."""
    return P.exp(input)


@defop(formula=lambda g, ans, input: g / input, method=True, int_to_float=True)
def log(input: Tensor) -> Tensor:
    """The natural logarithm."""
    return P.log(input)


def _sqrt_kernel(g, ans, input):
    t = buf(P.multiply(ans, 2))     # g / (2 ans): 2 passes
    return np.divide(g, t, out=t)


@defop(formula=lambda g, ans, input: g / (ans * 2), kernel=_sqrt_kernel, method=True,
       int_to_float=True)
def sqrt(input: Tensor) -> Tensor:
    """The square root."""
    return P.sqrt(input)


def _log1p_kernel(g, ans, input):
    t = buf(P.add(input, 1))        # g / (x + 1): 2 passes
    return np.divide(g, t, out=t)


@defop(formula=lambda g, ans, input: g / (input + 1), kernel=_log1p_kernel, method=True,
       quiet=True, int_to_float=True)
def log1p(input: Tensor) -> Tensor:
    """log(1 + x), accurate for small x."""
    return P.log1p(input)


def _expm1_kernel(g, ans, input):
    t = buf(P.add(ans, 1))          # g (ans + 1): 2 passes
    t *= g
    return t


@defop(formula=lambda g, ans, input: g * (ans + 1), kernel=_expm1_kernel, method=True,
       quiet=True, int_to_float=True)
def expm1(input: Tensor) -> Tensor:
    """exp(x) - 1, accurate for small x."""
    return P.expm1(input)


def _log_base_kernel(ln_base):
    def kernel(g, ans, input):
        t = buf(P.multiply(input, ln_base))  # g / (x ln b): 2 passes
        return np.divide(g, t, out=t)
    return kernel


@defop(formula=lambda g, ans, input: g / (input * _LN2), kernel=_log_base_kernel(_LN2),
       method=True, quiet=True, int_to_float=True)
def log2(input: Tensor) -> Tensor:
    """The base-2 logarithm."""
    return P.log2(input)


@defop(formula=lambda g, ans, input: g / (input * _LN10), kernel=_log_base_kernel(_LN10),
       method=True, quiet=True, int_to_float=True)
def log10(input: Tensor) -> Tensor:
    """The base-10 logarithm."""
    return P.log10(input)


def _exp2_kernel(g, ans, input):
    t = buf(P.multiply(ans, _LN2))  # g ans ln 2: 2 passes
    t *= g
    return t


@defop(formula=lambda g, ans, input: g * (ans * _LN2), kernel=_exp2_kernel, method=True,
       quiet=True, int_to_float=True)
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
       kernel=_erf_kernel(_TWO_OVER_SQRT_PI), method=True, module="torch", int_to_float=True)
def erf(input: Tensor) -> Tensor:
    """The error function (fdlibm's, vectorized: `ops.special`; within 1 ulp of the
    correctly rounded value, float32 computed in float32)."""
    return special.erf(input)


@defop(formula=lambda g, ans, input: g * (exp(-(input * input)) * -_TWO_OVER_SQRT_PI),
       kernel=_erf_kernel(-_TWO_OVER_SQRT_PI), method=True, int_to_float=True)
def erfc(input: Tensor) -> Tensor:
    """1 - erf(x), without cancellation for large x (`ops.special`; float64 within
    2.1 ulp, float32 within 1)."""
    return special.erfc(input)


# ---- reciprocals and roots ------------------------------------------------------------------
def _reciprocal_kernel(g, ans, input):
    t = buf(P.multiply(ans, ans))   # -g ans^2: 3 passes
    t *= g
    return np.negative(t, out=t)


@defop(formula=lambda g, ans, input: -(g * (ans * ans)), kernel=_reciprocal_kernel,
       method=True, quiet=True, int_to_float=True)
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
       method=True, quiet=True, int_to_float=True)
def rsqrt(input: Tensor) -> Tensor:
    """1 / sqrt(x)."""
    t = buf(P.sqrt(input))          # 2 passes
    return np.divide(1, t, out=t)


# ---- trigonometric and hyperbolic -------------------------------------------------------------
def _sin_kernel(g, ans, input):
    t = P.cos(input)                # 2 passes
    t *= g
    return t


@defop(formula=lambda g, ans, input: g * cos(input), kernel=_sin_kernel, method=True,
       int_to_float=True)
def sin(input: Tensor) -> Tensor:
    """The sine."""
    return P.sin(input)


def _cos_kernel(g, ans, input):
    t = buf(P.sin(input))           # -sin(x) g: 3 passes
    np.negative(t, out=t)
    t *= g
    return t


@defop(formula=lambda g, ans, input: g * -sin(input), kernel=_cos_kernel, method=True,
       int_to_float=True)
def cos(input: Tensor) -> Tensor:
    """The cosine."""
    return P.cos(input)


def _tan_kernel(g, ans, input):
    t = buf(P.multiply(ans, ans))   # g (1 + ans^2), PyTorch's form: 3 passes
    t += 1
    t *= g
    return t


@defop(formula=lambda g, ans, input: g * (ans * ans + 1), kernel=_tan_kernel, method=True,
       int_to_float=True)
def tan(input: Tensor) -> Tensor:
    """The tangent."""
    return P.tan(input)


def _tanh_kernel(g, ans, input):
    t = buf(P.multiply(ans, ans))   # g (1 - ans^2): 3 passes
    np.subtract(1, t, out=t)
    t *= g
    return t


@defop(formula=lambda g, ans, input: g * (1 - ans * ans), kernel=_tanh_kernel, method=True,
       also=("torch.nn.functional",), int_to_float=True)
def tanh(input: Tensor) -> Tensor:
    """The hyperbolic tangent."""
    return P.tanh(input)


def _asin_kernel(g, ans, input):
    t = buf(P.multiply(input, input))  # g / sqrt(1 - x^2): 4 passes
    np.subtract(1, t, out=t)
    np.sqrt(t, out=t)
    return np.divide(g, t, out=t)


@defop(formula=lambda g, ans, input: g * rsqrt(1 - input * input), kernel=_asin_kernel,
       method=True, aliases=("arcsin",), quiet=True, int_to_float=True)
def asin(input: Tensor) -> Tensor:
    """The inverse sine (NaN outside [-1, 1])."""
    return P.arcsin(input)


def _acos_kernel(g, ans, input):
    t = _asin_kernel(g, ans, input)  # -g / sqrt(1 - x^2): 5 passes
    return np.negative(t, out=t)


@defop(formula=lambda g, ans, input: -(g * rsqrt(1 - input * input)), kernel=_acos_kernel,
       method=True, aliases=("arccos",), quiet=True, int_to_float=True)
def acos(input: Tensor) -> Tensor:
    """The inverse cosine (NaN outside [-1, 1])."""
    return P.arccos(input)


def _atan_kernel(g, ans, input):
    t = buf(P.multiply(input, input))  # g / (1 + x^2): 3 passes
    t += 1
    return np.divide(g, t, out=t)


@defop(formula=lambda g, ans, input: g / (input * input + 1), kernel=_atan_kernel,
       method=True, aliases=("arctan",), int_to_float=True)
def atan(input: Tensor) -> Tensor:
    """The inverse tangent."""
    return P.arctan(input)


def _sinh_kernel(g, ans, input):
    t = buf(P.cosh(input))          # g cosh(x): 2 passes
    t *= g
    return t


@defop(formula=lambda g, ans, input: g * cosh(input), kernel=_sinh_kernel, method=True,
       quiet=True, int_to_float=True)
def sinh(input: Tensor) -> Tensor:
    """The hyperbolic sine."""
    return P.sinh(input)


def _cosh_kernel(g, ans, input):
    t = buf(P.sinh(input))          # g sinh(x): 2 passes
    t *= g
    return t


@defop(formula=lambda g, ans, input: g * sinh(input), kernel=_cosh_kernel, method=True,
       quiet=True, int_to_float=True)
def cosh(input: Tensor) -> Tensor:
    """The hyperbolic cosine."""
    return P.cosh(input)


def _asinh_kernel(g, ans, input):
    t = buf(P.multiply(input, input))  # g / sqrt(x^2 + 1): 4 passes
    t += 1
    np.sqrt(t, out=t)
    return np.divide(g, t, out=t)


@defop(formula=lambda g, ans, input: g * rsqrt(input * input + 1), kernel=_asinh_kernel,
       method=True, aliases=("arcsinh",), quiet=True, int_to_float=True)
def asinh(input: Tensor) -> Tensor:
    """The inverse hyperbolic sine."""
    return P.arcsinh(input)


def _acosh_kernel(g, ans, input):
    t = buf(P.multiply(input, input))  # g / sqrt(x^2 - 1): 4 passes
    t -= 1
    np.sqrt(t, out=t)
    return np.divide(g, t, out=t)


@defop(formula=lambda g, ans, input: g * rsqrt(input * input - 1), kernel=_acosh_kernel,
       method=True, aliases=("arccosh",), quiet=True, int_to_float=True)
def acosh(input: Tensor) -> Tensor:
    """The inverse hyperbolic cosine (NaN below 1)."""
    return P.arccosh(input)


def _atanh_kernel(g, ans, input):
    t = buf(P.multiply(input, input))  # g / (1 - x^2): 3 passes
    np.subtract(1, t, out=t)
    return np.divide(g, t, out=t)


@defop(formula=lambda g, ans, input: g / (1 - input * input), kernel=_atanh_kernel,
       method=True, aliases=("arctanh",), quiet=True, int_to_float=True)
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


@defop(formula=_zero, method=True, aliases=("sgn",))
def sign(input: Tensor) -> Tensor:
    """-1, 0 or 1 by the sign of x (0 for NaN, as PyTorch); the gradient is 0. `sgn` is
    the same op for real tensors (PyTorch's sgn differs only for complex ones)."""
    x = np.asarray(input)
    if x.dtype.kind == "b":
        return x.copy()             # PyTorch's sign of bools: themselves
    return fused(_sign_kernel, x, (x,), (np.bool_,))  # 3 passes a chunk, a chunk-sized mask


@defop(dtypes="real", formula=_zero, method=True)
def floor(input: Tensor) -> Tensor:
    """The largest integer <= x; the gradient is 0."""
    return P.floor(input)


@defop(dtypes="real", formula=_zero, method=True)
def ceil(input: Tensor) -> Tensor:
    """The smallest integer >= x; the gradient is 0."""
    return P.ceil(input)


@defop(dtypes="real", formula=_zero, method=True, aliases=("fix",))
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
    kind = _kind(input)
    if kind in "biu":               # integers stay integers (PyTorch's); bool refused
        if kind == "b" or decimals != 0:
            raise NotImplementedError(f"round: not implemented for dtype "
                                      f"{np.asarray(input).dtype}" + (" with decimals" if
                                                                      kind != "b" else ""))
        return np.array(input)
    if decimals == 0:
        return P.rint(input)        # half to even, as PyTorch
    return np.round(input, int(decimals))  # x * 10^d rounded / 10^d


# ---- arithmetic: helpers ----------------------------------------------------------------------
# The forwards of the binary ops: numpy scalars weak, the output cached when large.
_ADD, _SUB, _MUL, _DIV, _POW, _MAX, _MIN = (
    ufunc(f, weak=True) for f in (np.add, np.subtract, np.multiply, np.true_divide, np.power,
                                  np.maximum, np.minimum))


def _kind(x) -> str:
    return np.asarray(x).dtype.kind


def _integral(*xs) -> bool:
    return all(_kind(x) in "biu" for x in xs)


def _floating(x, op: str) -> None:
    if _kind(x) != "f":
        raise NotImplementedError(f"{op}: not implemented for dtype {np.asarray(x).dtype} "
                                  f"(a floating point tensor is required)")


def _no_int_zero(x, y, op: str) -> None:
    """PyTorch's refusals of an integer division: NotImplementedError for two bool
    operands, RuntimeError for a division by zero (floats give inf/NaN)."""
    if _kind(x) == _kind(y) == "b":
        raise NotImplementedError(f"{op}: not implemented for bool tensors")
    if _integral(x, y) and np.any(np.asarray(y) == 0):
        raise RuntimeError(f"{op}: ZeroDivisionError (integer division by zero)")


def _zeros(g):
    t = np.empty(np.shape(g), np.result_type(g))
    t.fill(0)
    return t


def _zero_formula(g, ans, *inputs, **params):
    """A gradient that is 0 (recorded as a function of g: differentiating it gives 0)."""
    return zeros_of(g)


def _is_bool(x) -> bool:
    return (x.dtype if type(x) is np.ndarray else np.asarray(x).dtype).kind == "b"


def _is_one(alpha) -> bool:
    return alpha == 1 and not isinstance(alpha, (bool, np.bool_))


def _times_alpha(input, other, alpha, op: str):
    """`other * alpha` (add's and sub's `alpha`), with PyTorch's refusals."""
    alpha = weak(raw(alpha))
    if isinstance(alpha, np.ndarray):
        alpha = alpha.item()
    if isinstance(alpha, (bool, np.bool_)) and not (_kind(input) == _kind(other) == "b"):
        raise RuntimeError(f"{op}: Boolean alpha only supported for Boolean results")
    if isinstance(alpha, float) and _integral(input, other):
        raise RuntimeError(f"{op}: For integral input tensors, argument alpha must not be a "
                           f"floating point number, got {alpha!r}")
    return _MUL(other, alpha)


def _alpha_formula(g, ans, input, other, alpha):
    return g if _is_one(alpha) else g * weak(raw(alpha))


def _minus_alpha_formula(g, ans, input, other, alpha):
    return -_alpha_formula(g, None, None, None, alpha)  # (reads neither ans nor inputs)


def _pass(g, ans, *inputs, **params):
    return g


# ---- add, sub, mul, div ---------------------------------------------------------------------
@defop(inputs=("input", "other"), formula=(_pass, _alpha_formula), method=True, promote=True,
       unsaved=("input", "other"))
def add(input: Tensor, other: Tensor, *, alpha=1) -> Tensor:
    """`input + alpha * other`, broadcast (the gradients are summed back to each shape)."""
    if alpha.__class__ is int and alpha == 1 or _is_one(alpha):  # (the default: no call)
        return _ADD(input, other)
    return _ADD(input, _times_alpha(input, other, alpha, "add"))


@defop(inputs=("input", "other"), formula=(_pass, _minus_alpha_formula), method=True,
       aliases=("subtract",), promote=True, unsaved=("input", "other"))
def sub(input: Tensor, other: Tensor, *, alpha=1) -> Tensor:
    """`input - alpha * other`, broadcast (two bool tensors: RuntimeError, as PyTorch)."""
    if _is_bool(input) and _is_bool(other):
        raise RuntimeError("sub: Subtraction, the `-` operator, with two bool tensors is not "
                           "supported; use the `^` or `logical_xor()` operator instead")
    if alpha.__class__ is int and alpha == 1 or _is_one(alpha):  # (the default: no call)
        return _SUB(input, other)
    return _SUB(input, _times_alpha(input, other, alpha, "sub"))


@defop(inputs=("input", "other"),
       formula=(lambda g, ans, input, other: g * other, lambda g, ans, input, other: g * input),
       method=True, aliases=("multiply",), promote=True)
def mul(input: Tensor, other: Tensor) -> Tensor:
    """`input * other`, broadcast."""
    return _MUL(input, other)


def _div_other_kernel(g, ans, input, other, rounding_mode):
    if rounding_mode is not None:
        return _zeros(g)
    t = buf(P.multiply(g, input))   # -g input / other / other: 4 passes, one buffer (not
    t /= other                      # ans: the node keeps no output, so `y /= 2` after
    t /= other                      # `y = a / b` leaves it valid, as PyTorch's)
    return np.negative(t, out=t)


def _div_input(g, ans, input, other, rounding_mode):
    return g / other if rounding_mode is None else zeros_of(g)


def _div_other(g, ans, input, other, rounding_mode):
    return -(g * input) / (other * other) if rounding_mode is None else zeros_of(g)


def _rounded_quotient(x, y, mode: str, op: str):
    """x / y rounded down ("floor", Python's and PyTorch's floor division) or toward zero
    ("trunc"); integers stay integers."""
    x, y = weak(x), weak(y)
    _no_int_zero(x, y, op)
    with np.errstate(divide="ignore", invalid="ignore"):
        if mode == "floor":
            return np.floor_divide(x, y)
        if _integral(x, y):
            q = buf(np.floor_divide(x, y))
            q += (q < 0) & (q * y != x)  # floor to trunc: up by one where inexact
            return q
        return np.trunc(np.true_divide(x, y))  # PyTorch's trunc(a / b)


@defop(inputs=("input", "other"), formula=(_div_input, _div_other),
       kernel=(None, _div_other_kernel), method=True, aliases=("divide",), promote=True)
def div(input: Tensor, other: Tensor, *, rounding_mode: str | None = None) -> Tensor:
    """`input / other` (true division), broadcast; `rounding_mode="trunc"` rounds the
    quotient toward zero, "floor" down (integers stay integers; the gradient is 0)."""
    if rounding_mode is None:
        if _integral(input, other):  # true division of integers: the default dtype
            input, other = promote_operands([input, other], (0, 1), True)
        return _DIV(input, other)
    if rounding_mode not in ("floor", "trunc"):
        raise RuntimeError(f"div: expected rounding_mode to be one of None, 'trunc', or "
                           f"'floor', but found {rounding_mode!r}")
    return _rounded_quotient(input, other, rounding_mode, "div")


@defop(inputs=("input", "other"),
       formula=(lambda g, ans, input, other: g / other,
                lambda g, ans, input, other: -(g * input) / (other * other)),
       kernel=(None, lambda g, ans, input, other: _div_other_kernel(g, None, input, other, None)),
       method=True, promote=True, int_to_float=True)
def true_divide(input: Tensor, other: Tensor) -> Tensor:
    """`input / other`: `div` without a rounding mode (PyTorch's alias)."""
    return _DIV(input, other)


@defop(inputs=("input", "other"), formula=(_zero_formula, _zero_formula), method=True, promote=True)
def floor_divide(input: Tensor, other: Tensor) -> Tensor:
    """`input // other`, rounded down (Python's and PyTorch's floor division). The gradient
    is 0, as div(rounding_mode="floor")'s (PyTorch has none: its backward raises)."""
    return _rounded_quotient(input, other, "floor", "floor_divide")


def _fmod_other(g, ans, input, other):
    return -(g * _rounded_quotient(input, other, "trunc", "fmod"))


def _remainder_other(g, ans, input, other):
    return -(g * _rounded_quotient(input, other, "floor", "remainder"))


@defop(inputs=("input", "other"), formula=(_pass, piecewise(_fmod_other)),
       kernel=(None, _fmod_other), method=True, promote=True)
def fmod(input: Tensor, other: Tensor) -> Tensor:
    """The remainder of truncated division, with the sign of `input` (C's fmod); the
    gradients are g and -g trunc(input / other)."""
    x, y = weak(input), weak(other)
    _no_int_zero(x, y, "fmod")
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.fmod(x, y)


@defop(inputs=("input", "other"), formula=(_pass, piecewise(_remainder_other)),
       kernel=(None, _remainder_other), method=True, promote=True)
def remainder(input: Tensor, other: Tensor) -> Tensor:
    """The remainder of floor division, with the sign of `other` (Python's `%`); the
    gradients are g and -g floor(input / other)."""
    x, y = weak(input), weak(other)
    _no_int_zero(x, y, "remainder")
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.remainder(x, y)


# ---- powers -----------------------------------------------------------------------------------
def _pow_input_kernel(g, ans, input, exponent):
    """y x^(y-1) g; scalar exponents special-cased (at most 3 passes, one buffer)."""
    x, y = input, weak(exponent)
    if type(y) not in (int, float):
        return _pow_input_array(g, ans, x, y)
    if y == 0:                      # d/dx x**0 is 0 even at x == 0
        return P.multiply(g, 0.0)
    if y == 1:
        return P.multiply(g, 1.0)
    if y == 2:                      # 2 passes
        t = buf(P.multiply(x, 2))
        t *= g
        return t
    if y == 3:                      # 3 passes
        t = buf(P.multiply(x, x))
        t *= 3
        t *= g
        return t
    with np.errstate(divide="ignore", invalid="ignore"):
        if y == 0.5:                # 0.5 / sqrt(x), from ans: 2 passes
            t = buf(P.divide(0.5, ans))
        elif y == -1:               # -1 / x**2 = -ans*ans: 3 passes
            t = buf(P.multiply(ans, ans))
            np.negative(t, out=t)
        else:                       # one power: 3 passes
            t = buf(P.power(x, y - 1))
            t *= y
    t *= g
    return t


def _pow_input_chunk(o, g, x, y, zero):
    np.subtract(y, 1, out=o)
    np.power(x, o, out=o)
    o *= y
    np.equal(y, 0, out=zero)
    np.putmask(o, zero, 0)          # 0 where y == 0 (y * x**(y-1) is 0 * inf at x == 0)
    o *= g


def _pow_input_array(g, ans, x, y):
    # a tensor exponent: 6 passes per chunk, a chunk-sized mask
    with np.errstate(divide="ignore", invalid="ignore"):
        return fused(_pow_input_chunk, ans, (g, x, y), (np.bool_,), np.result_type(g, ans))


def _pow_exponent_chunk(o, g, x, y, ans, zero, nonneg):
    np.log(x, out=o)
    o *= ans
    np.equal(x, 0, out=zero)
    np.greater_equal(y, 0, out=nonneg)
    zero &= nonneg
    np.putmask(o, zero, 0)          # PyTorch: 0 where x == 0 and y >= 0 (0**y is flat)
    o *= g


def _pow_exponent_kernel(g, ans, input, exponent):
    # ans * log(x) * g: 7 passes per chunk, two chunk-sized masks
    x = input if isinstance(input, np.ndarray) else np.asarray(weak(input))
    with np.errstate(divide="ignore", invalid="ignore"):
        return fused(_pow_exponent_chunk, ans, (g, x, exponent, ans), (np.bool_, np.bool_),
                     np.result_type(g, ans))


def _pow_input(g, ans, input, exponent):
    """y x^(y-1) g; 0 where y == 0 (0 * inf at x == 0 otherwise)."""
    if isinstance(exponent, Tensor) or np.ndim(exponent):
        flat = raw(exponent) == 0
        return g * where(flat, 0.0, exponent * pow(input, exponent - 1))
    y = weak(exponent)
    if y == 0:
        return g * 0.0
    if y == 1:
        return g * 1.0
    if y == 2:
        return g * (input * 2)
    if y == 3:
        return g * (input * input * 3)
    return g * (pow(input, y - 1) * y)


def _pow_exponent(g, ans, input, exponent):
    """g x^y log(x); 0 where x == 0 and y >= 0 (PyTorch's choice: 0**y is flat there)."""
    flat = (raw(input) == 0) & (raw(exponent) >= 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = g * (ans * log(input))
    return where(flat, 0.0, value) if np.any(flat) else value


@defop(inputs=("input", "exponent"), formula=(_pow_input, _pow_exponent),
       kernel=(_pow_input_kernel, _pow_exponent_kernel), method=True, promote=True)
def pow(input: Tensor, exponent: Tensor) -> Tensor:  # noqa: A001  (PyTorch's name)
    """`input ** exponent`, broadcast (either may be a number). The exponent's gradient is
    g x^y log(x), 0 where x == 0 and y >= 0 (PyTorch's)."""
    x, y = weak(input), weak(exponent)
    if type(x) is np.ndarray and x.dtype.kind == "c":
        return _POW(x, y)  # (a complex base: no bool, integer or cube rule)
    if type(x) is np.ndarray and x.dtype.kind == "f" and not (type(y) is int and y == 3):
        return _POW(x, y)  # (a floating base: no bool or integer rule; the common case)
    if _kind(x) == "b":
        return _bool_pow(x, y)
    if type(y) is int and y == 3 and isinstance(x, np.ndarray) and x.dtype.kind == "f":
        t = buf(P.multiply(x, x))   # x*x*x as PyTorch (libm's pow: ~50 ns an element)
        t *= x
        return t
    if _integral(x, y) and np.any(np.less(y, 0)):
        if np.ndim(y) == 0 and not isinstance(y, np.ndarray):
            raise RuntimeError("pow: Integers to negative integer powers are not allowed")
        return _int_pow(np.asarray(x), np.asarray(y))
    return _POW(x, y)


def _bool_pow(x, y):
    """A bool tensor to a bool number stays bool (PyTorch's: x ** True is x, x ** False is
    True); to a tensor of bools it is NotImplementedError, as PyTorch's."""
    if _kind(y) == "b":
        if isinstance(y, np.ndarray):
            raise NotImplementedError("pow: not implemented for 'Bool' tensors")
        return np.logical_or(x, not y)
    return _POW(x, y)


def _int_pow(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Integer powers with negative exponents in a tensor, as PyTorch computes them
    elementwise: 1 ** -n = 1, (-1) ** -n = +-1, any other base 0 (numpy raises)."""
    negative = y < 0
    power = np.power(x, np.where(negative, 0, y))
    flips = np.where(np.remainder(y, 2) == 0, 1, -1)
    small = np.where(x == 1, 1, np.where(x == -1, flips, 0))
    return np.where(negative, small, power).astype(power.dtype, copy=False)


def _float64(x):
    """`x` in float64: a cast recorded for floating tensors, a new constant otherwise."""
    if isinstance(x, Tensor):
        if x.dtype == np.float64:
            return x
        return cast(x, dtype=np.float64) if x.dtype.kind == "f" \
            else Tensor._wrap(x._data.astype(np.float64))
    if isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool):
        return float(x)
    return np.asarray(x, dtype=np.float64)


@composite(method=True)
def float_power(input, exponent) -> Tensor:
    """`input ** exponent` computed in float64 (the result is float64, as PyTorch's)."""
    return pow(_float64(input), _float64(exponent))


@composite(method=True)
def square(input) -> Tensor:
    """`input * input`: `pow(input, 2)` (PyTorch's definition; the node is pow's)."""
    return pow(input, 2)


@composite(method=True)
def positive(input) -> Tensor:
    """`input` itself (`+x`); a bool tensor is refused, as PyTorch."""
    if _kind(raw(input)) == "b":
        raise RuntimeError("positive: The `+` operator, on a bool tensor is not supported")
    return input


# ---- two-input math ---------------------------------------------------------------------------
def _atan2_recip(input, other):
    """1 / (input^2 + other^2), 0 where that is 0 (the origin, or underflow): PyTorch's
    gradient of atan2 there is 0."""
    d = input * input + other * other
    zero = raw(d) == 0
    return where(zero, 0.0, 1 / where(zero, 1.0, d)) if np.any(zero) else 1 / d


@defop(inputs=("input", "other"),
       formula=(lambda g, ans, input, other: g * other * _atan2_recip(input, other),
                lambda g, ans, input, other: g * -input * _atan2_recip(input, other)),
       method=True, aliases=("arctan2",), quiet=True, promote=True, int_to_float=True)
def atan2(input: Tensor, other: Tensor) -> Tensor:
    """The angle of the point (other, input): arctan(input / other) in the right quadrant;
    the gradient at the origin is 0, as PyTorch's."""
    return np.arctan2(weak(input), weak(other))


@defop(dtypes="floating", inputs=("input", "other"),
       formula=(lambda g, ans, input, other: g * input / ans,
                lambda g, ans, input, other: g * other / ans), method=True, quiet=True,
       promote=True)
def hypot(input: Tensor, other: Tensor) -> Tensor:
    """sqrt(input^2 + other^2) without overflow."""
    return np.hypot(weak(input), weak(other))


@defop(dtypes="inexact", inputs=("input", "other"),
       formula=(lambda g, ans, input, other: g / (exp(other - input) + 1),
                lambda g, ans, input, other: g / (exp(input - other) + 1)),
       method=True, quiet=True, promote=True)
def logaddexp(input: Tensor, other: Tensor) -> Tensor:
    """log(exp(input) + exp(other)), without overflow."""
    return np.logaddexp(weak(input), weak(other))


@defop(dtypes="floating", inputs=("input", "other"),
       formula=(lambda g, ans, input, other: g / (exp2(other - input) + 1),
                lambda g, ans, input, other: g / (exp2(input - other) + 1)),
       method=True, quiet=True, promote=True)
def logaddexp2(input: Tensor, other: Tensor) -> Tensor:
    """log2(2^input + 2^other), without overflow."""
    return np.logaddexp2(weak(input), weak(other))


def _copysign_kernel(g, ans, input, other):
    t = buf(P.divide(ans, input))   # g ans / x, 0 where x == 0 (PyTorch's): 3 passes
    t[np.broadcast_to(np.equal(input, 0), t.shape)] = 0
    t *= g
    return t


@defop(inputs=("input", "other"), formula=(piecewise(_copysign_kernel), _zero_formula),
       kernel=(_copysign_kernel, None), method=True, quiet=True, promote=True, int_to_float=True)
def copysign(input: Tensor, other: Tensor) -> Tensor:
    """|input| with the sign of `other` (-0.0 counts as negative); the gradient is g times
    the sign change (0 where input is 0), and 0 for `other`."""
    return np.copysign(weak(input), weak(other))


@defop(formula=_pass, method=True, quiet=True)
def frac(input: Tensor) -> Tensor:
    """`input - trunc(input)`, the fractional part with input's sign; the gradient is g.
    Integer tensors are refused (NotImplementedError, as PyTorch)."""
    _floating(input, "frac")
    t = buf(np.trunc(input))
    return np.subtract(input, t, out=t)     # inf - inf: NaN, as PyTorch


@defop(method=True)
def signbit(input: Tensor) -> Tensor:
    """True where the sign bit is set (negative numbers, -0.0); a bool tensor."""
    x = np.asarray(input)
    if x.dtype.kind in "bu":
        return np.zeros(x.shape, bool)
    return np.signbit(x) if x.dtype.kind == "f" else np.less(x, 0)


# ---- three-input arithmetic -------------------------------------------------------------------
def _lerp_end(g, ans, input, end, weight):
    return g * weight


@defop(inputs=("input", "end", "weight"),
       formula=(lambda g, ans, input, end, weight: g * (1 - weight), _lerp_end,
                lambda g, ans, input, end, weight: g * (end - input)), method=True)
def lerp(input: Tensor, end: Tensor, weight: Tensor) -> Tensor:
    """`input + weight * (end - input)` (`weight` a number or a tensor, all broadcast),
    with PyTorch's two formulas around |weight| = 0.5 (exact at both ends). No promotion,
    as PyTorch's: `end` and a dimensioned `weight` of another dtype than `input` are a
    RuntimeError; a 0-d or number weight is taken in input's dtype."""
    _floating(input, "lerp")
    x = np.asarray(input)
    for what, v in (("end", end), ("weight", weight)):
        if type(v) is np.ndarray and v.dtype != x.dtype and (what == "end" or v.ndim):
            raise RuntimeError(f"lerp: expected dtype {x.dtype} for `{what}` but got dtype "
                               f"{v.dtype}")
    weight = np.asarray(weight).astype(x.dtype, copy=False)
    diff = np.subtract(end, input)
    small = np.abs(weight) < 0.5
    return np.where(small, input + weight * diff, end - diff * (1 - weight))


@composite(dtypes="numeric", method=True)
def addcmul(input, tensor1, tensor2, *, value=1) -> Tensor:
    """`input + value * tensor1 * tensor2`. With integer operands a float `value` is
    truncated to an integer, as PyTorch casts it to the integer result dtype."""
    if isinstance(value, (float, np.floating)) and _kind(raw(input)) in "iu" \
            and _integral(raw(tensor1), raw(tensor2)):
        value = int(value)
    t1 = tensor1 if _is_one(value) else mul(tensor1, value)
    return add(input, mul(t1, tensor2))


@composite(method=True)
def addcdiv(input, tensor1, tensor2, *, value=1) -> Tensor:
    """`input + value * tensor1 / tensor2` (true division; integer tensor1 and tensor2 are
    refused with PyTorch's RuntimeError)."""
    if _integral(raw(tensor1), raw(tensor2)):
        raise RuntimeError("addcdiv: Integer division with addcdiv is no longer supported: "
                           "give tensor1 or tensor2 a floating point dtype")
    t1 = tensor1 if _is_one(value) else mul(tensor1, value)
    return add(input, div(t1, tensor2))


def _nan_to_num_kernel(g, ans, input, nan, posinf, neginf):
    t = np.isfinite(input, out=empty(np.shape(input), np.result_type(g)))  # 2 passes
    t *= g
    return t


@defop(formula=piecewise(_nan_to_num_kernel), kernel=_nan_to_num_kernel, method=True)
def nan_to_num(input: Tensor, nan: float = 0.0, posinf: float | None = None,
               neginf: float | None = None) -> Tensor:
    """NaN, +inf and -inf replaced by `nan`, `posinf` and `neginf` (defaults: 0, the
    dtype's largest and lowest finite values); the gradient is g where input is finite,
    0 at the replaced places (PyTorch's)."""
    return np.nan_to_num(input, copy=True, nan=nan, posinf=posinf, neginf=neginf)


# ---- selection: maximum, minimum, where, clamp ---------------------------------------------------
def _tie_chunk(o, g, a, b, half, loser):
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
    return fused(lambda o, g, a, b, h: _tie_chunk(o, g, a, b, h, loser), ans,
                 (g, weak(a), weak(b)), (dtype,), dtype)


def _tie_rules(loser):
    def first(g, ans, input, other):
        return _tie_split(g, ans, input, other, loser)

    def second(g, ans, input, other):
        return _tie_split(g, ans, other, input, loser)

    return (first, second), (piecewise(first), piecewise(second))


_MAX_KERNELS, _MAX_FORMULAS = _tie_rules(np.less)
_MIN_KERNELS, _MIN_FORMULAS = _tie_rules(np.greater)


@defop(inputs=("input", "other"), formula=_MAX_FORMULAS, kernel=_MAX_KERNELS, method=True,
       promote=True)
def maximum(input: Tensor, other: Tensor) -> Tensor:
    """The elementwise maximum (NaN wins); on a tie each side gets half the gradient."""
    return _MAX(input, other)


@defop(inputs=("input", "other"), formula=_MIN_FORMULAS, kernel=_MIN_KERNELS, method=True,
       promote=True)
def minimum(input: Tensor, other: Tensor) -> Tensor:
    """The elementwise minimum (NaN wins); on a tie each side gets half the gradient."""
    return _MIN(input, other)


@defop(inputs=("condition", "input", "other"),
       formula=(None, lambda g, ans, condition, input, other: where(condition, g, 0.0),
                lambda g, ans, condition, input, other: where(condition, 0.0, g)),
       method=True, promote=("input", "other"))
def where(condition: Tensor, input: Tensor, other: Tensor) -> Tensor:
    """`input` where `condition` else `other`, the three broadcast (`input` and `other`
    may be numbers); the condition gets no gradient. The method is `x.where(condition,
    y)`, PyTorch's, which is `where(condition, x, y)`. A condition that is not boolean is
    PyTorch's RuntimeError."""
    c = np.asarray(condition)
    if c.dtype != np.bool_:
        raise RuntimeError(f"where: expected condition to be a boolean tensor, but got a "
                           f"tensor with dtype {c.dtype}")
    return np.where(c, weak(input), weak(other))


def _inside(x, lo, hi):
    """The clamp's pass-through mask, PyTorch's: lo <= x <= hi (a missing bound: no test)."""
    keep = np.ones(np.shape(x), bool) if lo is None else np.greater_equal(x, lo)
    return keep if hi is None else keep & np.less_equal(x, hi)


def _bounds_ordered(lo, hi) -> bool:
    return lo is None or hi is None or not np.any(np.greater(lo, hi))


def _clamp_input_kernel(g, ans, input, min, max):
    if _bounds_ordered(min, max):   # then clamp(x) == x exactly where lo <= x <= hi:
        t = np.equal(ans, input, out=empty(np.shape(ans), np.result_type(g, ans)))
        t *= g                      # 2 passes
        return t
    return np.multiply(g, _inside(input, min, max))


def _clamp_min_kernel(g, ans, input, min, max):
    below = np.less(input, min)     # min where x < min (and min < max): PyTorch's
    if max is not None:
        below &= np.less(min, max)
    return np.multiply(g, below)


def _clamp_max_kernel(g, ans, input, min, max):
    above = np.greater(input, max)  # max where x > max, or everywhere max < min
    if min is not None:
        above |= np.less(max, min)
    return np.multiply(g, above)


@defop(inputs=("input", "min", "max"),
       formula=(piecewise(_clamp_input_kernel), piecewise(_clamp_min_kernel),
                piecewise(_clamp_max_kernel)),
       kernel=(_clamp_input_kernel, None, None), method=True, aliases=("clip",), promote=True)
def clamp(input: Tensor, min: Tensor | None = None, max: Tensor | None = None) -> Tensor:
    """`input` clamped to [min, max] (numbers or tensors, broadcast; either may be None;
    min > max gives max). The gradient is g where min <= x <= max, else 0; a tensor bound
    gets it where it is selected (PyTorch's)."""
    if min is None and max is None:
        raise RuntimeError("clamp: At least one of 'min' or 'max' must not be None")
    return np.clip(input, weak(min), weak(max))


def _clamp_one(keep, select):
    """(formulas, kernels) of clamp_min/clamp_max: g to x where `keep(x, bound)`, to the
    bound where `select(x, bound)`."""
    def x_kernel(g, ans, input, bound):
        t = keep(input, bound, out=empty(np.shape(ans), bool))
        return np.multiply(g, t)

    def bound_kernel(g, ans, input, bound):
        return np.multiply(g, select(input, bound))

    return (piecewise(x_kernel), piecewise(bound_kernel)), (x_kernel, None)


# x's gradient where x >= min (x <= max), the bound's where x < min (x > max): neither gets
# it where x or the bound is NaN, as PyTorch's masks
_CLAMP_MIN_FORMULAS, _CLAMP_MIN_KERNELS = _clamp_one(np.greater_equal, np.less)
_CLAMP_MAX_FORMULAS, _CLAMP_MAX_KERNELS = _clamp_one(np.less_equal, np.greater)


@defop(inputs=("input", "min"), formula=_CLAMP_MIN_FORMULAS, kernel=_CLAMP_MIN_KERNELS,
       method=True, promote=True)
def clamp_min(input: Tensor, min: Tensor) -> Tensor:
    """`input` clamped below at `min` (a number or a tensor, broadcast); a tensor bound gets
    the gradient where it is selected (x < min), as PyTorch."""
    return _MAX(input, min)


@defop(inputs=("input", "max"), formula=_CLAMP_MAX_FORMULAS, kernel=_CLAMP_MAX_KERNELS,
       method=True, promote=True)
def clamp_max(input: Tensor, max: Tensor) -> Tensor:
    """`input` clamped above at `max` (a number or a tensor, broadcast); a tensor bound gets
    the gradient where it is selected (x > max)."""
    return _MIN(input, max)
