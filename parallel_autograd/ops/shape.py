"""Shape ops: views, indexing, joining and splitting."""
from __future__ import annotations

import numpy as np

from ..primitive import primitive, record
from ..tensor import Tensor

_reshape = primitive("reshape", lambda x, shape: np.reshape(x, shape),
                     lambda g, ans, x, shape: np.reshape(g, x.shape))


def reshape(x, *shape) -> Tensor:
    """The same values in a new shape (a view when numpy can make one); `-1` infers
    one dimension. Accepts `reshape(x, 2, 3)` or `reshape(x, (2, 3))`."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return _reshape(x, shape=shape)


def flatten(x, start_dim: int = 0, end_dim: int = -1):
    """Dimensions `start_dim`..`end_dim` merged into one (PyTorch's flatten; a 0-d
    tensor becomes shape (1,))."""
    s = x.shape
    if not s:
        return reshape(x, (1,))  # PyTorch: a 0-d tensor flattens to shape (1,)
    start, end = start_dim % len(s), end_dim % len(s)
    return reshape(x, s[:start] + (int(np.prod(s[start:end + 1])),) + s[end + 1:])


def _transpose_vjp(g, ans, x, axes):
    if axes is None:
        return np.transpose(g)
    return np.transpose(g, np.argsort([a % x.ndim for a in axes]))  # axes may be negative


_transpose = primitive("transpose", lambda x, axes: np.transpose(x, axes), _transpose_vjp)


def transpose(x, *axes) -> Tensor:
    """Reverse all axes (no arguments), swap two (`transpose(x, 0, 1)` like
    PyTorch), or permute them (`transpose(x, (2, 0, 1))`, like numpy)."""
    if not axes:
        return _transpose(x, axes=None)
    if len(axes) == 1:
        return _transpose(x, axes=tuple(axes[0]))
    if len(axes) == 2:
        return swapaxes(x, axes[0], axes[1])
    return _transpose(x, axes=tuple(axes))


def permute(x, *dims) -> Tensor:
    """The dimensions reordered as `dims` (a view)."""
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    return _transpose(x, axes=tuple(dims))


def swapaxes(x, a: int, b: int):
    """Dimensions `a` and `b` exchanged (a view)."""
    nd = np.ndim(x.data if isinstance(x, Tensor) else x)
    axes = list(range(nd))
    axes[a], axes[b] = axes[b], axes[a]
    return _transpose(x, axes=tuple(axes))


_broadcast = primitive("broadcast_to", lambda x, shape: np.broadcast_to(x, shape),
                       lambda g, ans, x, shape: g)  # the node sums it back to x.shape


def broadcast_to(x, *shape) -> Tensor:
    """`x` broadcast to `shape` (a read-only view); the gradient is summed back."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return _broadcast(x, shape=shape)


