"""nn.Transformer and its parts against torch (issue 27): the same state-dict keys, and with
torch's weights copied in, the same outputs and gradients (float64) for encoder-only,
decoder, the full model, with masks (float, boolean, causal, key padding), norm_first,
batch_first, gelu / callable activations, unbatched inputs; torch's errors; subclassing."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import parallel_autograd as pa

torch = pytest.importorskip("torch")
warnings.filterwarnings("ignore", message="enable_nested_tensor is True")

D, H, FF = 8, 2, 16


def copy_weights(pm, tm) -> None:
    keys = set(pm.state_dict())
    assert keys == set(tm.state_dict())
    pm.load_state_dict({k: v.detach().numpy().copy() for k, v in tm.state_dict().items()})


def pair(make_pa, make_torch):
    torch.manual_seed(0)
    tm = make_torch().double()
    pm = make_pa()
    copy_weights(pm, tm)
    return pm, tm


def data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def compare(pm, tm, inputs: list, kwargs_pa: dict, kwargs_torch: dict, tol=1e-10):
    """Outputs, input gradients and parameter gradients equal (float64)."""
    px = [pa.tensor(a, requires_grad=True) for a in inputs]
    tx = [torch.tensor(a, requires_grad=True) for a in inputs]
    py, ty = pm(*px, **kwargs_pa), tm(*tx, **kwargs_torch)
    assert py.shape == tuple(ty.shape)
    np.testing.assert_allclose(py.numpy(), ty.detach().numpy(), rtol=tol, atol=tol)
    w = data(*py.shape, seed=9)
    (py * pa.tensor(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    for a, b in zip(px, tx):
        np.testing.assert_allclose(a.grad, b.grad.numpy(), rtol=tol, atol=tol)
    tgrads = dict(tm.named_parameters())
    for name, p in pm.named_parameters():
        g = tgrads[name].grad
        if g is None:
            assert p.grad is None or not np.any(p.grad.numpy()), name
        else:
            np.testing.assert_allclose(p.grad, g.numpy(), rtol=tol, atol=tol, err_msg=name)


LAYER_CFGS = {
    "post_norm": {},
    "norm_first": {"norm_first": True},
    "batch_first": {"batch_first": True},
    "gelu": {"activation": "gelu"},
    "no_bias": {"bias": False},
    "eps": {"layer_norm_eps": 1e-3},
}


def masks(lib, cfg: str, s: int, n: int, dtype):
    """(attn mask, key padding mask) of a kind, in `lib`'s types."""
    mk = (lambda a: pa.tensor(a)) if lib is pa else (lambda a: torch.tensor(a))
    pad = np.zeros((n, s), bool)
    pad[0, -2:] = True
    causal = np.triu(np.full((s, s), -np.inf), 1)
    return {
        "none": (None, None),
        "float": (mk(data(s, s, seed=3)), None),
        "bool": (mk(np.triu(np.ones((s, s), bool), 1)), None),
        "causal": (mk(causal), None),
        "padding": (None, mk(pad)),
        "both": (mk(causal), mk(pad)),
        "float_padding": (None, mk(np.where(pad, -np.inf, 0.0))),
    }[cfg]


@pytest.mark.parametrize("mask", ["none", "float", "bool", "causal", "padding", "both",
                                  "float_padding"])
@pytest.mark.parametrize("cfg", sorted(LAYER_CFGS))
def test_encoder_layer_and_stack_match_torch(cfg, mask):
    kw = dict(dim_feedforward=FF, dropout=0.0, **LAYER_CFGS[cfg])
    pm, tm = pair(lambda: pa.nn.TransformerEncoder(pa.nn.TransformerEncoderLayer(D, H, **kw), 2,
                                                   norm=pa.nn.LayerNorm(D)),
                  lambda: torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(D, H, **kw),
                                                      2, norm=torch.nn.LayerNorm(D)))
    s, n = 5, 3
    x = data(n, s, D) if kw.get("batch_first") else data(s, n, D)
    pmask, pkpm = masks(pa, mask, s, n, np.float64)
    tmask, tkpm = masks(torch, mask, s, n, np.float64)
    compare(pm, tm, [x], dict(mask=pmask, src_key_padding_mask=pkpm),
            dict(mask=tmask, src_key_padding_mask=tkpm))
    layer_p, layer_t = pm.layers[0], tm.layers[0]
    compare(layer_p, layer_t, [x], dict(src_mask=pmask, src_key_padding_mask=pkpm),
            dict(src_mask=tmask, src_key_padding_mask=tkpm))


