"""F.pad's modes (constant, reflect, replicate, circular) and the convolution layers'
padding_mode: values and gradients against PyTorch, gradcheck to second order, both engines
bitwise, the adjoint pair, bad input. (The functional cases are also in the gradcheck and
torch-parity tables of test_nn_functional.py and test_torch_parity.py.)"""
from __future__ import annotations

import numpy as np
import pytest

import parallel_autograd as pa
from conftest import assert_bitwise
from parallel_autograd import nn
from parallel_autograd.nn import functional as F

MODES = ("reflect", "replicate", "circular")
SHAPES = [((2, 3, 7), (2, 1)), ((2, 3, 5, 6), (1, 2, 2, 0)), ((3, 5, 6), (2, 3, 1, 1)),
          ((1, 2, 4, 5, 6), (1, 1, 2, 1, 0, 3)), ((2, 4, 3), (0, 0))]


def _torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("mode", MODES + ("constant",))
@pytest.mark.parametrize("shape,widths", SHAPES)
def test_values_and_gradients_match_torch(mode, shape, widths):
    torch = _torch()
    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape)
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.nn.functional.pad(xt, widths, mode=mode)
    g = rng.standard_normal(tuple(yt.shape))
    yt.backward(torch.tensor(g))
    xp = pa.tensor(x, requires_grad=True)
    yp = F.pad(xp, widths, mode=mode)
    pa.backward(yp, g)
    assert np.array_equal(yp.numpy(), yt.detach().numpy())
    np.testing.assert_allclose(xp.grad, xt.grad.numpy(), rtol=1e-12, atol=1e-13)


NEGATIVE = [(-1, 2), (2, -3), (-2, -1), (3, -1), (-1, 4), (4, -1), (-4, 4), (3, -2),
            (-1, 1, 2, -1), (1, -2, -1, 2), (-2, 0, 0, -2)]


@pytest.mark.parametrize("mode", MODES + ("constant",))
@pytest.mark.parametrize("widths", NEGATIVE, ids=str)
def test_negative_padding_matches_torch(mode, widths):
    """Negative widths crop in every mode, as PyTorch's (issue 27: reflect, replicate and
    circular refused them): reflect and replicate index the uncropped input, circular wraps
    around the cropped part. Values, gradients and second order."""
    torch = _torch()
    rng = np.random.default_rng(7)
    shape = (2, 3, 5) if len(widths) == 2 else (2, 4, 5)
    x = rng.standard_normal(shape)
    pairs = [widths[i:i + 2] for i in range(0, len(widths), 2)]
    kept = [n + min(a, 0) + min(b, 0) for n, (a, b) in zip(shape[::-1], pairs)]
    if mode == "circular" and any(max(a, b) > k for (a, b), k in zip(pairs, kept)):
        # wrapping more than the cropped part: PyTorch reads memory it never wrote
        # (garbage, or a self-overlap RuntimeError); here a clear error
        with pytest.raises(ValueError, match="at most|leaves nothing"):
            F.pad(pa.tensor(x), widths, mode=mode)
        return
    try:
        torch.nn.functional.pad(torch.tensor(x), widths, mode=mode)
    except RuntimeError:
        with pytest.raises(ValueError):
            F.pad(pa.tensor(x), widths, mode=mode)
        return
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.nn.functional.pad(xt, widths, mode=mode)
    g = rng.standard_normal(tuple(yt.shape))
    yt.backward(torch.tensor(g))
    xp = pa.tensor(x, requires_grad=True)
    yp = F.pad(xp, widths, mode=mode)
    pa.backward(yp, g)
    assert np.array_equal(yp.numpy(), yt.detach().numpy())
    np.testing.assert_allclose(xp.grad, xt.grad.numpy(), rtol=1e-12, atol=1e-13)
    assert pa.gradgradcheck(lambda t: F.pad(t, widths, mode=mode) ** 2,
                            (pa.tensor(x, requires_grad=True),))


@pytest.mark.parametrize("mode", MODES)
def test_gradcheck_to_second_order_and_adjoint(mode):
    rng = np.random.default_rng(1)
    x = pa.tensor(rng.standard_normal((2, 2, 4, 5)), requires_grad=True)
    f = lambda t: F.pad(t, (2, 1, 3, 0), mode=mode)  # noqa: E731
    assert pa.gradcheck(f, (x,))
    assert pa.gradgradcheck(lambda t: f(t).pow(2), (x,))
    # the rule is the adjoint: <pad(x), y> == <x, pad^T(y)>
    y = rng.standard_normal(f(x).shape)
    (gx,) = pa.grad(f(x), [x], y)
    assert np.isclose(np.vdot(f(x).numpy(), y), np.vdot(x.numpy(), gx), rtol=1e-13)


