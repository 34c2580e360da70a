"""numpy's floating-point error modes (`np.errstate`, per thread) on the library's threads:
the engine's workers run in a copy of the caller's context, so a rule on a worker raises or
warns as on the caller; `fperrors.Deferred` carries the modes to split work and handles its
errors on the caller as numpy would (intraop's and the optimizer's own tests check them in
use)."""
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import numpy as np
import pytest

import parallel_autograd as pa
from parallel_autograd import fperrors


def _worker_logs_zero():
    """A Function whose backward takes log(0) (divide by zero) when it runs on an engine
    worker, recording where it ran and the divide mode it saw."""
    seen = []

    class LogOnWorker(pa.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            name = threading.current_thread().name
            # long enough that the workers take some branches, even on a loaded machine
            # (the caller's branches sleep longer, leaving the rest to the workers)
            time.sleep(0.002 if name.startswith("pa-worker") else 0.02)
            seen.append((name, np.geterr()["divide"]))
            if name.startswith("pa-worker"):
                np.log(np.zeros(2))
            return g

    return LogOnWorker, seen


def _backward_on_workers(modes):
    fn, seen = _worker_logs_zero()
    x = pa.tensor(np.ones(4), requires_grad=True)
    loss = sum((fn.apply(x * float(k)).sum() for k in range(12)), pa.zeros(()))
    with pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0) as eng:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            error = None
            try:
                with np.errstate(**modes):
                    eng.backward(loss)
            except FloatingPointError as e:
                error = str(e)
    return error, [str(w.message) for w in caught], seen


@pytest.mark.timeout(180)  # a deadlock guard (loaded machines are slow)
def test_engine_workers_run_under_the_callers_errstate():
    for _ in range(20):  # until a worker took a branch (almost always the first time)
        error, caught, seen = _backward_on_workers(dict(all="raise"))
        if any(n.startswith("pa-worker") for n, _ in seen):
            break
    assert any(n.startswith("pa-worker") for n, _ in seen)
    assert {mode for _, mode in seen} == {"raise"}
    # (before 3.11 the engine's note on where it was raised is appended to the message)
    assert error.startswith("divide by zero encountered in log") and not caught
    error, caught, seen = _backward_on_workers(dict(all="ignore"))
    assert error is None and not caught
    error, caught, seen = _backward_on_workers(dict(all="warn"))
    workers = sum(n.startswith("pa-worker") for n, _ in seen)
    assert error is None and caught == ["divide by zero encountered in log"] * workers


def _events(deferred, *parts):
    """Run each (tag, fn) part under `deferred.recording(tag)`."""
    for tag, fn in parts:
        with deferred.recording(tag):
            fn()


def test_merged_replay_is_one_ufunc_call_in_numpys_order():
    with np.errstate(all="raise"):
        d = fperrors.Deferred()
    _events(d, (1, lambda: np.log(np.zeros(1))), (0, lambda: np.log(-np.ones(1))))
    with pytest.raises(FloatingPointError, match="^divide by zero encountered in log$"):
        d.replay(merged=True)
    calls = []
    with np.errstate(all="call", call=lambda *a: calls.append(a)):
        d = fperrors.Deferred()
    _events(d, (1, lambda: np.log(np.zeros(1))), (0, lambda: np.log(-np.ones(1))))
    d.replay(merged=True)
    assert calls == [("divide by zero", 9), ("invalid value", 9)]  # numpy's bits 1 | 8


def test_unmerged_replay_follows_the_tags_then_the_order_logged():
    with np.errstate(all="raise"):
        d = fperrors.Deferred()
    _events(d, (1, lambda: np.log(np.zeros(1))),
            (0, lambda: (np.multiply(np.array([1e308]), 10), np.sqrt(-np.ones(1)))))
    with pytest.raises(FloatingPointError, match="^overflow encountered in multiply$"):
        d.replay(merged=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with np.errstate(all="warn"):
            d = fperrors.Deferred()
        _events(d, (0, lambda: [np.sqrt(-np.ones(1)) for _ in range(5)]),
                (1, lambda: np.log(np.zeros(1))))
        assert not caught  # nothing happens on the threads' side
        d.replay(merged=False)
    assert [str(w.message) for w in caught] == ["invalid value encountered in sqrt",
                                               "divide by zero encountered in log"]
    assert caught[0].filename == __file__  # from the caller of replay


def test_ignored_categories_are_not_logged_and_modes_come_back():
    with np.errstate(divide="ignore", invalid="raise"):
        d = fperrors.Deferred()
    before = np.geterr()
    _events(d, (0, lambda: np.log(np.zeros(1))))
    assert d.events == [] and np.geterr() == before
    d.replay()


@pytest.mark.timeout(120)
def test_ops_do_not_warn_on_inf_and_nan_as_pytorch_but_user_numpy_does():
    # PyTorch's log(0) is -inf, sqrt(-1) nan, 1/0 inf, silently; numpy's RuntimeWarnings
    # from inside the library's kernels leaked out ("divide by zero" from memory.py).
    code = textwrap.dedent("""
        import warnings
        import numpy as np
        import parallel_autograd as pa
        x = pa.tensor([0.0, 1.0, -1.0], requires_grad=True)
        y = x.log().sum() + x.sqrt().sum() + (1 / x).sum() + (x / x).sum() + x.pow(-1).sum()
        y = y + (pa.tensor([1e308]) * 10).sum()
        y.backward()
        assert np.isnan(y.item()), y
        with np.errstate(divide="raise"):  # the caller's errstate still applies
            try:
                x.log()
            except FloatingPointError:
                pass
            else:
                raise AssertionError("np.errstate(divide='raise') was ignored")
        try:  # the caller's own numpy code still warns
            np.log(np.zeros(1))
        except RuntimeWarning:
            print("ok")
    """)
    r = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True,
                       text=True, timeout=100)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok", r.stdout
