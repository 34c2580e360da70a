"""Reductions and the softmax family: every axis form, keepdims, 0-d, ties, float32,
numerical stability, gradients by finite differences."""
import numpy as np
import pytest

import parallel_autograd as pa
from conftest import assert_bitwise
from parallel_autograd.ops import reduce as rd


def rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def leaf(a):
    return pa.tensor(a, requires_grad=True)


# name -> (pa op, numpy reference)
REDUCTIONS = {
    "sum": (pa.sum, np.sum),
    "mean": (pa.mean, np.mean),
    "max": (pa.max, np.max),
    "min": (pa.min, np.min),
    "var": (pa.var, np.var),
    "var_ddof1": (lambda x, **k: pa.var(x, ddof=1, **k), lambda x, **k: np.var(x, ddof=1, **k)),
    "logsumexp": (pa.logsumexp,
                  lambda x, axis=None, keepdims=False: np.log(np.sum(np.exp(x), axis=axis,
                                                                     keepdims=keepdims))),
}

AXES = [None, 0, 1, -1, -2, (0, 2), (-1, 0), [1, 2], (), (0, 1, 2)]


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_values_and_gradcheck(name, axis, keepdims):
    op, ref = REDUCTIONS[name]
    if name == "var_ddof1" and axis == ():
        pytest.skip("ddof=1 over no axes divides by zero")
    x = rand((2, 3, 4), 1)
    ax = tuple(axis) if isinstance(axis, list) else axis
    out = op(leaf(x), axis=axis, keepdims=keepdims)
    np.testing.assert_allclose(out.data, ref(x, axis=ax, keepdims=keepdims), rtol=1e-12)
    assert pa.gradcheck(lambda t: op(t, axis=axis, keepdims=keepdims), [leaf(x)])


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_of_zero_dim_tensor(name):
    if name == "var_ddof1":
        pytest.skip("ddof=1 of one element divides by zero")
    op, _ = REDUCTIONS[name]
    x = leaf(1.7)
    out = op(x)
    assert out.shape == ()
    (g,) = pa.grad(out, [x])
    assert g.shape == ()
    assert pa.gradcheck(op, [leaf(1.7)])


@pytest.mark.parametrize("name", ["sum", "mean", "max", "var", "logsumexp"])
def test_tensor_methods_match_functions(name):
    x = rand((3, 4), 2)
    a = getattr(pa.tensor(x), name)(axis=-1, keepdims=True)
    b = getattr(pa, name)(pa.tensor(x), axis=-1, keepdims=True)
    np.testing.assert_array_equal(a.data, b.data)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_family_gradcheck(name, axis):
    op = getattr(pa, name)
    x = rand((3, 4), 3)
    out = op(leaf(x), axis=axis)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    sm = e / e.sum(axis=axis, keepdims=True)
    np.testing.assert_allclose(out.data, sm if name == "softmax" else np.log(sm), rtol=1e-12)
    assert pa.gradcheck(lambda t: op(t, axis=axis), [leaf(x)])


def test_softmax_3d_and_1d():
    for shape in [(5,), (2, 3, 4)]:
        x = rand(shape, 4)
        assert pa.gradcheck(lambda t: pa.softmax(t), [leaf(x)])
        assert pa.gradcheck(lambda t: pa.log_softmax(t, axis=0), [leaf(x)])


def test_softmax_family_is_stable_for_large_inputs():
    x = leaf(np.array([[1000.0, 1001.0, -1000.0], [-1e4, -1e4, -1e4]]))
    sm, lsm, lse = pa.softmax(x), pa.log_softmax(x), pa.logsumexp(x, axis=1)
    assert np.all(np.isfinite(sm.data)) and np.all(np.isfinite(lsm.data))
    np.testing.assert_allclose(sm.data.sum(axis=1), [1, 1])
    np.testing.assert_allclose(lse.data, [1001 + np.log1p(np.exp(-1)), -1e4 + np.log(3)])
    (sm.sum() + lsm.sum() + lse.sum()).backward()
    assert np.all(np.isfinite(x.grad))


