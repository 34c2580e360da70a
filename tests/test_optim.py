"""pa.optim: SGD, Adam, AdamW, NAdam, RAdam, RMSprop, Adagrad, Adadelta against torch.optim (float64
trajectories), on a problem with a known optimum, allocation, version counting, param
groups, state dicts, pickling, zero_grad, closures and bad input."""
import copy
import pickle

import numpy as np
import pytest
from conftest import temporary_bytes

import parallel_autograd as pa
import parallel_autograd.optim as optim
from parallel_autograd.optim import _blocks

# Each optimizer with a grid of its options (lr chosen per optimizer in LR).
GRID = {
    "SGD": [{}, dict(momentum=0.9), dict(momentum=0.9, dampening=0.3),
            dict(momentum=0.9, nesterov=True), dict(weight_decay=0.01), dict(maximize=True),
            dict(momentum=0.5, nesterov=True, weight_decay=0.1, maximize=True)],
    "Adam": [{}, dict(betas=(0.8, 0.99)), dict(betas=(0.3, 0.9)), dict(weight_decay=0.1),
             dict(amsgrad=True), dict(maximize=True), dict(eps=1e-3),
             dict(betas=(0.3, 0.8), weight_decay=0.1, amsgrad=True, maximize=True)],
    "AdamW": [{}, dict(amsgrad=True), dict(weight_decay=0.1),
              dict(weight_decay=0.1, amsgrad=True, maximize=True)],
    "RMSprop": [{}, dict(centered=True), dict(momentum=0.9), dict(centered=True, momentum=0.9),
                dict(weight_decay=0.1), dict(alpha=0.3, centered=True), dict(maximize=True),
                dict(alpha=0.9, eps=1e-3, centered=True, momentum=0.5, weight_decay=0.1,
                     maximize=True)],
    "Adagrad": [{}, dict(lr_decay=0.01), dict(weight_decay=0.1),
                dict(initial_accumulator_value=0.5), dict(eps=1e-3), dict(maximize=True),
                dict(lr_decay=0.05, weight_decay=0.1, initial_accumulator_value=0.1, eps=1e-5,
                     maximize=True)],
    "Adadelta": [{}, dict(rho=0.5), dict(eps=1e-3), dict(weight_decay=0.1), dict(maximize=True),
                 dict(rho=0.95, eps=1e-4, weight_decay=0.1, maximize=True)],
    "NAdam": [{}, dict(betas=(0.3, 0.9)), dict(weight_decay=0.1), dict(momentum_decay=0.1),
              dict(weight_decay=0.1, decoupled_weight_decay=True), dict(maximize=True),
              dict(betas=(0.5, 0.8), eps=1e-3, weight_decay=0.1, momentum_decay=0.01,
                   decoupled_weight_decay=True, maximize=True)],
    "RAdam": [{}, dict(betas=(0.3, 0.9)), dict(betas=(0.8, 0.5)), dict(weight_decay=0.1),
              dict(weight_decay=0.1, decoupled_weight_decay=True), dict(maximize=True),
              dict(betas=(0.5, 0.8), eps=1e-3, weight_decay=0.1, decoupled_weight_decay=True,
                   maximize=True)],
}
LR = {"SGD": 0.05, "Adam": 0.01, "AdamW": 0.01, "RMSprop": 0.01, "Adagrad": 0.1,
      "Adadelta": 1.0, "NAdam": 0.01, "RAdam": 0.01}
CASES = [(name, dict(kw, lr=LR[name])) for name, kws in GRID.items() for kw in kws]
IDS = [f"{name}-{'-'.join(f'{k}={v}' for k, v in kw.items())}" for name, kw in CASES]
STEPS = 300


@pytest.fixture
def torch():
    """torch on one thread (its pool fights the engine's workers on a small machine),
    its default dtype ours (the tests' float64: NAdam's mu_product is a tensor of it)."""
    torch = pytest.importorskip("torch")
    threads, default = torch.get_num_threads(), torch.get_default_dtype()
    torch.set_num_threads(1)
    torch.set_default_dtype(getattr(torch, pa.get_default_dtype().name))
    yield torch
    torch.set_num_threads(threads)
    torch.set_default_dtype(default)


def leaves(arrays, lib=None):
    if lib is None:
        return [pa.tensor(a, requires_grad=True) for a in arrays]
    return [lib.tensor(a, requires_grad=True) for a in arrays]


def rel_diff(ours, theirs):
    """max |ours - theirs| / max |theirs| over a list of parameter pairs."""
    worst = 0.0
    for p, t in zip(ours, theirs):
        tv = t.detach().numpy()
        worst = max(worst, float(np.abs(p.numpy() - tv).max() / np.abs(tv).max()))
    return worst


