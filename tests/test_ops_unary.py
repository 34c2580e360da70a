"""Unary math ops and the activations (ops/pointwise.py, ops/activations.py, nn layers): values and
gradients against PyTorch, finite differences (gradcheck), second derivatives through the
differentiable twins (gradgradcheck, and PyTorch's double backward), lean rules on large
arrays (the chunked path), bad input, and the parallel engine bitwise."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_bitwise, temporary_bytes

import parallel_autograd as pa
import parallel_autograd.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

RNG = np.random.default_rng(15)
TOL = dict(rtol=1e-10, atol=1e-12)

# name -> (pa op, torch op, input range): each op where it is smooth
OPS = {
    "tan": (pa.tan, torch.tan, (-1.2, 1.2)),
    "asin": (pa.asin, torch.asin, (-0.9, 0.9)),
    "acos": (pa.acos, torch.acos, (-0.9, 0.9)),
    "atan": (pa.atan, torch.atan, (-2, 2)),
    "sinh": (pa.sinh, torch.sinh, (-2, 2)),
    "cosh": (pa.cosh, torch.cosh, (-2, 2)),
    "asinh": (pa.asinh, torch.asinh, (-2, 2)),
    "acosh": (pa.acosh, torch.acosh, (1.2, 3)),
    "atanh": (pa.atanh, torch.atanh, (-0.9, 0.9)),
    "log1p": (pa.log1p, torch.log1p, (-0.5, 2)),
    "expm1": (pa.expm1, torch.expm1, (-2, 2)),
    "log2": (pa.log2, torch.log2, (0.3, 3)),
    "log10": (pa.log10, torch.log10, (0.3, 3)),
    "exp2": (pa.exp2, torch.exp2, (-2, 2)),
    "erf": (pa.erf, torch.erf, (-2.5, 2.5)),
    "erfc": (pa.erfc, torch.erfc, (-2.5, 2.5)),
    "reciprocal": (pa.reciprocal, torch.reciprocal, (0.3, 2)),
    "rsqrt": (pa.rsqrt, torch.rsqrt, (0.3, 2)),
    "square": (pa.square, torch.square, (-2, 2)),
    "sign": (pa.sign, torch.sign, (-2, 2)),
    "floor": (pa.floor, torch.floor, (-2, 2)),
    "ceil": (pa.ceil, torch.ceil, (-2, 2)),
    "round": (pa.round, torch.round, (-2, 2)),
    "round_2": (lambda x: pa.round(x, decimals=2), lambda x: torch.round(x, decimals=2),
                (-2, 2)),
    "trunc": (pa.trunc, torch.trunc, (-2, 2)),
    # activations (nn.functional); the kinks are avoided by the inputs (see `_input`)
    "softplus": (F.softplus, TF.softplus, (-3, 3)),
    "softplus_beta": (lambda x: F.softplus(x, beta=2.0, threshold=3.0),
                      lambda x: TF.softplus(x, beta=2.0, threshold=3.0), (-3, 3)),
    "softsign": (F.softsign, TF.softsign, (-3, 3)),
    "mish": (F.mish, TF.mish, (-3, 3)),
    "elu": (F.elu, TF.elu, (-3, 3)),
    "elu_alpha": (lambda x: F.elu(x, alpha=0.7), lambda x: TF.elu(x, alpha=0.7), (-3, 3)),
    "selu": (F.selu, TF.selu, (-3, 3)),
    "celu": (lambda x: F.celu(x, alpha=1.5), lambda x: TF.celu(x, alpha=1.5), (-3, 3)),
    "hardtanh": (F.hardtanh, TF.hardtanh, (-2, 2)),
    "hardtanh_bounds": (lambda x: F.hardtanh(x, -0.5, 1.5),
                        lambda x: TF.hardtanh(x, -0.5, 1.5), (-2, 2)),
    "hardsigmoid": (F.hardsigmoid, TF.hardsigmoid, (-4, 4)),
    "hardswish": (F.hardswish, TF.hardswish, (-4, 4)),
    "logsigmoid": (F.logsigmoid, TF.logsigmoid, (-4, 4)),
    "glu": (F.glu, TF.glu, (-2, 2)),
    "glu_dim0": (lambda x: F.glu(x, dim=0), lambda x: TF.glu(x, dim=0), (-2, 2)),
}
KINKS = {"sign": [0], "floor": [-1, 0, 1], "ceil": [-1, 0, 1], "round": [-1.5, -0.5, 0.5, 1.5],
         "trunc": [-1, 0, 1], "hardtanh": [-1, 1], "hardtanh_bounds": [-0.5, 1.5],
         "hardsigmoid": [-3, 3], "hardswish": [-3, 3], "elu": [0], "elu_alpha": [0],
         "selu": [0], "celu": [0], "softplus_beta": [1.5]}
ZERO_GRAD = {"sign", "floor", "ceil", "round", "round_2", "trunc"}


def _input(name, shape=(4, 6), seed=0, kinks=True):
    lo, hi = OPS[name][2]
    x = np.random.default_rng(seed).uniform(lo, hi, shape)
    if not kinks:
        return x
    for k in KINKS.get(name, []) + ([c / 100 for c in range(-200, 201, 1)]
                                    if name == "round_2" else []):
        near = np.abs(x - k) < 0.02         # no finite difference crosses a kink
        x[near] = k + 0.05
    return x


def _pa_grads(op, x, w, v):
    """(y, dy/dx . w, d/dx <dy/dx . w, v>) through create_graph."""
    t = pa.tensor(x, requires_grad=True)
    y = op(t)
    (g,) = pa.grad(y, [t], grad_outputs=pa.tensor(w), create_graph=True)
    if not g.requires_grad:                 # 0, a function of the constant w alone
        return y.numpy(), g.numpy(), np.zeros_like(x)
    (h,) = pa.grad((g * pa.tensor(v)).sum(), [t], allow_unused=True)
    return y.numpy(), g.numpy(), np.zeros_like(x) if h is None else h


def top_has_double_backward(op) -> bool:
    """PyTorch has none for hardsigmoid (its second derivative is 0 where it exists)."""
    return op is not TF.hardsigmoid


def _torch_grads(op, x, w, v):
    t = torch.tensor(x, requires_grad=True)
    y = op(t)
    (g,) = torch.autograd.grad(y, t, torch.tensor(w), create_graph=True)
    h = None
    if g.requires_grad and top_has_double_backward(op):
        (h,) = torch.autograd.grad((g * torch.tensor(v)).sum(), t, allow_unused=True)
    return (y.detach().numpy(), g.detach().numpy(),
            np.zeros_like(x) if h is None else h.numpy())


@pytest.mark.parametrize("name", sorted(OPS))
def test_values_gradients_and_double_backward_match_torch(name):
    op, top, _ = OPS[name]
    x = _input(name)
    y = op(pa.tensor(x))
    rng = np.random.default_rng(1)
    w, v = rng.uniform(0.5, 1.5, y.shape), rng.uniform(0.5, 1.5, x.shape)
    for got, want, what in zip(_pa_grads(op, x, w, v), _torch_grads(top, x, w, v),
                               ("value", "gradient", "second derivative")):
        # hardsigmoid too: its gradient uses PyTorch's factor (1/6 rounded to float32)
        np.testing.assert_allclose(got, want, err_msg=f"{name}: {what}", **TOL)


@pytest.mark.parametrize("name", sorted(OPS))
def test_gradcheck_and_gradgradcheck(name):
    op = OPS[name][0]
    x = _input(name, (4, 4), seed=2)
    assert pa.gradcheck(op, [pa.tensor(x, requires_grad=True)])
    assert pa.gradgradcheck(op, [pa.tensor(x, requires_grad=True)])


@pytest.mark.parametrize("name", sorted(ZERO_GRAD))
def test_piecewise_constant_ops_have_zero_gradient_at_every_order(name):
    x = pa.tensor(_input(name), requires_grad=True)
    y = OPS[name][0](x)
    assert y.requires_grad                   # a node, as PyTorch's (its gradient is 0)
    (g,) = pa.grad((y * y).sum(), [x], create_graph=True)
    np.testing.assert_array_equal(g.numpy(), 0.0)
    (h,) = pa.grad(g.sum(), [x], allow_unused=True)
    assert h is None or not np.any(h.numpy())


def test_edges_match_torch():
    # kinks, NaN, overflow and the values at the bounds, where PyTorch picks a gradient
    x = np.array([-4.0, -3.0, -1.0, -0.0, 0.0, 1.0, 3.0, 4.0, 25.0, -800.0, 800.0, np.nan])
    for name in ("hardtanh", "hardsigmoid", "hardswish", "elu", "selu", "celu", "softplus",
                 "logsigmoid", "mish", "softsign", "sign", "floor", "round"):
        op, top, _ = OPS[name]
        t = torch.tensor(x, requires_grad=True)
        top(t).sum().backward()
        p = pa.tensor(x, requires_grad=True)
        with np.errstate(all="ignore"):
            op(p).sum().backward()
            y = op(pa.tensor(x)).numpy()
        np.testing.assert_allclose(y, top(torch.tensor(x)).numpy(), err_msg=name, **TOL)
        np.testing.assert_allclose(p.grad, t.grad.numpy(), err_msg=name, **TOL)


def test_softplus_with_beta_zero_computes_as_torch():
    # PyTorch computes log1p(exp(0)) / 0 = inf (it was refused here with a ValueError)
    x = np.array([-1.0, 0.5, 2.0])
    t = torch.tensor(x, requires_grad=True)
    TF.softplus(t, beta=0).sum().backward()
    p = pa.tensor(x, requires_grad=True)
    F.softplus(p, beta=0).sum().backward()
    np.testing.assert_array_equal(F.softplus(pa.tensor(x), beta=0).numpy(),
                                  TF.softplus(torch.tensor(x), beta=0).numpy())
    np.testing.assert_array_equal(p.grad, t.grad.numpy())


def test_domain_edges_give_torchs_inf_and_nan_without_warnings():
    x = np.array([-2.0, -1.0, 0.0, 1.0, 2.0])
    with np.errstate(all="raise"):          # a numpy warning would raise here
        for name in ("asin", "acos", "acosh", "atanh", "log1p", "log2", "log10", "rsqrt",
                     "reciprocal"):
            op, top, _ = OPS[name]
            np.testing.assert_allclose(op(pa.tensor(x)).numpy(), top(torch.tensor(x)).numpy(),
                                       err_msg=name, **TOL)


def test_float32_stays_float32():
    x = _input("tan").astype(np.float32)
    for name in ("tan", "erf", "rsqrt", "softplus", "mish", "elu", "logsigmoid", "hardswish",
                 "glu", "round"):
        t = pa.tensor(np.abs(x) + 0.1, requires_grad=True)
        y = OPS[name][0](t)
        assert y.dtype == np.float32, name
        y.sum().backward()
        assert t.grad.dtype == np.float32, name


def test_integer_inputs():
    i = pa.tensor(np.array([-2, 0, 3]))
    assert pa.floor(i).dtype.kind == "i" and pa.sign(i).dtype.kind == "i"
    np.testing.assert_allclose(pa.erf(i).numpy(), torch.erf(torch.tensor([-2.0, 0, 3])).numpy())
    np.testing.assert_allclose(pa.square(i).numpy(), [4, 0, 9])


def test_tensor_methods_and_top_level_names():
    x = pa.tensor(_input("tan"))
    for name in ("tan", "asin", "atan", "sinh", "log1p", "expm1", "exp2", "erf", "erfc",
                 "square", "sign", "floor", "ceil", "trunc", "round"):
        np.testing.assert_array_equal(getattr(x, name)().numpy(), getattr(pa, name)(x).numpy())
    # F's selu and celu are their in-place forms (inplace=True writes the input)
    assert F.selu.__wrapped__ is pa.selu and F.celu.__wrapped__ is pa.celu
    assert pa.prelu is F.prelu
    assert "round" not in pa.__all__ and "tan" in pa.__all__
    w = pa.tensor(np.linspace(0.1, 0.6, 6))
    np.testing.assert_array_equal(x.prelu(w).numpy(), F.prelu(x, w).numpy())


# ---- prelu --------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, wsize", [((3, 4), 4), ((2, 3, 5), 3), ((2, 3, 2, 2), 1),
                                          ((5,), 1), ((2, 3, 4), 1)])
def test_prelu_against_torch(shape, wsize):
    x = RNG.uniform(-2, 2, shape)
    x[np.abs(x) < 0.05] = 0.3
    w = RNG.uniform(-0.5, 0.5, wsize)
    rng = np.random.default_rng(3)
    gy = rng.uniform(0.5, 1.5, shape)
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    yt = TF.prelu(xt, wt)
    gx_t, gw_t = torch.autograd.grad(yt, (xt, wt), torch.tensor(gy), create_graph=True)
    hx_t, hw_t = torch.autograd.grad((gx_t.sum() + gw_t.sum()) ** 2, (xt, wt))
    xp, wp = pa.tensor(x, requires_grad=True), pa.tensor(w, requires_grad=True)
    yp = F.prelu(xp, wp)
    gx_p, gw_p = pa.grad(yp, [xp, wp], grad_outputs=pa.tensor(gy), create_graph=True)
    hx_p, hw_p = pa.grad((gx_p.sum() + gw_p.sum()) ** 2, [xp, wp])
    np.testing.assert_allclose(yp.numpy(), yt.detach().numpy(), **TOL)
    for got, want in ((gx_p.numpy(), gx_t), (gw_p.numpy(), gw_t), (hx_p, hx_t), (hw_p, hw_t)):
        np.testing.assert_allclose(got, want.detach().numpy(), **TOL)
    fn = lambda a, b: F.prelu(a, b)  # noqa: E731
    assert pa.gradcheck(fn, [pa.tensor(x, requires_grad=True), pa.tensor(w, requires_grad=True)])
    assert pa.gradgradcheck(fn, [pa.tensor(x, requires_grad=True),
                                 pa.tensor(w, requires_grad=True)])


# ---- layers -------------------------------------------------------------------------------
LAYERS = [
    ("Softplus", dict(beta=2.0, threshold=5.0)), ("Softsign", {}), ("Mish", {}),
    ("ELU", dict(alpha=0.5)), ("SELU", {}), ("CELU", dict(alpha=2.0)),
    ("Hardtanh", dict(min_val=-0.5, max_val=0.7)), ("Hardsigmoid", {}), ("Hardswish", {}),
    ("LogSigmoid", {}), ("GLU", dict(dim=1)), ("PReLU", dict(num_parameters=4, init=0.1)),
    ("PReLU", {}),
]


@pytest.mark.parametrize("name, kwargs", LAYERS, ids=[f"{n}{k}" for n, k in LAYERS])
def test_layers_match_torch_layers(name, kwargs):
    x = RNG.uniform(-4, 4, (3, 4, 2))
    ours, theirs = getattr(pa.nn, name)(**kwargs), getattr(torch.nn, name)(**kwargs).double()
    if name == "PReLU":                     # torch's init went through float32
        ours.weight.numpy()[...] = theirs.weight.detach().numpy()
    xp, xt = pa.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    yp, yt = ours(xp), theirs(xt)
    np.testing.assert_allclose(yp.numpy(), yt.detach().numpy(), **TOL)
    yp.sum().backward()
    yt.sum().backward()
    tol = dict(rtol=1e-7) if name == "Hardsigmoid" else TOL
    np.testing.assert_allclose(xp.grad, xt.grad.numpy(), **tol)
    if name == "PReLU":
        np.testing.assert_allclose(ours.weight.grad, theirs.weight.grad.numpy(), **TOL)
        assert [n for n, _ in ours.named_parameters()] == ["weight"]
    assert repr(ours).startswith(name + "(")


def test_prelu_layer_trains_its_weight():
    layer = pa.nn.PReLU(3, init=0.2, dtype=np.float32)
    assert layer.weight.dtype == np.float32 and layer.weight.requires_grad
    x = pa.tensor(-np.ones((2, 3, 4), np.float32))
    layer(x).sum().backward()
    np.testing.assert_allclose(layer.weight.grad, [-8.0, -8.0, -8.0])
    layer.weight.numpy()[...] = 5
    layer.reset_parameters()
    np.testing.assert_allclose(layer.weight.numpy(), 0.2)


# ---- bad input ---------------------------------------------------------------------------
def test_bad_arguments_are_refused_before_anything_is_recorded():
    x = pa.tensor(RNG.standard_normal((2, 3)), requires_grad=True)
    cases = [
        # PyTorch's exception types
        (lambda: F.prelu(x, pa.tensor([0.1, 0.2])), RuntimeError,
         "prelu: Mismatch of parameter numbers"),
        (lambda: F.prelu(x, pa.tensor(np.ones((3, 1)))), RuntimeError,
         "prelu: Expected `weight` to be a scalar or 1D"),
        (lambda: F.glu(x, dim=1), RuntimeError, "glu: Halving dimension must be even"),
        (lambda: F.glu(x, dim=2), IndexError, "glu: Dimension out of range"),
        (lambda: F.glu(pa.tensor(1.0)), RuntimeError, "glu: glu does not support scalars"),
        (lambda: F.hardtanh(x, 1.0, -1.0), ValueError, "hardtanh: min_val"),
        (lambda: F.softplus(x, beta="1"), TypeError, "softplus: beta must be a number"),
        (lambda: F.celu(x, alpha=0.0), RuntimeError, "celu: ZeroDivisionError"),
        (lambda: F.gelu(x, approximate="erf"), RuntimeError, "gelu: approximate argument"),
        (lambda: F.elu(x, alpha=None), TypeError, "elu: alpha must be a number"),
        (lambda: pa.round(x, decimals=1.5), TypeError, "round: decimals must be an int"),
        (lambda: pa.nn.PReLU(0), ValueError, "PReLU: num_parameters"),
        (lambda: pa.nn.PReLU(2, dtype=np.int32), TypeError, "PReLU: dtype"),
        (lambda: pa.nn.Hardtanh(2.0, 1.0), ValueError, "Hardtanh: min_val"),
    ]
    for fn, exc, match in cases:
        with pytest.raises(exc, match=match):
            fn()
    assert x.grad is None


# ---- lean rules on large arrays (the chunked path of the fused kernels) ---------------------
LARGE = (1000, 1000)
SLACK = 0.1 * 8 * LARGE[0] * LARGE[1]   # no full-size temporary fits; chunk scratch does
SPECIAL_SCRATCH = 4.5 * 2**20           # ops.special's chunk scratch (erf, erfc), any size


@pytest.fixture
def one_torch_thread():
    """PyTorch on one thread while comparing large arrays (its thread pool contends
    with the other test processes of a loaded 2-core machine), restored after."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("name", sorted(set(OPS) - {"glu", "glu_dim0"}))
