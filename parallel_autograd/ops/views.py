"""Shape methods with PyTorch's names: `t expand_as view_as reshape_as unflatten
tensor_split repeat_interleave select sum_to_size masked_select`.

Each is a composition of the shape and index ops (transpose, broadcast_to, reshape,
getitem, index_select, sum), so gradients and create_graph twins are theirs: views
(`t`, `select`, the pieces of `tensor_split`) stay views, `repeat_interleave` is an
index_select (its gradient an index_add), `masked_select` a boolean getitem of the
broadcast input (its gradient a scatter), `sum_to_size` a sum over the broadcast
dimensions. Arguments are checked first and bad ones raise naming the method, with
PyTorch's exception kinds for dimensions and indices (IndexError).

Thread safety: pure functions of their arguments, like the other ops.
"""
from __future__ import annotations

import numpy as np

from ..tensor import Tensor
from . import index as ix
from . import reduce as R
from . import shape as S

__all__ = ["t", "expand_as", "view_as", "reshape_as", "unflatten", "tensor_split",
           "repeat_interleave", "select", "sum_to_size", "masked_select", "METHODS"]


def _shape(x) -> tuple:
    return np.shape(x.data if isinstance(x, Tensor) else x)


def _int(value, op: str, what: str) -> int:
    if isinstance(value, Tensor) and value.ndim == 0 and value.dtype.kind in "iu":
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{op}: {what} must be an int, got {value!r}")
    return int(value)


def _renamed(op: str, fn, *args) -> Tensor:
    """`fn(*args)`, its ValueError re-raised naming `op`."""
    try:
        return fn(*args)
    except ValueError as e:
        raise ValueError(f"{op}: {e}") from None


def t(input) -> Tensor:
    """A matrix transposed (a view); 0-d and 1-D tensors as they are (PyTorch's `t`)."""
    nd = len(_shape(input))
    if nd > 2:
        raise ValueError(f"t: expects a tensor with <= 2 dimensions, but self is {nd}-D")
    return S._transpose(input, axes=None)


def expand_as(input, other) -> Tensor:
    """`input` expanded (broadcast, a view) to `other`'s shape."""
    return _renamed("expand_as", S.expand, input, _shape(other))


def view_as(input, other) -> Tensor:
    """`input` with `other`'s shape (`view`; a view when numpy can make one)."""
    return _renamed("view_as", S.reshape, input, _shape(other))


def reshape_as(input, other) -> Tensor:
    """`input` reshaped to `other`'s shape."""
    return _renamed("reshape_as", S.reshape, input, _shape(other))