# ---- the problems ---------------------------------------------------------------------
def least_squares(seed=0, far=10.0):
    """Minibatch least squares whose optimum is far from the start (so no gradient
    component sinks to rounding level, where normalizing optimizers amplify the two
    libraries' different gradient roundings): X, Y and the initial (W, b)."""
    r = np.random.default_rng(seed)
    X = r.standard_normal((256, 10))
    Y = X @ (r.standard_normal((10, 4)) * far) + r.standard_normal(4) * far + \
        r.standard_normal((256, 4))
    return X, Y, [r.standard_normal((10, 4)), r.standard_normal(4)]


def ls_loss(lib, params, X, Y, step, sign):
    rows = slice(32 * (step % 8), 32 * (step % 8 + 1))
    W, b = params
    d = lib.matmul(lib.tensor(X[rows]), W) + b - lib.tensor(Y[rows])
    return (d * d).mean() * sign


def mlp(seed=0):
    r = np.random.default_rng(seed)
    X, Y = r.standard_normal((32, 6)), r.standard_normal((32, 3))
    return X, Y, [r.standard_normal((6, 8)) / 2, r.standard_normal(8) / 4,
                  r.standard_normal((8, 3)) / 2, r.standard_normal(3) / 4]


def mlp_loss(lib, params, X, Y, sign):
    W1, b1, W2, b2 = params
    d = lib.matmul(lib.tanh(lib.matmul(lib.tensor(X), W1) + b1), W2) + b2 - lib.tensor(Y)
    return (d * d).mean() * sign


# ---- against torch.optim -----------------------------------------------------------------
@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_trajectory_matches_torch(torch, name, kw):
    """300 steps on minibatch least squares, each library computing its own gradients:
    the parameters agree with PyTorch's to 1e-12 relative at every step (measured: at
    most 3e-14, most configurations 4e-16)."""
    X, Y, init = least_squares()
    ours, theirs = leaves(init), leaves(init, torch)
    opt = getattr(optim, name)(ours, **kw)
    ref = getattr(torch.optim, name)(theirs, foreach=False, **kw)
    sign = -1.0 if kw.get("maximize") else 1.0
    worst = 0.0
    for step in range(STEPS):
        opt.zero_grad()
        ref.zero_grad()
        ls_loss(pa, ours, X, Y, step, sign).backward()
        ls_loss(torch, theirs, X, Y, step, sign).backward()
        opt.step()
        ref.step()
        worst = max(worst, rel_diff(ours, theirs))
    assert worst < 1e-12, worst


@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_arithmetic_matches_torch_on_the_same_gradients(torch, name, kw):
    """300 steps on a small tanh MLP with PyTorch's optimizer fed our gradients: what
    remains is the optimizers' own rounding (torch fuses multiply-adds, numpy cannot),
    below 1e-13 relative (measured: at most 6e-15). Here trajectories that amplify
    gradient rounding (centered RMSprop with alpha=0.3, Adam with beta2=0.9 near
    stationary components) are checked too."""
    X, Y, init = mlp()
    ours, theirs = leaves(init), leaves(init, torch)
    opt = getattr(optim, name)(ours, **kw)
    ref = getattr(torch.optim, name)(theirs, foreach=False, **kw)
    sign = -1.0 if kw.get("maximize") else 1.0
    worst = 0.0
    for _ in range(STEPS):
        opt.zero_grad()
        mlp_loss(pa, ours, X, Y, sign).backward()
        for p, t in zip(ours, theirs):
            t.grad = torch.tensor(p.grad.numpy())
        opt.step()
        ref.step()
        worst = max(worst, rel_diff(ours, theirs))
    assert worst < 1e-13, worst


@pytest.mark.parametrize("name", ["SGD", "Adam", "RMSprop"])
def test_param_groups_with_their_own_hyperparameters_match_torch(torch, name):
    X, Y, init = least_squares(seed=1)
    ours, theirs = leaves(init), leaves(init, torch)
    extra = {"SGD": dict(momentum=0.9), "Adam": dict(betas=(0.5, 0.9)),
             "RMSprop": dict(centered=True)}[name]

    def groups(ps):
        return [{"params": [ps[0]]}, {"params": [ps[1]], "lr": LR[name] / 7, **extra}]

    opt = getattr(optim, name)(groups(ours), lr=LR[name])
    ref = getattr(torch.optim, name)(groups(theirs), lr=LR[name], foreach=False)
    for step in range(200):
        for o, ps, lib in ((opt, ours, pa), (ref, theirs, torch)):
            o.zero_grad()
            ls_loss(lib, ps, X, Y, step, 1.0).backward()
            o.step()
    assert rel_diff(ours, theirs) < 1e-12
    assert [g["lr"] for g in opt.param_groups] == [g["lr"] for g in ref.param_groups]


