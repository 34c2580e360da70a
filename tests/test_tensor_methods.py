"""PyTorch's Tensor methods (ops/convert, arith, products, logic, views, scan,
inplace_more): every differentiable one by gradcheck and gradgradcheck (no torch needed)
and against PyTorch (values and gradients, float64, 1e-12); the others' values, dtypes and
types against PyTorch; in-place and random methods; bad input naming the method.

Each case is a function `fn(L, *tensors)` run on pa tensors and on torch tensors alike
(the methods have torch's names): `L` holds the library's dtypes."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import parallel_autograd as pa

TOL = 1e-12
PA = SimpleNamespace(float16=np.float16, float32=np.float32, float64=np.float64,
                     int32=np.int32, int64=np.int64, uint8=np.uint8, bool=np.bool_)


@pytest.fixture(scope="module")
def torch_lib():
    torch = pytest.importorskip("torch")
    L = SimpleNamespace(**{n: getattr(torch, n) for n in vars(PA)})
    return torch, L


# ---- inputs: N normal, P positive, M well-conditioned matrix, X with nan/inf, K constant ------
def N(*shape):
    return ("normal", shape)


def P(*shape):
    return ("positive", shape)


def M(n):
    return ("matrix", (n, n))


def X(*shape):
    return ("nonfinite", shape)


def K(value, dtype=None):
    return ("const", np.asarray(value, dtype))


def _array(spec, seed: int) -> np.ndarray:
    kind, arg = spec
    if kind == "const":
        return arg.copy()
    rng = np.random.default_rng(seed)
    if kind == "positive":
        return rng.uniform(0.5, 2.0, arg)
    a = rng.standard_normal(arg)
    if kind == "matrix":
        a = a / 4 + 2 * np.eye(arg[0])
    if kind == "nonfinite":
        a.reshape(-1)[[0, 3, 5]] = [np.nan, np.inf, -np.inf]
    return a


def _inputs(specs, make):
    return [make(_array(s, 10 + i), s[0] != "const") for i, s in enumerate(specs)]


def _pa_inputs(specs):
    return _inputs(specs, lambda a, g: pa.tensor(a, requires_grad=g))


def _torch_inputs(torch, specs):
    return _inputs(specs, lambda a, g: torch.tensor(a, requires_grad=g))


# ---- differentiable methods ---------------------------------------------------------------------
GRAD = {
    # conversions and shapes
    "double": (lambda L, x: x.double(), [N(2, 3)]),
    "to_copy": (lambda L, x: x.to(L.float64, copy=True), [N(2, 3)]),
    "to_cpu_and_dtype": (lambda L, x: x.to("cpu", L.float64), [N(3)]),
    "type_as": (lambda L, x, y: x.type_as(y), [N(2, 3), K([1.0])]),
    "contiguous": (lambda L, x: x.t().contiguous(), [N(2, 3)]),
    "t": (lambda L, x: x.t(), [N(2, 3)]),
    "t_vector": (lambda L, x: x.t(), [N(4)]),
    "expand_as": (lambda L, x, y: x.expand_as(y), [N(3, 1), K(np.zeros((2, 3, 4)))]),
    "view_as": (lambda L, x, y: x.view_as(y), [N(2, 6), K(np.zeros((3, 4)))]),
    "reshape_as": (lambda L, x, y: x.t().reshape_as(y), [N(2, 6), K(np.zeros((4, 3)))]),
    "unflatten": (lambda L, x: x.unflatten(1, (2, -1, 1)), [N(2, 6)]),
    "tensor_split_sections": (lambda L, x: x.tensor_split(3, dim=1)[0], [N(2, 7)]),
    "tensor_split_indices": (lambda L, x: x.tensor_split([1, -2], dim=1)[1], [N(2, 7)]),
    "repeat_interleave_int": (lambda L, x: x.repeat_interleave(2, dim=0), [N(2, 3)]),
    "repeat_interleave_tensor": (lambda L, x, r: x.repeat_interleave(r, dim=1),
                                 [N(2, 3), K([1, 0, 3])]),
    "repeat_interleave_flat": (lambda L, x: x.repeat_interleave(3), [N(2, 2)]),
    "select": (lambda L, x: x.select(1, -1), [N(2, 3, 2)]),
    "sum_to_size": (lambda L, x: x.sum_to_size(3, 1), [N(2, 3, 4)]),
    "masked_select": (lambda L, x, m: x.masked_select(m), [N(2, 3), K([[1, 0, 1], [0, 1, 1]],
                                                                     bool)]),
    "masked_select_broadcast": (lambda L, x, m: x.masked_select(m),
                                [N(3), K([[True], [False]])]),
    # arithmetic
    "add_alpha": (lambda L, x, y: x.add(y, alpha=2.5), [N(2, 3), N(3)]),
    "sub_alpha": (lambda L, x, y: x.sub(y, alpha=-1.5), [N(2, 3), N(2, 3)]),
    "mul": (lambda L, x, y: x.mul(y), [N(2, 3), N(3)]),
    "true_divide": (lambda L, x, y: x.true_divide(y), [N(2, 3), P(3)]),
    "div_floor": (lambda L, x, y: x.div(y, rounding_mode="floor"), [N(2, 3), P(3)]),
    "div_trunc": (lambda L, x, y: x.div(y, rounding_mode="trunc"), [N(2, 3), N(2, 3)]),
    "fmod": (lambda L, x, y: x.fmod(y), [N(2, 3), N(2, 3)]),
    "fmod_scalar": (lambda L, x: (x * 3).fmod(-0.7), [N(2, 3)]),
    "remainder": (lambda L, x, y: x.remainder(y), [N(2, 3), N(3)]),
    "remainder_operator": (lambda L, x, y: (x * 3) % y, [N(2, 3), P(2, 3)]),
    "atan2": (lambda L, x, y: x.atan2(y), [N(2, 3), N(2, 3)]),
    "hypot": (lambda L, x, y: x.hypot(y), [N(2, 3), N(3)]),
    "float_power": (lambda L, x, y: x.float_power(y), [P(2, 3), N(2, 3)]),
    "float_power_scalar": (lambda L, x: x.float_power(3), [N(2, 3)]),
    "frac": (lambda L, x: (x * 3).frac(), [N(2, 3)]),
    "sgn": (lambda L, x: x.sgn() * x, [N(2, 3)]),
    "clamp_min": (lambda L, x: x.clamp_min(0.2), [N(2, 3)]),
    "clamp_min_tensor": (lambda L, x, y: x.clamp_min(y), [N(2, 3), N(3)]),
    "clamp_max_tensor": (lambda L, x, y: x.clamp_max(y), [N(2, 3), N(2, 3)]),
    "addcmul": (lambda L, x, a, b: x.addcmul(a, b, value=0.5), [N(2, 3), N(3), N(2, 3)]),
    "addcdiv": (lambda L, x, a, b: x.addcdiv(a, b, value=-2), [N(2, 3), N(2, 3), P(2, 3)]),
    "lerp_small_weight": (lambda L, x, y: x.lerp(y, 0.3), [N(2, 3), N(2, 3)]),
    "lerp_large_weight": (lambda L, x, y: x.lerp(y, 0.8), [N(2, 3), N(3)]),
    "lerp_tensor_weight": (lambda L, x, y, w: x.lerp(y, w), [N(2, 3), N(2, 3), N(2, 3)]),
    "nan_to_num": (lambda L, x: x.nan_to_num(posinf=5.0, neginf=-4.0), [X(2, 4)]),
    # products
    "mm": (lambda L, a, b: a.mm(b), [N(2, 3), N(3, 4)]),
    "bmm": (lambda L, a, b: a.bmm(b), [N(2, 2, 3), N(2, 3, 2)]),
    "mv": (lambda L, a, v: a.mv(v), [N(2, 3), N(3)]),
    "dot": (lambda L, a, b: a.dot(b), [N(4), N(4)]),
    "outer": (lambda L, a, b: a.outer(b), [N(3), N(2)]),
    "addmm": (lambda L, c, a, b: c.addmm(a, b, beta=0.5, alpha=-2), [N(4), N(2, 3), N(3, 4)]),
    "addmm_beta0": (lambda L, c, a, b: c.addmm(a, b, beta=0), [N(2, 4), N(2, 3), N(3, 4)]),
    "addmv": (lambda L, c, a, v: c.addmv(a, v, alpha=3), [N(2), N(2, 3), N(3)]),
    "baddbmm": (lambda L, c, a, b: c.baddbmm(a, b, beta=2),
                [N(1, 2), N(2, 2, 3), N(2, 3, 2)]),
    "cross": (lambda L, a, b: a.cross(b, dim=0), [N(3, 2), N(3, 2)]),
    "cross_broadcast": (lambda L, a, b: a.cross(b, dim=-1), [N(2, 3), N(1, 3)]),
    "kron": (lambda L, a, b: a.kron(b), [N(2, 2), N(3)]),
    "matrix_power_3": (lambda L, a: a.matrix_power(3), [N(3, 3)]),
    "matrix_power_5": (lambda L, a: a.matrix_power(5), [N(2, 2, 2)]),
    "matrix_power_negative": (lambda L, a: a.matrix_power(-2), [M(3)]),
    "matrix_power_0": (lambda L, a: a.matrix_power(0) * a, [N(3, 3)]),
    "diag_of_vector": (lambda L, v: v.diag(1), [N(3)]),
    "diag_of_matrix": (lambda L, a: a.diag(-1), [N(3, 4)]),
    "trace": (lambda L, a: a.trace(), [N(3, 4)]),
    # scans and selections
    "cummax": (lambda L, x: x.cummax(1).values, [N(3, 4)]),
    "cummin": (lambda L, x: x.cummin(0).values, [N(3, 4)]),
    "logcumsumexp": (lambda L, x: x.logcumsumexp(1), [N(2, 5)]),
    "logcumsumexp_mixed_signs": (lambda L, x: x.logcumsumexp(0) * x, [N(4, 2)]),
    "msort": (lambda L, x: x.msort(), [N(4, 3)]),
}


@pytest.mark.parametrize("name", sorted(GRAD))
def test_gradcheck_and_gradgradcheck(name):
    fn, specs = GRAD[name]
    xs = _pa_inputs(specs)
    leaves = [x for x in xs if x.requires_grad]   # gradcheck perturbs every input it gets

    def f(*args):
        it = iter(args)
        return fn(PA, *[next(it) if x.requires_grad else x for x in xs])

    assert pa.gradcheck(f, leaves)
    assert pa.gradgradcheck(f, leaves)


def _close(p, t, tol=TOL):
    t = t.detach().numpy() if hasattr(t, "detach") else t
    p = p.numpy() if isinstance(p, pa.Tensor) else p
    assert p.shape == t.shape and p.dtype == t.dtype, (p.shape, t.shape, p.dtype, t.dtype)
    np.testing.assert_allclose(p, t, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", sorted(GRAD))
def test_values_and_gradients_match_torch(name, torch_lib):
    torch, L = torch_lib
    fn, specs = GRAD[name]
    xs, ts = _pa_inputs(specs), _torch_inputs(torch, specs)
    out, ref = fn(PA, *xs), fn(L, *ts)
    _close(out, ref)
    w = np.random.default_rng(0).uniform(0.5, 1.5, out.shape)
    leaves = [(x, t) for x, t in zip(xs, ts) if t.requires_grad]
    got = pa.grad((out * w).sum(), [x for x, _ in leaves], allow_unused=True)
    want = torch.autograd.grad((ref * torch.tensor(w)).sum(), [t for _, t in leaves],
                               allow_unused=True, materialize_grads=True)
    for g, h in zip(got, want):
        _close(np.zeros(h.shape) if g is None else g, h)


def test_float32_casts_are_differentiable_and_match_torch(torch_lib):
    torch, L = torch_lib
    a = np.random.default_rng(1).standard_normal((2, 3))
    for method in ("float", "half"):
        x, t = pa.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
        y, u = getattr(x, method)(), getattr(t, method)()
        _close(y, u, 0)
        (y * 3).sum().backward()
        (u * 3).sum().backward()
        _close(x.grad, t.grad, 0)
    x = pa.tensor(a.astype(np.float32), requires_grad=True)
    y = x.to(torch.float64)                   # a torch.dtype is mapped by its name
    assert y.dtype == np.float64 and y.requires_grad
    (y * 2).sum().backward()
    assert x.grad.dtype == np.float32 and np.array_equal(x.grad, np.full((2, 3), 2.0))


def test_zero_gradient_methods_give_zeros():
    x = pa.tensor(np.array([1.5, -2.5, 3.0]), requires_grad=True)
    for y in (x.floor_divide(2.0), x // 0.7, x.div(2.0, rounding_mode="trunc"), x.sgn()):
        (g,) = pa.grad(y.sum(), [x])
        assert np.array_equal(g, np.zeros(3))


# ---- methods without gradient: values, dtypes and types against torch ----------------------------
F = np.array([[0.5, -1.5, 2.0, -0.0], [3.25, 0.0, -7.0, 1.0]])
NF = np.array([np.nan, 1.0, np.inf, -np.inf, -2.0, np.nan, 0.0])
IA = np.array([[3, -1, 0, 2], [5, 0, -7, 1]])
J = np.array([[2, 3, -4, 5], [-2, 1, 3, -3]])
B = np.array([[True, False, True, False], [False, False, True, True]])
C = np.array([[0, 1, 1, 0], [1, 0, 1, 1]], dtype=bool)

VALUES = {
    # conversions
    "float": (lambda L, x: x.float(), [F]),
    "long": (lambda L, x: x.long(), [F]),
    "int": (lambda L, x: x.int(), [F]),
    "short_char_byte": (lambda L, x: (x.short(), x.char(), x.byte()), [np.abs(IA)]),
    "bool": (lambda L, x: x.bool(), [F]),
    "double_of_int": (lambda L, x: x.double(), [IA]),
    "to_dtype": (lambda L, x: x.to(L.int64), [F]),
    "to_other": (lambda L, x, y: x.to(y), [F, IA.astype(np.int32)]),
    "to_device_dtype": (lambda L, x: x.to("cpu", L.float32), [IA]),
    "to_dtype_keyword": (lambda L, x: x.to(dtype=L.uint8, device="cpu"), [np.abs(IA)]),
    "type_names": (lambda L, *xs: tuple(x.type() for x in xs),
                   [F, F.astype(np.float32), F.astype(np.float16), IA, IA.astype(np.int32),
                    IA.astype(np.int16), IA.astype(np.int8), np.abs(IA).astype(np.uint8), B,
                    F.astype(np.complex64), F.astype(np.complex128)]),
    "type_to": (lambda L, x: (x.type(L.float32), x.type("torch.IntTensor")), [F]),
    "type_as": (lambda L, x, y: x.type_as(y), [F, IA]),
    "tolist": (lambda L, x, s: (x.tolist(), s.tolist()), [F, np.array(2.5)]),
    "cpu": (lambda L, x: x.cpu(), [F]),
    # introspection
    "dim_numel": (lambda L, x: (x.dim(), x.ndimension(), x.numel(), x.nelement()), [F]),
    "element_size": (lambda L, x, y: (x.element_size(), y.element_size()),
                     [F, F.astype(np.float32)]),
    "stride": (lambda L, x: (x.stride(), x.t().stride(), x.stride(-1), x.stride(0)), [F]),
    "storage_offset": (lambda L, x: (x.storage_offset(), x[1:, 2:].storage_offset()), [F]),
    "is_contiguous": (lambda L, x: (x.is_contiguous(), x.t().is_contiguous(),
                                    x[:, 1:].is_contiguous()), [F]),
    "is_floating_point": (lambda L, x, i: (x.is_floating_point(), i.is_floating_point(),
                                           x.is_complex()), [F, IA]),
    # factories
    "new_zeros": (lambda L, x: (x.new_zeros(2, 3), x.new_zeros((2,), dtype=L.int64)), [F]),
    "new_ones": (lambda L, x: x.new_ones((1, 2)), [F.astype(np.float32)]),
    "new_full": (lambda L, x: x.new_full((2, 2), 3.7), [IA.astype(np.int32)]),
    "new_tensor": (lambda L, x: x.new_tensor([1, 2]), [F.astype(np.float32)]),
    # arithmetic on integers and special values
    "floor_divide_int": (lambda L, x, y: (x.floor_divide(y), x // 3, x // -2), [IA, J]),
    "div_modes_int": (lambda L, x, y: (x.div(y, rounding_mode="floor"),
                                       x.div(y, rounding_mode="trunc")), [IA, J]),
    "div_modes_float": (lambda L, x: (x.div(-0.75, rounding_mode="floor"),
                                      x.div(0.75, rounding_mode="trunc"), x // 0.75), [F]),
    "fmod_remainder_int": (lambda L, x, y: (x.fmod(y), x.remainder(y), x % 3, x % -3), [IA, J]),
    "signbit": (lambda L, x: (x.signbit(), x.sgn()), [F]),
    "nan_to_num": (lambda L, x: (x.nan_to_num(), x.nan_to_num(1.0, 2.0, -3.0)), [NF]),
    "nan_to_num_float32": (lambda L, x: x.nan_to_num(), [NF.astype(np.float32)]),
    "clamp_min_nan": (lambda L, x, y: x.clamp_min(y), [NF, NF[::-1].copy()]),
    "frac_special": (lambda L, x: x.frac(), [NF]),
    # comparisons and logic
    "compare_tensor": (lambda L, x, y: (x.eq(y), x.ne(y), x.lt(y), x.gt(y), x.le(y), x.ge(y)),
                       [IA, J]),
    "compare_scalar": (lambda L, x: (x.eq(0), x.lt(1.5), x.greater(0), x.less_equal(-1),
                                     x.not_equal(2), x.greater_equal(3)), [F]),
    "equal": (lambda L, x, y, z: (x.equal(x), x.equal(y), x.equal(z[:1]), x.equal(x.double())),
              [IA, J, IA]),
    "allclose_isclose": (lambda L, x, y: (x.allclose(x + 1e-9), x.allclose(y),
                                          x.isclose(y, atol=2.0), x.allclose(x[0])), [F, F * 2]),
    "isnan_isinf": (lambda L, x: (x.isnan(), x.isinf(), x.isfinite(), x.isposinf(),
                                  x.isneginf()), [NF]),
    "isnan_int": (lambda L, x: (x.isnan(), x.isfinite()), [IA]),
    "logical": (lambda L, x, y: (x.logical_and(y), x.logical_or(y), x.logical_xor(y),
                                 x.logical_not()), [IA, B]),
    "bitwise": (lambda L, x, y: (x.bitwise_and(y), x.bitwise_or(y), x.bitwise_xor(y),
                                 x.bitwise_not(), x & y, x | 3, x ^ y, ~x), [IA, J]),
    "bool_operators": (lambda L, a, b: (a & b, a | b, a ^ b, ~a, a & True), [B, C]),
    "any_all": (lambda L, x: (x.any(), x.all(), x.any(dim=1), x.all(0, keepdim=True),
                              x.any(dim=(0, 1))), [IA]),
    "any_all_uint8": (lambda L, x: (x.any(), x.all(1)), [np.abs(IA).astype(np.uint8)]),
    "count_nonzero": (lambda L, x: (x.count_nonzero(), x.count_nonzero(dim=0),
                                    x.count_nonzero(dim=(0, 1))), [IA]),
    "nonzero": (lambda L, x, s: (x.nonzero(), x.nonzero(as_tuple=True), s.nonzero(),
                                 s.nonzero(as_tuple=True)), [IA, np.array(3.0)]),
    "argsort": (lambda L, x, y: (x.argsort(), x.argsort(dim=0, descending=True),
                                 y.argsort(stable=True), y.argsort(descending=True, stable=True)),
                [IA, np.array([1.0, np.nan, 1.0, -2.0, np.nan, 1.0])]),
    "msort_int": (lambda L, x: x.msort(), [IA]),
    "unique": (lambda L, x: (x.unique(), x.unique(return_inverse=True, return_counts=True),
                             x.unique(sorted=True, return_counts=True)), [np.array([[3, 1, 1],
                                                                               [2, 3, 0]])]),
    "unique_dim": (lambda L, x: x.unique(dim=0, return_inverse=True, return_counts=True),
                   [np.array([[3, 1], [1, 2], [3, 1]])]),
    "unique_nan": (lambda L, x: x.unique(), [NF]),
    "bincount": (lambda L, x, w, v: (x.bincount(), x.bincount(minlength=9), x.bincount(w),
                                     x.bincount(w.float()), x.bincount(v)),
                 [np.array([1, 4, 1, 0, 4, 4]), np.arange(6.0) / 3, np.arange(6)]),
    # running extrema, shapes and products on integers
    "cummax_cummin": (lambda L, x: (x.cummax(0), x.cummin(0), x.cummax(-1).indices),
                      [np.array([1.0, 3.0, 3.0, 2.0, np.nan, 5.0, np.nan, -0.0, 0.0])]),
    "cummax_int": (lambda L, x: (x.cummax(1), x.cummin(1)), [IA]),
    "cummax_0d": (lambda L, x: x.cummax(0), [np.array(2.0)]),
    "tensor_split_edges": (lambda L, x: (x.tensor_split([-2, 1, 10]), x.tensor_split([4, 1]),
                                         x.tensor_split(4), x.tensor_split(L.tensor(2))),
                           [np.arange(6)]),
    "repeat_interleave_int": (lambda L, x: (x.repeat_interleave(2), x.repeat_interleave(
        L.tensor([2]), dim=0), x.repeat_interleave(L.tensor([0, 2]), dim=0)), [IA]),
    "select_and_t": (lambda L, x, v: (x.select(1, -1), x.select(0, 1), v.t()), [IA, IA[0]]),
    "diag_trace_int": (lambda L, x, v: (x.diag(), x.diag(2), v.diag(-1), x.trace(),
                                        x.int().trace()), [IA, IA[0]]),
    "sum_to_size_self": (lambda L, x: x.sum_to_size(2, 4), [IA]),
    "kron_int": (lambda L, x, y: x.kron(y), [IA[:, :2], J]),
}


def _same(p, t):
    """A pa result equals a torch result: tensors by dtype, shape and values (NaN equal),
    sequences item by item, anything else by type and value."""
    if isinstance(p, pa.Tensor):
        assert type(t).__name__ == "Tensor", (p, t)
        assert p.dtype.name == str(t.dtype).split(".")[1] and p.shape == tuple(t.shape), (p, t)
        want = t.detach().numpy()
        if p.dtype.kind == "f":
            np.testing.assert_allclose(p.numpy(), want, rtol=TOL, atol=TOL)
        else:
            np.testing.assert_array_equal(p.numpy(), want)
    elif isinstance(p, (tuple, list)):
        assert isinstance(t, (tuple, list)) and len(p) == len(t), (p, t)
        for a, b in zip(p, t):
            _same(a, b)
    else:
        assert type(p) is type(t) and p == t, (p, t)


@pytest.mark.parametrize("name", sorted(VALUES))
def test_values_dtypes_and_types_match_torch(name, torch_lib):
    torch, L = torch_lib
    fn, arrays = VALUES[name]
    mine = SimpleNamespace(**vars(PA), tensor=pa.tensor)
    theirs = SimpleNamespace(**vars(L), tensor=torch.tensor)
    _same(fn(mine, *[pa.tensor(a) for a in arrays]),
          fn(theirs, *[torch.tensor(a) for a in arrays]))


def test_conversions_keep_identity_and_grad_rules():
    x = pa.tensor(np.ones(3), requires_grad=True)
    assert x.to(np.float64) is x and x.to("cpu") is x and x.double() is x
    assert x.type(np.float64) is x and x.type_as(x) is x and x.cpu() is x
    assert x.contiguous() is x and x.to(x) is x
    copy = x.to(np.float64, copy=True)
    assert copy is not x and copy.requires_grad and copy.numpy() is not x.numpy()
    for y in (x.long(), x.int(), x.bool(), x.to(np.int64), x.byte()):
        assert not y.requires_grad and y.grad_fn is None
    assert x.float().requires_grad and x.half().grad_fn is not None
    with pa.no_grad():
        assert not x.float().requires_grad
    e = x.new_empty(2, 3)
    assert e.shape == (2, 3) and e.dtype == np.float64 and not e.requires_grad
    w = x.new_zeros(2, requires_grad=True)
    assert w.requires_grad and w.is_leaf and x.data_ptr() == x.numpy().ctypes.data


# ---- in-place methods --------------------------------------------------------------------------
INPLACE = {
    "exp_": ((), N(2, 3)), "sqrt_": ((), P(2, 3)), "log_": ((), P(2, 3)), "abs_": ((), N(2, 3)),
    "relu_": ((), N(2, 3)), "sigmoid_": ((), N(2, 3)), "tanh_": ((), N(2, 3)),
    "square_": ((), N(2, 3)), "sin_": ((), N(2, 3)), "cos_": ((), N(2, 3)),
    "floor_": ((), N(2, 3)), "ceil_": ((), N(2, 3)), "trunc_": ((), N(2, 3)),
    "reciprocal_": ((), N(2, 3)), "rsqrt_": ((), P(2, 3)), "log1p_": ((), P(2, 3)),
    "expm1_": ((), N(2, 3)), "unsqueeze_": ((1,), N(2, 3)), "squeeze_": ((), N(1, 3, 1)),
    "transpose_": ((0, -1), N(2, 3, 4)), "t_": ((), N(2, 3)), "swapaxes_": ((1, 0), N(2, 3)),
}
INPLACE_EXTRA = {  # method, args, input: integer tensors, squeeze of one dimension
    "abs_int": ("abs_", (), K(IA)), "relu_int": ("relu_", (), K(IA)),
    "square_int": ("square_", (), K(IA)), "squeeze_dim": ("squeeze_", (0,), N(1, 3, 1)),
    "squeeze_dim_kept": ("squeeze_", (1,), N(1, 3, 1)),
    "squeeze_dims": ("squeeze_", ((0, 2),), N(1, 3, 1)),
}


@pytest.mark.parametrize("case", sorted(INPLACE) + sorted(INPLACE_EXTRA))
def test_in_place_methods_match_torch_and_bump_the_version(case, torch_lib):
    torch, _ = torch_lib
    name, args, spec = (case, *INPLACE[case]) if case in INPLACE else INPLACE_EXTRA[case]
    a = _array(spec, 3)
    x, t = pa.tensor(a), torch.tensor(a)
    before = x._vc[0]
    assert getattr(x, name)(*args) is x
    getattr(t, name)(*args)
    _same(x, t)
    assert x._vc[0] > before


ALL_INPLACE = sorted(INPLACE) + ["uniform_", "normal_", "bernoulli_"]


@pytest.mark.parametrize("name", ALL_INPLACE)
def test_in_place_methods_refuse_leaves_that_require_grad_except_under_no_grad(name):
    args = {"unsqueeze_": (0,), "transpose_": (0, 1), "swapaxes_": (0, 1)}.get(name, ())
    w = pa.tensor(np.full((2, 2), 0.5), requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        getattr(w, name)(*args)
    y = w * 1.0                              # with a history: recorded (test_inplace_history)
    assert getattr(y, name)(*args) is y and y.grad_fn is not None
    assert np.array_equal(w.numpy(), np.full((2, 2), 0.5))
    with pa.no_grad():
        assert getattr(w, name)(*args) is w
    assert w.is_leaf and w.requires_grad


def test_a_view_keeps_its_shape_when_the_tensor_is_reshaped_in_place():
    x = pa.tensor(np.arange(6.0).reshape(2, 3))
    v = x[0]
    x.t_().unsqueeze_(0)
    assert x.shape == (1, 3, 2) and v.shape == (3,)
    x.mul_(2)                                # still the same memory
    assert np.array_equal(v.numpy(), [0.0, 2.0, 4.0])


# ---- random methods ------------------------------------------------------------------------------
def test_random_methods_draw_from_the_default_generator_and_keep_dtype():
    def draw():
        pa.manual_seed(7)
        return (pa.zeros(2000).uniform_(2, 5), pa.zeros(2000).normal_(1.0, 0.5),
                pa.zeros(2000, dtype=np.float32).bernoulli_(0.25),
                pa.tensor(np.full(2000, 0.75)).bernoulli())
    first, second = draw(), draw()
    for a, b in zip(first, second):
        assert np.array_equal(a.numpy(), b.numpy())
    u, n, b, c = first
    assert 2 <= u.numpy().min() and u.numpy().max() < 5 and abs(u.numpy().mean() - 3.5) < 0.1
    assert abs(n.numpy().mean() - 1.0) < 0.05 and abs(n.numpy().std() - 0.5) < 0.05
    assert b.dtype == np.float32 and set(np.unique(b.numpy())) <= {0.0, 1.0}
    assert abs(b.numpy().mean() - 0.25) < 0.05 and abs(c.numpy().mean() - 0.75) < 0.05
    f32 = pa.zeros(5000, dtype=np.float32).uniform_(0, 1e-7)
    assert f32.dtype == np.float32 and f32.numpy().max() < np.float32(1e-7)


def test_random_methods_take_a_generator_and_probability_tensors():
    a = pa.zeros(50).normal_(generator=np.random.default_rng(3))
    b = pa.zeros(50).normal_(generator=np.random.default_rng(3))
    assert np.array_equal(a.numpy(), b.numpy())
    p = pa.tensor(np.array([0.0, 1.0, 0.0, 1.0]))
    assert np.array_equal(pa.zeros(2, 4, dtype=np.int64).bernoulli_(p).numpy(), [[0, 1, 0, 1]] * 2)
    assert np.array_equal(p.bernoulli().numpy(), p.numpy())
    x = pa.tensor(np.full(3, 0.5), requires_grad=True)
    y = x.bernoulli()
    (g,) = pa.grad((y * x).sum(), [x])       # the draw's gradient is 0, as PyTorch's
    assert y.requires_grad and np.array_equal(g, y.numpy())


# ---- bad input: clear errors naming the method ---------------------------------------------------
def _f(*shape):
    return pa.tensor(np.ones(shape))


def _i(*shape):
    return pa.tensor(np.ones(shape, np.int64))


ERRORS = {
    # PyTorch without CUDA: AssertionError "Torch not compiled with CUDA enabled"; here an
    # error that is both a RuntimeError and an AssertionError
    "to_cuda": (lambda: _f(2).to("cuda"), RuntimeError, "to: Torch not compiled with CUDA"),
    "to_bad_dtype": (lambda: _f(2).to("bogus"), TypeError, "to: 'bogus' is not a dtype"),
    "to_twice": (lambda: _f(2).to(np.float32, dtype=np.float64), TypeError, "to: dtype given"),
    "to_complex_with_grad": (lambda: pa.tensor([1.0], requires_grad=True).to(np.complex128),
                             TypeError, "to: cannot convert"),
    "type_bad": (lambda: _f(2).type("torch.cuda.FloatTensor"), TypeError, "type: "),
    "new_zeros_negative": (lambda: _f(2).new_zeros(2, -1), ValueError, "new_zeros: negative"),
    "new_ones_device": (lambda: _f(2).new_ones(2, device="cuda:0"), AssertionError,
                        "new_ones: "),
    "new_full_int_grad": (lambda: _i(2).new_full((2,), 1, requires_grad=True), TypeError,
                          "only floating point"),
    "stride_dim": (lambda: _f(2).stride(3), IndexError, "stride: dimension out of range"),
    # PyTorch's exception types (RuntimeError; NotImplementedError, one, for a dtype)
    "add_float_alpha_int": (lambda: _i(2).add(_i(2), alpha=0.5), RuntimeError,
                            "add: For integral input tensors"),
    "add_bool_alpha_float": (lambda: _f(2).add(_f(2), alpha=True), RuntimeError,
                             "add: Boolean alpha"),
    "sub_bools": (lambda: pa.tensor([True]) - pa.tensor([False]), RuntimeError,
                  "sub: Subtraction, the `-` operator, with two bool tensors"),
    "div_rounding_mode": (lambda: _f(2).div(2, rounding_mode="round"), RuntimeError,
                          "div: expected rounding_mode"),
    "fmod_int_zero": (lambda: _i(2).fmod(0), RuntimeError, "fmod: ZeroDivisionError"),
    "remainder_int_zero": (lambda: _i(2) % pa.tensor([1, 0]), RuntimeError,
                           "remainder: ZeroDivisionError"),
    "floor_divide_int_zero": (lambda: _i(2) // 0, RuntimeError, "floor_divide: ZeroDivision"),
    "div_trunc_int_zero": (lambda: _i(2).div(0, rounding_mode="trunc"), RuntimeError,
                           "div: ZeroDivisionError"),
    "frac_int": (lambda: _i(2).frac(), NotImplementedError, "frac: not implemented for dtype"),
    "lerp_int": (lambda: _i(2).lerp(_i(2), 0.5), NotImplementedError, "lerp: not implemented"),
    "addcdiv_int": (lambda: _f(2).addcdiv(_i(2), _i(2)), RuntimeError,
                    "addcdiv: Integer division"),
    "clamp_no_bound": (lambda: _f(2).clamp(), RuntimeError, "clamp: At least one of"),
    "pow_int_negative": (lambda: _i(2).pow(-1), RuntimeError, "pow: Integers to negative"),
    "mm_vector": (lambda: _f(2).mm(_f(2, 2)), RuntimeError, "mm: input must be a 2-D"),
    "mm_shapes": (lambda: _f(2, 3).mm(_f(2, 3)), RuntimeError, r"mm: input and mat2 shapes .*2x3"),
    "bmm_batches": (lambda: _f(2, 2, 2).bmm(_f(1, 2, 2)), RuntimeError, "bmm: shapes"),
    "mv_size": (lambda: _f(2, 2).mv(_f(3)), RuntimeError, "mv: size mismatch"),
    "dot_size": (lambda: _f(2).dot(_f(3)), RuntimeError, "dot: the vectors must have the same"),
    "dot_dtype": (lambda: _f(2).dot(_f(2).float()), RuntimeError, "dot: expected both vectors"),
    "outer_matrix": (lambda: _f(2, 2).outer(_f(3)), RuntimeError, "outer: input must be a 1-D"),
    "addmm_input": (lambda: _f(3, 3).addmm(_f(2, 2), _f(2, 2)), RuntimeError, "addmm: input"),
    "cross_no_three": (lambda: _f(2, 4).cross(_f(2, 4)), RuntimeError, "cross: no dimension"),
    "cross_dim": (lambda: _f(3, 4).cross(_f(3, 4), dim=1), RuntimeError, "cross: inputs dim"),
    "cross_ndim": (lambda: _f(2, 3).cross(_f(3)), RuntimeError, "cross: inputs must have the"),
    "matrix_power_square": (lambda: _f(2, 3).matrix_power(2), RuntimeError,
                            "linalg.matrix_power: A must be batches of square"),
    "matrix_power_n": (lambda: _f(2, 2).matrix_power(1.5), TypeError, "matrix_power: n must"),
    "diag_3d": (lambda: _f(2, 2, 2).diag(), RuntimeError, "diag: supports 1-D or 2-D"),
    "trace_3d": (lambda: _f(2, 2, 2).trace(), RuntimeError, "trace: input must be a 2-D"),
    "logical_shapes": (lambda: _f(2).logical_and(_f(3)), ValueError, "logical_and: "),
    "invert_float": (lambda: ~_f(2), TypeError, "bitwise_not: "),
    "any_dim": (lambda: _f(2).any(dim=3), IndexError, "any: Dimension out of range"),
    "argsort_dim": (lambda: _f(2).argsort(dim=2), IndexError, "argsort: "),
    # PyTorch's types: IndexError for a dim a 0-d tensor lacks, RuntimeError for bincount
    # (NotImplementedError, one, for a float input)
    "unique_0d_dim": (lambda: pa.tensor(1.0).unique(dim=0), IndexError,
                      "unique: Dimension specified as 0"),
    "bincount_float": (lambda: _f(2).bincount(), NotImplementedError,
                       "bincount: not implemented for dtype float64"),
    "bincount_negative": (lambda: pa.tensor([1, -1]).bincount(), RuntimeError,
                          "bincount: only supports 1-d non-negative"),
    "bincount_2d": (lambda: _i(2, 2).bincount(), RuntimeError, "bincount: only supports 1-d"),
    "bincount_weights": (lambda: _i(2).bincount(_f(3)), RuntimeError, "bincount: weights"),
    "bincount_minlength": (lambda: _i(2).bincount(minlength=-1), RuntimeError, "minlength"),
    "bitwise_float": (lambda: _f(2).bitwise_and(_f(2)), NotImplementedError,
                      "bitwise_and: not implemented for dtype float64"),
    "shift_float": (lambda: _i(2) << 2.0, NotImplementedError, "bitwise_left_shift: "),
    "masked_select_int_mask": (lambda: _f(2).masked_select(_i(2)), RuntimeError,
                               "masked_select: only supports boolean masks"),
    "masked_select_shapes": (lambda: _f(2).masked_select(pa.tensor([True] * 3)), RuntimeError,
                             r"masked_select: the size of mask \[3\]"),
    "t_3d": (lambda: _f(2, 2, 2).t(), RuntimeError, r"t\(\) expects a tensor with <= 2"),
    "unflatten_sizes": (lambda: _f(2, 6).unflatten(1, (4, -1)), RuntimeError,
                        r"unflatten: Provided sizes \[4, -1\]"),
    "tensor_split_0d": (lambda: pa.tensor(1.0).tensor_split(2), RuntimeError,
                        "tensor_split expected at least a 1-dimensional"),
    "tensor_split_sections": (lambda: _f(4).tensor_split(0), RuntimeError,
                              "tensor_split: number of sections"),
    "tensor_split_float": (lambda: _f(4).tensor_split(_f(2)), RuntimeError,
                           "tensor_split expected tensor_indices_or_sections to have integer"),
    "repeat_interleave_negative": (lambda: _f(2).repeat_interleave(-1), RuntimeError,
                                   "repeat_interleave: Repeats must be non-negative"),
    "repeat_interleave_size": (lambda: _f(3).repeat_interleave(pa.tensor([1, 2]), dim=0),
                               RuntimeError, "repeat_interleave: repeats must have the same"),
    "repeat_interleave_output_size": (lambda: _f(3).repeat_interleave(2, output_size=5),
                                      RuntimeError, "repeat_interleave: output_size"),
    "select_0d": (lambda: pa.tensor(1.0).select(0, 0), IndexError,
                  r"select\(\) cannot be applied to a 0-dim"),
    "select_index": (lambda: _f(3).select(0, 5), IndexError, r"select\(\): index 5 out of range"),
    "select_dim": (lambda: _f(3).select(2, 0), IndexError, "select: Dimension out of range"),
    "sum_to_size": (lambda: _f(2, 3).sum_to_size(3, 3), RuntimeError,
                    r"sum_to_size: size \[3, 3\] is not expandable"),
    "expand_as": (lambda: _f(2, 3).expand_as(_f(3, 2)), RuntimeError,
                  r"expand: The expanded size of the tensor \(3\) must match"),
    "view_as": (lambda: _f(2, 3).view_as(_f(4)), RuntimeError,
                r"reshape: shape '\[4\]' is invalid for input of size 6"),
    "cummax_dim": (lambda: _f(2).cummax(1), IndexError, "cummax: Dimension out of range"),
    "logcumsumexp_int": (lambda: _i(2).logcumsumexp(0), NotImplementedError,
                         "logcumsumexp: not implemented for int64"),
    "exp__int": (lambda: _i(2).exp_(), TypeError, "exp_: "),
    "sigmoid__int": (lambda: _i(2).sigmoid_(), TypeError, "sigmoid_: result type float"),
    "unsqueeze__dim": (lambda: _f(2).unsqueeze_(3), IndexError, "unsqueeze_: dimension out"),
    "t__3d": (lambda: _f(2, 2, 2).t_(), ValueError, "t_: expects a tensor with <= 2"),
    "uniform__range": (lambda: _f(2).uniform_(2, 1), ValueError, r"uniform_: expects .*\[from"),
    "uniform__int": (lambda: _i(2).uniform_(), TypeError, "uniform_: expected a floating"),
    "normal__std": (lambda: _f(2).normal_(0, -1), ValueError, "normal_: normal expects std"),
    "bernoulli__p": (lambda: _f(2).bernoulli_(1.5), ValueError,
                     r"bernoulli_: expects p to be in \[0, 1\], but got p=1.5"),
    "bernoulli_probabilities": (lambda: pa.tensor([0.5, 2.0]).bernoulli(), ValueError,
                                "bernoulli: expects p to be in"),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_bad_input_raises_naming_the_method(name):
    call, kind, match = ERRORS[name]
    with pytest.raises(kind, match=match):
        call()


def test_failed_in_place_methods_change_nothing():
    x = pa.tensor(np.array([1, -2, 3]))
    for call in (x.sigmoid_, x.exp_, x.rsqrt_, lambda: x.unsqueeze_(5)):
        with pytest.raises((TypeError, IndexError)):
            call()
    assert np.array_equal(x.numpy(), [1, -2, 3]) and x._vc[0] == 0


def test_the_function_forms_are_in_the_package():
    x = pa.tensor(np.array([[1.0, -2.0], [3.0, 0.5]]), requires_grad=True)
    assert np.array_equal(pa.fmod(x, 2.0).numpy(), x.fmod(2.0).numpy())
    assert pa.equal(pa.cross(pa.ones(3), x[0].repeat(2)[:3], dim=0),
                    pa.ones(3).cross(x[0].repeat(2)[:3], dim=0))
    assert np.array_equal(pa.unique(pa.tensor([2, 1, 2])).numpy(), [1, 2])
    assert pa.logcumsumexp(x, 0).grad_fn is not None and pa.trace(x).item() == 1.5
