"""An optimizer step large enough runs on several threads (`Optimizer.parallel_min_elements`):
bitwise the single-thread result for any core count, every thread joined before the step
returns or raises, the first error re-raised, each thread with its own scratch."""
import threading

import numpy as np
import pytest

import parallel_autograd as pa
import parallel_autograd.optim as optim
from parallel_autograd.optim import optimizer as optimizer_module
from conftest import assert_bitwise

SHAPES = [(300, 200), (4096,), (17, 33, 5), (1,), (), (64, 64), (1000,), (2, 3)]
CASES = [("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
         ("Adam", dict(lr=0.01, amsgrad=True, weight_decay=0.1)),
         ("AdamW", dict(lr=0.01)),
         ("RMSprop", dict(lr=0.01, centered=True, momentum=0.5)),
         ("Adagrad", dict(lr=0.1, lr_decay=0.01)),
         ("Adadelta", dict(lr=1.0, rho=0.8, weight_decay=0.1))]


def _train(name, kw, threads_from, cores, monkeypatch, steps=3):
    monkeypatch.setattr(optimizer_module, "_cores", lambda: cores)
    rng = np.random.default_rng(0)
    params = [pa.tensor(rng.standard_normal(s), requires_grad=True) for s in SHAPES]
    opt = getattr(optim, name)(params, **kw)
    opt.parallel_min_elements = threads_from
    for _ in range(steps):
        for p in params:
            p.grad = rng.standard_normal(p.shape)
        opt.step()
    return [p.numpy().copy() for p in params], opt


@pytest.mark.parametrize("name,kw", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("cores", [2, 3, 16, 64])
def test_threaded_steps_are_bitwise_the_single_thread_steps(name, kw, cores, monkeypatch):
    one, _ = _train(name, kw, 1 << 62, 1, monkeypatch)
    many, opt = _train(name, kw, 0, cores, monkeypatch)
    assert_bitwise(one, many, "parameter")
    assert opt.state[opt.param_groups[0]["params"][0]]  # state made on the threads


def test_shares_are_balanced_and_cover_every_parameter_once():
    ps = [pa.tensor(np.zeros(n), requires_grad=True) for n in (100, 90, 50, 40, 30, 5, 1)]
    work = [({}, p, None) for p in ps]
    shares = optimizer_module._deal(work, 3)
    got = sorted(id(item[1]) for share in shares for item in share)
    assert got == sorted(id(p) for p in ps) and len(shares) == 3
    loads = [sum(item[1].numpy().size for item in share) for share in shares]
    assert max(loads) - min(loads) <= 100  # within one largest item
    assert len(optimizer_module._deal(work[:2], 8)) == 2  # never an empty share


def test_an_error_on_a_thread_is_raised_after_all_threads_finished(monkeypatch):
    monkeypatch.setattr(optimizer_module, "_cores", lambda: 4)
    params = [pa.tensor(np.ones(1000), requires_grad=True) for _ in range(8)]
    opt = optim.SGD(params, lr=0.1)
    opt.parallel_min_elements = 0
    bad = params[5]
    done = []
    real = optim.SGD._update

    def update(self, p, g, group):
        if p is bad:
            raise RuntimeError("update failed on purpose")
        real(self, p, g, group)
        done.append(p)

    monkeypatch.setattr(optim.SGD, "_update", update)
    for p in params:
        p.grad = np.ones(1000)
    with pytest.raises(RuntimeError, match="on purpose"):
        opt.step()
    assert not [t for t in threading.enumerate() if t.name == "pa-optim"]
    assert len(done) == 7  # every other parameter was updated: no thread was abandoned


def test_each_thread_gets_its_own_scratch():
    opt = optim.Adam([pa.tensor(np.ones(3), requires_grad=True)])
    seen = []
    t = threading.Thread(target=lambda: seen.append(opt._scratch))
    t.start()
    t.join()
    assert seen[0] is not opt._scratch and opt._scratch is opt._scratch


# ---- Ctrl+C during a step (issue 25, item 4) ----------------------------------------------
def _twins(name="Adam", sizes=(5000, 4000, 3000)):
    """An optimizer with state and gradients, and an identical copy (the twin)."""
    import copy

    rng = np.random.default_rng(3)
    params = [pa.tensor(rng.standard_normal(n), requires_grad=True) for n in sizes]
    opt = getattr(optim, name)(params, lr=0.01)
    for _ in range(2):
        for p in params:
            p.grad = rng.standard_normal(p.shape)
        opt.step()
    for p in params:
        p.grad = rng.standard_normal(p.shape)
    twin_params, twin = copy.deepcopy((params, opt))
    for p, q in zip(params, twin_params):
        q.grad = p.grad.clone()
    return params, opt, twin_params, twin


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["caller", "helper", "one thread"])
def test_ctrl_c_during_a_step_is_delivered_after_every_write(where, monkeypatch):
    """SIGINT lands while a step writes (from inside a parameter's update, on the caller
    or on a helper thread, the helper then holding back its own writes until the caller
    has raised, or 1 s): step() used to raise at once, leaving the helper writing after it
    had returned (5-7 of 30 randomly interrupted steps) and the other parameters half
    done. Now the step completes, every parameter and state as the uninterrupted twin's,
    and only then raises KeyboardInterrupt; nothing is written after it raised."""
    import _thread
    import signal
    import time

    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("needs Python's default SIGINT handler")
    monkeypatch.setattr(optimizer_module, "_cores", lambda: 1 if where == "one thread" else 2)
    params, opt, twin_params, twin = _twins()
    twin.step()
    opt.parallel_min_elements = 0
    raised, helper_wrote = threading.Event(), threading.Event()
    real = optim.Adam._update
    on_caller = threading.get_ident()

    def update(self, p, g, group):
        mine = threading.get_ident() == on_caller
        if p is params[1]:  # caller's share: params[0] (largest); helper's: the others
            _thread.interrupt_main()
            if not mine:
                raised.wait(1.0)  # the caller raises now, or (fixed) holds it back
        real(self, p, g, group)
        if not mine:
            helper_wrote.set()

    monkeypatch.setattr(optim.Adam, "_update", update)
    if where == "caller":  # the caller's own share gets the interrupting parameter
        params[0], params[1] = params[1], params[0]
        twin_params[0], twin_params[1] = twin_params[1], twin_params[0]
    with pytest.raises(KeyboardInterrupt):
        try:
            opt.step()
        except KeyboardInterrupt:
            raised.set()
            wrote_before = helper_wrote.is_set() or where != "helper"
            snapshot = [p.numpy().copy() for p in params]
            time.sleep(0.05)
            raise
    assert wrote_before, "step() raised while a helper thread had yet to write"
    assert all(np.array_equal(s, p.numpy()) for s, p in zip(snapshot, params))
    assert_bitwise([q.numpy() for q in twin_params], [p.numpy() for p in params], "parameter")
    for p, q in zip(params, twin_params):
        assert opt.state[p]["step"] == twin.state[q]["step"]
        assert_bitwise([twin.state[q]["exp_avg"]], [opt.state[p]["exp_avg"]], "exp_avg")


# ---- np.errstate in a step (issue 25, item 7: the optimizer's threads) ----------------------
@pytest.mark.parametrize("where", ["caller", "helper", "one thread"])
def test_floating_point_errors_surface_after_the_whole_step(where, monkeypatch):
    """A gradient whose square overflows, under errstate(all="raise"): the helper thread
    ran with numpy's default modes (a warning there, no error), and on the caller the
    error stopped the step halfway. Now every parameter and state is updated (as numpy's
    in-place ufuncs write before raising), then the error is raised with numpy's message;
    under "warn" one warning, from the caller's line."""
    import warnings

    monkeypatch.setattr(optimizer_module, "_cores", lambda: 1 if where == "one thread" else 2)
    params, opt, twin_params, twin = _twins()
    opt.parallel_min_elements = 0
    k = 0 if where == "caller" else 1  # the caller's share holds params[0], the largest
    for grads in (p.grad for p in params), (q.grad for q in twin_params):
        list(grads)[k][7] = 1e200
    for mode in ("raise", "warn"):
        with np.errstate(all="ignore"):
            twin.step()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with np.errstate(all=mode):
                try:
                    opt.step()
                    error = None
                except FloatingPointError as e:
                    error = str(e)
        assert_bitwise([q.numpy() for q in twin_params], [p.numpy() for p in params], "parameter")
        for p, q in zip(params, twin_params):
            assert opt.state[p]["step"] == twin.state[q]["step"]
            assert_bitwise([twin.state[q]["exp_avg_sq"]], [opt.state[p]["exp_avg_sq"]])
        if mode == "raise":
            assert error == "overflow encountered in multiply" and not caught
        else:
            assert error is None
            assert [(str(w.message), w.filename) for w in caught] == \
                [("overflow encountered in multiply", __file__)]
