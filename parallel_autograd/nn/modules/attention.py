"""`MultiheadAttention`: PyTorch's `nn.MultiheadAttention`, parameter names and all."""
from __future__ import annotations

import math

import numpy as np

from .. import functional as F
from .. import init
from ..module import Module
from ...device import check_device
from ...ops import pointwise as E
from ...ops import linalg as L
from ...ops import reduce as R
from ...ops import shape as S
from ...tensor import Tensor
from ._utils import empty_parameter, float_dtype, positive_int
from .linear import Linear


def _arr(x) -> np.ndarray:
    return x._data if isinstance(x, Tensor) else np.asarray(x)


class MultiheadAttention(Module):
    """Multi-head attention (PyTorch's `nn.MultiheadAttention`):
    `out_proj(concat_h softmax(q_h k_h^T / sqrt(d) + mask) v_h)` with q, k, v the input
    projections split into `num_heads` heads of `d = embed_dim / num_heads`.

    Args:
        embed_dim: model width (query features and output features).
        num_heads: number of heads; must divide embed_dim.
        dropout: dropout on the attention weights in training (default 0).
        bias: learn `in_proj_bias` and `out_proj.bias` (default True).
        add_bias_kv: learn `bias_k`, `bias_v` (1, 1, embed_dim) appended to the keys and
            values as one more position (default False).
        add_zero_attn: append a position of zeros to the keys and values (default False).
        kdim, vdim: key and value features (default embed_dim).
        batch_first: inputs and output are (N, L, E) instead of (L, N, E).
        dtype: parameter dtype (default: `pa.get_default_dtype()`). generator: numpy
            Generator for the initial values (default: the default generator
            `pa.manual_seed` reseeds).

    Parameters, PyTorch's names and initialisation (so a torch state dict loads):
    `in_proj_weight` (3*embed_dim, embed_dim) when kdim == vdim == embed_dim, else
    `q_proj_weight` (embed_dim, embed_dim), `k_proj_weight` (embed_dim, kdim),
    `v_proj_weight` (embed_dim, vdim) (xavier_uniform_); `in_proj_bias` (3*embed_dim,)
    (zeros); `out_proj` a Linear(embed_dim, embed_dim) (bias zeroed); `bias_k`, `bias_v`
    (xavier_normal_).

    Thread safety: as every Module (forward only reads parameters).
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0,
                 bias: bool = True, add_bias_kv: bool = False, add_zero_attn: bool = False,
                 kdim: int | None = None, vdim: int | None = None, batch_first: bool = False,
                 device=None, dtype=None, generator: np.random.Generator | None = None) -> None:
        super().__init__()
        name = "MultiheadAttention"
        self.embed_dim = positive_int(embed_dim, "embed_dim", name)
        self.num_heads = positive_int(num_heads, "num_heads", name)
        self.kdim = self.embed_dim if kdim is None else positive_int(kdim, "kdim", name)
        self.vdim = self.embed_dim if vdim is None else positive_int(vdim, "vdim", name)
        if self.embed_dim % self.num_heads:
            raise ValueError(f"{name}: embed_dim must be divisible by num_heads, got "
                             f"embed_dim={embed_dim} and num_heads={num_heads}")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"{name}: dropout probability has to be between 0 and 1, "
                             f"got {dropout}")
        check_device(device, name)  # DeviceUnavailableError unless the CPU
        self._qkv_same_embed_dim = self.kdim == self.embed_dim and self.vdim == self.embed_dim
        self.dropout, self.batch_first = float(dropout), bool(batch_first)
        self.head_dim = self.embed_dim // self.num_heads
        dt = float_dtype(dtype, name)
        e = self.embed_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = empty_parameter((3 * e, e), dt)
            for n in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(n, None)
        else:
            self.q_proj_weight = empty_parameter((e, e), dt)
            self.k_proj_weight = empty_parameter((e, self.kdim), dt)
            self.v_proj_weight = empty_parameter((e, self.vdim), dt)
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = empty_parameter((3 * e,), dt)
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(e, e, bias=bias, dtype=dt, generator=generator)
        if add_bias_kv:
            self.bias_k = empty_parameter((1, 1, e), dt)
            self.bias_v = empty_parameter((1, 1, e), dt)
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = bool(add_zero_attn)
        self._reset_parameters(generator)

    def _reset_parameters(self, generator: np.random.Generator | None = None) -> None:
        """PyTorch's: xavier_uniform_ projections, zero biases, xavier_normal_ bias_k/v."""
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight, generator=generator)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(w, generator=generator)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        for b in (self.bias_k, self.bias_v):
            if b is not None:
                init.xavier_normal_(b, generator=generator)

    def forward(self, query, key, value, key_padding_mask=None, need_weights: bool = True,
                attn_mask=None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple:
        """(attn_output, attn_weights), PyTorch's semantics.

        query (L, N, embed_dim), key (S, N, kdim), value (S, N, vdim) ((N, L, ...) with
        batch_first; unbatched: (L, embed_dim), ...). `key_padding_mask` (N, S): True (or
        -inf) marks keys to ignore; a float mask is added. `attn_mask` (L, S) or
        (N*num_heads, L, S): True means "may not attend" (the opposite of
        scaled_dot_product_attention's boolean mask), a float mask is added. `is_causal`
        is a hint that attn_mask is the causal mask (attn_mask is required, as in
        PyTorch). The weights (N, L, S), or per head (N, num_heads, L, S) when not
        `average_attn_weights`, are returned only when `need_weights` (after dropout,
        as PyTorch's); else None, and the attention is one fused
        `scaled_dot_product_attention` node.
        """
        qd, kd, vd = _arr(query), _arr(key), _arr(value)
        batched = self._check_shapes(qd, kd, vd, key_padding_mask, attn_mask)
        if not batched:                 # one batch element; self-attention stays packed
            same = query is key and key is value
            query, key, value = (S.unsqueeze(_tensor(t), 1) for t in (query, key, value))
            if same:
                key = value = query
            qd, kd, vd = qd[:, None], kd[:, None], vd[:, None]
            if key_padding_mask is not None:
                key_padding_mask = S.unsqueeze(_tensor(key_padding_mask), 0) \
                    if isinstance(key_padding_mask, Tensor) else _arr(key_padding_mask)[None]
        bf = self.batch_first and batched
        seq_axis = 1 if bf else 0
        n, tgt, src = self._check_sizes(qd, kd, vd, seq_axis, is_causal and attn_mask is None)
        causal = is_causal and key_padding_mask is None and not need_weights
        extra = (self.bias_k is not None) + self.add_zero_attn
        keep, add = (None, None) if causal else _merge_masks(
            attn_mask, key_padding_mask, n, self.num_heads, tgt, src, extra, qd.dtype)
        q, k, v = self._project(query, key, value)
        if self.bias_k is not None:                       # one more key/value position
            shape = (n, 1, self.embed_dim) if bf else (1, n, self.embed_dim)
            k = S.concat([k, S.broadcast_to(self.bias_k, shape)], axis=seq_axis)
            v = S.concat([v, S.broadcast_to(self.bias_v, shape)], axis=seq_axis)
        q, k, v = (self._split_heads(t, bf) for t in (q, k, v))
        if self.add_zero_attn:
            zeros = np.zeros((n, self.num_heads, 1, self.head_dim), _arr(k).dtype)
            k, v = S.concat([k, zeros], axis=2), S.concat([v, zeros], axis=2)
        o, weights = self._attend(q, k, v, keep, add, causal, need_weights)
        # (N, H, L, d) -> (L, N, E) (or (N, L, E)), then the output projection
        o = S.permute(o, (0, 2, 1, 3) if bf else (2, 0, 1, 3))
        o = S.reshape(o, (n, tgt, self.embed_dim) if bf else (tgt, n, self.embed_dim))
        out = self.out_proj(o)
        if weights is not None and average_attn_weights:
            weights = R.mean(weights, axis=1)
        if not batched:
            out = S.squeeze(out, 1)
            weights = None if weights is None else S.squeeze(weights, 0)
        return out, weights

    def _check_sizes(self, qd, kd, vd, seq_axis: int, causal_without_mask: bool) -> tuple:
        """(batch size, target and source lengths); PyTorch's errors for mismatched batch
        sizes, sequence lengths, feature sizes and an is_causal hint without a mask."""
        name = "MultiheadAttention"
        n = qd.shape[1 - seq_axis]
        tgt, src = qd.shape[seq_axis], kd.shape[seq_axis]
        if (kd.shape[1 - seq_axis] != n or vd.shape[1 - seq_axis] != n
                or vd.shape[seq_axis] != src):
            raise ValueError(f"{name}: key {kd.shape} and value {vd.shape} must have the "
                             f"query's batch size {n} and the same sequence length")
        for what, d, want in (("query", qd, self.embed_dim), ("key", kd, self.kdim),
                              ("value", vd, self.vdim)):
            if d.shape[-1] != want:
                raise ValueError(f"{name}: expected {what} features {want}, got {d.shape[-1]}")
        if causal_without_mask:
            raise RuntimeError(f"{name}: Need attn_mask if specifying the is_causal hint. You "
                               f"may use the Transformer module method "
                               f"`generate_square_subsequent_mask` to create this mask.")
        return n, tgt, src

    def _attend(self, q, k, v, keep, add, causal: bool, need_weights: bool) -> tuple:
        """(output per head (N, H, L, d), the weights or None): the weights computed with
        ops when they are asked for, else one fused scaled_dot_product_attention node."""
        p = self.dropout if self.training else 0.0
        if not need_weights:
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=keep if add is None else add, dropout_p=p,
                is_causal=causal), None
        scores = L.matmul(q * math.sqrt(1.0 / self.head_dim), S.swapaxes(k, -1, -2))
        if add is not None:
            scores = scores + add
        if keep is not None:
            scores = E.where(keep, scores, -np.inf)
        weights = R.softmax(scores, axis=-1)
        if p > 0:
            weights = F.dropout(weights, p, True)
        return L.matmul(weights, v), weights

    def _check_shapes(self, qd, kd, vd, kpm, attn_mask) -> bool:
        """Whether the input is batched; PyTorch's shape rules (`_mha_shape_check`)."""
        name = "MultiheadAttention"
        if qd.ndim not in (2, 3):
            raise ValueError(f"{name}: query should be unbatched 2D or batched 3D tensor but "
                             f"received {qd.ndim}-D query tensor")
        batched = qd.ndim == 3
        if kd.ndim != qd.ndim or vd.ndim != qd.ndim:
            raise ValueError(f"{name}: for {qd.ndim}-D query, key and value should be "
                             f"{qd.ndim}-D but got {kd.ndim}-D and {vd.ndim}-D")
        if kpm is not None and _arr(kpm).ndim != (2 if batched else 1):
            raise ValueError(f"{name}: for {'batched 3' if batched else 'unbatched 2'}-D "
                             f"query, key_padding_mask should be "
                             f"{2 if batched else 1}-D but got {_arr(kpm).ndim}-D")
        if attn_mask is not None and _arr(attn_mask).ndim not in (2, 3):
            raise ValueError(f"{name}: attn_mask should be 2-D or 3-D, got "
                             f"{_arr(attn_mask).ndim}-D")
        for what, m in (("key_padding_mask", kpm), ("attn_mask", attn_mask)):
            if m is not None and _arr(m).dtype != bool and _arr(m).dtype.kind != "f":
                raise TypeError(f"{name}: only bool and floating types of masks are "
                                f"supported, got {what} of dtype {_arr(m).dtype}")
        return batched

    def _project(self, query, key, value) -> tuple:
        """The input projections q, k, v (packed: one GEMM when query is key is value)."""
        e, b = self.embed_dim, self.in_proj_bias
        bq, bk, bv = (None,) * 3 if b is None else (b[:e], b[e:2 * e], b[2 * e:])
        if not self._qkv_same_embed_dim:
            return (F.linear(query, self.q_proj_weight, bq),
                    F.linear(key, self.k_proj_weight, bk),
                    F.linear(value, self.v_proj_weight, bv))
        w = self.in_proj_weight
        if query is key and key is value:                 # self-attention
            return tuple(S.split(F.linear(query, w, b), e, axis=-1))
        return (F.linear(query, w[:e], bq), F.linear(key, w[e:2 * e], bk),
                F.linear(value, w[2 * e:], bv))

    def _split_heads(self, x, bf: bool) -> Tensor:
        """(L, N, E) (or (N, L, E)) -> (N, num_heads, L, head_dim)."""
        a, b = _arr(x).shape[:2]
        x = S.reshape(x, (a, b, self.num_heads, self.head_dim))
        return S.permute(x, (0, 2, 1, 3) if bf else (1, 2, 0, 3))

    def extra_repr(self) -> str:
        """Nothing: PyTorch prints only the submodule (`out_proj`)."""
        return ""


