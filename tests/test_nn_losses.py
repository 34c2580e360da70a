"""The losses of nn.functional and nn (nn/_losses.py, nn/modules/loss.py): values and
gradients (input and target) against PyTorch for every option and reduction, first and
second derivatives by finite differences, the parallel engine bit for bit, bad input,
the memory of the fused pointwise nodes, and the modules."""
import numpy as np
import pytest

import parallel_autograd as pa
import parallel_autograd.nn.functional as F
from parallel_autograd import nn
from conftest import assert_bitwise, temporary_bytes

RNG = np.random.default_rng(15)
# PyTorch warns about broadcast targets and kl_div's 'mean'; both are exercised on purpose
pytestmark = pytest.mark.filterwarnings("ignore:Using a target size",
                                        "ignore:reduction.*divides the total loss")


def _target_offsets(x, gaps):
    """x minus offsets drawn from `gaps` (each away from every kink), with random signs."""
    d = RNG.choice(gaps, x.shape) * RNG.choice([-1.0, 1.0], x.shape)
    return x - d


X34 = RNG.standard_normal((3, 4))
Y34_L1 = _target_offsets(X34, [0.2, 0.45, 0.8, 1.3, 2.1])      # |x - y| away from 0, 0.5, 1
PROBS = RNG.uniform(0.05, 0.95, (3, 4))
SOFT = RNG.uniform(0.0, 1.0, (3, 4))
W4 = RNG.uniform(0.5, 2.0, 4)
W34 = RNG.uniform(0.5, 2.0, (3, 4))
LOGP = X34 - np.log(np.exp(X34).sum(axis=1, keepdims=True))
Q = RNG.uniform(0.1, 1.0, (3, 4))
Q /= Q.sum(axis=1, keepdims=True)
KDIM_T = RNG.integers(0, 3, (2, 4, 2))
KDIM_T[0, 1, 1] = -100
PM = np.array([1.0, -1.0, 1.0, -1.0])


def _triplet_inputs(n=4, d=5):
    a = RNG.standard_normal((n, d))
    return [a, a + RNG.uniform(-0.3, 0.3, (n, d)), a + RNG.uniform(-1.5, 1.5, (n, d))]


TRIPLET = _triplet_inputs()


def _c(lib, a):
    return lib.tensor(a)


