"""Reductions and scans beyond `ops/reduce.py`: prod, std, norm, amax, amin, argmax,
argmin, cumsum, cumprod, and the selections sort, topk, kthvalue, median.

Arguments follow the library's reductions (`axis`, `keepdims`, as `pa.sum`), in
PyTorch's positional order; option names and defaults are PyTorch's (`correction`,
`descending`, `stable`, `largest`, `sorted`, `p`). Gradients follow PyTorch's formulas,
including its choices where the derivative is not unique:

- prod: zeros handled exactly (with one zero in a slice its gradient is the product of
  the others, with more all is 0): exclusive products from two cumprods, no division.
- cumprod: the same, by the first and second zeros of each slice (PyTorch's
  `cumprod_backward`, with its NaNs where an inf meets a zero).
- std and the 2-norm: 0 where the result is 0; the other p-norms as `torch.norm`.
- amax, amin, the inf-norms and median over all elements: the gradient split evenly
  among ties. Where the result is NaN: median() gives it to the NaNs (as max()), amax and
  amin NaN to the whole slice, the inf-norms 0 to the whole slice (each PyTorch's).
- sort, topk, kthvalue and median along an axis: the gradient goes to the selected index
  (`values` is a gather; its rule a scatter into zeros, whose rule is the gather again:
  a linear pair, so every order of derivative runs these two kernels).

As in PyTorch, a 0-d input has the one axis 0 (or -1), and an empty input reduced along
an axis that is not empty gives an empty result.

Ops that return values and indices return a NamedTuple with `.values` and `.indices`
(PyTorch's `torch.return_types`); indices are int64 tensors without gradient.

Thread safety: pure functions of their arguments, like the other ops.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..memory import empty as _empty
from ..memory import pooled as P
from ..primitive import primitive, record
from ..tensor import Tensor
from . import elementwise as E
from . import reduce as R
from . import shape as S
from .graph import _extremum, _kept, cast, depends_on

__all__ = ["prod", "std", "norm", "amax", "amin", "argmax", "argmin", "cumsum", "cumprod",
           "sort", "topk", "kthvalue", "median"]

_buf, _restore = E._buf, R._restore


def _raw(x):
    return x.data if isinstance(x, Tensor) else np.asarray(x)


AxisError = getattr(np, "exceptions", np).AxisError  # numpy < 1.25: np.AxisError


def _axis_index(name: str, axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise AxisError(axis, ndim, name)   # "name: axis 5 is out of bounds for array ..."
    return axis % ndim


def _axes(name: str, ndim: int, axis):
    """None, or the axes as a tuple of non-negative ints. numpy's AxisError (a ValueError
    and an IndexError) names the op when one is out of range; ValueError when repeated.
    A 0-d tensor has the one axis 0 (or -1), as in PyTorch: reducing over it reduces all
    (None; the result stays 0-d, also with keepdims)."""
    if axis is None:
        return None
    axes = tuple(_int(name, a, "axis") for a in axis) if isinstance(axis, (list, tuple)) \
        else (_int(name, axis, "axis"),)
    axes = tuple(_axis_index(name, a, max(ndim, 1)) for a in axes)
    if len(set(axes)) != len(axes):
        raise ValueError(f"{name}: repeated axis in {axis!r}")
    return None if ndim == 0 else axes


def _dim(name: str, ndim: int, axis) -> int:
    """One axis as a non-negative int; a 0-d tensor has the one axis 0 (or -1), as in
    PyTorch."""
    return _axis_index(name, _int(name, axis, "axis"), max(ndim, 1))


def _int(name: str, value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: {what} must be an int, got {value!r}")
    return int(value)


def _with_dtype(x, dtype):
    """x converted to `dtype` first (PyTorch's `dtype=` of prod, cumsum, cumprod)."""
    return x if dtype is None else cast(x, dtype=np.dtype(dtype))


def _flip(t, axis: int) -> Tensor:
    """t reversed along `axis`, with ops (a basic-indexing view)."""
    return S.getitem(t, (slice(None),) * axis + (slice(None, None, -1),))


def _no_zeros(x: np.ndarray) -> bool:
    return np.count_nonzero(x) == x.size  # 1 pass, no temporary (NaN is not zero)


# ---- prod ----------------------------------------------------------------------------------
def _moved(x, axes):
    """(perm, shape, inverse): the transpose that moves `axes` (None: all) last, the
    shape it gives, and the transpose that undoes it."""
    axes = tuple(range(x.ndim)) if axes is None else axes
    rest = tuple(a for a in range(x.ndim) if a not in axes)
    perm = rest + tuple(axes)
    shape = tuple(x.shape[a] for a in perm)
    inverse = tuple(int(i) for i in np.argsort(perm))
    return perm, shape, inverse


def _others_product(x: np.ndarray, axes) -> np.ndarray:
    """For each element, the product of the others in its slice over `axes`: left and
    right exclusive cumprods, multiplied (exact with zeros; no division). The rare path
    of prod's rule: two temporaries the size of x."""
    perm, shape, inverse = _moved(x, axes)
    rows = np.transpose(x, perm).reshape(shape[:x.ndim - _count(axes, x.ndim)] + (-1,))
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


def _count(axes, ndim: int) -> int:
    return ndim if axes is None else len(axes)


def _prod_vjp(g, ans, x, axis, keepdims):
    gr = _restore(g, x.shape, axis, keepdims)
    if _no_zeros(x):
        # g ans / x, PyTorch's formula: 2 passes (and the zero test's), one buffer
        with np.errstate(invalid="ignore", over="ignore"):
            t = _buf(P.divide(_restore(ans, x.shape, axis, keepdims), x))
        t *= gr
        return t
    t = _others_product(x, axis)
    t *= gr
    return t


def _others_product_t(x, axes, ndim: int) -> Tensor:
    """`_others_product` with ops (differentiable: the exclusive products are cumprods of
    x shifted by one, padded with ones)."""
    xd = _raw(x)
    perm, shape, inverse = _moved(xd, axes)
    lead = shape[:ndim - _count(axes, ndim)]
    rows = S.reshape(S.permute(x, perm), lead + (-1,))
    k = int(np.prod(shape[len(lead):]))
    if k == 1:
        return S.permute(S.reshape(E.where(np.True_, 1.0, rows), shape), inverse)
    ones = np.ones(lead + (1,), xd.dtype)
    left = cumprod(S.concat([ones, rows[..., :-1]], axis=len(lead)), len(lead))
    right = _flip(cumprod(_flip(S.concat([rows[..., 1:], ones], axis=len(lead)), len(lead)),
                          len(lead)), len(lead))
    return S.permute(S.reshape(left * right, shape), inverse)


def _prod_twin(g, ans, x, axis, keepdims):
    xd = _raw(x)
    gr = _kept(g, xd.shape, axis, keepdims)
    if _no_zeros(xd):
        return gr * (_kept(ans, xd.shape, axis, keepdims) / x)
    return gr * _others_product_t(x, axis, xd.ndim)


_prod_vjp.graph = _prod_twin
_prod = primitive("prod", lambda x, axis, keepdims: np.prod(x, axis=axis, keepdims=keepdims),
                  _prod_vjp)


@R.torch_names
def prod(input, axis=None, keepdims: bool = False, *, dtype=None) -> Tensor:
    """The product over `axis` (None: all; an int or a tuple). The gradient is exact with
    zeros: the product of the other elements of the slice (0 with two zeros or more)."""
    x = _with_dtype(input, dtype)
    return _prod(x, axis=_axes("prod", np.ndim(_raw(x)), axis), keepdims=bool(keepdims))


# ---- std -----------------------------------------------------------------------------------
def _deviations(x: np.ndarray, axis) -> np.ndarray:
    """x - mean(x) over `axis` into a new array, the mean taken of x shifted by each
    slice's first element (the shifted-data algorithm): exactly 0 for a constant slice,
    whose std is then exactly 0 as in PyTorch (numpy's mean of [0.7] * 3 is not 0.7, and
    the std's gradient there would be 1e-16 / 1e-17). 3 passes and the mean's."""
    first = x[tuple(slice(0, 1) if axis is None or a in axis else slice(None)
                    for a in range(x.ndim))]
    t = _buf(P.subtract(x, first))
    t -= t.mean(axis=axis, keepdims=True)
    return t


def _std(x, axis, keepdims, correction):
    # sqrt(sum((x - mean)^2) / max(n - correction, 0)): 4 passes and the sums, one temporary
    if x.size == 0:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.std(x, axis=axis, keepdims=keepdims, ddof=correction)
    t = _deviations(x, axis)
    t *= t
    n = R._count(x.shape, axis)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt(np.sum(t, axis=axis, keepdims=keepdims) / max(n - correction, 0))


def _std_vjp(g, ans, x, axis, keepdims, correction):
    # g (x - mean) / ((n - correction) std), 0 where std is 0 (PyTorch): 4 passes (and the
    # mean's), one buffer
    n = R._count(x.shape, axis)
    a = _restore(ans, x.shape, axis, keepdims)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = _restore(g, x.shape, axis, keepdims) / (a * (n - correction))
    scale = np.where(a == 0, 0.0, scale).astype(scale.dtype, copy=False)
    t = _deviations(x, axis)
    t *= scale
    return t


def _std_twin(g, ans, x, axis, keepdims, correction):
    xd = _raw(x)
    n = R._count(xd.shape, axis)
    a = _kept(ans, xd.shape, axis, keepdims)
    zero = _raw(a) == 0
    if zero.any():
        a = E.where(zero, 1.0, a)
    scale = _kept(g, xd.shape, axis, keepdims) / (a * (n - correction))
    if zero.any():
        scale = E.where(zero, 0.0, scale)
    return scale * (x - R.mean(x, axis=axis, keepdims=True))


_std_vjp.graph = _std_twin
_std_op = primitive("std", _std, _std_vjp)


@R.torch_names
def std(input, axis=None, keepdims: bool = False, *, correction=1,
        unbiased: bool | None = None) -> Tensor:
    """The standard deviation over `axis`, dividing by n - correction: PyTorch's default
    correction=1 is the unbiased (sample) estimate, 0 the population one. `unbiased`
    (PyTorch's older spelling) sets correction to 1 or 0. (`pa.var` keeps numpy's
    `ddof=0` default.) The gradient is 0 where the result is 0, as in PyTorch."""
    if unbiased is not None:
        if correction != 1:
            raise ValueError("std: give correction or unbiased, not both")
        correction = 1 if unbiased else 0
    if isinstance(correction, bool) or not isinstance(
            correction, (int, float, np.integer, np.floating)) or correction < 0:
        raise ValueError(f"std: correction must be a number >= 0, got {correction!r}")
    return _std_op(input, axis=_axes("std", np.ndim(_raw(input)), axis),
                   keepdims=bool(keepdims), correction=correction)


# ---- norm ----------------------------------------------------------------------------------
def _norm(x, p, axis, keepdims):
    # one temporary the size of x (|x|, x*x or |x|^p), reduced
    if p == 2:
        t = _buf(P.multiply(x, x))
        return np.sqrt(np.sum(t, axis=axis, keepdims=keepdims))
    if p == 0:
        return np.count_nonzero(x, axis=axis, keepdims=keepdims).astype(x.dtype)
    t = _buf(P.abs(x))
    if p == np.inf:
        return np.max(t, axis=axis, keepdims=keepdims)
    if p == -np.inf:
        return np.min(t, axis=axis, keepdims=keepdims)
    if p == 1:
        return np.sum(t, axis=axis, keepdims=keepdims)
    with np.errstate(divide="ignore", over="ignore"):
        np.power(t, p, out=t)
        return np.power(np.sum(t, axis=axis, keepdims=keepdims), 1.0 / p)


def _norm_vjp(g, ans, x, p, axis, keepdims):
    gr = _restore(g, x.shape, axis, keepdims)
    if p == 0:                      # 1 pass
        t = _empty(x.shape, np.result_type(g, x))
        t.fill(0)
        return t
    if p == 1:
        t = _buf(P.sign(x))         # g sign(x): 2 passes
        t *= gr
        return t
    a = _restore(ans, x.shape, axis, keepdims)
    zero = a == 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if p == 2:                  # g x / norm, 0 where the norm is 0: 1 pass
            scale = np.where(zero, 0.0, gr / a)
            return _buf(P.multiply(x, scale.astype(np.result_type(g, x), copy=False)))
        t = _buf(P.abs(x))
        if abs(p) == np.inf:
            # sign(x) g / (number of ties) at |x| == norm (PyTorch): 5 passes, one buffer
            nan = np.isnan(ans).any()
            np.equal(t, a, out=t)
            if nan:                 # rare: see _inf_norm_nan
                _inf_norm_nan(t, x)
            count = t.sum(axis=axis, keepdims=True)
            np.copysign(t, x, out=t)
            if nan:
                t[np.isnan(x)] = 0
            t *= np.where(zero, 0.0, gr / count)
            return t
        # sign(x) |x|^(p-1) g / norm^(p-1), 0 where the norm is 0: 4 passes (p < 1: 5)
        np.power(t, p - 1, out=t)
        np.copysign(t, x, out=t)
        if p < 1:
            np.putmask(t, x == 0, 0)
        t *= np.where(zero, 0.0, gr / np.power(a, p - 1))
        return t


def _inf_norm_nan(mask, x):
    """PyTorch's inf-norm rule where the norm is NaN: its mask of maxima is
    `|x| == norm or isnan(x)`, scaled by sign(x), and its sign of NaN is 0. So the NaNs
    are counted but get 0, and a slice with a NaN gets 0 everywhere (not NaN: the count
    is not 0). The rare path: 2 passes and a boolean temporary."""
    mask += np.isnan(x)


def _norm_twin(g, ans, x, p, axis, keepdims):
    xd = _raw(x)
    if p in (0, 1) or abs(p) == np.inf:  # g times a piecewise-constant factor
        factor = _norm_vjp(np.ones(ans.shape, ans.dtype), ans.data, xd, p, axis, keepdims)
        if p:                             # derivative 0 in x, as PyTorch's sgn and mask
            factor = depends_on(factor, x)
        return S.broadcast_to(_kept(g, xd.shape, axis, keepdims), xd.shape) * factor
    a = _kept(ans, xd.shape, axis, keepdims)
    zero = _raw(a) == 0
    safe = E.where(zero, 1.0, a) if zero.any() else a
    if p == 2:
        scale = _kept(g, xd.shape, axis, keepdims) / safe
    else:
        scale = _kept(g, xd.shape, axis, keepdims) / E.pow(safe, p - 1)
    if zero.any():
        scale = E.where(zero, 0.0, scale)
    if p == 2:
        return x * scale
    xzero = xd == 0
    magnitude = E.abs(x)
    if p < 1 and xzero.any():        # |x|^(p-1) is infinite at 0, where the factor is 0
        magnitude = E.where(xzero, 1.0, magnitude)
    scaled = E.pow(magnitude, p - 1) * np.sign(xd)
    if p < 1 and xzero.any():
        scaled = E.where(xzero, 0.0, scaled)
    return scaled * scale


_norm_vjp.graph = _norm_twin
_norm_op = primitive("norm", _norm, _norm_vjp)


@R.torch_names
def norm(input, p="fro", axis=None, keepdims: bool = False, dtype=None) -> Tensor:
    """The vector p-norm over `axis` (None: all elements), `torch.norm`'s semantics:
    p = "fro" or 2: sqrt(sum x^2); 1: sum |x|; inf / -inf: max / min |x|; 0: the number of
    nonzeros; any other p: (sum |x|^p)^(1/p). Gradients as PyTorch (0 where the norm is 0;
    ties of the inf-norms share evenly). Matrix norms ("nuc", spectral) are not here."""
    if isinstance(p, str):
        if p != "fro":
            raise ValueError(f"norm: p={p!r} is not supported here (vector norms and 'fro' "
                             f"only; the nuclear norm is a matrix norm)")
        p = 2.0
    elif isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)) \
            or np.isnan(p):
        raise ValueError(f"norm: p must be a number, inf, -inf or 'fro', got {p!r}")
    x = _with_dtype(input, dtype)
    xd = _raw(x)
    if xd.dtype.kind not in "f":
        raise TypeError(f"norm: needs a floating tensor, got {xd.dtype}")
    return _norm_op(x, p=float(p), axis=_axes("norm", xd.ndim, axis), keepdims=bool(keepdims))


