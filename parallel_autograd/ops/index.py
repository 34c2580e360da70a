"""PyTorch's shape and index ops: `repeat tile flip roll tril triu diagonal diag_embed
gather scatter scatter_add index_select index_add masked_fill masked_scatter
take_along_dim (take_along_axis) einsum narrow movedim unbind chunk`.

Names, arguments (`dim`, `index`, `src`, `source`, `value`, ...) and semantics are
PyTorch's: indices are integer arrays or Tensors, must lie in [0, size) (negative ones are
refused, as PyTorch refuses them), and bad input raises before anything is recorded, naming
the op. Each op has a fast rule on ndarrays and a differentiable twin (`rule.graph`), so
`create_graph=True` works through it to any order. The linear ops come in adjoint pairs
whose rules are each other: gather / scatter_add (and index_select / index_add, diagonal /
diag_embed), so every order of derivative runs the same numpy kernels; einsum's gradients
are einsums (with identity and ones constants for repeated and summed-away subscripts).

`scatter` does not accumulate: where `index` names an element twice PyTorch leaves the
result undefined; here the last write in index order (C order over `index`) wins, and
only the `src` positions that won get a gradient.

Thread safety: pure functions of their arguments, like the other ops.
"""
from __future__ import annotations

import numpy as np

from ..memory import empty as _empty
from ..primitive import primitive, record
from ..tensor import Tensor
from . import elementwise as E
from . import reduce as R
from . import shape as S
from .graph import cast
from .setitem import index_put

__all__ = ["chunk", "diag_embed", "diagonal", "einsum", "flip", "gather", "index_add",
           "index_select", "masked_fill", "masked_scatter", "movedim", "narrow", "repeat",
           "roll", "scatter", "scatter_add", "take_along_axis", "take_along_dim", "tile",
           "tril", "triu", "unbind"]


# ---- helpers ------------------------------------------------------------------------------
def _data(x) -> np.ndarray:
    return x.data if isinstance(x, Tensor) else np.asarray(x)


def _dim(dim, ndim: int, op: str) -> int:
    """`dim` in [-ndim, ndim) as a non-negative int (PyTorch's IndexError otherwise)."""
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
        raise TypeError(f"{op}: dim must be an int, got {type(dim).__name__}")
    lo, hi = -max(ndim, 1), max(ndim, 1) - 1
    if not lo <= dim <= hi:
        raise IndexError(f"{op}: dimension out of range (expected to be in range of "
                         f"[{lo}, {hi}], but got {dim})")
    return int(dim) % max(ndim, 1)


def _dims(dims, ndim: int, op: str) -> tuple:
    """A tuple of distinct non-negative dims from an int or a sequence."""
    if isinstance(dims, (list, tuple)):
        out = tuple(_dim(d, ndim, op) for d in dims)
    else:
        out = (_dim(dims, ndim, op),)
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: dims {tuple(dims)} name a dimension twice")
    return out


def _sizes(args: tuple, op: str) -> tuple:
    """`f(x, 2, 3)` or `f(x, (2, 3))`: the ints as a tuple."""
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        args = tuple(args[0])
    for a in args:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
            raise TypeError(f"{op}: expected ints, got {type(a).__name__}")
    return tuple(int(a) for a in args)


def _indices(index, op: str, name: str = "index") -> np.ndarray:
    """An integer ndarray (from a Tensor, array or list)."""
    a = index.data if isinstance(index, Tensor) else np.asarray(index)
    if a.dtype.kind not in "iu":
        if a.size == 0 and a.dtype.kind == "f":  # np.asarray([]) is float64
            return a.astype(np.intp)
        raise TypeError(f"{op}: {name} must be an integer tensor, got dtype {a.dtype}")
    return a


def _in_range(index: np.ndarray, n: int, op: str, dim: int) -> None:
    if index.size and (index.min() < 0 or index.max() >= n):
        bad = index.min() if index.min() < 0 else index.max()
        raise IndexError(f"{op}: index {bad} is out of bounds for dimension {dim} with "
                         f"size {n}")


def _mask(mask, op: str) -> np.ndarray:
    m = mask.data if isinstance(mask, Tensor) else np.asarray(mask)
    if m.dtype != np.bool_:
        raise TypeError(f"{op}: mask must be a boolean tensor, got dtype {m.dtype}")
    return m


def _copy(a: np.ndarray, shape=None) -> np.ndarray:
    """A new (cached) array holding `a` (broadcast to `shape`): 1 pass."""
    out = _empty(a.shape if shape is None else shape, a.dtype)
    np.copyto(out, a)
    return out


def _zeros(shape, dtype) -> np.ndarray:
    out = _empty(shape, dtype)
    out.fill(0)
    return out


def _grid(index: np.ndarray, dim: int) -> tuple:
    """The fancy index that pairs each element of `index` with its own coordinates in
    the other dimensions: `x[_grid(index, dim)]` is PyTorch's gather."""
    nd = index.ndim
    return tuple(index if d == dim else np.arange(n).reshape((n,) + (1,) * (nd - d - 1))
                 for d, n in enumerate(index.shape))


def _lead(shape) -> tuple:
    """The slices selecting the leading block of `shape` (index's part of src)."""
    return tuple(slice(0, n) for n in shape)


def _placed(part: np.ndarray, shape: tuple) -> np.ndarray:
    """`part` in the leading block of zeros of `shape` (itself when the shapes match)."""
    if part.shape == shape:
        return part
    out = _zeros(shape, part.dtype)
    out[_lead(part.shape)] = part
    return out


def _pad_to(t, shape: tuple):
    """The differentiable `_placed`: zeros after `t` up to `shape`."""
    have = np.shape(_data(t))
    if have == shape:
        return t
    return S.pad(t, [(0, n - m) for n, m in zip(shape, have)])


def _graph(op, *forms) -> None:
    """Attach each differentiable form to the op's rule at the same position."""
    for rule, form in zip(op.vjps, forms):
        rule.graph = form


