"""Reductions and the softmax family (ops/reduce.py): every dim form, keepdim, 0-d, ties,
float32, numerical stability, gradients by finite differences; PyTorch's semantics where
they differed from numpy's (issue 27: max/min along a dim, var's correction, dim=(), dim
out of range, dtype=); the composite and non-exported ops against their samples."""
import inspect
import warnings
import zlib

import numpy as np
import pytest
from conftest import assert_bitwise
from op_samples import Sample
from samples_reduce import COMPOSITES

import parallel_autograd as pa
from parallel_autograd.ops import _common
from parallel_autograd.ops import reduce as rd
from parallel_autograd.primitive import REGISTRY


def rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def leaf(a):
    return pa.tensor(a, requires_grad=True)


# name -> (pa op, numpy reference)
REDUCTIONS = {
    "sum": (pa.sum, np.sum),
    "mean": (pa.mean, np.mean),
    "amax": (pa.amax, np.max),
    "amin": (pa.amin, np.min),
    "var": (pa.var, lambda x, **k: np.var(x, ddof=1, **k)),
    "var_c0": (lambda x, **k: pa.var(x, correction=0, **k), np.var),
    "logsumexp": (pa.logsumexp,
                  lambda x, axis=None, keepdims=False: np.log(np.sum(np.exp(x), axis=axis,
                                                                     keepdims=keepdims))),
}

AXES = [None, 0, 1, -1, -2, (0, 2), (-1, 0), [1, 2], (), (0, 1, 2)]


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_values_and_gradcheck(name, axis, keepdims):
    """numpy's `axis=`/`keepdims=` spellings; () reduces every dimension, as PyTorch."""
    op, ref = REDUCTIONS[name]
    x = rand((2, 3, 4), 1)
    ax = None if axis == () else tuple(axis) if isinstance(axis, list) else axis
    out = op(leaf(x), axis=axis, keepdims=keepdims)
    np.testing.assert_allclose(out.numpy(), ref(x, axis=ax, keepdims=keepdims), rtol=1e-12)
    assert pa.gradcheck(lambda t: op(t, axis=axis, keepdims=keepdims), [leaf(x)])


@pytest.mark.parametrize("name", sorted(set(REDUCTIONS) - {"var"}))
def test_reduction_of_zero_dim_tensor(name):
    op, _ = REDUCTIONS[name]
    op = (lambda t, op=op: op(t, None)) if name == "logsumexp" else op
    x = leaf(1.7)
    out = op(x)
    assert out.shape == ()
    (g,) = pa.grad(out, [x])
    assert g.shape == ()
    assert pa.gradcheck(op, [leaf(1.7)])


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "var", "logsumexp"])
def test_tensor_methods_match_functions(name):
    x = rand((3, 4), 2)
    a = getattr(pa.tensor(x), name)(axis=-1, keepdims=True)
    b = getattr(pa, name)(pa.tensor(x), axis=-1, keepdims=True)
    np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_family_gradcheck(name, axis):
    op = getattr(pa, name)
    x = rand((3, 4), 3)
    out = op(leaf(x), axis=axis)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    sm = e / e.sum(axis=axis, keepdims=True)
    np.testing.assert_allclose(out.numpy(), sm if name == "softmax" else np.log(sm), rtol=1e-12)
    assert pa.gradcheck(lambda t: op(t, axis=axis), [leaf(x)])


def test_softmax_3d_and_1d():
    for shape in [(5,), (2, 3, 4)]:
        x = rand(shape, 4)
        assert pa.gradcheck(lambda t: pa.softmax(t, -1), [leaf(x)])
        assert pa.gradcheck(lambda t: pa.log_softmax(t, axis=0), [leaf(x)])


