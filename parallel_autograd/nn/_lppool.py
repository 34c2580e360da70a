"""Power-average pooling (PyTorch's `lp_pool1d`, `lp_pool2d`, `lp_pool3d`):

    out = (sum over the window of x^p)^(1/p)

computed as PyTorch computes it, an average pool of x^p times the kernel's volume, then
the 1/p power of sign(s) * relu(|s|): composites (`primitive.composite`) of differentiable
ops (pow, the average pools, where, mul), so both engines and every order of gradient
follow.
As in PyTorch, windows are never padded, a window whose sum is 0 gives 0 with a zero
gradient, and a negative sum (odd p) gives NaN.

Thread safety: pure functions.
"""
from __future__ import annotations

import math

import numpy as np

from ..ops import pointwise as E
from ..primitive import composite
from ..tensor import Tensor
from ._pool import avg_pool1d, avg_pool2d
from ._pool3d import avg_pool3d
from ._windows import ntuple

__all__ = ["lp_pool1d", "lp_pool2d", "lp_pool3d"]


def _norm(name: str, norm_type) -> float:
    if isinstance(norm_type, bool) or not isinstance(norm_type, (int, float, np.integer,
                                                                   np.floating)):
        raise TypeError(f"{name}: norm_type must be a number, got {norm_type!r}")
    p = float(norm_type)
    if not (math.isfinite(p) and p > 0):
        raise ValueError(f"{name}: norm_type must be a positive finite number, got "
                         f"{norm_type!r}")
    return p


def _lp(name: str, pool, nd: int, input, norm_type, kernel_size, stride, ceil_mode):
    p = _norm(name, norm_type)
    k = ntuple(kernel_size, nd, "kernel_size", name, 1)
    s = k if stride is None else ntuple(stride, nd, "stride", name, 1)
    x = input if isinstance(input, Tensor) else Tensor._wrap(np.asarray(input))
    if x.ndim not in (nd + 1, nd + 2):
        raise ValueError(f"{name}: expected a {nd + 1}-D or {nd + 2}-D input, got "
                         f"{x.ndim}-D")
    out = pool(x ** p, k, s, 0, ceil_mode)
    # PyTorch's sign(s) * relu(|s|) is s, with a zero gradient where s = 0 (relu's rule
    # selects): the root of a window summing to 0 is 0 with gradient 0, where the root's
    # own derivative is infinite. The double where keeps the infinity out of the rule.
    zero = out._data == 0
    safe = E.where(zero, 1.0, out)
    return E.where(zero, 0.0, (safe * float(math.prod(k))) ** (1.0 / p))


@composite(module="torch.nn.functional")
def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode: bool = False) -> Tensor:
    """The p-norm over sliding windows of (N, C, L) or (C, L) input (PyTorch's
    `lp_pool1d`): kernel_size and stride (default kernel_size) ints, no padding."""
    return _lp("lp_pool1d", avg_pool1d, 1, input, norm_type, kernel_size, stride,
               ceil_mode)


@composite(module="torch.nn.functional")
def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode: bool = False) -> Tensor:
    """The p-norm over sliding windows of NCHW or CHW input (PyTorch's `lp_pool2d`):
    kernel_size and stride (default kernel_size) ints or pairs, no padding."""
    return _lp("lp_pool2d", avg_pool2d, 2, input, norm_type, kernel_size, stride,
               ceil_mode)


@composite(module="torch.nn.functional")
def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode: bool = False) -> Tensor:
    """The p-norm over sliding windows of (N, C, D, H, W) or (C, D, H, W) input
    (PyTorch's `lp_pool3d`): kernel_size and stride ints or triples, no padding."""
    return _lp("lp_pool3d", avg_pool3d, 3, input, norm_type, kernel_size, stride,
               ceil_mode)
