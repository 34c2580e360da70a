"""Pooling and resampling: max_pool1d/2d (ceil_mode, dilation, return_indices),
avg_pool1d/2d (ceil_mode, count_include_pad, divisor_override), adaptive_avg_pool1d/2d,
adaptive_max_pool1d/2d, interpolate (nearest, nearest-exact, linear, bilinear, bicubic,
trilinear, area; size or scale_factor; align_corners), pixel_shuffle / pixel_unshuffle,
and their layers.

Each is checked against PyTorch (values, gradients, indices; float64), by finite
differences at first and second order (inputs away from ties for the max pools), at
third order, for bad input, and bitwise between the engines.
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


def distinct(shape, seed):
    """Values at least 0.05 apart: no ties, and finite differences never swap a max."""
    v = np.random.default_rng(seed).permutation(int(np.prod(shape))).reshape(shape)
    return (v - v.size / 2) * 0.05


def leaf(a):
    return pa.tensor(a, requires_grad=True)


# name -> (call(F, x), input shape)
CASES = {
    "max_pool2d_ceil": (lambda F, x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), (2, 3, 8, 7)),
    "max_pool2d_ceil_unpadded": (lambda F, x: F.max_pool2d(x, 2, 3, ceil_mode=True),
                                 (2, 2, 8, 7)),
    "max_pool2d_dilated": (lambda F, x: F.max_pool2d(x, 3, 2, 1, dilation=2), (2, 3, 9, 8)),
    "max_pool2d_dilated_disjoint": (lambda F, x: F.max_pool2d(x, 2, 4, dilation=(2, 3)),
                                    (1, 2, 9, 12)),
    "max_pool2d_dilated_ceil_rect": (lambda F, x: F.max_pool2d(x, (3, 2), (2, 1), (1, 0),
                                                               dilation=(1, 2),
                                                               ceil_mode=True), (2, 2, 8, 7)),
    "max_pool2d_unbatched": (lambda F, x: F.max_pool2d(x, 2), (3, 4, 6)),
    "max_pool1d": (lambda F, x: F.max_pool1d(x, 3, 2, 1), (2, 3, 9)),
    "max_pool1d_ceil_dilated": (lambda F, x: F.max_pool1d(x, 2, 2, dilation=2, ceil_mode=True),
                                (2, 3, 10)),
    "avg_pool2d_ceil": (lambda F, x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True), (2, 3, 8, 7)),
    "avg_pool2d_ceil_exclude_pad": (lambda F, x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True,
                                                              count_include_pad=False),
                                    (2, 3, 8, 7)),
    "avg_pool2d_ceil_unpadded": (lambda F, x: F.avg_pool2d(x, (2, 3), (2, 2), ceil_mode=True),
                                 (2, 2, 5, 6)),
    "avg_pool2d_divisor_override": (lambda F, x: F.avg_pool2d(x, 3, 2, 1, divisor_override=5),
                                    (2, 3, 8, 7)),
    "avg_pool2d_unbatched": (lambda F, x: F.avg_pool2d(x, 2, 1), (2, 4, 5)),
    "avg_pool1d": (lambda F, x: F.avg_pool1d(x, 3, 2, 1), (2, 3, 9)),
    "avg_pool1d_ceil_exclude_pad": (lambda F, x: F.avg_pool1d(x, 4, 3, 2, ceil_mode=True,
                                                              count_include_pad=False),
                                    (2, 3, 10)),
    "adaptive_avg_pool2d": (lambda F, x: F.adaptive_avg_pool2d(x, (3, 4)), (2, 3, 8, 7)),
    "adaptive_avg_pool2d_global": (lambda F, x: F.adaptive_avg_pool2d(x, 1), (2, 3, 5, 4)),
    "adaptive_avg_pool2d_none_upsampling": (lambda F, x: F.adaptive_avg_pool2d(x, (None, 7)),
                                            (2, 2, 4, 5)),
    "adaptive_avg_pool1d": (lambda F, x: F.adaptive_avg_pool1d(x, 4), (2, 3, 10)),
    "adaptive_max_pool2d": (lambda F, x: F.adaptive_max_pool2d(x, (3, 4)), (2, 3, 8, 7)),
    "adaptive_max_pool2d_divisible": (lambda F, x: F.adaptive_max_pool2d(x, 2), (2, 2, 6, 4)),
    "adaptive_max_pool2d_upsampling": (lambda F, x: F.adaptive_max_pool2d(x, (5, 3)),
                                       (1, 2, 3, 7)),
    "adaptive_max_pool1d": (lambda F, x: F.adaptive_max_pool1d(x, 4), (2, 3, 10)),
    "interpolate_nearest_size": (lambda F, x: F.interpolate(x, size=(5, 11)), (2, 3, 4, 7)),
    "interpolate_nearest_scale": (lambda F, x: F.interpolate(x, scale_factor=1.7), (2, 3, 4, 7)),
    "interpolate_nearest_scale_2": (lambda F, x: F.interpolate(x, scale_factor=2), (2, 3, 3, 4)),
    "interpolate_nearest_same_size_scaled": (lambda F, x: F.interpolate(x, scale_factor=1.3),
                                             (2, 2, 3, 3)),
    "interpolate_nearest_down": (lambda F, x: F.interpolate(x, scale_factor=(0.5, 0.4)),
                                 (2, 3, 8, 9)),
    "interpolate_nearest_1d": (lambda F, x: F.interpolate(x, size=7), (2, 3, 5)),
    "interpolate_nearest_3d": (lambda F, x: F.interpolate(x, scale_factor=(2, 1.5, 0.5)),
                               (1, 2, 2, 3, 4)),
    "interpolate_nearest_exact": (lambda F, x: F.interpolate(x, size=(5, 11),
                                                             mode="nearest-exact"),
                                  (2, 3, 4, 7)),
    "interpolate_nearest_recompute": (lambda F, x: F.interpolate(
        x, scale_factor=1.7, recompute_scale_factor=True), (2, 3, 4, 7)),
    "interpolate_bilinear": (lambda F, x: F.interpolate(x, size=(5, 11), mode="bilinear"),
                             (2, 3, 4, 7)),
    "interpolate_bilinear_align_corners": (
        lambda F, x: F.interpolate(x, size=(5, 11), mode="bilinear", align_corners=True),
        (2, 3, 4, 7)),
    "interpolate_bilinear_scale_down": (lambda F, x: F.interpolate(
        x, scale_factor=(0.5, 2.3), mode="bilinear"), (2, 3, 6, 7)),
    "interpolate_bilinear_to_one": (lambda F, x: F.interpolate(
        x, size=(1, 3), mode="bilinear", align_corners=True), (1, 2, 4, 5)),
    "interpolate_bicubic": (lambda F, x: F.interpolate(x, scale_factor=1.7, mode="bicubic"),
                            (2, 2, 4, 5)),
    "interpolate_bicubic_same_size_scaled": (lambda F, x: F.interpolate(
        x, scale_factor=1.3, mode="bicubic"), (1, 2, 3, 5)),
    "interpolate_bicubic_align_corners": (lambda F, x: F.interpolate(
        x, size=(3, 8), mode="bicubic", align_corners=True), (2, 2, 4, 5)),
    "interpolate_linear": (lambda F, x: F.interpolate(x, size=9, mode="linear"), (2, 3, 5)),
    "interpolate_trilinear": (lambda F, x: F.interpolate(x, scale_factor=(1.5, 2, 0.7),
                                                         mode="trilinear"), (1, 2, 2, 3, 4)),
    "interpolate_area": (lambda F, x: F.interpolate(x, size=(3, 5), mode="area"),
                         (2, 3, 7, 8)),
    "pixel_shuffle": (lambda F, x: F.pixel_shuffle(x, 2), (2, 8, 3, 4)),
    "pixel_shuffle_3d_batch": (lambda F, x: F.pixel_shuffle(x, 3), (2, 2, 9, 2, 3)),
    "pixel_unshuffle": (lambda F, x: F.pixel_unshuffle(x, 2), (2, 3, 4, 6)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_match_torch(name):
    torch = pytest.importorskip("torch")
    call, shape = CASES[name]
    x = distinct(shape, 1)
    tp, tt = leaf(x), torch.tensor(x, requires_grad=True)
    yp, yt = call(F, tp), call(torch.nn.functional, tt)
    assert yp.shape == tuple(yt.shape)
    np.testing.assert_allclose(yp.numpy(), yt.detach().numpy(), rtol=TOL, atol=TOL)
    w = rand(yp.shape, 2)
    (gp,), (gt,) = pa.grad(yp, [tp], grad_outputs=w), torch.autograd.grad(yt, [tt],
                                                                          torch.tensor(w))
    if "max" in name:   # where each gradient element goes matters, not only values
        np.testing.assert_array_equal(gp != 0, gt.numpy() != 0)
    np.testing.assert_allclose(gp, gt.numpy(), rtol=TOL, atol=TOL)


@pytest.mark.parametrize("name", [n for n in sorted(CASES) if "max" in n])
def test_return_indices_match_torch(name):
    torch = pytest.importorskip("torch")
    call, shape = CASES[name]
    x = distinct(shape, 3)

    class Ns:   # the case's op, called with return_indices=True
        def __init__(self, F):
            self.F = F

        def __getattr__(self, op):
            return lambda *a, **k: getattr(self.F, op)(*a, **k, return_indices=True)

    yp, ip = call(Ns(F), leaf(x))
    yt, it = call(Ns(torch.nn.functional), torch.tensor(x))
    np.testing.assert_array_equal(yp.numpy(), yt.numpy())
    assert ip.dtype == np.int64 and ip.shape == tuple(it.shape) and not ip.requires_grad
    np.testing.assert_array_equal(ip.numpy(), it.numpy())


def test_max_pool_gradient_goes_to_first_maximum_and_ties_like_torch():
    torch = pytest.importorskip("torch")
    x = np.round(rand((2, 2, 7, 6), 4))                 # many ties
    for call in (lambda F, x: F.max_pool2d(x, 3, 2, 1, dilation=(1, 2), ceil_mode=True),
                 lambda F, x: F.adaptive_max_pool2d(x, (3, 4)),
                 lambda F, x: F.max_pool1d(x.reshape(2, 2, 42), 4, 3, 2, ceil_mode=True)):
        tp, tt = leaf(x), torch.tensor(x, requires_grad=True)
        (gp,) = pa.grad(call(F, tp).sum(), [tp])
        (gt,) = torch.autograd.grad(call(torch.nn.functional, tt).sum(), [tt])
        np.testing.assert_array_equal(gp, gt.numpy())


def test_max_pool_all_minus_inf_window_and_nan_like_torch():
    torch = pytest.importorskip("torch")
    x = rand((1, 1, 7, 7), 5)
    x[0, 0, :3, :3] = -np.inf
    x[0, 0, 5, 5] = np.nan
    for k in (dict(kernel_size=3, stride=2, padding=1, dilation=2),
              dict(kernel_size=2, stride=2, padding=1, ceil_mode=True)):
        tp, tt = leaf(x), torch.tensor(x, requires_grad=True)
        yp, yt = F.max_pool2d(tp, **k), torch.nn.functional.max_pool2d(tt, **k)
        np.testing.assert_array_equal(yp.numpy(), yt.detach().numpy())
        (gp,) = pa.grad(yp, [tp], grad_outputs=np.ones(yp.shape))
        (gt,) = torch.autograd.grad(yt, [tt], torch.ones(yt.shape, dtype=torch.float64))
        np.testing.assert_array_equal(gp, gt.numpy())


# first and second order by finite differences
GRADGRAD = {
    "max_pool2d_ceil_dilated": lambda x: F.max_pool2d(x * x, 3, 2, 1, dilation=(1, 2),
                                                      ceil_mode=True),
    "max_pool1d": lambda x: F.max_pool1d(x * x, 3, 2, 1, ceil_mode=True).sum(-1),
    "avg_pool2d_ceil_exclude": lambda x: F.avg_pool2d(x * x, 3, 2, 1, ceil_mode=True,
                                                      count_include_pad=False),
    "avg_pool2d_divisor": lambda x: F.avg_pool2d(x * x, 2, 1, divisor_override=3),
    "avg_pool1d_ceil": lambda x: F.avg_pool1d(pa.tanh(x), 3, 2, 1, ceil_mode=True).sum(-1),
    "adaptive_avg_pool2d": lambda x: F.adaptive_avg_pool2d(x * x, (3, 2)),
    "adaptive_max_pool2d": lambda x: F.adaptive_max_pool2d(x * x, (3, 2)),
    "interpolate_nearest": lambda x: F.interpolate(x * x, scale_factor=1.7),
    "interpolate_bilinear": lambda x: F.interpolate(pa.tanh(x), size=(3, 7), mode="bilinear"),
    "interpolate_bicubic_corners": lambda x: F.interpolate(x * x, size=(5, 3), mode="bicubic",
                                                           align_corners=True),
    "pixel_shuffle": lambda x: F.pixel_shuffle(x * x, 2),
    "pixel_unshuffle": lambda x: F.pixel_unshuffle(x * x, 2),
}
_GG_SHAPES = {"max_pool1d": (1, 2, 7), "avg_pool1d_ceil": (1, 2, 7),
              "pixel_shuffle": (1, 4, 2, 3), "pixel_unshuffle": (1, 2, 4, 6)}


@pytest.mark.parametrize("name", sorted(GRADGRAD))
def test_gradcheck_and_gradgradcheck(name):
    x = leaf(distinct(_GG_SHAPES.get(name, (1, 2, 4, 5)), 6) + 0.013)   # no ties in x * x
    assert pa.gradcheck(GRADGRAD[name], [x])
    assert pa.gradgradcheck(GRADGRAD[name], [x])


@pytest.mark.parametrize("name", ["avg_pool2d_ceil_exclude", "interpolate_bilinear",
                                  "adaptive_max_pool2d", "pixel_shuffle"])
def test_third_derivatives(name):
    fn = GRADGRAD[name]
    x = leaf(distinct(_GG_SHAPES.get(name, (1, 2, 4, 5)), 6) + 0.013)

    def first_order(x):
        (g,) = pa.grad((fn(x) ** 2).sum(), [x], create_graph=True)
        return g

    assert pa.gradgradcheck(first_order, [x])


def test_double_backward_matches_torch():
    torch = pytest.importorskip("torch")
    x = distinct((2, 2, 6, 5), 7)

    def model(F, x):
        a = F.avg_pool2d(x * x, 3, 2, 1, ceil_mode=True, count_include_pad=False)
        b = F.interpolate(a, size=(4, 5), mode="bilinear")
        c = F.max_pool2d(x * b.sum(), 2, 2, ceil_mode=True)
        d = F.adaptive_avg_pool2d(F.pixel_unshuffle(F.pixel_shuffle(x[:, :, :4, :4].reshape(
            2, 8, 2, 2), 2), 2), 3)
        return (c * c).sum() + (d * d * d).sum()

    results = []
    for lib in (pa, torch):
        t = lib.tensor(x, requires_grad=True)
        gfn = pa.grad if lib is pa else torch.autograd.grad
        (g,) = gfn(model(lib.nn.functional, t), [t], create_graph=True)
        (gg,) = gfn((g * g).sum(), [t])
        results.append([np.asarray(a.numpy() if lib is pa else a.detach().numpy())
                        for a in (g, gg)])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-11)


def test_avg_pool_and_its_rule_are_adjoints():
    """avg_pool2d's derivative, `avg_pool_backward` (an op whose derivative is the pool
    again), is its adjoint, with PyTorch's divisors."""
    from parallel_autograd.nn import _pool
    x = leaf(rand((2, 3, 7, 6), 1))
    y = F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)
    g = rand(y.shape, 2)
    gx = _pool.avg_pool_backward(pa.tensor(g), x.shape, 2, **y.grad_fn.kwargs).numpy()
    assert np.isclose(np.vdot(g, y.numpy()), np.vdot(gx, x.numpy()), rtol=1e-12)