def test_softmax_family_is_stable_for_large_inputs():
    x = leaf(np.array([[1000.0, 1001.0, -1000.0], [-1e4, -1e4, -1e4]]))
    sm, lsm, lse = pa.softmax(x, 1), pa.log_softmax(x, 1), pa.logsumexp(x, axis=1)
    assert np.all(np.isfinite(sm.numpy())) and np.all(np.isfinite(lsm.numpy()))
    np.testing.assert_allclose(sm.numpy().sum(axis=1), [1, 1])
    np.testing.assert_allclose(lse.numpy(), [1001 + np.log1p(np.exp(-1)), -1e4 + np.log(3)])
    (sm.sum() + lsm.sum() + lse.sum()).backward()
    assert np.all(np.isfinite(x.grad.numpy()))


def test_logsumexp_with_infinities():
    x = pa.tensor(np.array([[-np.inf, -np.inf], [np.inf, 0.0], [-np.inf, 0.0]]))
    np.testing.assert_array_equal(pa.logsumexp(x, axis=1).numpy(), [-np.inf, np.inf, 0.0])


def test_max_min_ties_share_gradient():
    x = leaf(np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]))
    pa.amax(x, axis=1).sum().backward()
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
    np.testing.assert_allclose(y32.numpy(), y64.numpy(), rtol=1e-5, atol=1e-6)
    w = rand(y64.shape, 6)
    (g32,) = pa.grad(y32, [t32], grad_outputs=w.astype(np.float32))
    (g64,) = pa.grad(y64, [t64], grad_outputs=w)
    assert g32.dtype == np.float32
    np.testing.assert_allclose(g32, g64, rtol=1e-4, atol=1e-5)


def test_every_public_reduce_op_is_declared_and_sampled():
    public = {n for n in dir(pa) if not n.startswith("_")  # sum/max/min: not in __all__
              and getattr(rd, n, None) is getattr(pa, n)
              and n not in ("primitive", "record", "Tensor")}
    assert public == {"sum", "mean", "max", "min", "var", "std", "var_mean", "std_mean",
                      "norm", "amax", "amin", "argmax", "argmin", "logsumexp", "softmax",
                      "log_softmax"}
    assert all(getattr(pa, n).op in REGISTRY for n in public)


# ---- rewritten rules against PyTorch, every axis ----------------------------------------
TORCH_REDUCE = {
    "softmax": (lambda t, a: pa.softmax(t, axis=a), lambda th, t, a: th.softmax(t, dim=a)),
    "log_softmax": (lambda t, a: pa.log_softmax(t, axis=a),
                    lambda th, t, a: th.log_softmax(t, dim=a)),
    "logsumexp": (lambda t, a: pa.logsumexp(t, axis=a), lambda th, t, a: th.logsumexp(t, dim=a)),
    "max_ties": (lambda t, a: pa.amax(t, axis=a), lambda th, t, a: th.amax(t, dim=a)),
    "min_ties": (lambda t, a: pa.amin(t, axis=a), lambda th, t, a: th.amin(t, dim=a)),
    "max_dim_ties": (lambda t, a: pa.max(t, a).values, lambda th, t, a: th.max(t, a).values),
    "min_dim_ties": (lambda t, a: t.min(dim=a).values, lambda th, t, a: t.min(dim=a).values),
    "var": (lambda t, a: pa.var(t, axis=a), lambda th, t, a: th.var(t, dim=a)),
    "var_c0": (lambda t, a: t.var(a, False), lambda th, t, a: t.var(a, False)),
    "std": (lambda t, a: pa.std(t, a, keepdim=True), lambda th, t, a: th.std(t, a, keepdim=True)),
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
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-12, atol=1e-14)
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
    getattr(x, fn)(axis=1).values.sum().backward()  # the NaN's index, else the first extremum
    want = [[0, 0, 1.0], [1.0, 0, 0] if fn == "max" else [0, 0, 1.0]]
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
            assert_bitwise(ours.numpy(), fn(x, axis=dim, keepdims=keep).numpy())
            assert_bitwise(getattr(x, name)(dim=dim, keepdim=keep).numpy(), ours.numpy())
    with pytest.raises(TypeError, match=f"{name}.* got both 'dim' and its alias 'axis'"):
        fn(x, axis=1, dim=1)