# name -> (fn(F, lib, reduction, *inputs), input arrays, which require grad (PyTorch gives
# them a gradient), reductions). Inputs are kept away from the kinks of piecewise losses.
CASES = {
    "l1": (lambda F, lib, r, x, y: F.l1_loss(x, y, reduction=r), [X34, Y34_L1], [1, 1]),
    "l1_broadcast": (lambda F, lib, r, x, y: F.l1_loss(x, y, reduction=r),
                     [X34, Y34_L1[1]], [1, 1]),
    "l1_weight": (lambda F, lib, r, x, y, w: F.l1_loss(x, y, reduction=r, weight=w),
                  [X34, Y34_L1, W34], [1, 1, 1]),
    "smooth_l1": (lambda F, lib, r, x, y: F.smooth_l1_loss(x, y, reduction=r),
                  [X34, Y34_L1], [1, 1]),
    "smooth_l1_beta": (lambda F, lib, r, x, y: F.smooth_l1_loss(x, y, reduction=r, beta=0.6),
                       [X34, Y34_L1], [1, 1]),
    "smooth_l1_beta0": (lambda F, lib, r, x, y: F.smooth_l1_loss(x, y, reduction=r, beta=0.0),
                        [X34, Y34_L1], [1, 1]),
    "huber": (lambda F, lib, r, x, y: F.huber_loss(x, y, reduction=r), [X34, Y34_L1], [1, 1]),
    "huber_delta_broadcast": (lambda F, lib, r, x, y: F.huber_loss(x, y, r, delta=0.6),
                              [X34, Y34_L1[2]], [1, 1]),
    "huber_weight": (lambda F, lib, r, x, y, w: F.huber_loss(x, y, r, 0.6, weight=w),
                     [X34, Y34_L1, W34], [1, 1, 1]),
    "bce": (lambda F, lib, r, x, y: F.binary_cross_entropy(x, y, reduction=r),
            [PROBS, SOFT], [1, 1]),
    "bce_weight": (lambda F, lib, r, x, y: F.binary_cross_entropy(x, y, _c(lib, W4),
                                                                  reduction=r),
                   [PROBS, SOFT], [1, 1]),
    "bce_logits": (lambda F, lib, r, x, y: F.binary_cross_entropy_with_logits(x, y, reduction=r),
                   [X34 * 3, SOFT], [1, 1]),
    "bce_logits_weights": (
        lambda F, lib, r, x, y: F.binary_cross_entropy_with_logits(
            x, y, _c(lib, W34), reduction=r, pos_weight=_c(lib, W4[::-1].copy())),
        [X34 * 3, SOFT], [1, 1]),
    "kl_div": (lambda F, lib, r, x, y: F.kl_div(x, y, reduction=r), [LOGP, Q], [1, 1]),
    "kl_div_log_target": (lambda F, lib, r, x, y: F.kl_div(x, y, reduction=r, log_target=True),
                          [LOGP, np.log(Q)], [1, 1]),
    "kl_div_broadcast": (lambda F, lib, r, x, y: F.kl_div(x, y, reduction=r),
                         [LOGP, Q[0]], [1, 1]),
    "nll_kdim_weight_ignore": (
        lambda F, lib, r, x: F.nll_loss(x, _c(lib, KDIM_T), _c(lib, W4[:3]), reduction=r),
        [RNG.standard_normal((2, 3, 4, 2))], [1]),
    "nll_unbatched": (lambda F, lib, r, x: F.nll_loss(x, _c(lib, np.array(2)), reduction=r),
                      [RNG.standard_normal(4)], [1]),
    "cross_entropy_kdim_smoothing": (
        lambda F, lib, r, x: F.cross_entropy(x, _c(lib, KDIM_T), reduction=r,
                                             label_smoothing=0.2),
        [RNG.standard_normal((2, 3, 4, 2))], [1]),
    "cross_entropy_unbatched": (
        lambda F, lib, r, x: F.cross_entropy(x, _c(lib, np.array(1)), reduction=r),
        [RNG.standard_normal(5)], [1]),
    "cosine_embedding": (
        lambda F, lib, r, a, b: F.cosine_embedding_loss(a, b, _c(lib, PM), 0.1, reduction=r),
        [RNG.standard_normal((4, 5)), RNG.standard_normal((4, 5))], [1, 1]),
    "cosine_embedding_unbatched": (
        lambda F, lib, r, a, b: F.cosine_embedding_loss(a, b, _c(lib, np.array(-1.0)),
                                                        -0.5, reduction=r),
        [RNG.standard_normal(5), RNG.standard_normal(5)], [1, 1]),
    "margin_ranking": (
        lambda F, lib, r, a, b, t: F.margin_ranking_loss(a, b, t, 0.3, reduction=r),
        [np.array([0.1, 0.9, -0.4, 0.2]), np.array([0.5, 0.2, 0.8, -0.6]), PM], [1, 1, 1]),
    "triplet": (lambda F, lib, r, a, p, n: F.triplet_margin_loss(a, p, n, reduction=r),
                TRIPLET, [1, 1, 1]),
    "triplet_p1_swap": (lambda F, lib, r, a, p, n: F.triplet_margin_loss(
        a, p, n, margin=0.7, p=1, swap=True, reduction=r), TRIPLET, [1, 1, 1]),
    "triplet_p3_3d": (lambda F, lib, r, a, p, n: F.triplet_margin_loss(
        a, p, n, margin=2.0, p=3, eps=1e-3, reduction=r),
        [t.reshape(2, 2, 5) for t in TRIPLET], [1, 1, 1]),
}
REDUCTIONS = ("mean", "sum", "none")
PARAMS = [(n, r) for n in sorted(CASES) for r in REDUCTIONS] + [
    ("kl_div", "batchmean"), ("kl_div_log_target", "batchmean")]


