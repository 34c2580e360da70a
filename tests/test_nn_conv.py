"""Convolutions: conv1d/2d/3d (stride, padding ints / 'same' / 'valid', dilation, groups,
depthwise, unbatched), conv_transpose1d/2d/3d, unfold/fold, and their layers.

Each is checked against PyTorch (values and every gradient, float64), by finite
differences at first and second order (`gradcheck`, `gradgradcheck`: the twin trio conv /
conv_input_backward / conv_weight_backward covers every option), at third order, for
bad input, and bitwise between the engines.
"""
import numpy as np
import pytest

import parallel_autograd as pa
import parallel_autograd.nn.functional as F
from conftest import assert_bitwise

TOL = 1e-10
nn = pa.nn


def rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def leaf(a):
    return pa.tensor(a, requires_grad=True)


# name -> (call(F, *inputs), input shapes): the same call on either library's functional
CASES = {
    # conv2d: each path (flat shift / channels-last input gradient; per-sample / chunked
    # weight gradient) with the new options
    "conv2d_dilated_same_flat": (lambda F, x, w, b: F.conv2d(x, w, b, padding=2, dilation=2),
                                 [(2, 3, 7, 6), (4, 3, 3, 3), (4,)]),
    "conv2d_dilated_strided": (lambda F, x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=1,
                                                           dilation=(1, 2)),
                               [(2, 3, 7, 8), (4, 3, 3, 2), (4,)]),
    "conv2d_groups_flat": (lambda F, x, w, b: F.conv2d(x, w, b, padding=1, groups=2),
                           [(2, 4, 6, 5), (6, 2, 3, 3), (6,)]),
    "conv2d_groups_strided": (lambda F, x, w: F.conv2d(x, w, stride=2, padding=1, groups=3),
                              [(2, 6, 7, 7), (9, 2, 3, 3)]),
    "conv2d_groups_chunked_w": (lambda F, x, w: F.conv2d(x, w, padding=1, groups=2),
                                [(2, 16, 5, 5), (32, 8, 3, 3)]),
    "conv2d_depthwise_flat": (lambda F, x, w, b: F.conv2d(x, w, b, padding=1, groups=4),
                              [(2, 4, 6, 5), (4, 1, 3, 3), (4,)]),
    "conv2d_depthwise_strided": (lambda F, x, w: F.conv2d(x, w, stride=2, groups=4),
                                 [(2, 4, 7, 6), (4, 1, 3, 3)]),
    "conv2d_depthwise_multiplier": (lambda F, x, w: F.conv2d(x, w, stride=(1, 2), padding=1,
                                                             groups=3),
                                    [(2, 3, 5, 6), (6, 1, 3, 3)]),
    "conv2d_same_string": (lambda F, x, w: F.conv2d(x, w, padding="same"),
                           [(2, 3, 6, 5), (2, 3, 3, 3)]),
    "conv2d_same_even_kernel": (lambda F, x, w: F.conv2d(x, w, padding="same"),
                                [(2, 3, 7, 6), (2, 3, 4, 2)]),
    "conv2d_same_dilated_even": (lambda F, x, w: F.conv2d(x, w, padding="same",
                                                          dilation=(2, 3)),
                                 [(2, 3, 7, 6), (2, 3, 4, 3)]),
    "conv2d_same_kernel_wider_than_image": (lambda F, x, w: F.conv2d(x, w, padding="same"),
                                            [(2, 2, 4, 3), (2, 2, 3, 11)]),
    "conv2d_valid_string": (lambda F, x, w: F.conv2d(x, w, padding="valid"),
                            [(2, 3, 6, 5), (2, 3, 2, 3)]),
    "conv2d_unbatched": (lambda F, x, w, b: F.conv2d(x, w, b, padding=1),
                         [(3, 5, 4), (2, 3, 3, 3), (2,)]),
    # conv1d: stride 1 is always the flat-shift path
    "conv1d": (lambda F, x, w, b: F.conv1d(x, w, b), [(2, 3, 9), (4, 3, 3), (4,)]),
    "conv1d_padded_groups": (lambda F, x, w, b: F.conv1d(x, w, b, padding=2, groups=3),
                             [(2, 3, 9), (6, 1, 4), (6,)]),
    "conv1d_strided_dilated": (lambda F, x, w: F.conv1d(x, w, stride=3, padding=1,
                                                        dilation=2),
                               [(2, 3, 13), (4, 3, 3)]),
    "conv1d_same_even": (lambda F, x, w: F.conv1d(x, w, padding="same", dilation=3),
                         [(2, 2, 10), (3, 2, 4)]),
    "conv1d_unbatched": (lambda F, x, w: F.conv1d(x, w, stride=2), [(3, 9), (2, 3, 3)]),
    # conv3d
    "conv3d_same": (lambda F, x, w, b: F.conv3d(x, w, b, padding=1),
                    [(2, 2, 4, 5, 3), (3, 2, 3, 3, 3), (3,)]),
    "conv3d_strided_groups": (lambda F, x, w, b: F.conv3d(x, w, b, stride=(1, 2, 1),
                                                          padding=(0, 1, 1), groups=2),
                              [(2, 2, 4, 5, 3), (4, 1, 2, 3, 3), (4,)]),
    "conv3d_dilated_same": (lambda F, x, w: F.conv3d(x, w, padding="same", dilation=2),
                            [(1, 2, 5, 4, 5), (2, 2, 2, 3, 2)]),
    # transposed convolutions
    "conv_transpose2d": (lambda F, x, w, b: F.conv_transpose2d(x, w, b),
                         [(2, 4, 4, 5), (4, 3, 3, 3), (3,)]),
    "conv_transpose2d_stride_output_padding": (
        lambda F, x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
        [(2, 4, 4, 5), (4, 3, 3, 3), (3,)]),
    "conv_transpose2d_groups_dilation": (
        lambda F, x, w, b: F.conv_transpose2d(x, w, b, stride=(2, 3), padding=(0, 1),
                                              groups=2, dilation=2),
        [(2, 4, 4, 5), (4, 3, 3, 2), (6,)]),
    "conv_transpose2d_depthwise": (
        lambda F, x, w: F.conv_transpose2d(x, w, stride=2, groups=3, output_padding=(1, 0)),
        [(2, 3, 3, 4), (3, 1, 3, 3)]),
    "conv_transpose1d": (
        lambda F, x, w, b: F.conv_transpose1d(x, w, b, stride=2, padding=1, output_padding=1),
        [(2, 4, 6), (4, 3, 3), (3,)]),
    "conv_transpose1d_groups_dilation": (
        lambda F, x, w: F.conv_transpose1d(x, w, stride=3, groups=2, dilation=2,
                                           output_padding=2),
        [(2, 4, 5), (4, 2, 3)]),
    "conv_transpose3d": (lambda F, x, w, b: F.conv_transpose3d(x, w, b, stride=2, padding=1),
                         [(1, 2, 3, 2, 3), (2, 3, 3, 2, 3), (3,)]),
    # unfold (im2col) and fold (col2im)
    "unfold": (lambda F, x: F.unfold(x, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
               [(2, 3, 6, 7)]),
    "unfold_overlapping": (lambda F, x: F.unfold(x, 3, padding=1), [(2, 2, 4, 5)]),
    "unfold_unbatched": (lambda F, x: F.unfold(x, 2, stride=2), [(3, 4, 6)]),
    "fold": (lambda F, x: F.fold(x, (6, 7), (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
             [(2, 18, 20)]),
    "fold_overlapping": (lambda F, x: F.fold(x, (4, 5), 3, padding=1), [(2, 18, 20)]),
}


def _run(lib, call, arrays, seed=4):
    """(output, gradients of each input) of `call` in `lib` (pa or torch)."""
    if lib is pa:
        xs = [leaf(a) for a in arrays]
        y = call(F, *xs)
        w = rand(y.shape, seed)
        return y.numpy(), list(pa.grad(y, xs, grad_outputs=w))
    xs = [lib.tensor(a, requires_grad=True) for a in arrays]
    y = call(lib.nn.functional, *xs)
    w = rand(tuple(y.shape), seed)
    gs = lib.autograd.grad(y, xs, lib.tensor(w))
    return y.detach().numpy(), [g.numpy() for g in gs]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_match_torch(name):
    torch = pytest.importorskip("torch")
    call, shapes = CASES[name]
    arrays = [rand(s, i + 1) for i, s in enumerate(shapes)]
    (yp, gp), (yt, gt) = _run(pa, call, arrays), _run(torch, call, arrays)
    assert yp.shape == yt.shape
    np.testing.assert_allclose(yp, yt, rtol=TOL, atol=TOL)
    for a, b in zip(gp, gt):
        np.testing.assert_allclose(a, b, rtol=TOL, atol=TOL)


# first and second order by finite differences; nonlinear around the op so that its
# second derivative (the twins' own rules) is exercised, bilinear terms included
GRADGRAD = {
    "conv2d_groups_dilated_flat": (lambda x, w, b: F.conv2d(x * x, w, b, padding=2,
                                                            dilation=2, groups=2),
                                   [(1, 4, 4, 4), (2, 2, 3, 2), (2,)]),
    "conv2d_groups_strided": (lambda x, w: pa.tanh(F.conv2d(x, w, stride=(2, 1), padding=1,
                                                            dilation=(1, 2), groups=2)),
                              [(1, 4, 5, 4), (4, 2, 2, 2)]),
    "conv2d_depthwise": (lambda x, w: F.conv2d(x, w * w, stride=2, padding=1, groups=3),
                         [(2, 3, 4, 4), (3, 1, 3, 3)]),
    "conv2d_same_even": (lambda x, w: F.conv2d(x * x, w, padding="same"),
                         [(1, 2, 4, 4), (2, 2, 2, 3)]),
    "conv1d_groups_dilated": (lambda x, w, b: F.conv1d(pa.tanh(x), w, b, padding=1,
                                                       dilation=2, groups=2),
                              [(2, 4, 6), (4, 2, 3), (4,)]),
    "conv1d_strided": (lambda x, w: F.conv1d(x * x, w, stride=2), [(2, 2, 7), (3, 2, 3)]),
    "conv3d_groups": (lambda x, w: F.conv3d(x * x, w, stride=(1, 2, 1), padding=1, groups=2),
                      [(1, 2, 3, 3, 3), (2, 1, 2, 2, 2)]),
    "conv_transpose2d": (lambda x, w, b: F.conv_transpose2d(x * x, w, b, stride=2, padding=1,
                                                            output_padding=1, groups=2),
                         [(1, 4, 3, 3), (4, 1, 3, 2), (2,)]),
    "conv_transpose2d_dilated": (lambda x, w: pa.tanh(F.conv_transpose2d(x, w, dilation=2)),
                                 [(1, 2, 2, 3), (2, 2, 2, 2)]),
    "conv_transpose1d": (lambda x, w: F.conv_transpose1d(x * x, w, stride=3, padding=1,
                                                         output_padding=1, groups=2),
                         [(2, 4, 3), (4, 1, 3)]),
    "unfold": (lambda x: F.unfold(x * x, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
               [(1, 2, 4, 5)]),
    "fold": (lambda x: F.fold(x * x, (4, 5), 3, padding=1), [(1, 9, 20)]),
}


@pytest.mark.parametrize("name", sorted(GRADGRAD))
def test_gradcheck_and_gradgradcheck(name):
    fn, shapes = GRADGRAD[name]
    inputs = [leaf(rand(s, i + 7) * 0.7) for i, s in enumerate(shapes)]
    assert pa.gradcheck(fn, inputs)
    assert pa.gradgradcheck(fn, inputs)


@pytest.mark.parametrize("name", ["conv2d_groups_strided", "conv_transpose2d", "fold"])
def test_third_derivatives(name):
    """The twins' own twins: differentiate a create_graph gradient with create_graph."""
    fn, shapes = GRADGRAD[name]
    inputs = [leaf(rand(s, i + 7) * 0.7) for i, s in enumerate(shapes)]

    def first_order(*xs):
        out = fn(*xs)
        gs = pa.grad((out * out).sum(), list(xs), create_graph=True)
        return pa.concat([pa.reshape(g, (-1,)) for g in gs])

    assert pa.gradgradcheck(first_order, inputs)


_DOUBLE = {
    "conv2d": (lambda F, x, w, b: F.conv2d(x, w, b, stride=(1, 2), padding=(2, 1),
                                           dilation=(2, 1), groups=2),
               [(2, 4, 6, 5), (6, 2, 3, 3), (6,)]),
    "conv1d_same": (lambda F, x, w: F.conv1d(x, w, padding="same", groups=3),
                    [(2, 3, 7), (6, 1, 4)]),
    "conv_transpose2d": (lambda F, x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1,
                                                               output_padding=1, groups=2),
                         [(2, 4, 3, 4), (4, 2, 3, 3), (4,)]),
    "unfold": (lambda F, x: F.unfold(x, 3, padding=1, stride=2), [(2, 2, 5, 4)]),
}


@pytest.mark.parametrize("name", sorted(_DOUBLE))
def test_double_backward_matches_torch(name):
    """d/d(inputs) of the sum of squares of the first-order gradients, both libraries."""
    torch = pytest.importorskip("torch")
    call, shapes = _DOUBLE[name]
    arrays = [rand(s, i + 3) for i, s in enumerate(shapes)]
    results = []
    for lib in (pa, torch):
        xs = [lib.tensor(a, requires_grad=True) for a in arrays]
        out = call(lib.nn.functional, *xs)
        w = lib.tensor(np.linspace(0.5, 1.5, int(np.prod(tuple(out.shape))))
                       .reshape(tuple(out.shape)))
        gfn = pa.grad if lib is pa else torch.autograd.grad
        gs = gfn((out * out * w).sum(), xs, create_graph=True)
        second = gfn(sum((g * g).sum() for g in gs), xs)
        results.append([np.asarray(g.numpy() if lib is pa else g.detach().numpy())
                        for g in list(gs) + list(second)])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-11)


def test_twin_trio_ops_are_each_others_adjoints():
    """<g, B(x, w)> = <Bx*(g, w), x> = <Bw*(x, g), w> with groups, dilation, stride and
    asymmetric output size (the internal ops `convolution`, `conv_input_backward`,
    `conv_weight_backward`, conv2d's formulas)."""
    from parallel_autograd.nn import _conv
    x, w = rand((2, 4, 7, 6), 1), rand((6, 2, 3, 2), 2)
    geom = dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)
    y = F.conv2d(pa.tensor(x), pa.tensor(w), **geom).numpy()
    assert np.array_equal(_conv.convolution(x, w, **geom, output_size=y.shape[2:]).numpy(), y)
    g = rand(y.shape, 3)
    gx = _conv.conv_input_backward(pa.tensor(g), pa.tensor(w), x.shape, **geom).numpy()
    gw = _conv.conv_weight_backward(pa.tensor(x), pa.tensor(g), w.shape, **geom).numpy()
    lhs = np.vdot(g, y)
    assert np.isclose(lhs, np.vdot(gx, x), rtol=1e-12)
    assert np.isclose(lhs, np.vdot(gw, w), rtol=1e-12)


