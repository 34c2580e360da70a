"""Convolutions: `conv1d`, `conv2d`, `conv3d`, `conv_transpose1d/2d/3d`, `unfold`, `fold`.

One implementation for 1 to 3 spatial dimensions, with stride, zero padding (ints,
'valid', or 'same', asymmetric where PyTorch pads one more on the right), dilation and
groups (depthwise included). The kernels loop over the kernel offsets, each step one
vectorized numpy call over a strided view: no per-window Python work. For offset k
(one index per spatial dim), output position o reads input position o*stride + k*dilation
- padding; `_taps` gives, per offset, the block of outputs whose input lies inside the
image and that block of inputs, so padding is never materialized (no padded copy of the
input, no padded gradient buffer to crop).

conv is the bilinear map B(x, w). Forward: per chunk of samples, im2col (one strided
copy per kernel offset) and one GEMM per group. Its input gradient Bx*(g, w) has two
kernels: 'same'-like stride-1 convolutions (output as wide as the input in every spatial
dim but the first) see every offset as a shift of the flattened image, so the columns'
gradient is one GEMM per chunk of samples and col2im is one add per offset over long
contiguous rows; everything else takes, per chunk of samples, one product per offset
added into the input's strided block, channels-first straight from g (first layers,
1x1 kernels, 1-d) or channels-last from a chunk of g copied so (deeper layers).
The weight gradient Bw*(x, g) is a GEMM per chunk of samples against the columns (kept
by the forward, or rebuilt chunk by chunk). The transposed convolution is Bx* itself.

Differentiable forms (create_graph): B, Bx* and Bw* are ops whose rules are the other
two (PyTorch's double backward of convolution), so every order runs these kernels;
`unfold` (im2col) and `fold` (col2im) are each other's adjoint.

Thread safety: pure functions of their arguments; temporaries come from the caching
allocator (thread-safe).
"""
from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from .. import memory
from ..engine.cost import gemm_cost
from ..grad_mode import grad_mode
from ..memory import empty as _empty
from ..node import graph_input
from ..ops import reduce as R
from ..ops import shape as S
from ..ops.index import einsum
from ..primitive import record
from ..tensor import Tensor
from . import functional as F
from .functional import _copy, _raw, _reshape, _zeros

__all__ = ["conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d", "unfold", "fold", "conv_input_backward",
           "conv_weight_backward"]


# ---- arguments -----------------------------------------------------------------------------
def _ntuple(v, nd: int, what: str, name: str, minimum: int) -> tuple:
    """`v` (an int or `nd` ints) as a tuple of `nd` ints >= `minimum` (ValueError naming
    the op otherwise)."""
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        out = (int(v),) * nd
    else:
        try:
            out = tuple(int(a) for a in v)
        except (TypeError, ValueError):
            out = ()
        if isinstance(v, str) or len(out) != nd:
            many = {1: "a 1-tuple", 2: "a pair", 3: "a triple"}.get(nd, f"{nd}")
            raise ValueError(f"{name}: {what} must be an int or {many} of ints, got {v!r}")
    if any(a < minimum for a in out):
        if what == "stride":
            raise ValueError(f"{name}: kernel size and stride must be positive, got "
                             f"stride {v!r}")
        raise ValueError(f"{name}: {what} must be "
                         f"{'positive' if minimum > 0 else 'non-negative'}, got {v!r}")
    return out


def _groups(groups, name: str) -> int:
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ValueError(f"{name}: groups must be a positive integer, got {groups!r}")
    return int(groups)


