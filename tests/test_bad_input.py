"""Bad input: every rejected call raises a clear error and changes no `.grad`."""
import numpy as np
import pytest

import parallel_autograd as pa


class BoomError(Exception):
    pass


def _boom_rule(g, ans, x):
    raise BoomError("rule exploded")


boom = pa.primitive("boom", lambda x: x * 1.0, _boom_rule)


def snapshot(*tensors):
    return [(t.grad, None if t.grad is None else t.grad.clone()) for t in tensors]


def assert_unchanged(tensors, snap):
    for t, (obj, copy) in zip(tensors, snap):
        if obj is None:
            assert t.grad is None
        else:
            assert t.grad is obj
            assert np.array_equal(t.grad, copy)


# --- roots and seeds ------------------------------------------------------------------

def test_backward_on_root_not_requiring_grad():
    t = pa.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match="does not require grad"):
        t.sum().backward()
    with pa.no_grad():
        y = (pa.tensor([1.0], requires_grad=True) * 2.0).sum()
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.backward()


def test_backward_on_non_tensor():
    with pytest.raises(TypeError, match="not a Tensor"):
        pa.backward(np.ones(2))


def test_non_scalar_root_without_grad():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=r"scalar outputs.*shape \(2,\)"):
        (x * 2.0).backward()
    with pytest.raises(RuntimeError, match="scalar outputs"):
        pa.grad(x * 2.0, [x])
    assert x.grad is None


def test_grad_of_wrong_shape():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2.0
    with pytest.raises(ValueError, match=r"shape \(3,\).*shape \(2,\)"):
        y.backward(np.ones(3))
    with pytest.raises(ValueError, match=r"shape \(2, 1\)"):
        pa.grad(y, [x], grad_outputs=np.ones((2, 1)))
    assert x.grad is None
    y.backward(np.ones(2))  # the rejected calls did not free the graph
    np.testing.assert_array_equal(x.grad, [2.0, 2.0])


def test_grad_of_another_real_dtype_is_cast_as_pytorch():
    """PyTorch casts a real grad_output to the output's dtype (numpy's float64 ones for a
    float32 output, an int, a float16) and refuses only complex against real."""
    x = pa.tensor([1.0, 2.0], dtype=pa.float32, requires_grad=True)
    y = x * 2.0
    with pytest.raises(RuntimeError, match=r"grad_output\[0\] has a dtype of complex128"):
        y.backward(np.ones(2, dtype=np.complex128), retain_graph=True)
    assert x.grad is None
    y.backward(np.ones(2), retain_graph=True)
    y.backward(pa.tensor([1, 1]), retain_graph=True)
    (g,) = pa.grad(y, [x], grad_outputs=np.ones(2, np.float16))
    assert x.grad.dtype == g.dtype == pa.float32
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 4.0])
    np.testing.assert_array_equal(g.numpy(), [2.0, 2.0])


def test_grad_outputs_count_mismatch():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(ValueError, match="2 grad_outputs for 1 outputs"):
        pa.grad([x * 2.0], [x], grad_outputs=[np.ones(2), np.ones(2)])


def test_second_backward_through_freed_graph():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward()
    before = snapshot(x)
    with pytest.raises(RuntimeError, match="retain_graph"):
        y.backward()
    with pytest.raises(RuntimeError, match="retain_graph"):
        pa.grad(y, [x])
    assert_unchanged([x], before)


# --- grad() inputs ------------------------------------------------------------------------

def test_grad_input_not_in_graph_names_index():
    x = pa.tensor([1.0], requires_grad=True)
    other = pa.tensor([2.0], requires_grad=True)
    y = (x * 3.0).sum()
    with pytest.raises(RuntimeError, match=r"input 1 .*not part of the graph.*allow_unused"):
        pa.grad(y, [x, other])
    # a leaf that is part of some other graph is still not part of this one
    _ = other * 2.0
    with pytest.raises(RuntimeError, match="input 1"):
        pa.grad(y, [x, other])


def test_grad_input_not_requiring_grad_names_index():
    x = pa.tensor([1.0], requires_grad=True)
    c = pa.tensor([2.0])
    y = (x * c).sum()
    with pytest.raises(RuntimeError, match=r"input 2 .*does not require grad"):
        pa.grad(y, [x, x, c])
    with pytest.raises(TypeError, match="input 1 is a ndarray"):
        pa.grad(y, [x, np.ones(1)])


# --- tensors that cannot require grad -------------------------------------------------------

@pytest.mark.parametrize("data", [[1, 2], [True, False], np.arange(3, dtype=np.uint8)])
def test_integer_tensors_cannot_require_grad(data):
    with pytest.raises(TypeError, match="floating point"):
        pa.tensor(data, requires_grad=True)
    t = pa.tensor(data)
    with pytest.raises(TypeError, match="floating point"):
        t.requires_grad_()
    assert not t.requires_grad
    with pytest.raises(TypeError, match="floating point"):
        pa.tensor([1.5, 2.5], dtype=np.int32, requires_grad=True)


def test_float_and_explicit_dtype_can_require_grad():
    assert pa.tensor([1, 2], dtype=np.float32, requires_grad=True).requires_grad
    assert pa.tensor([1.0], requires_grad=True).dtype == np.float64


def test_requires_grad_false_on_non_leaf():
    x = pa.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        (x * 2.0).requires_grad = False


# --- hooks -----------------------------------------------------------------------------------

