"""PyTorch-style functional API (`torch.nn.functional` signatures and semantics).

Composite ops (linear, norms, attention, losses) are built from the op library;
conv2d and the pools are primitives (`record` with per-input rules) because a
graph of per-window ops would be far too slow. Images are NCHW.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..engine.cost import gemm_cost
from ..ops import elementwise as _ew
from ..ops import reduce as _rd
from ..ops.elementwise import gelu, leaky_relu, relu, sigmoid, silu, tanh, where
from ..ops.linalg import matmul
from ..ops.reduce import mean
from ..ops.shape import getitem, reshape, swapaxes
from ..primitive import primitive, record
from ..tensor import Tensor

__all__ = [
    "linear", "conv2d", "max_pool2d", "avg_pool2d", "layer_norm", "rms_norm", "embedding",
    "dropout", "nll_loss", "cross_entropy", "mse_loss", "scaled_dot_product_attention",
    "relu", "leaky_relu", "gelu", "silu", "sigmoid", "tanh", "softmax", "log_softmax",
]


def _raw(x):
    return x.data if isinstance(x, Tensor) else np.asarray(x)


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
def linear(input, weight, bias=None):
    """`input @ weight.T + bias`, weight of shape (out_features, in_features) or (in,)."""
    shape, wshape = tuple(input.shape), np.shape(_raw(weight))
    if not shape or wshape[-1:] != shape[-1:] or len(wshape) > 2:
        raise ValueError(f"linear: input of shape {shape} does not match weight of "
                         f"shape {wshape} (out_features, in_features)")
    if len(shape) > 2:  # one big GEMM (weight gradient included), not a batch of small ones
        input = reshape(input, (-1, shape[-1]))
    y = matmul(input, swapaxes(weight, 0, 1) if len(wshape) == 2 else weight)
    if bias is not None:
        y = y + bias
    return reshape(y, shape[:-1] + wshape[:-1]) if len(shape) > 2 else y


# ---- convolution and pooling: windows are strided views, gradients scatter back -------
def _windows(xp, kh, kw, sh, sw):
    """(N, C, Ho, Wo, kh, kw) view of every window of the padded input (no copy)."""
    return sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]


def _col2im(parts, padded_shape, stride, dtype):
    """Add window gradients `parts` (N, C, Ho, Wo, kh, kw) onto a padded-input buffer.

    One vectorized add per kernel offset: overlapping windows accumulate correctly.
    """
    n, c, ho, wo, kh, kw = parts.shape
    sh, sw = stride
    out = np.zeros(padded_shape, dtype=dtype)
    for i in range(kh):
        for j in range(kw):
            out[:, :, i:i + sh * (ho - 1) + 1:sh, j:j + sw * (wo - 1) + 1:sw] += \
                parts[:, :, :, :, i, j]
    return out


def _crop(xp, padding):
    ph, pw = padding
    return xp[:, :, ph:xp.shape[2] - ph, pw:xp.shape[3] - pw]


def _pad_hw(x, padding, value=0):
    ph, pw = padding
    if not (ph or pw):
        return x
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)


def _out_size(name, size, k, s, p):
    if s <= 0 or k <= 0 or p < 0:
        raise ValueError(f"{name}: kernel size and stride must be positive and padding "
                         f"non-negative, got kernel {k}, stride {s}, padding {p}")
    o = (size + 2 * p - k) // s + 1
    if o <= 0:
        raise ValueError(f"{name}: kernel size {k} is larger than the padded input "
                         f"size {size + 2 * p}")
    return o


def _conv_vjp_x(g, cols, w, x_shape, stride, padding):
    # col2im without the (N*Ho*Wo, C*kh*kw) buffer: one GEMM per kernel offset, added
    # into an NHWC buffer whose channel rows are contiguous (5-10x faster than NCHW).
    n, c, h, wd = x_shape
    o, _, kh, kw = w.shape
    ho, wo = g.shape[2:]
    (sh, sw), (ph, pw) = stride, padding
    g2 = g.transpose(0, 2, 3, 1).reshape(-1, o)
    out = np.zeros((n, h + 2 * ph, wd + 2 * pw, c), dtype=g.dtype)
    for i in range(kh):
        for j in range(kw):
            out[:, i:i + sh * (ho - 1) + 1:sh, j:j + sw * (wo - 1) + 1:sw] += \
                (g2 @ w[:, :, i, j]).reshape(n, ho, wo, c)
    return out.transpose(0, 3, 1, 2)[:, :, ph:ph + h, pw:pw + wd]


def _conv_vjp_w(g, cols, w, x_shape, stride, padding):
    g2 = g.transpose(0, 2, 3, 1).reshape(-1, g.shape[1])
    return (g2.T @ cols).reshape(w.shape)


def _conv_vjp_b(g, *_, **__):
    return g.sum(axis=(0, 2, 3))


def conv2d(input, weight, bias=None, stride=1, padding=0):
    """2-D cross-correlation, NCHW input, weight (out_channels, in_channels, kh, kw)."""
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
    win = _windows(_pad_hw(x, padding), kh, kw, *stride)              # (N, C, Ho, Wo, kh, kw)
    cols = win.transpose(0, 2, 3, 1, 4, 5).reshape(n * ho * wo, c * kh * kw)  # the copy
    wmat = w.reshape(o, -1)
    out = cols @ wmat.T
    if b is not None:
        out += b
    out = np.ascontiguousarray(out.reshape(n, ho, wo, o).transpose(0, 3, 1, 2))
    need_w = isinstance(weight, Tensor) and weight.requires_grad
    inputs, vjps = (input, weight), (_conv_vjp_x, _conv_vjp_w)
    if bias is not None:
        inputs, vjps = inputs + (bias,), vjps + (_conv_vjp_b,)
    # The column buffer is kept only when the weight needs its gradient.
    return record("conv2d", out, inputs, vjps, saved=(cols if need_w else None, w),
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
    for size, k, s, p in zip(x.shape[2:], kernel, stride, padding):
        _out_size(name, size, k, s, p)
    return kernel, stride, padding


def _max_pool_vjp(g, argmax, x_shape, kernel, stride, padding):
    n, c, h, w = x_shape
    parts = np.zeros(g.shape + (kernel[0] * kernel[1],), dtype=g.dtype)
    np.put_along_axis(parts, argmax[..., None], g[..., None], axis=-1)
    parts = parts.reshape(g.shape + kernel)
    padded = (n, c, h + 2 * padding[0], w + 2 * padding[1])
    return _crop(_col2im(parts, padded, stride, g.dtype), padding)


def max_pool2d(input, kernel_size, stride=None, padding=0):
    """Max over each window (padding counts as -inf); the gradient goes to the first
    maximum of each window, as in PyTorch."""
    x = _raw(input)
    kernel, stride, padding = _pool_args("max_pool2d", x, kernel_size, stride, padding)
    low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    win = _windows(_pad_hw(x, padding, low), *kernel, *stride)
    flat = win.reshape(win.shape[:4] + (-1,))
    argmax = flat.argmax(axis=-1)
    out = np.take_along_axis(flat, argmax[..., None], axis=-1)[..., 0]
    return record("max_pool2d", out, (input,), (_max_pool_vjp,), saved=(argmax,),
                  kwargs=dict(x_shape=x.shape, kernel=kernel, stride=stride, padding=padding))


def _avg_pool_vjp(g, divisor, x_shape, kernel, stride, padding):
    n, c, h, w = x_shape
    parts = np.broadcast_to((g / divisor)[..., None, None], g.shape + kernel)
    padded = (n, c, h + 2 * padding[0], w + 2 * padding[1])
    return _crop(_col2im(parts, padded, stride, g.dtype), padding)


def avg_pool2d(input, kernel_size, stride=None, padding=0, count_include_pad: bool = True):
    """Mean over each window; zero padding is counted unless `count_include_pad=False`."""
    x = _raw(input)
    kernel, stride, padding = _pool_args("avg_pool2d", x, kernel_size, stride, padding)
    win = _windows(_pad_hw(x, padding), *kernel, *stride)
    if count_include_pad or not any(padding):
        divisor = kernel[0] * kernel[1]
    else:
        ones = _pad_hw(np.ones((1, 1) + x.shape[2:], dtype=x.dtype), padding)
        divisor = _windows(ones, *kernel, *stride).sum(axis=(-2, -1))
    out = win.sum(axis=(-2, -1)) / divisor
    out = out.astype(x.dtype, copy=False) if x.dtype.kind == "f" else out
    return record("avg_pool2d", out, (input,), (_avg_pool_vjp,), saved=(divisor,),
                  kwargs=dict(x_shape=x.shape, kernel=kernel, stride=stride, padding=padding))


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


def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    """Normalize over the trailing `normalized_shape` dims (biased variance), then
    scale by `weight` and shift by `bias`."""
    ns, axes = _norm_axes("layer_norm", input, normalized_shape)
    _check_param("layer_norm", "weight", weight, ns)
    _check_param("layer_norm", "bias", bias, ns)
    centered = input - mean(input, axis=axes, keepdims=True)
    var = mean(centered * centered, axis=axes, keepdims=True)
    y = centered / _ew.sqrt(var + eps)
    if weight is not None:
        y = y * weight
    return y if bias is None else y + bias


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """`x / sqrt(mean(x**2) + eps) * weight` over the trailing dims; `eps=None` is the
    machine epsilon of the input's dtype, as in PyTorch."""
    ns, axes = _norm_axes("rms_norm", input, normalized_shape)
    _check_param("rms_norm", "weight", weight, ns)
    dtype = _raw(input).dtype
    if eps is None:
        eps = float(np.finfo(dtype if dtype.kind == "f" else np.float64).eps)
    y = input / _ew.sqrt(mean(input * input, axis=axes, keepdims=True) + eps)
    return y if weight is None else y * weight