# ---- amax, amin, argmax, argmin --------------------------------------------------------------
def _amax_vjp(g, ans, x, axis, keepdims):
    # max's and min's rule (`reduce._share`: ties share evenly, 3 passes, one buffer) but
    # PyTorch's amax/amin where the result is NaN: its mask `x == result` is empty there,
    # and g / 0 * 0 makes the whole slice NaN (max() gives it to the NaNs instead)
    return R._share(g, ans, x, axis, keepdims, False)


_amax_vjp.graph = _extremum(_amax_vjp)
_amax = primitive("amax", lambda x, axis, keepdims: np.max(x, axis=axis, keepdims=keepdims),
                  _amax_vjp)
_amin = primitive("amin", lambda x, axis, keepdims: np.min(x, axis=axis, keepdims=keepdims),
                  _amax_vjp)


@R.torch_names
def amax(input, axis=None, keepdims: bool = False) -> Tensor:
    """The maximum over `axis` (None: all; an int or a tuple); ties share the gradient
    evenly, and a slice whose maximum is NaN gets a NaN gradient (PyTorch's amax)."""
    axis = _axes("amax", np.ndim(_raw(input)), axis)
    R.nonempty_extremum("amax", input, axis)
    return _amax(input, axis=axis, keepdims=bool(keepdims))


