"""detect_anomaly / set_detect_anomaly: creation tracebacks, NaN/inf checks in backward
(both engines, create_graph), failure atomicity, the mode's scope (nesting, threads)."""
import contextvars
import gc
import os
import re
import sys
import threading
import time
import weakref

import numpy as np
import pytest

import parallel_autograd as pa
from parallel_autograd import anomaly

HERE = os.path.basename(__file__)
PKG = os.path.dirname(pa.__file__)


def here() -> int:
    """The caller's line number: `y, line = op(x), here()` names the line that made y."""
    return sys._getframe(1).f_lineno


@pytest.fixture(scope="module")
def engine():
    eng = pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0)
    yield eng
    eng.close()


def seq_backward(y, grad=None):
    pa.backward(y, grad)


def runners(engine):
    """backward callables: the sequential engine, and a parallel engine forced to run
    every call in parallel."""
    return [seq_backward, lambda y, grad=None: engine.backward(y, grad)]


def quiet():
    return np.errstate(all="ignore")  # the forward NaNs/infs are the point here


def raised(fn, *args) -> RuntimeError:
    with pytest.raises(RuntimeError) as info:
        fn(*args)
    return info.value


def assert_names(e, first_line: str, line: int, code: str):
    """The message starts like PyTorch's and shows this file's line that made the op."""
    msg = str(e)
    assert msg.splitlines()[0] == first_line, msg
    assert f'{HERE}", line {line}, in' in msg, msg
    assert code in msg, msg
    assert PKG + os.sep not in msg, msg  # the library's own frames are left out


# ---- the checks ---------------------------------------------------------------------
@pytest.mark.parametrize("which", ["sequential", "parallel"])
def test_sqrt_of_negative_names_the_op_and_line_and_leaves_grad(engine, which):
    run = runners(engine)[which == "parallel"]
    x = pa.tensor([4.0, -1.0], requires_grad=True)
    w = pa.tensor([1.0, 2.0], requires_grad=True)
    x.grad = np.array([7.0, 7.0])
    with pa.detect_anomaly(), quiet():
        y, line = pa.sqrt(x), here()
        e = raised(run, (y + w).sum())
    assert_names(e, "Function 'sqrt' returned nan values in its 0th output "
                    "(the gradient of its input 0).", line, "pa.sqrt(x)")
    assert e.autograd_op == "sqrt"  # the engines' annotation names it too
    np.testing.assert_array_equal(x.grad, [7.0, 7.0])  # unchanged: nothing committed
    assert w.grad is None
    # the engine stays usable: a clean pass afterwards gives the right gradient
    x2 = pa.tensor([4.0, 9.0], requires_grad=True)
    with pa.detect_anomaly():
        run(pa.sqrt(x2).sum())
    np.testing.assert_allclose(x2.grad, [0.25, 1 / 6])


@pytest.mark.parametrize("which", ["sequential", "parallel"])
def test_zero_times_inf_reports_inf(engine, which):
    run = runners(engine)[which == "parallel"]
    a = pa.tensor([0.0], requires_grad=True)
    b = pa.tensor([np.inf], requires_grad=True)
    with pa.detect_anomaly(), quiet():
        y, line = a * b, here()
        e = raised(run, y.sum())  # d/da = b = inf (PyTorch checks NaN only: no error)
    assert_names(e, "Function 'mul' returned inf values in its 0th output "
                    "(the gradient of its input 0).", line, "y, line = a * b")
    assert a.grad is None and b.grad is None


@pytest.mark.parametrize("which", ["sequential", "parallel"])
def test_log_of_zero(engine, which):
    run = runners(engine)[which == "parallel"]
    x = pa.tensor([0.0, 1.0], requires_grad=True)
    w = pa.tensor([0.0, 1.0], requires_grad=True)
    with pa.detect_anomaly(), quiet():
        y, line = pa.log(x) * w, here()  # -inf * 0: d/dw = log(0) = -inf
        e = raised(run, y.sum())
        assert_names(e, "Function 'mul' returned inf values in its 1st output "
                        "(the gradient of its input 1).", line, "pa.log(x) * w")
        z, line = pa.log(x), here()  # 0 / 0 in log's rule
        e = raised(run, (z * 0.0).sum())
        assert_names(e, "Function 'log' returned nan values in its 0th output "
                        "(the gradient of its input 0).", line, "z, line = pa.log(x)")
    assert x.grad is None and w.grad is None


