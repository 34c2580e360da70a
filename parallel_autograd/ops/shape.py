"""Shapes and views, one declaration per op (`primitive.defop`, `composite`): reshape view
permute transpose swapaxes swapdims t movedim broadcast_to (expand) squeeze unsqueeze
flatten unflatten ravel clone cat (concat, concatenate) stack split chunk tensor_split
unbind narrow select unfold repeat tile flip roll tril triu repeat_interleave, the Tensor
methods view_as reshape_as expand_as sum_to_size, and numpy's constant `pad` (`pa.pad`;
PyTorch's F.pad is nn's). Indexing (`x[index]`) is in ops/index.py (re-exported here).

Signatures and semantics are PyTorch's: sizes as a tuple or spread (`x.reshape(2, 3)`,
`x.permute(1, 0)`), `dim=` on cat/stack/split (numpy's `axis=` accepted), a dimension out
of range an IndexError, sizes that do not fit a RuntimeError with PyTorch's message. View
ops return numpy views that share the input's memory and version counter (reshape where
the layout allows, permute, transpose, expand, squeeze, unsqueeze, narrow, select, split,
unbind, diagonal, unfold, a dtype view); flip, roll, repeat, cat, stack, clone copy, as
in PyTorch. A copy's memory comes from the caching allocator (`memory`). Every gradient is
a formula of these ops (create_graph to any order); the nodes of these ops keep only the
shapes of the arrays they saw (`defop(shapes_only=True)`), not the arrays.

Thread safety: pure functions of their arguments, like the other ops.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from .. import dtypes
from ..memory import empty
from ..primitive import Joint, composite, defop
from ..tensor import Tensor
from ._common import as_dtype, dims, raw
from ._common import dim as one_dim
from .forms import sum_to
from .index import getitem, index_select
from .index import indices as index_indices
from .index import sizes as index_sizes

__all__ = ["reshape", "view", "view_dtype", "permute", "transpose", "swapaxes", "swapdims",
           "t", "mT", "movedim", "broadcast_to", "expand", "expand_as", "squeeze",
           "unsqueeze", "flatten", "unflatten", "ravel", "view_as", "reshape_as", "clone",
           "cat", "concat", "concatenate", "stack", "split", "chunk", "tensor_split", "unbind",
           "narrow",
           "select", "unfold", "unfold_backward", "repeat", "tile", "flip", "roll", "tril",
           "triu", "repeat_interleave", "sum_to_size", "pad", "getitem", "reshaped", "fold"]


def _shape(x) -> tuple:
    return np.shape(raw(x))


# ---- reshape, view -------------------------------------------------------------------------------
def reshaped(a, shape):
    """`np.reshape(a, shape)`: a view when numpy can make one, else a C-order copy into
    cached memory (one pass). `shape` as numpy takes it (numpy's errors)."""
    if type(a) is not np.ndarray or a.size < 8192 or a.flags.c_contiguous:
        return np.reshape(a, shape)
    try:
        return np.reshape(a, shape, copy=False)
    except TypeError:                 # numpy < 2.1: no copy=; numpy decides
        return np.reshape(a, shape)
    except ValueError:                # a copy is needed (or the shape is wrong)
        pass
    known = _numpy_shape(shape, a.size)
    if known is None:
        return np.reshape(a, shape)   # numpy's own error
    out = empty(known, a.dtype)
    np.copyto(out.reshape(a.shape), a)   # out is C-contiguous: reshape is a view
    return out




def _numpy_shape(shape, size: int):
    """`shape` with a -1 made explicit, or None where numpy would refuse it."""
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    known = math.prod(d for d in shape if d != -1)
    if shape.count(-1) == 1:
        if known <= 0 or size % known:
            return None
        shape = tuple(size // known if d == -1 else d for d in shape)
    return shape if math.prod(shape) == size and min(shape, default=0) >= 0 else None


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
    return head + (math.prod(have[len(head):len(have) - len(tail)]),) + tail


def _target(shape, size: int, op: str) -> tuple:
    """A reshape's shape with its -1 inferred, PyTorch's checks (RuntimeError)."""
    if type(shape) is int:  # (x.view(-1))
        shape = (shape,)
    if type(shape) is tuple:  # the common case: plain ints, at most one -1, a fit
        known, infer = 1, -1
        for i, d in enumerate(shape):
            if type(d) is not int:
                break
            if d >= 0:
                known *= d
            elif d == -1 and infer < 0:
                infer = i
            else:
                break
        else:
            if infer < 0 and known == size:
                return shape
            if infer >= 0 and known and size % known == 0:
                return shape[:infer] + (size // known,) + shape[infer + 1:]
    shape = index_sizes((shape,), op)
    if shape.count(-1) > 1:
        raise RuntimeError(f"{op}: only one dimension can be inferred")
    if any(d < -1 for d in shape):
        raise RuntimeError(f"{op}: invalid shape dimension {min(shape)}")
    known = math.prod(d for d in shape if d != -1)
    if -1 in shape:
        if known == 0:
            raise RuntimeError(f"{op}: cannot reshape tensor of {size} elements into shape "
                               f"{list(shape)} because the unspecified dimension size -1 can "
                               f"be any value and is ambiguous")
        if size % known == 0:
            return tuple(size // known if d == -1 else d for d in shape)
    elif known == size:
        return shape
    raise RuntimeError(f"{op}: shape '{list(shape)}' is invalid for input of size {size}")


def _reshape_kernel(g, ans, input, shape):
    return reshaped(g, np.shape(input))     # a view of g (a copy where its layout needs one)


@defop(formula=lambda g, ans, input, shape: reshape(g, _shape(input)), kernel=_reshape_kernel,
       method=True, sizes="shape", shapes_only=True)
def reshape(input: Tensor, shape) -> Tensor:
    """The same values in a new shape (a view when the layout allows, else a copy); one
    dimension may be -1 (inferred). `reshape(x, (2, 3))`, `x.reshape(2, 3)`."""
    x = np.asarray(input)
    return reshaped(x, _target(shape, x.size, "reshape"))


@defop(export=False)
def view_dtype(input: Tensor, dtype) -> Tensor:
    """The same memory read as `dtype` (a view, no gradient): the last dimension scales by
    the ratio of the item sizes, which needs it contiguous and divisible, as in PyTorch."""
    x = np.asarray(input)
    want = as_dtype(dtype, "view")
    if want.itemsize != x.itemsize:
        what = f"to view {x.dtype} as {want} (different element sizes)"
        if x.ndim == 0:
            raise RuntimeError(f"view: self.dim() cannot be 0 {what}")
        if x.strides[-1] != x.itemsize and x.shape[-1] != 1:
            raise RuntimeError(f"view: self.stride(-1) must be 1 {what}")
        if want.itemsize > x.itemsize and (x.shape[-1] * x.itemsize) % want.itemsize:
            raise RuntimeError(f"view: self.size(-1) must be divisible by "
                               f"{want.itemsize // x.itemsize} {what}, but got {x.shape[-1]}")
    return x.view(want)


@composite(method=True, export=False)
def view(input: Tensor, *shape, dtype=None) -> Tensor:
    """PyTorch's `Tensor.view`: `x.view(2, 3)` / `x.view((2, 3))` is `reshape` (a view where
    the layout allows it; a copy where PyTorch would refuse), `x.view(dtype)` reads the
    memory as another dtype (`view_dtype`)."""
    if dtype is None and len(shape) == 1 and not isinstance(shape[0], (int, np.integer, list,
                                                                           tuple, Tensor)):
        dtype = shape[0]
    if dtype is not None:
        return view_dtype(input, dtype)
    return reshape(input, shape[0] if len(shape) == 1 else shape)


@composite(method=True, export=False)
def view_as(input: Tensor, other: Tensor) -> Tensor:
    """`input` with `other`'s shape (`view`)."""
    return reshape(input, _shape(other))


@composite(method=True, export=False)
def reshape_as(input: Tensor, other: Tensor) -> Tensor:
    """`input` reshaped to `other`'s shape."""
    return reshape(input, _shape(other))


@composite(method=True)
def flatten(input: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Dimensions `start_dim`..`end_dim` merged into one (a 0-d tensor becomes shape (1,))."""
    s = _shape(input)
    start = one_dim(start_dim, len(s), "flatten")
    end = one_dim(end_dim, len(s), "flatten")
    if start > end:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    if not s:
        return reshape(input, (1,))
    return reshape(input, s[:start] + (math.prod(s[start:end + 1]),) + s[end + 1:])


@composite(method=True)
def ravel(input: Tensor) -> Tensor:
    """The elements as a 1-D tensor: a view of a C-contiguous tensor, else a copy (as
    PyTorch's, whose ravel is `contiguous().view(-1)`, even where a strided view exists)."""
    x = input._data if isinstance(input, Tensor) else np.asarray(input)
    return reshape(input if x.flags.c_contiguous else clone(input), (-1,))


@composite(method=True)
def unflatten(input: Tensor, dim: int, sizes) -> Tensor:
    """Dimension `dim` split into `sizes` (one of them may be -1, inferred)."""
    shape = _shape(input)
    if not shape:
        raise IndexError("unflatten: Dimension specified as 0 but tensor has no dimensions")
    d = one_dim(dim, len(shape), "unflatten")
    sizes = _ints(sizes, "unflatten")
    n = shape[d]
    known = math.prod(s for s in sizes if s != -1)
    bad = not sizes or sizes.count(-1) > 1 or any(s < -1 for s in sizes) or (
        n != known if -1 not in sizes else (known == 0 or n % known))
    if bad:
        raise RuntimeError(f"unflatten: Provided sizes {list(sizes)} don't multiply up to the "
                           f"size of dim {d} ({n}) in the input tensor")
    sizes = tuple(n // known if s == -1 else s for s in sizes)
    return reshape(input, shape[:d] + sizes + shape[d + 1:])


def _ints(values, op: str) -> tuple:
    """An int or a sequence of them (ints, numpy ints, 0-d integer tensors) as a tuple."""
    return index_sizes((tuple(values),) if isinstance(values, (list, tuple)) else (values,), op)


# ---- permute, transpose and their kin ------------------------------------------------------------
def _perm_fast(ds, ndim: int) -> tuple | None:
    """`ds` normalised when it is a tuple of `ndim` plain ints in range, each dimension
    once (the common case, one loop); None otherwise (`_perm` decides, with its errors)."""
    if type(ds) is not tuple or len(ds) != ndim:
        return None
    seen, out = 0, []
    for d in ds:
        if type(d) is not int or not -ndim <= d < ndim or seen >> (d % ndim) & 1:
            return None
        seen |= 1 << (d % ndim)
        out.append(d % ndim)
    return tuple(out)


def _perm(ds, ndim: int, op: str = "permute") -> tuple:
    fast = _perm_fast(ds, ndim)
    if fast is not None:
        return fast
    out = dims(ds, ndim, op) if ndim else tuple(ds)
    if len(out) != ndim:
        raise RuntimeError(f"{op}(): number of dimensions in the tensor input does not match "
                           f"the length of the desired ordering of dimensions i.e. input.dim() "
                           f"= {ndim} is not equal to len(dims) = {len(out)}")
    return out


def _permute_kernel(g, ans, input, dims):
    return np.transpose(g, np.argsort(_perm(dims, np.ndim(input))))  # a view of g


@defop(formula=lambda g, ans, input, dims: permute(g, tuple(
    int(i) for i in np.argsort(_perm(dims, len(_shape(input)))))), kernel=_permute_kernel,
    method=True, sizes="dims", shapes_only=True)
def permute(input: Tensor, dims) -> Tensor:
    """The dimensions reordered as `dims` (a view): `permute(x, (2, 0, 1))`,
    `x.permute(2, 0, 1)`."""
    x = np.asarray(input)
    order = _perm_fast(dims, x.ndim)
    if order is None:
        order = _perm(index_sizes((dims,), "permute"), x.ndim)
    return np.transpose(x, order)


def _transpose_kernel(g, ans, input, dim0, dim1):
    return np.swapaxes(g, dim0, dim1) if g.ndim else g  # a view of g (dims checked before)


# Its own op (not a permute): one swap, no order to build and check on each call.
@defop(formula=lambda g, ans, input, dim0, dim1: transpose(g, dim0, dim1),
       kernel=_transpose_kernel, method=True)
def transpose(input: Tensor, dim0: int, dim1: int) -> Tensor:
    """Dimensions `dim0` and `dim1` exchanged (a view)."""
    x = np.asarray(input)
    nd = x.ndim
    a, b = one_dim(dim0, nd, "transpose"), one_dim(dim1, nd, "transpose")
    return np.swapaxes(x, a, b) if nd else x.view()


@composite(method=True)
def swapaxes(input: Tensor, axis0: int, axis1: int) -> Tensor:
    """numpy's name for `transpose` (PyTorch has both)."""
    return transpose(input, axis0, axis1)


@composite(method=True)
def swapdims(input: Tensor, dim0: int, dim1: int) -> Tensor:
    """Another name of `transpose` (PyTorch's)."""
    return transpose(input, dim0, dim1)


@composite(method=True)
def t(input: Tensor) -> Tensor:
    """A matrix transposed (a view); 0-d and 1-D tensors as they are."""
    nd = len(_shape(input))
    if nd > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {nd}D")
    return permute(input, tuple(range(nd))[::-1])


def mT(input: Tensor) -> Tensor:  # noqa: N802  (PyTorch's name: Tensor.mT)
    """The last two dimensions swapped (`Tensor.mT`, a view); a 0-d tensor as it is
    (PyTorch's deprecated identity), a 1-D one refused (PyTorch's error)."""
    nd = len(_shape(input))
    if nd == 1:
        raise RuntimeError("mT: tensor.mT is only supported on matrices or batches of "
                           "matrices. Got 1-D tensor.")
    return transpose(input, -1, -2) if nd else permute(input, ())


@composite(method=True, aliases=("moveaxis",))
def movedim(input: Tensor, source, destination) -> Tensor:
    """Dimensions `source` (an int or a sequence) moved to positions `destination`, the
    others keeping their order (a view)."""
    nd = len(_shape(input))
    src, dst = dims(source, nd, "movedim"), dims(destination, nd, "movedim")
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({len(src)} "
                           f"dims) should contain the same number of dims as destination "
                           f"({len(dst)} dims)")
    order = [d for d in range(nd) if d not in src]
    for to, d in sorted(zip(dst, src)):
        order.insert(to, d)
    return permute(input, tuple(order))


# ---- broadcast_to (expand), squeeze, unsqueeze ---------------------------------------------------
def _expanded(shape: tuple, size: tuple) -> tuple:
    """`size` with its -1s read from `shape`, checked as PyTorch's expand (RuntimeError)."""
    extra = len(size) - len(shape)
    if extra < 0:
        raise RuntimeError(f"expand: the number of sizes provided ({len(size)}) must be greater "
                           f"or equal to the number of dimensions in the tensor ({len(shape)})")
    out = []
    for i, s in enumerate(size):
        have = shape[i - extra] if i >= extra else None
        if s == -1:
            if have is None:
                raise RuntimeError(f"expand: The expanded size of the tensor (-1) isn't allowed "
                                   f"in a leading, non-existing dimension {i}")
            s = have
        if s < 0 or (have is not None and have != 1 and have != s):
            raise RuntimeError(f"expand: The expanded size of the tensor ({s}) must match the "
                               f"existing size ({have}) at non-singleton dimension {i}.  Target "
                               f"sizes: {list(size)}.  Tensor sizes: {list(shape)}")
        out.append(s)
    return tuple(out)


@defop(formula=lambda g, ans, input, size: g, method=True, sizes="size", aliases=("expand",),
       shapes_only=True)
def broadcast_to(input: Tensor, size) -> Tensor:
    """`input` broadcast to `size` (a read-only view; -1 keeps a dimension); the gradient
    is summed back. `expand` (`x.expand(3, -1)`) is the same op."""
    x = np.asarray(input)
    return np.broadcast_to(x, _expanded(x.shape, index_sizes((size,), "expand")))


expand = broadcast_to


@composite(method=True, export=False)
def expand_as(input: Tensor, other: Tensor) -> Tensor:
    """`input` expanded (broadcast, a view) to `other`'s shape."""
    return broadcast_to(input, _shape(other))


def _same_shape_kernel(g, ans, input, **_):
    return reshaped(g, np.shape(input))     # a view of g: the removed or added 1s


def _same_shape_formula(g, ans, input, **_):
    return reshape(g, _shape(input))


@defop(formula=_same_shape_formula, kernel=_same_shape_kernel, method=True, shapes_only=True)
def squeeze(input: Tensor, dim=None) -> Tensor:
    """Dimensions of size 1 removed (all, or those of `dim`, an int or a tuple: as in
    PyTorch, a named dimension whose size is not 1 is kept, not an error). A view."""
    x = np.asarray(input)
    named = range(x.ndim) if dim is None else dims(dim, x.ndim, "squeeze")
    return np.squeeze(x, axis=tuple(d for d in named if x.ndim and x.shape[d] == 1))


@defop(formula=_same_shape_formula, kernel=_same_shape_kernel, method=True, shapes_only=True)
def unsqueeze(input: Tensor, dim: int) -> Tensor:
    """A dimension of size 1 inserted at `dim` (in [-ndim - 1, ndim]). A view."""
    x = np.asarray(input)  # (an index with None: a view, without expand_dims' checks)
    return x[(slice(None),) * one_dim(dim, x.ndim + 1, "unsqueeze") + (None,)]


# ---- clone, cat, stack -------------------------------------------------------------------------
@defop(formula=lambda g, ans, input, memory_format: g, method=True, shapes_only=True)
def clone(input: Tensor, *, memory_format=None) -> Tensor:
    """A copy with its own memory (and version counter) that stays on the graph: the
    gradient flows through unchanged. What to write into instead of a tensor a graph saved."""
    x = np.asarray(input)
    out = empty(x.shape, x.dtype)
    np.copyto(out, x)                       # one pass
    return out


def _joined_dtype(arrays: list):
    d = arrays[0].dtype
    for a in arrays:  # (the common case, one dtype: no promotion to compute)
        if a.dtype is not d:
            return dtypes.result_np(*arrays)
    return d


def _cat_grads(g, ans, *tensors, dim):
    nd = len(_shape(ans))
    d = one_dim(dim, nd, "cat")
    out, start = [], 0
    for t in tensors:
        s = _shape(t)
        if s == (0,) and nd != 1:           # skipped by the forward (PyTorch's legacy rule)
            out.append(np.zeros((0,), raw(g).dtype))
            continue
        out.append(g[(slice(None),) * d + (slice(start, start + s[d]),)])
        start += s[d]
    return tuple(out)


@defop(inputs=("*tensors",), formula=Joint(_cat_grads), aliases=("concat", "concatenate"),
       shapes_only=True)
def cat(tensors, dim: int = 0) -> Tensor:
    """The tensors joined along an existing dimension `dim` (PyTorch's type promotion;
    tensors of shape (0,) are skipped, PyTorch's legacy rule). The gradients are slices."""
    if not tensors:
        raise ValueError("torch.cat(): expected a non-empty list of Tensors")
    arrays = [np.asarray(a) for a in tensors]
    for i, a in enumerate(arrays):
        if a.ndim == 0:
            raise RuntimeError(f"cat: zero-dimensional tensor (at position {i}) cannot be "
                               f"concatenated")
    kept = [a for a in arrays if a.shape != (0,)] or arrays[:1]
    nd = kept[0].ndim
    d = one_dim(dim, nd, "cat")
    for i, a in enumerate(arrays):
        if a.shape == (0,) and nd != 1:
            continue
        if a.ndim != nd:
            raise RuntimeError(f"cat: Tensors must have same number of dimensions: got {nd} "
                               f"and {a.ndim}")
        for k in range(nd):
            if k != d and a.shape[k] != kept[0].shape[k]:
                raise RuntimeError(f"cat: Sizes of tensors must match except in dimension {d}. "
                                   f"Expected size {kept[0].shape[k]} but got size {a.shape[k]} "
                                   f"for tensor number {i} in the list.")
    shape = list(kept[0].shape)
    shape[d] = sum(a.shape[d] for a in kept)
    out = empty(tuple(shape), _joined_dtype(arrays))
    return np.concatenate(kept, axis=d, out=out)  # one pass over the result


concat = concatenate = cat


@defop(inputs=("*tensors",), formula=Joint(lambda g, ans, *tensors, dim: tuple(
    g[(slice(None),) * one_dim(dim, len(_shape(ans)), "stack") + (i,)]
    for i in range(len(tensors)))), shapes_only=True)
def stack(tensors, dim: int = 0) -> Tensor:
    """The tensors (all of one shape) joined along a new dimension `dim`."""
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    arrays = [np.asarray(a) for a in tensors]
    shape = arrays[0].shape
    for i, a in enumerate(arrays):
        if a.shape != shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got "
                               f"{list(shape)} at entry 0 and {list(a.shape)} at entry {i}")
    d = one_dim(dim, len(shape) + 1, "stack")
    out = empty(shape[:d] + (len(arrays),) + shape[d:], _joined_dtype(arrays))
    new = (slice(None),) * d + (None,)  # (np.stack's own steps, past its checks: done above)
    return np.concatenate([a[new] for a in arrays], axis=d, out=out)  # one pass


# ---- views of slices: narrow, select, split, chunk, tensor_split, unbind -------------------------
def _one_dim_input(input, op: str) -> tuple:
    shape = _shape(input)
    if not shape:
        raise RuntimeError(f"{op}() cannot be applied to a 0-dim tensor.")
    return shape


def _slice(input, d: int, start: int, stop: int) -> Tensor:
    return getitem(input, (slice(None),) * d + (slice(start, stop),))


@composite(method=True)
def narrow(input: Tensor, dim: int, start, length: int) -> Tensor:
    """`length` elements of `dim` from `start` (negative: from the end; a 0-d tensor is
    taken too); a view."""
    shape = _one_dim_input(input, "narrow")
    d = one_dim(dim, len(shape), "narrow")
    n = shape[d]
    start = int(raw(start))
    if not -n <= start <= n:
        raise IndexError(f"narrow(): start ({start}) out of range for dimension {d} of size "
                         f"{n}")
    start += n if start < 0 else 0
    if length < 0 or start + length > n:
        raise RuntimeError(f"narrow(): start ({start}) + length ({length}) exceeds dimension "
                           f"size ({n}).")
    return _slice(input, d, start, start + length)


@composite(method=True)
def select(input: Tensor, dim: int, index: int) -> Tensor:
    """The slice at `index` along `dim`, that dimension removed (a view)."""
    shape = _shape(input)
    if not shape:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    d = one_dim(dim, len(shape), "select")
    i = index_sizes((index,), "select")[0]
    if not -shape[d] <= i < shape[d]:
        raise IndexError(f"select(): index {i} out of range for tensor of size {list(shape)} "
                         f"at dimension {d}")
    return getitem(input, (slice(None),) * d + (i,))


@composite(method=True)
def split(tensor: Tensor, split_size_or_sections, dim: int = 0) -> tuple:
    """Views of `tensor` along `dim`: pieces of `split_size_or_sections` elements (an int:
    the last may be smaller) or of the sizes it lists (which must add up)."""
    shape = _shape(tensor)
    if not shape:
        raise RuntimeError("split expects at least a 1-dimensional tensor")
    d = one_dim(dim, len(shape), "split")
    n = shape[d]
    if isinstance(split_size_or_sections, (int, np.integer)):
        size = int(split_size_or_sections)
        if size < 0 or (size == 0 and n):
            raise RuntimeError(f"split: split_size can only be 0 if dimension size is 0, but "
                               f"got dimension size of {n}" if size == 0 else
                               f"split: split_size must be non-negative, got {size}")
        pieces = [size] * (n // size) if size else []
        if not size or n % size or not n:     # the rest; an empty dimension: one piece
            pieces.append(n % size if size else 0)
    else:
        pieces = list(_ints(split_size_or_sections, "split"))
        if sum(pieces) != n or min(pieces, default=0) < 0:
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {n} "
                               f"(input tensor's size at dimension {d}), but got split_sizes="
                               f"{pieces}")
    bounds = np.cumsum([0] + pieces)
    return tuple(_slice(tensor, d, int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]))


@composite(method=True)
def chunk(input: Tensor, chunks: int, dim: int = 0) -> tuple:
    """At most `chunks` pieces of `dim` of ceil(n / chunks) elements each (the last may be
    smaller, and fewer pieces come back when n is not large enough), views."""
    if isinstance(chunks, bool) or not isinstance(chunks, (int, np.integer)):
        raise TypeError(f"chunk(): chunks must be an int, got {type(chunks).__name__}")
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    shape = _one_dim_input(input, "chunk")
    d = one_dim(dim, len(shape), "chunk")
    n = shape[d]
    if n == 0:                              # PyTorch gives `chunks` empty pieces
        return tuple(_slice(input, d, 0, 0) for _ in range(int(chunks)))
    return split(input, -(-n // int(chunks)), d)


def _split_points(ios, n: int) -> list:
    """tensor_split's boundaries: from a number of sections or a list of indices."""
    if isinstance(ios, Tensor):
        if ios._data.dtype.kind not in "iu" or ios._data.ndim > 1:
            raise RuntimeError(f"tensor_split expected tensor_indices_or_sections to have "
                               f"integer dtype and 0 or 1 dims, but got {ios._data.dtype}, "
                               f"{ios._data.ndim} dims")
        ios = int(ios._data) if ios._data.ndim == 0 else ios._data.tolist()
    if isinstance(ios, (list, tuple)):
        return list(_ints(ios, "tensor_split"))
    k = index_sizes((ios,), "tensor_split")[0]
    if k <= 0:
        raise RuntimeError(f"tensor_split: number of sections must be larger than 0, got {k}")
    q, r = divmod(n, k)
    return [int(v) for v in np.cumsum([q + 1] * r + [q] * (k - r))[:-1]]


@composite(method=True)
def tensor_split(input: Tensor, indices_or_sections, dim: int = 0) -> tuple:
    """Views of `input` split along `dim`: into `indices_or_sections` nearly equal pieces
    (the first `n % k` one larger) or at the given indices (slice rules: negative ones
    count from the end, pieces may be empty)."""
    shape = _shape(input)
    if not shape:
        raise RuntimeError("tensor_split expected at least a 1-dimensional tensor, but got a "
                           "tensor with 0 dims")
    d = one_dim(dim, len(shape), "tensor_split")
    points = _split_points(indices_or_sections, shape[d])
    return tuple(getitem(input, (slice(None),) * d + (slice(a, b),))
                 for a, b in zip([0] + points, points + [None]))


@composite(method=True)
def unbind(input: Tensor, dim: int = 0) -> tuple:
    """The slices of `dim`, as a tuple of views without that dimension."""
    shape = _shape(input)
    if not shape:
        raise IndexError("unbind: Dimension specified as 0 but tensor has no dimensions")
    d = one_dim(dim, len(shape), "unbind")
    return tuple(getitem(input, (slice(None),) * d + (i,)) for i in range(shape[d]))


# ---- unfold: sliding windows (a view) and its adjoint --------------------------------------------
def _windows(shape: tuple, dimension, size: int, step: int) -> tuple:
    """(the dim, the number of windows), PyTorch's checks for `Tensor.unfold`."""
    d = one_dim(dimension, len(shape), "unfold")
    n = shape[d] if shape else 1
    if step <= 0:
        raise RuntimeError(f"unfold: step is {step} but must be > 0")
    if size < 0 or size > n:
        raise RuntimeError(f"unfold: maximum size for tensor at dimension {d} is {n} but size "
                           f"is {size}")
    return d, (n - size) // step + 1


@defop(formula=lambda g, ans, input, dimension, size, step: unfold_backward(
    g, _shape(input), dimension, size, step), method=True, export=False, shapes_only=True)
def unfold(input: Tensor, dimension: int, size: int, step: int) -> Tensor:
    """PyTorch's `Tensor.unfold`: every window of `size` elements of `dimension`, `step`
    apart, as a view with the windows along `dimension` and each window's elements in a new
    last dimension. (The im2col of `nn.functional.unfold` is another op.)"""
    x = np.asarray(input)
    d, count = _windows(x.shape, dimension, size, step)
    if x.ndim == 0:
        return x.reshape(1)[:size]
    st = x.strides
    return np.lib.stride_tricks.as_strided(
        x, x.shape[:d] + (count,) + x.shape[d + 1:] + (size,),
        st[:d] + (st[d] * step,) + st[d + 1:] + (st[d],), writeable=x.flags.writeable)


@defop(formula=lambda g, ans, input, shape, dimension, size, step: unfold(
    g, dimension, size, step), export=False, shapes_only=True)
def unfold_backward(input: Tensor, shape: tuple, dimension: int, size: int,
                    step: int) -> Tensor:
    """Zeros of `shape` with each window of `input` (as `unfold` gives them) added back in
    place (overlaps add): unfold's adjoint, as PyTorch's `unfold_backward`."""
    g = np.asarray(input)
    shape = tuple(shape)
    d, count = _windows(shape, dimension, size, step)
    out = np.zeros(shape or (1,), g.dtype)
    if not shape:
        out[:size] += g
        return out.reshape(())
    lead = (slice(None),) * d
    if size <= count:                       # a pass per element of a window
        for k in range(size):
            out[lead + (slice(k, k + step * (count - 1) + 1, step),)] += g[..., k]
    else:                                   # a pass per window
        for w in range(count):
            out[lead + (slice(w * step, w * step + size),)] += np.moveaxis(
                np.take(g, w, axis=d), -1, d)
    return out


# ---- repeat, tile, flip, roll, tril, triu --------------------------------------------------------
def _interleaved(reps: tuple, shape: tuple) -> tuple:
    return tuple(v for s, n in zip(reps, shape) for v in (s, n))


def _repeat_formula(g, ans, input, repeats):
    shape = _shape(input)
    reps = index_sizes((repeats,), "repeat")
    full = (1,) * (len(reps) - len(shape)) + shape
    copies = reshape(g, _interleaved(reps, full))   # the copies summed back (recorded)
    return reshape(sum_to(copies, _interleaved((1,) * len(reps), full)), shape)


@defop(formula=_repeat_formula, method=True, sizes="repeats", export=False, shapes_only=True)
def repeat(input: Tensor, repeats) -> Tensor:
    """PyTorch's `Tensor.repeat`: the tensor tiled `repeats[i]` times along dimension i
    (`x.repeat(2, 3)` or `x.repeat((2, 3))`; more repeats than dimensions add leading
    ones). Not numpy's `repeat` (that is `repeat_interleave`)."""
    x = np.asarray(input)
    reps = index_sizes((repeats,), "repeat")
    if len(reps) < x.ndim:
        raise RuntimeError("repeat: Number of dimensions of repeat dims can not be smaller "
                           "than number of dimensions of tensor")
    if min(reps, default=0) < 0:
        raise RuntimeError(f"repeat: Trying to create tensor with negative dimension "
                           f"{min(reps)}: {list(reps)}")
    shape = (1,) * (len(reps) - x.ndim) + x.shape
    out = empty(tuple(s * n for s, n in zip(reps, shape)), x.dtype)
    # out seen as (s0, n0, s1, n1, ...) takes x broadcast over the s axes: 1 pass
    np.copyto(out.reshape(_interleaved(reps, shape)),
              x.reshape(_interleaved((1,) * len(reps), shape)))
    return out


@composite(method=True)
def tile(input: Tensor, dims, *more) -> Tensor:
    """`repeat`, with `dims` padded with leading 1s when shorter than the tensor's
    dimensions (`tile(x, (2,))` repeats the last dimension twice; `x.tile(2, 1)`)."""
    reps = _ints((dims, *more) if more else dims, "tile")
    return repeat(input, (1,) * (len(_shape(input)) - len(reps)) + reps)


def _flip_dims(ds, ndim: int) -> tuple:
    """flip's dims, checked as PyTorch's (a 0-d tensor has the one dim 0 or -1, which
    flips nothing)."""
    checked = dims(index_sizes((ds,), "flip"), max(ndim, 1), "flip")
    return checked if ndim else ()


@defop(formula=lambda g, ans, input, dims: flip(g, dims),
       kernel=lambda g, ans, input, dims: np.flip(g, _flip_dims(dims, np.ndim(g))),  # a view
       method=True, sizes="dims", shapes_only=True)
def flip(input: Tensor, dims) -> Tensor:
    """The elements in reverse order along `dims` (`flip(x, (0, 1))`, `x.flip(0, 1)`); a
    copy, as in PyTorch (the kernel of its gradient is a view of g)."""
    x = np.asarray(input)
    out = empty(x.shape, x.dtype)
    np.copyto(out, np.flip(x, _flip_dims(dims, x.ndim)))  # 1 pass
    return out


def _negated(shifts):
    return tuple(-s for s in shifts) if isinstance(shifts, tuple) else -shifts


def _roll_args(shape: tuple, shifts, ds) -> tuple:
    """(shifts, dims) as numpy's roll takes them: an int and None (the flattened tensor),
    or a tuple of each (a dimension may come twice: its shifts add)."""
    s = _ints(shifts, "roll")
    if ds is None:
        if len(s) != 1:
            raise RuntimeError(f"roll: shifts and dimensions must align. shifts: {len(s)}, "
                               f"dims: 0")
        return s[0], None
    ds = tuple(one_dim(d, len(shape), "roll") for d in _ints(ds, "roll"))
    if len(s) != len(ds):
        raise RuntimeError(f"roll: shifts and dimensions must align. shifts: {len(s)}, dims: "
                           f"{len(ds)}")
    return (s, ds) if shape else (0, None)


def _roll_formula(g, ans, input, shifts, dims):
    s, ds = _roll_args(_shape(input), shifts, dims)
    return roll(g, _negated(s), ds)


@defop(formula=_roll_formula, method=True, shapes_only=True)
def roll(input: Tensor, shifts, dims=None) -> Tensor:
    """The elements shifted by `shifts` along `dims` (wrapping around; a dimension named
    twice is shifted by the sum); with `dims=None` the flattened tensor is rolled and the
    shape restored. A copy."""
    x = np.asarray(input)
    s, ds = _roll_args(x.shape, shifts, dims)
    out = empty(x.shape, x.dtype)
    if ds is None:                          # the flattened tensor (out is C-contiguous)
        _rolled(out.reshape(-1), np.ravel(x), {0: s})
    else:
        total: dict = {}
        for k, d in zip(s, ds):
            total[d] = total.get(d, 0) + k
        _rolled(out, x, total)
    return out


def _rolled(out: np.ndarray, x: np.ndarray, shifts: dict) -> None:
    """`np.roll(x, shifts)` written into `out` (one pass, no temporary): a block copy per
    combination of the two pieces of each shifted dimension."""
    pieces = [[(slice(None), slice(None))]] * x.ndim
    for d, k in shifts.items():
        n = x.shape[d]
        k = k % n if n else 0
        if k:
            pieces[d] = [(slice(k, None), slice(None, n - k)),
                         (slice(None, k), slice(n - k, None))]
    for combo in itertools.product(*pieces):
        out[tuple(c[0] for c in combo)] = x[tuple(c[1] for c in combo)]


def _triangle(x: np.ndarray, op: str) -> np.ndarray:
    if x.ndim < 2:
        raise RuntimeError(f"{op}: input tensor must have at least 2 dimensions")
    return x


@defop(formula=lambda g, ans, input, diagonal: tril(g, diagonal), method=True,
       shapes_only=True)
def tril(input: Tensor, diagonal: int = 0) -> Tensor:
    """The lower triangle of the last two dimensions (elements with j - i <= `diagonal`);
    the rest zeros."""
    return np.tril(_triangle(np.asarray(input), "tril"), int(diagonal))


@defop(formula=lambda g, ans, input, diagonal: triu(g, diagonal), method=True,
       shapes_only=True)
def triu(input: Tensor, diagonal: int = 0) -> Tensor:
    """The upper triangle of the last two dimensions (elements with j - i >= `diagonal`);
    the rest zeros."""
    return np.triu(_triangle(np.asarray(input), "triu"), int(diagonal))


# ---- repeat_interleave, sum_to_size, pad ---------------------------------------------------------
def _repeat_counts(repeats, n: int) -> np.ndarray:
    if isinstance(repeats, (int, np.integer)) and not isinstance(repeats, bool):
        r = np.full(n, int(repeats))
    else:
        r = index_indices(repeats, "repeat_interleave", "repeats")
        if r.ndim > 1 or (r.size != n and r.size != 1):
            raise RuntimeError(f"repeat_interleave: repeats must have the same size as input "
                               f"along dim ({n}), or one element; got shape {r.shape}")
        r = np.broadcast_to(r.reshape(-1), (n,))
    if r.size and r.min() < 0:
        raise RuntimeError("repeat_interleave: Repeats must be non-negative")
    return r


@composite(method=True)
def repeat_interleave(input: Tensor, repeats, dim: int | None = None, *,
                      output_size: int | None = None) -> Tensor:
    """Each element (slice along `dim`; None: of the flattened input) repeated `repeats`
    times in place (numpy's `repeat`): an int, or one count per element. The gradient sums
    the copies (an index_select's)."""
    shape = _shape(input)
    if dim is None or not shape:
        if dim is not None:
            one_dim(dim, 0, "repeat_interleave")
        input, d, n = reshape(input, (-1,)), 0, math.prod(shape)
    else:
        d = one_dim(dim, len(shape), "repeat_interleave")
        n = shape[d]
    index = np.repeat(np.arange(n), _repeat_counts(repeats, n))
    if output_size is not None and output_size != index.size:
        raise RuntimeError(f"repeat_interleave: output_size {output_size} does not match the "
                           f"sum of repeats {index.size}")
    return index_select(input, d, index)


@composite(method=True, export=False)
def sum_to_size(input: Tensor, *size) -> Tensor:
    """`input` summed down to `size`, which must expand to input's shape (the gradient of
    a broadcast); the tensor itself if it already has that shape."""
    size = _ints(size[0] if len(size) == 1 else size, "sum_to_size")
    shape = _shape(input)
    lead = len(shape) - len(size)
    if lead < 0 or any(s not in (n, 1) for s, n in zip(size, shape[lead:])):
        raise RuntimeError(f"sum_to_size: size {list(size)} is not expandable to size "
                           f"{list(shape)}")
    if tuple(size) == shape:
        return input if isinstance(input, Tensor) else Tensor._wrap(np.asarray(input))
    return sum_to(input, tuple(size))


def _pad_widths(pad_width, ndim: int) -> tuple:
    pw = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (ndim, 2))
    if (pw < 0).any():
        raise RuntimeError(f"pad: negative widths {pw.tolist()} (crop with indexing)")
    return tuple((int(a), int(b)) for a, b in pw)


@defop(formula=lambda g, ans, input, pad_width, value: g[tuple(
    slice(lo, lo + n) for (lo, _), n in zip(_pad_widths(pad_width, len(_shape(input))),
                                            _shape(input)))],
    export=False, shapes_only=True)
def pad(input: Tensor, pad_width, value: float = 0.0) -> Tensor:
    """Constant padding with numpy's `pad_width` (an int, a (before, after) pair, or one pair
    per dimension; `pa.pad`). PyTorch's `nn.functional.pad` takes PyTorch's flat tuple."""
    x = np.asarray(input)
    pw = _pad_widths(pad_width, x.ndim)
    # the constant everywhere, then x into the middle: 2 passes over the output
    out = empty(tuple(lo + n + hi for (lo, hi), n in zip(pw, x.shape)), x.dtype)
    out.fill(value)
    out[tuple(slice(lo, lo + n) for (lo, _), n in zip(pw, x.shape))] = x
    return out
