"""scaled_dot_product_attention (PyTorch's `torch.nn.functional` signature and semantics).

The function is a composite: it checks its arguments, draws the dropout mask on the
attention weights (the draws are not part of the derivative), and calls one declared node,
`attention`, whose forward is fused: the scores are one GEMM, scaled, masked and turned into
the softmax in place (the attention weights, kept as the node's extra), then one GEMM. Its
derivative is written once as a `Joint` formula with ops (differentiable again, to any
order); the numpy kernel kept beside it runs four GEMMs on the saved weights instead of
recomputing them (the formula recomputes the scores and their softmax from the inputs).

Grouped-query attention (`enable_gqa`): the query heads sharing a key (value) head are
folded into its rows, (..., Hk, Hq/Hk * L, E) @ (..., Hk, E, S), one plain batched GEMM, so
the heads are never repeated and the backward's GEMMs sum over each group.

Thread safety: pure functions of their arguments (the dropout draws come from the generator
given, or the current one, as dropout's).
"""
from __future__ import annotations

import math

import numpy as np

from .. import memory
from ..costs import gemm_cost
from ..ops import pointwise as E
from ..ops import reduce as R
from ..ops import shape as S
from ..ops._common import P, array, empty, reshaped, zeros
from ..ops.linalg import matmul
from ..primitive import Joint, Saved, composite, defop
from ..tensor import Tensor
from ._dropout import draws_from, keep_mask

__all__ = ["scaled_dot_product_attention", "attention"]

_NAME = "scaled_dot_product_attention"


# ---- shapes: heads and masks --------------------------------------------------------------
def _gqa_heads(q, k, v) -> tuple | None:
    """(Hk, Hv) of grouped-query attention, each None where it equals Hq (nothing to
    fold); None when neither differs. Raises ValueError naming the problem."""
    if min(q.ndim, k.ndim, v.ndim) < 3:
        raise ValueError(f"{_NAME}: enable_gqa needs a heads dimension (..., H, L, E) on "
                         f"query, key and value, got shapes {q.shape}, {k.shape} and "
                         f"{v.shape}")
    hq, hk, hv = q.shape[-3], k.shape[-3], v.shape[-3]
    if hk == 0 or hv == 0 or hq % hk or hq % hv:
        raise ValueError(f"{_NAME}: enable_gqa: the number of heads in key ({hk}) and value "
                         f"({hv}) must divide the number of heads in query ({hq})")
    heads = (None if hk == hq else hk, None if hv == hq else hv)
    return None if heads == (None, None) else heads


def _heads(q, k, v, enable_gqa: bool) -> tuple:
    heads = _gqa_heads(q, k, v) if enable_gqa else None
    return heads if heads is not None else (None, None)


def _folded(a, h):
    """(..., Hq, L, X) as (..., h, Hq/h * L, X) (arrays: a view when numpy can make one;
    Tensors: a reshape op); `a` itself when h is None."""
    if h is None:
        return a
    shape = a.shape[:-3] + (h, -1, a.shape[-1])
    return S.reshape(a, shape) if isinstance(a, Tensor) else reshaped(a, shape)


def _unfolded(a, h, hq: int):
    """`_folded`'s inverse after a product on folded heads: (..., Hq, L, X)."""
    if h is None:
        return a
    shape = a.shape[:-3] + (hq, -1, a.shape[-1])
    return S.reshape(a, shape) if isinstance(a, Tensor) else reshaped(a, shape)


def _causal(scores: tuple) -> np.ndarray:
    """tril(ones): keep column j <= row i."""
    return np.greater_equal(np.arange(scores[-2])[:, None], np.arange(scores[-1]),
                            out=empty(scores[-2:], bool))


def _check_mask(mask: np.ndarray, scores: tuple) -> None:
    try:
        ok = np.broadcast_shapes(mask.shape, scores) == scores
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{_NAME}: attn_mask of shape {mask.shape} does not broadcast to "
                         f"the attention scores' shape {scores}")


def _swap(x):
    return S.swapaxes(x, -1, -2) if isinstance(x, Tensor) else np.swapaxes(x, -1, -2)


