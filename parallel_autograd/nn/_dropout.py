"""Dropout, PyTorch's family: dropout, dropout1d/2d/3d (whole channels), alpha_dropout and
feature_alpha_dropout (SELU networks' kind, keeping the mean and variance).

Each is a composite that draws a keep mask (Bernoulli(1 - p): one boolean per element, or
per (sample, channel) for the channel-wise ones) and applies it with one declared op,
`dropout`'s node (`apply_mask`: `x * keep * scale (+ offset)`), whose derivative is
`g * keep * scale`. The node keeps the boolean mask (1 byte an element) and nothing else:
not the input, not the output (no rule reads them). Forward and kernel are 2 passes each.

Random draws: from `rng` (a numpy Generator), or a fresh generator seeded with `seed` (the
same seed gives the same mask), or else the current generator (the default one that
`pa.manual_seed` reseeds), each seen through `random.resolve_generator`, so a
`pa.checkpoint` segment records its draws and replays them in its recomputation. The
mask is drawn in blocks of 32,768 into one cached buffer: the same draws as one
`rng.random(shape) >= p` without its full-size float64 temporary.

`inplace=True` (PyTorch's keyword): computed out of place here; the forms
`nn.functional` exports write the result into the input, as PyTorch's (ops/writes/
inplace.py `inplace_form`), as for the activations. Identity (the input itself) when not
training or p == 0.

Thread safety: concurrent calls draw from the generator under its lock (which call gets
which mask depends on scheduling); otherwise pure functions.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from ..memory import pooled as P
from ..ops._common import default_float, empty, zeros
from ..primitive import composite, defop
from ..random import SegmentDraws, resolve_generator
from ..tensor import Tensor

__all__ = ["dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
           "feature_alpha_dropout", "apply_mask", "keep_mask", "draws_from"]

_DRAWS = 32768          # draws per block: 256 KiB of float64, cache resident
_SELU_ALPHA = 1.7580993408473766  # PyTorch's alpha_dropout constant (SELU's -alpha scale)


# ---- the declared op ------------------------------------------------------------------------
def _mask_kernel(g, ans, input, mask, scale, offset):
    # g * keep * scale: 2 passes, the result the only allocation
    out = P.multiply(g, mask)
    out *= scale
    return out


def _mask_formula(g, ans, input, mask, scale, offset):
    return g * (mask * scale)


@defop(formula=_mask_formula, kernel=_mask_kernel, unsaved=("input", "result"),
       export=False, name="dropout")
def apply_mask(input: Tensor, mask: Tensor, scale, offset=None) -> Tensor:
    """`input * mask * scale + offset`, the mask boolean (broadcasting against the input:
    per element, or per channel), `offset` None or an array (alpha dropout's). Integers
    and booleans are computed in the default dtype."""
    x = np.asarray(input)
    dtype = x.dtype if x.dtype.kind == "f" else default_float()
    shape = np.broadcast_shapes(x.shape, np.shape(mask))
    if x.dtype == dtype and shape == x.shape:       # the loop `dtype=` would pick
        out = P.multiply(x, mask)
    else:                                           # integers, as floats
        out = np.multiply(x, mask, dtype=dtype,
                          **(dict(out=empty(shape, dtype)) if len(shape) else {}))
    out *= dtype.type(scale)
    if offset is not None:
        out += offset
    return out


# ---- the masks ------------------------------------------------------------------------------
def keep_mask(shape: tuple, p: float, rng) -> np.ndarray:
    """Bernoulli(1 - p) keep mask (bool) of `shape`, drawn in blocks: the same draws as
    one `rng.random(shape) >= p` without its full-size float64 temporary."""
    keep = empty(shape, bool)
    flat = keep.reshape(-1)
    # the draws into one cached block buffer (a Generator fills `out` with the draws
    # `random(size)` returns)
    buf = empty(min(flat.size, _DRAWS), np.float64) \
        if isinstance(rng, (np.random.Generator, SegmentDraws)) else None
    for a in range(0, flat.size, _DRAWS):
        b = min(flat.size, a + _DRAWS)
        u = rng.random(b - a) if buf is None else rng.random(out=buf[:b - a])
        np.greater_equal(u, p, out=flat[a:b])
    return keep


def draws_from(seed=None, rng=None):
    """What a mask is drawn from: `rng`, else a fresh generator from `seed`, else the
    current one (the default generator that `pa.manual_seed` reseeds); a Generator seen
    through `resolve_generator`, so a `pa.checkpoint` segment records and replays it."""
    if rng is not None:
        return resolve_generator(rng) if isinstance(rng, np.random.Generator) else rng
    return resolve_generator(None) if seed is None else np.random.default_rng(seed)


def _check_p(p) -> float:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    return float(p)


def _data(input) -> np.ndarray:
    return input._data if isinstance(input, Tensor) else np.asarray(input)


def _dropped(input, p: float, mask_shape: tuple, alpha: bool, seed, rng):
    """`input` through one drawn mask of `mask_shape` (PyTorch's `_dropout_impl`): scaled
    by 1/(1-p), or alpha dropout's affine map keeping the SELU statistics."""
    if p == 1.0:                                    # every element dropped: x * 0
        keep, scale = zeros(mask_shape, bool), 0.0
    else:
        keep = keep_mask(mask_shape, p, draws_from(seed, rng))
        scale = 1.0 / (1.0 - p)
    offset = None
    if alpha and p < 1.0:
        a = 1.0 / math.sqrt((_SELU_ALPHA * _SELU_ALPHA * p + 1) * (1 - p))
        scale = a
        dtype = _data(input).dtype if _data(input).dtype.kind == "f" else default_float()
        # b = (keep - 1) alpha a + alpha a p: alpha a (p - 1) where dropped, alpha a p kept
        offset = np.where(keep, _SELU_ALPHA * a * p, _SELU_ALPHA * a * (p - 1)).astype(dtype)
    return apply_mask(input, keep, scale, offset)


def _feature_shape(shape: tuple) -> tuple:
    """A channel-wise mask's shape: one draw per (sample, channel), (N, C, 1, ...)."""
    return shape[:2] + (1,) * (len(shape) - 2)


# ---- the functions ------------------------------------------------------------------------
@composite(module="torch.nn.functional")
def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False, *,
            seed=None, rng=None, generator=None) -> Tensor:
    """Zero each element with probability `p` and scale the rest by 1/(1-p); the input
    itself when not training or p == 0. The mask comes from `generator` (or `rng`, its
    older name: a `pa.Generator` or numpy Generator), or a fresh generator seeded with
    `seed` (the same seed gives the same mask), or else the default generator that
    `pa.manual_seed` reseeds. `inplace`: see the module docstring."""
    p = _check_p(p)
    if generator is not None:
        if rng is not None:
            raise TypeError("dropout: give generator= or rng= (the same thing), not both")
        rng = generator
    if not training or p == 0.0:
        return input
    return _dropped(input, p, np.shape(_data(input)), False, seed, rng)


@composite(module="torch.nn.functional")
def alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False,
                  inplace: bool = False, *, seed=None, rng=None) -> Tensor:
    """Alpha dropout (for SELU networks): dropped elements are set to SELU's negative
    saturation value and the result is affinely corrected so that inputs of zero mean and
    unit variance keep them (PyTorch's constants). Not training (the default) or p == 0:
    the input itself."""
    p = _check_p(p)
    if not training or p == 0.0:
        return input
    return _dropped(input, p, np.shape(_data(input)), True, seed, rng)


