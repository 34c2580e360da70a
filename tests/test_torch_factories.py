"""PyTorch's dtypes, factories and Generator under their names (issue 27): `pa.float32 ...`,
`pa.zeros ... pa.meshgrid`, `pa.tensor` inference, `pa.Generator`, compared with torch."""
from __future__ import annotations

import copy
import pickle
import warnings

import numpy as np
import pytest

import parallel_autograd as pa

torch = pytest.importorskip("torch")


def npdt(torch_dtype) -> np.dtype:
    return np.dtype(str(torch_dtype).rsplit(".", 1)[-1])


@pytest.fixture
def default_float32():
    """Run with float32 as the default dtype (PyTorch's), in both libraries."""
    before, tbefore = pa.get_default_dtype(), torch.get_default_dtype()
    pa.set_default_dtype(pa.float32)
    torch.set_default_dtype(torch.float32)
    yield
    pa.set_default_dtype(before)
    torch.set_default_dtype(tbefore)


@pytest.fixture(params=["float32", "float64"])
def both_defaults(request):
    """The test under each default dtype, the same in torch and here."""
    before, tbefore = pa.get_default_dtype(), torch.get_default_dtype()
    pa.set_default_dtype(request.param)
    torch.set_default_dtype(getattr(torch, request.param))
    yield request.param
    pa.set_default_dtype(before)
    torch.set_default_dtype(tbefore)


# ---- dtypes ------------------------------------------------------------------------------------
DTYPE_NAMES = ["float32", "float64", "float16", "half", "double", "float", "int64", "long",
               "int32", "int", "int16", "short", "int8", "uint8", "bool", "complex64",
               "complex128", "cfloat", "cdouble"]


@pytest.mark.parametrize("name", DTYPE_NAMES)
def test_dtype_objects_match_torch(name):
    d, t = getattr(pa, name), getattr(torch, name)
    assert isinstance(d, pa.dtype)
    assert np.dtype(d) == npdt(t) and d == npdt(t) and d == npdt(t).type
    for attr in ("is_floating_point", "is_complex", "is_signed", "itemsize"):
        assert getattr(d, attr) == getattr(t, attr), attr
    assert pickle.loads(pickle.dumps(d)) == d


def test_star_import_does_not_shadow_python_types():
    ns = {}
    exec("from parallel_autograd import *", ns)
    assert "float" not in ns and "int" not in ns and "bool" not in ns
    assert ns["float32"] is pa.float32 and ns["long"] is pa.int64


@pytest.mark.parametrize("a", ["bool", "uint8", "int8", "int16", "int32", "int64", "float16",
                               "float32", "float64", "complex64", "complex128"])
def test_promote_types_and_can_cast_match_torch(a):
    for b in ["bool", "uint8", "int8", "int64", "float16", "float32", "float64", "complex64"]:
        assert pa.promote_types(getattr(pa, a), getattr(pa, b)) == \
            npdt(torch.promote_types(getattr(torch, a), getattr(torch, b))), (a, b)
        assert pa.can_cast(getattr(pa, a), getattr(pa, b)) == \
            torch.can_cast(getattr(torch, a), getattr(torch, b)), (a, b)


def test_result_type_matches_torch(both_defaults):
    cases = [(np.arange(3), 2.5), (np.arange(3, dtype=np.float32), np.float64(2.0)),
             (np.arange(3), np.array(2.0)), (np.zeros(2, np.float16), 1),
             (np.array(True), 3), (np.ones(2, np.int8), np.ones(2, np.uint8))]
    for a, b in cases:
        ta = torch.tensor(a) if isinstance(a, np.ndarray) else a
        tb = torch.tensor(b) if isinstance(b, np.ndarray) else (
            b.item() if isinstance(b, np.generic) else b)
        assert pa.result_type(pa.tensor(a), pa.tensor(b) if isinstance(b, np.ndarray) else
                              (b.item() if isinstance(b, np.generic) else b)) == \
            npdt(torch.result_type(ta, tb)), (a, b)


