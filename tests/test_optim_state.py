"""Optimizer state that a step cannot use (issue 25, item 8): `load_state_dict` casts what
PyTorch casts and refuses the rest, with nothing changed; `step` checks every gradient,
state entry and hyperparameter before it writes anything, so a failed step leaves every
parameter, state and version counter as it was. Every optimizer, against torch.optim on
the same bad state dicts."""
import copy
import pickle

import numpy as np
import pytest

import parallel_autograd as pa
import parallel_autograd.optim as optim

OPTS = {"SGD": dict(lr=0.1, momentum=0.9, dampening=0.2),
        "Adam": dict(lr=0.01, amsgrad=True, weight_decay=0.1),
        "AdamW": dict(lr=0.01, amsgrad=True),
        "RMSprop": dict(lr=0.01, centered=True, momentum=0.5),
        "Adagrad": dict(lr=0.1, lr_decay=0.01),
        "Adadelta": dict(lr=1.0, rho=0.8, weight_decay=0.1),
        "NAdam": dict(lr=0.01, weight_decay=0.1, momentum_decay=0.01),
        "RAdam": dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)}
# arrays a step may make afresh when missing or None (PyTorch: only SGD's buffer; its Adam
# and RMSprop raise KeyError/TypeError at the step, after updating earlier groups)
OPTIONAL = {("SGD", "momentum_buffer"), ("Adam", "max_exp_avg_sq"),
            ("AdamW", "max_exp_avg_sq"), ("RMSprop", "grad_avg"),
            ("RMSprop", "momentum_buffer")}
ARRAY_KINDS = ("int64", "bool", "float32", "complex", "shape", "list", "None", "missing")
STEP_KINDS = ("int", "int array", "-1", "nan", "str", "missing")
DELETE = object()
SCALARS = ("step", "mu_product")  # numbers in the state (0-d tensors in state dicts)


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    threads, default = torch.get_num_threads(), torch.get_default_dtype()
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)  # the tests' (NAdam's mu_product is of it)
    yield torch
    torch.set_num_threads(threads)
    torch.set_default_dtype(default)


def _problem():
    r = np.random.default_rng(0)
    init = [r.standard_normal(3), r.standard_normal((2, 2))]
    return init, [[r.standard_normal(a.shape) for a in init] for _ in range(2)]


def _pa(name, arrays):
    params = [pa.tensor(a.copy(), requires_grad=True) for a in arrays]
    return params, getattr(optim, name)(params, **OPTS[name])


def _torch(torch, name, arrays):
    params = [torch.nn.Parameter(torch.tensor(a.copy())) for a in arrays]
    return params, getattr(torch.optim, name)(params, **OPTS[name])


def _bad(kind, v):
    """A corrupted stand-in for a saved state value `v` (numpy), as numpy data."""
    return {"int64": lambda: v.astype(np.int64), "bool": lambda: v > 0,
            "float32": lambda: v.astype(np.float32),
            "complex": lambda: v.astype(np.complex128) + 1j,
            "shape": lambda: np.zeros(v.size + 1), "list": lambda: v.tolist(),
            "None": lambda: None, "missing": lambda: DELETE,
            "int": lambda: 3, "int array": lambda: np.array(3), "-1": lambda: np.array(-1.0),
            "nan": lambda: np.array(np.nan), "str": lambda: "x"}[kind]()


def _to_torch(torch, v):
    """pa's state-dict values (Tensors, as PyTorch's) or numpy arrays as torch tensors."""
    if isinstance(v, pa.Tensor):
        v = v.numpy()
    return torch.from_numpy(np.array(v)) if isinstance(v, np.ndarray) else v


def _cases():
    init, _ = _problem()
    for name in OPTS:
        params, opt = _pa(name, init)
        for p in params:
            p.grad = np.ones(p.shape)
        opt.step()
        for key in opt.state_dict()["state"][1]:
            for kind in STEP_KINDS if key in SCALARS else ARRAY_KINDS:
                yield name, key, kind