@pytest.mark.parametrize("mode", MODES)
def test_engines_bitwise(mode):
    rng = np.random.default_rng(2)
    x = pa.tensor(rng.standard_normal((4, 3, 9, 9)), requires_grad=True)
    w = pa.tensor(rng.standard_normal((5, 3, 3, 3)), requires_grad=True)

    def loss():
        y = F.conv2d(F.pad(x, (1, 1, 1, 1), mode=mode), w)[:, :3]  # x used twice
        return (y * F.pad(x, (2, 0, 0, 2), mode=mode)[:, :, :9, 2:]).sum()
    pa.backward(loss())
    want = [x.grad, w.grad]
    x.grad = w.grad = None
    eng = pa.Engine(2, min_nodes=1, min_work=0, min_width=0, inline_below=0)
    st = eng.backward(loss(), stats=True)
    assert st.mode == "parallel"
    assert_bitwise(want, [x.grad, w.grad])
    eng.close()


@pytest.mark.parametrize("nd,shape", [(1, (2, 3, 9)), (2, (2, 3, 7, 8)), (3, (1, 2, 5, 6, 4))])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("padding", [1, "same", 2])
def test_conv_padding_mode_matches_torch(nd, shape, mode, padding):
    torch = _torch()
    if padding == 2 and mode == "reflect" and nd == 3:
        padding = 1  # reflect needs padding < size (the depth is 5 here; fine, but keep 3-D small)
    rng = np.random.default_rng(nd)
    layer = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[nd](
        shape[1], 4, 3, padding=padding, padding_mode=mode, dilation=1 if padding != 2 else 2)
    tlayer = {1: torch.nn.Conv1d, 2: torch.nn.Conv2d, 3: torch.nn.Conv3d}[nd](
        shape[1], 4, 3, padding=padding, padding_mode=mode, dilation=1 if padding != 2 else 2,
        dtype=torch.float64)
    with torch.no_grad():
        tlayer.weight.copy_(torch.tensor(layer.weight.numpy()))
        tlayer.bias.copy_(torch.tensor(layer.bias.numpy()))
    x = rng.standard_normal(shape)
    xp = pa.tensor(x, requires_grad=True)
    xt = torch.tensor(x, requires_grad=True)
    yp, yt = layer(xp), tlayer(xt)
    np.testing.assert_allclose(yp.numpy(), yt.detach().numpy(), rtol=1e-12, atol=1e-12)
    g = rng.standard_normal(yp.shape)
    pa.backward(yp, g)
    yt.backward(torch.tensor(g))
    np.testing.assert_allclose(xp.grad, xt.grad.numpy(), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(layer.weight.grad, tlayer.weight.grad.numpy(), rtol=1e-11,
                               atol=1e-12)
    assert f"padding_mode={mode}" in repr(layer)


def test_conv_padding_mode_gradcheck():
    rng = np.random.default_rng(5)
    layer = nn.Conv2d(2, 3, 3, padding=1, padding_mode="reflect")
    x = pa.tensor(rng.standard_normal((1, 2, 4, 5)), requires_grad=True)
    assert pa.gradcheck(lambda t: layer(t), (x,))


def test_bad_input():
    x = pa.tensor(np.zeros((2, 3, 4)), requires_grad=True)
    with pytest.raises(ValueError, match="at most 3"):
        F.pad(x, (4, 0), mode="reflect")  # reflect: < the size
    with pytest.raises(ValueError, match="at most 4"):
        F.pad(x, (5, 0), mode="circular")
    with pytest.raises(ValueError, match="too small"):
        F.pad(x, (-3, -1), mode="replicate")  # nothing left
    with pytest.raises(ValueError, match="leaves nothing"):
        F.pad(x, (-4, 1), mode="circular")
    with pytest.raises(ValueError, match="at most 2"):
        F.pad(x, (-2, 3), mode="circular")    # wraps around what the crop keeps
    with pytest.raises(ValueError, match="divisible by 2"):
        F.pad(x, (1, 1, 1))
    with pytest.raises(ValueError, match="too large"):
        F.pad(x, (1,) * 8)
    with pytest.raises(NotImplementedError, match="mode must be one of"):
        F.pad(x, (1, 1), mode="mirror")
    with pytest.raises(ValueError, match="value argument"):
        F.pad(x, (1, 1), mode="reflect", value=2.0)
    with pytest.raises(NotImplementedError, match="last 1 to 3"):
        F.pad(x, (1, 1, 1, 1, 1, 1), mode="replicate")  # 3 padded dims need a 4th
    with pytest.raises(TypeError, match="sequence of ints"):
        F.pad(x, (1.5, 1), mode="reflect")
    assert x.grad is None
