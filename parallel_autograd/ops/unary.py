"""Unary math ops (tan ... trunc) and the activations of `nn.functional` (softplus ... glu).

Each op is one node with a fast numpy rule and, on the rule, its differentiable twin
(`rule.graph(g, ans, *inputs, **kwargs)`, written with the package's ops) for
`create_graph=True`, as in `ops/graph.py`. The conventions of `ops/elementwise.py` hold:
a forward or rule allocates only the array it returns (from the caching allocator when
large) and reuses it for its temporaries with `out=`; rules that need a second temporary
run chunk by chunk (`elementwise._fused`, chunk-sized scratch). Each comment counts the
passes over memory.

Semantics are PyTorch's, including the gradients at the edges: sign/floor/ceil/round/trunc
have gradient 0; hardtanh's is 0 at the bounds; softplus is the identity where
`beta * x > threshold`; elu/selu/celu are one kernel (`x > 0 ? scale x : alpha scale
expm1(input_scale x)`, PyTorch's own parametrisation). Deliberate difference:
hardsigmoid's gradient is exactly g / 6 (PyTorch multiplies by 1/6 rounded to float32).

Thread safety: pure functions of their arguments, like the other ops.
"""
from __future__ import annotations

import math

import numpy as np

from ..memory import empty as _empty
from ..memory import pooled as P
from ..primitive import primitive
from ..tensor import Tensor
from . import elementwise as E
from . import reduce as R
from . import shape as S
from . import special
from .graph import _piecewise, connect
from .scan import _dim

__all__ = [
    "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log1p",
    "expm1", "log2", "log10", "exp2", "erf", "erfc", "reciprocal", "rsqrt", "square", "sign",
    "floor", "ceil", "round", "trunc", "softplus", "softsign", "mish", "elu", "selu", "celu",
    "hardtanh", "hardsigmoid", "hardswish", "logsigmoid", "prelu", "glu",
]

_buf, _fused, _float = E._buf, E._fused, E._float
_LN2 = math.log(2.0)
_LN10 = math.log(10.0)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _raw(x):
    return x.data if isinstance(x, Tensor) else np.asarray(x)


def _quiet(fn):
    """`fn` with numpy's divide/invalid/overflow warnings off: outside an op's domain the
    result is inf or NaN, as in PyTorch, which does not warn either."""
    def quiet(*args, **kwargs):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return fn(*args, **kwargs)
    quiet.__name__ = quiet.__qualname__ = getattr(fn, "__name__", "quiet")
    return quiet


def _op(name: str, forward, rule, twin, doc: str, quiet: bool = False):
    """A one-input op: `primitive(name, forward, rule)` with `twin` as the rule's
    differentiable form and `doc` as its docstring."""
    if quiet:
        forward, rule = _quiet(forward), _quiet(rule)
    rule.graph = twin
    op = primitive(name, forward, rule)
    op.__doc__ = doc
    return op


from .pointwise import (acos, acosh, asin, asinh, atan, atanh, ceil, cosh, erf, erfc,  # noqa: E402,F401,I001  MIGRATION
                        exp2, expm1, floor, log1p, log2, log10, reciprocal, round, rsqrt,
                        sign, sinh, square, tan, trunc)