def test_frozen_weight_keeps_no_columns_and_no_grad_mode_none():
    x, w = leaf(rand((2, 4, 5, 5), 1)), pa.tensor(rand((4, 2, 3, 3), 2))
    out = F.conv2d(x, w, padding=1, groups=2)
    # the node saves (ans, input, weight, bias, columns, geometry): no columns here
    assert out.grad_fn.name == "conv2d" and out.grad_fn.saved[4] is None
    wl = leaf(rand((4, 2, 3, 3), 2))
    with pa.no_grad():
        assert F.conv2d(x, wl, groups=2).grad_fn is None
    out = F.conv1d(pa.tensor(rand((2, 3, 6), 1)), leaf(rand((2, 3, 3), 2)))
    assert out.grad_fn.name == "conv1d" and out.grad_fn.saved[4] is not None


def test_float32_in_float32_out():
    x, w = leaf(rand((2, 4, 6, 5), 1).astype(np.float32)), leaf(rand((4, 1, 3, 3), 2)
                                                                 .astype(np.float32))
    y = F.conv2d(x, w, padding=1, groups=4)
    gx, gw = pa.grad((y * y).sum(), [x, w])
    assert y.dtype == gx.dtype == gw.dtype == np.float32
    y64 = F.conv2d(pa.tensor(x.numpy().astype(np.float64)), pa.tensor(w.numpy().astype(np.float64)),
                   padding=1, groups=4)
    np.testing.assert_allclose(y.numpy(), y64.numpy(), rtol=1e-5, atol=1e-5)