def test_hook_returning_wrong_shape_names_the_op():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    h = x.exp()
    h.register_hook(lambda g: np.ones(3))
    with pytest.raises(ValueError, match=r"hook on the gradient of exp.*\(3,\)") as info:
        h.sum().backward()
    assert info.value.__notes__ == [info.value.__notes__[0]]
    assert "hook" in info.value.__notes__[0] and "exp" in info.value.__notes__[0]
    assert x.grad is None


def test_hook_on_tensor_not_requiring_grad():
    with pytest.raises(RuntimeError, match="does not require grad"):
        pa.tensor([1.0]).register_hook(lambda g: g)


# --- exceptions inside the backward pass ---------------------------------------------------

def test_exception_in_rule_keeps_type_adds_note_and_changes_no_grad():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    a = pa.tensor([3.0, 4.0], requires_grad=True)
    c = pa.tensor([5.0, 6.0], requires_grad=True)
    a.grad = np.array([100.0, 200.0])
    # backward order: sum, mul, a's and c's accumulators (staged), then boom fails
    y = (boom(x) * a + c).sum()
    before = snapshot(x, a, c)
    with pytest.raises(BoomError, match="rule exploded") as info:
        y.backward()
    notes = getattr(info.value, "__notes__", [])
    assert any("boom" in n for n in notes), notes
    assert info.value.autograd_op == "boom"
    assert_unchanged([x, a, c], before)


def test_exception_in_function_backward_names_the_function():
    class Bad(pa.Function):
        @staticmethod
        def forward(ctx, x):
            return x + 1.0

        @staticmethod
        def backward(ctx, g):
            raise ZeroDivisionError("bad backward")

    x = pa.tensor([1.0], requires_grad=True)
    x.grad = np.array([7.0])
    before = snapshot(x)
    with pytest.raises(ZeroDivisionError) as info:
        (Bad.apply(x) * 2.0).sum().backward()
    assert any("Bad" in n for n in info.value.__notes__)
    assert_unchanged([x], before)


def test_exception_in_hook_keeps_type_and_changes_no_grad():
    x = pa.tensor([1.0], requires_grad=True)
    w = pa.tensor([2.0], requires_grad=True)
    h = x * w

    def hook(g):
        raise KeyError("in hook")

    h.register_hook(hook)
    with pytest.raises(KeyError) as info:
        (h * 3.0).sum().backward()
    assert any("hook" in n and "mul" in n for n in info.value.__notes__)
    assert x.grad is None and w.grad is None


def test_exception_note_added_once():
    x = pa.tensor([1.0], requires_grad=True)
    with pytest.raises(BoomError) as info:
        boom(boom(x)).sum().backward()
    assert len(info.value.__notes__) == 1


def test_forward_error_names_the_primitive():
    a = pa.tensor(np.ones((2, 3)), requires_grad=True)
    b = pa.tensor(np.ones((2, 3)))
    with pytest.raises(RuntimeError, match="matmul"):   # PyTorch's type
        a @ b


# --- a .grad the user assigned that cannot be accumulated into ------------------------------

@pytest.mark.parametrize("bad, exc, match", [
    (np.zeros(3), RuntimeError, r"size '\[3\]'"),
    (np.zeros(2, dtype=np.int64), RuntimeError, "dtype 'int64'"),
    ([0.0, 0.0], TypeError, "got grad of type list"),
])
def test_bad_grad_assignment_rejected_as_torch(bad, exc, match):
    a = pa.tensor([1.0, 2.0], requires_grad=True)
    a.grad = old = pa.tensor([5.0, 6.0])
    with pytest.raises(exc, match=match):
        a.grad = bad
    assert a.grad is old


def test_read_only_existing_grad_rejected_before_any_commit():
    a = pa.tensor([1.0, 2.0], requires_grad=True)
    b = pa.tensor([1.0, 2.0], requires_grad=True)
    a.grad = bad = np.broadcast_to(np.zeros(1), (2,))
    y = (a * 2.0 + b * 3.0).sum()   # b is staged before a
    with pytest.raises(ValueError, match="read-only"):
        y.backward()
    assert b.grad is None
    assert a.grad.numpy() is bad


def test_failed_backward_leaves_retained_grads_and_grad_call_clean():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2.0
    h.retain_grad()
    b = boom(h)
    u = h.exp()        # made after boom: u's gradient is staged before boom fails
    u.retain_grad()
    y = (b + u).sum()
    with pytest.raises(BoomError):
        y.backward(retain_graph=True)
    assert h.grad is None and u.grad is None and x.grad is None
    with pytest.raises(BoomError) as info:
        pa.grad(y, [x], retain_graph=True)
    assert any("boom" in n for n in info.value.__notes__)
    assert h.grad is None and u.grad is None and x.grad is None
    # the part of the graph that does not go through boom still works
    (gh,) = pa.grad(u.sum(), [h])
    np.testing.assert_allclose(gh, np.exp(h.numpy()))


@pytest.mark.parametrize("sa,sb,says", [
    ((2, 3), (4, 5), "last dimension of the first (3) must equal the second-to-last "
                     "dimension of the second (4)"),
    ((3,), (4,), "the only dimension of the second (4)"),
    ((7, 2, 3), (6, 3, 5), "batch dimensions (7,) and (6,) do not broadcast"),
    ((), (3, 5), "at least one dimension"),
])
def test_matmul_shape_errors_name_both_shapes_and_what_disagrees(sa, sb, says):
    with pytest.raises(RuntimeError) as info:
        pa.matmul(pa.tensor(np.ones(sa), requires_grad=True), pa.tensor(np.ones(sb)))
    msg = str(info.value)
    assert msg.startswith(f"matmul: shapes {sa} and {sb} cannot be multiplied")
    assert says in msg and "gufunc" not in msg and "matmul: matmul" not in msg