# ---- layers ----------------------------------------------------------------------------------
LAYERS = {
    "MaxPool1d": (lambda n: n.MaxPool1d(3, 2, 1, dilation=1, ceil_mode=True), (2, 3, 8)),
    "MaxPool2d": (lambda n: n.MaxPool2d(3, 2, 1, dilation=2, ceil_mode=True), (2, 3, 9, 8)),
    "AvgPool1d": (lambda n: n.AvgPool1d(3, 2, 1, ceil_mode=True, count_include_pad=False),
                  (2, 3, 8)),
    "AvgPool2d": (lambda n: n.AvgPool2d(3, 2, 1, ceil_mode=True, divisor_override=4),
                  (2, 3, 8, 7)),
    "AdaptiveAvgPool1d": (lambda n: n.AdaptiveAvgPool1d(3), (2, 3, 8)),
    "AdaptiveAvgPool2d": (lambda n: n.AdaptiveAvgPool2d((3, None)), (2, 3, 8, 7)),
    "AdaptiveMaxPool1d": (lambda n: n.AdaptiveMaxPool1d(3), (2, 3, 8)),
    "AdaptiveMaxPool2d": (lambda n: n.AdaptiveMaxPool2d(3), (2, 3, 8, 7)),
    "Upsample_nearest": (lambda n: n.Upsample(scale_factor=2), (2, 3, 3, 4)),
    "Upsample_bilinear": (lambda n: n.Upsample(size=(5, 6), mode="bilinear",
                                               align_corners=True), (2, 3, 3, 4)),
    "PixelShuffle": (lambda n: n.PixelShuffle(2), (2, 8, 3, 4)),
    "PixelUnshuffle": (lambda n: n.PixelUnshuffle(3), (2, 1, 6, 3)),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layers_match_torch(name):
    torch = pytest.importorskip("torch")
    make, shape = LAYERS[name]
    ours, theirs = make(nn), make(torch.nn)
    assert repr(ours) == repr(theirs)
    x = distinct(shape, 8)
    tp, tt = leaf(x), torch.tensor(x, requires_grad=True)
    yp, yt = ours(tp), theirs(tt)
    np.testing.assert_allclose(yp.numpy(), yt.detach().numpy(), rtol=TOL, atol=TOL)
    (yp * yp).sum().backward()
    (yt * yt).sum().backward()
    np.testing.assert_allclose(tp.grad, tt.grad.numpy(), rtol=TOL, atol=TOL)


def test_layers_return_indices():
    x = pa.tensor(distinct((1, 2, 6, 6), 9))
    for layer in (nn.MaxPool2d(2, return_indices=True), nn.AdaptiveMaxPool2d(3, True),
                  nn.MaxPool1d(2, return_indices=True), nn.AdaptiveMaxPool1d(2, True)):
        inp = x if "2d" in type(layer).__name__ else pa.reshape(x, (1, 2, 36))
        y, idx = layer(inp)
        plane = inp.shape[2:]
        flat = inp.numpy().reshape(inp.shape[:2] + (-1,))
        np.testing.assert_array_equal(
            np.take_along_axis(flat, idx.numpy().reshape(idx.shape[:2] + (-1,)), axis=2),
            y.numpy().reshape(y.shape[:2] + (-1,)))
        assert idx.numpy().max() < int(np.prod(plane))


# ---- bad input ----------------------------------------------------------------------------
@pytest.mark.parametrize("call,exc,match", [
    (lambda: F.max_pool2d(pa.ones(1, 1, 4, 4), 2, padding=2), ValueError,
     "max_pool2d: padding .* should be at most half"),
    (lambda: F.max_pool2d(pa.ones(1, 1, 4, 4), 3, dilation=2), ValueError,
     "max_pool2d: input size .4, 4. is too small"),
    (lambda: F.max_pool2d(pa.ones(1, 1, 4, 4), 2, dilation=0), ValueError,
     "max_pool2d: dilation must be positive"),
    (lambda: F.max_pool1d(pa.ones(4, 4, 4, 4), 2), ValueError,
     r"max_pool1d: expected a 3-D input \(N, C, L\) or 2-D"),
    (lambda: F.avg_pool1d(pa.ones(1, 1, 4), (2, 2)), ValueError,
     "avg_pool1d: kernel_size must be an int or a 1-tuple"),
    (lambda: F.avg_pool2d(pa.ones(1, 1, 4, 4), 2, divisor_override=0), ValueError,
     "avg_pool2d: divisor_override must be a non-zero integer"),
    (lambda: F.adaptive_avg_pool2d(pa.ones(1, 1, 4, 4), (2, 0)), ValueError,
     "adaptive_avg_pool2d: output_size must be positive"),
    (lambda: F.adaptive_max_pool2d(pa.ones(1, 1, 4, 4), (2, 2, 2)), ValueError,
     "adaptive_max_pool2d: output_size must be an int or 2 values"),
    (lambda: F.adaptive_avg_pool1d(pa.ones(4), 2), ValueError,
     "adaptive_avg_pool1d: expected a 2-D or 3-D input"),
    (lambda: F.interpolate(pa.ones(1, 1, 4, 4)), ValueError,
     "interpolate: exactly one of size or scale_factor"),
    (lambda: F.interpolate(pa.ones(1, 1, 4, 4), size=2, scale_factor=2), ValueError,
     "interpolate: exactly one of size or scale_factor"),
    (lambda: F.interpolate(pa.ones(1, 1, 4, 4), size=2, mode="cubic"), ValueError,
     "interpolate: mode must be one of"),
    (lambda: F.interpolate(pa.ones(1, 1, 4), size=2, mode="bilinear"), ValueError,
     "interpolate: mode 'bilinear' needs a 4-D input"),
    (lambda: F.interpolate(pa.ones(1, 1, 4, 4), size=2, align_corners=True), ValueError,
     "interpolate: align_corners option can only be set"),
    (lambda: F.interpolate(pa.ones(1, 1, 4, 4), scale_factor=0.1), ValueError,
     "interpolate: scale_factor 0.1 gives an empty output"),
    (lambda: F.interpolate(pa.ones(1, 1, 4, 4), size=(2, -1)), ValueError,
     "interpolate: size must be a positive int"),
    (lambda: F.interpolate(pa.ones(1, 1, 4, 4), size=3, antialias=True), NotImplementedError,
     "antialias"),
    (lambda: F.pixel_shuffle(pa.ones(1, 6, 2, 2), 2), ValueError,
     "pixel_shuffle: expected input .* divisible by upscale_factor"),
    (lambda: F.pixel_unshuffle(pa.ones(1, 1, 5, 4), 2), ValueError,
     "pixel_unshuffle: expected input .* divisible by downscale_factor 2"),
    (lambda: F.pixel_shuffle(pa.ones(1, 4, 2, 2), 0), ValueError,
     "pixel_shuffle: upscale_factor must be a positive integer"),
])
def test_bad_input_raises_clear_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


# ---- the parallel engine -------------------------------------------------------------------
def test_parallel_engine_is_bitwise_equal():
    x = leaf(distinct((2, 4, 6, 5), 10))
    w = leaf(rand((4, 3, 2), 11))

    def loss():
        a = F.max_pool2d(x * x, 3, 2, 1, dilation=(1, 2), ceil_mode=True)
        b = F.avg_pool2d(pa.tanh(x), 2, 1, 1, ceil_mode=True, count_include_pad=False)
        c = F.interpolate(b, size=(4, 9), mode="bicubic") * F.interpolate(a, size=(4, 9))
        d = F.adaptive_max_pool2d(c, (3, 2)) + F.adaptive_avg_pool2d(c, (3, 2))
        e = F.pixel_unshuffle(F.pixel_shuffle(pa.reshape(d, (2, 4, 3, 2)) * w, 2), 2)
        f = F.max_pool1d(pa.reshape(e, (2, 4, 6)), 2) + F.avg_pool1d(pa.reshape(e, (2, 4, 6)),
                                                                     2)
        return (f * f).sum()

    want = pa.grad(loss(), [x, w])
    with pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0) as eng:
        got = eng.grad(loss(), [x, w])
    assert_bitwise(list(want), list(got))
    first = pa.grad(loss(), [x, w], create_graph=True)
    want2 = pa.grad(sum((g * g).sum() for g in first), [x, w])
    with pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0) as eng:
        first = eng.grad(loss(), [x, w], create_graph=True)
        got2 = eng.grad(sum((g * g).sum() for g in first), [x, w])
    assert_bitwise(list(want2), list(got2))
