"""F.one_hot, F.normalize, F.relu6, F.softmin, nn.ReLU6, nn.Softmin (issue 27) against
torch: values, gradients (float64), dtypes and exception types."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import parallel_autograd as pa
import parallel_autograd.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def both(x: np.ndarray):
    """(pa leaf, torch leaf) requiring grad, same float64 values."""
    return pa.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)


def check(pa_fn, torch_fn, x: np.ndarray, rtol=1e-12):
    a, t = both(x)
    ya, yt = pa_fn(a), torch_fn(t)
    assert ya.dtype == np.dtype(str(yt.dtype).split(".")[1]) and ya.shape == tuple(yt.shape)
    np.testing.assert_allclose(ya.numpy(), yt.detach().numpy(), rtol=rtol, atol=1e-14)
    w = np.random.default_rng(0).standard_normal(ya.shape)
    (ya * pa.tensor(w)).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(a.grad, t.grad.numpy(), rtol=rtol, atol=1e-14)


RNG = np.random.default_rng(1)
X = RNG.standard_normal((3, 4, 5))


@pytest.mark.parametrize("kwargs", [{}, {"p": 1}, {"p": 3.0}, {"dim": 0}, {"dim": -1},
                                    {"dim": (1, 2)}, {"p": float("inf"), "dim": 2},
                                    {"eps": 10.0}])
def test_normalize_matches_torch(kwargs):
    check(lambda x: F.normalize(x, **kwargs), lambda x: TF.normalize(x, **kwargs), X)


def test_normalize_zero_rows_and_errors():
    x = np.zeros((2, 3))
    x[1] = [3.0, 4.0, 0.0]
    check(lambda x: F.normalize(x), lambda x: TF.normalize(x), x)
    check(lambda x: F.normalize(x, dim=0), lambda x: TF.normalize(x, dim=0), x)
    with pytest.raises(TypeError, match="out="):
        F.normalize(pa.ones(2, 2), out=pa.ones(2, 2))


def test_relu6_matches_torch_including_the_bounds():
    x = np.array([-1.0, 0.0, 0.5, 3.0, 6.0, 7.0])
    check(F.relu6, TF.relu6, x)
    check(pa.nn.ReLU6(), torch.nn.ReLU6(), x)
    check(lambda v: F.relu6(v.clone(), inplace=True), lambda v: TF.relu6(v.clone(), inplace=True),
          x)
    m = pa.nn.ReLU6(inplace=True)
    assert isinstance(m, pa.nn.Hardtanh) and (m.min_val, m.max_val) == (0.0, 6.0)
    assert repr(m) == repr(torch.nn.ReLU6(inplace=True)) and repr(pa.nn.ReLU6()) == "ReLU6()"


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_softmin_matches_torch(dim):
    check(lambda x: F.softmin(x, dim), lambda x: TF.softmin(x, dim), X)
    check(pa.nn.Softmin(dim), torch.nn.Softmin(dim), X)
    assert repr(pa.nn.Softmin(dim)) == repr(torch.nn.Softmin(dim))


@pytest.mark.parametrize("shape", [(5,), (2, 5), (2, 3, 4), (2, 3, 4, 5)])
def test_softmin_implicit_dim_warns_and_picks_torchs(shape):
    x = RNG.standard_normal(shape)
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmin"):
        a = F.softmin(pa.tensor(x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = TF.softmin(torch.tensor(x))
        with pytest.warns(UserWarning, match="Implicit dimension"):
            m = pa.nn.Softmin()(pa.tensor(x))
    np.testing.assert_allclose(a.numpy(), t.numpy(), rtol=1e-12)
    np.testing.assert_allclose(m.numpy(), t.numpy(), rtol=1e-12)


def test_softmin_dtype_argument():
    x = RNG.standard_normal((2, 3))
    a = F.softmin(pa.tensor(x), 1, dtype=pa.float32)
    t = TF.softmin(torch.tensor(x), 1, dtype=torch.float32)
    assert a.dtype == np.float32
    np.testing.assert_allclose(a.numpy(), t.numpy(), rtol=1e-6)


@pytest.mark.parametrize("values,num_classes", [([0, 2, 1], -1), ([0, 2, 1], 5),
                                                 ([[1, 0], [2, 2]], -1),
                                                 ([3], 4), (5, -1), ([], 3)])
def test_one_hot_matches_torch(values, num_classes):
    a = F.one_hot(pa.tensor(values, dtype=pa.int64), num_classes)
    t = TF.one_hot(torch.tensor(values, dtype=torch.int64), num_classes)
    assert a.dtype == np.int64 and a.shape == tuple(t.shape)
    np.testing.assert_array_equal(a.numpy(), t.numpy())


@pytest.mark.parametrize("make,num_classes", [
    (lambda m: m.tensor([0, 1], dtype=m.int32), -1),
    (lambda m: m.tensor([0.0, 1.0]), -1),
    (lambda m: m.tensor([-1, 1]), -1),
    (lambda m: m.tensor([0, 3]), 3),
    (lambda m: m.tensor([], dtype=m.int64), -1),
    (lambda m: m.tensor([0, 1]), -2),
])
def test_one_hot_errors_as_torch(make, num_classes):
    with pytest.raises(RuntimeError):
        TF.one_hot(make(torch), num_classes)
    with pytest.raises(RuntimeError):
        F.one_hot(make(pa), num_classes)


def test_exported_names():
    for name in ("one_hot", "normalize", "relu6", "softmin"):
        assert name in F.__all__ and callable(getattr(F, name))
    for name in ("ReLU6", "Softmin"):
        assert name in pa.nn.__all__
