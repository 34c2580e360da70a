"""Shape ops: views, indexing (basic, integer arrays with repeats, boolean masks),
joining and splitting, padding; gradients by finite differences, float32, errors."""
import numpy as np
import pytest

import parallel_autograd as pa


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
    "transpose_all": (lambda t: t.T, lambda a: a.T),
    "transpose_two": (lambda t: pa.transpose(t, 0, 2), lambda a: a.swapaxes(0, 2)),
    "transpose_method": (lambda t: t.transpose(-1, 0), lambda a: a.swapaxes(-1, 0)),
    "permute_tuple": (lambda t: pa.permute(t, (1, 2, 0)), lambda a: a.transpose(1, 2, 0)),
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
    "getitem_bool_mask": (lambda t: t[t.numpy() > 0.1], lambda a: a[a > 0.1]),
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
    np.testing.assert_array_equal(out.numpy(), ref(x))
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
    np.testing.assert_array_equal(out.numpy(), np.concatenate(arrays, axis=axis))
    assert pa.gradcheck(lambda *ts: pa.concat(ts, axis=axis), [leaf(a) for a in arrays])
    assert pa.cat is pa.concat


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_stack_gradcheck(axis):
    arrays = [rand((2, 3), i) for i in range(3)]
    out = pa.stack([leaf(a) for a in arrays], axis=axis)
    np.testing.assert_array_equal(out.numpy(), np.stack(arrays, axis=axis))
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
    with pytest.raises(RuntimeError, match="split_with_sizes expects split_sizes to sum"):
        pa.split(x, [2, 2])
    with pytest.raises(RuntimeError, match="split: split_size can only be 0"):
        pa.split(x, 0)


@pytest.mark.parametrize("name", sorted(CASES))
def test_float32_keeps_dtype(name):
    fn, _ = CASES[name]
    x = rand(X, 4)
    t32, t64 = pa.tensor(x.astype(np.float32), requires_grad=True), leaf(x)
    y32, y64 = fn(t32), fn(t64)
    assert y32.dtype == np.float32
    np.testing.assert_allclose(y32.numpy(), y64.numpy(), rtol=1e-6)
    w = rand(y64.shape, 5)
    (g32,) = pa.grad(y32, [t32], grad_outputs=w.astype(np.float32))
    (g64,) = pa.grad(y64, [t64], grad_outputs=w)
    assert g32.dtype == np.float32
    np.testing.assert_allclose(g32, g64, rtol=1e-5, atol=1e-6)


# ---- errors -------------------------------------------------------------------------
class E:
    """Leaves of other shapes for the error cases (made here: a leaf records no node)."""

    s, v, c = leaf(np.array(2.0)), leaf(np.ones(3)), leaf(np.ones((1, 2, 3)))
    e, t = leaf(np.ones((0, 3))), leaf(np.ones((3, 2)).T)