def test_state_dict_structure_matches_torch(torch):
    _, _, init = mlp()
    ours, theirs = leaves(init), leaves(init, torch)
    opt = optim.Adam([{"params": ours[:2]}, {"params": ours[2:], "lr": 0.1}], amsgrad=True)
    ref = torch.optim.Adam([{"params": theirs[:2]}, {"params": theirs[2:], "lr": 0.1}],
                           amsgrad=True)
    for o, ps in ((opt, ours), (ref, theirs)):
        for p in ps[1:]:
            p.grad = np.ones(p.shape) if o is opt else torch.ones(p.shape, dtype=torch.float64)
        o.step()
    sd, tsd = opt.state_dict(), ref.state_dict()
    assert list(sd["state"]) == list(tsd["state"]) == [1, 2, 3]
    assert sd["state"][1].keys() == tsd["state"][1].keys()
    for k, v in tsd["state"][2].items():
        np.testing.assert_allclose(sd["state"][2][k], v.numpy(), rtol=1e-15)
    assert [g["params"] for g in sd["param_groups"]] == [[0, 1], [2, 3]]
    for g, tg in zip(sd["param_groups"], tsd["param_groups"]):
        assert {k: g[k] for k in opt.defaults} == {k: tg[k] for k in opt.defaults}


# ---- without torch: a known optimum ---------------------------------------------------------
KNOWN = [("SGD", dict(lr=0.1), 400, 1e-3),
         ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True), 300, 1e-3),
         ("Adam", dict(lr=0.05), 2000, 1e-3), ("Adam", dict(lr=0.05, amsgrad=True), 2000, 1e-3),
         ("AdamW", dict(lr=0.05, weight_decay=0.0), 2000, 1e-3),
         ("RMSprop", dict(lr=0.003, alpha=0.9), 2000, 2e-2),
         ("RMSprop", dict(lr=0.003, centered=True, momentum=0.5), 2000, 2e-2),
         ("Adagrad", dict(lr=0.5), 2000, 1e-3)]


@pytest.mark.parametrize("name,kw,steps,tol", KNOWN)
@pytest.mark.parametrize("maximize", [False, True])
def test_converges_to_the_least_squares_solution(name, kw, steps, tol, maximize):
    """Full-batch least squares: the iterate ends near np.linalg.lstsq's solution
    (maximizing the negated loss goes to the same point). RMSprop at a constant lr
    keeps oscillating with an amplitude of about lr/2, hence its looser bound."""
    r = np.random.default_rng(3)
    A, b = r.standard_normal((40, 5)), r.standard_normal(40)
    x_star = np.linalg.lstsq(A, b, rcond=None)[0]
    x = pa.tensor(np.zeros(5), requires_grad=True)
    opt = getattr(optim, name)([x], maximize=maximize, **kw)
    At, bt = pa.tensor(A), pa.tensor(b)
    start = np.abs(x_star).max()
    for _ in range(steps):
        opt.zero_grad()
        d = pa.matmul(At, x) - bt
        ((d * d).mean() * (-1.0 if maximize else 1.0)).backward()
        opt.step()
    assert np.abs(x.numpy() - x_star).max() < tol * start, (x.numpy(), x_star)


def test_adamw_decays_the_weights_and_adam_l2_does_not_equal_it():
    """AdamW with a zero gradient shrinks p by (1 - lr*wd) per step exactly; Adam's L2
    term goes through the moments instead."""
    p = pa.tensor([1.0, -2.0], requires_grad=True)
    opt = optim.AdamW([p], lr=0.1, weight_decay=0.5)
    p.grad = np.zeros(2)
    opt.step()
    # the moments stay zero, so the Adam part adds 0 / (0 + eps) = 0
    np.testing.assert_array_equal(p.numpy(), np.array([1.0, -2.0]) * (1 - 0.1 * 0.5))
    q = pa.tensor([1.0, -2.0], requires_grad=True)
    opt = optim.Adam([q], lr=0.1, weight_decay=0.5)
    q.grad = np.zeros(2)
    opt.step()
    np.testing.assert_allclose(q.numpy(), [0.9, -1.9], rtol=1e-7)  # first Adam step: ~lr*sign


# ---- allocation --------------------------------------------------------------------------
ALLOC = [("SGD", {}), ("SGD", dict(momentum=0.9, nesterov=True, weight_decay=0.1, maximize=True)),
         ("SGD", dict(momentum=0.9, dampening=0.1)), ("Adam", {}),
         ("Adam", dict(amsgrad=True, weight_decay=0.1, maximize=True)),
         ("AdamW", dict(amsgrad=True)), ("RMSprop", {}),
         ("RMSprop", dict(centered=True, momentum=0.9, weight_decay=0.1, maximize=True)),
         ("Adagrad", {}), ("Adagrad", dict(weight_decay=0.1, lr_decay=0.1, maximize=True)),
         ("NAdam", dict(weight_decay=0.1, decoupled_weight_decay=True, maximize=True)),
         ("RAdam", dict(weight_decay=0.1, maximize=True))]


