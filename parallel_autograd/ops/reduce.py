"""Reductions and the softmax family, one declaration per op (`primitive.defop`): sum mean
var std var_mean std_mean norm amax amin max min argmax argmin logsumexp softmax
log_softmax. (prod, the scans and the sorting selections are in `ops/scan.py`.)

Signatures and semantics are PyTorch's: `dim` (None or (): every dimension; an int or a
tuple), `keepdim`, `dtype=` (sum, mean, norm, softmax), `correction=`/`unbiased=` (var, std:
unbiased by default). numpy's `axis=`/`keepdims=` are accepted as aliases. A dimension out
of range is an IndexError, a repeated one a RuntimeError; a 0-d tensor has the one
dimension 0 (or -1). `max(x, dim)` / `min(x, dim)` return `(values, indices)`
(`return_types`), `max(x)` the maximum over all elements, `max(x, other)` the elementwise
maximum, as PyTorch's overloads.

Gradients follow PyTorch's formulas, including its choices where the derivative is not
unique: amax, amin and max()/min() over all elements split g evenly among ties; where the
result is NaN, max()/min() give it to the NaNs and amax/amin NaN to the whole slice;
max/min along a dim give it to the index they return (a gather, `gather_along`, whose rule
is a scatter, `scatter_along`, whose rule is the gather again: every order runs these two
kernels); std and the 2-norm are 0 where the result is 0.

Each op declares its derivative once as a formula (ops, differentiable again); the fused
numpy kernels kept beside them allocate only the array they return (their comments count
passes over memory; tests/test_lean_rules.py checks them) or, for sum and mean, nothing
but a view.

Thread safety: pure functions of their arguments, like the other ops.
"""
from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import numpy as np

from ..primitive import composite, defop
from ..tensor import Tensor
from . import _common
from . import pointwise as PW
from . import shape as S
from ._common import (
    P,
    accumulate_dtype,
    array,
    as_dtype,
    as_float,
    buf,
    empty,
    kept_shape,
    raw,
    reduction_dims,
    row_blocks,
)
from ._common import dim as one_dim
from .forms import cast, depends_on, expand_to

__all__ = ["sum", "mean", "var", "std", "var_mean", "std_mean", "norm", "amax", "amin",
           "max", "min", "argmax", "argmin", "logsumexp", "softmax", "log_softmax",
           "max_all", "min_all", "gather_along", "scatter_along", "share_ties", "kept",
           "nonempty_dim", "return_types"]


class return_types:  # noqa: N801  (PyTorch's name: torch.return_types)
    """PyTorch's `torch.return_types`: the (values, indices) NamedTuples of the ops that
    return both, named by the op. Indices are int64 tensors without gradient."""

    max = NamedTuple("max", [("values", Tensor), ("indices", Tensor)])
    min = NamedTuple("min", [("values", Tensor), ("indices", Tensor)])
    sort = NamedTuple("sort", [("values", Tensor), ("indices", Tensor)])
    topk = NamedTuple("topk", [("values", Tensor), ("indices", Tensor)])
    kthvalue = NamedTuple("kthvalue", [("values", Tensor), ("indices", Tensor)])
    median = NamedTuple("median", [("values", Tensor), ("indices", Tensor)])
    cummax = NamedTuple("cummax", [("values", Tensor), ("indices", Tensor)])
    cummin = NamedTuple("cummin", [("values", Tensor), ("indices", Tensor)])


# ---- helpers ---------------------------------------------------------------------------------
def _shape(x) -> tuple:
    return np.shape(raw(x))


def kept(g, shape: tuple, dims):
    """A reduced gradient (over `dims` of an input of `shape`) reshaped with an op to
    broadcast against the input, for formulas (recorded)."""
    return S.reshape(g, kept_shape(shape, dims))


def _count(shape: tuple, dims) -> int:
    """The number of elements each result reduces."""
    return math.prod(shape) if dims is None else math.prod(shape[d] for d in dims)


def _nonempty(name: str, x: np.ndarray, dims, everything=RuntimeError,
              one=IndexError) -> None:
    """PyTorch refuses to reduce an empty dimension (`one`) or, with no dim, an empty
    tensor (`everything`) for the ops that have no identity (max, amax, argmax, ...)."""
    if dims is None:
        if x.size == 0:
            raise everything(f"{name}(): Expected reduction dim to be specified for "
                             f"input.numel() == 0. Specify the reduction dim with the 'dim' "
                             f"argument.")
        return
    for d in dims:
        nonempty_dim(name, x, d, one)


def nonempty_dim(name: str, x: np.ndarray, d: int, error=IndexError) -> None:
    """PyTorch's refusal to reduce the empty dimension `d` of `x` (IndexError naming the
    op) in the ops that have no identity (max, median, kthvalue, ...)."""
    if x.ndim and x.shape[d] == 0:
        raise error(f"{name}(): Expected reduction dim {d} to have non-zero size.")


def _reduced_shape(shape: tuple, dims, keepdim: bool) -> tuple:
    """The shape of a reduction's result."""
    if keepdim:
        return kept_shape(shape, dims)
    return () if dims is None else tuple(n for i, n in enumerate(shape) if i not in dims)


# A warning's stacklevel from a helper of an op's forward to the caller of the op: helper,
# forward, OpDef.__call__, the generated function, the caller (a quiet op: one more, its
# wrapper).
_CALLER = 5


