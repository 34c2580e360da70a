"""Indexing, one declaration per op (`primitive.defop`): `x[index]` (`getitem`, PyTorch's
rules) and its adjoint `index_accumulate`; by an index tensor `gather scatter scatter_add
scatter_reduce index_select index_add take_along_dim`; by a mask `masked_fill
masked_scatter masked_select`; the diagonal ops `diagonal diag_embed` (and their adjoint
`diagonal_backward`). (einsum, linalg's, stays here until its family moves it.)

Semantics are PyTorch's:

- `x[index]` takes ints, slices (numpy's negative steps too), None, Ellipsis, Python
  bools, integer and boolean tensors, arrays and lists, as PyTorch does. Ints are basic
  indices (they select, as slices do, and a result made of them alone is a view sharing
  the input's memory and version counter, 0-d results included); the index tensors are
  then placed as PyTorch's `index` places them: where the first of them stands when they
  are adjacent (ints removed), else first. numpy, which counts an int among the advanced
  indices, puts `x[1, :, d]`'s dimensions first; PyTorch keeps them in place. A list of
  sequences (`x[[0, [1, 2]]]`) is a tuple, with PyTorch's deprecation warning. The gradient
  accumulates repeated indices (`index_accumulate`, whose gradient is getitem again).
- The index ops take integer index tensors with values in [0, size) (negative ones are
  refused, as PyTorch refuses them); `src`/`source` must have the input's dtype
  (RuntimeError, as PyTorch's "Expected self.dtype to be equal to src.dtype").
- `scatter` does not accumulate: where `index` names an element twice PyTorch leaves the
  result undefined; here the last write in index order (C order over `index`) wins, and
  only the `src` positions that won get a gradient. `scatter(..., reduce="add" |
  "multiply")` is `scatter_reduce`'s "sum" / "prod" with the input included (PyTorch has no
  derivative for it; here it has scatter_reduce's).
- `scatter_reduce` ("sum", "prod", "mean", "amax", "amin", `include_self`) has PyTorch's
  gradients (`scatter_reduce_backward`): ties of amax/amin share g evenly, prod's zeros get
  the product of the others; as in PyTorch, differentiating prod's gradient twice where two
  zeros of src meet at one element raises.

The linear ops come in adjoint pairs whose formulas are each other (gather / scatter_add,
index_select / index_add, getitem / index_accumulate, diagonal / diagonal_backward), so
every order of derivative runs the same numpy kernels. Bad input raises before anything
is recorded, naming the op, with PyTorch's exception types (IndexError for a dimension
out of range, RuntimeError for sizes, dtypes and out-of-bounds index values).

Thread safety: pure functions of their arguments, like the other ops.
"""
from __future__ import annotations

import functools
import warnings

import numpy as np

from ..primitive import Joint, Saved, composite, defop
from ..tensor import Tensor
from ._common import dim as one_dim
from ._common import empty, raw
from .forms import expand_to, sum_to

__all__ = ["getitem", "index_accumulate", "IndexPlan", "index_plan", "numpy_index", "gather",
           "scatter", "scatter_add", "scatter_reduce", "scatter_src", "scatter_value",
           "index_select", "index_add", "masked_fill", "masked_scatter", "masked_select",
           "take_along_dim", "take_along_axis", "diagonal", "diag_embed", "diagonal_backward",
           "einsum", "indices", "mask", "grid", "lead", "check_index", "vector_index",
           "along", "sizes", "old_dim", "old_dims"]


# ---- helpers (public: the in-place ops of inplace.py share them) -------------------------------
def _data(x) -> np.ndarray:
    return x._data if isinstance(x, Tensor) else np.asarray(x)


def _shape(x) -> tuple:
    return np.shape(raw(x))


def indices(index, op: str, name: str = "index") -> np.ndarray:
    """An integer ndarray (from a Tensor, array or list); RuntimeError for another dtype."""
    a = index._data if isinstance(index, Tensor) else np.asarray(index)
    if a.dtype.kind not in "iu":
        if a.size == 0 and a.dtype.kind == "f" and not isinstance(index, Tensor):
            return a.astype(np.int64)  # np.asarray([]) is float64
        raise RuntimeError(f"{op}(): Expected dtype int32/int64 for {name}, got {a.dtype}")
    return a


def _in_range(index: np.ndarray, n: int, op: str, d: int) -> None:
    if index.size and (index.min() < 0 or index.max() >= n):
        bad = index.min() if index.min() < 0 else index.max()
        raise RuntimeError(f"{op}: index {bad} is out of bounds for dimension {d} with size "
                           f"{n}")


def mask(m, op: str) -> np.ndarray:
    """A boolean mask as an ndarray; RuntimeError for another dtype (PyTorch's)."""
    a = m._data if isinstance(m, Tensor) else np.asarray(m)
    if a.dtype != np.bool_:
        raise RuntimeError(f"{op}: only supports boolean masks, but got mask with dtype "
                           f"{a.dtype}")
    return a


# (the ops whose parameters are named `mask` and `indices` call them by these names)
mask_of, indices_of = mask, indices


def _zeros(shape, dtype) -> np.ndarray:
    out = empty(shape, dtype)
    out.fill(0)
    return out


def _copy(a: np.ndarray, shape=None) -> np.ndarray:
    """A new (cached) array holding `a` (broadcast to `shape`): 1 pass."""
    out = empty(a.shape if shape is None else shape, a.dtype)
    np.copyto(out, a)
    return out


def grid(index: np.ndarray, d: int) -> tuple:
    """The fancy index that pairs each element of `index` with its own coordinates in
    the other dimensions: `x[grid(index, d)]` is PyTorch's gather along `d`."""
    nd = index.ndim
    return tuple(index if k == d else np.arange(n).reshape((n,) + (1,) * (nd - k - 1))
                 for k, n in enumerate(index.shape))


def lead(shape) -> tuple:
    """The slices selecting the leading block of `shape` (index's part of src)."""
    return tuple(slice(0, n) for n in shape)


def along(d: int, index: np.ndarray) -> tuple:
    """The index selecting `index`'s positions along dimension `d`."""
    return (slice(None),) * d + (index,)


