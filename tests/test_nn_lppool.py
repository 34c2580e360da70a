"""Power-average pools (lp_pool1d/2d/3d, nn.LPPool1d/2d/3d): values and gradients against
PyTorch (ceil_mode, default and explicit strides, integer and fractional p), both engines
bitwise, PyTorch's zero gradient at a window summing to 0, bad input. (Gradcheck to second
order: the tables of test_nn_functional.py.)"""
from __future__ import annotations

import numpy as np
import pytest

import parallel_autograd as pa
from conftest import assert_bitwise
from parallel_autograd import nn
from parallel_autograd.nn import functional as F

CASES = {
    "1d": (lambda f, x: f.lp_pool1d(x, 2, 3), (2, 3, 10)),
    "1d_stride_ceil": (lambda f, x: f.lp_pool1d(x, 3, 3, 2, True), (3, 11)),
    "2d": (lambda f, x: f.lp_pool2d(x, 2, 2), (2, 3, 6, 7)),
    "2d_p1_ceil": (lambda f, x: f.lp_pool2d(x, 1, (3, 2), (2, 1), True), (2, 3, 7, 6)),
    "2d_fractional_p": (lambda f, x: f.lp_pool2d(x, 2.5, 3, 2), (3, 7, 8)),
    "3d": (lambda f, x: f.lp_pool3d(x, 2, 2), (2, 2, 4, 5, 6)),
    "3d_ceil": (lambda f, x: f.lp_pool3d(x, 4, (2, 3, 2), (1, 2, 2), True), (2, 5, 7, 5)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_torch(name):
    torch = pytest.importorskip("torch")
    op, shape = CASES[name]
    rng = np.random.default_rng(len(name))
    x = rng.uniform(0.2, 2.0, shape)       # positive: odd and fractional p are real
    xp, xt = pa.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    yp, yt = op(F, xp), op(torch.nn.functional, xt)
    np.testing.assert_allclose(yp.numpy(), yt.detach().numpy(), rtol=1e-13, atol=1e-15)
    g = rng.standard_normal(tuple(yt.shape))
    pa.backward(yp, g)
    yt.backward(torch.tensor(g))
    np.testing.assert_allclose(xp.grad, xt.grad.numpy(), rtol=1e-12, atol=1e-14)


def test_layers_match_torch_and_engines_agree():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(3).uniform(0.1, 1.0, (2, 2, 4, 6, 6))
    for ours, theirs, data in [
            (nn.LPPool1d(2, 3), torch.nn.LPPool1d(2, 3), x[:, :, 0, 0]),
            (nn.LPPool2d(3, (2, 3), 2, True), torch.nn.LPPool2d(3, (2, 3), 2, True), x[:, :, 0]),
            (nn.LPPool3d(2, 2), torch.nn.LPPool3d(2, 2), x)]:
        assert repr(ours) == repr(theirs)
        np.testing.assert_allclose(ours(pa.tensor(data)).numpy(),
                                   theirs(torch.tensor(data)).numpy(), rtol=1e-13)


def test_engines_bitwise():
    x = pa.tensor(np.random.default_rng(5).uniform(0.1, 1.0, (2, 3, 8, 8)), requires_grad=True)
    model = nn.Sequential(nn.LPPool2d(2, 2), nn.LPPool2d(3, 2, 1, True))
    pa.backward(model(x).sum())
    want = x.grad
    x.grad = None
    eng = pa.Engine(2, min_nodes=1, min_work=0, min_width=0, inline_below=0)
    assert eng.backward(model(x).sum(), stats=True).mode == "parallel"
    assert_bitwise([want], [x.grad])
    eng.close()


def test_zero_window_has_zero_gradient_as_torch():
    torch = pytest.importorskip("torch")
    x = np.ones((1, 1, 4))
    x[0, 0, :2] = 0.0                        # the first window sums to 0
    xp, xt = pa.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    for p in (1, 2, 3):                      # e.g. after a ReLU: whole windows of zeros
        xp.grad, xt.grad = None, None
        pa.backward(F.lp_pool1d(xp, p, 2).sum())
        torch.nn.functional.lp_pool1d(xt, p, 2).sum().backward()
        np.testing.assert_allclose(xp.grad, xt.grad.numpy(), rtol=1e-14)
        assert np.all(xp.grad.numpy()[0, 0, :2] == 0) and np.isfinite(xp.grad.numpy()).all()


def test_bad_input():
    x = pa.tensor(np.ones((2, 3, 4, 4)))
    with pytest.raises(ValueError, match="lp_pool2d: norm_type must be a positive"):
        F.lp_pool2d(x, 0, 2)
    with pytest.raises(ValueError, match="norm_type must be a positive"):
        F.lp_pool2d(x, float("inf"), 2)
    with pytest.raises(TypeError, match="norm_type must be a number"):
        F.lp_pool2d(x, "2", 2)
    with pytest.raises(ValueError, match="lp_pool1d: expected a 2-D or 3-D input"):
        F.lp_pool1d(x, 2, 2)
    with pytest.raises(ValueError, match="kernel_size"):
        F.lp_pool3d(pa.tensor(np.ones((1, 1, 4, 4, 4))), 2, (2, 2))
    with pytest.raises(ValueError, match="stride"):
        F.lp_pool2d(x, 2, 2, 0)
    assert x.grad is None