def _torch():
    return pytest.importorskip("torch")


def _run(lib, F_, name, reduction, arrays, flags, seed_grad=None):
    """(output, gradients of sum(output * seed_grad) w.r.t. the inputs that require grad)."""
    fn = CASES[name][0]
    ts = [lib.tensor(a, requires_grad=bool(f)) for a, f in zip(arrays, flags)]
    out = fn(F_, lib, reduction, *ts)
    w = np.ones(out.shape) if seed_grad is None else seed_grad
    if lib is pa:
        gs = pa.grad(out, [t for t in ts if t.requires_grad], grad_outputs=w)
        return out.numpy(), gs
    torch = lib
    gs = torch.autograd.grad(out, [t for t in ts if t.requires_grad],
                             grad_outputs=torch.tensor(w))
    return out.detach().numpy(), [g.numpy() for g in gs]


@pytest.mark.parametrize("name,reduction", PARAMS)
def test_values_and_gradients_match_torch(name, reduction):
    torch = _torch()
    _, arrays, flags = CASES[name]
    out, grads = _run(pa, F, name, reduction, arrays, flags)
    w = RNG.uniform(0.5, 1.5, out.shape)
    out, grads = _run(pa, F, name, reduction, arrays, flags, w)
    t_out, t_grads = _run(torch, torch.nn.functional, name, reduction, arrays, flags, w)
    np.testing.assert_allclose(out, t_out, rtol=1e-10, atol=1e-12)
    assert out.shape == t_out.shape and out.dtype == np.float64
    for g, tg in zip(grads, t_grads):
        np.testing.assert_allclose(g, tg, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name,reduction", PARAMS)
def test_first_and_second_derivatives(name, reduction):
    fn, arrays, flags = CASES[name]
    inputs = [pa.tensor(a.copy(), requires_grad=bool(f)) for a, f in zip(arrays, flags)]
    f = lambda *ts: fn(F, pa, reduction, *ts)  # noqa: E731
    assert pa.gradcheck(f, inputs)
    assert pa.gradgradcheck(f, inputs)


def test_target_without_gradient_and_float32():
    x = pa.tensor(PROBS.astype(np.float32), requires_grad=True)
    for loss in (F.binary_cross_entropy(x, SOFT.astype(np.float32)),
                 F.binary_cross_entropy_with_logits(x, SOFT.astype(np.float32), reduction="none",
                                                    pos_weight=W4),   # float64 constants
                 F.binary_cross_entropy(x, SOFT.astype(np.float32), W34),
                 F.l1_loss(x, np.zeros(4, np.float32)), F.kl_div(x, SOFT.astype(np.float32)),
                 F.huber_loss(x, np.float32(0.5), reduction="sum")):
        assert loss.dtype == np.float32
        (g,) = pa.grad(loss.sum(), [x])
        assert g.dtype == np.float32 and g.shape == x.shape


def test_binary_cross_entropy_edges_as_torch():
    """log clamped at -100; the input gradient divided by max(x (1 - x), 1e-12)."""
    torch = _torch()
    x, y = np.array([0.0, 1.0, 0.0, 1e-300]), np.array([1.0, 0.0, 0.0, 0.5])
    xp = pa.tensor(x, requires_grad=True)
    out = F.binary_cross_entropy(xp, y, reduction="none")
    (g,) = pa.grad(out.sum(), [xp])
    xt = torch.tensor(x, requires_grad=True)
    ot = torch.nn.functional.binary_cross_entropy(xt, torch.tensor(y), reduction="none")
    ot.sum().backward()
    np.testing.assert_array_equal(out.numpy(), ot.detach().numpy())
    np.testing.assert_allclose(g, xt.grad.numpy(), rtol=1e-12)


def test_bce_with_logits_is_stable_for_large_logits():
    torch = _torch()
    x, y = np.array([-800.0, -40.0, 40.0, 800.0]), np.array([1.0, 0.0, 1.0, 0.0])
    xp = pa.tensor(x, requires_grad=True)
    out = F.binary_cross_entropy_with_logits(xp, y, reduction="none")
    (g,) = pa.grad(out.sum(), [xp])
    xt = torch.tensor(x, requires_grad=True)
    ot = torch.nn.functional.binary_cross_entropy_with_logits(xt, torch.tensor(y),
                                                              reduction="none")
    ot.sum().backward()
    np.testing.assert_allclose(out.numpy(), ot.detach().numpy(), rtol=1e-12, atol=0)
    np.testing.assert_allclose(g, xt.grad.numpy(), rtol=1e-12, atol=0)
    assert out.numpy()[0] == 800.0 and g[0] == -1.0


def test_kl_div_zero_target_contributes_nothing():
    out = F.kl_div(pa.tensor([-1.0, -2.0]), pa.tensor([0.0, 0.5]), reduction="none")
    np.testing.assert_allclose(out.numpy(), [0.0, 0.5 * (np.log(0.5) + 2.0)])


def test_parallel_engine_is_bitwise_sequential():
    x = pa.tensor(X34, requires_grad=True)
    y = pa.tensor(Y34_L1, requires_grad=True)
    a, p, n = (pa.tensor(t, requires_grad=True) for t in TRIPLET)
    logits = pa.tensor(RNG.standard_normal((2, 3, 4, 2)), requires_grad=True)

    def loss():
        h = pa.tanh(x)
        parts = [F.l1_loss(h, y), F.smooth_l1_loss(h, y, beta=0.5, reduction="sum"),
                 F.huber_loss(h, y, delta=0.3), F.binary_cross_entropy_with_logits(
                     h, pa.sigmoid(y), pos_weight=pa.tensor(W4)),
                 F.binary_cross_entropy(pa.sigmoid(h), pa.sigmoid(y)),
                 F.kl_div(F.log_softmax(h, 1), F.softmax(y, 1), reduction="batchmean"),
                 F.triplet_margin_loss(a, p, n, swap=True),
                 F.cosine_embedding_loss(a, n, PM), F.margin_ranking_loss(a[:, 0], p[:, 0], PM),
                 F.cross_entropy(logits, KDIM_T, label_smoothing=0.1)]
        return sum(parts[1:], parts[0])

    inputs = [x, y, a, p, n, logits]
    want = pa.grad(loss(), inputs)
    with pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0) as eng:
        got = eng.grad(loss(), inputs)
    assert_bitwise(want, got)
    # and the second order, through every twin
    (gx,) = pa.grad(loss(), [x], create_graph=True)
    want2 = pa.grad((gx * gx).sum(), inputs, allow_unused=True)
    with pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0) as eng:
        (gx,) = eng.grad(loss(), [x], create_graph=True)
        got2 = eng.grad((gx * gx).sum(), inputs, allow_unused=True)
    assert_bitwise(want2, got2)