@pytest.mark.parametrize("layout", ["C", "F"])
@pytest.mark.parametrize("name,kw", ALLOC)
def test_a_step_allocates_no_full_size_array(name, kw, layout):
    """After the first step (state and scratch made), a step on a 10^6-element parameter
    allocates less than 10% of the parameter's bytes (measured: ~3 KB of Python objects
    for C-contiguous operands; ~130 KB of numpy's own iteration buffers when the
    parameter is Fortran-ordered and its gradient is not)."""
    r = np.random.default_rng(0)
    data = r.standard_normal((1000, 1000))
    p = pa.tensor(data, requires_grad=True)
    if layout == "F":
        p.data = pa.from_numpy(np.asfortranarray(data))
    p.grad = r.standard_normal((1000, 1000))
    opt = getattr(optim, name)([p], lr=1e-3, **kw)
    opt.step()
    _, extra = temporary_bytes(opt.step)
    assert extra < 0.1 * p.numpy().nbytes, extra


# ---- in place, version counter, skipping ----------------------------------------------------
def test_step_writes_in_place_and_a_saved_graph_then_refuses_backward():
    w = pa.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    x = pa.tensor(np.ones((3, 2)))
    arr, view = w.numpy(), w.detach()
    opt = optim.SGD([w], lr=0.5)
    (pa.matmul(w, x) ** 2).sum().backward()
    y = (w * w).sum()  # mul saves w
    before = arr.copy()
    opt.step()
    assert w.numpy() is arr
    np.testing.assert_array_equal(view.numpy(), arr)  # views see the update
    assert not np.array_equal(arr, before)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_a_graph_made_after_the_step_backwards_fine():
    w = pa.tensor([1.0, 2.0], requires_grad=True)
    opt = optim.Adam([w], lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
    assert w.grad is not None


def test_parameters_without_grad_are_skipped():
    a = pa.tensor([1.0, 2.0], requires_grad=True)
    b = pa.tensor([3.0, 4.0], requires_grad=True)
    opt = optim.Adam([a, b], lr=0.1)
    a.grad = np.ones(2)
    version = b._vc[0]
    opt.step()
    np.testing.assert_array_equal(b.numpy(), [3.0, 4.0])
    assert b not in opt.state and b._vc[0] == version
    assert a in opt.state and opt.state[a]["step"] == 1.0


def test_a_bad_gradient_fails_the_step_before_any_write():
    a = pa.tensor([1.0, 2.0], requires_grad=True)
    b = pa.tensor([3.0, 4.0], requires_grad=True)
    opt = optim.SGD([a, b], lr=0.1, momentum=0.9)
    a.grad = np.ones(2)
    b.grad = np.ones(2)
    b.data = pa.from_numpy(np.array([3.0, 4.0, 5.0]))  # (.grad = checks; .data = does not)
    with pytest.raises(ValueError, match=r"parameter 1 of group 0: \.grad must be"):
        opt.step()
    np.testing.assert_array_equal(a.numpy(), [1.0, 2.0])
    assert len(opt.state) == 0
    b.data = pa.from_numpy(np.array([3.0, 4.0], np.float32))
    with pytest.raises(ValueError, match="float32 array of shape"):
        opt.step()


# ---- blocks: results do not depend on how the arrays are cut ---------------------------------
@pytest.mark.parametrize("name,kw", [("Adam", dict(amsgrad=True, weight_decay=0.1)),
                                     ("RMSprop", dict(centered=True, momentum=0.9)),
                                     ("SGD", dict(momentum=0.9, nesterov=True)),
                                     ("Adagrad", dict(lr_decay=0.1)),
                                     ("NAdam", dict(momentum_decay=0.01)),
                                     ("RAdam", dict(betas=(0.5, 0.9)))])
def test_blocked_and_strided_updates_equal_whole_array_updates(monkeypatch, name, kw):
    """Tiny blocks (flat and along leading axes), a Fortran-ordered parameter and a
    strided gradient give bitwise the results of one whole-array block."""
    r = np.random.default_rng(5)
    data, grads = r.standard_normal((6, 5, 7)), r.standard_normal((4, 6, 5, 7))

    def run(block_bytes, make):
        monkeypatch.setattr(_blocks, "BLOCK_BYTES", block_bytes)
        p = pa.tensor(np.zeros(1), requires_grad=True)
        p.data = pa.from_numpy(make(data.copy()))
        opt = getattr(optim, name)([p], lr=0.01, **kw)
        for g in grads:
            p.grad = make(g.copy())
            opt.step()
        return np.ascontiguousarray(p.numpy())

    whole = run(1 << 30, lambda a: a)
    for block_bytes in (8, 8 * 3, 8 * 40, 8 * 100):
        np.testing.assert_array_equal(run(block_bytes, lambda a: a), whole)
        np.testing.assert_array_equal(run(block_bytes, np.asfortranarray), whole)
        strided = run(block_bytes, lambda a: np.repeat(a, 2, axis=-1)[..., ::2])
        np.testing.assert_array_equal(strided, whole)


def test_float32_parameters_keep_float32_state():
    p = pa.tensor(np.ones(3, dtype=np.float32), requires_grad=True)
    opt = optim.Adam([p], lr=0.1, amsgrad=True)
    p.grad = np.ones(3, dtype=np.float32)
    opt.step()
    assert p.numpy().dtype == np.float32
    assert all(v.dtype == np.float32 for v in opt.state[p].values() if isinstance(v, np.ndarray))
    np.testing.assert_allclose(p.numpy(), 0.9, rtol=1e-6)


# ---- zero_grad, closure ------------------------------------------------------------------------
def test_zero_grad_sets_none_or_zeros_in_place():
    a = pa.tensor([1.0, 2.0], requires_grad=True)
    opt = optim.SGD([a], lr=0.1)
    a.grad = np.ones(2)
    g = a.grad
    opt.zero_grad(set_to_none=False)
    assert a.grad is g
    np.testing.assert_array_equal(g, [0.0, 0.0])
    opt.zero_grad()
    assert a.grad is None
    opt.zero_grad()  # nothing to do
    assert a.grad is None


def test_step_runs_the_closure_with_grad_on_and_returns_its_loss():
    w = pa.tensor([3.0], requires_grad=True)
    opt = optim.SGD([w], lr=0.25)
    calls = []

    def closure():
        calls.append(pa.is_grad_enabled())
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        return loss

    with pa.no_grad():
        loss = opt.step(closure)
    assert calls == [True] and float(loss.numpy()) == 9.0
    np.testing.assert_array_equal(w.numpy(), [1.5])  # 3 - 0.25 * 6
    assert opt.step() is None


# ---- state dicts ----------------------------------------------------------------------------
SD_CASES = [("SGD", dict(lr=0.05, momentum=0.9, nesterov=True)), ("Adam", dict(amsgrad=True)),
            ("AdamW", dict(lr=0.01)), ("RMSprop", dict(centered=True, momentum=0.5)),
            ("Adagrad", dict(lr_decay=0.1)), ("NAdam", dict(momentum_decay=0.01)),
            ("RAdam", dict(betas=(0.5, 0.9)))]


def _train(opt, params, steps, start):
    X, Y, _ = least_squares(seed=2)
    for step in range(start, start + steps):
        opt.zero_grad()
        ls_loss(pa, params, X, Y, step, 1.0).backward()
        opt.step()


@pytest.mark.parametrize("via_file", [False, True])
@pytest.mark.parametrize("name,kw", SD_CASES)
def test_state_dict_round_trip_continues_identically(tmp_path, name, kw, via_file):
    _, _, init = least_squares(seed=2)
    params = leaves(init)
    opt = getattr(optim, name)([{"params": params[:1]}, {"params": params[1:], "lr": 0.003}], **kw)
    _train(opt, params, 20, 0)
    sd = opt.state_dict()
    if via_file:
        pa.save(sd, tmp_path / "opt.npz")
        sd = pa.load(tmp_path / "opt.npz")
    copies = leaves([p.numpy() for p in params])
    fresh = getattr(optim, name)([{"params": copies[:1]}, {"params": copies[1:]}], **kw)
    fresh.load_state_dict(sd)
    assert fresh.param_groups[1]["lr"] == 0.003
    _train(opt, params, 20, 20)
    _train(fresh, copies, 20, 20)
    for p, q in zip(params, copies):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_state_dict_arrays_are_copies_both_ways():
    p = pa.tensor([1.0, 2.0], requires_grad=True)
    opt = optim.SGD([p], lr=0.1, momentum=0.9)
    p.grad = np.ones(2)
    opt.step()
    sd = opt.state_dict()
    buf = sd["state"][0]["momentum_buffer"]
    opt.step()
    np.testing.assert_array_equal(buf, [1.0, 1.0])  # not changed by the later step
    opt.load_state_dict(sd)
    assert opt.state[p]["momentum_buffer"] is not buf
    sd["param_groups"][0]["lr"] = 5.0
    assert opt.param_groups[0]["lr"] == 0.1


def _snapshot(opt):
    return pickle.dumps((opt.state_dict(), [g["params"] for g in opt.param_groups]))


@pytest.mark.parametrize("corrupt,match", [
    (lambda sd: sd["param_groups"].pop(), "parameter groups"),
    (lambda sd: sd["param_groups"][1]["params"].append(9), "group 1 has 2 parameters"),
    (lambda sd: sd["state"][0].__setitem__("exp_avg", np.zeros(7)), "shape"),
    (lambda sd: sd["param_groups"][0].pop("betas"), "lacks"),
    (lambda sd: sd["param_groups"][0].__setitem__("lr", -1.0), "lr"),
    (lambda sd: sd["state"].__setitem__(5, {}), "no saved group"),
    (lambda sd: sd.pop("state"), "expected a dict"),
])
def test_load_state_dict_rejects_a_mismatch_and_changes_nothing(corrupt, match):
    a = pa.tensor([1.0, 2.0], requires_grad=True)
    b = pa.tensor([3.0], requires_grad=True)
    opt = optim.Adam([{"params": [a]}, {"params": [b], "lr": 0.5}])
    a.grad, b.grad = np.ones(2), np.ones(1)
    opt.step()
    sd = opt.state_dict()
    corrupt(sd)
    before = _snapshot(opt)
    with pytest.raises(ValueError, match=match):
        opt.load_state_dict(sd)
    assert _snapshot(opt) == before


def test_named_parameters_are_recorded_as_param_names():
    a = pa.tensor([1.0], requires_grad=True)
    b = pa.tensor([2.0], requires_grad=True)
    opt = optim.SGD([("w", a), ("b", b)], lr=0.1)
    assert opt.param_groups[0]["params"][0] is a
    assert opt.state_dict()["param_groups"][0]["param_names"] == ["w", "b"]
    with pytest.raises(ValueError, match="with names or all without"):
        optim.SGD([("w", a), b])


# ---- pickling, copying, printing ---------------------------------------------------------------
@pytest.mark.parametrize("clone", [lambda o: pickle.loads(pickle.dumps(o)), copy.deepcopy])
def test_pickled_and_copied_optimizers_continue_identically(clone):
    _, _, init = least_squares(seed=4)
    params = leaves(init)
    opt = optim.Adam(params, lr=0.01, amsgrad=True)
    _train(opt, params, 5, 0)
    twin = clone(opt)
    copies = twin.param_groups[0]["params"]
    assert all(c is not p for c, p in zip(copies, params))
    assert all(c in twin.state for c in copies)
    _train(opt, params, 10, 5)
    _train(twin, copies, 10, 5)
    for p, q in zip(params, copies):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_repr_lists_each_groups_hyperparameters_like_torch(torch):
    def make(lib, mod):
        a = lib.tensor([1.0], requires_grad=True)
        b = lib.tensor([2.0], requires_grad=True)
        return mod.SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1, momentum=0.9)

    assert repr(make(pa, optim)) == repr(make(torch, torch.optim))


