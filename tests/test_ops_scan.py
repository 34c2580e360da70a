"""Reductions, scans and selections (ops/scan.py): prod, std, norm, amax, amin, argmax,
argmin, cumsum, cumprod, sort, topk, kthvalue, median. Values, indices, gradients and
second derivatives against PyTorch (zeros, ties and NaN included), finite differences
(gradcheck, gradgradcheck), lean rules, bad input, and the parallel engine bitwise."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_bitwise, temporary_bytes

import parallel_autograd as pa

torch = pytest.importorskip("torch")

TOL = dict(rtol=1e-10, atol=1e-12)
INF = float("inf")


def _pos(shape, seed=0):
    return np.random.default_rng(seed).uniform(0.5, 1.5, shape)


def _normal(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def _distinct(shape, seed=0):
    """Values at least 0.3 apart: no ties, no finite difference reorders them."""
    v = np.random.default_rng(seed).permutation(np.prod(shape)).reshape(shape)
    return (v - v.size / 2 + 0.5) * 0.3


def _magnitudes(shape, seed=0):
    """Distinct nonzero magnitudes, mixed signs: the p-norms are smooth around them."""
    rng = np.random.default_rng(seed)
    v = (rng.permutation(np.prod(shape)) + 1).reshape(shape) * 0.3
    return v * rng.choice([-1.0, 1.0], shape)


def _zeros(shape, seed=0):
    """Positive values with zeros: one in some slices, two in others, along both axes."""
    x = _pos(shape, seed)
    x[0, 1] = x[1, 1] = x[1, 3] = x[2, 0] = 0
    return x


def _ties(shape, seed=0):
    return np.round(_normal(shape, seed))


def _torch_prod_axes(t, axes):
    rest = [a for a in range(t.dim()) if a not in axes]
    return t.permute(*rest, *axes).reshape(*[t.shape[a] for a in rest], -1).prod(-1)


# name -> (pa fn, torch fn, input): each compared with PyTorch to the second derivative
CASES = {
    "prod_all": (lambda t: pa.prod(t), torch.prod, _pos((3, 4))),
    "prod_1": (lambda t: pa.prod(t, 1), lambda t: torch.prod(t, 1), _pos((3, 4))),
    "prod_0_keepdims": (lambda t: pa.prod(t, 0, keepdims=True),
                        lambda t: torch.prod(t, 0, keepdim=True), _pos((3, 4))),
    "prod_zeros_1": (lambda t: pa.prod(t, 1), lambda t: torch.prod(t, 1), _zeros((3, 4))),
    "prod_zeros_0": (lambda t: pa.prod(t, -2), lambda t: torch.prod(t, 0), _zeros((3, 4))),
    "prod_zeros_all": (lambda t: pa.prod(t), torch.prod, _zeros((3, 4))),
    "prod_one_zero_all": (lambda t: pa.prod(t), torch.prod, _zeros((3, 4)) + (_zeros((3, 4)) == 0)
                          * np.array([[0, 0, 0, 0], [0, 1, 0, 1], [1, 0, 0, 0]])),
    "prod_tuple": (lambda t: pa.prod(t, (0, 2)), lambda t: _torch_prod_axes(t, (0, 2)),
                   _pos((2, 3, 4))),
    "prod_tuple_zeros": (lambda t: pa.prod(t, (2, 0)), lambda t: _torch_prod_axes(t, (0, 2)),
                         _pos((2, 3, 4)) * (np.arange(24).reshape(2, 3, 4) % 7 != 3)),
    "std": (lambda t: pa.std(t), torch.std, _normal((3, 4))),
    "std_1": (lambda t: pa.std(t, 1), lambda t: torch.std(t, 1), _normal((3, 4))),
    "std_c0": (lambda t: pa.std(t, 0, correction=0), lambda t: torch.std(t, 0, correction=0),
               _normal((3, 4))),
    "std_c2_keep": (lambda t: pa.std(t, (0, 2), keepdim=True, correction=2),
                    lambda t: torch.std(t, (0, 2), correction=2, keepdim=True),
                    _normal((2, 3, 4))),
    "std_unbiased_false": (lambda t: pa.std(t, 1, unbiased=False),
                           lambda t: torch.std(t, 1, unbiased=False), _normal((3, 4))),
    "cumsum_0": (lambda t: pa.cumsum(t, 0), lambda t: torch.cumsum(t, 0), _normal((3, 4))),
    "cumsum_last": (lambda t: pa.cumsum(t, -1), lambda t: torch.cumsum(t, -1),
                    _normal((2, 3, 4))),
    "cumprod_1": (lambda t: pa.cumprod(t, 1), lambda t: torch.cumprod(t, 1), _pos((3, 4))),
    "cumprod_zeros_1": (lambda t: pa.cumprod(t, 1), lambda t: torch.cumprod(t, 1),
                        _zeros((3, 4))),
    "cumprod_zeros_0": (lambda t: pa.cumprod(t, 0), lambda t: torch.cumprod(t, 0),
                        _zeros((3, 4))),
    "amax_all_ties": (lambda t: pa.amax(t), torch.amax, _ties((3, 4), 2)),
    "amax_1_ties": (lambda t: pa.amax(t, 1), lambda t: torch.amax(t, 1), _ties((3, 4), 3)),
    "amin_tuple_ties": (lambda t: pa.amin(t, (0, 1), keepdims=True),
                        lambda t: torch.amin(t, (0, 1), keepdim=True), _ties((3, 4, 2), 4)),
    "sort": (lambda t: pa.sort(t).values, lambda t: torch.sort(t).values, _distinct((3, 4))),
    "sort_desc_0": (lambda t: pa.sort(t, 0, descending=True).values,
                    lambda t: torch.sort(t, 0, descending=True).values, _distinct((3, 4))),
    "topk": (lambda t: pa.topk(t, 2).values, lambda t: torch.topk(t, 2).values,
             _distinct((3, 4))),
    "topk_smallest_0": (lambda t: pa.topk(t, 2, 0, largest=False).values,
                        lambda t: torch.topk(t, 2, 0, largest=False).values, _distinct((3, 4))),
    "kthvalue": (lambda t: pa.kthvalue(t, 3).values, lambda t: torch.kthvalue(t, 3).values,
                 _distinct((3, 4))),
    "kthvalue_keep_0": (lambda t: pa.kthvalue(t, 1, 0, keepdims=True).values,
                        lambda t: torch.kthvalue(t, 1, 0, keepdim=True).values,
                        _distinct((3, 4))),
    "median_1": (lambda t: pa.median(t, 1).values, lambda t: torch.median(t, 1).values,
                 _distinct((3, 4))),
    "median_0_odd": (lambda t: pa.median(t, 0, keepdims=True).values,
                     lambda t: torch.median(t, 0, keepdim=True).values, _distinct((3, 4))),
    "median_all": (lambda t: pa.median(t), torch.median, _distinct((3, 4))),
    "median_all_ties": (lambda t: pa.median(t), torch.median, _ties((3, 5), 5)),
}
for _p in ("fro", 2, 1, INF, -INF, 0, 3, 0.5, 1.5):
    CASES[f"norm_{_p}"] = (lambda t, p=_p: pa.norm(t, p), lambda t, p=_p: torch.norm(t, p),
                           _magnitudes((3, 4)))
    CASES[f"norm_{_p}_1"] = (lambda t, p=_p: pa.norm(t, p, 1),
                             lambda t, p=_p: torch.norm(t, p, 1), _magnitudes((3, 4)))
    CASES[f"norm_{_p}_tuple_keep"] = (lambda t, p=_p: pa.norm(t, p, (0, 2), True),
                                      lambda t, p=_p: torch.norm(t, p, (0, 2), True),
                                      _magnitudes((2, 3, 2)))


def _pa_grads(fn, x, w, v):
    t = pa.tensor(x, requires_grad=True)
    y = fn(t)
    (g,) = pa.grad(y, [t], grad_outputs=pa.tensor(w), create_graph=True)
    h = None
    if g.requires_grad:
        (h,) = pa.grad((g * pa.tensor(v)).sum(), [t], allow_unused=True)
    return y.numpy(), g.numpy(), np.zeros_like(x) if h is None else h


def _torch_grads(fn, x, w, v):
    t = torch.tensor(x, requires_grad=True)
    y = fn(t)
    (g,) = torch.autograd.grad(y, t, torch.tensor(w), create_graph=True, allow_unused=True)
    h = None
    if g is not None and g.requires_grad:
        (h,) = torch.autograd.grad((g * torch.tensor(v)).sum(), t, allow_unused=True)
    as_np = lambda a: np.zeros_like(x) if a is None else a.detach().numpy(force=True)  # noqa
    return y.detach().numpy(), as_np(g), as_np(h)


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_gradients_and_second_derivatives_match_torch(name):
    fn, tfn, x = CASES[name]
    rng = np.random.default_rng(1)
    w = rng.uniform(0.5, 1.5, fn(pa.tensor(x)).shape)
    v = rng.uniform(0.5, 1.5, x.shape)
    for got, want, what in zip(_pa_grads(fn, x, w, v), _torch_grads(tfn, x, w, v),
                               ("value", "gradient", "second derivative")):
        np.testing.assert_allclose(got, want, err_msg=f"{name}: {what}", **TOL)


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradcheck_and_gradgradcheck(name):
    fn, _, x = CASES[name]
    if name.startswith("amax") or name.startswith("amin") or name == "median_all_ties":
        x = _distinct(x.shape)              # finite differences need the ties broken
    assert pa.gradcheck(fn, [pa.tensor(x, requires_grad=True)])
    assert pa.gradgradcheck(fn, [pa.tensor(x, requires_grad=True)])


def test_third_derivatives_of_prod_and_cumprod_with_zeros():
    # the twins' own twins: exact at zeros too (finite differences of the second order)
    x = _zeros((3, 4))
    for fn in (lambda t: pa.prod(t, 1), lambda t: pa.cumprod(t, 1)):
        def second(t, fn=fn):
            (g,) = pa.grad(fn(t).sum(), [t], create_graph=True)
            return g * g
        assert pa.gradgradcheck(second, [pa.tensor(x, requires_grad=True)])


# ---- indices and NaN -------------------------------------------------------------------
NAN_ROWS = np.array([[3.0, 1.0, np.nan, 2.0, 1.0], [4.0, 1.0, 2.0, 2.0, 3.0],
                     [1.0, np.nan, np.nan, 0.5, 0.5], [2.0, 2.0, 2.0, 2.0, 2.0]])


def _same(got, want, what):
    assert np.asarray(got.numpy()).dtype == np.int64 or got.dtype.kind == "f", what
    np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=what)


def test_sort_indices_are_stable_and_nan_is_largest_as_torch():
    x, t = pa.tensor(NAN_ROWS), torch.tensor(NAN_ROWS)
    for axis in (0, 1):
        for desc in (False, True):
            got, want = pa.sort(x, axis, desc, stable=True), torch.sort(
                t, dim=axis, descending=desc, stable=True)
            _same(got.values, want.values, f"sort values {axis} {desc}")
            _same(got.indices, want.indices, f"sort indices {axis} {desc}")
            assert got.indices.dtype == np.int64 and not got.indices.requires_grad


def test_topk_kthvalue_median_argmax_argmin_indices_match_torch():
    x = _distinct((4, 5), 3)
    p, t = pa.tensor(x), torch.tensor(x)
    for axis in (0, 1, -1):
        for k in (1, 2, 4):
            for largest in (True, False):
                _same(pa.topk(p, k, axis, largest).indices,
                      torch.topk(t, k, axis, largest).indices, f"topk {axis} {k} {largest}")
        _same(pa.kthvalue(p, 2, axis).indices, torch.kthvalue(t, 2, axis).indices, "kthvalue")
        _same(pa.median(p, axis).indices, torch.median(t, axis).indices, "median")
    ties = pa.tensor(NAN_ROWS[1:2].repeat(3, 0)), torch.tensor(NAN_ROWS[1:2].repeat(3, 0))
    for fn in ("argmax", "argmin"):
        for axis, keep in ((None, False), (0, False), (1, True), (-1, False), (None, True)):
            _same(getattr(pa, fn)(ties[0], axis, keep), getattr(torch, fn)(
                ties[1], axis, keep), f"{fn} {axis} {keep}")
            assert not getattr(pa, fn)(pa.tensor(x, requires_grad=True), axis).requires_grad
    _same(pa.argmax(pa.tensor(NAN_ROWS), 1), torch.argmax(torch.tensor(NAN_ROWS), 1), "nan")


def test_median_with_nan_and_even_counts_as_torch():
    x, t = pa.tensor(NAN_ROWS), torch.tensor(NAN_ROWS)
    got, want = pa.median(x, 1), torch.median(t, 1)
    np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
    np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
    assert np.isnan(pa.median(x).item()) and np.isnan(torch.median(t).item())
    even = np.array([4.0, 1.0, 3.0, 2.0])   # the lower of the two middle values
    assert pa.median(pa.tensor(even)).item() == torch.median(torch.tensor(even)).item() == 2.0
    assert pa.median(pa.tensor(even), 0).indices.item() == 3
    # NaN: the gradient goes to the NaNs (median over all) or to the index (along an axis)
    xg = pa.tensor(NAN_ROWS, requires_grad=True)
    tg = torch.tensor(NAN_ROWS, requires_grad=True)
    (pa.median(xg) + pa.median(xg, 1).values.sum()).backward()
    (torch.median(tg) + torch.median(tg, 1).values.sum()).backward()
    np.testing.assert_array_equal(xg.grad, tg.grad.numpy())


def test_kthvalue_and_topk_with_nan_as_torch():
    x, t = pa.tensor(NAN_ROWS[:3]), torch.tensor(NAN_ROWS[:3])
    np.testing.assert_array_equal(pa.kthvalue(x, 3).values.numpy(),
                                  torch.kthvalue(t, 3).values.numpy())
    np.testing.assert_array_equal(pa.topk(x, 2).values.numpy(), torch.topk(t, 2).values.numpy())


def test_results_are_named_tuples_like_torchs_return_types():
    x = pa.tensor(_distinct((3, 4)), requires_grad=True)
    for name, r in (("sort", pa.sort(x)), ("topk", x.topk(2)), ("kthvalue", x.kthvalue(1)),
                    ("median", x.median(1))):
        values, indices = r
        assert isinstance(r, tuple) and r.values is values and r.indices is indices
        assert r._fields == ("values", "indices") and repr(r).startswith(name + "(")
        assert values.requires_grad and not indices.requires_grad


def test_zero_norm_constant_std_and_p0_have_torchs_zero_gradients():
    z = np.zeros((2, 3))
    z[1] = 0.7                              # row 0: norm 0, row 1: std 0
    for fn, tfn in ((lambda t: pa.norm(t, 2, 1), lambda t: torch.norm(t, 2, 1)),
                    (lambda t: pa.norm(t, 3, 1), lambda t: torch.norm(t, 3, 1)),
                    (lambda t: pa.norm(t, 0.5, 1), lambda t: torch.norm(t, 0.5, 1)),
                    (lambda t: pa.norm(t, INF, 1), lambda t: torch.norm(t, INF, 1)),
                    (lambda t: pa.std(t, 1), lambda t: torch.std(t, 1))):
        p, t = pa.tensor(z, requires_grad=True), torch.tensor(z, requires_grad=True)
        fn(p).sum().backward()
        tfn(t).sum().backward()
        np.testing.assert_allclose(p.grad, t.grad.numpy(), **TOL)
    p = pa.tensor(_normal((2, 3)), requires_grad=True)
    y = pa.norm(p, 0)
    assert y.item() == 6
    y.backward()
    np.testing.assert_array_equal(p.grad, 0)


def test_zero_dim_inputs_as_torch():
    x = pa.tensor(2.5, requires_grad=True)
    for r in (pa.sort(x), pa.topk(x, 1), pa.kthvalue(x, 1), pa.median(x, 0)):
        assert r.values.shape == () and r.values.item() == 2.5 and r.indices.item() == 0
    for fn in (lambda t: pa.cumsum(t, 0), lambda t: pa.cumprod(t, -1), pa.prod, pa.amax,
               lambda t: pa.sort(t).values, lambda t: pa.median(t, 0).values, pa.median):
        y = fn(x)
        assert y.shape == ()
        (g,) = pa.grad(y, [x])
        assert g.item() == 1.0
    assert pa.argmax(x).item() == 0 and pa.argmin(x, 0).item() == 0


def test_dtypes():
    f = pa.tensor(_pos((3, 4)).astype(np.float32), requires_grad=True)
    for fn in (lambda t: pa.prod(t, 1), lambda t: pa.std(t, 0), lambda t: pa.norm(t, 3),
               lambda t: pa.cumsum(t, 1), lambda t: pa.cumprod(t, 0),
               lambda t: pa.sort(t).values, lambda t: pa.median(t)):
        y = fn(f)
        assert y.dtype == np.float32
        (g,) = pa.grad(y.sum(), [f])
        assert g.dtype == np.float32
    i = pa.tensor(np.array([[1, 2], [3, 4]], np.int32))
    assert pa.cumsum(i, 1).dtype == np.int64 and pa.prod(i).item() == 24
    d = pa.prod(f, 1, dtype=np.float64)
    assert d.dtype == np.float64
    (g,) = pa.grad(d.sum(), [f])
    assert g.dtype == np.float32
    assert pa.cumsum(i, 0, dtype=np.float64).dtype == np.float64


def test_tensor_methods():
    x = pa.tensor(_distinct((3, 4)))
    np.testing.assert_array_equal(x.prod(1).numpy(), pa.prod(x, 1).numpy())
    np.testing.assert_array_equal(x.std(correction=0).numpy(), pa.std(x, correction=0).numpy())
    np.testing.assert_array_equal(x.norm(1).numpy(), pa.norm(x, 1).numpy())
    np.testing.assert_array_equal(x.cumsum(0).numpy(), pa.cumsum(x, 0).numpy())
    np.testing.assert_array_equal(x.amin(0).numpy(), pa.amin(x, 0).numpy())
    assert x.argmax().item() == pa.argmax(x).item()
    np.testing.assert_array_equal(x.sort(0, True).indices.numpy(),
                                  pa.sort(x, 0, True).indices.numpy())


# ---- bad input --------------------------------------------------------------------------
def test_bad_arguments_are_refused_before_anything_is_recorded():
    """PyTorch's exception types: IndexError for a dim out of range or an empty dim
    reduced, RuntimeError for a repeated dim or k out of range, TypeError for a bad type."""
    x = pa.tensor(_normal((2, 3)), requires_grad=True)
    e = pa.tensor(np.zeros((2, 0)))
    cases = [
        (lambda: pa.prod(x, 2), IndexError, "prod: Dimension out of range"),
        (lambda: pa.std(x, (0, -2)), RuntimeError, "std: dim 0 appears multiple times"),
        (lambda: pa.std(x, correction="1"), TypeError, r"std\(\): correction must be"),
        (lambda: pa.std(x, correction=0, unbiased=True), TypeError, r"std\(\): give correction"),
        (lambda: pa.norm(x, "nuc"), ValueError, "norm: p='nuc' is not supported"),
        (lambda: pa.norm(x, "2"), ValueError, "norm: p='2' is not supported"),
        (lambda: pa.norm(x, [2]), ValueError, "norm: p must be a number"),
        (lambda: pa.norm(pa.tensor([1, 2])), RuntimeError, r"norm\(\): input dtype should be"),
        (lambda: pa.cumsum(x, 5), IndexError, "cumsum: Dimension out of range"),
        (lambda: pa.cumprod(x, 1.0), TypeError, "cumprod: dim must be an int"),
        (lambda: pa.sort(x, -3), IndexError, "sort: Dimension out of range"),
        (lambda: pa.topk(x, 4), RuntimeError, r"topk\(\): selected index k out of range"),
        (lambda: pa.topk(x, -1), RuntimeError, r"topk\(\): selected index k out of range"),
        (lambda: pa.topk(x, 1.5), TypeError, r"topk\(\): argument 'k' must be int"),
        (lambda: pa.kthvalue(x, 0), RuntimeError, r"kthvalue\(\): selected number k \(0\)"),
        (lambda: pa.kthvalue(x, 4, 1), RuntimeError, r"kthvalue\(\): selected number k"),
        (lambda: pa.median(e, 1), IndexError, r"median\(\): Expected reduction dim 1 to have"),
        (lambda: pa.kthvalue(e, 1), IndexError, r"kthvalue\(\): Expected reduction dim 1"),
        (lambda: pa.argmax(e, -1), IndexError, r"argmax\(\): Expected reduction dim 1"),
        (lambda: pa.median(x, 2), IndexError, "median: Dimension out of range"),
        (lambda: pa.argmax(x, 2), IndexError, "argmax: Dimension out of range"),
        (lambda: pa.argmin(pa.tensor(np.zeros(0))), IndexError,
         r"argmin\(\): Expected reduction dim to be specified"),
        (lambda: pa.amax(e), RuntimeError, r"amax\(\): Expected reduction dim to be specified"),
        (lambda: pa.amax(x, (0, 2)), IndexError, "amax: Dimension out of range"),
    ]
    for fn, exc, match in cases:
        with pytest.raises(exc, match=match):
            fn()
    assert x.grad is None


# ---- lean rules ---------------------------------------------------------------------------
LARGE = (1000, 1000)
SLACK = 0.1 * 8 * LARGE[0] * LARGE[1]


@pytest.fixture
def one_torch_thread():
    """PyTorch on one thread while comparing large arrays (its thread pool contends
    with the other test processes of a loaded 2-core machine), restored after."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


