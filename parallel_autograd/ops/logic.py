"""Comparisons, logic and integer-valued queries with PyTorch's names: `eq ne lt gt le ge`
(and `greater less ...`), `equal allclose isclose`, `isnan isinf isfinite isposinf
isneginf`, `logical_and logical_or logical_xor logical_not`, `bitwise_and bitwise_or
bitwise_xor bitwise_not` (and `& | ^ ~`), `any all count_nonzero nonzero argsort msort
unique bincount`.

None has a gradient: the results are bool tensors (comparisons, tests, logic), int64
tensors (indices, counts) or Python bools (`equal`, `allclose`), as in PyTorch, except
`msort`, whose values are `sort`'s (the gradient goes back to each value's position) and
`bincount` with float weights (their dtype). Where PyTorch differs from numpy, PyTorch
wins: `any`/`all` of a uint8 tensor are uint8, `unique` keeps every NaN apart, `nonzero`
of a 0-d tensor has shape (n, 0), `argsort` is stable and puts NaN last (first when
descending). Bad input raises naming the method.

Thread safety: pure functions of their arguments, like the other ops.
"""
from __future__ import annotations

import numpy as np

from ..tensor import Tensor
from . import index as ix
from . import scan as sc

__all__ = ["eq", "ne", "lt", "gt", "le", "ge", "equal", "allclose", "isclose", "isnan",
           "isinf", "isfinite", "isposinf", "isneginf", "logical_and", "logical_or",
           "logical_xor", "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor",
           "bitwise_not", "any_", "all_", "count_nonzero", "nonzero", "argsort", "msort",
           "unique", "bincount", "METHODS"]


def _raw(x):
    return x.data if isinstance(x, Tensor) else x


def _arr(x) -> np.ndarray:
    return x.data if isinstance(x, Tensor) else np.asarray(x)


def _apply(name: str, ufunc, *args) -> Tensor:
    try:
        return Tensor._wrap(np.asarray(ufunc(*[_raw(a) for a in args])))
    except (TypeError, ValueError) as e:
        kind = ValueError if isinstance(e, ValueError) else TypeError
        raise kind(f"{name}: {e}") from None


def _binary(name: str, ufunc, doc: str):
    def fn(input, other) -> Tensor:
        return _apply(name, ufunc, input, other)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return fn


def _unary(name: str, ufunc, doc: str):
    def fn(input) -> Tensor:
        return _apply(name, ufunc, input)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return fn


eq = _binary("eq", np.equal, "`input == other` elementwise (a bool tensor).")
ne = _binary("ne", np.not_equal, "`input != other` elementwise (a bool tensor).")
lt = _binary("lt", np.less, "`input < other` elementwise (a bool tensor).")
gt = _binary("gt", np.greater, "`input > other` elementwise (a bool tensor).")
le = _binary("le", np.less_equal, "`input <= other` elementwise (a bool tensor).")
ge = _binary("ge", np.greater_equal, "`input >= other` elementwise (a bool tensor).")
isnan = _unary("isnan", np.isnan, "True where input is NaN.")
isinf = _unary("isinf", np.isinf, "True where input is +inf or -inf.")
isfinite = _unary("isfinite", np.isfinite, "True where input is neither NaN nor infinite.")
isposinf = _unary("isposinf", np.isposinf, "True where input is +inf.")
isneginf = _unary("isneginf", np.isneginf, "True where input is -inf.")
logical_and = _binary("logical_and", np.logical_and, "Elementwise logical and (nonzero: True).")
logical_or = _binary("logical_or", np.logical_or, "Elementwise logical or (nonzero: True).")
logical_xor = _binary("logical_xor", np.logical_xor, "Elementwise logical exclusive or.")
logical_not = _unary("logical_not", np.logical_not, "Elementwise logical not (zero: True).")
bitwise_and = _binary("bitwise_and", np.bitwise_and,
                      "Bitwise and of integer or bool tensors (`&`; logical for bool).")