def check_index(x: np.ndarray, d: int, index: np.ndarray, op: str, src=None) -> None:
    """PyTorch's rules for gather/scatter: as many dims as `x`; no larger than `x` outside
    `d` (nor than `src` anywhere); values in [0, x.shape[d]). RuntimeError otherwise."""
    if index.ndim != max(x.ndim, 1) and not (index.ndim == 0 and x.ndim == 0):
        raise RuntimeError(f"{op}(): Index tensor must have the same number of dimensions "
                           f"as input tensor ({index.ndim} vs {x.ndim})")
    xs = x.shape or (1,)
    for k, (i, n) in enumerate(zip(index.shape, xs)):
        if k != d and i > n:
            raise RuntimeError(f"{op}(): Expected index {list(index.shape)} to be no larger "
                               f"than self {list(x.shape)} apart from dimension {d}")
    if src is not None:
        if src.ndim != x.ndim:
            raise RuntimeError(f"{op}(): src must have as many dimensions as input "
                               f"({src.ndim} vs {x.ndim})")
        for i, n in zip(index.shape, src.shape):
            if i > n:
                raise RuntimeError(f"{op}(): Expected index {list(index.shape)} to be no "
                                   f"larger size than src {list(src.shape)}")
    _in_range(index, xs[d], op, d)


def vector_index(index, n: int, op: str, d: int) -> np.ndarray:
    """index_select's and index_add's index: 0- or 1-D integers in [0, n)."""
    idx = indices(index, op)
    if idx.ndim > 1:
        raise IndexError(f"{op}(): Index is supposed to be a vector, got {idx.ndim} dims")
    idx = idx.reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise IndexError(f"{op}(): index {idx.max() if idx.max() >= n else idx.min()} out of "
                         f"range for dimension {d} of size {n}")
    return idx


def sizes(args: tuple, op: str) -> tuple:
    """`f(x, 2, 3)` or `f(x, (2, 3))`: the ints as a tuple (TypeError otherwise)."""
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        args = tuple(args[0])
    out = []
    for a in args:
        if isinstance(a, Tensor) and a._data.ndim == 0 and a._data.dtype.kind in "iu":
            a = int(a._data)
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
            raise TypeError(f"{op}: expected ints, got {type(a).__name__}")
        out.append(int(a))
    return tuple(out)


def same_dtype(op: str, x: np.ndarray, s: np.ndarray, what: str = "src") -> None:
    """PyTorch's check of scatter-like ops: `s` (the source) has x's dtype, or RuntimeError."""
    if s.dtype != x.dtype:
        raise RuntimeError(f"{op}(): Expected self.dtype to be equal to {what}.dtype (self "
                           f"{x.dtype}, {what} {s.dtype})")


def old_dim(d, ndim: int, op: str) -> int:
    """The index family's former dimension check, kept for the modules that import it
    under its old name `_dim` (a dimension in [-ndim, ndim), IndexError otherwise)."""
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
        raise TypeError(f"{op}: dim must be an int, got {type(d).__name__}")
    lo, hi = -max(ndim, 1), max(ndim, 1) - 1
    if not lo <= d <= hi:
        raise IndexError(f"{op}: dimension out of range (expected to be in range of "
                         f"[{lo}, {hi}], but got {d})")
    return int(d) % max(ndim, 1)


def old_dims(ds, ndim: int, op: str) -> tuple:
    """`old_dim` of an int or a sequence; a dimension named twice is a ValueError."""
    out = tuple(old_dim(d, ndim, op) for d in ds) if isinstance(ds, (list, tuple)) \
        else (old_dim(ds, ndim, op),)
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: dims {tuple(ds) if isinstance(ds, (list, tuple)) else ds} "
                         f"name a dimension twice")
    return out


# ---- x[index]: PyTorch's indexing as two numpy steps -------------------------------------------
class IndexPlan:
    """An index as two numpy steps that give PyTorch's result: `x[first]`, a basic index
    (ints, slices, None, Ellipsis: a view), then, if not None, `[then]`, the advanced
    index (integer and boolean arrays, full slices between them) on that view. With the
    ints gone, numpy places the advanced dimensions where PyTorch does (at the first
    of them when adjacent, else first). `repeats`: `then` holds an integer array, so
    it may name an element twice (the adjoint must accumulate). Immutable."""

    __slots__ = ("first", "then", "repeats")

    def __init__(self, first: tuple, then, repeats: bool):
        self.first, self.then, self.repeats = first, then, repeats

    def __repr__(self):
        return f"IndexPlan({self.first!r}, {self.then!r})"

    def take(self, x: np.ndarray) -> np.ndarray:
        """`x` indexed: a view of `x` for a basic index, else a new array."""
        v = x[self.first]
        return v if self.then is None else v[self.then]

    def put(self, out: np.ndarray, g) -> None:
        """`g` added into the zeros `out` at the indexed places (repeats accumulate)."""
        v = out[self.first]
        if self.then is None:
            v[...] = g
        elif self.repeats:
            np.add.at(v, self.then, g)
        else:          # masks and bools select each element once: a plain write
            v[self.then] = g


_BASIC = (int, slice, type(None), type(Ellipsis))
_WARNED = "Using a non-tuple sequence for multidimensional indexing is deprecated"


def index_plan(index, ndim: int) -> IndexPlan:
    """The plan of `x[index]` for a tensor of `ndim` dimensions, PyTorch's way (see the
    module's docstring); IndexError for an index PyTorch refuses."""
    if type(index) is IndexPlan:
        return index
    if type(index) in _BASIC:               # the common cases first: x[1], x[1:3], x[None]
        return IndexPlan((index,) if index is Ellipsis else (index, Ellipsis), None, False)
    if type(index) is tuple:
        for p in index:  # (a loop, not all(...): no generator on the per-op path)
            if type(p) not in _BASIC:
                break
        else:
            return IndexPlan(index if Ellipsis in index else index + (Ellipsis,), None, False)
    return _plan(tuple(_part(p) for p in _as_tuple(index)), ndim)


def numpy_index(index) -> IndexPlan:
    """The plan of numpy's `x[index]` (numpy's placement of the advanced dimensions), for
    the writes (setitem) that still take numpy's indices."""
    parts = index if isinstance(index, tuple) else (index,)
    if all(type(p) in _BASIC for p in parts):
        return IndexPlan(parts if Ellipsis in parts else parts + (Ellipsis,), None, False)
    return IndexPlan((Ellipsis,), index, True)