def _tensor(x) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor._wrap(np.asarray(x))


def _merge_masks(attn_mask, kpm, n: int, heads: int, tgt: int, src: int, extra: int,
                 dtype) -> tuple:
    """(keep, add): the masks as one boolean "may attend" array (when both are boolean or
    absent) or one additive float mask (a Tensor when a float mask is one), each
    broadcasting against the scores (N, heads, L, S + extra), PyTorch's checks."""
    name = "MultiheadAttention"
    if attn_mask is not None:                  # every check before any op is recorded
        shape = _arr(attn_mask).shape
        want = (tgt, src) if len(shape) == 2 else (n * heads, tgt, src)
        if shape != want:
            raise ValueError(f"{name}: The shape of the {len(shape)}D attn_mask is {shape}, "
                             f"but should be {want}.")
    if kpm is not None and _arr(kpm).shape != (n, src):
        raise ValueError(f"{name}: expected key_padding_mask of shape {(n, src)}, got "
                         f"{_arr(kpm).shape}")
    parts = []
    for m, shape in ((attn_mask, (1, 1, tgt, src) if np.ndim(_arr(attn_mask)) == 2
                      else (n, heads, tgt, src)), (kpm, (n, 1, 1, src))):
        if m is not None:
            parts.append(S.reshape(m, shape) if isinstance(m, Tensor)
                         else _arr(m).reshape(shape))
    if not parts:
        return None, None
    if extra:                                         # the appended positions: never masked
        padded = []
        for m in parts:
            width = ((0, 0),) * 3 + ((0, extra),)
            if isinstance(m, Tensor):
                padded.append(S.pad(m, width))
            else:
                padded.append(np.pad(m, width, constant_values=False if m.dtype == bool else 0))
        parts = padded
    if all(_arr(m).dtype == bool for m in parts):   # boolean masks carry no gradient
        masked = _arr(parts[0]) if len(parts) == 1 else np.logical_or(_arr(parts[0]),
                                                                      _arr(parts[1]))
        return np.logical_not(masked), None
    add = None
    for m in parts:
        if _arr(m).dtype == bool:
            m = np.where(_arr(m), -np.inf, 0.0).astype(dtype)
        add = m if add is None else add + m
    return None, add