@R.torch_names
def amin(input, axis=None, keepdims: bool = False) -> Tensor:
    """The minimum over `axis` (None: all; an int or a tuple); ties share the gradient
    evenly, and a slice whose minimum is NaN gets a NaN gradient (PyTorch's amin)."""
    axis = _axes("amin", np.ndim(_raw(input)), axis)
    R.nonempty_extremum("amin", input, axis)
    return _amin(input, axis=axis, keepdims=bool(keepdims))


def _nonempty(name: str, x: np.ndarray, ax) -> None:
    """PyTorch refuses to reduce an empty dimension (or, with none given, an empty tensor);
    an empty tensor reduced along a dimension that is not empty gives an empty result."""
    if ax is None:
        if x.size == 0:
            raise ValueError(f"{name}: the tensor is empty")
    elif x.ndim and x.shape[ax] == 0:
        raise ValueError(f"{name}: dimension {ax} is empty (a reduction along it has no "
                         f"value)")


def _arg(name: str, fn, input, axis, keepdims) -> Tensor:
    x = _raw(input)
    ax = None if axis is None else _dim(name, x.ndim, axis)
    _nonempty(name, x, ax)
    if x.ndim == 0:
        return Tensor._wrap(np.zeros((), np.int64))
    return Tensor._wrap(np.asarray(fn(x, axis=ax, keepdims=bool(keepdims)), np.int64))


