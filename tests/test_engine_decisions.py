"""The parallel engine decides "sequential" for a chain once per graph shape
(`engine.cost.DecisionCache`) and `Tensor.backward()` does not count the cores on
every call (`engine.engine._tensor_default`): issue 28, "no cost for the default
engine". No timing here: the benchmark row is `python -m stress.compare.engine_rows
--rows chain`; these tests count the full decisions instead."""
from __future__ import annotations

import numpy as np
import pytest

import parallel_autograd as pa
from parallel_autograd.engine import blas, cost
from parallel_autograd.engine import engine as engine_module


def chain(n=12, size=64, scale=1.0):
    x = pa.Tensor(np.linspace(-1, 1, size) * scale, requires_grad=True)
    h = x
    for _ in range(n):
        h = pa.sin(h * 0.5)
    return h.sum(), x


def wide(branches=4, size=100_000):
    x = pa.Tensor(np.linspace(-1, 1, size), requires_grad=True)
    out = None
    for k in range(branches):
        y = pa.sin(pa.sin(x * (k + 1)))
        out = y if out is None else out + y
    return out.sum(), x


@pytest.fixture
def full_decisions(monkeypatch):
    """Counts `cost.decide`'s full passes."""
    calls = []
    real = cost.decide

    def counting(plan, cfg):
        calls.append(len(plan.in_degree))
        return real(plan, cfg)
    monkeypatch.setattr(cost, "decide", counting)
    return calls


def test_a_chain_is_decided_once_per_shape(full_decisions):
    # Before: every call walked every node in cost.decide (10 full passes here).
    with pa.Engine(2) as eng:
        reasons = [eng.backward(chain()[0], stats=True).reason for _ in range(10)]
    assert len(full_decisions) == 1
    assert reasons[0].startswith("every node is cheap")
    assert all(r.startswith("every node is cheap") and r.endswith("graph shape)")
               for r in reasons[1:]), reasons


def test_reused_verdicts_give_the_sequential_engines_bits(full_decisions):
    with pa.Engine(2) as eng:
        for _ in range(3):
            loss, x = chain()
            eng.backward(loss)
            loss2, x2 = chain()
            pa.backward(loss2)
            assert np.array_equal(x.grad, x2.grad)
    assert len(full_decisions) == 1


def test_every_recheck_th_reuse_decides_again(full_decisions):
    with pa.Engine(2) as eng:
        for _ in range(2 * cost.DecisionCache.RECHECK + 1):
            eng.backward(chain()[0])
    assert len(full_decisions) == 3


def test_another_shape_or_threshold_is_decided_afresh(full_decisions):
    with pa.Engine(2) as eng:
        eng.backward(chain(12)[0])
        eng.backward(chain(13)[0])          # one more node
        eng.backward(chain(12, size=65)[0])  # the root's input has another size
        eng.inline_below = 1e9               # a threshold changed
        eng.backward(chain(12)[0])
    assert len(full_decisions) == 4


@pytest.mark.timeout(60)
def test_parallel_verdicts_are_never_reused(full_decisions):
    with pa.Engine(2, min_work=0, min_width=1.2, max_blas_share=1.0) as eng:
        modes = [eng.backward(wide()[0], stats=True).mode for _ in range(3)]
    assert modes == ["parallel"] * 3
    assert len(full_decisions) == 3


def test_a_blas_bound_verdict_is_reused_only_while_blas_has_threads(monkeypatch,
                                                                     full_decisions):
    threads = [4]
    monkeypatch.setattr(blas, "available_threads", lambda: threads[0])

    def matmuls():
        x = pa.Tensor(np.ones((64, 64)), requires_grad=True)
        h = x
        for _ in range(10):
            h = h @ x
        return h.sum()

    with pa.Engine(2, min_nodes=0, min_work=0, min_width=0) as eng:
        assert eng.backward(matmuls(), stats=True).reason.startswith("BLAS-bound")
        assert eng.backward(matmuls(), stats=True).reason.startswith("BLAS-bound")
        assert len(full_decisions) == 1
        threads[0] = 1  # BLAS lost its threads: the verdict no longer holds
        st = eng.backward(matmuls(), stats=True)
    assert len(full_decisions) == 2 and not st.reason.startswith("BLAS-bound"), st.reason


def test_tensor_backward_reuses_the_default_engine_and_sees_a_closed_one(monkeypatch):
    looked_up = []
    real = engine_module.default_engine

    def counting(num_workers=None):
        looked_up.append(num_workers)
        return real(num_workers)
    monkeypatch.setattr(engine_module, "default_engine", counting)
    monkeypatch.setattr(engine_module, "_TENSOR_DEFAULT", [None, 0])
    for _ in range(5):
        chain()[0].backward()
    assert len(looked_up) == 1  # before: once per call (and the cores counted each time)
    engine_module._TENSOR_DEFAULT[0].close()
    loss, x = chain()
    loss.backward()
    assert len(looked_up) == 2 and not engine_module._TENSOR_DEFAULT[0].closed
    ref, x2 = chain()
    pa.backward(ref)
    assert np.array_equal(x.grad, x2.grad)


def test_tensor_backward_looks_the_engine_up_again_after_recount_calls(monkeypatch):
    looked_up = []
    real = engine_module.default_engine
    monkeypatch.setattr(engine_module, "default_engine",
                        lambda n=None: looked_up.append(n) or real(n))
    monkeypatch.setattr(engine_module, "_TENSOR_DEFAULT", [None, 0])
    monkeypatch.setattr(engine_module, "_RECOUNT", 3)
    for _ in range(8):
        chain(2)[0].backward()
    assert len(looked_up) == 2  # calls 1 and 5


def test_a_sequential_call_makes_no_call_stats_until_read(monkeypatch):
    # Before: every call made a CallStats (two dicts, a dozen fields), a tenth of the
    # default engine's fixed cost on a chain; now a sequential call leaves its decision,
    # node count and time, and `last_stats` (or stats=True) makes the CallStats.
    made = []
    real = engine_module.CallStats

    def counting():
        made.append(1)
        return real()
    monkeypatch.setattr(engine_module, "CallStats", counting)
    with pa.Engine(2) as eng:
        for _ in range(5):
            eng.backward(chain()[0])
        assert made == []
        st = eng.last_stats
        assert len(made) == 1 and st is eng.last_stats  # made once, then kept
        assert st.mode == "sequential" and st.fell_back and st.nodes == 26
        assert st.reason.startswith("every node is cheap") and st.elapsed > 0
        assert eng.stats()["calls"] == 5 and eng.stats()["fallbacks"] == 5
        assert eng.backward(chain()[0], stats=True).mode == "sequential"


def test_setting_a_threshold_forgets_the_cached_verdicts(full_decisions):
    with pa.Engine(2) as eng:
        eng.backward(chain()[0])
        eng.backward(chain()[0])
        assert len(full_decisions) == 1
        eng.min_work = eng.min_work  # any assignment: the verdicts were keyed without it
        eng.backward(chain()[0])
    assert len(full_decisions) == 2


def test_the_inline_shape_key_is_shape_key(monkeypatch):
    seen = []
    real_get = dict.get

    class Spy(dict):
        def get(self, key, default=None):
            seen.append(key)
            return real_get(self, key, default)
    with pa.Engine(2) as eng:
        eng._decisions._entries = Spy()
        loss = chain()[0]
        plan = pa.engine.plan.plan_call(loss)
        eng._decisions.decide(plan, eng)
    assert seen == [cost.shape_key(plan)]