def _zeros(shape: tuple, dtype) -> np.ndarray:
    t = empty(shape, dtype)
    t.fill(0)
    return t


# ---- sum, mean ---------------------------------------------------------------------------------
def _sum_kernel(g, ans, input, dim, keepdim, dtype):
    shape = np.shape(input)         # g broadcast back: a view, no pass
    dims = reduction_dims(dim, len(shape), "sum")
    return np.broadcast_to(np.reshape(g, kept_shape(shape, dims)), shape)


def _sum_formula(g, ans, input, dim, keepdim, dtype):
    shape = _shape(input)
    return expand_to(kept(g, shape, reduction_dims(dim, len(shape), "sum")), shape)


@defop(formula=_sum_formula, kernel=_sum_kernel, method=True)
def sum(input: Tensor, dim=None, keepdim: bool = False, *,  # noqa: A001  (PyTorch's name)
        dtype=None) -> Tensor:
    """The sum over `dim` (None or (): all; an int or a tuple); integers and booleans sum
    in int64, `dtype` converts the input first. The gradient is g broadcast back."""
    x = np.asarray(input)
    dims = reduction_dims(dim, x.ndim, "sum")
    return np.sum(x, axis=dims, keepdims=bool(keepdim), dtype=accumulate_dtype(x, dtype, "sum"))


def _mean_kernel(g, ans, input, dim, keepdim, dtype):
    shape = np.shape(input)         # g / n broadcast back: one pass over the reduced g
    dims = reduction_dims(dim, len(shape), "mean")
    n = _count(shape, dims)
    if n == 0:                       # the input is empty
        return _zeros(shape, np.result_type(g, input))
    return np.broadcast_to(np.reshape(g, kept_shape(shape, dims)) / n, shape)


def _mean_formula(g, ans, input, dim, keepdim, dtype):
    shape = _shape(input)
    dims = reduction_dims(dim, len(shape), "mean")
    n = _count(shape, dims)
    return expand_to(kept(g, shape, dims) / n if n else kept(g, shape, dims) * 0, shape)


@defop(formula=_mean_formula, kernel=_mean_kernel, method=True)
def mean(input: Tensor, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """The mean over `dim` (None or (): all; an int or a tuple), NaN over nothing. As in
    PyTorch, an integer tensor needs `dtype=` (the dtype the mean is computed in)."""
    x = np.asarray(input)
    if dtype is None and x.dtype.kind not in "fc":
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be "
                           f"either a floating point or complex dtype. Got: {x.dtype}")
    dt = None if dtype is None else as_dtype(dtype, "mean")
    dims = reduction_dims(dim, x.ndim, "mean")
    if x.size == 0:                  # numpy would warn "mean of empty slice"
        return np.full(_reduced_shape(x.shape, dims, bool(keepdim)), np.nan, dt or x.dtype)
    return np.mean(x, axis=dims, keepdims=bool(keepdim), dtype=dt)


# ---- var, std ----------------------------------------------------------------------------------
def _var_args(op: str, dim, unbiased, correction) -> tuple:
    """(dim, correction) from PyTorch's overloads: `var(x, dim, unbiased, keepdim)`,
    `var(x, unbiased)` (a bool where dim goes) and `var(x, dim, correction=c)`; the
    default is the unbiased estimate (correction 1)."""
    if isinstance(dim, bool):
        if unbiased is not None:
            raise TypeError(f"{op}(): unbiased given twice")
        dim, unbiased = None, dim
    if unbiased is not None and correction is not None:
        raise TypeError(f"{op}(): give correction or unbiased, not both")
    if correction is None:
        return dim, 0 if unbiased is not None and not unbiased else 1
    if not isinstance(correction, (int, float, np.integer, np.floating)) \
            or math.isnan(correction):
        raise TypeError(f"{op}(): correction must be a number, got {correction!r}")
    return dim, correction


def _moments(op: str, x: np.ndarray, dim, unbiased, correction) -> tuple:
    """(dims, n, correction) of a var/std call: n elements per result."""
    dim, c = _var_args(op, dim, unbiased, correction)
    dims = reduction_dims(dim, x.ndim, op)
    return dims, _count(x.shape, dims), c


def _floating(op: str, x) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind not in "fc":
        raise RuntimeError(f"{op}(): std and var only support floating point and complex "
                           f"dtypes, got {x.dtype}")
    return x


def _deviations(x: np.ndarray, dims) -> np.ndarray:
    """x - mean(x) over `dims` into a new array, the mean taken of x shifted by each
    slice's first element (the shifted-data algorithm): exactly 0 for a constant slice,
    whose std is then exactly 0 as in PyTorch (numpy's mean of [0.7] * 3 is not 0.7, and
    the std's gradient there would be 1e-16 / 1e-17). 3 passes and the mean's."""
    first = x[tuple(slice(0, 1) if dims is None or a in dims else slice(None)
                    for a in range(x.ndim))]
    t = buf(P.subtract(x, first))
    t -= t.mean(axis=dims, keepdims=True)
    return t