IMPL_CASES = [(n, kw) for n in ("SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta",
                                "NAdam", "RAdam")
              for kw in (dict(foreach=True), dict(foreach=False), dict(fused=True),
                         dict(fused=False), dict(capturable=True),
                         dict(differentiable=True), dict(fused=True, foreach=True),
                         dict(fused=True, differentiable=True),
                         dict(fused=True, capturable=True))]


def _outcome(make, p, grad):
    """("init" | "step" | "ok", exception type or None) and the parameter after."""
    try:
        opt = make()
    except Exception as e:  # noqa: BLE001 - compared with torch's
        return "init", type(e), None
    p.grad = grad
    try:
        opt.step()
    except Exception as e:  # noqa: BLE001
        return "step", type(e), None
    return "ok", None, opt.param_groups[0]


@pytest.mark.parametrize("name,kw", IMPL_CASES, ids=[f"{n}-{kw}" for n, kw in IMPL_CASES])
def test_implementation_switches_are_accepted_or_refused_like_torch(torch, name, kw):
    """foreach=/fused=/capturable=/differentiable= where torch.optim takes them: a
    TypeError where it does not, its RuntimeError at construction for the clashes, its
    exception at the step for capturable (CPU) and differentiable (a leaf), else a
    normal step (the same parameters) and the flag kept in the group."""
    ours = pa.tensor([1.0, -2.0], requires_grad=True)
    theirs = torch.tensor([1.0, -2.0], dtype=torch.float64, requires_grad=True)
    got = _outcome(lambda: getattr(optim, name)([ours], lr=0.1, **kw), ours,
                   np.array([0.5, 0.25]))
    want = _outcome(lambda: getattr(torch.optim, name)([theirs], lr=0.1, **kw), theirs,
                    torch.tensor([0.5, 0.25], dtype=torch.float64))
    assert got[:2] == want[:2]
    if want[0] == "step":
        np.testing.assert_array_equal(ours.numpy(), [1.0, -2.0])  # nothing written
    if want[0] == "ok":
        np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-15)
        assert {k: got[2][k] for k in kw} == {k: want[2][k] for k in kw}


