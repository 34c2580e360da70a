"""Convolutions: `conv1d`, `conv2d`, `conv3d`, `conv_transpose1d/2d/3d`, `unfold`, `fold`,
each one declaration (`primitive.defop`): its numpy forward, its derivative as formulas
(differentiable again, to any order), and the fused first-order kernels.

One implementation for 1 to 3 spatial dimensions, with stride, zero padding (ints,
'valid', or 'same', asymmetric where PyTorch pads one more on the right), dilation and
groups (depthwise included), batched or not. The kernels loop over the kernel offsets,
each step one vectorized numpy call over a strided view: no per-window Python work;
padding is never materialized (`_windows.taps`: per offset, the block of outputs whose
input lies inside the image, and that block of inputs).

conv is the bilinear map B(x, w). Forward: per chunk of samples, im2col (one strided
copy per kernel offset; 'valid' geometries one copy from a strided view of every
window) and one GEMM per group; the columns are kept for the weight
gradient when the weight takes one (`needs_input_grad`). Its input gradient Bx*(g, w) has
two kernels: 'same'-like stride-1 convolutions (output as wide as the input in every
spatial dim but the first) see every offset as a shift of the flattened image, so the
columns' gradient is one GEMM per chunk of samples and col2im is one add per offset over
long contiguous rows; everything else, per chunk of samples, ungrouped: ONE GEMM for all
kernel offsets, then one add per offset into the input's strided block, channels-first
through the columns' gradient (first layers, 1x1 kernels, 1-d) or channels-last from a
chunk of g copied so (deeper layers; there only when that GEMM is big enough to thread,
else one per offset); grouped: one product per offset. The weight
gradient Bw*(x, g) is a GEMM per chunk of samples against the columns (kept by the
forward, or rebuilt chunk by chunk). The transposed convolution is Bx* itself. Every
kernel (B, Bx*, Bw*) whose GEMMs are smaller than `_ONE_THREAD_MACS` (but big enough
for OpenBLAS to thread) runs them with BLAS held at one thread (`engine.blas.limited`,
once around the kernel's loop, process-wide while it runs): on loaded cores a thread
hand-off costs more than they do. Shapes only, and it makes those GEMMs' bytes
independent of the BLAS threads in force (OpenBLAS's threaded driver blocks the inner
dimension differently).

The derivatives (PyTorch's double backward of convolution): B, Bx* and Bw* are ops
(`convolution`, `conv_input_backward`, `conv_weight_backward`, internal: explicit
geometry) whose formulas are the other two, so every order runs these kernels; `unfold`
(im2col) and `fold` (col2im) are each other's formula.

Thread safety: pure functions of their arguments; temporaries come from the caching
allocator (thread-safe).
"""
from __future__ import annotations

import functools
import math

import numpy as np

from .. import memory
from ..engine import blas
from ..engine.cost import gemm_cost
from ..memory import empty
from ..ops import reduce as R
from ..ops._common import copy, reshaped, zeros
from ..primitive import Saved, defop
from ..tensor import Tensor
from ._windows import ntuple, positive_int, prod
from ._windows import taps as window_taps

__all__ = ["conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d", "unfold", "fold", "convolution", "conv_input_backward",
           "conv_weight_backward"]

# Columns per chunk of the conv forward (cache resident for its GEMM; tests shrink it).
_COLS_BYTES = 1 << 22

# A kernel's GEMMs of fewer multiply-adds (but at least `_SERIAL_MACS`, below which
# OpenBLAS keeps one thread anyway) run with BLAS held at one thread (`_blas_threads`,
# `blas.one_thread`: where the measurements are, and why 2^25 although conv's 38-268M
# GEMMs were also 2.4-18x slower on 2 loaded threads: idle machines with more cores).
_ONE_THREAD_MACS = blas.ONE_THREAD_MACS
_SERIAL_MACS = blas.SERIAL_MACS
# Bx*'s channels-last kernel takes one GEMM for all kernel offsets from this many
# multiply-adds (`_all_offsets_pays`)
_ALL_OFFSETS_MACS = 1 << 25


def _blas_threads(macs: int):
    """The context a kernel's GEMMs of `macs` multiply-adds each run in (`blas.one_thread`
    with this module's bounds): entered once around the kernel's loop."""
    return blas.one_thread(macs, _SERIAL_MACS, _ONE_THREAD_MACS)