# ---- repeat, tile -----------------------------------------------------------------------------
def _interleaved(sizes: tuple, shape: tuple) -> tuple:
    return tuple(v for s, n in zip(sizes, shape) for v in (s, n))


def _repeat_forward(x, sizes):
    shape = (1,) * (len(sizes) - x.ndim) + x.shape
    out = _empty(tuple(s * n for s, n in zip(sizes, shape)), x.dtype)
    # out seen as (s0, n0, s1, n1, ...) takes x broadcast over the s axes: 1 pass
    np.copyto(out.reshape(_interleaved(sizes, shape)),
              x.reshape(_interleaved((1,) * len(sizes), shape)))
    return out


def _repeat_vjp(g, ans, x, sizes):
    # the copies summed: one reduction over the repeat axes (allocates the result only)
    shape = (1,) * (len(sizes) - x.ndim) + x.shape
    axes = tuple(range(0, 2 * len(sizes), 2))
    return g.reshape(_interleaved(sizes, shape)).sum(axis=axes).reshape(x.shape)


def _repeat_form(g, ans, x, sizes):
    shape = np.shape(_data(x))
    inter = _interleaved(sizes, (1,) * (len(sizes) - len(shape)) + shape)
    return S.reshape(R.sum(S.reshape(g, inter), axis=tuple(range(0, len(inter), 2))), shape)


_repeat = primitive("repeat", _repeat_forward, _repeat_vjp)
_graph(_repeat, _repeat_form)


def repeat(input, *sizes) -> Tensor:
    """PyTorch's `Tensor.repeat`: the tensor tiled `sizes[i]` times along dimension i
    (`repeat(x, 2, 3)` or `repeat(x, (2, 3))`; `len(sizes)` may exceed `x.ndim`, adding
    leading dimensions). Not numpy's `repeat` (that is PyTorch's `repeat_interleave`)."""
    sizes = _sizes(sizes, "repeat")
    nd = np.ndim(_data(input))
    if len(sizes) < nd:
        raise ValueError(f"repeat: the number of repeat dims ({len(sizes)}) can not be "
                         f"smaller than the number of dimensions of the tensor ({nd})")
    if any(s < 0 for s in sizes):
        raise ValueError(f"repeat: repeats must be non-negative, got {sizes}")
    return _repeat(input, sizes=sizes)


def tile(input, *dims) -> Tensor:
    """PyTorch's `tile`: `repeat`, with `dims` padded with leading 1s when shorter than
    the tensor's dimensions (`tile(x, (2,))` repeats the last dimension twice)."""
    dims = _sizes(dims, "tile")
    nd = np.ndim(_data(input))
    if any(s < 0 for s in dims):
        raise ValueError(f"tile: repeats must be non-negative, got {dims}")
    return _repeat(input, sizes=(1,) * (nd - len(dims)) + dims)


# ---- flip, roll, tril, triu ---------------------------------------------------------------
_flip = primitive("flip", lambda x, dims: _copy(np.flip(x, dims)),  # a copy, as PyTorch: 1 pass
                  lambda g, ans, x, dims: np.flip(g, dims))          # a view of g
_graph(_flip, lambda g, ans, x, dims: _flip(g, dims=dims))


def flip(input, *dims) -> Tensor:
    """The elements in reverse order along `dims` (`flip(x, 0, 1)` or `flip(x, (0, 1))`);
    a copy, as in PyTorch."""
    if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
        dims = tuple(dims[0])
    nd = np.ndim(_data(input))
    dims = _dims(dims, nd, "flip")
    return _flip(input, dims=dims if nd else ())  # 0-d: dim 0 or -1 flips nothing


def _negated(shifts):
    return tuple(-s for s in shifts) if isinstance(shifts, tuple) else -shifts


_roll = primitive("roll", lambda x, shifts, dims: np.roll(x, shifts, dims),
                  lambda g, ans, x, shifts, dims: np.roll(g, _negated(shifts), dims))
_graph(_roll, lambda g, ans, x, shifts, dims: _roll(g, shifts=_negated(shifts), dims=dims))


def roll(input, shifts, dims=None) -> Tensor:
    """The elements shifted by `shifts` along `dims` (wrapping around; a dimension named
    twice is shifted by the sum); with `dims=None` the flattened tensor is rolled and the
    shape restored."""
    nd = np.ndim(_data(input))
    if dims is None:
        if isinstance(shifts, (list, tuple)):
            if len(shifts) != 1:
                raise ValueError("roll: with dims=None, shifts must be a single int")
            shifts = shifts[0]
        return _roll(input, shifts=int(shifts), dims=None)
    # a dimension may be named twice: its shifts add (PyTorch's and numpy's roll)
    dims = tuple(_dim(d, nd, "roll") for d in dims) if isinstance(dims, (list, tuple)) \
        else (_dim(dims, nd, "roll"),)
    shifts = _sizes((shifts,), "roll") if not isinstance(shifts, (list, tuple)) \
        else _sizes(tuple(shifts), "roll")
    if len(shifts) != len(dims):
        raise ValueError(f"roll: shifts ({len(shifts)}) and dims ({len(dims)}) must "
                         f"have the same length")
    return _roll(input, shifts=shifts, dims=dims)


_tril = primitive("tril", lambda x, diagonal: np.tril(x, diagonal),
                  lambda g, ans, x, diagonal: np.tril(g, diagonal))
_triu = primitive("triu", lambda x, diagonal: np.triu(x, diagonal),
                  lambda g, ans, x, diagonal: np.triu(g, diagonal))
_graph(_tril, lambda g, ans, x, diagonal: _tril(g, diagonal=diagonal))
_graph(_triu, lambda g, ans, x, diagonal: _triu(g, diagonal=diagonal))


def _triangle(op, name, input, diagonal):
    if np.ndim(_data(input)) < 2:
        raise ValueError(f"{name}: input must have at least 2 dimensions, got "
                         f"{np.ndim(_data(input))}")
    return op(input, diagonal=int(diagonal))


