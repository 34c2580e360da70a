"""Reductions (numpy-style `axis`/`keepdims`) and the softmax family. Full-size
outputs come from the caching allocator (`memory`)."""
from __future__ import annotations

import functools

import numpy as np

from ..memory import empty as _empty
from ..memory import pooled as P
from ..primitive import primitive
from ..tensor import Tensor as _Tensor


def _buf(a):
    """An ndarray to write into (ufuncs give numpy scalars for 0-d results)."""
    return a if type(a) is np.ndarray else np.asarray(a)


_UNSET = object()
AxisError = getattr(np, "exceptions", np).AxisError  # numpy < 1.25: np.AxisError


def torch_names(fn):
    """Let a reduction take PyTorch's argument names too: `dim` for `axis`, `keepdim` for
    `keepdims` (`x.sum(dim=1, keepdim=True)`); giving both spellings is a TypeError."""
    @functools.wraps(fn)
    def reduction(*args, dim=_UNSET, keepdim=_UNSET, **kwargs):
        for torch_name, name, value in (("dim", "axis", dim), ("keepdim", "keepdims", keepdim)):
            if value is not _UNSET:
                if name in kwargs:
                    raise TypeError(f"{fn.__name__}: pass {name} or {torch_name}, not both")
                kwargs[name] = value
        return fn(*args, **kwargs)
    return reduction


def _restore(g, x_shape, axis, keepdims):
    """Reshape a reduced gradient so it broadcasts against the input."""
    if axis is None:
        return np.reshape(g, (1,) * len(x_shape))
    if keepdims:
        return g
    axes = (axis,) if np.isscalar(axis) else tuple(axis)
    axes = tuple(a % len(x_shape) for a in axes)
    return np.expand_dims(g, axes)


def _count(x_shape, axis):
    if axis is None:
        return int(np.prod(x_shape))
    axes = (axis,) if np.isscalar(axis) else tuple(axis)
    return int(np.prod([x_shape[a] for a in axes]))


def _sum_vjp(g, ans, x, axis, keepdims):
    return np.broadcast_to(_restore(g, x.shape, axis, keepdims), x.shape)


def _mean_vjp(g, ans, x, axis, keepdims):
    n = _count(x.shape, axis)
    return np.broadcast_to(_restore(g, x.shape, axis, keepdims) / n, x.shape)


def _extremum_vjp(g, ans, x, axis, keepdims):
    # Ties share the gradient equally (PyTorch's amax/amin convention): the mask of
    # maxima written as 0/1 floats, counted, then scaled by g / count. 3 passes, one buffer.
    # A NaN result came from NaN inputs: they get the gradient (PyTorch's max() and
    # median() over all elements, `evenly_distribute_backward`), not all.
    return _share(g, ans, x, axis, keepdims, True)


def _share(g, ans, x, axis, keepdims, nan_wins: bool):
    """g / (number of ties) at the elements equal to the result, 0 elsewhere. Where the
    result is NaN: `nan_wins`, the NaNs share it (PyTorch's max()); otherwise the whole
    slice gets NaN (PyTorch's amax/amin, whose mask `x == result` is then empty)."""
    if x.size == 0:                  # nothing to share (median() of an empty tensor)
        t = _empty(x.shape, np.result_type(g, x))
        t.fill(0)
        return t
    a = _restore(ans, x.shape, axis, keepdims)
    t = np.equal(x, a, out=_empty(x.shape, np.result_type(g, x)))
    nan = x.dtype.kind == "f" and np.isnan(ans).any()
    if nan and nan_wins:             # rare: 2 more passes
        t += np.isnan(x) & np.isnan(a)
    count = t.sum(axis=axis, keepdims=True)
    if nan and not nan_wins:         # rare: the NaN slices' count is 0; g / 0 * 0 is NaN
        count = np.where(count == 0, np.nan, count)
    t *= _restore(g, x.shape, axis, keepdims) / count
    return t


