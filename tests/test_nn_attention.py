"""Grouped-query attention (`scaled_dot_product_attention(..., enable_gqa=True)`) and
`pa.nn.MultiheadAttention` against PyTorch (values and gradients, float64), gradcheck and
gradgradcheck, the parallel engine bitwise the sequential one, bad input."""
from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import parallel_autograd as pa
from parallel_autograd import nn
from parallel_autograd.nn import functional as F

from conftest import assert_bitwise

# (query, key, value shapes, keyword arguments): (..., H, L, E)
GQA = {
    "groups_of_2": ((2, 4, 3, 5), (2, 2, 6, 5), (2, 2, 6, 7), {}),
    "key_and_value_heads_differ": ((2, 4, 3, 5), (2, 2, 6, 5), (2, 1, 6, 7), {}),
    "multi_query_causal": ((6, 4, 5), (1, 4, 5), (1, 4, 3), dict(is_causal=True)),
    "broadcast_batch_scale": ((2, 6, 3, 4), (1, 3, 5, 4), (2, 2, 5, 4), dict(scale=0.3)),
    "bool_mask": ((2, 4, 3, 5), (2, 2, 6, 5), (2, 2, 6, 5), dict(attn_mask="bool")),
    "float_mask": ((2, 4, 3, 5), (2, 2, 6, 5), (2, 2, 6, 5), dict(attn_mask="float")),
    "same_heads": ((2, 3, 4, 5), (2, 3, 4, 5), (2, 3, 4, 5), {}),
}


def _gqa_inputs(case, rng, torch=None):
    qs, ks, vs, kw = GQA[case]
    arrays = [rng.standard_normal(s) for s in (qs, ks, vs)]
    kw = dict(kw)
    if kw.get("attn_mask") == "bool":
        m = rng.random((qs[-3], qs[-2], ks[-2])) < 0.7
        m[..., 0] = True
        kw["attn_mask"] = m
    elif kw.get("attn_mask") == "float":
        arrays.append(rng.standard_normal((qs[-3], qs[-2], ks[-2])))
        kw.pop("attn_mask")
    return arrays, kw


