"""no_grad / enable_grad / set_grad_enabled: context managers, decorators, per thread."""
import threading

import numpy as np
import pytest

import parallel_autograd as pa


def records(x):
    return (x * 2.0).grad_fn is not None


def test_no_grad_context_records_nothing_and_restores():
    x = pa.tensor([1.0], requires_grad=True)
    assert pa.is_grad_enabled()
    with pa.no_grad():
        assert not pa.is_grad_enabled()
        y = x * 2.0
        assert y.grad_fn is None and not y.requires_grad
    assert pa.is_grad_enabled()
    assert records(x)


def test_enable_grad_inside_no_grad_and_nesting():
    x = pa.tensor([1.0], requires_grad=True)
    with pa.no_grad():
        with pa.enable_grad():
            assert pa.is_grad_enabled()
            assert records(x)
            with pa.no_grad():
                assert not records(x)
            assert records(x)
        assert not pa.is_grad_enabled()
    assert pa.is_grad_enabled()


def test_mode_restored_after_exception():
    with pytest.raises(KeyError):
        with pa.no_grad():
            raise KeyError("x")
    assert pa.is_grad_enabled()
    with pa.no_grad():
        with pytest.raises(KeyError):
            with pa.enable_grad():
                raise KeyError("x")
        assert not pa.is_grad_enabled()


def test_decorators():
    x = pa.tensor([1.0], requires_grad=True)

    @pa.no_grad()
    def f(t):
        """doc of f"""
        return t * 2.0, pa.is_grad_enabled()

    @pa.enable_grad()
    def g(t):
        return t * 2.0

    y, mode = f(x)
    assert y.grad_fn is None and mode is False
    assert f.__name__ == "f" and f.__doc__ == "doc of f"
    assert pa.is_grad_enabled()
    with pa.no_grad():
        assert g(x).grad_fn is not None
        assert not pa.is_grad_enabled()
    # the decorator is reusable and reentrant
    assert f(x)[0].grad_fn is None and f(x)[0].grad_fn is None


def test_set_grad_enabled():
    x = pa.tensor([1.0], requires_grad=True)
    try:
        pa.set_grad_enabled(False)
        assert not pa.is_grad_enabled() and not records(x)
        pa.set_grad_enabled(True)
        assert records(x)
    finally:
        pa.set_grad_enabled(True)


def test_grad_mode_is_thread_local():
    x = pa.tensor([1.0], requires_grad=True)
    results = {}
    entered, release = threading.Event(), threading.Event()

    def other():
        entered.wait(5)
        results["mode"] = pa.is_grad_enabled()
        results["records"] = records(x)
        with pa.no_grad():
            release.set()
            results["inner"] = pa.is_grad_enabled()

    t = threading.Thread(target=other)
    t.start()
    with pa.no_grad():
        entered.set()                 # the other thread looks while we are in no_grad
        assert release.wait(5)
        assert not pa.is_grad_enabled()
    t.join(5)
    assert results == {"mode": True, "records": True, "inner": False}
    assert pa.is_grad_enabled()       # the other thread's no_grad did not leak here


def test_new_thread_starts_with_grad_enabled_even_under_no_grad():
    out = []
    with pa.no_grad():
        t = threading.Thread(target=lambda: out.append(pa.is_grad_enabled()))
        t.start()
        t.join(5)
    assert out == [True]


def test_backward_runs_rules_and_hooks_without_recording():
    """Like PyTorch (create_graph=False), grad mode is off while a backward pass runs
    rules and hooks, and back on afterwards."""
    modes = []

    class Probe(pa.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            modes.append(("fn", pa.is_grad_enabled()))
            return g

    x = pa.tensor([1.0], requires_grad=True)
    h = Probe.apply(x)
    h.register_hook(lambda g: modes.append(("hook", pa.is_grad_enabled())))
    (h * 2.0).sum().backward()
    assert modes == [("hook", False), ("fn", False)]
    assert pa.is_grad_enabled()
    np.testing.assert_array_equal(x.grad, [2.0])


def test_one_instance_reentered_restores_each_level():
    ng = pa.no_grad()
    try:
        pa.set_grad_enabled(False)
        with ng:
            with pa.enable_grad():
                with ng:
                    assert not pa.is_grad_enabled()
                assert pa.is_grad_enabled()
            assert not pa.is_grad_enabled()
        assert not pa.is_grad_enabled()   # the mode before the outer `with`
    finally:
        pa.set_grad_enabled(True)


def test_one_instance_shared_by_threads():
    ng = pa.no_grad()
    entered, inner_done = threading.Event(), threading.Event()
    res = {}

    def other():
        pa.set_grad_enabled(False)
        assert entered.wait(5)
        with ng:
            pass
        res["other"] = pa.is_grad_enabled()
        inner_done.set()

    t = threading.Thread(target=other)
    t.start()
    with ng:
        entered.set()
        assert inner_done.wait(5)
    t.join(5)
    res["main"] = pa.is_grad_enabled()
    assert res == {"other": False, "main": True}


def test_set_grad_enabled_works_as_a_call_and_as_a_context_manager():
    x = pa.tensor([1.0], requires_grad=True)
    assert pa.is_grad_enabled()
    with pa.set_grad_enabled(False):  # raised after turning grad off, before
        assert not pa.is_grad_enabled()
        assert (x * 2).grad_fn is None
    assert pa.is_grad_enabled() and (x * 2).grad_fn is not None
    try:
        pa.set_grad_enabled(False)  # a plain call takes effect and stays
        assert not pa.is_grad_enabled()
        with pa.set_grad_enabled(True):
            assert pa.is_grad_enabled()
        assert not pa.is_grad_enabled()
    finally:
        pa.set_grad_enabled(True)
    assert pa.is_grad_enabled()