@pytest.mark.parametrize("name", ["float16", "float32", "float64", "complex64"])
def test_finfo_matches_torch(name):
    f, t = pa.finfo(getattr(pa, name)), torch.finfo(getattr(torch, name))
    for attr in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype"):
        assert getattr(f, attr) == getattr(t, attr), attr


@pytest.mark.parametrize("name", ["uint8", "int8", "int16", "int32", "int64"])
def test_iinfo_matches_torch(name):
    f, t = pa.iinfo(getattr(pa, name)), torch.iinfo(getattr(torch, name))
    assert (f.bits, f.max, f.min, f.dtype) == (t.bits, t.max, t.min, t.dtype)


def test_finfo_iinfo_errors_and_default():
    assert pa.finfo().dtype == np.dtype(pa.get_default_dtype()).name
    with pytest.raises(TypeError, match="floating point"):
        pa.finfo(pa.int64)
    with pytest.raises(TypeError, match="integer"):
        pa.iinfo(pa.float32)
    with pytest.raises(TypeError, match="not supported"):
        pa.iinfo(pa.bool)
    with pytest.raises(TypeError, match="floating-point types"):
        pa.set_default_dtype(pa.int64)


def test_default_dtype_is_read_by_the_factories(default_float32):
    for make in (lambda m: m.zeros(2), lambda m: m.ones(2, 2), lambda m: m.empty(3),
                 lambda m: m.full((2,), 1.5), lambda m: m.rand(2), lambda m: m.randn(2),
                 lambda m: m.eye(2), lambda m: m.linspace(0, 1, 3), lambda m: m.logspace(0, 1, 3),
                 lambda m: m.arange(0.5, 2), lambda m: m.tensor([1.0, 2])):
        assert make(pa).dtype == npdt(make(torch).dtype) == np.float32
    pa.set_default_dtype(pa.float64)
    assert pa.zeros(2).dtype == np.float64 and pa.tensor(1.5).dtype == np.float64


# ---- pa.tensor inference -------------------------------------------------------------------------
TENSOR_DATA = [[1, 2.0], [True, 1], [True, False], 1, 1.0, True, np.float32(1.0),
               np.int32(3), np.array([1, 2], np.int32), [np.float32(1), 2], [np.float32(1), 2.5],
               [np.float64(1), 2.5], [np.float16(1), 2.5], [np.int16(1)], [np.int8(1), np.uint8(2)],
               np.array(3.0), [], [[]], [[1, 2], [3, 4]], [[1.5], [2]], np.float64(2),
               [np.float32(1), True], np.zeros((2, 0), np.float16), ((1, 2.5), (3, 4)),
               [[np.float16(1), 2], [3, 4]], [[True, 2], [np.int8(1), 0]]]


@pytest.mark.parametrize("data", TENSOR_DATA, ids=[repr(d)[:30] for d in TENSOR_DATA])
def test_tensor_infers_dtype_as_torch(both_defaults, data):
    t = torch.tensor(data)
    x = pa.tensor(data)
    assert x.dtype == npdt(t.dtype)
    assert x.shape == tuple(t.shape)
    np.testing.assert_array_equal(x.numpy(), t.numpy())


def test_tensor_of_tensors_and_copy_semantics():
    src = pa.tensor([1.0, 2.0], requires_grad=True)
    with pytest.warns(UserWarning, match="clone"):
        y = pa.tensor(src)
    assert y.is_leaf and not y.requires_grad and y.numpy() is not src.numpy()
    z = pa.tensor([pa.tensor(1.0), pa.tensor(2.0)])
    assert z.dtype == np.float64 and z.tolist() == [1.0, 2.0]
    a = np.arange(3.0)
    t = pa.tensor(a)
    a[0] = 9
    assert t.numpy()[0] == 0                   # a copy
    assert pa.tensor([1, 2], dtype=pa.float32).dtype == np.float32
    assert pa.tensor([1, 2], dtype="float16").dtype == np.float16
    assert pa.tensor([1, 2], dtype=np.int8).dtype == np.int8


