"""Pointwise arithmetic (ops/pointwise.py) against PyTorch where the registry's samples do not
reach: tensor bounds of clamp at and across each other, PyTorch's exception types for bad
input, and the names issue 27 found missing (copysign, logaddexp, ...)."""
from __future__ import annotations

import numpy as np
import pytest

import parallel_autograd as pa

torch = pytest.importorskip("torch")


def _both(fn, *arrays, grad=()):
    """fn on pa tensors and on torch tensors made from `arrays` (those at `grad` require
    grad): (pa result, torch result, pa inputs, torch inputs)."""
    xs = [pa.tensor(a, requires_grad=i in grad) for i, a in enumerate(arrays)]
    ts = [torch.tensor(a, requires_grad=i in grad) for i, a in enumerate(arrays)]
    return fn(pa, *xs), fn(torch, *ts), xs, ts


@pytest.mark.parametrize("grad", [(0,), (0, 1, 2)])
def test_clamp_tensor_bounds_at_and_across_each_other_match_torch(grad):
    # elementwise: lo < hi, lo == hi (x below, inside, above) and lo > hi (max everywhere);
    # x's gradient used to be 0 everywhere as soon as one lo > hi, and at lo == hi both
    # bounds got a gradient PyTorch gives to neither
    x = np.array([0.5, 2.0, -1.0, 0.3, 0.7, 0.5, 0.0])
    lo = np.array([0.0, 3.0, 0.2, 0.3, 0.2, 0.9, -1.0])
    hi = np.array([1.0, 1.0, 0.2, 0.3, 0.2, 0.1, 1.0])
    y, ty, xs, ts = _both(lambda lib, a, b, c: lib.clamp(a, b, c), x, lo, hi, grad=grad)
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    w = np.arange(1.0, 8.0)
    got = pa.grad(y, [xs[i] for i in grad], grad_outputs=w)
    want = torch.autograd.grad(ty, [ts[i] for i in grad], torch.tensor(w))
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b.numpy())


def test_clamp_min_and_clamp_max_tensor_bounds_match_torch():
    x, b = np.array([0.5, 2.0, -1.0, 0.3]), np.array([0.0, 3.0, 0.2, 0.3])
    for name in ("clamp_min", "clamp_max"):
        y, ty, xs, ts = _both(lambda lib, a, c, f=name: getattr(lib, f)(a, c), x, b,
                              grad=(0, 1))
        w = np.arange(1.0, 5.0)
        for a, t in zip(pa.grad(y, xs, grad_outputs=w),
                        torch.autograd.grad(ty, ts, torch.tensor(w))):
            np.testing.assert_array_equal(a, t.numpy(), err_msg=name)


def _i(*values):
    return np.array(values, np.int64)


# each bad call made on both libraries: pa must raise PyTorch's exception type
BAD = {
    "add_float_alpha_int": lambda L: L.add(L.tensor(_i(1, 2)), L.tensor(_i(1, 2)), alpha=0.5),
    "add_bool_alpha": lambda L: L.add(L.tensor([1.0]), L.tensor([1.0]), alpha=True),
    "sub_bools": lambda L: L.tensor([True]) - L.tensor([False]),
    "rsub_bools": lambda L: L.sub(L.tensor([True]), L.tensor([True])),
    "div_rounding_mode": lambda L: L.div(L.tensor([1.0]), 2, rounding_mode="round"),
    "div_trunc_int_zero": lambda L: L.div(L.tensor(_i(1)), 0, rounding_mode="trunc"),
    "floor_divide_int_zero": lambda L: L.tensor(_i(1, 2)) // 0,
    "fmod_int_zero": lambda L: L.fmod(L.tensor(_i(1, 2)), L.tensor(_i(1, 0))),
    "remainder_int_zero": lambda L: L.tensor(_i(1, 2)) % L.tensor(_i(1, 0)),
    "frac_int": lambda L: L.frac(L.tensor(_i(1, 2))),
    "lerp_int": lambda L: L.lerp(L.tensor(_i(1, 2)), L.tensor(_i(1, 2)), 0.5),
    "addcdiv_int": lambda L: L.addcdiv(L.tensor([1.0]), L.tensor(_i(1)), L.tensor(_i(2))),
    "clamp_no_bound": lambda L: L.clamp(L.tensor([1.0])),
    "pow_int_negative": lambda L: L.pow(L.tensor(_i(1, 2)), -1),
    "positive_bool": lambda L: L.positive(L.tensor([True])),
    "neg_bool": lambda L: -L.tensor([True]),
    "fmod_bools": lambda L: L.fmod(L.tensor([True]), L.tensor([True])),
    "remainder_bools": lambda L: L.tensor([True]) % L.tensor([True]),
    "floor_divide_bools": lambda L: L.floor_divide(L.tensor([True]), L.tensor([True])),
    "div_floor_bools": lambda L: L.div(L.tensor([True]), L.tensor([True]),
                                       rounding_mode="floor"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_raises_pytorchs_exception_type(name):
    with pytest.raises(Exception) as theirs:
        BAD[name](torch)
    with pytest.raises(Exception) as ours:
        BAD[name](pa)
    assert isinstance(ours.value, type(theirs.value)), (type(ours.value), theirs.value)


@pytest.mark.parametrize("name", ["copysign", "logaddexp", "logaddexp2"])
def test_names_issue_27_found_missing(name):
    x = np.array([[-1.5, 0.0, 2.0], [0.5, -0.0, -3.0]])
    y = np.array([0.7, -1.2, 2.5])
    got, want, xs, ts = _both(lambda L, a, b: getattr(L, name)(a, b), x, y, grad=(0, 1))
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-14)
    np.testing.assert_allclose(getattr(xs[0], name)(xs[1]).numpy(), got.numpy(), rtol=0)
    w = np.ones(x.shape)
    for a, b in zip(pa.grad(got, xs, grad_outputs=w),
                    torch.autograd.grad(want, ts, torch.tensor(w))):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-14, atol=0)


