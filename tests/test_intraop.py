"""Intra-op parallelism (`parallel_autograd.intraop`): split kernels give bitwise the
whole kernel's result for any thread count, errors come back after every range ran,
nothing is split under a parallel backward or on its workers, and a fork child works."""
import os
import threading

import numpy as np
import pytest

import parallel_autograd as pa
from parallel_autograd import intraop, memory
from conftest import assert_bitwise


@pytest.fixture
def threads():
    prev = intraop.get_num_threads()
    yield intraop.set_num_threads
    intraop.set_num_threads(prev)


@pytest.mark.parametrize("n", [1, 63, 64, 1000, 100_003])
@pytest.mark.parametrize("t", [2, 3, 8, 64])
def test_ranges_cover_every_index_once(n, t):
    hits = np.zeros(n, np.int64)
    lock = threading.Lock()

    def fn(lo, hi):
        with lock:
            hits[lo:hi] += 1
        assert lo % 64 == 0

    intraop.run(fn, n, t)
    assert np.all(hits == 1)


@pytest.mark.parametrize("name", ["sin", "cos", "exp", "tanh", "log1p", "arctan"])
@pytest.mark.parametrize("t", [2, 5, 16])
def test_split_ufuncs_are_bitwise_numpys(name, t, threads):
    x = np.random.default_rng(1).standard_normal(3 * intraop.MIN_ELEMENTS + 17)
    if name == "log1p":
        x = np.abs(x)
    threads(t)
    got = getattr(memory.pooled, name)(x)
    assert_bitwise([getattr(np, name)(x)], [got], name)


def test_the_first_error_is_raised_after_all_ranges_ran():
    ran = []

    def fn(lo, hi):
        ran.append(lo)
        if lo > 0:
            raise ValueError(f"range {lo} failed on purpose")

    with pytest.raises(ValueError, match="on purpose"):
        intraop.run(fn, 4096, 4)
    assert sorted(ran) == [0, 1024, 2048, 3072]


def test_nothing_is_split_while_a_parallel_backward_runs_or_on_its_workers(threads):
    threads(8)
    n = 4 * intraop.MIN_ELEMENTS
    assert intraop.threads_for(n) > 1
    with intraop.engine_running():
        assert intraop.threads_for(n) == 1
    seen = []
    x = pa.tensor(np.ones(8), requires_grad=True)
    x.register_hook(lambda g: seen.append(intraop.threads_for(n)) or g)
    loss = sum(((x * float(k)).sin() for k in range(16)), pa.zeros(8)).sum()
    pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0).backward(loss)
    assert seen == [1]
    assert intraop.threads_for(intraop.MIN_ELEMENTS - 1) == 1
    threads(1)
    assert intraop.threads_for(n) == 1


def test_bad_thread_counts_are_refused():
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="set_num_threads"):
            intraop.set_num_threads(bad)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_fork_child_makes_its_own_helpers(threads):
    from stress.hazards import fork_call

    threads(2)
    x = np.linspace(-3, 3, 4 * intraop.MIN_ELEMENTS)
    want = np.sin(x)
    memory.pooled.sin(x)  # the parent's helpers exist now

    def child():
        return 0 if memory.pooled.sin(x).tobytes() == want.tobytes() else 3

    assert fork_call(child, timeout=30) == 0
