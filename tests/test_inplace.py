"""In-place ops and the version counter (parallel_autograd/ops/writes/inplace.py, version.py)."""
from __future__ import annotations

import numpy as np
import pytest

import parallel_autograd as pa

ENGINES = ["sequential", "parallel"]


def run_backward(engine, loss):
    if engine == "sequential":
        loss.backward()
    else:
        with pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0) as eng:
            eng.backward(loss)


def test_the_first_training_loop_a_pytorch_user_writes_updates_the_parameters():
    w = pa.tensor([1.0, -2.0, 3.0], requires_grad=True)
    params = [w]
    before = w.numpy()
    for _ in range(3):
        w.grad = None
        (w * w).sum().backward()
        with pa.no_grad():
            for p in params:
                p -= 0.25 * p.grad  # rebinds p to the same tensor: the update sticks
    assert w.is_leaf and w.requires_grad and w.numpy() is before
    assert np.allclose(w.numpy(), np.array([1.0, -2.0, 3.0]) * 0.5 ** 3)


@pytest.mark.parametrize("op", ["+=", "-=", "*=", "/="])
def test_augmented_assignment_on_a_leaf_that_requires_grad_raises(op):
    w = pa.tensor([1.0, 2.0], requires_grad=True)
    alias = w
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        exec(f"w {op} 1.0")
    assert alias.is_leaf and np.array_equal(alias.numpy(), [1.0, 2.0])


def test_in_place_on_a_tensor_with_history_or_with_a_grad_operand_is_recorded():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y += 1                                   # tests/test_inplace_history.py: the details
    assert y.grad_fn.name == "add" and np.array_equal(y.numpy(), [3.0, 5.0])
    c = pa.tensor([1.0, 1.0])
    c.add_(x)
    assert c.requires_grad and np.array_equal(c.numpy(), [2.0, 3.0])
    (y + c).sum().backward()
    assert np.array_equal(x.grad.numpy(), [3.0, 3.0])
    with pa.no_grad():  # under no_grad: a plain write, not recorded
        z = x * 2
    z += 1
    assert z.grad_fn is None and np.array_equal(z.numpy(), [3.0, 5.0])


def test_methods_write_into_the_same_array_and_views_see_it():
    base = np.arange(6.0)
    t = pa.Tensor._wrap(base)
    view = t.reshape(2, 3)
    out = t.add_(1).mul_(2).sub_(np.ones(6), alpha=2).div_(2)
    assert out is t and t.numpy() is base
    assert np.array_equal(base, np.arange(6.0))  # ((x+1)*2 - 2) / 2
    view.add_(10)  # a view writes into the tensor it views
    assert np.array_equal(t.numpy(), np.arange(6.0) + 10)
    t.zero_()
    assert not base.any()
    t.fill_(2.0).copy_(np.arange(6.0)).clamp_(1.0, 4.0)
    assert np.array_equal(base, np.clip(np.arange(6.0), 1, 4))
    t.addcmul_(np.full(6, 2.0), np.full(6, 3.0), value=0.5)
    assert np.array_equal(base, np.clip(np.arange(6.0), 1, 4) + 3)
    t.lerp_(np.zeros(6), 0.5)
    assert np.array_equal(base, (np.clip(np.arange(6.0), 1, 4) + 3) / 2)
    t.neg_()
    assert (base < 0).all()


def test_bad_in_place_input_names_the_method():
    t = pa.tensor(np.zeros(3))
    with pytest.raises(ValueError, match="add_"):
        t.add_(np.ones(4))
    with pytest.raises(RuntimeError, match="mul_: result type .* can't be cast to the "
                                           "desired output type Long"):
        pa.tensor(np.zeros(3, np.int64)).mul_(0.5)  # PyTorch's RuntimeError
    with pytest.raises(ValueError, match="clamp_"):
        t.clamp_()


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", ["saved input", "saved output", "through a view",
                                  "through detach"])
def test_backward_through_an_overwritten_value_raises_and_changes_nothing(engine, case):
    x = pa.tensor([0.5, 1.0, 2.0], requires_grad=True)
    x.grad = np.full(3, 7.0)
    c = pa.tensor([1.0, 2.0, 3.0])
    if case == "saved output":
        y = x.exp()
        loss = (y * 2).sum() + (x * x).sum()
        with pa.no_grad():
            y.mul_(3)
    else:
        loss = (x * c).sum() + x.sin().sum()
        target = {"saved input": c, "through a view": c.reshape(3, 1),
                  "through detach": c.detach()}[case]
        target.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run_backward(engine, loss)
    assert np.array_equal(x.grad, np.full(3, 7.0))  # failure atomicity


