"""torch.linalg's norms: `vector_norm` (one declaration: forward, formula, kernel),
`matrix_norm` and `norm` (composites of vector_norm, svdvals, abs, sum, amax and amin, so
every order of gradient works through theirs).

vector_norm's gradient is torch's (norm_backward): 0 where the norm is 0; the inf-norms'
ties share the gradient equally (a NaN in the slice: its sign 0, and 0 for the slice).
Its kernel allocates only the gradient it returns (a boolean or reduced-size temporary
aside); its formula writes the same with ops, the piecewise-constant factors of the
orders 0, 1 and inf as functions of x with derivative 0 (`forms.depends_on`).

Thread safety: pure functions of their arguments, like the other ops.
"""
from __future__ import annotations

import numpy as np

from ...primitive import composite, defop
from ...tensor import Tensor
from .. import reduce as R
from .._common import P, buf, const, dims, empty
from ..forms import cast, depends_on
from ..shape import broadcast_to, permute, reshape, squeeze
from .checks import data, floating
from .decompositions import svdvals

__all__ = ["matrix_norm", "norm", "vector_norm"]


def _ord(name: str, ord) -> float:
    if isinstance(ord, (bool, str)) or not isinstance(ord, (int, float, np.integer,
                                                          np.floating)):
        raise TypeError(f"{name}: argument 'ord' must be a number (inf and -inf included), "
                        f"got {ord!r}")
    if np.isnan(ord):
        raise RuntimeError(f"{name}: ord must not be NaN")
    return float(ord)


def _axes(dim, ndim: int, name: str) -> tuple | None:
    """The reduced dimensions, normalised (None: all; a 0-d input has no dimension)."""
    if dim is None or ndim == 0:
        if ndim == 0 and dim is not None:
            dims(dim, 0, name)              # checked: 0 and -1 name a 0-d tensor's dim
        return None
    return dims(dim, ndim, name)


def _kept_shape(shape: tuple, axis, keepdim: bool) -> tuple:
    """The result's shape with the reduced dimensions kept as 1s (broadcasts over x)."""
    if axis is None:
        return (1,) * len(shape)
    return tuple(1 if d in axis else n for d, n in enumerate(shape))


def _norm(x: np.ndarray, p: float, axis, keepdim: bool) -> np.ndarray:
    # one temporary the size of x (|x|, x*x or |x|^p), reduced
    if p == 2:
        t = buf(P.multiply(x, x))
        return np.sqrt(np.sum(t, axis=axis, keepdims=keepdim))
    if p == 0:
        return np.count_nonzero(x, axis=axis, keepdims=keepdim).astype(x.dtype)
    t = buf(P.abs(x))
    if p == np.inf:
        return np.max(t, axis=axis, keepdims=keepdim)
    if p == -np.inf:
        return np.min(t, axis=axis, keepdims=keepdim)
    if p == 1:
        return np.sum(t, axis=axis, keepdims=keepdim)
    with np.errstate(divide="ignore", over="ignore"):
        np.power(t, p, out=t)
        return np.power(np.sum(t, axis=axis, keepdims=keepdim), 1.0 / p)


def _inf_norm_nan(mask, x):
    """PyTorch's inf-norm rule where the norm is NaN: its mask of maxima is
    `|x| == norm or isnan(x)`, scaled by sign(x), and its sign of NaN is 0. So the NaNs
    are counted but get 0, and a slice with a NaN gets 0 everywhere (not NaN: the count
    is not 0). The rare path: 2 passes and a boolean temporary."""
    mask += np.isnan(x)


def _inf_kernel(t, x, gr, a, axis):
    # sign(x) g / (number of ties) at |x| == norm (PyTorch): 5 passes, one buffer (t = |x|)
    nan = np.isnan(a).any()
    np.equal(t, a, out=t)
    if nan:                 # rare: see _inf_norm_nan
        _inf_norm_nan(t, x)
    count = t.sum(axis=axis, keepdims=True)
    np.copysign(t, x, out=t)
    if nan:
        t[np.isnan(x)] = 0
    t *= np.where(a == 0, 0.0, gr / count)
    return t


