"""Resampling: `interpolate` (nearest, nearest-exact, linear, bilinear, bicubic, trilinear,
area), `upsample`, `upsample_nearest`, `upsample_bilinear`, `adaptive_avg_pool1d/2d`,
`pixel_shuffle`, `pixel_unshuffle`, each one declaration (`defop` / `composite`).

interpolate and the adaptive average pools are separable linear maps: one small matrix
per spatial dim (output size x input size, PyTorch's source-index formulas and weights),
applied along its axis: a gather (`take`, one pass) when every row picks one input
(nearest), else one GEMM (the last axis: all rows of the input at once; the others:
batched over the leading dims). The map's adjoint is the same maps transposed, so the
derivative is `resample` (an internal op: a separable map given by its matrices) of the
transposed maps, whose own derivative is the maps again: every order of derivative runs
these kernels. The matrices cost O(out * in) per dim: cheap next to the data for images
of a few hundred pixels a side; the GEMMs do about in_h + in_w * in_h / out_h
multiply-adds per output of an (in_h, in_w) plane where a dedicated kernel would do 2 to
4 (2x upsampling of 512 x 512 planes: ~770).

uint8 images (bilinear, bicubic) keep their dtype, computed as PyTorch computes them
(after Pillow): per dim, the last first, the float path's weights (those of taps
outside the input folded onto the border tap) in int16 fixed point, and a rounding shift
into a uint8 intermediate.

pixel_shuffle and pixel_unshuffle are permutations of the elements: one transposing copy
each, and each is the other's derivative.

Thread safety: pure functions of their arguments.
"""
from __future__ import annotations

import math

import numpy as np

from .. import memory
from ..memory import empty
from ..ops._common import reshaped
from ..primitive import Saved, composite, defop
from ..tensor import Tensor
from ._windows import adaptive_bounds, adaptive_output_size, positive_int

__all__ = ["interpolate", "upsample", "upsample_nearest", "upsample_bilinear",
           "adaptive_avg_pool1d", "adaptive_avg_pool2d", "pixel_shuffle", "pixel_unshuffle",
           "resample"]


# ---- separable linear maps ----------------------------------------------------------------
def _axis_map(m: np.ndarray) -> tuple:
    """(matrix, index): the matrix of one dim's map, and the input index of each output
    when every row is a single 1 (a gather), else None."""
    m = np.ascontiguousarray(m, dtype=np.float64)
    idx = m.argmax(axis=1)
    rows = np.arange(m.shape[0])
    if np.count_nonzero(m) == m.shape[0] and (m[rows, idx] == 1).all():
        return m, idx
    return m, None


def _transposed(maps) -> tuple:
    return tuple(_axis_map(m.T) for m, _ in maps)


def _apply(x: np.ndarray, maps) -> np.ndarray:
    """`x` with map d applied along trailing spatial axis d: a gather (one pass) or a
    GEMM per axis, the last axis first; a new C-contiguous array. Passes: one per
    (non-identity) axis, each writing a new array: the result, and before it one
    intermediate per further axis (the only temporaries)."""
    nd = len(maps)
    y = x
    for d in reversed(range(nd)):
        m, idx = maps[d]
        axis = y.ndim - nd + d
        if idx is not None:
            if idx.shape[0] == y.shape[axis] and (idx == np.arange(idx.shape[0])).all():
                continue                                       # identity
            shape = y.shape[:axis] + idx.shape + y.shape[axis + 1:]
            # mode="clip" (the indices are in range): with out= and the default
            # mode="raise", numpy buffers the whole result in a temporary
            y = np.take(y, idx, axis=axis, out=empty(shape, y.dtype), mode="clip")
            continue
        mt = m.astype(np.result_type(y.dtype, np.float32), copy=False)
        if axis == y.ndim - 1:
            r = memory.matmul(reshaped(y, (-1, y.shape[-1])), mt.T)
            y = r.reshape(y.shape[:-1] + (m.shape[0],))
        else:
            # one batched GEMM over y with the axis moved next to last, written through
            # the same view of a new C-contiguous array (no strided result to copy)
            r = empty(y.shape[:axis] + (m.shape[0],) + y.shape[axis + 1:],
                       np.result_type(mt, y))
            np.matmul(mt, np.moveaxis(y, axis, -2), out=np.moveaxis(r, axis, -2))
            y = r
    if y is x or not y.flags.c_contiguous:
        out = empty(y.shape, y.dtype)
        np.copyto(out, y)
        y = out
    return y


