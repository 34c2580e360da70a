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
from ..ops import shape as S
from ..ops.elementwise import gelu, leaky_relu, relu, sigmoid, silu, tanh
from ..ops.unary import (celu, elu, glu, hardsigmoid, hardswish, hardtanh, logsigmoid, mish,
                         prelu, selu, softplus, softsign)
from ..primitive import record
from ..random import SegmentDraws, resolve_generator
from ..tensor import Tensor

__all__ = [
    "linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "unfold", "fold", "max_pool1d", "max_pool2d", "avg_pool1d",
    "avg_pool2d", "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_avg_pool1d",
    "adaptive_avg_pool2d", "interpolate", "upsample", "pixel_shuffle", "pixel_unshuffle",
    "layer_norm", "rms_norm", "embedding",
    "dropout", "nll_loss", "cross_entropy", "mse_loss", "scaled_dot_product_attention",
    "relu", "leaky_relu", "gelu", "silu", "sigmoid", "tanh", "softmax", "log_softmax",
    "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "kl_div", "cosine_embedding_loss",
    "margin_ranking_loss", "triplet_margin_loss", "batch_norm", "instance_norm",
    "group_norm", "local_response_norm",
    "softplus", "softsign", "mish", "elu", "selu", "celu", "hardtanh", "hardsigmoid",
    "hardswish", "logsigmoid", "prelu", "glu", "pad", "max_unpool1d", "max_unpool2d",
    "max_pool3d", "avg_pool3d", "adaptive_max_pool3d", "adaptive_avg_pool3d",
    "lp_pool1d", "lp_pool2d", "lp_pool3d",
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
    made in cached memory. An empty `a` folds into `(-1, 0)` too (`shape.fold`)."""
    if a.size == 0:
        shape = S.fold(shape, a.shape)
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


# ---- convolution and pooling: nn/_conv.py, nn/_pool.py, nn/_resample.py (imported at the
# end). Their block sizes live here (tests shrink them): columns per chunk of the conv
# forward (cache resident for its GEMM), and input planes per block of the pools.
_COLS_BYTES = 1 << 22
_BLOCK_BYTES = 1 << 21


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
    rows = int(np.prod(x.shape[:x.ndim - len(ns)]))  # not -1: either may be 0
    return _reshape(x, (rows, d)), ns, flat, dtype


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
    return _reshape(g, x2.shape).sum(axis=0).reshape(ns)


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
    return _reshape(g, x2.shape), out, blocks, hbuf


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
        if isinstance(rng, (np.random.Generator, SegmentDraws)) else None
    for a in range(0, flat.size, 32768):
        b = min(flat.size, a + 32768)
        u = rng.random(b - a) if buf is None else rng.random(out=buf[:b - a])
        np.greater_equal(u, p, out=flat[a:b])
    return keep


def _generator(seed, rng=None):
    """What a mask is drawn from: `rng`, else a fresh generator from `seed`, else the
    current one (the default generator that `pa.manual_seed` reseeds); a Generator seen
    through `resolve_generator`, so a `pa.checkpoint` segment records and replays it."""
    if rng is not None:
        return resolve_generator(rng) if isinstance(rng, np.random.Generator) else rng
    return resolve_generator(None) if seed is None else np.random.default_rng(seed)


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
        rng = _generator(seed, rng)
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
        with np.errstate(invalid="ignore"):                   # all ignored: NaN, as torch
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
    with np.errstate(divide="ignore", invalid="ignore"):
        G = g if denom is None else g / denom
    # ignored rows get 0 even where G is not finite (every target ignored: denom 0), as
    # PyTorch, which never writes them: a selection, not a product
    G = np.where(valid, G, 0.0)
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
def _check_mask(mask: np.ndarray, scores: tuple) -> None:
    try:
        ok = np.broadcast_shapes(mask.shape, scores) == scores
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"scaled_dot_product_attention: attn_mask of shape {mask.shape} does "
                         f"not broadcast to the attention scores' shape {scores}")


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale=None, enable_gqa: bool = False,
                                 seed=None, rng=None):
    """softmax(q @ k^T * scale + mask) @ v over the last two dims (..., L, E).

    A boolean `attn_mask` marks positions that may be attended (True = keep); a
    float mask is added to the scores. `is_causal` masks the upper triangle.
    `scale` defaults to 1/sqrt(E). A query that may attend nothing gets zeros, as in
    PyTorch (no keys at all, S = 0, included; with E = 0 the scores are 0: each query
    averages the values). Dropout on the attention weights uses `seed`/`rng`.
    `enable_gqa`: grouped-query attention, PyTorch's semantics: query (..., Hq, L, E),
    key (..., Hk, S, E) and value (..., Hv, S, Ev) with Hk and Hv dividing Hq; query head
    i reads key head i // (Hq / Hk) (and value head i // (Hq / Hv)).

    One fused node. Forward: the scores are one GEMM, scaled, masked and turned into
    the softmax in place (the attention weights, kept for the backward), then one GEMM.
    Grouped heads are not repeated: the query heads sharing a key head are folded into
    its rows, (..., Hk, Hq/Hk * L, E) @ (..., Hk, E, S), one plain batched GEMM (and the
    weights likewise against the values), so the backward's GEMMs sum over the group.
    """
    q, k, v = _raw(query), _raw(key), _raw(value)
    if q.ndim < 2 or q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(f"scaled_dot_product_attention: expected query (..., L, E), key "
                         f"(..., S, E) and value (..., S, Ev), got shapes {q.shape}, "
                         f"{k.shape} and {v.shape}")
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: pass either attn_mask or "
                         "is_causal, not both")
    heads = _gqa_heads(q, k, v) if enable_gqa else None
    hk, hv = heads if heads is not None else (None, None)
    e = q.shape[-1]
    scale = (1.0 / math.sqrt(e) if e else math.inf) if scale is None else scale
    p = memory.matmul(_heads_folded(q, hk), np.swapaxes(k, -1, -2))
    if hk is not None:
        p = _heads_unfolded(p, q.shape[-3])
    if e:  # E = 0: the scores are empty sums, 0 (PyTorch scales q and k, never 0 * inf)
        p *= scale
    if is_causal:                                    # tril(ones): keep column j <= row i
        attn_mask = np.greater_equal(np.arange(p.shape[-2])[:, None], np.arange(p.shape[-1]),
                                     out=_empty(p.shape[-2:], bool))
    if attn_mask is not None and not is_causal:
        _check_mask(_raw(attn_mask), p.shape)
    p = _attention_weights(p, None if attn_mask is None else _raw(attn_mask))
    keep, dscale, pd = None, None, p
    if dropout_p > 0:
        keep = _keep_mask(p.shape, dropout_p, _generator(seed, rng)) if dropout_p < 1 \
            else _zeros(p.shape, dtype=bool)
        dscale = p.dtype.type(0.0 if dropout_p >= 1 else 1.0 / (1.0 - dropout_p))
        pd = P.multiply(p, keep)
        pd *= dscale
    out = memory.matmul(_heads_folded(pd, hv), v)
    if hv is not None:
        out = _heads_unfolded(out, q.shape[-3])
    inputs, added = (query, key, value), None
    if attn_mask is not None and _raw(attn_mask).dtype != bool:
        inputs += (attn_mask,)                       # a float mask may require grad
        added = _raw(attn_mask)   # kept (a reference) for the differentiable form only
    need = tuple(isinstance(t, Tensor) and t.requires_grad for t in inputs)
    # backward: four GEMMs of the scores' size over E or Ev
    return record("scaled_dot_product_attention", out, inputs, joint=_sdpa_vjp,
                  saved=(q, k, v, p, keep, scale, dscale, need, added, heads),
                  cost=gemm_cost(p.size, q.shape[-1] + v.shape[-1]), threaded=True)


def _gqa_heads(q, k, v) -> tuple | None:
    """(Hk, Hv) of grouped-query attention, each None where it equals Hq (nothing to
    fold); None when neither differs. Raises ValueError naming the problem."""
    if min(q.ndim, k.ndim, v.ndim) < 3:
        raise ValueError(f"scaled_dot_product_attention: enable_gqa needs a heads dimension "
                         f"(..., H, L, E) on query, key and value, got shapes {q.shape}, "
                         f"{k.shape} and {v.shape}")
    hq, hk, hv = q.shape[-3], k.shape[-3], v.shape[-3]
    if hk == 0 or hv == 0 or hq % hk or hq % hv:
        raise ValueError(f"scaled_dot_product_attention: enable_gqa: the number of heads in "
                         f"key ({hk}) and value ({hv}) must divide the number of heads in "
                         f"query ({hq})")
    heads = (None if hk == hq else hk, None if hv == hq else hv)
    return None if heads == (None, None) else heads


def _heads_folded(a, h):
    """(..., Hq, L, X) as (..., h, Hq/h * L, X): the query heads that share one of `h`
    key/value heads as rows of one matrix (a view when numpy can make one). `a` itself
    when h is None."""
    return a if h is None else _reshape(a, a.shape[:-3] + (h, -1, a.shape[-1]))


def _heads_unfolded(a, hq: int):
    """`_heads_folded`'s inverse: (..., h, Hq/h * L, X) as (..., Hq, L, X)."""
    return _reshape(a, a.shape[:-3] + (hq, -1, a.shape[-1]))


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
    if s.shape[-1] == 0:                             # no keys: nothing to weigh
        return s
    m = s.max(axis=-1, keepdims=True)
    m[~np.isfinite(m)] = 0
    s -= m
    np.exp(s, out=s)
    den = s.sum(axis=-1, keepdims=True)
    den[den == 0] = 1                                # all masked: exp gave zeros
    s /= den
    return s


def _sdpa_vjp(g, q, k, v, p, keep, scale, dscale, need, added=None, heads=None):
    # dV = P'^T g (P' = P with dropout); dP = g V^T (one scores-sized temporary),
    # turned in place into dS = P (dP - rowsum(dP P)) (3 passes), which is the float
    # mask's gradient; dQ = scale dS K, dK = scale dS^T Q (the scale on the smaller
    # products). At most four GEMMs (only those whose inputs need a gradient); every
    # other array is returned (P' is rebuilt in a temporary under dropout).
    # Grouped-query attention (`heads` = (Hk, Hv)): the same GEMMs on the folded views
    # (`_heads_folded`); dK and dV come out summed over each group by the GEMMs.
    hk, hv = heads if heads is not None else (None, None)
    dv = None
    if need[2]:
        pd = p
        if keep is not None:
            pd = P.multiply(p, keep)
            pd *= dscale
        dv = memory.matmul(np.swapaxes(_heads_folded(pd, hv), -1, -2), _heads_folded(g, hv))
        del pd
    if not (need[0] or need[1] or need[3:] == (True,)):
        return (None, None, dv) + (None,) * (len(need) - 3)
    ds = memory.matmul(_heads_folded(g, hv), np.swapaxes(v, -1, -2))
    if hv is not None:
        ds = _heads_unfolded(ds, p.shape[-3])
    if keep is not None:
        ds *= keep
        ds *= dscale
    ds -= np.vecdot(ds, p)[..., None]
    ds *= p
    dq = dk = None
    if need[0]:
        dq = memory.matmul(_heads_folded(ds, hk), k)
        if hk is not None:
            dq = _heads_unfolded(dq, p.shape[-3])
        dq *= scale
    if need[1]:
        dk = memory.matmul(np.swapaxes(_heads_folded(ds, hk), -1, -2), _heads_folded(q, hk))
        dk *= scale
    return (dq, dk, dv) + ((ds,) if len(need) == 4 else ())


# The losses and normalizations of nn/_losses.py and nn/_norms.py (last: they use the
# helpers above). nll_loss and cross_entropy are there: (N, C), (C,) and (N, C, d1, ...)
# inputs, all through the fused node `_nll` below.
from ._losses import (binary_cross_entropy, binary_cross_entropy_with_logits,  # noqa: E402
                      cosine_embedding_loss, cross_entropy, huber_loss, kl_div, l1_loss,
                      margin_ranking_loss, nll_loss, smooth_l1_loss, triplet_margin_loss)
from ._norms import batch_norm, group_norm, instance_norm, local_response_norm  # noqa: E402
# Convolution, pooling and resampling (nn/_conv.py, nn/_pool.py, nn/_resample.py).
from ._conv import (conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d,  # noqa: E402
                    conv_transpose3d, fold, unfold)
from ._pool import (adaptive_max_pool1d, adaptive_max_pool2d, avg_pool1d,  # noqa: E402
                    avg_pool2d, max_pool1d, max_pool2d)
from ._resample import (adaptive_avg_pool1d, adaptive_avg_pool2d, interpolate,  # noqa: E402
                        pixel_shuffle, pixel_unshuffle, upsample)
from ._pad import pad  # noqa: E402
from ._unpool import max_unpool1d, max_unpool2d  # noqa: E402
from ._pool3d import (adaptive_avg_pool3d, adaptive_max_pool3d, avg_pool3d,  # noqa: E402
                      max_pool3d)
from ._lppool import lp_pool1d, lp_pool2d, lp_pool3d  # noqa: E402