def _variance(op: str, input, dim, unbiased, keepdim, correction, level: int) -> np.ndarray:
    """sum((x - mean)^2) / max(n - correction, 0), warning as PyTorch where n - correction
    <= 0 (the result is then inf or NaN): 3 passes and the mean's and the sum's, one
    temporary (std's deviations are `_deviations`: one more pass, exact for constants)."""
    x = _floating(op, input)
    dims, n, c = _moments(op, x, dim, unbiased, correction)
    if n - c <= 0:
        warnings.warn(f"{op}(): degrees of freedom is <= 0. Correction should be strictly "
                      f"less than the reduction factor (input numel divided by output "
                      f"numel).", UserWarning, stacklevel=level)
    if x.size == 0:
        s = np.sum(x, axis=dims, keepdims=bool(keepdim))
    else:
        t = _deviations(x, dims) if op == "std" else _centered(x, dims, n)
        t *= t
        s = np.sum(t, axis=dims, keepdims=bool(keepdim))
    if n - c > 0:
        return np.divide(s, n - c)
    with np.errstate(divide="ignore", invalid="ignore"):  # inf or NaN, as PyTorch
        return np.divide(s, 0)


def _centered(x: np.ndarray, dims, n: int) -> np.ndarray:
    """x - mean(x) over `dims` (n elements each) into a new array: 1 pass and the sum's."""
    m = np.add.reduce(x, axis=dims, keepdims=True)
    m /= n
    return buf(P.subtract(x, m))


def _dof_edge(dims, n, c) -> bool:
    """PyTorch's var_backward over all elements with n - correction <= 0 (its own case)."""
    return dims is None and n - c <= 0


def _two_over(d) -> float:
    """2 / d, inf for d = 0 (PyTorch's var_backward factor, in double)."""
    return 2.0 / d if d != 0 else math.inf


def _var_kernel(g, ans, input, dim, unbiased, keepdim, correction):
    # 2 (x - mean) g / (n - correction): 2 passes (and the mean's), one buffer
    dims, n, c = _moments("var", input, dim, unbiased, correction)
    if input.size == 0:
        return _zeros(input.shape, np.result_type(g, input))
    t = _centered(input, dims, n)
    with np.errstate(invalid="ignore"):  # n <= c: inf * 0 is NaN, as PyTorch's
        if _dof_edge(dims, n, c):    # PyTorch: g * (NaN where x == mean, else inf)
            np.copyto(t, np.where(t == 0, np.nan, np.inf))
            t *= g
            return t
        t *= np.reshape(g, kept_shape(input.shape, dims)) * _two_over(n - c)
    return t


def _var_formula(g, ans, input, dim, unbiased, keepdim, correction):
    x = array(input)
    dims, n, c = _moments("var", x, dim, unbiased, correction)
    if _dof_edge(dims, n, c):
        return g * depends_on(np.where(x == np.mean(x), np.nan, np.inf), input)
    dev = input - mean(input, dims, True)
    with np.errstate(invalid="ignore"):  # n == c: inf * 0 is NaN where x == mean
        return kept(g, x.shape, dims) * dev * _two_over(n - c)


@defop(formula=_var_formula, kernel=_var_kernel, method=True)
def var(input: Tensor, dim=None, unbiased: bool | None = None, keepdim: bool = False, *,
        correction=None) -> Tensor:
    """The variance over `dim`: sum((x - mean)^2) / (n - correction), PyTorch's default
    correction=1 the unbiased (sample) estimate, 0 the population one; `unbiased` (PyTorch's
    older spelling, positionally after dim) sets it to 1 or 0. Where n - correction <= 0
    the result is inf or NaN with a warning, as in PyTorch."""
    return _variance("var", input, dim, unbiased, keepdim, correction, _CALLER)


def _std_kernel(g, ans, input, dim, unbiased, keepdim, correction):
    # g (x - mean) / ((n - correction) std), 0 where std is 0 (PyTorch): 4 passes (and the
    # mean's), one buffer
    dims, n, c = _moments("std", input, dim, unbiased, correction)
    dtype = np.result_type(g, input)
    if input.size == 0:
        return _zeros(input.shape, dtype)
    if _dof_edge(dims, n, c):        # PyTorch: NaN everywhere
        return np.full(input.shape, np.nan, dtype)
    shape = kept_shape(input.shape, dims)
    a = np.reshape(ans, shape)
    scale = np.reshape(g, shape) / (a * (n - c))
    scale = np.where(a == 0, 0.0, scale).astype(scale.dtype, copy=False)
    t = _deviations(input, dims)
    t *= scale
    return t


def _std_formula(g, ans, input, dim, unbiased, keepdim, correction):
    x = array(input)
    dims, n, c = _moments("std", x, dim, unbiased, correction)
    if _dof_edge(dims, n, c):
        return g * depends_on(np.full(x.shape, np.nan, x.dtype), input)
    a = kept(ans, x.shape, dims)
    zero = array(a) == 0
    if zero.any():
        a = PW.where(zero, 1.0, a)
    scale = kept(g, x.shape, dims) / (a * (n - c))
    if zero.any():
        scale = PW.where(zero, 0.0, scale)
    return scale * (input - mean(input, dims, True))


@defop(formula=_std_formula, kernel=_std_kernel, method=True, quiet=True)
def std(input: Tensor, dim=None, unbiased: bool | None = None, keepdim: bool = False, *,
        correction=None) -> Tensor:
    """The standard deviation over `dim`, sqrt of `var` with the same arguments (unbiased
    by default); the gradient is 0 where the result is 0, as in PyTorch."""
    return np.sqrt(_variance("std", input, dim, unbiased, keepdim, correction, _CALLER + 1))