def expand(x, *shape) -> Tensor:
    """PyTorch's expand: -1 keeps a dimension's size."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    xs = x.shape
    lead = len(shape) - len(xs)
    shape = tuple(xs[i - lead] if s == -1 else s for i, s in enumerate(shape))
    return _broadcast(x, shape=shape)


_squeeze = primitive("squeeze", lambda x, axis: np.squeeze(x, axis=axis),
                     lambda g, ans, x, axis: np.reshape(g, x.shape))
_unsqueeze = primitive("unsqueeze", lambda x, axis: np.expand_dims(x, axis),
                       lambda g, ans, x, axis: np.reshape(g, x.shape))


def squeeze(x, axis=None) -> Tensor:
    """Dimensions of size 1 removed (all, or `axis`)."""
    return _squeeze(x, axis=axis)


def unsqueeze(x, axis: int):
    """A dimension of size 1 inserted at `axis`."""
    return _unsqueeze(x, axis=axis)


# ---- indexing ---------------------------------------------------------------------
def _is_basic(index) -> bool:
    """Slices, ints, None and Ellipsis only: no element is selected twice."""
    parts = index if isinstance(index, tuple) else (index,)
    return all(p is None or p is Ellipsis or isinstance(p, slice)
               or (isinstance(p, (int, np.integer)) and not isinstance(p, bool))
               for p in parts)


def _getitem_vjp(g, ans, x, index):
    out = np.zeros(x.shape, dtype=g.dtype)
    if _is_basic(index):
        out[index] = g
    else:
        np.add.at(out, index, g)  # repeated integer indices accumulate
    return out


_getitem = primitive("getitem", lambda x, index: x[index], _getitem_vjp)


def _canonical_index(idx):
    if isinstance(idx, Tensor):
        return idx.data
    if isinstance(idx, list):
        return np.asarray(idx)
    if isinstance(idx, tuple):
        return tuple(_canonical_index(i) for i in idx)
    return idx


def getitem(x, index) -> Tensor:
    """`x[index]`: basic slices, integer arrays and boolean masks."""
    return _getitem(x, index=_canonical_index(index))


# ---- joining and splitting ----------------------------------------------------------
def _concat_rule(axis, bounds):
    def rule(g, *_):
        lead = (slice(None),) * (axis % g.ndim)
        return tuple(g[lead + (slice(lo, hi),)] for lo, hi in bounds)
    return rule


def concat(tensors, axis: int = 0):
    """The tensors joined along an existing `axis` (`pa.cat` is the same function)."""
    tensors = list(tensors)
    arrays = [t.data if isinstance(t, Tensor) else np.asarray(t) for t in tensors]
    try:
        out = np.concatenate(arrays, axis=axis)
    except ValueError as e:
        raise ValueError(f"concat: {e}") from e
    sizes = np.cumsum([0] + [a.shape[axis] for a in arrays])
    bounds = list(zip(sizes[:-1], sizes[1:]))
    return record("concat", out, tensors, joint=_concat_rule(axis, bounds))


def stack(tensors, axis: int = 0):
    """The tensors joined along a new `axis`."""
    tensors = list(tensors)
    arrays = [t.data if isinstance(t, Tensor) else np.asarray(t) for t in tensors]
    try:
        out = np.stack(arrays, axis=axis)
    except ValueError as e:
        raise ValueError(f"stack: {e}") from e
    n = len(arrays)

    def rule(g):
        lead = (slice(None),) * (axis % g.ndim)
        return tuple(g[lead + (i,)] for i in range(n))

    return record("stack", out, tensors, joint=rule)


def split(x, split_size_or_sections, axis: int = 0):
    """PyTorch's split: an int is a chunk size, a list gives each chunk's size."""
    n = x.shape[axis]
    if isinstance(split_size_or_sections, int):
        if split_size_or_sections <= 0:
            raise ValueError("split: chunk size must be positive")
        sizes = [split_size_or_sections] * (n // split_size_or_sections)
        if n % split_size_or_sections:
            sizes.append(n % split_size_or_sections)
    else:
        sizes = list(split_size_or_sections)
        if sum(sizes) != n:
            raise ValueError(f"split: sizes {sizes} do not add up to {n} along axis {axis}")
    out, start = [], 0
    for s in sizes:
        idx = [slice(None)] * x.ndim
        idx[axis] = slice(start, start + s)
        out.append(getitem(x, tuple(idx)))
        start += s
    return out


def _pad_vjp(g, ans, x, pad_width, mode, value):
    return g[tuple(slice(lo, lo + n) for (lo, _), n in zip(pad_width, x.shape))]


_pad = primitive("pad",
                 lambda x, pad_width, mode, value: np.pad(x, pad_width, mode="constant",
                                                          constant_values=value),
                 _pad_vjp)


def pad(x, pad_width, value: float = 0.0):
    """Constant padding with numpy's `pad_width` ((before, after) per axis)."""
    shape = x.shape
    pw = np.broadcast_to(np.asarray(pad_width, dtype=int), (len(shape), 2))
    pw = tuple((int(a), int(b)) for a, b in pw)
    return _pad(x, pad_width=pw, mode="constant", value=value)