class NanBackward(pa.Function):
    seen = []  # (anomaly mode, thread) as each backward saw them

    @staticmethod
    def forward(ctx, x):
        return x * 2.0

    @staticmethod
    def backward(ctx, g):
        me = threading.current_thread()
        NanBackward.seen.append((pa.is_anomaly_enabled(), me))
        # let the other threads of the engine take work: the caller's branches sleep
        # longer, so workers get some even on a loaded machine
        time.sleep(0.02 if me is threading.main_thread() else 0.002)
        return g * np.nan


@pytest.mark.parametrize("which", ["sequential", "parallel"])
def test_user_function_returning_nan(engine, which):
    run = runners(engine)[which == "parallel"]
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    with pa.detect_anomaly():
        y, line = NanBackward.apply(x), here()
        e = raised(run, y.sum())
    assert_names(e, "Function 'NanBackward' returned nan values in its 0th output "
                    "(the gradient of its input 0).", line, "NanBackward.apply(x)")
    assert x.grad is None


def test_mode_reaches_the_parallel_engines_worker_threads(engine):
    x = pa.tensor([1.0], requires_grad=True)
    branches = [NanBackward.apply(x * float(i)) for i in range(8)]
    total = branches[0]
    for b in branches[1:]:
        total = total + b
    _, st = engine.grad(total, [x], retain_graph=True, stats=True)
    assert st.mode == "parallel"
    NanBackward.seen.clear()
    with pa.detect_anomaly():
        e = raised(engine.backward, total)
    assert "returned nan values" in str(e) and x.grad is None
    assert NanBackward.seen and all(on for on, _ in NanBackward.seen)
    with quiet():  # off: the NaN gradient goes through
        engine.backward(sum_of([NanBackward.apply(x * float(i)) for i in range(8)]))
    assert np.isnan(x.grad.numpy()).all()
    assert not any(on for on, _ in NanBackward.seen[-8:])


def sum_of(ts):
    total = ts[0]
    for t in ts[1:]:
        total = total + t
    return total


def test_threads_ran_nodes_off_the_calling_thread(engine):
    # the previous test's claim needs worker threads to have run rules at all
    x = pa.tensor([1.0], requires_grad=True)
    for _ in range(10):  # until a worker took a branch (almost always the first time)
        NanBackward.seen.clear()
        with pa.detect_anomaly(check_nan=False), quiet():
            engine.backward(sum_of([NanBackward.apply(x * float(i)) for i in range(8)]))
        threads = {t for _, t in NanBackward.seen}
        if threads - {threading.current_thread()}:
            break
    assert threads - {threading.current_thread()}, "no rule ran on a worker thread"
    assert all(on for on, _ in NanBackward.seen)


@pytest.mark.parametrize("which", ["sequential", "parallel"])
def test_create_graph_pass_checks_tensor_gradients(engine, which):
    grad = pa.grad if which == "sequential" else engine.grad
    x = pa.tensor([4.0, -1.0], requires_grad=True)
    with pa.detect_anomaly(), quiet():
        y, line = pa.sqrt(x), here()
        e = raised(lambda: grad(y.sum(), x, create_graph=True))
    assert_names(e, "Function 'sqrt' returned nan values in its 0th output "
                    "(the gradient of its input 0).", line, "pa.sqrt(x)")
    x.grad = np.zeros(2)
    with pa.detect_anomaly(), quiet():
        e = raised(lambda: (engine.backward if which == "parallel" else pa.backward)(
            pa.sqrt(x).sum(), create_graph=True))
    assert "'sqrt' returned nan" in str(e)
    np.testing.assert_array_equal(x.grad, [0.0, 0.0])


def _rule(g, ans, x):
    return g


# The rule's differentiable form: value g (sqrt(0) * 0 = 0), but its derivative goes
# through sqrt's rule at 0: 0 / 0. The sqrt node is made by myop's backward.
_rule.graph = lambda g, ans, x: g + pa.sqrt(x) * 0.0
myop = pa.primitive("myop", lambda x: x.copy(), _rule)


