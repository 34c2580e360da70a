"""Elementwise arithmetic with PyTorch's names and semantics: `add sub` (with `alpha`),
`div` (with `rounding_mode`), `true_divide floor_divide fmod remainder atan2 hypot
float_power frac sgn signbit clamp_min clamp_max addcmul addcdiv lerp nan_to_num`, and the
`//` and `%` operators.

Gradients are PyTorch's (its derivatives.yaml), each rule with its differentiable twin
(`rule.graph`) so `create_graph=True` works through all of them:
- fmod and remainder: g for x; -g trunc(x / y) (fmod) or -g floor(x / y) (remainder) for y;
- div with a rounding mode, and floor_divide: 0 (PyTorch's div(rounding_mode=...); its
  floor_divide has no derivative at all: here it is the same op, with gradient 0);
- atan2: g y / (x^2 + y^2) and -g x / (x^2 + y^2); hypot: g x / hypot, g y / hypot;
- frac: g; float_power: pow's, computed in float64 (the result is float64, as PyTorch);
- clamp_min / clamp_max with a tensor bound that requires grad: g to x where x >= min
  (x <= max), to the bound elsewhere; a bound that does not is `clamp`'s;
- lerp: g (1 - w), g w, g (end - start); nan_to_num: g where x is finite, else 0.
Forwards follow PyTorch's formulas where they differ from the obvious one (lerp's two
branches around |w| = 0.5; floor division rounds as Python's, as numpy's does).

Integer division by zero (fmod, remainder, floor or trunc division) raises
ZeroDivisionError naming the method (PyTorch raises RuntimeError("ZeroDivisionError")).

Thread safety: pure functions of their arguments, like the other ops.
"""
from __future__ import annotations

import numpy as np

from ..primitive import primitive
from ..tensor import Tensor
from . import elementwise as E
from . import unary as U
from .graph import _piecewise, cast

__all__ = ["add", "sub", "div", "true_divide", "floor_divide", "fmod", "remainder", "atan2",
           "hypot", "float_power", "frac", "sgn", "signbit", "clamp_min", "clamp_max",
           "addcmul", "addcdiv", "lerp", "nan_to_num", "METHODS"]

_weak = E._weak


def _raw(x):
    return x.data if isinstance(x, Tensor) else x


def _kind(x) -> str:
    return np.asarray(_raw(x)).dtype.kind


def _integral(*xs) -> bool:
    return all(_kind(x) in "biu" for x in xs)


def _need_float(x, op: str) -> None:
    if _kind(x) != "f":
        raise TypeError(f"{op}: expected a floating point tensor, got dtype "
                        f"{np.asarray(_raw(x)).dtype}")


def _zero(g, ans, *_, **__):
    """The gradient of a piecewise-constant op: 0 (recorded as a function of g)."""
    t = np.empty(np.shape(g), np.result_type(g))
    t.fill(0)
    return t


_zero.graph = lambda g, *_, **__: E.where(np.True_, 0.0, g)


def _no_int_zero(x, y, op: str) -> None:
    if _integral(x, y) and np.any(np.asarray(y) == 0):
        raise ZeroDivisionError(f"{op}: integer division by zero")


# ---- add, sub, div --------------------------------------------------------------------------
def _scaled(input, other, alpha, op: str):
    """`alpha * other` (other itself for alpha 1); PyTorch's TypeError for a float alpha
    with integer tensors."""
    if isinstance(alpha, Tensor):
        alpha = alpha.item()
    if alpha == 1 and not isinstance(alpha, bool):
        return other
    if isinstance(alpha, (float, np.floating)) and _integral(input, other):
        raise TypeError(f"{op}: for integral input tensors, alpha must not be a floating "
                        f"point number, got {alpha!r}")
    return E.mul(other, alpha) if isinstance(other, Tensor) else np.multiply(other, alpha)