def tril(input, diagonal: int = 0) -> Tensor:
    """The lower triangle of the last two dimensions (elements with j - i <= `diagonal`);
    the rest zeros."""
    return _triangle(_tril, "tril", input, diagonal)


def triu(input, diagonal: int = 0) -> Tensor:
    """The upper triangle of the last two dimensions (elements with j - i >= `diagonal`);
    the rest zeros."""
    return _triangle(_triu, "triu", input, diagonal)


# ---- diagonal, diag_embed: each other's adjoint ---------------------------------------------
def _write_diagonal(out: np.ndarray, d: np.ndarray, offset, dim1, dim2) -> np.ndarray:
    """`d`'s last dimension written on the `offset` diagonal of `out`'s (dim1, dim2)."""
    m = np.moveaxis(out, (dim1, dim2), (-2, -1))  # a view: the other dims keep their order
    i = np.arange(d.shape[-1])
    m[..., i + max(-offset, 0), i + max(offset, 0)] = d
    return out


def _diagonal_vjp(g, ans, x, offset, dim1, dim2):
    # zeros, then g on the diagonal: 2 passes (the second over the diagonal only)
    return _write_diagonal(_zeros(x.shape, g.dtype), g, offset, dim1, dim2)


def _embed_forward(d, shape, offset, dim1, dim2):
    return _write_diagonal(_zeros(shape, d.dtype), d, offset, dim1, dim2)


def _diagonal_forward(x, offset, dim1, dim2):
    d = np.diagonal(x, offset, dim1, dim2)  # a view (numpy makes it read-only)
    if x.flags.writeable:
        try:
            d.flags.writeable = True        # writable like PyTorch's, when x is
        except ValueError:                  # (a numpy that refuses: read-only, then)
            pass
    return d


_diagonal = primitive("diagonal", _diagonal_forward, _diagonal_vjp)
_embed = primitive("diag_embed", _embed_forward,
                   lambda g, ans, d, shape, offset, dim1, dim2: np.diagonal(g, offset, dim1,
                                                                            dim2))
_graph(_diagonal, lambda g, ans, x, offset, dim1, dim2: _embed(
    g, shape=np.shape(_data(x)), offset=offset, dim1=dim1, dim2=dim2))
_graph(_embed, lambda g, ans, d, shape, offset, dim1, dim2: _diagonal(
    g, offset=offset, dim1=dim1, dim2=dim2))


def _two_dims(dim1, dim2, nd, op):
    d1, d2 = _dim(dim1, nd, op), _dim(dim2, nd, op)
    if d1 == d2:
        raise ValueError(f"{op}: dim1 and dim2 cannot be the same dimension ({dim1}, {dim2})")
    return d1, d2