def test_logsumexp_with_infinities():
    x = pa.tensor(np.array([[-np.inf, -np.inf], [np.inf, 0.0], [-np.inf, 0.0]]))
    np.testing.assert_array_equal(pa.logsumexp(x, axis=1).data, [-np.inf, np.inf, 0.0])


def test_max_min_ties_share_gradient():
    x = leaf(np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]))
    pa.max(x, axis=1).sum().backward()
    np.testing.assert_allclose(x.grad, [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])
    x = leaf(np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]))
    pa.min(x).backward()   # global min 1.0 is unique
    np.testing.assert_array_equal(x.grad, [[1, 0, 0], [0, 0, 0]])
    x = leaf(np.array([4.0, 4.0]))
    pa.max(x).backward()
    np.testing.assert_array_equal(x.grad, [0.5, 0.5])


@pytest.mark.parametrize("name", sorted(REDUCTIONS) + ["softmax", "log_softmax"])
def test_float32_keeps_dtype(name):
    op = REDUCTIONS[name][0] if name in REDUCTIONS else getattr(pa, name)
    x = rand((3, 5), 5)
    t32 = pa.tensor(x.astype(np.float32), requires_grad=True)
    t64 = leaf(x)
    y32 = op(t32, axis=1)
    y64 = op(t64, axis=1)
    assert y32.dtype == np.float32
    np.testing.assert_allclose(y32.data, y64.data, rtol=1e-5, atol=1e-6)
    w = rand(y64.shape, 6)
    (g32,) = pa.grad(y32, [t32], grad_outputs=w.astype(np.float32))
    (g64,) = pa.grad(y64, [t64], grad_outputs=w)
    assert g32.dtype == np.float32
    np.testing.assert_allclose(g32, g64, rtol=1e-4, atol=1e-5)


def test_bad_axis_raises_value_error_with_op_name():
    x = leaf(np.ones((2, 3)))
    for name in ("sum", "mean", "max", "var", "logsumexp"):
        with pytest.raises(ValueError, match=f"^{name}: .*axis 2 is out of bounds"):
            getattr(pa, name)(x, axis=2)


def test_every_public_reduce_op_is_gradchecked():
    public = {n for n in dir(pa) if not n.startswith("_")  # sum/max/min: not in __all__
              and getattr(rd, n, None) is getattr(pa, n) and n not in ("primitive", "record")}
    assert public == {"sum", "mean", "max", "min", "var", "logsumexp", "softmax",
                      "log_softmax"}


# ---- rewritten rules against PyTorch, every axis ----------------------------------------
TORCH_REDUCE = {
    "softmax": (lambda t, a: pa.softmax(t, axis=a), lambda th, t, a: th.softmax(t, dim=a)),
    "log_softmax": (lambda t, a: pa.log_softmax(t, axis=a),
                    lambda th, t, a: th.log_softmax(t, dim=a)),
    "logsumexp": (lambda t, a: pa.logsumexp(t, axis=a), lambda th, t, a: th.logsumexp(t, dim=a)),
    "max_ties": (lambda t, a: pa.max(t, axis=a), lambda th, t, a: th.amax(t, dim=a)),
    "min_ties": (lambda t, a: pa.min(t, axis=a), lambda th, t, a: th.amin(t, dim=a)),
    "var": (lambda t, a: pa.var(t, axis=a, ddof=1), lambda th, t, a: th.var(t, dim=a)),
}


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("name", sorted(TORCH_REDUCE))
def test_reduce_gradients_match_torch(name, axis):
    torch = pytest.importorskip("torch")
    x = rand((6, 7, 8), 20) * 4
    if name.endswith("ties"):
        x = np.round(x)                 # many ties share the gradient
    fn, ref = TORCH_REDUCE[name]
    t, tt = leaf(x), torch.tensor(x, requires_grad=True)
    y, yt = fn(t, axis), ref(torch, tt, axis)
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-12, atol=1e-14)
    g = rand(y.shape, 21)
    (gx,) = pa.grad(y, [t], grad_outputs=g)
    (gt,) = torch.autograd.grad(yt, [tt], torch.tensor(g))
    np.testing.assert_allclose(gx, gt.numpy(), rtol=1e-11, atol=1e-13)


