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
         ("Adagrad", dict(lr=0.1, lr_decay=0.01))]


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
    return [p.data.copy() for p in params], opt


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
    loads = [sum(item[1].data.size for item in share) for share in shares]
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