def test_rules_on_large_arrays_allocate_only_their_result_and_match_torch(name,
                                                                         one_torch_thread):
    op, top, _ = OPS[name]
    x = _input(name, LARGE, seed=5, kinks=False)
    y = op(pa.tensor(x, requires_grad=True))
    node = y.grad_fn
    g = np.random.default_rng(6).uniform(0.5, 1.5, LARGE)
    before = [np.copy(a) for a in (g, *node.saved)]
    grad, extra = temporary_bytes(node.vjps[0], g, *node.saved, **(node.kwargs or {}))
    assert extra < SLACK, f"{name}: the rule allocated {extra} bytes beyond its result"
    for a, b in zip((g, *node.saved), before):
        np.testing.assert_array_equal(a, b, err_msg=f"{name} wrote into an argument")
    t = torch.tensor(x, requires_grad=True)
    top(t).backward(torch.tensor(g))
    np.testing.assert_allclose(grad, t.grad.numpy(), err_msg=name, **TOL)
    _, extra = temporary_bytes(op, pa.tensor(x))
    if name in ("erf", "erfc"):
        extra -= SPECIAL_SCRATCH
    assert extra < SLACK, f"{name}: the forward allocated {extra} bytes beyond its result"


def test_glu_rule_on_a_large_array_allocates_only_its_result(one_torch_thread):
    x = RNG.standard_normal((1000, 1000))
    y = F.glu(pa.tensor(x, requires_grad=True), dim=0)
    g = np.random.default_rng(6).uniform(0.5, 1.5, y.shape)
    grad, extra = temporary_bytes(y.grad_fn.vjps[0], g, *y.grad_fn.saved, **y.grad_fn.kwargs)
    assert extra < SLACK
    t = torch.tensor(x, requires_grad=True)
    TF.glu(t, dim=0).backward(torch.tensor(g))
    np.testing.assert_allclose(grad, t.grad.numpy(), **TOL)