bitwise_or = _binary("bitwise_or", np.bitwise_or,
                     "Bitwise or of integer or bool tensors (`|`).")
bitwise_xor = _binary("bitwise_xor", np.bitwise_xor,
                      "Bitwise exclusive or of integer or bool tensors (`^`).")
bitwise_not = _unary("bitwise_not", np.invert,
                     "Bitwise not of an integer or bool tensor (`~`; logical for bool).")


def equal(input, other) -> bool:
    """True if both have the same shape and the same values (NaN is not equal to NaN)."""
    a, b = _arr(input), _arr(other)
    return a.shape == b.shape and bool(np.array_equal(a, b))


def isclose(input, other, rtol: float = 1e-05, atol: float = 1e-08,
            equal_nan: bool = False) -> Tensor:
    """`|input - other| <= atol + rtol * |other|` elementwise (a bool tensor)."""
    return _apply("isclose", lambda a, b: np.isclose(a, b, rtol=rtol, atol=atol,
                                                     equal_nan=equal_nan), input, other)


def allclose(input, other, rtol: float = 1e-05, atol: float = 1e-08,
             equal_nan: bool = False) -> bool:
    """True if `isclose` holds everywhere (the two broadcast)."""
    return bool(np.all(isclose(input, other, rtol, atol, equal_nan).data))


# ---- reductions to bool and counts ---------------------------------------------------------
def _any_all(name: str, fn, input, dim, keepdim: bool) -> Tensor:
    x = _arr(input)
    axes = sc._axes(name, x.ndim, dim)
    out = np.asarray(fn(x, axis=axes, keepdims=bool(keepdim)))
    return Tensor._wrap(out.astype(np.uint8) if x.dtype == np.uint8 else out)


def any_(input, dim=None, keepdim: bool = False) -> Tensor:
    """True where any element along `dim` (None: all; an int or a tuple) is nonzero (a bool
    tensor; uint8 for a uint8 input, as PyTorch)."""
    return _any_all("any", np.any, input, dim, keepdim)


def all_(input, dim=None, keepdim: bool = False) -> Tensor:
    """True where every element along `dim` (None: all; an int or a tuple) is nonzero."""
    return _any_all("all", np.all, input, dim, keepdim)


def count_nonzero(input, dim=None) -> Tensor:
    """The number of nonzero elements along `dim` (None: all; an int or a tuple): int64."""
    x = _arr(input)
    axes = sc._axes("count_nonzero", x.ndim, dim)
    return Tensor._wrap(np.asarray(np.count_nonzero(x, axis=axes), dtype=np.int64))


def nonzero(input, *, as_tuple: bool = False):
    """The indices of the nonzero elements: an (n, ndim) int64 tensor, or with
    `as_tuple=True` one 1-D int64 tensor per dimension (a 0-d input counts as 1-D)."""
    x = _arr(input)
    if as_tuple:
        return tuple(Tensor._wrap(i.astype(np.int64, copy=False))
                     for i in np.nonzero(np.atleast_1d(x)))
    return Tensor._wrap(np.argwhere(x).astype(np.int64, copy=False))


# ---- sorting, unique values, counting ---------------------------------------------------
def argsort(input, dim: int = -1, descending: bool = False, *, stable: bool = False) -> Tensor:
    """The indices that sort `dim` (int64); always stable (ties keep their order), NaN
    counts as the largest, as `sort`."""
    x = _arr(input)
    ax = sc._dim("argsort", x.ndim, dim)
    if x.ndim == 0:
        return Tensor._wrap(np.zeros((), np.int64))
    return Tensor._wrap(sc._argsort(x, ax, bool(descending)).astype(np.int64, copy=False))


def msort(input) -> Tensor:
    """`input` sorted along dimension 0 (the values of `sort(input, 0)`: differentiable)."""
    return sc.sort(input, 0).values