def _var_vjp(g, ans, x, axis, keepdims, ddof):
    # (x - mean) * g * 2 / (n - ddof): 2 passes (and the mean's), one buffer. As PyTorch:
    # n == ddof (an empty slice included) divides by 0 (NaN where the variance is NaN,
    # nothing where the slice is empty), and n < ddof by the negative n - ddof
    n = _count(x.shape, axis)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = _buf(P.subtract(x, x.mean(axis=axis, keepdims=True)) if x.size else
                 np.zeros(x.shape, x.dtype))
        t *= _restore(g, x.shape, axis, keepdims) * (np.float64(2.0) / (n - ddof))
    return t


_sum = primitive("sum", lambda x, axis, keepdims: np.sum(x, axis=axis, keepdims=keepdims),
                 _sum_vjp)
_mean = primitive("mean", lambda x, axis, keepdims: np.mean(x, axis=axis, keepdims=keepdims),
                  _mean_vjp)
_max = primitive("max", lambda x, axis, keepdims: np.max(x, axis=axis, keepdims=keepdims),
                 _extremum_vjp)
_min = primitive("min", lambda x, axis, keepdims: np.min(x, axis=axis, keepdims=keepdims),
                 _extremum_vjp)
_var = primitive("var",
                 lambda x, axis, keepdims, ddof: np.var(x, axis=axis, keepdims=keepdims,
                                                        ddof=ddof),
                 _var_vjp)


def _axis(axis, x=None, name: str = "reduce"):
    """None, an int or a tuple of ints (lists and numpy integers accepted). Given the input
    `x`: a 0-d one has the one axis 0 (or -1), as in PyTorch, reducing over which reduces
    all (None: the result stays 0-d, also with keepdims); other axes are numpy's
    AxisError, a repeated one a ValueError."""
    if axis is None:
        return None
    axis = tuple(int(a) for a in axis) if isinstance(axis, (list, tuple)) else int(axis)
    if x is not None and np.ndim(x.data if isinstance(x, _Tensor) else x) == 0:
        axes = axis if isinstance(axis, tuple) else (axis,)
        for a in axes:
            if a not in (0, -1):
                raise AxisError(a, 0, name)
        if len(axes) > 1:
            raise ValueError(f"{name}: repeated axis in {axis!r}")
        return None
    return axis


@torch_names
def sum(x, axis=None, keepdims: bool = False):
    """Sum over `axis` (None: all; an int or a tuple); the gradient is g broadcast back."""
    return _sum(x, axis=_axis(axis, x, "sum"), keepdims=keepdims)


@torch_names
def mean(x, axis=None, keepdims: bool = False):
    """Mean over `axis` (None: all; an int or a tuple)."""
    return _mean(x, axis=_axis(axis, x, "mean"), keepdims=keepdims)


def max(x, axis=None, keepdims: bool = False, *, dim=_UNSET, keepdim: bool = False):
    """Maximum over `axis`; ties share the gradient equally (NaNs, when the result is
    NaN). With PyTorch's spelling `dim=` (and `keepdim=`), PyTorch's result:
    `(values, indices)` of the first maximum along `dim`, which gets the gradient."""
    if dim is not _UNSET:
        return _along("max", x, axis, dim, keepdim)
    axis = _axis(axis, x, "max")
    nonempty_extremum("max", x, axis)
    return _max(x, axis=axis, keepdims=keepdims)


def min(x, axis=None, keepdims: bool = False, *, dim=_UNSET, keepdim: bool = False):
    """Minimum over `axis`, as `max` (`dim=`: PyTorch's `(values, indices)`)."""
    if dim is not _UNSET:
        return _along("min", x, axis, dim, keepdim)
    axis = _axis(axis, x, "min")
    nonempty_extremum("min", x, axis)
    return _min(x, axis=axis, keepdims=keepdims)


def nonempty_extremum(name: str, x, axis) -> None:
    """A maximum or minimum has no value over no element: refuse to reduce an empty
    dimension (or, with `axis` None, an empty tensor), as PyTorch does; reducing a
    tensor that is empty along other dimensions gives an empty result."""
    shape = np.shape(x.data if isinstance(x, _Tensor) else x)
    if axis is None:
        if 0 in shape:
            raise ValueError(f"{name}: the tensor is empty (shape {shape}): a maximum or "
                             f"minimum over no element has no value; give a dimension")
        return
    for a in (axis if isinstance(axis, tuple) else (axis,)):
        if -len(shape) <= a < len(shape) and shape[a] == 0:  # (numpy names a bad axis)
            raise ValueError(f"{name}: dimension {a % len(shape)} is empty (shape {shape}): a "
                             f"maximum or minimum over no element has no value")


