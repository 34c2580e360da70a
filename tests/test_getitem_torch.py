"""`x[index]` against PyTorch on a generated grid of index expressions (issue 27: numpy put
the dimensions of `x[1, :, d]`'s index tensor first, PyTorch keeps them in place).

Every tuple of up to three parts drawn from ints, slices, None, Ellipsis, integer index
tensors (1-D, 2-D, repeated, negative, lists), boolean masks (1-D, 2-D), Python bools and
0-d integer tensors, on a 4-D tensor, plus a seeded sample of longer ones: the same values,
shape, dtype and gradient as PyTorch's, a view (sharing memory and the version counter)
exactly where PyTorch's result is one, and the index given as numpy arrays instead of
tensors gives the same. Then the top-level forms (a list, a tensor, a mask, PyTorch's
list-as-tuple rule with its warning), 0-d and 1-D inputs, second derivatives, and the
errors PyTorch raises.
"""
from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

import parallel_autograd as pa

torch = pytest.importorskip("torch")

SHAPE = (3, 4, 5, 6)
KINDS = "istneaAmMbfzl"   # the parts an index is made of (see `_part`)


def _consumed(kind: str) -> int:
    return {"i": 1, "s": 1, "t": 1, "a": 1, "A": 1, "m": 1, "M": 2, "z": 1, "l": 1}.get(kind, 0)


def _valid(kinds: tuple) -> bool:
    return kinds.count("e") <= 1 and sum(_consumed(k) for k in kinds) <= len(SHAPE)


def _dims_of(kinds: tuple) -> list:
    """The first dimension of the indexed tensor each part takes (None: takes none)."""
    used = sum(_consumed(k) for k in kinds)
    out, d = [], 0
    for k in kinds:
        out.append(d if _consumed(k) else None)
        d += _consumed(k) + (len(SHAPE) - used if k == "e" else 0)
    return out


def _part(kind: str, d, lib):
    """One index part for the dimension `d` it takes, as `lib` (pa, torch or np) takes it."""
    tensor = (lambda a: np.asarray(a)) if lib is np else lib.tensor
    n = SHAPE[d] if d is not None else 0
    if kind == "i":
        return -2
    if kind == "s":
        return slice(None)
    if kind == "t":
        return slice(1, 3)
    if kind == "n":
        return None
    if kind == "e":
        return Ellipsis
    if kind == "a":
        return tensor(np.array([2, -1]))           # distinct, one negative
    if kind == "A":
        return tensor(np.array([[1], [1]]))        # repeated: the gradient accumulates
    if kind == "m":
        return tensor(np.arange(n) % 2 == 0 if n < 4 else np.isin(np.arange(n), [0, 3]))
    if kind == "M":
        m = np.zeros((n, SHAPE[d + 1]), bool)
        m[0, 1] = m[2, 0] = True
        return tensor(m)
    if kind == "b":
        return True
    if kind == "f":
        return False
    if kind == "z":
        return tensor(np.array(1))
    return [0, 2]                                   # "l": a list inside the tuple


def _index(kinds: tuple, lib) -> tuple:
    return tuple(_part(k, d, lib) for k, d in zip(kinds, _dims_of(kinds)))


def _grid() -> list:
    out = [k for n in (1, 2, 3) for k in itertools.product(KINDS, repeat=n) if _valid(k)]
    rng = np.random.default_rng(27)
    longer = set()
    while len(longer) < 400:
        k = tuple(rng.choice(list(KINDS), rng.integers(4, 7)))
        if _valid(k):
            longer.add(k)
    return out + sorted(longer)


GRID = _grid()
X = np.random.default_rng(0).standard_normal(SHAPE)


def _check(kinds: tuple) -> None:
    x, tx = pa.tensor(X, requires_grad=True), torch.tensor(X, requires_grad=True)
    try:
        want = tx[_index(kinds, torch)]
    except (IndexError, RuntimeError, ValueError) as e:   # PyTorch refuses: so do we
        with pytest.raises(type(e) if isinstance(e, IndexError) else Exception):
            x[_index(kinds, pa)]
        return
    got = x[_index(kinds, pa)]
    assert got.shape == tuple(want.shape), (kinds, got.shape, tuple(want.shape))
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got.numpy(), want.detach().numpy(), err_msg=str(kinds))
    view = want._base is not None
    assert np.shares_memory(got.numpy(), x.numpy()) == (view and want.numel() > 0), kinds
    assert (got._vc is x._vc) == view, kinds
    np.testing.assert_array_equal(x[_index(kinds, np)].numpy(), got.numpy(), err_msg=str(kinds))
    w = np.random.default_rng(1).standard_normal(got.shape)
    (g,) = pa.grad(got, [x], grad_outputs=w)
    (tg,) = torch.autograd.grad(want, [tx], torch.tensor(w))
    np.testing.assert_allclose(g, tg.numpy(), rtol=1e-14, atol=0, err_msg=str(kinds))