def _transposed_apply(g, ans, input, *extras, **_):
    # the adjoint: the same maps transposed (a GEMM per dim, or a gather); the maps are
    # the forward's (its saved extra)
    return _apply(g, _transposed(extras[0]))


@defop(formula=lambda g, ans, input, maps: resample(g, _transposed(maps)),
       kernel=lambda g, ans, input, maps: _apply(g, _transposed(maps)), export=False)
def resample(input: Tensor, maps: tuple) -> Tensor:
    """The separable linear map `maps` (one (matrix, gather index or None) per trailing
    spatial dim, `_axis_map`'s) applied to `input`; its derivative is the transposed map,
    this op again."""
    return _apply(input, maps)


def _shape(t) -> tuple:
    return tuple(np.shape(t._data if isinstance(t, Tensor) else t))


# ---- adaptive average pooling --------------------------------------------------------------
def _adaptive_avg_map(size: int, n_out: int) -> tuple:
    """Rows averaging PyTorch's windows [floor(i*size/n_out), ceil((i+1)*size/n_out))."""
    start, end = adaptive_bounds(size, n_out)
    cols = np.arange(size)
    inside = (cols >= start[:, None]) & (cols < end[:, None])
    return _axis_map(inside / (end - start)[:, None])


def _adaptive_maps(name, nd, shape, output_size) -> tuple:
    if len(shape) not in (nd + 1, nd + 2) or 0 in shape[-nd:]:
        raise ValueError(f"{name}: expected a {nd + 1}-D or {nd + 2}-D input with non-empty "
                         f"spatial dims, got shape {tuple(shape)}")
    sizes = tuple(shape[-nd:])
    out = adaptive_output_size(name, output_size, sizes)
    return tuple(_adaptive_avg_map(n, o) for n, o in zip(sizes, out))


def _floating(name: str, x) -> None:
    if x.dtype.kind not in "fc":
        raise NotImplementedError(f"{name}: not implemented for {x.dtype} input (a floating "
                                  f"dtype, as PyTorch)")


def _adaptive_avg(name, nd, input, output_size):
    _floating(name, input)
    maps = _adaptive_maps(name, nd, input.shape, output_size)
    return Saved(_apply(input, maps), maps)


@defop(formula=lambda g, ans, input, output_size: resample(g, _transposed(_adaptive_maps(
       "adaptive_avg_pool1d", 1, _shape(input), output_size))), kernel=_transposed_apply,
       module="torch.nn.functional", also=("torch",))
def adaptive_avg_pool1d(input: Tensor, output_size) -> Tensor:
    """Mean over `output_size` adaptive windows of input (N, C, L) (or (C, L)): window i
    spans [floor(i*L/out), ceil((i+1)*L/out)), PyTorch's. One GEMM (the map's matrix)."""
    return _adaptive_avg("adaptive_avg_pool1d", 1, input, output_size)


@defop(formula=lambda g, ans, input, output_size: resample(g, _transposed(_adaptive_maps(
       "adaptive_avg_pool2d", 2, _shape(input), output_size))), kernel=_transposed_apply,
       module="torch.nn.functional")
def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:
    """Mean over adaptive windows of NCHW input (or CHW) giving `output_size` (int or
    pair; None keeps that input size): rows [floor(i*H/Ho), ceil((i+1)*H/Ho)), columns
    alike, PyTorch's. Separable: one GEMM per spatial dim; the derivative is the
    transposed map."""
    return _adaptive_avg("adaptive_avg_pool2d", 2, input, output_size)