@pytest.mark.parametrize("name,call,kind,words", [
    ("reshape", lambda t: pa.reshape(t, (4, 4)), RuntimeError,
     "reshape: shape '[4, 4]' is invalid for input of size 6"),
    ("reshape_two_inferred", lambda t: t.reshape(-1, -1), RuntimeError,
     "reshape: only one dimension can be inferred"),
    ("reshape_ambiguous", lambda t: E.e.reshape(-1, 0), RuntimeError,
     "the unspecified dimension size -1 can be any value"),
    ("broadcast_to", lambda t: pa.broadcast_to(t, (3, 3)), RuntimeError,
     "expand: The expanded size of the tensor (3) must match the existing size (2)"),
    ("expand_fewer", lambda t: t.expand(3), RuntimeError,
     "the number of sizes provided (1) must be greater"),
    ("expand_leading_minus_one", lambda t: t.expand(-1, 2, 3), RuntimeError,
     "(-1) isn't allowed in a leading, non-existing dimension 0"),
    ("cat", lambda t: pa.cat([t, pa.ones(3, 2)]), RuntimeError,
     "cat: Sizes of tensors must match except in dimension 0. Expected size 3 but got size 2 "
     "for tensor number 1"),
    ("cat_ndim", lambda t: pa.cat([t, pa.ones(3)]), RuntimeError,
     "cat: Tensors must have same number of dimensions: got 2 and 1"),
    ("cat_0d", lambda t: pa.cat([E.s, E.s]), RuntimeError,
     "zero-dimensional tensor (at position 0) cannot be concatenated"),
    ("cat_empty", lambda t: pa.cat([]), ValueError, "expected a non-empty list of Tensors"),
    ("cat_not_a_list", lambda t: pa.cat(t), TypeError, "must be a sequence of Tensors"),
    ("stack", lambda t: pa.stack([t, pa.ones(3, 2)]), RuntimeError,
     "stack expects each tensor to be equal size, but got [2, 3] at entry 0 and [3, 2]"),
    ("stack_dim", lambda t: pa.stack([t, t], dim=3), IndexError, "stack: Dimension out of range"),
    ("permute_length", lambda t: t.permute(0), RuntimeError,
     "number of dimensions in the tensor input does not match"),
    ("permute_twice", lambda t: t.permute(0, 0), RuntimeError, "dim 0 appears multiple times"),
    ("transpose_dim", lambda t: t.transpose(0, 2), IndexError,
     "transpose: Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    ("squeeze_dim", lambda t: t.squeeze(2), IndexError, "squeeze: Dimension out of range"),
    ("unsqueeze_dim", lambda t: t.unsqueeze(4), IndexError, "unsqueeze: Dimension out of range"),
    ("flatten_order", lambda t: t.flatten(1, 0), RuntimeError,
     "start_dim cannot come after end_dim"),
    ("flatten_dim", lambda t: t.flatten(0, 2), IndexError, "flatten: Dimension out of range"),
    ("split_0d", lambda t: pa.split(E.s, 1), RuntimeError,
     "split expects at least a 1-dimensional tensor"),
    ("flip_twice", lambda t: t.flip(0, 0), RuntimeError, "flip: dim 0 appears multiple times"),
    ("roll_align", lambda t: t.roll((1, 2), 0), RuntimeError,
     "roll: shifts and dimensions must align"),
    ("tril_1d", lambda t: E.v.tril(), RuntimeError, "tril: input tensor must have at least 2"),
    ("repeat_few", lambda t: t.repeat(2), RuntimeError, "repeat: Number of dimensions of repeat"),
    ("repeat_negative", lambda t: t.repeat(2, -1), RuntimeError, "negative dimension -1"),
    ("narrow_length", lambda t: t.narrow(1, 2, 2), RuntimeError,
     "narrow(): start (2) + length (2) exceeds dimension size (3)."),
    ("movedim_length", lambda t: pa.movedim(t, (0, 1), 0), RuntimeError,
     "movedim: Invalid source or destination dims"),
    ("chunk_zero", lambda t: t.chunk(0), RuntimeError,
     "chunk expects `chunks` to be greater than 0, got: 0"),
    ("unbind_0d", lambda t: E.s.unbind(), IndexError,
     "unbind: Dimension specified as 0 but tensor has no dimensions"),
    ("t_3d", lambda t: E.c.t(), RuntimeError, "t() expects a tensor with <= 2 dimensions"),
    ("mT_1d", lambda t: E.v.mT, RuntimeError, "tensor.mT is only supported on matrices"),
    ("unfold_size", lambda t: t.unfold(1, 4, 1), RuntimeError,
     "unfold: maximum size for tensor at dimension 1 is 3 but size is 4"),
    ("unfold_step", lambda t: t.unfold(1, 2, 0), RuntimeError, "unfold: step is 0 but must be > 0"),
    ("view_dtype_0d", lambda t: E.s.view(np.int32), RuntimeError,
     "view: self.dim() cannot be 0 to view float64 as int32"),
    ("view_dtype_stride", lambda t: E.t.view(np.int32), RuntimeError,
     "view: self.stride(-1) must be 1 to view float64 as int32"),
    ("view_dtype_size", lambda t: t.view(np.complex128), RuntimeError,
     "view: self.size(-1) must be divisible by 2 to view float64 as complex128"),
])
def test_bad_input_raises_pytorchs_exception_naming_the_op(name, call, kind, words):
    """PyTorch's exception types (IndexError for a dimension out of range, RuntimeError for
    sizes that do not fit; numpy's ValueError before), before anything is recorded."""
    from parallel_autograd.node import next_seq
    x = leaf(np.ones((2, 3)))
    before = next_seq()
    with pytest.raises(kind) as info:
        call(x)
    assert words in str(info.value)
    assert next_seq() == before + 1                  # no node was made


def test_the_shape_ops_are_declared_once_with_pytorchs_signatures():
    """Each op of the family is one registry entry, its function `pa.<name>` (or the Tensor
    method PyTorch has alone), with PyTorch's parameter names; numpy's `axis=` is accepted
    for `dim=`, and sizes come as a tuple or spread (`x.reshape(2, 3)`)."""
    import inspect

    from parallel_autograd.primitive import REGISTRY
    ops = {op.name: op for op in REGISTRY if op.family == "shape"}
    for name in ("reshape", "permute", "broadcast_to", "squeeze", "unsqueeze", "clone", "cat",
                 "stack", "flip", "roll", "tril", "triu", "transpose", "flatten", "split",
                 "chunk", "narrow", "select", "unbind", "movedim", "tile", "unflatten"):
        assert getattr(pa, name) is ops[name].fn, name
    for name in ("view", "view_as", "reshape_as", "expand_as", "sum_to_size", "repeat",
                 "unfold"):
        assert getattr(pa.Tensor, name) is ops[name].fn, name
    sig = {n: list(inspect.signature(getattr(pa, n)).parameters) for n in
           ("reshape", "cat", "stack", "split", "flip", "permute", "transpose", "squeeze")}
    assert sig == {"reshape": ["input", "shape"], "cat": ["tensors", "dim"],
                   "stack": ["tensors", "dim"],
                   "split": ["tensor", "split_size_or_sections", "dim"],
                   "flip": ["input", "dims"], "permute": ["input", "dims"],
                   "transpose": ["input", "dim0", "dim1"], "squeeze": ["input", "dim"]}
    x = pa.tensor(np.arange(24.0).reshape(2, 3, 4))
    assert pa.cat([x, x], dim=1).shape == pa.cat([x, x], axis=1).shape == (2, 6, 4)
    assert pa.concat([x, x], 2).shape == pa.concatenate([x, x], dim=-1).shape == (2, 3, 8)
    assert pa.stack([x, x], dim=1).shape == pa.stack([x, x], axis=1).shape == (2, 2, 3, 4)
    assert [p.shape for p in pa.split(x, 2, dim=2)] == [(2, 3, 2)] * 2
    assert [p.shape for p in x.split(1, axis=0)] == [(1, 3, 4)] * 2
    assert np.array_equal(pa.flip(x, dims=(0, 2)).numpy(), np.flip(x.numpy(), (0, 2)))
    assert np.array_equal(x.flip(0, 2).numpy(), np.flip(x.numpy(), (0, 2)))
    assert x.reshape(4, 6).shape == x.reshape((4, 6)).shape == x.view(-1, 6).shape == (4, 6)
    assert x.permute(2, 0, 1).shape == pa.permute(x, (2, 0, 1)).shape == (4, 2, 3)
    assert x.expand(5, -1, -1, -1).shape == (5, 2, 3, 4) and pa.expand is pa.broadcast_to


# ---- clone -------------------------------------------------------------------------------------
def test_clone_copies_and_passes_the_gradient():
    x = pa.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    y = x.clone()
    assert y.grad_fn is not None and not np.shares_memory(y.numpy(), x.numpy())
    assert np.array_equal(y.numpy(), x.numpy()) and y.numpy().flags.c_contiguous
    assert pa.gradcheck(lambda t: (t.clone() * t).sum(), (x,))
    assert pa.gradgradcheck(lambda t: t.clone().pow(3).sum(), (x,))
    # the fix the version counter's message suggests: write into a clone, not the saved input
    z = x * 2.0
    w = z.clone()
    w[0] = 0.0
    pa.backward((z.exp() * w).sum())
    want = 2.0 * np.exp(2.0 * x.numpy()) * w.numpy() + 2.0 * np.exp(2.0 * x.numpy()) * \
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
        np.testing.assert_array_equal(y.numpy(), yt.detach().numpy())
        pa.backward((y * pa.tensor(w)).sum())
        (yt * torch.tensor(w)).sum().backward()
        np.testing.assert_array_equal(x.grad, tx.grad.numpy())
        np.testing.assert_array_equal(x.roll(shifts, dims).numpy(), y.numpy())
        assert pa.gradcheck(lambda t: pa.roll(t, shifts, dims), [leaf(x0)])
        assert pa.gradgradcheck(lambda t: pa.roll(t, shifts, dims), [leaf(x0)])
    np.testing.assert_array_equal(pa.roll(pa.tensor(x0), (1, 1), (0, 0)).numpy(), x0)  # 2 = 0


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
    with pytest.raises(IndexError, match="squeeze: Dimension out of range"):
        pa.squeeze(x, 4)


# ---- the ops the registry walk does not see (Tensor methods only, adjoints, numpy's pad) -------
import op_samples  # noqa: E402, F401  (first: it merges the samples modules)
from samples_shape import INTERNAL  # noqa: E402

from parallel_autograd.ops.shape import unfold_backward  # noqa: E402
from parallel_autograd.primitive import REGISTRY  # noqa: E402

_INTERNAL = {op.name: op for op in REGISTRY if op.family == "shape" and not op.export}
_TORCH_METHODS = ("view", "view_as", "reshape_as", "expand_as", "sum_to_size", "repeat",
                  "unfold")


def test_the_internal_ops_have_samples():
    assert set(_INTERNAL) - {"view_dtype"} == set(INTERNAL)


@pytest.mark.parametrize("check", ["test_gradcheck_and_gradgradcheck",
                                   "test_kernel_equals_formula_at_first_order",
                                   "test_both_engines_agree_bitwise",
                                   "test_every_differentiable_input_has_a_formula",
                                   "test_composite_gradcheck_gradgradcheck_and_kernels",
                                   "test_composite_engines_agree_bitwise"])
@pytest.mark.parametrize("name", sorted(INTERNAL))
def test_the_registry_checks_pass_for_the_internal_ops(name, check, monkeypatch):
    import test_registry as registry                  # noqa: PLC0415  (its checks, reused)
    monkeypatch.setitem(registry.SAMPLES, name, INTERNAL[name])
    op = _INTERNAL[name]
    if (check == "test_kernel_equals_formula_at_first_order" and not op.has_kernel) or (
            op.composite != check.startswith("test_composite")) or (
            op.composite and check == "test_every_differentiable_input_has_a_formula"):
        return
    getattr(registry, check)(op)


@pytest.mark.parametrize("name", _TORCH_METHODS)
def test_the_tensor_methods_match_pytorchs(name):
    """Values, gradients and dtypes of the methods PyTorch has on Tensor alone, on their
    samples, against torch.Tensor's (the registry test's check, for a method)."""
    torch = pytest.importorskip("torch")
    op = _INTERNAL[name]
    for sample in INTERNAL[name](np.random.default_rng(3)):
        args = [pa.tensor(a, requires_grad=i == 0) if isinstance(a, np.ndarray) else a
                for i, a in enumerate(sample.args)]
        targs = [torch.tensor(a.numpy(), requires_grad=a.requires_grad)
                 if isinstance(a, pa.Tensor) else a for a in args]
        y = sample.call(op.fn, args)
        ty = sample.call(getattr(torch.Tensor, name), targs)
        # (sum_to_size sums in another order than torch: equal to rounding)
        np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-14, atol=1e-15,
                                   err_msg=f"{name} {sample}")
        assert str(y.dtype) == str(ty.dtype).replace("torch.", "")
        w = np.random.default_rng(4).uniform(0.5, 1.5, y.shape)
        (g,) = pa.grad(y, [args[0]], grad_outputs=w)
        (tg,) = torch.autograd.grad(ty, [targs[0]], torch.tensor(w))
        np.testing.assert_allclose(g, tg.numpy(), rtol=1e-13, err_msg=f"{name} {sample}")