# ---- the parallel engine -------------------------------------------------------------------
def test_parallel_engine_is_bitwise_the_sequential_one():
    def graph(x, w):
        a = pa.tan(x * 0.3) + pa.erf(x) * pa.asinh(x) + pa.square(pa.expm1(x * 0.5))
        b = F.mish(x) * F.softplus(x, beta=2.0) + F.selu(x) + F.hardswish(x * 3)
        c = F.prelu(x, w) * F.logsigmoid(x) + F.glu(pa.concat([x, x * 2], axis=1), dim=1)
        return (a * b + c * pa.rsqrt(x * x + 1) + pa.floor(x) * x).sum()

    x = RNG.standard_normal((64, 8))
    w = np.full(8, 0.2)
    xs = [pa.tensor(x, requires_grad=True), pa.tensor(w, requires_grad=True)]
    want = pa.grad(graph(*xs), xs)
    with pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0) as eng:
        got = eng.grad(graph(*xs), xs)
        # second order too: the twins recorded by both engines
        first = eng.grad(graph(*xs), xs, create_graph=True)
        got2 = eng.grad(sum(g.sum() for g in first), xs)
    first = pa.grad(graph(*xs), xs, create_graph=True)
    want2 = pa.grad(sum(g.sum() for g in first), xs)
    assert_bitwise(want, got)
    assert_bitwise(want2, got2)
    for a, b in zip(want, got):
        assert np.array_equal(a, b) and a.numpy().tobytes() == b.numpy().tobytes()


def test_relu_gradient_at_nan_is_torchs():
    # PyTorch's threshold_backward passes g where not x <= 0: NaN included (it was 0)
    x = np.array([np.nan, -1.0, 0.0, 2.0, np.inf, -np.inf])
    for op, top in ((pa.relu, torch.relu), (F.relu, TF.relu)):
        p, t = pa.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        (gp,) = pa.grad(op(p), [p], grad_outputs=np.arange(1.0, 7.0))
        (gt,) = torch.autograd.grad(top(t), [t], torch.arange(1.0, 7.0, dtype=torch.float64))
        np.testing.assert_array_equal(gp, gt.numpy())