def unflatten(input, dim: int, sizes) -> Tensor:
    """Dimension `dim` split into `sizes` (one of them may be -1, inferred)."""
    shape = _shape(input)
    if not shape:
        raise ValueError("unflatten: input must have at least 1 dimension")
    d = ix._dim(dim, len(shape), "unflatten")
    sizes = tuple(_int(s, "unflatten", "sizes") for s in sizes)
    known = int(np.prod([s for s in sizes if s != -1]))
    n = shape[d]
    bad = not sizes or sizes.count(-1) > 1 or any(s < -1 for s in sizes) or (
        n != known if -1 not in sizes else (known == 0 or n % known))
    if bad:
        raise ValueError(f"unflatten: provided sizes {list(sizes)} don't multiply up to the "
                         f"size of dim {d} ({n}) in the input tensor")
    sizes = tuple(n // known if s == -1 else s for s in sizes)
    return S.reshape(input, shape[:d] + sizes + shape[d + 1:])


def _split_points(ios, n: int) -> list:
    """tensor_split's boundaries: from a number of sections or a list of indices."""
    if isinstance(ios, Tensor):
        if ios.dtype.kind not in "iu" or ios.ndim > 1:
            raise TypeError(f"tensor_split: indices_or_sections must be an int, or a 0-D or "
                            f"1-D integer tensor, got dtype {ios.dtype}, {ios.ndim}-D")
        ios = ios.item() if ios.ndim == 0 else ios.data.tolist()
    if isinstance(ios, (list, tuple)):
        return [_int(i, "tensor_split", "indices") for i in ios]
    k = _int(ios, "tensor_split", "indices_or_sections")
    if k <= 0:
        raise ValueError(f"tensor_split: number of sections must be larger than 0, got {k}")
    q, r = divmod(n, k)
    return [int(v) for v in np.cumsum([q + 1] * r + [q] * (k - r))[:-1]]


def tensor_split(input, indices_or_sections, dim: int = 0) -> tuple:
    """Views of `input` split along `dim`: into `indices_or_sections` nearly equal pieces
    (the first `n % k` one larger) or at the given indices (slice rules: negative ones
    count from the end, pieces may be empty)."""
    shape = _shape(input)
    if not shape:
        raise ValueError("tensor_split: expected at least a 1-dimensional tensor, but got a "
                         "tensor with 0 dims")
    d = ix._dim(dim, len(shape), "tensor_split")
    points = _split_points(indices_or_sections, shape[d])
    lead = (slice(None),) * d
    return tuple(S.getitem(input, lead + (slice(a, b),))
                 for a, b in zip([0] + points, points + [None]))


def _repeats(repeats, n: int) -> np.ndarray:
    if isinstance(repeats, (int, np.integer)) and not isinstance(repeats, bool):
        r = np.full(n, int(repeats))
    else:
        r = ix._indices(repeats, "repeat_interleave", "repeats")
        if r.ndim > 1 or (r.size != n and r.size != 1):
            raise ValueError(f"repeat_interleave: repeats must have the same size as input "
                             f"along dim ({n}), or one element; got shape {r.shape}")
        r = np.broadcast_to(r.reshape(-1), (n,))
    if r.size and r.min() < 0:
        raise ValueError("repeat_interleave: repeats must be non-negative")
    return r


def repeat_interleave(input, repeats, dim: int | None = None, *,
                      output_size: int | None = None) -> Tensor:
    """Each element (slice along `dim`; None: of the flattened input) repeated `repeats`
    times in place (numpy's `repeat`): an int, or one count per element. Differentiable
    (an index_select; the gradient sums the copies)."""
    shape = _shape(input)
    if dim is None or not shape:
        if dim is not None:
            ix._dim(dim, 0, "repeat_interleave")
        input, d = S.reshape(input, (-1,)), 0
        n = int(np.prod(shape))
    else:
        d = ix._dim(dim, len(shape), "repeat_interleave")
        n = shape[d]
    index = np.repeat(np.arange(n), _repeats(repeats, n))
    if output_size is not None and output_size != index.size:
        raise ValueError(f"repeat_interleave: output_size {output_size} does not match the "
                         f"sum of repeats {index.size}")
    return ix.index_select(input, d, index)


def select(input, dim: int, index: int) -> Tensor:
    """The slice at `index` along `dim`, that dimension removed (a view)."""
    shape = _shape(input)
    if not shape:
        raise IndexError("select: cannot be applied to a 0-dim tensor")
    d = ix._dim(dim, len(shape), "select")
    i = _int(index, "select", "index")
    if not -shape[d] <= i < shape[d]:
        raise IndexError(f"select: index {i} out of range for tensor of size {list(shape)} "
                         f"at dimension {d}")
    return S.getitem(input, (slice(None),) * d + (i,))


def sum_to_size(input, *size) -> Tensor:
    """`input` summed down to `size`, which must expand to input's shape (the gradient of
    a broadcast); the tensor itself if it already has that shape."""
    size = ix._sizes(size, "sum_to_size")
    shape = _shape(input)
    lead = len(shape) - len(size)
    if lead < 0 or any(s not in (n, 1) for s, n in zip(size, shape[lead:])):
        raise ValueError(f"sum_to_size: size {list(size)} is not expandable to size "
                         f"{list(shape)}")
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(size)
                                      if s == 1 and shape[lead + i] != 1)
    if not axes:
        return input if isinstance(input, Tensor) else Tensor._wrap(np.asarray(input))
    return S.reshape(R.sum(input, axis=axes, keepdims=True), size)


def masked_select(input, mask) -> Tensor:
    """The elements of `input` where the boolean `mask` is True (both broadcast), as a new
    1-D tensor; the gradient is scattered back (summed over broadcast dimensions)."""
    m = ix._mask(mask, "masked_select")
    shape = _shape(input)
    try:
        full = np.broadcast_shapes(shape, m.shape)
    except ValueError:
        raise ValueError(f"masked_select: mask of shape {m.shape} does not broadcast with "
                         f"input of shape {shape}") from None
    if full != shape:
        input = S.broadcast_to(input, full)
    return S.getitem(input, np.broadcast_to(m, full))


METHODS = {
    "t": t, "expand_as": expand_as, "view_as": view_as, "reshape_as": reshape_as,
    "unflatten": unflatten, "tensor_split": tensor_split,
    "repeat_interleave": repeat_interleave, "select": select, "sum_to_size": sum_to_size,
    "masked_select": masked_select,
}