def test_second_order_nan_names_the_backward_that_made_the_op(engine):
    messages = []
    for grad in (pa.grad, engine.grad):
        x = pa.tensor([0.0, 1.0], requires_grad=True)
        with pa.detect_anomaly(), quiet():
            y, line = myop(x), here()
            (gx,) = grad(y.sum(), [x], create_graph=True)  # finite: no error
            assert np.isfinite(gx.numpy()).all()
            e = raised(grad, gx.sum(), [x])
        msg = str(e)
        assert msg.startswith("Function 'sqrt' returned nan values in its 0th output"), msg
        assert "The op was made by the backward of 'myop'." in msg, msg
        assert f'{HERE}", line {line}, in' in msg and "myop(x)" in msg, msg
        # (seq numbers differ between the two graphs: Python 3.10 has no add_note, so
        # the engine's "(node seq N)" note is in the message itself)
        messages.append(re.sub(r"node seq \d+", "node seq N",
                               msg.replace(f"line {line}", "line L")))
    assert messages[0] == messages[1]  # the same report from both engines
    x = pa.tensor([0.0], requires_grad=True)
    y = myop(x)  # made with the mode off: the message says so
    with pa.detect_anomaly(), quiet():
        (gx,) = pa.grad(y.sum(), [x], create_graph=True)
        e = raised(pa.grad, gx.sum(), [x])
    text = re.sub(r" \[raised in [^\]]*\]$", "", str(e))  # 3.10: notes in the message
    assert text.endswith("The op was made by the backward of 'myop'.\nNo traceback was "
                         "recorded for 'myop': it was created while anomaly detection "
                         "was off."), str(e)


@pytest.mark.parametrize("which", ["sequential", "parallel"])
def test_seed_hook_and_overflowing_sum_are_checked(engine, which):
    run = runners(engine)[which == "parallel"]
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    with pa.detect_anomaly(), quiet():
        y, line = x * 3.0, here()
        e = raised(run, y, np.array([1.0, np.nan]))
        assert str(e).startswith("Function 'mul' received nan values in the gradient of "
                                 "its output (a seed gradient"), str(e)
        assert f'{HERE}", line {line}, in' in str(e)

        z = x * 3.0
        z.register_hook(lambda g: g * np.inf)
        e = raised(run, z.sum())
        assert str(e).startswith("A hook on the gradient of 'mul' returned inf values."), e

        big = pa.tensor([1.0], requires_grad=True)
        e = raised(run, big * 1e308 + big * 1e308)  # two finite contributions: sum inf
        assert str(e).startswith("Function 'AccumulateGrad' received inf values"), str(e)
        assert "a leaf tensor of shape (1,)" in str(e)
    assert x.grad is None and big.grad is None


def test_other_errors_in_a_backward_get_the_creation_traceback():
    def boom(g, ans, x):
        raise ValueError("boom")

    op = pa.primitive("boomop", lambda x: x.copy(), boom)
    x = pa.tensor([1.0], requires_grad=True)
    with pa.detect_anomaly():
        y, line = op(x), here()
    with pytest.raises(ValueError, match="boom") as info:
        pa.backward(y.sum())  # the trace was recorded: shown even with the mode off now
    notes = "\n".join(info.value.__notes__)
    assert f'{HERE}", line {line}, in' in notes and "op(x)" in notes, notes
    with pytest.raises(ValueError) as info:
        pa.backward(op(x).sum())  # made with the mode off: no traceback
    assert "was created at" not in "\n".join(info.value.__notes__)


# ---- the mode -----------------------------------------------------------------------
def test_off_by_default_and_nothing_recorded_when_off():
    assert not pa.is_anomaly_enabled() and pa.is_anomaly_check_nan_enabled()
    x = pa.tensor([-1.0], requires_grad=True)
    before = len(anomaly._traces)
    with quiet():
        y = pa.sqrt(x)
        assert anomaly.trace_of(y.grad_fn) is None and len(anomaly._traces) == before
        pa.backward(y.sum())  # no check: the NaN gradient goes through
    assert np.isnan(x.grad.numpy()).all()


def test_check_nan_false_records_traces_but_checks_nothing(engine):
    x = pa.tensor([-1.0], requires_grad=True)
    with pa.detect_anomaly(check_nan=False), quiet():
        assert pa.is_anomaly_enabled() and not pa.is_anomaly_check_nan_enabled()
        y, line = pa.sqrt(x), here()
        t = anomaly.trace_of(y.grad_fn)
        assert t.stack[-1].lineno == line and t.stack[-1].filename == __file__
        assert all(not f.filename.startswith(PKG + os.sep) for f in t.stack)
        assert len(t.stack) <= anomaly.TRACE_LIMIT
        engine.backward(y.sum(), retain_graph=True)
        pa.backward(y.sum())
    assert np.isnan(x.grad.numpy()).all()


