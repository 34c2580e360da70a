"""Embeddings: `torch.nn.functional.embedding` (a composite: PyTorch's argument handling
and `max_norm`'s renormalization) over `torch.embedding`, the declared lookup, whose
gradient is `embedding_backward` (a scatter-add of g's rows), whose own gradient is the
lookup again: every order of derivative runs these two kernels.

The lookup's node keeps no output and no weight (its rules read neither: the weight's
shape is kept, a placeholder); the indices are a parameter. The scatter-add is one
`np.add.at` over flat element indices (numpy's fast 1-D path, 3-4x faster than over
rows), made per block of rows so that its index temporary stays block-sized. Repeated
indices accumulate; `padding_idx`'s row gets no gradient; `scale_grad_by_freq` divides
each row's gradient by how often its index occurs in the batch (PyTorch's).

Differences from PyTorch: negative indices count from the end (PyTorch raises), and
`sparse=True` gives a dense gradient (there are no sparse tensors here; plain SGD then
makes the same update).

Thread safety: pure functions of their arguments, but `max_norm` renormalizes rows of the
weight in place (as PyTorch): not to be called while another thread reads that weight.
"""
from __future__ import annotations

import numpy as np

from .. import version
from ..grad_mode import no_grad
from ..ops._common import empty, reshaped, row_blocks, zeros
from ..primitive import composite, defop
from ..tensor import Tensor

__all__ = ["embedding", "embedding_lookup", "embedding_backward"]


def _rows(input: np.ndarray, n: int) -> np.ndarray:
    """The indices as row numbers in [0, n) (negative ones counted from the end), intp;
    TypeError for non-integers, IndexError out of range."""
    idx = np.asarray(input)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"embedding: indices must be integers, got dtype {idx.dtype}")
    if not idx.size:
        return idx.astype(np.intp, copy=False)
    lo, hi = idx.min(), idx.max()
    if lo < -n or hi >= n:
        raise IndexError(f"embedding: index out of range for {n} embeddings "
                         f"(got min {lo}, max {hi})")
    if lo < 0:
        idx = np.where(idx < 0, idx + n, idx)
    return idx.astype(np.intp, copy=False)


def _row_factor(rows: np.ndarray, n: int, padding_idx: int, scale_grad_by_freq: bool):
    """Per index, what its gradient row is multiplied by: 0 at `padding_idx`, 1 / count
    of its index with `scale_grad_by_freq`; None when every factor is 1."""
    factor = None
    if scale_grad_by_freq:
        counts = np.bincount(rows.reshape(-1), minlength=n)
        factor = 1.0 / counts[rows]
    if padding_idx >= 0:
        keep = rows != padding_idx
        factor = keep.astype(np.float64) if factor is None else factor * keep
    return factor


def _scatter_rows(g, input, num_weights: int, padding_idx: int, scale_grad_by_freq: bool):
    # Zeros with each g row added at its index (repeats accumulate in order): np.add.at
    # over flat element indices, per block of rows (the index temporary block-sized).
    # Passes: the zero fill and one scattered add of g (a scaled copy of g's block with
    # scale_grad_by_freq).
    g = np.asarray(g)
    d = g.shape[-1]
    rows = _rows(input, num_weights).reshape(-1)
    out = zeros((num_weights, d), g.dtype)
    flat, g2 = out.reshape(-1), reshaped(g, (rows.shape[0], d))
    factor = None if not scale_grad_by_freq else _row_factor(rows, num_weights, -1, True)
    cols = np.arange(d)
    rb, blocks = row_blocks(rows.shape[0], d * 8)
    ibuf = empty((rb, d), np.result_type(rows, cols))
    for a, b in blocks:
        at = np.add(rows[a:b, None] * d, cols, out=ibuf[:b - a])
        v = g2[a:b] if factor is None else g2[a:b] * factor[a:b, None].astype(g.dtype)
        np.add.at(flat, at.reshape(-1), reshaped(v, ((b - a) * d,)))
    if 0 <= padding_idx < num_weights:
        out[padding_idx] = 0
    return out


def _lookup(weight: np.ndarray, rows: np.ndarray) -> np.ndarray:
    # w[rows] (in range: `clip` clips nothing, and unlike `raise` it does not buffer `out`)
    return np.take(weight, rows, axis=0, out=empty(rows.shape + weight.shape[1:], weight.dtype),
                   mode="clip")


