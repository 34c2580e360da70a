"""pa.optim.lr_scheduler: StepLR, CosineAnnealingLR, LambdaLR against PyTorch's learning
rate sequences, initial_lr handling, state dicts, the step-order warning, bad input."""
import math
import warnings

import numpy as np
import pytest

import parallel_autograd as pa
import parallel_autograd.optim as optim
from parallel_autograd.optim import lr_scheduler

EPOCHS = 50


def _params(lib):
    return [lib.tensor(np.ones(2), requires_grad=True), lib.tensor(np.ones(3), requires_grad=True)]


def _opt(lib_optim, params, momentum=0.0):
    return lib_optim.SGD([{"params": params[:1]}, {"params": params[1:], "lr": 0.3}], lr=0.1,
                         momentum=momentum)


class Scale:
    """A callable object as lr_lambda (its attributes go into the state dict)."""

    def __init__(self, base):
        self.base = base

    def __call__(self, epoch):
        return self.base ** epoch


SCHEDULES = [
    ("StepLR", dict(step_size=7)), ("StepLR", dict(step_size=3, gamma=0.5)),
    ("CosineAnnealingLR", dict(T_max=10)),  # 50 epochs: five half periods, up and down
    ("CosineAnnealingLR", dict(T_max=17, eta_min=0.01)),
    ("CosineAnnealingLR", dict(T_max=50, eta_min=1e-4)),
    ("LambdaLR", dict(lr_lambda=lambda e: 0.95 ** e)),
    ("LambdaLR", dict(lr_lambda=[lambda e: 1 / (e + 1), lambda e: e // 10 + 0.5])),
]


def _run(lib_optim, lib, name, kw, epochs=EPOCHS):
    params = _params(lib)
    opt = _opt(lib_optim, params)
    sched = getattr(lib_optim.lr_scheduler, name)(opt, **kw)
    seq = [sched.get_last_lr()]
    for _ in range(epochs):
        opt.step()
        sched.step()
        seq.append(sched.get_last_lr())
        assert seq[-1] == [g["lr"] for g in opt.param_groups]
    return seq


@pytest.mark.parametrize("name,kw", SCHEDULES,
                         ids=[f"{n}-{i}" for i, (n, _) in enumerate(SCHEDULES)])
def test_lr_sequence_equals_torch(name, kw):
    """50 epochs, two groups: every learning rate equals PyTorch's (the same float
    operations in the same order, so exactly)."""
    torch = pytest.importorskip("torch")
    ours = _run(optim, pa, name, kw)
    theirs = _run(torch.optim, torch, name, kw)
    assert ours == theirs


def test_known_values_without_torch():
    step = _run(optim, pa, "StepLR", dict(step_size=2, gamma=0.5), epochs=5)
    assert step == [[0.1, 0.3], [0.1, 0.3], [0.05, 0.15], [0.05, 0.15], [0.025, 0.075],
                    [0.025, 0.075]]
    cos = _run(optim, pa, "CosineAnnealingLR", dict(T_max=8, eta_min=0.02), epochs=16)
    for epoch, lrs in enumerate(cos):
        for lr, base in zip(lrs, (0.1, 0.3)):
            closed = 0.02 + (base - 0.02) * (1 + math.cos(math.pi * epoch / 8)) / 2
            assert lr == pytest.approx(closed, rel=1e-12, abs=1e-15)
    assert cos[8] == pytest.approx([0.02, 0.02]) and cos[16] == pytest.approx([0.1, 0.3])
    lam = _run(optim, pa, "LambdaLR", dict(lr_lambda=lambda e: 1 / (e + 1)), epochs=3)
    assert lam == [[0.1, 0.3], [0.1 * (1 / 2), 0.3 * (1 / 2)], [0.1 * (1 / 3), 0.3 * (1 / 3)],
                   [0.1 * (1 / 4), 0.3 * (1 / 4)]]


def test_the_scheduled_lr_is_what_the_optimizer_uses():
    p = pa.tensor([0.0], requires_grad=True)
    opt = optim.SGD([p], lr=1.0)
    sched = lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    for _ in range(3):
        p.grad = np.ones(1)
        opt.step()
        sched.step()
    np.testing.assert_array_equal(p.numpy(), [-(1.0 + 0.5 + 0.25)])


def test_initial_lr_is_set_once_and_needed_to_resume():
    params = _params(pa)
    opt = _opt(optim, params)
    s1 = lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    opt.step()
    s1.step()
    assert [g["initial_lr"] for g in opt.param_groups] == [0.1, 0.3]
    lr_scheduler.StepLR(opt, step_size=1)  # a second scheduler keeps initial_lr
    assert [g["initial_lr"] for g in opt.param_groups] == [0.1, 0.3]
    fresh = _opt(optim, _params(pa))
    with pytest.raises(KeyError, match="initial_lr"):
        lr_scheduler.CosineAnnealingLR(fresh, T_max=10, last_epoch=4)


def test_resuming_with_last_epoch_matches_torch():
    torch = pytest.importorskip("torch")
    seqs = []
    for lib_optim, lib in ((optim, pa), (torch.optim, torch)):
        opt = _opt(lib_optim, _params(lib))
        for g in opt.param_groups:
            g["initial_lr"] = g["lr"]
        sched = lib_optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10, eta_min=0.001,
                                                         last_epoch=4)
        seq = [sched.get_last_lr()]
        for _ in range(20):
            opt.step()
            sched.step()
            seq.append(sched.get_last_lr())
        seqs.append(seq)
    assert seqs[0] == seqs[1]


@pytest.mark.parametrize("name,kw", [("StepLR", dict(step_size=3)),
                                     ("CosineAnnealingLR", dict(T_max=7, eta_min=0.01)),
                                     ("LambdaLR", dict(lr_lambda=[Scale(0.9), Scale(0.8)]))])
def test_state_dict_round_trip_continues_identically(name, kw):
    params = _params(pa)
    opt = _opt(optim, params)
    sched = getattr(lr_scheduler, name)(opt, **kw)
    for _ in range(5):
        opt.step()
        sched.step()
    sd, osd = sched.state_dict(), opt.state_dict()
    assert "optimizer" not in sd and sd["last_epoch"] == 5
    opt2 = _opt(optim, _params(pa))
    kw2 = dict(kw, lr_lambda=[Scale(0.0), Scale(0.0)]) if name == "LambdaLR" else kw
    sched2 = getattr(lr_scheduler, name)(opt2, **kw2)
    opt2.load_state_dict(osd)
    sched2.load_state_dict(sd)
    for _ in range(10):
        for o, s in ((opt, sched), (opt2, sched2)):
            o.step()
            s.step()
        assert sched.get_last_lr() == sched2.get_last_lr()


def test_lambda_state_dict_keeps_callable_objects_attributes_not_functions():
    opt = _opt(optim, _params(pa))
    sched = lr_scheduler.LambdaLR(opt, [Scale(0.5), lambda e: 1.0])
    assert sched.state_dict()["lr_lambdas"] == [{"base": 0.5}, None]


def test_stepping_the_scheduler_before_the_optimizer_warns():
    opt = _opt(optim, _params(pa))
    sched = lr_scheduler.StepLR(opt, step_size=2)
    with pytest.warns(UserWarning, match="before `optimizer.step\\(\\)`"):
        sched.step()
    opt2 = _opt(optim, _params(pa))
    sched2 = lr_scheduler.StepLR(opt2, step_size=2)
    opt2.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sched2.step()


@pytest.mark.parametrize("make,error,match", [
    (lambda o: lr_scheduler.StepLR(o, step_size=0), ValueError, "step_size"),
    (lambda o: lr_scheduler.StepLR(o, step_size=2.5), TypeError, "step_size"),
    (lambda o: lr_scheduler.CosineAnnealingLR(o, T_max=0), ValueError, "T_max"),
    (lambda o: lr_scheduler.LambdaLR(o, [lambda e: 1.0]), ValueError, "Expected 2 lr_lambdas"),
    (lambda o: lr_scheduler.LambdaLR(o, 0.5), TypeError, "should be a function"),
    (lambda o: lr_scheduler.StepLR(object(), step_size=1), TypeError, "not an Optimizer"),
])
def test_bad_input(make, error, match):
    with pytest.raises(error, match=match):
        make(_opt(optim, _params(pa)))
