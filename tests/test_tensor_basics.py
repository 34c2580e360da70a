"""Tensors as objects: printing, pickling, copying, dtypes that cannot require grad."""
from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import parallel_autograd as pa


def test_repr_shows_values_like_pytorch():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    assert repr(x) == "tensor([1., 2.], requires_grad=True)"
    assert repr(x * 2) == "tensor([2., 4.], grad_fn=<mul>)"
    assert repr(pa.tensor([1, 2])) == "tensor([1, 2])"   # int64 and bool implied, as torch's
    assert repr(pa.tensor([True])) == "tensor([ True])"
    assert "dtype=float32" in repr(pa.tensor(np.ones(2, np.float32)))
    big = repr(pa.tensor(np.arange(5000.0)))
    assert "..." in big and len(big) < 200  # summarised
    assert repr(pa.tensor(np.ones((2, 2)))) == "tensor([[1., 1.],\n        [1., 1.]])"


@pytest.mark.parametrize("copier", ["pickle", "deepcopy"])
def test_leaf_round_trips_with_grad(copier):
    x = pa.tensor([1.0, -2.0, 3.0], requires_grad=True)
    x.grad = np.array([0.5, 0.25, 0.125])
    x.register_hook(lambda g: g)  # hooks are not copied (a lambda cannot be pickled)
    y = pickle.loads(pickle.dumps(x)) if copier == "pickle" else copy.deepcopy(x)
    assert y is not x and y.is_leaf and y.requires_grad
    assert np.array_equal(y.numpy(), x.numpy()) and np.array_equal(y.grad, x.grad)
    assert not np.shares_memory(y.numpy(), x.numpy()) and not np.shares_memory(y.grad, x.grad)
    (y * y).sum().backward()  # usable: its own accumulator, gradient added to the copy
    assert np.array_equal(y.grad, x.grad + 2 * x.numpy())
    assert np.array_equal(x.grad, [0.5, 0.25, 0.125])


def test_deepcopy_of_a_non_leaf_raises_and_pickle_keeps_it_as_a_leaf():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(y)
    z = pickle.loads(pickle.dumps(y))
    assert z.is_leaf and z.requires_grad and np.array_equal(z.numpy(), [3.0, 6.0])


def test_deepcopy_keeps_shared_references_shared():
    x = pa.tensor([1.0], requires_grad=True)
    a, b = copy.deepcopy([x, x])
    assert a is b


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_tensors_cannot_require_grad(dtype):
    with pytest.raises(TypeError, match="complex"):
        pa.tensor(np.ones(2, dtype), requires_grad=True)
    t = pa.tensor(np.ones(2, dtype))  # fine without gradients
    with pytest.raises(TypeError, match="complex"):
        t.requires_grad = True
    assert not t.requires_grad


def test_array_protocol_copies_when_asked():
    """np.array(t, copy=True) must not hand out t's own memory (a hook writing into
    it would change the tensor); np.asarray(t) shares it, as for an ndarray."""
    t = pa.tensor([1.0, 2.0])
    c = np.array(t, copy=True)
    assert not np.shares_memory(c, t.numpy())
    c[0] = 9.0
    assert t.numpy()[0] == 1.0
    assert np.asarray(t) is t.numpy()
    assert np.asarray(t, dtype=np.float32).dtype == np.float32
    with pytest.raises(ValueError):
        np.array(t, dtype=np.float32, copy=False)