def test_positive_and_where_method_match_torch():
    x = np.array([1.0, -2.0, 3.0])
    got, want, _, _ = _both(lambda L, a: (+a, L.positive(a), a.where(a > 0, 0.5)), x)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_integer_powers_with_negative_exponents_in_a_tensor_match_torch():
    # PyTorch computes them (1, +-1 or 0); numpy raised ValueError
    base, exponent = np.array([2, 1, -1, -1, 0, 3, -2]), np.array([-1, -5, -3, -2, -1, 2, 3])
    got, want, _, _ = _both(lambda L, a, b: L.pow(a, b), base, exponent)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    got, want, _, _ = _both(lambda L, b: L.pow(2, b), exponent)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_sign_of_bools_is_themselves():
    got, want, _, _ = _both(lambda L, a: (L.sign(a), L.sgn(a)), np.array([True, False]))
    for a, b in zip(got, want):
        assert a.dtype == np.bool_ and b.dtype == torch.bool
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_alpha_and_rounding_mode_work_on_the_functions():
    # issue 27: pa.add/pa.sub were the operators' ops without alpha, pa.div without
    # rounding_mode (only the methods took them)
    x, y = np.array([7.0, -7.0, 2.5]), np.array([2.0, 2.0, -1.5])
    calls = [lambda L, a, b: L.add(a, b, alpha=2.5), lambda L, a, b: L.sub(a, b, alpha=-2),
             lambda L, a, b: L.div(a, b, rounding_mode="floor"),
             lambda L, a, b: L.div(a, b, rounding_mode="trunc"),
             lambda L, a, b: L.subtract(a, b, alpha=3), lambda L, a, b: L.divide(a, b)]
    for call in calls:
        got, want, _, _ = _both(call, x, y)
        np.testing.assert_array_equal(got.numpy(), want.numpy())


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("name", ["abs", "atan2", "clamp_min", "clamp_max"])
def test_gradients_at_nan_inf_and_the_origin_match_torch(name):
    # abs: g sign(x) is 0 at NaN (was NaN); atan2: 0 at the origin and where x^2 + y^2
    # underflows (was NaN); clamp_min/max: no gradient to the bound where x or it is NaN
    x = np.array([NAN, 0.0, 1e-200, 0.0, INF, 1.0, 1.0, -2.0, 0.5])
    y = np.array([1.0, 0.0, 1e-200, -0.0, 1.0, INF, NAN, 3.0, 0.5])
    fn = {"abs": lambda L, a, b: L.abs(a) * b}.get(name, lambda L, a, b: getattr(L, name)(a, b))
    got, want, xs, ts = _both(fn, x, y, grad=(0, 1))
    np.testing.assert_array_equal(got.numpy(), want.detach().numpy())
    w = np.arange(1.0, 10.0)
    for a, b in zip(pa.grad(got, xs, grad_outputs=w),
                    torch.autograd.grad(want, ts, torch.tensor(w))):
        np.testing.assert_array_equal(a, b.numpy())