def _run(lib, name, key, kind, torch=None):
    """Both libraries from the same state (pa's after one step, torch's state dict made of
    the same values), `key` of the second parameter corrupted as `kind`; then a step.
    Returns ("ok", params) / ("nonfinite", None) / (stage, exception type, (before, after))."""
    init, grads = _problem()
    params, opt = _pa(name, init)
    for p, g in zip(params, grads[0]):
        p.grad = g
    opt.step()
    sd = opt.state_dict()
    now = [p.numpy().copy() for p in params]
    if lib == "torch":
        tparams, topt = _torch(torch, name, init)
        for p, g in zip(tparams, grads[0]):
            p.grad = torch.tensor(g)
        topt.step()
        tsd = topt.state_dict()
        assert {i: set(s) for i, s in tsd["state"].items()} == \
            {i: set(s) for i, s in sd["state"].items()}
        tsd["state"] = {i: {k: (torch.tensor(float(v)) if k in SCALARS else _to_torch(torch, v))
                            for k, v in s.items()} for i, s in sd["state"].items()}
        sd, make = tsd, (lambda: _torch(torch, name, now))
    else:
        def make():
            return _pa(name, now)
    bad = _bad(kind, np.asarray(sd["state"][1][key]))
    if bad is DELETE:
        del sd["state"][1][key]
    else:
        sd["state"][1][key] = _to_torch(torch, bad) if lib == "torch" else bad
    params, opt = make()
    before = _snapshot(lib, params, opt)
    try:
        opt.load_state_dict(sd)
    except Exception as e:  # noqa: BLE001 - the outcome under test
        return "load", type(e), (before, _snapshot(lib, params, opt))
    for p, g in zip(params, grads[1]):
        p.grad = g if lib == "pa" else torch.tensor(g)
    before = _snapshot(lib, params, opt)
    try:
        opt.step()
    except Exception as e:  # noqa: BLE001
        return "step", type(e), (before, _snapshot(lib, params, opt))
    values = [np.array(p.numpy() if lib == "pa" else p.detach().numpy()) for p in params]
    if not all(np.isfinite(v).all() for v in values):
        return "nonfinite", None, None
    return "ok", values, None


def _snapshot(lib, params, opt):
    if lib == "pa":
        return pickle.dumps(([p.numpy() for p in params], [p._vc[0] for p in params],
                             opt.state_dict()))
    return [p.detach().clone() for p in params]


def _expected(name, key, kind, torch_out):
    """What pa does with the state torch handled as `torch_out`: PyTorch's results where
    it gives finite ones, a clear error at load (nothing changed) where it fails at load
    or step or gives NaNs, and three deliberate differences."""
    if kind == "complex":  # PyTorch drops the imaginary part (a warning); pa refuses
        assert torch_out[0] == "ok"
        return "load", ValueError
    if kind in ("-1", "nan"):  # not a step count: PyTorch's Adam divides by zero (-1) or
        return "load", ValueError  # gives NaN parameters (nan); its RMSprop ignores it
    if kind in ("None", "missing") and (name, key) in OPTIONAL:
        return "ok", None  # starts afresh, as a buffer turned on later
    if torch_out[0] in ("ok", "nonfinite"):  # nonfinite: values that make a NaN in both
        return torch_out[:2]                   # (e.g. a centered RMSprop's v - a*a < 0)
    return "load", TypeError if kind == "list" or (kind, key) == ("str", "mu_product") \
        else ValueError


@pytest.mark.parametrize("name,key,kind", list(_cases()))
def test_bad_state_dicts_against_torch(torch, name, key, kind):
    import warnings
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # torch's complex -> real cast warning
        t = _run("torch", name, key, kind, torch)
        got = _run("pa", name, key, kind)
    stage, what = _expected(name, key, kind, t)
    assert got[0] == stage, (t, got)
    if stage == "nonfinite":
        return
    if stage == "ok":
        if what is not None:
            for a, b in zip(got[1], what):
                np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-14)
        return
    assert got[1] is what, (t, got)
    before, after = got[2]
    assert before == after  # a refused state dict changes nothing
    # PyTorch's own outcome, recorded so a change in it shows up here
    if kind == "str":
        assert t[:2] == ("load", TypeError if key == "mu_product" else ValueError)
    elif kind == "missing" and key in SCALARS:
        assert t[:2] == ("load", KeyError)
    elif kind == "nan" and name in ("Adam", "AdamW", "Adagrad"):
        assert t[0] == "nonfinite"
    elif kind in ("shape", "list", "None", "missing"):
        assert t[0] == "step" and t[1] in (RuntimeError, AttributeError, TypeError, KeyError)


def test_integer_state_is_cast_and_the_step_runs():
    """The issue's case: integer state arrays were kept integer; the step then failed
    after updating parameter 0 and bumping step counters."""
    init, grads = _problem()
    params, opt = _pa("Adam", init)
    for p, g in zip(params, grads[0]):
        p.grad = g
    opt.step()
    sd = opt.state_dict()
    for s in sd["state"].values():
        s["exp_avg"] = s["exp_avg"].to(pa.int64)  # a Tensor, as in PyTorch
        s["exp_avg_sq"] = np.ones(s["exp_avg_sq"].shape, np.int32)
    opt.load_state_dict(sd)
    for s in opt.state.values():
        assert s["exp_avg"].dtype == np.float64 and s["exp_avg_sq"].dtype == np.float64
    for p, g in zip(params, grads[1]):
        p.grad = g
    opt.step()
    assert all(s["step"] == 2.0 for s in opt.state.values())


# ---- step checks before it writes ----------------------------------------------------
def _stepped(name, steps=1, **kw):
    params = [pa.tensor(np.full(3, 1.0 + i), requires_grad=True) for i in range(3)]
    opt = getattr(optim, name)([{"params": params[:2]}, {"params": params[2:]}],
                               **{**OPTS[name], **kw})
    for _ in range(steps):
        for p in params:
            p.grad = np.ones(3)
        opt.step()
    return params, opt


