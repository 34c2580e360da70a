"""PyTorch's type promotion in the ops (`defop(promote=, int_to_float=)`):
result dtypes and values against torch for every pair of operand kinds (dimensioned tensors,
0-d tensors and Python numbers of each category) under both default dtypes, gradient dtypes,
in-place refusals, and the ops PyTorch does not promote (matmul, linear, conv, scatter)."""
import itertools

import numpy as np
import pytest

import parallel_autograd as pa
from parallel_autograd import dtypes as D

F = pa.nn.functional
DTYPES = ["bool", "uint8", "int32", "int64", "float16", "float32", "float64", "complex64"]
# every operand kind: a dimensioned tensor, a 0-d tensor of each dtype, a Python number of
# each category (0.1 and the tensors' 0.1 differ in float32 and float64: a comparison or a
# sum in the wrong dtype shows in the values)
KINDS = [(n, True) for n in DTYPES] + [(n, False) for n in DTYPES] + \
    [("py", v) for v in (True, 3, 0.1, 1 + 1j)]
BINARY = ["add", "sub", "mul", "div", "true_divide", "floor_divide", "fmod", "remainder",
          "pow", "maximum", "minimum", "atan2", "copysign", "hypot", "logaddexp", "eq", "ne",
          "lt", "le", "gt", "ge", "bitwise_and", "bitwise_or", "bitwise_xor"]
EXACT = {"add", "sub", "mul", "div", "true_divide", "eq", "ne", "lt", "le", "gt", "ge",
         "maximum", "minimum", "bitwise_and", "bitwise_or", "bitwise_xor"}
# discontinuous: a float16 operand rounded (here) or not (torch's opmath) changes the step
STEPS = {"floor_divide", "fmod", "remainder", "floordiv"}
UNARY_FLOAT = ["exp", "log", "sqrt", "sin", "cos", "tan", "tanh", "asin", "acos", "atan",
               "sinh", "cosh", "asinh", "acosh", "atanh", "log1p", "expm1", "log2", "log10",
               "exp2", "erf", "erfc", "reciprocal", "rsqrt", "sigmoid"]


@pytest.fixture(params=["float32", "float64"])
def default(request):
    """Both libraries' default dtype set to the parameter for the test, then restored."""
    torch = pytest.importorskip("torch")
    before_pa, before_torch = D.get_default_dtype(), torch.get_default_dtype()
    D.set_default_dtype(request.param)
    torch.set_default_dtype(getattr(torch, request.param))
    yield request.param
    D.set_default_dtype(before_pa)
    torch.set_default_dtype(before_torch)


def _operand(kind, lib):
    name, dim = kind
    if name == "py":
        return dim
    a = np.array([0.1, 2.0, 3.7] if dim else 0.1).astype(name)
    if lib == "pa":
        return pa.tensor(a)
    import torch
    return torch.tensor(a)


def _call(lib, op, *args):
    import torch
    f = getattr(torch if lib == "torch" else pa, op)
    try:
        return f(*args), None
    except Exception as e:  # noqa: BLE001  (the type is compared)
        return None, e


def _complex32(a, b) -> bool:
    """torch promotes to complex32 (ComplexHalf), which numpy has not (pa: complex64)."""
    import torch
    return "complex32" in str(torch.result_type(a, b))


def _name(dtype) -> str:
    return str(dtype).rsplit(".", 1)[-1]


def _same_result(op, got, want, what):
    assert _name(got.dtype) == _name(want.dtype), what
    w = want.numpy()
    g = got.numpy()
    if w.dtype == np.float16 and op in STEPS:
        return  # torch computes float16 in float32 with a 0-d operand not rounded to half
    if op in EXACT and w.dtype.kind != "f" or w.dtype.itemsize > 2 and op in EXACT:
        np.testing.assert_array_equal(g, w, err_msg=str(what))
    else:
        tol = 2e-3 if w.dtype in (np.float16, np.complex64) else 1e-6
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True, err_msg=str(what))