@R.torch_names
def argmax(input, axis=None, keepdims: bool = False) -> Tensor:
    """The index of the maximum along `axis` (None: into the flattened tensor); the first
    on ties, a NaN counts as the maximum. An int64 tensor (no gradient)."""
    return _arg("argmax", np.argmax, input, axis, keepdims)


@R.torch_names
def argmin(input, axis=None, keepdims: bool = False) -> Tensor:
    """The index of the minimum along `axis` (None: into the flattened tensor); the first
    on ties, a NaN counts as the minimum. An int64 tensor (no gradient)."""
    return _arg("argmin", np.argmin, input, axis, keepdims)


# ---- cumsum, cumprod ------------------------------------------------------------------------
def _cumsum(x, axis):
    if x.dtype.kind in "fc":
        return np.cumsum(x, axis=axis, out=_empty(x.shape, x.dtype))
    return np.cumsum(x, axis=axis, dtype=np.int64 if x.dtype.kind in "biu" else None)


def _reverse_cumsum(a: np.ndarray, axis: int, out: np.ndarray) -> np.ndarray:
    """Sums from the end along `axis` into `out` (which may be `a`): 1 pass."""
    np.cumsum(np.flip(a, axis), axis=axis, out=np.flip(out, axis))
    return out


def _cumsum_vjp(g, ans, x, axis):
    return _reverse_cumsum(g, axis, _empty(g.shape, g.dtype))  # 1 pass