@pytest.mark.parametrize("cfg", sorted(LAYER_CFGS))
@pytest.mark.parametrize("mask", ["none", "causal", "both", "bool"])
def test_decoder_matches_torch(cfg, mask):
    kw = dict(dim_feedforward=FF, dropout=0.0, **LAYER_CFGS[cfg])
    pm, tm = pair(lambda: pa.nn.TransformerDecoder(pa.nn.TransformerDecoderLayer(D, H, **kw), 2),
                  lambda: torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(D, H, **kw),
                                                      2))
    t, s, n = 4, 6, 2
    bf = kw.get("batch_first")
    tgt, mem = (data(n, t, D), data(n, s, D, seed=1)) if bf else (data(t, n, D),
                                                                   data(s, n, D, seed=1))
    ptm, ptk = masks(pa, mask, t, n, np.float64)
    ttm, ttk = masks(torch, mask, t, n, np.float64)
    mem_pad = np.zeros((n, s), bool)
    mem_pad[1, :2] = True
    compare(pm, tm, [tgt, mem],
            dict(tgt_mask=ptm, tgt_key_padding_mask=ptk,
                 memory_key_padding_mask=pa.tensor(mem_pad), memory_mask=pa.tensor(data(t, s))),
            dict(tgt_mask=ttm, tgt_key_padding_mask=ttk,
                 memory_key_padding_mask=torch.tensor(mem_pad),
                 memory_mask=torch.tensor(data(t, s))))


@pytest.mark.parametrize("cfg", ["post_norm", "norm_first", "batch_first", "gelu"])
def test_full_transformer_matches_torch(cfg):
    kw = dict(d_model=D, nhead=H, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=FF,
              dropout=0.0, **LAYER_CFGS[cfg])
    pm, tm = pair(lambda: pa.nn.Transformer(**kw), lambda: torch.nn.Transformer(**kw))
    s, t, n = 5, 4, 3
    bf = kw.get("batch_first")
    src, tgt = (data(n, s, D), data(n, t, D, seed=2)) if bf else (data(s, n, D),
                                                                  data(t, n, D, seed=2))
    pmask = pa.nn.Transformer.generate_square_subsequent_mask(t, dtype=pa.float64)
    tmask = torch.nn.Transformer.generate_square_subsequent_mask(t, dtype=torch.float64)
    pad = np.zeros((n, s), bool)
    pad[2, -1] = True
    compare(pm, tm, [src, tgt],
            dict(tgt_mask=pmask, src_key_padding_mask=pa.tensor(pad),
                 memory_key_padding_mask=pa.tensor(pad)),
            dict(tgt_mask=tmask, src_key_padding_mask=torch.tensor(pad),
                 memory_key_padding_mask=torch.tensor(pad)))
    compare(pm, tm, [src, tgt], dict(tgt_mask=pmask, tgt_is_causal=True),
            dict(tgt_mask=tmask, tgt_is_causal=True))


def test_unbatched_and_callable_activation():
    kw = dict(dim_feedforward=FF, dropout=0.0)
    pm, tm = pair(lambda: pa.nn.TransformerEncoderLayer(D, H, activation=pa.nn.GELU(), **kw),
                  lambda: torch.nn.TransformerEncoderLayer(D, H, activation=torch.nn.GELU(), **kw))
    compare(pm, tm, [data(5, D)], {}, {})
    pm, tm = pair(lambda: pa.nn.TransformerDecoderLayer(D, H, activation=pa.tanh, **kw),
                  lambda: torch.nn.TransformerDecoderLayer(D, H, activation=torch.tanh, **kw))
    compare(pm, tm, [data(4, D), data(6, D, seed=1)], {}, {})


def test_eval_mode_with_grad_matches_and_dropout_trains():
    kw = dict(d_model=D, nhead=H, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=FF)
    pm, tm = pair(lambda: pa.nn.Transformer(**kw), lambda: torch.nn.Transformer(**kw))
    pm.eval()
    tm.eval()
    compare(pm, tm, [data(5, 2, D), data(3, 2, D, seed=1)], {}, {})
    pm.train()
    x = pa.tensor(data(5, 2, D))
    a, b = pm(x, x), pm(x, x)
    assert not np.allclose(a.numpy(), b.numpy())          # dropout 0.1 is active in training


