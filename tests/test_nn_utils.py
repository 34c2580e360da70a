"""pa.nn.utils: gradient clipping (clip_grad_norm_, clip_grad_value_, get_total_norm,
clip_grads_with_norm_) and parameters_to_vector / vector_to_parameters, against PyTorch's
torch.nn.utils, in place, with PyTorch's edge cases; a clipped training loop gives PyTorch's
loss curve."""
from __future__ import annotations

import math

import numpy as np
import pytest

import parallel_autograd as pa
from parallel_autograd import nn
from parallel_autograd.nn import utils as U

SHAPES = [(3, 4), (5,), (2, 2, 2)]


def _pair(seed, dtype=np.float64):
    """(our parameters, torch's parameters), each with the same random .grad."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    ps, ts = [], []
    for s in SHAPES:
        a, g = rng.standard_normal(s).astype(dtype), rng.standard_normal(s).astype(dtype)
        p, t = nn.Parameter(pa.tensor(a)), torch.nn.Parameter(torch.tensor(a))
        p.grad, t.grad = g.copy(), torch.tensor(g)
        ps.append(p)
        ts.append(t)
    return ps, ts


@pytest.mark.parametrize("norm_type", [2, 1, 3.5, math.inf, -math.inf, 0])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_clip_grad_norm_matches_torch_in_place(norm_type, max_norm):
    torch = pytest.importorskip("torch")
    ps, ts = _pair(1)
    held = [p.grad for p in ps]
    total = U.clip_grad_norm_(ps, max_norm, norm_type)
    want = torch.nn.utils.clip_grad_norm_(ts, max_norm, norm_type)
    assert isinstance(total, pa.Tensor) and total.ndim == 0
    np.testing.assert_allclose(total.item(), want.item(), rtol=1e-14)
    for p, t, h in zip(ps, ts, held):
        assert p.grad is h                      # scaled in place, as PyTorch's mul_
        np.testing.assert_allclose(p.grad, t.grad.numpy(), rtol=1e-14, atol=1e-16)


def test_total_norm_and_clip_with_norm_match_torch():
    torch = pytest.importorskip("torch")
    ps, ts = _pair(2)
    total = U.get_total_norm([p.grad for p in ps], 2.0)
    want = torch.nn.utils.get_total_norm([t.grad for t in ts], 2.0)
    np.testing.assert_allclose(total.item(), want.item(), rtol=1e-14)
    U.clip_grads_with_norm_(ps, 1.0, total)
    torch.nn.utils.clip_grads_with_norm_(ts, 1.0, want)
    for p, t in zip(ps, ts):
        np.testing.assert_allclose(p.grad, t.grad.numpy(), rtol=1e-14)


def test_clip_grad_value_matches_torch():
    torch = pytest.importorskip("torch")
    ps, ts = _pair(3)
    U.clip_grad_value_(ps, 0.4)
    torch.nn.utils.clip_grad_value_(ts, 0.4)
    for p, t in zip(ps, ts):
        np.testing.assert_array_equal(p.grad, t.grad.numpy())
        assert np.abs(p.grad.numpy()).max() <= 0.4


def test_edge_cases():
    a = nn.Parameter(pa.tensor(np.ones(3)))
    b = nn.Parameter(pa.tensor(np.ones(2)))
    b.grad = np.array([3.0, 4.0])
    assert U.clip_grad_norm_([a, b], 1.0).item() == 5.0      # a has no .grad: skipped
    assert a.grad is None
    np.testing.assert_allclose(b.grad, [3 / (5 + 1e-6), 4 / (5 + 1e-6)])
    assert U.clip_grad_norm_(b, 10.0).item() == pytest.approx(1.0)  # one Tensor: no change
    assert U.clip_grad_norm_([a], 1.0).item() == 0.0          # no gradient at all
    with pytest.warns(UserWarning, match="empty generator"):
        assert U.clip_grad_norm_((p for p in []), 1.0).item() == 0.0
    b.grad = np.array([np.inf, 1.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        U.clip_grad_norm_([b], 1.0, error_if_nonfinite=True)
    np.testing.assert_array_equal(b.grad, [np.inf, 1.0])      # unchanged by the error
    with pytest.raises(TypeError, match="expected Tensors"):
        U.clip_grad_norm_([np.ones(2)], 1.0)
    c = nn.Parameter(pa.tensor(np.ones(2, np.float32)))
    c.grad = np.array([3.0, 4.0], np.float32)
    total = U.clip_grad_norm_(c, 1.0)
    assert total.dtype == np.float32 and c.grad.dtype == np.float32


def test_clip_of_a_create_graph_gradient_bumps_its_version():
    x = pa.tensor(np.arange(3.0), requires_grad=True)
    pa.backward((x ** 3).sum(), create_graph=True)
    g = x.grad
    before = g._vc[0]
    total = U.clip_grad_norm_([x], 1.0)
    assert x.grad is g and g._vc[0] != before
    np.testing.assert_allclose(total.item(), math.sqrt(0 + 9 + 144))
    np.testing.assert_allclose(np.linalg.norm(g.numpy()), 1.0, rtol=1e-6)


def test_parameters_to_vector_and_back_match_torch():
    torch = pytest.importorskip("torch")
    ps, ts = _pair(4)
    v = U.parameters_to_vector(ps)
    tv = torch.nn.utils.parameters_to_vector(ts)
    np.testing.assert_array_equal(v.numpy(), tv.detach().numpy())
    (g,) = pa.grad((v * v).sum(), [ps[1]])                   # recorded: gradients flow
    np.testing.assert_allclose(g, 2 * ps[1].numpy())
    new = pa.tensor(np.arange(v.shape[0], dtype=np.float64))
    versions = [p._vc[0] for p in ps]
    U.vector_to_parameters(new, ps)
    torch.nn.utils.vector_to_parameters(torch.tensor(new.numpy()), ts)
    for p, t, old in zip(ps, ts, versions):
        np.testing.assert_array_equal(p.numpy(), t.detach().numpy())
        assert p._vc[0] != old
    before = [p.numpy().copy() for p in ps]
    with pytest.raises(ValueError, match="vec must be 1-D with 25 elements"):
        U.vector_to_parameters(pa.tensor(np.zeros(16)), ps)
    with pytest.raises(TypeError, match="expected Tensor"):
        U.vector_to_parameters(np.zeros(25), ps)
    for p, b in zip(ps, before):
        np.testing.assert_array_equal(p.numpy(), b)


@pytest.mark.parametrize("engine", ["sequential", "parallel"])
def test_clipped_training_loop_follows_torch(engine):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((32, 6)), rng.integers(0, 3, 32)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    tmodel = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(),
                                 torch.nn.Linear(16, 3)).double()
    with torch.no_grad():
        for p, t in zip(model.parameters(), tmodel.parameters()):
            t.copy_(torch.tensor(p.numpy()))
    opt = pa.optim.SGD(model.parameters(), lr=0.5)
    topt = torch.optim.SGD(tmodel.parameters(), lr=0.5)
    for _ in range(10):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(pa.tensor(x)), y)
        (pa.backward if engine == "sequential" else pa.backward_parallel)(loss)
        n = U.clip_grad_norm_(model.parameters(), 0.1)
        opt.step()
        topt.zero_grad()
        tloss = torch.nn.functional.cross_entropy(tmodel(torch.tensor(x)), torch.tensor(y))
        tloss.backward()
        tn = torch.nn.utils.clip_grad_norm_(tmodel.parameters(), 0.1)
        topt.step()
        np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-12)
        np.testing.assert_allclose(n.item(), tn.item(), rtol=1e-10)
    assert n.item() > 0.1                       # the clip was active throughout