@pytest.mark.timeout(900)
def test_the_grid_of_index_expressions_matches_pytorch():
    assert len(GRID) > 2500
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                   # (PyTorch's own deprecations)
        for kinds in GRID:
            _check(kinds)


def test_an_int_and_an_index_tensor_apart_keep_the_tensors_place():
    """Issue 27's example: `x[1, :, 3:11:2, d, 0:2]` is (3, 4, 3, 2, 2) in PyTorch; numpy's
    placement (and this library's before) made it (3, 2, 3, 4, 2)."""
    x = pa.tensor(np.arange(2 * 3 * 16 * 7 * 5.0).reshape(2, 3, 16, 7, 5), requires_grad=True)
    d = np.array([[0, 1], [2, 3], [4, 5]])
    y = x[1, :, 3:11:2, d, 0:2]
    tx = torch.tensor(x.numpy(), requires_grad=True)
    ty = tx[1, :, 3:11:2, torch.tensor(d), 0:2]
    assert y.shape == tuple(ty.shape) == (3, 4, 3, 2, 2)
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    (g,) = pa.grad(y.sum(), [x])
    ty.sum().backward()
    np.testing.assert_array_equal(g, tx.grad.numpy())


@pytest.mark.parametrize("index", [
    [0, 2, 2], [True, False, True], [], range(2), np.array([1, 0]), np.int64(1), np.array(2),
    np.array([[0, 1], [2, 2]]), (np.array([0, 1]),), [[0, 1], [1, 2]], [0, [1, 2]],
    [slice(0, 2), None], [np.array([0, 2]), 1], ((0, 1),), [(0, 1)]])
def test_top_level_forms_match_pytorch(index):
    """A list is an index tensor unless it holds a sequence, a tensor, a slice, None or
    Ellipsis: then PyTorch reads it as a tuple (deprecated, with its warning)."""
    x = pa.tensor(X[:, :3, 0, 0], requires_grad=True)
    tx = torch.tensor(x.numpy(), requires_grad=True)
    with warnings.catch_warnings(record=True) as tw:
        warnings.simplefilter("always")
        want = tx[index]
    with warnings.catch_warnings(record=True) as pw:
        warnings.simplefilter("always")
        got = x[index]
    assert got.shape == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.detach().numpy())
    assert bool(pw) == bool(tw), (pw, tw)
    if got.numel():
        (g,) = pa.grad(got.sum(), [x])
        want.sum().backward()
        np.testing.assert_array_equal(g, tx.grad.numpy())


@pytest.mark.parametrize("index", [None, Ellipsis, (), True, False, (None, Ellipsis),
                                   (True, None)])
def test_zero_dim_input(index):
    x = pa.tensor(np.array(1.5), requires_grad=True)
    tx = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    got, want = x[index], tx[index]
    assert got.shape == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.detach().numpy())
    assert (got._vc is x._vc) == (want._base is not None)
    with pytest.raises(IndexError, match="invalid index of a 0-dim tensor"):
        x[0]


def test_an_int_gives_a_zero_dim_view_as_pytorch():
    """`v[1]` of a 1-D tensor is a 0-d view (numpy's scalar was a copy: a write through
    `v[1]` went unseen, and a write into v did not bump the counter of what v[1] saved)."""
    v = pa.tensor(np.arange(3.0))
    e = v[1]
    assert e.shape == () and np.shares_memory(e.numpy(), v.numpy()) and e._vc is v._vc
    e.numpy()[...] = 7.0
    assert v.numpy()[1] == 7.0


def test_uint8_tensor_is_a_mask_with_pytorchs_warning():
    x = pa.tensor(X[:, 0, 0, 0])
    tx = torch.tensor(x.numpy())
    m = np.array([1, 0, 1], np.uint8)
    with pytest.warns(UserWarning, match="uint8 is now deprecated"):
        got = x[pa.tensor(m)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = tx[torch.tensor(m)]
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("kinds", [("i", "s", "a"), ("a", "s", "i", "a"), ("M", "b", "z"),
                                   ("e", "A", "n", "a"), ("t", "m", "l")])
def test_second_derivatives_through_getitem(kinds):
    x = pa.tensor(X, requires_grad=True)
    assert pa.gradgradcheck(lambda t: t[_index(kinds, pa)] ** 2, [x])