def test_max_and_min_with_dim_return_pytorchs_values_and_indices():
    """PyTorch's result: (values, indices), the gradient to the first extremum."""
    torch = pytest.importorskip("torch")
    x0 = np.array([[1.0, 3.0, 3.0, -2.0], [np.nan, 2.0, 0.5, 0.5], [4.0, -1.0, -1.0, 4.0]])
    for name in ("max", "min"):
        for dim, keep in ((0, False), (1, True), (-1, False)):
            x, tx = pa.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
            got = getattr(x, name)(dim=dim, keepdim=keep)
            want = getattr(tx, name)(dim=dim, keepdim=keep)
            np.testing.assert_array_equal(got.values.numpy(), want.values.detach().numpy())
            np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
            pa.backward(got.values.sum())  # (a NaN value: sum's gradient is still 1)
            want.values.sum().backward()
            np.testing.assert_array_equal(x.grad, tx.grad.numpy())


# ---- 0-d inputs and empty slices, as PyTorch ---------------------------------------------------
ZERO_DIM = {
    "sum": (pa.sum, lambda th, t, d, k: th.sum(t, d, keepdim=k)),
    "mean": (pa.mean, lambda th, t, d, k: th.mean(t, d, keepdim=k)),
    "var": (lambda t, dim, keepdim=False: pa.var(t, dim, keepdim=keepdim, correction=0),
            lambda th, t, d, k: th.var(t, d, correction=0, keepdim=k)),
    "amax": (pa.amax, lambda th, t, d, k: th.amax(t, d, keepdim=k)),
    "amin": (pa.amin, lambda th, t, d, k: th.amin(t, d, keepdim=k)),
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
            np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-15)
            (g,) = pa.grad(y, [x])
            (gt,) = torch.autograd.grad(yt, [tx])
            assert g.shape == () and g == gt.item()
            assert op(x, dim=dim, keepdim=keep).item() == y.item()
            assert pa.gradcheck(lambda t: op(t, dim, keep), [leaf(1.7)])
            assert pa.gradgradcheck(lambda t: op(t, dim, keep), [leaf(1.7)])
    for bad, exc in ((1, IndexError), (-2, IndexError), ((0, -1), RuntimeError)):
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
            assert getattr(x, method)(dim).values.shape == ()
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
            np.testing.assert_array_equal(y.numpy(), yt.detach().numpy())
            pa.backward(y.sum())
            assert x.grad.shape == shape


# ---- issue 27: PyTorch's semantics where numpy's differed (each of these failed before) -------
def _torch():
    return pytest.importorskip("torch")


def _np(t):
    return t.detach().numpy() if hasattr(t, "detach") else np.asarray(t.numpy())


EXTREMUM_CALLS = {
    "method_positional": lambda L, a, m: getattr(a, m)(1),
    "method_dim": lambda L, a, m: getattr(a, m)(dim=1),
    "method_axis": lambda L, a, m: getattr(a, m)(axis=1),
    "function_positional": lambda L, a, m: getattr(L, m)(a, 1),
    "function_keepdim": lambda L, a, m: getattr(L, m)(a, -1, True),
    "function_dim_keepdim": lambda L, a, m: getattr(L, m)(a, dim=0, keepdim=True),
}


@pytest.mark.parametrize("call", sorted(EXTREMUM_CALLS))
@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_along_a_dim_return_values_and_indices_however_the_dim_is_given(name, call):
    """`out.max(1)[1]` is the indices, as in PyTorch (it was row 1's maximum: numpy's
    values-only result for a positional or `axis=` dim)."""
    torch = _torch()
    fn = EXTREMUM_CALLS[call]
    x0 = np.round(rand((4, 5), 30), 1)
    x0[1, 2] = x0[1, 4] = x0[1].max() + 1          # a tie: the first index wins
    x, t = pa.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    got, want = fn(pa, x, name), fn(torch, t, name)
    assert isinstance(got, tuple) and type(got).__name__ == name
    assert got._fields == ("values", "indices")
    np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())
    assert got.indices.dtype == np.int64 and not got.indices.requires_grad
    np.testing.assert_array_equal(got.values.numpy(), _np(want.values))
    w = rand(got.values.shape, 31)
    (g,) = pa.grad(got.values, [x], grad_outputs=w)
    (gt,) = torch.autograd.grad(want.values, [t], torch.tensor(w))
    np.testing.assert_array_equal(g, gt.numpy())


