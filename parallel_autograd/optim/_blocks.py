"""Blocked, allocation-free elementwise updates: what every optimizer step runs on.

An optimizer step is a chain of elementwise passes (Adam: about ten) over the
parameter, its gradient and its state. Run one after the other over whole arrays, each
pass streams every operand through memory again and any temporary is a full-size
array. Here the arrays are cut into blocks of `BLOCK_BYTES` (views, never copies) and
the whole chain runs on one block before the next: the block's operands stay in cache
between passes, so each step reads every input array and writes every updated array
from memory once, and the temporaries are two block-sized scratch buffers per
optimizer and dtype (`Scratch`), allocated on the first step and reused. The
arithmetic is elementwise, so the results are bitwise those of whole-array passes.

Measured on a 10^6-element float64 parameter (2-core dev machine, medians): an Adam step
takes 4.4-4.9 ms with 512 KiB blocks against 5.1-6.7 ms for whole-array passes, SGD
0.45-0.6 ms against 0.5-0.65 ms; smaller blocks pay Python overhead per block.

Blocks are cut from the flattened arrays when all operands are C-contiguous, and
along the leading axes otherwise (any strides work; the scratch takes the block's
shape).

Thread safety: a `Scratch` belongs to one thread of one optimizer (`Optimizer._scratch`
is per thread) and must not be used by two threads at once.
"""
from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from .. import memory

BLOCK_BYTES = 1 << 19  # 512 KiB per operand block: 65,536 float64 or 131,072 float32


class Scratch:
    """Two flat work buffers per dtype, at least as long as the largest block seen
    (grown, never shrunk). Not pickled: an optimizer recreates it empty."""

    def __init__(self) -> None:
        self._bufs: dict[np.dtype, tuple[np.ndarray, np.ndarray]] = {}

    def get(self, dtype: np.dtype, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Two flat buffers of `dtype` with at least `n` elements each."""
        bufs = self._bufs.get(dtype)
        if bufs is None or bufs[0].size < n:
            bufs = (memory.empty(n, dtype), memory.empty(n, dtype))  # cached: a step's
            # threads are new each step, their buffers come back to the cache
            self._bufs[dtype] = bufs
        return bufs


def _index_blocks(shape: tuple[int, ...], block: int) -> Iterator[tuple]:
    """Indices (basic slicing only, so views) that cut an array of `shape` into blocks
    of at most `block` elements (at least one row of the trailing axes that fit)."""
    k, tail = len(shape), 1
    while k > 0 and tail * shape[k - 1] <= block:
        k -= 1
        tail *= shape[k]
    if k == 0:
        yield (Ellipsis,)
        return
    rows, n = max(1, block // tail), shape[k - 1]
    for prefix in np.ndindex(*shape[:k - 1]):
        for a in range(0, n, rows):
            yield prefix + (slice(a, min(a + rows, n)),)


def blocks(arrays: Sequence[np.ndarray], scratch: Scratch) -> Iterator[tuple[np.ndarray, ...]]:
    """Iterate over matching blocks of `arrays` (all of one shape; the first one's
    dtype sets the block length and the scratch dtype): yields a tuple of the arrays'
    block views followed by two scratch views `(S, T)` of the block's shape, whose
    contents are garbage on entry."""
    first = arrays[0]
    if all(a.flags.c_contiguous for a in arrays):
        arrays = [a.reshape(-1) for a in arrays]
    block = max(1, BLOCK_BYTES // first.itemsize)
    s, t = scratch.get(first.dtype, min(block, first.size))
    for idx in _index_blocks(arrays[0].shape, block):
        views = [a[idx] for a in arrays]
        n, shape = views[0].size, views[0].shape
        yield (*views, s[:n].reshape(shape), t[:n].reshape(shape))


def effective_grad(g: np.ndarray, p: np.ndarray, weight_decay: float, maximize: bool,
                   out: np.ndarray) -> np.ndarray:
    """torch.optim's `grad = -grad if maximize else grad`, then
    `grad = grad.add(param, alpha=weight_decay)` when weight_decay != 0: `g` itself
    when neither applies, else the result written into `out` (one or two passes)."""
    if weight_decay != 0:
        np.multiply(p, weight_decay, out=out)
        if maximize:
            np.subtract(out, g, out=out)  # -g + wd*p
        else:
            np.add(g, out, out=out)
        return out
    if maximize:
        return np.negative(g, out=out)
    return g


def lerp_(start: np.ndarray, end: np.ndarray, weight: float, tmp: np.ndarray) -> None:
    """`start.lerp_(end, weight)` with torch's formula (three passes, `tmp` scratch):
    `start + weight*(end - start)` when |weight| < 0.5, else
    `end - (end - start)*(1 - weight)`."""
    np.subtract(end, start, out=tmp)
    if abs(weight) < 0.5:
        tmp *= weight
        start += tmp
    else:
        tmp *= 1 - weight
        np.subtract(end, tmp, out=start)
