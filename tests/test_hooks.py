"""Tensor hooks (register_hook / handle.remove) and retain_grad."""
import threading

import numpy as np
import pytest

import parallel_autograd as pa


def test_leaf_hook_replaces_gradient():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    seen = []

    def hook(g):
        seen.append(g.clone())
        return g * 2.0

    x.register_hook(hook)
    (x * x).sum().backward()
    np.testing.assert_array_equal(seen[0], [2.0, 4.0])
    np.testing.assert_array_equal(x.grad, [4.0, 8.0])


def test_leaf_hook_sees_complete_gradient_once():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    x.register_hook(lambda g: seen.append(g.clone()))
    (x * 3.0 + x * 4.0 + x.exp()).sum().backward()
    assert len(seen) == 1
    np.testing.assert_allclose(seen[0], 7.0 + np.exp(x.numpy()))
    np.testing.assert_allclose(x.grad, seen[0])


def test_nonleaf_hook_replaces_gradient_flowing_upstream():
    x = pa.tensor([1.0, -1.0], requires_grad=True)
    h = x * 3.0
    seen = []

    def hook(g):
        seen.append(g.clone())
        return g * 10.0

    h.register_hook(hook)
    (h * h).sum().backward()
    np.testing.assert_array_equal(seen[0], 2 * h.numpy())
    np.testing.assert_array_equal(x.grad, 3.0 * 10.0 * 2 * h.numpy())
    assert h.grad is None  # non-leaf grads are not kept without retain_grad


def test_hook_returning_none_observes_only():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    h = x.sin()
    seen = []
    h.register_hook(lambda g: seen.append(type(g)))
    h.sum().backward()
    assert seen == [pa.Tensor]  # PyTorch: hooks see Tensors
    np.testing.assert_allclose(x.grad, np.cos(x.numpy()))


def test_hooks_chain_in_registration_order():
    x = pa.tensor([1.0], requires_grad=True)
    h = x * 1.0
    h.register_hook(lambda g: g + 1.0)
    h.register_hook(lambda g: g * 2.0)
    h.sum().backward()
    np.testing.assert_array_equal(x.grad, [4.0])  # (1 + 1) * 2, not 1 * 2 + 1


def test_hook_may_return_tensor_and_other_dtype():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    x.register_hook(lambda g: pa.tensor(np.full(2, 5, dtype=np.float32)))
    (x * 2.0).sum().backward()
    assert x.grad.dtype == np.float64
    np.testing.assert_array_equal(x.grad, [5.0, 5.0])


def test_handle_remove():
    x = pa.tensor([1.0], requires_grad=True)
    h = x * 2.0
    handle = h.register_hook(lambda g: g * 100.0)
    leaf_handle = x.register_hook(lambda g: g + 1.0)
    h.sum().backward(retain_graph=True)
    np.testing.assert_array_equal(x.grad, [201.0])
    handle.remove()
    handle.remove()  # idempotent
    x.grad = None
    h.sum().backward(retain_graph=True)
    np.testing.assert_array_equal(x.grad, [3.0])
    leaf_handle.remove()
    x.grad = None
    h.sum().backward()
    np.testing.assert_array_equal(x.grad, [2.0])


def test_leaf_hook_registered_after_graph_built_applies():
    x = pa.tensor([1.0], requires_grad=True)
    y = (x * 2.0).sum()  # x's accumulator already exists
    x.register_hook(lambda g: g * 3.0)
    y.backward()
    np.testing.assert_array_equal(x.grad, [6.0])


def test_hooks_apply_in_grad():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2.0
    h.register_hook(lambda g: g * 5.0)
    x.register_hook(lambda g: g + 1.0)
    (gx,) = pa.grad(h.sum(), [x])
    np.testing.assert_array_equal(gx, [11.0, 11.0])
    assert x.grad is None


def test_observing_hook_keeps_its_array_after_later_accumulation():
    """A hook that keeps the gradient it saw must not see it change when a later
    backward accumulates into the leaf's .grad in place."""
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    saved = []
    x.register_hook(lambda g: saved.append(g))
    (x * 3.0 + x * 2.0).sum().backward()   # two contributions: engine-owned buffer
    np.testing.assert_array_equal(saved[0], [5.0, 5.0])
    (x * 3.0 + x * 2.0).sum().backward()
    np.testing.assert_array_equal(x.grad, [10.0, 10.0])
    np.testing.assert_array_equal(saved[0], [5.0, 5.0])
    np.testing.assert_array_equal(saved[1], [5.0, 5.0])


def test_retained_grad_not_aliased_by_observing_hook():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1.0
    h.retain_grad()
    saved = []
    h.register_hook(lambda g: saved.append(g))
    y = (h * 3.0 + h * 2.0).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_array_equal(h.grad, [10.0, 10.0])
    np.testing.assert_array_equal(saved[0], [5.0, 5.0])


def test_retain_grad_on_nonleaf():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3.0
    h.retain_grad()
    u = h.exp()
    y = u.sum()
    y.backward(retain_graph=True)
    np.testing.assert_allclose(h.grad, np.exp(h.numpy()))
    assert u.grad is None
    y.backward()  # retained grads accumulate like leaf grads
    np.testing.assert_allclose(h.grad, 2 * np.exp(h.numpy()))
    np.testing.assert_allclose(x.grad, 2 * 3.0 * np.exp(h.numpy()))


