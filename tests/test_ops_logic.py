"""Comparisons and logic (ops/logic.py) against PyTorch beyond the registry's samples: the
shift operators and functions issue 27 found missing, `pa.any`/`pa.all` as functions with
numpy's `axis=`, the operators, and PyTorch's exception types for bad input."""
from __future__ import annotations

import operator

import numpy as np
import pytest

import parallel_autograd as pa

torch = pytest.importorskip("torch")


def _same(got, want):
    want = want.numpy() if hasattr(want, "numpy") else np.asarray(want)
    assert str(got.dtype) == str(want.dtype), (got.dtype, want.dtype)
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("op", [operator.lshift, operator.rshift])
def test_shift_operators_and_functions_match_torch(op):
    a = np.array([1, -1, 3, 8, -8, 5, 1 << 40])
    b = np.array([64, 65, 63, -1, -2, 0, 30])
    name = "bitwise_left_shift" if op is operator.lshift else "bitwise_right_shift"
    x, y, tx, ty = pa.tensor(a), pa.tensor(b), torch.tensor(a), torch.tensor(b)
    _same(op(x, y), op(tx, ty))
    _same(op(x, 3), op(tx, 3))
    _same(op(2, x[:3].abs()), op(2, tx[:3].abs()))            # the reflected operator
    _same(getattr(pa, name)(x, y), getattr(torch, name)(tx, ty))
    _same(getattr(x, name)(y), getattr(tx, name)(ty))
    u, tu = pa.tensor(np.array([255, 3], np.uint8)), torch.tensor(np.array([255, 3], np.uint8))
    _same(op(u, 9), op(tu, 9))                               # beyond the width: 0


@pytest.mark.parametrize("name", ["any", "all"])
def test_any_all_are_functions_taking_dim_or_axis(name):
    a = np.array([[0.0, 1.0, 2.0], [0.0, 0.0, 3.0]])
    f, tf = getattr(pa, name), getattr(torch, name)
    x, t = pa.tensor(a), torch.tensor(a)
    _same(f(x), tf(t))
    _same(f(x, 1), tf(t, 1))
    _same(f(x, axis=0, keepdims=True), tf(t, dim=0, keepdim=True))
    _same(getattr(x, name)(axis=(0, 1)), getattr(t, name)(dim=(0, 1)))
    _same(f(pa.tensor(a.astype(np.uint8)), 0), tf(torch.tensor(a.astype(np.uint8)), 0))


def test_operators_give_the_ops_results():
    a, b = np.array([1, 2, 3, 4]), np.array([4, 2, 3, 1])
    x, y, tx, ty = pa.tensor(a), pa.tensor(b), torch.tensor(a), torch.tensor(b)
    for op in (operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne,
               operator.and_, operator.or_, operator.xor):
        _same(op(x, y), op(tx, ty))
        _same(op(x, 2), op(tx, 2))
    _same(~x, ~tx)
    _same(3 & x, 3 & tx)


def _i(*values):
    return np.array(values, np.int64)


# each bad call made on both libraries: pa must raise PyTorch's exception type
BAD = {
    "bitwise_float": lambda L: L.bitwise_and(L.tensor([1.0]), L.tensor([2.0])),
    "bitwise_not_float": lambda L: L.bitwise_not(L.tensor([1.0])),
    "invert_float": lambda L: ~L.tensor([1.0]),
    "shift_float": lambda L: L.tensor(_i(1, 2)) << L.tensor([1.0, 2.0]),
    "bincount_float": lambda L: L.bincount(L.tensor([1.0])),
    "bincount_bool": lambda L: L.bincount(L.tensor([True, False])),
    "bincount_2d": lambda L: L.bincount(L.tensor(np.ones((2, 2), np.int64))),
    "bincount_negative": lambda L: L.bincount(L.tensor(_i(1, -1))),
    "bincount_minlength": lambda L: L.bincount(L.tensor(_i(1)), minlength=-1),
    "bincount_weights": lambda L: L.bincount(L.tensor(_i(1, 2)), L.tensor([1.0])),
    "unique_0d_dim": lambda L: L.unique(L.tensor(1.0), dim=0),
    "any_dim": lambda L: L.tensor([1.0, 2.0]).any(dim=3),
    "argsort_dim": lambda L: L.argsort(L.tensor([1.0, 2.0]), dim=1),
    "count_nonzero_repeated": lambda L: L.count_nonzero(L.tensor(np.ones((2, 3))), (0, 0)),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_raises_pytorchs_exception_type(name):
    with pytest.raises(Exception) as theirs:
        BAD[name](torch)
    with pytest.raises(Exception) as ours:
        BAD[name](pa)
    assert isinstance(ours.value, type(theirs.value)), (type(ours.value), theirs.value)