def test_tensor_errors_as_torch():
    with pytest.raises(RuntimeError, match="floating point"):
        pa.tensor([1, 2], requires_grad=True)
    with pytest.raises(RuntimeError, match="floating point"):
        torch.tensor([1, 2], requires_grad=True)
    with pytest.raises(ValueError):
        pa.tensor([[1, 2], [3]])
    with pytest.raises(ValueError):
        torch.tensor([[1, 2], [3]])
    with pytest.raises(TypeError):
        pa.tensor("a")
    with pytest.raises(TypeError):
        torch.tensor("a")
    with pytest.raises(TypeError):
        pa.tensor([1, 2], dtype="notadtype")


def test_from_numpy_shares_memory_and_as_tensor():
    a = np.arange(4.0)
    t = pa.from_numpy(a)
    a[1] = 7.0
    assert t.numpy()[1] == 7.0 and t.dtype == np.float64
    t.numpy()[2] = 5.0
    assert a[2] == 5.0
    with pytest.raises(TypeError, match="expected np.ndarray"):
        pa.from_numpy([1, 2])
    with pytest.raises(TypeError, match="expected np.ndarray"):
        torch.from_numpy([1, 2])
    assert pa.as_tensor(a).numpy() is a                           # shared
    assert pa.as_tensor(a, dtype=pa.float32).dtype == np.float32
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    assert pa.as_tensor(x) is x
    y = pa.as_tensor(x, dtype=pa.float32)
    assert y.dtype == np.float32 and y.requires_grad           # on the graph, as x.to()
    assert pa.as_tensor([1, 2.0]).dtype == np.dtype(pa.get_default_dtype())
    assert pa.as_tensor(3).dtype == np.int64


# ---- filled factories ----------------------------------------------------------------------------
FILLED = {
    "zeros_ints": lambda m: m.zeros(2, 3),
    "zeros_tuple": lambda m: m.zeros((2, 3)),
    "zeros_list": lambda m: m.zeros([2, 0]),
    "zeros_0d": lambda m: m.zeros(()),
    "zeros_np_int": lambda m: m.zeros(np.int64(2)),
    "ones_dtype": lambda m: m.ones(2, dtype=m.int32),
    "ones_bool": lambda m: m.ones(3, dtype=m.bool),
    "full_int": lambda m: m.full((2,), 3),
    "full_float": lambda m: m.full((2, 2), 1.5),
    "full_bool": lambda m: m.full((2,), True),
    "full_trunc": lambda m: m.full((2,), 1.7, dtype=m.int64),
    "full_0d": lambda m: m.full([], 2.5),
    "zeros_like_int": lambda m: m.zeros_like(m.tensor([1, 2])),
    "ones_like_dtype": lambda m: m.ones_like(m.tensor([1, 2]), dtype=m.float64),
    "full_like_trunc": lambda m: m.full_like(m.tensor([1, 2]), 2.7),
    "full_like_float": lambda m: m.full_like(m.tensor([1.0, 2.0], dtype=m.float32), 2.7),
    "eye": lambda m: m.eye(3),
    "eye_rect": lambda m: m.eye(2, 4, dtype=m.int64),
    "eye_empty": lambda m: m.eye(3, 0),
    "empty_like_shape": lambda m: m.empty_like(m.ones(2, 3)).shape,
    "empty_shape": lambda m: m.empty(2, 3, dtype=m.float16).shape,
}


def _same(x, t):
    if isinstance(t, torch.Size) or isinstance(t, tuple):
        assert tuple(x) == tuple(t)
        return
    assert x.dtype == npdt(t.dtype), (x.dtype, t.dtype)
    assert x.shape == tuple(t.shape)
    np.testing.assert_array_equal(x.numpy(), t.numpy())