@composite(module="torch.nn.functional")
def feature_alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False,
                          inplace: bool = False, *, seed=None, rng=None) -> Tensor:
    """alpha_dropout with one draw per (sample, channel) of an (N, C, *) input: whole
    channels are dropped together."""
    p = _check_p(p)
    if not training or p == 0.0:
        return input
    return _dropped(input, p, _feature_shape(np.shape(_data(input))), True, seed, rng)


def _channel_dropout(name: str, input, p: float, training: bool, spatial: int, seed, rng):
    """dropout1d/2d/3d: one draw per (sample, channel) of an (N, C, *spatial) input, or of
    a (C, *spatial) one (no batch dimension) for 1d and 3d; PyTorch's checks and warnings
    (dropout2d reads a 3-D input as (N, C, L), as PyTorch still does)."""
    p = _check_p(p)
    shape = np.shape(_data(input))
    dims = (spatial + 1, spatial + 2)
    if len(shape) not in dims:
        if spatial == 1:
            raise RuntimeError(f"dropout1d: Expected 2D or 3D input, but received a "
                               f"{len(shape)}D input")
        warnings.warn(f"{name}: Received a {len(shape)}-D input to {name}, which is "
                      f"deprecated and will result in an error in a future release (PyTorch "
                      f"still accepts it); use dropout for element-wise dropout",
                      stacklevel=3)
    if not training or p == 0.0:
        return input
    batched = len(shape) == dims[1] or spatial == 2
    if batched:
        return _dropped(input, p, _feature_shape(shape), False, seed, rng)
    return _dropped(input, p, _feature_shape((1,) + shape)[1:], False, seed, rng)  # (C, 1..)


@composite(module="torch.nn.functional")
def dropout1d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False, *,
              seed=None, rng=None) -> Tensor:
    """Channel-wise dropout of (N, C, L) or (C, L) inputs: each channel of each sample is
    zeroed with probability p (the others scaled by 1/(1-p))."""
    return _channel_dropout("dropout1d", input, p, training, 1, seed, rng)


@composite(module="torch.nn.functional")
def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False, *,
              seed=None, rng=None) -> Tensor:
    """Channel-wise dropout of (N, C, H, W) inputs (a 3-D input is read as (N, C, L), with
    PyTorch's warning)."""
    if np.ndim(_data(input)) == 3:
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that "
                      "channel-wise 1D dropout behavior is desired - input is interpreted as "
                      "shape (N, C, L), as PyTorch does; use dropout1d instead",
                      stacklevel=2)
    return _channel_dropout("dropout2d", input, p, training, 2, seed, rng)


@composite(module="torch.nn.functional")
def dropout3d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False, *,
              seed=None, rng=None) -> Tensor:
    """Channel-wise dropout of (N, C, D, H, W) or (C, D, H, W) inputs."""
    return _channel_dropout("dropout3d", input, p, training, 3, seed, rng)