@composite
def var_mean(input, dim=None, unbiased: bool | None = None, keepdim: bool = False, *,
             correction=None) -> tuple[Tensor, Tensor]:
    """(var, mean) over `dim`, `var`'s arguments (PyTorch's `var_mean`: a tuple)."""
    dim, correction = _var_args("var_mean", dim, unbiased, correction)
    return (var(input, dim, keepdim=keepdim, correction=correction),
            mean(input, dim, keepdim))


@composite
def std_mean(input, dim=None, unbiased: bool | None = None, keepdim: bool = False, *,
             correction=None) -> tuple[Tensor, Tensor]:
    """(std, mean) over `dim`, `std`'s arguments (PyTorch's `std_mean`: a tuple)."""
    dim, correction = _var_args("std_mean", dim, unbiased, correction)
    return (std(input, dim, keepdim=keepdim, correction=correction),
            mean(input, dim, keepdim))


# ---- norm --------------------------------------------------------------------------------------
def _norm_p(p) -> float:
    """torch.norm's p: None and "fro" are 2; any number, inf or -inf."""
    if p is None or isinstance(p, str) and p == "fro":
        return 2.0
    if isinstance(p, str):
        raise ValueError(f"norm: p={p!r} is not supported here (vector norms and 'fro' "
                         f"only; the matrix norms are pa.linalg.matrix_norm's)")
    if isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)) \
            or math.isnan(p):
        raise ValueError(f"norm: p must be a number, inf, -inf or 'fro', got {p!r}")
    return float(p)


def _norm_input(input, dtype):
    """The input as the norm sees it: converted to `dtype` first (an op on Tensors, so
    the gradient converts back)."""
    if dtype is None:
        return input
    dt = as_dtype(dtype, "norm")
    return cast(input, dt) if isinstance(input, Tensor) else np.asarray(input, dt)


def _norm(x, p, dims, keepdim):
    # one temporary the size of x (|x|, x*x or |x|^p), reduced
    if p == 2:
        t = buf(P.multiply(x, x))
        return np.sqrt(np.sum(t, axis=dims, keepdims=keepdim))
    if p == 0:
        return np.count_nonzero(x, axis=dims, keepdims=keepdim).astype(x.dtype)
    t = buf(P.abs(x))
    if p == math.inf:
        return np.max(t, axis=dims, keepdims=keepdim)
    if p == -math.inf:
        return np.min(t, axis=dims, keepdims=keepdim)
    if p == 1:
        return np.sum(t, axis=dims, keepdims=keepdim)
    np.power(t, p, out=t)
    return np.power(np.sum(t, axis=dims, keepdims=keepdim), 1.0 / p)


@defop(formula=lambda g, ans, input, p, dim, keepdim, dtype:
       _norm_formula(g, ans, _norm_input(input, dtype), _norm_p(p), dim),
       kernel=lambda g, ans, input, p, dim, keepdim, dtype:
       _norm_kernel(g, ans, _norm_input(input, dtype), _norm_p(p), dim),
       method=True, quiet=True)
def norm(input: Tensor, p="fro", dim=None, keepdim: bool = False, dtype=None) -> Tensor:
    """The vector p-norm over `dim` (None: all elements), `torch.norm`'s semantics:
    p = "fro", None or 2: sqrt(sum x^2); 1: sum |x|; inf / -inf: max / min |x|; 0: the
    number of nonzeros; any other p: (sum |x|^p)^(1/p). Gradients as PyTorch (0 where the
    norm is 0; ties of the inf-norms share evenly). Matrix norms ("nuc", spectral) are
    `pa.linalg.matrix_norm`'s."""
    x = np.asarray(_norm_input(input, dtype))
    if x.dtype.kind != "f":
        raise RuntimeError(f"norm(): input dtype should be floating point, got {x.dtype}")
    p = _norm_p(p)
    dims = reduction_dims(dim, x.ndim, "norm")
    if p < 0 or math.isinf(p):       # no identity: an empty slice has no norm
        _nonempty("norm", x, dims, one=RuntimeError)
    return _norm(x, p, dims, bool(keepdim))


def _norm_kernel(g, ans, x, p, dim):
    dims = reduction_dims(dim, x.ndim, "norm")
    shape = kept_shape(x.shape, dims)
    gr = np.reshape(g, shape)
    if p == 0:                      # 1 pass
        return _zeros(x.shape, np.result_type(g, x))
    if p == 1:
        t = buf(P.sign(x))          # g sign(x): 2 passes
        t *= gr
        return t
    a = np.reshape(ans, shape)
    zero = a == 0
    if p == 2:                      # g x / norm, 0 where the norm is 0: 1 pass
        scale = np.where(zero, 0.0, gr / a)
        return buf(P.multiply(x, scale.astype(np.result_type(g, x), copy=False)))
    t = buf(P.abs(x))
    if abs(p) == math.inf:
        return _inf_norm_kernel(t, x, gr, a, zero, ans, dims)
    # sign(x) |x|^(p-1) g / norm^(p-1), 0 where the norm is 0: 4 passes (p < 1: 5)
    np.power(t, p - 1, out=t)
    np.copysign(t, x, out=t)
    if p < 1:
        np.putmask(t, x == 0, 0)
    t *= np.where(zero, 0.0, gr / np.power(a, p - 1))
    return t


