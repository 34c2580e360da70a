"""3-D pooling (PyTorch's `max_pool3d`, `avg_pool3d`, `adaptive_max_pool3d`,
`adaptive_avg_pool3d`) by separability, on the 2-D and 1-D pools.

A pooling window of a volume is the product of a depth window and an (H, W) window, so:
- the maximum over it is the maximum over depths of each depth's (H, W) maximum, and the
  first maximum in (d, h, w) row-major order is the one this finds (the first depth whose
  plane maximum is the largest, then that plane's first maximum): PyTorch's choice, and
  where the gradient goes;
- its average is the average over depths of each depth's (H, W) average: every depth's
  plane window has the same in-bounds count, and the count of in-bounds elements of the
  box (count_include_pad=False) and its clipped size (ceil_mode) are products of the
  per-dimension counts. `divisor_override` sums both stages, then divides.
So each is a composite (`primitive.composite`): a 2-D pool over (N, C*D, H, W) planes, then
a 1-D pool over depth, both declared ops with fast kernels and formulas, so every order of
gradient works. The intermediate costs one array of the (D, Ho, Wo) size beyond the
result.

Thread safety: pure functions.
"""
from __future__ import annotations

import numpy as np

from ..ops import shape as S
from ..ops._common import array
from ..primitive import composite
from ..tensor import Tensor
from . import _pool, _resample
from ._windows import adaptive_output_size, ntuple

__all__ = ["max_pool3d", "avg_pool3d", "adaptive_max_pool3d", "adaptive_avg_pool3d"]


def _volume(name: str, input) -> tuple:
    """(input as a 5-D Tensor, whether it was batched)."""
    x = array(input)
    if x.ndim not in (4, 5):
        raise ValueError(f"{name}: expected a 4-D (C, D, H, W) or 5-D (N, C, D, H, W) input, "
                         f"got {x.ndim}-D")
    t = input if isinstance(input, Tensor) else Tensor._wrap(x)
    return (t, True) if x.ndim == 5 else (S.unsqueeze(t, 0), False)


def _planes(t) -> Tensor:
    n, c, d, h, w = t.shape
    return S.reshape(t, (n, c * d, h, w))


def _over_depth(t, n, c, d) -> Tensor:
    """(N, C*D, Ho, Wo) -> (N, C*Ho*Wo, D): depth last, for a 1-D pool."""
    ho, wo = t.shape[-2:]
    return S.reshape(S.permute(S.reshape(t, (n, c, d, ho, wo)), (0, 1, 3, 4, 2)),
                     (n, c * ho * wo, d))


def _back(t, n, c, ho, wo, batched: bool) -> Tensor:
    """(N, C*Ho*Wo, Do) -> (N, C, Do, Ho, Wo) (without N when the input had none)."""
    do = t.shape[-1]
    y = S.permute(S.reshape(t, (n, c, ho, wo, do)), (0, 1, 4, 2, 3))
    return y if batched else S.reshape(y, y.shape[1:])


def _flat_indices(depth_idx, plane_idx, n, c, d, h, w, ho, wo, batched):
    """Each maximum's flat index in its (D, H, W) volume: the depth the 1-D stage chose and
    that depth's (H, W) index from the 2-D stage."""
    di = array(depth_idx).reshape(n, c, ho, wo, -1).transpose(0, 1, 4, 2, 3)  # (N,C,Do,Ho,Wo)
    pi = array(plane_idx).reshape(n, c, d, ho, wo)
    flat = di * (h * w) + np.take_along_axis(pi, di, axis=2)
    return Tensor._wrap(flat if batched else flat[0])


@composite(dtypes="real", module="torch.nn.functional", also=("torch",))
def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False, return_indices: bool = False):
    """Max over sliding (dilated) windows of (N, C, D, H, W) input (or (C, D, H, W)), as
    PyTorch's `max_pool3d`; the gradient goes to each window's first maximum in (d, h, w)
    order; `return_indices` also returns its flat index in the (D, H, W) volume (int64)."""
    name = "max_pool3d"
    t, batched = _volume(name, input)
    k = ntuple(kernel_size, 3, "kernel_size", name, 1)
    s = k if stride is None or stride == () else ntuple(stride, 3, "stride", name, 1)
    p = ntuple(padding, 3, "padding", name, 0)
    dl = ntuple(dilation, 3, "dilation", name, 1)
    n, c, d, h, w = t.shape
    y2 = _pool.max_pool2d(_planes(t), k[1:], s[1:], p[1:], dl[1:], ceil_mode, return_indices)
    y2, i2 = y2 if return_indices else (y2, None)
    ho, wo = y2.shape[-2:]
    # (max_pool1d.unchecked: PyTorch's max_pool1d refuses the integers max_pool3d takes)
    y1 = _pool.max_pool1d.unchecked(_over_depth(y2, n, c, d), k[0], s[0], p[0], dl[0],
                                    ceil_mode, return_indices)
    y1, i1 = y1 if return_indices else (y1, None)
    out = _back(y1, n, c, ho, wo, batched)
    if not return_indices:
        return out
    return out, _flat_indices(i1, i2, n, c, d, h, w, ho, wo, batched)