def _as_tuple(index) -> tuple:
    """PyTorch's reading of a non-tuple index: a list holding a sequence, a tensor, a
    slice, None or Ellipsis is a tuple of indices (deprecated: its warning); anything
    else is one index."""
    if isinstance(index, tuple):
        return index
    if isinstance(index, list) and len(index) < 32 and any(
            isinstance(p, (Tensor, np.ndarray, list, tuple, slice, range)) or p is None
            or p is Ellipsis for p in index):
        warnings.warn(f"{_WARNED}; use x[tuple(seq)] instead of x[seq]. In PyTorch this "
                      f"will be interpreted as a tensor index, x[torch.tensor(seq)].",
                      UserWarning, stacklevel=5)
        return tuple(index)
    return (index,)


def _part(p):
    """One part of an index: int, slice, None, Ellipsis, a Python bool, or an integer or
    boolean ndarray of at least one dimension."""
    if type(p) in _BASIC or type(p) is bool:
        return p
    tensor = isinstance(p, Tensor)
    if tensor or isinstance(p, np.ndarray):
        a = p._data if tensor else p
    elif isinstance(p, np.bool_):
        return bool(p)
    elif isinstance(p, np.integer):
        return int(p)
    elif isinstance(p, (list, tuple, range)):
        a = _sequence_array(p)
    else:
        raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), None and long or "
                         f"byte Variables are valid indices (got {type(p).__name__})")
    if a.dtype == np.uint8 and tensor:
        warnings.warn("indexing with dtype uint8 is now deprecated, please use a dtype bool "
                      "instead.", UserWarning, stacklevel=6)
        a = a.astype(bool)
    if a.dtype.kind not in "biu":
        raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    if a.ndim == 0:                         # a 0-d index is a number: x[t] with t = 1
        return bool(a) if a.dtype.kind == "b" else int(a)
    return a


def _sequence_array(p) -> np.ndarray:
    """A list as an index array (its tensors unwrapped; `[]` as an empty integer one)."""
    a = np.asarray([_sequence_array(e) if isinstance(e, (list, tuple)) else raw(e)
                    for e in p])
    return a.astype(np.int64) if a.size == 0 and a.dtype.kind == "f" else a


def _consumed(p) -> int:
    """The dimensions of the indexed tensor one part of an index takes."""
    if type(p) in (int, slice):
        return 1
    if isinstance(p, np.ndarray):
        return p.ndim if p.dtype == np.bool_ else 1
    return 0                                # None, Ellipsis (counted apart), a Python bool


def _too_many(ndim: int) -> str:
    return ("invalid index of a 0-dim tensor. Use `tensor.item()` to convert a 0-dim tensor "
            "to a number" if ndim == 0 else f"too many indices for tensor of dimension {ndim}")


def _plan(parts: tuple, ndim: int) -> IndexPlan:
    used = sum(_consumed(p) for p in parts)
    ellipsis = sum(p is Ellipsis for p in parts)
    if ellipsis > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if used > ndim:
        raise IndexError(_too_many(ndim))
    tail = () if ellipsis else (Ellipsis,)  # (so a 0-d result stays an array: a view)
    if not any(type(p) is bool or isinstance(p, np.ndarray) for p in parts):
        return IndexPlan(parts + tail, None, False)
    first, then, repeats = [], [], False
    for p in parts:
        if type(p) is int:                  # a basic index, as in PyTorch: selected first
            first.append(p)
        elif type(p) is bool:               # a new dimension, indexed by [0] or []
            first.append(None)
            then.append(np.zeros(int(p), np.intp))
        elif isinstance(p, np.ndarray):
            first.extend([slice(None)] * _consumed(p))
            then.append(p)
            repeats = repeats or p.dtype != np.bool_
        else:                               # a slice, None or Ellipsis: kept in both steps
            first.append(p)
            then.extend([slice(None)] * ((ndim - used) if p is Ellipsis else 1))
    return IndexPlan(tuple(first) + tail, tuple(then), repeats)


def _getitem_kernel(g, ans, input, plan, index):
    out = _zeros(np.shape(input), g.dtype)  # zeros, then g written in (added where an
    plan.put(out, g)                        # index repeats): 2 passes
    return out


def _getitem_formula(g, ans, input, index):
    return index_accumulate(g, index, _shape(input))


@defop(formula=_getitem_formula, kernel=_getitem_kernel, method="__getitem__", export=False,
       shapes_only=True)
def getitem(input: Tensor, index) -> Tensor:
    """`input[index]`, PyTorch's indexing (see the module's docstring): basic indices give
    a view; the gradient accumulates repeated indices."""
    plan = index_plan(index, input.ndim if type(input) is np.ndarray else np.ndim(input))
    try:
        return Saved(plan.take(input), plan)
    except IndexError as e:
        raise IndexError(f"getitem: {_torch_words(str(e), np.ndim(input))}") from e


def _torch_words(message: str, ndim: int) -> str:
    """numpy's IndexError message in PyTorch's words."""
    if message.startswith("too many indices"):
        return _too_many(ndim)
    return message.replace(" for axis ", " for dimension ")


def _accumulate_kernel(g, ans, input, plan, index, shape):
    return plan.take(g)                     # g at the places: a view, or 1 pass


@defop(formula=lambda g, ans, input, index, shape: getitem(g, index),
       kernel=_accumulate_kernel, export=False, shapes_only=True)
def index_accumulate(input: Tensor, index, shape: tuple) -> Tensor:
    """Zeros of `shape` with `input` added at `index` (`x[index]`'s adjoint: repeated
    indices accumulate; PyTorch's `index_put(zeros, index, input, accumulate=True)`)."""
    x = np.asarray(input)
    plan = index_plan(index, len(shape))
    out = _zeros(tuple(shape), x.dtype)     # zeros, then the input added in: 2 passes
    try:
        plan.put(out, x)
    except IndexError as e:
        raise IndexError(f"index_accumulate: {e}") from e
    return Saved(out, plan)


# ---- gather, scatter_add: each other's adjoint ---------------------------------------------------
def _as1d(x: np.ndarray, idx: np.ndarray):
    """A 0-d input (and its index) as 1-D, as PyTorch treats them in gather and scatter."""
    return (x.reshape(1), idx.reshape(-1)) if x.ndim == 0 else (x, idx)


