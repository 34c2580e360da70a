"""pa.optim.LBFGS against torch.optim.LBFGS: the same trajectory (float64, each library
computing its own gradients) with and without the strong-Wolfe line search, history
sizes, tolerances, state dicts, and an all-or-nothing step when the closure fails."""
import numpy as np
import pytest

import parallel_autograd as pa
import parallel_autograd.optim as optim


@pytest.fixture
def torch():
    torch = pytest.importorskip("torch")
    threads, default = torch.get_num_threads(), torch.get_default_dtype()
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    yield torch
    torch.set_num_threads(threads)
    torch.set_default_dtype(default)


def _problem(seed=0):
    r = np.random.default_rng(seed)
    X, Y = r.standard_normal((24, 5)), r.standard_normal((24, 2))
    return X, Y, [r.standard_normal((5, 6)) / 2, r.standard_normal(6) / 4,
                  r.standard_normal((6, 2)) / 2]


def _closure(lib, opt, params, X, Y, calls):
    def closure():
        calls.append(1)
        opt.zero_grad()
        W1, b1, W2 = params
        d = lib.matmul(lib.tanh(lib.matmul(lib.tensor(X), W1) + b1), W2) - lib.tensor(Y)
        loss = (d * d).mean()
        loss.backward()
        return loss
    return closure


def _both(torch, steps, **kw):
    X, Y, init = _problem()
    ours = [pa.tensor(a.copy(), requires_grad=True) for a in init]
    theirs = [torch.tensor(a.copy(), requires_grad=True) for a in init]
    opt, ref = optim.LBFGS(ours, **kw), torch.optim.LBFGS(theirs, **kw)
    c_ours, c_theirs = [], []
    f_ours, f_theirs = _closure(pa, opt, ours, X, Y, c_ours), \
        _closure(torch, ref, theirs, X, Y, c_theirs)
    losses = []
    for _ in range(steps):
        lo, lt = opt.step(f_ours), ref.step(f_theirs)
        losses.append((float(lo), float(lt.detach())))
    return ours, theirs, opt, ref, (len(c_ours), len(c_theirs)), losses


CASES = [dict(), dict(lr=0.5, max_iter=5), dict(history_size=3, max_iter=7),
         dict(line_search_fn="strong_wolfe"),
         dict(line_search_fn="strong_wolfe", history_size=2, max_iter=6, max_eval=9),
         dict(lr=0.3, tolerance_grad=1e-4, tolerance_change=1e-6)]


@pytest.mark.parametrize("kw", CASES, ids=[str(k) for k in CASES])
def test_trajectory_matches_torch(torch, kw):
    """Three steps (each up to max_iter iterations, up to 63 closure calls): the same
    closure calls, losses and parameters to 1e-10 (measured: at most 1.5e-12 absolute
    on parameters of size ~5; by a fourth step of 20 iterations the nonconvex problem's
    flat directions amplify the libraries' different roundings to ~5e-10)."""
    ours, theirs, opt, ref, calls, losses = _both(torch, 3, **kw)
    assert calls[0] == calls[1]
    for lo, lt in losses:
        assert lo == pytest.approx(lt, rel=1e-9, abs=1e-12)
    for p, t in zip(ours, theirs):
        np.testing.assert_allclose(p.numpy(), t.detach().numpy(), rtol=1e-10, atol=1e-10)
    s, ts = opt.state[ours[0]], ref.state[theirs[0]]
    assert s["n_iter"] == ts["n_iter"] and s["func_evals"] == ts["func_evals"]
    assert len(s["old_dirs"]) == len(ts["old_dirs"])


def test_state_dict_round_trip_continues_identically():
    X, Y, init = _problem(1)
    a = [pa.tensor(x.copy(), requires_grad=True) for x in init]
    opt = optim.LBFGS(a, history_size=4, max_iter=5, line_search_fn="strong_wolfe")
    opt.step(_closure(pa, opt, a, X, Y, []))
    b = [pa.tensor(p.numpy().copy(), requires_grad=True) for p in a]
    twin = optim.LBFGS(b, history_size=4, max_iter=5, line_search_fn="strong_wolfe")
    twin.load_state_dict(opt.state_dict())
    for _ in range(2):
        opt.step(_closure(pa, opt, a, X, Y, []))
        twin.step(_closure(pa, twin, b, X, Y, []))
    for p, q in zip(a, b):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_a_failing_closure_leaves_parameters_and_state_unchanged(line_search_fn):
    X, Y, init = _problem(2)
    a = [pa.tensor(x.copy(), requires_grad=True) for x in init]
    opt = optim.LBFGS(a, max_iter=6, line_search_fn=line_search_fn)
    opt.step(_closure(pa, opt, a, X, Y, []))
    before = [p.numpy().copy() for p in a]
    state = opt.state_dict()["state"][0]
    good = _closure(pa, opt, a, X, Y, [])
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) == 4:
            raise ZeroDivisionError("the closure failed")
        return good()

    with pytest.raises(ZeroDivisionError):
        opt.step(flaky)
    for p, q in zip(a, before):
        np.testing.assert_array_equal(p.numpy(), q)
    after = opt.state_dict()["state"][0]
    assert after["n_iter"] == state["n_iter"] and after["func_evals"] == state["func_evals"]
    assert len(after["old_dirs"]) == len(state["old_dirs"])
    np.testing.assert_array_equal(after["prev_flat_grad"], state["prev_flat_grad"])


def test_bad_input():
    p = pa.tensor(np.ones(2), requires_grad=True)
    with pytest.raises(RuntimeError, match="strong_wolfe"):
        optim.LBFGS([p], line_search_fn="wolfe")
    with pytest.raises(ValueError, match="parameter groups"):
        optim.LBFGS([{"params": [p]}, {"params": [pa.tensor(np.ones(1), requires_grad=True)]}])
    with pytest.raises(ValueError, match="history_size"):
        optim.LBFGS([p], history_size=0)
    with pytest.raises(TypeError, match="max_iter"):
        optim.LBFGS([p], max_iter=2.5)
    with pytest.raises(TypeError, match="closure"):
        optim.LBFGS([p]).step()
