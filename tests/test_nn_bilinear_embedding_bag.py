"""nn.Bilinear and nn.EmbeddingBag (with F.embedding_bag) against PyTorch: values and
gradients from the same weights, initialisation, reprs and PyTorch's refusals. The op's
gradcheck, gradgradcheck and parity walk are the registry's (samples_nn_layers.py)."""
import numpy as np
import pytest

import parallel_autograd as pa
import parallel_autograd.nn as nn
import parallel_autograd.nn.functional as F


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def test_bilinear_module_matches_torch(torch):
    layer = nn.Bilinear(4, 3, 5, dtype=pa.float64)
    ref = torch.nn.Bilinear(4, 3, 5, dtype=torch.float64)
    assert repr(layer) == repr(ref)
    bound = 1 / np.sqrt(4)
    assert np.abs(layer.weight.numpy()).max() <= bound and np.abs(layer.bias.numpy()).max() <= bound
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(layer.weight.numpy()))
        ref.bias.copy_(torch.tensor(layer.bias.numpy()))
    r = np.random.default_rng(0)
    x1, x2 = r.standard_normal((2, 6, 4)), r.standard_normal((2, 6, 3))
    y = layer(pa.tensor(x1), pa.tensor(x2))
    t = ref(torch.tensor(x1), torch.tensor(x2))
    np.testing.assert_allclose(y.numpy(), t.detach().numpy(), rtol=1e-12)
    g = r.standard_normal(y.shape)
    y.backward(pa.tensor(g))
    t.backward(torch.tensor(g))
    np.testing.assert_allclose(layer.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(layer.bias.grad.numpy(), ref.bias.grad.numpy(), rtol=1e-12)
    assert nn.Bilinear(2, 2, 3, bias=False).bias is None
    with pytest.raises(ValueError, match="in1_features"):
        nn.Bilinear(0, 2, 3)


BAGS = [dict(mode="mean"), dict(mode="sum"), dict(mode="max"),
        dict(mode="sum", padding_idx=1), dict(mode="mean", padding_idx=-1),
        dict(mode="max", padding_idx=0), dict(mode="sum", include_last_offset=True),
        dict(mode="mean", max_norm=1.0)]


@pytest.mark.parametrize("kw", BAGS, ids=[str(k) for k in BAGS])
@pytest.mark.parametrize("two_d", [False, True])
def test_embedding_bag_module_matches_torch(torch, kw, two_d):
    if two_d and kw.get("include_last_offset"):
        pytest.skip("offsets only with a 1-D input")
    r = np.random.default_rng(1)
    bag = nn.EmbeddingBag(7, 3, dtype=pa.float64, **kw)
    ref = torch.nn.EmbeddingBag(7, 3, dtype=torch.float64, **kw)
    assert repr(bag) == repr(ref)
    if "padding_idx" in kw:
        assert not bag.weight.numpy()[bag.padding_idx].any()
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(bag.weight.numpy()))
    if two_d:
        idx, off = r.integers(0, 7, (4, 5)), None
    else:
        idx = r.integers(0, 7, 11)
        off = np.array([0, 3, 3, 8, 11] if kw.get("include_last_offset") else [0, 3, 3, 8])
    y = bag(pa.tensor(idx), None if off is None else pa.tensor(off))
    t = ref(torch.tensor(idx), None if off is None else torch.tensor(off))
    np.testing.assert_allclose(y.numpy(), t.detach().numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(bag.weight.numpy(), ref.weight.detach().numpy(), rtol=1e-12)
    g = r.standard_normal(y.shape)
    y.backward(pa.tensor(g))
    t.backward(torch.tensor(g))
    np.testing.assert_allclose(bag.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-12,
                               atol=1e-15)


def test_per_sample_weights_gradient_matches_torch(torch):
    r = np.random.default_rng(2)
    w, idx, psw = r.standard_normal((5, 4)), r.integers(0, 5, 9), r.standard_normal(9)
    off = np.array([0, 4, 4, 6])
    ours = [pa.tensor(w, requires_grad=True), pa.tensor(psw, requires_grad=True)]
    theirs = [torch.tensor(w, requires_grad=True), torch.tensor(psw, requires_grad=True)]
    y = F.embedding_bag(pa.tensor(idx), ours[0], pa.tensor(off), mode="sum",
                        per_sample_weights=ours[1])
    t = torch.nn.functional.embedding_bag(torch.tensor(idx), theirs[0], torch.tensor(off),
                                          mode="sum", per_sample_weights=theirs[1])
    g = r.standard_normal(y.shape)
    y.backward(pa.tensor(g))
    t.backward(torch.tensor(g))
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12)


def test_scale_grad_by_freq_divides_by_each_rows_count():
    """As `embedding`'s: each row's gradient divided by its index's count in the input.
    (PyTorch 2.13's CPU embedding_bag gives [2, 2, 3] row 3 the scale 1/2, its
    predecessor's count, where its embedding gives 1: not followed.)"""
    w = pa.tensor(np.eye(4), requires_grad=True)
    F.embedding_bag(pa.tensor(np.array([2, 2, 3])), w, pa.tensor(np.array([0, 1])),
                    mode="sum", scale_grad_by_freq=True).sum().backward()
    np.testing.assert_array_equal(np.diag(w.grad.numpy()), [0, 0, 1, 1])


def test_from_pretrained_and_an_empty_bag():
    table = np.arange(12.0).reshape(4, 3)
    bag = nn.EmbeddingBag.from_pretrained(pa.tensor(table), mode="sum")
    assert not bag.weight.requires_grad
    out = bag(pa.tensor(np.array([1, 2, 3])), pa.tensor(np.array([0, 0, 2])))
    np.testing.assert_array_equal(out.numpy(), [[0, 0, 0], table[1] + table[2], table[3]])


BAD = [(dict(input=[1, 2, 3]), ValueError, "offsets has to be a 1D Tensor"),
       (dict(input=[[1, 2], [3, 0]], offsets=[0]), ValueError, "input is 2D"),
       (dict(input=[[[1]]]), ValueError, "1D or 2D"),
       (dict(offsets=[0, 1], mode="min"), ValueError, "mode has to be"),
       (dict(offsets=[0, 1], per_sample_weights=[1.0, 1, 1]), NotImplementedError,
        "only supported for mode='sum'"),
       (dict(offsets=[0, 1], mode="sum", per_sample_weights=[1.0, 1]), ValueError,
        "same shape"),
       (dict(offsets=[1, 2]), RuntimeError, "offsets"),
       (dict(input=[1, 2, 9], offsets=[0, 2]), RuntimeError, None),
       (dict(input=[1, -2, 3], offsets=[0, 2]), RuntimeError, None),
       (dict(offsets=[0, 2, 1]), RuntimeError, None)]


@pytest.mark.parametrize("call,error,match", BAD)
def test_bad_input_raises_torchs_exception_type(torch, call, error, match):
    w = np.ones((5, 3), np.float32)  # PyTorch checks offsets on its float32 path only

    def run(lib, f):
        kw = dict(call)
        idx = kw.pop("input", [1, 2, 3])
        for k in ("offsets", "per_sample_weights"):
            if k in kw:
                kw[k] = lib.tensor(kw[k])
        return f(lib.tensor(idx), lib.tensor(w), **kw)

    with pytest.raises(error, match=match):
        run(torch, torch.nn.functional.embedding_bag)
    with pytest.raises(error, match=match):
        run(pa, F.embedding_bag)