LEAN = {
    "prod": (lambda t: pa.prod(t, 1), torch.prod, dict(dim=1)),
    "std": (lambda t: pa.std(t, 0), torch.std, dict(dim=0)),
    "norm_2": (lambda t: pa.norm(t, 2, 1), torch.norm, dict(p=2, dim=1)),
    "norm_inf": (lambda t: pa.norm(t, INF), torch.norm, dict(p=INF)),
    "norm_3": (lambda t: pa.norm(t, 3, 0), torch.norm, dict(p=3, dim=0)),
    "norm_1": (lambda t: pa.norm(t, 1, 0), torch.norm, dict(p=1, dim=0)),
    "cumsum": (lambda t: pa.cumsum(t, 1), torch.cumsum, dict(dim=1)),
    "cumprod": (lambda t: pa.cumprod(t, 0), torch.cumprod, dict(dim=0)),
    "amax": (lambda t: pa.amax(t, 1), torch.amax, dict(dim=1)),
    "sort": (lambda t: pa.sort(t, 1).values, lambda t, dim: torch.sort(t, dim).values,
             dict(dim=1)),
    "median": (lambda t: pa.median(t, 0).values, lambda t, dim: torch.median(t, dim).values,
               dict(dim=0)),
}


@pytest.mark.parametrize("name", sorted(LEAN))
def test_rules_on_large_arrays_allocate_only_their_result(name, one_torch_thread):
    fn, tfn, kw = LEAN[name]
    x = np.random.default_rng(2).uniform(0.999, 1.001, LARGE)  # products stay finite
    y = fn(pa.tensor(x, requires_grad=True))
    node = y.grad_fn
    g = np.random.default_rng(3).uniform(0.5, 1.5, y.shape)
    before = [np.copy(a) for a in (g, *node.saved)]
    grad, extra = temporary_bytes(node.vjps[0], g, *node.saved, **(node.kwargs or {}))
    assert extra < SLACK, f"{name}: the rule allocated {extra} bytes beyond its result"
    for a, b in zip((g, *node.saved), before):
        np.testing.assert_array_equal(a, b, err_msg=f"{name} wrote into an argument")
    t = torch.tensor(x, requires_grad=True)
    tfn(t, **kw).backward(torch.tensor(g))
    np.testing.assert_allclose(grad, t.grad.numpy(), rtol=1e-9, atol=1e-12)