def _state_of_last(opt):
    return opt.state[opt.param_groups[-1]["params"][-1]]


BREAK = {  # name -> (how to break the last parameter's state or group, error, message)
    "int state": (lambda o, k: _state_of_last(o).__setitem__(k, np.ones(3, np.int64)),
                  ValueError, "int64 array"),
    "float32 state": (lambda o, k: _state_of_last(o).__setitem__(k, np.ones(3, np.float32)),
                      ValueError, "float32 array"),
    "wrong shape": (lambda o, k: _state_of_last(o).__setitem__(k, np.ones(4)), ValueError,
                    r"shape \(4,\)"),
    "not an array": (lambda o, k: _state_of_last(o).__setitem__(k, [1.0, 1.0, 1.0]),
                     TypeError, "must be an ndarray"),
    "read-only": (lambda o, k: _state_of_last(o)[k].setflags(write=False), ValueError,
                  "read-only"),
    "missing": (lambda o, k: _state_of_last(o).pop(k), ValueError, "lacks"),
}
STEP_BREAK = {
    "nan step": (lambda o: _state_of_last(o).__setitem__("step", float("nan")), ValueError,
                 "finite"),
    "negative step": (lambda o: _state_of_last(o).__setitem__("step", -1.0), ValueError,
                      ">= 0"),
    "str step": (lambda o: _state_of_last(o).__setitem__("step", "1"), TypeError,
                 "real number"),
    "no step": (lambda o: _state_of_last(o).pop("step"), ValueError, "no 'step'"),
    "nan mu": (lambda o: _state_of_last(o).__setitem__("mu_product", float("nan")),
               ValueError, "finite"),
    "str mu": (lambda o: _state_of_last(o).__setitem__("mu_product", "1"), TypeError,
               "real number"),
    "no mu": (lambda o: _state_of_last(o).pop("mu_product"), ValueError, "lacks"),
    "nan lr": (lambda o: o.param_groups[-1].__setitem__("lr", float("nan")), ValueError, "lr"),
    "str lr": (lambda o: o.param_groups[-1].__setitem__("lr", "0.1"), TypeError, "lr"),
}


def _step_cases():
    for name in OPTS:
        _, opt = _stepped(name)
        keys = [k for k in _state_of_last(opt) if k not in SCALARS]
        for key in keys:
            for how in BREAK:
                if how == "missing" and (name, key) in OPTIONAL:
                    continue  # made afresh: not an error
                yield name, key, how
        for how in STEP_BREAK:
            if how.endswith("step") and name == "SGD" or how.endswith("mu") and name != "NAdam":
                continue
            yield name, None, how


def _everything(params, opt):
    state = {id(p): {k: (v.copy(), v.flags.writeable) if isinstance(v, np.ndarray) else v
                     for k, v in s.items()} for p, s in opt.state.items()}
    return pickle.dumps(([p.numpy() for p in params], [p._vc[0] for p in params],
                         [{k: v for k, v in g.items() if k != "params"}
                          for g in opt.param_groups], sorted(state.items())))


@pytest.mark.parametrize("name,key,how", list(_step_cases()))
@pytest.mark.parametrize("threaded", [False, True])
def test_a_step_that_cannot_run_changes_nothing(name, key, how, threaded, monkeypatch):
    """State set by hand (not through load_state_dict) that the step cannot use: the
    step raises before any write, whichever parameter is bad (the last one here; the
    step used to update the others first, and PyTorch does, see the first test)."""
    from parallel_autograd.optim import optimizer as optimizer_module
    monkeypatch.setattr(optimizer_module, "_cores", lambda: 3 if threaded else 1)
    params, opt = _stepped(name)
    opt.parallel_min_elements = 0
    if key is None:
        breaker, error, match = STEP_BREAK[how]
        breaker(opt)
    else:
        breaker, error, match = BREAK[how]
        breaker(opt, key)
    for p in params:
        p.grad = np.ones(3)
    before = _everything(params, opt)
    with pytest.raises(error, match=match):
        opt.step()
    assert _everything(params, opt) == before


def test_a_failed_load_changes_nothing_and_the_old_state_still_steps():
    params, opt = _stepped("Adam", steps=2)
    sd = opt.state_dict()
    sd["state"][2]["exp_avg"] = [0.0, 0.0, 0.0]
    before = _everything(params, opt)
    with pytest.raises(TypeError, match=r"state 'exp_avg' must be an ndarray"):
        opt.load_state_dict(sd)
    assert _everything(params, opt) == before
    twin_params, twin = copy.deepcopy((params, opt))
    for p, q in zip(params, twin_params):
        p.grad = q.grad = np.ones(3)
    opt.step()
    twin.step()
    for p, q in zip(params, twin_params):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
