"""Running extrema and the running log-sum-exp: `cummax cummin logcumsumexp` (PyTorch's).

- cummax / cummin return `(values, indices)` NamedTuples like `torch.return_types`. The
  index is the last position holding the running extremum (PyTorch compares with >= and
  <=, so ties move it on); once a NaN is seen the values are NaN and the index is the
  last NaN's. The values are a gather of the input at the indices, so the gradient is
  PyTorch's scatter_add of g at the indices (and its twin the gather again).
- logcumsumexp: log(sum(exp(x[..j]))) computed as a running `logaddexp` (stable: no exp
  overflows). Its rule is PyTorch's: with r the result,
  dx_j = exp(x_j + revlogcumsumexp(log g+ - r)) - exp(x_j + revlogcumsumexp(log g- - r)),
  g split by sign so every log is of a positive number (the dtype's lowest finite value
  stands for log 0); the twin is the same formula written with ops (this op among them).

A 0-d tensor has the one dimension 0 (or -1), as in PyTorch.
Thread safety: pure functions of their arguments, like the other ops.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..primitive import primitive
from ..tensor import Tensor
from . import elementwise as E
from . import index as ix
from . import shape as S
from .scan import _dim

__all__ = ["cummax", "cummin", "logcumsumexp", "METHODS"]


def _arr(x) -> np.ndarray:
    return x.data if isinstance(x, Tensor) else np.asarray(x)


class _ReturnTypes:
    """PyTorch's `torch.return_types.cummax` / `cummin`."""

    cummax = NamedTuple("cummax", [("values", Tensor), ("indices", Tensor)])
    cummin = NamedTuple("cummin", [("values", Tensor), ("indices", Tensor)])


def _running_index(x: np.ndarray, run: np.ndarray, axis: int) -> np.ndarray:
    """The last position up to each one where x equals the running extremum `run` (where
    PyTorch's scan updates its index), NaN matching NaN."""
    hit = x == run
    if x.dtype.kind in "fc":
        hit |= np.isnan(x) & np.isnan(run)
    pos = np.arange(x.shape[axis]).reshape((-1,) + (1,) * (x.ndim - axis - 1))
    return np.maximum.accumulate(np.where(hit, pos, 0), axis=axis).astype(np.int64)


def _running(name: str, ufunc, input, dim: int):
    x = _arr(input)
    d = _dim(name, x.ndim, dim)
    if x.ndim == 0:
        values, indices = _running(name, ufunc, S.reshape(input, (1,)), 0)
        return getattr(_ReturnTypes, name)(S.reshape(values, ()),
                                          Tensor._wrap(indices.data.reshape(())))
    if x.dtype.kind == "c":
        raise TypeError(f"{name}: complex tensors have no order")
    with np.errstate(invalid="ignore"):
        index = _running_index(x, ufunc.accumulate(x, axis=d), d)
    values = ix.gather(input, d, index)
    return getattr(_ReturnTypes, name)(values, Tensor._wrap(index))


def cummax(input, dim: int) -> tuple[Tensor, Tensor]:
    """(values, indices) of the running maximum along `dim` (see the module docstring for
    ties and NaN); the gradient goes to the index of each value."""
    return _running("cummax", np.maximum, input, dim)


def cummin(input, dim: int) -> tuple[Tensor, Tensor]:
    """(values, indices) of the running minimum along `dim`."""
    return _running("cummin", np.minimum, input, dim)


# ---- logcumsumexp -----------------------------------------------------------------------------
def _lcse(x, axis):
    with np.errstate(invalid="ignore", over="ignore"):
        return np.logaddexp.accumulate(x, axis=axis)


def _reverse_lcse(a: np.ndarray, axis: int) -> np.ndarray:
    return np.flip(_lcse(np.flip(a, axis), axis), axis)


def _lcse_vjp(g, ans, x, axis):
    if g.ndim == 0 or g.size == 0:
        return g
    low = np.finfo(np.result_type(g, ans)).min   # stands for log(0), as PyTorch
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_g = np.log(np.abs(g))
        pos = np.exp(_reverse_lcse(np.where(g > 0, log_g, low) - ans, axis) + x)
        neg = np.exp(_reverse_lcse(np.where(g < 0, log_g, low) - ans, axis) + x)
    return np.subtract(pos, neg, out=pos)


def _lcse_twin(g, ans, x, axis):
    gd = _arr(g)
    low = float(np.finfo(np.result_type(gd, _arr(ans))).min)
    positive, negative = gd > 0, gd < 0
    log_g = E.log(E.abs(E.where(positive | negative, g, 1.0)))  # finite where it is used

    def part(mask):
        t = E.where(mask, log_g, low) - ans
        return E.exp(ix.flip(logcumsumexp(ix.flip(t, axis), axis), axis) + x)

    return part(positive) - part(negative)


_lcse_vjp.graph = _lcse_twin
_lcse_op = primitive("logcumsumexp", _lcse, _lcse_vjp)


def logcumsumexp(input, dim: int) -> Tensor:
    """log(cumsum(exp(input))) along `dim`, without overflow (a running logaddexp)."""
    x = _arr(input)
    d = _dim("logcumsumexp", x.ndim, dim)
    if x.dtype.kind != "f":
        raise TypeError(f"logcumsumexp: expected a floating point tensor, got dtype {x.dtype}")
    if x.ndim == 0:
        return S.reshape(logcumsumexp(S.reshape(input, (1,)), 0), ())
    return _lcse_op(input, axis=d)


METHODS = {"cummax": cummax, "cummin": cummin, "logcumsumexp": logcumsumexp}