def _inf_norm_kernel(t, x, gr, a, zero, ans, dims):
    """sign(x) g / (number of ties) at |x| == norm (PyTorch): 5 passes, `t` (|x|) the
    buffer. Where the norm is NaN, PyTorch's mask is `|x| == norm or isnan(x)` scaled by
    sign(x), whose value at NaN is 0: the NaNs are counted but get 0, so a slice with a NaN
    gets 0 everywhere (the rare path: 2 passes and a boolean temporary)."""
    nan = np.isnan(ans).any()
    np.equal(t, a, out=t)
    if nan:
        t += np.isnan(x)
    count = t.sum(axis=dims, keepdims=True)
    np.copysign(t, x, out=t)
    if nan:
        t[np.isnan(x)] = 0
    t *= np.where(zero, 0.0, gr / count)
    return t


def _norm_formula(g, ans, x, p, dim):
    xd = array(x)
    dims = reduction_dims(dim, xd.ndim, "norm")
    if p in (0, 1) or abs(p) == math.inf:  # g times a piecewise-constant factor
        a = array(ans)
        factor = _norm_kernel(np.ones(a.shape, a.dtype), a, xd, p, dim)
        if p:                             # derivative 0 in x, as PyTorch's sgn and mask
            factor = depends_on(factor, x)
        return kept(g, xd.shape, dims) * factor
    a = kept(ans, xd.shape, dims)
    zero = array(a) == 0
    safe = PW.where(zero, 1.0, a) if zero.any() else a
    scale = kept(g, xd.shape, dims) / (safe if p == 2 else PW.pow(safe, p - 1))
    if zero.any():
        scale = PW.where(zero, 0.0, scale)
    if p == 2:
        return x * scale
    xzero = xd == 0
    magnitude = PW.abs(x)
    if p < 1 and xzero.any():        # |x|^(p-1) is infinite at 0, where the factor is 0
        magnitude = PW.where(xzero, 1.0, magnitude)
    scaled = PW.pow(magnitude, p - 1) * np.sign(xd)
    if p < 1 and xzero.any():
        scaled = PW.where(xzero, 0.0, scaled)
    return scaled * scale


# ---- amax, amin, max, min, argmax, argmin ------------------------------------------------------
def share_ties(g, ans, x: np.ndarray, dims, nan_wins: bool) -> np.ndarray:
    """The gradient of an extremum over `dims` (None: all): g / (number of ties) at the
    elements equal to their slice's result, 0 elsewhere; 3 passes, one buffer. Where the
    result is NaN: `nan_wins`, the NaNs share it (PyTorch's max(), min(), median()), else
    the whole slice gets NaN (PyTorch's amax/amin, whose mask `x == result` is then empty)."""
    if x.size == 0:                  # nothing to share (median() of an empty tensor)
        return _zeros(x.shape, np.result_type(g, x))
    shape = kept_shape(x.shape, dims)
    a = np.reshape(ans, shape)
    t = np.equal(x, a, out=empty(x.shape, np.result_type(g, x)))
    nan = x.dtype.kind == "f" and np.isnan(ans).any()
    if nan and nan_wins:             # rare: 2 more passes
        t += np.isnan(x) & np.isnan(a)
    count = t.sum(axis=dims, keepdims=True)
    if nan and not nan_wins:         # rare: the NaN slices' count is 0; g / 0 * 0 is NaN
        count = np.where(count == 0, np.nan, count)
    t *= np.reshape(g, shape) / count
    return t


def _ties_kernel(name: str, nan_wins: bool):
    def kernel(g, ans, input, dim=None, keepdim=False):
        return share_ties(g, ans, input, reduction_dims(dim, input.ndim, name), nan_wins)
    return kernel


def _ties_formula(name: str, nan_wins: bool):
    """g times the share of each tie (a constant of the input, derivative 0 in it)."""
    def formula(g, ans, input, dim=None, keepdim=False):
        x, a = array(input), array(ans)
        dims = reduction_dims(dim, x.ndim, name)
        factor = share_ties(np.ones(a.shape, a.dtype), a, x, dims, nan_wins)
        return kept(g, x.shape, dims) * depends_on(factor, input)
    return formula


def _extremum(name: str, fn, input, dim, keepdim):
    x = np.asarray(input)
    dims = reduction_dims(dim, x.ndim, name)
    _nonempty(name, x, dims)
    return fn(x, axis=dims, keepdims=bool(keepdim))