# ---- interpolate ---------------------------------------------------------------------------
_LINEAR = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}
_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear", "area")


def _nearest_map(n_in: int, n_out: int, scale, exact: bool) -> tuple:
    """PyTorch's nearest source index min(floor(i*s), n_in-1) (nearest-exact: floor((i +
    0.5)*s)), s = 1/scale_factor when given, else n_in/n_out, computed in float32 as its
    kernel does."""
    s = np.float32(1.0 / scale) if scale else np.float32(n_in) / np.float32(n_out)
    i = np.arange(n_out, dtype=np.float64)
    real = ((i + 0.5) if exact else i) * np.float64(s)
    src = np.minimum(np.floor(real.astype(np.float32)).astype(np.int64), n_in - 1)
    if not exact and n_out == n_in:
        src = np.arange(n_out)
    m = np.zeros((n_out, n_in))
    m[np.arange(n_out), src] = 1.0
    return _axis_map(m)


def _source_index(n_in, n_out, scale, align_corners, cubic) -> np.ndarray:
    """PyTorch's area_pixel_compute_source_index for every output index (float64)."""
    i = np.arange(n_out, dtype=np.float64)
    if align_corners:
        return i * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
    s = 1.0 / scale if scale else n_in / n_out
    real = s * (i + 0.5) - 0.5
    return real if cubic else np.maximum(real, 0.0)


def _linear_map(n_in, n_out, scale, align_corners) -> tuple:
    """Rows of PyTorch's linear interpolation weights: (1 - l) at floor(src), l at the
    next index (the same at the last); the identity when the sizes match."""
    if n_in == n_out:
        return _axis_map(np.eye(n_in))
    real = _source_index(n_in, n_out, scale, align_corners, False)
    i0 = np.minimum(np.floor(real).astype(np.int64), n_in - 1)
    lam = np.clip(real - i0, 0.0, 1.0)
    i1 = i0 + (i0 < n_in - 1)
    m = np.zeros((n_out, n_in))
    rows = np.arange(n_out)
    np.add.at(m, (rows, i0), 1.0 - lam)
    np.add.at(m, (rows, i1), lam)
    return _axis_map(m)


def _cubic_map(n_in, n_out, scale, align_corners) -> tuple:
    """Rows of PyTorch's bicubic weights (cubic convolution, A = -0.75) over indices
    floor(src) - 1 .. + 2 clamped to the input (no shortcut at equal sizes: PyTorch's
    bicubic takes the scale factor there too)."""
    a = -0.75
    real = _source_index(n_in, n_out, scale, align_corners, True)
    i0 = np.minimum(np.floor(real).astype(np.int64), n_in - 1)
    t = np.clip(real - i0, 0.0, 1.0)

    def near(x):     # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):      # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    weights = (far(t + 1), near(t), near(1 - t), far(2 - t))
    m = np.zeros((n_out, n_in))
    rows = np.arange(n_out)
    for k, wk in enumerate(weights):
        np.add.at(m, (rows, np.clip(i0 - 1 + k, 0, n_in - 1)), wk)
    return _axis_map(m)