# ---- the forward and its kernel (numpy) ---------------------------------------------------
def _attention_weights(s, mask):
    """softmax over the last axis of the scores `s` after the mask (boolean: keep where
    True; float: added), in place when the mask does not broadcast `s` up; rows with
    nothing to attend give zeros. Passes: mask, max, subtract, exp, sum, divide."""
    if mask is not None:
        grows = np.broadcast_shapes(s.shape, mask.shape) != s.shape
        if mask.dtype == bool:
            if grows:           # np.where(mask, s, -inf): a copy, then the fill below
                t = empty(np.broadcast_shapes(s.shape, mask.shape), np.result_type(s, -np.inf))
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


def _dropped(p, keep, dscale):
    """P' = P keep dscale (a new array), or P itself without dropout."""
    if keep is None:
        return p
    pd = P.multiply(p, keep)
    pd *= dscale
    return pd


def _attention_kernel(g, ans, query, key, value, attn_mask, p, keep, dropout_scale,
                      is_causal, scale, enable_gqa):
    # dV = P'^T g (P' = P with dropout, rebuilt in a temporary); dP = g V^T (one
    # scores-sized temporary), turned in place into dS = P (dP - rowsum(dP P)) (3 passes),
    # which is the float mask's gradient; dQ = scale dS K, dK = scale dS^T Q (the scale
    # on the smaller products). Four GEMMs; grouped heads: the same GEMMs on the folded
    # views, dK and dV summed over each group by the GEMMs.
    hk, hv = _heads(query, key, value, enable_gqa)
    hq = p.shape[-3] if hk or hv else None
    dv = memory.matmul(_swap(_folded(_dropped(p, keep, dropout_scale), hv)), _folded(g, hv))
    ds = _unfolded(memory.matmul(_folded(g, hv), _swap(value)), hv, hq)
    if keep is not None:
        ds *= keep
        ds *= dropout_scale
    ds -= np.vecdot(ds, p)[..., None]
    ds *= p
    dq = _unfolded(memory.matmul(_folded(ds, hk), key), hk, hq)
    dq *= scale
    dk = memory.matmul(_swap(_folded(ds, hk)), _folded(query, hk))
    dk *= scale
    float_mask = attn_mask is not None and np.asarray(attn_mask).dtype != bool
    return dq, dk, dv, ds if float_mask else None


# ---- the formula (ops: differentiable again) ----------------------------------------------
def _masked_softmax(s, mask, causal: bool):
    """The attention weights from the scores `s` (a Tensor) with ops: a boolean (or causal)
    mask keeps where True, a float one is added; rows with nothing to attend give zeros
    (their scores replaced by 0 before the softmax, then multiplied by 0), as the forward."""
    if causal:
        mask = _causal(s.shape)
    if mask is None:
        return R.softmax(s, dim=-1)
    m = array(mask)
    if m.dtype == bool:
        live = np.broadcast_to(m.any(axis=-1, keepdims=True), np.broadcast_shapes(
            m.shape, s.shape))
        p = R.softmax(E.where(m | ~live, s, -np.inf), dim=-1)
        return p * m
    s = s + mask
    dead = ~np.isfinite(m).any(axis=-1, keepdims=True)
    if not dead.any():
        return R.softmax(s, dim=-1)
    return R.softmax(E.where(dead, 0.0, s), dim=-1) * ~dead


def _attention_formula(g, ans, query, key, value, attn_mask, keep, dropout_scale,
                       is_causal, scale, enable_gqa):
    hk, hv = _heads(array(query), array(key), array(value), enable_gqa)
    hq = np.shape(query)[-3] if hk or hv else None
    s = _unfolded(matmul(_folded(query, hk), _swap(key)), hk, hq) * scale
    p = _masked_softmax(s, attn_mask, is_causal)
    drop = None if keep is None else (keep * dropout_scale).astype(array(ans).dtype)
    dv = matmul(_swap(_folded(p if drop is None else p * drop, hv)), _folded(g, hv))
    dp = _unfolded(matmul(_folded(g, hv), _swap(value)), hv, hq)
    if drop is not None:
        dp = dp * drop
    ds = p * (dp - R.sum(dp * p, dim=-1, keepdim=True))
    dq = _unfolded(matmul(_folded(ds, hk), key), hk, hq) * scale
    dk = matmul(_swap(_folded(ds, hk)), _folded(query, hk)) * scale
    float_mask = attn_mask is not None and array(attn_mask).dtype != bool
    return dq, dk, dv, ds if float_mask else None


