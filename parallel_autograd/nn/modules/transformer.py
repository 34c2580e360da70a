"""`Transformer`, `TransformerEncoder(Layer)`, `TransformerDecoder(Layer)`: PyTorch's
`torch.nn` transformer modules, built on `MultiheadAttention`, `Linear`, `LayerNorm` and
`Dropout`, with torch's arguments, submodule and parameter names (a torch state dict
loads), masks and forward arithmetic (float64 outputs equal torch's to rounding).

Masks, as torch's: `*_mask` is (L, S) or (N*nhead, L, S), `*_key_padding_mask` is (N, S);
a boolean mask marks with True what may NOT be attended, a float mask is added to the
scores. The encoder layers turn boolean masks into float ones (-inf) first, as torch's do.
`is_causal=None` in the stacks detects a causal mask (`generate_square_subsequent_mask`'s);
True is a hint that the given mask is causal (a mask is still required, as torch's).

Differences: no inference fast path (torch's eval-mode path turns a padded batch into
nested tensors and returns zeros at the padded positions of the last layer, here every
position is computed); no `enable_nested_tensor` warning (`use_nested_tensor` is False).
Layers take the default dtype (float32 unless changed) unless given `dtype=`; `generator=`
(an extension, as on the other layers) seeds the initial weights.

Thread safety: as every Module (forward only reads parameters).
"""
from __future__ import annotations

import copy
from typing import Callable

import numpy as np

from ... import dtypes as D
from ...tensor import Tensor
from .. import functional as F
from .. import init
from ..module import Module
from .activation import GELU, ReLU
from .attention import MultiheadAttention
from .container import ModuleList
from .dropout import Dropout
from .linear import Linear
from .norm import LayerNorm

__all__ = ["Transformer", "TransformerEncoder", "TransformerDecoder",
           "TransformerEncoderLayer", "TransformerDecoderLayer"]


def _generate_square_subsequent_mask(sz: int, device=None, dtype=None) -> Tensor:
    """(sz, sz): 0 on and below the diagonal, -inf above (torch's; boolean dtype: True
    above). The default dtype unless `dtype`."""
    dt = D.to_numpy(D.get_default_dtype() if dtype is None else dtype)
    if dt == np.bool_:
        return Tensor._wrap(np.triu(np.ones((sz, sz), bool), 1))
    return Tensor._wrap(np.triu(np.full((sz, sz), -np.inf, dt), 1))


def _raw(x) -> np.ndarray:
    return x._data if isinstance(x, Tensor) else np.asarray(x)


def _canonical_mask(mask, name: str, dtype: np.dtype):
    """torch's `F._canonical_mask`: a boolean mask as a float one (-inf where True) of the
    input's dtype; a float mask as it is; anything else AssertionError."""
    if mask is None:
        return None
    m = _raw(mask)
    if m.dtype != np.bool_ and m.dtype.kind != "f":
        raise AssertionError(f"only bool and floating types of {name} are supported")
    if m.dtype == np.bool_:
        return Tensor._wrap(np.where(m, -np.inf, 0.0).astype(dtype))
    return mask


def _get_seq_len(src, batch_first: bool) -> int:
    shape = _raw(src).shape
    if len(shape) == 2:
        return shape[0]
    return shape[1 if batch_first else 0]


def _detect_is_causal_mask(mask, is_causal: bool | None = None, size: int | None = None) -> bool:
    """torch's: `is_causal` if given; else whether `mask` equals the causal mask of its
    size and dtype."""
    make_causal = is_causal is True
    if is_causal is None and mask is not None:
        m = _raw(mask)
        sz = size if size is not None else m.shape[-2]
        causal = _generate_square_subsequent_mask(sz, dtype=m.dtype)._data
        make_causal = m.shape == causal.shape and bool((m == causal).all())
    return make_causal


def _get_activation_fn(activation: str) -> Callable:
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    raise RuntimeError(f"activation should be relu/gelu, not {activation}")


def _get_clones(module: Module, n: int) -> ModuleList:
    return ModuleList([copy.deepcopy(module) for _ in range(n)])


