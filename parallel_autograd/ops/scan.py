"""Products, scans and the sorting selections, one declaration per op: prod cumsum cumprod
logcumsumexp (declared, `primitive.defop`), cummax cummin sort topk kthvalue median
(composites returning PyTorch's `(values, indices)`: the indices computed in numpy, the
values a gather whose rule scatters the gradient back, `reduce.gather_along`). prod is
here beside cumprod: its gradient, exact with zeros, is built from cumprods.

Signatures, defaults and errors are PyTorch's (`dim`, `keepdim`, `dtype=`, `descending`,
`stable`, `largest`, `sorted`; numpy's `axis=`/`keepdims=` accepted as aliases; a
dimension out of range is an IndexError). Gradients follow PyTorch's formulas, including
its choices where the derivative is not unique:

- prod: zeros handled exactly (with one zero in a slice its gradient is the product of
  the others, with more all is 0): exclusive products from two cumprods, no division.
- cumprod: the same, by the first and second zeros of each slice (PyTorch's
  `cumprod_backward`, with its NaNs where an inf meets a zero).
- median over all elements: the gradient split evenly among ties, to the NaNs where the
  result is NaN (PyTorch's median()).
- sort, topk, kthvalue and median along a dim: the gradient goes to the selected index.
- cummax / cummin: the index is the last position holding the running extremum (PyTorch
  compares with >= and <=, so ties move it on); once a NaN is seen the values are NaN and
  the index is the last NaN's; the gradient is PyTorch's scatter_add at the indices.
- logcumsumexp: a running `logaddexp` (no exp overflows); its rule is PyTorch's, g split
  by sign so every log is of a positive number (the dtype's lowest value for log 0).

A 0-d input has the one dimension 0 (or -1); an empty input reduced along a dimension that
is not empty gives an empty result, and reducing an empty dimension is refused, as PyTorch.

Thread safety: pure functions of their arguments, like the other ops.
"""
from __future__ import annotations

import numpy as np

from ..primitive import composite, defop
from ..tensor import Tensor
from . import pointwise as E
from . import index as ix
from . import pointwise as PW
from . import reduce as R
from . import shape as S
from ._common import (
    P,
    accumulate_dtype,
    array,
    as_dtype,
    buf,
    empty,
    kept_shape,
    raw,
    reduction_dims,
)
from ._common import dim as one_dim
from .forms import cast, depends_on

__all__ = ["prod", "cumsum", "cumprod", "logcumsumexp", "cummax", "cummin", "sort", "topk",
           "kthvalue", "median", "median_all", "stable_argsort"]


def _converted(x, dtype, op: str):
    """x converted to `dtype` first (PyTorch's `dtype=` of prod, cumsum, cumprod): an op on
    Tensors (the gradient converts back), numpy's on arrays."""
    if dtype is None:
        return x
    dt = as_dtype(dtype, op)
    return cast(x, dt) if isinstance(x, Tensor) else np.asarray(x, dt)


def _flip(t, dim: int) -> Tensor:
    """t reversed along `dim`, with ops (a basic-indexing view)."""
    return S.getitem(t, (slice(None),) * dim + (slice(None, None, -1),))


def _no_zeros(x: np.ndarray) -> bool:
    return np.count_nonzero(x) == x.size  # 1 pass, no temporary (NaN is not zero)