# ---- the parallel engine -------------------------------------------------------------------
def test_parallel_engine_is_bitwise_the_sequential_one():
    def graph(x):
        a = pa.prod(x[:, :6] * 0.5 + 1, 1) + pa.std(x, 0).sum() + pa.norm(x, 3, 1)
        b = pa.cumsum(x, 1)[:, -1] * pa.cumprod(x * 0.1 + 1, 0)[-1].sum()
        c = pa.sort(x, 1, True).values[:, 0] + pa.topk(x, 3, 0).values.sum(0).sum()
        d = pa.median(x, 1).values * pa.kthvalue(x, 2, 1).values + pa.amax(x, 1) * pa.median(x)
        return ((a + b + c) * d).sum()

    x = [pa.tensor(_distinct((16, 12), 9) * 0.05, requires_grad=True)]
    want = pa.grad(graph(*x), x)
    first = pa.grad(graph(*x), x, create_graph=True)
    want2 = pa.grad((first[0] * first[0]).sum(), x)
    with pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0) as eng:
        got = eng.grad(graph(*x), x)
        first = eng.grad(graph(*x), x, create_graph=True)
        got2 = eng.grad((first[0] * first[0]).sum(), x)
    assert_bitwise(want, got)
    assert_bitwise(want2, got2)
    assert np.array_equal(want[0], got[0]) and want[0].numpy().tobytes() == got[0].numpy().tobytes()


