"""PyTorch-style functional API (`torch.nn.functional` signatures and semantics).

The ops declared once (`defop`/`composite`) live in their family files and are
re-exported here: the layers (linear, the norms, embedding, dropout,
scaled_dot_product_attention: nn/_linear.py, nn/_norms.py, ...), the spatial ops
(convolutions, pools, resampling, padding: nn/_conv.py, nn/_pool.py, ...), the
activations (ops/activations.py). nll_loss and cross_entropy are one node (`record`)
with fused rules: a rule allocates the arrays it returns and at most one temporary it
states (block-sized where it can be), reuses its own temporaries with `out=`, and never
writes into `g`, a saved array or the caller's arrays; the comment of each rule counts
its passes over memory. Images are NCHW. The full-size arrays a forward or a rule makes
(outputs, temporaries, masks) come from the caching allocator (`memory`): reused memory,
not fresh pages to fault in every step.
"""
from __future__ import annotations


import numpy as np

from ..memory import empty as _empty
from ..memory import pooled as P
from ..ops import reduce as _rd
from ..ops.reduce import log_softmax, softmax  # torch.nn.functional's too
from ..ops import activations as _activations  # noqa: F401  (declares F's activations)
from ..ops import shape as S
from ..primitive import exports as _exports
from ..primitive import record
from ..tensor import Tensor
# The spatial families, each op declared once in its file (`primitive.defop`/`composite`):
# convolutions, pooling, resampling, padding.
from ._conv import (conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d,  # noqa: F401
                    conv_transpose3d, fold, unfold)
from ._lppool import lp_pool1d, lp_pool2d, lp_pool3d  # noqa: F401
from ._pad import pad  # noqa: F401
from ._pool import (adaptive_max_pool1d, adaptive_max_pool2d, avg_pool1d, avg_pool2d,  # noqa: F401
                    max_pool1d, max_pool2d)
from ._pool3d import adaptive_avg_pool3d, adaptive_max_pool3d, avg_pool3d, max_pool3d  # noqa: F401
from ._resample import (adaptive_avg_pool1d, adaptive_avg_pool2d, interpolate, pixel_shuffle,  # noqa: F401
                        pixel_unshuffle, upsample, upsample_bilinear, upsample_nearest)
from ._unpool import max_unpool1d, max_unpool2d  # noqa: F401
# The layer families, one file each: dropout, attention, embedding, linear, norms.
from ._dropout import (alpha_dropout, dropout, dropout1d, dropout2d,  # noqa: F401
                       dropout3d, draws_from, feature_alpha_dropout, keep_mask)
from ._attention import scaled_dot_product_attention  # noqa: F401
from ._embedding import embedding  # noqa: F401
from ._linear import bilinear, linear  # noqa: F401
from ._norms import (batch_norm, group_norm, instance_norm, layer_norm,  # noqa: F401
                     local_response_norm, rms_norm)

__all__ = [
    "linear", "bilinear", "layer_norm", "rms_norm", "embedding",
    "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
    "feature_alpha_dropout", "nll_loss", "cross_entropy", "mse_loss",
    "scaled_dot_product_attention", "softmax", "log_softmax",
    "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "kl_div", "cosine_embedding_loss",
    "margin_ranking_loss", "triplet_margin_loss", "batch_norm", "instance_norm",
    "group_norm", "local_response_norm",
    "one_hot", "normalize", "relu6", "softmin",
]
# The declared ops of PyTorch's `torch.nn.functional` (`defop(module=...)`): the activations,
# the spatial families above, ...
globals().update(_exports("torch.nn.functional"))
__all__.extend(sorted(set(_exports("torch.nn.functional")) - set(__all__)))


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


# The losses of nn/_losses.py (last: they use the helpers above). nll_loss and
# cross_entropy are there: (N, C), (C,) and (N, C, d1, ...) inputs, all through the fused
# node `_nll` above.
from ._losses import (binary_cross_entropy, binary_cross_entropy_with_logits,  # noqa: E402
                      cosine_embedding_loss, cross_entropy, huber_loss, kl_div, l1_loss,
                      margin_ranking_loss, nll_loss, smooth_l1_loss, triplet_margin_loss)
# More of torch.nn.functional, built on the ops (nn/_extras.py)
from ._extras import normalize, one_hot, relu6, softmin  # noqa: E402
