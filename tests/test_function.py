"""Custom ops with pa.Function: forward/backward, ctx, needs_input_grad, errors."""
import numpy as np
import pytest

import parallel_autograd as pa


class Cube(pa.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * g


class MulAdd(pa.Function):
    """f(x, y, scale) = x * y * scale + y; scale is a plain float."""

    @staticmethod
    def forward(ctx, x, y, scale):
        ctx.save_for_backward(x, y)
        ctx.scale = scale
        return x * y * scale + y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * y * ctx.scale, g * (x * ctx.scale + 1), None


def test_forward_backward_matches_hand_computed():
    x = pa.tensor([1.0, -2.0, 0.5], requires_grad=True)
    y = Cube.apply(x)
    assert isinstance(y, pa.Tensor)
    np.testing.assert_array_equal(y.numpy(), x.numpy() ** 3)
    assert y.grad_fn is not None and y.grad_fn.name == "Cube"
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, 3 * x.numpy() ** 2)


def test_gradcheck_with_non_tensor_argument():
    rng = np.random.default_rng(0)
    x = pa.tensor(rng.standard_normal((2, 3)), requires_grad=True)
    y = pa.tensor(rng.standard_normal((2, 3)), requires_grad=True)
    assert pa.gradcheck(lambda a, b: MulAdd.apply(a, b, 2.5).tanh(), [x, y])


def test_function_inside_a_larger_graph():
    x = pa.tensor([0.3, 0.7], requires_grad=True)
    y = (Cube.apply(x.sin()) * x).sum()   # sin(x)^3 * x
    y.backward()
    s, c = np.sin(x.numpy()), np.cos(x.numpy())
    np.testing.assert_allclose(x.grad, 3 * s ** 2 * c * x.numpy() + s ** 3, rtol=1e-13)


def test_forward_receives_ndarrays_and_saved_tensors_are_arrays():
    seen = {}

    class Probe(pa.Function):
        @staticmethod
        def forward(ctx, x, k):
            seen["fwd"] = (type(x), type(k), pa.is_grad_enabled())
            ctx.save_for_backward(pa.tensor(x), k)
            return x * k

        @staticmethod
        def backward(ctx, g):
            seen["bwd"] = (type(g), tuple(type(s) for s in ctx.saved_tensors))
            return g * ctx.saved_tensors[1], None

    x = pa.tensor([1.0, 2.0], requires_grad=True)
    Probe.apply(x, 3.0).sum().backward()
    assert seen["fwd"] == (np.ndarray, float, False)   # forward records no graph
    assert seen["bwd"] == (np.ndarray, (np.ndarray, float))
    np.testing.assert_array_equal(x.grad, [3.0, 3.0])


def test_needs_input_grad():
    seen = []

    class Probe(pa.Function):
        @staticmethod
        def forward(ctx, a, b, c):
            seen.append(ctx.needs_input_grad)
            return a + b

        @staticmethod
        def backward(ctx, g):
            return g, g, None

    a = pa.tensor([1.0], requires_grad=True)
    b = pa.tensor([2.0])
    Probe.apply(a, b, 3.0).sum().backward()
    Probe.apply(b, a, a).sum().backward()
    assert seen == [(True, False, False), (False, True, True)]
    np.testing.assert_array_equal(a.grad, [2.0])   # the third slot's None: no grad


def test_backward_may_return_tensors_and_none_for_grad_requiring_input():
    class HalfStop(pa.Function):
        @staticmethod
        def forward(ctx, x, y):
            return x + y

        @staticmethod
        def backward(ctx, g):
            return pa.tensor(g * 2.0), None

    x = pa.tensor([1.0], requires_grad=True)
    y = pa.tensor([1.0], requires_grad=True)
    out = HalfStop.apply(x, y).sum()
    gx, gy = pa.grad(out, [x, y])
    np.testing.assert_array_equal(gx, [2.0])
    np.testing.assert_array_equal(gy, [0.0])  # in the graph, no gradient flowed


def test_backward_gradient_broadcast_back_to_input_shape():
    class AddBias(pa.Function):
        @staticmethod
        def forward(ctx, x, b):
            return x + b

        @staticmethod
        def backward(ctx, g):
            return g, g          # g has x's shape; b's is summed back by the node

    x = pa.tensor(np.ones((3, 2)), requires_grad=True)
    b = pa.tensor([1.0, 2.0], requires_grad=True)
    AddBias.apply(x, b).sum().backward()
    np.testing.assert_array_equal(b.grad, [3.0, 3.0])