def _gather_kernel(g, ans, input, dim, index, sparse_grad):
    x, idx = _as1d(np.asarray(input), np.asarray(index))
    out = _zeros(x.shape, g.dtype)          # zeros, then g added at the gathered places
    np.add.at(out, grid(idx, dim % x.ndim), np.reshape(g, idx.shape))  # (repeats add): 2 passes
    return out.reshape(np.shape(input))


def _gather_formula(g, ans, input, dim, index, sparse_grad):
    return scatter_add(np.zeros(_shape(input), raw(g).dtype), dim, index, g)


@defop(formula=_gather_formula, kernel=_gather_kernel, method=True, shapes_only=True,
       cost=lambda ans, input, *_, **__: ans.size + np.size(input))
def gather(input: Tensor, dim: int, index: Tensor, *, sparse_grad: bool = False) -> Tensor:
    """`out[i][j][k] = input[i][index[i][j][k]][k]` for dim=1: values picked along `dim` at
    `index`, which has input's dimensions and is no larger outside `dim`. The gradient is a
    scatter_add (repeated indices accumulate)."""
    x, idx = np.asarray(input), indices(index, "gather")
    d = one_dim(dim, x.ndim, "gather")
    x1, idx1 = _as1d(x, idx)
    check_index(x1, d, idx1, "gather")
    return x1[grid(idx1, d)].reshape(idx.shape)


def _scatter_add_src_kernel(g, ans, input, src, dim, index):
    x, idx = _as1d(np.asarray(g), np.asarray(index))
    part = x[grid(idx, dim % x.ndim)]       # g gathered (index's shape), in src's shape
    return _placed(part.reshape(np.shape(index)), np.shape(src))  # 1 pass (2: larger src)


def _scatter_add_src_formula(g, ans, input, src, dim, index):
    return _pad_to(gather(g, dim, index), _shape(src))


@defop(inputs=("input", "src"), formula=(lambda g, ans, input, src, dim, index: g,
                                         _scatter_add_src_formula),
       kernel=(None, _scatter_add_src_kernel), method=True, shapes_only=True)