# ---- 0-d inputs with dim 0 or -1 ------------------------------------------------------------
ZERO_DIM = {
    "prod": (pa.prod, torch.prod),
    "std": (lambda t, d, k: pa.std(t, d, keepdim=k), lambda t, d, k: torch.std(t, d, keepdim=k)),
    "std_c0": (lambda t, d, k: pa.std(t, d, keepdim=k, correction=0),
               lambda t, d, k: torch.std(t, d, keepdim=k, correction=0)),
    "amax": (pa.amax, torch.amax),
    "amin": (pa.amin, torch.amin),
    "argmax": (pa.argmax, torch.argmax),
    "argmin": (pa.argmin, torch.argmin),
    "max_dim": (lambda t, d, k: pa.max(t, dim=d, keepdim=k).values,
                lambda t, d, k: torch.max(t, d, k).values),
    "min_dim": (lambda t, d, k: pa.min(t, dim=d, keepdim=k).values,
                lambda t, d, k: torch.min(t, d, k).values),
    "median": (lambda t, d, k: pa.median(t, d, k).values,
               lambda t, d, k: torch.median(t, d, k).values),
    "kthvalue": (lambda t, d, k: pa.kthvalue(t, 1, d, k).values,
                 lambda t, d, k: torch.kthvalue(t, 1, d, k).values),
    "topk": (lambda t, d, k: pa.topk(t, 1, d).values, lambda t, d, k: torch.topk(t, 1, d).values),
    "cumsum": (lambda t, d, k: pa.cumsum(t, d), lambda t, d, k: torch.cumsum(t, d)),
    "cumprod": (lambda t, d, k: pa.cumprod(t, d), lambda t, d, k: torch.cumprod(t, d)),
}
for _p in ("fro", 2, 1, 3, 0.5, INF, -INF, 0):
    ZERO_DIM[f"norm_{_p}"] = (lambda t, d, k, p=_p: pa.norm(t, p, d, k),
                              lambda t, d, k, p=_p: torch.norm(t, p, d, k))


