"""Pooling: `max_pool1d/2d`, `avg_pool1d/2d` (stride, padding, ceil_mode, dilation and
return_indices for max, count_include_pad and divisor_override for avg) and
`adaptive_max_pool1d/2d`; and the two selections the max pools and `max_unpool` are made
of, `take_flat` and `put_flat`.

The kernels work on planes (every leading (sample, channel) pair is one (H, W) plane;
1-D pools are 2-D ones on (1, L) planes) in blocks of planes: each block's per-offset
strided passes then run over data that stays in the cache (2 MiB of input planes per
block, `_BLOCK_BYTES`; one pass over a 16 MiB input per offset costs 2-3x more), and
per-block temporaries replace output-sized ones. Window geometry is convolution's
(`_windows.taps`): padding and ceil_mode's overhanging windows are never materialized.

Declarations: the average pools are ops (`defop`) whose derivative is
`avg_pool_backward`, an op whose own derivative is the average pool again (each is the
other's adjoint, with the same divisor). The max pools (which may also return the
indices) are composites: the window maxima and their first-maximum indices on arrays, then
`take_flat` (the values at those indices), whose derivative is `put_flat` (zeros with g
put at the indices: added where windows overlap) and back.

Thread safety: pure functions of their arguments.
"""
from __future__ import annotations

import numpy as np

from ..memory import empty
from ..memory import pooled as P
from ..ops._common import array, default_float, reshaped, zeros
from ..ops.forms import connect
from ..primitive import Saved, composite, defop
from ..tensor import Tensor
from ._windows import adaptive_output_size, adaptive_windows, ntuple
from ._windows import taps as window_taps

__all__ = ["max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d", "adaptive_max_pool1d",
           "adaptive_max_pool2d", "avg_pool_backward", "take_flat", "put_flat",
           "planes_of"]

# Input planes per block of the pools' kernels (cache resident; tests shrink it).
_BLOCK_BYTES = 1 << 21


