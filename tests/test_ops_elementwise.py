"""Elementwise ops: gradients (finite differences), broadcasting on both sides, scalars
and arrays on either side, float32, edge cases and error messages."""
import warnings

import numpy as np
import pytest

import parallel_autograd as pa


def rand(shape, seed=0, low=None, high=None):
    rng = np.random.default_rng(seed)
    if low is None:
        return rng.standard_normal(shape)
    return rng.uniform(low, high, shape)


def leaf(a):
    return pa.tensor(a, requires_grad=True)


# name -> (fn, input domain (low, high) or None for standard normal)
UNARY = {
    "neg": (pa.neg, None),
    "abs": (pa.abs, None),
    "exp": (pa.exp, None),
    "log": (pa.log, (0.5, 3.0)),
    "sqrt": (pa.sqrt, (0.5, 3.0)),
    "sin": (pa.sin, None),
    "cos": (pa.cos, None),
    "tanh": (pa.tanh, None),
    "sigmoid": (pa.sigmoid, None),
    "relu": (pa.relu, None),
    "leaky_relu": (lambda x: pa.leaky_relu(x, 0.2), None),
    "gelu": (pa.gelu, None),
    "gelu_tanh": (lambda x: pa.gelu(x, approximate="tanh"), None),
    "silu": (pa.silu, None),
    "clip": (lambda x: pa.clip(x, -0.5, 0.7), None),
    "clip_min_only": (lambda x: pa.clip(x, min=-0.3), None),
    "clamp_max_only": (lambda x: pa.clamp(x, max=0.2), None),
}

BINARY = {
    "add": (pa.add, None),
    "sub": (pa.sub, None),
    "mul": (pa.mul, None),
    "div": (pa.div, (0.5, 2.0)),
    "pow": (pa.pow, (0.5, 2.0)),
    "maximum": (pa.maximum, None),
    "minimum": (pa.minimum, None),
}

BROADCAST_SHAPES = [
    ((2, 3), (2, 3)),
    ((2, 3), (3,)),
    ((3,), (2, 3)),
    ((2, 1), (1, 3)),
    ((), (2, 3)),
    ((2, 3), ()),
    ((4, 1, 3), (2, 1)),
    ((), ()),
]


@pytest.mark.parametrize("shape", [(), (5,), (2, 3), (2, 1, 3)])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_gradcheck(name, shape):
    fn, dom = UNARY[name]
    x = rand(shape, seed=len(shape)) if dom is None else rand(shape, 1, *dom)
    assert pa.gradcheck(fn, [leaf(x)])


@pytest.mark.parametrize("shapes", BROADCAST_SHAPES, ids=str)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_gradcheck_broadcasting(name, shapes):
    fn, dom = BINARY[name]
    a = rand(shapes[0], 1) if dom is None else rand(shapes[0], 1, *dom)
    b = rand(shapes[1], 2) if dom is None else rand(shapes[1], 2, *dom)
    out = fn(leaf(a), leaf(b))
    assert out.shape == np.broadcast_shapes(*shapes)
    assert pa.gradcheck(fn, [leaf(a), leaf(b)])


OPERATORS = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "div": (lambda a, b: a / b, np.divide),
    "pow": (lambda a, b: a ** b, np.power),
}


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("other", ["int", "float", "ndarray", "np_scalar"])
@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_operator_with_non_tensor_on_either_side(name, other, side):
    op, ref = OPERATORS[name]
    x = rand((2, 3), 3, 0.5, 2.0)
    c = {"int": 2, "float": 1.5, "ndarray": rand((3,), 4, 0.5, 2.0),
         "np_scalar": np.float64(1.25)}[other]
    t = leaf(x)
    out = op(t, c) if side == "left" else op(c, t)
    expected = ref(x, c) if side == "left" else ref(c, x)
    assert isinstance(out, pa.Tensor)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-13)
    assert pa.gradcheck(lambda u: op(u, c) if side == "left" else op(c, u), [leaf(x)])


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_gradient_flows_only_to_tensors(name):
    fn, dom = BINARY[name]
    x = rand((2, 3), 5, 0.5, 2.0)
    t = leaf(x)
    fn(x * 0.9, t).sum().backward()
    assert t.grad.shape == (2, 3) and np.all(np.isfinite(t.grad.numpy()))


