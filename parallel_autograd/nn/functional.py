"""PyTorch-style functional API (`torch.nn.functional` signatures and semantics).

linear, conv2d, the pools, layer_norm, rms_norm, embedding, dropout, nll_loss,
cross_entropy and scaled_dot_product_attention are each one node (`record`) with
fused rules: a rule allocates the arrays it returns and at most one temporary it
states (block-sized where it can be), reuses its own temporaries with `out=`, and
never writes into `g`, a saved array or the caller's arrays; the comment of each
rule counts its passes over memory. mse_loss and the activations come from the op
library. Images are NCHW. The full-size arrays a forward or a rule makes (outputs,
temporaries, columns, masks) come from the caching allocator (`memory`): reused memory,
not fresh pages to fault in every step.
"""
from __future__ import annotations

import math

import numpy as np

from .. import memory
from ..engine.cost import gemm_cost
from ..memory import empty as _empty
from ..memory import pooled as P
from ..ops import reduce as _rd
from ..ops.elementwise import gelu, leaky_relu, relu, sigmoid, silu, tanh
from ..primitive import record
from ..random import current_generator
from ..tensor import Tensor

__all__ = [
    "linear", "conv2d", "max_pool2d", "avg_pool2d", "layer_norm", "rms_norm", "embedding",
    "dropout", "nll_loss", "cross_entropy", "mse_loss", "scaled_dot_product_attention",
    "relu", "leaky_relu", "gelu", "silu", "sigmoid", "tanh", "softmax", "log_softmax",
]


def _raw(x):
    return x.data if isinstance(x, Tensor) else np.asarray(x)


def _zeros(shape, dtype) -> np.ndarray:
    """`np.zeros(shape, dtype)` from the cache: an empty array and one zero-filling pass."""
    z = _empty(shape, dtype)
    z.fill(0)
    return z


def _copy(a) -> np.ndarray:
    """`a.copy()` (C order) into cached memory."""
    c = _empty(a.shape, a.dtype)
    np.copyto(c, a)
    return c


def _reshape(a, shape) -> np.ndarray:
    """`a.reshape(shape)`: a view when numpy can make one, else numpy's copy (C order)
    made in cached memory."""
    try:
        return a.reshape(shape, copy=False)
    except TypeError:                                 # numpy < 2.1: no copy keyword
        return a.reshape(shape)
    except ValueError:                                # a view is impossible: a copy
        return _copy(a).reshape(shape)


def _pair(v, what: str) -> tuple:
    if isinstance(v, (int, np.integer)):
        return int(v), int(v)
    v = tuple(int(a) for a in v)
    if len(v) != 2:
        raise ValueError(f"{what} must be an int or a pair of ints, got {v}")
    return v


# ---- activations: PyTorch's `dim` keyword --------------------------------------------
def softmax(input, dim: int = -1):
    return _rd.softmax(input, axis=dim)


def log_softmax(input, dim: int = -1):
    return _rd.log_softmax(input, axis=dim)


# ---- linear ----------------------------------------------------------------------------
def _sum_to(g, shape) -> np.ndarray:
    """`g` summed over the dimensions it was broadcast along to reach `shape`: a new
    array (a copy when nothing is summed), never `g` itself."""
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape)
                                      if n == 1 and g.shape[lead + i] != 1)
    return (g.sum(axis=axes, keepdims=True) if axes else _copy(g)).reshape(shape)


def _linear_vjp_x(g, x, w, b_shape=None):
    # g @ W as one GEMM over all leading dimensions (one pass writing the result, the
    # gradient)
    w2 = _reshape(w, (-1, x.shape[-1]))
    return memory.matmul(_reshape(g, (-1, w2.shape[0])), w2).reshape(x.shape)


def _linear_vjp_w(g, x, w, b_shape=None):
    # g^T @ x as one GEMM reading g and x once, already (out_features, in_features): no
    # transposed copy
    w2 = _reshape(w, (-1, x.shape[-1]))
    return memory.matmul(_reshape(g, (-1, w2.shape[0])).T,
                   _reshape(x, (-1, x.shape[-1]))).reshape(w.shape)


def _linear_vjp_b(g, x, w, b_shape):
    # one reduction pass over g
    return _sum_to(g, b_shape)


def linear(input, weight, bias=None):
    """`input @ weight.T + bias`, weight of shape (out_features, in_features) or (in,).

    One node: one GEMM over all leading dimensions of the input (a batch of rows, not a
    batch of products), the bias added in place; the rules are one GEMM each (one
    reduction for the bias) and keep only the input and the weight.
    """
    x, w = _raw(input), _raw(weight)
    shape, wshape = x.shape, w.shape
    if not shape or wshape[-1:] != shape[-1:] or len(wshape) > 2:
        raise ValueError(f"linear: input of shape {shape} does not match weight of "
                         f"shape {wshape} (out_features, in_features)")
    out_shape = shape[:-1] + wshape[:-1]
    y = memory.matmul(_reshape(x, (-1, shape[-1])),
                      _reshape(w, (-1, shape[-1])).T).reshape(out_shape)
    b_shape = None if bias is None else np.shape(_raw(bias))
    if b_shape is not None and np.broadcast_shapes(out_shape, b_shape) == out_shape \
            and np.can_cast(np.result_type(y, _raw(bias)), y.dtype, "same_kind"):
        y += _raw(bias)
        inputs, vjps = (input, weight, bias), (_linear_vjp_x, _linear_vjp_w, _linear_vjp_b)
    else:
        inputs, vjps = (input, weight), (_linear_vjp_x, _linear_vjp_w)
    out = record("linear", y, inputs, vjps, saved=(x, w),
                 kwargs=dict(b_shape=b_shape) if len(inputs) == 3 else None,
                 cost=gemm_cost(y.size, shape[-1]), threaded=True)
    if bias is not None and len(inputs) == 2:      # a bias that broadcasts the output up
        out = out + bias
    return out