@pytest.mark.parametrize("op", BINARY)
def test_binary_ops_promote_as_pytorch(op, default):
    """Result dtype and values equal torch's for every pair of operand kinds torch accepts
    (torch's complex32 has no numpy twin: those pairs are left out)."""
    for a, b in itertools.product(KINDS, repeat=2):
        if a[0] == "py" and b[0] == "py":
            continue
        ta, tb = _operand(a, "torch"), _operand(b, "torch")
        want, err = _call("torch", op, ta, tb)
        if err is not None or _complex32(ta, tb) or op == "logaddexp" and \
                want.dtype.is_complex:  # numpy's logaddexp takes no complex numbers
            continue
        got, e = _call("pa", op, _operand(a, "pa"), _operand(b, "pa"))
        assert e is None, (op, default, a, b, e)
        _same_result(op, got, want, (op, default, a, b))


def test_operators_promote_as_pytorch(default):
    """The operators (`+ - * / ** //`, comparisons, and the reflected forms) follow the
    same rule: `int_tensor + True`, `2.5 * int_tensor`, `float32 / float64 0-d`."""
    import operator
    import torch
    fns = [operator.add, operator.sub, operator.mul, operator.truediv, operator.pow,
           operator.floordiv, operator.lt, operator.eq]
    for fn, a, b in itertools.product(fns, KINDS, KINDS):
        if a[0] == "py" and b[0] == "py":
            continue
        try:
            want = fn(_operand(a, "torch"), _operand(b, "torch"))
        except Exception:  # noqa: BLE001  (what torch refuses is not compared here)
            continue
        if not isinstance(want, torch.Tensor) or _complex32(_operand(a, "torch"),
                                                            _operand(b, "torch")):
            continue
        got = fn(_operand(a, "pa"), _operand(b, "pa"))
        _same_result(fn.__name__, got, want, (fn.__name__, default, a, b))


@pytest.mark.parametrize("op", UNARY_FLOAT)
def test_floating_unary_ops_give_the_default_dtype_for_integers(op, default):
    import torch
    for name in ("bool", "uint8", "int8", "int64", "float16", "float32"):
        x = np.array([1, 0, 1] if name == "bool" else [1, 2, 0]).astype(name)
        if op in ("acosh",):
            x = np.array([1, 2, 3]).astype(name)
        want = getattr(torch, op)(torch.tensor(x))
        got = getattr(pa, op)(pa.tensor(x))
        _same_result(op, got, want, (op, default, name))


def test_where_clamp_and_scalars_promote_as_pytorch(default):
    import torch
    i, f = np.array([1, 2, 3]), np.array([0.1, 2.0, 3.7], np.float32)
    c = np.array([True, False, True])
    d0 = np.array(1.5)
    cases = [("where", (c, i, 2.5)), ("where", (c, f, d0)), ("where", (c, i, d0)),
             ("clamp", (i, 0.5)), ("clamp", (f, d0)), ("clamp", (i, d0)),
             ("clamp", (f, np.array([1.5]))), ("pow", (i, 2.5)), ("pow", (2.5, i)),
             ("pow", (2, i)), ("pow", (f, d0)), ("pow", (i, d0)),
             ("add", (np.array([255], np.uint8), 300)), ("mul", (f.astype(np.float16), 1e10)),
             ("mul", (f, 1e-50)), ("mul", (f, 1e300))]
    for op, args in cases:
        t = [torch.tensor(a) if isinstance(a, np.ndarray) else a for a in args]
        p = [pa.tensor(a) if isinstance(a, np.ndarray) else a for a in args]
        _same_result(op, getattr(pa, op)(*p), getattr(torch, op)(*t), (op, default, args))