@pytest.mark.parametrize("name", sorted(FILLED))
def test_filled_factories_match_torch(both_defaults, name):
    _same(FILLED[name](pa), FILLED[name](torch))


RANGES = {
    "arange_int": lambda m: m.arange(5),
    "arange_start_end": lambda m: m.arange(2, 9, 3),
    "arange_neg": lambda m: m.arange(5, 0, -1),
    "arange_end_kw": lambda m: m.arange(end=4),
    "arange_float": lambda m: m.arange(0, 1, 0.25),
    "arange_float_end": lambda m: m.arange(2.5),
    "arange_tensor": lambda m: m.arange(m.tensor(2.5)),
    "arange_np_float": lambda m: m.arange(np.float32(2.5)),
    "arange_int_dtype_float": lambda m: m.arange(0, 5, 2, dtype=m.float64),
    "arange_trunc": lambda m: m.arange(0.5, 4, dtype=m.int64),
    "arange_tenth": lambda m: m.arange(0.1, 2.3, 0.1, dtype=m.float64),
    "arange_neg_float": lambda m: m.arange(1.0, -1.0, -0.3, dtype=m.float64),
    "arange_empty": lambda m: m.arange(3, 3),
    "linspace": lambda m: m.linspace(0, 1, 5, dtype=m.float64),
    "linspace_down": lambda m: m.linspace(1, 0, 4, dtype=m.float64),
    "linspace_odd": lambda m: m.linspace(-3.3, 7.1, 11, dtype=m.float64),
    "linspace_f32": lambda m: m.linspace(1, 0, 4, dtype=m.float32),
    "linspace_f32_long": lambda m: m.linspace(-2.5, 3.7, 101, dtype=m.float32),
    "linspace_int": lambda m: m.linspace(0, 10, 5, dtype=m.int64),
    "linspace_0": lambda m: m.linspace(0, 1, 0),
    "linspace_1": lambda m: m.linspace(2, 1, 1),
    "linspace_tensors": lambda m: m.linspace(m.tensor(0.0), m.tensor(1.0), 3),
    "logspace": lambda m: m.logspace(0, 3, 4, dtype=m.float64),
    "logspace_base2": lambda m: m.logspace(-1, 2, 7, base=2, dtype=m.float64),
    "logspace_int": lambda m: m.logspace(0, 3, 4, dtype=m.int64),
}