def _reverse_cumsum_t(g, axis: int) -> Tensor:
    return _flip(cumsum(_flip(g, axis), axis), axis)


_cumsum_vjp.graph = lambda g, ans, x, axis: _reverse_cumsum_t(g, axis)
_cumsum = primitive("cumsum", _cumsum, _cumsum_vjp)


@R.torch_names
def cumsum(input, axis: int, *, dtype=None) -> Tensor:
    """Running sums along `axis` (required, as PyTorch's `dim`); integers sum in int64."""
    x = _with_dtype(input, dtype)
    ax = _dim("cumsum", np.ndim(_raw(x)), axis)
    if np.ndim(_raw(x)) == 0:
        return S.reshape(cumsum(S.reshape(x, (1,)), 0), ())
    return _cumsum(x, axis=ax)


def _cumprod_vjp(g, ans, x, axis):
    if x.shape[axis] == 1:
        return g                     # PyTorch: g itself (g ans / x is NaN at x = 0 or inf)
    if _no_zeros(x):
        # sums from the end of g ans, over x (PyTorch's formula): 3 passes, one buffer
        t = _buf(P.multiply(g, ans))
        _reverse_cumsum(t, axis, t)
        with np.errstate(invalid="ignore"):     # inf / inf: NaN, as PyTorch's
            t /= x
        return t
    # With zeros, PyTorch's cumprod_backward (its O(n) path, without create_graph), by the
    # first zero z1 and the second z2 of each slice (the length where there is none):
    #   j < z1: the same formula on [0, z1) only (the ans from z1 on are 0, or NaN after an
    #           inf, and take no part);
    #   j = z1: ans[z1 - 1] (1 if z1 = 0) * sum over z1 <= i < z2 of g_i prod(x[z1+1 .. i]);
    #   j > z1: 0 (every product through j contains x_z1 = 0).
    # As PyTorch, the sum at z1 multiplies the products by g zeroed outside [z1, z2) (an inf
    # product times that 0 is NaN) where [0, z1) selects. The rare path: a few temporaries
    # the size of x.
    dtype = np.result_type(g, ans)
    zeros = np.cumsum(x == 0, axis=axis)             # the zeros up to each position
    before, first = zeros == 0, zeros == 1           # [0, z1) and [z1, z2)
    at = first & (x == 0)                            # z1
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        t = _reverse_cumsum(np.where(before, P.multiply(g, ans), 0), axis,
                            _empty(x.shape, dtype))
        out = np.where(before, t / np.where(before, x, 1), 0).astype(dtype, copy=False)
        inner = np.cumprod(np.where(first & ~at, x, 1), axis=axis)
        s = (inner * np.where(first, g, 0)).sum(axis=axis, keepdims=True)
        z1 = np.argmax(at, axis=axis, keepdims=True)
        lead = np.where(z1 == 0, 1, np.take_along_axis(ans, np.maximum(z1 - 1, 0), axis))
        out += np.where(at, s * lead, 0)
    return out


