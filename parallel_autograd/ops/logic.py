"""Comparisons, logic and integer-valued queries with PyTorch's names: `eq ne lt gt le ge`
(and `greater less ...`), `equal allclose isclose`, `isnan isinf isfinite isposinf
isneginf`, `logical_and logical_or logical_xor logical_not`, `bitwise_and bitwise_or
bitwise_xor bitwise_not bitwise_left_shift bitwise_right_shift` (and `& | ^ ~ << >>`),
`any all count_nonzero nonzero argsort msort unique bincount`.

Each is one declaration (`primitive.defop` without a formula: the results have no
history; `composite` for those returning several tensors or a Python bool): bool tensors
(comparisons, tests, logic), int64 tensors (indices, counts) or Python bools (`equal`,
`allclose`), as in PyTorch, except `msort`, whose values are `sort`'s (the gradient goes
back to each value's position) and `bincount` with float weights (their dtype). Where
PyTorch differs from numpy, PyTorch wins: `any`/`all` of a uint8 tensor are uint8 and
reduce nothing for `dim=()`, `unique` keeps every NaN apart, `nonzero` of a 0-d tensor has
shape (n, 0), `argsort` is stable and puts NaN last (first when descending), shifts by the
width or more (or by a negative amount) give 0 (-1 for a negative number shifted right).
Bad input raises PyTorch's exception types: NotImplementedError (a RuntimeError) for a
dtype an op does not take (bitwise ops of floats, bincount of floats), RuntimeError for
bincount's other refusals, IndexError for a dimension out of range.

Thread safety: pure functions of their arguments, like the other ops.
"""
from __future__ import annotations

import numpy as np

from ..primitive import composite, defop
from ..tensor import Tensor
from ._common import dim as one_dim
from ._common import dims, raw
from .scan import sort

__all__ = ["eq", "ne", "lt", "gt", "le", "ge", "equal", "allclose", "isclose", "isnan",
           "isinf", "isfinite", "isposinf", "isneginf", "logical_and", "logical_or",
           "logical_xor", "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor",
           "bitwise_not", "bitwise_left_shift", "bitwise_right_shift", "any", "all",
           "count_nonzero", "nonzero", "argsort", "msort", "unique", "bincount"]

_BINARY = ("input", "other")


# ---- comparisons -----------------------------------------------------------------------------
@defop(inputs=_BINARY, method=True, promote=True)
def eq(input: Tensor, other: Tensor) -> Tensor:
    """`input == other` elementwise, broadcast (a bool tensor)."""
    return np.equal(input, other)


@defop(inputs=_BINARY, method=True, aliases=("not_equal",), promote=True)
def ne(input: Tensor, other: Tensor) -> Tensor:
    """`input != other` elementwise, broadcast (a bool tensor)."""
    return np.not_equal(input, other)


@defop(inputs=_BINARY, method=True, aliases=("less",), promote=True)
def lt(input: Tensor, other: Tensor) -> Tensor:
    """`input < other` elementwise, broadcast (a bool tensor)."""
    return np.less(input, other)


@defop(inputs=_BINARY, method=True, aliases=("greater",), promote=True)
def gt(input: Tensor, other: Tensor) -> Tensor:
    """`input > other` elementwise, broadcast (a bool tensor)."""
    return np.greater(input, other)


@defop(inputs=_BINARY, method=True, aliases=("less_equal",), promote=True)
def le(input: Tensor, other: Tensor) -> Tensor:
    """`input <= other` elementwise, broadcast (a bool tensor)."""
    return np.less_equal(input, other)


@defop(inputs=_BINARY, method=True, aliases=("greater_equal",), promote=True)
def ge(input: Tensor, other: Tensor) -> Tensor:
    """`input >= other` elementwise, broadcast (a bool tensor)."""
    return np.greater_equal(input, other)


@defop(inputs=_BINARY, method=True)
def isclose(input: Tensor, other: Tensor, rtol: float = 1e-05, atol: float = 1e-08,
            equal_nan: bool = False) -> Tensor:
    """`|input - other| <= atol + rtol * |other|` elementwise (a bool tensor; infinities
    are close to themselves, NaN to NaN only with `equal_nan`)."""
    return np.isclose(input, other, rtol=rtol, atol=atol, equal_nan=equal_nan)