@pytest.mark.parametrize("name", sorted(RANGES))
def test_ranges_match_torch(both_defaults, name):
    x, t = RANGES[name](pa), RANGES[name](torch)
    assert x.dtype == npdt(t.dtype) and x.shape == tuple(t.shape)
    if x.dtype.kind == "f":  # torch vectorises `start + i * step` in chunks: last-ulp noise
        tol = 1e-15 if x.dtype == np.float64 else 2e-7
        np.testing.assert_allclose(x.numpy(), t.numpy(), rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(x.numpy(), t.numpy())


ERRORS = {
    "zeros_neg": (lambda m: m.zeros(-1), RuntimeError),
    "zeros_float": (lambda m: m.zeros(2.0), TypeError),
    "zeros_str": (lambda m: m.zeros((2, "a")), TypeError),
    "zeros_nested": (lambda m: m.zeros(2, (3,)), TypeError),
    "full_int_size": (lambda m: m.full(2, 1.5), TypeError),
    "eye_neg": (lambda m: m.eye(-1), RuntimeError),
    "arange_zero_step": (lambda m: m.arange(0, 5, 0), RuntimeError),
    "arange_sign": (lambda m: m.arange(5, 0, 1), RuntimeError),
    "arange_bool": (lambda m: m.arange(5, dtype=m.bool), NotImplementedError),
    "arange_trunc_zero_step": (lambda m: m.arange(0, 1, 0.25, dtype=m.int64), ValueError),
    "linspace_neg": (lambda m: m.linspace(0, 1, -1), RuntimeError),
    "grad_int": (lambda m: m.zeros(2, dtype=m.int64, requires_grad=True), RuntimeError),
    "like_list": (lambda m: m.zeros_like([1, 2]), TypeError),
    "rand_int": (lambda m: m.rand(2, dtype=m.int64), NotImplementedError),
    "randn_int": (lambda m: m.randn(2, dtype=m.int64), NotImplementedError),
    "rand_like_int": (lambda m: m.rand_like(m.tensor([1, 2])), NotImplementedError),
    "randint_empty": (lambda m: m.randint(5, 5, (2,)), RuntimeError),
    "randint_bool_range": (lambda m: m.randint(2, 5, (2,), dtype=m.bool), RuntimeError),
    "randint_uint8_low": (lambda m: m.randint(-3, 0, (2,), dtype=m.uint8), RuntimeError),
    "randint_uint8_high": (lambda m: m.randint(0, 300, (2,), dtype=m.uint8), RuntimeError),
    "randint_int_size": (lambda m: m.randint(10, 2), TypeError),
    "randperm_neg": (lambda m: m.randperm(-1), RuntimeError),
    "meshgrid_empty": (lambda m: m.meshgrid(indexing="ij"), RuntimeError),
    "meshgrid_2d": (lambda m: m.meshgrid(m.tensor([[1, 2]]), indexing="ij"), RuntimeError),
    "meshgrid_dtypes": (lambda m: m.meshgrid(m.tensor([1, 2]), m.tensor([3.0]), indexing="ij"),
                        RuntimeError),
    "meshgrid_indexing": (lambda m: m.meshgrid(m.tensor([1, 2]), indexing="foo"), RuntimeError),
    "multinomial_int": (lambda m: m.multinomial(m.tensor([1, 1]), 1), RuntimeError),
    "multinomial_neg": (lambda m: m.multinomial(m.tensor([0.0, -1.0]), 1), RuntimeError),
    "multinomial_zero": (lambda m: m.multinomial(m.tensor([0.0, 0.0]), 1), RuntimeError),
    "multinomial_3d": (lambda m: m.multinomial(m.ones(2, 2, 2), 1), RuntimeError),
    "multinomial_n0": (lambda m: m.multinomial(m.ones(3), 0), RuntimeError),
    "multinomial_too_many": (lambda m: m.multinomial(m.ones(3), 4), RuntimeError),
    "normal_neg_std": (lambda m: m.normal(m.zeros(2), -1.0), RuntimeError),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors_have_torchs_types(name):
    fn, exc = ERRORS[name]
    with pytest.raises(exc):
        fn(torch)
    with pytest.raises(exc):
        fn(pa)


def test_requires_grad_on_integers_is_torchs_runtimeerror_and_a_typeerror():
    for make in (lambda: pa.tensor([1, 2], requires_grad=True),
                 lambda: pa.zeros(2, dtype=pa.int64, requires_grad=True),
                 lambda: pa.arange(3, requires_grad=True)):
        with pytest.raises(RuntimeError, match="floating point") as e:
            make()
        assert isinstance(e.value, TypeError)


def test_requires_grad_and_leaves():
    for make in (lambda: pa.zeros(2, requires_grad=True), lambda: pa.rand(2, requires_grad=True),
                 lambda: pa.full((2,), 1.0, requires_grad=True),
                 lambda: pa.linspace(0, 1, 3, requires_grad=True),
                 lambda: pa.tensor([1.0], requires_grad=True)):
        t = make()
        assert t.requires_grad and t.is_leaf
    x = pa.zeros(3, requires_grad=True)
    (x * 2).sum().backward()
    np.testing.assert_array_equal(x.grad, [2, 2, 2])


def test_meshgrid_matches_torch_with_gradients():
    a, b, c = [1.0, 2.0], [3.0, 4.0, 5.0], [6.0]
    for indexing in ("ij", "xy"):
        xs = [pa.tensor(v, requires_grad=True) for v in (a, b, c)]
        ts = [torch.tensor(v, requires_grad=True, dtype=torch.float64) for v in (a, b, c)]
        out, tout = pa.meshgrid(*xs, indexing=indexing), torch.meshgrid(*ts, indexing=indexing)
        w = [np.arange(o.numpy().size, dtype=np.float64).reshape(o.shape) for o in out]
        sum((o * wi).sum() for o, wi in zip(out, w)).backward()
        sum((o * torch.tensor(wi)).sum() for o, wi in zip(tout, w)).backward()
        for o, to in zip(out, tout):
            np.testing.assert_array_equal(o.numpy(), to.detach().numpy())
        for x, t in zip(xs, ts):
            np.testing.assert_array_equal(x.grad, t.grad.numpy())
    two = pa.meshgrid([pa.tensor(1), pa.tensor([1, 2])], indexing="xy")
    ttwo = torch.meshgrid([torch.tensor(1), torch.tensor([1, 2])], indexing="xy")
    for o, to in zip(two, ttwo):
        np.testing.assert_array_equal(o.numpy(), to.numpy())
    with pytest.warns(UserWarning, match="indexing"):
        g = pa.meshgrid(pa.tensor([1, 2]), pa.tensor([1, 2, 3]))
    assert g[0].shape == (2, 3)


# ---- random factories ---------------------------------------------------------------------------
RANDOM = {
    "rand": lambda m, g: m.rand(2, 3, generator=g),
    "rand_f64": lambda m, g: m.rand((4,), generator=g, dtype=m.float64),
    "rand_f16": lambda m, g: m.rand(5, generator=g, dtype=m.float16),
    "randn": lambda m, g: m.randn(3, generator=g),
    "randn_f64": lambda m, g: m.randn(2, 2, generator=g, dtype=m.float64),
    "randint_high": lambda m, g: m.randint(10, (3,), generator=g),
    "randint_low_high": lambda m, g: m.randint(3, 10, (2, 2), generator=g),
    "randint_kw": lambda m, g: m.randint(low=2, high=10, size=(2,), generator=g),
    "randint_size_kw": lambda m, g: m.randint(10, size=(2,), generator=g),
    "randint_high_kw": lambda m, g: m.randint(high=10, size=(2,), generator=g),
    "randint_float": lambda m, g: m.randint(5, (2,), generator=g, dtype=m.float32),
    "randperm": lambda m, g: m.randperm(6, generator=g),
    "randperm_f32": lambda m, g: m.randperm(3, generator=g, dtype=m.float32),
    "rand_like": lambda m, g: m.rand_like(m.ones(2, dtype=m.float64), generator=g),
    "randn_like": lambda m, g: m.randn_like(m.ones(2, 2, dtype=m.float32), generator=g),
    "randint_like": lambda m, g: m.randint_like(m.ones(3), 5, generator=g),
    "randint_like_low": lambda m, g: m.randint_like(m.ones(3, dtype=m.int32), 2, 5, generator=g),
    "multinomial": lambda m, g: m.multinomial(m.tensor([0.2, 0.8]), 4, True, generator=g),
    "multinomial_rows": lambda m, g: m.multinomial(m.ones(3, 4), 2, generator=g),
    "normal_numbers": lambda m, g: m.normal(0.0, 1.0, (2,), generator=g),
    "normal_tensor": lambda m, g: m.normal(m.zeros(3), 2.0, generator=g),
    "normal_both": lambda m, g: m.normal(m.zeros(2, 1), m.ones(3), generator=g),
}


@pytest.mark.parametrize("name", sorted(RANDOM))
def test_random_factories_match_torch_dtype_and_shape(both_defaults, name):
    x = RANDOM[name](pa, pa.Generator().manual_seed(0))
    t = RANDOM[name](torch, torch.Generator().manual_seed(0))
    assert x.dtype == npdt(t.dtype) and x.shape == tuple(t.shape)
    y = RANDOM[name](pa, pa.Generator().manual_seed(0))
    np.testing.assert_array_equal(x.numpy(), y.numpy())          # the generator decides


def test_random_values_in_range_and_distribution():
    g = pa.Generator().manual_seed(1)
    u = pa.rand(100000, generator=g, dtype=pa.float16)
    assert 0 <= u.numpy().min() and u.numpy().max() < 1
    u32 = pa.rand(100000, generator=g, dtype=pa.float32)
    assert u32.numpy().max() < 1 and abs(u32.numpy().mean() - 0.5) < 0.01
    z = pa.randn(100000, generator=g, dtype=pa.float64)
    assert abs(z.numpy().mean()) < 0.02 and abs(z.numpy().std() - 1) < 0.02
    r = pa.randint(3, 7, (10000,), generator=g)
    assert set(np.unique(r.numpy())) == {3, 4, 5, 6}
    p = pa.randperm(50, generator=g)
    assert sorted(p.numpy().tolist()) == list(range(50))
    m = pa.multinomial(pa.tensor([0.0, 1.0, 3.0]), 20000, True, generator=g)
    counts = np.bincount(m.numpy(), minlength=3)
    assert counts[0] == 0 and abs(counts[2] / counts[1] - 3) < 0.3
    m2 = pa.multinomial(pa.tensor([[0.0, 1.0, 0.0, 2.0]] * 50), 4, generator=g)
    assert all(sorted(row) == [0, 1, 2, 3] for row in m2.numpy().tolist())
    assert set(m2.numpy()[:, :2].ravel()) <= {1, 3}             # nonzero weights first


def test_normal_with_tensor_arguments_is_on_the_graph_with_zero_gradient():
    m = pa.zeros(3, requires_grad=True)
    s = pa.ones(1, requires_grad=True)
    y = pa.normal(m, s, generator=pa.Generator())
    assert y.requires_grad and y.shape == (3,)
    y.sum().backward()
    np.testing.assert_array_equal(m.grad, 0)
    np.testing.assert_array_equal(s.grad, 0)


def test_default_generator_is_used_and_randn_keeps_rng_and_seed():
    pa.manual_seed(5)
    a = pa.rand(3)
    pa.manual_seed(5)
    assert np.array_equal(a.numpy(), pa.rand(3).numpy())
    assert np.array_equal(pa.randn(3, seed=4).numpy(), pa.randn(3, seed=4).numpy())
    rng = np.random.default_rng(2)
    assert np.array_equal(pa.randn(3, rng=rng).numpy(),
                          np.random.default_rng(2).standard_normal(3))
    assert np.array_equal(pa.randn(3, generator=np.random.default_rng(2)).numpy(),
                          np.random.default_rng(2).standard_normal(3))
    with pytest.raises(TypeError, match="not both"):
        pa.randn(2, generator=rng, rng=rng)
    with pytest.raises(TypeError, match="Generator"):
        pa.rand(2, generator=3)


# ---- Generator -----------------------------------------------------------------------------------
def test_generator_methods_as_torch():
    g, t = pa.Generator(), torch.Generator()
    assert g.initial_seed() == t.initial_seed() == 67280421310721
    assert isinstance(g, np.random.Generator)
    assert g.device == pa.device("cpu") and str(g.device) == str(t.device)
    assert g.manual_seed(3) is g and g.initial_seed() == 3
    assert np.array_equal(g.random(4), np.random.default_rng(3).random(4))
    s = g.seed()
    assert isinstance(s, int) and g.initial_seed() == s
    g.manual_seed(-1)
    t.manual_seed(-1)
    assert g.initial_seed() == t.initial_seed() == 2 ** 64 - 1
    with pytest.raises(RuntimeError):
        g.manual_seed(1.5)
    with pytest.raises(RuntimeError):
        t.manual_seed(1.5)
    with pytest.raises(ValueError):
        g.manual_seed(2 ** 64)
    with pytest.raises(ValueError):
        t.manual_seed(2 ** 64)
    with pytest.raises(RuntimeError, match="CPU only"):
        pa.Generator("cuda")


def test_generator_state_round_trip():
    g = pa.Generator().manual_seed(7)
    state = g.get_state()
    assert isinstance(state, pa.Tensor) and state.dtype == np.uint8 and state.ndim == 1
    a = pa.rand(5, generator=g)
    assert g.set_state(state) is g
    np.testing.assert_array_equal(pa.rand(5, generator=g).numpy(), a.numpy())
    before = g.bit_generator.state
    with pytest.raises(TypeError, match="ByteTensor"):
        g.set_state("x")
    with pytest.raises(ValueError):
        g.set_state(pa.tensor([1, 2, 3], dtype=pa.uint8))
    assert g.bit_generator.state == before               # unchanged by bad input
    g.set_state(np.random.default_rng(3).bit_generator.state)   # numpy's dict too
    np.testing.assert_array_equal(g.random(2), np.random.default_rng(3).random(2))
    for clone in (pickle.loads(pickle.dumps(g)), copy.deepcopy(g)):
        assert type(clone) is pa.Generator and clone.initial_seed() == g.initial_seed()
        np.testing.assert_array_equal(clone.random(3), copy.deepcopy(g).random(3))


def test_default_generator_is_a_generator_sharing_the_initial_seed():
    assert isinstance(pa.default_generator, pa.Generator)
    g = pa.manual_seed(11)
    assert g is pa.default_generator and g.initial_seed() == 11
    assert pa.random.initial_seed() == 11
    pa.default_generator.manual_seed(12)
    assert pa.random.initial_seed() == 12
    a = pa.rand(3)
    pa.manual_seed(12)
    np.testing.assert_array_equal(pa.rand(3).numpy(), a.numpy())


def test_generator_is_accepted_by_every_random_function():
    x = pa.ones(4, 4)
    for fn in (lambda g: pa.nn.functional.dropout(x, 0.5, generator=g),
               lambda g: pa.bernoulli(pa.full((4,), 0.5), generator=g),
               lambda g: pa.zeros(4).normal_(generator=g),
               lambda g: pa.zeros(4).uniform_(generator=g),
               lambda g: pa.zeros(4).bernoulli_(0.5, generator=g),
               lambda g: pa.nn.init.normal_(pa.zeros(3, 3), generator=g),
               lambda g: pa.nn.Linear(2, 2, generator=g).weight,
               lambda g: pa.multinomial(pa.ones(3), 2, generator=g)):
        a = fn(pa.Generator().manual_seed(4))
        b = fn(pa.Generator().manual_seed(4))
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_dtype_arguments_accept_pa_numpy_and_strings():
    for d in (pa.float32, np.float32, "float32", np.dtype("float32")):
        assert pa.zeros(2, dtype=d).dtype == np.float32
        assert pa.arange(3, dtype=d).dtype == np.float32
        assert pa.tensor([1], dtype=d).dtype == np.float32
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pa.ones(2).to(pa.float16).dtype == np.float16


def test_generator_drives_the_data_utilities():
    from parallel_autograd.utils.data import DataLoader, TensorDataset, random_split
    ds = TensorDataset(pa.arange(10))

    def order(seed):
        return [b[0].tolist() for b in DataLoader(ds, batch_size=4, shuffle=True,
                                                  generator=pa.Generator().manual_seed(seed))]

    assert order(0) == order(0) and sorted(sum(order(0), [])) == list(range(10))
    assert [len(s) for s in random_split(ds, [0.3, 0.7],
                                         generator=pa.Generator().manual_seed(1))] == [3, 7]
