"""Resampling: `interpolate` (nearest, nearest-exact, linear, bilinear, bicubic, trilinear,
area), `adaptive_avg_pool1d/2d`, `pixel_shuffle`, `pixel_unshuffle`.

interpolate and the adaptive average pools are separable linear maps: one small matrix
per spatial dim (output size x input size, PyTorch's source-index formulas and weights),
applied along its axis: a gather (`take`, one pass) when every row picks one input
(nearest), else one GEMM (the last axis: all rows of the input at once; the others:
batched over the leading dims). The map's adjoint is the same op with the transposed
matrices, so the rule is the op again and every order of derivative runs these
kernels. The matrices cost O(out * in) per dim: cheap next to the data for images of a
few hundred pixels a side; the GEMMs do about in_h + in_w * in_h / out_h multiply-adds
per output of an (in_h, in_w) plane where a dedicated kernel would do 2 to 4 (2x
upsampling of 512 x 512 planes: ~770).

pixel_shuffle and pixel_unshuffle are permutations of the elements: one transposing copy
each, and each is the other's rule.

Thread safety: pure functions of their arguments.
"""
from __future__ import annotations

import math

import numpy as np

from .. import memory
from ..memory import empty as _empty
from ..primitive import record
from ..tensor import Tensor
from ._pool import _adaptive_output_size
from .functional import _raw, _reshape

__all__ = ["interpolate", "upsample", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
           "pixel_shuffle", "pixel_unshuffle"]


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
            y = np.take(y, idx, axis=axis, out=_empty(shape, y.dtype), mode="clip")
            continue
        mt = m.astype(np.result_type(y.dtype, np.float32), copy=False)
        if axis == y.ndim - 1:
            r = memory.matmul(_reshape(y, (-1, y.shape[-1])), mt.T)
            y = r.reshape(y.shape[:-1] + (m.shape[0],))
        else:
            # one batched GEMM over y with the axis moved next to last, written through
            # the same view of a new C-contiguous array (no strided result to copy)
            r = _empty(y.shape[:axis] + (m.shape[0],) + y.shape[axis + 1:],
                       np.result_type(mt, y))
            np.matmul(mt, np.moveaxis(y, axis, -2), out=np.moveaxis(r, axis, -2))
            y = r
    if y is x or not y.flags.c_contiguous:
        out = _empty(y.shape, y.dtype)
        np.copyto(out, y)
        y = out
    return y


def _resample_vjp(g, maps, name):
    # the adjoint: the same maps transposed (a GEMM per dim, or a gather)
    return _apply(g, _transposed(maps))


def _resample_record(name: str, input, maps) -> Tensor:
    """One node: the separable map `maps` applied to `input`; its rule is the transposed
    map (the same op)."""
    out = _apply(_raw(input), maps)
    return record(name, out, (input,), (_resample_vjp,), kwargs=dict(maps=maps, name=name))


def _adjoint_name(name: str) -> str:
    return name[:-9] if name.endswith("_backward") else name + "_backward"


_resample_vjp.graph_node = lambda g, node: _resample_record(
    _adjoint_name(node.kwargs["name"]), g, _transposed(node.kwargs["maps"]))


# ---- adaptive average pooling --------------------------------------------------------------
def _adaptive_avg_map(size: int, n_out: int) -> tuple:
    """Rows averaging PyTorch's windows [floor(i*size/n_out), ceil((i+1)*size/n_out))."""
    i = np.arange(n_out)
    start, end = (i * size) // n_out, -((-(i + 1) * size) // n_out)
    cols = np.arange(size)
    inside = (cols >= start[:, None]) & (cols < end[:, None])
    return _axis_map(inside / (end - start)[:, None])


def _adaptive_avg(name, nd, input, output_size) -> Tensor:
    x = _raw(input)
    if x.ndim not in (nd + 1, nd + 2) or 0 in x.shape[-nd:]:
        raise ValueError(f"{name}: expected a {nd + 1}-D or {nd + 2}-D input with non-empty "
                         f"spatial dims, got shape {x.shape}")
    sizes = tuple(x.shape[-nd:])
    out = _adaptive_output_size(name, output_size, sizes)
    return _resample_record(name, input, tuple(_adaptive_avg_map(n, o)
                                               for n, o in zip(sizes, out)))


def adaptive_avg_pool1d(input, output_size) -> Tensor:
    """Mean over `output_size` adaptive windows of input (N, C, L) (or (C, L)): window i
    spans [floor(i*L/out), ceil((i+1)*L/out)), PyTorch's. One node (a GEMM)."""
    return _adaptive_avg("adaptive_avg_pool1d", 1, input, output_size)


def adaptive_avg_pool2d(input, output_size) -> Tensor:
    """Mean over adaptive windows of NCHW input (or CHW) giving `output_size` (int or
    pair; None keeps that input size): rows [floor(i*H/Ho), ceil((i+1)*H/Ho)), columns
    alike, PyTorch's. Separable: one GEMM per spatial dim; the rule is the transposed
    map."""
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