def _int(op: str, value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{op}(): argument '{what}' must be int, not {type(value).__name__}")
    return int(value)


# ---- prod ----------------------------------------------------------------------------------
def _moved(x, dims):
    """(perm, shape, inverse): the transpose that moves `dims` (None: all) last, the
    shape it gives, and the transpose that undoes it."""
    dims = tuple(range(x.ndim)) if dims is None else dims
    rest = tuple(a for a in range(x.ndim) if a not in dims)
    perm = rest + tuple(dims)
    shape = tuple(x.shape[a] for a in perm)
    inverse = tuple(int(i) for i in np.argsort(perm))
    return perm, shape, inverse


def _others_product(x: np.ndarray, dims) -> np.ndarray:
    """For each element, the product of the others in its slice over `dims`: left and
    right exclusive cumprods, multiplied (exact with zeros; no division). The rare path
    of prod's rule: two temporaries the size of x."""
    perm, shape, inverse = _moved(x, dims)
    lead = shape[:len(perm) - (x.ndim if dims is None else len(dims))]
    rows = np.transpose(x, perm).reshape(lead + (-1,))
    k = rows.shape[-1]
    left = np.empty_like(rows)
    right = np.empty_like(rows)
    left[..., :1] = 1
    right[..., k - 1:] = 1
    if k > 1:
        np.cumprod(rows[..., :-1], axis=-1, out=left[..., 1:])
        np.cumprod(rows[..., :0:-1], axis=-1, out=right[..., -2::-1])
    left *= right
    return np.transpose(left.reshape(shape), inverse)


def _prod_kernel(g, ans, input, dim, keepdim, dtype):
    x = _converted(input, dtype, "prod")
    dims = reduction_dims(dim, x.ndim, "prod")
    shape = kept_shape(x.shape, dims)
    gr = np.reshape(g, shape)
    if _no_zeros(x):
        # g ans / x, PyTorch's formula: 2 passes (and the zero test's), one buffer
        t = buf(P.divide(np.reshape(ans, shape), x))
        t *= gr
        return t
    t = _others_product(x, dims)
    t *= gr
    return t


def _others_product_t(x, dims, ndim: int) -> Tensor:
    """`_others_product` with ops (differentiable: the exclusive products are cumprods of
    x shifted by one, padded with ones)."""
    xd = array(x)
    perm, shape, inverse = _moved(xd, dims)
    lead = shape[:ndim - (ndim if dims is None else len(dims))]
    rows = S.reshape(S.permute(x, perm), lead + (-1,))
    k = int(np.prod(shape[len(lead):]))
    if k == 1:
        return S.permute(S.reshape(E.where(np.True_, 1.0, rows), shape), inverse)
    ones = np.ones(lead + (1,), xd.dtype)
    left = cumprod(S.concat([ones, rows[..., :-1]], axis=len(lead)), len(lead))
    right = _flip(cumprod(_flip(S.concat([rows[..., 1:], ones], axis=len(lead)), len(lead)),
                          len(lead)), len(lead))
    return S.permute(S.reshape(left * right, shape), inverse)


def _prod_formula(g, ans, input, dim, keepdim, dtype):
    x = _converted(input, dtype, "prod")
    xd = array(x)
    dims = reduction_dims(dim, xd.ndim, "prod")
    gr = R.kept(g, xd.shape, dims)
    if _no_zeros(xd):
        return gr * (R.kept(ans, xd.shape, dims) / x)
    return gr * _others_product_t(x, dims, xd.ndim)


@defop(formula=_prod_formula, kernel=_prod_kernel, method=True, quiet=True)
def prod(input: Tensor, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """The product over `dim` (None: all; an int, or a tuple beyond PyTorch's); integers
    and booleans multiply in int64, `dtype` converts the input first. The gradient is exact
    with zeros: the product of the other elements of the slice (0 with two zeros or more)."""
    x = np.asarray(input)
    dims = reduction_dims(dim, x.ndim, "prod")
    return np.prod(x, axis=dims, keepdims=bool(keepdim),
                   dtype=accumulate_dtype(x, dtype, "prod"))


# ---- cumsum, cumprod --------------------------------------------------------------------------
def _reverse_cumsum(a: np.ndarray, dim: int, out: np.ndarray) -> np.ndarray:
    """Sums from the end along `dim` into `out` (which may be `a`): 1 pass."""
    np.cumsum(np.flip(a, dim), axis=dim, out=np.flip(out, dim))
    return out


def _reverse_cumsum_t(g, dim: int) -> Tensor:
    return _flip(cumsum(_flip(g, dim), dim), dim)


def _cumsum_kernel(g, ans, input, dim, dtype):
    if np.ndim(g) == 0:
        return g
    d = one_dim(dim, g.ndim, "cumsum")
    return _reverse_cumsum(g, d, empty(g.shape, g.dtype))  # 1 pass


def _cumsum_formula(g, ans, input, dim, dtype):
    if np.ndim(raw(g)) == 0:
        return g
    return _reverse_cumsum_t(g, one_dim(dim, np.ndim(raw(g)), "cumsum"))


@defop(formula=_cumsum_formula, kernel=_cumsum_kernel, method=True)
def cumsum(input: Tensor, dim: int, *, dtype=None) -> Tensor:
    """Running sums along `dim`; integers and booleans sum in int64, `dtype` converts the
    input first. The gradient is the sums of g from the end."""
    x = np.asarray(input)
    d = one_dim(dim, x.ndim, "cumsum")
    out = empty(x.shape, accumulate_dtype(x, dtype, "cumsum") or x.dtype)
    if x.ndim == 0:
        out[()] = x
        return out
    return np.cumsum(x, axis=d, dtype=out.dtype, out=out)


def _cumprod_kernel(g, ans, input, dim, dtype):
    x = _converted(input, dtype, "cumprod")
    if x.ndim == 0 or x.shape[one_dim(dim, x.ndim, "cumprod")] == 1:
        return g                     # PyTorch: g itself (g ans / x is NaN at x = 0 or inf)
    d = one_dim(dim, x.ndim, "cumprod")
    if _no_zeros(x):
        # sums from the end of g ans, over x (PyTorch's formula): 3 passes, one buffer
        t = buf(P.multiply(g, ans))
        _reverse_cumsum(t, d, t)
        t /= x                       # inf / inf: NaN, as PyTorch's
        return t
    return _cumprod_zeros_kernel(g, ans, x, d)


def _cumprod_zeros_kernel(g, ans, x, d):
    """With zeros, PyTorch's cumprod_backward (its O(n) path, without create_graph), by the
    first zero z1 and the second z2 of each slice (the length where there is none):
      j < z1: the same formula on [0, z1) only (the ans from z1 on are 0, or NaN after an
              inf, and take no part);
      j = z1: ans[z1 - 1] (1 if z1 = 0) * sum over z1 <= i < z2 of g_i prod(x[z1+1 .. i]);
      j > z1: 0 (every product through j contains x_z1 = 0).
    As PyTorch, the sum at z1 multiplies the products by g zeroed outside [z1, z2) (an inf
    product times that 0 is NaN) where [0, z1) selects. The rare path: a few temporaries
    the size of x."""
    dtype = np.result_type(g, ans)
    zeros = np.cumsum(x == 0, axis=d)                # the zeros up to each position
    before, first = zeros == 0, zeros == 1           # [0, z1) and [z1, z2)
    at = first & (x == 0)                            # z1
    t = _reverse_cumsum(np.where(before, P.multiply(g, ans), 0), d, empty(x.shape, dtype))
    out = np.where(before, t / np.where(before, x, 1), 0).astype(dtype, copy=False)
    inner = np.cumprod(np.where(first & ~at, x, 1), axis=d)
    s = (inner * np.where(first, g, 0)).sum(axis=d, keepdims=True)
    z1 = np.argmax(at, axis=d, keepdims=True)
    lead = np.where(z1 == 0, 1, np.take_along_axis(ans, np.maximum(z1 - 1, 0), d))
    out += np.where(at, s * lead, 0)
    return out


def _cumprod_formula(g, ans, input, dim, dtype):
    x = _converted(input, dtype, "cumprod")
    xd = array(x)
    if xd.ndim == 0 or xd.shape[one_dim(dim, xd.ndim, "cumprod")] == 1:
        return g                     # as the kernel
    d = one_dim(dim, xd.ndim, "cumprod")
    if _no_zeros(xd):
        return _reverse_cumsum_t(g * ans, d) / x
    return _cumprod_zeros_formula(g, x, d)


def _cumprod_zeros_formula(g, x, d: int):
    """With zeros, a form whose derivatives are exact too (the masks of the kernel would
    drop them: x_z = 0 zeroes terms whose derivative is not 0, as in PyTorch, whose double
    backward is quadratic as well): dx_j = prod(x[:j]) * sum over i >= j of g_i
    prod(x[j+1 .. i]), the inner products the cumprods of a K x K table (K = the length
    along `d`): memory K times the input's. This is also PyTorch's formula under
    create_graph (where an inf meets a zero, its NaNs are not those of its O(n) path,
    which the kernel follows)."""
    xd = array(x)
    n = xd.shape[d]
    xs, gs = S.swapaxes(x, d, -1), S.swapaxes(g, d, -1)
    i = np.arange(n)
    table = E.where(i[None, :] > i[:, None], S.unsqueeze(xs, -2), 1.0)
    ones = np.ones(xs.shape[:-1] + (1,), xd.dtype)
    before = cumprod(S.concat([ones, xs[..., :-1]], axis=-1), -1)
    # PyTorch's order: the omitted products prod(x[:j]) prod(x[j+1 .. i]), times g_i
    omitted = S.unsqueeze(before, -1) * cumprod(table, -1)
    terms = E.where(i[None, :] >= i[:, None], omitted * S.unsqueeze(gs, -2), 0.0)
    return S.swapaxes(R.sum(terms, -1), d, -1)


@defop(formula=_cumprod_formula, kernel=_cumprod_kernel, method=True, quiet=True)
def cumprod(input: Tensor, dim: int, *, dtype=None) -> Tensor:
    """Running products along `dim`; integers and booleans multiply in int64, `dtype`
    converts the input first. The gradient is exact with zeros (PyTorch's)."""
    x = np.asarray(input)
    d = one_dim(dim, x.ndim, "cumprod")
    out = empty(x.shape, accumulate_dtype(x, dtype, "cumprod") or x.dtype)
    if x.ndim == 0:
        out[()] = x
        return out
    return np.cumprod(x, axis=d, dtype=out.dtype, out=out)  # inf * 0 is NaN (PyTorch)


# ---- logcumsumexp -----------------------------------------------------------------------------
def _lcse(x: np.ndarray, dim: int) -> np.ndarray:
    return np.logaddexp.accumulate(x, axis=dim)


def _reverse_lcse(a: np.ndarray, dim: int) -> np.ndarray:
    return np.flip(_lcse(np.flip(a, dim), dim), dim)


def _lcse_kernel(g, ans, input, dim):
    if g.ndim == 0 or g.size == 0:
        return g
    d = one_dim(dim, g.ndim, "logcumsumexp")
    low = np.finfo(np.result_type(g, ans)).min   # stands for log(0), as PyTorch
    log_g = np.log(np.abs(g))
    pos = np.exp(_reverse_lcse(np.where(g > 0, log_g, low) - ans, d) + input)
    neg = np.exp(_reverse_lcse(np.where(g < 0, log_g, low) - ans, d) + input)
    return np.subtract(pos, neg, out=pos)


def _lcse_formula(g, ans, input, dim):
    gd = array(g)
    if gd.ndim == 0 or gd.size == 0:
        return g
    d = one_dim(dim, gd.ndim, "logcumsumexp")
    low = float(np.finfo(np.result_type(gd, array(ans))).min)
    positive, negative = gd > 0, gd < 0
    log_g = PW.log(PW.abs(E.where(positive | negative, g, 1.0)))  # finite where it is used

    def part(mask):
        t = E.where(mask, log_g, low) - ans
        return PW.exp(_flip(logcumsumexp(_flip(t, d), d), d) + input)

    return part(positive) - part(negative)


@defop(formula=_lcse_formula, kernel=_lcse_kernel, method=True, quiet=True)
def logcumsumexp(input: Tensor, dim: int) -> Tensor:
    """log(cumsum(exp(x))) along `dim`, without overflow (a running logaddexp)."""
    x = np.asarray(input)
    d = one_dim(dim, x.ndim, "logcumsumexp")
    if x.dtype.kind != "f":
        raise NotImplementedError(f"logcumsumexp: not implemented for {x.dtype} (a floating "
                                  f"point tensor)")
    return np.array(x) if x.ndim == 0 else _lcse(x, d)


# ---- cummax, cummin ---------------------------------------------------------------------------
def _running_index(x: np.ndarray, run: np.ndarray, dim: int) -> np.ndarray:
    """The last position up to each one where x equals the running extremum `run` (where
    PyTorch's scan updates its index), NaN matching NaN."""
    hit = x == run
    if x.dtype.kind in "fc":
        hit |= np.isnan(x) & np.isnan(run)
    pos = np.arange(x.shape[dim]).reshape((-1,) + (1,) * (x.ndim - dim - 1))
    return np.maximum.accumulate(np.where(hit, pos, 0), axis=dim).astype(np.int64)


def _running(name: str, ufunc, input, dim):
    x = array(input)
    d = one_dim(dim, x.ndim, name)
    kind = getattr(R.return_types, name)
    if x.ndim == 0:
        index = np.zeros((), np.int64)
        return kind(R.gather_along(input, index, 0), Tensor._wrap(index))
    if x.dtype.kind == "c":
        raise TypeError(f"{name}: complex tensors have no order")
    with np.errstate(invalid="ignore"):
        index = _running_index(x, ufunc.accumulate(x, axis=d), d)
    return kind(ix.gather(input, d, index), Tensor._wrap(index))


@composite(method=True)
def cummax(input, dim: int) -> tuple[Tensor, Tensor]:
    """(values, indices) of the running maximum along `dim` (see the module docstring for
    ties and NaN); the gradient goes to the index of each value."""
    return _running("cummax", np.maximum, input, dim)


@composite(method=True)
def cummin(input, dim: int) -> tuple[Tensor, Tensor]:
    """(values, indices) of the running minimum along `dim`, as `cummax`."""
    return _running("cummin", np.minimum, input, dim)


# ---- sort, topk, kthvalue, median -------------------------------------------------------------
def stable_argsort(x: np.ndarray, dim: int, descending: bool) -> np.ndarray:
    """The indices that sort `x` along `dim`, stably (ties keep their order, descending
    too); NaN counts as the largest (first when descending, last otherwise), as PyTorch."""
    if not descending:
        return np.argsort(x, axis=dim, kind="stable")
    # a stable ascending sort of the reversed slice, reversed: ties in original order
    i = np.flip(np.argsort(np.flip(x, dim), axis=dim, kind="stable"), dim)
    return (x.shape[dim] - 1) - i


def _selection(name: str, input, dim, select, squeeze: bool, check=None):
    """`select(x, d) -> (index, full)` run on the data (after `check(x, d)`), the values
    gathered with a node (`reduce.gather_along`), returned as PyTorch's (values, indices).
    A 0-d input is one element along dimension 0 (PyTorch allows 0 and -1)."""
    x = array(input)
    d = one_dim(dim, x.ndim, name)
    if check is not None:
        check(x, d)
    kind = getattr(R.return_types, name)
    if x.ndim == 0:
        index = np.zeros((), np.int64)
        return kind(R.gather_along(input, index, 0), Tensor._wrap(index))
    index, full = select(x, d)
    index = index.astype(np.int64, copy=False)
    values = R.gather_along(input, index, d, squeeze=squeeze, full=full)
    return kind(values, Tensor._wrap(np.squeeze(index, d) if squeeze else index))


@composite(method=True)
def sort(input, dim: int = -1, descending: bool = False, *,
         stable: bool = False) -> tuple[Tensor, Tensor]:
    """(values, indices) sorted along `dim`; NaN counts as the largest. The sort is
    always stable (ties keep their order; `stable` is PyTorch's argument). The gradient
    goes back to each value's position."""
    return _selection("sort", input, dim,
                      lambda x, d: (stable_argsort(x, d, bool(descending)), True), False)


def _size(x: np.ndarray, d: int) -> int:
    return x.shape[d] if x.ndim else 1


@composite(dtypes="real", method=True)
def topk(input, k: int, dim: int = -1, largest: bool = True,
         sorted: bool = True) -> tuple[Tensor, Tensor]:  # noqa: A002  (PyTorch's name)
    """(values, indices) of the k largest (`largest=False`: smallest) along `dim`, in
    order (also when `sorted=False`, where PyTorch leaves the order unspecified)."""
    k = _int("topk", k, "k")

    def check(x, d):
        if not 0 <= k <= _size(x, d):
            raise RuntimeError(f"topk(): selected index k out of range (k={k}, dimension "
                               f"{d} has size {_size(x, d)})")

    def select(x, d):
        order = stable_argsort(x, d, bool(largest))
        return np.take(order, np.arange(k), axis=d), k == x.shape[d]

    return _selection("topk", input, dim, select, False, check)


@composite(dtypes="real", method=True)
def kthvalue(input, k: int, dim: int = -1, keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """(values, indices) of the k-th smallest element (k from 1) along `dim`; NaN counts
    as the largest. The gradient goes to the selected element."""
    k = _int("kthvalue", k, "k")

    def check(x, d):
        R.nonempty_dim("kthvalue", x, d)
        if not 1 <= k <= _size(x, d):
            raise RuntimeError(f"kthvalue(): selected number k ({k}) out of range for "
                               f"dimension {d} (of size {_size(x, d)}; k counts from 1)")

    def select(x, d):
        part = np.argpartition(x, k - 1, axis=d)
        return np.take(part, [k - 1], axis=d), x.shape[d] == 1

    return _selection("kthvalue", input, dim, select, not keepdim, check)


def _median_index(x: np.ndarray, d: int):
    n = x.shape[d]
    index = np.take(np.argpartition(x, (n - 1) // 2, axis=d), [(n - 1) // 2], axis=d)
    if x.dtype.kind == "f":          # a slice with a NaN: its first NaN (PyTorch)
        nan = np.isnan(x)
        if nan.any():
            index = np.where(nan.any(axis=d, keepdims=True), nan.argmax(axis=d, keepdims=True),
                             index)
    return index, n == 1


def _median_all_kernel(g, ans, input):
    return R.share_ties(g, ans, input, None, True)


def _median_all_formula(g, ans, input):
    x, a = array(input), array(ans)
    factor = R.share_ties(np.ones(a.shape, a.dtype), a, x, None, True)
    return g * depends_on(factor, input)


@defop(formula=_median_all_formula, kernel=_median_all_kernel, export=False)
def median_all(input: Tensor) -> Tensor:
    """The lower median of all elements (`median(x)`), NaN if one is NaN or none is
    there; ties share the gradient evenly, NaNs when the result is NaN (PyTorch's)."""
    x = np.asarray(input)
    flat = x.reshape(-1)
    if x.dtype.kind == "f" and (flat.size == 0 or np.isnan(flat).any()):
        return np.asarray(np.nan, x.dtype)
    if flat.size == 0:
        raise RuntimeError(f"median(): an empty {x.dtype} tensor has no median")
    return np.asarray(np.partition(flat, (flat.size - 1) // 2)[(flat.size - 1) // 2])


@composite(dtypes="real", method=True)
def median(input, dim=None, keepdim: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """The lower median (of an even count, the smaller of the two middle values); a NaN
    in a slice makes it NaN. `dim=None`: over all elements, a 0-d tensor (ties share the
    gradient evenly); an int: (values, indices) along it, the gradient to the index."""
    if dim is None:
        if keepdim:
            raise TypeError("median(): keepdim needs a dim (median(input, dim, keepdim))")
        return median_all(input)
    return _selection("median", input, dim, _median_index, not keepdim,
                      lambda x, d: R.nonempty_dim("median", x, d))