@pytest.mark.filterwarnings(r"ignore:std\(\). degrees of freedom")
@pytest.mark.parametrize("name", sorted(ZERO_DIM))
def test_zero_dim_input_with_dim_0_or_minus_1_as_torch(name):
    """PyTorch gives a 0-d tensor one dimension, 0 or -1: the result is 0-d (with keepdim
    too). prod, std, norm, amax and amin raised numpy's AxisError."""
    fn, tfn = ZERO_DIM[name]
    dims = (0, -1, (0,), (-1,)) if name.startswith(("prod", "std", "norm", "am")) else (0, -1)
    for dim in dims:
        for keep in (False, True):
            if name == "prod" and isinstance(dim, tuple):
                continue                        # torch.prod takes one int
            x = pa.tensor(-2.5, requires_grad=True)
            tx = torch.tensor(-2.5, dtype=torch.float64, requires_grad=True)
            y, yt = fn(x, dim, keep), tfn(tx, dim, keep)
            assert y.shape == () == tuple(yt.shape), (dim, keep)
            np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-15, atol=0)
            if not yt.requires_grad or yt.grad_fn is None:
                continue
            (g,) = pa.grad(y, [x], allow_unused=True)
            (gt,) = torch.autograd.grad(yt, [tx], allow_unused=True)
            want = 0.0 if gt is None else gt.item()      # torch.norm(p=0): no gradient
            np.testing.assert_allclose(0.0 if g is None else g, want, rtol=1e-15, atol=0)
            if np.isfinite(y.item()) and name != "norm_0":
                for check in (pa.gradcheck, pa.gradgradcheck):
                    assert check(lambda t: fn(t, dim, keep), [pa.tensor(-2.5, requires_grad=True)])
    for bad in (1, -2):
        with pytest.raises((ValueError, IndexError), match="out of bounds|out of range"):
            fn(pa.tensor(-2.5), bad, False)


