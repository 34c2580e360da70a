"""Training end to end against PyTorch: the digits example's models, the same initial
weights, data and batch order, Adam, 50 steps; the float64 loss curves must agree to 1e-9.
"""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

import parallel_autograd as pa
import parallel_autograd.optim as optim
from parallel_autograd.nn import functional as F

torch = pytest.importorskip("torch")

_EXAMPLE = pathlib.Path(__file__).parents[1] / "examples" / "train_digits.py"


def _example():
    spec = importlib.util.spec_from_file_location("train_digits", _EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _torch_twin(kind):
    """The same architecture in PyTorch, float64."""
    tn = torch.nn
    if kind == "mlp":
        m = tn.Sequential(tn.Flatten(), tn.Linear(64, 128), tn.ReLU(), tn.Linear(128, 64),
                          tn.ReLU(), tn.Linear(64, 10))
    else:
        m = tn.Sequential(tn.Conv2d(1, 16, 3, padding=1), tn.ReLU(), tn.MaxPool2d(2),
                          tn.Conv2d(16, 32, 3, padding=1), tn.ReLU(), tn.MaxPool2d(2),
                          tn.Flatten(), tn.Linear(128, 64), tn.ReLU(), tn.Linear(64, 10))
    return m.double()


def _data(n=256, seed=0):
    """Digit-shaped data: (N, 1, 8, 8) in [0, 1] and labels tied to the pixels, so the
    models have something to learn."""
    rng = np.random.default_rng(seed)
    x = rng.random((n, 1, 8, 8))
    y = (x[:, 0, :4, :].sum(axis=(1, 2)) * 10 / 16).astype(np.int64) % 10
    return x, y


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["mlp", "cnn"])
@pytest.mark.parametrize("engine", ["sequential", "parallel"])
def test_fifty_adam_steps_give_pytorchs_loss_curve(kind, engine):
    pa.manual_seed(0)
    model = _example().make_model(kind)
    twin = _torch_twin(kind)
    with torch.no_grad():  # PyTorch starts from our initial weights
        for (name, p), (tname, tp) in zip(model.named_parameters(), twin.named_parameters()):
            assert name == tname and p.shape == tuple(tp.shape)
            tp.copy_(torch.from_numpy(p.numpy()))
    opt = optim.Adam(model.parameters(), lr=2e-3)
    topt = torch.optim.Adam(twin.parameters(), lr=2e-3)
    x, y = _data()
    order = np.random.default_rng(1).permutation(len(y))
    eng = pa.Engine(2, min_nodes=0, min_work=0, min_width=0) if engine == "parallel" else None
    ours, theirs = [], []
    try:
        for step in range(50):
            idx = order[(step * 32) % len(y):][:32]
            opt.zero_grad()
            loss = F.cross_entropy(model(pa.tensor(x[idx])), y[idx])
            pa.backward(loss) if eng is None else eng.backward(loss)
            opt.step()
            topt.zero_grad()
            tloss = torch.nn.functional.cross_entropy(twin(torch.from_numpy(x[idx])),
                                                      torch.from_numpy(y[idx]))
            tloss.backward()
            topt.step()
            ours.append(loss.item())
            theirs.append(tloss.item())
    finally:
        if eng is not None:
            eng.close()
    ours, theirs = np.array(ours), np.array(theirs)
    assert ours[-1] < ours[0] * 0.9  # it learned something
    np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-9)
    for p, tp in zip(model.parameters(), twin.parameters()):
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-7, atol=1e-9)