def test_no_node_when_no_input_requires_grad_or_under_no_grad():
    x = pa.tensor([1.0])
    assert Cube.apply(x).grad_fn is None
    xr = pa.tensor([1.0], requires_grad=True)
    with pa.no_grad():
        y = Cube.apply(xr)
    assert y.grad_fn is None and not y.requires_grad


def test_wrong_number_of_gradients_is_a_clear_error():
    class TooFew(pa.Function):
        @staticmethod
        def forward(ctx, x, y):
            return x * y

        @staticmethod
        def backward(ctx, g):
            return g

    class TooMany(pa.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g, g

    x = pa.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=r"TooFew.backward returned 1 gradients, expected 2"):
        TooFew.apply(x, x).sum().backward()
    with pytest.raises(RuntimeError, match=r"TooMany.backward returned 2 gradients, expected 1"):
        TooMany.apply(x).sum().backward()
    assert x.grad is None


def test_wrong_gradient_shape_names_the_function():
    class BadShape(pa.Function):
        @staticmethod
        def forward(ctx, x):
            return x.sum()

        @staticmethod
        def backward(ctx, g):
            return np.ones(5)

    x = pa.tensor(np.ones(3), requires_grad=True)
    with pytest.raises(ValueError, match="BadShape"):
        BadShape.apply(x).backward()
    assert x.grad is None


def test_retain_graph_with_function_and_freed_error():
    x = pa.tensor([2.0], requires_grad=True)
    y = Cube.apply(x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_array_equal(x.grad, [24.0])
    with pytest.raises(RuntimeError, match="retain_graph"):
        y.backward()


def test_reentrant_backward_inside_function_backward():
    """backward() may call grad() itself (e.g. recomputation / checkpointing)."""

    class Recompute(pa.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return np.sin(x) * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            with pa.enable_grad():
                t = pa.tensor(x, requires_grad=True)
                out = t.sin() * t
            (gx,) = pa.grad(out, [t], grad_outputs=g)
            return gx

    x = pa.tensor([0.4, 1.1], requires_grad=True)
    (Recompute.apply(x) * 2.0).sum().backward()
    expected = 2.0 * (np.cos(x.numpy()) * x.numpy() + np.sin(x.numpy()))
    np.testing.assert_allclose(x.grad, expected, rtol=1e-13)


# --- pa.gradcheck, the tool users check their Functions with ---------------------------------

def test_gradcheck_fortran_ordered_and_0d_inputs():
    x = pa.tensor(np.arange(6.0).reshape(2, 3).T, requires_grad=True)  # F-contiguous
    assert not x.numpy().flags["C_CONTIGUOUS"]
    assert pa.gradcheck(lambda t: Cube.apply(t), [x])
    s = pa.tensor(1.5, requires_grad=True)
    assert pa.gradcheck(lambda t: Cube.apply(t) * t, [s])
    np.testing.assert_array_equal(x.numpy(), np.arange(6.0).reshape(2, 3).T)  # restored


def test_gradcheck_leaves_inputs_that_take_no_gradient_alone():
    # an integer index among the inputs: only the checked inputs are perturbed (it
    # perturbed every input, so an index was rounded back or broke the op)
    x = pa.tensor(np.arange(12.0).reshape(3, 4) / 7, requires_grad=True)
    idx = pa.tensor(np.array([[0], [3], [1]]))
    assert pa.gradcheck(lambda a, i: pa.gather(a * a, 1, i), [x, idx])
    assert pa.gradgradcheck(lambda a, i: pa.gather(a * a, 1, i), [x, idx])
    np.testing.assert_array_equal(idx.numpy(), [[0], [3], [1]])


def test_gradcheck_catches_a_wrong_rule():
    class WrongCube(Cube):
        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x ** 2 * g

    x = pa.tensor([0.5, 1.0, -2.0], requires_grad=True)
    with pytest.raises(AssertionError, match="input 0"):
        pa.gradcheck(lambda t: WrongCube.apply(t), [x])


def test_forward_returning_several_outputs_is_rejected():
    class Two(pa.Function):
        @staticmethod
        def forward(ctx, x):
            return x, 2 * x

        @staticmethod
        def backward(ctx, g):
            return g

    with pytest.raises(TypeError, match="Two.forward returned a tuple"):
        Two.apply(pa.tensor([1.0], requires_grad=True))