def _backward_formula(g, ans, grad, input, num_weights, padding_idx, scale_grad_by_freq):
    # the adjoint of the scatter: the rows of g at the indices, times each one's factor
    rows = _rows(input, num_weights)
    factor = _row_factor(rows, num_weights, padding_idx, scale_grad_by_freq)
    out = embedding_lookup(g, input)
    if factor is None:
        return out
    return out * factor[..., None].astype(np.result_type(np.asarray(ans).dtype, np.float32))


@defop(inputs=("grad",), formula=_backward_formula, unsaved=("grad", "result"), export=False)
def embedding_backward(grad: Tensor, input: Tensor, num_weights: int, padding_idx: int = -1,
                       scale_grad_by_freq: bool = False) -> Tensor:
    """The lookup's gradient as an op: zeros (num_weights, d) with each row of `grad` added
    at its index (not at `padding_idx`; divided by its index's count with
    `scale_grad_by_freq`). Its own gradient is the lookup again."""
    return _scatter_rows(grad, input, num_weights, padding_idx, scale_grad_by_freq)


def _weight_formula(g, ans, weight, input, padding_idx, scale_grad_by_freq, sparse):
    return embedding_backward(g, input, np.shape(weight)[0], padding_idx, scale_grad_by_freq)


def _weight_kernel(g, ans, weight, input, padding_idx, scale_grad_by_freq, sparse):
    return _scatter_rows(g, input, weight.shape[0], padding_idx, scale_grad_by_freq)


@defop(inputs=("weight",), formula=_weight_formula, kernel=_weight_kernel,
       unsaved=("weight", "result"), name="embedding")
def embedding_lookup(weight: Tensor, input: Tensor, padding_idx: int = -1,
                     scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """`torch.embedding`: the rows of `weight` (num_embeddings, dim) at the integer
    indices `input` (any shape); `padding_idx` (-1: none) gets no gradient. What
    `nn.functional.embedding` calls after its argument handling."""
    w = np.asarray(weight)
    if w.ndim != 2:
        raise RuntimeError(f"embedding: 'weight' must be 2-D, got shape {w.shape}")
    return _lookup(w, _rows(input, w.shape[0]))


def _padding(padding_idx, n: int) -> int:
    """PyTorch's handling: None is -1 (none), a negative index counts from the end."""
    if padding_idx is None:
        return -1
    if not -n <= padding_idx < n:
        raise AssertionError("Padding_idx must be within num_embeddings")
    return int(padding_idx) % n


def _renorm_(weight, input, max_norm: float, norm_type: float) -> None:
    """PyTorch's embedding_renorm_: each row the indices use whose `norm_type`-norm is
    above `max_norm` is scaled in place to max_norm / (norm + 1e-7) of itself (outside
    the graph, as under no_grad); the weight's version counter is bumped."""
    w = weight._data if isinstance(weight, Tensor) else weight
    rows = np.unique(_rows(input._data if isinstance(input, Tensor) else input, w.shape[0]))
    norms = np.linalg.norm(w[rows], ord=norm_type, axis=1)
    big = norms > max_norm
    if big.any():
        w[rows[big]] *= (max_norm / (norms[big] + 1e-7))[:, None].astype(w.dtype)
        if isinstance(weight, Tensor):
            version.bump(weight)


@composite(module="torch.nn.functional")
def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None,
              max_norm: float | None = None, norm_type: float = 2.0,
              scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """Rows of `weight` (num_embeddings, dim) picked by integer `input` of any shape.

    `padding_idx`'s row gets no gradient (a negative one counts from the end);
    `max_norm` first renormalizes, in place, each row used whose `norm_type`-norm exceeds
    it (PyTorch's); `scale_grad_by_freq` divides each row's gradient by its index's count
    in the batch; `sparse=True` gives a dense gradient (no sparse tensors here)."""
    w = weight._data if isinstance(weight, Tensor) else np.asarray(weight)
    pad = _padding(padding_idx, w.shape[0])
    if max_norm is not None:
        with no_grad():
            _renorm_(weight, input, float(max_norm), float(norm_type))
    return embedding_lookup(weight, input, pad, scale_grad_by_freq, sparse)