@pytest.mark.parametrize("fn,exc,text", [
    (lambda: F.l1_loss(pa.ones(3), pa.ones(4)), ValueError, "l1_loss: shapes"),
    (lambda: F.l1_loss(pa.ones(3), pa.ones(3), reduction="avg"), ValueError,
     "l1_loss: reduction"),
    (lambda: F.l1_loss(pa.ones(3), pa.ones(3), weight=pa.ones(1)), ValueError,
     "l1_loss: weight shape"),
    (lambda: F.smooth_l1_loss(pa.ones(3), pa.ones(3), beta=-1), ValueError, "beta"),
    (lambda: F.huber_loss(pa.ones(3), pa.ones(3), delta=0.0), ValueError, "delta"),
    (lambda: F.binary_cross_entropy(pa.tensor([0.5, 1.5]), pa.ones(2)), ValueError,
     "between 0 and 1"),
    (lambda: F.binary_cross_entropy(pa.tensor([0.5, np.nan]), pa.ones(2)), ValueError,
     "between 0 and 1"),
    (lambda: F.binary_cross_entropy(pa.ones(2) * 0.5, pa.ones(3)), ValueError, "target shape"),
    (lambda: F.binary_cross_entropy(pa.ones(2) * 0.5, pa.ones(2),
                                    pa.ones(2, requires_grad=True)), RuntimeError,
     "weight cannot require grad"),
    (lambda: F.binary_cross_entropy_with_logits(pa.ones((2, 3)), pa.ones((2, 3)),
                                                pos_weight=pa.ones(2)), ValueError, "pos_weight"),
    (lambda: F.binary_cross_entropy_with_logits(pa.ones(2), pa.ones((2, 1))), ValueError,
     "target size"),
    (lambda: F.kl_div(pa.ones(2), pa.ones(2), reduction="batch"), ValueError, "batchmean"),
    (lambda: F.nll_loss(pa.ones((2, 3, 4)), np.zeros((2, 3), int)), ValueError,
     "nll_loss: target shape (2, 3) does not match input shape (2, 3, 4) (expected (2, 4))"),
    (lambda: F.nll_loss(pa.tensor(1.0), np.array(0)), ValueError, "nll_loss: expected 2-D"),
    (lambda: F.nll_loss(pa.ones((2, 3, 4)), np.zeros((2, 4))), TypeError, "class indices"),
    (lambda: F.nll_loss(pa.ones((2, 3, 4)), np.full((2, 4), 3)), IndexError, "out of bounds"),
    (lambda: F.cross_entropy(pa.ones(3), np.array([1])), ValueError, "(C,) with a 0-d target"),
    (lambda: F.cosine_embedding_loss(pa.ones((2, 3)), pa.ones((2, 4)), np.ones(2)),
     ValueError, "same shape"),
    (lambda: F.cosine_embedding_loss(pa.ones((2, 3)), pa.ones((2, 3)), np.ones(3)),
     ValueError, "target shape"),
    (lambda: F.margin_ranking_loss(pa.ones(3), pa.ones(3), pa.ones((1, 3))), ValueError,
     "same number of dimensions"),
    (lambda: F.triplet_margin_loss(pa.ones(3), pa.ones(3), pa.ones(3), margin=0), ValueError,
     "margin must be greater than 0"),
    (lambda: F.triplet_margin_loss(pa.ones(3), pa.ones(3), pa.ones(3), p=0), ValueError,
     "p must be positive"),
    (lambda: F.triplet_margin_loss(pa.ones(3), pa.ones((2, 3)), pa.ones(3)), ValueError,
     "same number of dimensions"),
])
def test_bad_input_raises_naming_the_op(fn, exc, text):
    with pytest.raises(exc, match=None) as info:
        fn()
    assert text in str(info.value), str(info.value)