def _kernel(g, ans, x, ord, dim, keepdim, dtype):
    x = np.asarray(x)
    p, axis = float(ord), _axes(dim, x.ndim, "linalg.vector_norm")
    kept = _kept_shape(x.shape, axis, keepdim)
    gr = np.reshape(g, kept)
    if p == 0:                      # 1 pass
        t = empty(x.shape, np.result_type(g, x))
        t.fill(0)
        return t
    if p == 1:
        t = buf(P.sign(x))          # g sign(x): 2 passes
        t *= gr
        return t
    a = np.reshape(ans, kept)
    zero = a == 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if p == 2:                  # g x / norm, 0 where the norm is 0: 1 pass
            scale = np.where(zero, 0.0, gr / a)
            return buf(P.multiply(x, scale.astype(np.result_type(g, x), copy=False)))
        t = buf(P.abs(x))
        if abs(p) == np.inf:
            return _inf_kernel(t, x, gr, a, axis)
        # sign(x) |x|^(p-1) g / norm^(p-1), 0 where the norm is 0: 4 passes (p < 1: 5)
        np.power(t, p - 1, out=t)
        np.copysign(t, x, out=t)
        if p < 1:
            np.putmask(t, x == 0, 0)
        t *= np.where(zero, 0.0, gr / np.power(a, p - 1))
        return t


def _formula(g, ans, x, ord, dim, keepdim, dtype):
    xd = data(x)
    p, axis = float(ord), _axes(dim, xd.ndim, "linalg.vector_norm")
    kept = _kept_shape(xd.shape, axis, keepdim)
    gk = reshape(g, kept)
    if p in (0, 1) or abs(p) == np.inf:  # g times a piecewise-constant factor
        factor = _kernel(np.ones(np.shape(ans), data(ans).dtype), data(ans), xd, ord, dim,
                         keepdim, dtype)
        if p:                             # derivative 0 in x, as PyTorch's sgn and mask
            factor = depends_on(factor, x)
        return broadcast_to(gk, xd.shape) * factor
    a = reshape(ans, kept)
    zero = data(a) == 0
    safe = a + zero if zero.any() else a  # 1 where the norm is 0 (its factor is 0 there)
    scale = gk / safe if p == 2 else gk / safe ** (p - 1)
    if zero.any():
        scale = scale * ~zero
    if p == 2:
        return x * scale
    xzero = xd == 0
    magnitude = abs(x)
    if p < 1 and xzero.any():        # |x|^(p-1) is infinite at 0, where the factor is 0
        magnitude = magnitude + xzero
    scaled = magnitude ** (p - 1) * np.sign(xd)
    if p < 1 and xzero.any():
        scaled = scaled * ~xzero
    return scaled * scale