def test_retain_grad_sees_hooked_gradient():
    x = pa.tensor([1.0], requires_grad=True)
    h = x * 2.0
    h.retain_grad()
    h.register_hook(lambda g: g * 7.0)
    h.sum().backward()
    np.testing.assert_array_equal(h.grad, [7.0])
    np.testing.assert_array_equal(x.grad, [14.0])


def test_retain_grad_on_leaf_is_noop_and_grad_does_not_fill_retained():
    x = pa.tensor([1.0], requires_grad=True)
    x.retain_grad()
    h = x * 2.0
    h.retain_grad()
    s = h.sum()
    (g,) = pa.grad(s, [x], retain_graph=True)
    np.testing.assert_array_equal(g, [2.0])
    assert h.grad is None and x.grad is None
    s.backward()
    np.testing.assert_array_equal(h.grad, [1.0])
    np.testing.assert_array_equal(x.grad, [2.0])


def test_hook_wrong_shape_on_leaf_raises_value_error():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    x.register_hook(lambda g: np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"returned shape \(2, 2\), expected \(2,\)"):
        (x * 2.0).sum().backward()
    assert x.grad is None


# ---- post-accumulate grad hooks ---------------------------------------------------------
def _post_hook_graph():
    a = pa.tensor([1.0, 2.0], requires_grad=True)
    b = pa.tensor([3.0, 4.0], requires_grad=True)
    c = pa.tensor([5.0, 6.0], requires_grad=True)
    loss = ((a * b).sin() + (b * c).tanh() + c * 2.0 + a * 3.0).sum()
    return loss, (a, b, c)


def _backward(engine, loss):
    if engine == "sequential":
        pa.backward(loss)
    else:
        with pa.Engine(3, min_nodes=0, min_work=0, min_width=0, inline_below=0) as eng:
            eng.backward(loss)


@pytest.mark.parametrize("engine", ["sequential", "parallel"])
def test_post_accumulate_hooks_see_final_grads_once_in_backward_order(engine):
    loss, leaves = _post_hook_graph()
    for t in leaves:
        t.grad = np.full(2, 100.0)
    calls = []
    caller = threading.get_ident()
    for name, t in zip("abc", leaves):
        t.register_post_accumulate_grad_hook(
            lambda t, name=name: calls.append((name, t.grad.clone(),
                                               [x.grad.clone() for x in leaves],
                                               threading.get_ident())))
        t.register_post_accumulate_grad_hook(lambda t, name=name: calls.append(name + "2"))
    _backward(engine, loss)
    names = [c if isinstance(c, str) else c[0] for c in calls]
    # backward order: the accumulator made last runs first (c's, then b's, then a's)
    seqs = {n: t._accumulator().seq for n, t in zip("abc", leaves)}
    order = sorted("abc", key=seqs.get, reverse=True)
    assert names == [x for n in order for x in (n, n + "2")]
    for c in calls:
        if not isinstance(c, str):
            name, own, every, tid = c
            assert tid == caller
            # every .grad of the call is already written when any hook runs
            assert all(np.array_equal(g, t.grad) for g, t in zip(every, leaves))
            assert np.array_equal(own, leaves["abc".index(name)].grad)
    loss2, leaves2 = _post_hook_graph()
    for t in leaves2:
        t.grad = np.full(2, 100.0)
    pa.backward(loss2)
    assert all(np.array_equal(x.grad, y.grad) for x, y in zip(leaves, leaves2))


@pytest.mark.parametrize("engine", ["sequential", "parallel"])
def test_post_accumulate_hooks_do_not_run_for_a_failed_call(engine):
    loss, (a, b, c) = _post_hook_graph()
    calls = []
    a.register_post_accumulate_grad_hook(lambda t: calls.append("a"))
    b.register_hook(lambda g: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        _backward(engine, loss)
    assert calls == [] and a.grad is None


@pytest.mark.parametrize("engine", ["sequential", "parallel"])
def test_a_raising_post_accumulate_hook_propagates_with_grads_written(engine):
    loss, (a, b, c) = _post_hook_graph()
    calls = []

    def bad(t):
        raise ValueError("hook says no")
    handles = [t.register_post_accumulate_grad_hook(bad) for t in (a, b, c)]
    a.register_post_accumulate_grad_hook(lambda t: calls.append("a"))
    with pytest.raises(ValueError, match="hook says no"):
        _backward(engine, loss)
    assert all(t.grad is not None for t in (a, b, c)) and calls == []
    for h in handles:
        h.remove()
    loss2, (a2, _, _) = _post_hook_graph()
    a2.register_post_accumulate_grad_hook(lambda t: calls.append("a2"))
    _backward(engine, loss2)
    assert calls == ["a2"]


def test_post_accumulate_hook_only_on_leaves_that_require_grad():
    x = pa.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="non-leaf"):
        (x * 2).register_post_accumulate_grad_hook(lambda t: None)
    with pytest.raises(RuntimeError, match="does not require grad"):
        pa.tensor([1.0]).register_post_accumulate_grad_hook(lambda t: None)