def _cumprod_twin(g, ans, x, axis):
    xd = _raw(x)
    if xd.shape[axis] == 1:
        return g                     # as the rule
    if _no_zeros(xd):
        return _reverse_cumsum_t(g * ans, axis) / x
    # With zeros, a form whose derivatives are exact too (the masks of the fast rule would
    # drop them: x_z = 0 zeroes terms whose derivative is not 0, as in PyTorch, whose
    # double backward is quadratic as well): dx_j = prod(x[:j]) * sum over i >= j of
    # g_i prod(x[j+1 .. i]), the inner products the cumprods of a K x K table (K = the
    # length along `axis`): memory K times the input's. This is also PyTorch's formula
    # under create_graph (where an inf meets a zero, its NaNs are not those of its O(n)
    # path, which the rule follows).
    n = xd.shape[axis]
    xs, gs = S.swapaxes(x, axis, -1), S.swapaxes(g, axis, -1)
    i = np.arange(n)
    table = E.where(i[None, :] > i[:, None], S.unsqueeze(xs, -2), 1.0)
    ones = np.ones(xs.shape[:-1] + (1,), xd.dtype)
    before = cumprod(S.concat([ones, xs[..., :-1]], axis=-1), -1)
    # PyTorch's order: the omitted products prod(x[:j]) prod(x[j+1 .. i]), times g_i
    omitted = S.unsqueeze(before, -1) * cumprod(table, -1)
    terms = E.where(i[None, :] >= i[:, None], omitted * S.unsqueeze(gs, -2), 0.0)
    return S.swapaxes(R.sum(terms, axis=-1), axis, -1)


def _cumprod_forward(x, axis):
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0 is NaN, quietly (PyTorch)
        return np.cumprod(x, axis=axis)


_cumprod_vjp.graph = _cumprod_twin
_cumprod = primitive("cumprod", _cumprod_forward, _cumprod_vjp)


