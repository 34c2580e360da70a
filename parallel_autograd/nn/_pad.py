"""`F.pad` with PyTorch's arguments and modes: constant, reflect, replicate, circular.

`pad` is PyTorch's flat tuple, last dimension first: `(left, right)` pads the last dimension,
`(left, right, top, bottom)` the last two, and so on. A negative width crops, in every mode
as in PyTorch: constant and circular padding crop first (circular then wraps around the
cropped part), reflect and replicate read the uncropped input (the reflection of a cropped
side is still about the input's edge).

One op (`defop`): per padded dimension, each output position copies one input position (a
gather along that axis: one pass per dimension; constant mode: a fill and one copy), whose
derivative is `pad_backward`, the adjoint: per dimension, the slice of the gradient over the
copied interior plus, per padded position, its slice added onto the input position it
copied, in a fixed order (deterministic). The two are each other's derivative, so any order
of gradient works.

Thread safety: pure functions.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import not_implemented
from ..memory import empty
from ..ops._common import array, zeros
from ..primitive import defop
from ..tensor import Tensor

__all__ = ["pad", "pad_backward"]

_MODES = ("constant", "reflect", "replicate", "circular")


def _pairs(pad, ndim: int) -> list:
    """PyTorch's flat pad tuple as (before, after) per padded dimension, first dimension
    first."""
    try:
        flat = [int(p) for p in pad]
        if any(f != p for f, p in zip(flat, pad)):
            raise TypeError
    except (TypeError, ValueError):
        raise TypeError(f"pad: pad must be a sequence of ints, got {pad!r}") from None
    if len(flat) % 2:
        raise ValueError(f"pad: padding length must be divisible by 2, got {len(flat)}")
    if len(flat) // 2 > ndim:
        raise ValueError(f"pad: padding length {len(flat)} is too large for an input of "
                         f"{ndim} dimensions")
    return [(flat[i], flat[i + 1]) for i in range(len(flat) - 2, -1, -2)]


def _kept(n: int, a: int, b: int) -> tuple:
    """(lo, hi): the input positions a dimension of size `n` keeps after the crop of its
    negative widths."""
    return max(-a, 0), n - max(-b, 0)


def _check_mode(shape: tuple, widths: list, mode: str, value) -> None:
    """PyTorch's limits of the non-constant modes (RuntimeError-like cases as ValueError)."""
    if value is not None and value != 0:
        raise ValueError(f"pad: padding mode {mode!r} doesn't take in value argument")
    n = len(widths)
    if n > 3 or len(shape) < n + 1:
        raise NotImplementedError(
            f"pad: mode {mode!r} pads the last 1 to 3 dimensions of an input with at least "
            f"one more (batch or channel) dimension: got {n} padded of {len(shape)}")
    for d, (a, b) in zip(range(len(shape) - n, len(shape)), widths):
        size = shape[d]
        lo, hi = _kept(size, a, b)
        if mode == "circular":
            limit = hi - lo       # circular wraps around what the crop keeps
            if limit < 0 or (limit == 0 and max(a, b) > 0):
                raise ValueError(f"pad: negative padding {(a, b)} leaves nothing of "
                                 f"dimension {d} (size {size}) to wrap around")
        else:
            limit = size - 1 if mode == "reflect" else None
            if size + a + b < 1:
                raise ValueError(f"pad: input size {size} of dimension {d} is too small "
                                 f"for padding {(a, b)}: output size {size + a + b}")
        if limit is not None and max(a, b) > limit:
            raise ValueError(f"pad: {mode} padding of dimension {d} (size {size}) must be at "
                             f"most {limit}, got ({a}, {b})")


def _sources(n: int, a: int, b: int, mode: str) -> np.ndarray:
    """For each output position of a dimension of size `n` padded by (a, b), the input
    position it copies (PyTorch's: reflect and replicate index the whole input, circular
    wraps around the cropped part)."""
    j = np.arange(n + a + b)
    if mode == "circular":
        lo, hi = _kept(n, a, b)
        return lo + (j - max(a, 0)) % (hi - lo)
    i = j - a
    if mode == "replicate":
        return np.clip(i, 0, n - 1)
    if n == 1:
        return np.zeros_like(i)
    period = 2 * (n - 1)                                                 # reflect
    i = np.abs(i) % period
    return np.where(i >= n, period - i, i)


def _constant(x: np.ndarray, widths: list, value) -> np.ndarray:
    """Constant padding: the crop of the negative widths copied into an array filled with
    `value` (a fill and one copy)."""
    lead = x.ndim - len(widths)
    crop = (slice(None),) * lead + tuple(slice(*_kept(x.shape[lead + i], a, b))
                                         for i, (a, b) in enumerate(widths))
    kept = x[crop]
    out = empty(kept.shape[:lead] + tuple(m + max(a, 0) + max(b, 0) for m, (a, b) in
                                          zip(kept.shape[lead:], widths)), x.dtype)
    out.fill(0 if value is None else value)
    inner = (slice(None),) * lead + tuple(slice(max(a, 0), max(a, 0) + m) for m, (a, _) in
                                          zip(kept.shape[lead:], widths))
    out[inner] = kept
    return out