# ---- layers ------------------------------------------------------------------------------
LAYERS = {
    "Conv1d": (lambda n: n.Conv1d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2),
               (2, 4, 9)),
    "Conv1d_same": (lambda n: n.Conv1d(2, 3, 4, padding="same", bias=False), (2, 2, 7)),
    "Conv2d_groups_dilation": (lambda n: n.Conv2d(4, 4, 3, padding=2, dilation=2, groups=4),
                               (2, 4, 5, 6)),
    "Conv2d_same_even": (lambda n: n.Conv2d(2, 3, (2, 4), padding="same"), (2, 2, 5, 6)),
    "Conv3d": (lambda n: n.Conv3d(2, 4, (2, 3, 3), stride=(1, 2, 1), padding=1, groups=2),
               (2, 2, 3, 5, 4)),
    "ConvTranspose1d": (lambda n: n.ConvTranspose1d(4, 6, 3, stride=2, padding=1,
                                                    output_padding=1, groups=2), (2, 4, 5)),
    "ConvTranspose2d": (lambda n: n.ConvTranspose2d(3, 2, (3, 2), stride=2, padding=(1, 0),
                                                    dilation=(1, 2)), (2, 3, 4, 3)),
    "ConvTranspose3d": (lambda n: n.ConvTranspose3d(2, 2, 2, stride=2, bias=False),
                        (1, 2, 2, 3, 2)),
    "Unfold": (lambda n: n.Unfold((2, 3), padding=1, stride=2), (2, 3, 5, 6)),
    "Fold": (lambda n: n.Fold((4, 5), 3, padding=1), (2, 18, 20)),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layers_match_torch(name):
    torch = pytest.importorskip("torch")
    make, shape = LAYERS[name]
    pa.manual_seed(0)
    ours = make(nn)
    theirs = make(torch.nn).double()
    theirs.load_state_dict({k: torch.from_numpy(v.numpy().copy())
                            for k, v in ours.state_dict().items()})
    assert repr(ours) == repr(theirs)
    data = rand(shape, 1)
    x, tx = leaf(data), torch.tensor(data, requires_grad=True)
    y, ty = ours(x), theirs(tx)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=TOL, atol=TOL)
    w = rand(y.shape, 2)
    (y * w).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(x.grad, tx.grad.numpy(), rtol=TOL, atol=TOL)
    for (k, p), (_, tp) in zip(ours.named_parameters(), theirs.named_parameters()):
        np.testing.assert_allclose(p.grad, tp.grad.numpy(), rtol=TOL, atol=TOL, err_msg=k)