def diagonal(input, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The `offset` diagonal of dimensions `dim1` and `dim2` (removed), as a last
    dimension: `diagonal(m)` of a matrix is its main diagonal. A view, as in PyTorch."""
    nd = np.ndim(_data(input))
    if nd < 2:
        raise ValueError(f"diagonal: input must have at least 2 dimensions, got {nd}")
    d1, d2 = _two_dims(dim1, dim2, nd, "diagonal")
    return _diagonal(input, offset=int(offset), dim1=d1, dim2=d2)


def diag_embed(input, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """The last dimension of `input` put on the `offset` diagonal of two new dimensions
    `dim1`, `dim2` of size n + |offset| (zeros elsewhere): a batch of diagonal matrices."""
    shape = np.shape(_data(input))
    if not shape:
        raise ValueError("diag_embed: input must have at least 1 dimension")
    d1, d2 = _two_dims(dim1, dim2, len(shape) + 1, "diag_embed")
    n = shape[-1] + abs(int(offset))
    out = list(shape[:-1])
    for d in sorted((d1, d2)):
        out.insert(d, n)
    return _embed(input, shape=tuple(out), offset=int(offset), dim1=d1, dim2=d2)


# ---- gather, scatter_add: each other's adjoint; scatter ---------------------------------------
def _gather_vjp(g, ans, x, dim, index):
    # zeros, then g added at the gathered places (repeats accumulate): 2 passes
    out = _zeros(x.shape, g.dtype)
    np.add.at(out, _grid(index, dim), g)
    return out


def _scatter_add_forward(x, src, dim, index):
    # a copy of x, then src's leading block added at index: 2 passes
    out = _copy(x)
    np.add.at(out, _grid(index, dim), src[_lead(index.shape)])
    return out


def _scatter_add_src_vjp(g, ans, x, src, dim, index):
    # g gathered (index's shape), in src's shape: 1 pass (2 when src is larger)
    return _placed(g[_grid(index, dim)], src.shape)


_gather = primitive("gather", lambda x, dim, index: x[_grid(index, dim)], _gather_vjp,
                    cost=lambda ans, x, *_: ans.size + x.size)
_scatter_add = primitive("scatter_add", _scatter_add_forward,
                         lambda g, ans, x, src, dim, index: g, _scatter_add_src_vjp)
_graph(_gather, lambda g, ans, x, dim, index: _scatter_add(
    np.zeros(np.shape(_data(x)), g.dtype), g, dim=dim, index=index))
_graph(_scatter_add, lambda g, ans, x, src, dim, index: g,
       lambda g, ans, x, src, dim, index: _pad_to(_gather(g, dim=dim, index=index),
                                                  np.shape(_data(src))))


def _check_index(x: np.ndarray, d: int, index: np.ndarray, op: str, src=None) -> None:
    """PyTorch's rules: as many dims as `x`; no larger than `x` outside `d` (nor than
    `src` anywhere); values in [0, x.shape[d])."""
    if x.ndim == 0:
        raise ValueError(f"{op}: input must have at least 1 dimension")
    if index.ndim != x.ndim:
        raise ValueError(f"{op}: index must have as many dimensions as input "
                         f"({index.ndim} vs {x.ndim})")
    for k, (i, n) in enumerate(zip(index.shape, x.shape)):
        if k != d and i > n:
            raise ValueError(f"{op}: index's size {i} in dimension {k} exceeds input's "
                             f"size {n}")
    if src is not None:
        if src.ndim != x.ndim:
            raise ValueError(f"{op}: src must have as many dimensions as input "
                             f"({src.ndim} vs {x.ndim})")
        for k, (i, n) in enumerate(zip(index.shape, src.shape)):
            if i > n:
                raise ValueError(f"{op}: index's size {i} in dimension {k} exceeds src's "
                                 f"size {n}")
    _in_range(index, x.shape[d], op, d)


def _same_dtype(src, dtype):
    """`src` in `dtype` (a recorded cast when it is a Tensor of another float dtype)."""
    s = _data(src)
    if s.dtype == dtype:
        return src
    if isinstance(src, Tensor):
        return cast(src, dtype=dtype)
    return s.astype(dtype)


def gather(input, dim: int, index) -> Tensor:
    """`out[i][j][k] = input[i][index[i][j][k]][k]` for dim=1 (PyTorch's gather): values
    picked along `dim` at `index`, which has input's dimensions and is no larger outside
    `dim`. The gradient is a scatter_add (repeated indices accumulate)."""
    x = _data(input)
    idx = _indices(index, "gather")
    d = _dim(dim, x.ndim, "gather")
    _check_index(x, d, idx, "gather")
    return _gather(input, dim=d, index=idx)


def scatter_add(input, dim: int, index, src) -> Tensor:
    """A copy of `input` with `src[i][j][k]` added at `[i][index[i][j][k]][k]` for dim=1
    (repeated indices accumulate). `src` may be larger than `index`: its leading block of
    index's shape is used. The gradient of `src` is a gather."""
    x, s = _data(input), _data(src)
    idx = _indices(index, "scatter_add")
    d = _dim(dim, x.ndim, "scatter_add")
    _check_index(x, d, idx, "scatter_add", s)
    return _scatter_add(input, _same_dtype(src, x.dtype), dim=d, index=idx)


def _last_writes(shape: tuple, dim: int, index: np.ndarray):
    """None when `index` (along `dim`, into `shape`) names each element once; else a
    boolean mask of index's shape: True at the last write to each element."""
    if index.size < 2:
        return None
    grid = tuple(np.broadcast_to(a, index.shape) for a in _grid(index, dim))
    flat = np.ravel_multi_index(grid, shape).reshape(-1)
    # the common case, no repeats, checked on one sorted copy (no unique's argsort): an
    # index-sized int array and a bool one beyond `flat`
    order = np.sort(flat)
    if not (order[1:] == order[:-1]).any():
        return None
    del order
    _, first = np.unique(flat[::-1], return_index=True)
    keep = np.zeros(flat.size, dtype=bool)
    keep[flat.size - 1 - first] = True
    return keep.reshape(index.shape)


def _scatter_forward(x, src, dim, index, keep):
    # a copy of x, then src's leading block written at index: 2 passes
    out = _copy(x)
    part = src[_lead(index.shape)]
    if keep is None:
        out[_grid(index, dim)] = part
    else:  # only the last write to each element
        grid = tuple(np.broadcast_to(a, index.shape)[keep] for a in _grid(index, dim))
        out[grid] = part[keep]
    return out


def _scatter_x_vjp(g, ans, x, *rest, dim, index, **_):
    # g with zeros where src (or value) was written: 2 passes
    out = _copy(g)
    out[_grid(index, dim)] = 0
    return out


def _scatter_src_vjp(g, ans, x, src, dim, index, keep):
    # g at the written places for the writes that won, in src's shape: 1-2 passes
    part = g[_grid(index, dim)]
    if keep is not None:
        part *= keep
    return _placed(part, src.shape)


def _scatter_x_form(g, ans, x, *rest, dim, index, **_):
    return index_put(g, _grid(index, dim), 0.0)


def _scatter_src_form(g, ans, x, src, dim, index, keep):
    part = _gather(g, dim=dim, index=index)
    return _pad_to(part if keep is None else part * keep, np.shape(_data(src)))


def _fill_at(x, dim, index, value):
    # a copy of x, then value at index: 2 passes
    out = _copy(x)
    out[_grid(index, dim)] = value
    return out


_scatter = primitive("scatter", _scatter_forward, _scatter_x_vjp, _scatter_src_vjp)
_scatter_value = primitive("scatter", _fill_at, _scatter_x_vjp)
_graph(_scatter, _scatter_x_form, _scatter_src_form)
_graph(_scatter_value, _scatter_x_form)


def scatter(input, dim: int, index, src=None, value=None, *, reduce: str | None = None) -> Tensor:
    """A copy of `input` with `src[i][j][k]` written at `[i][index[i][j][k]][k]` for dim=1
    (or the number `value` at every `index` place: `scatter(x, dim, index, 2.0)` works
    too). Where `index` names an element twice, PyTorch leaves the result undefined; here
    the last write in index order wins, and only the `src` positions that won get a
    gradient. `reduce="add"` adds instead of writing (repeats accumulate: `scatter_reduce`
    with "sum"); "multiply" is not provided."""
    if reduce is not None:
        return _scatter_with_reduce(input, dim, index, src, value, reduce)
    if src is not None and value is not None:
        raise TypeError("scatter: give src or value, not both")
    if src is not None and not isinstance(src, (Tensor, np.ndarray, list)):
        src, value = None, src  # scatter(x, dim, index, 2.0): PyTorch's value overload
    if src is None and value is None:
        raise TypeError("scatter: src or value is required")
    x = _data(input)
    idx = _indices(index, "scatter")
    d = _dim(dim, x.ndim, "scatter")
    if src is None:
        if isinstance(value, Tensor) or np.ndim(value):
            raise TypeError("scatter: value must be a number (use src= for a tensor)")
        _check_index(x, d, idx, "scatter")
        return _scatter_value(input, dim=d, index=idx, value=value)
    s = _data(src)
    _check_index(x, d, idx, "scatter", s)
    keep = _last_writes(x.shape, d, idx)
    return _scatter(input, _same_dtype(src, x.dtype), dim=d, index=idx, keep=keep)


# ---- index_select, index_add: each other's adjoint ---------------------------------------------
def _along(dim: int, index: np.ndarray) -> tuple:
    return (slice(None),) * dim + (index,)


def _index_select_forward(x, dim, index):
    out = _empty(x.shape[:dim] + index.shape + x.shape[dim + 1:], x.dtype)
    return np.take(x, index, axis=dim, out=out, mode="clip")  # checked: clip never clips


def _index_select_vjp(g, ans, x, dim, index):
    # zeros, then g added at index along dim (repeats accumulate): 2 passes
    out = _zeros(x.shape, g.dtype)
    np.add.at(out, _along(dim, index), g)
    return out


def _index_add_forward(x, source, dim, index, alpha):
    # a copy of x, then alpha * source added at index: 2 passes (3 with alpha)
    out = _copy(x)
    np.add.at(out, _along(dim, index), source if alpha == 1 else source * alpha)
    return out


def _index_add_source_vjp(g, ans, x, source, dim, index, alpha):
    out = _index_select_forward(g, dim, index)  # 1 pass (2 with alpha)
    if alpha != 1:
        out *= alpha
    return out


_index_select = primitive("index_select", _index_select_forward, _index_select_vjp,
                          cost=lambda ans, x, *_: ans.size + x.size)
_index_add = primitive("index_add", _index_add_forward,
                       lambda g, ans, x, source, dim, index, alpha: g, _index_add_source_vjp)
_graph(_index_select, lambda g, ans, x, dim, index: _index_add(
    np.zeros(np.shape(_data(x)), g.dtype), g, dim=dim, index=index, alpha=1))


def _index_add_source_form(g, ans, x, source, dim, index, alpha):
    picked = _index_select(g, dim=dim, index=index)
    return picked if alpha == 1 else picked * alpha


_graph(_index_add, lambda g, ans, x, source, dim, index, alpha: g, _index_add_source_form)


def _vector_index(index, n: int, op: str, d: int) -> np.ndarray:
    idx = _indices(index, op)
    if idx.ndim > 1:
        raise ValueError(f"{op}: index must be 0- or 1-dimensional, got {idx.ndim} dims")
    idx = idx.reshape(-1)
    _in_range(idx, n, op, d)
    return idx


def index_select(input, dim: int, index) -> Tensor:
    """The slices of `input` along `dim` at the positions in the 1-d `index` (repeats
    allowed); the gradient is an index_add."""
    x = _data(input)
    if x.ndim == 0:
        raise ValueError("index_select: input must have at least 1 dimension")
    d = _dim(dim, x.ndim, "index_select")
    return _index_select(input, dim=d, index=_vector_index(index, x.shape[d],
                                                           "index_select", d))


def index_add(input, dim: int, index, source, *, alpha: float = 1) -> Tensor:
    """A copy of `input` with `alpha * source[..., i, ...]` added at position `index[i]`
    along `dim` (repeats accumulate). `source` has input's shape with `len(index)` in
    `dim`; its gradient is an index_select."""
    x, s = _data(input), _data(source)
    if x.ndim == 0:
        raise ValueError("index_add: input must have at least 1 dimension")
    d = _dim(dim, x.ndim, "index_add")
    idx = _vector_index(index, x.shape[d], "index_add", d)
    want = x.shape[:d] + idx.shape + x.shape[d + 1:]
    if s.shape != want:
        raise ValueError(f"index_add: source must have shape {want} (input's, with "
                         f"len(index) in dim {d}), got {s.shape}")
    return _index_add(input, _same_dtype(source, x.dtype), dim=d, index=idx,
                      alpha=alpha)


# ---- masked_fill, masked_scatter ------------------------------------------------------------
def masked_fill(input, mask, value) -> Tensor:
    """`value` where the boolean `mask` (broadcast with input) is True, `input` elsewhere.
    `value` is a number or a 0-d Tensor; a 0-d Tensor that requires grad gets the sum of
    the gradient over the filled places. (Recorded as `where`.)"""
    x = _data(input)
    m = _mask(mask, "masked_fill")
    try:
        np.broadcast_shapes(m.shape, x.shape)
    except ValueError:
        raise ValueError(f"masked_fill: mask of shape {m.shape} does not broadcast with "
                         f"input of shape {x.shape}") from None
    if isinstance(value, Tensor):
        if value.ndim:
            raise ValueError(f"masked_fill: only supports a 0-dimensional value tensor, "
                             f"but got tensor with {value.ndim} dimension(s)")
        if value.dtype != x.dtype:
            value = cast(value, dtype=x.dtype) if value._requires_grad \
                else value.data.astype(x.dtype)
    else:
        if np.ndim(value):
            raise ValueError("masked_fill: value must be a number or a 0-d tensor")
        value = np.asarray(value, dtype=x.dtype)
    return E.where(m, value, input)


def _masked_scatter_forward(x, source, mask, count):
    # x broadcast to the mask's shape, then source's first `count` values at the True
    # places: 2 passes
    out = _copy(x, mask.shape)
    out[mask] = source.reshape(-1)[:count]
    return out


def _masked_scatter_x_vjp(g, ans, x, source, mask, count):
    out = _copy(g)  # g with zeros where source went: 2 passes
    out[mask] = 0
    return out


def _masked_scatter_source_vjp(g, ans, x, source, mask, count):
    out = _zeros(source.size, g.dtype)  # g at the True places, in source's first places
    out[:count] = g[mask]
    return out.reshape(source.shape)


_masked_scatter = primitive("masked_scatter", _masked_scatter_forward, _masked_scatter_x_vjp,
                            _masked_scatter_source_vjp)
_graph(_masked_scatter,
       lambda g, ans, x, source, mask, count: E.where(mask, 0.0, g),
       lambda g, ans, x, source, mask, count: S.reshape(
           S.pad(S.getitem(g, mask), [(0, np.size(_data(source)) - count)]),
           np.shape(_data(source))))


def masked_scatter(input, mask, source) -> Tensor:
    """A copy of `input` with the elements of `source` (in order, row-major) written
    where the boolean `mask` (broadcast with input) is True; `source` needs at least as
    many elements as the mask has Trues."""
    x, s = _data(input), _data(source)
    m = _mask(mask, "masked_scatter")
    try:
        shape = np.broadcast_shapes(m.shape, x.shape)
    except ValueError:
        raise ValueError(f"masked_scatter: mask of shape {m.shape} does not broadcast with "
                         f"input of shape {x.shape}") from None
    m = np.broadcast_to(m, shape)
    count = int(np.count_nonzero(m))
    if s.size < count:
        raise ValueError(f"masked_scatter: source has {s.size} elements, fewer than the "
                         f"{count} True values of mask")
    return _masked_scatter(input, _same_dtype(source, x.dtype), mask=m,
                           count=count)


# ---- take_along_dim -----------------------------------------------------------------------------
def take_along_dim(input, indices, dim=None) -> Tensor:
    """The values of `input` at `indices` along `dim` (PyTorch's take_along_dim, numpy's
    take_along_axis): `input` and `indices` are broadcast in the other dimensions, then
    gathered. With `dim=None` both are flattened."""
    x = _data(input)
    idx = _indices(indices, "take_along_dim", "indices")
    if dim is None:
        flat = idx.reshape(-1)
        _in_range(flat, x.size, "take_along_dim", 0)
        return _gather(S.reshape(input, (-1,)) if isinstance(input, Tensor) else x.reshape(-1),
                       dim=0, index=flat)
    d = _dim(dim, x.ndim, "take_along_dim")
    if idx.ndim != x.ndim:
        raise ValueError(f"take_along_dim: input and indices should have the same number "
                         f"of dimensions ({x.ndim} vs {idx.ndim})")
    xs, js = list(x.shape), list(idx.shape)
    for k in range(x.ndim):
        if k != d:
            try:
                xs[k] = js[k] = np.broadcast_shapes((x.shape[k],), (idx.shape[k],))[0]
            except ValueError:
                raise ValueError(f"take_along_dim: input of shape {x.shape} and indices "
                                 f"of shape {idx.shape} do not broadcast outside dim "
                                 f"{d}") from None
    _in_range(idx, x.shape[d], "take_along_dim", d)
    if tuple(xs) != x.shape:
        input = S.broadcast_to(input, tuple(xs))
    return _gather(input, dim=d, index=np.broadcast_to(idx, tuple(js)))


def take_along_axis(input, indices, axis=None) -> Tensor:
    """numpy's name for `take_along_dim` (PyTorch's semantics: indices in [0, size))."""
    return take_along_dim(input, indices, dim=axis)


# ---- einsum -------------------------------------------------------------------------------------
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"  # numpy's sublist labels


def _subscripts(sub, where: str) -> str:
    """A sublist (ints in [0, 52) and Ellipsis) as letters."""
    out = []
    for s in sub:
        if s is Ellipsis:
            out.append("...")
        elif isinstance(s, (int, np.integer)) and not isinstance(s, bool) and 0 <= s < 52:
            out.append(_LETTERS[s])
        else:
            raise ValueError(f"einsum: subscripts in {where} must be ints in [0, 52) or "
                             f"Ellipsis, got {s!r}")
    return "".join(out)


def _einsum_args(args) -> tuple:
    """(equation, operands) from einsum's string or sublist forms."""
    if not args:
        raise TypeError("einsum: an equation is required")
    if isinstance(args[0], str):
        ops = list(args[1:])
        if len(ops) == 1 and isinstance(ops[0], (list, tuple)) and ops[0] and all(
                isinstance(o, (Tensor, np.ndarray)) for o in ops[0]):
            ops = list(ops[0])  # einsum("ij,jk", [a, b]), as PyTorch accepts
        return args[0], ops
    rest = list(args)
    out = rest.pop() if len(rest) % 2 else None  # an odd count: the output sublist last
    ops, subs = rest[0::2], rest[1::2]
    lhs = ",".join(_subscripts(s, f"operand {i}'s sublist") for i, s in enumerate(subs))
    if out is None:
        return lhs, ops
    return lhs + "->" + _subscripts(out, "the output sublist"), ops


def _parse(equation: str, shapes: list) -> tuple:
    """The equation with every `...` spelled out in letters, and the output made
    explicit: (subscripts per operand, output subscripts)."""
    eq = equation.replace(" ", "")
    if eq.count("->") > 1:
        raise ValueError(f"einsum: more than one '->' in {equation!r}")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"einsum: the equation {equation!r} has {len(terms)} operand(s), "
                         f"but {len(shapes)} were given")
    for part in terms + ([rhs] if arrow else []):
        body = part.replace("...", "", 1)
        bad = [c for c in body if c not in _LETTERS]
        if bad:
            raise ValueError(f"einsum: invalid subscript {bad[0]!r} in {equation!r} (letters "
                             f"and one '...' per operand)")
    used = {c for c in eq if c in _LETTERS}
    ell = []
    for i, (term, shape) in enumerate(zip(terms, shapes)):
        named = len(term.replace("...", ""))
        if "..." in term:
            if named > len(shape):
                raise ValueError(f"einsum: operand {i} has {len(shape)} dimensions, fewer "
                                 f"than its {named} subscripts")
            ell.append(len(shape) - named)
        else:
            if named != len(shape):
                raise ValueError(f"einsum: operand {i} has {len(shape)} dimensions, but its "
                                 f"subscripts {term!r} name {named}")
            ell.append(0)
    free = [c for c in _LETTERS if c not in used][:max(ell, default=0)]
    if len(free) < max(ell, default=0):
        raise ValueError("einsum: too many dimensions to name with letters")
    subs = [t.replace("...", "".join(free[len(free) - e:])) for t, e in zip(terms, ell)]
    if arrow:
        out = rhs.replace("...", "".join(free))
        if len(set(out)) != len(out):
            raise ValueError(f"einsum: output subscript repeated in {equation!r}")
        missing = [c for c in out if not any(c in s for s in subs)]
        if missing:
            raise ValueError(f"einsum: output subscript {missing[0]!r} does not appear in "
                             f"the operands of {equation!r}")
    else:  # numpy's implicit output: the broadcast dims, then letters used once, sorted
        counts = {}
        for s in subs:
            for c in s:
                counts[c] = counts.get(c, 0) + 1
        out = "".join(free) + "".join(sorted(c for c in used if counts.get(c) == 1))
    return tuple(subs), out


