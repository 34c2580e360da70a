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


# ---- floating-point errors (np.errstate) --------------------------------------------------
N_FPE = 200_000  # split in 4 ranges of 50,048 elements under threads(4)


def _bad_input(name, where):
    """An input for `name` whose bad values sit in the caller's range ("first"), a
    helper's ("last"), both with different errors ("mixed": the caller's range gets the
    later-reported kind), or nowhere ("none")."""
    x = np.ones(N_FPE) if name == "log" else np.zeros(N_FPE)
    first, last = {"log": (0.0, -1.0), "exp": (1000.0, -1000.0)}[name]
    if where == "first":
        x[3] = first
    elif where == "last":
        x[-5] = first
    elif where == "mixed":  # invalid (log) / underflow (exp) first, divide / overflow later
        x[3], x[-5] = last, first
    return x


def _observe(compute, capfd, **modes):
    """Everything numpy's error handling did during `compute()` under `modes`: the
    exception, the warnings, the errcall calls, the log lines, what went to stderr."""
    import warnings

    calls, lines = [], []

    class Log:
        def write(self, message):
            lines.append(message)

    mode = next(iter(modes.values()))
    call = (lambda kind, flags: calls.append((kind, flags))) if mode == "call" else \
        Log() if mode == "log" else None
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        error = None
        try:
            with np.errstate(call=call, **modes):
                compute()
        except (FloatingPointError, NameError) as e:
            error = (type(e).__name__, str(e))
    return error, [str(w.message) for w in caught], calls, lines, capfd.readouterr().err


@pytest.mark.parametrize("name", ["log", "exp"])
@pytest.mark.parametrize("where", ["first", "last", "mixed", "none"])
@pytest.mark.parametrize("modes", [dict(all="raise"), dict(all="warn"), dict(all="call"),
                                   dict(all="log"), dict(all="print"), dict(all="ignore"),
                                   dict(divide="warn", over="raise", invalid="raise",
                                        under="warn")],
                         ids=lambda m: ",".join(f"{k}={v}" for k, v in m.items()))
def test_split_kernels_handle_floating_point_errors_as_numpy(name, where, modes, threads,
                                                             capfd):
    """Issue 25, item 7: helper threads ran with numpy's default modes, so under
    errstate(all="raise") a bad value in a helper's range gave -inf/inf and no error
    (and warnings came from the helpers, one per range). Now every mode gives exactly
    what numpy gives for the unsplit call."""
    threads(4)
    assert intraop.threads_for(N_FPE) == 4
    x = _bad_input(name, where)
    f = getattr(np, name)
    want = _observe(lambda: f(x), capfd, **modes)
    got = _observe(lambda: getattr(memory.pooled, name)(x), capfd, **modes)
    assert got == want
    t = pa.tensor(x)
    assert _observe(lambda: getattr(pa, name)(t), capfd, **modes) == want


def test_the_error_comes_after_every_range_wrote_its_output(threads):
    """numpy writes an `out=` array, then raises: so do the split kernels."""
    threads(4)
    x = _bad_input("log", "mixed")
    out = np.full(N_FPE, 7.0)
    with pytest.raises(FloatingPointError, match="divide by zero encountered in log"):
        with np.errstate(all="raise"):
            intraop.unary(np.log, x, out)
    with np.errstate(all="ignore"):
        assert_bitwise([np.log(x)], [out], "output")