@pytest.mark.parametrize("name", sorted(UNARY) + sorted(BINARY))
def test_float32_keeps_dtype_and_matches_float64(name):
    fn, dom = UNARY.get(name) or BINARY[name]
    n_in = 2 if name in BINARY else 1
    arrays = [rand((3, 4), i) if dom is None else rand((3, 4), i, *dom) for i in range(n_in)]
    t32 = [pa.tensor(a.astype(np.float32), requires_grad=True) for a in arrays]
    t64 = [leaf(a) for a in arrays]
    y32, y64 = fn(*t32), fn(*t64)
    assert y32.dtype == np.float32
    np.testing.assert_allclose(y32.numpy(), y64.numpy(), rtol=1e-5, atol=1e-6)
    y32.sum().backward()
    y64.sum().backward()
    for a, b in zip(t32, t64):
        assert a.grad.dtype == np.float32
        np.testing.assert_allclose(a.grad, b.grad, rtol=1e-4, atol=1e-5)


def test_float32_with_python_and_numpy_scalars_stays_float32():
    t = pa.tensor(np.ones(3, np.float32), requires_grad=True)
    for y in (t * 2.0, 2.0 * t, t * np.float64(3.0), np.sqrt(4.0) / t, t ** np.float64(2),
              pa.maximum(t, np.float64(0.5)), pa.where(t.data > 0, t, 0.0), pa.clip(t, 0.0, 0.5)):
        assert y.dtype == np.float32
    (t * np.float64(3.0)).sum().backward()
    assert t.grad.dtype == np.float32
    np.testing.assert_array_equal(t.grad, [3, 3, 3])


def test_zero_dim_tensors():
    x, y = leaf(1.5), leaf(-0.5)
    z = pa.tanh(x * y + pa.exp(y))
    assert z.shape == ()
    gx, gy = pa.grad(z, [x, y])
    assert gx.shape == () and gy.shape == ()
    assert pa.gradcheck(lambda a, b: pa.tanh(a * b + pa.exp(b)), [leaf(1.5), leaf(-0.5)])


def test_integer_tensors_promote_like_numpy():
    t = pa.tensor(np.array([1, 2, 3]))
    assert (t * 0.5).dtype == np.float64
    assert (t + 1).dtype == t.dtype
    with pytest.raises(NotImplementedError, match="\"gelu\" not implemented for 'Long'"):
        pa.gelu(t)  # PyTorch has no integer kernel for gelu


# ---- semantics at special points (PyTorch's conventions) ------------------------------
def test_pow_gradients_at_zero():
    x = leaf(np.array([0.0, 0.0, 2.0]))
    (x ** 0).sum().backward()
    np.testing.assert_array_equal(x.grad, [0, 0, 0])   # not 0 * inf = nan
    base, expo = leaf(np.array([0.0, 0.0, 2.0])), leaf(np.array([2.0, 0.0, 3.0]))
    pa.pow(base, expo).sum().backward()
    np.testing.assert_array_equal(base.grad, [0.0, 0.0, 12.0])
    np.testing.assert_allclose(expo.grad, [0.0, 0.0, 8 * np.log(2)])


def test_maximum_minimum_ties_split_gradient():
    a, b = leaf(np.array([1.0, 2.0, 3.0])), leaf(np.array([1.0, 5.0, 0.0]))
    pa.maximum(a, b).sum().backward()
    np.testing.assert_array_equal(a.grad, [0.5, 0, 1])
    np.testing.assert_array_equal(b.grad, [0.5, 1, 0])
    a, b = leaf(np.array([1.0, 2.0, 3.0])), leaf(np.array([1.0, 5.0, 0.0]))
    pa.minimum(a, b).sum().backward()
    np.testing.assert_array_equal(a.grad, [0.5, 1, 0])
    np.testing.assert_array_equal(b.grad, [0.5, 0, 1])


def test_clip_gradient_includes_bounds():
    x = leaf(np.array([-2.0, -1.0, 0.5, 1.0, 2.0]))
    pa.clip(x, -1.0, 1.0).sum().backward()
    np.testing.assert_array_equal(x.grad, [0, 1, 1, 1, 0])
    np.testing.assert_array_equal(pa.clip(x, -1.0, 1.0).numpy(), [-1, -1, 0.5, 1, 1])