def test_conv_init_fan_in_counts_groups_and_transposed_layout():
    # bound 1/sqrt(fan_in), fan_in = weight.shape[1] * kernel (PyTorch's)
    conv = nn.Conv2d(8, 4, 3, groups=4)
    assert conv.weight.shape == (4, 2, 3, 3)
    assert np.abs(conv.bias.numpy()).max() <= 1 / np.sqrt(2 * 9)
    tr = nn.ConvTranspose2d(8, 6, 3, groups=2)
    assert tr.weight.shape == (8, 3, 3, 3)
    assert np.abs(tr.bias.numpy()).max() <= 1 / np.sqrt(3 * 9)


def test_conv_transpose_output_size_picks_output_padding():
    torch = pytest.importorskip("torch")
    pa.manual_seed(0)
    ours = nn.ConvTranspose2d(2, 3, 3, stride=3, padding=1)
    theirs = torch.nn.ConvTranspose2d(2, 3, 3, stride=3, padding=1).double()
    theirs.load_state_dict({k: torch.from_numpy(v.numpy().copy())
                            for k, v in ours.state_dict().items()})
    x = rand((1, 2, 3, 4), 1)
    for size in [(7, 10), (9, 12), (1, 3, 8, 11)]:
        y = ours(pa.tensor(x), output_size=size)
        ty = theirs(torch.tensor(x), output_size=size)
        np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=TOL, atol=TOL)
    with pytest.raises(ValueError, match="valid sizes range from 7 to 9"):
        ours(pa.tensor(x), output_size=(10, 10))