@defop(formula=_formula, kernel=_kernel, module="torch.linalg")
def vector_norm(x: Tensor, ord=2, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """The vector `ord`-norm over `dim` (None: every element), torch.linalg.vector_norm:
    any real ord, inf (max |x|), -inf (min |x|), 0 (count of nonzeros). `dtype`: x is cast
    to it first (no narrowing, as torch). Gradient: torch's (0 where the norm is 0; the
    inf-norms' ties share equally)."""
    name = "linalg.vector_norm"
    p = _ord(name, ord)
    a = np.asarray(x)
    if a.dtype.kind != "f":
        raise RuntimeError(f"{name}: Expected a floating point tensor as input. Got "
                           f"{a.dtype}")
    if dtype is not None:
        to = np.dtype(dtype)
        if not np.can_cast(a.dtype, to, "safe"):
            raise RuntimeError(f"{name}: the dtype of the input ({a.dtype}) should be "
                               f"convertible without narrowing to the specified dtype ({to})")
        a = a.astype(to, copy=False)
    axis = _axes(dim, a.ndim, name)
    # as torch: only an empty reduced dimension (or, without dims, an empty tensor)
    empty_reduced = (a.size == 0 and axis is None) or (axis is not None and
                                                       any(a.shape[d] == 0 for d in axis))
    if (p < 0 or np.isinf(p)) and empty_reduced:
        raise RuntimeError(f"{name}: the norm of order {ord} of an empty tensor is not "
                           "defined (the operation has no identity)")
    return _norm(a, p, axis, bool(keepdim))


_MATRIX_ORDS = ("fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf)


def _matrix_dims(name: str, dim, ndim: int) -> tuple:
    if isinstance(dim, (int, np.integer)) or len(tuple(dim)) != 2:
        raise RuntimeError(f"{name}: dim must be a 2-tuple, got {dim!r}")
    return dims(tuple(dim), ndim, name)


@composite(module="torch.linalg")
def matrix_norm(A: Tensor, ord="fro", dim=(-2, -1), keepdim: bool = False, *,
                dtype=None) -> Tensor:
    """The matrix norm over the two dimensions `dim` (torch.linalg.matrix_norm): 'fro',
    'nuc' (sum of singular values), 2 / -2 (largest / smallest singular value), 1 / -1
    (max / min column sum of |A|), inf / -inf (max / min row sum of |A|). Written with
    vector_norm, svdvals, abs, sum, amax and amin: their gradients, to any order."""
    name = "linalg.matrix_norm"
    if isinstance(ord, str) and ord not in ("fro", "nuc") or \
            not isinstance(ord, str) and (isinstance(ord, bool) or ord not in _MATRIX_ORDS):
        raise RuntimeError(f"{name}: Order {ord!r} not supported (one of 'fro', 'nuc', 1, "
                           f"-1, 2, -2, inf, -inf)")
    if dtype is not None:
        A = cast(A, np.dtype(dtype)) if isinstance(A, Tensor) else \
            np.asarray(A, dtype=dtype)
    a = floating(name, A)
    r, c = _matrix_dims(name, dim, a.ndim)
    if ord == "fro":
        return vector_norm(A, 2, (r, c), keepdim)
    A = const(a) if not isinstance(A, Tensor) else A
    if ord in ("nuc", 2, -2):
        rest = [d for d in range(a.ndim) if d not in (r, c)]
        s = svdvals(permute(A, rest + [r, c]))
        out = R.sum(s, -1) if ord == "nuc" else R.amax(s, -1) if ord == 2 else \
            R.amin(s, -1)
        if keepdim:
            out = reshape(out, tuple(1 if d in (r, c) else n for d, n in enumerate(a.shape)))
        return out
    # 1 / -1: reduce each column's sum over the rows; inf / -inf: each row's over the columns
    inner, outer = (r, c) if abs(ord) == 1 else (c, r)
    sums = R.sum(abs(A), inner, True)
    out = R.amax(sums, outer, True) if ord > 0 else R.amin(sums, outer, True)
    return out if keepdim else squeeze(out, (r, c))


@composite(module="torch.linalg")
def norm(input: Tensor, ord=None, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """torch.linalg.norm: a vector norm when `dim` is an int (or a 1-tuple), a matrix
    norm when it is a 2-tuple; with `dim=None`, the 2-norm of all elements when `ord` is
    None, else a vector or matrix norm of a 1-D or 2-D input."""
    name = "linalg.norm"
    nd = np.ndim(data(input))
    if dim is not None:
        ds = (dim,) if isinstance(dim, (int, np.integer)) else tuple(dim)
        if len(ds) == 1:
            if isinstance(ord, str):
                raise RuntimeError(f"{name}: ord {ord!r} is a matrix norm: dim must name two "
                                   "dimensions")
            return vector_norm(input, 2 if ord is None else ord, ds, keepdim, dtype=dtype)
        if len(ds) == 2:
            return matrix_norm(input, "fro" if ord is None else ord, ds, keepdim, dtype=dtype)
        raise RuntimeError(f"{name}: If dim is specified, it must be of length 1 or 2, got "
                           f"{dim!r}")
    if ord is None:
        return vector_norm(input, 2, None, keepdim, dtype=dtype)
    if nd == 1:
        return vector_norm(input, ord, None, keepdim, dtype=dtype)
    if nd == 2:
        return matrix_norm(input, ord, (-2, -1), keepdim, dtype=dtype)
    raise RuntimeError(f"{name}: if dim is not given but ord is, the input must be 1-D or "
                       f"2-D, got {nd}-D")