def _np_einsum(eq: str, *arrays):
    big = len(arrays) > 2 or (len(arrays) == 2 and max(a.size for a in arrays) >= 4096)
    ans = np.einsum(eq, *arrays, optimize="greedy" if big else False)
    return ans if type(ans) is np.ndarray else np.asarray(ans)


def _einsum_grad(k: int, g, operands, spec, run):
    """Operand k's gradient as one einsum of g and the other operands: `run(eq, *ops)`.
    A subscript repeated in operand k (a diagonal) takes an identity matrix to spread g
    over it; one that only operand k has (summed away), or that the others broadcast from
    size 1, takes a vector of ones."""
    subs, out = spec
    mine = subs[k]
    shapes = [np.shape(_data(o)) for o in operands]
    size = dict(zip(out, np.shape(_data(g))))
    for j, (s, sh) in enumerate(zip(subs, shapes)):
        if j != k:
            for c, n in zip(s, sh):
                size[c] = max(size.get(c, 1), n)
    spare = iter(c for c in _LETTERS if c not in "".join(subs) + out)
    dtype = _data(g).dtype
    terms, consts, target, seen = [out], [], [], set()
    for c, n in zip(mine, shapes[k]):
        if c in seen:             # a diagonal: d/dA_ii spreads through identity(n)
            f = next(spare)
            terms.append(c + f)
            consts.append(np.eye(n, dtype=dtype))
            target.append(f)
            continue
        seen.add(c)
        target.append(c)
        if c not in size or size[c] < n:  # only this operand has it (at full size): ones
            terms.append(c)
            consts.append(np.ones(n, dtype=dtype))
    others = [o for j, o in enumerate(operands) if j != k]
    eq = ",".join(terms[:1] + [s for j, s in enumerate(subs) if j != k] + terms[1:])
    return run(eq + "->" + "".join(target), g, *others, *consts)


