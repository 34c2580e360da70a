"""`max_unpool1d`, `max_unpool2d` (PyTorch's): the values of a max pooling put back at the
positions its `return_indices=True` gave, zeros elsewhere.

Composites (`primitive.composite`) of one op, `put_flat` (nn/_pool.py): zeros with the
values written at flat indices (PyTorch's `scatter_`: an index that repeats, as overlapping
pooling windows give, is written once more with the same maximum, not added), whose
derivative is a gather at the same indices (`take_flat`, what PyTorch computes), whose own
derivative is a scatter-add, so every order of gradient works.

Thread safety: pure functions.
"""
from __future__ import annotations

import numpy as np

from ..ops._common import array
from ..primitive import composite
from ._pool import put_flat
from ._windows import ntuple

__all__ = ["max_unpool1d", "max_unpool2d"]


def _output_size(name, spatial, kernel, stride, padding, output_size) -> tuple:
    """PyTorch's `_unpool_output_size`: (in - 1) * stride - 2 * padding + kernel per
    dimension, or `output_size` (spatial, or with N and C) within stride of it."""
    nd = len(kernel)
    default = tuple((n - 1) * s - 2 * p + k for n, k, s, p in zip(spatial, kernel, stride,
                                                                  padding))
    if output_size is None:
        out = default
    else:
        out = tuple(int(v) for v in output_size)
        if len(out) == nd + 2:
            out = out[2:]
        if len(out) != nd:
            raise ValueError(f"{name}: output_size should be a sequence containing {nd} or "
                             f"{nd + 2} elements, but it has a length of '{len(out)}'")
        for d in range(nd):
            lo, hi = default[d] - stride[d], default[d] + stride[d]
            if not lo < out[d] < hi:
                raise ValueError(f"{name}: invalid output_size {tuple(output_size)} (dim {d} "
                                 f"must be between {lo + 1} and {hi - 1})")
    if min(out) <= 0:
        raise ValueError(f"{name}: the output size {out} is not positive")
    return out


def _max_unpool(name, nd, input, indices, kernel_size, stride, padding, output_size):
    x, idx = array(input), array(indices)
    if x.ndim not in (nd + 1, nd + 2):
        raise ValueError(f"{name}: expected a {nd + 1}-D or {nd + 2}-D input, got {x.ndim}-D")
    if x.dtype.kind != "f":
        raise TypeError(f"{name}: expected a floating input, got {x.dtype}")
    if idx.dtype.kind not in "iu":
        raise TypeError(f"{name}: indices must be integers, got {idx.dtype}")
    if idx.shape != x.shape:
        raise ValueError(f"{name}: expected indices of the input's shape {x.shape}, got "
                         f"{idx.shape}")
    kernel = ntuple(kernel_size, nd, "kernel_size", name, 1)
    stride = kernel if stride is None else ntuple(stride, nd, "stride", name, 1)
    padding = ntuple(padding, nd, "padding", name, 0)
    out = _output_size(name, x.shape[-nd:], kernel, stride, padding, output_size)
    lead = x.shape[:-nd]
    per = int(np.prod(out))
    planes = idx.reshape(-1, int(np.prod(x.shape[-nd:]))) if x.size else idx.reshape(0, 1)
    if planes.size and (planes.min() < 0 or planes.max() >= per):
        bad = planes.min() if planes.min() < 0 else planes.max()
        raise IndexError(f"{name}: Found an invalid max index: {bad} (output volumes are of "
                         f"size {'x'.join(map(str, out))})")
    # flat indices into all the output planes: one int array of the input's size
    flat = (planes + (np.arange(planes.shape[0]) * per)[:, None]).reshape(-1)
    return put_flat(input, flat.reshape(x.shape), lead + out, False)


@composite(dtypes="floating", module="torch.nn.functional")
def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """The inverse of `max_pool1d(..., return_indices=True)` (PyTorch's): (N, C, L) or
    (C, L) values at their indices in an output of length (L - 1) * stride - 2 * padding +
    kernel_size (or `output_size`), zeros elsewhere."""
    return _max_unpool("max_unpool1d", 1, input, indices, kernel_size, stride, padding,
                       output_size)


@composite(dtypes="floating", module="torch.nn.functional")
def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """The inverse of `max_pool2d(..., return_indices=True)` (PyTorch's): (N, C, H, W) or
    (C, H, W) values at their flat per-plane indices in planes of (H - 1) * stride -
    2 * padding + kernel_size per dimension (or `output_size`), zeros elsewhere."""
    return _max_unpool("max_unpool2d", 2, input, indices, kernel_size, stride, padding,
                       output_size)
