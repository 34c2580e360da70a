"""Activations: relu, leaky_relu, sigmoid, silu, gelu, softplus, softsign, mish, elu, selu,
celu, hardtanh, hardsigmoid, hardswish, logsigmoid, prelu, glu (`torch.nn.functional`'s,
and `torch`'s where it has them too: relu, sigmoid, selu, celu, prelu; `tanh` is in
ops/pointwise.py).

Each op is one declaration (`primitive.defop`): its numpy forward, its derivative as a
formula (written with the package's ops: differentiable again, for create_graph) and a
fused first-order kernel of the same derivative where it pays: the kernels and forwards
allocate only the array they return (from the caching allocator when large) and reuse it
for their temporaries with `out=`; those that need a second temporary run chunk by chunk
(`_common.fused`, chunk-sized scratch). Each comment counts the passes over memory.

Semantics are PyTorch's, including the gradients at the edges: relu's is 0 at 0;
hardtanh's is 0 at the bounds; softplus is the identity where `beta * x > threshold`;
elu/selu/celu are one kernel (`x > 0 ? scale x : alpha scale expm1(input_scale x)`,
PyTorch's own parametrisation); gelu's exact form uses the normal CDF `ndtr` (fdlibm's
erfc, vectorized), accurate in the lower tail. Piecewise-linear ones (relu, leaky_relu,
hardtanh, hardsigmoid, prelu's input) record their gradient as a function of the input
with derivative 0 (`forms.piecewise`), as PyTorch's threshold_backward does.

`inplace=True` (PyTorch's keyword): these declarations compute out of place; the forms
`nn.functional` exports write the result into the input and rebase its history, as
PyTorch's (ops/writes/inplace.py `inplace_form`).
Integer inputs give float64 results where PyTorch raises (relu keeps integers, as it does).
hardsigmoid's gradient is g times 1/6 rounded to float32 and celu's uses 1 / alpha with
alpha rounded to float32: PyTorch's factors (for float64 too), so the gradients are its.

Thread safety: pure functions of their arguments, like the other ops.
"""
from __future__ import annotations

import math

import numpy as np

from ..grad_mode import is_grad_enabled
from ..primitive import Saved, defop
from ..tensor import Tensor
from . import special
from ._common import P, as_float, buf, dim, empty, fused, raw, weak
from .forms import connect, piecewise, sum_to
from .pointwise import abs, exp, tanh, where
from .shape import concat, getitem, reshape

__all__ = ["relu", "leaky_relu", "sigmoid", "silu", "gelu", "softplus", "softsign", "mish",
           "elu", "selu", "celu", "hardtanh", "hardsigmoid", "hardswish", "logsigmoid",
           "prelu", "glu", "ndtr"]

_F = "torch.nn.functional"
# gelu, silu and leaky_relu were pa's functions and Tensor methods before they were
# declared here: kept (PyTorch has them in torch.nn.functional only)
_KEPT = ("torch",)
_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
_KAPPA = 0.044715