def scatter_add(input: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """A copy of `input` with `src[i][j][k]` added at `[i][index[i][j][k]][k]` for dim=1
    (repeated indices accumulate). `src` may be larger than `index`: its leading block of
    index's shape is used. The gradient of `src` is a gather."""
    x, s = np.asarray(input), np.asarray(src)
    idx = indices(index, "scatter_add")
    d = one_dim(dim, x.ndim, "scatter_add")
    same_dtype("scatter_add", x, s)
    x1, idx1 = _as1d(x, idx)
    s1 = s.reshape(-1) if x.ndim == 0 else s
    check_index(x1, d, idx1, "scatter_add", s1)
    out = _copy(x1)                         # a copy, then src's block added: 2 passes
    np.add.at(out, grid(idx1, d), s1[lead(idx1.shape)])
    return out.reshape(x.shape)


def _placed(part: np.ndarray, shape: tuple) -> np.ndarray:
    """`part` in the leading block of zeros of `shape` (itself when the shapes match)."""
    if part.shape == tuple(shape):
        return part
    out = _zeros(shape, part.dtype)
    out[lead(part.shape)] = part
    return out


def _pad_to(t, shape: tuple):
    """The differentiable `_placed`: `t` in the leading block of zeros of `shape`."""
    have = _shape(t)
    return t if have == tuple(shape) else index_accumulate(t, lead(have), tuple(shape))


# ---- scatter: src written, or a value ------------------------------------------------------------
def _last_writes(shape: tuple, d: int, index: np.ndarray):
    """None when `index` (along `d`, into `shape`) names each element once; else a
    boolean mask of index's shape: True at the last write to each element."""
    if index.size < 2:
        return None
    where = tuple(np.broadcast_to(a, index.shape) for a in grid(index, d))
    flat = np.ravel_multi_index(where, shape).reshape(-1)
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


def _scatter_input_kernel(g, ans, input, *rest, dim, index, **_):
    x, idx = _as1d(np.asarray(g), np.asarray(index))
    out = _copy(x)                          # g with zeros where src (or value) was written:
    out[grid(idx, dim % x.ndim)] = 0        # 2 passes
    return out.reshape(np.shape(g))


def _scatter_input_formula(g, ans, input, *rest, dim, index, **_):
    return scatter_value(g, dim, index, 0)


def _scatter_src_kernel(g, ans, input, src, keep, dim, index):
    x, idx = _as1d(np.asarray(g), np.asarray(index))
    part = x[grid(idx, dim % x.ndim)].reshape(np.shape(index))  # g at the written places
    if keep is not None:                    # for the writes that won, in src's shape: 1-2
        part *= keep                        # passes
    return _placed(part, np.shape(src))


def _scatter_src_formula(g, ans, input, src, dim, index):
    part = gather(g, dim, index)
    idx = np.asarray(raw(index))
    shape = _shape(input)
    keep = _last_writes(shape or (1,), dim % max(len(shape), 1),
                        idx if shape else idx.reshape(-1))
    return _pad_to(part if keep is None else part * keep.reshape(_shape(part)), _shape(src))


@defop(inputs=("input", "src"), formula=(_scatter_input_formula, _scatter_src_formula),
       kernel=(_scatter_input_kernel, _scatter_src_kernel), export=False, shapes_only=True)
def scatter_src(input: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """scatter with a tensor `src` (see `scatter`)."""
    x, s = np.asarray(input), np.asarray(src)
    idx = indices(index, "scatter")
    d = one_dim(dim, x.ndim, "scatter")
    same_dtype("scatter", x, s)
    x1, idx1 = _as1d(x, idx)
    s1 = s.reshape(-1) if x.ndim == 0 else s
    check_index(x1, d, idx1, "scatter", s1)
    keep = _last_writes(x1.shape, d, idx1)
    out = _copy(x1)                         # a copy of x, then src's block written: 2 passes
    part = s1[lead(idx1.shape)]
    if keep is None:
        out[grid(idx1, d)] = part
    else:                                   # only the last write to each element
        out[tuple(np.broadcast_to(a, idx1.shape)[keep] for a in grid(idx1, d))] = part[keep]
    return Saved(out.reshape(x.shape), None if keep is None else keep.reshape(idx.shape))


@defop(formula=_scatter_input_formula, kernel=_scatter_input_kernel, export=False,
       shapes_only=True)
def scatter_value(input: Tensor, dim: int, index: Tensor, value) -> Tensor:
    """scatter with a number `value` (see `scatter`)."""
    x = np.asarray(input)
    idx = indices(index, "scatter")
    d = one_dim(dim, x.ndim, "scatter")
    if isinstance(value, (np.ndarray, Tensor)) and np.ndim(raw(value)):
        raise TypeError("scatter(): value must be a number (src= for a tensor)")
    x1, idx1 = _as1d(x, idx)
    check_index(x1, d, idx1, "scatter")
    out = _copy(x1)                         # a copy of x, then value at index: 2 passes
    out[grid(idx1, d)] = raw(value)
    return out.reshape(x.shape)


_SCATTER_REDUCES = {"add": "sum", "multiply": "prod"}


@composite(method=True)
def scatter(input: Tensor, dim: int, index: Tensor, src=None, value=None, *,
            reduce: str | None = None) -> Tensor:
    """A copy of `input` with `src[i][j][k]` written at `[i][index[i][j][k]][k]` for dim=1,
    or the number `value` at every `index` place (`scatter(x, dim, index, 2.0)` works too,
    as PyTorch's overload). Where `index` names an element twice, PyTorch leaves the result
    undefined; here the last write in index order wins, and only the `src` positions that
    won get a gradient. `reduce="add"` / `"multiply"` combine instead of writing
    (`scatter_reduce`'s "sum" / "prod" with the input's own values)."""
    if src is not None and value is not None:
        raise TypeError("scatter(): give src or value, not both")
    if src is not None and not isinstance(src, (Tensor, np.ndarray, list)):
        src, value = None, src  # scatter(x, dim, index, 2.0): PyTorch's value overload
    if src is None and value is None:
        raise TypeError("scatter(): src or value is required")
    if reduce is not None:
        if reduce not in _SCATTER_REDUCES:
            raise RuntimeError(f"scatter(): reduce argument must be either add or multiply, "
                               f"got {reduce!r}")
        if src is None:
            src = np.full(np.shape(indices(index, "scatter")), value, _data(input).dtype)
        return scatter_reduce(input, dim, index, src, _SCATTER_REDUCES[reduce])
    if src is None:
        return scatter_value(input, dim, index, value)
    return scatter_src(input, dim, index, src)


# ---- scatter_reduce ------------------------------------------------------------------------------
_REDUCES = ("sum", "prod", "mean", "amax", "amin")
_UFUNCS = {"sum": np.add, "mean": np.add, "prod": np.multiply, "amax": np.maximum,
           "amin": np.minimum}


def _identity(reduce: str, dtype) -> float:
    """The value a reduction starts from where the input is left out (include_self=False)."""
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    big = np.inf if dtype.kind == "f" else np.iinfo(dtype).max
    return -big if reduce == "amax" else big


def _reduce_parts(input, src, dim, index, op: str = "scatter_reduce"):
    """(x as at least 1-D, src's block of index's shape, the dim, index's grid, touched:
    the elements some index names), checked."""
    x, s = np.asarray(input), np.asarray(src)
    idx = indices(index, op)
    d = one_dim(dim, x.ndim, op)
    same_dtype(op, x, s)
    x1, idx1 = _as1d(x, idx)
    s1 = s.reshape(-1) if x.ndim == 0 else s
    check_index(x1, d, idx1, op, s1)
    where = grid(idx1, d)
    touched = np.zeros(x1.shape, bool)
    touched[where] = True
    return x1, s1[lead(idx1.shape)], where, touched


def _count(x1: np.ndarray, where: tuple, include_self: bool) -> np.ndarray:
    """How many values each element's mean averages (1 where none: the input stays)."""
    n = np.zeros(x1.shape, x1.dtype if x1.dtype.kind == "f" else np.int64)
    np.add.at(n, where, 1)
    n += include_self
    n[n == 0] = 1
    return n


@defop(inputs=("input", "src"), formula=Joint(lambda g, ans, input, src, dim, index, reduce,
                                              include_self: _scatter_reduce_grads(
                                                  g, ans, input, src, dim, index, reduce,
                                                  include_self)),
       method=True)
def scatter_reduce(input: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, *,
                   include_self: bool = True) -> Tensor:
    """A copy of `input` where each element `index` names (along `dim`, as in scatter_add)
    becomes the `reduce` of the `src` values sent to it, and of its own value when
    `include_self`: "sum", "prod", "mean" (the count includes self when `include_self`),
    "amax", "amin". Elements no index names keep input's value. Gradients are PyTorch's
    (ties of amax/amin share g evenly; prod's zeros get the product of the others)."""
    if reduce not in _REDUCES:
        raise RuntimeError(f"scatter_reduce(): reduce argument must be one of {_REDUCES}, got "
                           f"{reduce!r}")
    x1, part, where, touched = _reduce_parts(input, src, dim, index)
    out = _copy(x1)                         # a copy, the reduction at index: 2-3 passes
    if not include_self:
        out[touched] = _identity(reduce, out.dtype)
    _UFUNCS[reduce].at(out, where, part)
    if reduce == "mean":
        n = _count(x1, where, include_self)
        if out.dtype.kind == "f":
            out /= n
        else:                               # integers: PyTorch's floor division
            np.floor_divide(out, n, out=out)
    return out.reshape(np.shape(input))


def _scatter_reduce_grads(g, ans, input, src, dim, index, reduce, include_self):
    """PyTorch's `scatter_reduce_backward`, with ops (differentiable again): the gradients
    of input and src."""
    idx = np.asarray(raw(index))
    x1, block, where, _ = _reduce_parts(raw(input), raw(src), dim, idx)
    d = one_dim(dim, np.ndim(raw(input)), "scatter_reduce")
    part = src if _shape(src) == idx.shape else getitem(src, lead(idx.shape))
    if reduce == "sum":
        gx, gs = g, gather(g, d, idx)
    elif reduce == "mean":
        n = _count(x1, where, include_self).reshape(_shape(input)).astype(raw(g).dtype)
        gx = g / n
        gs = gather(gx, d, idx)
    elif reduce == "prod":
        gx, gs = _prod_grads(g, ans, input, part, d, idx, include_self)
    else:                                   # amax, amin: ties share g evenly
        a, xv = np.asarray(raw(ans)), np.asarray(raw(input))
        value = a.reshape(x1.shape)[where]
        self_is = (xv == a).astype(a.dtype)
        src_is = (block == value).astype(a.dtype)
        ties = self_is.reshape(x1.shape).copy()
        np.add.at(ties, where, src_is)
        share = 1 / ties                    # (>= 1 wherever g flows)
        gx = g * (self_is * share.reshape(xv.shape))
        gs = gather(g, d, idx) * (src_is * share[where].reshape(idx.shape))
    if not include_self:
        gx = scatter_value(gx, d, idx, 0)
    return gx, _pad_to(gs, _shape(src))


_PROD_TWICE = ("scatter_reduce(): Double backward is unsupported for src when >1 zeros in "
               "src are scattered to the same position. This may happen when src has zeros "
               "at positions sent to one element of the result (as in PyTorch)")


def _prod_grads(g, ans, input, part, d, idx, include_self):
    """prod's gradients, as PyTorch's: the input's where it is 0 and src's where one zero
    of src reaches an element are the product of the others (not ans / value)."""
    xv, sv = np.asarray(raw(input)), np.asarray(raw(part))
    masked_self = masked_fill(input, xv == 0, 1)
    gx = g * scatter_reduce(masked_self, d, idx, part, "prod",
                            include_self=include_self) / masked_self
    zero = sv == 0
    x1, idx1 = _as1d(xv, idx)
    zeros = np.zeros(x1.shape, np.int64)
    np.add.at(zeros, grid(idx1, d), zero.reshape(idx1.shape))
    count = zeros[grid(idx1, d)].reshape(idx.shape)
    single = zero & (count == 1)
    masked_src = masked_fill(part, single, 1)
    others = scatter_reduce(input, d, idx, masked_src, "prod", include_self=include_self)
    gs = masked_fill(gather(g * others, d, idx), ~single, 0) + masked_fill(
        gather(g * ans, d, idx) / masked_fill(part, zero, 1), single, 0)
    return gx, delayed_error(gs, _PROD_TWICE) if (count > 1).any() else gs


def _raise(g, ans, input, message):
    raise RuntimeError(message)


@defop(formula=_raise, export=False, shapes_only=True)
def delayed_error(input: Tensor, message: str) -> Tensor:
    """`input` itself, whose gradient raises RuntimeError(`message`): marks a value whose
    derivative is not provided (PyTorch's DelayedError)."""
    return input


# ---- index_select, index_add: each other's adjoint -----------------------------------------------
def _index_select_kernel(g, ans, input, dim, index):
    x = np.asarray(input)
    x1 = x.reshape(1) if x.ndim == 0 else x
    out = _zeros(x1.shape, g.dtype)         # zeros, then g added at index along dim
    idx = np.asarray(index).reshape(-1)     # (repeats accumulate): 2 passes
    d = dim % x1.ndim
    np.add.at(out, along(d, idx), np.reshape(g, x1.shape[:d] + idx.shape + x1.shape[d + 1:]))
    return out.reshape(x.shape)


def _index_select_formula(g, ans, input, dim, index):
    return index_add(np.zeros(_shape(input), raw(g).dtype), dim, index, g)


@defop(formula=_index_select_formula, kernel=_index_select_kernel, method=True, shapes_only=True,
       cost=lambda ans, input, *_, **__: ans.size + np.size(input))
def index_select(input: Tensor, dim: int, index: Tensor) -> Tensor:
    """The slices of `input` along `dim` at the positions in the 1-D `index` (repeats
    allowed); the gradient is an index_add."""
    x = np.asarray(input)
    x1 = x.reshape(1) if x.ndim == 0 else x
    d = one_dim(dim, x.ndim, "index_select")
    idx = vector_index(index, x1.shape[d], "index_select", d)
    if x.ndim == 0 and idx.size != 1:
        raise RuntimeError(f"index_select(): Index to scalar can have only 1 value, got "
                           f"{idx.size} value(s)")
    out = empty(x1.shape[:d] + idx.shape + x1.shape[d + 1:], x.dtype)
    np.take(x1, idx, axis=d, out=out, mode="clip")  # (checked: clip never clips)
    return out.reshape(()) if x.ndim == 0 else out


def _index_add_source_kernel(g, ans, input, source, dim, index, alpha):
    out = index_select.op.forward(g, dim, index)  # 1 pass (2 with alpha)
    if alpha != 1:
        out *= alpha
    return out.reshape(np.shape(source))


def _index_add_source_formula(g, ans, input, source, dim, index, alpha):
    picked = index_select(g, dim, index)
    return picked if alpha == 1 else picked * alpha


@defop(inputs=("input", "source"), formula=(lambda g, ans, input, source, dim, index, alpha: g,
                                            _index_add_source_formula),
       kernel=(None, _index_add_source_kernel), method=True, shapes_only=True)
def index_add(input: Tensor, dim: int, index: Tensor, source: Tensor, *,
              alpha: float = 1) -> Tensor:
    """A copy of `input` with `alpha * source[..., i, ...]` added at position `index[i]`
    along `dim` (repeats accumulate). `source` has input's shape with `len(index)` in
    `dim`; its gradient is an index_select."""
    x, s = np.asarray(input), np.asarray(source)
    x1 = x.reshape(1) if x.ndim == 0 else x
    d = one_dim(dim, x.ndim, "index_add")
    idx = vector_index(index, x1.shape[d], "index_add", d)
    if s.dtype != x.dtype:
        raise RuntimeError(f"index_add_(): self ({x.dtype}) and source ({s.dtype}) must have "
                           f"the same scalar type")
    want = x1.shape[:d] + idx.shape + x1.shape[d + 1:]
    if s.shape != want and not (x.ndim == 0 and s.size == idx.size == 1):
        raise RuntimeError(f"index_add_(): source must have shape {want} (input's, with "
                           f"len(index) in dim {d}), got {s.shape}")
    out = _copy(x1)                         # a copy, then alpha * source added at index:
    np.add.at(out, along(d, idx), (s if alpha == 1 else s * alpha).reshape(want))  # 2-3 passes
    return out.reshape(x.shape)


# ---- masks ---------------------------------------------------------------------------------------
def _masked_fill_value_formula(g, ans, input, value, mask):
    return masked_fill(g, np.logical_not(mask), 0)  # (the node sums it to value's shape)


@defop(inputs=("input", "value"),
       formula=(lambda g, ans, input, value, mask: masked_fill(g, mask, 0),
                _masked_fill_value_formula), method=True, shapes_only=True)
def masked_fill(input: Tensor, mask: Tensor, value) -> Tensor:
    """`value` where the boolean `mask` (broadcast with input) is True, `input` elsewhere.
    `value` is a number or a 0-d tensor, converted to input's dtype; a 0-d tensor that
    requires grad gets the sum of the gradient over the filled places."""
    x, m = np.asarray(input), mask_of(mask, "masked_fill")
    try:
        shape = np.broadcast_shapes(m.shape, x.shape)
    except ValueError:
        raise RuntimeError(f"masked_fill: the size of mask {list(m.shape)} must match the "
                           f"size of input {list(x.shape)} where it is not 1") from None
    if np.ndim(value):
        raise RuntimeError(f"masked_fill: only supports a 0-dimensional value tensor, but "
                           f"got tensor with {np.ndim(value)} dimension(s)")
    out = _copy(x, shape)                   # input (broadcast), then value where the mask
    np.copyto(out, np.asarray(value).astype(x.dtype), where=m)  # is True: 2 passes
    return out



def _masked_scatter_input_kernel(g, ans, input, source, full, count, mask):
    out = _copy(g)                          # g with zeros where source went: 2 passes
    out[full] = 0
    return out


def _masked_scatter_source_kernel(g, ans, input, source, full, count, mask):
    out = _zeros(np.size(source), g.dtype)  # g at the True places, in source's first places
    out[:count] = g[full]
    return out.reshape(np.shape(source))


def _masked_scatter_source_formula(g, ans, input, source, mask):
    full = np.broadcast_to(mask, _shape(g))
    picked = getitem(g, full)
    shape = _shape(source)
    if not shape:                           # (a 0-d source holds at most one True's value)
        return sum_to(picked, ())
    n = int(np.count_nonzero(full))
    return index_accumulate(picked, np.unravel_index(np.arange(n), shape), shape)


def _masked_scatter(input, source, mask):
    x, s = np.asarray(input), np.asarray(source)
    m = mask_of(mask, "masked_scatter")
    if s.dtype != x.dtype:
        raise RuntimeError(f"masked_scatter: expected self and source to have same dtypes but "
                           f"got {x.dtype} and {s.dtype}")
    try:
        shape = np.broadcast_shapes(m.shape, x.shape)
    except ValueError:
        raise RuntimeError(f"masked_scatter: mask of shape {list(m.shape)} does not broadcast "
                           f"with input of shape {list(x.shape)}") from None
    m = np.broadcast_to(m, shape)
    count = int(np.count_nonzero(m))
    if s.size < count:
        raise RuntimeError(f"masked_scatter: Number of elements of source ({s.size}) < number "
                           f"of ones in mask ({count})")
    out = _copy(x, shape)                   # input (broadcast), then source's first values
    out[m] = s.reshape(-1)[:count]          # at the True places: 2 passes
    return Saved(out, m, count)


@defop(inputs=("input", "source"),
       formula=(lambda g, ans, input, source, mask: masked_fill(g, mask, 0),
                _masked_scatter_source_formula),
       kernel=(_masked_scatter_input_kernel, _masked_scatter_source_kernel), method=True,
       shapes_only=True)
def masked_scatter(input: Tensor, mask: Tensor, source: Tensor) -> Tensor:
    """A copy of `input` with the elements of `source` (in order, row-major) written
    where the boolean `mask` (broadcast with input) is True; `source` needs at least as
    many elements as the mask has Trues."""
    return _masked_scatter(input, source, mask)


@composite(method=True)
def masked_select(input: Tensor, mask: Tensor) -> Tensor:
    """The elements of `input` where the boolean `mask` is True (both broadcast), as a new
    1-D tensor; the gradient is scattered back (summed over broadcast dimensions)."""
    m = mask_of(mask, "masked_select")
    shape = _shape(input)
    try:
        full = np.broadcast_shapes(shape, m.shape)
    except ValueError:
        raise RuntimeError(f"masked_select: the size of mask {list(m.shape)} must match the "
                           f"size of input {list(shape)} where it is not 1") from None
    if full != shape:
        input = expand_to(input, full)
    return getitem(input, np.broadcast_to(m, full))


# ---- take_along_dim ------------------------------------------------------------------------------
@composite(method=True)
def take_along_dim(input: Tensor, indices: Tensor, dim: int | None = None) -> Tensor:
    """The values of `input` at `indices` along `dim` (numpy's take_along_axis): `input` and
    `indices` are broadcast in the other dimensions, then gathered. With `dim=None` both
    are flattened."""
    x, idx = _data(input), indices_of(indices, "take_along_dim", "indices")
    if dim is None:
        flat = idx.reshape(-1)
        _in_range(flat, x.size, "take_along_dim", 0)
        where = np.unravel_index(idx, x.shape) if x.ndim else (np.zeros(idx.shape, np.intp),)
        return getitem(input if x.ndim else getitem(input, None), where)
    d = one_dim(dim, x.ndim, "take_along_dim")
    if idx.ndim != x.ndim:
        raise RuntimeError(f"take_along_dim(): input and indices should have the same number "
                           f"of dimensions, but got {x.ndim} dimensions for input, and "
                           f"{idx.ndim} dimensions for indices")
    xs, js = list(x.shape), list(idx.shape)
    for k in range(x.ndim):
        if k != d:
            try:
                xs[k] = js[k] = np.broadcast_shapes((x.shape[k],), (idx.shape[k],))[0]
            except ValueError:
                raise RuntimeError(f"take_along_dim(): input of shape {x.shape} and indices "
                                   f"of shape {idx.shape} do not broadcast outside dim "
                                   f"{d}") from None
    if tuple(xs) != x.shape:
        input = expand_to(input, tuple(xs))
    return gather(input, d, np.broadcast_to(idx, tuple(js)))



@composite(export=False)
def take_along_axis(input: Tensor, indices: Tensor, axis: int | None = None) -> Tensor:
    """numpy's name for `take_along_dim` (PyTorch's semantics: indices in [0, size))."""
    return take_along_dim(input, indices, dim=axis)


# ---- diagonal, diag_embed, diagonal_backward -----------------------------------------------------
def _write_diagonal(out: np.ndarray, d: np.ndarray, offset: int, dim1: int, dim2: int):
    """`d`'s last dimension written on the `offset` diagonal of `out`'s (dim1, dim2)."""
    m = np.moveaxis(out, (dim1, dim2), (-2, -1))  # a view: the other dims keep their order
    i = np.arange(d.shape[-1])
    m[..., i + max(-offset, 0), i + max(offset, 0)] = d
    return out


def _two_dims(dim1, dim2, nd: int, op: str) -> tuple:
    d1, d2 = one_dim(dim1, nd, op), one_dim(dim2, nd, op)
    if d1 == d2:
        raise RuntimeError(f"{op}: diagonal dimensions cannot be identical {dim1}, {dim2}")
    return d1, d2


@defop(formula=lambda g, ans, input, offset, dim1, dim2: diagonal_backward(
    g, _shape(input), offset, dim1, dim2), method=True, shapes_only=True)
def diagonal(input: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The `offset` diagonal of dimensions `dim1` and `dim2` (removed), as a last
    dimension: `diagonal(m)` of a matrix is its main diagonal. A view, as in PyTorch."""
    x = np.asarray(input)
    if x.ndim < 2:
        raise IndexError(f"diagonal(): Dimension out of range (expected to be in range of "
                         f"[{-max(x.ndim, 1)}, {max(x.ndim, 1) - 1}], but got {dim2})")
    d1, d2 = _two_dims(dim1, dim2, x.ndim, "diagonal")
    d = np.diagonal(x, int(offset), d1, d2)  # a view (numpy makes it read-only)
    if x.flags.writeable:
        try:
            d.flags.writeable = True        # writable like PyTorch's, when x is
        except ValueError:                  # (a numpy that refuses: read-only, then)
            pass
    return d


@defop(formula=lambda g, ans, input, shape, offset, dim1, dim2: diagonal(g, offset, dim1, dim2),
       export=False, shapes_only=True)
def diagonal_backward(input: Tensor, shape: tuple, offset: int, dim1: int, dim2: int) -> Tensor:
    """Zeros of `shape` with `input` (a diagonal, as `diagonal` gives it) on the `offset`
    diagonal of `dim1`, `dim2`: diagonal's adjoint (PyTorch's `diagonal_backward`)."""
    x = np.asarray(input)
    d1, d2 = _two_dims(dim1, dim2, len(shape), "diagonal_backward")
    return _write_diagonal(_zeros(tuple(shape), x.dtype), x, int(offset), d1, d2)  # 2 passes


@defop(formula=lambda g, ans, input, offset, dim1, dim2: diagonal(g, offset, dim1, dim2),
       method=True, shapes_only=True)
def diag_embed(input: Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """The last dimension of `input` put on the `offset` diagonal of two new dimensions
    `dim1`, `dim2` of size n + |offset| (zeros elsewhere): a batch of diagonal matrices."""
    x = np.asarray(input)
    if not x.ndim:
        raise IndexError(f"diag_embed(): Dimension out of range (expected to be in range of "
                         f"[-1, 0], but got {dim1})")
    d1, d2 = _two_dims(dim1, dim2, x.ndim + 1, "diag_embed")
    n = x.shape[-1] + abs(int(offset))
    shape = list(x.shape[:-1])
    for k in sorted((d1, d2)):
        shape.insert(k, n)
    return _write_diagonal(_zeros(tuple(shape), x.dtype), x, int(offset), d1, d2)  # 2 passes


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


@functools.lru_cache(maxsize=512)
def _parse_cached(equation: str, shapes: tuple) -> tuple:
    """`_parse`, remembered: a model calls einsum with a few equations and shapes, and the
    parse is most of einsum's per-call cost on small operands (~3 us; thread safe)."""
    return _parse(equation, list(shapes))


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
    operands = [o if isinstance(o, Tensor) else np.asarray(o) for o in operands]
    shapes = [o.shape for o in operands]
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


def _einsum_formula(g, ans, *operands, spec):
    # every operand's gradient: another einsum of g and the others (recorded)
    return tuple(_einsum_grad(k, g, operands, spec, einsum) for k in range(len(operands)))


def _einsum_kernel(g, ans, *saved, spec):
    # the formula's contractions on arrays, only for the operands that take a gradient
    # (the forward's extra: numpy's einsum on a frozen weight would be a wasted GEMM)
    *arrays, needs = saved
    return tuple(_einsum_grad(k, g, arrays, spec, _np_einsum) if need else None
                 for k, need in enumerate(needs))


@defop(inputs=("*operands",), formula=Joint(_einsum_formula), kernel=Joint(_einsum_kernel),
       export=False, threaded=True)
def einsum_contract(operands, spec: tuple, *, needs_input_grad=()) -> Tensor:
    """The contraction behind `einsum`: `spec` the parsed equation (subscripts per operand,
    output subscripts, `_parse`), every `...` spelled out."""
    ans = _np_einsum(",".join(spec[0]) + "->" + spec[1], *operands)
    return Saved(ans, tuple(needs_input_grad) or (True,) * len(operands))


@composite
def einsum(*args) -> Tensor:
    """Einstein summation as numpy's and PyTorch's `einsum`: `einsum("ij,jk->ik", a, b)`,
    implicit outputs (`"ij,jk"`), `...` broadcasting, repeated subscripts (diagonals,
    traces), operands as a list (`einsum("ij,jk", [a, b])`) or numpy's sublist form
    (`einsum(a, [0, 1], b, [1, 2], [0, 2])`). Summed `...` dimensions are allowed in
    explicit mode, as in PyTorch. Each operand's gradient is another einsum (one declared
    op, `einsum_contract`)."""
    equation, operands = _einsum_args(args)
    if not isinstance(equation, str):
        raise TypeError(f"einsum: the equation must be a string, got "
                        f"{type(equation).__name__}")
    if len(operands) > _MAX_OPERANDS:
        raise ValueError(f"einsum: at most {_MAX_OPERANDS} operands")
    operands = [o if isinstance(o, Tensor) else np.asarray(o) for o in operands]
    shapes = [o.shape for o in operands]
    spec = _parse_cached(equation, tuple(shapes))
    try:
        return einsum_contract(operands, spec)
    except ValueError as e:  # (numpy's refusal, in the words of the public op)
        msg = str(e).removeprefix("einsum_contract: ")
        raise ValueError(f"einsum: {msg} (equation {equation!r}, shapes {shapes})") from e


_MAX_OPERANDS = 64  # numpy's einsum takes at most 64 operands


