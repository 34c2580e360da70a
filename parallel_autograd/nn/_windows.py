"""Sliding-window geometry, shared by the convolutions (nn/_conv.py) and the pools
(nn/_pool.py, nn/_pool3d.py, nn/_lppool.py, nn/_unpool.py, nn/_resample.py): argument
checks (`ntuple`, `adaptive_output_size`), the blocks of outputs and inputs each kernel
offset touches (`taps`), and PyTorch's adaptive windows.

For kernel offset k (one index per spatial dim), output position o reads input position
o*stride + k*dilation - padding; `taps` gives, per offset, the block of outputs whose input
lies inside the image and that block of inputs, so padding is never materialized.

Thread safety: pure functions; `taps` is cached (an lru_cache: thread safe, immutable
results).
"""
from __future__ import annotations

import functools
import itertools
import math

import numpy as np

__all__ = ["ntuple", "prod", "span", "taps", "adaptive_windows", "adaptive_bounds",
           "adaptive_output_size", "positive_int"]


def ntuple(v, nd: int, what: str, name: str, minimum: int) -> tuple:
    """`v` (an int or `nd` ints) as a tuple of `nd` ints >= `minimum` (ValueError naming
    the op otherwise)."""
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        out = (int(v),) * nd
    else:
        try:
            out = tuple(int(a) for a in v)
        except (TypeError, ValueError):
            out = ()
        if isinstance(v, str) or len(out) != nd:
            many = {1: "a 1-tuple", 2: "a pair", 3: "a triple"}.get(nd, f"{nd}")
            raise ValueError(f"{name}: {what} must be an int or {many} of ints, got {v!r}")
    if any(a < minimum for a in out):
        if what == "stride":
            raise ValueError(f"{name}: kernel size and stride must be positive, got "
                             f"stride {v!r}")
        raise ValueError(f"{name}: {what} must be "
                         f"{'positive' if minimum > 0 else 'non-negative'}, got {v!r}")
    return out


def positive_int(v, what: str, name: str) -> int:
    """`v` as an int >= 1 (`groups`, pixel shuffle factors): ValueError naming the op."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValueError(f"{name}: {what} must be a positive integer, got {v!r}")
    return int(v)


def prod(shape) -> int:
    """The product of a shape's sizes, as a Python int."""
    return math.prod(int(s) for s in shape)


def span(k: int, pad: int, stride: int, dil: int, size: int, n_out: int) -> tuple:
    """(outputs, inputs): the slice of output indices o with 0 <= o*stride + k*dil - pad <
    size, and the slice of those input indices."""
    off = k * dil - pad
    o0 = min(n_out, max(0, -(off // stride)))
    o1 = max(o0, min(n_out, (size - 1 - off) // stride + 1))
    if o1 == o0:
        return slice(0, 0), slice(0, 0)
    start = o0 * stride + off
    return slice(o0, o1), slice(start, start + (o1 - o0 - 1) * stride + 1, stride)


@functools.lru_cache(maxsize=512)
def taps(in_sz: tuple, out_sz: tuple, kernel: tuple, stride: tuple, padding: tuple,
         dilation: tuple) -> tuple:
    """Per kernel offset in row-major order: (t, offset (one index per dim), output block,
    input block), each block an index for the trailing spatial axes of an array. Cached
    (a training loop asks for the same few geometries every step; the result is
    immutable)."""
    spans = [[span(k, p, s, d, n, o) for k in range(kk)]
             for n, o, kk, s, p, d in zip(in_sz, out_sz, kernel, stride, padding, dilation)]
    out = []
    for t, idx in enumerate(itertools.product(*(range(k) for k in kernel))):
        blocks = [spans[d][k] for d, k in enumerate(idx)]
        out.append((t, idx, (Ellipsis,) + tuple(b[0] for b in blocks),
                    (Ellipsis,) + tuple(b[1] for b in blocks)))
    return tuple(out)


def adaptive_bounds(size: int, n_out: int) -> tuple:
    """PyTorch's adaptive windows of one dim: (start, end) arrays, window i spanning
    [floor(i*size/n_out), ceil((i+1)*size/n_out))."""
    i = np.arange(n_out)
    return (i * size) // n_out, -((-(i + 1) * size) // n_out)


def adaptive_windows(size: int, n_out: int) -> np.ndarray:
    """(n_out, kmax) input indices of each adaptive window (`adaptive_bounds`), shorter
    windows padded by repeating their last index (a repeat never wins a maximum: the
    first one comes first)."""
    start, end = adaptive_bounds(size, n_out)
    kmax = int((end - start).max())
    return np.minimum(start[:, None] + np.arange(kmax), end[:, None] - 1)


def adaptive_output_size(name: str, output_size, sizes) -> tuple:
    """`output_size` (an int, or one per dim, None meaning the input's size) as ints >= 1."""
    nd = len(sizes)
    if output_size is None or isinstance(output_size, (int, np.integer)):
        output_size = (output_size,) * nd
    try:
        output_size = tuple(output_size)
    except TypeError:
        output_size = (output_size,)
    if len(output_size) != nd:
        raise ValueError(f"{name}: output_size must be an int or {nd} values, got "
                         f"{output_size!r}")
    out = tuple(n if o is None else o for o, n in zip(output_size, sizes))
    if any(isinstance(o, bool) or not isinstance(o, (int, np.integer)) or o < 1
           for o in out):
        raise ValueError(f"{name}: output_size must be positive integers, got "
                         f"{output_size!r}")
    return tuple(int(o) for o in out)