def test_bad_input_records_nothing():
    x = pa.tensor([0.5, 2.0], requires_grad=True)
    with pytest.raises(ValueError):
        F.binary_cross_entropy(x, pa.ones(2))
    assert x.grad is None and x._accumulator is None


def test_fused_pointwise_losses_allocate_no_full_size_temporary():
    """A reduced loss's forward sums chunk by chunk (chunk buffers: 2 x 256 KiB); each rule
    allocates its gradient and chunk-sized scratch only. The input is 2 MiB."""
    x = pa.tensor(RNG.standard_normal((512, 512)), requires_grad=True)
    y = RNG.uniform(0, 1, (512, 512))
    full = x.numpy().nbytes
    for f in (lambda: F.binary_cross_entropy_with_logits(x, y, pos_weight=W4[:1]),
              lambda: F.smooth_l1_loss(x, y, reduction="sum"),
              lambda: F.kl_div(x, y, reduction="batchmean")):
        loss, extra = temporary_bytes(f)
        assert extra < full / 3, extra
        g, extra = temporary_bytes(lambda: pa.grad(loss, [x])[0])
        assert g.shape == x.shape and extra < full / 3, extra


# ---- modules ---------------------------------------------------------------------------------
MODULES = {
    "L1Loss": (lambda nn, lib: nn.L1Loss(reduction="sum"), "l1", "sum"),
    "SmoothL1Loss": (lambda nn, lib: nn.SmoothL1Loss(beta=0.6), "smooth_l1_beta", "mean"),
    "HuberLoss": (lambda nn, lib: nn.HuberLoss("none", 0.6), "huber_delta_broadcast", "none"),
    "BCELoss": (lambda nn, lib: nn.BCELoss(_c(lib, W4)), "bce_weight", "mean"),
    "BCEWithLogitsLoss": (lambda nn, lib: nn.BCEWithLogitsLoss(
        _c(lib, W34), pos_weight=_c(lib, W4[::-1].copy())), "bce_logits_weights", "mean"),
    "KLDivLoss": (lambda nn, lib: nn.KLDivLoss(reduction="batchmean", log_target=True),
                  "kl_div_log_target", "batchmean"),
    "TripletMarginLoss": (lambda nn, lib: nn.TripletMarginLoss(margin=0.7, p=1, swap=True),
                          "triplet_p1_swap", "mean"),
}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_match_functional_and_torch_repr(name):
    torch = _torch()
    make, case, reduction = MODULES[name]
    arrays = CASES[case][1]
    module = make(pa.nn, pa)
    got = module(*[pa.tensor(a) for a in arrays])
    want = CASES[case][0](F, pa, reduction, *[pa.tensor(a) for a in arrays])
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert repr(module) == repr(make(torch.nn, torch))
    assert list(module.state_dict()) == list(make(torch.nn, torch).state_dict())