def test_a_state_dict_without_the_switches_still_loads():
    """A state dict saved before the groups held foreach/fused/... (or by hand) gets
    the optimizer's defaults for them, as PyTorch's __setstate__ fills them in."""
    a = pa.tensor([1.0], requires_grad=True)
    opt = optim.Adam([a], lr=0.1, fused=True)
    sd = opt.state_dict()
    for flag in ("foreach", "fused", "capturable", "differentiable"):
        del sd["param_groups"][0][flag]
    opt.load_state_dict(sd)
    assert opt.param_groups[0]["fused"] is True and opt.param_groups[0]["foreach"] is None


# ---- parameter groups --------------------------------------------------------------------------
def test_add_param_group_fills_defaults_and_keeps_the_dict():
    a = pa.tensor([1.0], requires_grad=True)
    b = pa.tensor([2.0], requires_grad=True)
    opt = optim.Adam([a], lr=0.1)
    group = {"params": b, "betas": (0.5, 0.6)}
    opt.add_param_group(group)
    assert opt.param_groups[1] is group
    assert group["params"] == [b] and group["lr"] == 0.1 and group["betas"] == (0.5, 0.6)
    bad = {"params": [a]}
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group(bad)
    assert bad == {"params": [a]} and len(opt.param_groups) == 2