@composite(method=True)
def allclose(input, other, rtol: float = 1e-05, atol: float = 1e-08,
             equal_nan: bool = False) -> bool:
    """True if `isclose` holds everywhere (the two broadcast): a Python bool."""
    return bool(np.all(isclose(input, other, rtol, atol, equal_nan)._data))


@composite(method=True)
def equal(input, other) -> bool:
    """True if both have the same shape and the same values (NaN is not equal to NaN): a
    Python bool."""
    a, b = np.asarray(raw(input)), np.asarray(raw(other))
    return a.shape == b.shape and bool(np.array_equal(a, b))


# ---- tests of values ----------------------------------------------------------------------------
@defop(method=True)
def isnan(input: Tensor) -> Tensor:
    """True where input is NaN."""
    return np.isnan(input)


@defop(method=True)
def isinf(input: Tensor) -> Tensor:
    """True where input is +inf or -inf."""
    return np.isinf(input)


@defop(method=True)
def isfinite(input: Tensor) -> Tensor:
    """True where input is neither NaN nor infinite."""
    return np.isfinite(input)


@defop(method=True)
def isposinf(input: Tensor) -> Tensor:
    """True where input is +inf."""
    return np.isposinf(input)


@defop(method=True)
def isneginf(input: Tensor) -> Tensor:
    """True where input is -inf."""
    return np.isneginf(input)


# ---- logic ---------------------------------------------------------------------------------------
@defop(inputs=_BINARY, method=True)
def logical_and(input: Tensor, other: Tensor) -> Tensor:
    """Elementwise logical and (nonzero is True), broadcast; a bool tensor."""
    return np.logical_and(input, other)


@defop(inputs=_BINARY, method=True)
def logical_or(input: Tensor, other: Tensor) -> Tensor:
    """Elementwise logical or (nonzero is True), broadcast; a bool tensor."""
    return np.logical_or(input, other)


@defop(inputs=_BINARY, method=True)
def logical_xor(input: Tensor, other: Tensor) -> Tensor:
    """Elementwise logical exclusive or (nonzero is True), broadcast; a bool tensor."""
    return np.logical_xor(input, other)


@defop(method=True)
def logical_not(input: Tensor) -> Tensor:
    """Elementwise logical not (zero is True); a bool tensor."""
    return np.logical_not(input)


# ---- bitwise -----------------------------------------------------------------------------------
def _integral(op: str, *xs) -> None:
    """PyTorch's NotImplementedError for a bitwise op of a floating (or complex) operand."""
    for x in xs:
        dtype = np.asarray(x).dtype
        if dtype.kind not in "biu":
            raise NotImplementedError(f"{op}: not implemented for dtype {dtype} (integer "
                                      f"or bool tensors only)")


@defop(inputs=_BINARY, method=True, promote=True)
def bitwise_and(input: Tensor, other: Tensor) -> Tensor:
    """Bitwise and of integer or bool tensors (`&`; logical for bool)."""
    _integral("bitwise_and", input, other)
    return np.bitwise_and(input, other)


@defop(inputs=_BINARY, method=True, promote=True)
def bitwise_or(input: Tensor, other: Tensor) -> Tensor:
    """Bitwise or of integer or bool tensors (`|`)."""
    _integral("bitwise_or", input, other)
    return np.bitwise_or(input, other)


@defop(inputs=_BINARY, method=True, promote=True)
def bitwise_xor(input: Tensor, other: Tensor) -> Tensor:
    """Bitwise exclusive or of integer or bool tensors (`^`)."""
    _integral("bitwise_xor", input, other)
    return np.bitwise_xor(input, other)


@defop(method=True)
def bitwise_not(input: Tensor) -> Tensor:
    """Bitwise not of an integer or bool tensor (`~`; logical for bool)."""
    _integral("bitwise_not", input)
    return np.invert(input)