def _interpolate_maps(shape, size, scale_factor, mode, align_corners, recompute,
                      antialias) -> tuple:
    """(output spatial sizes, scale factors per dim (None: from the sizes), the separable
    maps) of `interpolate` on an input of `shape`, with PyTorch's checks."""
    if mode not in _MODES:
        raise ValueError(f"interpolate: mode must be one of {', '.join(_MODES)}, got "
                         f"{mode!r}")
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported")
    nd = len(shape) - 2
    if nd < 1 or nd > 3:
        raise ValueError(f"interpolate: expected a 3-D, 4-D or 5-D input (N, C, *spatial), "
                         f"got shape {tuple(shape)}")
    if mode in _LINEAR and _LINEAR[mode] != nd:
        raise ValueError(f"interpolate: mode {mode!r} needs a {_LINEAR[mode] + 2}-D input, "
                         f"got shape {tuple(shape)}")
    if mode not in _LINEAR and align_corners is not None:
        raise ValueError("interpolate: align_corners option can only be set with the "
                         "interpolating modes: linear | bilinear | bicubic | trilinear")
    sizes = tuple(shape[2:])
    out, scales = _output_size(sizes, size, scale_factor, recompute, mode == "area")
    if 0 in sizes:
        raise ValueError(f"interpolate: input of shape {tuple(shape)} has an empty spatial "
                         f"dim")
    if mode == "area":
        maps = tuple(_adaptive_avg_map(n, o) for n, o in zip(sizes, out))
    elif mode in ("nearest", "nearest-exact"):
        maps = tuple(_nearest_map(n, o, s, mode == "nearest-exact")
                     for n, o, s in zip(sizes, out, scales))
    else:
        make = _cubic_map if mode == "bicubic" else _linear_map
        maps = tuple(make(n, o, s, bool(align_corners)) for n, o, s in zip(sizes, out, scales))
    return out, scales, maps


def _interpolate_formula(g, ans, input, size, scale_factor, mode, align_corners,
                         recompute_scale_factor, antialias):
    maps = _interpolate_maps(_shape(input), size, scale_factor, mode, align_corners,
                             recompute_scale_factor, antialias)[2]
    return resample(g, _transposed(maps))


@defop(formula=_interpolate_formula, kernel=_transposed_apply, module="torch.nn.functional",
       dtypes=("uint8", "floating"))
def interpolate(input: Tensor, size=None, scale_factor=None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Tensor:
    """Resample the spatial dims of input (N, C, *spatial), PyTorch's `F.interpolate`.

    `size` (the output's spatial size) or `scale_factor` (output size floor(in *
    factor); the factor also sets the source indices unless `recompute_scale_factor`).
    Modes: 'nearest' (source index floor(i * in/out), PyTorch's), 'nearest-exact',
    'linear' (3-D input), 'bilinear' and 'bicubic' (4-D), 'trilinear' (5-D), with
    `align_corners`, and 'area' (adaptive average pooling). A separable map (a gather or
    a GEMM per spatial dim) whose derivative is the transposed map. A uint8 image keeps
    its dtype (nearest, bilinear, bicubic), rounded as PyTorch rounds it.
    """
    out, scales, maps = _interpolate_maps(input.shape, size, scale_factor, mode, align_corners,
                                          recompute_scale_factor, antialias)
    if input.dtype.kind not in "fc" and mode not in ("nearest", "nearest-exact"):
        if input.dtype != np.uint8 or mode not in ("bilinear", "bicubic"):
            raise NotImplementedError(f"interpolate: mode {mode!r} is not implemented for "
                                      f"{input.dtype} input (PyTorch's: floating dtypes, "
                                      f"and uint8 for bilinear and bicubic)")
        return _uint8_resize(input, out, scales, mode == "bicubic", bool(align_corners))
    return Saved(_apply(input, maps), maps)


def _output_size(sizes, size, scale_factor, recompute, area) -> tuple:
    """(output sizes, scale factors or None per dim), as F.interpolate computes them."""
    nd = len(sizes)
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: exactly one of size or scale_factor should be "
                         "defined")
    if size is not None:
        if recompute:
            raise ValueError("interpolate: recompute_scale_factor is not meaningful with "
                             "an explicit size")
        out = (size,) * nd if isinstance(size, (int, np.integer)) else tuple(size)
        if len(out) != nd or any(isinstance(o, bool) or not isinstance(o, (int, np.integer))
                                 or o < 1 for o in out):
            raise ValueError(f"interpolate: size must be a positive int or {nd} of them, "
                             f"got {size!r}")
        return tuple(int(o) for o in out), (None,) * nd
    sf = (scale_factor,) * nd if isinstance(scale_factor, (int, float, np.number)) \
        else tuple(scale_factor)
    if len(sf) != nd or any(not float(s) > 0 for s in sf):
        raise ValueError(f"interpolate: scale_factor must be a positive number or {nd} of "
                         f"them, got {scale_factor!r}")
    out = tuple(math.floor(float(n) * float(s)) for n, s in zip(sizes, sf))
    if any(o < 1 for o in out):
        raise ValueError(f"interpolate: scale_factor {scale_factor!r} gives an empty output "
                         f"{out} for input size {sizes}")
    if recompute or area:
        return out, (None,) * nd
    return out, tuple(float(s) for s in sf)


