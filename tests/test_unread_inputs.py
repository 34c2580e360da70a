"""What a declared op's node keeps of its inputs: nothing of an input no rule reads.

`defop` infers, from each declared rule's bytecode (formula and kernel), whether the rule
loads the op's output (`_reads_ans`) and each input (`_reads_arg`); the node keeps None for
those no rule loads (`primitive._unread_inputs`), so it holds no memory of them and does not
check their version counters: writing into such an input after the op leaves the node
valid, as PyTorch's nodes that do not save it (AddBackward, ExpBackward). An input a rule
reads is kept and a write into it still fails the backward with PyTorch's error.
"""
from __future__ import annotations

import numpy as np
import pytest

import parallel_autograd as pa
from parallel_autograd.primitive import _reads_arg, defop

torch = pytest.importorskip("torch")


def _x():
    leaf = pa.tensor(np.arange(1.0, 7.0).reshape(2, 3), requires_grad=True)
    return leaf, leaf * 1  # (a non-leaf: it may be written in place)


@pytest.mark.parametrize("op", ["add", "sub"])
def test_an_add_or_sub_node_keeps_neither_input_nor_output(op):
    a, b = _x()[1], _x()[1]
    y = getattr(pa, op)(a, b, alpha=2)
    assert y.grad_fn.saved == (None, None, None)
    assert y.grad_fn.versions is None   # nothing a write could make stale


def test_a_node_keeps_the_inputs_its_rules_read():
    a, b = _x()[1], _x()[1]
    node = (a * b).grad_fn
    assert node.saved[1] is a.numpy() and node.saved[2] is b.numpy()


@pytest.mark.parametrize("op", ["exp", "tanh", "sigmoid"])
def test_a_write_into_an_input_no_rule_reads_leaves_the_node_valid_as_in_pytorch(op):
    leaf, x = _x()
    y = getattr(pa, op)(x)
    assert y.grad_fn.saved[1] is None
    x.add_(1.0)                                  # exp's rule reads its output only
    pa.backward(y.sum())
    tl = torch.tensor(np.arange(1.0, 7.0).reshape(2, 3), requires_grad=True)
    tx = tl * 1
    ty = getattr(torch, op)(tx)
    tx.add_(1.0)
    ty.sum().backward()                          # PyTorch: fine too
    np.testing.assert_allclose(leaf.grad.numpy(), tl.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("op", ["sin", "log", "mul"])
def test_a_write_into_an_input_a_rule_reads_still_fails_the_backward(op):
    _, x = _x()
    y = pa.mul(x, x) if op == "mul" else getattr(pa, op)(x)
    x.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        pa.backward(y.sum())


def test_a_write_into_add_input_keeps_addition_gradient():
    leaf, x = _x()
    other = pa.tensor(np.ones((2, 3)), requires_grad=True)
    y = x + other
    x.mul_(3.0)
    pa.backward(y.sum())
    np.testing.assert_array_equal(other.grad.numpy(), np.ones((2, 3)))
    np.testing.assert_array_equal(leaf.grad.numpy(), np.ones((2, 3)))


def test_create_graph_through_an_op_that_keeps_no_input():
    leaf = pa.tensor([0.5, -1.0, 2.0], requires_grad=True)
    y = (leaf.exp() + leaf).sum()
    (g,) = pa.grad(y, [leaf], create_graph=True)
    (gg,) = pa.grad(g.sum(), [leaf])
    np.testing.assert_allclose(gg.numpy(), np.exp(leaf.numpy()), rtol=1e-12)


def _rule_reading_x(g, ans, x, y):
    return g * x


def _rule_reading_all(g, ans, *inputs):
    return g * inputs[0]


class _Holder:
    def rule(self, g, ans, x):
        return g


def test_the_bytecode_inference_is_conservative():
    assert _reads_arg(_rule_reading_x, 2) and not _reads_arg(_rule_reading_x, 3)
    assert _reads_arg(_rule_reading_all, 2) and _reads_arg(_rule_reading_all, 5)
    assert not _reads_arg(lambda g, ans, *_: g, 2)
    assert _reads_arg(lambda g, ans, x: (lambda: x)(), 2)       # a closure over x
    assert _reads_arg(_Holder().rule, 2)                        # bound method: assumed
    assert _reads_arg(np.multiply, 2)                           # no code: assumed


def test_a_declared_op_whose_kernel_reads_an_input_keeps_it():
    @defop(inputs=("x", "y"), formula=(lambda g, ans, x, y: g, lambda g, ans, x, y: g),
           kernel=(lambda g, ans, x, y: g * (x * 0 + 1), None), export=False,
           name="_test_unread_kernel")
    def op(x, y):
        return np.add(x, y)
    from parallel_autograd.primitive import REGISTRY
    REGISTRY.remove(op.op)     # (a test op: not walked by the registry tests)
    a, b = _x()[1], _x()[1]
    node = op(a, b).grad_fn
    assert node.saved[1] is a.numpy() and node.saved[2] is None


def test_transpose_is_one_node_that_keeps_nothing_and_shares_the_counter():
    # its own op (was a composite building a permutation for permute: 2x the
    # pre-op-layer tree's forward on 8x8); a view, so it shares the input's counter
    _, x = _x()
    y = x.transpose(0, -1)
    assert y.grad_fn.name == "transpose" and y.grad_fn.saved == (None, None)
    assert y._vc is x._vc and np.shares_memory(y.numpy(), x.numpy())
    s = pa.tensor(2.0, requires_grad=True)
    assert s.transpose(0, -1).grad_fn.name == "transpose"
    with pytest.raises(IndexError, match="transpose"):
        x.transpose(0, 2)


def test_the_error_names_the_input_when_an_input_was_written():
    # (a node that keeps its inputs, not its output: the counters' last slot is still the
    # output's, so the message does not blame the output)
    _, x = _x()
    y = pa.mul(x, 2.0)
    x.add_(1.0)
    with pytest.raises(RuntimeError, match="an input of mul"):
        pa.backward(y.sum())