def add(input, other, *, alpha=1) -> Tensor:
    """`input + alpha * other` (PyTorch's `add`)."""
    return E.add(input, _scaled(input, other, alpha, "add"))


def sub(input, other, *, alpha=1) -> Tensor:
    """`input - alpha * other` (PyTorch's `sub`)."""
    return E.sub(input, _scaled(input, other, alpha, "sub"))


def _floor_div_forward(x, y, op):
    x, y = _weak(x), _weak(y)
    _no_int_zero(x, y, op)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.floor_divide(x, y)     # Python's rounding, as PyTorch's div_floor


def _trunc_div_forward(x, y, op):
    x, y = _weak(x), _weak(y)
    _no_int_zero(x, y, op)
    with np.errstate(divide="ignore", invalid="ignore"):
        if _integral(x, y):
            q = E._buf(np.floor_divide(x, y))
            q += (q < 0) & (q * y != x)  # floor to trunc: up by one where inexact
            return q
        return np.trunc(np.true_divide(x, y))  # PyTorch's trunc(a / b)


_floor_div = primitive("div_floor", _floor_div_forward, _zero, _zero)
_trunc_div = primitive("div_trunc", _trunc_div_forward, _zero, _zero)


def div(input, other, *, rounding_mode: str | None = None) -> Tensor:
    """`input / other`; `rounding_mode="trunc"` rounds the quotient toward zero, "floor"
    down (integers stay integers; the gradient is 0, as PyTorch)."""
    if rounding_mode is None:
        return E.div(input, other)
    if rounding_mode == "floor":
        return _floor_div(input, other, op="div")
    if rounding_mode == "trunc":
        return _trunc_div(input, other, op="div")
    raise ValueError(f"div: expected rounding_mode to be one of None, 'trunc', or 'floor', "
                     f"but found {rounding_mode!r}")


def true_divide(input, other) -> Tensor:
    """`input / other` (true division; PyTorch's alias of `div`)."""
    return E.div(input, other)


def floor_divide(input, other) -> Tensor:
    """`input // other`, rounded down (Python's and PyTorch's floor division); gradient 0."""
    return _floor_div(input, other, op="floor_divide")


# ---- fmod, remainder --------------------------------------------------------------------------
def _fmod_forward(x, y, op):
    x, y = _weak(x), _weak(y)
    _no_int_zero(x, y, op)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.fmod(x, y)


def _remainder_forward(x, y, op):
    x, y = _weak(x), _weak(y)
    _no_int_zero(x, y, op)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.remainder(x, y)


def _fmod_y(g, ans, x, y, op):
    return np.negative(np.multiply(g, _trunc_div_forward(x, y, op)))


def _remainder_y(g, ans, x, y, op):
    return np.negative(np.multiply(g, _floor_div_forward(x, y, op)))


def _pass(g, ans, x, y, op):
    return g


_pass.graph = _pass
_fmod_y.graph = _piecewise(_fmod_y)
_remainder_y.graph = _piecewise(_remainder_y)
_fmod = primitive("fmod", _fmod_forward, _pass, _fmod_y)
_remainder = primitive("remainder", _remainder_forward, _pass, _remainder_y)


def fmod(input, other) -> Tensor:
    """The remainder of truncated division, with the sign of `input` (C's fmod)."""
    return _fmod(input, other, op="fmod")


def remainder(input, other) -> Tensor:
    """The remainder of floor division, with the sign of `other` (Python's `%`)."""
    return _remainder(input, other, op="remainder")


# ---- atan2, hypot, float_power, frac -----------------------------------------------------------
def _atan2_x(g, ans, x, y):
    r = np.reciprocal(np.add(np.multiply(x, x), np.multiply(y, y)))  # PyTorch's order
    return np.multiply(np.multiply(g, y), r)


def _atan2_y(g, ans, x, y):
    r = np.reciprocal(np.add(np.multiply(x, x), np.multiply(y, y)))
    return np.multiply(np.multiply(g, np.negative(x)), r)