# ---- NaN in max/min: the gradient goes to the NaN, as PyTorch's max does ------------------
@pytest.mark.parametrize("fn", ["max", "min"])
def test_extremum_of_data_with_nan_sends_the_gradient_to_the_nans(fn):
    data = np.array([[1.0, 5.0, np.nan], [2.0, 2.0, 1.0]])
    x = pa.tensor(data, requires_grad=True)
    getattr(x, fn)().backward()
    assert np.array_equal(x.grad, [[0, 0, 1.0], [0, 0, 0]])  # was all NaN
    x = pa.tensor(data, requires_grad=True)
    getattr(x, fn)(axis=1).sum().backward()  # torch.amax gives NaN rows; torch.max(dim)
    want = [[0, 0, 1.0], [0.5, 0.5, 0] if fn == "max" else [0, 0, 1.0]]  # the NaN's index
    assert np.array_equal(x.grad, want)


@pytest.mark.parametrize("fn", ["max", "min"])
def test_extremum_with_nan_matches_torch_full_reduction(fn):
    torch = pytest.importorskip("torch")
    data = np.array([1.0, np.nan, 3.0, np.nan, -2.0])
    x = pa.tensor(data, requires_grad=True)
    getattr(x, fn)().backward()
    t = torch.tensor(data, requires_grad=True)
    getattr(t, fn)().backward()
    assert np.array_equal(x.grad, t.grad.numpy())


# ---- PyTorch's spelling: dim / keepdim -------------------------------------------------------
@pytest.mark.parametrize("name", ["sum", "mean", "var", "logsumexp", "prod", "std", "amax",
                                  "amin", "argmax", "argmin"])
def test_reductions_take_pytorchs_dim_and_keepdim(name):
    x = pa.tensor(np.random.default_rng(1).uniform(0.5, 1.5, (2, 3, 4)))
    fn = getattr(pa, name)
    for dim in (1, -1):
        for keep in (False, True):
            ours = fn(x, dim=dim, keepdim=keep)
            assert_bitwise(ours.data, fn(x, axis=dim, keepdims=keep).data)
            assert_bitwise(getattr(x, name)(dim=dim, keepdim=keep).data, ours.data)
    with pytest.raises(TypeError, match=f"{name}: pass axis or dim, not both"):
        fn(x, axis=1, dim=1)


def test_max_and_min_with_dim_return_pytorchs_values_and_indices():
    """`dim=` is PyTorch's spelling, so it gets PyTorch's result: (values, indices), the
    gradient to the first extremum (axis= keeps numpy's: values, ties share)."""
    torch = pytest.importorskip("torch")
    x0 = np.array([[1.0, 3.0, 3.0, -2.0], [np.nan, 2.0, 0.5, 0.5], [4.0, -1.0, -1.0, 4.0]])
    for name in ("max", "min"):
        for dim, keep in ((0, False), (1, True), (-1, False)):
            x, tx = pa.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
            got = getattr(x, name)(dim=dim, keepdim=keep)
            want = getattr(tx, name)(dim=dim, keepdim=keep)
            np.testing.assert_array_equal(got.values.data, want.values.detach().numpy())
            np.testing.assert_array_equal(got.indices.data, want.indices.numpy())
            pa.backward(got.values.sum())  # (a NaN value: sum's gradient is still 1)
            want.values.sum().backward()
            np.testing.assert_array_equal(x.grad, tx.grad.numpy())
    assert pa.max(pa.tensor(x0), axis=1).shape == (3,)  # numpy's spelling: values only


# ---- 0-d inputs and empty slices, as PyTorch ---------------------------------------------------
ZERO_DIM = {
    "sum": (pa.sum, lambda th, t, d, k: th.sum(t, d, keepdim=k)),
    "mean": (pa.mean, lambda th, t, d, k: th.mean(t, d, keepdim=k)),
    "var": (pa.var, lambda th, t, d, k: th.var(t, d, correction=0, keepdim=k)),
    "max": (pa.max, lambda th, t, d, k: th.amax(t, d, keepdim=k)),
    "min": (pa.min, lambda th, t, d, k: th.amin(t, d, keepdim=k)),
    "logsumexp": (pa.logsumexp, lambda th, t, d, k: th.logsumexp(t, d, keepdim=k)),
}