# ---- bad input ----------------------------------------------------------------------------
@pytest.mark.parametrize("call,match", [
    (lambda: F.conv2d(pa.ones(1, 4, 5, 5), pa.ones(2, 3, 3, 3), groups=2),
     "conv2d: input has 4 channels but weight"),
    (lambda: F.conv2d(pa.ones(1, 4, 5, 5), pa.ones(3, 2, 3, 3), groups=2),
     "conv2d: 3 out channels are not divisible by groups=2"),
    (lambda: F.conv2d(pa.ones(1, 1, 5, 5), pa.ones(1, 1, 3, 3), groups=0),
     "conv2d: groups must be a positive integer"),
    (lambda: F.conv2d(pa.ones(1, 1, 5, 5), pa.ones(1, 1, 3, 3), stride=2, padding="same"),
     "conv2d: padding='same' is not supported for strided"),
    (lambda: F.conv2d(pa.ones(1, 1, 5, 5), pa.ones(1, 1, 3, 3), padding="full"),
     "conv2d: invalid padding string 'full'"),
    (lambda: F.conv2d(pa.ones(1, 1, 5, 5), pa.ones(1, 1, 3, 3), dilation=0),
     "conv2d: dilation must be positive"),
    (lambda: F.conv2d(pa.ones(1, 1, 4, 4), pa.ones(1, 1, 3, 3), dilation=2),
     "conv2d: dilated kernel size 5 .* is larger than the padded input size 4"),
    (lambda: F.conv2d(pa.ones(1, 1, 4, 4), pa.ones(1, 1, 3, 3), padding=-1),
     "conv2d: padding must be non-negative"),
    (lambda: F.conv1d(pa.ones(1, 2, 5), pa.ones(1, 2, 3, 3)), "conv1d: expected 3-D input"),
    (lambda: F.conv3d(pa.ones(2, 5, 5), pa.ones(1, 2, 3, 3, 3)),
     "conv3d: expected 5-D input"),
    (lambda: F.conv1d(pa.ones(1, 2, 5), pa.ones(1, 2, 3), stride=(1, 2)),
     "conv1d: stride must be an int or a 1-tuple"),
    (lambda: F.conv_transpose2d(pa.ones(1, 2, 3, 3), pa.ones(2, 1, 3, 3), stride=2,
                                output_padding=2),
     "conv_transpose2d: output padding .* must be smaller than either stride"),
    (lambda: F.conv_transpose2d(pa.ones(1, 3, 3, 3), pa.ones(2, 1, 3, 3)),
     "conv_transpose2d: input with 3 channels does not match weight"),
    (lambda: F.conv_transpose1d(pa.ones(1, 2, 3), pa.ones(2, 1, 3), pa.ones(2)),
     "conv_transpose1d: bias shape"),
    (lambda: F.unfold(pa.ones(1, 2, 3, 3, 3), 2), "unfold: expected a 3-D or 4-D input"),
    (lambda: F.unfold(pa.ones(1, 2, 3, 3), 4), "unfold: kernel size 4 is larger"),
    (lambda: F.fold(pa.ones(1, 7, 4), (3, 3), 2), "fold: expected size of input's dimension 1"),
    (lambda: F.fold(pa.ones(1, 8, 5), (3, 3), 2), "fold: expected input's dimension 2 .5."),
])
def test_bad_input_raises_before_recording(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_bad_layer_arguments():
    with pytest.raises(ValueError, match="in_channels must be divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="out_channels must be divisible by groups"):
        nn.Conv1d(4, 3, 3, groups=2)
    with pytest.raises(ValueError, match="strided"):
        nn.Conv3d(1, 1, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match='only "zeros" padding mode'):
        nn.ConvTranspose2d(1, 1, 3, padding_mode="circular")
    with pytest.raises(ValueError, match="padding_mode must be one of"):
        nn.Conv2d(1, 1, 3, padding_mode="mirror")


# ---- the parallel engine -------------------------------------------------------------------
def test_parallel_engine_is_bitwise_equal():
    x = leaf(rand((2, 4, 6, 5), 1))
    w1, w2, w3 = leaf(rand((4, 1, 3, 3), 2)), leaf(rand((4, 2, 3, 3), 3)), \
        leaf(rand((4, 4, 3), 4))

    def loss(create_graph=False):
        h = pa.tanh(F.conv2d(x, w1, padding=1, groups=4))                     # depthwise
        a = F.conv2d(h, w2, stride=2, padding=1, dilation=(1, 2), groups=2)
        b = F.conv_transpose2d(a, w2, stride=2, output_padding=(1, 0), groups=2)
        c = F.conv1d(F.unfold(h, 2, stride=2)[:, :4], w3, padding="same")
        cols = F.fold(F.unfold(b, 3, padding=1), (8, 5), 3, padding=1)
        return (cols * cols).sum() + (c * c).sum()

    leaves = [x, w1, w2, w3]
    want = pa.grad(loss(), leaves)
    with pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0) as eng:
        got = eng.grad(loss(), leaves)
    assert_bitwise(list(want), list(got))
    # second order, through the twins, in both engines
    first = pa.grad(loss(), leaves, create_graph=True)
    want2 = pa.grad(sum((g * g).sum() for g in first), leaves)
    with pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0) as eng:
        first = eng.grad(loss(), leaves, create_graph=True)
        got2 = eng.grad(sum((g * g).sum() for g in first), leaves)
    assert_bitwise(list(want2), list(got2))


# ---- the strided input gradient's two kernels ------------------------------------------------
# (x shape, w shape, stride, padding, dilation, groups): geometries that are not flat shifts
STRIDED = {
    "2d": ((3, 4, 19, 18), (6, 4, 3, 3), (2, 2), (1, 1), (1, 1), 1),
    "2d_1x1_stride3": ((3, 4, 25, 26), (5, 4, 1, 1), (3, 3), (0, 0), (1, 1), 1),
    "2d_dilated_asymmetric": ((3, 4, 19, 28), (6, 4, 3, 2), (1, 2), (0, 1), (2, 1), 1),
    "2d_valid_stride1": ((2, 3, 12, 13), (4, 3, 3, 3), (1, 1), (0, 0), (1, 1), 1),
    "2d_depthwise": ((3, 4, 19, 18), (4, 1, 3, 3), (2, 2), (1, 1), (1, 1), 4),
    "2d_groups": ((3, 4, 19, 18), (6, 2, 3, 2), (2, 3), (0, 1), (2, 1), 2),
    "2d_multiplier": ((3, 3, 17, 18), (6, 1, 3, 3), (1, 2), (1, 1), (1, 1), 3),
    "1d": ((3, 2, 41), (4, 2, 3), (3,), (1,), (2,), 1),
    "1d_depthwise": ((3, 3, 40), (3, 1, 5), (2,), (2,), (1,), 3),
    "3d": ((2, 2, 9, 18, 17), (4, 2, 2, 3, 3), (2, 1, 2), (0, 1, 1), (1, 1, 1), 1),
    "3d_groups": ((2, 2, 5, 6, 18), (4, 1, 2, 3, 3), (2, 1, 2), (0, 1, 1), (1, 1, 1), 2),
}