def _feedforward(layer, d_model: int, dim_feedforward: int, dropout: float, bias: bool,
                 dt, generator) -> None:
    """The layers' shared parts: linear1 -> activation -> dropout -> linear2."""
    layer.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dt, generator=generator)
    layer.dropout = Dropout(dropout)
    layer.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dt, generator=generator)


def _activation(layer, activation) -> None:
    if isinstance(activation, str):
        activation = _get_activation_fn(activation)
    if activation is F.relu or isinstance(activation, ReLU):
        layer.activation_relu_or_gelu = 1
    elif activation is F.gelu or isinstance(activation, GELU):
        layer.activation_relu_or_gelu = 2
    else:
        layer.activation_relu_or_gelu = 0
    layer.activation = activation


class TransformerEncoderLayer(Module):
    """PyTorch's `nn.TransformerEncoderLayer`: self-attention and a feedforward block,
    each with a residual connection and a LayerNorm (after it, or before with
    `norm_first`). Submodules: `self_attn`, `linear1`, `dropout`, `linear2`, `norm1`,
    `norm2`, `dropout1`, `dropout2`; `activation` ("relu", "gelu" or a callable)."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: str | Callable = F.relu,
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None,
                 generator: np.random.Generator | None = None) -> None:
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, device=device,
                                            dtype=dtype, generator=generator)
        _feedforward(self, d_model, dim_feedforward, dropout, bias, dtype, generator)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        _activation(self, activation)

    def forward(self, src, src_mask=None, src_key_padding_mask=None,
                is_causal: bool = False) -> Tensor:
        """The layer on `src` ((S, N, E), (N, S, E) with batch_first, or unbatched (S, E))."""
        dt = _raw(src).dtype
        src_key_padding_mask = _canonical_mask(src_key_padding_mask, "src_key_padding_mask", dt)
        src_mask = _canonical_mask(src_mask, "src_mask", dt)
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal: bool = False) -> Tensor:
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           need_weights=False, is_causal=is_causal)[0]
        return self.dropout1(x)

    def _ff_block(self, x) -> Tensor:
        x = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return self.dropout2(x)


class TransformerDecoderLayer(Module):
    """PyTorch's `nn.TransformerDecoderLayer`: self-attention, attention over `memory`
    and a feedforward block, each with a residual connection and a LayerNorm.
    Submodules: `self_attn`, `multihead_attn`, `linear1`, `dropout`, `linear2`, `norm1..3`,
    `dropout1..3`."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: str | Callable = F.relu,
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None,
                 generator: np.random.Generator | None = None) -> None:
        super().__init__()
        kw = dict(dropout=dropout, batch_first=batch_first, bias=bias, device=device,
                  dtype=dtype, generator=generator)
        self.self_attn = MultiheadAttention(d_model, nhead, **kw)
        self.multihead_attn = MultiheadAttention(d_model, nhead, **kw)
        _feedforward(self, d_model, dim_feedforward, dropout, bias, dtype, generator)
        self.norm_first = norm_first
        for i in (1, 2, 3):
            setattr(self, f"norm{i}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias,
                                                dtype=dtype))
        for i in (1, 2, 3):
            setattr(self, f"dropout{i}", Dropout(dropout))
        self.activation = _get_activation_fn(activation) if isinstance(activation, str) \
            else activation

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False) -> Tensor:
        """The layer on `tgt` attending to itself and to `memory`."""
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask,
                                    memory_key_padding_mask, memory_is_causal)
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
            x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask,
                                               memory_is_causal))
            x = self.norm3(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal: bool = False) -> Tensor:
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           is_causal=is_causal, need_weights=False)[0]
        return self.dropout1(x)

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal: bool = False) -> Tensor:
        x = self.multihead_attn(x, mem, mem, attn_mask=attn_mask,
                                key_padding_mask=key_padding_mask, is_causal=is_causal,
                                need_weights=False)[0]
        return self.dropout2(x)

    def _ff_block(self, x) -> Tensor:
        x = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return self.dropout3(x)