# ---- convolution and pooling: unrolled over the kernel offsets ---------------------------
# The kernels here loop over the kh*kw kernel offsets, each step one vectorized numpy
# call over a strided view: no per-window Python work. For offset (i, j), output
# position (r, c) reads input pixel (r*sh + i - ph, c*sw + j - pw); `_taps` gives, per
# offset, the block of outputs whose pixel lies inside the image and that block of
# pixels, so padding is never materialized (no padded copy of the input, no padded
# gradient buffer to crop).
def _span(k: int, pad: int, stride: int, size: int, n_out: int) -> tuple:
    """(outputs, inputs): the slice of output indices o with 0 <= o*stride + k - pad <
    size, and the slice of those input indices."""
    o0 = min(n_out, max(0, -((k - pad) // stride)))
    o1 = max(o0, min(n_out, (size - 1 + pad - k) // stride + 1))
    if o1 == o0:
        return slice(0, 0), slice(0, 0)
    start = o0 * stride + k - pad
    return slice(o0, o1), slice(start, start + (o1 - o0 - 1) * stride + 1, stride)


def _taps(in_hw, out_hw, kernel, stride, padding) -> list:
    """Per kernel offset in row-major order: (t = i*kw + j, i, j, output block, input
    block), each block an index for the last two axes of an NCHW array."""
    taps = []
    for i in range(kernel[0]):
        ro, ri = _span(i, padding[0], stride[0], in_hw[0], out_hw[0])
        for j in range(kernel[1]):
            co, ci = _span(j, padding[1], stride[1], in_hw[1], out_hw[1])
            taps.append((i * kernel[1] + j, i, j, (Ellipsis, ro, co), (Ellipsis, ri, ci)))
    return taps


def _flat_shift(i: int, j: int, padding, in_hw, n_out: int) -> tuple:
    """Stride 1 with output width == input width: offset (i, j) is a shift of the
    flattened image by `shift`; returns (shift, q0, q1), the flat output range that
    reads inside the image (its wrapped columns are zeroed by `_zero_wrapped`)."""
    h, w = in_hw
    shift = (i - padding[0]) * w + (j - padding[1])
    q0 = max(0, -shift)
    return shift, q0, max(q0, min(n_out, h * w - shift))


def _zero_wrapped(a4, dj: int) -> None:
    """Zero the columns of `a4` (..., Ho, W) that a flat shift by `dj` columns would
    wrap into the neighbouring row."""
    if dj > 0:
        a4[..., a4.shape[-1] - dj:] = 0
    elif dj < 0:
        a4[..., :-dj] = 0


def _zero_outside(a4, rows: slice, cols: slice) -> None:
    """Zero the entries of `a4` (..., Ho, Wo) outside the block [rows, cols]."""
    r0, r1, c0, c1 = rows.start, rows.stop, cols.start, cols.stop
    if r0 == r1 or c0 == c1:
        a4[...] = 0
        return
    a4[..., :r0, :] = 0
    a4[..., r1:, :] = 0
    a4[..., r0:r1, :c0] = 0
    a4[..., r0:r1, c1:] = 0


def _out_size(name, size, k, s, p):
    if s <= 0 or k <= 0 or p < 0:
        raise ValueError(f"{name}: kernel size and stride must be positive and padding "
                         f"non-negative, got kernel {k}, stride {s}, padding {p}")
    o = (size + 2 * p - k) // s + 1
    if o <= 0:
        raise ValueError(f"{name}: kernel size {k} is larger than the padded input "
                         f"size {size + 2 * p}")
    return o


def _conv_geometry(x_shape, kernel, stride, padding, out_hw) -> tuple:
    """(taps, flat): the kernel offsets' blocks, and whether every offset is a flat
    shift of the image (stride 1, output as wide as the input: 'same' convolutions)."""
    taps = _taps(x_shape[2:], out_hw, kernel, stride, padding)
    return taps, stride == (1, 1) and out_hw[1] == x_shape[3]


def _im2col(x, cols, padding, taps, flat: bool, out_hw) -> None:
    """Fill `cols` (C, kh, kw, n, Ho*Wo), the columns of samples `x` (n, C, H, W): row
    (c, i, j) holds input channel c at kernel offset (i, j) for every output position,
    0 in the padding. One strided copy per kernel offset (rows are long: Ho*Wo per
    sample and channel)."""
    n, c, h, w = x.shape
    ho, wo = out_hw
    xf = _reshape(x, (n, c, h * w)) if flat else None
    for _, i, j, out_blk, in_blk in taps:
        dst = cols[:, i, j].transpose(1, 0, 2)                # (n, C, Ho*Wo) view
        if flat:
            shift, q0, q1 = _flat_shift(i, j, padding, (h, w), ho * wo)
            dst[..., :q0] = 0
            dst[..., q1:] = 0
            dst[..., q0:q1] = xf[..., q0 + shift:q1 + shift]
            _zero_wrapped(dst.reshape(n, c, ho, wo), j - padding[1])
        else:
            d4 = dst.reshape(n, c, ho, wo)
            _zero_outside(d4, out_blk[1], out_blk[2])
            d4[out_blk] = x[in_blk]


_COLS_BYTES = 1 << 22   # columns per chunk of the conv forward: cache resident for its GEMM


def _conv_forward(x, w, stride, padding, out_hw, keep: bool) -> tuple:
    """(output (N, O, Ho*Wo), columns (C*kh*kw, N, Ho*Wo) or None). Per chunk of
    samples (<= 4 MiB of columns): im2col, then one GEMM while the chunk is in cache,
    written into the output: (O, C*kh*kw) @ (C*kh*kw, n*Ho*Wo) and a transposed copy, or
    (small O*C*kh*kw, which threads badly) one GEMM per sample straight into NCHW. The
    columns are kept (written in place, chunk by chunk) only when `keep`."""
    n, c = x.shape[:2]
    o, _, kh, kw = w.shape
    ck, p = c * kh * kw, out_hw[0] * out_hw[1]
    dtype = np.result_type(x, w)
    taps, flat = _conv_geometry(x.shape, (kh, kw), stride, padding, out_hw)
    nb = min(n, max(1, _COLS_BYTES // (ck * p * x.itemsize)))
    cols = _empty((c, kh, kw, n if keep else nb, p), dtype=x.dtype)
    out = _empty((n, o, p), dtype=dtype)
    w2 = _reshape(w, (o, ck))
    obuf = None if o * ck < 1024 else _empty((o, nb * p), dtype=dtype)
    for a in range(0, n, nb):
        m = min(n, a + nb) - a
        chunk = cols[:, :, :, a:a + m] if keep else cols[:, :, :, :m]
        _im2col(x[a:a + m], chunk, padding, taps, flat, out_hw)
        chunk = chunk.reshape(ck, m, p)
        if obuf is None:
            np.matmul(w2, chunk.transpose(1, 0, 2), out=out[a:a + m])
        else:
            r = np.matmul(w2, chunk.reshape(ck, m * p), out=obuf[:, :m * p])
            np.copyto(out[a:a + m], r.reshape(o, m, p).transpose(1, 0, 2))
    return out, (cols.reshape(ck, n, p) if keep else None)


def _col2im_flat_add(gx, d, padding, taps, out_hw) -> None:
    """Add the column gradients `d` (n, C, kh, kw, Ho*Wo) of a 'same' stride-1
    convolution onto `gx` (n, C, H, W): one add per kernel offset over flat-shifted rows
    (overlapping windows accumulate). Zeroes the wrapped columns of `d` (the caller's
    temporary) first."""
    n, c, h, w = gx.shape
    ho, wo = out_hw
    gf = gx.reshape(n, c, h * w)
    for _, i, j, _, _ in taps:
        part = d[:, :, i, j]                                  # (n, C, Ho*Wo) view
        shift, q0, q1 = _flat_shift(i, j, padding, (h, w), ho * wo)
        _zero_wrapped(part.reshape(n, c, ho, wo), j - padding[1])
        dst = gf[..., q0 + shift:q1 + shift]
        np.add(dst, part[..., q0:q1], out=dst)


def _conv_vjp_x(g, cols, w, x, x_shape, stride, padding):
    # Two kernels, each the faster one where it is used (measured on the cnn workload's
    # shapes and on 3x3 stride 2, 5x5, unpadded 3x3, BLAS on 1 and 2 threads):
    # - 'same' stride-1 convolutions: per chunk of samples, g copied as (O, n*Ho*Wo)
    #   into a chunk buffer, one GEMM W^T @ g into a column buffer of at most the
    #   input's size (one sample's columns if larger), then col2im as kh*kw
    #   flat-shifted adds with long contiguous rows (a GEMM per chunk threads well; one
    #   per sample does not, one over the whole batch leaves the cache);
    # - otherwise one GEMM per kernel offset into an NHWC buffer whose rows of C
    #   channels are contiguous (strided NCHW adds over short rows are 1.5x slower);
    #   the gradient is that buffer seen as NCHW, as before.
    # Passes ('same' path): the zero fill, then per chunk a copy of g's chunk, the GEMM
    # writing the chunk's columns and kh*kw adds reading them (while in cache).
    ho, wo = g.shape[2:]
    taps, flat = _conv_geometry(x_shape, w.shape[2:], stride, padding, (ho, wo))
    if not flat:
        return _conv_vjp_x_nhwc(g, w, x_shape, taps)
    n, c, h, wd = x_shape
    o, _, kh, kw = w.shape
    ck, p = c * kh * kw, ho * wo
    g3 = _reshape(g, (n, o, p))
    wt = _reshape(w, (o, ck)).T
    nb = min(n, max(1, (c * h * wd) * n // (ck * p)))        # samples per chunk
    dtype = np.result_type(g, w)
    gbuf = _empty((o, nb, p), dtype=dtype)
    buf = _empty((ck, nb * p), dtype=dtype)
    gx = _zeros(x_shape, dtype=dtype)
    for a in range(0, n, nb):
        m = min(n, a + nb) - a
        gc = gbuf[:, :m]
        np.copyto(gc, g3[a:a + m].transpose(1, 0, 2))
        d = np.matmul(wt, gc.reshape(o, m * p), out=buf[:, :m * p])
        d5 = d.reshape(c, kh, kw, m, p).transpose(3, 0, 1, 2, 4)  # (m, C, kh, kw, P)
        _col2im_flat_add(gx[a:a + m], d5, padding, taps, (ho, wo))
    return gx


def _conv_vjp_x_nhwc(g, w, x_shape, taps):
    """Input gradient by one GEMM (N*Ho*Wo, O) @ (O, C) per kernel offset, added into
    an (N, H, W, C) buffer; returned as its NCHW view. Extra memory: g in NHWC and one
    (N*Ho*Wo, C) product reused across offsets."""
    n, c, h, wd = x_shape
    o, _, kh, kw = w.shape
    ho, wo = g.shape[2:]
    dtype = np.result_type(g, w)
    g2 = _reshape(g.transpose(0, 2, 3, 1), (-1, o))
    w2 = _copy(w.transpose(2, 3, 0, 1))                     # (kh, kw, O, C)
    out = _zeros((n, h, wd, c), dtype=dtype)
    t = _empty((n * ho * wo, c), dtype=dtype)
    t4 = t.reshape(n, ho, wo, c)
    for _, i, j, (_, ro, co), (_, ri, ci) in taps:
        np.matmul(g2, w2[i, j], out=t)
        dst = out[:, ri, ci]
        np.add(dst, t4[:, ro, co], out=dst)
    return out.transpose(0, 3, 1, 2)


def _conv_vjp_w(g, cols, w, x, x_shape, stride, padding):
    # sum over samples of g_n (O, P) @ cols_n^T (P, C*kh*kw). Per chunk of samples, g
    # copied as (O, n*P) into a chunk buffer (<= 1 MiB) and one GEMM with the chunk's
    # columns: long enough to thread well. A small result (O*C*kh*kw < 1024, e.g. a
    # first layer on 3 channels) threads badly either way: per-sample GEMMs there,
    # which need no copy of g (2x faster on the cnn workload's first conv).
    # Passes: one copy of g (by chunks), the GEMMs reading g and the columns once.
    o = w.shape[0]
    ck, n, p = cols.shape
    g3 = _reshape(g, (n, o, p))
    dtype = np.result_type(g, cols)
    acc = _zeros((o, ck), dtype=dtype)
    if o * ck < 1024:
        nb = min(n, max(1, p // ck))                          # buffer <= one g sample
        buf = _empty((nb, o, ck), dtype=dtype)
        for a in range(0, n, nb):
            b = min(n, a + nb)
            np.matmul(g3[a:b], cols[:, a:b].transpose(1, 2, 0), out=buf[:b - a])
            acc += buf[:b - a].sum(axis=0)
        return acc.reshape(w.shape)
    nb = min(n, max(1, (1 << 17) // (o * p)))
    gbuf = _empty((o, nb, p), dtype=dtype)
    for a in range(0, n, nb):
        m = min(n, a + nb) - a
        gc = gbuf[:, :m]
        np.copyto(gc, g3[a:a + m].transpose(1, 0, 2))
        acc += memory.matmul(gc.reshape(o, m * p), _reshape(cols[:, a:a + m], (ck, m * p)).T)
    return acc.reshape(w.shape)


def _conv_vjp_b(g, *_, **__):
    # one pass over g (contiguous row sums), then a small (N, O) sum
    n, o = g.shape[:2]
    return _reshape(g, (n, o, -1)).sum(axis=2).sum(axis=0)


def conv2d(input, weight, bias=None, stride=1, padding=0):
    """2-D cross-correlation, NCHW input, weight (out_channels, in_channels, kh, kw).

    Per chunk of samples, im2col (one strided copy per kernel offset) and one GEMM
    (`_conv_forward`); the columns are kept for the weight gradient only when the
    weight needs one.
    """
    x, w = _raw(input), _raw(weight)
    if x.ndim != 4 or w.ndim != 4:
        raise ValueError(f"conv2d: expected 4-D input (N, C, H, W) and 4-D weight "
                         f"(O, C, kh, kw), got shapes {x.shape} and {w.shape}")
    n, c, h, wd = x.shape
    o, ci, kh, kw = w.shape
    if ci != c:
        raise ValueError(f"conv2d: input has {c} channels but weight {w.shape} expects {ci}")
    b = None if bias is None else _raw(bias)
    if b is not None and b.shape != (o,):
        raise ValueError(f"conv2d: bias shape {b.shape} does not match {o} out channels")
    stride, padding = _pair(stride, "conv2d: stride"), _pair(padding, "conv2d: padding")
    ho = _out_size("conv2d", h, kh, stride[0], padding[0])
    wo = _out_size("conv2d", wd, kw, stride[1], padding[1])
    need_w = isinstance(weight, Tensor) and weight.requires_grad
    out, cols = _conv_forward(x, w, stride, padding, (ho, wo), keep=need_w)
    if b is not None:
        out += b[:, None]
    inputs, vjps = (input, weight), (_conv_vjp_x, _conv_vjp_w)
    if bias is not None:
        inputs, vjps = inputs + (bias,), vjps + (_conv_vjp_b,)
    # x is kept with the columns (a reference: the columns hold its values already)
    # only for the weight rule's differentiable form (create_graph)
    return record("conv2d", out.reshape(n, o, ho, wo), inputs, vjps,
                  saved=(cols, w, x if need_w else None),
                  kwargs=dict(x_shape=x.shape, stride=stride, padding=padding),
                  cost=gemm_cost(out.size, c * kh * kw), threaded=True)


def _pool_args(name, x, kernel_size, stride, padding):
    if x.ndim != 4:
        raise ValueError(f"{name}: expected a 4-D input (N, C, H, W), got shape {x.shape}")
    kernel = _pair(kernel_size, f"{name}: kernel_size")
    stride = kernel if stride is None else _pair(stride, f"{name}: stride")
    padding = _pair(padding, f"{name}: padding")
    if padding[0] > kernel[0] // 2 or padding[1] > kernel[1] // 2:
        raise ValueError(f"{name}: padding {padding} should be at most half of the "
                         f"kernel size {kernel}")
    out_hw = tuple(_out_size(name, size, k, s, p)
                   for size, k, s, p in zip(x.shape[2:], kernel, stride, padding))
    return kernel, stride, padding, out_hw


# Pooling works on blocks of (sample, channel) planes: each block's kh*kw strided passes
# then run over data that stays in the cache (2 MiB of input planes per block; one
# pass over a 16 MiB input per offset costs 2-3x more), and per-block temporaries
# replace output-sized ones.
_BLOCK_BYTES = 1 << 21


def _plane_blocks(planes: int, plane_bytes: int) -> tuple:
    """(planes per block, [(start, stop), ...]) covering `planes` planes."""
    nb = max(1, min(planes, _BLOCK_BYTES // max(1, plane_bytes)))
    return nb, [(a, min(planes, a + nb)) for a in range(0, planes, nb)]


def _planes(a, shape2) -> np.ndarray:
    """`a` as (N*C, *shape2): a view when `a` is contiguous, else a (cached) copy."""
    return _reshape(a, (-1,) + tuple(shape2))


def _max_pool_forward(x, kernel, stride, padding, out_hw) -> tuple:
    """(max of each window, flat input index of its first maximum, int64)."""
    n, c, h, w = x.shape
    taps = _taps((h, w), out_hw, kernel, stride, padding)
    x3 = _planes(x, (h, w))
    out = _empty((n * c,) + out_hw, dtype=x.dtype)
    index = _empty((n * c, out_hw[0] * out_hw[1]), dtype=np.intp)
    nb, blocks = _plane_blocks(n * c, h * w * x.itemsize)
    arg = _empty((nb,) + out_hw, dtype=np.uint8 if len(taps) <= 256 else np.intp)
    m = _empty(arg.shape, arg.dtype)
    # the offsets as indices for `take` (a block temporary; `arg` itself when intp)
    wide = arg.reshape(nb, -1) if arg.dtype == np.intp else \
        _empty((nb, out_hw[0] * out_hw[1]), np.intp)
    corner = _window_corners((h, w), out_hw, stride, padding)
    delta = (np.arange(kernel[0])[:, None] * w + np.arange(kernel[1])).ravel()
    for a, b in blocks:
        ab, mb = arg[:b - a], m[:b - a]
        _max_pool_block(x3[a:b], out[a:b], ab, mb, taps, any(padding))
        _max_pool_specials(x3[a:b], out[a:b], ab, taps, kernel, stride, padding)
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
    return out.reshape(x.shape[:2] + out_hw), index.reshape(x.shape[:2] + out_hw)


def _window_corners(in_hw, out_hw, stride, padding) -> np.ndarray:
    """Flat index in a plane of each window's top-left corner (negative in padding)."""
    rows = (np.arange(out_hw[0]) * stride[0] - padding[0]) * in_hw[1]
    return (rows[:, None] + np.arange(out_hw[1]) * stride[1] - padding[1]).ravel()


def _max_pool_block(x3, out, arg, m, taps, padded: bool) -> None:
    """Max and first-maximum offset of a block of planes. Per kernel offset: a strict
    `greater` against the running max (ties keep the first), the max, and the offset
    update as two byte ops (offsets only grow, so arg = max(arg, t * greater))."""
    arg.fill(0)
    if padded:
        out.fill(_lowest(x3.dtype))
        rest = taps
    else:
        np.copyto(out, x3[taps[0][4]])            # offset (0, 0) is in every window
        rest = taps[1:]
    for t, _, _, out_blk, in_blk in rest:
        v, o, mt = x3[in_blk], out[out_blk], m[out_blk]
        np.greater(v, o, out=mt.view(bool) if mt.dtype == np.uint8 else mt)
        np.maximum(o, v, out=o)
        np.multiply(mt, mt.dtype.type(t), out=mt)
        np.maximum(arg[out_blk], mt, out=arg[out_blk])


def _lowest(dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _max_pool_specials(x3, out, arg, taps, kernel, stride, padding) -> None:
    """PyTorch's choices where `greater` cannot decide: a window with a NaN sends its
    gradient to its last NaN; a window whose elements are all the lowest value (-inf)
    to its first element inside the image. One cheap check (a sum) when neither occurs."""
    if x3.dtype.kind == "f":
        if np.isfinite(out.sum()):
            return
        if P.isnan(out).any():
            for t, _, _, out_blk, in_blk in taps:
                np.copyto(arg[out_blk], arg.dtype.type(t), where=P.isnan(x3[in_blk]))
    if not any(padding):
        return
    low = P.equal(out, _lowest(x3.dtype))
    if low.any():
        ho, wo = out.shape[1:]
        i0 = np.maximum(0, padding[0] - stride[0] * np.arange(ho))
        j0 = np.maximum(0, padding[1] - stride[1] * np.arange(wo))
        first = (i0[:, None] * kernel[1] + j0[None, :]).astype(arg.dtype)
        np.copyto(arg, np.broadcast_to(first, arg.shape), where=low)


def _max_pool_vjp(g, index, x_shape, kernel, stride, padding):
    # Zeros with g written at each window's maximum: one vectorized scatter through the
    # saved flat indices (non-overlapping windows hit distinct elements), or np.add.at
    # where windows overlap (in output order, as PyTorch). Passes: the zero fill and
    # one scatter of the output's size. Measured 3-4x faster than one masked strided
    # write per kernel offset (numpy's strided loops over short rows are slow).
    gx = _zeros(x_shape, dtype=g.dtype)
    flat, gr = gx.reshape(-1), _reshape(g, (-1,))   # a copy only when g is not contiguous
    if stride[0] >= kernel[0] and stride[1] >= kernel[1]:
        flat[index.reshape(-1)] = gr
    else:
        np.add.at(flat, index.reshape(-1), gr)
    return gx


def max_pool2d(input, kernel_size, stride=None, padding=0):
    """Max over each window (padding never wins); the gradient goes to the first
    maximum of each window, as in PyTorch (to the last NaN of a window with NaNs)."""
    x = _raw(input)
    kernel, stride, padding, out_hw = _pool_args("max_pool2d", x, kernel_size, stride,
                                                 padding)
    out, index = _max_pool_forward(x, kernel, stride, padding, out_hw)
    return record("max_pool2d", out, (input,), (_max_pool_vjp,), saved=(index,),
                  kwargs=dict(x_shape=x.shape, kernel=kernel, stride=stride, padding=padding))


def _avg_divisor(in_hw, out_hw, kernel, stride, padding, count_include_pad):
    """The number each window's sum is divided by: kh*kw, or (count_include_pad=False
    with padding) the (Ho, Wo) counts of window elements inside the image."""
    if count_include_pad or not any(padding):
        return kernel[0] * kernel[1]
    counts = []
    for size, n_out, k, s, p in zip(in_hw, out_hw, kernel, stride, padding):
        start = np.arange(n_out) * s - p
        counts.append(np.minimum(start + k, size) - np.maximum(start, 0))
    return np.outer(*counts)


def _avg_pool_vjp(g, divisor, x_shape, kernel, stride, padding):
    # Per block of planes: g / divisor into a block-sized temporary, then one strided
    # write (non-overlapping windows) or add (overlapping) per kernel offset. Passes:
    # the zero fill (skipped when the windows tile the input) and kh*kw of the output's
    # size; extra memory: the block temporary.
    n, c, h, w = x_shape
    taps = _taps((h, w), g.shape[2:], kernel, stride, padding)
    tiles = stride == kernel and not any(padding) and g.shape[2] * kernel[0] == h \
        and g.shape[3] * kernel[1] == w
    gx = (_empty if tiles else _zeros)((n * c, h, w), dtype=g.dtype)
    g3 = _planes(g, g.shape[2:])
    nb, blocks = _plane_blocks(n * c, h * w * g.itemsize)
    tmp = _empty((nb,) + g.shape[2:], dtype=g.dtype)
    write = np.copyto if stride[0] >= kernel[0] and stride[1] >= kernel[1] else \
        (lambda dst, src: np.add(dst, src, out=dst))
    for a, b in blocks:
        gd, gxb = np.divide(g3[a:b], divisor, out=tmp[:b - a]), gx[a:b]
        for _, _, _, out_blk, in_blk in taps:
            write(gxb[in_blk], gd[out_blk])
    return gx.reshape(x_shape)


def avg_pool2d(input, kernel_size, stride=None, padding=0, count_include_pad: bool = True):
    """Mean over each window; zero padding is counted unless `count_include_pad=False`.

    Per block of planes, the window sums are kh*kw strided adds into the output
    (padding adds nothing), then one division in place.
    """
    x = _raw(input)
    kernel, stride, padding, out_hw = _pool_args("avg_pool2d", x, kernel_size, stride,
                                                 padding)
    divisor = _avg_divisor(x.shape[2:], out_hw, kernel, stride, padding, count_include_pad)
    out = _avg_pool_forward(x, divisor, kernel, stride, padding, out_hw)
    return record("avg_pool2d", out, (input,), (_avg_pool_vjp,), saved=(divisor,),
                  kwargs=dict(x_shape=x.shape, kernel=kernel, stride=stride, padding=padding))


def _avg_pool_forward(x, divisor, kernel, stride, padding, out_hw) -> np.ndarray:
    """The window sums of `x` (N, C, H, W) divided by `divisor` (`avg_pool2d`'s kernel;
    also the rule of its rule's differentiable form, whose adjoint it is)."""
    n, c, h, w = x.shape
    taps = _taps((h, w), out_hw, kernel, stride, padding)
    x3 = _planes(x, (h, w))
    out = _empty((n * c,) + out_hw, dtype=x.dtype if x.dtype.kind == "f" else np.float64)
    for a, b in _plane_blocks(n * c, h * w * x.itemsize)[1]:
        xb, ob = x3[a:b], out[a:b]
        if any(padding):
            ob.fill(0)
        else:
            np.copyto(ob, xb[taps[0][4]])
        for _, _, _, out_blk, in_blk in taps[0 if any(padding) else 1:]:
            o = ob[out_blk]
            np.add(o, xb[in_blk], out=o)
        np.divide(ob, divisor, out=ob)
    return out.reshape(x.shape[:2] + out_hw)


# ---- normalization ---------------------------------------------------------------------
def _norm_axes(name, x, normalized_shape):
    ns = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) \
        else tuple(normalized_shape)
    ns = tuple(int(s) for s in ns)
    if not ns or tuple(x.shape[len(x.shape) - len(ns):]) != ns or len(ns) > len(x.shape):
        raise ValueError(f"{name}: normalized_shape {ns} does not match the trailing "
                         f"dimensions of input shape {tuple(x.shape)}")
    return ns, tuple(range(-len(ns), 0))


def _check_param(name, what, p, ns):
    if p is not None and tuple(np.shape(_raw(p))) != ns:
        raise ValueError(f"{name}: {what} shape {tuple(np.shape(_raw(p)))} does not match "
                         f"normalized_shape {ns}")


def _norm_operands(name, input, normalized_shape, params) -> tuple:
    """(x as (rows, D), normalized shape, each parameter as (D,) or None, float dtype)."""
    ns, _ = _norm_axes(name, input, normalized_shape)
    for what, p in params:
        _check_param(name, what, p, ns)
    x = _raw(input)
    d = int(np.prod(ns))
    dtype = x.dtype if x.dtype.kind == "f" else np.dtype(np.float64)
    flat = [None if p is None else _raw(p).reshape(d) for _, p in params]
    return _reshape(x, (-1, d)), ns, flat, dtype


def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    """Normalize over the trailing `normalized_shape` dims (biased variance), then
    scale by `weight` and shift by `bias`.

    One node keeping the input and each row's mean and 1/std. Forward per row block
    (cache resident): mean, x - mean, variance, scale, weight, bias (6 passes over the
    block); the output is the only full-size allocation.
    """
    x2, ns, (w, b), dtype = _norm_operands("layer_norm", input, normalized_shape,
                                           (("weight", weight), ("bias", bias)))
    d = x2.shape[1]
    y = _empty(x2.shape, dtype=dtype)
    mean = _empty(x2.shape[0], dtype=dtype)
    rstd = _empty(x2.shape[0], dtype=dtype)
    for a, e in _row_blocks(x2.shape[0], d * dtype.itemsize)[1]:
        t, m, r = y[a:e], mean[a:e], rstd[a:e]
        np.mean(x2[a:e], axis=1, out=m)
        np.subtract(x2[a:e], m[:, None], out=t)
        _inv_sqrt(np.vecdot(t, t) / d + eps, out=r)
        t *= r[:, None]
        if w is not None:
            t *= w
        if b is not None:
            t += b
    inputs, vjps = _norm_inputs((input, _layer_norm_vjp_x), (weight, _layer_norm_vjp_w),
                                (bias, _norm_vjp_b))
    return record("layer_norm", y.reshape(_raw(input).shape), inputs, vjps,
                  saved=(x2, mean, rstd, w),
                  kwargs=dict(shape=_raw(input).shape, ns=ns, eps=eps))


def _inv_sqrt(v, out):
    np.sqrt(v, out=out)
    return np.reciprocal(out, out=out)


def _norm_inputs(*pairs) -> tuple:
    """(inputs, rules) of the given (tensor, rule) pairs, skipping absent parameters."""
    kept = [(t, r) for t, r in pairs if t is not None]
    return tuple(t for t, _ in kept), tuple(r for _, r in kept)


def _layer_norm_vjp_x(g, x2, mean, rstd, w, shape, ns, eps):
    # rstd (h - mean(h) - xh mean(h xh)), h = g w, xh = (x - mean) rstd, per row block
    # (cache resident): xh into the result, h in a block temporary when weighted;
    # subtract, scale, two row reductions, then scale, add, subtract, scale: 8 passes
    # over the block. The result is the only full-size allocation.
    d = x2.shape[1]
    g2, out, blocks, hbuf = _norm_rule_setup(g, x2, w)
    for a, e in blocks:
        t, r = out[a:e], rstd[a:e, None]
        np.subtract(x2[a:e], mean[a:e, None], out=t)
        t *= r
        h = g2[a:e] if w is None else np.multiply(g2[a:e], w, out=hbuf[:e - a])
        s1, s2 = h.sum(axis=1), np.vecdot(h, t)
        t *= (s2 / -d)[:, None]
        t += h
        t -= (s1 / d)[:, None]
        t *= r
    return out.reshape(shape)


def _layer_norm_vjp_w(g, x2, mean, rstd, w, shape, ns, eps):
    # sum over rows of g xh, xh = (x - mean) rstd rebuilt per row block in a block
    # temporary (2 passes over the block, then one reduction)
    return _weighted_column_sums(_reshape(g, x2.shape), x2, mean, rstd).reshape(ns)


def _weighted_column_sums(g2, x2, mean, scale) -> np.ndarray:
    """sum over rows of g2 * (x2 - mean) * scale (mean None: no centring), per row
    block through a block temporary."""
    d = x2.shape[1]
    acc = _zeros(d, dtype=np.result_type(g2, x2))
    rb, blocks = _row_blocks(x2.shape[0], d * acc.itemsize)
    buf = _empty((rb, d), dtype=acc.dtype)
    for a, e in blocks:
        t = buf[:e - a]
        if mean is None:
            np.multiply(x2[a:e], scale[a:e, None], out=t)
        else:
            np.subtract(x2[a:e], mean[a:e, None], out=t)
            t *= scale[a:e, None]
        acc += np.einsum("ij,ij->j", g2[a:e], t)
    return acc


def _norm_vjp_b(g, x2, *_, shape, ns, eps):
    return _reshape(g, (-1, x2.shape[1])).sum(axis=0).reshape(ns)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """`x / sqrt(mean(x**2) + eps) * weight` over the trailing dims; `eps=None` is the
    machine epsilon of the input's dtype, as in PyTorch.

    One node keeping the input and each row's 1/rms. Forward: one row reduction and
    two scaling passes (per row block); the output is the only full-size allocation.
    """
    x2, ns, (w,), dtype = _norm_operands("rms_norm", input, normalized_shape,
                                         (("weight", weight),))
    d = x2.shape[1]
    if eps is None:
        eps = float(np.finfo(dtype).eps)
    y = _empty(x2.shape, dtype=dtype)
    rr = _empty(x2.shape[0], dtype=dtype)
    for a, e in _row_blocks(x2.shape[0], d * dtype.itemsize)[1]:
        r = _inv_sqrt(np.vecdot(x2[a:e], x2[a:e]) / d + eps, out=rr[a:e])
        np.multiply(x2[a:e], r[:, None], out=y[a:e])
        if w is not None:
            y[a:e] *= w
    inputs, vjps = _norm_inputs((input, _rms_norm_vjp_x), (weight, _rms_norm_vjp_w))
    return record("rms_norm", y.reshape(_raw(input).shape), inputs, vjps,
                  saved=(x2, rr, w), kwargs=dict(shape=_raw(input).shape, ns=ns, eps=eps))


def _norm_rule_setup(g, x2, w):
    """What both normalization input rules start from: g as rows, the result (the only
    full-size allocation), the row blocks, and a block temporary for h = g w when
    weighted."""
    d = x2.shape[1]
    out = _empty(x2.shape, dtype=np.result_type(g, x2))
    rb, blocks = _row_blocks(x2.shape[0], d * out.itemsize)
    hbuf = None if w is None else _empty((rb, d), dtype=out.dtype)
    return _reshape(g, (-1, d)), out, blocks, hbuf


def _rms_norm_vjp_x(g, x2, rr, w, shape, ns, eps):
    # rr h - x rr^3 mean(h x), h = g w (a block temporary when weighted), per row
    # block: one row reduction, then scale, add, scale: 4 passes over the block.
    d = x2.shape[1]
    g2, out, blocks, hbuf = _norm_rule_setup(g, x2, w)
    for a, e in blocks:
        r = rr[a:e]
        h = g2[a:e] if w is None else np.multiply(g2[a:e], w, out=hbuf[:e - a])
        c = np.vecdot(h, x2[a:e]) * (r * r / -d)
        t = np.multiply(x2[a:e], c[:, None], out=out[a:e])
        t += h
        t *= r[:, None]
    return out.reshape(shape)


def _rms_norm_vjp_w(g, x2, rr, w, shape, ns, eps):
    # sum over rows of g x rr, x rr rebuilt per row block in a block temporary
    return _weighted_column_sums(_reshape(g, x2.shape), x2, None, rr).reshape(ns)


# ---- embedding and dropout --------------------------------------------------------------
def _embedding_vjp(g, rows, num_embeddings, padding_idx):
    # Zeros with each g row added at its index (repeats accumulate in order): np.add.at
    # over flat element indices (numpy's fast 1-D path, 3-4x faster than over rows),
    # made per block of rows so the index temporary stays block-sized. Passes: the zero
    # fill and one scattered add of g.
    d = g.shape[-1]
    out = _zeros((num_embeddings, d), dtype=g.dtype)
    flat, g2, r = out.reshape(-1), _reshape(g, (-1, d)), rows.reshape(-1)
    cols = np.arange(d)
    rb, blocks = _row_blocks(r.shape[0], d * 8)
    ibuf = _empty((rb, d), dtype=np.result_type(r, cols))
    for a, b in blocks:
        at = np.add(r[a:b, None] * d, cols, out=ibuf[:b - a])
        np.add.at(flat, at.reshape(-1), _reshape(g2[a:b], (-1,)))
    if padding_idx is not None:
        out[padding_idx] = 0
    return out


def embedding(input, weight, padding_idx=None):
    """Rows of `weight` (num_embeddings, dim) picked by integer `input` of any shape;
    the row `padding_idx` gets no gradient. The node keeps only the indices."""
    idx = _raw(input)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"embedding: indices must be integers, got dtype {idx.dtype}")
    w = _raw(weight)
    n = w.shape[0]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise IndexError(f"embedding: index out of range for {n} embeddings "
                         f"(got min {idx.min()}, max {idx.max()})")
    if padding_idx is not None:
        padding_idx = int(padding_idx) % n
    rows = np.where(idx < 0, idx + n, idx).astype(np.intp, copy=False)
    # w[rows] (rows are in range: `clip` clips nothing, and unlike `raise` it does not
    # buffer `out`)
    out = np.take(w, rows, axis=0, out=_empty(rows.shape + w.shape[1:], w.dtype), mode="clip")
    return record("embedding", out, (weight,), (_embedding_vjp,), saved=(rows,),
                  kwargs=dict(num_embeddings=n, padding_idx=padding_idx))


def _dropout_vjp(g, keep, scale):
    # g * keep * scale: 2 passes, the result the only allocation
    out = P.multiply(g, keep)
    out *= scale
    return out


def _keep_mask(shape, p: float, rng) -> np.ndarray:
    """Bernoulli(1 - p) keep mask (bool), drawn in blocks: the same draws as one
    `rng.random(shape) >= p` without its full-size float64 temporary."""
    keep = _empty(shape, dtype=bool)
    flat = keep.reshape(-1)
    # the draws into one cached block buffer (a Generator fills `out` with the draws
    # `random(size)` returns)
    buf = _empty(min(flat.size, 32768), np.float64) \
        if isinstance(rng, np.random.Generator) else None
    for a in range(0, flat.size, 32768):
        b = min(flat.size, a + 32768)
        u = rng.random(b - a) if buf is None else rng.random(out=buf[:b - a])
        np.greater_equal(u, p, out=flat[a:b])
    return keep


def _generator(seed) -> np.random.Generator:
    """A fresh generator from `seed`, or else the current one (the default generator
    that `pa.manual_seed` reseeds, or a `pa.checkpoint` recomputation's replay)."""
    return current_generator() if seed is None else np.random.default_rng(seed)


def dropout(input, p: float = 0.5, training: bool = True, seed=None, rng=None):
    """Zero each element with probability `p` and scale the rest by 1/(1-p).

    The mask comes from `rng` (a numpy Generator), or a fresh generator seeded with
    `seed` (the same seed gives the same mask), or else the default generator that
    `pa.manual_seed` reseeds. Identity when not training or p == 0.
    The node keeps a boolean mask (1 byte an element); forward and rule are 2 passes.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: probability has to be between 0 and 1, got {p}")
    if not training or p == 0.0:
        return input
    x = _raw(input)
    dtype = x.dtype if x.dtype.kind == "f" else np.dtype(np.float64)
    if p == 1.0:
        keep, scale = _zeros(x.shape, dtype=bool), dtype.type(0.0)
    else:
        rng = rng if rng is not None else _generator(seed)
        keep, scale = _keep_mask(x.shape, p, rng), dtype.type(1.0 / (1.0 - p))
    if x.dtype == dtype:                 # the loop `dtype=` would pick: numpy's result
        out = P.multiply(x, keep)
    else:                                # integers, multiplied as floats
        out = np.multiply(x, keep, dtype=dtype,
                          **(dict(out=_empty(x.shape, dtype)) if x.ndim else {}))
    out *= scale
    return record("dropout", out, (input,), (_dropout_vjp,), saved=(keep,),
                  kwargs=dict(scale=scale))


# ---- losses ------------------------------------------------------------------------------
def _reduce(name, loss, reduction):
    if reduction == "none":
        return loss
    if reduction == "sum":
        return _rd.sum(loss)
    if reduction == "mean":
        return _rd.mean(loss)
    raise ValueError(f"{name}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _class_targets(name, input, target):
    t = _raw(target)
    if input.ndim != 2:
        raise ValueError(f"{name}: expected 2-D input (N, C), got shape {tuple(input.shape)}")
    if t.dtype.kind not in "iu":
        raise TypeError(f"{name}: target must hold class indices (integers), "
                        f"got dtype {t.dtype}")
    if t.shape != (input.shape[0],):
        raise ValueError(f"{name}: target shape {t.shape} does not match input batch "
                         f"size {input.shape[0]}")
    return t


def nll_loss(input, target, weight=None, *, ignore_index: int = -100,
             reduction: str = "mean"):
    """Negative log-likelihood of class-index targets (N,) given log-probabilities (N, C).

    `weight` (C,) rescales each class (a constant: it gets no gradient); targets equal
    to `ignore_index` contribute nothing, and 'mean' divides by the total weight of
    the targets that count, as in PyTorch. One node; its rule writes one scattered
    element a row into zeros.
    """
    t = _class_targets("nll_loss", input, target)
    return _nll("nll_loss", input, t, weight, ignore_index, reduction, 0.0, logits=False)


def cross_entropy(input, target, weight=None, *, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0):
    """Softmax cross-entropy of logits (N, C) against class indices (N,):
    `nll_loss(log_softmax(input), ...)`, plus PyTorch's label smoothing.

    One fused node: the forward needs only each row's logsumexp (no log-probabilities
    are stored), the rule is softmax minus the smoothed one-hot targets in 3 passes.
    """
    t = _class_targets("cross_entropy", input, target)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], "
                         f"got {label_smoothing}")
    return _nll("cross_entropy", input, t, weight, ignore_index, reduction,
                label_smoothing, logits=True)


_ROW_BLOCK_BYTES = 1 << 18   # row blocks for per-row temporaries: 256 KiB, cache resident


def _row_blocks(n: int, row_bytes: int) -> tuple:
    """(rows per block, [(start, stop), ...]) covering `n` rows."""
    rb = max(1, min(n, _ROW_BLOCK_BYTES // max(1, row_bytes)))
    return rb, [(a, min(n, a + rb)) for a in range(0, n, rb)]


def _row_logsumexp(x) -> np.ndarray:
    """log(sum(exp(x))) of each row of `x` (N, C), shifted by the row's finite max:
    two passes over x (the max; exp and sum through a row-block temporary)."""
    m = x.max(axis=1)
    m[~np.isfinite(m)] = 0
    s = _empty(x.shape[0], dtype=x.dtype)
    rb, blocks = _row_blocks(x.shape[0], x.shape[1] * x.itemsize)
    buf = _empty((rb, x.shape[1]), dtype=x.dtype)
    for a, b in blocks:
        e = np.subtract(x[a:b], m[a:b, None], out=buf[:b - a])
        np.exp(e, out=e)
        np.sum(e, axis=1, out=s[a:b])
    with np.errstate(divide="ignore"):
        np.log(s, out=s)
    return np.add(s, m, out=s)


def _nll_targets(name, x, t, weight, ignore_index) -> tuple:
    """(safe targets, per-row scale w[t] or 1 (0 when ignored), valid rows, class
    weights as x's dtype or None), with PyTorch's errors."""
    if isinstance(weight, str):
        raise TypeError(f"{name}: the third positional argument is the class weight, as in "
                        f"PyTorch; pass reduction={weight!r} by keyword")
    c = x.shape[1]
    valid = t != ignore_index
    bad = valid & ((t < 0) | (t >= c))
    if bad.any():
        raise IndexError(f"{name}: target {t[bad][0]} is out of bounds for {c} classes")
    safe = np.where(valid, t, 0)
    w = None if weight is None else _raw(weight)
    if w is not None and w.shape != (c,):
        raise ValueError(f"{name}: weight shape {w.shape} does not match {c} classes")
    w = None if w is None else w.astype(x.dtype, copy=False)
    scale = valid.astype(x.dtype) if w is None else w[safe] * valid
    return safe, scale, valid, w


def _nll(name, input, t, weight, ignore_index, reduction, smoothing, logits: bool):
    """Per-row loss -(1-e) w[t] logp[t] - e/C sum_c w_c logp_c (logp = x - lse(x) for
    logits, x itself otherwise), reduced; one node with `_nll_vjp`."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{name}: reduction must be 'mean', 'sum' or 'none', "
                         f"got {reduction!r}")
    x = _raw(input)
    n, c = x.shape
    safe, scale, valid, w = _nll_targets(name, x, t, weight, ignore_index)
    lse = _row_logsumexp(x) if logits else None
    picked = x[np.arange(n), safe]
    loss = scale * (picked if lse is None else picked - lse)
    np.negative(loss, out=loss)                                # -w[t] logp[t]
    if smoothing:
        wsum = c if w is None else w.sum()
        per_class = x.sum(axis=1) if w is None else x @ w       # sum_c w_c x_c
        loss *= 1 - smoothing
        loss += valid * (smoothing / c) * (wsum * lse - per_class)
    denom = None
    if reduction == "mean":
        denom = scale.sum() if (w is not None or not valid.all()) else x.dtype.type(n)
        loss = np.asarray(loss.sum() / denom, dtype=x.dtype)
    elif reduction == "sum":
        loss = np.asarray(loss.sum(), dtype=x.dtype)
    return record(name, loss, (input,), (_nll_vjp,),
                  saved=(x if logits else None, lse, safe, scale, valid, w, denom),
                  kwargs=dict(shape=x.shape, smoothing=smoothing))


def _nll_vjp(g, x, lse, safe, scale, valid, w, denom, shape, smoothing):
    # G = the upstream gradient per row (over the mean's denominator).
    # nll_loss: zeros with -G w[t] at each row's target (the zero fill, n elements).
    # cross_entropy: G (a p - (1-e) w[t] onehot(t) - e/C valid w), p = exp(x - lse),
    # a = (1-e) w[t] + e/C sum(w) valid: 3 passes (subtract, exp, scale), plus one for
    # smoothing (through a row-block temporary when classes are weighted).
    rows = np.arange(shape[0])
    G = g if denom is None else g / denom
    coef = G * scale * (1 - smoothing)                         # at each row's target
    if x is None:
        out = _zeros(shape, dtype=scale.dtype)
        out[rows, safe] = np.subtract(0.0, coef)               # +0.0 where ignored
        return out
    out = P.subtract(x, lse[:, None])
    np.exp(out, out=out)
    wsum = shape[1] if w is None else w.sum()
    out *= (coef + G * valid * (smoothing * wsum / shape[1]))[:, None]
    out[rows, safe] -= coef
    if smoothing:
        gamma = G * valid * (smoothing / shape[1])
        if w is None:
            out -= gamma[:, None]
        else:
            _sub_outer(out, gamma, w)
    return out


def _sub_outer(out, a, b) -> None:
    """out -= outer(a, b), through a row-block temporary."""
    rb, blocks = _row_blocks(out.shape[0], out.shape[1] * out.itemsize)
    buf = _empty((rb, out.shape[1]), dtype=out.dtype)
    for s, e in blocks:
        out[s:e] -= np.multiply(a[s:e, None], b, out=buf[:e - s])


def mse_loss(input, target, reduction: str = "mean"):
    """Mean squared error; input and target broadcast against each other."""
    try:
        np.broadcast_shapes(np.shape(_raw(input)), np.shape(_raw(target)))
    except ValueError as e:
        raise ValueError(f"mse_loss: {e}") from e
    d = input - target
    return _reduce("mse_loss", d * d, reduction)


# ---- attention --------------------------------------------------------------------------
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale=None, seed=None, rng=None):
    """softmax(q @ k^T * scale + mask) @ v over the last two dims (..., L, E).

    A boolean `attn_mask` marks positions that may be attended (True = keep); a
    float mask is added to the scores. `is_causal` masks the upper triangle.
    `scale` defaults to 1/sqrt(E). A query that may attend nothing gets zeros, as in
    PyTorch. Dropout on the attention weights uses `seed`/`rng`.

    One fused node. Forward: the scores are one GEMM, scaled, masked and turned into
    the softmax in place (the attention weights, kept for the backward), then one GEMM.
    """
    q, k, v = _raw(query), _raw(key), _raw(value)
    if q.ndim < 2 or q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(f"scaled_dot_product_attention: expected query (..., L, E), key "
                         f"(..., S, E) and value (..., S, Ev), got shapes {q.shape}, "
                         f"{k.shape} and {v.shape}")
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: pass either attn_mask or "
                         "is_causal, not both")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    p = memory.matmul(q, np.swapaxes(k, -1, -2))
    p *= scale
    if is_causal:                                    # tril(ones): keep column j <= row i
        attn_mask = np.greater_equal(np.arange(p.shape[-2])[:, None], np.arange(p.shape[-1]),
                                     out=_empty(p.shape[-2:], bool))
    p = _attention_weights(p, None if attn_mask is None else _raw(attn_mask))
    keep, dscale, pd = None, None, p
    if dropout_p > 0:
        keep = _keep_mask(p.shape, dropout_p, rng if rng is not None
                          else _generator(seed)) if dropout_p < 1 \
            else _zeros(p.shape, dtype=bool)
        dscale = p.dtype.type(0.0 if dropout_p >= 1 else 1.0 / (1.0 - dropout_p))
        pd = P.multiply(p, keep)
        pd *= dscale
    out = memory.matmul(pd, v)
    inputs, added = (query, key, value), None
    if attn_mask is not None and _raw(attn_mask).dtype != bool:
        inputs += (attn_mask,)                       # a float mask may require grad
        added = _raw(attn_mask)   # kept (a reference) for the differentiable form only
    need = tuple(isinstance(t, Tensor) and t.requires_grad for t in inputs)
    # backward: four GEMMs of the scores' size over E or Ev
    return record("scaled_dot_product_attention", out, inputs, joint=_sdpa_vjp,
                  saved=(q, k, v, p, keep, scale, dscale, need, added),
                  cost=gemm_cost(p.size, q.shape[-1] + v.shape[-1]), threaded=True)


def _attention_weights(s, mask):
    """softmax over the last axis of the scores `s` after the mask (boolean: keep where
    True; float: added), in place when the mask does not broadcast `s` up; rows with
    nothing to attend give zeros. Passes: mask, max, subtract, exp, sum, divide."""
    if mask is not None:
        grows = np.broadcast_shapes(s.shape, mask.shape) != s.shape
        if mask.dtype == bool:
            if grows:           # np.where(mask, s, -inf): a copy, then the fill below
                t = _empty(np.broadcast_shapes(s.shape, mask.shape), np.result_type(s, -np.inf))
                np.copyto(t, s)
                s = t
            np.copyto(s, -np.inf, where=P.invert(mask))
        else:
            s = P.add(s, mask) if grows else np.add(s, mask, out=s)
    m = s.max(axis=-1, keepdims=True)
    m[~np.isfinite(m)] = 0
    s -= m
    np.exp(s, out=s)
    den = s.sum(axis=-1, keepdims=True)
    den[den == 0] = 1                                # all masked: exp gave zeros
    s /= den
    return s


def _sdpa_vjp(g, q, k, v, p, keep, scale, dscale, need, added=None):
    # dV = P'^T g (P' = P with dropout); dP = g V^T (one scores-sized temporary),
    # turned in place into dS = P (dP - rowsum(dP P)) (3 passes), which is the float
    # mask's gradient; dQ = scale dS K, dK = scale dS^T Q (the scale on the smaller
    # products). At most four GEMMs (only those whose inputs need a gradient); every
    # other array is returned (P' is rebuilt in a temporary under dropout).
    dv = None
    if need[2]:
        pd = p
        if keep is not None:
            pd = P.multiply(p, keep)
            pd *= dscale
        dv = memory.matmul(np.swapaxes(pd, -1, -2), g)
        del pd
    if not (need[0] or need[1] or need[3:] == (True,)):
        return (None, None, dv) + (None,) * (len(need) - 3)
    ds = memory.matmul(g, np.swapaxes(v, -1, -2))
    if keep is not None:
        ds *= keep
        ds *= dscale
    ds -= np.vecdot(ds, p)[..., None]
    ds *= p
    dq = dk = None
    if need[0]:
        dq = memory.matmul(ds, k)
        dq *= scale
    if need[1]:
        dk = memory.matmul(np.swapaxes(ds, -1, -2), q)
        dk *= scale
    return (dq, dk, dv) + ((ds,) if len(need) == 4 else ())