@pytest.mark.parametrize("chunk", ["whole", "per_sample"])
@pytest.mark.parametrize("kernel", ["channels_first", "channels_last"])
@pytest.mark.parametrize("name", sorted(STRIDED))
def test_strided_input_gradient_kernels_match_torch(name, kernel, chunk, monkeypatch):
    """Both layouts of the strided input gradient (whichever `_channels_first_pays`
    picks), in one chunk of samples and one sample per chunk, against PyTorch's."""
    torch = pytest.importorskip("torch")
    from parallel_autograd.nn import _conv
    xs, ws, stride, padding, dilation, groups = STRIDED[name]
    nd = len(xs) - 2
    if kernel == "channels_first" and groups > 1 and not ws[0] == xs[1] == groups:
        pytest.skip("channels-first takes ungrouped and depthwise weights only")
    if chunk == "per_sample":
        monkeypatch.setattr(_conv, "_GRAD_CHUNK_BYTES", 1)
        monkeypatch.setattr(_conv, "_GRAD_MIN_ROWS", 1)
    out_sz = _conv._out_sizes("c", xs[2:], ws[2:], stride, padding, padding, dilation)
    taps, shifts = _conv._geometry(xs, ws[2:], stride, padding, dilation, out_sz)
    assert shifts is None
    g, w = rand((xs[0], ws[0]) + out_sz, 1), rand(ws, 2)
    got = getattr(_conv, f"_input_grad_{kernel}")(g, w, xs, taps, groups)
    want = getattr(torch.nn.grad, f"conv{nd}d_input")(
        xs, torch.tensor(w), torch.tensor(g), stride, padding, dilation, groups).numpy()
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)
    assert got.dtype == np.float64
    got32 = getattr(_conv, f"_input_grad_{kernel}")(g.astype(np.float32), w.astype(np.float32),
                                                    xs, taps, groups)
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("xs,ws,stride,padding", [
    ((4, 16, 12, 12), (8, 16, 3, 3), 2, 1),       # deeper layer: channels-last
    ((4, 16, 12, 12), (8, 16, 3, 3), 1, 0),       # 'valid' stride 1: channels-last
    ((4, 3, 16, 16), (8, 3, 4, 4), 2, 1),         # first layer: channels-first
], ids=["strided", "valid", "first_layer"])
@pytest.mark.parametrize("big", [True, False], ids=["threaded", "one_thread"])
def test_strided_input_gradient_gemms_per_chunk(xs, ws, stride, padding, big, monkeypatch):
    """Bx*'s non-flat kernels, ungrouped: first layers run one GEMM per chunk of samples
    for all kernel offsets (issue 28: was one per offset, the cost on 2 threads); deeper
    layers too when those GEMMs are big enough (`_ALL_OFFSETS_MACS`, here lowered to
    0), else one per offset (faster on one thread: the product stays in
    cache). Both stay torch's."""
    torch = pytest.importorskip("torch")
    from parallel_autograd.nn import _conv
    if big:
        monkeypatch.setattr(_conv, "_ALL_OFFSETS_MACS", 0)
    out_sz = _conv._out_sizes("c", xs[2:], ws[2:], (stride,) * 2, (padding,) * 2,
                              (padding,) * 2, (1, 1))
    g, w = rand((xs[0], ws[0]) + out_sz, 1), rand(ws, 2)
    calls = []
    real = np.matmul

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(np, "matmul", counting)
    geom = dict(stride=(stride,) * 2, padding=(padding,) * 2, dilation=(1, 1), groups=1)
    got = _conv._input_of(g, w, xs, geom)
    monkeypatch.undo()
    offsets = int(np.prod(ws[2:]))
    if big or xs[1] <= 8:
        # at most one a sample (chunks of columns <= the input's size: one sample for
        # the first layer, all 4 for the others), fewer than the 9-16 kernel offsets
        assert len(calls) <= xs[0] < offsets
    else:
        assert len(calls) == offsets                # one chunk: all 4 samples
    want = torch.nn.grad.conv2d_input(xs, torch.tensor(w), torch.tensor(g), stride,
                                      padding).numpy()
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)