def test_pair_modules_and_reduction_check():
    a, b = pa.tensor(RNG.standard_normal((4, 5))), pa.tensor(RNG.standard_normal((4, 5)))
    np.testing.assert_array_equal(pa.nn.CosineEmbeddingLoss(0.1)(a, b, PM).numpy(),
                                  F.cosine_embedding_loss(a, b, PM, 0.1).numpy())
    np.testing.assert_array_equal(
        pa.nn.MarginRankingLoss(0.2, "sum")(a[:, 0], b[:, 0], PM).numpy(),
        F.margin_ranking_loss(a[:, 0], b[:, 0], PM, 0.2, reduction="sum").numpy())
    with pytest.raises(ValueError, match="L1Loss: reduction"):
        pa.nn.L1Loss(reduction="batchmean")
    assert pa.nn.KLDivLoss(reduction="batchmean").reduction == "batchmean"


def test_nll_loss_module_takes_kdim_input():
    torch = _torch()
    x = RNG.standard_normal((2, 3, 4, 2))
    got = pa.nn.NLLLoss(reduction="sum")(pa.tensor(x), KDIM_T)
    want = torch.nn.NLLLoss(reduction="sum")(torch.tensor(x), torch.tensor(KDIM_T))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


# ---- cross_entropy with class probabilities (soft targets) -------------------------------------
SOFT_SHAPES = [(4, 5), (5,), (2, 3, 4, 2)]


def _soft(shape, seed):
    rng = np.random.default_rng(seed)
    t = rng.random(shape)
    return rng.standard_normal(shape), t / t.sum(axis=1 if len(shape) > 1 else 0, keepdims=True)