@defop(inputs=_BINARY, method=True)
def bitwise_left_shift(input: Tensor, other: Tensor) -> Tensor:
    """`input << other` of integer tensors (bool operands count as 0/1 integers); a shift
    by the width or more, or by a negative amount, gives 0, as PyTorch."""
    _integral("bitwise_left_shift", input, other)
    return np.left_shift(*_shift_operands(input, other))


@defop(inputs=_BINARY, method=True)
def bitwise_right_shift(input: Tensor, other: Tensor) -> Tensor:
    """`input >> other` of integer tensors, arithmetic for signed ones; a shift by the
    width or more, or by a negative amount, gives 0 (-1 for a negative input), as
    PyTorch."""
    _integral("bitwise_right_shift", input, other)
    return np.right_shift(*_shift_operands(input, other))


def _shift_operands(input, other):
    """Bools as int64 (numpy has no shift of bools; PyTorch promotes them); numpy's shifts
    already give PyTorch's results for the widths and negative amounts."""
    if np.asarray(input).dtype.kind == "b" and np.asarray(other).dtype.kind == "b":
        return np.asarray(input, np.int64), np.asarray(other, np.int64)
    return input, other


# ---- reductions to bool and counts ---------------------------------------------------------------
def _dims(ds, ndim: int, op: str):
    """None (all), or the dimensions as a tuple (IndexError out of range, RuntimeError when
    repeated); a 0-d tensor's one dimension 0 / -1 is all of it."""
    if ds is None:
        return None
    if isinstance(ds, bool) or not isinstance(ds, (int, np.integer, tuple, list)):
        raise TypeError(f"{op}: dim must be an int or a tuple of ints, got {ds!r}")
    out = dims(ds, ndim, op)
    return None if ndim == 0 else out


def _any_all(fn, op: str, input, dim, keepdim) -> np.ndarray:
    x = np.asarray(input)
    axes = _dims(dim, x.ndim, op)
    if axes == ():                  # PyTorch's any/all over no dimension: each element
        out = x.astype(bool)
    else:
        out = np.asarray(fn(x, axis=axes, keepdims=bool(keepdim) and x.ndim > 0))
    return out.astype(np.uint8) if x.dtype == np.uint8 else out