def test_clip_accepts_tensor_bounds_and_requires_one():
    x = leaf(np.array([-2.0, 0.0, 2.0]))
    np.testing.assert_array_equal(pa.clip(x, pa.tensor(-1.0), pa.tensor(1.0)).numpy(), [-1, 0, 1])
    with pytest.raises(RuntimeError, match="clamp: At least one"):   # PyTorch's type
        pa.clip(x)


@pytest.mark.parametrize("which", ["min", "max", "both"])
def test_clip_tensor_bounds_that_require_grad_get_torchs_gradient(which):
    # PyTorch's clamp: x gets g where min <= x <= max (ties too), min where x < min, max
    # where x > max; the bounds broadcast and sum back
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x0, lo0, hi0 = rng.standard_normal((3, 4)), rng.standard_normal(4) * 0.5 - 0.3, \
        rng.standard_normal((3, 1)) * 0.5 + 0.5
    x0[0, 0], x0[1, 2] = lo0[0], hi0[1, 0]                  # ties with each bound
    req = {"min": (True, False), "max": (False, True), "both": (True, True)}[which]
    ours = [leaf(x0), pa.tensor(lo0, requires_grad=req[0]), pa.tensor(hi0, requires_grad=req[1])]
    theirs = [torch.tensor(a, requires_grad=r) for a, r in zip((x0, lo0, hi0), (True,) + req)]
    w = rng.standard_normal(x0.shape)
    y, ty = pa.clip(*ours), torch.clamp(*theirs)
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    pa.backward((y * pa.tensor(w)).sum())
    (ty * torch.tensor(w)).sum().backward()
    for a, b in zip(ours, theirs):
        if b.requires_grad:
            np.testing.assert_array_equal(a.grad, b.grad.numpy())
    assert pa.gradcheck(lambda *t: pa.clip(*t), [leaf(x0 + 0.01), *ours[1:]])


def test_relu_abs_gradient_at_zero_is_zero():
    x = leaf(np.array([-1.0, 0.0, 1.0]))
    (pa.relu(x) + pa.abs(x)).sum().backward()
    np.testing.assert_array_equal(x.grad, [-1, 0, 2])


