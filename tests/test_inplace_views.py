"""In-place writes through a view of a tensor with history (PyTorch's CopySlices;
parallel_autograd/ops/writes/views.py, docs/inplace.md), against PyTorch itself: values,
gradients, second derivatives, both engines bitwise, the base's grad_fn, and the errors."""
from __future__ import annotations

import numpy as np
import pytest

import parallel_autograd as pa

torch = pytest.importorskip("torch")

X = np.random.default_rng(0).standard_normal((3, 4))

# each writes through a view of y (= f(x), with history); `out` uses y and the view after
WRITES = {
    "slice_iadd": "y = x * 2\ny[:, 0] += 1\nout = (y * y).sum()",
    "int_mul": "y = x * 2\nv = y[0]\nv.mul_(3)\nout = (y * y).sum() + (v * v.sin()).sum()",
    "slice_relu": "y = x * 2\ny[1:3].relu_()\nout = (y * y.sin()).sum()",
    "t_select_mul_tensor": "y = x.sin()\ny.t()[1].mul_(x[0, 1])\nout = (y * y).sum()",
    "view_add_tensor": "y = x * 1\nv = y.view(-1)\nv.add_(x.reshape(-1) ** 2)\n"
                       "out = y.exp().sum()",
    "diagonal_mul": "y = x * 1\nv = y.diagonal()\nv.mul_(x[0, :3])\nout = (y ** 3).sum()",
    "view_of_view": "y = x * 1\nv = y.unsqueeze(0)[0, 1:]\nv.mul_(2)\nw = v.narrow(1, 1, 2)\n"
                    "w.sub_(x[1:, :2])\nout = (y ** 2).sum() + (w * w).sum()",
    "transpose_exp": "y = x * 3\ny.transpose(0, 1)[::2].exp_()\nout = (y * x).sum()",
    "squeeze_copy": "y = x * 3\ny.unsqueeze(1).squeeze(1)[2].copy_(x[0] * x[1])\n"
                    "out = (y.cos()).sum()",
    "twice_same_view": "y = x * 2\nv = y[:, 1:3]\nv.mul_(x[:, :2])\nv.add_(v.detach())\n"
                       "out = (y * v.sum()).sum()",
}


def _run(lib, code, create_graph=False, parallel=False):
    x = (torch.tensor if lib is torch else pa.tensor)(X.copy(), requires_grad=True)
    env = {"x": x}
    exec(code, env)
    y, out = env["y"], env["out"]
    if lib is torch:
        (g,) = torch.autograd.grad(out, x, create_graph=create_graph)
    else:
        (g,) = (pa.grad_parallel if parallel else pa.grad)(out, x, create_graph=create_graph)
    res = [y.detach().numpy().copy(), g.detach().numpy().copy()]
    if create_graph:
        (gg,) = (torch.autograd.grad if lib is torch else
                 pa.grad_parallel if parallel else pa.grad)((g * g).sum(), x)
        res.append(gg.detach().numpy().copy())
    return res


@pytest.mark.parametrize("case", sorted(WRITES))
def test_values_and_gradients_are_pytorchs(case):
    ours = _run(pa, WRITES[case], create_graph=True)
    theirs = _run(torch, WRITES[case], create_graph=True)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", sorted(WRITES))
def test_both_engines_bitwise(case):
    seq = _run(pa, WRITES[case], create_graph=True)
    par = _run(pa, WRITES[case], create_graph=True, parallel=True)
    for a, b in zip(seq, par):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("case", ["int_mul", "slice_relu", "view_add_tensor"])
def test_gradcheck(case):
    code = WRITES[case]

    def f(x):
        env = {"x": x}
        exec(code, env)
        return env["out"]

    x = pa.tensor(X.copy(), requires_grad=True)
    assert pa.gradcheck(f, [x])
    assert pa.gradgradcheck(f, [x])


def test_the_base_takes_copyslices_and_the_view_a_new_history():
    x = pa.tensor(X.copy(), requires_grad=True)
    y = x * 2
    v = y[0]
    before = v.grad_fn
    v.mul_(3)
    assert y.grad_fn.name == "CopySlices"
    assert v.grad_fn is not before and v.grad_fn.next_nodes[0] is y.grad_fn
    np.testing.assert_array_equal(y.numpy()[0], X[0] * 6)
    assert np.shares_memory(v.numpy(), y.numpy())


def test_a_view_of_a_leaf_that_requires_grad_is_refused_as_pytorch():
    msg = "a view of a leaf Variable that requires grad is being used in an in-place operation"
    for lib in (pa, torch):
        x = (torch.tensor if lib is torch else pa.tensor)(X.copy(), requires_grad=True)
        with pytest.raises(RuntimeError, match=msg):
            x[0].mul_(2)
        np.testing.assert_array_equal(x.detach().numpy(), X)


def test_a_value_a_node_saved_and_the_write_changed_raises_at_backward():
    for lib in (pa, torch):
        x = (torch.tensor if lib is torch else pa.tensor)(X.copy(), requires_grad=True)
        y = x.exp()                              # exp saves its output
        y[0].mul_(2)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()
        assert x.grad is None


def test_a_view_taken_before_a_write_through_another_view_raises_rather_than_mislead():
    # PyTorch regenerates such a view's history from its base's; here its node keeps the
    # base's counter, so backward through it raises (docs/inplace.md)
    x = pa.tensor(X.copy(), requires_grad=True)
    y = x * 2
    early = y[1]
    y[0].mul_(3)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        early.sum().backward()
    y.sum().backward()                           # the base's own history is fine
    expected = np.full(X.shape, 2.0)
    expected[0] = 6.0
    np.testing.assert_array_equal(x.grad.numpy(), expected)


def test_a_node_that_saved_nothing_of_the_base_is_unaffected():
    for lib in (pa, torch):
        x = (torch.tensor if lib is torch else pa.tensor)(X.copy(), requires_grad=True)
        y = x + 1                                # add saves nothing
        y[:, 1].mul_(x[:, 0])                    # mul keeps a copy of the old column
        y.sum().backward()
        expected = np.ones_like(X)
        expected[:, 1] = X[:, 0]
        expected[:, 0] += X[:, 1] + 1
        np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-14)
