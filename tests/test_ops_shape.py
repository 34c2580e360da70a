"""Shape ops: views, indexing (basic, integer arrays with repeats, boolean masks),
joining and splitting, padding; gradients by finite differences, float32, errors."""
import numpy as np
import pytest

import parallel_autograd as pa
from parallel_autograd.ops import shape as sh


def rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def leaf(a):
    return pa.tensor(a, requires_grad=True)


X = (2, 3, 4)

# name -> (fn, numpy reference)
CASES = {
    "reshape": (lambda t: pa.reshape(t, (6, 4)), lambda a: a.reshape(6, 4)),
    "reshape_varargs": (lambda t: pa.reshape(t, 4, -1), lambda a: a.reshape(4, -1)),
    "reshape_method_view": (lambda t: t.view(-1), lambda a: a.reshape(-1)),
    "flatten": (pa.flatten, lambda a: a.reshape(-1)),
    "flatten_start1": (lambda t: pa.flatten(t, 1), lambda a: a.reshape(2, 12)),
    "flatten_end_neg2": (lambda t: pa.flatten(t, 0, -2), lambda a: a.reshape(6, 4)),
    "transpose_all": (pa.transpose, lambda a: a.T),
    "transpose_two": (lambda t: pa.transpose(t, 0, 2), lambda a: a.swapaxes(0, 2)),
    "transpose_perm": (lambda t: pa.transpose(t, (1, 2, 0)), lambda a: a.transpose(1, 2, 0)),
    "transpose_negative_perm": (lambda t: pa.transpose(t, (-1, 0, -2)),
                                lambda a: a.transpose(2, 0, 1)),
    "permute": (lambda t: pa.permute(t, 2, 0, 1), lambda a: a.transpose(2, 0, 1)),
    "permute_negative": (lambda t: pa.permute(t, (-1, -3, -2)), lambda a: a.transpose(2, 0, 1)),
    "swapaxes": (lambda t: pa.swapaxes(t, 0, -1), lambda a: a.swapaxes(0, -1)),
    "clone": (pa.clone, lambda a: a.copy()),
    "clone_method": (lambda t: t[:, 1:].clone(), lambda a: a[:, 1:].copy()),
    "mT": (lambda t: t.mT, lambda a: a.swapaxes(-1, -2)),
    "broadcast_to": (lambda t: pa.broadcast_to(t, (5, 2, 3, 4)),
                     lambda a: np.broadcast_to(a, (5, 2, 3, 4))),
    "expand": (lambda t: pa.expand(t[:, :1], 3, -1, 5, -1),
               lambda a: np.broadcast_to(a[:, :1], (3, 2, 5, 4))),
    "squeeze": (lambda t: pa.squeeze(t[:, :1]), lambda a: a[:, 0]),
    "squeeze_axis": (lambda t: pa.squeeze(t[:, :, :1], -1), lambda a: a[:, :, 0]),
    "unsqueeze": (lambda t: pa.unsqueeze(t, 1), lambda a: a[:, None]),
    "unsqueeze_negative": (lambda t: pa.unsqueeze(t, -1), lambda a: a[..., None]),
    "getitem_basic": (lambda t: t[1:, ::-2, None, 1], lambda a: a[1:, ::-2, None, 1]),
    "getitem_ellipsis": (lambda t: t[..., -1], lambda a: a[..., -1]),
    "getitem_int": (lambda t: t[1], lambda a: a[1]),
    "getitem_repeated_ints": (lambda t: t[[0, 1, 1, 0]], lambda a: a[[0, 1, 1, 0]]),
    "getitem_int_array_axis1": (lambda t: t[:, np.array([2, 2, 0])],
                                lambda a: a[:, [2, 2, 0]]),
    "getitem_two_arrays": (lambda t: t[np.array([[0], [1]]), np.array([0, 2, 2])],
                           lambda a: a[np.array([[0], [1]]), np.array([0, 2, 2])]),
    "getitem_tensor_index": (lambda t: t[pa.tensor(np.array([1, 1]))], lambda a: a[[1, 1]]),
    "getitem_bool_mask": (lambda t: t[t.data > 0.1], lambda a: a[a > 0.1]),
    "getitem_bool_rows": (lambda t: t[np.array([True, False])], lambda a: a[[True, False]]),
    "getitem_bool_list": (lambda t: t[:, [True, False, True]], lambda a: a[:, [True, False, True]]),
    "getitem_mask_tensor": (lambda t: t[:, :, pa.tensor(np.arange(4) % 2 == 0)][:, None],
                            lambda a: a[:, :, np.arange(4) % 2 == 0][:, None]),
    "split_int": (lambda t: pa.stack(pa.split(t, 2, axis=-1)), lambda a: np.stack(
        [a[..., :2], a[..., 2:]])),
    "split_sections": (lambda t: pa.concat(pa.split(t, [1, 2], axis=1)[::-1], axis=1),
                       lambda a: np.concatenate([a[:, 1:], a[:, :1]], axis=1)),
    "pad": (lambda t: pa.pad(t, 1), lambda a: np.pad(a, 1)),
    "pad_per_axis": (lambda t: pa.pad(t, ((0, 0), (2, 1), (0, 3)), value=-1.5),
                     lambda a: np.pad(a, ((0, 0), (2, 1), (0, 3)), constant_values=-1.5)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_shape_op_values_and_gradcheck(name):
    fn, ref = CASES[name]
    x = rand(X, 1)
    out = fn(leaf(x))
    np.testing.assert_array_equal(out.data, ref(x))
    assert pa.gradcheck(fn, [leaf(x)])


def test_repeated_integer_indices_accumulate():
    x = leaf(np.arange(4.0))
    x[np.array([0, 2, 2, 2, 3])].sum().backward()
    np.testing.assert_array_equal(x.grad, [1, 0, 3, 1])
    y = leaf(np.zeros((2, 2)))
    (y[[0, 0, 1], [1, 1, 0]] * pa.tensor([1.0, 2.0, 3.0])).sum().backward()
    np.testing.assert_array_equal(y.grad, [[0, 3], [3, 0]])


def test_boolean_mask_gradient_is_the_mask():
    a = rand((3, 4), 2)
    x = leaf(a)
    (x[a > 0] * 2).sum().backward()
    np.testing.assert_array_equal(x.grad, 2.0 * (a > 0))


def test_zero_dim_shape_ops():
    x = leaf(2.5)
    assert pa.flatten(x).shape == (1,)
    assert pa.reshape(x, (1, 1)).shape == (1, 1)
    assert pa.unsqueeze(x, 0).shape == (1,)
    assert x[()].shape == () and x[None].shape == (1,)
    assert pa.gradcheck(lambda t: pa.broadcast_to(t, (2, 3)), [leaf(2.5)])
    assert pa.gradcheck(lambda t: pa.stack([t, t * 2]), [leaf(2.5)])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_gradcheck(axis):
    shapes = {0: [(1, 3), (2, 3), (3, 3)], 1: [(2, 1), (2, 2), (2, 4)],
              -1: [(2, 1), (2, 2), (2, 4)]}[axis]
    arrays = [rand(s, i) for i, s in enumerate(shapes)]
    out = pa.concat([leaf(a) for a in arrays], axis=axis)
    np.testing.assert_array_equal(out.data, np.concatenate(arrays, axis=axis))
    assert pa.gradcheck(lambda *ts: pa.concat(ts, axis=axis), [leaf(a) for a in arrays])
    assert pa.cat is pa.concat


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_stack_gradcheck(axis):
    arrays = [rand((2, 3), i) for i in range(3)]
    out = pa.stack([leaf(a) for a in arrays], axis=axis)
    np.testing.assert_array_equal(out.data, np.stack(arrays, axis=axis))
    assert pa.gradcheck(lambda *ts: pa.stack(ts, axis=axis), [leaf(a) for a in arrays])


def test_concat_with_constants_and_mixed_dtypes():
    t32 = pa.tensor(np.ones((2, 2), np.float32), requires_grad=True)
    t64 = leaf(np.ones((1, 2)))
    out = pa.concat([t32, np.zeros((1, 2)), t64])
    assert out.dtype == np.float64 and out.shape == (4, 2)
    (out * np.arange(8.0).reshape(4, 2)).sum().backward()
    assert t32.grad.dtype == np.float32
    np.testing.assert_array_equal(t32.grad, [[0, 1], [2, 3]])
    np.testing.assert_array_equal(t64.grad, [[6, 7]])


def test_split_sizes():
    x = leaf(rand((7, 2), 3))
    parts = pa.split(x, 3)
    assert [p.shape[0] for p in parts] == [3, 3, 1]
    parts = x.split([2, 5])
    assert [p.shape[0] for p in parts] == [2, 5]
    with pytest.raises(ValueError, match="split: sizes"):
        pa.split(x, [2, 2])
    with pytest.raises(ValueError, match="split: chunk size must be positive"):
        pa.split(x, 0)


@pytest.mark.parametrize("name", sorted(CASES))
def test_float32_keeps_dtype(name):
    fn, _ = CASES[name]
    x = rand(X, 4)
    t32, t64 = pa.tensor(x.astype(np.float32), requires_grad=True), leaf(x)
    y32, y64 = fn(t32), fn(t64)
    assert y32.dtype == np.float32
    np.testing.assert_allclose(y32.data, y64.data, rtol=1e-6)
    w = rand(y64.shape, 5)
    (g32,) = pa.grad(y32, [t32], grad_outputs=w.astype(np.float32))
    (g64,) = pa.grad(y64, [t64], grad_outputs=w)
    assert g32.dtype == np.float32
    np.testing.assert_allclose(g32, g64, rtol=1e-5, atol=1e-6)


# ---- errors -------------------------------------------------------------------------
def _numpy_message(fn, *args, **kwargs):
    with pytest.raises(ValueError) as info:
        fn(*args, **kwargs)
    return str(info.value)


@pytest.mark.parametrize("name,call,ref", [
    ("reshape", lambda t: pa.reshape(t, (4, 4)), lambda a: a.reshape(4, 4)),
    ("broadcast_to", lambda t: pa.broadcast_to(t, (3, 3)), lambda a: np.broadcast_to(a, (3, 3))),
    ("concat", lambda t: pa.concat([t, pa.ones(3, 2)]),
     lambda a: np.concatenate([a, np.ones((3, 2))])),
    ("stack", lambda t: pa.stack([t, pa.ones(3, 2)]), lambda a: np.stack([a, np.ones((3, 2))])),
    # (squeeze of a dim whose size is not 1 is PyTorch's no-op, not numpy's error: below)
])
def test_bad_shapes_raise_with_op_name_and_numpy_message(name, call, ref):
    a = np.ones((2, 3))
    expected = _numpy_message(ref, a)
    with pytest.raises(ValueError) as info:
        call(leaf(a))
    assert str(info.value) == f"{name}: {expected}"


def test_every_public_shape_op_is_gradchecked():
    public = {n for n in pa.__all__ if getattr(sh, n, None) is getattr(pa, n)
              and not isinstance(getattr(pa, n), type) and n not in ("primitive", "record")}
    tested = {k.split("_")[0] for k in CASES} | {"concat", "stack", "swapaxes",
                                                 "broadcast_to", "getitem"}
    assert public - tested == set()
    assert {"concat", "stack", "getitem", "pad", "split"} <= public


# ---- clone -------------------------------------------------------------------------------------
def test_clone_copies_and_passes_the_gradient():
    x = pa.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    y = x.clone()
    assert y.grad_fn is not None and not np.shares_memory(y.data, x.data)
    assert np.array_equal(y.data, x.data) and y.data.flags.c_contiguous
    assert pa.gradcheck(lambda t: (t.clone() * t).sum(), (x,))
    assert pa.gradgradcheck(lambda t: t.clone().pow(3).sum(), (x,))
    # the fix the version counter's message suggests: write into a clone, not the saved input
    z = x * 2.0
    w = z.clone()
    w[0] = 0.0
    pa.backward((z.exp() * w).sum())
    want = 2.0 * np.exp(2.0 * x.data) * w.data + 2.0 * np.exp(2.0 * x.data) * \
        np.array([[0.0] * 3, [1.0] * 3])
    np.testing.assert_allclose(x.grad, want, rtol=1e-13)


def test_clone_matches_torch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal((3, 4))
    xp, xt = pa.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (xp.clone()[1:] * 3.0).sum().backward()
    (xt.clone()[1:] * 3.0).sum().backward()
    assert np.array_equal(xp.grad, xt.grad.numpy())


# ---- roll ---------------------------------------------------------------------------------------
def test_roll_a_dim_named_twice_shifts_it_by_the_sum_as_torch():
    """PyTorch (and numpy) roll a dimension named twice by the sum of its shifts; pa.roll
    refused ("dims name a dimension twice")."""
    torch = pytest.importorskip("torch")
    x0 = np.arange(24.0).reshape(2, 3, 4)
    w = np.random.default_rng(0).standard_normal(x0.shape)
    for shifts, dims in (((1, 1), (0, 0)), ((1, 2, -1), (1, 2, 1)), ((2, -5), (-1, 2)),
                         ([3, 1], [2, 2])):
        x, tx = pa.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
        y, yt = pa.roll(x, shifts, dims), torch.roll(tx, shifts, dims)
        np.testing.assert_array_equal(y.data, yt.detach().numpy())
        pa.backward((y * pa.tensor(w)).sum())
        (yt * torch.tensor(w)).sum().backward()
        np.testing.assert_array_equal(x.grad, tx.grad.numpy())
        np.testing.assert_array_equal(x.roll(shifts, dims).data, y.data)
        assert pa.gradcheck(lambda t: pa.roll(t, shifts, dims), [leaf(x0)])
        assert pa.gradgradcheck(lambda t: pa.roll(t, shifts, dims), [leaf(x0)])
    np.testing.assert_array_equal(pa.roll(pa.tensor(x0), (1, 1), (0, 0)).data, x0)  # 2 = 0


def test_squeeze_keeps_named_dims_whose_size_is_not_one_as_torch():
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(2).standard_normal((2, 1, 3, 1))
    x, t = pa.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    for dim in (0, 1, -1, (0, 1), (0, 2), (1, 3), ()):
        y, ty = pa.squeeze(x, dim), torch.squeeze(t, dim)
        assert y.shape == tuple(ty.shape), dim
        assert x.squeeze(dim).shape == tuple(ty.shape)
    pa.backward(pa.squeeze(x, (0, 1)).sum())
    np.testing.assert_array_equal(x.grad, np.ones_like(a))
    with pytest.raises(IndexError, match="squeeze: dimension 4 is out of range"):
        pa.squeeze(x, 4)