def _number(op: str, value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{op}: {what} must be a number, got {value!r}")
    return float(value)


# ---- relu, leaky_relu ----------------------------------------------------------------------------
def _relu_kernel(g, ans, input, inplace=False):
    # g where not x <= 0 (PyTorch's threshold_backward: NaN passes g): 3 passes
    t = np.less_equal(input, 0, out=empty(np.shape(input), np.result_type(g, input)))
    np.subtract(1, t, out=t)
    t *= g
    return t


@defop(formula=piecewise(_relu_kernel), kernel=_relu_kernel, module=_F, also=("torch",),
       method=True)
def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """`max(x, 0)`; the gradient is 0 where x <= 0 (at 0 too), g elsewhere (NaN included),
    as PyTorch's. Integers stay integers; a bool tensor is refused (RuntimeError, as
    PyTorch). `inplace`: see the module docstring."""
    if np.asarray(input).dtype.kind == "b":
        raise RuntimeError("relu: Boolean inputs not supported for relu")
    return P.maximum(input, 0)


def _leaky_chunk(o, g, x, positive, slope):
    np.greater(x, 0, out=positive)
    np.multiply(g, slope, out=o)
    np.putmask(o, positive, g)


def _leaky_relu_kernel(g, ans, input, negative_slope, inplace=False):
    s = weak(negative_slope)
    if 0 <= s <= 1:                 # factor max(x > 0, slope): 1 or slope. 3 passes
        t = np.greater(input, 0, out=empty(np.shape(input), np.result_type(g, input)))
        np.maximum(t, s, out=t)
        t *= g
        return t
    return fused(lambda o, g, x, m: _leaky_chunk(o, g, x, m, s), g, (g, input), (np.bool_,),
                 np.result_type(g, input))


@defop(formula=piecewise(_leaky_relu_kernel), kernel=_leaky_relu_kernel, module=_F,
       dtypes="floating",
       also=_KEPT, method=True)
def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """x where x > 0, else negative_slope * x. `inplace`: see the module docstring."""
    # where(x > 0, x, slope x) without a mask: slope x is the larger of the two exactly
    # where x <= 0 when slope <= 1 (the smaller when slope > 1). 2 passes.
    s = weak(negative_slope)
    t = buf(P.multiply(input, s))
    return (np.maximum if s <= 1 else np.minimum)(t, input, out=t)


# ---- sigmoid, silu, logsigmoid -------------------------------------------------------------------
def _sigmoid_array(x):
    # 1 / (1 + exp(-x)), PyTorch's formula; exp overflows to inf for x < -709, giving
    # the exact limit 0. 4 passes, one buffer.
    t = buf(P.negative(as_float(x)))
    with np.errstate(over="ignore"):
        np.exp(t, out=t)
    t += 1
    return np.divide(1, t, out=t)


def _sigmoid_kernel(g, ans, input):
    t = buf(P.subtract(1, ans))    # g (1 - ans) ans, PyTorch's order: 3 passes
    t *= g
    t *= ans
    return t


@defop(formula=lambda g, ans, input: g * (1 - ans) * ans, kernel=_sigmoid_kernel,
       also=(_F,), method=True, int_to_float=True)
def sigmoid(input: Tensor) -> Tensor:
    """`1 / (1 + exp(-x))`; the gradient is g (1 - y) y."""
    return _sigmoid_array(input)


def _silu_chunk(o, g, x, s):
    np.negative(x, out=s)
    np.exp(s, out=s)
    s += 1
    np.divide(1, s, out=s)          # sigmoid(x)
    np.subtract(1, s, out=o)
    o *= x
    o += 1
    o *= s
    o *= g                          # g s (1 + x (1 - s))


def _silu_kernel(g, ans, input, inplace=False):
    # 9 passes per chunk, one chunk-sized scratch array
    with np.errstate(over="ignore"):
        return fused(_silu_chunk, input, (g, input), (input.dtype,),
                     np.result_type(g, input))


def _silu_formula(g, ans, input, inplace=False):
    s = sigmoid(input)
    return g * (s * (1 + input * (1 - s)))


@defop(formula=_silu_formula, kernel=_silu_kernel, module=_F, also=_KEPT, method=True,
       dtypes="inexact")
def silu(input: Tensor, inplace: bool = False) -> Tensor:
    """`x * sigmoid(x)` (SiLU, swish). `inplace`: see the module docstring."""
    # x / (1 + exp(-x)), PyTorch's formula: 4 passes, one buffer
    x = as_float(input)
    t = buf(P.negative(x))
    with np.errstate(over="ignore"):
        np.exp(t, out=t)
    t += 1
    return np.divide(x, t, out=t)


def _logsigmoid_chunk(o, x, s):
    np.abs(x, out=o)
    np.negative(o, out=o)
    np.exp(o, out=o)
    np.log1p(o, out=o)
    np.minimum(x, 0, out=s)
    np.subtract(s, o, out=o)        # min(x, 0) - log1p(exp(-|x|)), PyTorch's stable form


def _logsigmoid_kernel(g, ans, input):
    # g sigmoid(-x) = g / (1 + exp(x)) (0 where exp overflows: the limit): 3 passes
    with np.errstate(over="ignore"):
        t = buf(P.exp(input))
    t += 1
    return np.divide(g, t, out=t)


@defop(formula=lambda g, ans, input: g * sigmoid(-input), kernel=_logsigmoid_kernel,
       dtypes="floating",
       module=_F)
def logsigmoid(input: Tensor) -> Tensor:
    """log(sigmoid(x)), computed without overflow."""
    x = as_float(input)             # 6 passes a chunk, one chunk-sized scratch
    return fused(_logsigmoid_chunk, x, (x,), (x.dtype,))


# ---- gelu ----------------------------------------------------------------------------------------
def _phi(x):
    """The standard normal density, with ops."""
    return exp(x * x * -0.5) * _INV_SQRT_2PI


@defop(formula=lambda g, ans, input: g * _phi(input), export=False)
def ndtr(input: Tensor) -> Tensor:
    """The standard normal CDF, 0.5 erfc(-x / sqrt 2) (`special.ndtr`); its derivative is
    the density."""
    return special.ndtr(as_float(input))


def _gelu_tanh(x):
    # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), PyTorch's order: 9 passes, one buffer
    t = buf(P.multiply(x, x))
    t *= x
    t *= _KAPPA
    t += x
    t *= _SQRT_2_OVER_PI
    np.tanh(t, out=t)
    t += 1
    t *= x
    t *= 0.5
    return t


def _gelu_tanh_chunk(o, g, x, th, d):
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


def _gelu_kernel(g, ans, input, cdf, approximate):
    if approximate == "tanh":       # 19 passes per chunk, two chunk-sized scratch arrays
        return fused(_gelu_tanh_chunk, input, (g, input), (input.dtype, input.dtype),
                     np.result_type(g, input))
    t = buf(P.multiply(input, input))  # g (cdf + x phi(x)): 7 passes, one buffer
    t *= -0.5
    np.exp(t, out=t)
    t *= input
    t *= _INV_SQRT_2PI
    t += cdf
    t *= g
    return t


def _gelu_tanh_slope(x):
    # d/dx 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
    t = tanh((x + x * x * x * _KAPPA) * _SQRT_2_OVER_PI)
    du = (x * x * (3 * _KAPPA) + 1) * _SQRT_2_OVER_PI
    return (t + 1) * 0.5 + x * (1 - t * t) * du * 0.5


def _gelu_formula(g, ans, input, approximate):
    if approximate == "tanh":
        return g * _gelu_tanh_slope(input)
    return g * (ndtr(input) + input * _phi(input))   # d/dx x ndtr(x)


@defop(formula=_gelu_formula, kernel=_gelu_kernel, module=_F, also=_KEPT, method=True,
       dtypes="floating")
def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """GELU: x ndtr(x); `approximate="tanh"` is PyTorch's tanh form.

    The exact form's CDF is `special.ndtr` (fdlibm's erfc, vectorized): 0.5 erfc(-x/sqrt 2),
    which keeps its accuracy in the lower tail; float32 inputs are computed in float32
    (fdlibm's single-precision method), the kernel's temporaries too. It is saved for
    the kernel; without grad mode the output is written over it (one array allocated)."""
    x = as_float(input)
    if approximate == "tanh":
        return Saved(_gelu_tanh(x), None)
    if approximate != "none":
        raise RuntimeError(f"gelu: approximate argument must be either none or tanh, got "
                           f"{approximate!r}")
    cdf = special.ndtr(x, fast=True)    # float32 in float32 (6 ulp): special.ndtr
    if not is_grad_enabled():
        return np.multiply(x, cdf, out=cdf)
    return Saved(P.multiply(x, cdf), cdf)


# ---- softplus, softsign, mish ------------------------------------------------------------------
def _softplus_chunk(o, x, beta, threshold, linear):
    np.multiply(x, beta, out=o)
    np.greater(o, threshold, out=linear)
    np.exp(o, out=o)
    np.log1p(o, out=o)
    o /= beta
    np.putmask(o, linear, x)        # x where beta x > threshold


def _softplus_kernel_chunk(o, g, x, beta, threshold, linear):
    np.multiply(x, -beta, out=o)
    np.less(o, -threshold, out=linear)  # -(beta x) < -threshold: beta x > threshold, exactly
    np.exp(o, out=o)
    o += 1
    np.divide(g, o, out=o)          # g sigmoid(beta x) (0 where exp overflows: the limit)
    np.putmask(o, linear, g)


def _softplus_kernel(g, ans, input, beta, threshold):
    # 6 passes a chunk, a chunk-sized mask
    beta, threshold = float(beta), float(threshold)
    return fused(_softplus_kernel_chunk, input, (g, input, beta, threshold), (np.bool_,),
                 np.result_type(g, input))


def _softplus_formula(g, ans, input, beta, threshold):
    linear = raw(input) * beta > threshold
    return where(linear, g, g * sigmoid(input * beta))


@defop(dtypes="floating", formula=_softplus_formula, kernel=_softplus_kernel, module=_F, quiet=True)
def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (PyTorch's)."""
    beta = _number("softplus", beta, "beta")
    threshold = _number("softplus", threshold, "threshold")
    x = as_float(input)             # 6 passes a chunk
    return fused(_softplus_chunk, x, (x, beta, threshold), (np.bool_,))


def _softsign_kernel(g, ans, input):
    t = buf(P.abs(input))           # g / (1 + |x|)^2: 4 passes
    t += 1
    t *= t
    return np.divide(g, t, out=t)


def _softsign_formula(g, ans, input):
    d = abs(input) + 1
    return g / (d * d)


@defop(dtypes="numeric", formula=_softsign_formula, kernel=_softsign_kernel, module=_F)
def softsign(input: Tensor) -> Tensor:
    """x / (1 + |x|)."""
    x = as_float(input)
    t = buf(P.abs(x))               # 3 passes
    t += 1
    return np.divide(x, t, out=t)


def _mish_kernel_chunk(o, g, x, t, s):
    np.exp(x, out=t)
    np.log1p(t, out=t)
    np.tanh(t, out=t)               # t = tanh(softplus(x))
    np.negative(x, out=s)
    np.exp(s, out=s)
    s += 1
    np.divide(1, s, out=s)          # s = sigmoid(x)
    np.multiply(t, t, out=o)
    np.subtract(1, o, out=o)
    o *= s
    o *= x
    o += t
    o *= g                          # g (t + x s (1 - t^2)), PyTorch's formula


def _mish_kernel(g, ans, input, inplace=False):
    # 14 passes a chunk, two chunk-sized scratch arrays
    return fused(_mish_kernel_chunk, input, (g, input), (input.dtype, input.dtype),
                 np.result_type(g, input))


def _mish_formula(g, ans, input, inplace=False):
    t = tanh(softplus(input))
    return g * (t + input * sigmoid(input) * (1 - t * t))


@defop(dtypes="floating", formula=_mish_formula, kernel=_mish_kernel, module=_F, quiet=True)
def mish(input: Tensor, inplace: bool = False) -> Tensor:
    """x tanh(softplus(x)). `inplace`: see the module docstring."""
    x = as_float(input)             # 4 passes, one buffer
    out = empty(x.shape, x.dtype)
    np.exp(x, out=out)
    np.log1p(out, out=out)
    np.tanh(out, out=out)
    out *= x
    return out


# ---- elu, selu, celu: PyTorch's one parametrised kernel ------------------------------------------
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _elu_chunk(o, x, alpha, scale, input_scale, s):
    np.minimum(x, 0, out=o)
    if input_scale != 1:
        o *= input_scale
    np.expm1(o, out=o)
    o *= alpha * scale              # 0 where x > 0 (expm1(0) = 0) ...
    np.maximum(x, 0, out=s)
    if scale != 1:
        s *= scale
    o += s                          # ... where scale x is added: exact on both sides


def _elu(x, alpha, scale, input_scale):
    # x > 0 ? scale x : alpha scale expm1(input_scale x): 5-7 passes a chunk, one scratch
    x = as_float(x)
    with np.errstate(over="ignore"):
        return fused(_elu_chunk, x, (x, alpha, scale, input_scale), (x.dtype,))


def _elu_kernel_chunk(o, g, x, alpha, scale, input_scale, positive):
    np.minimum(x, 0, out=o)
    if input_scale != 1:
        o *= input_scale
    np.exp(o, out=o)
    o *= input_scale * alpha * scale
    np.less_equal(x, 0, out=positive)
    np.logical_not(positive, out=positive)
    np.putmask(o, positive, scale)  # scale where not x <= 0 (NaN too, as PyTorch)
    o *= g


def _elu_kernel(g, x, alpha, scale, input_scale):
    # g (x <= 0 ? alpha scale input_scale exp(input_scale x) : scale): 7-8 passes a chunk
    return fused(_elu_kernel_chunk, x, (g, x, alpha, scale, input_scale), (np.bool_,),
                 np.result_type(g, x))


def _elu_formula(g, x, alpha, scale, input_scale):
    positive = ~(raw(x) <= 0)
    negative_part = where(positive, 0.0, x)  # no exp overflow on the unused side
    slope = where(positive, scale, exp(negative_part * input_scale) *
                  (input_scale * alpha * scale))
    return g * slope


@defop(formula=lambda g, ans, input, alpha, inplace: _elu_formula(g, input, alpha, 1.0, 1.0),
       dtypes="floating",
       kernel=lambda g, ans, input, alpha, inplace: _elu_kernel(g, input, alpha, 1.0, 1.0),
       module=_F)
def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """x where x > 0, else alpha (exp(x) - 1). `inplace`: see the module docstring."""
    return _elu(input, _number("elu", alpha, "alpha"), 1.0, 1.0)


@defop(dtypes="floating", formula=lambda g, ans, input, inplace: _elu_formula(g, input, _SELU_ALPHA,
                                                           _SELU_SCALE, 1.0),
       kernel=lambda g, ans, input, inplace: _elu_kernel(g, input, _SELU_ALPHA, _SELU_SCALE,
                                                         1.0),
       module=_F, also=("torch",))
def selu(input: Tensor, inplace: bool = False) -> Tensor:
    """scale * elu(x, alpha) with PyTorch's fixed alpha ~ 1.6733 and scale ~ 1.0507
    (self-normalizing). `inplace`: see the module docstring."""
    return _elu(input, _SELU_ALPHA, _SELU_SCALE, 1.0)


def _celu_scale(alpha) -> float:
    """1 / alpha as PyTorch's celu backward has it: alpha rounded to float32 first
    (derivatives.yaml: `1.0 / alpha.toFloat()`), so that the gradients are PyTorch's."""
    return 1.0 / float(np.float32(alpha))


@defop(dtypes="floating",
       formula=lambda g, ans, input, alpha, inplace: _elu_formula(g, input, alpha, 1.0,
                                                                  _celu_scale(alpha)),
       kernel=lambda g, ans, input, alpha, inplace: _elu_kernel(g, input, alpha, 1.0,
                                                                _celu_scale(alpha)),
       module=_F, also=("torch",))
def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """x where x > 0, else alpha (exp(x / alpha) - 1); alpha 0 is refused (RuntimeError,
    as PyTorch). The gradient is PyTorch's, whose 1 / alpha is rounded to float32 (a
    relative difference of ~1e-7 from the exact one). `inplace`: see the module docstring."""
    alpha = _number("celu", alpha, "alpha")
    if alpha == 0:
        raise RuntimeError("celu: ZeroDivisionError: alpha cannot be 0 for CELU")
    return _elu(input, alpha, 1.0, 1.0 / alpha)


# ---- hardtanh, hardsigmoid, hardswish -----------------------------------------------------------
def _hardtanh_chunk(o, g, x, min_val, max_val, out, above):
    np.less_equal(x, min_val, out=out)
    np.greater_equal(x, max_val, out=above)
    out |= above
    np.copyto(o, g)
    np.putmask(o, out, 0)           # 0 at and beyond the bounds (NaN passes g: PyTorch)


def _hardtanh_kernel(g, ans, input, min_val, max_val, inplace=False):
    # 5 passes a chunk, two chunk-sized masks
    return fused(_hardtanh_chunk, input, (g, input, float(min_val), float(max_val)),
                 (np.bool_, np.bool_), np.result_type(g, input))


@defop(dtypes="real", formula=piecewise(_hardtanh_kernel), kernel=_hardtanh_kernel, module=_F)
def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0,
             inplace: bool = False) -> Tensor:
    """x clamped to [min_val, max_val]; the gradient is 1 strictly inside, 0 at the bounds
    and beyond (PyTorch). Integer input stays integer, the limits truncated to integers
    (PyTorch's; negative limits on an unsigned input: RuntimeError). `inplace`: see the
    module docstring."""
    lo = _number("hardtanh", min_val, "min_val")
    hi = _number("hardtanh", max_val, "max_val")
    if lo > hi:
        raise ValueError(f"hardtanh: min_val ({lo}) cannot be greater than max_val ({hi})")
    if np.asarray(input).dtype.kind in "iu":
        x = np.asarray(input)
        if x.dtype.kind == "u" and (lo < 0 or hi < 0):
            raise RuntimeError("cannot do hardtanh on an unsigned type with negative limits")
        return np.clip(x, int(lo), int(hi)).astype(x.dtype, copy=False)
    x = as_float(input)
    return np.clip(x, lo, hi, out=empty(x.shape, x.dtype))  # 1 pass


# PyTorch's hardsigmoid_backward multiplies by 1/6 rounded to float32 (`1.0f / 6.0f`), also
# for float64: its value, so that the gradients are PyTorch's
_ONE_SIXTH = float(np.float32(1.0) / np.float32(6.0))


def _hardsigmoid_chunk(o, g, x, inside):
    np.greater(x, -3, out=o)
    np.less(x, 3, out=inside)
    o *= inside
    o *= g
    o *= _ONE_SIXTH                 # g / 6 on (-3, 3), else 0


def _hardsigmoid_kernel(g, ans, input, inplace=False):
    # 5 passes a chunk, a chunk-sized mask
    return fused(_hardsigmoid_chunk, input, (g, input), (np.bool_,),
                 np.result_type(g, input))


@defop(formula=piecewise(_hardsigmoid_kernel), kernel=_hardsigmoid_kernel, module=_F,
       dtypes="floating")
def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    """relu6(x + 3) / 6. `inplace`: see the module docstring."""
    t = buf(P.add(as_float(input), 3))  # min(max(x + 3, 0), 6) / 6: 3 passes
    np.clip(t, 0, 6, out=t)
    t /= 6
    return t


def _hardswish_chunk(o, g, x, m):
    np.divide(x, 3, out=o)
    o += 0.5
    o *= g                          # g (x / 3 + 1/2) on (-3, 3)
    np.less_equal(x, -3, out=m)
    np.putmask(o, m, 0)             # 0 at -3 and below
    np.less(x, 3, out=m)
    np.logical_not(m, out=m)
    np.putmask(o, m, g)             # g at 3 and above (and for NaN), as PyTorch


def _hardswish_kernel(g, ans, input, inplace=False):
    # 8 passes a chunk, a chunk-sized mask
    return fused(_hardswish_chunk, input, (g, input), (np.bool_,), np.result_type(g, input))


def _hardswish_formula(g, ans, input, inplace=False):
    x = raw(input)
    return g * where(x <= -3, 0.0, where(x < 3, input / 3 + 0.5, 1.0))


@defop(dtypes="floating", formula=_hardswish_formula, kernel=_hardswish_kernel, module=_F)
def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    """x relu6(x + 3) / 6. `inplace`: see the module docstring."""
    x = as_float(input)
    t = buf(P.add(x, 3))            # x min(max(x + 3, 0), 6) / 6: 4 passes
    np.clip(t, 0, 6, out=t)
    t *= x
    t /= 6
    return t


# ---- prelu: a learnable slope per channel -----------------------------------------------------
def _channel_shape(ndim: int, w) -> tuple:
    """The shape that broadcasts a PReLU weight over an input of `ndim` dimensions: one
    value everywhere, or one per channel (dimension 1)."""
    if np.size(w) == 1:
        return ()
    return (np.size(w),) + (1,) * (ndim - 2)


def _prelu_chunk(o, x, w, positive):
    np.multiply(x, w, out=o)
    np.greater(x, 0, out=positive)
    np.putmask(o, positive, x)      # x > 0 ? x : w x (PyTorch)


def _prelu_input_chunk(o, g, x, w, positive):
    np.multiply(g, w, out=o)
    np.greater(x, 0, out=positive)
    np.putmask(o, positive, g)


def _prelu_input_kernel(g, ans, input, weight):
    # g where x > 0, else w g: 3 passes a chunk, a chunk-sized mask
    wb = np.reshape(weight, _channel_shape(np.ndim(input), weight))
    return fused(_prelu_input_chunk, input, (g, input, wb), (np.bool_,),
                 np.result_type(g, input, weight))


def _prelu_weight_kernel(g, ans, input, weight):
    # sum of g x where x <= 0 (min(x, 0) g) over all but the channels: 2 passes and the
    # sum's, one full-size temporary
    t = buf(P.minimum(input, 0))
    t *= g
    if np.size(weight) == 1:
        return np.reshape(t.sum(), np.shape(weight))
    return np.reshape(t.sum(axis=(0,) + tuple(range(2, t.ndim))), np.shape(weight))


def _prelu_input(g, ans, input, weight):
    shape = _channel_shape(np.ndim(raw(input)), raw(weight))
    wb = reshape(weight, shape) if isinstance(weight, Tensor) else np.reshape(weight, shape)
    return connect(where(raw(input) > 0, g, g * wb), input)   # piecewise in x: derivative 0


def _prelu_weight(g, ans, input, weight):
    x, w = raw(input), raw(weight)
    t = where(x > 0, 0.0, input * g)   # summed over all but the channels
    return reshape(sum_to(t, _channel_shape(x.ndim, w)), np.shape(w))


@defop(dtypes="floating", inputs=("input", "weight"), formula=(_prelu_input, _prelu_weight),
       kernel=(_prelu_input_kernel, _prelu_weight_kernel), module=_F, also=("torch",),
       method=True)
def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """x where x > 0, else weight * x, with `weight` one value or one per channel
    (dimension 1 of the input); a wrong weight raises PyTorch's RuntimeError."""
    x, w = np.asarray(input), np.asarray(weight)
    if w.ndim > 1:
        raise RuntimeError(f"prelu: Expected `weight` to be a scalar or 1D tensor, but got: "
                           f"ndim = {w.ndim}")
    channels = x.shape[1] if x.ndim >= 2 else 1
    if w.size not in (1, channels):
        raise RuntimeError(f"prelu: Mismatch of parameter numbers and input channel size. "
                           f"Found parameter numbers = {w.size} and channel size = "
                           f"{channels} (dimension 1 of the input of shape {x.shape})")
    if isinstance(weight, (Tensor, np.ndarray)) and w.dtype != x.dtype:   # PyTorch: refused
        raise RuntimeError(f"prelu: Type promoting not supported. Got {x.dtype} and "
                           f"{w.dtype}")
    wb = np.reshape(w, _channel_shape(x.ndim, w))
    return fused(_prelu_chunk, x, (x, wb), (np.bool_,), np.result_type(x, w))  # 3 passes


# ---- glu: gated linear unit ---------------------------------------------------------------------
def _halves(d: int, h: int) -> tuple:
    lead = (slice(None),) * d
    return lead + (slice(0, h),), lead + (slice(h, 2 * h),)


def _glu_dim(x: np.ndarray, d) -> int:
    if x.ndim == 0:
        raise RuntimeError("glu: glu does not support scalars because halving size must be "
                           "even")
    k = dim(d, x.ndim, "glu")
    if x.shape[k] % 2:
        raise RuntimeError(f"glu: Halving dimension must be even, but dimension {k} is size "
                           f"{x.shape[k]}")
    return k


def _glu_kernel(g, ans, input, dim):
    # [g s, g a s (1 - s)] with s = sigmoid(b), written into the two halves of the result:
    # 9 passes over a half, no temporary
    ia, ib = _halves(dim % input.ndim, input.shape[dim] // 2)
    out = empty(input.shape, np.result_type(g, input))
    s, gb = out[ia], out[ib]
    np.negative(input[ib], out=s)
    with np.errstate(over="ignore"):
        np.exp(s, out=s)
    s += 1
    np.divide(1, s, out=s)
    np.subtract(1, s, out=gb)
    gb *= s
    gb *= input[ia]
    gb *= g
    s *= g
    return out


def _glu_formula(g, ans, input, dim):
    x = raw(input)
    ia, ib = _halves(dim % x.ndim, x.shape[dim] // 2)
    a, s = getitem(input, ia), sigmoid(getitem(input, ib))
    return concat([g * s, g * a * s * (1 - s)], axis=dim)


@defop(dtypes="floating", formula=_glu_formula, kernel=_glu_kernel, module=_F)
def glu(input: Tensor, dim: int = -1) -> Tensor:
    """a * sigmoid(b), where a and b are the two halves of the input along `dim` (whose
    size must be even: RuntimeError otherwise, as PyTorch)."""
    x = as_float(input)
    ia, ib = _halves(_glu_dim(x, dim), x.shape[dim] // 2)
    t = _sigmoid_array(x[ib])       # a sigmoid(b): 5 passes over a half, one buffer
    t *= x[ia]
    return t