def _attention_cost(ans, query, key, value, *rest, **params):
    return gemm_cost(ans.size // max(1, ans.shape[-1]) * key.shape[-2],
                     query.shape[-1] + value.shape[-1])


@defop(inputs=("query", "key", "value", "attn_mask"), formula=Joint(_attention_formula),
       kernel=Joint(_attention_kernel), unsaved=("result",), export=False, name=_NAME,
       cost=_attention_cost, threaded=True)
def attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
              keep=None, dropout_scale: float = 1.0, is_causal: bool = False,
              scale: float = 1.0, enable_gqa: bool = False) -> Tensor:
    """softmax(q @ k^T * scale + mask) @ v, dropout `keep` (a boolean mask of the scores'
    shape, kept positions scaled by `dropout_scale`) on the weights: the node under
    `scaled_dot_product_attention`, which checks the arguments. Keeps the inputs and the
    attention weights, not the output."""
    q, k, v = query, key, value
    hk, hv = _heads(q, k, v, enable_gqa)
    hq = q.shape[-3] if hk or hv else None
    p = _unfolded(memory.matmul(_folded(q, hk), _swap(k)), hk, hq)
    p *= scale
    mask = _causal(p.shape) if is_causal else attn_mask
    p = _attention_weights(p, None if mask is None else np.asarray(mask))
    out = _unfolded(memory.matmul(_folded(_dropped(p, keep, dropout_scale), hv), v), hv, hq)
    return Saved(out, p)


@composite(module="torch.nn.functional")
def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor,
                                 attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False, seed=None, rng=None) -> Tensor:
    """softmax(q @ k^T * scale + mask) @ v over the last two dims (..., L, E).

    A boolean `attn_mask` marks positions that may be attended (True = keep); a
    float mask is added to the scores (and gets a gradient). `is_causal` masks the upper
    triangle. `scale` defaults to 1/sqrt(E). A query that may attend nothing gets zeros,
    as in PyTorch. Dropout on the attention weights draws from `seed`/`rng` (else the
    current generator). `enable_gqa`: grouped-query attention, PyTorch's semantics: query
    (..., Hq, L, E), key (..., Hk, S, E) and value (..., Hv, S, Ev) with Hk and Hv dividing
    Hq; query head i reads key head i // (Hq / Hk) (and value head i // (Hq / Hv)).
    One fused node (`attention`).
    """
    q, k, v = array(query), array(key), array(value)
    if q.dtype.kind != "f" or not q.dtype == k.dtype == v.dtype:
        raise RuntimeError(f"{_NAME}: expected query, key and value of one floating point "
                           f"dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    if q.ndim < 2 or q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(f"{_NAME}: expected query (..., L, E), key (..., S, E) and value "
                         f"(..., S, Ev), got shapes {q.shape}, {k.shape} and {v.shape}")
    if is_causal and attn_mask is not None:
        raise ValueError(f"{_NAME}: pass either attn_mask or is_causal, not both")
    hk, _ = _heads(q, k, v, enable_gqa)
    lead = np.broadcast_shapes(q.shape[:-3], k.shape[:-3]) + (q.shape[-3],) if hk \
        else np.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    scores = tuple(lead) + (q.shape[-2], k.shape[-2])
    if attn_mask is not None:
        _check_mask(array(attn_mask), scores)
    keep, dscale = None, 1.0
    if dropout_p > 0:
        keep = keep_mask(scores, dropout_p, draws_from(seed, rng)) if dropout_p < 1 \
            else zeros(scores, bool)
        dscale = 0.0 if dropout_p >= 1 else 1.0 / (1.0 - dropout_p)
    if scale is None:  # E = 0: the scores are empty sums, 0 whatever the scale (PyTorch's
        scale = 1.0 / math.sqrt(q.shape[-1]) if q.shape[-1] else 1.0  # 1/sqrt(0) never
        # multiplies them: no 0 * inf)
    return attention(query, key, value, attn_mask, keep, dscale, bool(is_causal), scale,
                     bool(enable_gqa))