# ---- activations -------------------------------------------------------------------------
def _check_float(name: str, value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: {what} must be a number, got {value!r}")
    return float(value)


def _softplus_kernel(o, x, beta, threshold, linear):
    np.multiply(x, beta, out=o)
    np.greater(o, threshold, out=linear)
    np.exp(o, out=o)
    np.log1p(o, out=o)
    o /= beta
    np.putmask(o, linear, x)        # x where beta x > threshold


def _softplus(x, beta, threshold):
    # log1p(exp(beta x)) / beta, x where beta x > threshold (PyTorch): 6 passes a chunk
    x = _float(x)
    with np.errstate(over="ignore"):
        return _fused(_softplus_kernel, x, (x, beta, threshold), (np.bool_,))


def _softplus_vjp_kernel(o, g, x, beta, threshold, linear):
    np.multiply(x, -beta, out=o)
    np.less(o, -threshold, out=linear)  # -(beta x) < -threshold: beta x > threshold, exactly
    np.exp(o, out=o)
    o += 1
    np.divide(g, o, out=o)          # g sigmoid(beta x) (0 where exp overflows: the limit)
    np.putmask(o, linear, g)


def _softplus_vjp(g, ans, x, beta, threshold):
    # 6 passes a chunk, a chunk-sized mask
    with np.errstate(over="ignore"):
        return _fused(_softplus_vjp_kernel, x, (g, x, beta, threshold), (np.bool_,),
                      np.result_type(g, x))


def _softplus_twin(g, ans, x, beta, threshold):
    linear = _raw(x) * beta > threshold
    return E.where(linear, g, g * E.sigmoid(x * beta))


_softplus_vjp.graph = _softplus_twin
_softplus_op = primitive("softplus", _softplus, _softplus_vjp)


def softplus(input, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (PyTorch's
    `nn.functional.softplus`)."""
    beta = _check_float("softplus", beta, "beta")
    threshold = _check_float("softplus", threshold, "threshold")
    if beta == 0:
        raise ValueError("softplus: beta must be nonzero")
    return _softplus_op(input, beta=beta, threshold=threshold)


def _softsign(x):
    x = _float(x)
    t = _buf(P.abs(x))              # x / (1 + |x|): 3 passes
    t += 1
    return np.divide(x, t, out=t)


def _softsign_vjp(g, ans, x):
    t = _buf(P.abs(x))              # g / (1 + |x|)^2: 4 passes
    t += 1
    t *= t
    return np.divide(g, t, out=t)


def _softsign_twin(g, ans, x):
    d = E.abs(x) + 1
    return g / (d * d)


_softsign_vjp.graph = _softsign_twin
_softsign_op = primitive("softsign", _softsign, _softsign_vjp)


def softsign(input) -> Tensor:
    """x / (1 + |x|)."""
    return _softsign_op(input)


def _mish_kernel(o, x):
    np.exp(x, out=o)
    np.log1p(o, out=o)
    np.tanh(o, out=o)
    o *= x                          # x tanh(softplus(x)), PyTorch's formula


def _mish(x):
    # 4 passes (one buffer, no scratch: the kernel runs whole)
    x = _float(x)
    out = _empty(x.shape, x.dtype)
    with np.errstate(over="ignore"):
        _mish_kernel(out, x)
    return out


def _mish_vjp_kernel(o, g, x, t, s):
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


def _mish_vjp(g, ans, x):
    # 14 passes a chunk, two chunk-sized scratch arrays
    with np.errstate(over="ignore"):
        return _fused(_mish_vjp_kernel, x, (g, x), (x.dtype, x.dtype), np.result_type(g, x))


def _mish_twin(g, ans, x):
    t = E.tanh(softplus(x))
    return g * (t + x * E.sigmoid(x) * (1 - t * t))


_mish_vjp.graph = _mish_twin
_mish_op = primitive("mish", _mish, _mish_vjp)


def mish(input, inplace: bool = False) -> Tensor:
    """x tanh(softplus(x)). `inplace` is accepted for PyTorch's signature; the result is
    computed out of place."""
    return _mish_op(input)


# elu, selu and celu: PyTorch's one parametrised kernel
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _elu_kernel(o, x, alpha, scale, input_scale, s):
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
    x = _float(x)
    with np.errstate(over="ignore"):
        return _fused(_elu_kernel, x, (x, alpha, scale, input_scale), (x.dtype,))


def _elu_vjp_kernel(o, g, x, alpha, scale, input_scale, positive):
    np.minimum(x, 0, out=o)
    if input_scale != 1:
        o *= input_scale
    np.exp(o, out=o)
    o *= input_scale * alpha * scale
    np.less_equal(x, 0, out=positive)
    np.logical_not(positive, out=positive)
    np.putmask(o, positive, scale)  # scale where not x <= 0 (NaN too, as PyTorch)
    o *= g


def _elu_vjp(g, ans, x, alpha, scale, input_scale):
    # g (x <= 0 ? alpha scale input_scale exp(input_scale x) : scale): 7-8 passes a chunk
    return _fused(_elu_vjp_kernel, x, (g, x, alpha, scale, input_scale), (np.bool_,),
                  np.result_type(g, x))


def _elu_twin(g, ans, x, alpha, scale, input_scale):
    positive = ~(_raw(x) <= 0)
    negative_part = E.where(positive, 0.0, x)  # no exp overflow on the unused side
    slope = E.where(positive, scale,
                    E.exp(negative_part * input_scale) * (input_scale * alpha * scale))
    return g * slope


_elu_vjp.graph = _elu_twin
_elu_ops = {name: primitive(name, _elu, _elu_vjp) for name in ("elu", "selu", "celu")}


def elu(input, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """x where x > 0, else alpha (exp(x) - 1). `inplace` is accepted for PyTorch's
    signature; the result is computed out of place."""
    alpha = _check_float("elu", alpha, "alpha")
    return _elu_ops["elu"](input, alpha=alpha, scale=1.0, input_scale=1.0)


def selu(input, inplace: bool = False) -> Tensor:
    """scale * elu(x, alpha) with PyTorch's fixed alpha ~ 1.6733 and scale ~ 1.0507
    (self-normalizing). `inplace`: accepted, computed out of place."""
    return _elu_ops["selu"](input, alpha=_SELU_ALPHA, scale=_SELU_SCALE, input_scale=1.0)


def celu(input, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """x where x > 0, else alpha (exp(x / alpha) - 1); alpha must be nonzero.
    `inplace`: accepted, computed out of place."""
    alpha = _check_float("celu", alpha, "alpha")
    if alpha == 0:
        raise ValueError("celu: alpha must be nonzero (it divides x)")
    return _elu_ops["celu"](input, alpha=alpha, scale=1.0, input_scale=1.0 / alpha)


def _hardtanh_vjp_kernel(o, g, x, min_val, max_val, out, above):
    np.less_equal(x, min_val, out=out)
    np.greater_equal(x, max_val, out=above)
    out |= above
    np.copyto(o, g)
    np.putmask(o, out, 0)           # 0 at and beyond the bounds (NaN passes g: PyTorch)


def _hardtanh_vjp(g, ans, x, min_val, max_val):
    # 5 passes a chunk, two chunk-sized masks
    return _fused(_hardtanh_vjp_kernel, x, (g, x, min_val, max_val), (np.bool_, np.bool_),
                  np.result_type(g, x))


def _hardtanh(x, min_val, max_val):
    x = _float(x)
    return np.clip(x, min_val, max_val, out=_empty(x.shape, x.dtype))  # 1 pass


_hardtanh_vjp.graph = _piecewise(_hardtanh_vjp)
_hardtanh_op = primitive("hardtanh", _hardtanh, _hardtanh_vjp)


def hardtanh(input, min_val: float = -1.0, max_val: float = 1.0,
             inplace: bool = False) -> Tensor:
    """x clamped to [min_val, max_val]; the gradient is 1 strictly inside, 0 at the bounds
    and beyond (PyTorch). `inplace`: accepted, computed out of place."""
    lo = _check_float("hardtanh", min_val, "min_val")
    hi = _check_float("hardtanh", max_val, "max_val")
    if lo > hi:
        raise ValueError(f"hardtanh: min_val ({lo}) cannot be greater than max_val ({hi})")
    return _hardtanh_op(input, min_val=lo, max_val=hi)


def _hardsigmoid(x):
    x = _float(x)
    t = _buf(P.add(x, 3))           # min(max(x + 3, 0), 6) / 6: 3 passes
    np.clip(t, 0, 6, out=t)
    t /= 6
    return t


def _hardsigmoid_vjp_kernel(o, g, x, inside):
    np.greater(x, -3, out=o)
    np.less(x, 3, out=inside)
    o *= inside
    o *= g
    o /= 6                          # g / 6 on (-3, 3), else 0


def _hardsigmoid_vjp(g, ans, x):
    # 5 passes a chunk, a chunk-sized mask
    return _fused(_hardsigmoid_vjp_kernel, x, (g, x), (np.bool_,), np.result_type(g, x))


_hardsigmoid_vjp.graph = _piecewise(_hardsigmoid_vjp)
_hardsigmoid_op = primitive("hardsigmoid", _hardsigmoid, _hardsigmoid_vjp)


def hardsigmoid(input, inplace: bool = False) -> Tensor:
    """relu6(x + 3) / 6. `inplace`: accepted, computed out of place."""
    return _hardsigmoid_op(input)


def _hardswish(x):
    x = _float(x)
    t = _buf(P.add(x, 3))           # x min(max(x + 3, 0), 6) / 6: 4 passes
    np.clip(t, 0, 6, out=t)
    t *= x
    t /= 6
    return t


def _hardswish_vjp_kernel(o, g, x, m):
    np.divide(x, 3, out=o)
    o += 0.5
    o *= g                          # g (x / 3 + 1/2) on (-3, 3)
    np.less_equal(x, -3, out=m)
    np.putmask(o, m, 0)             # 0 at -3 and below
    np.less(x, 3, out=m)
    np.logical_not(m, out=m)
    np.putmask(o, m, g)             # g at 3 and above (and for NaN), as PyTorch


def _hardswish_vjp(g, ans, x):
    # 8 passes a chunk, a chunk-sized mask
    return _fused(_hardswish_vjp_kernel, x, (g, x), (np.bool_,), np.result_type(g, x))


def _hardswish_twin(g, ans, x):
    xd = _raw(x)
    slope = E.where(xd <= -3, 0.0, E.where(xd < 3, x / 3 + 0.5, 1.0))
    return g * slope


_hardswish_vjp.graph = _hardswish_twin
_hardswish_op = primitive("hardswish", _hardswish, _hardswish_vjp)


def hardswish(input, inplace: bool = False) -> Tensor:
    """x relu6(x + 3) / 6. `inplace`: accepted, computed out of place."""
    return _hardswish_op(input)


def _logsigmoid_kernel(o, x, s):
    np.abs(x, out=o)
    np.negative(o, out=o)
    np.exp(o, out=o)
    np.log1p(o, out=o)
    np.minimum(x, 0, out=s)
    np.subtract(s, o, out=o)        # min(x, 0) - log1p(exp(-|x|)), PyTorch's stable form


def _logsigmoid(x):
    # 6 passes a chunk, one chunk-sized scratch
    x = _float(x)
    return _fused(_logsigmoid_kernel, x, (x,), (x.dtype,))


def _logsigmoid_vjp(g, ans, x):
    # g sigmoid(-x) = g / (1 + exp(x)) (0 where exp overflows: the limit): 3 passes
    with np.errstate(over="ignore"):
        t = _buf(P.exp(x))
    t += 1
    return np.divide(g, t, out=t)


_logsigmoid_vjp.graph = lambda g, ans, x: g * E.sigmoid(-x)
_logsigmoid_op = primitive("logsigmoid", _logsigmoid, _logsigmoid_vjp)


def logsigmoid(input) -> Tensor:
    """log(sigmoid(x)), computed without overflow."""
    return _logsigmoid_op(input)


# ---- prelu: a learnable slope per channel ---------------------------------------------------
def _channel_shape(ndim: int, w) -> tuple:
    """The shape that broadcasts a PReLU weight over an input of `ndim` dimensions: one
    value everywhere, or one per channel (dimension 1)."""
    if np.size(w) == 1:
        return ()
    return (np.size(w),) + (1,) * (ndim - 2)


def _prelu_kernel(o, x, w, positive):
    np.multiply(x, w, out=o)
    np.greater(x, 0, out=positive)
    np.putmask(o, positive, x)      # x > 0 ? x : w x (PyTorch)


def _prelu(x, w):
    # 3 passes a chunk, a chunk-sized mask
    wb = np.reshape(w, _channel_shape(np.ndim(x), w))
    return _fused(_prelu_kernel, x, (x, wb), (np.bool_,), np.result_type(x, w))


def _prelu_x_kernel(o, g, x, w, positive):
    np.multiply(g, w, out=o)
    np.greater(x, 0, out=positive)
    np.putmask(o, positive, g)


def _prelu_vjp_x(g, ans, x, w):
    # g where x > 0, else w g: 3 passes a chunk, a chunk-sized mask
    wb = np.reshape(w, _channel_shape(np.ndim(x), w))
    return _fused(_prelu_x_kernel, x, (g, x, wb), (np.bool_,), np.result_type(g, x, w))


def _prelu_vjp_w(g, ans, x, w):
    # sum of g x where x <= 0 (min(x, 0) g) over all but the channels: 2 passes and the
    # sum's, one full-size temporary
    t = _buf(P.minimum(x, 0))
    t *= g
    if np.size(w) == 1:
        return np.reshape(t.sum(), np.shape(w))
    return np.reshape(t.sum(axis=(0,) + tuple(range(2, t.ndim))), np.shape(w))


def _prelu_twin_x(g, ans, x, w):
    positive = _raw(x) > 0
    wb = S.reshape(w, _channel_shape(np.ndim(_raw(x)), _raw(w))) if isinstance(w, Tensor) \
        else np.reshape(w, _channel_shape(np.ndim(_raw(x)), w))
    return connect(E.where(positive, g, g * wb), x)   # piecewise in x: derivative 0


def _prelu_twin_w(g, ans, x, w):
    xd = _raw(x)
    t = E.where(xd > 0, 0.0, E.mul(x, g))
    axes = None if np.size(_raw(w)) == 1 else (0,) + tuple(range(2, xd.ndim))
    return S.reshape(R.sum(t, axis=axes), np.shape(_raw(w)))


_prelu_vjp_x.graph = _prelu_twin_x
_prelu_vjp_w.graph = _prelu_twin_w
_prelu_op = primitive("prelu", _prelu, _prelu_vjp_x, _prelu_vjp_w)


def prelu(input, weight) -> Tensor:
    """x where x > 0, else weight * x, with `weight` one value or one per channel
    (dimension 1 of the input; PyTorch's `prelu`)."""
    x, w = _raw(input), _raw(weight)
    if w.ndim > 1:
        raise ValueError(f"prelu: weight must be 0-d or 1-d, got shape {w.shape}")
    channels = x.shape[1] if x.ndim >= 2 else 1
    if w.size not in (1, channels):
        raise ValueError(f"prelu: weight has {w.size} values; expected 1 or the number of "
                         f"channels (dimension 1 of the input of shape {x.shape}): "
                         f"{channels}")
    return _prelu_op(input, weight)


# ---- glu: gated linear unit ---------------------------------------------------------------
def _halves(dim: int, h: int) -> tuple:
    lead = (slice(None),) * dim
    return lead + (slice(0, h),), lead + (slice(h, 2 * h),)


def _glu(x, dim):
    # a sigmoid(b): 5 passes over a half (sigmoid's 4, the product), one buffer
    ia, ib = _halves(dim, x.shape[dim] // 2)
    t = E._sigmoid(x[ib])
    t *= x[ia]
    return t


def _glu_vjp(g, ans, x, dim):
    # [g s, g a s (1 - s)] with s = sigmoid(b), written into the two halves of the result:
    # 9 passes over a half, no temporary
    ia, ib = _halves(dim, x.shape[dim] // 2)
    out = _empty(x.shape, np.result_type(g, x))
    s, gb = out[ia], out[ib]
    np.negative(x[ib], out=s)
    with np.errstate(over="ignore"):
        np.exp(s, out=s)
    s += 1
    np.divide(1, s, out=s)
    np.subtract(1, s, out=gb)
    gb *= s
    gb *= x[ia]
    gb *= g
    s *= g
    return out


def _glu_twin(g, ans, x, dim):
    ia, ib = _halves(dim, x.shape[dim] // 2)
    a, s = S.getitem(x, ia), E.sigmoid(S.getitem(x, ib))
    return S.concat([g * s, g * a * s * (1 - s)], axis=dim)


_glu_vjp.graph = _glu_twin
_glu_op = primitive("glu", _glu, _glu_vjp)


def glu(input, dim: int = -1) -> Tensor:
    """a * sigmoid(b), where a and b are the two halves of the input along `dim`
    (whose size must be even)."""
    x = _raw(input)
    if x.ndim == 0:
        raise ValueError("glu: a 0-d tensor cannot be halved")
    d = _dim("glu", x.ndim, dim)
    if x.shape[d] % 2:
        raise ValueError(f"glu: halving dimension must be even, but dimension {dim} has "
                         f"size {x.shape[d]}")
    return _glu_op(input, dim=d)