# ---- empty along a kept dimension -------------------------------------------------------------
EMPTY = {
    "argmax": (lambda t, d, k: (pa.argmax(t, d, k),), lambda t, d, k: (torch.argmax(t, d, k),)),
    "argmin": (lambda t, d, k: (pa.argmin(t, d, k),), lambda t, d, k: (torch.argmin(t, d, k),)),
    "median": (lambda t, d, k: tuple(pa.median(t, d, k)),
               lambda t, d, k: tuple(torch.median(t, d, k))),
    "kthvalue": (lambda t, d, k: tuple(pa.kthvalue(t, 1, d, k)),
                 lambda t, d, k: tuple(torch.kthvalue(t, 1, d, k))),
    "topk": (lambda t, d, k: tuple(pa.topk(t, 1, d)), lambda t, d, k: tuple(torch.topk(t, 1, d))),
    "sort": (lambda t, d, k: tuple(pa.sort(t, d)), lambda t, d, k: tuple(torch.sort(t, d))),
    "max_dim": (lambda t, d, k: tuple(pa.max(t, dim=d, keepdim=k)),
                lambda t, d, k: tuple(torch.max(t, d, k))),
    "min_dim": (lambda t, d, k: tuple(pa.min(t, dim=d, keepdim=k)),
                lambda t, d, k: tuple(torch.min(t, d, k))),
    "amax": (lambda t, d, k: (pa.amax(t, d, k),), lambda t, d, k: (torch.amax(t, d, k),)),
    "amin": (lambda t, d, k: (pa.amin(t, d, k),), lambda t, d, k: (torch.amin(t, d, k),)),
    "prod": (lambda t, d, k: (pa.prod(t, d, k),), lambda t, d, k: (torch.prod(t, d, k),)),
    "std": (lambda t, d, k: (pa.std(t, d, keepdim=k),),
            lambda t, d, k: (torch.std(t, d, keepdim=k),)),
    "norm_inf": (lambda t, d, k: (pa.norm(t, INF, d, k),),
                 lambda t, d, k: (torch.norm(t, INF, d, k),)),
    "cumprod": (lambda t, d, k: (pa.cumprod(t, d),), lambda t, d, k: (torch.cumprod(t, d),)),
}