# ---- embedding and dropout --------------------------------------------------------------
def _embedding_vjp(g, ans, weight, indices, padding_idx):
    out = np.zeros(weight.shape, dtype=g.dtype)
    np.add.at(out, indices, g)  # repeated indices accumulate
    if padding_idx is not None:
        out[padding_idx] = 0
    return out


_embedding = primitive("embedding", lambda weight, indices, padding_idx: weight[indices],
                       _embedding_vjp)


def embedding(input, weight, padding_idx=None):
    """Rows of `weight` (num_embeddings, dim) picked by integer `input` of any shape;
    the row `padding_idx` gets no gradient."""
    idx = _raw(input)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"embedding: indices must be integers, got dtype {idx.dtype}")
    n = np.shape(_raw(weight))[0]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise IndexError(f"embedding: index out of range for {n} embeddings "
                         f"(got min {idx.min()}, max {idx.max()})")
    if padding_idx is not None:
        padding_idx = int(padding_idx) % n
    return _embedding(weight, indices=idx, padding_idx=padding_idx)


_dropout = primitive("dropout", lambda x, mask: x * mask, lambda g, ans, x, mask: g * mask)


def dropout(input, p: float = 0.5, training: bool = True, seed=None, rng=None):
    """Zero each element with probability `p` and scale the rest by 1/(1-p).

    The mask comes from `rng` (a numpy Generator) or a fresh generator seeded with
    `seed`: the same seed gives the same mask. Identity when not training or p == 0.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: probability has to be between 0 and 1, got {p}")
    if not training or p == 0.0:
        return input
    x = _raw(input)
    dtype = x.dtype if x.dtype.kind == "f" else np.float64
    if p == 1.0:
        mask = np.zeros(x.shape, dtype=dtype)
    else:
        rng = rng if rng is not None else np.random.default_rng(seed)
        keep = rng.random(x.shape) >= p
        mask = keep.astype(dtype) * dtype.type(1.0 / (1.0 - p))
    return _dropout(input, mask=mask)


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
    the targets that count, as in PyTorch.
    """
    t = _class_targets("nll_loss", input, target)
    return _nll("nll_loss", input, t, weight, ignore_index, reduction, 0.0)