@defop(formula=_ties_formula("amax", False), kernel=_ties_kernel("amax", False), method=True)
def amax(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """The maximum over `dim` (None or (): all; an int or a tuple); ties share the
    gradient evenly, and a slice whose maximum is NaN gets a NaN gradient (PyTorch's)."""
    return _extremum("amax", np.max, input, dim, keepdim)


@defop(formula=_ties_formula("amin", False), kernel=_ties_kernel("amin", False), method=True)
def amin(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """The minimum over `dim` (None or (): all; an int or a tuple); ties share the
    gradient evenly, and a slice whose minimum is NaN gets a NaN gradient (PyTorch's)."""
    return _extremum("amin", np.min, input, dim, keepdim)


@defop(formula=_ties_formula("max", True), kernel=_ties_kernel("max", True), export=False)
def max_all(input: Tensor) -> Tensor:
    """The maximum of all elements (`max(x)`); ties share the gradient evenly, NaNs share
    it when the result is NaN (PyTorch's max())."""
    x = np.asarray(input)
    _nonempty("max", x, None)
    return np.max(x)


@defop(formula=_ties_formula("min", True), kernel=_ties_kernel("min", True), export=False)
def min_all(input: Tensor) -> Tensor:
    """The minimum of all elements (`min(x)`), as `max_all`."""
    x = np.asarray(input)
    _nonempty("min", x, None)
    return np.min(x)


def _along(name: str, arg, input, dim, keepdim: bool):
    """PyTorch's `max(input, dim)`: (values, indices) of the first extremum along `dim`
    (NaN wins: numpy's argmax/argmin find the first NaN); the gradient to that index."""
    x = array(input)
    d = one_dim(dim, x.ndim, name)
    kind = getattr(return_types, name)
    if x.ndim == 0:
        index = np.zeros((), np.int64)
        return kind(gather_along(input, index, 0), Tensor._wrap(index))
    _nonempty(name, x, (d,))
    index = np.expand_dims(arg(x, axis=d), d).astype(np.int64, copy=False)
    values = gather_along(input, index, d, squeeze=not keepdim, full=x.shape[d] == 1)
    return kind(values, Tensor._wrap(index if keepdim else np.squeeze(index, d)))


def _extreme(name: str, all_op, pairwise, arg, input, dim, keepdim):
    if isinstance(dim, Tensor):      # max(input, other)
        if keepdim:
            raise TypeError(f"{name}(): keepdim is not an argument of {name}(input, other)")
        return pairwise(input, dim)
    if dim is None:
        if keepdim:
            raise TypeError(f"{name}(): keepdim needs a dim ({name}(input, dim, keepdim))")
        return all_op(input)
    return _along(name, arg, input, dim, keepdim)


@composite(method=True)
def max(input, dim=None, keepdim: bool = False):  # noqa: A001  (PyTorch's name)
    """PyTorch's three `max`: `max(x)` the maximum of all elements (a 0-d tensor; ties
    share the gradient, NaNs win); `max(x, dim, keepdim=False)` its `(values, indices)`
    along `dim` (a NamedTuple; the gradient goes to the first maximum, the index
    returned); `max(x, other)` with a tensor `other`: the elementwise `maximum`."""
    return _extreme("max", max_all, PW.maximum, np.argmax, input, dim, keepdim)


@composite(method=True)
def min(input, dim=None, keepdim: bool = False):  # noqa: A001  (PyTorch's name)
    """PyTorch's three `min`, as `max`: the minimum of all elements, `(values, indices)`
    along `dim`, or the elementwise `minimum` with a tensor `other`."""
    return _extreme("min", min_all, PW.minimum, np.argmin, input, dim, keepdim)


def _arg(name: str, fn, input, dim, keepdim) -> np.ndarray:
    x = np.asarray(input)
    d = None if dim is None else one_dim(dim, x.ndim, name)
    _nonempty(name, x, None if d is None or x.ndim == 0 else (d,), everything=IndexError)
    if x.ndim == 0:
        return np.zeros((), np.int64)
    return np.asarray(fn(x, axis=d, keepdims=bool(keepdim)), np.int64)


@defop(dtypes="real", method=True)
def argmax(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """The index of the maximum along `dim` (None: into the flattened tensor); the first
    on ties, a NaN counts as the maximum. An int64 tensor (no gradient)."""
    return _arg("argmax", np.argmax, input, dim, keepdim)


@defop(dtypes="real", method=True)
def argmin(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """The index of the minimum along `dim` (None: into the flattened tensor); the first
    on ties, a NaN counts as the minimum. An int64 tensor (no gradient)."""
    return _arg("argmin", np.argmin, input, dim, keepdim)


# ---- selections: a gather, whose rule is a scatter -------------------------------------------
def _scatter(g, index: np.ndarray, dim: int, shape: tuple, squeeze: bool, full: bool):
    """g put at `index` along `dim` into zeros of `shape` (each index at most once a
    slice): 1 pass, and the zero fill's unless `index` is a permutation (`full`)."""
    g = np.asarray(g)
    if not shape:                    # a 0-d input: its one element
        return np.array(g)
    if squeeze:
        g = np.expand_dims(g, dim)
    out = empty(shape, g.dtype)
    if not full:
        out.fill(0)
    np.put_along_axis(out, index, g, dim)
    return out


def _gather(x, index: np.ndarray, dim: int, squeeze: bool):
    x = np.asarray(x)
    if x.ndim == 0:
        return np.array(x)
    v = np.take_along_axis(x, index, dim)
    return np.squeeze(v, dim) if squeeze else v


@defop(formula=lambda g, ans, input, index, dim, squeeze, full:
       scatter_along(g, index, dim, _shape(input), squeeze, full),
       kernel=lambda g, ans, input, index, dim, squeeze, full:
       _scatter(g, index, dim, np.shape(input), squeeze, full), export=False)
def gather_along(input: Tensor, index: Tensor, dim: int, squeeze: bool = False,
                 full: bool = False) -> Tensor:
    """The values of a selection: `input`'s elements at `index` along `dim` (numpy's
    take_along_axis; squeezed along `dim` if `squeeze`), each index at most once a slice
    (sort, topk, kthvalue, median, max along a dim). `full`: the indices are a permutation
    of each slice (sort), so the gradient's scatter needs no zero fill."""
    return _gather(input, index, dim, squeeze)


@defop(formula=lambda g, ans, input, index, dim, shape, squeeze, full:
       gather_along(g, index, dim, squeeze, full), export=False)
def scatter_along(input: Tensor, index: Tensor, dim: int, shape: tuple, squeeze: bool = False,
                  full: bool = False) -> Tensor:
    """`gather_along`'s gradient as an op: `input` put at `index` along `dim` into zeros of
    `shape`; its own gradient is the gather again."""
    return _scatter(input, index, dim, tuple(shape), squeeze, full)


# ---- logsumexp, softmax, log_softmax -----------------------------------------------------------
def _shifted_exp(x: np.ndarray, dims):
    """(exp(x - m), m) with m the finite max over `dims` (0 where it is not finite): one
    new array, 2 passes (and the max's). An empty slice has no max: m is 0 there (its
    logsumexp is -inf and its softmax empty, as PyTorch's)."""
    if x.size == 0:
        m = np.zeros(np.sum(x, axis=dims, keepdims=True).shape, x.dtype)
    else:
        m = np.max(x, axis=dims, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    t = buf(P.subtract(x, m))
    np.exp(t, out=t)
    return t, m


def _lse_kernel(g, ans, input, dim, keepdim):
    # g exp(x - ans): 3 passes, one buffer
    dims = reduction_dims(dim, input.ndim, "logsumexp")
    shape = kept_shape(input.shape, dims)
    t = buf(P.subtract(input, np.reshape(ans, shape)))
    np.exp(t, out=t)
    t *= np.reshape(g, shape)
    return t


def _lse_formula(g, ans, input, dim, keepdim):
    shape = _shape(input)
    dims = reduction_dims(dim, len(shape), "logsumexp")
    return kept(g, shape, dims) * PW.exp(input - kept(ans, shape, dims))


@defop(formula=_lse_formula, kernel=_lse_kernel, method=True)
def logsumexp(input: Tensor, dim, keepdim: bool = False) -> Tensor:
    """log(sum(exp(x))) over `dim` (an int or a tuple; (): all), shifted by the maximum (no
    overflow); -inf over nothing. Integers and booleans give floats."""
    x = as_float(input)
    dims = reduction_dims(dim, x.ndim, "logsumexp")
    t, m = _shifted_exp(x, dims)     # one temporary the size of x, summed
    with np.errstate(divide="ignore"):  # an all -inf slice gives -inf, as it should
        out = np.log(np.sum(t, axis=dims, keepdims=True)) + m
    return out if keepdim else np.reshape(out, _reduced_shape(x.shape, dims, False))


def _softmax_dim(op: str, dim, ndim: int, warn: int = 0) -> int:
    """The dimension of a softmax. None: PyTorch's legacy implicit choice (0 for 0-, 1- and
    3-d inputs, else 1), with its deprecation warning (`warn`: in the forward only, the
    warning's stacklevel)."""
    if dim is None:
        if warn:
            warnings.warn(f"Implicit dimension choice for {op} has been deprecated. Change "
                          f"the call to include dim=X as an argument.", UserWarning,
                          stacklevel=warn)
        return 0 if ndim in (0, 1, 3) else 1
    return one_dim(dim, ndim, op)


def _softmax_input(op: str, input, dtype) -> np.ndarray:
    x = np.asarray(input)
    if dtype is not None:
        x = x.astype(as_dtype(dtype, op), copy=False)
    if x.dtype.kind not in "fc":
        raise NotImplementedError(f"{op}: not implemented for {x.dtype} (a floating point "
                                  f"tensor, or dtype=)")
    return x


def _axis(x, d: int):
    return None if np.ndim(raw(x)) == 0 else d


def _rows(*arrays, d) -> tuple | None:
    """The arrays as (rows, C) views and the row blocks, when `d` is their last axis and
    they are C-contiguous, equally shaped and larger than a block (the common case:
    classes last); None otherwise (the whole-array code: the same arithmetic, and for an
    array that fits in one block it costs no block set-up, ~3 us on small inputs). A row
    block is cache resident (`row_blocks`), so the passes over it after the first are over
    cached memory: each array is read from memory once (the max's pass reads a block the
    next passes reuse)."""
    a = arrays[0]
    if d is None or d != a.ndim - 1 or a.nbytes <= _common.ROW_BLOCK_BYTES or any(
            type(b) is not np.ndarray or b.shape != a.shape or not b.flags.c_contiguous
            for b in arrays):
        return None
    c = a.shape[-1]
    # blocks of 4 x ROW_BLOCK_BYTES (1 MiB): fewer calls a row for long rows (10,000
    # float64 classes: 3 rows a block at 256 KiB); measured no slower for float32 and
    # 10-20% faster for float64 on 4096 x 10000 (CPU time, 2026-11-27)
    return [b.reshape(-1, c) for b in arrays], row_blocks(a.size // c, c * a.itemsize // 4)


def _softmax_blocks(x2: np.ndarray, blocks, log: bool) -> np.ndarray:
    """softmax or log_softmax of (rows, C) `x2` along its rows, per row block: max,
    subtract, exp, sum in the result's block (log: log, then x - lse over it again); the
    result is the only allocation besides the row statistics. 4 passes over a cached
    block (log 5), one over x and one over the result in memory; the same arithmetic,
    so the same bits, as the whole-array code."""
    out = empty(x2.shape, x2.dtype)
    for a, b in blocks[1]:
        xb, t = x2[a:b], out[a:b]
        m = np.max(xb, axis=1, keepdims=True)
        m[~np.isfinite(m)] = 0
        np.subtract(xb, m, out=t)
        np.exp(t, out=t)
        s = np.sum(t, axis=1, keepdims=True)
        if log:
            np.log(s, out=s)
            s += m
            np.subtract(xb, s, out=t)
        else:
            t /= s
    return out


def _softmax_kernel(g, ans, input, dim, dtype):
    # ans (g - sum(g ans)), PyTorch's formula: 3 passes and the sum's, one buffer; classes
    # last and contiguous: per cached row block (g and ans read once, the result written
    # once)
    d = _axis(ans, _softmax_dim("softmax", dim, ans.ndim))
    rows = _rows(g, ans, d=d)
    if rows is not None:
        (g2, a2), (_, ranges) = rows
        out = empty(a2.shape, np.result_type(g, ans))
        for a, b in ranges:
            t = out[a:b]
            np.multiply(g2[a:b], a2[a:b], out=t)
            s = np.sum(t, axis=1, keepdims=True)
            np.subtract(g2[a:b], s, out=t)
            t *= a2[a:b]
        return out.reshape(ans.shape)
    t = buf(P.multiply(g, ans))
    s = np.sum(t, axis=d, keepdims=True)
    np.subtract(g, s, out=t)
    t *= ans
    return t


def _softmax_formula(g, ans, input, dim, dtype):
    d = _axis(ans, _softmax_dim("softmax", dim, np.ndim(raw(ans))))
    return ans * (g - sum(g * ans, d, True))


@defop(formula=_softmax_formula, kernel=_softmax_kernel, method=True,
       also=("torch.nn.functional",))
def softmax(input: Tensor, dim=None, *, dtype=None) -> Tensor:
    """exp(x) / sum(exp(x)) along `dim`, shifted by the maximum; `dtype` converts the input
    first. `dim=None` is PyTorch's deprecated implicit choice (F.softmax's: 0 for 0-, 1- and
    3-d inputs, else 1, with its warning)."""
    x = _softmax_input("softmax", input, dtype)
    d = _axis(x, _softmax_dim("softmax", dim, x.ndim, _CALLER))
    rows = _rows(x, d=d)
    if rows is not None:
        return _softmax_blocks(rows[0][0], rows[1], False).reshape(x.shape)
    t, _ = _shifted_exp(x, d)       # exp(x - max) / sum: 3 passes and the max's and the
    t /= np.sum(t, axis=d, keepdims=True)  # sum's, one buffer
    return t


def _log_softmax_kernel(g, ans, input, dim, dtype):
    # g - exp(ans) sum(g), PyTorch's formula: 3 passes and the sum's, one buffer; classes
    # last and contiguous: per cached row block (g and ans read once, the result written
    # once: 4 passes over the block)
    d = _axis(ans, _softmax_dim("log_softmax", dim, ans.ndim))
    rows = _rows(g, ans, d=d)
    if rows is not None:
        (g2, a2), (_, ranges) = rows
        out = empty(a2.shape, np.result_type(g, ans))
        for a, b in ranges:
            t = out[a:b]
            s = np.sum(g2[a:b], axis=1, keepdims=True)
            np.exp(a2[a:b], out=t)
            t *= s
            np.subtract(g2[a:b], t, out=t)
        return out.reshape(ans.shape)
    t = buf(P.exp(ans))
    t *= np.sum(g, axis=d, keepdims=True)
    return np.subtract(g, t, out=t)


def _log_softmax_formula(g, ans, input, dim, dtype):
    d = _axis(ans, _softmax_dim("log_softmax", dim, np.ndim(raw(ans))))
    return g - PW.exp(ans) * sum(g, d, True)


@defop(formula=_log_softmax_formula, kernel=_log_softmax_kernel, method=True,
       also=("torch.nn.functional",))
def log_softmax(input: Tensor, dim=None, *, dtype=None) -> Tensor:
    """x - logsumexp(x) along `dim`; `dtype` converts the input first, `dim=None` as
    `softmax`'s."""
    x = _softmax_input("log_softmax", input, dtype)
    d = _axis(x, _softmax_dim("log_softmax", dim, x.ndim, _CALLER))
    rows = _rows(x, d=d)
    if rows is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            return _softmax_blocks(rows[0][0], rows[1], True).reshape(x.shape)
    t, m = _shifted_exp(x, d)       # x - logsumexp(x): 3 passes and the max's and the
    with np.errstate(divide="ignore", invalid="ignore"):  # sum's, one buffer; an all
        lse = np.log(np.sum(t, axis=d, keepdims=True)) + m  # -inf slice: NaN (PyTorch's)
        return np.subtract(x, lse, out=t)