@pytest.mark.parametrize("case", sorted(GQA))
def test_gqa_matches_torch(case):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(len(case))
    arrays, kw = _gqa_inputs(case, rng)
    ps = [pa.tensor(a, requires_grad=True) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    kwt = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    yp = F.scaled_dot_product_attention(*ps[:3], *ps[3:], enable_gqa=True, **kw)
    yt = torch.nn.functional.scaled_dot_product_attention(*ts[:3], *ts[3:], enable_gqa=True,
                                                          **kwt)
    np.testing.assert_allclose(yp.numpy(), yt.detach().numpy(), rtol=0, atol=1e-10)
    w = rng.standard_normal(yp.shape)
    pa.backward(yp, w)
    yt.backward(torch.tensor(w))
    for a, b in zip(ps, ts):
        np.testing.assert_allclose(a.grad, b.grad.numpy(), rtol=0, atol=1e-10)


@pytest.mark.parametrize("case", ["key_and_value_heads_differ", "multi_query_causal",
                                  "float_mask", "broadcast_batch_scale"])
def test_gqa_gradcheck_and_gradgradcheck(case):
    rng = np.random.default_rng(1)
    arrays, kw = _gqa_inputs(case, rng)
    arrays = [a[..., :3, :3] for a in arrays]          # short sequences, 3 features
    ts = [pa.tensor(a, requires_grad=True) for a in arrays]

    def f(*xs):
        return F.scaled_dot_product_attention(*xs, enable_gqa=True, **kw)

    assert pa.gradcheck(f, ts)
    assert pa.gradgradcheck(f, ts)


def test_gqa_with_dropout_uses_one_mask_per_query_head():
    q, k, v = (pa.randn(*s, seed=i, requires_grad=True)
               for i, s in enumerate([(2, 4, 3, 5), (2, 2, 6, 5), (2, 2, 6, 5)]))
    y = F.scaled_dot_product_attention(q, k, v, dropout_p=0.3, enable_gqa=True, seed=3)
    kr, vr = (pa.tensor(np.repeat(t.numpy(), 2, axis=1), requires_grad=True) for t in (k, v))
    ref = F.scaled_dot_product_attention(q, kr, vr, dropout_p=0.3, seed=3)
    np.testing.assert_allclose(y.numpy(), ref.numpy(), rtol=0, atol=1e-12)
    w = np.random.default_rng(0).standard_normal(y.shape)
    gq, gk, gv = pa.grad(y, [q, k, v], w)
    rq, rk, rv = pa.grad(ref, [q, kr, vr], w)
    np.testing.assert_allclose(gq, rq, rtol=0, atol=1e-12)
    for g, r in ((gk, rk), (gv, rv)):      # summed over each group of query heads
        np.testing.assert_allclose(g, r.reshape(2, 2, 2, 6, 5).sum(axis=2), rtol=0, atol=1e-12)


def test_gqa_bad_heads_raise():
    q, k = pa.randn(2, 4, 3, 5, seed=0), pa.randn(2, 3, 6, 5, seed=1)
    with pytest.raises(ValueError, match="must divide the number of heads in query"):
        F.scaled_dot_product_attention(q, k, k, enable_gqa=True)
    with pytest.raises(ValueError, match="enable_gqa needs a heads dimension"):
        F.scaled_dot_product_attention(pa.randn(3, 5, seed=0), pa.randn(6, 5, seed=0),
                                       pa.randn(6, 5, seed=0), enable_gqa=True)


def test_mask_that_does_not_broadcast_raises_naming_the_op():
    q = pa.tensor(np.ones((1, 2, 3, 4)), requires_grad=True)
    for mask in (np.ones((5, 3), bool), np.ones((2, 2, 3, 3, 3)), np.ones((3, 4))):
        with pytest.raises(ValueError, match="scaled_dot_product_attention: attn_mask of "
                                             r"shape .* does not broadcast to .*\(1, 2, 3, 3\)"):
            F.scaled_dot_product_attention(q, q, q, mask)
    assert q.grad is None
    assert F.scaled_dot_product_attention(q, q, q, np.ones(3, bool)).shape == (1, 2, 3, 4)


# ---- MultiheadAttention ----------------------------------------------------------------------
# (constructor arguments, forward arguments, self-attention, unbatched, masks)
MHA = {
    "weights": ({}, {}, False, False, ()),
    "no_weights": ({}, dict(need_weights=False), False, False, ()),
    "self_packed": ({}, {}, True, False, ()),
    "batch_first_bool_masks_per_head": (dict(batch_first=True), dict(average_attn_weights=False),
                                        False, False, (("kpm", bool), ("am2", bool))),
    "batch_first_float_3d_mask_sdpa": (dict(batch_first=True), dict(need_weights=False),
                                       False, False, (("kpm", bool), ("am3", float))),
    "kdim_vdim": (dict(kdim=5, vdim=6), {}, False, False, (("am3", bool),)),
    "kdim_vdim_no_bias_float_kpm": (dict(kdim=5, vdim=6, bias=False),
                                    dict(need_weights=False), False, False, (("kpm", float),)),
    "bias_kv_zero_attn": (dict(add_bias_kv=True, add_zero_attn=True), {}, False, False,
                          (("kpm", bool), ("am2", float))),
    "bias_kv_zero_attn_sdpa": (dict(add_bias_kv=True, add_zero_attn=True),
                               dict(need_weights=False), False, False,
                               (("kpm", bool), ("am2", bool))),
    "causal_hint": ({}, dict(need_weights=False, is_causal=True), True, False,
                    (("am2", "causal"),)),
    "unbatched": ({}, dict(average_attn_weights=False), False, True,
                  (("kpm", bool), ("am3", float))),
    "unbatched_self_batch_first": (dict(batch_first=True), dict(need_weights=False), True, True,
                                   ()),
}


def _mha_case(torch, case, rng, L=4, S=5, N=3):
    ctor, fkw, self_attn, unbatched, masks = MHA[case]
    ctor = dict(embed_dim=8, num_heads=2, **ctor)
    ours = nn.MultiheadAttention(**ctor)
    theirs = torch.nn.MultiheadAttention(**ctor, dtype=torch.float64)
    with torch.no_grad():                         # non-zero biases everywhere
        for p in theirs.parameters():
            p.copy_(torch.tensor(rng.standard_normal(tuple(p.shape)) * 0.5))
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    bf = ctor.get("batch_first", False)
    S = L if self_attn else S

    def shape(n, d):
        return (n, d) if unbatched else ((N, n, d) if bf else (n, N, d))

    dims = [8] if self_attn else [8, ctor.get("kdim", 8), ctor.get("vdim", 8)]
    lens = [L] if self_attn else [L, S, S]
    arrays = [rng.standard_normal(shape(n, d)) for n, d in zip(lens, dims)]
    fp, ft = dict(fkw), dict(fkw)
    for name, kind in masks:
        shp = {"kpm": (S,) if unbatched else (N, S), "am2": (L, S),
               "am3": (2 * (1 if unbatched else N), L, S)}[name]
        key = "key_padding_mask" if name == "kpm" else "attn_mask"
        if kind == "causal":
            a = np.triu(np.ones(shp, dtype=bool), 1)
        elif kind is bool:
            a = rng.random(shp) < 0.3
            a[..., 0] = False
        else:
            a = rng.standard_normal(shp)
        fp[key] = a if a.dtype == bool else pa.tensor(a, requires_grad=True)
        ft[key] = torch.tensor(a) if a.dtype == bool else torch.tensor(a, requires_grad=True)
    return ours, theirs, arrays, self_attn, fp, ft


@pytest.mark.filterwarnings("ignore:Support for mismatched")
@pytest.mark.parametrize("case", sorted(MHA))
def test_multihead_attention_matches_torch(case):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(len(case))
    ours, theirs, arrays, self_attn, fp, ft = _mha_case(torch, case, rng)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ps = [pa.tensor(a, requires_grad=True) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    op, wp = ours(*(ps * 3 if self_attn else ps), **fp)
    ot, wt = theirs(*(ts * 3 if self_attn else ts), **ft)
    np.testing.assert_allclose(op.numpy(), ot.detach().numpy(), rtol=0, atol=1e-10)
    assert (wp is None) == (wt is None)
    w = rng.standard_normal(op.shape)
    lp, lt = (op * w).sum(), (ot * torch.tensor(w)).sum()
    if wp is not None:
        np.testing.assert_allclose(wp.numpy(), wt.detach().numpy(), rtol=0, atol=1e-10)
        lp, lt = lp + (wp * wp).sum(), lt + (wt * wt).sum()
    lp.backward()
    lt.backward()
    masks = [k for k in ("attn_mask", "key_padding_mask") if isinstance(fp.get(k), pa.Tensor)]
    for a, b in zip(ps + [fp[k] for k in masks], ts + [ft[k] for k in masks]):
        np.testing.assert_allclose(a.grad, b.grad.numpy(), rtol=0, atol=1e-10)
    tp = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(p.grad, tp[name].grad.numpy(), rtol=0, atol=1e-10,
                                   err_msg=name)


@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_attention_gradcheck_and_gradgradcheck(need_weights):
    rng = np.random.default_rng(2)
    m = nn.MultiheadAttention(4, 2, kdim=3, add_bias_kv=True, batch_first=True,
                              generator=np.random.default_rng(0))
    with pa.no_grad():
        m.in_proj_bias.copy_(rng.standard_normal(12))
    q = pa.tensor(rng.standard_normal((1, 2, 4)), requires_grad=True)
    k = pa.tensor(rng.standard_normal((1, 3, 3)), requires_grad=True)
    v = pa.tensor(rng.standard_normal((1, 3, 4)), requires_grad=True)
    mask = np.array([[False, False, True]])

    def f(q, k, v, *params):
        out, w = m(q, k, v, key_padding_mask=mask, need_weights=need_weights)
        return out if w is None else pa.concat([out.reshape(-1), w.reshape(-1)])

    inputs = [q, k, v, m.k_proj_weight, m.in_proj_bias, m.bias_k, m.out_proj.weight]
    assert pa.gradcheck(f, inputs)
    assert pa.gradgradcheck(f, inputs)


def test_multihead_attention_dropout_training_and_eval():
    m = nn.MultiheadAttention(8, 2, dropout=0.5)
    x = pa.randn(4, 2, 8, seed=0)
    pa.manual_seed(0)
    a, wa = m(x, x, x)
    b, wb = m(x, x, x)
    assert a.shape == (4, 2, 8) and wa.shape == (2, 4, 4)
    assert not np.allclose(a.numpy(), b.numpy())              # fresh dropout masks
    assert np.any(wa.numpy() == 0)                         # the weights are returned dropped
    m.eval()
    c, _ = m(x, x, x)
    d, _ = m(x, x, x, need_weights=False)
    np.testing.assert_allclose(c.numpy(), d.numpy(), rtol=0, atol=1e-12)


def test_multihead_attention_bad_input():
    with pytest.raises(ValueError, match="divisible by num_heads"):
        nn.MultiheadAttention(6, 4)
    with pytest.raises(ValueError, match="num_heads must be a positive integer"):
        nn.MultiheadAttention(6, 0)
    m = nn.MultiheadAttention(8, 2)
    x = pa.randn(4, 2, 8, seed=0, requires_grad=True)
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        m(x, x, x, is_causal=True)
    with pytest.raises(ValueError, match="The shape of the 2D attn_mask is"):
        m(x, x, x, attn_mask=np.zeros((4, 5), bool))
    with pytest.raises(ValueError, match="The shape of the 3D attn_mask is"):
        m(x, x, x, attn_mask=np.zeros((2, 4, 4), bool))
    with pytest.raises(TypeError, match="only bool and floating types of masks"):
        m(x, x, x, key_padding_mask=np.zeros((2, 4), np.int64))
    with pytest.raises(ValueError, match="key_padding_mask of shape"):
        m(x, x, x, key_padding_mask=np.zeros((2, 5), bool))
    with pytest.raises(ValueError, match="query should be unbatched 2D or batched 3D"):
        m(pa.randn(8, seed=0), x, x)
    with pytest.raises(ValueError, match="expected query features 8"):
        m(pa.randn(4, 2, 6, seed=0), x, x)
    assert x.grad_fn is None and x.grad is None


def test_parallel_engine_bitwise_on_attention():
    m = nn.MultiheadAttention(8, 2, kdim=6, vdim=6, generator=np.random.default_rng(0))
    x = pa.randn(5, 3, 8, seed=1, requires_grad=True)
    mem = pa.randn(7, 3, 6, seed=2, requires_grad=True)
    q = pa.randn(3, 4, 5, 6, seed=3, requires_grad=True)
    kv = pa.randn(3, 2, 7, 6, seed=4, requires_grad=True)
    wrt = [x, mem, q, kv, *m.parameters()]

    def loss():
        out, w = m(x, mem, mem)
        g = F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
        return (out * out).sum() + (w * w).sum() + (g * g).sum()

    with threadpool_limits(1, user_api="blas"):
        want = pa.grad(loss(), wrt)
        opts = dict(min_nodes=0, min_work=0, min_width=0, inline_below=0, max_blas_share=1.0)
        with pa.Engine(2, **opts) as eng:
            for _ in range(3):
                got = eng.grad(loss(), wrt)
                assert eng.last_stats.mode == "parallel"
                assert_bitwise(want, got)