@pytest.mark.filterwarnings(r"ignore:std\(\). degrees of freedom")
@pytest.mark.parametrize("name", sorted(EMPTY))
def test_empty_along_a_dimension_not_reduced_gives_an_empty_result_as_torch(name):
    """An empty tensor reduced along a dimension that is not empty: an empty result of
    PyTorch's shape, values and indices (argmax, argmin and median raised "the tensor is
    empty"). Reducing the empty dimension itself is refused, as in PyTorch."""
    fn, tfn = EMPTY[name]
    for shape, dim in (((4, 0), 0), ((0, 4), 1), ((0, 4), -1), ((2, 0, 3), 0), ((2, 0, 3), 2)):
        for keep in (False, True):
            x, tx = pa.tensor(np.zeros(shape), requires_grad=True), torch.zeros(
                shape, dtype=torch.float64, requires_grad=True)
            got, want = fn(x, dim, keep), tfn(tx, dim, keep)
            for a, b in zip(got, want):
                assert a.shape == tuple(b.shape), (shape, dim, keep)
                assert a.dtype == (np.int64 if b.dtype == torch.int64 else np.float64)
            if got[0].requires_grad:
                pa.backward(got[0].sum())
                assert x.grad.shape == shape
    if name not in ("sort", "cumprod", "topk", "prod", "std"):
        exc = RuntimeError if name == "norm_inf" else IndexError    # PyTorch's, both
        with pytest.raises(exc):
            fn(pa.tensor(np.zeros((4, 0))), 1, False)
        with pytest.raises(exc):
            tfn(torch.zeros(4, 0), 1, False)


def test_median_of_an_empty_tensor_is_nan_as_torch():
    for shape in ((0,), (3, 0)):
        x, tx = pa.tensor(np.zeros(shape), requires_grad=True), torch.zeros(
            shape, dtype=torch.float64, requires_grad=True)
        y, yt = pa.median(x), torch.median(tx)
        assert y.shape == () and np.isnan(y.item()) and np.isnan(yt.item())
        pa.backward(y)
        yt.backward()
        assert x.grad.shape == tuple(tx.grad.shape) == shape
    with pytest.raises(IndexError, match="argmax.*Expected reduction dim to be specified"):
        pa.argmax(pa.tensor(np.zeros((3, 0))))      # no dim: PyTorch refuses too


# ---- NaN: the inf-norms and amax/amin ----------------------------------------------------------
NAN = float("nan")
NAN_ROWS = np.array([[1.0, NAN, -3.0], [NAN, NAN, 2.0], [-3.0, NAN, 3.0], [0.0, NAN, 0.0],
                     [INF, NAN, -INF], [1.0, 2.0, -2.0], [-5.0, 5.0, -5.0], [0.0, 0.0, 0.0]])


def _first_and_second_order(fn, tfn, x0, w):
    """(value, gradient, create_graph gradient) of pa and of torch."""
    out = []
    for create_graph in (False, True):
        x, tx = pa.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
        y, yt = fn(x), tfn(tx)
        (g,) = pa.grad(y, [x], grad_outputs=pa.tensor(w), create_graph=create_graph)
        (gt,) = torch.autograd.grad(yt, [tx], torch.tensor(w), create_graph=create_graph)
        out.append((y.numpy(), yt.detach().numpy()))
        out.append((np.asarray(g.numpy() if isinstance(g, pa.Tensor) else g),
                    gt.detach().numpy()))
    return out


@pytest.mark.parametrize("p", [INF, -INF])
def test_inf_norms_of_slices_with_nan_as_torch(p):
    """PyTorch's inf-norm rule counts the NaNs among the maxima but multiplies by sign(x),
    0 at a NaN: a slice with a NaN gets gradient 0 (it got NaN everywhere here)."""
    w = np.random.default_rng(0).uniform(0.5, 1.5, len(NAN_ROWS))
    for fn, tfn, ww in (
            (lambda t: pa.norm(t, p, 1), lambda t: torch.norm(t, p, 1), w),
            (lambda t: pa.norm(t, p, -1, True), lambda t: torch.norm(t, p, -1, True), w[:, None]),
            (lambda t: pa.linalg.vector_norm(t, p, 1), lambda t: torch.linalg.vector_norm(t, p, 1),
             w),
            (lambda t: pa.linalg.vector_norm(t, p, 0), lambda t: torch.linalg.vector_norm(t, p, 0),
             w[:3]),
            (lambda t: pa.norm(t, p), lambda t: torch.norm(t, p), np.array(1.3))):
        for rows in (NAN_ROWS, NAN_ROWS[:1], NAN_ROWS[5:]):
            w_ = ww if ww.ndim == 0 or ww.shape[0] == 3 else ww[:len(rows)]
            for got, want in _first_and_second_order(fn, tfn, rows, w_):
                np.testing.assert_allclose(got, want, rtol=1e-15, atol=0)
    x = pa.tensor([1.0, NAN, -3.0], requires_grad=True)
    pa.norm(x, p, 0).backward()
    np.testing.assert_array_equal(x.grad, [0.0, 0.0, 0.0])