def _along(name, x, axis, dim, keepdim):
    if axis is not None:
        raise TypeError(f"{name}: pass axis or dim, not both")
    from .scan import extreme_along  # late: scan builds on this module
    return extreme_along(name, x, dim, keepdim)


@torch_names
def var(x, axis=None, keepdims: bool = False, ddof: int = 0):
    """Variance; `ddof=0` is the biased (population) estimate, numpy's default."""
    return _var(x, axis=_axis(axis, x, "var"), keepdims=keepdims, ddof=ddof)


# ---- softmax family -------------------------------------------------------------------
def _shifted_exp(x, axis):
    """(exp(x - m), m) with m the finite max along `axis` (0 where it is not finite): one
    new array, 2 passes (and the max's). An empty slice has no max: m is 0 there (its
    logsumexp is -inf and its softmax empty, as PyTorch's)."""
    if x.size == 0:
        m = np.zeros(np.sum(x, axis=axis, keepdims=True).shape, x.dtype)
    else:
        m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    t = _buf(P.subtract(x, m))
    np.exp(t, out=t)
    return t, m


def _logsumexp(x, axis, keepdims):
    # one temporary the size of x (exp(x - m)), summed
    t, m = _shifted_exp(x, axis)
    with np.errstate(divide="ignore"):  # an all -inf slice gives -inf, as it should
        out = np.log(np.sum(t, axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


def _logsumexp_vjp(g, ans, x, axis, keepdims):
    # g exp(x - ans): 3 passes, one buffer
    t = _buf(P.subtract(x, _restore(ans, x.shape, axis, keepdims)))
    np.exp(t, out=t)
    t *= _restore(g, x.shape, axis, keepdims)
    return t


def _softmax(x, axis):
    # exp(x - max) / sum: 3 passes and the max's and the sum's, one buffer
    t, _ = _shifted_exp(x, axis)
    t /= np.sum(t, axis=axis, keepdims=True)
    return t


def _softmax_vjp(g, ans, x, axis):
    # ans (g - sum(g ans)), PyTorch's formula: 3 passes and the sum's, one buffer
    t = _buf(P.multiply(g, ans))
    s = np.sum(t, axis=axis, keepdims=True)
    np.subtract(g, s, out=t)
    t *= ans
    return t


def _log_softmax(x, axis):
    # x - logsumexp(x): 3 passes and the max's and the sum's, one buffer
    t, m = _shifted_exp(x, axis)
    with np.errstate(divide="ignore"):
        lse = np.log(np.sum(t, axis=axis, keepdims=True)) + m
    return np.subtract(x, lse, out=t)


def _log_softmax_vjp(g, ans, x, axis):
    # g - exp(ans) sum(g), PyTorch's formula: 3 passes and the sum's, one buffer
    t = _buf(P.exp(ans))
    t *= np.sum(g, axis=axis, keepdims=True)
    return np.subtract(g, t, out=t)


_lse = primitive("logsumexp", _logsumexp, _logsumexp_vjp)
_softmax_op = primitive("softmax", _softmax, _softmax_vjp)
_log_softmax_op = primitive("log_softmax", _log_softmax, _log_softmax_vjp)


@torch_names
def logsumexp(x, axis=None, keepdims: bool = False):
    """log(sum(exp(x))) over `axis`, shifted by the maximum (no overflow)."""
    return _lse(x, axis=_axis(axis, x, "logsumexp"), keepdims=keepdims)


@torch_names
def softmax(x, axis: int = -1):
    """exp(x) / sum(exp(x)) along `axis`, shifted by the maximum."""
    return _softmax_op(x, axis=axis)


@torch_names
def log_softmax(x, axis: int = -1):
    """x - logsumexp(x) along `axis`."""
    return _log_softmax_op(x, axis=axis)