@defop(method=True)
def any(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:  # noqa: A001
    """True where any element along `dim` (None: all; an int or a tuple) is nonzero (a bool
    tensor; uint8 for a uint8 input, as PyTorch)."""
    return _any_all(np.any, "any", input, dim, keepdim)


@defop(method=True)
def all(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:  # noqa: A001
    """True where every element along `dim` (None: all; an int or a tuple) is nonzero (a
    bool tensor; uint8 for a uint8 input, as PyTorch)."""
    return _any_all(np.all, "all", input, dim, keepdim)


@defop(method=True)
def count_nonzero(input: Tensor, dim=None) -> Tensor:
    """The number of nonzero elements along `dim` (None or (): all; an int or a tuple):
    int64."""
    x = np.asarray(input)
    axes = _dims(dim, x.ndim, "count_nonzero") or None
    return np.asarray(np.count_nonzero(x, axis=axes), dtype=np.int64)


@composite(method=True)
def nonzero(input, *, as_tuple: bool = False):
    """The indices of the nonzero elements: an (n, ndim) int64 tensor, or with
    `as_tuple=True` one 1-D int64 tensor per dimension (a 0-d input counts as 1-D)."""
    x = np.asarray(raw(input))
    if as_tuple:
        return tuple(Tensor._wrap(i.astype(np.int64, copy=False))
                     for i in np.nonzero(np.atleast_1d(x)))
    return Tensor._wrap(np.argwhere(x).astype(np.int64, copy=False))


# ---- sorting, unique values, counting -----------------------------------------------------------
def _stable_argsort(x: np.ndarray, d: int, descending: bool) -> np.ndarray:
    """Stable argsort along `d`; descending keeps ties in their order too, and NaN counts
    as the largest (first when descending, last otherwise), as PyTorch."""
    if not descending:
        return np.argsort(x, axis=d, kind="stable")
    # a stable ascending sort of the reversed slice, reversed: ties in original order
    i = np.flip(np.argsort(np.flip(x, d), axis=d, kind="stable"), d)
    return (x.shape[d] - 1) - i


@defop(method=True)
def argsort(input: Tensor, dim: int = -1, descending: bool = False, *,
            stable: bool = False) -> Tensor:
    """The indices that sort `dim` (int64); always stable (ties keep their order), NaN
    counts as the largest, as `sort`."""
    x = np.asarray(input)
    d = one_dim(dim, x.ndim, "argsort")
    if x.ndim == 0:
        return np.zeros((), np.int64)
    return _stable_argsort(x, d, bool(descending)).astype(np.int64, copy=False)


@composite(method=True)
def msort(input) -> Tensor:
    """`input` sorted along dimension 0 (the values of `sort(input, 0)`: differentiable)."""
    return sort(input, 0).values


@composite(method=True)
def unique(input, sorted: bool = True, return_inverse: bool = False,
           return_counts: bool = False, dim: int | None = None):
    """The distinct values in ascending order (`dim=None`: of all elements, 1-D; an int:
    the distinct slices along `dim`); with `return_inverse` each element's (slice's)
    position among them, with `return_counts` their counts (int64). NaNs are all distinct,
    as PyTorch. `sorted` is accepted for PyTorch's signature: the result is always sorted."""
    x = np.asarray(raw(input))
    if dim is None:
        values, inverse, counts = np.unique(x.reshape(-1), return_inverse=True,
                                            return_counts=True, equal_nan=False)
        inverse = inverse.reshape(x.shape)
    else:
        if x.ndim == 0:
            raise IndexError(f"unique: Dimension specified as {dim} but tensor has no "
                             f"dimensions")
        values, inverse, counts = np.unique(x, return_inverse=True, return_counts=True,
                                            axis=one_dim(dim, x.ndim, "unique"),
                                            equal_nan=False)
        inverse = inverse.reshape(-1)
    out = [Tensor._wrap(values)]
    if return_inverse:
        out.append(Tensor._wrap(inverse.astype(np.int64, copy=False)))
    if return_counts:
        out.append(Tensor._wrap(counts.astype(np.int64, copy=False)))
    return out[0] if len(out) == 1 else tuple(out)


@defop(method=True)
def bincount(input: Tensor, weights: Tensor | None = None, minlength: int = 0) -> Tensor:
    """How often each value 0..max occurs in a 1-D non-negative integer tensor (int64), or
    the sums of `weights` per value (weights' float dtype; float64 for integer weights);
    at least `minlength` bins. Bad input raises PyTorch's RuntimeError (NotImplementedError
    for a float input)."""
    x = np.asarray(input)
    if x.dtype.kind not in "iu":
        raise NotImplementedError(f"bincount: not implemented for dtype {x.dtype} (an "
                                  f"integer tensor is required)")
    if x.ndim != 1 or (x.size and x.min() < 0):
        raise RuntimeError(f"bincount: only supports 1-d non-negative integral inputs, got "
                           f"shape {x.shape}" + (f", min {x.min()}" if x.size else ""))
    if isinstance(minlength, bool) or not isinstance(minlength, (int, np.integer)):
        raise TypeError(f"bincount: minlength must be an int, got {minlength!r}")
    if minlength < 0:
        raise RuntimeError(f"bincount: minlength should be >= 0, got {minlength}")
    if weights is None:
        return np.bincount(x, minlength=int(minlength)).astype(np.int64)
    w = np.asarray(weights)
    if w.shape != x.shape:
        raise RuntimeError(f"bincount: weights should be 1-d and have the same length as "
                           f"input {x.shape}, got {w.shape}")
    n = max(int(x.max()) + 1 if x.size else 0, int(minlength))
    if w.dtype.kind != "f":
        return np.bincount(x, weights=w, minlength=n)   # float64
    out = np.zeros(n, w.dtype)        # summed in order in weights' dtype, as PyTorch
    np.add.at(out, x, w)
    return out