@pytest.mark.parametrize("xs,ws,stride,padding", [
    ((4, 16, 12, 12), (8, 16, 3, 3), 2, 1),       # deeper layer: channels-last
    ((4, 1, 12, 12), (8, 1, 3, 3), 1, 0),         # first layer: channels-first
    ((4, 4, 12, 12), (8, 2, 3, 3), 2, 1),         # grouped: one product per offset
], ids=["channels_last", "channels_first", "grouped"])
def test_small_input_gradient_gemms_run_on_one_blas_thread(xs, ws, stride, padding,
                                                            monkeypatch):
    """Bx*'s GEMMs below `_ONE_THREAD_MACS` run with BLAS held at one thread (on loaded
    cores each threaded call waited for its helper: mnist1's input gradient 3.5 -> 124 ms
    at 2 threads, issue 28), the count restored after; bigger ones keep BLAS's threads."""
    from parallel_autograd.engine import blas
    from parallel_autograd.nn import _conv
    before = blas.current_threads()
    if before is None:
        pytest.skip("no BLAS library found by threadpoolctl")
    out_sz = _conv._out_sizes("c", xs[2:], ws[2:], (stride,) * 2, (padding,) * 2,
                              (padding,) * 2, (1, 1))
    g, w = rand((xs[0], ws[0]) + out_sz, 1), rand(ws, 2)
    geom = dict(stride=(stride,) * 2, padding=(padding,) * 2, dilation=(1, 1),
                groups=xs[1] // ws[1])
    want = _conv._input_of(g, w, xs, geom)
    seen = []
    real = np.matmul

    def recording(*args, **kwargs):
        seen.append(blas.current_threads())
        return real(*args, **kwargs)
    blas.set_threads(2)
    try:
        if blas.current_threads() != 2:
            pytest.skip("BLAS threads cannot be set here")
        for limit, threads in ((_conv._ONE_THREAD_MACS, 1), (0, 2)):
            monkeypatch.setattr(_conv, "_SERIAL_MACS", 0)     # these GEMMs are tiny
            monkeypatch.setattr(_conv, "_ONE_THREAD_MACS", limit)
            monkeypatch.setattr(np, "matmul", recording)
            seen.clear()
            got = _conv._input_of(g, w, xs, geom)
            monkeypatch.undo()
            assert seen and set(seen) == {threads}
            assert blas.current_threads() == 2 and blas.holders() == 0
            np.testing.assert_array_equal(got, want)
    finally:
        blas.set_threads(before)


def _blas_threads_seen(run, monkeypatch) -> tuple:
    """(result, {BLAS threads in force at each np.matmul}) of `run()` with BLAS at 2
    threads, once with the real `_ONE_THREAD_MACS` and once with it at 0 (every GEMM
    left to BLAS's threads); checks the count is restored and no holder is left."""
    from parallel_autograd.engine import blas
    from parallel_autograd.nn import _conv
    seen, out = [], []
    real = np.matmul

    def recording(*args, **kwargs):
        seen.append(blas.current_threads())
        return real(*args, **kwargs)
    for limit in (_conv._ONE_THREAD_MACS, 0):
        monkeypatch.setattr(_conv, "_SERIAL_MACS", 0)         # these GEMMs are tiny
        monkeypatch.setattr(_conv, "_ONE_THREAD_MACS", limit)
        monkeypatch.setattr(np, "matmul", recording)
        seen.clear()
        out.append((run(), set(seen)))
        monkeypatch.undo()
        assert blas.current_threads() == 2 and blas.holders() == 0
    return out


@pytest.mark.parametrize("xs,ws,stride,padding,groups", [
    ((4, 16, 12, 12), (8, 16, 3, 3), (2, 2), (1, 1), 1),         # chunk GEMMs, padded
    ((4, 16, 12, 12), (8, 16, 3, 3), (1, 1), (0, 0), 1),         # 'valid' windows view
    ((4, 1, 12, 12), (8, 1, 3, 3), (1, 1), (0, 0), 1),           # small weight: per sample
    ((4, 4, 12, 12), (8, 2, 3, 3), (2, 2), (1, 1), 2),           # grouped
    ((3, 8, 40), (16, 8, 5), (2,), (2,), 1),                     # 1-d
    ((2, 4, 6, 7, 8), (8, 4, 2, 3, 3), (1, 2, 1), (0, 1, 1), 1),  # 3-d
], ids=["strided", "valid", "first_layer", "grouped", "1d", "3d"])
@pytest.mark.parametrize("part", ["forward", "weight_grad", "weight_grad_kept_columns"])
def test_small_forward_and_weight_gradient_gemms_run_on_one_blas_thread(
        xs, ws, stride, padding, groups, part, monkeypatch):
    """The forward's and the weight gradient's GEMMs below `_ONE_THREAD_MACS` run with
    BLAS held at one thread, as Bx*'s (issue 28: on loaded cores each threaded call
    waits for its helper), once around the kernel (not per GEMM), the count restored
    after; bigger ones keep BLAS's threads; the same bytes either way (the rule reads
    shapes only, and BLAS's result does not depend on its threads)."""
    from parallel_autograd.engine import blas
    from parallel_autograd.nn import _conv
    before = blas.current_threads()
    if before is None:
        pytest.skip("no BLAS library found by threadpoolctl")
    nd = len(xs) - 2
    geom = dict(stride=stride, padding=padding, dilation=(1,) * nd, groups=groups)
    out_sz = _conv._out_sizes("c", xs[2:], ws[2:], stride, padding, padding, (1,) * nd)
    x, w, g = rand(xs, 1), rand(ws, 2), rand((xs[0], ws[0]) + out_sz, 3)
    if part == "forward":
        def run():
            return _conv._apply(x, w, geom, out_sz)[0]
    elif part == "weight_grad":
        def run():
            return _conv._weight_of(g, None, x, ws, geom)
    else:
        cols = _conv._apply(x, w, geom, out_sz, keep=True)[1]

        def run():
            return _conv._weight_of(g, cols, x, ws, geom)
    limits = []
    real_limited = blas.limited

    def counting(n):
        limits.append(n)
        return real_limited(n)
    blas.set_threads(2)
    try:
        if blas.current_threads() != 2:
            pytest.skip("BLAS threads cannot be set here")
        monkeypatch.setattr(blas, "limited", counting)
        want = run()                            # GEMMs OpenBLAS keeps on one thread
        assert limits == []
        monkeypatch.setattr(_conv, "_SERIAL_MACS", 0)
        assert np.array_equal(run(), want)
        monkeypatch.undo()
        assert limits == [1]                    # one switch for the whole kernel
        (small, seen_small), (big, seen_big) = _blas_threads_seen(run, monkeypatch)
        assert seen_small == {1} and seen_big == {2}
        np.testing.assert_array_equal(small, want)
        np.testing.assert_array_equal(big, want)
    finally:
        blas.set_threads(before)


@pytest.mark.parametrize("part", ["forward", "weight_grad"])
def test_small_conv_gemms_give_the_same_bytes_at_any_blas_threads(part):
    """The forward's and the weight gradient's GEMMs in the one-thread band run on one
    BLAS thread whatever the count in force, so their bytes do not depend on it: here
    (64, 288) @ (288, 1728) and (64, 1728) @ (1728, 288) in float32, which OpenBLAS sums
    differently on 2 threads (its threaded driver splits the inner dimension into other
    blocks). Without the rule the two runs differ by ~5e-5."""
    from threadpoolctl import threadpool_limits

    from parallel_autograd.engine import blas
    from parallel_autograd.nn import _conv
    if blas.current_threads() is None:
        pytest.skip("no BLAS library found by threadpoolctl")
    x = rand((3, 32, 26, 26), 1).astype(np.float32)
    w = rand((64, 32, 3, 3), 2).astype(np.float32)
    g = rand((3, 64, 24, 24), 3).astype(np.float32)
    geom = dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1)
    macs = 64 * 288 * 3 * 576
    assert _conv._SERIAL_MACS <= macs < _conv._ONE_THREAD_MACS
    runs = []
    for threads in (1, 2):
        with threadpool_limits(threads, user_api="blas"):
            if blas.current_threads() != threads:
                pytest.skip("BLAS threads cannot be set here")
            runs.append(_conv._apply(x, w, geom, (24, 24))[0] if part == "forward"
                        else _conv._weight_of(g, None, x, w.shape, geom))
    np.testing.assert_array_equal(runs[0], runs[1])