def test_unfold_backward_is_pytorchs():
    torch = pytest.importorskip("torch")
    for sample in INTERNAL["unfold_backward"](np.random.default_rng(5)):
        g, kw = sample.args[0], sample.kwargs
        want = torch.ops.aten.unfold_backward(torch.tensor(g), list(kw["shape"]),
                                              kw["dimension"], kw["size"], kw["step"])
        np.testing.assert_allclose(unfold_backward(pa.tensor(g), **kw).numpy(), want.numpy(),
                                   rtol=1e-14)


# ---- view(dtype) and unfold: missing names (issue 27) -------------------------------------------
@pytest.mark.parametrize("shape,dtype,to", [((2, 3), np.float64, np.int64),
                                            ((2, 3), np.float64, np.float32),
                                            ((2, 3), np.float64, np.uint8),
                                            ((8,), np.int16, np.int64),
                                            ((2, 4), np.float32, np.float64),
                                            ((), np.int8, np.uint8)])
def test_view_dtype_reads_the_same_memory_as_pytorch(shape, dtype, to):
    """`x.view(dtype)` (it was a reshape, refusing a dtype): the bits read as another dtype,
    the last dimension scaled by the item sizes, a view sharing memory and the version
    counter, without gradient (PyTorch's `view.dtype` is not differentiable)."""
    torch = pytest.importorskip("torch")
    a = (np.arange(int(np.prod(shape))) * 37 + 3).astype(dtype).reshape(shape)
    x = pa.tensor(a, requires_grad=a.dtype.kind == "f")
    y = x.view(to)
    want = torch.tensor(a).view(getattr(torch, np.dtype(to).name))
    assert y.dtype == np.dtype(to) and y.shape == tuple(want.shape)
    np.testing.assert_array_equal(y.numpy(), want.numpy())
    assert not y.requires_grad and y.grad_fn is None
    assert np.shares_memory(y.numpy(), x.numpy()) and y._vc is x._vc
    assert x.view(dtype=to).shape == y.shape and x.view(pa.dtypes.as_dtype(to)).shape == y.shape