_atan2_x.graph = lambda g, ans, x, y: g * y * (1 / (x * x + y * y))
_atan2_y.graph = lambda g, ans, x, y: g * -x * (1 / (x * x + y * y))
_atan2 = primitive("atan2", lambda x, y: np.arctan2(_weak(x), _weak(y)), _atan2_x, _atan2_y)


def _hypot_rule(i):
    def rule(g, ans, x, y):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.divide(np.multiply(g, (x, y)[i]), ans)

    rule.graph = lambda g, ans, x, y: g * (x, y)[i] / ans
    return rule


_hypot = primitive("hypot", lambda x, y: np.hypot(_weak(x), _weak(y)), _hypot_rule(0),
                   _hypot_rule(1))


def atan2(input, other) -> Tensor:
    """The angle of the point (other, input): arctan(input / other) in the right quadrant."""
    return _atan2(input, other)


def hypot(input, other) -> Tensor:
    """sqrt(input^2 + other^2) without overflow."""
    return _hypot(input, other)


def _float64(x):
    if isinstance(x, Tensor):
        if x.dtype == np.float64:
            return x
        return cast(x, dtype=np.float64) if x.dtype.kind == "f" \
            else Tensor._wrap(x.data.astype(np.float64))
    if isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool):
        return float(x)
    return np.asarray(x, dtype=np.float64)


def float_power(input, exponent) -> Tensor:
    """`input ** exponent` computed in float64 (the result is float64, as PyTorch)."""
    return E.pow(_float64(input), _float64(exponent))


def _frac(x):
    t = E._buf(np.trunc(x))
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, as PyTorch
        return np.subtract(x, t, out=t)


def _frac_vjp(g, ans, x):
    return g


_frac_vjp.graph = _frac_vjp
_frac_op = primitive("frac", _frac, _frac_vjp)


def frac(input) -> Tensor:
    """`input - trunc(input)`, the fractional part with input's sign; the gradient is g."""
    _need_float(input, "frac")
    return _frac_op(input)


def sgn(input) -> Tensor:
    """The sign (-1, 0, 1; 0 for NaN) of a real tensor: `sign` (PyTorch's `sgn`)."""
    return U.sign(input)


def signbit(input) -> Tensor:
    """True where the sign bit is set (negative numbers, -0.0); a bool tensor."""
    try:
        return Tensor._wrap(np.asarray(np.signbit(_raw(input))))
    except TypeError as e:
        raise TypeError(f"signbit: {e}") from None


# ---- clamp_min, clamp_max ------------------------------------------------------------------------
def _bound_rules(keep):
    """(x's rule, bound's rule): g to x where `keep(x, bound)`, to the bound elsewhere."""
    def x_rule(g, ans, x, b):
        return np.multiply(g, keep(x, b))

    def b_rule(g, ans, x, b):
        return np.multiply(g, ~keep(x, b))

    x_rule.graph, b_rule.graph = _piecewise(x_rule), _piecewise(b_rule)
    return x_rule, b_rule


_clamp_min_t = primitive("clamp_min", lambda x, b: np.maximum(x, b),
                         *_bound_rules(np.greater_equal))
_clamp_max_t = primitive("clamp_max", lambda x, b: np.minimum(x, b),
                         *_bound_rules(np.less_equal))


def clamp_min(input, min) -> Tensor:
    """`input` clamped below at `min` (a number or a tensor, broadcast). A tensor bound
    that requires grad gets the gradient where it is selected (x < min), as PyTorch."""
    if isinstance(min, Tensor) and min.requires_grad:
        return _clamp_min_t(input, min)
    return E.clip(input, min=min)


def clamp_max(input, max) -> Tensor:
    """`input` clamped above at `max` (a number or a tensor, broadcast); a tensor bound that
    requires grad gets the gradient where it is selected (x > max)."""
    if isinstance(max, Tensor) and max.requires_grad:
        return _clamp_max_t(input, max)
    return E.clip(input, max=max)