def test_integer_true_division_gives_the_default_dtype():
    before = D.get_default_dtype()
    try:
        for d in (pa.float32, pa.float64):
            D.set_default_dtype(d)
            x = pa.tensor([1, 2, 3])
            for r in (x / 2, x / x, pa.div(x, x), pa.true_divide(x, 2), x.sqrt(), x.exp(),
                      pa.atan2(x, x), x * 2.5, True * 0.5 + x):
                assert r.dtype == d
            assert (x // 2).dtype == pa.int64 and pa.div(x, 2, rounding_mode="floor").dtype \
                == pa.int64
    finally:
        D.set_default_dtype(before)


def test_dimensioned_tensors_win_over_0d_of_the_same_category():
    x = pa.tensor(np.array([0.1, 0.2], np.float32))
    y = pa.tensor(0.1, dtype=pa.float64)
    assert (x + y).dtype == pa.float32 and (y + x).dtype == pa.float32
    assert (x + y).numpy().tolist() == (np.float32(0.1) + np.array([0.1, 0.2], np.float32)).tolist()
    assert (x == y).numpy().tolist() == [True, False]  # compared in float32, as PyTorch
    assert (x + pa.tensor([1, 2])).dtype == pa.float32       # float32 with int64: float32
    assert (pa.tensor([1, 2], dtype=pa.int32) + pa.tensor(7)).dtype == pa.int32
    assert (pa.tensor([1, 2], dtype=pa.int32) + pa.tensor(0.5)).dtype == pa.float64
    assert (pa.tensor([1, 2]) + True).dtype == pa.int64
    assert (pa.tensor([True]) + True).dtype == pa.bool


@pytest.mark.parametrize("op", ["mul", "add", "div", "pow", "maximum", "atan2", "sub"])
def test_each_gradient_keeps_its_inputs_dtype(op, default):
    """float32 x with a float64 0-d y: the result is float32, x.grad float32, y.grad
    float64, the values torch's."""
    import torch
    xs = np.array([0.5, 1.5, 2.5], np.float32)
    tx, ty = torch.tensor(xs, requires_grad=True), torch.tensor(1.25, dtype=torch.float64,
                                                                 requires_grad=True)
    px, py = pa.tensor(xs, requires_grad=True), pa.tensor(1.25, dtype=pa.float64,
                                                          requires_grad=True)
    getattr(torch, op)(tx, ty).sum().backward()
    out = getattr(pa, op)(px, py)
    assert out.dtype == pa.float32
    out.sum().backward()
    assert px.grad.dtype == pa.float32 and py.grad.dtype == pa.float64
    np.testing.assert_allclose(px.grad.numpy(), tx.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(py.grad.numpy(), ty.grad.numpy(), rtol=1e-5)


def test_in_place_ops_refuse_a_result_they_cannot_hold():
    """PyTorch's rule: the result dtype must cast into the tensor's category; nothing is
    written when it does not."""
    i = pa.tensor([1, 2, 3])
    for write in (lambda: i.add_(1.5), lambda: i.sub_(0.5), lambda: i.mul_(pa.ones(3)),
                  lambda: i.div_(2), lambda: i.clamp_(0.5), lambda: i.add_(1j)):
        with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
            write()
    assert i.numpy().tolist() == [1, 2, 3]
    with pytest.raises(RuntimeError, match="result type Long can't be cast to the desired "
                                           "output type Bool"):
        pa.tensor([True, False]).add_(1)
    with pytest.raises(RuntimeError, match="result type .* can't be cast"):
        j = pa.tensor([1, 2])
        j += 0.5
    f = pa.tensor(np.array([0.1, 0.2], np.float32))
    f.add_(pa.tensor(0.1, dtype=pa.float64))          # float64 0-d into float32: allowed,
    assert f.dtype == pa.float32                      # computed in float32 (PyTorch's)
    assert f.numpy().tolist() == (np.array([0.1, 0.2], np.float32) + np.float32(0.1)).tolist()
    i.add_(2)
    i.copy_(pa.tensor([1.7, 2.2, -3.9]))               # copy_ converts, as PyTorch's
    assert i.numpy().tolist() == [1, 2, -3]


def test_in_place_refusals_match_pytorchs():
    torch = pytest.importorskip("torch")
    for lib in (torch, pa):
        with pytest.raises(RuntimeError, match="result type Float can't be cast to the "
                                               "desired output type Long"):
            lib.tensor([1, 2]).add_(lib.tensor([1.5, 2.5], dtype=lib.float32))


def test_ops_pytorch_does_not_promote_refuse_mixed_dtypes():
    f, d = pa.ones(2, 2, dtype=pa.float32), pa.ones(2, 2, dtype=pa.float64)
    h, idx = pa.ones(2, 2, dtype=pa.float16), pa.zeros(2, 2, dtype=pa.long)
    refusals = [lambda: f @ d, lambda: pa.mm(f, d), lambda: pa.bmm(f[None], d[None]),
                lambda: F.linear(f, d), lambda: F.linear(f, f, d[0]),
                lambda: pa.nn.Linear(2, 2, dtype=pa.float64)(f),
                lambda: F.conv1d(f[None], d[None]), lambda: F.conv2d(f[None, None], d[None, None]),
                lambda: F.conv1d(f[None], f[None], d[0, :1]),
                lambda: F.conv_transpose1d(f[None], d[None]),
                lambda: h.scatter_(0, idx, f), lambda: h.scatter(0, idx, f),
                lambda: h.scatter_add_(0, idx, f), lambda: h.index_add_(0, idx[0], f)]
    for refuse in refusals:
        with pytest.raises(RuntimeError, match="dtype|scalar type"):
            refuse()
    assert h.numpy().tolist() == [[1, 1], [1, 1]]
    assert F.conv1d(f[None], f[None]).dtype == pa.float32
    assert h.scatter_(0, idx, 2.5).dtype == pa.float16   # a number is converted


def test_ops_pytorch_does_not_promote_refuse_as_torch():
    torch = pytest.importorskip("torch")
    a, b = np.ones((1, 2, 2), np.float32), np.ones((1, 2, 2))
    for t_fn, p_fn in ((torch.nn.functional.conv1d, F.conv1d), (torch.bmm, pa.bmm),
                       (torch.matmul, pa.matmul)):
        with pytest.raises(RuntimeError):
            t_fn(torch.tensor(a), torch.tensor(b))
        with pytest.raises(RuntimeError):
            p_fn(pa.tensor(a), pa.tensor(b))


def test_promotion_fast_path_passes_arrays_through_uncast():
    """The common case allocates nothing: same dtypes, or a number of a category the
    array holds, give back the very list (the forward sees the caller's arrays)."""
    a, b = np.ones(3), np.ones(3)
    for values in ([a, b], [a, 2.5], [a, 3], [a.astype(np.float32), 0.5]):
        assert D.promote_operands(values, (0, 1)) is values
        assert D.promoter((0, 1))(values) is values
    v = [a]
    assert D.promote_operands(v, (0,), to_float=True) is v
    i = np.arange(3)
    p = D.promote_operands([i, a.astype(np.float32)], (0, 1))
    assert p[0].dtype == np.float32 and p[1] is not None and p[1].dtype == np.float32
    p = D.promote_operands([a.astype(np.float32), 2.5], (0, 1), into=None)
    assert p[1] == 2.5
    p = D.promote_operands([a.astype(np.float32), pa.float64.type(2.5)], (0, 1))
    assert p[1].dtype == np.float32


def test_round_keeps_integers_as_pytorch():
    torch = pytest.importorskip("torch")
    x = np.array([1, 25, -37])
    got, want = pa.round(pa.tensor(x)), torch.round(torch.tensor(x))
    assert got.dtype == pa.int64 and got.numpy().tolist() == want.tolist()
    for lib in (torch, pa):
        with pytest.raises(NotImplementedError):
            lib.round(lib.tensor([True]))
        with pytest.raises(NotImplementedError):
            lib.round(lib.tensor(x), decimals=-1)


def test_lerp_takes_one_dtype_as_pytorch(default):
    """No promotion in lerp: `end` (and a dimensioned weight) of another dtype is a
    RuntimeError; a number or 0-d weight is taken in input's dtype (float32 stays float32)."""
    import torch
    f, d = np.array([1.0, 2.0, 4.0], np.float32), np.array([3.0, 1.0, 0.5])
    for lib, mk in ((torch, torch.tensor), (pa, pa.tensor)):
        for end, weight in ((mk(d), 0.5), (mk(f), mk(d)), (mk(np.array(2.0)), 0.5)):
            with pytest.raises(RuntimeError, match="expected dtype"):
                lib.lerp(mk(f), end, weight)
    for weight in (0.25, 0.75, np.array(0.3), np.array(0.7, np.float32)):
        want = torch.lerp(torch.tensor(f), torch.tensor(f[::-1].copy()),
                          torch.tensor(weight) if isinstance(weight, np.ndarray) else weight)
        got = pa.lerp(pa.tensor(f), pa.tensor(f[::-1].copy()),
                      pa.tensor(weight) if isinstance(weight, np.ndarray) else weight)
        _same_result("lerp", got, want, weight)