def test_adagrad_creates_its_state_at_construction_like_torch():
    a = pa.tensor([1.0, 2.0], requires_grad=True)
    opt = optim.Adagrad([a], initial_accumulator_value=0.25)
    sd = opt.state_dict()["state"][0]
    assert sd["step"] == 0.0
    np.testing.assert_array_equal(sd["sum"], [0.25, 0.25])


# ---- bad input -----------------------------------------------------------------------------------
def _p():
    return pa.tensor([1.0, 2.0], requires_grad=True)


BAD = [
    (lambda: optim.SGD([], lr=0.1), ValueError, "empty parameter list"),
    (lambda: optim.SGD(_p(), lr=0.1), TypeError, "single Tensor"),
    (lambda: optim.SGD({_p()}, lr=0.1), TypeError, "set"),
    (lambda: optim.SGD([np.ones(2)], lr=0.1), TypeError, "can only optimize Tensors"),
    (lambda: optim.SGD([_p() * 2], lr=0.1), ValueError, "non-leaf"),
    (lambda: optim.SGD([pa.tensor([1.0])], lr=0.1), ValueError, "does not require grad"),
    (lambda: (lambda p: optim.SGD([p, p], lr=0.1))(_p()), ValueError, "appears twice"),
    (lambda: (lambda p: optim.SGD([{"params": [p]}, {"params": [p]}], lr=0.1))(_p()),
     ValueError, "more than one parameter group"),
    (lambda: optim.SGD([_p()], lr=-0.1), ValueError, "lr"),
    (lambda: optim.SGD([_p()], lr="0.1"), TypeError, "lr"),
    (lambda: optim.SGD([_p()], lr=float("nan")), ValueError, "lr"),
    (lambda: optim.SGD([{"params": [_p()], "lr": -1.0}], lr=0.1), ValueError, "lr"),
    (lambda: optim.SGD([_p()], momentum=-0.5), ValueError, "momentum"),
    (lambda: optim.SGD([_p()], weight_decay=-1e-4), ValueError, "weight_decay"),
    (lambda: optim.SGD([_p()], nesterov=True), ValueError, "nesterov"),
    (lambda: optim.SGD([_p()], momentum=0.9, dampening=0.1, nesterov=True), ValueError,
     "nesterov"),
    (lambda: optim.Adam([_p()], betas=(1.0, 0.999)), ValueError, r"betas\[0\]"),
    (lambda: optim.Adam([_p()], betas=(0.9, -0.1)), ValueError, r"betas\[1\]"),
    (lambda: optim.Adam([_p()], betas=0.9), TypeError, "betas"),
    (lambda: optim.Adam([_p()], eps=-1e-8), ValueError, "eps"),
    (lambda: optim.Adam([_p()], weight_decay=-0.1), ValueError, "weight_decay"),
    (lambda: optim.Adam([_p()], amsgrad="yes"), TypeError, "amsgrad"),
    (lambda: optim.AdamW([_p()], lr=-1.0), ValueError, "AdamW: invalid lr"),
    (lambda: optim.RMSprop([_p()], alpha=1.5), ValueError, "alpha"),
    (lambda: optim.RMSprop([_p()], momentum=-1.0), ValueError, "momentum"),
    (lambda: optim.RMSprop([_p()], eps=-1.0), ValueError, "eps"),
    (lambda: optim.Adagrad([_p()], lr_decay=-1.0), ValueError, "lr_decay"),
    (lambda: optim.Adagrad([_p()], initial_accumulator_value=-1.0), ValueError,
     "initial_accumulator_value"),
    (lambda: optim.Adagrad([_p()], eps=-1.0), ValueError, "eps"),
]


