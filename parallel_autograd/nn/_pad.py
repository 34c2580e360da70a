"""`F.pad` with PyTorch's arguments and modes: constant, reflect, replicate, circular.

`pad` is PyTorch's flat tuple, last dimension first: `(left, right)` pads the last dimension,
`(left, right, top, bottom)` the last two, and so on. Constant padding is `pa.pad` (negative
widths crop, as in PyTorch). The other modes are one op (`pad_mode`) whose output copies input
elements (numpy's `np.pad` with mode reflect, edge or wrap); its rule is the adjoint
(`pad_mode_backward`): the interior of the gradient plus, per padded position, its slice added
onto the input position it copied, one dimension at a time, in a fixed order (deterministic).
The two ops are each other's rule, so any order of gradient works.

Thread safety: pure functions.
"""
from __future__ import annotations

import numpy as np

from ..memory import empty as _empty
from ..ops import shape as S
from ..primitive import primitive
from ..tensor import Tensor

_NUMPY = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}
_MODES = ("constant",) + tuple(_NUMPY)


def pad(input: Tensor, pad, mode: str = "constant", value: float | None = None) -> Tensor:
    """Pad `input` (PyTorch's `F.pad`): `pad` = (left, right[, top, bottom[, front, back]])
    from the last dimension backwards; `mode` 'constant' (with `value`, default 0),
    'reflect' (mirror without the edge; widths < the dimension), 'replicate' (the edge
    value) or 'circular' (wrap around; widths <= the dimension). The non-constant modes pad
    at most the last 3 dimensions of a batched input, as in PyTorch."""
    x = input.data if isinstance(input, Tensor) else np.asarray(input)
    widths = _pairs(pad, x.ndim)
    if mode not in _MODES:
        raise NotImplementedError(f"pad: mode must be one of {_MODES}, got {mode!r}")
    if mode == "constant":
        return _constant(input, widths, 0.0 if value is None else value)
    if value is not None and value != 0:
        raise ValueError(f"pad: padding mode {mode!r} doesn't take in value argument")
    n = len(widths)
    if n > 3 or x.ndim < n + 1:
        raise NotImplementedError(
            f"pad: mode {mode!r} pads the last 1 to 3 dimensions of an input with at least "
            f"one more (batch or channel) dimension: got {n} padded of {x.ndim}")
    for d, (a, b) in zip(range(x.ndim - n, x.ndim), widths):
        size = x.shape[d]
        if min(a, b) < 0:
            raise ValueError(f"pad: negative padding is only supported in constant mode, "
                             f"got {pad}")
        limit = size - 1 if mode == "reflect" else size
        if max(a, b) > limit:
            raise ValueError(f"pad: {mode} padding of dimension {d} (size {size}) must be at "
                             f"most {limit}, got ({a}, {b})")
    pw = ((0, 0),) * (x.ndim - n) + tuple(widths)
    if not any(a or b for a, b in pw):
        return input if isinstance(input, Tensor) else Tensor(x)
    return _pad_mode(input, pw=pw, mode=mode)


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


def _constant(input, widths: list, value: float) -> Tensor:
    """Constant padding; negative widths crop first (PyTorch's semantics)."""
    x = input if isinstance(input, Tensor) else Tensor(np.asarray(input))
    lead = x.ndim - len(widths)
    crop = tuple([slice(None)] * lead + [slice(max(-a, 0), x.shape[lead + i] - max(-b, 0))
                                         for i, (a, b) in enumerate(widths)])
    if any(a < 0 or b < 0 for a, b in widths):
        x = x[crop]
    pw = [(0, 0)] * lead + [(max(a, 0), max(b, 0)) for a, b in widths]
    return S.pad(x, pw, value=value)


# ---- the op and its adjoint -------------------------------------------------------------------
def _pad_forward(x, pw, mode):
    return np.pad(x, pw, mode=_NUMPY[mode])  # the result: one pass


def _sources(n: int, before: int, after: int, mode: str) -> tuple:
    """For the padded positions of one dimension (before, then after), the input position
    each copies."""
    left = [_source(p - before, n, mode) for p in range(before)]
    right = [_source(n + k, n, mode) for k in range(after)]
    return left, right


def _source(i: int, n: int, mode: str) -> int:
    if mode == "replicate":
        return min(max(i, 0), n - 1)
    if mode == "circular":
        return i % n
    period = 2 * (n - 1)  # reflect
    i = abs(i) % period
    return period - i if i >= n else i


def _pad_backward(g, pw, mode):
    """The adjoint of `_pad_forward`: one dimension at a time, the interior slice (a copy the
    size of the shrunk gradient) plus each padded slice added onto its source slice. Per
    padded dimension one pass over the result plus one over the padded border."""
    out = g
    for d, (a, b) in enumerate(pw):
        if not (a or b):
            continue
        n = out.shape[d] - a - b
        idx = [slice(None)] * out.ndim
        idx[d] = slice(a, a + n)
        shrunk = _empty(out.shape[:d] + (n,) + out.shape[d + 1:], out.dtype)
        np.copyto(shrunk, out[tuple(idx)])
        left, right = _sources(n, a, b, mode)
        for pos, src in list(enumerate(left)) + [(a + n + k, s) for k, s in enumerate(right)]:
            dst = [slice(None)] * out.ndim
            dst[d] = src
            idx[d] = pos
            shrunk[tuple(dst)] += out[tuple(idx)]
        out = shrunk
    return out if out is not g else g.copy()


def _unpad_forward(g, pw, mode):
    return _pad_backward(g, pw, mode)


_pad_mode = primitive("pad_mode", _pad_forward,
                      lambda g, ans, x, pw, mode: _pad_backward(g, pw, mode),
                      cost=lambda ans, x, *_: 2 * ans.size)
_unpad = primitive("pad_mode_backward", _unpad_forward,
                   lambda g, ans, gy, pw, mode: _pad_forward(g, pw, mode),
                   cost=lambda ans, gy, *_: 2 * gy.size)
_pad_mode.vjps[0].graph = lambda g, ans, x, pw, mode: _unpad(g, pw=pw, mode=mode)
_unpad.vjps[0].graph = lambda g, ans, gy, pw, mode: _pad_mode(g, pw=pw, mode=mode)