# ---- arguments -----------------------------------------------------------------------------
def _conv_padding(padding, nd, kernel, stride, dilation, name) -> tuple:
    """(left padding, right padding) per spatial dim from an int, ints, 'valid' or 'same'
    (PyTorch's: the total d*(k-1), one more on the right when it is odd)."""
    if isinstance(padding, str):
        if padding == "valid":
            return (0,) * nd, (0,) * nd
        if padding != "same":
            raise ValueError(f"{name}: invalid padding string {padding!r}, should be one of "
                             f"'valid', 'same'")
        if any(s != 1 for s in stride):
            raise ValueError(f"{name}: padding='same' is not supported for strided "
                             f"convolutions")
        total = tuple(d * (k - 1) for k, d in zip(kernel, dilation))
        return tuple(t // 2 for t in total), tuple(t - t // 2 for t in total)
    lo = ntuple(padding, nd, "padding", name, 0)
    return lo, lo


def _out_sizes(name, in_sz, kernel, stride, lo, hi, dilation) -> tuple:
    """Output size per spatial dim; ValueError when a (dilated) kernel does not fit."""
    for n, k, a, b, d in zip(in_sz, kernel, lo, hi, dilation):
        if d * (k - 1) + 1 > n + a + b:
            what = f"kernel size {k}" if d == 1 else \
                f"dilated kernel size {d * (k - 1) + 1} (kernel {k}, dilation {d})"
            raise ValueError(f"{name}: {what} is larger than the padded input size "
                             f"{n + a + b}")
    return tuple((n + a + b - d * (k - 1) - 1) // s + 1
                 for n, k, s, a, b, d in zip(in_sz, kernel, stride, lo, hi, dilation))



# ---- geometry ---------------------------------------------------------------------------------
@functools.lru_cache(maxsize=512)
def _geometry(x_shape: tuple, kernel: tuple, stride: tuple, padding: tuple, dilation: tuple,
              out_sz: tuple) -> tuple:
    """(taps, shifts): the kernel offsets' blocks (`_windows.taps`), and when every offset is a
    shift of the flattened image (stride 1, output as wide as the input in every spatial
    dim but the first: 'same' convolutions, and every stride-1 conv1d), per offset
    (shift, q0, q1, cuts): the flat output range [q0, q1) reads input q + shift, and the
    index tuples `cuts` (for (..., *out) arrays) are the entries that wrap into a
    neighbouring row, to zero; else shifts is None. Cached, immutable."""
    in_sz = tuple(x_shape[2:])
    taps = window_taps(in_sz, tuple(out_sz), tuple(kernel), tuple(stride), tuple(padding),
                       tuple(dilation))
    if any(s != 1 for s in stride) or tuple(out_sz[1:]) != in_sz[1:]:
        return taps, None
    nd, n_out = len(in_sz), math.prod(out_sz)
    shifts = []
    for _, idx, _, _ in taps:
        shift, step = 0, 1
        for k, p, d, n in reversed(tuple(zip(idx, padding, dilation, in_sz))):
            shift += (k * d - p) * step
            step *= n
        q0 = max(0, -shift)
        cuts = []
        for d in range(1, nd):
            dd = idx[d] * dilation[d] - padding[d]
            n = out_sz[d]
            if dd:
                cut = slice(max(0, n - dd), None) if dd > 0 else slice(None, min(n, -dd))
                cuts.append((Ellipsis, cut) + (slice(None),) * (nd - 1 - d))
        shifts.append((shift, q0, max(q0, min(n_out, step - shift)), tuple(cuts)))
    return taps, tuple(shifts)


def _zero_outside(a, blk) -> None:
    """Zero the entries of `a` (..., *out) outside the block `blk` (a slice per dim)."""
    nd = len(blk)
    if any(s.start == s.stop for s in blk):
        a[...] = 0
        return
    for d, s in enumerate(blk):
        pre, post = (Ellipsis,) + tuple(blk[:d]), (slice(None),) * (nd - 1 - d)
        a[pre + (slice(None, s.start),) + post] = 0
        a[pre + (slice(s.stop, None),) + post] = 0


def _windows_view(x, taps, out_sz):
    """The windows of `x` (n, C, *in) as a read-only strided view (n, C, *kernel, *out)
    when no kernel offset's block is cut by the padding (every output reads inside the
    image: 'valid' convolutions), else None. From the taps' input blocks: the first
    offset's start, the stride (a block's step) and the dilation (last offset's start
    minus the first's, over kernel - 1)."""
    if any(b.start != 0 or b.stop != o for t in taps for b, o in zip(t[2][1:], out_sz)):
        return None
    first, last = taps[0][3][1:], taps[-1][3][1:]
    kernel = tuple(k + 1 for k in taps[-1][1])
    base = x[(Ellipsis,) + tuple(slice(f.start, None) for f in first)]
    st = base.strides[2:]
    dil = tuple(a * ((b.start - f.start) // (k - 1) if k > 1 else 0)
                for a, f, b, k in zip(st, first, last, kernel))
    step = tuple(a * (f.step or 1) for a, f in zip(st, first))
    return np.lib.stride_tricks.as_strided(
        base, x.shape[:2] + kernel + tuple(out_sz), base.strides[:2] + dil + step,
        writeable=False)


def _im2col(x, cols, geo, out_sz) -> None:
    """Fill `cols` (C, *kernel, n, P), the columns of samples `x` (n, C, *in): row
    (c, *k) holds input channel c at kernel offset k for every output position, 0 in the
    padding. 'valid' geometries: one copy from the strided view of every window
    (`_windows_view`; 0.65x the per-offset loop's time on mnist1/mnist2's chunks);
    others: one strided copy per kernel offset (rows are long: P per sample and channel);
    `geo` is `_geometry`'s."""
    taps, shifts = geo
    n, c = x.shape[:2]
    src = None if shifts else _windows_view(x, taps, out_sz)
    if src is not None:
        nd = len(out_sz)
        dst = cols.reshape(cols.shape[:-1] + tuple(out_sz))       # (C, *kernel, n, *out)
        np.copyto(dst.transpose((nd + 1, 0) + tuple(range(1, nd + 1))
                                + tuple(range(nd + 2, 2 * nd + 2))), src)
        return
    shape = (n, c) + tuple(out_sz)
    xf = reshaped(x, (n, c, -1)) if shifts else None
    for k, (_, idx, out_blk, in_blk) in enumerate(taps):
        dst = cols[(slice(None),) + idx].transpose(1, 0, 2)          # (n, C, P) view
        if shifts:
            shift, q0, q1, cuts = shifts[k]
            dst[..., :q0] = 0
            dst[..., q1:] = 0
            dst[..., q0:q1] = xf[..., q0 + shift:q1 + shift]
            d = dst.reshape(shape)
            for cut in cuts:
                d[cut] = 0
        else:
            d = dst.reshape(shape)
            _zero_outside(d, out_blk[1:])
            d[out_blk] = x[in_blk]


def _col2im_add(gx, d, geo, out_sz, flat: bool) -> None:
    """Add the column gradients `d` (n, C, *kernel, P) onto `gx` (n, C, *in) (overlapping
    windows accumulate): one add per kernel offset, over flat-shifted rows when `flat`
    and the geometry allows (which zeroes the wrapped entries of `d`: the caller's
    temporary), else over strided blocks."""
    taps, shifts = geo
    shifts = shifts if flat else None
    n, c = gx.shape[:2]
    shape = (n, c) + tuple(out_sz)
    gf = gx.reshape(n, c, -1) if shifts else None
    for k, (_, idx, out_blk, in_blk) in enumerate(taps):
        part = d[(slice(None), slice(None)) + idx]                   # (n, C, P) view
        if shifts:
            shift, q0, q1, cuts = shifts[k]
            p4 = part.reshape(shape)
            for cut in cuts:
                p4[cut] = 0
            dst = gf[..., q0 + shift:q1 + shift]
            np.add(dst, part[..., q0:q1], out=dst)
        else:
            dst = gx[in_blk]
            np.add(dst, part.reshape(shape)[out_blk], out=dst)


# ---- B(x, w) and its adjoints on arrays -------------------------------------------------------
def _conv_forward(x, w, out_sz, keep: bool, stride, padding, dilation, groups) -> tuple:
    """(output (N, O, P), columns (C*K, N, P) or None). Per chunk of samples (columns of
    at most `_COLS_BYTES`: cache resident for the GEMM), im2col into a chunk of the
    column buffer (the whole buffer when kept for the weight gradient) and one GEMM per
    group: W_g (O/G, C/G*K) @ cols_g (C/G*K, n*P) into a chunk buffer copied into the
    output as (n, O, P); a small weight (< 1024 entries, e.g. a first layer on 3
    channels) multiplies per sample straight into the output instead."""
    n, c = x.shape[:2]
    o, kernel = w.shape[0], tuple(w.shape[2:])
    ck, p = c * prod(kernel), prod(out_sz)
    dtype = np.result_type(x, w)
    geo = _geometry(x.shape, kernel, stride, padding, dilation, out_sz)
    nb = min(n, max(1, _COLS_BYTES // (ck * p * x.itemsize)))
    cols = empty((c,) + kernel + (n if keep else nb, p), dtype=x.dtype)
    out = empty((n, o, p), dtype=dtype)
    og, ckg = o // groups, ck // groups
    w3 = reshaped(w, (groups, og, ckg))
    obuf = None if w.size < 1024 else empty((groups, og, nb * p), dtype=dtype)
    with _blas_threads(og * ckg * p * (1 if obuf is None else nb)):
        for a in range(0, n, nb):
            m = min(n, a + nb) - a
            chunk = cols[..., a:a + m, :] if keep else cols[..., :m, :]
            _im2col(x[a:a + m], chunk, geo, out_sz)
            if obuf is None:
                np.matmul(w3, chunk.reshape(groups, ckg, m, p).transpose(2, 0, 1, 3),
                          out=out[a:a + m].reshape(m, groups, og, p))
            else:
                r = np.matmul(w3, chunk.reshape(groups, ckg, m * p), out=obuf[..., :m * p])
                np.copyto(out[a:a + m], r.reshape(o, m, p).transpose(1, 0, 2))
    return out, (cols.reshape(ck, n, p) if keep else None)


def _conv_array(x, w, geom: dict, out_sz) -> np.ndarray:
    """B(x, w) on arrays, with the output size given (N, O, *out_sz)."""
    out, _ = _conv_forward(x, w, tuple(out_sz), False, **geom)
    return out.reshape((x.shape[0], w.shape[0]) + tuple(out_sz))


def _input_grad(g, w, x_shape, stride, padding, dilation, groups) -> np.ndarray:
    """Bx*(g, w): conv's input gradient, of shape `x_shape`, for the output gradient `g`.

    Flat geometries ('same' stride 1): `_input_grad_columns` with col2im over long
    contiguous rows, chunks of samples whose columns take at most the input's size (a
    GEMM per chunk threads well; one per sample does not, one over the whole batch
    leaves the cache). Other geometries: `_input_grad_strided`."""
    out_sz = tuple(g.shape[2:])
    kernel = tuple(w.shape[2:])
    geo = _geometry(tuple(x_shape), kernel, stride, padding, dilation, out_sz)
    if geo[1] is None:
        return _input_grad_strided(g, w, x_shape, geo[0], groups)
    n = x_shape[0]
    ck, p = w.shape[1] * groups * prod(kernel), prod(out_sz)
    nb = min(n, max(1, prod(x_shape[1:]) * n // (ck * p)))        # samples per chunk
    return _input_grad_columns(g, w, x_shape, geo, groups, nb)


def _input_grad_columns(g, w, x_shape, geo, groups, nb: int) -> np.ndarray:
    """Bx*(g, w) channels-first through the columns' gradient: per chunk of `nb` samples,
    g's chunk copied as (O, n*P) into a chunk buffer, ONE GEMM per group W_g^T @ g_g
    (all kernel offsets at once) into a column buffer, then col2im (`_col2im_add`, flat
    rows when `geo` has shifts, else strided blocks). Passes: the zero fill, then per
    chunk a copy of g's chunk, the GEMM writing the chunk's columns and K adds reading
    them (while in cache)."""
    n, c = x_shape[:2]
    o, kernel = w.shape[0], tuple(w.shape[2:])
    out_sz = tuple(g.shape[2:])
    ck, p = c * prod(kernel), prod(out_sz)
    og, ckg = o // groups, ck // groups
    g3 = reshaped(g, (n, o, p))
    wt = reshaped(w, (groups, og, ckg)).transpose(0, 2, 1)
    dtype = np.result_type(g, w)
    scratch = empty(((o + ck) * nb * p,), dtype=dtype)  # one block: rounded up once
    gbuf = scratch[:o * nb * p].reshape(o, nb, p)
    buf = scratch[o * nb * p:].reshape(ck, nb * p)
    gx = zeros(x_shape, dtype=dtype)
    nd = len(kernel)
    with _blas_threads(ckg * og * nb * p):
        for a in range(0, n, nb):
            m = min(n, a + nb) - a
            gc = gbuf[:, :m]
            np.copyto(gc, g3[a:a + m].transpose(1, 0, 2))
            d = buf[:, :m * p]
            np.matmul(wt, gc.reshape(groups, og, m * p), out=d.reshape(groups, ckg, m * p))
            d = d.reshape((c,) + kernel + (m, p)).transpose(
                (nd + 1, 0) + tuple(range(1, nd + 1)) + (nd + 2,))  # (m, C, *kernel, P)
            _col2im_add(gx[a:a + m], d, geo, out_sz, flat=geo[1] is not None)
    return gx


# Bx*'s non-flat kernels work by chunks of samples whose temporaries (g's chunk and the
# per-offset product, or the product alone) take at most this many bytes (cache
# resident; tests shrink it), but for the channels-last GEMMs at least this many rows
# (shorter ones thread badly: (128, 512) @ (512, 512) is 1.15x slower than in one
# GEMM on 2 cores, 512 rows and more within 4%)
_GRAD_CHUNK_BYTES = 1 << 20
_GRAD_MIN_ROWS = 1024


def _channels_first_pays(x_shape, w_shape, out_sz, groups) -> bool:
    """Whether Bx*'s channels-first kernel beats the channels-last one (measured, 1-3-d,
    float32 and float64: up to 3x faster where chosen, up to 1.6x slower elsewhere):
    ungrouped or depthwise weights (grouped ones would take a GEMM per sample and
    group), output rows of at least 8 entries and planes of at least 2 C (its adds run
    along output rows; its GEMMs are one sample's planes), and one of: 1-d (long rows,
    one strided axis), a 1x1 kernel (one offset: the channels-last copy of g is not
    amortized) or at most 8 input channels (first layers; there the channels-last GEMMs
    and adds run along rows of C)."""
    c = x_shape[1]
    plain = groups == 1 or w_shape[0] == c == groups
    if not plain or out_sz[-1] < 8 or prod(out_sz) < 2 * c:
        return False
    return len(out_sz) == 1 or prod(w_shape[2:]) == 1 or c <= 8


def _input_grad_strided(g, w, x_shape, taps, groups) -> np.ndarray:
    """Bx*(g, w) for geometries that are not flat shifts (strided, or narrower outputs),
    added into the strided block of the inputs each kernel offset came from,
    channels-first (`_input_grad_channels_first`: adds along output rows) or
    channels-last (`_input_grad_channels_last`: adds along rows of C), as
    `_channels_first_pays` says."""
    if _channels_first_pays(x_shape, w.shape, g.shape[2:], groups):
        return _input_grad_channels_first(g, w, x_shape, taps, groups)
    return _input_grad_channels_last(g, w, x_shape, taps, groups)


def _input_grad_channels_first(g, w, x_shape, taps, groups) -> np.ndarray:
    """Bx*(g, w), groups 1 or depthwise, channels-first. Ungrouped: through the columns'
    gradient (`_input_grad_columns`: one GEMM for all kernel offsets per chunk of
    samples, the chunk's columns at most the input's size: few GEMMs, which is what
    matters on 2 loaded cores, 0.48x the small chunks' time on dcgan_d1). Depthwise, straight
    from g's (N, O, P) layout with no copy of g: per chunk of samples and kernel
    offset, g's chunk times the offset's weight column into an (nb, C, P) buffer reused
    across offsets and chunks (at most `_GRAD_CHUNK_BYTES`), added into the strided
    block of the (N, C, *in) gradient."""
    n, c = x_shape[:2]
    o, nd = w.shape[0], len(x_shape) - 2
    out_sz = tuple(g.shape[2:])
    p = prod(out_sz)
    dtype = np.result_type(g, w)
    if groups == 1:          # columns of at most the input's size, as the flat path's
        nb = min(n, max(1, prod(x_shape[1:]) * n // (c * prod(w.shape[2:]) * p)))
        return _input_grad_columns(g, w, x_shape, (taps, None), 1, nb)
    g3 = reshaped(g, (n, o, p))
    w2 = copy(w.transpose(tuple(range(2, nd + 2)) + (0, 1)))     # (*kernel, C, 1)
    nb = min(n, max(1, _GRAD_CHUNK_BYTES // (c * p * dtype.itemsize)))
    buf = empty((nb, c, p), dtype=dtype)
    gx = zeros(x_shape, dtype=dtype)
    for a in range(0, n, nb):
        m = min(n, a + nb) - a
        b, ga, gxa = buf[:m], g3[a:a + m], gx[a:a + m]
        bn = b.reshape((m, c) + out_sz)
        for _, idx, out_blk, in_blk in taps:
            np.multiply(ga, w2[idx], out=b)
            dst = gxa[in_blk]
            np.add(dst, bn[out_blk], out=dst)
    return gx


def _grad_chunk(n: int, p: int, per_row: int, itemsize: int) -> int:
    """Samples per chunk of Bx*'s strided kernels: temporaries of `per_row` entries per
    output position within `_GRAD_CHUNK_BYTES`, but as many whole samples as
    `_GRAD_MIN_ROWS` output positions hold (at least one)."""
    return min(n, max(1, _GRAD_MIN_ROWS // p, _GRAD_CHUNK_BYTES // (p * per_row * itemsize)))


def _channels_last_dense(gc, w2, out, t, taps) -> None:
    """Add the input gradient of one chunk of samples into `out` (m, *in, C), ungrouped:
    `gc` (m, *out, O) is the chunk of g channels-last, `w2` (O, K*C) the weight. ONE
    GEMM (m*P, O) @ (O, K*C) for all kernel offsets into `t` (m*P, K*C), then per
    offset its (m, *out, C) slice added into out's block (rows of C contiguous)."""
    m, out_sz, o = gc.shape[0], tuple(gc.shape[1:-1]), gc.shape[-1]
    c = out.shape[-1]
    np.matmul(gc.reshape(-1, o), w2, out=t)
    tn = t.reshape((m,) + out_sz + (-1, c))                    # (m, *out, K, C)
    for k, (_, _, out_blk, in_blk) in enumerate(taps):
        dst = out[(slice(None),) + in_blk[1:]]
        np.add(dst, tn[(slice(None),) + out_blk[1:] + (k,)], out=dst)


def _channels_last_chunk(gc, w2, out, t, taps, groups) -> None:
    """Add the input gradient of one chunk of samples into `out` (m, *in, C), one GEMM
    per kernel offset: `gc` (m, *out, O) is the chunk of g channels-last, `w2` (*kernel,
    O, C/G) the weight. Per offset one batched GEMM over the groups (m*P, O/G) @ (O/G,
    C/G) (a product for depthwise weights) into the product buffer `t` (m*P, C), added
    into out's block."""
    m, out_sz, o = gc.shape[0], gc.shape[1:-1], gc.shape[-1]
    c = out.shape[-1]
    og, cg = o // groups, c // groups
    g2 = gc.reshape(-1, o)
    tn = t.reshape((m,) + tuple(out_sz) + (c,))
    depthwise = og == cg == 1
    if not depthwise:
        gg = g2.reshape(-1, groups, og).transpose(1, 0, 2)
        tg = t.reshape(-1, groups, cg).transpose(1, 0, 2)
    for _, idx, out_blk, in_blk in taps:
        wk = w2[idx]
        if depthwise:
            np.multiply(g2, wk.reshape(o), out=t)
        else:
            np.matmul(gg, wk.reshape(groups, og, cg), out=tg)
        dst = out[(slice(None),) + in_blk[1:]]
        np.add(dst, tn[(slice(None),) + out_blk[1:]], out=dst)


def _all_offsets_pays(n: int, p: int, o: int, c: int, kk: int, itemsize: int) -> bool:
    """Whether Bx*'s channels-last kernel, ungrouped, takes ONE GEMM for all `kk` kernel
    offsets (`_channels_last_dense`) rather than one per offset (`_channels_last_chunk`):
    from `_ALL_OFFSETS_MACS` (fewer hand-offs won on 2 threads, 0.15-0.57x the
    per-offset time on dcgan_d2/g1, when those GEMMs still threaded; on one thread the
    two are within 0.88-1.08x there). Smaller ones keep one per offset: the per-offset
    product (one offset's rows of C) stays in cache, and the all-offsets kernel was
    1.15-1.29x its time on mnist2 in float32. Depends on the shapes only, never on the
    threads in force: both engines' results stay bitwise equal."""
    nb = _grad_chunk(n, p, o + kk * c, itemsize)
    return kk > 1 and nb * p * o * kk * c >= _ALL_OFFSETS_MACS


def _input_grad_channels_last(g, w, x_shape, taps, groups) -> np.ndarray:
    """Bx*(g, w) into an (N, *in, C) buffer whose rows of C channels are contiguous
    (strided NCHW adds over short rows are up to 2x slower), returned as its
    channels-first view: per chunk of samples, g's chunk copied channels-last, then one
    GEMM for all kernel offsets (`_channels_last_dense`) as `_all_offsets_pays` says,
    else one per offset (`_channels_last_chunk`). Extra memory: g's chunk and the
    product (K*C or C per output position), together at most `_GRAD_CHUNK_BYTES` (or
    `_GRAD_MIN_ROWS` output positions, if more), reused. Passes: the zero fill, one copy
    of g (by chunks), the GEMM(s) writing the product and one add per offset reading it
    into the buffer's block."""
    n, c = x_shape[:2]
    o, nd = w.shape[0], len(x_shape) - 2
    out_sz = tuple(g.shape[2:])
    dtype = np.result_type(g, w)
    kk, p = prod(w.shape[2:]), prod(out_sz)
    dense = groups == 1 and _all_offsets_pays(n, p, o, c, kk, dtype.itemsize)
    if dense:                                          # (O, *kernel, C) as (O, K*C)
        w2 = copy(w.transpose((0,) + tuple(range(2, nd + 2)) + (1,))).reshape(o, kk * c)
        tc = kk * c
    else:                                              # (*kernel, O, C/G)
        w2 = copy(w.transpose(tuple(range(2, nd + 2)) + (0, 1)))
        tc = c
    out = zeros((n,) + tuple(x_shape[2:]) + (c,), dtype=dtype)
    nb = _grad_chunk(n, p, o + tc, dtype.itemsize)
    scratch = empty((nb * p * (o + tc),), dtype=dtype)  # one block: rounded up once
    gbuf = scratch[:nb * p * o].reshape((nb,) + out_sz + (o,))
    t = scratch[nb * p * o:].reshape(nb * p, tc)
    perm = (0,) + tuple(range(2, nd + 2)) + (1,)
    with _blas_threads(nb * p * (o // groups) * (tc if dense else c // groups)):
        for a in range(0, n, nb):
            m = min(n, a + nb) - a
            np.copyto(gbuf[:m], g[a:a + m].transpose(perm))
            if dense:
                _channels_last_dense(gbuf[:m], w2, out[a:a + m], t[:m * p], taps)
            else:
                _channels_last_chunk(gbuf[:m], w2, out[a:a + m], t[:m * p], taps, groups)
    return out.transpose((0, nd + 1) + tuple(range(1, nd + 1)))


def _weight_grad(g, cols, x, w_shape, x_shape, stride, padding, dilation, groups):
    """Bw*(x, g) = sum over samples of g_n (O, P) @ cols_n^T (P, C*K), per group; the
    columns are `cols` (C*K, N, P) as the forward kept them, or built from `x` chunk by
    chunk. Per chunk of samples, g copied as (O, n*P) into a chunk buffer (<= 1 MiB) and
    one GEMM per group with the chunk's columns: long enough to thread well. A small
    result (O*C/G*K < 1024, e.g. a first layer on 3 channels) threads badly either way:
    per-sample GEMMs there, which need no copy of g (2x faster on the cnn workload's
    first conv). Passes: one copy of g (by chunks), the GEMMs reading g and the columns
    once (plus the im2col of each chunk when rebuilt)."""
    o, kernel = w_shape[0], tuple(w_shape[2:])
    n, c = x_shape[:2]
    out_sz = tuple(g.shape[2:])
    ck, p = c * prod(kernel), prod(out_sz)
    og, ckg = o // groups, ck // groups
    g3 = reshaped(g, (n, o, p))
    dtype = np.result_type(g, cols if cols is not None else x)
    acc = zeros((groups, og, ckg), dtype=dtype)
    small = o * ckg < 1024
    nb = min(n, max(1, p // ckg)) if small else min(n, max(1, (1 << 17) // (o * p)))
    if cols is None:
        geo = _geometry(tuple(x_shape), kernel, stride, padding, dilation, out_sz)
        cbuf = empty((c,) + kernel + (nb, p), dtype=x.dtype)

    def columns(a, m):
        if cols is not None:
            return cols[:, a:a + m]
        chunk = cbuf[..., :m, :]
        _im2col(x[a:a + m], chunk, geo, out_sz)
        return chunk.reshape(ck, m, p)

    with _blas_threads(og * ckg * p * (1 if small else nb)):
        if small:
            buf = empty((nb, groups, og, ckg), dtype=dtype)      # <= one sample of g
            for a in range(0, n, nb):
                m = min(n, a + nb) - a
                cc = columns(a, m).reshape(groups, ckg, m, p)
                np.matmul(g3[a:a + m].reshape(m, groups, og, p), cc.transpose(2, 0, 3, 1),
                          out=buf[:m])
                acc += buf[:m].sum(axis=0)
            return acc.reshape(w_shape)
        gbuf = empty((o, nb, p), dtype=dtype)
        for a in range(0, n, nb):
            m = min(n, a + nb) - a
            gc = gbuf[:, :m]
            np.copyto(gc, g3[a:a + m].transpose(1, 0, 2))
            cc = reshaped(columns(a, m), (groups, ckg, m * p))
            acc += memory.matmul(gc.reshape(groups, og, m * p), cc.transpose(0, 2, 1))
    return acc.reshape(w_shape)


def _bias_grad(g, *_, **__):
    # one pass over g (contiguous row sums), then a small (N, O) sum
    n, o = g.shape[:2]
    if g.size == 0:  # an empty batch or output: -1 cannot be inferred
        return np.zeros(o, g.dtype)
    return reshaped(g, (n, o, -1)).sum(axis=2).sum(axis=0)



# ---- batched or not ---------------------------------------------------------------------------
def _batched(a, nd: int):
    """`a` with a leading sample dim when it has none (PyTorch's unbatched (C, *spatial))."""
    return a[None] if a.ndim == nd + 1 else a


def _as_input(a, unbatched: bool):
    """An (N, ...) result as the input had it: without the sample dim when unbatched."""
    return a[0] if unbatched else a


def _shape(t) -> tuple:
    return tuple(np.shape(t._data if isinstance(t, Tensor) else t))


def _spatial(t, nd: int) -> tuple:
    """The trailing `nd` (spatial) sizes of `t`."""
    return _shape(t)[-nd:]


def _geom(stride, padding, dilation, groups, nd: int, name: str) -> dict:
    """The explicit geometry of the internal ops: ints or tuples of ints, per dim."""
    return dict(stride=ntuple(stride, nd, "stride", name, 1),
                padding=ntuple(padding, nd, "padding", name, 0),
                dilation=ntuple(dilation, nd, "dilation", name, 1),
                groups=positive_int(groups, "groups", name))


# ---- B, Bx* and Bw* on arrays, batched or not --------------------------------------------------
def _apply(x, w, geom: dict, out_sz, keep: bool = False) -> tuple:
    """(B(x, w) as (N, O, *out_sz) or unbatched (O, *out_sz), its columns or None)."""
    nd = w.ndim - 2
    xb = _batched(x, nd)
    if xb.shape[0] == 0:  # an empty batch (PyTorch accepts it): nothing to compute
        return np.zeros((0, w.shape[0]) + tuple(out_sz), np.result_type(x, w)), None
    out, cols = _conv_forward(xb, w, tuple(out_sz), keep, **geom)
    out = out.reshape((xb.shape[0], w.shape[0]) + tuple(out_sz))
    return _as_input(out, x.ndim == nd + 1), cols


def _input_of(g, w, x_shape, geom: dict) -> np.ndarray:
    """Bx*(g, w) of shape `x_shape` (batched or not)."""
    nd = w.ndim - 2
    unbatched = len(x_shape) == nd + 1
    shape = (1,) + tuple(x_shape) if unbatched else tuple(x_shape)
    if shape[0] == 0:  # an empty batch
        return np.zeros(shape, np.result_type(g, w))
    return _as_input(_input_grad(_batched(g, nd), w, shape, **geom), unbatched)


def _weight_of(g, cols, x, w_shape, geom: dict) -> np.ndarray:
    """Bw*(x, g) of shape `w_shape`, from the columns when kept."""
    nd = len(w_shape) - 2
    xb = _batched(x, nd)
    if xb.shape[0] == 0:  # an empty batch contributes nothing
        return np.zeros(tuple(w_shape), np.result_type(g, x))
    return _weight_grad(_batched(g, nd), cols, xb, tuple(w_shape), xb.shape, **geom)


def _bias_of(g, nd: int) -> np.ndarray:
    return _bias_grad(_batched(g, nd))


def _bias_formula(g, nd: int):
    """The bias's gradient with ops: g summed over the samples and the spatial dims."""
    lead = g.ndim - nd - 1
    return R.sum(g, dim=tuple(range(lead)) + tuple(range(lead + 1, g.ndim)))


def _cost(ans, input, weight, *_, **__) -> float:
    return gemm_cost(np.size(ans), np.size(weight) // max(1, np.shape(weight)[0]))


# ---- the internal ops: B, Bx*, Bw* with explicit geometry --------------------------------------
def _b_kx(g, ans, input, weight, stride, padding, dilation, groups, output_size):
    return _input_of(g, weight, input.shape,
                     _geom_of(stride, padding, dilation, groups, weight.ndim - 2))


def _b_kw(g, ans, input, weight, stride, padding, dilation, groups, output_size):
    return _weight_of(g, None, input, weight.shape,
                      _geom_of(stride, padding, dilation, groups, weight.ndim - 2))


def _geom_of(stride, padding, dilation, groups, nd: int) -> dict:
    """The internal ops' geometry params, normalized (ints become tuples) for the kernels."""
    return _geom(stride, padding, dilation, groups, nd, "convolution")


@defop(inputs=("input", "weight"),
       formula=(lambda g, ans, input, weight, stride, padding, dilation, groups, output_size:
                conv_input_backward(g, weight, _shape(input), stride, padding, dilation,
                                    groups),
                lambda g, ans, input, weight, stride, padding, dilation, groups, output_size:
                conv_weight_backward(input, g, _shape(weight), stride, padding, dilation,
                                     groups)),
       kernel=(_b_kx, _b_kw), export=False, cost=_cost, threaded=True)
def convolution(input: Tensor, weight: Tensor, stride=1, padding=0, dilation=1,
                groups: int = 1, output_size=None) -> Tensor:
    """B(x, w): the convolution with explicit geometry, `padding` the left padding per
    dim and `output_size` the output's spatial size (None: the largest that fits). The
    formulas of `conv_input_backward` and `conv_weight_backward` (and of the transposed
    convolutions) are this op."""
    nd = weight.ndim - 2
    geom = _geom(stride, padding, dilation, groups, nd, "convolution")
    if output_size is None:
        output_size = _out_sizes("convolution", input.shape[-nd:], weight.shape[2:],
                                 geom["stride"], geom["padding"], geom["padding"],
                                 geom["dilation"])
    return _apply(input, weight, geom, tuple(output_size))[0]


def _ib_kg(gg, ans, grad, weight, input_size, stride, padding, dilation, groups):
    geom = _geom_of(stride, padding, dilation, groups, weight.ndim - 2)
    return _apply(gg, weight, geom, grad.shape[-(weight.ndim - 2):])[0]         # B(gg, w)


def _ib_kw(gg, ans, grad, weight, input_size, stride, padding, dilation, groups):
    geom = _geom_of(stride, padding, dilation, groups, weight.ndim - 2)
    return _weight_of(grad, None, gg, weight.shape, geom)                       # Bw*(gg, g)


@defop(inputs=("grad", "weight"),
       formula=(lambda gg, ans, grad, weight, input_size, stride, padding, dilation, groups:
                convolution(gg, weight, stride, padding, dilation, groups,
                            _spatial(grad, len(_shape(weight)) - 2)),
                lambda gg, ans, grad, weight, input_size, stride, padding, dilation, groups:
                conv_weight_backward(gg, grad, _shape(weight), stride, padding, dilation,
                                     groups)),
       kernel=(_ib_kg, _ib_kw), export=False, cost=_cost, threaded=True)
def conv_input_backward(grad: Tensor, weight: Tensor, input_size: tuple, stride=1, padding=0,
                        dilation=1, groups: int = 1) -> Tensor:
    """Bx*(g, w) = d<g, conv(x, w)>/dx: a convolution's input gradient, of shape
    `input_size` (batched or not), as a differentiable op of (grad, weight); `padding` is
    the left padding per dim (the output size is grad's). Its formulas are `convolution`
    and `conv_weight_backward`."""
    nd = weight.ndim - 2
    geom = _geom(stride, padding, dilation, groups, nd, "conv_input_backward")
    return _input_of(grad, weight, tuple(input_size), geom)


def _wb_kx(gg, ans, input, grad, weight_size, stride, padding, dilation, groups):
    return _input_of(grad, gg, input.shape,
                     _geom_of(stride, padding, dilation, groups, gg.ndim - 2))


def _wb_kg(gg, ans, input, grad, weight_size, stride, padding, dilation, groups):
    geom = _geom_of(stride, padding, dilation, groups, gg.ndim - 2)
    return _apply(input, gg, geom, grad.shape[-(gg.ndim - 2):])[0]              # B(x, gg)


@defop(inputs=("input", "grad"),
       formula=(lambda gg, ans, input, grad, weight_size, stride, padding, dilation, groups:
                conv_input_backward(grad, gg, _shape(input), stride, padding, dilation,
                                    groups),
                lambda gg, ans, input, grad, weight_size, stride, padding, dilation, groups:
                convolution(input, gg, stride, padding, dilation, groups,
                            _spatial(grad, len(weight_size) - 2))),
       kernel=(_wb_kx, _wb_kg), export=False, cost=_cost, threaded=True)
def conv_weight_backward(input: Tensor, grad: Tensor, weight_size: tuple, stride=1, padding=0,
                         dilation=1, groups: int = 1) -> Tensor:
    """Bw*(x, g) = d<g, conv(x, w)>/dw: a convolution's weight gradient, of shape
    `weight_size`, as a differentiable op of (input, grad). Its formulas are
    `conv_input_backward` and `convolution`."""
    nd = len(weight_size) - 2
    geom = _geom(stride, padding, dilation, groups, nd, "conv_weight_backward")
    return _weight_of(grad, None, input, tuple(weight_size), geom)


# ---- conv1d, conv2d, conv3d --------------------------------------------------------------------
def _conv_args(nd: int, x, w, bias, stride, padding, dilation, groups) -> tuple:
    """PyTorch's checks; (geometry with the left padding, output spatial size)."""
    name = f"conv{nd}d"
    if x.ndim not in (nd + 1, nd + 2) or w.ndim != nd + 2:
        raise ValueError(f"{name}: expected {nd + 2}-D input (N, C, *spatial) or {nd + 1}-D "
                         f"(C, *spatial) and {nd + 2}-D weight (O, C/groups, *kernel), got "
                         f"shapes {x.shape} and {w.shape}")
    groups = positive_int(groups, "groups", name)
    c, o = x.shape[-nd - 1], w.shape[0]
    if w.shape[1] * groups != c:
        raise ValueError(f"{name}: input has {c} channels but weight {w.shape} expects "
                         f"{w.shape[1] * groups} (in_channels/groups = {w.shape[1]}, "
                         f"groups={groups})")
    if o % groups:
        raise ValueError(f"{name}: {o} out channels are not divisible by groups={groups}")
    if bias is not None and np.shape(bias) != (o,):
        raise ValueError(f"{name}: bias shape {np.shape(bias)} does not match {o} "
                         f"out channels")
    kernel = tuple(w.shape[2:])
    if 0 in kernel:
        raise ValueError(f"{name}: empty kernel: input {x.shape}, weight {w.shape}")
    stride = ntuple(stride, nd, "stride", name, 1)
    dilation = ntuple(dilation, nd, "dilation", name, 1)
    lo, hi = _conv_padding(padding, nd, kernel, stride, dilation, name)
    out_sz = _out_sizes(name, x.shape[-nd:], kernel, stride, lo, hi, dilation)
    return dict(stride=stride, padding=lo, dilation=dilation, groups=groups), out_sz


def _conv(nd, input, weight, bias, stride, padding, dilation, groups, needs_input_grad):
    geom, out_sz = _conv_args(nd, input, weight, bias, stride, padding, dilation, groups)
    keep = needs_input_grad[1]
    out, cols = _apply(input, weight, geom, out_sz, keep)
    if bias is not None:
        out += bias.reshape((-1,) + (1,) * nd)
    return Saved(out, cols, geom)


def _conv_formulas(nd: int) -> tuple:
    def x(g, ans, input, weight, bias, stride, padding, dilation, groups):
        geom, _ = _conv_args(nd, _data(input), _data(weight), None, stride, padding, dilation,
                             groups)
        return conv_input_backward(g, weight, _shape(input), **geom)

    def w(g, ans, input, weight, bias, stride, padding, dilation, groups):
        geom, _ = _conv_args(nd, _data(input), _data(weight), None, stride, padding, dilation,
                             groups)
        return conv_weight_backward(input, g, _shape(weight), **geom)
    return x, w, lambda g, ans, input, weight, bias, **_: _bias_formula(g, nd)


def _conv_kernels(nd: int) -> tuple:
    def x(g, ans, input, weight, bias, cols, geom, **_):
        return _input_of(g, weight, input.shape, geom)

    def w(g, ans, input, weight, bias, cols, geom, **_):
        return _weight_of(g, cols, input, weight.shape, geom)
    return x, w, lambda g, *_, **__: _bias_of(g, nd)


def _data(t):
    return t._data if isinstance(t, Tensor) else np.asarray(t)


_CONV = dict(inputs=("input", "weight", "bias"), module="torch.nn.functional", also=("torch",),
             cost=_cost, threaded=True, promote="same")


@defop(dtypes="numeric", formula=_conv_formulas(1), kernel=_conv_kernels(1), **_CONV)
def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           dilation=1, groups: int = 1, *, needs_input_grad=(False, False, False)) -> Tensor:
    """1-D cross-correlation of input (N, C, L) (or (C, L)) with weight (O, C/groups, k).

    `padding`: int, 'valid' or 'same' (stride 1; one more on the right when the total is
    odd, as in PyTorch); `groups` splits the channels into independent convolutions
    (groups == C: depthwise). im2col + one GEMM per group and chunk of samples; every
    stride-1 conv1d takes the flat-shift input gradient.
    """
    return _conv(1, input, weight, bias, stride, padding, dilation, groups, needs_input_grad)


@defop(dtypes="numeric", formula=_conv_formulas(2), kernel=_conv_kernels(2), **_CONV)
def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           dilation=1, groups: int = 1, *, needs_input_grad=(False, False, False)) -> Tensor:
    """2-D cross-correlation, NCHW input (or CHW), weight (out_channels,
    in_channels/groups, kh, kw).

    `stride`, `dilation`: int or pair; `padding`: int, pair, 'valid' or 'same' (stride 1,
    asymmetric like PyTorch's when the total is odd); `groups` splits the channels into
    independent convolutions (groups == in_channels: depthwise). Per chunk of samples,
    im2col (one strided copy per kernel offset, or one for all when unpadded) and one
    GEMM per group; the columns are kept for the weight gradient only when the weight
    needs one.
    """
    return _conv(2, input, weight, bias, stride, padding, dilation, groups, needs_input_grad)


@defop(dtypes="numeric", formula=_conv_formulas(3), kernel=_conv_kernels(3), **_CONV)
def conv3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           dilation=1, groups: int = 1, *, needs_input_grad=(False, False, False)) -> Tensor:
    """3-D cross-correlation of input (N, C, D, H, W) (or (C, D, H, W)) with weight
    (O, C/groups, kd, kh, kw); options as `conv2d`'s, with triples."""
    return _conv(3, input, weight, bias, stride, padding, dilation, groups, needs_input_grad)


# ---- the transposed convolutions: Bx* as an op of its own --------------------------------------
def _transpose_args(nd: int, x, w, bias, stride, padding, output_padding, groups,
                    dilation) -> tuple:
    """PyTorch's checks; (geometry, the output's shape (batched or not))."""
    name = f"conv_transpose{nd}d"
    if x.ndim not in (nd + 1, nd + 2) or w.ndim != nd + 2:
        raise ValueError(f"{name}: expected a {nd + 2}-D input (N, C_in, *spatial) or "
                         f"{nd + 1}-D and a {nd + 2}-D weight (C_in, C_out/groups, *kernel), "
                         f"got shapes {x.shape} and {w.shape}")
    geom = _geom(stride, padding, dilation, groups, nd, name)
    groups, c = geom["groups"], x.shape[-nd - 1]
    if w.shape[0] != c or c % groups:
        raise ValueError(f"{name}: input with {c} channels does not match weight "
                         f"of shape {w.shape} (C_in, C_out/groups, *kernel) with "
                         f"groups={groups}")
    c_out = w.shape[1] * groups
    if c_out == 0 or w.shape[0] == 0 or 0 in w.shape[2:]:  # PyTorch refuses these too
        raise ValueError(f"{name}: empty kernel, or no input or output channels: weight "
                         f"{w.shape}")
    if bias is not None and np.shape(bias) != (c_out,):
        raise ValueError(f"{name}: bias shape {np.shape(bias)} does not match "
                         f"{c_out} out channels")
    op = ntuple(output_padding, nd, "output_padding", name, 0)
    if any(a >= max(s, d) for a, s, d in zip(op, geom["stride"], geom["dilation"])):
        raise ValueError(f"{name}: output padding {op} must be smaller than either stride "
                         f"{geom['stride']} or dilation {geom['dilation']}")
    out_sz = tuple((n - 1) * s - 2 * p + d * (k - 1) + a + 1 for n, s, p, d, k, a in zip(
        x.shape[-nd:], geom["stride"], geom["padding"], geom["dilation"], w.shape[2:], op))
    if any(s < 1 for s in out_sz) or 0 in x.shape[-nd - 1:]:  # an empty batch is fine
        raise ValueError(f"{name}: input of shape {x.shape} gives an output of size "
                         f"{out_sz}: too small")
    return geom, x.shape[:-nd - 1] + (c_out,) + out_sz


def _transpose(nd, input, weight, bias, stride, padding, output_padding, groups, dilation):
    geom, shape = _transpose_args(nd, input, weight, bias, stride, padding, output_padding,
                                  groups, dilation)
    out = _input_of(input, weight, shape, geom)
    if bias is not None:
        out += bias.reshape((-1,) + (1,) * nd)
    return Saved(out, geom)


def _transpose_formulas(nd: int) -> tuple:
    def geometry(input, weight, stride, padding, output_padding, groups, dilation):
        return _transpose_args(nd, _data(input), _data(weight), None, stride, padding,
                               output_padding, groups, dilation)[0]

    def x(g, ans, input, weight, bias, **p):                               # B(g, w)
        return convolution(g, weight, **geometry(input, weight, **p),
                           output_size=_spatial(input, nd))

    def w(g, ans, input, weight, bias, **p):                               # Bw*(g, x)
        return conv_weight_backward(g, input, _shape(weight), **geometry(input, weight, **p))
    return x, w, lambda g, ans, input, weight, bias, **_: _bias_formula(g, nd)


def _transpose_kernels(nd: int) -> tuple:
    def x(g, ans, input, weight, bias, geom, **_):
        return _apply(g, weight, geom, input.shape[-nd:])[0]

    def w(g, ans, input, weight, bias, geom, **_):
        return _weight_of(input, None, g, weight.shape, geom)
    return x, w, lambda g, *_, **__: _bias_of(g, nd)


def _transpose_cost(ans, input, weight, *_, **__) -> float:
    return gemm_cost(np.size(input), np.size(weight) // max(1, np.shape(weight)[0]))


_TRANSPOSE = dict(_CONV, cost=_transpose_cost)


@defop(formula=_transpose_formulas(1), kernel=_transpose_kernels(1), **_TRANSPOSE,
       dtypes=("int64", "inexact"))
def conv_transpose1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1,
                     padding=0, output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """1-D transposed convolution of input (N, C_in, L) with weight (C_in, C_out/groups, k):
    the input gradient of conv1d (`conv_input_backward`), output length (L-1)*stride -
    2*padding + dilation*(k-1) + output_padding + 1, as PyTorch's."""
    return _transpose(1, input, weight, bias, stride, padding, output_padding, groups,
                      dilation)


@defop(formula=_transpose_formulas(2), kernel=_transpose_kernels(2), **_TRANSPOSE,
       dtypes=("int64", "inexact"))
def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1,
                     padding=0, output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """2-D transposed convolution ("deconvolution") of NCHW input with weight (C_in,
    C_out/groups, kh, kw): the input gradient of conv2d as an op of its own, whose
    derivatives are conv2d and conv2d's weight gradient. Output size per dim: (H-1)*stride
    - 2*padding + dilation*(k-1) + output_padding + 1."""
    return _transpose(2, input, weight, bias, stride, padding, output_padding, groups,
                      dilation)


@defop(formula=_transpose_formulas(3), kernel=_transpose_kernels(3), **_TRANSPOSE,
       dtypes=("int64", "inexact"))
def conv_transpose3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1,
                     padding=0, output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """3-D transposed convolution of input (N, C_in, D, H, W) with weight (C_in,
    C_out/groups, kd, kh, kw): conv3d's input gradient; options as `conv_transpose2d`'s."""
    return _transpose(3, input, weight, bias, stride, padding, output_padding, groups,
                      dilation)


# ---- unfold (im2col) and fold (col2im) ----------------------------------------------------------
def _unfold_array(x, kernel, stride, padding, dilation) -> np.ndarray:
    """(N, C*K, L): the columns of `x` (N, C, *in) as `unfold` returns them."""
    n, c = x.shape[:2]
    nd = len(kernel)
    out_sz = _out_sizes("unfold", x.shape[2:], kernel, stride, padding, padding, dilation)
    out = empty((n, c) + tuple(kernel) + (prod(out_sz),), dtype=x.dtype)
    cols = out.transpose((1,) + tuple(range(2, nd + 2)) + (0, nd + 2))   # (C, *K, N, L)
    _im2col(x, cols, _geometry(x.shape, kernel, stride, padding, dilation, out_sz), out_sz)
    return out.reshape(n, c * prod(kernel), prod(out_sz))


def _fold_array(cols, x_shape, kernel, stride, padding, dilation) -> np.ndarray:
    """The sum of the columns `cols` (N, C*K, L) back onto an (N, C, *in) image."""
    n, c = x_shape[:2]
    out_sz = _out_sizes("fold", x_shape[2:], kernel, stride, padding, padding, dilation)
    d = reshaped(cols, (n, c) + tuple(kernel) + (prod(out_sz),))
    gx = zeros(x_shape, dtype=cols.dtype)
    _col2im_add(gx, d, _geometry(tuple(x_shape), kernel, stride, padding, dilation, out_sz),
                out_sz, flat=False)
    return gx


def _fold_args(name, kernel_size, dilation, padding, stride) -> tuple:
    return (ntuple(kernel_size, 2, "kernel_size", name, 1),
            ntuple(stride, 2, "stride", name, 1), ntuple(padding, 2, "padding", name, 0),
            ntuple(dilation, 2, "dilation", name, 1))


@defop(dtypes=("bool", "inexact"),
       formula=lambda g, ans, input, kernel_size, dilation, padding, stride:
       fold(g, _shape(input)[-2:], kernel_size, dilation, padding, stride),
       module="torch.nn.functional")
def unfold(input: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """Sliding local blocks of a batched image (N, C, H, W) (or (C, H, W)) as columns
    (N, C*kh*kw, L) (PyTorch's `F.unfold`, im2col): column l holds the block at the l-th
    output position, channel-major: one strided copy per kernel offset. Its derivative is
    `fold` (col2im)."""
    if input.ndim not in (3, 4):
        raise ValueError(f"unfold: expected a 3-D or 4-D input (N, C, H, W), got shape "
                         f"{input.shape}")
    kernel, stride, padding, dilation = _fold_args("unfold", kernel_size, dilation,
                                                   padding, stride)
    out = _unfold_array(_batched(input, 2), kernel, stride, padding, dilation)
    return _as_input(out, input.ndim == 3)


@defop(dtypes=("bool", "inexact"),
       formula=lambda g, ans, input, output_size, kernel_size, dilation, padding, stride:
       unfold(g, kernel_size, dilation, padding, stride), module="torch.nn.functional")
def fold(input: Tensor, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """Columns (N, C*kh*kw, L) (or (C*kh*kw, L)) summed back into an image (N, C,
    *output_size) (PyTorch's `F.fold`, col2im: overlapping blocks add): the zero fill and
    one strided add per kernel offset. Its derivative is `unfold`."""
    if input.ndim not in (2, 3):
        raise ValueError(f"fold: expected a 2-D or 3-D input (N, C*kh*kw, L), got shape "
                         f"{input.shape}")
    x = _batched(input, 1)
    kernel, stride, padding, dilation = _fold_args("fold", kernel_size, dilation, padding,
                                                   stride)
    size = ntuple(output_size, 2, "output_size", "fold", 1)
    k = prod(kernel)
    if x.shape[1] % k:
        raise ValueError(f"fold: expected size of input's dimension 1 ({x.shape[1]}) to be "
                         f"divisible by the product of kernel_size {kernel}")
    blocks = _out_sizes("fold", size, kernel, stride, padding, padding, dilation)
    if prod(blocks) != x.shape[2]:
        raise ValueError(f"fold: expected input's dimension 2 ({x.shape[2]}) to match the "
                         f"number of sliding blocks {prod(blocks)} of output_size {size}")
    out = _fold_array(x, (x.shape[0], x.shape[1] // k) + size, kernel, stride, padding,
                      dilation)
    return _as_input(out, input.ndim == 2)