def interpolate(input, size=None, scale_factor=None, mode: str = "nearest",
                align_corners=None, recompute_scale_factor=None,
                antialias: bool = False) -> Tensor:
    """Resample the spatial dims of input (N, C, *spatial), PyTorch's `F.interpolate`.

    `size` (the output's spatial size) or `scale_factor` (output size floor(in *
    factor); the factor also sets the source indices unless `recompute_scale_factor`).
    Modes: 'nearest' (source index floor(i * in/out), PyTorch's), 'nearest-exact',
    'linear' (3-D input), 'bilinear' and 'bicubic' (4-D), 'trilinear' (5-D), with
    `align_corners`, and 'area' (adaptive average pooling). One node: a separable map (a
    gather or a GEMM per spatial dim) whose rule is the transposed map.
    """
    x = _raw(input)
    if mode not in _MODES:
        raise ValueError(f"interpolate: mode must be one of {', '.join(_MODES)}, got "
                         f"{mode!r}")
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported")
    nd = x.ndim - 2
    if nd < 1 or nd > 3:
        raise ValueError(f"interpolate: expected a 3-D, 4-D or 5-D input (N, C, *spatial), "
                         f"got shape {x.shape}")
    if mode in _LINEAR and _LINEAR[mode] != nd:
        raise ValueError(f"interpolate: mode {mode!r} needs a {_LINEAR[mode] + 2}-D input, "
                         f"got shape {x.shape}")
    if mode not in _LINEAR and align_corners is not None:
        raise ValueError("interpolate: align_corners option can only be set with the "
                         "interpolating modes: linear | bilinear | bicubic | trilinear")
    sizes = tuple(x.shape[2:])
    out, scales = _output_size(sizes, size, scale_factor, recompute_scale_factor,
                               mode == "area")
    if 0 in sizes:
        raise ValueError(f"interpolate: input of shape {x.shape} has an empty spatial dim")
    if mode == "area":
        return _resample_record("interpolate", input, tuple(
            _adaptive_avg_map(n, o) for n, o in zip(sizes, out)))
    if mode in ("nearest", "nearest-exact"):
        maps = tuple(_nearest_map(n, o, s, mode == "nearest-exact")
                     for n, o, s in zip(sizes, out, scales))
    else:
        make = _cubic_map if mode == "bicubic" else _linear_map
        maps = tuple(make(n, o, s, bool(align_corners)) for n, o, s in zip(sizes, out, scales))
    return _resample_record("interpolate", input, maps)


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


def upsample(input, size=None, scale_factor=None, mode: str = "nearest",
             align_corners=None) -> Tensor:
    """`interpolate` (PyTorch's deprecated alias)."""
    return interpolate(input, size, scale_factor, mode, align_corners)


# ---- pixel shuffle ---------------------------------------------------------------------------
def _shuffle(x: np.ndarray, r: int) -> np.ndarray:
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r): one transposing copy."""
    *lead, c, h, w = x.shape
    k = len(lead)
    v = x.reshape(*lead, c // (r * r), r, r, h, w)
    v = v.transpose(tuple(range(k)) + (k, k + 3, k + 1, k + 4, k + 2))
    out = _empty(tuple(lead) + (c // (r * r), h, r, w, r), x.dtype)
    np.copyto(out, v)
    return out.reshape(*lead, c // (r * r), h * r, w * r)


def _unshuffle(x: np.ndarray, r: int) -> np.ndarray:
    """(*, C, H*r, W*r) -> (*, C*r*r, H, W): one transposing copy."""
    *lead, c, h, w = x.shape
    k = len(lead)
    v = x.reshape(*lead, c, h // r, r, w // r, r)
    v = v.transpose(tuple(range(k)) + (k, k + 2, k + 4, k + 1, k + 3))
    out = _empty(tuple(lead) + (c, r, r, h // r, w // r), x.dtype)
    np.copyto(out, v)
    return out.reshape(*lead, c * r * r, h // r, w // r)


def _pixel_shuffle_vjp(g, r):
    return _unshuffle(g, r)


def _pixel_unshuffle_vjp(g, r):
    return _shuffle(g, r)


_pixel_shuffle_vjp.graph_node = lambda g, node: pixel_unshuffle(g, node.kwargs["r"])
_pixel_unshuffle_vjp.graph_node = lambda g, node: pixel_shuffle(g, node.kwargs["r"])


def _factor(v, name, what) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValueError(f"{name}: {what} must be a positive integer, got {v!r}")
    return int(v)


def pixel_shuffle(input, upscale_factor: int) -> Tensor:
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r), r = upscale_factor (PyTorch's: output
    [c, h*r + i, w*r + j] = input[c*r*r + i*r + j, h, w]). Its rule is pixel_unshuffle."""
    x = _raw(input)
    r = _factor(upscale_factor, "pixel_shuffle", "upscale_factor")
    if x.ndim < 3 or x.shape[-3] % (r * r):
        raise ValueError(f"pixel_shuffle: expected input (*, C*{r * r}, H, W) with channels "
                         f"divisible by upscale_factor**2 = {r * r}, got shape {x.shape}")
    return record("pixel_shuffle", _shuffle(x, r), (input,), (_pixel_shuffle_vjp,),
                  kwargs=dict(r=r))


def pixel_unshuffle(input, downscale_factor: int) -> Tensor:
    """(*, C, H*r, W*r) -> (*, C*r*r, H, W), r = downscale_factor: pixel_shuffle's
    inverse, and its rule."""
    x = _raw(input)
    r = _factor(downscale_factor, "pixel_unshuffle", "downscale_factor")
    if x.ndim < 3 or x.shape[-2] % r or x.shape[-1] % r:
        raise ValueError(f"pixel_unshuffle: expected input (*, C, H, W) with H and W "
                         f"divisible by downscale_factor {r}, got shape {x.shape}")
    return record("pixel_unshuffle", _unshuffle(x, r), (input,), (_pixel_unshuffle_vjp,),
                  kwargs=dict(r=r))