class TransformerEncoder(Module):
    """PyTorch's `nn.TransformerEncoder`: `num_layers` deep copies of `encoder_layer`
    (`layers`, identical at construction, as torch's), then `norm` if given."""

    def __init__(self, encoder_layer: Module, num_layers: int, norm: Module | None = None,
                 enable_nested_tensor: bool = True, mask_check: bool = True) -> None:
        super().__init__()
        self.layers = _get_clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = enable_nested_tensor
        self.use_nested_tensor = False       # no nested tensors here
        self.mask_check = mask_check

    def forward(self, src, mask=None, src_key_padding_mask=None,
                is_causal: bool | None = None) -> Tensor:
        """Every layer in turn on `src`, then `norm`; `is_causal=None` detects a causal
        `mask`."""
        dt = _raw(src).dtype
        src_key_padding_mask = _canonical_mask(src_key_padding_mask, "src_key_padding_mask", dt)
        mask = _canonical_mask(mask, "mask", dt)
        seq_len = _get_seq_len(src, self.layers[0].self_attn.batch_first)
        is_causal = _detect_is_causal_mask(mask, is_causal, seq_len)
        output = src
        for mod in self.layers:
            output = mod(output, src_mask=mask, is_causal=is_causal,
                         src_key_padding_mask=src_key_padding_mask)
        if self.norm is not None:
            output = self.norm(output)
        return output


class TransformerDecoder(Module):
    """PyTorch's `nn.TransformerDecoder`: `num_layers` deep copies of `decoder_layer`,
    then `norm` if given."""

    def __init__(self, decoder_layer: Module, num_layers: int,
                 norm: Module | None = None) -> None:
        super().__init__()
        self.layers = _get_clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False) -> Tensor:
        """Every layer in turn on `tgt` with `memory`, then `norm`; `tgt_is_causal=None`
        detects a causal `tgt_mask`."""
        seq_len = _get_seq_len(tgt, self.layers[0].self_attn.batch_first)
        tgt_is_causal = _detect_is_causal_mask(tgt_mask, tgt_is_causal, seq_len)
        output = tgt
        for mod in self.layers:
            output = mod(output, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                         tgt_key_padding_mask=tgt_key_padding_mask,
                         memory_key_padding_mask=memory_key_padding_mask,
                         tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)
        if self.norm is not None:
            output = self.norm(output)
        return output


class Transformer(Module):
    """PyTorch's `nn.Transformer`: an encoder (`encoder`: `num_encoder_layers` layers and
    a final LayerNorm, or `custom_encoder`) and a decoder (`decoder`, likewise), every
    parameter with more than one dimension re-initialised with `xavier_uniform_`.
    Usable as a base class (torch's word-language-model example subclasses it)."""

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: str | Callable = F.relu,
                 custom_encoder=None, custom_decoder=None, layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device=None, dtype=None, generator: np.random.Generator | None = None) -> None:
        super().__init__()
        args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                batch_first, norm_first, bias)
        kw = dict(device=device, dtype=dtype, generator=generator)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            self.encoder = TransformerEncoder(
                TransformerEncoderLayer(*args, **kw), num_encoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            self.decoder = TransformerDecoder(
                TransformerDecoderLayer(*args, **kw), num_decoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype))
        self._reset_parameters(generator)
        self.d_model = d_model
        self.nhead = nhead
        self.batch_first = batch_first

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, src_is_causal: bool | None = None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False) -> Tensor:
        """`decoder(tgt, encoder(src))` with the masks; RuntimeError (torch's) when the
        batch sizes of src and tgt differ or their features are not d_model."""
        s, t = _raw(src).shape, _raw(tgt).shape
        if len(s) == 3 and s[0 if self.batch_first else 1] != t[0 if self.batch_first else 1]:
            raise RuntimeError("the batch number of src and tgt must be equal")
        if s[-1] != self.d_model or t[-1] != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None) -> Tensor:
        """The causal mask (sz, sz): 0 on and below the diagonal, -inf above."""
        return _generate_square_subsequent_mask(sz, device=device, dtype=dtype)

    def _reset_parameters(self, generator: np.random.Generator | None = None) -> None:
        """xavier_uniform_ on every parameter with more than one dimension (torch's)."""
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p, generator=generator)