@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_of_all_elements_and_with_another_tensor_as_pytorch(name):
    """`max(x)` is a 0-d tensor, `max(x, other)` the elementwise maximum (a TypeError
    here before)."""
    torch = _torch()
    a0, b0 = rand((3, 4), 32), rand((4,), 33)
    for call in (lambda L, a, b: getattr(L, name)(a), lambda L, a, b: getattr(L, name)(a, b),
                 lambda L, a, b: getattr(a, name)(b), lambda L, a, b: getattr(a, name)()):
        a, b = leaf(a0), leaf(b0)
        ta, tb = torch.tensor(a0, requires_grad=True), torch.tensor(b0, requires_grad=True)
        y, yt = call(pa, a, b), call(torch, ta, tb)
        assert isinstance(y, pa.Tensor) and y.shape == tuple(yt.shape)
        np.testing.assert_array_equal(y.numpy(), _np(yt))
        gs = pa.grad(y, [a, b], grad_outputs=np.ones(y.shape), allow_unused=True)
        tgs = torch.autograd.grad(yt, [ta, tb], torch.ones(yt.shape, dtype=torch.float64),
                                  allow_unused=True)
        for g, gt, leaf_ in zip(gs, tgs, (a, b)):
            zero = np.zeros(leaf_.shape)
            np.testing.assert_array_equal(zero if g is None else g,
                                          zero if gt is None else gt.numpy())
    with pytest.raises(TypeError, match="keepdim"):
        getattr(pa, name)(leaf(a0), keepdim=True)
    with pytest.raises(RuntimeError, match="numel\\(\\) == 0"):
        getattr(pa, name)(pa.tensor(np.zeros((2, 0))))


VAR_CALLS = {
    "default": lambda L, x, f: getattr(L, f)(x),
    "dim": lambda L, x, f: getattr(L, f)(x, 1),
    "dim_unbiased_false": lambda L, x, f: getattr(x, f)(1, False),
    "dim_unbiased_keepdim": lambda L, x, f: getattr(L, f)(x, 0, True, True),
    "unbiased_overload": lambda L, x, f: getattr(x, f)(False),
    "unbiased_keyword": lambda L, x, f: getattr(L, f)(x, unbiased=False),
    "correction_0": lambda L, x, f: getattr(L, f)(x, correction=0),
    "correction_2_tuple": lambda L, x, f: getattr(L, f)(x, dim=(0, 1), correction=2),
    "correction_half_keepdim": lambda L, x, f: getattr(x, f)(dim=1, correction=0.5,
                                                             keepdim=True),
}