# ---- uint8 images: PyTorch's (Pillow's) fixed-point separable resize -------------------------
def _linear_filter(x: float) -> float:
    x = abs(x)
    return 1.0 - x if x < 1.0 else 0.0


def _cubic_filter(x: float, a: float = -0.75) -> float:
    """Cubic convolution (A = -0.75, the float path's), PyTorch's evaluation order."""
    x = abs(x)
    if x < 1.0:
        return ((a + 2) * x - (a + 3)) * x * x + 1
    if x < 2.0:
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return 0.0


def _int16_weights(n_in: int, n_out: int, scale, cubic: bool, align_corners: bool) -> tuple:
    """(first input index per output (n_out,), int weights (n_out, k), precision) of one
    dim, PyTorch's `_compute_indices_min_size_weights` and `_compute_index_ranges_int16_
    weights`: the float path's source index and weights, those of taps outside the input
    folded onto the border tap, in fixed point at the precision the largest (running)
    weight allows in int16."""
    k = 4 if cubic else 2
    if align_corners:
        s = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        real = s * np.arange(n_out)
    else:
        s = 1.0 / scale if scale else n_in / n_out
        real = s * (np.arange(n_out) + 0.5) - 0.5
        if not cubic:
            real = np.maximum(real, 0.0)
    # guard_index_and_lambda (its floor is floorf: of the index as a float32)
    index = np.minimum(np.floor(real.astype(np.float32)).astype(np.int64), n_in - 1)
    lam = np.clip(real - index, 0.0, 1.0)
    support = k // 2
    lo = index - support + 1
    first = np.maximum(lo, 0)
    size = np.clip(np.minimum(index + support + 1, n_in) - first, 0, k)
    filt = _cubic_filter if cubic else _linear_filter
    w = np.zeros((n_out, k))
    w_max = 0.0
    for i in range(n_out):                 # small: one row of k taps per output
        at = 0
        for j in range(k):
            if lo[i] + j <= 0:
                at = 0
            elif lo[i] + j >= n_in - 1:
                at = size[i] - 1
            w[i, at] += filt(j + 1 - support - lam[i])
            w_max = max(w_max, w[i, at])
            at += 1
    precision = 0
    while precision < 22 and int(0.5 + w_max * (1 << (precision + 1))) < (1 << 15):
        precision += 1
    v = w * (1 << precision)
    return first, np.trunc(v + np.where(v < 0, -0.5, 0.5)).astype(np.int64), precision


def _uint8_resize(x: np.ndarray, out: tuple, scales: tuple, cubic: bool,
                  align_corners: bool) -> np.ndarray:
    """A uint8 image resized per spatial dim (the last first; a dim of unchanged size is
    left alone), each pass rounding into a uint8 intermediate: out = clamp((sum w_int *
    x + 2^(p-1)) >> p, 0, 255), PyTorch's bilinear/bicubic on uint8."""
    y = x
    nd = len(out)
    for d in reversed(range(nd)):
        axis = y.ndim - nd + d
        n_in = y.shape[axis]
        if out[d] == n_in:
            continue
        xmin, w, p = _int16_weights(n_in, out[d], scales[d], cubic, align_corners)
        shape = [1] * y.ndim
        shape[axis] = out[d]
        acc = np.full(1, 1 << (p - 1), np.int64) if p else np.zeros(1, np.int64)
        for j in range(w.shape[1]):
            src = np.take(y, np.minimum(xmin + j, n_in - 1), axis=axis).astype(np.int64)
            acc = acc + src * w[:, j].reshape(shape)
        y = np.clip(acc >> p, 0, 255).astype(np.uint8)
    return y if y is not x else x.copy()