@R.torch_names
def cumprod(input, axis: int, *, dtype=None) -> Tensor:
    """Running products along `axis` (required, as PyTorch's `dim`); the gradient is
    exact with zeros (PyTorch's)."""
    x = _with_dtype(input, dtype)
    ax = _dim("cumprod", np.ndim(_raw(x)), axis)
    if np.ndim(_raw(x)) == 0:
        return S.reshape(cumprod(S.reshape(x, (1,)), 0), ())
    return _cumprod(x, axis=ax)


# ---- selections: a gather, whose rule is a scatter ------------------------------------------
class _ReturnTypes:
    """PyTorch's `torch.return_types`: (values, indices) NamedTuples named by the op."""

    sort = NamedTuple("sort", [("values", Tensor), ("indices", Tensor)])
    topk = NamedTuple("topk", [("values", Tensor), ("indices", Tensor)])
    kthvalue = NamedTuple("kthvalue", [("values", Tensor), ("indices", Tensor)])
    median = NamedTuple("median", [("values", Tensor), ("indices", Tensor)])
    max = NamedTuple("max", [("values", Tensor), ("indices", Tensor)])
    min = NamedTuple("min", [("values", Tensor), ("indices", Tensor)])


return_types = _ReturnTypes


def _scatter_rule(g, index, axis, shape, squeeze, full):
    """g put at `index` along `axis` into zeros of `shape` (each index at most once a
    slice): 1 pass, and the zero fill's unless `index` is a permutation (`full`)."""
    if squeeze:
        g = np.expand_dims(g, axis)
    out = _empty(shape, g.dtype)
    if not full:
        out.fill(0)
    np.put_along_axis(out, index, g, axis)
    return out


def _gather_rule(gg, index, axis, squeeze, full):
    """The scatter's adjoint: the gather again."""
    v = np.take_along_axis(gg, index, axis)
    return np.squeeze(v, axis) if squeeze else v


def _gather(name: str, x, index: np.ndarray, axis: int, squeeze: bool, full: bool) -> Tensor:
    """x's values at `index` along `axis` (squeezed there if `squeeze`), one node whose
    rule scatters the gradient back."""
    xd = _raw(x)
    v = _gather_rule(xd, index, axis, squeeze, full)
    return record(name, v, (x,), (_scatter_rule,), saved=(index,),
                  kwargs=dict(axis=axis, shape=xd.shape, squeeze=squeeze, full=full))


def _scatter(g, index: np.ndarray, axis: int, shape: tuple, squeeze: bool, full: bool):
    """The gather's gradient as an op of g (create_graph); its rule is the gather."""
    out = _scatter_rule(_raw(g), index, axis, shape, squeeze, full)
    return record("scatter_along_axis", out, (g,), (_gather_rule,), saved=(index,),
                  kwargs=dict(axis=axis, squeeze=squeeze, full=full))


_scatter_rule.graph_node = lambda g, node: _scatter(g, node.saved[0], **node.kwargs)
_gather_rule.graph_node = lambda gg, node: _gather(
    "take_along_axis", gg, node.saved[0], node.kwargs["axis"], node.kwargs["squeeze"],
    node.kwargs["full"])


