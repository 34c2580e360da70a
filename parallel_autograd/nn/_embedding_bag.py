"""`torch.nn.functional.embedding_bag`: sums, means or maxima of bags of embedding rows,
a composite over the declared lookup (`embedding`), `index_add` and `take_along_dim`,
so its gradients (the weight's and `per_sample_weights`') are theirs, to any order.

Bags: a 2-D input (B, N) is B bags of N indices; a 1-D input is cut at `offsets` (bag i
is `input[offsets[i]:offsets[i+1]]`, the last running to the end, or `offsets` ending
with the input's length when `include_last_offset`). An empty bag gives zeros. Indices
equal to `padding_idx` are left out of their bag (a mean divides by the others' count);
`per_sample_weights` (mode 'sum' only) scale each index's row. 'max' takes, per bag and
column, the first row holding the maximum, whose entry alone gets the gradient.

Thread safety: a pure function of its arguments, except `max_norm`, which renormalizes
rows of the weight in place (as PyTorch's, and `embedding`'s).
"""
from __future__ import annotations

import numpy as np

from ..ops import index as I
from ..ops import shape as S
from ..ops._common import array
from ..primitive import composite
from ..tensor import Tensor
from ._embedding import embedding

__all__ = ["embedding_bag"]


def _bags(input, offsets, include_last_offset: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """The flat indices, each one's bag number, and the number of bags (PyTorch's
    argument checks and messages)."""
    idx = np.asarray(array(input))
    if idx.ndim == 2:
        if offsets is not None:
            raise ValueError(f"if input is 2D, then offsets has to be None, as input is "
                             f"treated is a mini-batch of fixed length sequences. However, "
                             f"found offsets of type {type(offsets)}")
        b, n = idx.shape
        return idx.reshape(-1), np.repeat(np.arange(b), n), b
    if idx.ndim != 1:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension "
                         f"{idx.ndim}")
    if offsets is None:
        raise ValueError("offsets has to be a 1D Tensor but got None")
    off = np.asarray(array(offsets))
    if off.ndim != 1:
        raise ValueError("offsets has to be a 1D Tensor")
    if off.dtype.kind not in "iu":
        raise RuntimeError(f"embedding_bag: offsets must be integers, got {off.dtype}")
    if off.size and off[0] != 0:
        raise RuntimeError(f"offsets[0] has to be 0, i.e., the first sequence in the "
                           f"mini-batch has to start from position 0. However, got {off[0]}")
    ends = off if not include_last_offset else off[:-1]
    bounds = np.append(off, idx.size) if not include_last_offset else off
    if np.any(np.diff(bounds) < 0) or (bounds.size and bounds[-1] > idx.size):
        raise RuntimeError(f"embedding_bag: offsets must be non-decreasing and at most the "
                           f"input's length {idx.size}, got {off.tolist()}")
    nbags = ends.size
    bag = np.repeat(np.arange(nbags), np.diff(bounds)[:nbags]) if nbags else \
        np.zeros(0, np.intp)
    if bag.size < idx.size:  # include_last_offset: indices past the last offset: no bag
        idx = idx[:bag.size]
    return idx, bag, nbags


def _max_rows(values: np.ndarray, bag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For the bags that hold rows (`bag` non-decreasing): their numbers, and per bag and
    column the position of the first row holding the column's maximum."""
    starts = np.flatnonzero(np.r_[True, bag[1:] != bag[:-1]]) if bag.size else \
        np.zeros(0, np.intp)
    if not starts.size:
        return starts, np.zeros((0, values.shape[1]), np.intp)
    top = np.maximum.reduceat(values, starts, axis=0)
    pos = np.arange(values.shape[0])[:, None]
    seg = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, bag.size]))
    at = np.where(values == top[seg], pos, values.shape[0])
    return bag[starts], np.minimum.reduceat(at, starts, axis=0)


@composite(module="torch.nn.functional")
def embedding_bag(input: Tensor, weight: Tensor, offsets: Tensor | None = None,
                  max_norm: float | None = None, norm_type: float = 2,
                  scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                  per_sample_weights: Tensor | None = None, include_last_offset: bool = False,
                  padding_idx: int | None = None) -> Tensor:
    """The sum, mean or max of each bag of rows of `weight` (num_embeddings, dim) picked by
    integer `input`: (B, N) (B bags of N) or 1-D cut at `offsets` -> (B, dim). See the
    module docstring for bags, `padding_idx` and `per_sample_weights`; `max_norm`,
    `norm_type`, `scale_grad_by_freq` and `sparse` are `embedding`'s."""
    if mode not in ("sum", "mean", "max"):
        raise ValueError("mode has to be one of sum, mean or max")
    w = np.asarray(array(weight))
    if w.dtype.kind != "f":  # (PyTorch's check, its message)
        raise RuntimeError(f"Expected tensor for argument #1 'weight' to have one of the "
                           f"following scalar types: Half, BFloat16, Float, Double; but got "
                           f"{w.dtype} instead (while checking arguments for embedding_bag)")
    if np.ndim(array(input)) == 2 and np.shape(array(input))[1] == 0:
        raise RuntimeError("embedding_bag: 2-D input of bags of 0 indices "
                           f"{tuple(np.shape(array(input)))} (PyTorch: step must be nonzero)")
    if per_sample_weights is not None:
        if mode != "sum":
            raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. "
                                      f"per_sample_weights is only supported for mode='sum' "
                                      f"(got mode='{mode}').")
        if np.shape(array(per_sample_weights)) != np.shape(array(input)):
            raise ValueError(f"embedding_bag: If per_sample_weights "
                             f"({np.shape(array(per_sample_weights))}) is not None, then it "
                             f"must have the same shape as the input "
                             f"({np.shape(array(input))})")
    idx, bag, nbags = _bags(input, offsets, include_last_offset)
    if idx.dtype.kind not in "iu":
        raise RuntimeError(f"embedding_bag: indices must be integers (int64 or int32), got "
                           f"{idx.dtype}")
    n = w.shape[0]
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise RuntimeError(f"embedding_bag: index out of range [0, {n}): got min "
                           f"{idx.min()}, max {idx.max()}")
    keep = np.ones(idx.shape, bool)
    if padding_idx is not None:
        if not -n <= padding_idx < n:
            raise AssertionError("padding_idx must be within num_embeddings")
        keep = idx != padding_idx % n
    idx, bag = idx[keep], bag[keep]
    rows = embedding(idx, weight, None, max_norm, norm_type, scale_grad_by_freq, sparse)
    out = Tensor._wrap(np.zeros((nbags, w.shape[1]), w.dtype))
    if mode == "max":
        which, pos = _max_rows(np.asarray(array(rows)), bag)
        return I.index_add(out, 0, which, I.take_along_dim(rows, pos, 0))
    if per_sample_weights is not None:
        psw = S.reshape(per_sample_weights, (-1,))
        rows = rows * S.unsqueeze(I.index_select(psw, 0, np.flatnonzero(keep)), 1)
    total = I.index_add(out, 0, bag, rows)
    if mode == "sum":
        return total
    counts = np.maximum(np.bincount(bag, minlength=nbags), 1).astype(w.dtype)
    return total / counts[:, None]
