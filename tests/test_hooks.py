"""Tensor hooks (register_hook / handle.remove) and retain_grad."""
import numpy as np
import pytest

import parallel_autograd as pa


def test_leaf_hook_replaces_gradient():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    seen = []

    def hook(g):
        seen.append(g.copy())
        return g * 2.0

    x.register_hook(hook)
    (x * x).sum().backward()
    np.testing.assert_array_equal(seen[0], [2.0, 4.0])
    np.testing.assert_array_equal(x.grad, [4.0, 8.0])


def test_leaf_hook_sees_complete_gradient_once():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    x.register_hook(lambda g: seen.append(g.copy()))
    (x * 3.0 + x * 4.0 + x.exp()).sum().backward()
    assert len(seen) == 1
    np.testing.assert_allclose(seen[0], 7.0 + np.exp(x.data))
    np.testing.assert_allclose(x.grad, seen[0])


def test_nonleaf_hook_replaces_gradient_flowing_upstream():
    x = pa.tensor([1.0, -1.0], requires_grad=True)
    h = x * 3.0
    seen = []

    def hook(g):
        seen.append(g.copy())
        return g * 10.0

    h.register_hook(hook)
    (h * h).sum().backward()
    np.testing.assert_array_equal(seen[0], 2 * h.data)
    np.testing.assert_array_equal(x.grad, 3.0 * 10.0 * 2 * h.data)
    assert h.grad is None  # non-leaf grads are not kept without retain_grad


def test_hook_returning_none_observes_only():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    h = x.sin()
    seen = []
    h.register_hook(lambda g: seen.append(type(g)))
    h.sum().backward()
    assert seen == [np.ndarray]
    np.testing.assert_allclose(x.grad, np.cos(x.data))


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
    np.testing.assert_allclose(h.grad, np.exp(h.data))
    assert u.grad is None
    y.backward()  # retained grads accumulate like leaf grads
    np.testing.assert_allclose(h.grad, 2 * np.exp(h.data))
    np.testing.assert_allclose(x.grad, 2 * 3.0 * np.exp(h.data))


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
