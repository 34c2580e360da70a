"""The rest of torch.optim.lr_scheduler (issue 27): MultiStepLR, ConstantLR, LinearLR,
ExponentialLR, PolynomialLR, MultiplicativeLR, SequentialLR, ChainedScheduler,
ReduceLROnPlateau, CyclicLR, CosineAnnealingWarmRestarts, OneCycleLR -- learning rates (and
cycled momentums) equal to torch's over 120 steps for several configurations each,
get_last_lr, state_dict round trips, errors."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import parallel_autograd as pa

torch = pytest.importorskip("torch")
STEPS = 120


def make_opt(lib, kind: str = "sgd"):
    """Two parameter groups (lr 0.1 and 0.3) of an SGD with momentum, or an Adam."""
    params = [lib.tensor(np.ones(2), requires_grad=True),
              lib.tensor(np.ones(3), requires_grad=True)]
    groups = [{"params": params[:1]}, {"params": params[1:], "lr": 0.3}]
    if kind == "adam":
        return lib.optim.Adam(groups, lr=0.1, betas=(0.9, 0.99))
    return lib.optim.SGD(groups, lr=0.1, momentum=0.9)


def group_values(opt) -> list:
    """What the schedulers write: lr, and momentum or beta1."""
    out = []
    for g in opt.param_groups:
        out.append(g["lr"])
        if "momentum" in g:
            out.append(g["momentum"])
        if "betas" in g:
            out.append(g["betas"][0])
    return out


def simple(name, **kw):
    return lambda lib, opt: getattr(lib.optim.lr_scheduler, name)(opt, **kw)


def sequential(lib, opt):
    L = lib.optim.lr_scheduler
    return L.SequentialLR(opt, [L.LinearLR(opt, start_factor=0.1, total_iters=10),
                                L.CosineAnnealingLR(opt, T_max=40),
                                L.ExponentialLR(opt, gamma=0.97)], milestones=[10, 50])


def sequential_nested(lib, opt):
    L = lib.optim.lr_scheduler
    return L.SequentialLR(opt, [L.ConstantLR(opt, factor=0.5, total_iters=4),
                                L.MultiStepLR(opt, milestones=[20, 30, 30], gamma=0.5)],
                          milestones=[7])


def chained(lib, opt):
    L = lib.optim.lr_scheduler
    return L.ChainedScheduler([L.ConstantLR(opt, factor=0.1, total_iters=2),
                               L.ExponentialLR(opt, gamma=0.9)])


def chained_three(lib, opt):
    L = lib.optim.lr_scheduler
    return L.ChainedScheduler([L.LinearLR(opt, start_factor=0.2, total_iters=15),
                               L.StepLR(opt, step_size=25, gamma=0.5),
                               L.PolynomialLR(opt, total_iters=100, power=2.0)], optimizer=opt)


CONFIGS = {
    "multistep": (simple("MultiStepLR", milestones=[10, 30, 80]), "sgd"),
    "multistep_repeat": (simple("MultiStepLR", milestones=[5, 5, 40], gamma=0.5), "sgd"),
    "constant": (simple("ConstantLR"), "sgd"),
    "constant_long": (simple("ConstantLR", factor=0.25, total_iters=50), "sgd"),
    "linear": (simple("LinearLR"), "sgd"),
    "linear_down": (simple("LinearLR", start_factor=1.0, end_factor=0.05, total_iters=90),
                    "sgd"),
    "exponential": (simple("ExponentialLR", gamma=0.95), "sgd"),
    "polynomial": (simple("PolynomialLR"), "sgd"),
    "polynomial_sq": (simple("PolynomialLR", total_iters=100, power=2.0), "sgd"),
    "multiplicative": (simple("MultiplicativeLR", lr_lambda=lambda e: 0.97), "sgd"),
    "multiplicative_groups": (simple("MultiplicativeLR",
                                     lr_lambda=[lambda e: 0.99, lambda e: 1 - 1 / (e + 10)]),
                              "sgd"),
    "sequential": (sequential, "sgd"),
    "sequential_nested": (sequential_nested, "sgd"),
    "chained": (chained, "sgd"),
    "chained_three": (chained_three, "sgd"),
    "warm_restarts": (simple("CosineAnnealingWarmRestarts", T_0=10), "sgd"),
    "warm_restarts_mult": (simple("CosineAnnealingWarmRestarts", T_0=5, T_mult=2,
                                  eta_min=1e-3), "sgd"),
    "cyclic": (simple("CyclicLR", base_lr=0.01, max_lr=0.1, step_size_up=7), "sgd"),
    "cyclic_tri2": (simple("CyclicLR", base_lr=[0.01, 0.02], max_lr=0.2, step_size_up=5,
                           step_size_down=11, mode="triangular2"), "sgd"),
    "cyclic_exp": (simple("CyclicLR", base_lr=0.001, max_lr=0.1, step_size_up=9,
                          mode="exp_range", gamma=0.99), "sgd"),
    "cyclic_custom": (simple("CyclicLR", base_lr=0.01, max_lr=0.1, step_size_up=4,
                             scale_fn=lambda x: 0.5 ** x, scale_mode="iterations"), "sgd"),
    "cyclic_adam": (simple("CyclicLR", base_lr=0.01, max_lr=0.1, step_size_up=6), "adam"),
    "cyclic_no_momentum": (simple("CyclicLR", base_lr=0.01, max_lr=0.1, step_size_up=6,
                                  cycle_momentum=False), "adam"),
    "one_cycle": (simple("OneCycleLR", max_lr=1.0, total_steps=STEPS), "sgd"),
    "one_cycle_epochs": (simple("OneCycleLR", max_lr=[0.5, 2.0], epochs=6,
                                steps_per_epoch=20, pct_start=0.25,
                                anneal_strategy="linear"), "sgd"),
    "one_cycle_three": (simple("OneCycleLR", max_lr=0.8, total_steps=STEPS, three_phase=True,
                               div_factor=10.0, final_div_factor=100.0), "adam"),
    "one_cycle_no_momentum": (simple("OneCycleLR", max_lr=0.8, total_steps=STEPS,
                                     cycle_momentum=False), "adam"),
}


def run(lib, name: str, steps: int = STEPS) -> list:
    make, kind = CONFIGS[name]
    opt = make_opt(lib, kind)
    sched = make(lib, opt)
    seq = [group_values(opt)]
    for _ in range(steps):
        opt.step()
        sched.step()
        seq.append(group_values(opt))
        assert sched.get_last_lr() == [g["lr"] for g in opt.param_groups]
    return seq


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_sequences_equal_torch(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # torch's deprecation notes in some configs
        want = run(torch, name)
    got = run(pa, name)
    assert len(got) == STEPS + 1
    assert got == want                            # the same float operations: bitwise


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_state_dict_round_trip_continues_identically(name):
    """Step 37 times, save the scheduler's and optimizer's state, rebuild both, load, step
    on: the same values as an uninterrupted run (torch's sequence)."""
    make, kind = CONFIGS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = run(torch, name, 60)[38:]
        opt = make_opt(pa, kind)
        sched = make(pa, opt)
        for _ in range(37):
            opt.step()
            sched.step()
        state, opt_state = sched.state_dict(), opt.state_dict()
        opt2 = make_opt(pa, kind)
        sched2 = make(pa, opt2)
        opt2.load_state_dict(opt_state)
        sched2.load_state_dict(state)
        assert sched2.get_last_lr() == sched.get_last_lr()
        got = []
        for _ in range(60 - 37):
            opt2.step()
            sched2.step()
            got.append(group_values(opt2))
    assert got == want


METRICS = [1.0, 0.9, 0.95, 0.95, 0.96, 0.97, 0.8, 0.81, 0.82, 0.83, 0.84, 0.85, 0.5,
           0.5, 0.5, 0.5, 0.49999, 0.6, 0.7, 0.8] * 6

PLATEAU = {
    "default": {},
    "patience": {"patience": 2},
    "max_abs": {"mode": "max", "threshold_mode": "abs", "threshold": 0.01, "patience": 1},
    "cooldown": {"patience": 1, "cooldown": 3, "factor": 0.5},
    "min_lr": {"patience": 0, "factor": 0.5, "min_lr": [0.02, 0.001]},
    "eps": {"patience": 0, "factor": 0.9, "min_lr": 0.05, "eps": 1e-3},
    "max_rel": {"mode": "max", "patience": 3, "threshold": 0.1},
}


def run_plateau(lib, kw: dict, metrics=METRICS) -> list:
    opt = make_opt(lib)
    sched = lib.optim.lr_scheduler.ReduceLROnPlateau(opt, **kw)
    seq = []
    for m in metrics:
        opt.step()
        sched.step(lib.tensor(m) if m < 0.6 else m)      # a 0-d tensor or a number
        seq.append((group_values(opt), sched.get_last_lr(), sched.num_bad_epochs,
                    sched.cooldown_counter, sched.best, sched.last_epoch))
    return seq


@pytest.mark.parametrize("name", sorted(PLATEAU))
def test_reduce_lr_on_plateau_equals_torch(name):
    assert run_plateau(pa, PLATEAU[name]) == run_plateau(torch, PLATEAU[name])


def test_reduce_lr_on_plateau_state_dict():
    opt = make_opt(pa)
    sched = pa.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=1)
    for m in METRICS[:9]:
        sched.step(m)
    state = sched.state_dict()
    assert "optimizer" not in state and state["best"] == sched.best
    sched2 = pa.optim.lr_scheduler.ReduceLROnPlateau(make_opt(pa), patience=1)
    sched2.load_state_dict(state)
    for m in METRICS[9:30]:
        sched.step(m)
        sched2.step(m)
        assert sched2.num_bad_epochs == sched.num_bad_epochs and sched2.best == sched.best