def test_generate_square_subsequent_mask_as_torch():
    for dtype in (None, "float64", "bool"):
        p = pa.nn.Transformer.generate_square_subsequent_mask(
            4, dtype=None if dtype is None else getattr(pa, dtype))
        t = torch.nn.Transformer.generate_square_subsequent_mask(
            4, dtype=None if dtype is None else getattr(torch, dtype))
        np.testing.assert_array_equal(p.numpy(), t.numpy())
    assert p.dtype == np.bool_
    assert pa.nn.Transformer.generate_square_subsequent_mask(3).dtype == \
        np.dtype(pa.get_default_dtype())


def test_errors_as_torch():
    for m in (torch, pa):
        with pytest.raises(RuntimeError, match="activation should be relu/gelu"):
            m.nn.TransformerEncoderLayer(D, H, activation="swish")
        model = m.nn.Transformer(d_model=D, nhead=H, num_encoder_layers=1, num_decoder_layers=1,
                                 dim_feedforward=FF)
        with pytest.raises(RuntimeError, match="batch number"):
            model(m.zeros(3, 2, D, dtype=m.float64 if m is pa else torch.float32),
                  m.zeros(3, 4, D, dtype=m.float64 if m is pa else torch.float32))
        with pytest.raises(RuntimeError, match="feature number"):
            model(m.zeros(3, 2, D), m.zeros(3, 2, D + 1))
        layer = m.nn.TransformerEncoderLayer(D, H, dim_feedforward=FF)
        with pytest.raises(AssertionError, match="only bool and floating types"):
            layer(m.zeros(3, 2, D), src_mask=m.zeros(3, 3, dtype=m.int64))


def test_transformer_as_a_base_class():
    """PyTorch's word_language_model TransformerModel, with only the module aliased."""
    nn = pa.nn
    import math

    class TransformerModel(nn.Transformer):
        def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.5):
            super().__init__(d_model=ninp, nhead=nhead, dim_feedforward=nhid,
                             num_encoder_layers=nlayers)
            self.model_type = "Transformer"
            self.src_mask = None
            self.input_emb = nn.Embedding(ntoken, ninp)
            self.ninp = ninp
            self.decoder = nn.Linear(ninp, ntoken)
            self.init_weights()

        def _generate_square_subsequent_mask(self, sz):
            return pa.log(pa.tril(pa.ones(sz, sz)))

        def init_weights(self):
            initrange = 0.1
            nn.init.uniform_(self.input_emb.weight, -initrange, initrange)
            nn.init.zeros_(self.decoder.bias)
            nn.init.uniform_(self.decoder.weight, -initrange, initrange)

        def forward(self, src, has_mask=True):
            if has_mask:
                self.src_mask = self._generate_square_subsequent_mask(len(src))
            src = self.input_emb(src) * math.sqrt(self.ninp)
            output = self.encoder(src, mask=self.src_mask)
            output = self.decoder(output)
            return pa.log_softmax(output, dim=-1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # log(0) = -inf in the mask
        model = TransformerModel(20, 8, 2, 16, 2)
        out = model(pa.tensor(np.random.default_rng(0).integers(0, 20, (6, 3))))
    assert out.shape == (6, 3, 20) and np.all(np.isfinite(out.numpy()))
    assert isinstance(model.decoder, nn.Linear) and "decoder.weight" in model.state_dict()
    out.sum().backward()
    assert model.input_emb.weight.grad is not None


@pytest.mark.parametrize("kind", ["kpm", "attn", "both"])
def test_mha_boolean_masks_given_as_tensors(kind):
    """Regression: boolean masks given as pa Tensors (not ndarrays) made MultiheadAttention
    call numpy ufuncs on Tensors (TypeError); now as with arrays, and as torch."""
    pm, tm = pair(lambda: pa.nn.MultiheadAttention(D, H), lambda: torch.nn.MultiheadAttention(D, H))
    pad = np.zeros((2, 5), bool)
    pad[0, -2:] = True
    attn = np.triu(np.ones((5, 5), bool), 1)
    pk = dict(key_padding_mask=pa.tensor(pad) if kind != "attn" else None,
              attn_mask=pa.tensor(attn) if kind != "kpm" else None)
    tk = dict(key_padding_mask=torch.tensor(pad) if kind != "attn" else None,
              attn_mask=torch.tensor(attn) if kind != "kpm" else None)
    x = data(5, 2, D)
    py, pw = pm(pa.tensor(x), pa.tensor(x), pa.tensor(x), **pk)
    ty, tw = tm(torch.tensor(x), torch.tensor(x), torch.tensor(x), **tk)
    np.testing.assert_allclose(py.numpy(), ty.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(pw.numpy(), tw.detach().numpy(), rtol=1e-10, atol=1e-12)