@pytest.mark.parametrize("shape,args", [((7,), (0, 3, 2)), ((2, 5, 3), (1, 2, 1)),
                                        ((2, 6), (-1, 4, 3)), ((3, 4), (0, 3, 1)),
                                        ((3, 4), (1, 0, 1)), ((), (0, 1, 1)),
                                        ((5,), (0, 2, 4))])
def test_tensor_unfold_matches_pytorch(shape, args):
    """`Tensor.unfold(dimension, size, step)` (it was missing: AttributeError): the sliding
    windows as a view, its gradient (overlaps add) PyTorch's, to the second order."""
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(6).standard_normal(shape)
    x, tx = leaf(a), torch.tensor(a, requires_grad=True)
    y, ty = x.unfold(*args), tx.unfold(*args)
    assert y.shape == tuple(ty.shape)
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    assert np.shares_memory(y.numpy(), x.numpy()) == (ty.numel() > 0) and y._vc is x._vc
    w = np.random.default_rng(7).standard_normal(y.shape)
    (g,) = pa.grad(y, [x], grad_outputs=w)
    (tg,) = torch.autograd.grad(ty, [tx], torch.tensor(w))
    np.testing.assert_allclose(g, tg.numpy(), rtol=1e-14)
    assert pa.gradgradcheck(lambda t: t.unfold(*args) ** 2, [leaf(a)])


@pytest.mark.parametrize("call", [lambda t: pa.permute(t, (1, 0)), lambda t: t.reshape(-1),
                                  lambda t: pa.cat([t, t]), lambda t: t.flip(0),
                                  lambda t: pa.gather(t, 1, pa.tensor(np.zeros((3, 2), int)))])
def test_shape_nodes_keep_shapes_not_arrays(call):
    """`defop(shapes_only=True)`: the node of a shape or index op keeps stand-ins of the
    arrays it saw (one element, stride 0), not the arrays: a graph of permutes, cats and
    gathers holds no copy of its inputs alive, and the gradient is unchanged."""
    x = leaf(np.random.default_rng(9).standard_normal((3, 40)))
    y = call(x)
    saved = [a for a in y.grad_fn.saved if isinstance(a, np.ndarray)]  # (flip: none at
    assert all(a.size == 0 or not any(a.strides) for a in saved)      # all, its rules
    # read no input: None in their place, primitive._unread_inputs)
    assert not any(np.shares_memory(a, x.numpy()) or np.shares_memory(a, y.numpy()) for a in saved)
    w = np.random.default_rng(8).standard_normal(y.shape)
    (g,) = pa.grad(y, [x], grad_outputs=w)
    assert g.shape == x.shape