def _argsort(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """Stable argsort; descending keeps ties in their order too, and NaN counts as the
    largest (first when descending, last otherwise), as PyTorch."""
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    # a stable ascending sort of the reversed slice, reversed: ties in original order
    i = np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
    return (x.shape[axis] - 1) - i


def _selection(name: str, input, axis, select, squeeze: bool):
    """`select(x, axis) -> (index, full)` run on the data; values gathered with a node.
    A 0-d input is treated as one element along axis 0 (PyTorch allows 0 and -1)."""
    x = _raw(input)
    ax = _dim(name, x.ndim, axis)
    if x.ndim == 0:
        values, indices = _selection(name, S.reshape(input, (1,)) if isinstance(input, Tensor)
                                     else x.reshape(1), 0, select, squeeze)
        return S.reshape(values, ()), Tensor._wrap(indices.data.reshape(()))
    index, full = select(x, ax)
    values = _gather(name, input, index, ax, squeeze, full)
    return values, Tensor._wrap(np.squeeze(index, ax) if squeeze else index)


@R.torch_names
def sort(input, axis: int = -1, descending: bool = False, *,
         stable: bool = False) -> tuple[Tensor, Tensor]:
    """(values, indices) sorted along `axis`; NaN counts as the largest. The sort is
    always stable (ties keep their order, `stable` is accepted for PyTorch's signature).
    The gradient goes back to each value's position."""
    values, indices = _selection(
        "sort", input, axis, lambda x, ax: (_argsort(x, ax, bool(descending)), True), False)
    return return_types.sort(values, indices)


@R.torch_names
def topk(input, k: int, axis: int = -1, largest: bool = True,
         sorted: bool = True) -> tuple[Tensor, Tensor]:
    """(values, indices) of the k largest (`largest=False`: smallest) along `axis`, in
    order (also when `sorted=False`, where PyTorch leaves the order unspecified)."""
    x = _raw(input)
    k = _int("topk", k, "k")
    n = x.shape[_dim("topk", x.ndim, axis)] if x.ndim else 1
    if not 0 <= k <= n:
        raise ValueError(f"topk: k ({k}) is out of range for a dimension of size {n}")

    def select(x, ax):
        order = _argsort(x, ax, bool(largest))
        return np.take(order, np.arange(k), axis=ax), k == n

    values, indices = _selection("topk", input, axis, select, False)
    return return_types.topk(values, indices)


@R.torch_names
def kthvalue(input, k: int, axis: int = -1, keepdims: bool = False) -> tuple[Tensor, Tensor]:
    """(values, indices) of the k-th smallest element (k from 1) along `axis`; NaN counts
    as the largest. The gradient goes to the selected element."""
    x = _raw(input)
    k = _int("kthvalue", k, "k")
    n = x.shape[_dim("kthvalue", x.ndim, axis)] if x.ndim else 1
    if not 1 <= k <= n:
        raise ValueError(f"kthvalue: k ({k}) is out of range for a dimension of size {n} "
                         f"(k counts from 1)")

    def select(x, ax):
        part = np.argpartition(x, k - 1, axis=ax)
        return np.take(part, [k - 1], axis=ax), n == 1

    values, indices = _selection("kthvalue", input, axis, select, not keepdims)
    return return_types.kthvalue(values, indices)


def _median_index(x: np.ndarray, ax: int):
    n = x.shape[ax]
    index = np.take(np.argpartition(x, (n - 1) // 2, axis=ax), [(n - 1) // 2], axis=ax)
    if x.dtype.kind == "f":          # a slice with a NaN: its first NaN (PyTorch)
        nan = np.isnan(x)
        if nan.any():
            index = np.where(nan.any(axis=ax, keepdims=True), nan.argmax(axis=ax, keepdims=True),
                             index)
    return index, n == 1


def _median_all(x, axis, keepdims):
    flat = x.reshape(-1)
    if flat.size == 0 or x.dtype.kind == "f" and np.isnan(flat).any():
        m = np.asarray(np.nan, x.dtype)
    else:
        m = np.partition(flat, (flat.size - 1) // 2)[(flat.size - 1) // 2]
    return np.reshape(m, (1,) * x.ndim if keepdims else ())


# over all elements, the rule is max's: ties (and NaNs) share evenly, as PyTorch's median()
_median_all_op = primitive("median", _median_all, R._extremum_vjp)


@R.torch_names
def median(input, axis=None, keepdims: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """The lower median (of an even count, the smaller of the two middle values); a NaN
    in a slice makes it NaN. `axis=None`: over all elements, a tensor (ties share the
    gradient evenly); an int: (values, indices) along it, the gradient to the index."""
    x = _raw(input)
    if axis is None:                 # of an empty tensor: NaN (PyTorch)
        return _median_all_op(input, axis=None, keepdims=bool(keepdims))
    _nonempty("median", x, _dim("median", x.ndim, axis))
    values, indices = _selection("median", input, axis, _median_index, not keepdims)
    return return_types.median(values, indices)


def extreme_along(name: str, input, dim: int, keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """`torch.max(input, dim)` / `torch.min(input, dim)`: `(values, indices)` of the first
    maximum (minimum; NaN wins, as in PyTorch) along `dim`; the gradient goes to that
    element only (a gather, as `sort`'s). `pa.max(x, dim=d)` lands here."""
    arg = np.argmax if name == "max" else np.argmin

    def select(x, ax):
        _nonempty(name, x, ax)  # PyTorch: "Expected reduction dim to have non-zero size"
        return np.expand_dims(arg(x, axis=ax), ax), x.shape[ax] == 1

    values, indices = _selection(name, input, dim, select, squeeze=not keepdim)
    return getattr(return_types, name)(values, indices)