def test_sigmoid_silu_stable_for_large_inputs():
    x = leaf(np.array([-1000.0, -40.0, 0.0, 40.0, 1000.0]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = pa.sigmoid(x)
        (s.sum() + pa.silu(x).sum()).backward()
    np.testing.assert_allclose(s.numpy(),
                               [0.0, 1 / (1 + np.exp(40)), 0.5, 1 / (1 + np.exp(-40)), 1])
    assert np.all(np.isfinite(x.grad.numpy()))


def test_gelu_values():
    from math import erf, erfc, sqrt
    x = np.concatenate([np.linspace(-4, 4, 9), [-12.0, -30.0, 1e-300, 0.0]])
    # the CDF as 0.5 erfc(-x / sqrt 2): no cancellation in the lower tail
    np.testing.assert_allclose(pa.gelu(pa.tensor(x)).numpy(),
                               [v * 0.5 * erfc(-v * sqrt(0.5)) for v in x], rtol=1e-15)
    np.testing.assert_allclose(pa.gelu(pa.tensor(x)).numpy(),     # PyTorch's 1 + erf form
                               [v * 0.5 * (1 + erf(v / sqrt(2))) for v in x], atol=1e-15)
    assert pa.gelu(pa.tensor(-30.0)).numpy() < 0                  # not 0 as 1 + erf gives
    with pytest.raises(RuntimeError, match="gelu: approximate"):      # PyTorch's type
        pa.gelu(pa.tensor(x), approximate="fast")


def test_leaky_relu_slope():
    x = leaf(np.array([-2.0, 3.0]))
    y = pa.leaky_relu(x, negative_slope=0.1)
    np.testing.assert_allclose(y.numpy(), [-0.2, 3.0])
    y.sum().backward()
    np.testing.assert_allclose(x.grad, [0.1, 1.0])


# ---- where --------------------------------------------------------------------------------
@pytest.mark.parametrize("cshape,xshape,yshape", [
    ((2, 3), (2, 3), (2, 3)),
    ((3,), (2, 3), ()),
    ((2, 1), (1, 3), (3,)),
    ((2, 3), (), (2, 1)),
])
def test_where_broadcasting_gradcheck(cshape, xshape, yshape):
    cond = rand(cshape, 7) > 0
    x, y = rand(xshape, 8), rand(yshape, 9)
    out = pa.where(cond, leaf(x), leaf(y))
    np.testing.assert_array_equal(out.numpy(), np.where(cond, x, y))
    assert pa.gradcheck(lambda a, b: pa.where(cond, a, b), [leaf(x), leaf(y)])


def test_where_condition_forms_and_scalars():
    x = leaf(np.array([1.0, -2.0, 3.0]))
    for cond in ([True, False, True], x > 0, x.numpy() > 0):
        out = pa.where(cond, x, 0.0)
        np.testing.assert_array_equal(out.numpy(), [1, 0, 3])
    out = pa.where(x > 0, 5.0, x)
    out.sum().backward()
    np.testing.assert_array_equal(x.grad, [0, 1, 0])


# ---- errors ----------------------------------------------------------------------------
def _numpy_message(fn, *args):
    with pytest.raises(ValueError) as info:
        fn(*args)
    return str(info.value)


@pytest.mark.parametrize("name,ufunc", [
    ("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("div", np.true_divide),
    ("pow", np.power), ("maximum", np.maximum), ("minimum", np.minimum),
])
def test_mismatched_shapes_raise_with_op_name_and_numpy_message(name, ufunc):
    a, b = np.ones((2, 3)), np.ones((4,))
    expected = _numpy_message(ufunc, a, b)
    with pytest.raises(ValueError) as info:
        getattr(pa, name)(leaf(a), leaf(b))
    assert str(info.value) == f"{name}: {expected}"


def test_operator_mismatch_and_where_mismatch_messages():
    with pytest.raises(ValueError, match=r"^mul: operands could not be broadcast"):
        leaf(np.ones((2, 3))) * np.ones((3, 2))
    expected = _numpy_message(np.where, np.ones(3, bool), np.ones(2), np.ones(3))
    with pytest.raises(ValueError) as info:
        pa.where(np.ones(3, bool), leaf(np.ones(2)), leaf(np.ones(3)))
    assert str(info.value) == f"where: {expected}"


# ---- coverage: every public elementwise op has a gradcheck above ------------------------------
def test_every_public_elementwise_op_is_gradchecked():
    tested = {k.split("_")[0] if k.startswith(("clip", "clamp", "gelu")) else k
              for k in list(UNARY) + list(BINARY)} | {"where", "leaky_relu"}
    # the ops of the old ops/elementwise.py (now ops/pointwise.py and ops/activations.py,
    # whose other ops tests/test_registry.py walks)
    public = {"gelu", "leaky_relu", "relu", "sigmoid", "silu", "abs", "add", "clamp", "cos",
              "div", "exp", "log", "maximum", "minimum", "mul", "neg", "pow", "sin", "sqrt",
              "sub", "tanh", "where", "clip"}
    assert all(callable(getattr(pa, n)) for n in public)
    assert public - tested == set()


# ---- rewritten rules: every special case by finite differences and against PyTorch -------
POW_EXPONENTS = [0, 1, 2, 3, 0.5, -1, 1.7, -2.5]


@pytest.mark.parametrize("y", POW_EXPONENTS)
def test_scalar_exponent_pow_gradcheck(y):
    x = rand((3, 4), 12, 0.5, 2.0)
    assert pa.gradcheck(lambda t: t ** y, [leaf(x)])


@pytest.mark.parametrize("slope", [0.0, 0.2, 1.0, -0.5, 3.0])
def test_leaky_relu_any_slope(slope):
    x = rand((4, 5), 13)
    out = pa.leaky_relu(leaf(x), slope)
    np.testing.assert_array_equal(out.numpy(), np.where(x > 0, x, x * slope))
    assert pa.gradcheck(lambda t: pa.leaky_relu(t, slope), [leaf(x)])


TORCH_UNARY = {
    "exp": (pa.exp, "exp", None), "log": (pa.log, "log", (0.1, 3.0)),
    "sqrt": (pa.sqrt, "sqrt", (0.1, 3.0)), "sin": (pa.sin, "sin", None),
    "cos": (pa.cos, "cos", None), "abs": (pa.abs, "abs", None),
    "sigmoid_wide": (pa.sigmoid, "sigmoid", (-40, 40)),
    "silu_wide": (pa.silu, "nn.functional.silu", (-40, 40)),
    "tanh_wide": (pa.tanh, "tanh", (-5, 5)),
    "gelu_wide": (pa.gelu, "nn.functional.gelu", (-12, 12)),
    "gelu_tanh_wide": (lambda t: pa.gelu(t, approximate="tanh"),
                       lambda th, t: th.nn.functional.gelu(t, approximate="tanh"), (-12, 12)),
    "leaky_relu_neg": (lambda t: pa.leaky_relu(t, -0.5),
                       lambda th, t: th.nn.functional.leaky_relu(t, -0.5), None),
    "clip": (lambda t: pa.clip(t, -0.5, 0.7), lambda th, t: th.clamp(t, -0.5, 0.7), None),
    **{f"pow{y}": ((lambda y: lambda t: t ** y)(y), (lambda y: lambda th, t: t ** y)(y),
                   (0.1, 3.0)) for y in POW_EXPONENTS},
}


@pytest.mark.parametrize("name", sorted(TORCH_UNARY))
def test_unary_values_and_gradients_match_torch(name):
    torch = pytest.importorskip("torch")
    fn, ref, dom = TORCH_UNARY[name]
    if isinstance(ref, str):
        mod, attr = (torch, ref) if "." not in ref else (torch.nn.functional, ref.split(".")[-1])
        ref = (lambda f: lambda th, t: f(t))(getattr(mod, attr))
    x = rand((50, 40), 14) * 3 if dom is None else rand((50, 40), 14, *dom)
    g = rand((50, 40), 15)
    t = leaf(x)
    tt = torch.tensor(x, requires_grad=True)
    y, yt = fn(t), ref(torch, tt)
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-12, atol=1e-14)
    (gx,) = pa.grad(y, [t], grad_outputs=g)
    (gt,) = torch.autograd.grad(yt, [tt], torch.tensor(g))
    np.testing.assert_allclose(gx, gt.numpy(), rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("name", ["div", "mul", "sub", "maximum", "minimum"])
def test_binary_gradients_match_torch_with_broadcasting(name):
    torch = pytest.importorskip("torch")
    a = np.round(rand((30, 20), 16), 1)
    b = np.round(rand((20,), 17), 1) + (2.5 if name == "div" else 0)
    ta, tb = leaf(a), leaf(b)
    qa, qb = (torch.tensor(v, requires_grad=True) for v in (a, b))
    y = getattr(pa, name)(ta, tb)
    yt = getattr(torch, name)(qa, qb)
    g = rand((30, 20), 18)
    for mine, theirs in zip(pa.grad(y, [ta, tb], grad_outputs=g),
                            torch.autograd.grad(yt, [qa, qb], torch.tensor(g))):
        np.testing.assert_allclose(mine, theirs.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("fn", ["maximum", "minimum"])
def test_maximum_minimum_with_nan_operands_match_torch(fn):
    # PyTorch: g where a side wins, g/2 on a tie, 0 where it loses; a NaN on either side
    # means neither loses, so both get g (both got 0 before).
    a = np.array([1.0, np.nan, 2.0, 3.0, np.nan, -1.0])
    b = np.array([1.0, 2.0, np.nan, 1.0, np.nan, 4.0])
    x, y = pa.tensor(a, requires_grad=True), pa.tensor(b, requires_grad=True)
    (getattr(pa, fn)(x, y) * np.arange(1.0, 7.0)).sum().backward()
    win_x = (a > b) if fn == "maximum" else (a < b)
    win_y = (b > a) if fn == "maximum" else (b < a)
    nan = np.isnan(a) | np.isnan(b)
    g = np.arange(1.0, 7.0)
    assert np.array_equal(x.grad, np.where(a == b, g / 2, np.where(win_x | nan, g, 0.0)))
    assert np.array_equal(y.grad, np.where(a == b, g / 2, np.where(win_y | nan, g, 0.0)))
    torch = pytest.importorskip("torch")
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (getattr(torch, fn)(tx, ty) * torch.arange(1.0, 7.0, dtype=torch.float64)).sum().backward()
    assert np.array_equal(x.grad, tx.grad.numpy()) and np.array_equal(y.grad, ty.grad.numpy())