@pytest.mark.parametrize("name", sorted(ZERO_DIM))
def test_zero_dim_input_reduced_over_dim_0_or_minus_1_as_torch(name):
    """A 0-d tensor has one dimension for PyTorch (dim 0 or -1, alone or in a tuple): the
    result is 0-d, keepdim or not (the sum's and max's backward divided by 0 here, the
    mean's forward raised numpy's AxisError)."""
    torch = pytest.importorskip("torch")
    op, ref = ZERO_DIM[name]
    for dim in (0, -1, (0,), [-1]):
        for keep in (False, True):
            x, tx = leaf(1.7), torch.tensor(1.7, dtype=torch.float64, requires_grad=True)
            y = op(x, dim, keep)
            yt = ref(torch, tx, tuple(dim) if isinstance(dim, list) else dim, keep)
            assert y.shape == () == tuple(yt.shape)
            np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-15)
            (g,) = pa.grad(y, [x])
            (gt,) = torch.autograd.grad(yt, [tx])
            assert g.shape == () and g == gt.item()
            if name not in ("max", "min"):      # dim=: PyTorch's (values, indices)
                assert op(x, dim=dim, keepdim=keep).item() == y.item()
            assert pa.gradcheck(lambda t: op(t, dim, keep), [leaf(1.7)])
            assert pa.gradgradcheck(lambda t: op(t, dim, keep), [leaf(1.7)])
    for bad, exc in ((1, ValueError), (-2, ValueError), ((0, -1), ValueError)):
        with pytest.raises(exc, match=f"^{name}: "):
            op(leaf(1.7), bad)


def test_zero_dim_softmax_family_and_methods_with_a_dim():
    torch = pytest.importorskip("torch")
    for dim in (0, -1):
        for fn, tfn in ((pa.softmax, torch.softmax), (pa.log_softmax, torch.log_softmax)):
            x, tx = leaf(0.3), torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
            y, yt = fn(x, dim), tfn(tx, dim)
            assert y.shape == () and y.item() == yt.item()
            (g,) = pa.grad(y, [x])
            assert g == torch.autograd.grad(yt, [tx])[0].item()
        x = leaf(0.3)
        for method in ("sum", "mean", "var", "logsumexp"):
            assert getattr(x, method)(dim).shape == ()
            assert getattr(x, method)(dim=dim, keepdim=True).shape == ()
        for method in ("max", "min"):
            assert getattr(x, method)(dim).shape == ()
            assert getattr(x, method)(dim=dim, keepdim=True).values.shape == ()


def test_logsumexp_and_softmax_over_an_empty_dim_as_torch():
    """An empty slice has no maximum to shift by: logsumexp is -inf there (its identity)
    and softmax empty, as PyTorch's (it raised numpy's "zero-size array" error)."""
    torch = pytest.importorskip("torch")
    for shape, dim in (((4, 0), 1), ((0, 4), 0), ((0,), -1), ((2, 0, 3), 1), ((4, 0), 0)):
        for fn, tfn in ((lambda t: pa.logsumexp(t, dim), lambda t: torch.logsumexp(t, dim)),
                        (lambda t: pa.logsumexp(t, dim, True),
                         lambda t: torch.logsumexp(t, dim, True)),
                        (lambda t: pa.softmax(t, dim), lambda t: torch.softmax(t, dim)),
                        (lambda t: pa.log_softmax(t, dim), lambda t: torch.log_softmax(t, dim))):
            x, tx = leaf(np.zeros(shape)), torch.zeros(shape, dtype=torch.float64,
                                                         requires_grad=True)
            y, yt = fn(x), tfn(tx)
            assert y.shape == tuple(yt.shape)
            np.testing.assert_array_equal(y.data, yt.detach().numpy())
            pa.backward(y.sum())
            assert x.grad.shape == shape