def cross_entropy(input, target, weight=None, *, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0):
    """Softmax cross-entropy of logits (N, C) against class indices (N,):
    `nll_loss(log_softmax(input), ...)`, plus PyTorch's label smoothing."""
    t = _class_targets("cross_entropy", input, target)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], "
                         f"got {label_smoothing}")
    return _nll("cross_entropy", log_softmax(input, dim=1), t, weight, ignore_index,
                reduction, label_smoothing)


def _nll(name, logp, t, weight, ignore_index, reduction, smoothing):
    if isinstance(weight, str):
        raise TypeError(f"{name}: the third positional argument is the class weight, as in "
                        f"PyTorch; pass reduction={weight!r} by keyword")
    n, c = logp.shape
    valid = t != ignore_index
    bad = valid & ((t < 0) | (t >= c))
    if bad.any():
        raise IndexError(f"{name}: target {t[bad][0]} is out of bounds for {c} classes")
    safe = np.where(valid, t, 0)
    w = None if weight is None else _raw(weight)
    if w is not None and w.shape != (c,):
        raise ValueError(f"{name}: weight shape {w.shape} does not match {c} classes")
    scale = valid if w is None else w[safe] * valid   # per-row weight, 0 when ignored
    dtype = _raw(logp).dtype
    loss = -getitem(logp, (np.arange(n), safe))
    if w is not None or not valid.all():
        loss = loss * scale.astype(dtype)
    if smoothing:
        per_class = logp if w is None else logp * w.astype(dtype)
        smooth = -_rd.sum(per_class, axis=1) * valid.astype(dtype)
        loss = loss * (1 - smoothing) + smooth * (smoothing / c)
    if reduction == "mean" and (w is not None or not valid.all()):
        return _rd.sum(loss) / scale.sum(dtype=dtype)
    return _reduce(name, loss, reduction)


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
    scores = matmul(query, swapaxes(key, -1, -2)) * scale
    if is_causal:
        ql, kl = scores.shape[-2:]
        attn_mask = np.tril(np.ones((ql, kl), dtype=bool))
    if attn_mask is not None:
        m = _raw(attn_mask)
        if m.dtype == bool:
            scores = where(m, scores, -np.inf)
        else:
            scores = scores + attn_mask
    # Rows with nothing to attend give zeros (PyTorch's safe softmax), not NaN; both
    # `where`s keep the NaN of an all -inf softmax out of the forward and the gradients.
    dead = None if attn_mask is None else np.all(scores.data == -np.inf, axis=-1, keepdims=True)
    if dead is not None and dead.any():
        weights = where(dead, 0.0, softmax(where(dead, 0.0, scores), dim=-1))
    else:
        weights = softmax(scores, dim=-1)
    if dropout_p > 0:
        weights = dropout(weights, dropout_p, seed=seed, rng=rng)
    return matmul(weights, value)