# ---- geometry -----------------------------------------------------------------------------
def _pool_geometry(name, shape, nd, kernel_size, stride, padding, dilation,
                   ceil_mode) -> dict:
    """PyTorch's checks and output sizes for an input of `shape`, as 2-D plane geometry:
    kernel, stride, padding, dilation, plane (H, W) and out (Ho, Wo) (1-D pools: a leading
    unit dimension)."""
    shape = tuple(shape)
    if len(shape) not in (nd + 1, nd + 2):
        dims = "L" if nd == 1 else "H, W"
        raise ValueError(f"{name}: expected a {nd + 2}-D input (N, C, {dims}) or {nd + 1}-D "
                         f"(C, {dims}), got shape {shape}")
    kernel = ntuple(kernel_size, nd, "kernel_size", name, 1)
    stride = kernel if stride is None or (not isinstance(stride, (int, np.integer))
                                          and len(stride) == 0) \
        else ntuple(stride, nd, "stride", name, 1)
    padding = ntuple(padding, nd, "padding", name, 0)
    dilation = ntuple(dilation, nd, "dilation", name, 1)
    if any(p > k // 2 for p, k in zip(padding, kernel)):
        raise ValueError(f"{name}: padding {padding} should be at most half of the kernel "
                         f"size {kernel}")
    sizes = shape[-nd:]
    out = []
    for n, k, s, p, d in zip(sizes, kernel, stride, padding, dilation):
        o = (n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (o - 1) * s >= n + p:    # the last window must start inside
            o -= 1
        out.append(o)
    if any(o < 1 for o in out):
        raise ValueError(f"{name}: input size {sizes} is too small for kernel {kernel} "
                         f"(dilation {dilation}, padding {padding}): output size "
                         f"{tuple(out)}")
    lead = 2 - nd
    return dict(kernel=(1,) * lead + kernel, stride=(1,) * lead + stride,
                padding=(0,) * lead + padding, dilation=(1,) * lead + dilation,
                plane=(1,) * lead + sizes, out=(1,) * lead + tuple(out))


def _plane_blocks(planes: int, plane_bytes: int) -> tuple:
    """(planes per block, [(start, stop), ...]) covering `planes` planes."""
    nb = max(1, min(planes, _BLOCK_BYTES // max(1, plane_bytes)))
    return nb, [(a, min(planes, a + nb)) for a in range(0, planes, nb)]


def planes_of(a, shape2) -> np.ndarray:
    """`a` as (planes, *shape2): a view when `a` is contiguous, else a (cached) copy."""
    return reshaped(a, (-1,) + tuple(shape2))


# ---- max pooling --------------------------------------------------------------------------
def _max_pool_forward(x3, kernel, stride, padding, dilation, out_hw) -> tuple:
    """(max of each window (planes, Ho, Wo), flat index in x3 of its first maximum
    (planes, Ho*Wo), intp)."""
    planes, h, w = x3.shape
    taps = window_taps((h, w), out_hw, kernel, stride, padding, dilation)
    out = empty((planes,) + out_hw, dtype=x3.dtype)
    index = empty((planes, out_hw[0] * out_hw[1]), dtype=np.intp)
    nb, blocks = _plane_blocks(planes, h * w * x3.itemsize)
    arg = empty((nb,) + out_hw, dtype=np.uint8 if len(taps) <= 256 else np.intp)
    m = empty(arg.shape, arg.dtype)
    # the offsets as indices for `take` (a block temporary; `arg` itself when intp)
    wide = arg.reshape(nb, -1) if arg.dtype == np.intp else \
        empty((nb, out_hw[0] * out_hw[1]), np.intp)
    corner = _window_corners((h, w), out_hw, stride, padding)
    delta = (np.arange(kernel[0])[:, None] * (dilation[0] * w)
             + np.arange(kernel[1]) * dilation[1]).ravel()
    for a, b in blocks:
        ab, mb = arg[:b - a], m[:b - a]
        _max_pool_block(x3[a:b], out[a:b], ab, mb, taps, any(padding))
        _max_pool_specials(x3[a:b], out[a:b], ab, taps, kernel, stride, padding, dilation)
        idx = index[a:b]
        ai = wide[:b - a]
        if arg.dtype != np.intp:
            np.copyto(ai, ab.reshape(b - a, -1))
        np.take(delta, ai, out=idx, mode="clip")
        np.add(idx, corner, out=idx)
        np.add(idx, (np.arange(b - a) * (h * w))[:, None], out=idx)
        # the value of the first maximum itself: `maximum` may return either of two
        # equal operands (-0.0 or 0.0)
        np.take(x3[a:b].reshape(-1), idx, out=out[a:b].reshape(b - a, -1), mode="clip")
        np.add(idx, a * h * w, out=idx)
    return out, index


def _window_corners(in_hw, out_hw, stride, padding) -> np.ndarray:
    """Flat index in a plane of each window's top-left corner (negative in padding)."""
    rows = (np.arange(out_hw[0]) * stride[0] - padding[0]) * in_hw[1]
    return (rows[:, None] + np.arange(out_hw[1]) * stride[1] - padding[1]).ravel()


def _max_pool_block(x3, out, arg, m, taps, padded: bool) -> None:
    """Max and first-maximum offset of a block of planes. Per kernel offset: a strict
    `greater` against the running max (ties keep the first), the max, and the offset
    update as two byte ops (offsets only grow, so arg = max(arg, t * greater)). Without
    padding, offset (0, 0) is in every window (ceil_mode's last window starts inside)."""
    arg.fill(0)
    if padded:
        out.fill(_lowest(x3.dtype))
        rest = taps
    else:
        np.copyto(out, x3[taps[0][3]])
        rest = taps[1:]
    for t, _, out_blk, in_blk in rest:
        v, o, mt = x3[in_blk], out[out_blk], m[out_blk]
        np.greater(v, o, out=mt.view(bool) if mt.dtype == np.uint8 else mt)
        np.maximum(o, v, out=o)
        np.multiply(mt, mt.dtype.type(t), out=mt)
        np.maximum(arg[out_blk], mt, out=arg[out_blk])


def _lowest(dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _max_pool_specials(x3, out, arg, taps, kernel, stride, padding, dilation) -> None:
    """PyTorch's choices where `greater` cannot decide: a window with a NaN sends its
    gradient to its last NaN; a window whose elements are all the lowest value (-inf)
    to its first element inside the image. One cheap check (a sum) when neither occurs."""
    if x3.dtype.kind == "f":
        if np.isfinite(out.sum()):
            return
        if P.isnan(out).any():
            for t, _, out_blk, in_blk in taps:
                np.copyto(arg[out_blk], arg.dtype.type(t), where=P.isnan(x3[in_blk]))
    if not any(padding):
        return
    low = P.equal(out, _lowest(x3.dtype))
    if low.any():
        ho, wo = out.shape[1:]
        # the first kernel row (column) inside the image: ceil((p - s*o) / d), at least 0
        i0 = np.maximum(0, -((stride[0] * np.arange(ho) - padding[0]) // dilation[0]))
        j0 = np.maximum(0, -((stride[1] * np.arange(wo) - padding[1]) // dilation[1]))
        first = (i0[:, None] * kernel[1] + j0[None, :]).astype(arg.dtype)
        np.copyto(arg, np.broadcast_to(first, arg.shape), where=low)



# ---- the selections: values at flat indices, and their adjoint -------------------------------
def _put(g, index, shape, accumulate: bool) -> np.ndarray:
    """Zeros of `shape` with `g` put at the flat indices `index` (added where an index
    repeats when `accumulate`, else written: the last write wins). Passes: the zero fill
    and one scatter of g's size. (Measured 3-4x faster than one masked strided write per
    kernel offset: numpy's strided loops over short rows are slow.)"""
    gx = zeros(shape, dtype=g.dtype)
    flat, gr = gx.reshape(-1), reshaped(g, (-1,))   # a copy only when g is not contiguous
    if accumulate:
        np.add.at(flat, index.reshape(-1), gr)
    else:
        flat[index.reshape(-1)] = gr
    return gx


def _take_kernel(g, ans, input, index, unique, values):
    # g scattered to the indices: written where they are distinct (disjoint windows),
    # added (np.add.at, in output order, as PyTorch) where windows overlap
    return _put(g, index, input.shape, not unique)


def _take_formula(g, ans, input, index, unique, values):
    # put_flat is linear in g with a constant index; the gradient is also (derivative 0)
    # a function of the input, as PyTorch's
    return connect(put_flat(g, index, np.shape(array(input)), not unique), input)


@defop(formula=_take_formula, kernel=_take_kernel, export=False)
def take_flat(input: Tensor, index: Tensor, unique: bool = False, values=None) -> Tensor:
    """`input`'s elements at the flat indices `index` (integers of any shape: the
    result's); `values` are those elements when the caller has them already (a max pool's
    forward computes them with the indices). `unique`: no index repeats (disjoint
    windows), so the derivative writes instead of adding."""
    if values is not None:
        return values
    return np.take(input.reshape(-1), index, mode="clip")


@defop(formula=lambda g, ans, input, index, size, accumulate: take_flat(g, index),
       export=False)
def put_flat(input: Tensor, index: Tensor, size: tuple, accumulate: bool = True) -> Tensor:
    """Zeros of shape `size` with `input` put at the flat indices `index` (of input's
    shape; added where an index repeats when `accumulate`, else written, the last write
    winning, as PyTorch's max_unpool). Its derivative is `take_flat`: the gather at the
    same indices."""
    return _put(input, index, tuple(size), accumulate)


def _indices_tensor(index, plane_size: int, shape) -> Tensor:
    """PyTorch's `return_indices`: the flat index of each maximum within its plane, int64
    (no gradient)."""
    local = index - (np.arange(index.shape[0]) * plane_size)[:, None]   # (planes, Ho*Wo)
    return Tensor._wrap(local.astype(np.int64, copy=False).reshape(shape))


def _max_pool(name, nd, input, kernel_size, stride, padding, dilation, ceil_mode,
              return_indices):
    x = array(input)
    geo = _pool_geometry(name, x.shape, nd, kernel_size, stride, padding, dilation,
                         ceil_mode)
    out_hw = geo["out"]
    out, index = _max_pool_forward(planes_of(x, geo["plane"]), geo["kernel"], geo["stride"],
                                   geo["padding"], geo["dilation"], out_hw)
    shape = x.shape[:-nd] + out_hw[2 - nd:]
    unique = all(s >= d * (k - 1) + 1 for k, s, d in
                 zip(geo["kernel"], geo["stride"], geo["dilation"]))
    y = take_flat(input, index.reshape(shape), unique, out.reshape(shape))
    if return_indices:
        return y, _indices_tensor(index, geo["plane"][0] * geo["plane"][1], shape)
    return y


@composite(module="torch.nn.functional", also=("torch",))
def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False, return_indices: bool = False):
    """Max over sliding windows of input (N, C, L) (or (C, L)); padding never wins. The
    gradient goes to the first maximum of each window (to the last NaN of a window with
    NaNs), as in PyTorch. `return_indices=True` also returns each maximum's position in L
    (int64). `ceil_mode` keeps a last partial window that starts inside the input."""
    return _max_pool("max_pool1d", 1, input, kernel_size, stride, padding, dilation,
                     ceil_mode, return_indices)


@composite(module="torch.nn.functional", also=("torch",))
def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False, return_indices: bool = False):
    """Max over sliding (dilated) windows of NCHW input (or CHW); padding never wins. The
    gradient goes to the first maximum of each window (to the last NaN of a window with
    NaNs), as in PyTorch. `return_indices=True` also returns the flat index of each
    maximum within its (H, W) plane (int64, as PyTorch's). `ceil_mode` keeps a last
    partial window that starts inside the input or its left padding."""
    return _max_pool("max_pool2d", 2, input, kernel_size, stride, padding, dilation,
                     ceil_mode, return_indices)


# ---- average pooling ----------------------------------------------------------------------
def _avg_divisor(plane, out_hw, kernel, stride, padding, count_include_pad,
                 divisor_override):
    """What each window's sum is divided by, PyTorch's: `divisor_override`; or the
    window's size clipped to the padded input (kh*kw but for ceil_mode's overhanging
    windows) with count_include_pad; or its count of elements inside the image. A scalar
    or an (Ho, Wo) array."""
    if divisor_override is not None:
        return divisor_override
    sizes = []
    for size, n_out, k, s, p in zip(plane, out_hw, kernel, stride, padding):
        start = np.arange(n_out) * s - p
        end = np.minimum(start + k, size + p)
        sizes.append(end - start if count_include_pad else
                     np.minimum(end, size) - np.maximum(start, 0))
    if all((a == k).all() for a, k in zip(sizes, kernel)):
        return kernel[0] * kernel[1]
    return np.outer(*sizes)


def _avg_pool_forward(x, divisor, plane, kernel, stride, padding, out_hw) -> np.ndarray:
    """The window sums of `x`'s (H, W) planes divided by `divisor`, as (planes, Ho, Wo)
    (`avg_pool2d`'s kernel; also the rule of its rule's differentiable form, whose adjoint
    it is). Per block of planes, kh*kw strided adds into the output, one division."""
    h, w = plane
    taps = window_taps((h, w), out_hw, kernel, stride, padding, (1, 1))
    x3 = planes_of(x, (h, w))
    out = empty((x3.shape[0],) + tuple(out_hw),
                dtype=x.dtype if x.dtype.kind == "f" else default_float())
    full = all(s.stop - s.start == n for s, n in zip(taps[0][2][1:], out_hw))
    for a, b in _plane_blocks(x3.shape[0], h * w * x.itemsize)[1]:
        xb, ob = x3[a:b], out[a:b]
        if full:                                  # offset (0, 0) is in every window
            np.copyto(ob, xb[taps[0][3]])
        else:
            ob.fill(0)
        for _, _, out_blk, in_blk in taps[1 if full else 0:]:
            o = ob[out_blk]
            np.add(o, xb[in_blk], out=o)
        np.divide(ob, divisor, out=ob)
    return out


def _avg_pool_vjp(g, divisor, x_shape, plane, kernel, stride, padding, out_hw):
    # Per block of planes: g / divisor into a block-sized temporary, then one strided
    # write (disjoint windows) or add (overlapping) per kernel offset. Passes: the zero
    # fill (skipped when the windows tile the input) and kh*kw of the output's size;
    # extra memory: the block temporary.
    h, w = plane
    g3 = planes_of(g, out_hw)
    taps = window_taps((h, w), out_hw, kernel, stride, padding, (1, 1))
    tiles = stride == kernel and not any(padding) and out_hw[0] * kernel[0] == h \
        and out_hw[1] * kernel[1] == w
    gx = (empty if tiles else zeros)((g3.shape[0], h, w), dtype=g.dtype)
    nb, blocks = _plane_blocks(g3.shape[0], h * w * g.itemsize)
    tmp = empty((nb,) + tuple(out_hw), dtype=g.dtype)
    write = np.copyto if stride[0] >= kernel[0] and stride[1] >= kernel[1] else \
        (lambda dst, src: np.add(dst, src, out=dst))
    for a, b in blocks:
        gd, gxb = np.divide(g3[a:b], divisor, out=tmp[:b - a]), gx[a:b]
        for _, _, out_blk, in_blk in taps:
            write(gxb[in_blk], gd[out_blk])
    return gx.reshape(x_shape)


def _avg_geometry(name, nd, shape, kernel_size, stride, padding, ceil_mode,
                  count_include_pad, divisor_override) -> tuple:
    """(plane geometry, divisor) of an average pool of an input of `shape`."""
    geo = _pool_geometry(name, shape, nd, kernel_size, stride, padding, 1, ceil_mode)
    if divisor_override is not None and (isinstance(divisor_override, bool)
                                         or not isinstance(divisor_override,
                                                           (int, np.integer))
                                         or divisor_override == 0):
        raise ValueError(f"{name}: divisor_override must be a non-zero integer, got "
                         f"{divisor_override!r}")
    divisor = _avg_divisor(geo["plane"], geo["out"], geo["kernel"], geo["stride"],
                           geo["padding"], count_include_pad, divisor_override)
    del geo["dilation"]
    return geo, divisor


def _avg_pool(name, nd, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
              divisor_override):
    geo, divisor = _avg_geometry(name, nd, input.shape, kernel_size, stride, padding,
                                 ceil_mode, count_include_pad, divisor_override)
    out = _avg_pool_forward(input, divisor, geo["plane"], geo["kernel"], geo["stride"],
                            geo["padding"], geo["out"])
    return Saved(out.reshape(input.shape[:-nd] + geo["out"][2 - nd:]), divisor, geo)


def _avg_kernel(g, ans, input, divisor, geo, **_):
    # Per block of planes: g / divisor into a block-sized temporary, then one strided
    # write (disjoint windows) or add (overlapping) per kernel offset
    return _avg_pool_vjp(g, divisor, input.shape, geo["plane"], geo["kernel"], geo["stride"],
                         geo["padding"], geo["out"])


def _avg_formula(nd: int):
    def formula(g, ans, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                divisor_override=None):
        return avg_pool_backward(g, np.shape(array(input)), nd, kernel_size, stride, padding,
                                 ceil_mode, count_include_pad, divisor_override)
    return formula


@defop(formula=_avg_formula(1), kernel=_avg_kernel, module="torch.nn.functional",
       also=("torch",))
def avg_pool1d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    """Mean over sliding windows of input (N, C, L) (or (C, L)); zero padding is counted
    unless `count_include_pad=False`; `ceil_mode` keeps a last partial window (divided
    by its size within the padded input, as PyTorch)."""
    return _avg_pool("avg_pool1d", 1, input, kernel_size, stride, padding, ceil_mode,
                     count_include_pad, None)


@defop(formula=_avg_formula(2), kernel=_avg_kernel, module="torch.nn.functional")
def avg_pool2d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override=None) -> Tensor:
    """Mean over each window of NCHW input (or CHW); zero padding is counted unless
    `count_include_pad=False`; `divisor_override` divides every sum by that number;
    `ceil_mode` keeps last partial windows (PyTorch's divisors).

    Per block of planes, the window sums are kh*kw strided adds into the output
    (padding adds nothing), then one division in place.
    """
    return _avg_pool("avg_pool2d", 2, input, kernel_size, stride, padding, ceil_mode,
                     count_include_pad, divisor_override)


def _avg_backward_kernel(gg, ans, grad, divisor, geo, **_):
    # the average pool of gg with the same divisor: kh*kw strided adds, one division
    return _avg_pool_forward(gg, divisor, geo["plane"], geo["kernel"], geo["stride"],
                             geo["padding"], geo["out"]).reshape(np.shape(grad))


def _avg_backward_formula(gg, ans, grad, input_size, nd, kernel_size, stride, padding,
                          ceil_mode, count_include_pad, divisor_override):
    if nd == 1:
        return avg_pool1d(gg, kernel_size, stride, padding, ceil_mode, count_include_pad)
    return avg_pool2d(gg, kernel_size, stride, padding, ceil_mode, count_include_pad,
                      divisor_override)


@defop(formula=_avg_backward_formula, kernel=_avg_backward_kernel, export=False)
def avg_pool_backward(grad: Tensor, input_size: tuple, nd: int, kernel_size, stride=None,
                      padding=0, ceil_mode: bool = False, count_include_pad: bool = True,
                      divisor_override=None) -> Tensor:
    """An `nd`-d average pool's input gradient (of shape `input_size`) as an op of the
    output gradient; its derivative is the average pool again, with the same divisor:
    each is the other's adjoint."""
    name = f"avg_pool{nd}d"
    geo, divisor = _avg_geometry(name, nd, input_size, kernel_size, stride, padding,
                                 ceil_mode, count_include_pad, divisor_override)
    want = tuple(input_size[:-nd]) + geo["out"][2 - nd:]
    if grad.shape != want:
        raise ValueError(f"avg_pool_backward: grad of shape {grad.shape} does not match "
                         f"the pool's output shape {want}")
    out = _avg_pool_vjp(grad, divisor, tuple(input_size), geo["plane"], geo["kernel"],
                        geo["stride"], geo["padding"], geo["out"])
    return Saved(out, divisor, geo)


# ---- adaptive max pooling ---------------------------------------------------------------------
def _adaptive_max_forward(x3, out_hw) -> tuple:
    """(max of each adaptive window (planes, Ho, Wo), flat index in x3 of its first
    maximum in row-major order (planes, Ho*Wo)). Per block of planes: the windows
    gathered as (Ho, Wo, kh*kw) (one fancy-indexing pass), argmax, take."""
    planes, h, w = x3.shape
    rows, cols = adaptive_windows(h, out_hw[0]), adaptive_windows(w, out_hw[1])
    kh, kw = rows.shape[1], cols.shape[1]
    within = (rows[:, None, :, None] * w + cols[None, :, None, :]).reshape(
        out_hw[0] * out_hw[1], kh * kw)                     # flat plane index per window
    out = empty((planes,) + tuple(out_hw), dtype=x3.dtype)
    index = empty((planes, out_hw[0] * out_hw[1]), dtype=np.intp)
    flat = x3.reshape(planes, h * w)
    nb, blocks = _plane_blocks(planes, within.size * x3.itemsize)
    # One block buffer for the windows, reused (a fresh gather per block would hold two
    # blocks at once), and one for their argmax; the argmax (a position in its window's
    # row of `within`) becomes a flat index in `within`, then in x3, in `index` itself.
    # Passes per block: the gather, argmax, three over the block's indices, the take of
    # the values. (take with out= and mode="clip": the indices are in range, and the
    # default mode buffers the whole result.)
    wbuf = empty((nb,) + within.shape, dtype=x3.dtype)
    abuf = empty((nb, within.shape[0]), dtype=np.intp)
    row_start = np.arange(within.shape[0]) * within.shape[1]
    for a, b in blocks:
        win = np.take(flat[a:b], within, axis=1, out=wbuf[:b - a], mode="clip")
        arg = win.argmax(axis=2, out=abuf[:b - a])
        np.add(arg, row_start, out=arg)
        idx = np.take(within.reshape(-1), arg, out=index[a:b], mode="clip")
        np.add(idx, (np.arange(a, b) * (h * w))[:, None], out=idx)
        np.take(x3.reshape(-1), idx, out=out[a:b].reshape(b - a, -1), mode="clip")
    return out, index


def _adaptive_max(name, nd, input, output_size, return_indices):
    x = array(input)
    if x.ndim not in (nd + 1, nd + 2):
        raise ValueError(f"{name}: expected a {nd + 1}-D or {nd + 2}-D input, got shape "
                         f"{x.shape}")
    sizes = tuple(x.shape[-nd:])
    out = adaptive_output_size(name, output_size, sizes)
    if 0 in sizes:
        raise ValueError(f"{name}: input of shape {x.shape} has an empty spatial dimension")
    plane, out_hw = (1,) * (2 - nd) + sizes, (1,) * (2 - nd) + out
    y, index = _adaptive_max_forward(planes_of(x, plane), out_hw)
    shape = x.shape[:-nd] + out
    unique = all(n % o == 0 for n, o in zip(sizes, out))        # disjoint windows
    yt = take_flat(input, index.reshape(shape), unique, y.reshape(shape))
    if return_indices:
        return yt, _indices_tensor(index, plane[0] * plane[1], shape)
    return yt


@composite(module="torch.nn.functional")
def adaptive_max_pool1d(input, output_size, return_indices: bool = False):
    """Max over `output_size` adaptive windows of input (N, C, L) (or (C, L)): window i
    spans [floor(i*L/out), ceil((i+1)*L/out)), PyTorch's. The gradient goes to each
    window's first maximum; `return_indices` also returns its position in L (int64)."""
    return _adaptive_max("adaptive_max_pool1d", 1, input, output_size, return_indices)


@composite(module="torch.nn.functional")
def adaptive_max_pool2d(input, output_size, return_indices: bool = False):
    """Max over adaptive windows of NCHW input (or CHW) giving `output_size` (int or
    pair; None keeps that input size): rows [floor(i*H/Ho), ceil((i+1)*H/Ho)), columns
    alike, PyTorch's. The gradient goes to each window's first maximum in row-major order;
    `return_indices` also returns its flat index within the (H, W) plane (int64)."""
    return _adaptive_max("adaptive_max_pool2d", 2, input, output_size, return_indices)