def _gathered(x: np.ndarray, widths: list, mode: str) -> np.ndarray:
    """reflect / replicate / circular: one gather per padded dimension."""
    y = x
    lead = x.ndim - len(widths)
    for d, (a, b) in enumerate(widths, lead):
        if a or b:
            src = _sources(y.shape[d], a, b, mode)
            shape = y.shape[:d] + (src.size,) + y.shape[d + 1:]
            # mode="clip" (the sources are in range): with out= numpy buffers otherwise
            y = np.take(y, src, axis=d, out=empty(shape, y.dtype), mode="clip")
    if y is x:
        y = empty(x.shape, x.dtype)
        np.copyto(y, x)
    return y


def _adjoint(g: np.ndarray, widths: list, mode: str, shape: tuple) -> np.ndarray:
    """The adjoint of `pad` for an input of `shape`: per padded dimension (the last first),
    the slice of g over the copied interior into a new array (zeros where the crop dropped
    input), then each padded position's slice added onto its source."""
    out = g
    lead = len(shape) - len(widths)
    for d in reversed(range(lead, len(shape))):
        a, b = widths[d - lead]
        if not (a or b):
            continue
        n = shape[d]
        lo, hi = _kept(n, a, b)
        j0 = max(a, 0)
        new = out.shape[:d] + (n,) + out.shape[d + 1:]
        res = (zeros if lo > 0 or hi < n else empty)(new, out.dtype)
        idx = [slice(None)] * out.ndim
        dst = [slice(None)] * out.ndim
        idx[d], dst[d] = slice(j0, j0 + hi - lo), slice(lo, hi)
        res[tuple(dst)] = out[tuple(idx)]
        if mode != "constant":
            src = _sources(n, a, b, mode)
            for j in list(range(j0)) + list(range(j0 + hi - lo, src.size)):
                idx[d], dst[d] = j, int(src[j])
                res[tuple(dst)] += out[tuple(idx)]
        out = res
    return out if out is not g else g.copy()


_NO_BOOL = {"reflect": "reflection_pad", "replicate": "replication_pad"}


def _pad_formula(g, ans, input, pad, mode, value):
    return pad_backward(g, pad, mode, np.shape(array(input)))


@defop(formula=_pad_formula, module="torch.nn.functional")
def pad(input: Tensor, pad, mode: str = "constant", value: float | None = None) -> Tensor:
    """Pad `input` (PyTorch's `F.pad`): `pad` = (left, right[, top, bottom[, front, back]])
    from the last dimension backwards, negative widths cropping; `mode` 'constant' (with
    `value`, default 0), 'reflect' (mirror without the edge; widths < the dimension),
    'replicate' (the edge value) or 'circular' (wrap around; widths <= the dimension after
    cropping). The non-constant modes pad at most the last 3 dimensions of an input with
    at least one more dimension. Its derivative is `pad_backward` (the adjoint)."""
    widths = _pairs(pad, input.ndim)
    if mode not in _MODES:
        raise NotImplementedError(f"pad: mode must be one of {_MODES}, got {mode!r}")
    if mode == "constant":
        for d, (a, b) in enumerate(widths, input.ndim - len(widths)):
            if input.shape[d] + a + b < 0:
                raise ValueError(f"pad: negative padding {(a, b)} of dimension {d} (size "
                                 f"{input.shape[d]}) gives a negative size")
        return _constant(input, widths, value)
    if mode in _NO_BOOL and input.dtype == np.bool_:  # (PyTorch's kernels of these modes)
        raise not_implemented(_NO_BOOL[mode], input.dtype)
    _check_mode(input.shape, widths, mode, value)
    return _gathered(input, widths, mode)


@defop(formula=lambda g, ans, input, **p: pad(g, p["pad"], p["mode"]), export=False)
def pad_backward(input: Tensor, pad, mode: str, input_size: tuple) -> Tensor:
    """`pad`'s adjoint as an op: the gradient of an input of shape `input_size` from the
    padded output's gradient `input` (each padded position added onto the position it
    copied). Its derivative is `pad` again."""
    widths = _pairs(pad, len(input_size))
    lead = len(input_size) - len(widths)
    want = tuple(input_size[:lead]) + tuple(
        n + a + b for n, (a, b) in zip(input_size[lead:], widths))
    if input.shape != want:
        raise ValueError(f"pad_backward: gradient of shape {input.shape} does not match the "
                         f"padded shape {want}")
    return _adjoint(input, widths, mode, tuple(input_size))