def test_traces_do_not_keep_nodes_alive():
    x = pa.tensor([1.0], requires_grad=True)
    with pa.detect_anomaly():
        y = x * 2.0
    ref = weakref.ref(y.grad_fn)
    assert anomaly.trace_of(ref()) is not None
    n = len(anomaly._traces)
    del y
    gc.collect()
    assert ref() is None and len(anomaly._traces) < n  # its entry went with it


def test_nesting_and_set_detect_anomaly_restore():
    with pa.detect_anomaly():
        assert pa.is_anomaly_enabled()
        with pa.set_detect_anomaly(False):
            assert not pa.is_anomaly_enabled()
            with pa.detect_anomaly(check_nan=False):
                assert pa.is_anomaly_enabled() and not pa.is_anomaly_check_nan_enabled()
            assert not pa.is_anomaly_enabled() and pa.is_anomaly_check_nan_enabled()
        assert pa.is_anomaly_enabled()
        with pytest.raises(KeyError):
            with pa.set_detect_anomaly(False):
                raise KeyError("x")
        assert pa.is_anomaly_enabled()
    assert not pa.is_anomaly_enabled()
    # a plain call stays on until turned off
    pa.set_detect_anomaly(True)
    try:
        assert pa.is_anomaly_enabled() and pa.is_anomaly_check_nan_enabled()
    finally:
        pa.set_detect_anomaly(False)
    assert not pa.is_anomaly_enabled()
    # one instance re-entered
    ctx = pa.detect_anomaly()
    with ctx:
        with pa.set_detect_anomaly(False):
            with ctx:
                assert pa.is_anomaly_enabled()
            assert not pa.is_anomaly_enabled()
        assert pa.is_anomaly_enabled()
    assert not pa.is_anomaly_enabled()


def test_decorator_and_bad_arguments():
    @pa.detect_anomaly(check_nan=False)
    def f():
        """doc"""
        return pa.is_anomaly_enabled(), pa.is_anomaly_check_nan_enabled()

    assert f() == (True, False) and f.__doc__ == "doc"
    assert not pa.is_anomaly_enabled()
    with pytest.raises(TypeError, match="set_detect_anomaly: mode must be a bool"):
        pa.set_detect_anomaly("yes")
    with pytest.raises(TypeError, match="detect_anomaly: check_nan must be a bool"):
        pa.detect_anomaly(check_nan=None)
    assert not pa.is_anomaly_enabled() and pa.is_anomaly_check_nan_enabled()


def test_mode_is_per_thread_and_follows_a_copied_context():
    seen = {}

    def look(key):
        seen[key] = pa.is_anomaly_enabled()

    outside = threading.Thread(target=look, args=("started outside",))
    with pa.detect_anomaly():
        outside.start()
        outside.join()
        inside = threading.Thread(target=look, args=("started inside",))
        inside.start()
        inside.join()
        ctx = contextvars.copy_context()
        copied = threading.Thread(target=ctx.run, args=(look, "copied context"))
        copied.start()
        copied.join()
        with pa.set_detect_anomaly(False):
            pass
    # a new thread starts with an empty context (unlike PyTorch's process-wide flag)
    assert seen == {"started outside": False, "started inside": False,
                    "copied context": True}


def test_exported_under_pa_autograd():
    for name in ("detect_anomaly", "set_detect_anomaly", "is_anomaly_enabled",
                 "is_anomaly_check_nan_enabled"):
        assert getattr(pa.autograd, name) is getattr(pa, name)


def test_message_matches_pytorch_for_the_same_failure():
    torch = pytest.importorskip("torch")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tx = torch.tensor([4.0, -1.0], dtype=torch.float64, requires_grad=True)
        with torch.autograd.detect_anomaly():
            with pytest.raises(RuntimeError) as info:
                torch.sqrt(tx).sum().backward()
    want = str(info.value).replace("SqrtBackward0", "sqrt")
    x = pa.tensor([4.0, -1.0], requires_grad=True)
    with pa.detect_anomaly(), quiet():
        e = raised(pa.backward, pa.sqrt(x).sum())
    # PyTorch's sentence, then which input, then where the op was created
    assert str(e).startswith(want.rstrip("."))
