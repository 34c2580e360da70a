"""3-D pools (max_pool3d, avg_pool3d, adaptive_max_pool3d, adaptive_avg_pool3d and their
layers), built by separability on the 2-D and 1-D pools: values, gradients and indices
against PyTorch (ties included: the first maximum in (d, h, w) order), both engines bitwise,
bad input. (Gradcheck to second order: the tables of test_nn_functional.py.)"""
from __future__ import annotations

import numpy as np
import pytest

import parallel_autograd as pa
from conftest import assert_bitwise
from parallel_autograd import nn
from parallel_autograd.nn import functional as F

CASES = {
    "max": lambda f, x: f.max_pool3d(x, 2),
    "max_overlap": lambda f, x: f.max_pool3d(x, 3, 2, 1),
    "max_ceil_dilation": lambda f, x: f.max_pool3d(x, (2, 3, 2), (2, 1, 2), (1, 1, 0),
                                                   (1, 2, 1), True),
    "avg": lambda f, x: f.avg_pool3d(x, 2),
    "avg_pad_no_count": lambda f, x: f.avg_pool3d(x, 3, 2, 1, False, False),
    "avg_ceil": lambda f, x: f.avg_pool3d(x, 3, 2, 1, True, True),
    "avg_override": lambda f, x: f.avg_pool3d(x, 3, 2, 1, True, True, 5),
    "adaptive_avg": lambda f, x: f.adaptive_avg_pool3d(x, (2, 3, 2)),
    "adaptive_max": lambda f, x: f.adaptive_max_pool3d(x, (3, 2, 4)),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("shape", [(2, 3, 5, 6, 7), (3, 5, 6, 7)])
@pytest.mark.parametrize("ties", [False, True])
def test_matches_torch(name, shape, ties):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(len(name) + len(shape))
    x = rng.standard_normal(shape)
    if ties:
        x = np.round(x)  # many equal maxima: the gradient must go where PyTorch's goes
    xp, xt = pa.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    yp, yt = CASES[name](F, xp), CASES[name](torch.nn.functional, xt)
    np.testing.assert_allclose(yp.numpy(), yt.detach().numpy(), rtol=1e-14, atol=1e-15)
    g = rng.standard_normal(tuple(yt.shape))
    pa.backward(yp, g)
    yt.backward(torch.tensor(g))
    np.testing.assert_allclose(xp.grad, xt.grad.numpy(), rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("ties", [False, True])
def test_indices_match_torch(ties):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(4).standard_normal((2, 3, 5, 6, 7))
    x = np.round(x) if ties else x
    tf = torch.nn.functional
    for ours, theirs in [(F.max_pool3d(pa.tensor(x), 3, 2, 1, return_indices=True),
                          tf.max_pool3d(torch.tensor(x), 3, 2, 1, return_indices=True)),
                         (F.adaptive_max_pool3d(pa.tensor(x), (3, 2, 4), True),
                          tf.adaptive_max_pool3d(torch.tensor(x), (3, 2, 4), True))]:
        assert np.array_equal(ours[0].numpy(), theirs[0].numpy())
        assert np.array_equal(ours[1].numpy(), theirs[1].numpy())


def test_layers_engines_and_unpool_roundtrip():
    rng = np.random.default_rng(6)
    x = pa.tensor(rng.standard_normal((2, 2, 4, 6, 6)), requires_grad=True)
    model = nn.Sequential(nn.MaxPool3d(2, ceil_mode=True), nn.AvgPool3d(1),
                          nn.AdaptiveAvgPool3d((2, None, 2)))
    pa.backward(model(x).pow(2).sum())
    want = x.grad
    x.grad = None
    eng = pa.Engine(2, min_nodes=1, min_work=0, min_width=0, inline_below=0)
    assert eng.backward(model(x).pow(2).sum(), stats=True).mode == "parallel"
    assert_bitwise([want], [x.grad])
    eng.close()
    v, i = nn.AdaptiveMaxPool3d(2, return_indices=True)(x)
    assert v.shape == (2, 2, 2, 2, 2) and i.shape == v.shape
    flat = x.numpy().reshape(2, 2, -1)
    assert np.array_equal(np.take_along_axis(flat, i.numpy().reshape(2, 2, -1), 2),
                          v.numpy().reshape(2, 2, -1))


def test_bad_input():
    x = pa.tensor(np.zeros((2, 3, 4)))
    with pytest.raises(ValueError, match="4-D .* or 5-D"):
        F.max_pool3d(x, 2)
    y = pa.tensor(np.zeros((1, 1, 4, 4, 4)))
    with pytest.raises(ValueError, match="kernel_size"):
        F.avg_pool3d(y, (2, 2))
    with pytest.raises(ValueError, match="divisor_override"):
        F.avg_pool3d(y, 2, divisor_override=0)
    with pytest.raises(ValueError, match="output_size"):
        F.adaptive_avg_pool3d(y, (2, 2))
    with pytest.raises(ValueError, match="half"):
        F.max_pool3d(y, 2, padding=2)
