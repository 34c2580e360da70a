"""jacobian/hessian rows as concurrent passes (issue 28, "width where users have it"):
equal to PyTorch's for vectorize False and True, bitwise equal to the one-by-one rows,
errors and strict as before. No timing: the benchmark row is
`python -m stress.compare.engine_rows --rows jacobian`."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import parallel_autograd as pa
from parallel_autograd.autograd import functional as PF
from parallel_autograd.engine import rows as ROWS

torch = pytest.importorskip("torch")
TF = torch.autograd.functional

RNG = np.random.default_rng(7)
W1 = RNG.standard_normal((6, 9)) / 3
W2 = RNG.standard_normal((9, 5)) / 3
X = RNG.standard_normal(6)


def f_pa(x):
    return pa.tanh(pa.tanh(x @ pa.Tensor(W1)) @ pa.Tensor(W2))


def f_t(x):
    return torch.tanh(torch.tanh(x @ torch.from_numpy(W1)) @ torch.from_numpy(W2))


@pytest.fixture(params=[False, True], ids=["one-by-one", "concurrent"])
def concurrent(request, monkeypatch):
    if request.param:  # every row set goes to threads, however fast the rows are
        monkeypatch.setattr(ROWS, "CONCURRENT_MIN_SECONDS", 0.0)
        monkeypatch.setattr(ROWS, "ROW_MIN_SECONDS", 0.0)
        monkeypatch.setattr(ROWS, "usable_cores", lambda: 3)
    return request.param


@pytest.mark.timeout(60)
@pytest.mark.parametrize("vectorize", [False, True])
@pytest.mark.parametrize("create_graph", [False, True])
def test_jacobian_matches_torch(concurrent, vectorize, create_graph):
    J = PF.jacobian(f_pa, pa.Tensor(X), create_graph=create_graph, vectorize=vectorize)
    Jt = TF.jacobian(f_t, torch.from_numpy(X.copy()), create_graph=create_graph,
                     vectorize=vectorize)
    assert J.shape == tuple(Jt.shape)
    np.testing.assert_allclose(J.numpy(), Jt.detach().numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("vectorize", [False, True])
def test_hessian_and_tuple_jacobian_match_torch(concurrent, vectorize):
    def g_pa(x):
        return (f_pa(x) ** 2).sum()

    def g_t(x):
        return (f_t(x) ** 2).sum()
    H = PF.hessian(g_pa, pa.Tensor(X), vectorize=vectorize)
    Ht = TF.hessian(g_t, torch.from_numpy(X.copy()), vectorize=vectorize)
    np.testing.assert_allclose(H.numpy(), Ht.numpy(), rtol=1e-12, atol=1e-14)
    y = RNG.standard_normal(6)

    def two(a, b):
        return f_pa(a) * 2, (a * b).sum()

    def two_t(a, b):
        return f_t(a) * 2, (a * b).sum()
    J = PF.jacobian(two, (pa.Tensor(X), pa.Tensor(y)), vectorize=vectorize)
    Jt = TF.jacobian(two_t, (torch.from_numpy(X.copy()), torch.from_numpy(y)),
                     vectorize=vectorize)
    for i in range(2):
        for j in range(2):
            np.testing.assert_allclose(J[i][j].numpy(), Jt[i][j].numpy(), rtol=1e-12,
                                       atol=1e-14)


@pytest.mark.timeout(60)
def test_concurrent_rows_are_bitwise_the_one_by_one_rows(monkeypatch):
    one = PF.jacobian(f_pa, pa.Tensor(X)).numpy()
    threads = set()
    real = PF._grads

    def spy(*a, **k):
        # Thread objects, not get_ident(): a finished thread's ident is reused
        threads.add(threading.current_thread())
        return real(*a, **k)
    monkeypatch.setattr(PF, "_grads", spy)
    monkeypatch.setattr(ROWS, "CONCURRENT_MIN_SECONDS", 0.0)
    monkeypatch.setattr(ROWS, "ROW_MIN_SECONDS", 0.0)
    monkeypatch.setattr(ROWS, "usable_cores", lambda: 3)
    many = PF.jacobian(f_pa, pa.Tensor(X)).numpy()
    assert len(threads) == 3  # the rows really ran on three threads
    assert np.array_equal(one, many)


@pytest.mark.timeout(60)
def test_strict_and_errors_with_concurrent_rows(concurrent):
    y = pa.Tensor(RNG.standard_normal(4))
    with pytest.raises(RuntimeError, match="independent of input 1"):
        PF.jacobian(lambda a, b: f_pa(a), (pa.Tensor(X), y), strict=True)
    calls = []

    def bad(x):
        out = f_pa(x)

        class Fail(pa.Function):
            @staticmethod
            def forward(ctx, t):
                return t * 1.0

            @staticmethod
            def backward(ctx, g):
                calls.append(1)
                if len(calls) == 3:
                    raise ValueError("row 3 failed")
                return g
        return Fail.apply(out)
    with pytest.raises(ValueError, match="row 3 failed"):
        PF.jacobian(bad, pa.Tensor(X))


def test_blas_is_restored_after_concurrent_rows(monkeypatch):
    from parallel_autograd.engine import blas
    before = blas.current_threads()
    monkeypatch.setattr(ROWS, "CONCURRENT_MIN_SECONDS", 0.0)
    monkeypatch.setattr(ROWS, "ROW_MIN_SECONDS", 0.0)
    monkeypatch.setattr(ROWS, "usable_cores", lambda: 2)
    PF.jacobian(f_pa, pa.Tensor(X))
    assert blas.current_threads() == before