def test_warm_restarts_fractional_epochs_equal_torch():
    def seq(lib):
        opt = make_opt(lib)
        s = lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=3, T_mult=2,
                                                               eta_min=0.001)
        out = []
        for i in range(60):
            opt.step()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                s.step(i * 0.37)
            out.append((group_values(opt), s.T_i, s.T_cur, s.last_epoch))
        return out

    assert seq(pa) == seq(torch)


def test_closed_forms_equal_torch_when_stepped_with_an_epoch():
    for name in ("multistep", "constant_long", "linear_down", "exponential", "polynomial_sq"):
        def seq(lib):
            make, kind = CONFIGS[name]
            opt = make_opt(lib, kind)
            s = make(lib, opt)
            out = []
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for e in (3, 17, 5, 40, 99, 0):
                    opt.step()
                    s.step(e)
                    out.append(group_values(opt))
            return out

        assert seq(pa) == seq(torch), name


def test_one_cycle_past_the_end_raises_as_torch():
    for lib in (torch, pa):
        opt = make_opt(lib)
        s = lib.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=3)
        for _ in range(3):
            opt.step()
            s.step()
        with pytest.raises(ValueError, match="Tried to step 4 times"):
            s.step()


ERRORS = {
    "constant_factor": (lambda L, o: L.ConstantLR(o, factor=2.0), ValueError),
    "linear_start": (lambda L, o: L.LinearLR(o, start_factor=0.0), ValueError),
    "linear_end": (lambda L, o: L.LinearLR(o, end_factor=1.5), ValueError),
    "plateau_factor": (lambda L, o: L.ReduceLROnPlateau(o, factor=1.0), ValueError),
    "plateau_mode": (lambda L, o: L.ReduceLROnPlateau(o, mode="median"), ValueError),
    "plateau_threshold_mode": (lambda L, o: L.ReduceLROnPlateau(o, threshold_mode="x"),
                               ValueError),
    "plateau_min_lrs": (lambda L, o: L.ReduceLROnPlateau(o, min_lr=[0.1]), ValueError),
    "plateau_not_optimizer": (lambda L, o: L.ReduceLROnPlateau(object()), TypeError),
    "cyclic_mode": (lambda L, o: L.CyclicLR(o, 0.01, 0.1, mode="sine"), ValueError),
    "cyclic_max_lr_len": (lambda L, o: L.CyclicLR(o, 0.01, [0.1, 0.2, 0.3]), ValueError),
    "warm_t0": (lambda L, o: L.CosineAnnealingWarmRestarts(o, T_0=0), ValueError),
    "warm_tmult": (lambda L, o: L.CosineAnnealingWarmRestarts(o, T_0=2, T_mult=0), ValueError),
    "warm_eta": (lambda L, o: L.CosineAnnealingWarmRestarts(o, T_0=2, eta_min="x"), ValueError),
    "one_cycle_steps": (lambda L, o: L.OneCycleLR(o, max_lr=1.0), ValueError),
    "one_cycle_total": (lambda L, o: L.OneCycleLR(o, max_lr=1.0, total_steps=0), ValueError),
    "one_cycle_pct": (lambda L, o: L.OneCycleLR(o, max_lr=1.0, total_steps=5, pct_start=1.5),
                      ValueError),
    "one_cycle_anneal": (lambda L, o: L.OneCycleLR(o, max_lr=1.0, total_steps=5,
                                                   anneal_strategy="exp"), ValueError),
    "sequential_empty": (lambda L, o: L.SequentialLR(o, [], []), ValueError),
    "sequential_milestones": (lambda L, o: L.SequentialLR(o, [L.ExponentialLR(o, 0.9)], [3]),
                              ValueError),
    "sequential_plateau": (lambda L, o: L.SequentialLR(o, [L.ReduceLROnPlateau(o)], []),
                           ValueError),
    "chained_empty": (lambda L, o: L.ChainedScheduler([]), ValueError),
    "multiplicative_len": (lambda L, o: L.MultiplicativeLR(o, [lambda e: 1.0]), ValueError),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors_as_torch(name):
    fn, exc = ERRORS[name]
    with pytest.raises(exc):
        fn(torch.optim.lr_scheduler, make_opt(torch))
    with pytest.raises(exc):
        fn(pa.optim.lr_scheduler, make_opt(pa))


def test_cycle_momentum_needs_momentum():
    for lib in (torch, pa):
        opt = lib.optim.SGD([lib.tensor(np.ones(2), requires_grad=True)], lr=0.1)
        del opt.defaults["momentum"]
        with pytest.raises(ValueError, match="momentum or beta1"):
            lib.optim.lr_scheduler.CyclicLR(opt, 0.01, 0.1)


def test_schedulers_drive_a_training_loop():
    """OneCycleLR + SGD momentum on a small regression: the lr the optimizer used each step
    is the schedule's, and the loss falls."""
    rng = np.random.default_rng(0)
    x, w_true = rng.standard_normal((64, 3)), np.array([1.0, -2.0, 0.5])
    y = x @ w_true
    w = pa.zeros(3, requires_grad=True)
    opt = pa.optim.SGD([w], lr=0.1, momentum=0.9)
    sched = pa.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=50)
    losses = []
    for _ in range(50):
        opt.zero_grad()
        loss = ((pa.tensor(x) @ w - pa.tensor(y)) ** 2).mean()
        loss.backward()
        opt.step()
        sched.step() if sched.last_epoch < 50 else None
        losses.append(loss.item())
    assert losses[-1] < 0.01 * losses[0] and math.isfinite(losses[-1])