@composite(dtypes=("int64", "float32", "float64"), module="torch.nn.functional")
def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override=None) -> Tensor:
    """Mean over sliding windows of (N, C, D, H, W) input (or (C, D, H, W)), as PyTorch's
    `avg_pool3d` (count_include_pad, ceil_mode's divisors, divisor_override)."""
    name = "avg_pool3d"
    dtype = np.asarray(array(input)).dtype
    if dtype.kind in "iu":  # PyTorch keeps integers integer (truncating division)
        out = avg_pool3d(Tensor._wrap(np.asarray(array(input)).astype(np.float64)),
                         kernel_size, stride, padding, ceil_mode, count_include_pad,
                         divisor_override)
        return Tensor._wrap(_pool.int_quotient(out._data, dtype))
    t, batched = _volume(name, input)
    k = ntuple(kernel_size, 3, "kernel_size", name, 1)
    s = k if stride is None or stride == () else ntuple(stride, 3, "stride", name, 1)
    p = ntuple(padding, 3, "padding", name, 0)
    if divisor_override is not None and (isinstance(divisor_override, bool) or
                                         not isinstance(divisor_override, (int, np.integer))
                                         or divisor_override == 0):
        raise ValueError(f"{name}: divisor_override must be a non-zero int, got "
                         f"{divisor_override!r}")
    n, c, d, h, w = t.shape
    one = None if divisor_override is None else 1  # sums in both stages, then the override
    y2 = _pool.avg_pool2d(_planes(t), k[1:], s[1:], p[1:], ceil_mode, count_include_pad, one)
    ho, wo = y2.shape[-2:]
    # the depth stage as a 2-D pool on (1, D) planes: avg_pool1d has no divisor_override
    z = S.unsqueeze(_over_depth(y2, n, c, d), 2)
    y1 = _pool.avg_pool2d(z, (1, k[0]), (1, s[0]), (0, p[0]), ceil_mode, count_include_pad, one)
    out = _back(S.squeeze(y1, 2), n, c, ho, wo, batched)
    return out if divisor_override is None else out / float(divisor_override)


@composite(module="torch.nn.functional")
def adaptive_avg_pool3d(input, output_size) -> Tensor:
    """Mean over adaptive windows of (N, C, D, H, W) input (or (C, D, H, W)) giving
    `output_size` (int or triple; None keeps that size), PyTorch's windows."""
    name = "adaptive_avg_pool3d"
    t, batched = _volume(name, input)
    n, c, d, h, w = t.shape
    od, oh, ow = adaptive_output_size(name, output_size, (d, h, w))
    y2 = _resample.adaptive_avg_pool2d(_planes(t), (oh, ow))
    y1 = _resample.adaptive_avg_pool1d(_over_depth(y2, n, c, d), od)
    return _back(y1, n, c, oh, ow, batched)


@composite(dtypes="floating", module="torch.nn.functional")
def adaptive_max_pool3d(input, output_size, return_indices: bool = False):
    """Max over adaptive windows of (N, C, D, H, W) input (or (C, D, H, W)) giving
    `output_size`, PyTorch's windows; the gradient goes to each window's first maximum in
    (d, h, w) order; `return_indices` also returns its flat index in the volume."""
    name = "adaptive_max_pool3d"
    t, batched = _volume(name, input)
    n, c, d, h, w = t.shape
    od, oh, ow = adaptive_output_size(name, output_size, (d, h, w))
    y2 = _pool.adaptive_max_pool2d(_planes(t), (oh, ow), return_indices)
    y2, i2 = y2 if return_indices else (y2, None)
    y1 = _pool.adaptive_max_pool1d(_over_depth(y2, n, c, d), od, return_indices)
    y1, i1 = y1 if return_indices else (y1, None)
    out = _back(y1, n, c, oh, ow, batched)
    if not return_indices:
        return out
    return out, _flat_indices(i1, i2, n, c, d, h, w, oh, ow, batched)