@pytest.mark.parametrize("call", sorted(VAR_CALLS))
@pytest.mark.parametrize("name", ["var", "std"])
def test_var_and_std_are_unbiased_by_default_with_pytorchs_correction_and_unbiased(name, call):
    """var was numpy's biased variance and refused correction=/unbiased= (its values and
    gradients silently off by n/(n-1)); std was already unbiased: the two now agree."""
    torch = _torch()
    x0 = rand((3, 4, 2), 34)
    x, t = leaf(x0), torch.tensor(x0, requires_grad=True)
    y, yt = VAR_CALLS[call](pa, x, name), VAR_CALLS[call](torch, t, name)
    assert y.shape == tuple(yt.shape)
    np.testing.assert_allclose(y.numpy(), _np(yt), rtol=1e-13)
    w = rand(y.shape, 35)
    (g,) = pa.grad(y, [x], grad_outputs=w)
    (gt,) = torch.autograd.grad(yt, [t], torch.tensor(w))
    np.testing.assert_allclose(g, gt.numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(pa.var(x).numpy(), (pa.std(x) ** 2).numpy(), rtol=1e-14)


@pytest.mark.parametrize("name", ["var", "std"])
def test_var_and_std_of_one_element_are_nan_with_pytorchs_warning(name):
    torch = _torch()
    for x0, dim in ((np.array([1.5]), None), (rand((3, 1), 36), 1), (np.array(2.0), 0)):
        x, t = leaf(x0), torch.tensor(x0, requires_grad=True)
        with pytest.warns(UserWarning, match=f"{name}\\(\\): degrees of freedom is <= 0"):
            y = getattr(pa, name)(x, dim)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yt = getattr(torch, name)(t, dim)
        assert np.isnan(y.numpy()).all() and np.isnan(_np(yt)).all()
        (g,) = pa.grad(y.sum(), [x])
        (gt,) = torch.autograd.grad(yt.sum(), [t])
        np.testing.assert_array_equal(g, gt.numpy())          # NaN, as PyTorch's


@pytest.mark.parametrize("name", ["var_mean", "std_mean"])
def test_var_mean_and_std_mean_as_pytorch(name):
    torch = _torch()
    x0 = rand((3, 4), 37)
    for args, kwargs in (((), {}), ((1,), {}), ((0, False, True), {}), ((True,), {}),
                         ((), {"dim": 1, "correction": 0, "keepdim": True})):
        x, t = leaf(x0), torch.tensor(x0, requires_grad=True)
        got, want = getattr(pa, name)(x, *args, **kwargs), getattr(torch, name)(t, *args,
                                                                                 **kwargs)
        assert type(got) is tuple and len(got) == 2
        for a, b in zip(got, want):
            np.testing.assert_allclose(a.numpy(), _np(b), rtol=1e-13)
        (g,) = pa.grad(got[0].sum() + got[1].sum() * 3, [x])
        (gt,) = torch.autograd.grad(want[0].sum() + want[1].sum() * 3, [t])
        np.testing.assert_allclose(g, gt.numpy(), rtol=1e-12)


def test_sum_and_mean_take_dtype_as_pytorch():
    torch = _torch()
    x0 = rand((3, 4), 38).astype(np.float32)
    i0 = np.arange(12).reshape(3, 4)
    for name, arr, dims in (("sum", x0, (None, 1)), ("mean", x0, (None, 0)),
                            ("sum", i0, (None, 1)), ("mean", i0, (1,))):
        for dim in dims:
            for dt in (np.float64, np.float32):
                x = pa.tensor(arr, requires_grad=arr.dtype.kind == "f")
                t = torch.tensor(arr)
                tdt = getattr(torch, np.dtype(dt).name)
                y = getattr(pa, name)(x, dim, dtype=dt) if dim is not None else \
                    getattr(pa, name)(x, dtype=dt)
                yt = getattr(torch, name)(t, dim, dtype=tdt) if dim is not None else \
                    getattr(torch, name)(t, dtype=tdt)
                assert y.dtype == dt and str(yt.dtype) == f"torch.{np.dtype(dt).name}"
                np.testing.assert_allclose(y.numpy(), yt.numpy(), rtol=1e-6)
                if x.requires_grad:
                    (g,) = pa.grad(y.sum(), [x])
                    assert g.dtype == np.float32       # the input's, as PyTorch's
    assert pa.sum(pa.tensor(i0)).dtype == np.int64 == pa.sum(pa.tensor(i0 > 4)).dtype
    assert pa.sum(pa.tensor(i0.astype(np.uint8))).dtype == np.int64
    with pytest.raises(RuntimeError, match="mean\\(\\): could not infer output dtype"):
        pa.mean(pa.tensor(i0))
    with pytest.raises(RuntimeError):
        torch.mean(torch.tensor(i0))


DIM_OPS = {
    "sum": lambda L, x, d: L.sum(x, d), "mean": lambda L, x, d: L.mean(x, d),
    "var": lambda L, x, d: L.var(x, d), "std": lambda L, x, d: L.std(x, dim=d),
    "prod": lambda L, x, d: L.prod(x, d), "norm": lambda L, x, d: L.norm(x, 2, d),
    "amax": lambda L, x, d: L.amax(x, d), "amin": lambda L, x, d: L.amin(x, d),
    "max": lambda L, x, d: L.max(x, d), "min": lambda L, x, d: x.min(d),
    "argmax": lambda L, x, d: L.argmax(x, d), "argmin": lambda L, x, d: L.argmin(x, d),
    "logsumexp": lambda L, x, d: L.logsumexp(x, d), "softmax": lambda L, x, d: L.softmax(x, d),
    "log_softmax": lambda L, x, d: x.log_softmax(d), "cumsum": lambda L, x, d: L.cumsum(x, d),
    "cumprod": lambda L, x, d: L.cumprod(x, d), "cummax": lambda L, x, d: L.cummax(x, d),
    "cummin": lambda L, x, d: x.cummin(d), "logcumsumexp": lambda L, x, d: L.logcumsumexp(x, d),
    "sort": lambda L, x, d: L.sort(x, d), "topk": lambda L, x, d: L.topk(x, 1, d),
    "kthvalue": lambda L, x, d: L.kthvalue(x, 1, d), "median": lambda L, x, d: L.median(x, d),
    "var_mean": lambda L, x, d: L.var_mean(x, d), "std_mean": lambda L, x, d: L.std_mean(x, d),
}


@pytest.mark.parametrize("name", sorted(DIM_OPS))
def test_dim_out_of_range_is_an_index_error_as_pytorch(name):
    """PyTorch raises IndexError (sum, mean, var, logsumexp raised ValueError here, numpy's
    AxisError re-wrapped), and nothing is recorded."""
    torch = _torch()
    fn = DIM_OPS[name]
    x = leaf(rand((2, 3), 39))
    for bad in (2, -3):
        with pytest.raises(IndexError, match=f"^{name[:3]}.*: Dimension out of range"):
            fn(pa, x, bad)
        with pytest.raises(IndexError, match="Dimension out of range"):
            fn(torch, torch.tensor(x.numpy()), bad)
    assert x.grad is None


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin", "var", "std", "norm"])
def test_an_empty_dim_tuple_reduces_every_dimension_as_pytorch(name):
    """`dim=()` reduced nothing here (numpy's axis=()); PyTorch reduces every dimension."""
    torch = _torch()
    x0 = rand((2, 3, 4), 40)
    kw = {"dim": ()}
    y = getattr(pa, name)(leaf(x0), **kw)
    yt = getattr(torch, name)(torch.tensor(x0), **kw)
    assert y.shape == () == tuple(yt.shape)
    np.testing.assert_allclose(y.numpy(), yt.numpy(), rtol=1e-13)
    assert pa.gradcheck(lambda t: getattr(pa, name)(t, **kw), [leaf(x0)])


def test_softmax_takes_dtype_and_pytorchs_implicit_dim():
    """`dtype=` converts the input first (refused before); without a dim, F.softmax's
    deprecated implicit choice with its warning: dim 0 for a 3-d input (it was -1)."""
    torch = _torch()
    F, TF = pa.nn.functional, torch.nn.functional
    x0 = rand((2, 3, 4), 41).astype(np.float32)
    for name in ("softmax", "log_softmax"):
        x = pa.tensor(x0, requires_grad=True)
        y = getattr(pa, name)(x, 1, dtype=np.float64)
        yt = getattr(torch, name)(torch.tensor(x0), 1, dtype=torch.float64)
        assert y.dtype == np.float64
        np.testing.assert_allclose(y.numpy(), yt.numpy(), rtol=1e-12)
        (g,) = pa.grad(y.sum(), [x])
        assert g.dtype == np.float32
        for shape in ((2, 3, 4), (3, 4), (5,)):
            a = rand(shape, 42)
            with pytest.warns(UserWarning, match="Implicit dimension choice"):
                got = getattr(F, name)(pa.tensor(a))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                want = getattr(TF, name)(torch.tensor(a))
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
        with pytest.raises(NotImplementedError, match=f"{name}: not implemented for int64"):
            getattr(pa, name)(pa.tensor(np.arange(3)), 0)


# ---- the composite and the non-exported declared ops, on their samples ----------------------
_INTERNAL = {op.name: op for op in REGISTRY if op.family in ("reduce", "scan")
             and not op.export}


def test_the_internal_ops_have_samples():
    assert set(_INTERNAL) == {"max_all", "min_all", "median_all", "gather_along",
                              "scatter_along"}
    assert set(_INTERNAL) <= set(COMPOSITES)


@pytest.mark.parametrize("check", ["test_gradcheck_and_gradgradcheck",
                                   "test_kernel_equals_formula_at_first_order",
                                   "test_both_engines_agree_bitwise",
                                   "test_every_differentiable_input_has_a_formula"])
@pytest.mark.parametrize("name", sorted(_INTERNAL))
def test_the_registry_checks_pass_for_the_internal_ops(name, check, monkeypatch):
    import test_registry as registry                  # noqa: PLC0415  (its checks, reused)
    monkeypatch.setitem(registry.SAMPLES, name, COMPOSITES[name])
    op = _INTERNAL[name]
    if check == "test_kernel_equals_formula_at_first_order" and not op.has_kernel:
        return
    getattr(registry, check)(op)


def _composite_samples(name):
    return COMPOSITES[name](np.random.default_rng(zlib.crc32(name.encode())))


def _bound(fn, sample):
    """fn on the sample's float arrays (the tensors gradcheck perturbs), its other
    arguments bound; the first tensor of the result (the values)."""
    where = [i for i, a in enumerate(sample.args)
             if isinstance(a, np.ndarray) and (sample.grad is None and i == 0
                                               or sample.grad is not None and i in sample.grad)]

    def call(*tensors):
        args = list(sample.args)
        for i, t in zip(where, tensors):
            args[i] = t
        out = fn(*args, **sample.kwargs)
        return out[0] if isinstance(out, tuple) else out
    return call, [sample.args[i] for i in where]


@pytest.mark.parametrize("name", sorted(set(COMPOSITES) - set(_INTERNAL)))
def test_composites_gradcheck_and_gradgradcheck(name):
    for sample in _composite_samples(name):
        call, arrays = _bound(getattr(pa, name), sample)
        assert pa.gradcheck(call, [leaf(a) for a in arrays]), sample
        assert pa.gradgradcheck(call, [leaf(a) for a in arrays]), sample


@pytest.mark.parametrize("name", sorted(set(COMPOSITES) - set(_INTERNAL)))
def test_composites_values_indices_gradients_and_dtypes_equal_pytorchs(name):
    torch = _torch()
    for sample in _composite_samples(name):
        args = [pa.tensor(a, requires_grad=a.dtype.kind == "f") if isinstance(a, np.ndarray)
                else a for a in sample.args]
        targs = [torch.tensor(a, requires_grad=a.dtype.kind == "f")
                 if isinstance(a, np.ndarray) else a for a in sample.args]
        got = getattr(pa, name)(*args, **sample.kwargs)
        want = getattr(torch, name)(*targs, **sample.kwargs)
        got = got if isinstance(got, tuple) else (got,)
        want = want if isinstance(want, tuple) else (want,)
        assert len(got) == len(want), sample
        for a, b in zip(got, want):
            assert str(a.dtype) == str(b.dtype).replace("torch.", ""), sample
            np.testing.assert_allclose(a.numpy(), _np(b), rtol=1e-12, atol=1e-14,
                                       err_msg=f"{name} {sample}")
        leaves = [a for a in args if isinstance(a, pa.Tensor) and a.requires_grad]
        tleaves = [a for a in targs if hasattr(a, "requires_grad") and a.requires_grad]
        w = rand(got[0].shape, 43)
        gs = pa.grad(got[0], leaves, grad_outputs=w, allow_unused=True)
        tgs = torch.autograd.grad(want[0], tleaves, torch.tensor(w), allow_unused=True)
        for g, gt in zip(gs, tgs):
            np.testing.assert_allclose(np.asarray(g), gt.numpy(), rtol=1e-12, atol=1e-14,
                                       err_msg=f"{name} {sample}")


def test_sample_class_is_shared():
    assert COMPOSITES["max"](np.random.default_rng(0))[0].__class__ is Sample


def test_a_required_dim_and_the_composites_take_numpy_names_too():
    """`logsumexp(x, axis=1)` (a required dim given by its alias: a TypeError before) and
    the composites (`sort(x, axis=0)`, `kthvalue(..., keepdims=True)`), as declared ops."""
    x = leaf(rand((2, 3), 44))
    assert_bitwise(pa.logsumexp(x, axis=1).numpy(), pa.logsumexp(x, 1).numpy())
    assert_bitwise(x.cumsum(axis=0).numpy(), pa.cumsum(x, 0).numpy())
    assert_bitwise(pa.sort(x, axis=0).values.numpy(), pa.sort(x, 0).values.numpy())
    assert pa.kthvalue(x, 1, axis=1, keepdims=True).values.shape == (2, 1)
    with pytest.raises(TypeError, match="logsumexp\\(\\) missing 1 required positional "
                                        "argument: 'dim'"):
        pa.logsumexp(x)
    with pytest.raises(TypeError, match="got both 'dim' and its alias 'axis'"):
        pa.sort(x, dim=0, axis=0)
    assert list(inspect.signature(pa.logsumexp).parameters) == ["input", "dim", "keepdim"]
    assert inspect.signature(pa.logsumexp).parameters["dim"].default is inspect.Parameter.empty
    assert list(inspect.signature(pa.max).parameters) == ["input", "dim", "keepdim"]


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_row_blocks_are_the_whole_array_arithmetic(name, dtype, monkeypatch):
    # classes last and contiguous go through cache-resident row blocks (issue 28): the
    # same arithmetic as the whole-array code, bit for bit, with many blocks (short last
    # block), -inf and inf rows included
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((3, 7, 11)) * 4).astype(dtype)
    x[0, 1] = -np.inf
    x[1, 2, 3] = np.inf
    g = rng.standard_normal(x.shape).astype(dtype)
    fn = getattr(pa.nn.functional, name)

    def run():
        t = pa.Tensor(x, requires_grad=True)
        with np.errstate(all="ignore"):
            y = fn(t, -1)
            (gx,) = pa.grad(y, [t], grad_outputs=g)
        return np.asarray(y.numpy()), np.asarray(gx)
    monkeypatch.setattr(_common, "ROW_BLOCK_BYTES", 2 * 11 * x.itemsize // 4)
    assert rd._rows(x, d=2)[1][0] == 2              # two rows a block
    blocked = run()
    monkeypatch.setattr(rd, "_rows", lambda *a, d: None)
    whole = run()
    for a, b in zip(blocked, whole):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == dtype


def test_softmax_of_an_input_within_one_row_block_takes_the_whole_array_code():
    # One block is no blocking: the block set-up (views, ranges, a loop) cost 8x8 inputs
    # ~3 us a call (issue 26's per-op A/B: softmax 1.5x the pre-op-layer tree).
    small = np.zeros((8, 8))
    large = np.zeros((2, _common.ROW_BLOCK_BYTES // 8 + 1))
    assert rd._rows(small, d=1) is None and rd._rows(small, small, d=1) is None
    assert rd._rows(large, d=1) is not None
