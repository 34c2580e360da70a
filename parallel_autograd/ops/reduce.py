"""Reductions (numpy-style `axis`/`keepdims`) and the softmax family."""
from __future__ import annotations

import numpy as np

from ..primitive import primitive


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
    # Ties share the gradient equally (PyTorch's amax/amin convention).
    a = _restore(ans, x.shape, axis, keepdims)
    mask = x == a
    count = mask.sum(axis=axis, keepdims=True)
    return _restore(g, x.shape, axis, keepdims) * mask / count


def _var_vjp(g, ans, x, axis, keepdims, ddof):
    n = _count(x.shape, axis)
    centered = x - x.mean(axis=axis, keepdims=True)
    return _restore(g, x.shape, axis, keepdims) * centered * (2.0 / (n - ddof))


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


def _axis(axis):
    """None, an int or a tuple of ints (lists and numpy integers accepted)."""
    if axis is None:
        return None
    if isinstance(axis, (list, tuple)):
        return tuple(int(a) for a in axis)
    return int(axis)


def sum(x, axis=None, keepdims: bool = False):
    return _sum(x, axis=_axis(axis), keepdims=keepdims)


def mean(x, axis=None, keepdims: bool = False):
    return _mean(x, axis=_axis(axis), keepdims=keepdims)


def max(x, axis=None, keepdims: bool = False):
    """Maximum; ties share the gradient equally."""
    return _max(x, axis=_axis(axis), keepdims=keepdims)


def min(x, axis=None, keepdims: bool = False):
    """Minimum; ties share the gradient equally."""
    return _min(x, axis=_axis(axis), keepdims=keepdims)


def var(x, axis=None, keepdims: bool = False, ddof: int = 0):
    """Variance; `ddof=0` is the biased (population) estimate, numpy's default."""
    return _var(x, axis=_axis(axis), keepdims=keepdims, ddof=ddof)


# ---- softmax family -------------------------------------------------------------------
def _logsumexp(x, axis, keepdims):
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    with np.errstate(divide="ignore"):  # an all -inf slice gives -inf, as it should
        out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


def _logsumexp_vjp(g, ans, x, axis, keepdims):
    a = _restore(ans, x.shape, axis, keepdims)
    return _restore(g, x.shape, axis, keepdims) * np.exp(x - a)


def _softmax(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _softmax_vjp(g, ans, x, axis):
    gy = g * ans
    return gy - ans * np.sum(gy, axis=axis, keepdims=True)


def _log_softmax(x, axis):
    return x - _logsumexp(x, axis, True)


def _log_softmax_vjp(g, ans, x, axis):
    return g - np.exp(ans) * np.sum(g, axis=axis, keepdims=True)


_lse = primitive("logsumexp", _logsumexp, _logsumexp_vjp)
_softmax_op = primitive("softmax", _softmax, _softmax_vjp)
_log_softmax_op = primitive("log_softmax", _log_softmax, _log_softmax_vjp)


def logsumexp(x, axis=None, keepdims: bool = False):
    return _lse(x, axis=_axis(axis), keepdims=keepdims)


def softmax(x, axis: int = -1):
    return _softmax_op(x, axis=axis)


def log_softmax(x, axis: int = -1):
    return _log_softmax_op(x, axis=axis)