def _einsum_rule(k: int):
    def rule(g, ans, *arrays, spec):
        return _einsum_grad(k, g, arrays, spec, _np_einsum)

    rule.graph = lambda g, ans, *inputs, spec: _einsum_grad(k, g, inputs, spec, einsum)
    return rule


_EINSUM_RULES = tuple(_einsum_rule(k) for k in range(64))  # numpy takes at most 64 operands


def einsum(*args) -> Tensor:
    """Einstein summation as numpy's and PyTorch's `einsum`: `einsum("ij,jk->ik", a, b)`,
    implicit outputs (`"ij,jk"`), `...` broadcasting, repeated subscripts (diagonals,
    traces), operands as a list (`einsum("ij,jk", [a, b])`) or numpy's sublist form
    (`einsum(a, [0, 1], b, [1, 2], [0, 2])`). Summed `...` dimensions are allowed in
    explicit mode, as in PyTorch. Each operand's gradient is another einsum."""
    equation, operands = _einsum_args(args)
    if not isinstance(equation, str):
        raise TypeError(f"einsum: the equation must be a string, got "
                        f"{type(equation).__name__}")
    if len(operands) > len(_EINSUM_RULES):
        raise ValueError(f"einsum: at most {len(_EINSUM_RULES)} operands")
    arrays = [_data(o) for o in operands]
    spec = _parse(equation, [a.shape for a in arrays])
    eq = ",".join(spec[0]) + "->" + spec[1]
    try:
        ans = _np_einsum(eq, *arrays)
    except ValueError as e:
        raise ValueError(f"einsum: {e} (equation {equation!r}, shapes "
                         f"{[a.shape for a in arrays]})") from e
    return record("einsum", ans, operands, _EINSUM_RULES[:len(arrays)], (ans, *arrays),
                  {"spec": spec}, threaded=len(arrays) > 1)


