"""Shape ops: views, indexing, joining and splitting. Where numpy would copy, the
copy's memory comes from the caching allocator (`memory`)."""
from __future__ import annotations

import numpy as np

from ..memory import empty as _empty
from ..primitive import primitive, record
from ..tensor import Tensor


def _reshaped(a, shape):
    """`np.reshape(a, shape)`: a view when numpy can make one, else a C-order copy into
    a cached buffer (one pass)."""
    if type(a) is not np.ndarray or a.size < 8192 or a.flags.c_contiguous:
        return np.reshape(a, shape)
    try:
        return np.reshape(a, shape, copy=False)
    except TypeError:                 # numpy < 2.1: no copy=; numpy decides
        return np.reshape(a, shape)
    except ValueError:                # a copy is needed (or the shape is wrong)
        pass
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if shape.count(-1) == 1:
        known = 1
        for d in shape:
            known *= d if d != -1 else 1
        if known <= 0 or a.size % known:
            return np.reshape(a, shape)  # numpy's own error
        shape = tuple(a.size // known if d == -1 else d for d in shape)
    if int(np.prod(shape)) != a.size or any(d < 0 for d in shape):
        return np.reshape(a, shape)      # numpy's own error
    out = _empty(shape, a.dtype)
    np.copyto(out.reshape(a.shape), a)   # out is C-contiguous: reshape is a view
    return out


def fold(shape, have: tuple) -> tuple:
    """`shape` with its -1 made explicit where numpy cannot infer it: an empty array
    (`have`, its shape) reshaped to a shape whose other dimensions multiply to 0, such
    as `(-1, 0)` (Linear with 0 out features folding its batch dimensions). The -1 then
    stands for the dimensions of `have` the given ones leave out (they match `have` at
    the front and the back); any other shape is returned as it is, for numpy to judge.
    Internal callers only: user reshapes refuse the ambiguity, as PyTorch does."""
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if shape.count(-1) != 1:
        return shape
    i = shape.index(-1)
    head, tail = shape[:i], shape[i + 1:]
    if len(head) + len(tail) > len(have) or have[:len(head)] != head \
            or have[len(have) - len(tail):] != tail:
        return shape
    return head + (int(np.prod(have[len(head):len(have) - len(tail)])),) + tail


_reshape = primitive("reshape", lambda x, shape: _reshaped(x, shape),
                     lambda g, ans, x, shape: _reshaped(g, x.shape))


def _cloned(x):
    out = _empty(np.shape(x), np.asarray(x).dtype)
    np.copyto(out, x)  # one pass
    return out


_clone = primitive("clone", _cloned, lambda g, ans, x: g)
_clone.vjps[0].graph = lambda g, ans, x: g


def clone(x) -> Tensor:
    """A copy of `x` with its own memory (and version counter) that stays on the graph:
    the gradient flows through it unchanged (PyTorch's `Tensor.clone`). What to write into
    instead of a tensor a graph saved."""
    return _clone(x)


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
    for d in (start_dim, end_dim):
        _check_dim(d, len(s), "flatten")
    if not s:
        return reshape(x, (1,))  # PyTorch: a 0-d tensor flattens to shape (1,)
    start, end = start_dim % len(s), end_dim % len(s)
    if start > end:
        raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
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


def _check_dim(d, nd: int, op: str) -> None:
    """PyTorch's range for a dimension: [-nd, nd), a 0-d tensor's [-1, 0]."""
    lo, hi = -max(nd, 1), max(nd, 1) - 1
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or not lo <= d <= hi:
        raise IndexError(f"{op}: dimension out of range (expected to be in range of "
                         f"[{lo}, {hi}], but got {d!r})")


def swapaxes(x, a: int, b: int):
    """Dimensions `a` and `b` exchanged (a view)."""
    nd = np.ndim(x.data if isinstance(x, Tensor) else x)
    _check_dim(a, nd, "transpose")
    _check_dim(b, nd, "transpose")
    if nd == 0:
        return _transpose(x, axes=())  # the one dimension a 0-d tensor has, with itself
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
    if lead < 0 or any(s == -1 for s in shape[:lead]):
        raise ValueError(f"expand: the expanded size {list(shape)} has fewer dimensions than "
                         f"the tensor ({list(xs)}), or -1 in a new leading dimension")
    shape = tuple(xs[i - lead] if s == -1 else s for i, s in enumerate(shape))
    return _broadcast(x, shape=shape)


_squeeze = primitive("squeeze", lambda x, axis: np.squeeze(x, axis=axis),
                     lambda g, ans, x, axis: _reshaped(g, x.shape))
_unsqueeze = primitive("unsqueeze", lambda x, axis: np.expand_dims(x, axis),
                       lambda g, ans, x, axis: _reshaped(g, x.shape))


def squeeze(x, axis=None) -> Tensor:
    """Dimensions of size 1 removed (all, or those of `axis`, an int or a tuple: as in
    PyTorch, a named dimension whose size is not 1 is kept, not an error)."""
    if axis is not None:
        shape = np.shape(x.data if isinstance(x, Tensor) else x)
        axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
        nd = max(len(shape), 1)
        for a in axes:
            if not -nd <= a < nd:
                raise IndexError(f"squeeze: dimension {a} is out of range for a tensor with "
                                 f"{len(shape)} dimensions")
        axis = tuple(sorted({int(a) % nd for a in axes if len(shape) and shape[a] == 1}))
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
    out = _empty(x.shape, g.dtype)  # zeros, then g written in: 2 passes
    out.fill(0)
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


def _joined(arrays, axis, new):
    """A cached output for concatenating (`new` None) or stacking (`new` = count)
    `arrays` along `axis`, or None (small, mixed dtypes or shapes: numpy decides and
    raises its own errors)."""
    if not arrays:
        return None
    first = arrays[0]
    if first.ndim == 0 and new is None:
        return None
    dt, shape = first.dtype, first.shape
    total = 0
    for a in arrays:
        if a.dtype != dt or a.ndim != first.ndim:
            return None
        total += a.size
    if total < 8192:
        return None
    nd = first.ndim + (new is not None)
    if not -nd <= axis < nd:
        return None
    ax = axis % nd
    if new is not None:
        if any(a.shape != shape for a in arrays):
            return None
        return _empty(shape[:ax] + (new,) + shape[ax:], dt)
    rest = shape[:ax] + shape[ax + 1:]
    if any(a.shape[:ax] + a.shape[ax + 1:] != rest for a in arrays):
        return None
    return _empty(shape[:ax] + (sum(a.shape[ax] for a in arrays),) + shape[ax + 1:], dt)


def concat(tensors, axis: int = 0):
    """The tensors joined along an existing `axis` (`pa.cat` is the same function)."""
    tensors = list(tensors)
    arrays = [t.data if isinstance(t, Tensor) else np.asarray(t) for t in tensors]
    try:
        out = np.concatenate(arrays, axis=axis, out=_joined(arrays, axis, None))
    except (ValueError, TypeError) as e:
        raise ValueError(f"concat: {e}") from e
    sizes = np.cumsum([0] + [a.shape[axis] for a in arrays])
    bounds = list(zip(sizes[:-1], sizes[1:]))
    rule = _concat_rule(axis, bounds)
    rule.graph = _on_tensors(rule)  # slicing a Tensor g: the same rule, recorded
    return record("concat", out, tensors, joint=rule)


def stack(tensors, axis: int = 0):
    """The tensors joined along a new `axis`."""
    tensors = list(tensors)
    arrays = [t.data if isinstance(t, Tensor) else np.asarray(t) for t in tensors]
    try:
        out = np.stack(arrays, axis=axis, out=_joined(arrays, axis, len(arrays)))
    except (ValueError, TypeError) as e:
        raise ValueError(f"stack: {e}") from e
    n = len(arrays)

    def rule(g):
        lead = (slice(None),) * (axis % g.ndim)
        return tuple(g[lead + (i,)] for i in range(n))

    rule.graph = _on_tensors(rule)
    return record("stack", out, tensors, joint=rule)


def _on_tensors(rule):
    """The differentiable form of a joint rule that only slices g (create_graph)."""
    return lambda g, node: rule(g)


def split(x, split_size_or_sections, axis: int = 0):
    """PyTorch's split: an int is a chunk size, a list gives each chunk's size."""
    if not x.ndim:
        raise ValueError("split: expects at least a 1-dimensional tensor")
    _check_dim(axis, x.ndim, "split")
    n = x.shape[axis]
    if isinstance(split_size_or_sections, int):
        if split_size_or_sections <= 0:
            raise ValueError("split: chunk size must be positive")
        sizes = [split_size_or_sections] * (n // split_size_or_sections)
        if n % split_size_or_sections or not n:  # an empty dimension: one empty piece
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


def _pad_forward(x, pad_width, mode, value):
    # the constant everywhere, then x into the middle: 2 passes over the output
    x = np.asarray(x)
    out = _empty(tuple(lo + n + hi for (lo, hi), n in zip(pad_width, x.shape)), x.dtype)
    out.fill(value)
    out[tuple(slice(lo, lo + n) for (lo, _), n in zip(pad_width, x.shape))] = x
    return out


_pad = primitive("pad", _pad_forward, _pad_vjp)


def pad(x, pad_width, value: float = 0.0):
    """Constant padding with numpy's `pad_width` ((before, after) per axis)."""
    shape = x.shape
    pw = np.broadcast_to(np.asarray(pad_width, dtype=int), (len(shape), 2))
    pw = tuple((int(a), int(b)) for a, b in pw)
    return _pad(x, pad_width=pw, mode="constant", value=value)