@composite(dtypes=("uint8", "floating"), module="torch.nn.functional")
def upsample(input, size=None, scale_factor=None, mode: str = "nearest", align_corners=None):
    """`interpolate` (PyTorch's deprecated alias)."""
    return interpolate(input, size, scale_factor, mode, align_corners)


@composite(dtypes=("uint8", "floating"), module="torch.nn.functional")
def upsample_nearest(input, size=None, scale_factor=None):
    """`interpolate(..., mode='nearest')` (PyTorch's deprecated alias)."""
    return interpolate(input, size, scale_factor, mode="nearest")


@composite(dtypes=("uint8", "floating"), module="torch.nn.functional")
def upsample_bilinear(input, size=None, scale_factor=None):
    """`interpolate(..., mode='bilinear', align_corners=True)` (PyTorch's deprecated
    alias)."""
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


# ---- pixel shuffle ---------------------------------------------------------------------------
def _shuffle(x: np.ndarray, r: int) -> np.ndarray:
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r): one transposing copy."""
    *lead, c, h, w = x.shape
    k = len(lead)
    v = x.reshape(*lead, c // (r * r), r, r, h, w)
    v = v.transpose(tuple(range(k)) + (k, k + 3, k + 1, k + 4, k + 2))
    out = empty(tuple(lead) + (c // (r * r), h, r, w, r), x.dtype)
    np.copyto(out, v)
    return out.reshape(*lead, c // (r * r), h * r, w * r)


def _unshuffle(x: np.ndarray, r: int) -> np.ndarray:
    """(*, C, H*r, W*r) -> (*, C*r*r, H, W): one transposing copy."""
    *lead, c, h, w = x.shape
    k = len(lead)
    v = x.reshape(*lead, c, h // r, r, w // r, r)
    v = v.transpose(tuple(range(k)) + (k, k + 2, k + 4, k + 1, k + 3))
    out = empty(tuple(lead) + (c, r, r, h // r, w // r), x.dtype)
    np.copyto(out, v)
    return out.reshape(*lead, c * r * r, h // r, w // r)


@defop(formula=lambda g, ans, input, upscale_factor: pixel_unshuffle(g, upscale_factor),
       module="torch.nn.functional", also=("torch",))
def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r), r = upscale_factor (PyTorch's: output
    [c, h*r + i, w*r + j] = input[c*r*r + i*r + j, h, w]): one transposing copy. Its
    derivative is pixel_unshuffle."""
    r = positive_int(upscale_factor, "upscale_factor", "pixel_shuffle")
    if input.ndim < 3 or input.shape[-3] % (r * r):
        raise ValueError(f"pixel_shuffle: expected input (*, C*{r * r}, H, W) with channels "
                         f"divisible by upscale_factor**2 = {r * r}, got shape "
                         f"{input.shape}")
    return _shuffle(input, r)


@defop(formula=lambda g, ans, input, downscale_factor: pixel_shuffle(g, downscale_factor),
       module="torch.nn.functional", also=("torch",))
def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    """(*, C, H*r, W*r) -> (*, C*r*r, H, W), r = downscale_factor: pixel_shuffle's
    inverse (one transposing copy), and its derivative."""
    r = positive_int(downscale_factor, "downscale_factor", "pixel_unshuffle")
    if input.ndim < 3 or input.shape[-2] % r or input.shape[-1] % r:
        raise ValueError(f"pixel_unshuffle: expected input (*, C, H, W) with H and W "
                         f"divisible by downscale_factor {r}, got shape {input.shape}")
    return _unshuffle(input, r)