@pytest.mark.parametrize("engine", ENGINES)
def test_writes_before_recording_or_through_data_do_not_raise(engine):
    x = pa.tensor([0.5, 1.0], requires_grad=True)
    c = pa.tensor([1.0, 2.0])
    c.add_(1)  # before the graph is recorded: fine
    loss = (x * c).sum()
    c.data[:] = 10.0  # .data bypasses the counter, as in PyTorch (and the result shows it)
    run_backward(engine, loss)
    assert np.array_equal(x.grad, [10.0, 10.0])


def test_the_check_still_applies_on_a_second_backward_with_retain_graph():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    c = pa.tensor([3.0, 4.0])
    loss = (x * c).sum()
    loss.backward(retain_graph=True)
    c.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace"):
        loss.backward()
    assert np.array_equal(x.grad, [3.0, 4.0])


# ---- the index writes: scatter_, scatter_add_, index_add_, index_fill_, masked_fill_ -----------
def _index_cases():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 4))
    idx = np.array([[0, 1, 2, 0], [2, 2, 1, 0]])
    src = rng.standard_normal((2, 5))
    mask = np.array([True, False, True, False])
    return x, [
        ("scatter_", (0, idx, src), lambda t: pa.scatter(t, 0, idx, src)),
        ("scatter_", (1, idx[:, :2], 2.5), lambda t: pa.scatter(t, 1, idx[:, :2], 2.5)),
        ("scatter_add_", (0, idx, src), lambda t: pa.scatter_add(t, 0, idx, src)),
        ("index_add_", (1, [3, 0, 3], src[:, :3].repeat(2, 0)[:3]),
         lambda t: pa.index_add(t, 1, [3, 0, 3], src[:, :3].repeat(2, 0)[:3])),
        ("masked_fill_", (mask, -1.5), lambda t: pa.masked_fill(t, mask, -1.5)),
    ]


@pytest.mark.parametrize("k", range(5))
def test_index_writes_equal_their_out_of_place_ops(k):
    x, cases = _index_cases()
    name, args, ref = cases[k]
    t = pa.tensor(x.copy())
    before = t._vc[0]
    assert getattr(t, name)(*args) is t
    np.testing.assert_array_equal(t.numpy(), ref(pa.tensor(x)).numpy())
    assert t._vc[0] > before  # version bumped


def test_index_fill_and_alpha():
    t = pa.tensor(np.zeros((2, 3)))
    t.index_fill_(1, pa.tensor(np.array([2, 0])), 4.0)
    np.testing.assert_array_equal(t.numpy(), [[4, 0, 4], [4, 0, 4]])
    t.index_add_(0, [1, 1], np.ones((2, 3)), alpha=0.5)
    np.testing.assert_array_equal(t.numpy(), [[4, 0, 4], [5, 1, 5]])


def test_index_writes_refuse_like_the_other_in_place_ops():
    leaf = pa.tensor(np.zeros((2, 3)), requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        leaf.masked_fill_(np.array([True, False, True]), 1.0)
    y = leaf * 2.0
    y.index_fill_(0, [0], 1.0)               # with a history: recorded
    assert y.grad_fn.name == "index_put"
    with pa.no_grad():  # the optimizer-step case: allowed
        leaf.index_add_(0, [1], np.ones((1, 3)))
    np.testing.assert_array_equal(leaf.numpy(), [[0, 0, 0], [1, 1, 1]])
    # a write into a value a graph saved makes its backward fail clearly
    a = pa.tensor(np.ones(3), requires_grad=True)
    b = a * 1.0
    c = pa.tensor(np.ones(3))
    loss = (b * c).sum()
    c.scatter_(0, np.array([1]), 5.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        pa.backward(loss)


def test_bad_index_writes_change_nothing():
    t = pa.tensor(np.arange(6.0).reshape(2, 3))
    keep = t.numpy().copy()
    v = t._vc[0]
    for call, err in [  # (the index checks of ops/index.py raise PyTorch's types)
            (lambda: t.scatter_(1, np.array([[3]]), 1.0), RuntimeError),
            (lambda: t.scatter_(1, np.array([[0.0]]), 1.0), RuntimeError),
            (lambda: t.scatter_add_(0, np.array([[0, 1, 0]]), np.ones((1, 2))), RuntimeError),
            (lambda: t.index_add_(1, [0, 1], np.ones((2, 3))), ValueError),
            (lambda: t.index_fill_(2, [0], 1.0), IndexError),
            (lambda: t.masked_fill_(np.array([1, 0, 1]), 1.0), RuntimeError),
            (lambda: t.masked_fill_(np.ones((3, 2, 3), bool), 1.0), ValueError),
            (lambda: t.scatter_(0, np.array([[0]])), TypeError)]:
        with pytest.raises(err):
            call()
        np.testing.assert_array_equal(t.numpy(), keep)
    assert t._vc[0] == v