@pytest.mark.parametrize("make,error,match", BAD)
def test_bad_input_is_refused_at_construction(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_public_api_has_docstrings_and_type_hints():
    import inspect

    from parallel_autograd.optim import lr_scheduler
    classes = [getattr(optim, n) for n in optim.__all__ if inspect.isclass(getattr(optim, n))]
    classes += [getattr(lr_scheduler, n) for n in lr_scheduler.__all__]
    for cls in classes:
        assert (cls.__doc__ or "").strip(), cls
        for name, fn in vars(cls).items():
            if not inspect.isfunction(fn) or (name.startswith("_") and name != "__init__"):
                continue
            assert name == "__init__" or (fn.__doc__ or "").strip(), f"{cls.__name__}.{name}"
            hints = fn.__annotations__
            params = [p for p in inspect.signature(fn).parameters if p != "self"]
            assert "return" in hints and all(p in hints for p in params), \
                f"{cls.__name__}.{name} lacks type hints"


# ---- with the rest of the library ---------------------------------------------------------------
def test_optimizer_in_backward_through_post_accumulate_hooks():
    """One optimizer per parameter stepped from its post-accumulate-grad hook (the
    pattern the hook exists for) gives bitwise the parameters of a normal step."""
    X, Y, init = least_squares(seed=6)
    normal, hooked = leaves(init), leaves(init)
    opt = optim.Adam(normal, lr=0.01)
    per_param = {id(p): optim.Adam([p], lr=0.01) for p in hooked}

    def hook(p):
        per_param[id(p)].step()
        per_param[id(p)].zero_grad()

    for p in hooked:
        p.register_post_accumulate_grad_hook(hook)
    for step in range(10):
        opt.zero_grad()
        ls_loss(pa, normal, X, Y, step, 1.0).backward()
        opt.step()
        pa.backward_parallel(ls_loss(pa, hooked, X, Y, step, 1.0))
        assert all(p.grad is None for p in hooked)
    for p, q in zip(normal, hooked):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_module_parameters_train_and_checkpoint_with_the_optimizer(tmp_path):
    """nn.Parameters from a Module (named or not), and a checkpoint of the module and
    the optimizer through pa.save / pa.load that resumes bitwise."""
    nn = pa.nn
    pa.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 4))
    opt = optim.AdamW(model.named_parameters(), lr=0.01)
    X, Y, _ = least_squares(seed=7)

    def train(model, opt, steps, start):
        for step in range(start, start + steps):
            rows = slice(32 * (step % 8), 32 * (step % 8 + 1))
            opt.zero_grad()
            d = model(pa.tensor(X[rows])) - pa.tensor(Y[rows])
            (d * d).mean().backward()
            opt.step()

    train(model, opt, 5, 0)
    pa.save({"model": model.state_dict(), "opt": opt.state_dict()}, tmp_path / "ckpt")
    ckpt = pa.load(tmp_path / "ckpt")
    pa.manual_seed(1)
    model2 = nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 4))
    model2.load_state_dict(ckpt["model"])
    opt2 = optim.AdamW(model2.named_parameters(), lr=0.5)
    opt2.load_state_dict(ckpt["opt"])
    train(model, opt, 5, 5)
    train(model2, opt2, 5, 5)
    for p, q in zip(model.parameters(), model2.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_zero_dim_and_empty_parameters():
    a = pa.tensor(2.0, requires_grad=True)
    e = pa.tensor(np.zeros((0, 3)), requires_grad=True)
    opt = optim.SGD([a, e], lr=0.1, momentum=0.9)
    for _ in range(2):
        opt.zero_grad()
        (a * a).backward()
        e.grad = np.zeros((0, 3))
        opt.step()
    assert a.numpy().shape == ()
    assert float(a.numpy()) == pytest.approx(2 - 0.4 - (0.9 * 4 + 3.2) * 0.1)


def test_blocks_cover_every_element_once_for_any_shape_and_layout():
    """`_blocks.blocks` hands out views that together cover every element exactly once,
    at the same positions in every operand, whatever the shape, strides and block size."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=150, deadline=None)
    @given(shape=st.lists(st.integers(0, 6), min_size=0, max_size=4),
           block=st.integers(1, 300), layout=st.sampled_from(["C", "F", "strided"]))
    def check(shape, block, layout):
        n = int(np.prod(shape)) if shape else 1
        base = np.arange(n, dtype=np.float64).reshape(shape)
        strided = np.repeat(base, 2, axis=-1)[..., ::2] if shape else base.copy()
        other = {"C": base.copy(), "F": np.asfortranarray(base), "strided": strided}[layout]
        seen = np.zeros(shape)
        old = _blocks.BLOCK_BYTES
        _blocks.BLOCK_BYTES = block * 8
        try:
            for a, b, s, t in _blocks.blocks([base, other], _blocks.Scratch()):
                assert a.size <= block
                assert s.shape == t.shape == a.shape == b.shape
                np.testing.assert_array_equal(a, b)
                a += 0.0  # a view: writable in place
                seen[np.isin(base, a)] += 1
        finally:
            _blocks.BLOCK_BYTES = old
        assert (seen == 1).all()

    check()


def test_nadam_mu_product_is_rounded_like_torchs_float32_scalar(torch):
    """Under a float32 default dtype PyTorch keeps NAdam's mu_product in a float32
    tensor: 60 steps of float64 parameters agree to rounding only if ours rounds the
    same way (unrounded, they drift apart by ~1e-9 relative)."""
    before = pa.get_default_dtype()
    pa.set_default_dtype(pa.float32)
    torch.set_default_dtype(torch.float32)
    try:
        r = np.random.default_rng(3)
        ours = pa.tensor(r.standard_normal(5), requires_grad=True)
        theirs = torch.tensor(ours.numpy().copy(), requires_grad=True)
        opt, ref = optim.NAdam([ours], lr=0.05), torch.optim.NAdam([theirs], lr=0.05)
        for _ in range(60):
            g = r.standard_normal(5)
            ours.grad, theirs.grad = g.copy(), torch.tensor(g)
            opt.step()
            ref.step()
        assert opt.state[ours]["mu_product"] == ref.state[theirs]["mu_product"].item()
        assert opt.state_dict()["state"][0]["mu_product"].dtype == pa.float32
        assert rel_diff([ours], [theirs]) < 1e-13
    finally:
        pa.set_default_dtype(before)