@pytest.mark.parametrize("name", ["amax", "amin"])
def test_amax_amin_of_slices_with_nan_as_torch(name):
    """PyTorch's amax/amin backward masks `x == result`, empty where the result is NaN, and
    divides by the count: the whole slice gets NaN (here the NaN got the gradient, as
    torch.max() does). Slices without NaN keep the even split among ties."""
    fn, tfn = getattr(pa, name), getattr(torch, name)
    w = np.random.default_rng(1).uniform(0.5, 1.5, len(NAN_ROWS))
    for f, tf, ww in ((lambda t: fn(t, 1), lambda t: tfn(t, 1), w),
                      (lambda t: fn(t, 0, True), lambda t: tfn(t, 0, True), w[None, :3]),
                      (lambda t: fn(t), lambda t: tfn(t), np.array(0.7))):
        for rows in (NAN_ROWS, NAN_ROWS[5:]):
            w_ = ww if ww.ndim != 1 else ww[:len(rows)]
            for got, want in _first_and_second_order(f, tf, rows, w_):
                np.testing.assert_allclose(got, want, rtol=1e-15, atol=0)
    x = pa.tensor(np.array([[1.0, NAN, -3.0], [1.0, 1.0, 0.0]]), requires_grad=True)
    fn(x, 1).sum().backward()
    np.testing.assert_array_equal(x.grad, [[NAN] * 3, [0.5, 0.5, 0] if name == "amax"
                                           else [0, 0, 1.0]])
    for other in (pa.max, pa.median):         # torch.max() and median(): the NaNs share
        x, tx = pa.tensor(NAN_ROWS[:3], requires_grad=True), torch.tensor(NAN_ROWS[:3],
                                                                           requires_grad=True)
        other(x).backward()
        getattr(torch, other.__name__)(tx).backward()
        np.testing.assert_array_equal(x.grad, tx.grad.numpy())


# ---- cumprod with inf and zeros -----------------------------------------------------------------
CUMPROD_ROWS = [[2, INF, 0, 2], [2, 0, INF, 3], [0, INF, 2, 0, INF], [INF, 0, 0, 3],
                [0, 1, 0, INF], [3, -INF, 2, 0.5], [-INF, 0, INF, 0, 1], [2, NAN, 0, 1],
                [0, NAN, 2, 1], [1e200, 1e200, 0, 2], [INF, 2, 3, 4], [0, 0, 0, 0],
                [INF], [0.0], [NAN]]


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # the twin's inf * 0
def test_cumprod_with_inf_and_zeros_as_torch():
    """PyTorch's cumprod_backward: before the first zero the sums from the end of g ans
    stop at that zero (ans is NaN after an inf meets a zero: gradient[0] of [2, inf, 0, 2]
    was NaN where PyTorch gives inf); at the first zero, the products up to the second
    zero times g zeroed beyond it; a dimension of size 1 passes g through. Under
    create_graph PyTorch runs its quadratic formula, whose NaNs differ: the twin follows
    that one."""
    rng = np.random.default_rng(4)
    for row in CUMPROD_ROWS:
        for x0, dim in ((np.array([row], float), 1), (np.array([row], float).T, 0),
                        (np.array([row, row[::-1]], float).T[None], 1)):
            w = rng.uniform(0.5, 1.5, x0.shape)
            for got, want in _first_and_second_order(lambda t: pa.cumprod(t, dim),
                                                     lambda t: torch.cumprod(t, dim), x0, w):
                np.testing.assert_allclose(got, want, rtol=1e-14, atol=0, err_msg=str(row))
    x = pa.tensor([2.0, INF, 0.0, 2.0], requires_grad=True)
    pa.cumprod(x, 0).backward(pa.tensor(np.ones(4)))
    np.testing.assert_array_equal(x.grad, [INF, NAN, INF, 0.0])
    x = pa.tensor([[INF], [0.0]], requires_grad=True)
    pa.cumprod(x, 1).backward(pa.tensor([[2.0], [3.0]]))
    np.testing.assert_array_equal(x.grad, [[2.0], [3.0]])
    z = _zeros((3, 4))                           # the zeros path still differentiates exactly
    for dim in (0, 1):
        assert pa.gradcheck(lambda t: pa.cumprod(t, dim), [pa.tensor(z, requires_grad=True)])
        assert pa.gradgradcheck(lambda t: pa.cumprod(t, dim), [pa.tensor(z, requires_grad=True)])