def test_conv_gemms_of_134m_multiply_adds_keep_blas_threads(monkeypatch):
    """dcgan_d2's forward and weight gradient chunks ((128, 1024) @ (1024, 1024): 2^27
    multiply-adds) keep BLAS's threads: the one-thread rule stops at 2^25 (on 2 loaded
    cores they were 2.4-3.4x slower threaded, but on an idle machine such GEMMs gain from
    every core, and the rule reads shapes only)."""
    from parallel_autograd.engine import blas
    from parallel_autograd.nn import _conv
    before = blas.current_threads()
    if before is None:
        pytest.skip("no BLAS library found by threadpoolctl")
    x = rand((4, 64, 32, 32), 1).astype(np.float32)
    w = rand((128, 64, 4, 4), 2).astype(np.float32)
    g = rand((4, 128, 16, 16), 3).astype(np.float32)
    geom = dict(stride=(2, 2), padding=(1, 1), dilation=(1, 1), groups=1)
    seen = []
    real = np.matmul

    def recording(*args, **kwargs):
        seen.append((blas.current_threads(), np.prod(args[0].shape) * args[1].shape[-1]))
        return real(*args, **kwargs)
    blas.set_threads(2)
    try:
        if blas.current_threads() != 2:
            pytest.skip("BLAS threads cannot be set here")
        monkeypatch.setattr(np, "matmul", recording)
        _conv._apply(x, w, geom, (16, 16))
        _conv._weight_of(g, None, x, w.shape, geom)
        monkeypatch.undo()
        assert {t for t, _ in seen} == {2} and {m for _, m in seen} == {1 << 27}
    finally:
        blas.set_threads(before)


@pytest.mark.parametrize("xs,ks,stride,dilation", [
    ((3, 4, 11, 13), (3, 2), (1, 1), (1, 1)),
    ((3, 4, 11, 13), (3, 3), (2, 3), (2, 1)),
    ((2, 2, 9), (3,), (2,), (2,)),
    ((2, 2, 6, 7, 8), (2, 3, 2), (1, 2, 1), (2, 1, 1)),
], ids=["2d", "2d_strided_dilated", "1d", "3d"])
def test_im2col_valid_windows_view_matches_per_offset_copies(xs, ks, stride, dilation,
                                                              monkeypatch):
    """'valid' im2col is one copy from a strided view of every window (issue 28 item 2:
    no Python loop over the kernel offsets), into a chunk of a bigger column buffer too
    (the forward's kept columns); the same columns as the per-offset copies."""
    from parallel_autograd.nn import _conv
    nd = len(ks)
    x = rand(xs, 3)
    out_sz = _conv._out_sizes("c", xs[2:], ks, stride, (0,) * nd, (0,) * nd, dilation)
    geo = _conv._geometry(xs, ks, stride, (0,) * nd, dilation, out_sz)
    assert _conv._windows_view(x, geo[0], out_sz) is not None
    got = np.full((xs[1],) + ks + (xs[0] + 2, int(np.prod(out_sz))), np.nan)
    _conv._im2col(x, got[..., 1:-1, :], geo, out_sz)
    assert np.isnan(got[..., [0, -1], :]).all()
    monkeypatch.setattr(_conv, "_windows_view", lambda *a: None)
    want = np.empty((xs[1],) + ks + (xs[0], int(np.prod(out_sz))))
    _conv._im2col(x, want, geo, out_sz)
    np.testing.assert_array_equal(got[..., 1:-1, :], want)
    monkeypatch.undo()
    out_p = _conv._out_sizes("c", xs[2:], ks, stride, (1,) * nd, (1,) * nd, dilation)
    padded = _conv._geometry(xs, ks, stride, (1,) * nd, dilation, out_p)
    assert _conv._windows_view(x, padded[0], out_p) is None    # padding cuts blocks