# ---- narrow, movedim, unbind, chunk (views and slices: getitem and transpose) -------------------
def narrow(input, dim: int, start: int, length: int) -> Tensor:
    """`length` elements of `dim` from `start` (negative: from the end); a view."""
    shape = np.shape(_data(input))
    if not shape:
        raise ValueError("narrow: input must have at least 1 dimension")
    d = _dim(dim, len(shape), "narrow")
    n = shape[d]
    start = int(_data(start)) if isinstance(start, Tensor) else int(start)
    if not -n <= start <= n:
        raise IndexError(f"narrow: start ({start}) out of range for dimension {d} of size {n}")
    if start < 0:
        start += n
    if length < 0 or start + length > n:
        raise ValueError(f"narrow: start ({start}) + length ({length}) exceeds dimension "
                         f"size ({n})")
    return S.getitem(input, (slice(None),) * d + (slice(start, start + length),))


def movedim(input, source, destination) -> Tensor:
    """Dimensions `source` (an int or a sequence) moved to positions `destination`, the
    others keeping their order (a view)."""
    nd = np.ndim(_data(input))
    src, dst = _dims(source, nd, "movedim"), _dims(destination, nd, "movedim")
    if len(src) != len(dst):
        raise ValueError(f"movedim: source ({len(src)}) and destination ({len(dst)}) must "
                         f"have the same number of dimensions")
    order = [d for d in range(nd) if d not in src]
    for to, d in sorted(zip(dst, src)):
        order.insert(to, d)
    return S.permute(input, tuple(order))