def unique(input, sorted: bool = True, return_inverse: bool = False,
           return_counts: bool = False, dim: int | None = None):
    """The distinct values in ascending order (`dim=None`: of all elements, 1-D; an int:
    the distinct slices along `dim`); with `return_inverse` each element's (slice's)
    position among them, with `return_counts` their counts (int64). NaNs are all distinct,
    as PyTorch. `sorted` is accepted for PyTorch's signature: the result is always sorted."""
    x = _arr(input)
    if dim is None:
        values, inverse, counts = np.unique(x.reshape(-1), return_inverse=True,
                                            return_counts=True, equal_nan=False)
        inverse = inverse.reshape(x.shape)
    else:
        if x.ndim == 0:
            raise ValueError("unique: dim given for a 0-dim tensor")
        values, inverse, counts = np.unique(x, return_inverse=True, return_counts=True,
                                            axis=ix._dim(dim, x.ndim, "unique"),
                                            equal_nan=False)
        inverse = inverse.reshape(-1)
    out = [Tensor._wrap(values)]
    if return_inverse:
        out.append(Tensor._wrap(inverse.astype(np.int64, copy=False)))
    if return_counts:
        out.append(Tensor._wrap(counts.astype(np.int64, copy=False)))
    return out[0] if len(out) == 1 else tuple(out)


def bincount(input, weights=None, minlength: int = 0) -> Tensor:
    """How often each value 0..max occurs in a 1-D non-negative integer tensor (int64), or
    the sums of `weights` per value (weights' float dtype; float64 for integer weights);
    at least `minlength` bins."""
    x = _arr(input)
    if x.dtype.kind not in "iu":
        raise TypeError(f"bincount: expected an integer tensor, got dtype {x.dtype}")
    if x.ndim != 1 or (x.size and x.min() < 0):
        raise ValueError(f"bincount: only supports 1-d non-negative integral inputs, got "
                         f"shape {x.shape}" + (f", min {x.min()}" if x.size else ""))
    if isinstance(minlength, bool) or not isinstance(minlength, (int, np.integer)) \
            or minlength < 0:
        raise ValueError(f"bincount: minlength must be a non-negative int, got {minlength!r}")
    if weights is None:
        return Tensor._wrap(np.bincount(x, minlength=int(minlength)).astype(np.int64))
    w = _arr(weights)
    if w.shape != x.shape:
        raise ValueError(f"bincount: weights must have input's shape {x.shape}, got {w.shape}")
    n = max(int(x.max()) + 1 if x.size else 0, int(minlength))
    if w.dtype.kind != "f":
        return Tensor._wrap(np.bincount(x, weights=w, minlength=n))   # float64
    out = np.zeros(n, w.dtype)        # summed in order in weights' dtype, as PyTorch
    np.add.at(out, x, w)
    return Tensor._wrap(out)


METHODS = {
    "eq": eq, "ne": ne, "lt": lt, "gt": gt, "le": le, "ge": ge, "not_equal": ne,
    "greater": gt, "greater_equal": ge, "less": lt, "less_equal": le,
    "equal": equal, "allclose": allclose, "isclose": isclose, "isnan": isnan,
    "isinf": isinf, "isfinite": isfinite, "isposinf": isposinf, "isneginf": isneginf,
    "logical_and": logical_and, "logical_or": logical_or, "logical_xor": logical_xor,
    "logical_not": logical_not, "bitwise_and": bitwise_and, "bitwise_or": bitwise_or,
    "bitwise_xor": bitwise_xor, "bitwise_not": bitwise_not, "any": any_, "all": all_,
    "count_nonzero": count_nonzero, "nonzero": nonzero, "argsort": argsort, "msort": msort,
    "unique": unique, "bincount": bincount,
    "__and__": bitwise_and, "__rand__": lambda a, b: bitwise_and(b, a),
    "__or__": bitwise_or, "__ror__": lambda a, b: bitwise_or(b, a),
    "__xor__": bitwise_xor, "__rxor__": lambda a, b: bitwise_xor(b, a),
    "__invert__": bitwise_not,
}