# ---- addcmul, addcdiv, lerp, nan_to_num ---------------------------------------------------------
def addcmul(input, tensor1, tensor2, *, value=1) -> Tensor:
    """`input + value * tensor1 * tensor2`."""
    t1 = tensor1 if value == 1 else E.mul(tensor1, value)
    return E.add(input, E.mul(t1, tensor2))


def addcdiv(input, tensor1, tensor2, *, value=1) -> Tensor:
    """`input + value * tensor1 / tensor2` (true division; integer tensor1 and tensor2
    are refused, as PyTorch)."""
    if _integral(tensor1, tensor2):
        raise TypeError("addcdiv: integer division is not supported: give tensor1 or "
                        "tensor2 a floating point dtype")
    t1 = tensor1 if value == 1 else E.mul(tensor1, value)
    return E.add(input, E.div(t1, tensor2))


def _lerp(start, end, weight):
    diff = np.subtract(end, start)
    small = np.abs(weight) < 0.5           # PyTorch's two formulas, for accuracy
    return np.where(small, start + weight * diff, end - diff * (1 - np.asarray(weight)))


def _lerp_start(g, ans, start, end, weight):
    return np.multiply(g, np.subtract(1, weight))


def _lerp_weight(g, ans, start, end, weight):
    return np.multiply(g, np.subtract(end, start))


def _lerp_end(g, ans, start, end, weight):
    return np.multiply(g, weight)


_lerp_start.graph = lambda g, ans, start, end, weight: g * (1 - weight)
_lerp_end.graph = lambda g, ans, start, end, weight: g * weight
_lerp_weight.graph = lambda g, ans, start, end, weight: g * (end - start)
_lerp_op = primitive("lerp", _lerp, _lerp_start, _lerp_end, _lerp_weight)


def lerp(input, end, weight) -> Tensor:
    """`input + weight * (end - input)` (`weight` a number or a tensor, all broadcast);
    gradients g (1 - weight), g weight and g (end - input)."""
    _need_float(input, "lerp")
    return _lerp_op(input, end, _weak(weight))


def _nan_to_num_vjp(g, ans, x, nan, posinf, neginf):
    t = np.isfinite(x).astype(np.result_type(g))
    t *= g
    return t


_nan_to_num_vjp.graph = _piecewise(_nan_to_num_vjp)
_nan_to_num = primitive("nan_to_num", lambda x, nan, posinf, neginf: np.nan_to_num(
    x, copy=True, nan=nan, posinf=posinf, neginf=neginf), _nan_to_num_vjp)


def nan_to_num(input, nan: float = 0.0, posinf: float | None = None,
               neginf: float | None = None) -> Tensor:
    """NaN, +inf and -inf replaced by `nan`, `posinf` and `neginf` (defaults: 0, the
    dtype's largest and lowest finite values); the gradient is g where input is finite,
    0 at the replaced places (PyTorch's)."""
    return _nan_to_num(input, nan=nan, posinf=posinf, neginf=neginf)


METHODS = {
    "add": add, "sub": sub, "subtract": sub, "mul": E.mul, "multiply": E.mul, "div": div,
    "divide": div, "true_divide": true_divide, "floor_divide": floor_divide, "fmod": fmod,
    "remainder": remainder, "atan2": atan2, "arctan2": atan2, "hypot": hypot,
    "float_power": float_power, "frac": frac, "sgn": sgn, "signbit": signbit,
    "clamp_min": clamp_min, "clamp_max": clamp_max, "addcmul": addcmul, "addcdiv": addcdiv,
    "lerp": lerp, "nan_to_num": nan_to_num,
    "__floordiv__": floor_divide, "__rfloordiv__": lambda a, b: floor_divide(b, a),
    "__mod__": remainder, "__rmod__": lambda a, b: remainder(b, a),
}