def _prod(shape) -> int:
    return math.prod(int(s) for s in shape)


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
    lo = _ntuple(padding, nd, "padding", name, 0)
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
def _span(k: int, pad: int, stride: int, dil: int, size: int, n_out: int) -> tuple:
    """(outputs, inputs): the slice of output indices o with 0 <= o*stride + k*dil - pad <
    size, and the slice of those input indices."""
    off = k * dil - pad
    o0 = min(n_out, max(0, -(off // stride)))
    o1 = max(o0, min(n_out, (size - 1 - off) // stride + 1))
    if o1 == o0:
        return slice(0, 0), slice(0, 0)
    start = o0 * stride + off
    return slice(o0, o1), slice(start, start + (o1 - o0 - 1) * stride + 1, stride)


@functools.lru_cache(maxsize=512)
def _taps(in_sz: tuple, out_sz: tuple, kernel: tuple, stride: tuple, padding: tuple,
          dilation: tuple) -> tuple:
    """Per kernel offset in row-major order: (t, offset (one index per dim), output block,
    input block), each block an index for the trailing spatial axes of an array. Cached
    (a training loop asks for the same few geometries every step; the result is
    immutable)."""
    spans = [[_span(k, p, s, d, n, o) for k in range(kk)]
             for n, o, kk, s, p, d in zip(in_sz, out_sz, kernel, stride, padding, dilation)]
    taps = []
    for t, idx in enumerate(itertools.product(*(range(k) for k in kernel))):
        blocks = [spans[d][k] for d, k in enumerate(idx)]
        taps.append((t, idx, (Ellipsis,) + tuple(b[0] for b in blocks),
                     (Ellipsis,) + tuple(b[1] for b in blocks)))
    return tuple(taps)


@functools.lru_cache(maxsize=512)
def _geometry(x_shape: tuple, kernel: tuple, stride: tuple, padding: tuple, dilation: tuple,
              out_sz: tuple) -> tuple:
    """(taps, shifts): the kernel offsets' blocks (`_taps`), and when every offset is a
    shift of the flattened image (stride 1, output as wide as the input in every spatial
    dim but the first: 'same' convolutions, and every stride-1 conv1d), per offset
    (shift, q0, q1, cuts): the flat output range [q0, q1) reads input q + shift, and the
    index tuples `cuts` (for (..., *out) arrays) are the entries that wrap into a
    neighbouring row, to zero; else shifts is None. Cached, immutable."""
    in_sz = tuple(x_shape[2:])
    taps = _taps(in_sz, tuple(out_sz), tuple(kernel), tuple(stride), tuple(padding),
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


def _im2col(x, cols, geo, out_sz) -> None:
    """Fill `cols` (C, *kernel, n, P), the columns of samples `x` (n, C, *in): row
    (c, *k) holds input channel c at kernel offset k for every output position, 0 in the
    padding. One strided copy per kernel offset (rows are long: P per sample and
    channel); `geo` is `_geometry`'s."""
    taps, shifts = geo
    n, c = x.shape[:2]
    shape = (n, c) + tuple(out_sz)
    xf = _reshape(x, (n, c, -1)) if shifts else None
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
    at most `F._COLS_BYTES`: cache resident for the GEMM), im2col into a chunk of the
    column buffer (the whole buffer when kept for the weight gradient) and one GEMM per
    group: W_g (O/G, C/G*K) @ cols_g (C/G*K, n*P) into a chunk buffer copied into the
    output as (n, O, P); a small weight (< 1024 entries, e.g. a first layer on 3
    channels) multiplies per sample straight into the output instead."""
    n, c = x.shape[:2]
    o, kernel = w.shape[0], tuple(w.shape[2:])
    ck, p = c * _prod(kernel), _prod(out_sz)
    dtype = np.result_type(x, w)
    geo = _geometry(x.shape, kernel, stride, padding, dilation, out_sz)
    nb = min(n, max(1, F._COLS_BYTES // (ck * p * x.itemsize)))
    cols = _empty((c,) + kernel + (n if keep else nb, p), dtype=x.dtype)
    out = _empty((n, o, p), dtype=dtype)
    og, ckg = o // groups, ck // groups
    w3 = _reshape(w, (groups, og, ckg))
    obuf = None if w.size < 1024 else _empty((groups, og, nb * p), dtype=dtype)
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

    Flat geometries ('same' stride 1): per chunk of samples, g's chunk copied as (O,
    n*P) into a chunk buffer, one GEMM per group W_g^T @ g_g into a column buffer of at
    most the input's size (one sample's columns if larger), then col2im as one add per
    kernel offset over long contiguous rows (a GEMM per chunk threads well; one per
    sample does not, one over the whole batch leaves the cache). Passes: the zero fill,
    then per chunk a copy of g's chunk, the GEMM writing the chunk's columns and K adds
    reading them (while in cache). Other geometries: `_input_grad_strided`."""
    out_sz = tuple(g.shape[2:])
    kernel = tuple(w.shape[2:])
    geo = _geometry(tuple(x_shape), kernel, stride, padding, dilation, out_sz)
    if geo[1] is None:
        return _input_grad_strided(g, w, x_shape, geo[0], groups)
    n, c = x_shape[:2]
    o = w.shape[0]
    ck, p = c * _prod(kernel), _prod(out_sz)
    og, ckg = o // groups, ck // groups
    g3 = _reshape(g, (n, o, p))
    wt = _reshape(w, (groups, og, ckg)).transpose(0, 2, 1)
    nb = min(n, max(1, _prod(x_shape[1:]) * n // (ck * p)))        # samples per chunk
    dtype = np.result_type(g, w)
    gbuf = _empty((o, nb, p), dtype=dtype)
    buf = _empty((ck, nb * p), dtype=dtype)
    gx = _zeros(x_shape, dtype=dtype)
    nd = len(kernel)
    for a in range(0, n, nb):
        m = min(n, a + nb) - a
        gc = gbuf[:, :m]
        np.copyto(gc, g3[a:a + m].transpose(1, 0, 2))
        d = buf[:, :m * p]
        np.matmul(wt, gc.reshape(groups, og, m * p), out=d.reshape(groups, ckg, m * p))
        d = d.reshape((c,) + kernel + (m, p)).transpose(
            (nd + 1, 0) + tuple(range(1, nd + 1)) + (nd + 2,))      # (m, C, *kernel, P)
        _col2im_add(gx[a:a + m], d, geo, out_sz, flat=True)
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
    if not plain or out_sz[-1] < 8 or _prod(out_sz) < 2 * c:
        return False
    return len(out_sz) == 1 or _prod(w_shape[2:]) == 1 or c <= 8


def _input_grad_strided(g, w, x_shape, taps, groups) -> np.ndarray:
    """Bx*(g, w) for geometries that are not flat shifts (strided, or narrower outputs):
    one product per kernel offset, added into the strided block of the inputs it came
    from, channels-first (`_input_grad_channels_first`: no copy of g, adds along output
    rows) or channels-last (`_input_grad_channels_last`: adds along rows of C), as
    `_channels_first_pays` says."""
    if _channels_first_pays(x_shape, w.shape, g.shape[2:], groups):
        return _input_grad_channels_first(g, w, x_shape, taps, groups)
    return _input_grad_channels_last(g, w, x_shape, taps, groups)


def _input_grad_channels_first(g, w, x_shape, taps, groups) -> np.ndarray:
    """Bx*(g, w), groups 1 or depthwise, straight from g's (N, O, P) layout: per chunk of
    samples and kernel offset, W_k^T (C, O) @ g_n (O, P) for each sample (one batched
    GEMM; a product for depthwise weights) into an (nb, C, P) buffer reused across
    offsets and chunks (at most `_GRAD_CHUNK_BYTES`), added into the strided block of
    the (N, C, *in) gradient. No copy of g. Passes: the zero fill of the gradient, then
    per offset the GEMM reading g's chunk and writing the buffer, and one add reading
    the buffer (in cache) into the gradient's block."""
    n, c = x_shape[:2]
    o, nd = w.shape[0], len(x_shape) - 2
    out_sz = tuple(g.shape[2:])
    p = _prod(out_sz)
    dtype = np.result_type(g, w)
    depthwise = groups > 1
    g3 = _reshape(g, (n, o, p))
    if depthwise:                                   # (*kernel, C, 1): a column per offset
        w2 = _copy(w.transpose(tuple(range(2, nd + 2)) + (0, 1)))
    else:                                           # (*kernel, C, O): W_k^T per offset
        w2 = _copy(w.transpose(tuple(range(2, nd + 2)) + (1, 0)))
    nb = min(n, max(1, _GRAD_CHUNK_BYTES // (c * p * dtype.itemsize)))
    buf = _empty((nb, c, p), dtype=dtype)
    gx = _zeros(x_shape, dtype=dtype)
    for a in range(0, n, nb):
        m = min(n, a + nb) - a
        b, ga, gxa = buf[:m], g3[a:a + m], gx[a:a + m]
        bn = b.reshape((m, c) + out_sz)
        for _, idx, out_blk, in_blk in taps:
            if depthwise:
                np.multiply(ga, w2[idx], out=b)
            else:
                np.matmul(w2[idx], ga, out=b)
            dst = gxa[in_blk]
            np.add(dst, bn[out_blk], out=dst)
    return gx


def _channels_last_chunk(gc, w2, out, t, taps, groups) -> None:
    """Add the input gradient of one chunk of samples into `out` (m, *in, C): `gc`
    (m, *out, O) is the chunk of g channels-last, `w2` (*kernel, O, C/G) the weight. Per
    kernel offset one GEMM per group (m*P, O/G) @ (O/G, C/G) (a product for depthwise
    weights) into the product buffer `t` (m*P, C), added into out's block."""
    m, out_sz, o = gc.shape[0], gc.shape[1:-1], gc.shape[-1]
    c = out.shape[-1]
    og, cg = o // groups, c // groups
    g2 = gc.reshape(-1, o)
    tn = t.reshape((m,) + tuple(out_sz) + (c,))
    depthwise = groups > 1 and og == cg == 1
    if groups > 1 and not depthwise:
        gg = g2.reshape(-1, groups, og).transpose(1, 0, 2)
        tg = t.reshape(-1, groups, cg).transpose(1, 0, 2)
    for _, idx, out_blk, in_blk in taps:
        wk = w2[idx]
        if groups == 1:
            np.matmul(g2, wk, out=t)
        elif depthwise:
            np.multiply(g2, wk.reshape(o), out=t)
        else:
            np.matmul(gg, wk.reshape(groups, og, cg), out=tg)
        dst = out[(slice(None),) + in_blk[1:]]
        np.add(dst, tn[(slice(None),) + out_blk[1:]], out=dst)


def _input_grad_channels_last(g, w, x_shape, taps, groups) -> np.ndarray:
    """Bx*(g, w) into an (N, *in, C) buffer whose rows of C channels are contiguous
    (strided NCHW adds over short rows are up to 2x slower), returned as its
    channels-first view: per chunk of samples, g's chunk copied channels-last and
    `_channels_last_chunk` (one GEMM per offset and group). Extra memory: g's chunk and
    one product per offset, together at most `_GRAD_CHUNK_BYTES` (or `_GRAD_MIN_ROWS`
    output positions, if more), reused. Passes: the zero fill, one copy of g (by
    chunks), per offset the GEMM writing the product and one add reading it (in cache)
    into the buffer's block."""
    n, c = x_shape[:2]
    o, nd = w.shape[0], len(x_shape) - 2
    out_sz = tuple(g.shape[2:])
    dtype = np.result_type(g, w)
    w2 = _copy(w.transpose(tuple(range(2, nd + 2)) + (0, 1)))       # (*kernel, O, C/G)
    out = _zeros((n,) + tuple(x_shape[2:]) + (c,), dtype=dtype)
    p = _prod(out_sz)
    nb = min(n, max(-(-_GRAD_MIN_ROWS // p), _GRAD_CHUNK_BYTES // (p * (o + c) * dtype.itemsize)))
    gbuf = _empty((nb,) + out_sz + (o,), dtype=dtype)
    t = _empty((nb * p, c), dtype=dtype)
    perm = (0,) + tuple(range(2, nd + 2)) + (1,)
    for a in range(0, n, nb):
        m = min(n, a + nb) - a
        np.copyto(gbuf[:m], g[a:a + m].transpose(perm))
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
    ck, p = c * _prod(kernel), _prod(out_sz)
    og, ckg = o // groups, ck // groups
    g3 = _reshape(g, (n, o, p))
    dtype = np.result_type(g, cols if cols is not None else x)
    acc = _zeros((groups, og, ckg), dtype=dtype)
    small = o * ckg < 1024
    nb = min(n, max(1, p // ckg)) if small else min(n, max(1, (1 << 17) // (o * p)))
    if cols is None:
        geo = _geometry(tuple(x_shape), kernel, stride, padding, dilation, out_sz)
        cbuf = _empty((c,) + kernel + (nb, p), dtype=x.dtype)

    def columns(a, m):
        if cols is not None:
            return cols[:, a:a + m]
        chunk = cbuf[..., :m, :]
        _im2col(x[a:a + m], chunk, geo, out_sz)
        return chunk.reshape(ck, m, p)

    if small:
        buf = _empty((nb, groups, og, ckg), dtype=dtype)      # <= one sample of g
        for a in range(0, n, nb):
            m = min(n, a + nb) - a
            cc = columns(a, m).reshape(groups, ckg, m, p)
            np.matmul(g3[a:a + m].reshape(m, groups, og, p), cc.transpose(2, 0, 3, 1),
                      out=buf[:m])
            acc += buf[:m].sum(axis=0)
        return acc.reshape(w_shape)
    gbuf = _empty((o, nb, p), dtype=dtype)
    for a in range(0, n, nb):
        m = min(n, a + nb) - a
        gc = gbuf[:, :m]
        np.copyto(gc, g3[a:a + m].transpose(1, 0, 2))
        cc = _reshape(columns(a, m), (groups, ckg, m * p))
        acc += memory.matmul(gc.reshape(groups, og, m * p), cc.transpose(0, 2, 1))
    return acc.reshape(w_shape)


def _bias_grad(g, *_, **__):
    # one pass over g (contiguous row sums), then a small (N, O) sum
    n, o = g.shape[:2]
    return _reshape(g, (n, o, -1)).sum(axis=2).sum(axis=0)


# ---- the ops --------------------------------------------------------------------------------
def _conv_vjp_x(g, cols, w, x, x_shape, stride, padding, dilation, groups):
    return _input_grad(g, w, x_shape, stride, padding, dilation, groups)


def _conv_vjp_w(g, cols, w, x, x_shape, stride, padding, dilation, groups):
    return _weight_grad(g, cols, x, w.shape, x_shape, stride, padding, dilation, groups)


def _conv_record(name: str, input, weight, bias, geom: dict, out_sz) -> Tensor:
    """One node: B(input, weight) (+ bias) with the output size given; the columns are
    kept for the weight gradient only when the weight needs one."""
    x, w = _raw(input), _raw(weight)
    n, o = x.shape[0], w.shape[0]
    out_sz = tuple(out_sz)
    need_w = isinstance(weight, Tensor) and weight.requires_grad and bool(grad_mode())
    out, cols = _conv_forward(x, w, out_sz, need_w, **geom)
    inputs, vjps = (input, weight), (_conv_vjp_x, _conv_vjp_w)
    if bias is not None:
        out += _raw(bias)[:, None]
        inputs, vjps = inputs + (bias,), vjps + (_bias_grad,)
    # x is kept with the columns (a reference: the columns hold its values already)
    # only for the weight rule's differentiable form (create_graph)
    return record(name, out.reshape((n, o) + out_sz), inputs, vjps,
                  saved=(cols, w, x if need_w else None),
                  kwargs=dict(x_shape=x.shape, **geom),
                  cost=gemm_cost(out.size, w[0].size), threaded=True)


def _unbatched(fn, input, *args):
    """PyTorch's unbatched inputs (C, *spatial): fn on input[None], then [0]."""
    out = fn(S.unsqueeze(input, 0) if isinstance(input, Tensor) else _raw(input)[None],
             *args)
    return S.squeeze(out, 0)


def _conv_nd(nd: int, input, weight, bias, stride, padding, dilation, groups) -> Tensor:
    name = f"conv{nd}d"
    x, w = _raw(input), _raw(weight)
    if x.ndim == nd + 1 and w.ndim == nd + 2:
        return _unbatched(lambda t, *a: _conv_nd(nd, t, *a), input, weight, bias,
                          stride, padding, dilation, groups)
    if x.ndim != nd + 2 or w.ndim != nd + 2:
        raise ValueError(f"{name}: expected {nd + 2}-D input (N, C, *spatial) or {nd + 1}-D "
                         f"(C, *spatial) and {nd + 2}-D weight (O, C/groups, *kernel), got "
                         f"shapes {x.shape} and {w.shape}")
    groups = _groups(groups, name)
    c, o = x.shape[1], w.shape[0]
    if w.shape[1] * groups != c:
        raise ValueError(f"{name}: input has {c} channels but weight {w.shape} expects "
                         f"{w.shape[1] * groups} (in_channels/groups = {w.shape[1]}, "
                         f"groups={groups})")
    if o % groups:
        raise ValueError(f"{name}: {o} out channels are not divisible by groups={groups}")
    if bias is not None and np.shape(_raw(bias)) != (o,):
        raise ValueError(f"{name}: bias shape {np.shape(_raw(bias))} does not match {o} "
                         f"out channels")
    kernel = tuple(w.shape[2:])
    if 0 in kernel or o == 0:  # PyTorch refuses both too
        raise ValueError(f"{name}: empty kernel or no output channels: weight {w.shape}")
    stride = _ntuple(stride, nd, "stride", name, 1)
    dilation = _ntuple(dilation, nd, "dilation", name, 1)
    lo, hi = _conv_padding(padding, nd, kernel, stride, dilation, name)
    out_sz = _out_sizes(name, x.shape[2:], kernel, stride, lo, hi, dilation)
    if x.shape[0] == 0 or c == 0:  # an empty batch, or no input channels: PyTorch's too
        return _empty_sum(input, weight, bias, (x.shape[0], o) + out_sz, groups, False)
    geom = dict(stride=stride, padding=lo, dilation=dilation, groups=groups)
    return _conv_record(name, input, weight, bias, geom, out_sz)


def _empty_sum(input, weight, bias, out_shape: tuple, groups: int, transposed: bool):
    """A convolution whose every output is an empty sum or that has no output: an empty
    batch, or no input channels (then the bias, or zeros). Made of ops whose values and
    gradients are the convolution's there: the products of the channel sums of input
    and weight, grouped, summed over the (empty) channels, broadcast over the output
    positions (so the weight's gradient over an empty batch is 0, as PyTorch's)."""
    x, w = _raw(input), _raw(weight)
    n, o = out_shape[:2]
    xs = R.sum(input, axis=tuple(range(2, x.ndim))) if x.ndim > 2 else input
    ws = R.sum(weight, axis=tuple(range(2, w.ndim))) if w.ndim > 2 else weight
    xs = S.reshape(xs, (n, groups, x.shape[1] // groups))
    if transposed:   # weight (C_in, C_out/groups, *k)
        ws = S.reshape(ws, (groups, w.shape[0] // groups, w.shape[1]))
        y = einsum("ngc,gcq->ngq", xs, ws)
    else:            # weight (C_out, C_in/groups, *k)
        ws = S.reshape(ws, (groups, o // groups, w.shape[1]))
        y = einsum("ngc,goc->ngo", xs, ws)
    y = S.reshape(y, (n, o) + (1,) * (len(out_shape) - 2))
    if bias is not None:
        y = y + S.reshape(bias, (o,) + (1,) * (len(out_shape) - 2))
    return S.clone(S.broadcast_to(y, out_shape))


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """1-D cross-correlation of input (N, C, L) (or (C, L)) with weight (O, C/groups, k).

    `padding`: int, 'valid' or 'same' (stride 1; one more on the right when the total is
    odd, as in PyTorch); `groups` splits the channels into independent convolutions
    (groups == C: depthwise). One node: im2col + one GEMM per group and chunk of samples;
    every stride-1 conv1d takes the flat-shift input gradient.
    """
    return _conv_nd(1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """2-D cross-correlation, NCHW input (or CHW), weight (out_channels,
    in_channels/groups, kh, kw).

    `stride`, `dilation`: int or pair; `padding`: int, pair, 'valid' or 'same' (stride 1,
    asymmetric like PyTorch's when the total is odd); `groups` splits the channels into
    independent convolutions (groups == in_channels: depthwise). Per chunk of samples,
    im2col (one strided copy per kernel offset) and one GEMM per group; the columns are
    kept for the weight gradient only when the weight needs one.
    """
    return _conv_nd(2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """3-D cross-correlation of input (N, C, D, H, W) (or (C, D, H, W)) with weight
    (O, C/groups, kd, kh, kw); options as `conv2d`'s, with triples."""
    return _conv_nd(3, input, weight, bias, stride, padding, dilation, groups)


# ---- the adjoints as ops: conv's input gradient (= the transposed convolution) and its
# weight gradient ---------------------------------------------------------------------------------
def _geom(node) -> dict:
    k = node.kwargs
    return dict(stride=k["stride"], padding=k["padding"], dilation=k["dilation"],
                groups=k["groups"])


def _cib_g(gg, g, w, x_shape, stride, padding, dilation, groups):
    return _conv_array(gg, w, dict(stride=stride, padding=padding, dilation=dilation,
                                   groups=groups), g.shape[2:])                 # B(gg, w)


def _cib_w(gg, g, w, x_shape, stride, padding, dilation, groups):
    return _weight_grad(g, None, gg, w.shape, gg.shape, stride, padding, dilation,
                        groups)                                                  # Bw*(gg, g)


def _input_backward_record(name: str, g, w, bias, x_shape: tuple, geom: dict) -> Tensor:
    """One node: Bx*(g, w) (+ bias over the channels); its rules are B and Bw*."""
    gd, wd = _raw(g), _raw(w)
    out = _input_grad(gd, wd, tuple(x_shape), **geom)
    inputs, vjps = (g, w), (_cib_g, _cib_w)
    if bias is not None:
        out += _raw(bias).reshape((-1,) + (1,) * (out.ndim - 2))
        inputs, vjps = inputs + (bias,), vjps + (_bias_grad,)
    return record(name, out, inputs, vjps, saved=(gd, wd),
                  kwargs=dict(x_shape=tuple(x_shape), **geom),
                  cost=gemm_cost(gd.size, wd[0].size), threaded=True)


def _geometry_args(nd, stride, padding, dilation, groups, name) -> dict:
    return dict(stride=_ntuple(stride, nd, "stride", name, 1),
                padding=_ntuple(padding, nd, "padding", name, 0),
                dilation=_ntuple(dilation, nd, "dilation", name, 1),
                groups=_groups(groups, name))


def conv_input_backward(g, w, x_shape: tuple, stride=1, padding=0, dilation=1,
                        groups: int = 1) -> Tensor:
    """d<g, conv(x, w)>/dx: the input gradient of a convolution (1 to 3 spatial dims) as a
    differentiable op of (g, w); `padding` is the left padding per dim (the output size
    is g's). Its rules are the convolution and `conv_weight_backward`."""
    nd = len(x_shape) - 2
    geom = _geometry_args(nd, stride, padding, dilation, groups, "conv_input_backward")
    return _input_backward_record("conv_input_backward", g, w, None, tuple(x_shape), geom)


def conv_weight_backward(x, g, w_shape: tuple, stride=1, padding=0, dilation=1,
                         groups: int = 1, cols=None) -> Tensor:
    """d<g, conv(x, w)>/dw: the weight gradient of a convolution as a differentiable op of
    (x, g) (`cols`: x's columns when the caller has them). Its rules are the convolution
    and `conv_input_backward`."""
    xd, gd = _raw(x), _raw(g)
    geom = _geometry_args(xd.ndim - 2, stride, padding, dilation, groups,
                          "conv_weight_backward")
    out = _weight_grad(gd, cols, xd, tuple(w_shape), xd.shape, **geom)
    return record("conv_weight_backward", out, (x, g), (_cwb_x, _cwb_g), saved=(xd, gd),
                  kwargs=geom, cost=gemm_cost(gd.size, out[0].size), threaded=True)


def _cwb_x(gg, x, g, stride, padding, dilation, groups):
    return _input_grad(g, gg, x.shape, stride, padding, dilation, groups)      # Bx*(g, gg)


def _cwb_g(gg, x, g, stride, padding, dilation, groups):
    return _conv_array(x, gg, dict(stride=stride, padding=padding, dilation=dilation,
                                   groups=groups), g.shape[2:])                 # B(x, gg)


def _conv_transpose_nd(nd: int, input, weight, bias, stride, padding, output_padding,
                       groups, dilation) -> Tensor:
    name = f"conv_transpose{nd}d"
    x, w = _raw(input), _raw(weight)
    if x.ndim == nd + 1 and w.ndim == nd + 2:
        return _unbatched(lambda t, *a: _conv_transpose_nd(nd, t, *a), input, weight,
                          bias, stride, padding, output_padding, groups, dilation)
    if x.ndim != nd + 2 or w.ndim != nd + 2:
        raise ValueError(f"{name}: expected a {nd + 2}-D input (N, C_in, *spatial) or "
                         f"{nd + 1}-D and a {nd + 2}-D weight (C_in, C_out/groups, *kernel), "
                         f"got shapes {x.shape} and {w.shape}")
    geom = _geometry_args(nd, stride, padding, dilation, groups, name)
    groups = geom["groups"]
    if w.shape[0] != x.shape[1] or x.shape[1] % groups:
        raise ValueError(f"{name}: input with {x.shape[1]} channels does not match weight "
                         f"of shape {w.shape} (C_in, C_out/groups, *kernel) with "
                         f"groups={groups}")
    c_out = w.shape[1] * groups
    if c_out == 0 or w.shape[0] == 0 or 0 in w.shape[2:]:  # PyTorch refuses these too
        raise ValueError(f"{name}: empty kernel, or no input or output channels: weight "
                         f"{w.shape}")
    if bias is not None and np.shape(_raw(bias)) != (c_out,):
        raise ValueError(f"{name}: bias shape {np.shape(_raw(bias))} does not match "
                         f"{c_out} out channels")
    op = _ntuple(output_padding, nd, "output_padding", name, 0)
    if any(a >= max(s, d) for a, s, d in zip(op, geom["stride"], geom["dilation"])):
        raise ValueError(f"{name}: output padding {op} must be smaller than either stride "
                         f"{geom['stride']} or dilation {geom['dilation']}")
    out_sz = tuple((n - 1) * s - 2 * p + d * (k - 1) + a + 1 for n, s, p, d, k, a in zip(
        x.shape[2:], geom["stride"], geom["padding"], geom["dilation"], w.shape[2:], op))
    if any(s < 1 for s in out_sz) or 0 in x.shape[2:]:
        raise ValueError(f"{name}: input of shape {x.shape} gives an output of size "
                         f"{out_sz}: too small")
    if x.shape[0] == 0:  # an empty batch: PyTorch's empty result
        return _empty_sum(input, weight, bias, (x.shape[0], c_out) + out_sz, groups, True)
    return _input_backward_record(name, input, weight, bias, (x.shape[0], c_out) + out_sz,
                                  geom)


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1) -> Tensor:
    """1-D transposed convolution of input (N, C_in, L) with weight (C_in, C_out/groups, k):
    the input gradient of conv1d (`conv_input_backward`), output length (L-1)*stride -
    2*padding + dilation*(k-1) + output_padding + 1, as PyTorch's."""
    return _conv_transpose_nd(1, input, weight, bias, stride, padding, output_padding,
                              groups, dilation)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1) -> Tensor:
    """2-D transposed convolution ("deconvolution") of NCHW input with weight (C_in,
    C_out/groups, kh, kw): the input gradient of conv2d as an op of its own, whose rules
    are conv2d and conv2d's weight gradient. Output size per dim: (H-1)*stride -
    2*padding + dilation*(k-1) + output_padding + 1."""
    return _conv_transpose_nd(2, input, weight, bias, stride, padding, output_padding,
                              groups, dilation)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1) -> Tensor:
    """3-D transposed convolution of input (N, C_in, D, H, W) with weight (C_in,
    C_out/groups, kd, kh, kw): conv3d's input gradient; options as `conv_transpose2d`'s."""
    return _conv_transpose_nd(3, input, weight, bias, stride, padding, output_padding,
                              groups, dilation)


# ---- unfold (im2col) and fold (col2im) ----------------------------------------------------------
def _unfold_array(x, kernel, stride, padding, dilation) -> np.ndarray:
    """(N, C*K, L): the columns of `x` (N, C, *in) as `unfold` returns them."""
    n, c = x.shape[:2]
    nd = len(kernel)
    out_sz = _out_sizes("unfold", x.shape[2:], kernel, stride, padding, padding, dilation)
    out = _empty((n, c) + tuple(kernel) + (_prod(out_sz),), dtype=x.dtype)
    cols = out.transpose((1,) + tuple(range(2, nd + 2)) + (0, nd + 2))   # (C, *K, N, L)
    _im2col(x, cols, _geometry(x.shape, kernel, stride, padding, dilation, out_sz), out_sz)
    return out.reshape(n, c * _prod(kernel), _prod(out_sz))


def _fold_array(cols, x_shape, kernel, stride, padding, dilation) -> np.ndarray:
    """The sum of the columns `cols` (N, C*K, L) back onto an (N, C, *in) image."""
    n, c = x_shape[:2]
    out_sz = _out_sizes("fold", x_shape[2:], kernel, stride, padding, padding, dilation)
    d = _reshape(cols, (n, c) + tuple(kernel) + (_prod(out_sz),))
    gx = _zeros(x_shape, dtype=cols.dtype)
    _col2im_add(gx, d, _geometry(tuple(x_shape), kernel, stride, padding, dilation, out_sz),
                out_sz, flat=False)
    return gx


def _unfold_vjp(g, x_shape, kernel, stride, padding, dilation):
    # col2im: the zero fill and one strided add per kernel offset
    return _fold_array(g, x_shape, kernel, stride, padding, dilation)


def _fold_vjp(g, x_shape, kernel, stride, padding, dilation):
    # im2col: one strided copy per kernel offset
    return _unfold_array(g, kernel, stride, padding, dilation)


def _fold_args(name, kernel_size, dilation, padding, stride) -> tuple:
    return (_ntuple(kernel_size, 2, "kernel_size", name, 1),
            _ntuple(stride, 2, "stride", name, 1), _ntuple(padding, 2, "padding", name, 0),
            _ntuple(dilation, 2, "dilation", name, 1))


def unfold(input, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """Sliding local blocks of a batched image (N, C, H, W) (or (C, H, W)) as columns
    (N, C*kh*kw, L) (PyTorch's `F.unfold`, im2col): column l holds the block at the l-th
    output position, channel-major. One node; its rule is `fold` (col2im)."""
    x = _raw(input)
    if x.ndim == 3:
        return _unbatched(lambda t, *a: unfold(t, *a), input, kernel_size, dilation,
                          padding, stride)
    if x.ndim != 4:
        raise ValueError(f"unfold: expected a 3-D or 4-D input (N, C, H, W), got shape "
                         f"{x.shape}")
    kernel, stride, padding, dilation = _fold_args("unfold", kernel_size, dilation,
                                                   padding, stride)
    out = _unfold_array(x, kernel, stride, padding, dilation)
    return record("unfold", out, (input,), (_unfold_vjp,),
                  kwargs=dict(x_shape=x.shape, kernel=kernel, stride=stride,
                              padding=padding, dilation=dilation))


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """Columns (N, C*kh*kw, L) (or (C*kh*kw, L)) summed back into an image (N, C,
    *output_size) (PyTorch's `F.fold`, col2im: overlapping blocks add). One node; its rule
    is `unfold`."""
    x = _raw(input)
    if x.ndim == 2:
        return _unbatched(lambda t, *a: fold(t, *a), input, output_size, kernel_size,
                          dilation, padding, stride)
    if x.ndim != 3:
        raise ValueError(f"fold: expected a 2-D or 3-D input (N, C*kh*kw, L), got shape "
                         f"{x.shape}")
    kernel, stride, padding, dilation = _fold_args("fold", kernel_size, dilation, padding,
                                                   stride)
    size = _ntuple(output_size, 2, "output_size", "fold", 1)
    k = _prod(kernel)
    if x.shape[1] % k:
        raise ValueError(f"fold: expected size of input's dimension 1 ({x.shape[1]}) to be "
                         f"divisible by the product of kernel_size {kernel}")
    blocks = _out_sizes("fold", size, kernel, stride, padding, padding, dilation)
    if _prod(blocks) != x.shape[2]:
        raise ValueError(f"fold: expected input's dimension 2 ({x.shape[2]}) to match the "
                         f"number of sliding blocks {_prod(blocks)} of output_size {size}")
    x_shape = (x.shape[0], x.shape[1] // k) + size
    out = _fold_array(x, x_shape, kernel, stride, padding, dilation)
    return record("fold", out, (input,), (_fold_vjp,),
                  kwargs=dict(x_shape=x_shape, kernel=kernel, stride=stride,
                              padding=padding, dilation=dilation))


def _unfold_op(x, kwargs) -> Tensor:
    """unfold with stored geometry (the differentiable form of fold's rule)."""
    return record("unfold", _unfold_array(_raw(x), kwargs["kernel"], kwargs["stride"],
                                          kwargs["padding"], kwargs["dilation"]),
                  (x,), (_unfold_vjp,), kwargs=dict(kwargs, x_shape=_raw(x).shape))


def _fold_op(x, kwargs) -> Tensor:
    """fold with stored geometry (the differentiable form of unfold's rule)."""
    return record("fold", _unfold_vjp(_raw(x), **kwargs), (x,), (_fold_vjp,), kwargs=kwargs)


# ---- differentiable forms ---------------------------------------------------------------------
def _forms() -> None:
    _conv_vjp_x.graph_node = lambda g, node: _input_backward_record(
        "conv_input_backward", g, graph_input(node, 1, node.saved[1]), None,
        node.kwargs["x_shape"], _geom(node))
    _conv_vjp_w.graph_node = lambda g, node: conv_weight_backward(
        graph_input(node, 0, node.saved[2]), g, node.saved[1].shape, **_geom(node),
        cols=node.saved[0])
    _bias_grad.graph_node = lambda g, node: R.sum(g, axis=(0,) + tuple(range(2, g.ndim)))
    _cib_g.graph_node = lambda gg, node: _conv_record(
        f"conv{gg.ndim - 2}d", gg, graph_input(node, 1, node.saved[1]), None, _geom(node),
        node.saved[0].shape[2:])
    _cib_w.graph_node = lambda gg, node: conv_weight_backward(
        gg, graph_input(node, 0, node.saved[0]), node.saved[1].shape, **_geom(node))
    _cwb_x.graph_node = lambda gg, node: _input_backward_record(
        "conv_input_backward", graph_input(node, 1, node.saved[1]), gg, None,
        node.saved[0].shape, _geom(node))
    _cwb_g.graph_node = lambda gg, node: _conv_record(
        f"conv{gg.ndim - 2}d", graph_input(node, 0, node.saved[0]), gg, None, _geom(node),
        node.saved[1].shape[2:])
    _unfold_vjp.graph_node = lambda g, node: _fold_op(g, node.kwargs)
    _fold_vjp.graph_node = lambda g, node: _unfold_op(g, {
        k: v for k, v in node.kwargs.items() if k != "x_shape"})


_forms()

# the names the differentiable forms had in nn/graph.py
conv2d_input_backward = conv_input_backward
conv2d_weight_backward = conv_weight_backward