@pytest.mark.parametrize("shape", SOFT_SHAPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("label_smoothing,weighted", [(0.0, False), (0.2, True)])
def test_cross_entropy_probability_targets_match_torch(shape, reduction, label_smoothing,
                                                       weighted):
    torch = pytest.importorskip("torch")
    x, t = _soft(shape, 3)
    w = np.linspace(0.5, 1.5, shape[1] if len(shape) > 1 else shape[0]) if weighted else None
    xp, xt = pa.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    tp, tt = pa.tensor(t, requires_grad=True), torch.tensor(t, requires_grad=True)
    lp = F.cross_entropy(xp, tp, w, reduction=reduction, label_smoothing=label_smoothing)
    lt = torch.nn.functional.cross_entropy(
        xt, tt, None if w is None else torch.tensor(w), reduction=reduction,
        label_smoothing=label_smoothing)
    np.testing.assert_allclose(lp.numpy(), lt.detach().numpy(), rtol=1e-12, atol=1e-13)
    g = np.random.default_rng(4).standard_normal(tuple(lt.shape))
    pa.backward(lp, g if lt.ndim else None)
    lt.backward(torch.tensor(g) if lt.ndim else None)
    np.testing.assert_allclose(xp.grad, xt.grad.numpy(), rtol=1e-12, atol=1e-13)
    # the targets' gradient too (learnable soft targets, distillation)
    np.testing.assert_allclose(tp.grad, tt.grad.numpy(), rtol=1e-12, atol=1e-13)


def test_cross_entropy_probability_targets_get_gradients_at_second_order():
    x, t = _soft((3, 4), 6)
    f = lambda a, b: F.cross_entropy(a, b, label_smoothing=0.2)  # noqa: E731
    leaves = [pa.tensor(x, requires_grad=True), pa.tensor(t, requires_grad=True)]
    assert pa.gradcheck(f, leaves) and pa.gradgradcheck(f, leaves)


@pytest.mark.parametrize("op", ["nll_loss", "cross_entropy", "cross_entropy_smoothed"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("target", [[-100, -100, -100], [1, -100, 2], -100])
def test_ignored_rows_get_zero_gradient_as_torch(op, reduction, target):
    # every target ignored: the mean is 0/0 = NaN in both libraries, but PyTorch writes
    # nothing into ignored rows, so their gradient is 0, never NaN (one all-padding batch
    # must not poison the parameters)
    torch = pytest.importorskip("torch")
    t = np.array(target)
    x = np.random.default_rng(7).standard_normal((3, 4) if t.ndim else (4,))
    kw = {"reduction": reduction}
    if op == "cross_entropy_smoothed":
        kw["label_smoothing"] = 0.2
    name = "nll_loss" if op == "nll_loss" else "cross_entropy"
    xp, xt = pa.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    lp = getattr(F, name)(xp, t, **kw)
    lt = getattr(torch.nn.functional, name)(xt, torch.tensor(t), **kw)
    np.testing.assert_allclose(lp.numpy(), lt.detach().numpy(), rtol=1e-12, equal_nan=True)
    pa.backward(_total(lp))
    _total(lt).backward()
    np.testing.assert_allclose(xp.grad, xt.grad.numpy(), rtol=1e-12, atol=1e-15)
    assert np.isfinite(xp.grad.numpy()).all()
    (g,) = pa.grad(_total(getattr(F, name)(xp, t, **kw)), [xp], create_graph=True)
    np.testing.assert_allclose(g.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-15)


def _total(t):
    return t.sum() if t.ndim else t


def test_cross_entropy_probability_targets_gradcheck_and_module():
    x, t = _soft((3, 4, 2), 5)
    xp = pa.tensor(x, requires_grad=True)
    f = lambda a: F.cross_entropy(a, t, label_smoothing=0.1)  # noqa: E731
    assert pa.gradcheck(f, (xp,)) and pa.gradgradcheck(f, (xp,))
    # the gradient of the mean loss is (softmax - target) / N
    (g,) = pa.grad(F.cross_entropy(xp, t), [xp])
    p = np.exp(x - x.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    np.testing.assert_allclose(g, (p - t) / (3 * 2), rtol=1e-12, atol=1e-15)
    assert np.isclose(nn.CrossEntropyLoss()(xp, t).item(), F.cross_entropy(xp, t).item())
    with pytest.raises(ValueError, match="weight must have shape"):
        F.cross_entropy(xp, t, np.ones(3))