def unbind(input, dim: int = 0) -> tuple:
    """The slices of `dim`, as a tuple of tensors without that dimension (views)."""
    shape = np.shape(_data(input))
    if not shape:
        raise ValueError("unbind: input must have at least 1 dimension")
    d = _dim(dim, len(shape), "unbind")
    return tuple(S.getitem(input, (slice(None),) * d + (i,)) for i in range(shape[d]))


def chunk(input, chunks: int, dim: int = 0) -> tuple:
    """At most `chunks` pieces of `dim` of ceil(n / chunks) elements each (the last may be
    smaller, and fewer pieces come back when n is not large enough), as PyTorch's chunk."""
    if isinstance(chunks, bool) or not isinstance(chunks, (int, np.integer)) or chunks <= 0:
        raise ValueError(f"chunk: chunks must be a positive int, got {chunks!r}")
    shape = np.shape(_data(input))
    if not shape:
        raise ValueError("chunk: input must have at least 1 dimension")
    d = _dim(dim, len(shape), "chunk")
    n = shape[d]
    if n == 0:  # PyTorch gives `chunks` empty pieces
        return tuple(S.getitem(input, (slice(None),) * d + (slice(0, 0),))
                     for _ in range(int(chunks)))
    return tuple(S.split(input, -(-n // int(chunks)), axis=d))


# ---- scatter_reduce ---------------------------------------------------------------------------
def _scatter_with_reduce(input, dim, index, src, value, reduce):
    """PyTorch's `scatter(..., reduce=)`: "add" is scatter_reduce's "sum" with input's own
    values (a number `value` is sent from every index place)."""
    if reduce == "multiply":
        raise NotImplementedError("scatter: reduce='multiply' is not provided")
    if reduce != "add":
        raise ValueError(f"scatter: reduce must be 'add' or 'multiply', got {reduce!r}")
    if src is not None and not isinstance(src, (Tensor, np.ndarray, list)):
        src, value = None, src
    if (src is None) == (value is None):
        raise TypeError("scatter: give src or value")
    if src is None:
        src = np.full(_indices(index, "scatter").shape, value, _data(input).dtype)
    return scatter_reduce(input, dim, index, src, "sum")


_REDUCES = ("sum", "mean", "amax", "amin")


def _value_of(e, value):
    return value


# `value` as the result, the gradient of `e` as its gradient: how amax/amin give PyTorch's
# evenly split gradient to their tied maxima without rounding the value
_with_value = primitive("scatter_reduce", _value_of, lambda g, ans, e, value: g)
_graph(_with_value, lambda g, ans, e, value: g)


def scatter_reduce(input, dim: int, index, src, reduce: str, *,
                   include_self: bool = True) -> Tensor:
    """PyTorch's `scatter_reduce`: a copy of `input` where each element `index` names (along
    `dim`, as in scatter_add) becomes the `reduce` of the `src` values sent to it, and of its
    own value when `include_self`. reduce: "sum", "mean" (the count includes self when
    `include_self`), "amax", "amin" (ties share the gradient evenly, as in PyTorch). Elements
    no index names keep input's value. Composed of differentiable ops (scatter_add, where,
    products with constant masks), so every order of gradient works. "prod" is not provided
    (NotImplementedError)."""
    if reduce == "prod":
        raise NotImplementedError("scatter_reduce: reduce='prod' is not provided (its higher "
                                  "derivatives need a product of the others per element)")
    if reduce not in _REDUCES:
        raise ValueError(f"scatter_reduce: reduce must be one of {_REDUCES + ('prod',)}, got "
                         f"{reduce!r}")
    x, s = _data(input), _data(src)
    idx = _indices(index, "scatter_reduce")
    d = _dim(dim, x.ndim, "scatter_reduce")
    _check_index(x, d, idx, "scatter_reduce", s)
    if x.dtype.kind != "f":
        raise TypeError(f"scatter_reduce: input must be floating, got {x.dtype}")
    grid = _grid(idx, d)
    part = s[_lead(idx.shape)].astype(x.dtype, copy=False)
    touched = np.zeros(x.shape, bool)
    touched[grid] = True
    base = input if include_self else E.where(touched, np.zeros((), x.dtype), input)
    if reduce in ("sum", "mean"):
        total = scatter_add(base, d, idx, src)
        if reduce == "sum":
            return total
        count = np.zeros(x.shape, x.dtype)
        np.add.at(count, grid, 1)
        count += include_self
        count[count == 0] = 1  # untouched (without self): total is input's value there
        return total / count
    # amax / amin: the value by numpy's ufunc.at, the gradient split among the ties
    big = np.maximum if reduce == "amax" else np.minimum
    value = x.copy()
    if not include_self:
        value[touched] = -np.inf if reduce == "amax" else np.inf
    big.at(value, grid, part)
    # PyTorch's split: the count of ties includes input's element whenever it equals the
    # result, even without include_self (whose share then goes nowhere)
    self_ties = x == value
    self_wins = self_ties & (include_self | ~touched)
    src_wins = part == value[grid]
    ties = self_ties.astype(x.dtype)
    np.add.at(ties, grid, src_wins)
    share = 1.0 / np.where(ties == 0, 1, ties)
    src_lead = S.getitem(src, _lead(idx.shape)) if isinstance(src, Tensor) else part
    e = input * (self_wins * share) + _scatter_add(
        np.zeros(x.shape, x.dtype), _same_dtype(src_lead, x.dtype) * (src_wins * share[grid]),
        dim=d, index=idx)
    return _with_value(e, value=value)
