"""PyTorch's shape and index ops (parallel_autograd/ops/index.py): values and gradients
against PyTorch, first and second derivatives by finite differences (gradcheck,
gradgradcheck: the twins), third order against PyTorch for the adjoint pairs, scatter's
repeated indices, bad input (named, nothing recorded), the parallel engine bit for bit."""
from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import parallel_autograd as pa
from parallel_autograd.node import next_seq
from conftest import assert_bitwise

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(15)


def r(*shape):
    return RNG.uniform(-1.5, 1.5, shape)


def _idx(L, a):
    """An index array as the library `L` takes it (PyTorch wants int64 tensors)."""
    return torch.tensor(np.asarray(a), dtype=torch.int64 if np.asarray(a).dtype.kind in "iu"
                        else None) if L is torch else np.asarray(a)


def B(L, a):
    return torch.tensor(np.asarray(a)) if L is torch else np.asarray(a)


IDX_G = np.array([[0, 3, 3], [1, 0, 2]])           # gather/scatter_add along dim 1, repeats
IDX_S = np.array([[4, 0, 2], [1, 3, 0]])           # scatter along dim 1: distinct per row
MASK = RNG.uniform(size=(3, 4)) > 0.5

# name -> (fn(L, *tensors), input arrays): the same code runs on pa and on torch
CASES = {
    "repeat": (lambda L, x: x.repeat(2, 1, 3), [r(2, 3)]),
    "repeat_tuple": (lambda L, x: x.repeat((2, 2)), [r(2, 3)]),
    "tile_short": (lambda L, x: L.tile(x, (2,)), [r(2, 3)]),
    "tile_method": (lambda L, x: x.tile(2, 1, 2), [r(2, 3)]),
    "flip": (lambda L, x: L.flip(x, (0, 2)), [r(2, 3, 2)]),
    "flip_method": (lambda L, x: x.flip(1), [r(2, 3)]),
    "roll_flat": (lambda L, x: L.roll(x, 2), [r(2, 3)]),
    "roll_dims": (lambda L, x: L.roll(x, (1, -2), (0, 2)), [r(2, 3, 4)]),
    "roll_method": (lambda L, x: x.roll(1, 1), [r(2, 3)]),
    "tril": (lambda L, x: L.tril(x, -1), [r(2, 3, 4)]),
    "triu": (lambda L, x: x.triu(1), [r(4, 3)]),
    "diagonal": (lambda L, x: x.diagonal(), [r(3, 4)]),
    "diagonal_dims": (lambda L, x: L.diagonal(x, 1, 0, 2), [r(3, 2, 4)]),
    "diagonal_negative": (lambda L, x: L.diagonal(x, -1, -1, 0), [r(3, 2, 4)]),
    "diag_embed": (lambda L, x: L.diag_embed(x), [r(2, 3)]),
    "diag_embed_dims": (lambda L, x: L.diag_embed(x, 1, 0, 2), [r(2, 3)]),
    "diag_embed_negative": (lambda L, x: x.diag_embed(-2, -1, 1), [r(2, 3)]),
    "gather": (lambda L, x: L.gather(x, 1, _idx(L, IDX_G)), [r(3, 4)]),
    "gather_dim0": (lambda L, x: x.gather(0, _idx(L, [[2, 0], [2, 1], [0, 0]])), [r(3, 4)]),
    "scatter": (lambda L, x, s: L.scatter(x, 1, _idx(L, IDX_S), s), [r(3, 5), r(2, 3)]),
    "scatter_method": (lambda L, x, s: x.scatter(0, _idx(L, [[1, 0], [2, 1]]), s),
                       [r(3, 2), r(2, 2)]),
    "scatter_value": (lambda L, x: L.scatter(x, 1, _idx(L, IDX_S), 2.5), [r(3, 5)]),
    "scatter_add": (lambda L, x, s: L.scatter_add(x, 1, _idx(L, IDX_G), s), [r(3, 4), r(2, 3)]),
    "scatter_add_method": (lambda L, x, s: x.scatter_add(0, _idx(L, [[0, 0, 1]]), s),
                           [r(2, 3), r(1, 3)]),
    "scatter_reduce_sum": (lambda L, x, s: L.scatter_reduce(x, 1, _idx(L, IDX_G), s, "sum"),
                           [r(3, 4), r(2, 3)]),
    "scatter_reduce_mean_noself": (lambda L, x, s: x.scatter_reduce(
        1, _idx(L, IDX_G), s, "mean", include_self=False), [r(3, 4), r(2, 3)]),
    "scatter_reduce_amax": (lambda L, x, s: L.scatter_reduce(x, 1, _idx(L, IDX_G), s, "amax"),
                            [r(3, 4), r(2, 3)]),
    "scatter_reduce_amin_noself": (lambda L, x, s: L.scatter_reduce(
        x, 0, _idx(L, [[2, 0, 2, 1]]), s, "amin", include_self=False), [r(3, 4), r(1, 4)]),
    "index_select": (lambda L, x: L.index_select(x, 0, _idx(L, [2, 0, 2])), [r(3, 4)]),
    "index_select_last": (lambda L, x: x.index_select(-1, _idx(L, [1, 1, 0, 3])), [r(2, 4)]),
    "index_add": (lambda L, x, s: L.index_add(x, 1, _idx(L, [2, 0, 2]), s), [r(2, 4), r(2, 3)]),
    "index_add_alpha": (lambda L, x, s: x.index_add(0, _idx(L, [1, 1]), s, alpha=-2.0),
                        [r(3, 2), r(2, 2)]),
    "masked_fill": (lambda L, x: L.masked_fill(x, B(L, MASK), -0.5), [r(3, 4)]),
    "masked_fill_broadcast": (lambda L, x: x.masked_fill(B(L, MASK[:1]), 2.0), [r(3, 4)]),
    "masked_fill_bigger_mask": (lambda L, x: L.masked_fill(x, B(L, MASK), 0.0), [r(1, 4)]),
    "masked_fill_tensor_value": (lambda L, x, v: L.masked_fill(x, B(L, MASK), v),
                                 [r(3, 4), np.array(0.7)]),
    "masked_scatter": (lambda L, x, s: L.masked_scatter(x, B(L, MASK), s), [r(3, 4), r(4, 4)]),
    "masked_scatter_broadcast": (lambda L, x, s: x.masked_scatter(B(L, MASK[:, :1]), s),
                                 [r(3, 4), r(13)]),
    "take_along_dim": (lambda L, x: L.take_along_dim(x, _idx(L, [[0, 2], [1, 1], [2, 0]]), 1),
                       [r(3, 4)]),
    "take_along_dim_flat": (lambda L, x: x.take_along_dim(_idx(L, [5, 0, 5, 11])), [r(3, 4)]),
    "take_along_dim_broadcast": (lambda L, x: L.take_along_dim(x, _idx(L, [[0, 2], [1, 1]]), 1),
                                 [r(1, 3)]),
    "narrow": (lambda L, x: L.narrow(x, 1, 1, 2), [r(2, 4)]),
    "narrow_negative_start": (lambda L, x: x.narrow(0, -2, 2), [r(3, 2)]),
    "movedim": (lambda L, x: L.movedim(x, 0, -1), [r(2, 3, 4)]),
    "movedim_many": (lambda L, x: x.movedim((0, 1), (2, 0)), [r(2, 3, 4)]),
    "unbind": (lambda L, x: sum(t * (i + 1) for i, t in enumerate(L.unbind(x, 1))), [r(2, 3)]),
    "chunk": (lambda L, x: L.cat([c * (i + 1) for i, c in enumerate(x.chunk(3, 1))], 1),
              [r(2, 5)]),
}

EINSUM = {
    "matmul": ("ij,jk->ik", [(2, 3), (3, 4)]),
    "implicit": ("ij,jk", [(2, 3), (3, 4)]),
    "implicit_sorted": ("bA", [(2, 3)]),
    "batched": ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]),
    "diagonal": ("ii->i", [(3, 3)]),
    "trace": ("ii", [(3, 3)]),
    "repeated_and_summed": ("iij->j", [(2, 2, 3)]),
    "ellipsis_broadcast": ("...ij,...jk->...ik", [(2, 1, 3, 2), (3, 2, 2)]),
    "ellipsis_summed": ("...i->i", [(2, 3)]),
    "ellipsis_middle": ("i...j,j->i...", [(2, 3, 2), (2,)]),
    "dot": ("i,i->", [(4,), (4,)]),
    "outer": ("i,j->ij", [(3,), (2,)]),
    "sum": ("ij->", [(2, 3)]),
    "transpose": ("ij->ji", [(2, 3)]),
    "three_operands": ("ijk,ikl,lm->jm", [(2, 2, 3), (2, 3, 2), (2, 2)]),
    "labelled_broadcast": ("ij,ij->ij", [(2, 3), (1, 3)]),
    "summed_broadcast": ("ij,ij->i", [(2, 3), (2, 1)]),
    "summed_size_one": ("ij,kj->", [(2, 3), (1, 3)]),
    "zero_size": ("ij,kj->ik", [(2, 0), (3, 0)]),
    "bilinear": ("bn,anm,bm->ba", [(2, 3), (2, 3, 2), (2, 2)]),
    "spaces": (" ij , jk -> ki ", [(2, 3), (3, 2)]),
}
for _name, (_eq, _shapes) in EINSUM.items():
    CASES["einsum_" + _name] = ((lambda eq: lambda L, *xs: L.einsum(eq, *xs))(_eq),
                                [r(*s) for s in _shapes])


def _run(L, name):
    fn, arrays = CASES[name]
    if L is pa:
        xs = [pa.tensor(a, requires_grad=True) for a in arrays]
    else:
        xs = [torch.tensor(a, requires_grad=True) for a in arrays]
    return xs, fn(L, *xs)


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_match_pytorch(name):
    xs, out = _run(pa, name)
    ts, want = _run(torch, name)
    assert out.shape == tuple(want.shape) and out.dtype == np.float64
    assert np.allclose(out.numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-12)
    w = RNG.uniform(0.5, 1.5, out.shape)
    grads = pa.grad(out, xs, grad_outputs=w, allow_unused=True)
    tgrads = torch.autograd.grad(want, ts, torch.tensor(w), allow_unused=True)
    for g, tg in zip(grads, tgrads):
        tg = np.zeros(g.shape) if tg is None else tg.numpy()
        assert np.allclose(g, tg, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
def test_first_and_second_derivatives_by_finite_differences(name):
    fn, arrays = CASES[name]
    xs = [pa.tensor(a, requires_grad=True) for a in arrays]
    assert pa.gradcheck(lambda *t: fn(pa, *t), xs)
    # squared: the second derivative goes through the op's rule and its twin
    assert pa.gradgradcheck(lambda *t: fn(pa, *t) ** 2, xs)


THIRD = {  # the adjoint pairs: the twin of the twin runs the pair's other fast rule
    "gather": lambda L, x: L.gather(x, 1, _idx(L, IDX_G)),
    "scatter_add": lambda L, x: L.scatter_add(x * 0.5, 1, _idx(L, IDX_G), x[:2, :3]),
    "scatter": lambda L, x: L.scatter(x, 1, _idx(L, [[3, 0], [1, 2]]), x[1:, :2]),
    "index_select": lambda L, x: L.index_select(x, 1, _idx(L, [3, 0, 3])),
    "index_add": lambda L, x: L.index_add(x, 1, _idx(L, [3, 0, 3]), x[:, :3], alpha=0.5),
    "diagonal": lambda L, x: L.diag_embed(L.diagonal(x, 1), -1),
    "einsum": lambda L, x: L.einsum("ij,kj,ii->ik", x[:, :3], x[:, 1:], x[:, :3]),
    "masked_scatter": lambda L, x: L.masked_scatter(x, B(L, MASK), x.flip(0)),
    "repeat_flip_roll": lambda L, x: L.roll(x.repeat(1, 2).flip(1), 3, 1).tril(1),
}


@pytest.mark.parametrize("name", sorted(THIRD))
def test_third_derivative_matches_pytorch(name):
    a = r(3, 4)
    v1, v2 = RNG.uniform(0.5, 1.5, (2, 3, 4))

    def third(L, x):
        y = THIRD[name](L, x)
        f = (y * y * y).sum()
        grad = torch.autograd.grad if L is torch else pa.grad
        (g,) = grad(f, [x], create_graph=True)
        (h,) = grad((g * B(L, v1)).sum(), [x], create_graph=True)
        (k,) = grad((h * B(L, v2)).sum(), [x])
        return k

    got = third(pa, pa.tensor(a, requires_grad=True))
    want = third(torch, torch.tensor(a, requires_grad=True)).numpy()
    assert np.allclose(got, want, rtol=1e-10, atol=1e-12)


def test_scatter_with_repeated_indices_takes_the_last_write_and_its_gradient():
    x = pa.tensor(np.zeros((2, 3)), requires_grad=True)
    src = pa.tensor(np.arange(1.0, 7.0).reshape(2, 3), requires_grad=True)
    index = np.array([[1, 1, 0], [2, 0, 2]])   # row 0: column 1 twice; row 1: column 2 twice
    out = pa.scatter(x, 1, index, src)
    assert np.array_equal(out.numpy(), [[3.0, 2.0, 0.0], [5.0, 0.0, 6.0]])
    gx, gs = pa.grad(out, [x, src], grad_outputs=np.arange(1.0, 7.0).reshape(2, 3))
    assert np.array_equal(gx, [[0.0, 0.0, 3.0], [0.0, 5.0, 0.0]])
    assert np.array_equal(gs, [[0.0, 2.0, 1.0], [0.0, 4.0, 6.0]])  # only the winners
    assert pa.gradcheck(lambda a, b: pa.scatter(a, 1, index, b), [x, src])
    assert pa.gradgradcheck(lambda a, b: pa.scatter(a, 1, index, b) ** 2, [x, src])


@pytest.mark.parametrize("op", ["scatter", "scatter_add"])
def test_a_larger_src_gives_its_leading_block(op):
    # PyTorch's forward allows it (its backward raises: a PyTorch limitation)
    x, s = pa.tensor(r(3, 5), requires_grad=True), pa.tensor(r(3, 4), requires_grad=True)
    f = getattr(pa, op)
    want = getattr(torch, op)(torch.tensor(x.numpy()), 1, torch.tensor(IDX_S),
                              torch.tensor(s.numpy()))
    assert np.array_equal(f(x, 1, IDX_S, s).numpy(), want.numpy())
    (gs,) = pa.grad(f(x, 1, IDX_S, s).sum(), [s])
    assert np.array_equal(gs, np.pad(np.ones((2, 3)), ((0, 1), (0, 1))))
    assert pa.gradcheck(lambda a, b: f(a, 1, IDX_S, b), [x, s])
    assert pa.gradgradcheck(lambda a, b: f(a, 1, IDX_S, b) ** 2, [x, s])


def test_scatter_add_and_index_add_accumulate_repeats():
    out = pa.scatter_add(pa.zeros(4), 0, np.array([1, 1, 3, 1]), pa.ones(4))
    assert np.array_equal(out.numpy(), [0.0, 3.0, 0.0, 1.0])
    out = pa.index_add(pa.zeros(3, 2), 0, [2, 2], pa.ones(2, 2), alpha=3)
    assert np.array_equal(out.numpy(), [[0, 0], [0, 0], [6, 6]])


def test_masked_fill_value_gets_no_gradient_unless_a_tensor_that_requires_it():
    x = pa.tensor(r(3, 4), requires_grad=True)
    v = pa.tensor(0.25, requires_grad=True)
    frozen = pa.tensor(0.25)
    (gv,) = pa.grad(pa.masked_fill(x, MASK, v).sum(), [v])
    assert gv.shape == () and gv == MASK.sum()
    out = x.masked_fill(MASK, frozen)
    assert out.grad_fn is not None and np.array_equal(out.numpy()[MASK], np.full(MASK.sum(), 0.25))
    f32 = pa.tensor(r(3, 4), dtype=np.float32, requires_grad=True)
    out = pa.masked_fill(f32, MASK, v)              # a float64 value into float32
    assert out.dtype == np.float32
    gx, gv = pa.grad(out.sum(), [f32, v])
    assert gx.dtype == np.float32 and gv.dtype == np.float64 and gv == MASK.sum()


def test_float32_stays_float32():
    x = pa.tensor(r(3, 4), dtype=np.float32, requires_grad=True)
    s = pa.tensor(r(3, 4), dtype=np.float32, requires_grad=True)  # (src: input's dtype)
    outs = [x.repeat(2, 1), x.flip(0), x.roll(1), x.tril(), x.diagonal(), x.diag_embed(),
            x.gather(1, IDX_G), x.scatter(1, IDX_S[:, :2] % 4, s), x.scatter_add(1, IDX_G, s),
            x.index_select(0, [0]), x.masked_fill(MASK, 1), x.masked_scatter(MASK, s),
            pa.einsum("ij->j", x), x.narrow(0, 1, 1), x.movedim(0, 1)]
    for out in outs:
        assert out.dtype == np.float32
        gx, gs = pa.grad(out.sum(), [x, s], allow_unused=True)
        assert gx.dtype == np.float32 and (gs is None or gs.dtype == np.float32)


def test_einsum_forms_and_numpy_agreement():
    a, b, c = r(2, 3), r(3, 4), r(4)
    want = np.einsum("ij,jk,k->i", a, b, c)
    ta, tb, tc = (pa.tensor(v, requires_grad=True) for v in (a, b, c))
    assert np.allclose(pa.einsum("ij,jk,k->i", ta, tb, tc).numpy(), want, rtol=1e-13)
    assert np.allclose(pa.einsum("ij,jk,k->i", [ta, tb, tc]).numpy(), want, rtol=1e-13)
    out = pa.einsum(ta, [0, 1], tb, [1, 2], tc, [2], [0])          # numpy's sublist form
    assert np.allclose(out.numpy(), want, rtol=1e-13)
    assert np.allclose(pa.einsum(ta, [Ellipsis, 1], tb, [1, 2]).numpy(), a @ b)
    assert pa.einsum("i,->i", tc, 2.0).shape == (4,)               # a scalar operand
    big = pa.einsum("ij,jk->ik", pa.randn(80, 90, seed=1), pa.randn(90, 70, seed=2))
    assert big.grad_fn is None and big.shape == (80, 70)           # the optimized path
    assert pa.gradcheck(lambda x, y, z: pa.einsum(x, [0, 1], y, [1, 2], z, [2], [0]),
                        [ta, tb, tc])


@pytest.mark.parametrize("eq, shapes", [
    ("ij,jk->ik", [(70, 60), (60, 80)]),
    ("ii,ij->j", [(70, 70), (70, 3)]),                 # a diagonal: an identity constant
    ("bij,j->bi", [(4, 40, 30), (30,)]),
    ("ij,kj->", [(70, 60), (1, 60)]),                  # summed and broadcast: ones
])
def test_einsum_of_large_operands_takes_the_optimized_path(eq, shapes):
    arrays = [r(*s) for s in shapes]
    xs = [pa.tensor(a, requires_grad=True) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, want = pa.einsum(eq, *xs), torch.einsum(eq, *ts)
    assert np.allclose(out.numpy(), want.detach().numpy(), rtol=1e-11, atol=1e-11)
    w = RNG.uniform(0.5, 1.5, out.shape)
    for g, e in zip(pa.grad(out, xs, grad_outputs=w),
                    torch.autograd.grad(want, ts, torch.tensor(w))):
        assert np.allclose(g, e.numpy(), rtol=1e-11, atol=1e-11)


def test_chunk_unbind_and_views():
    x = pa.tensor(np.arange(10.0).reshape(2, 5), requires_grad=True)
    pieces = pa.chunk(x, 3, 1)
    assert [p.shape for p in pieces] == [(2, 2), (2, 2), (2, 1)]
    assert len(pa.chunk(x, 6, 1)) == 5 and len(pa.chunk(pa.zeros(0), 3)) == 3
    rows = x.unbind()
    assert isinstance(rows, tuple) and np.array_equal(rows[1].numpy(), np.arange(5.0, 10.0))
    assert x.narrow(1, 2, 0).shape == (2, 0) and x.narrow(1, 5, 0).shape == (2, 0)
    flipped = x.flip(0)
    flipped.numpy()[0, 0] = 100.0                                       # a copy, as PyTorch
    assert x.numpy()[1, 0] == 5.0
    m = pa.tensor(np.zeros((3, 3)))
    d = m.diagonal()                                                 # a view, as PyTorch
    d[1] = 5.0
    assert m.numpy()[1, 1] == 5.0 and m._vc is d._vc and m._vc[0] > 0


@pytest.mark.parametrize("call, kind, words", [
    (lambda x: pa.gather(x, 1, np.array([[0.0, 1.0]])), RuntimeError,
     "gather(): Expected dtype int32/int64 for index"),
    (lambda x: pa.gather(x, 1, np.array([[0, 4]])), RuntimeError, "gather: index 4 is out of"),
    (lambda x: pa.gather(x, 1, np.array([[0, -1]])), RuntimeError, "gather: index -1 is out"),
    (lambda x: pa.gather(x, 2, np.array([[0]])), IndexError, "gather: Dimension out of range"),
    (lambda x: pa.gather(x, 1, np.array([0])), RuntimeError,
     "gather(): Index tensor must have the same number of dimensions"),
    (lambda x: pa.gather(x, 1, np.zeros((4, 1), int)), RuntimeError,
     "gather(): Expected index [4, 1] to be no larger than self [3, 4]"),
    (lambda x: pa.scatter(x, 1, np.zeros((1, 3), int), pa.ones(1, 2)), RuntimeError,
     "to be no larger size than src [1, 2]"),
    (lambda x: pa.scatter(x, 1, np.zeros((1, 1), int)), TypeError, "scatter(): src or value"),
    (lambda x: pa.scatter(x, 1, np.zeros((1, 1), int), 1.0, reduce="max"), RuntimeError,
     "scatter(): reduce argument must be either add or multiply"),
    (lambda x: pa.scatter(pa.ones(3, 4).float(), 1, np.zeros((1, 1), int), pa.ones(1, 1)),
     RuntimeError,
     "scatter(): Expected self.dtype to be equal to src.dtype"),
    (lambda x: pa.scatter_add(x, 0, np.array([[3]]), pa.ones(1, 1)), RuntimeError,
     "scatter_add: index 3"),
    (lambda x: pa.scatter_add(x, 0, np.array([[0]]), pa.ones(1, 1).float()), RuntimeError,
     "scatter_add(): Expected self.dtype to be equal to src.dtype"),
    (lambda x: pa.scatter_reduce(x, 0, np.array([[0]]), pa.ones(1, 1), "max"), RuntimeError,
     "scatter_reduce(): reduce argument must be one of"),
    (lambda x: pa.index_select(x, 0, np.array([[0]])), IndexError,
     "index_select(): Index is supposed to be a vector"),
    (lambda x: pa.index_select(x, 0, [5]), IndexError, "index_select(): index 5 out of range"),
    (lambda x: pa.index_add(x, 0, [0], pa.ones(2, 4)), RuntimeError, "index_add_(): source must"),
    (lambda x: pa.index_add(x, 0, [0], pa.ones(1, 4).float()), RuntimeError,
     "index_add_(): self (float64) and source (float32) must have the same scalar type"),
    (lambda x: pa.masked_fill(x, np.ones((3, 4)), 1.0), RuntimeError,
     "masked_fill: only supports boolean masks"),
    (lambda x: pa.masked_fill(x, np.ones((2, 4), bool), 1.0), RuntimeError,
     "masked_fill: the size of mask [2, 4] must match"),
    (lambda x: pa.masked_fill(x, MASK, pa.ones(2)), RuntimeError,
     "masked_fill: only supports a 0-dimensional value tensor"),
    (lambda x: pa.masked_scatter(x, MASK | True, pa.ones(3)), RuntimeError,
     "masked_scatter: Number of elements of source (3) < number of ones in mask (12)"),
    (lambda x: pa.masked_scatter(x, MASK, pa.ones(12).float()), RuntimeError,
     "masked_scatter: expected self and source to have same dtypes"),
    (lambda x: pa.take_along_dim(x, np.array([0]), 1), RuntimeError,
     "take_along_dim(): input and indices should have the same number of dimensions"),
    (lambda x: pa.diagonal(x, 0, 1, -1), RuntimeError,
     "diagonal: diagonal dimensions cannot be identical 1, -1"),
    (lambda x: pa.diag_embed(pa.tensor(1.0, requires_grad=True)), IndexError,
     "diag_embed(): Dimension out of range"),
    (lambda x: pa.einsum("ij,jk", x), ValueError, "einsum: the equation 'ij,jk' has 2"),
    (lambda x: pa.einsum("i#", x), ValueError, "einsum: invalid subscript '#'"),
    (lambda x: pa.einsum("ijk", x), ValueError, "einsum: operand 0 has 2 dimensions"),
    (lambda x: pa.einsum("ij,ij", x, pa.tensor(r(4, 3), requires_grad=True)), ValueError,
     "einsum:"),
    (lambda x: pa.einsum("ij->ik", x), ValueError, "output subscript 'k'"),
    (lambda x: pa.einsum(x, [0, 60]), ValueError, "einsum: subscripts"),
    (lambda x: x[np.array([0.5])], IndexError,
     "tensors used as indices must be long, int, byte or bool tensors"),
    (lambda x: x[1, 2, 3], IndexError, "too many indices for tensor of dimension 2"),
    (lambda x: x[..., 1, ...], IndexError, "an index can only have a single ellipsis"),
    (lambda x: x[5], IndexError, "getitem: index 5 is out of bounds"),
    (lambda x: x[:, [4]], IndexError, "getitem: index 4 is out of bounds"),
    (lambda x: x["a"], IndexError, "only integers, slices"),
])
def test_bad_input_names_the_op_and_records_nothing(call, kind, words):
    x = pa.tensor(r(3, 4), requires_grad=True)
    before = next_seq()
    with pytest.raises(kind, match=re.escape(words)):
        call(x)
    assert next_seq() == before + 1               # no node was made


def test_integer_and_boolean_inputs_take_no_gradient():
    idx = pa.tensor(np.array([2, 0]))
    x = pa.tensor(r(3), requires_grad=True)
    out = pa.index_select(x, 0, idx)
    assert out.requires_grad and not idx.requires_grad
    ints = pa.gather(pa.tensor(np.arange(6).reshape(2, 3)), 1, np.array([[2], [0]]))
    assert ints.grad_fn is None and ints.dtype.kind == "i"


def test_parallel_engine_is_bitwise_equal_to_the_sequential_one():
    a = pa.tensor(r(4, 5), requires_grad=True)
    b = pa.tensor(r(5, 3), requires_grad=True)
    m = RNG.uniform(size=(4, 5)) > 0.4

    def loss():
        e = pa.einsum("ij,jk->ik", a, b)                                       # (4, 3)
        g = e.gather(1, np.array([[0, 2], [1, 1], [2, 0], [0, 0]]))
        s = pa.scatter_add(a, 1, np.array([[0, 4, 4]] * 4), e.tanh())
        t = s.masked_fill(m, 0.5).roll(2, 1).flip(0).tril(1)
        u = pa.index_add(t, 0, [3, 1], t.index_select(0, [0, 0]) * 2)
        d = pa.diag_embed(u.diagonal()).repeat(1, 2) * pa.movedim(b, 0, 1).sum()
        parts = pa.chunk(d, 2, 1) + pa.unbind(g, 1)
        return sum((p * p).sum() for p in parts) + pa.take_along_dim(
            u, np.array([[4], [0], [2], [1]]), 1).sum()

    want = pa.grad(loss(), [a, b])
    with pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0) as eng:
        got = eng.grad(loss(), [a, b])
    assert_bitwise(want, got)
    want2 = pa.grad(pa.grad(loss(), [a], create_graph=True)[0].sum(), [a, b])
    with pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0) as eng:
        (ga,) = eng.grad(loss(), [a], create_graph=True)
        got2 = eng.grad(ga.sum(), [a, b])
    assert_bitwise(want2, got2)


def test_scatter_reduce_ties_and_reduce_argument_match_torch():
    """amax/amin ties share the gradient as PyTorch splits it (its count includes input's
    element whenever it equals the result, even without include_self); scatter's
    reduce="add"; a reduce PyTorch does not know is refused by name."""
    rng = np.random.default_rng(5)
    for reduce in ("amax", "amin"):
        for include_self in (True, False):
            x, src = np.round(rng.standard_normal((4, 5))), np.round(rng.standard_normal((3, 5)))
            idx = rng.integers(0, 4, (3, 5))
            xp, sp = pa.tensor(x, requires_grad=True), pa.tensor(src, requires_grad=True)
            xt, st = torch.tensor(x, requires_grad=True), torch.tensor(src, requires_grad=True)
            yp = pa.scatter_reduce(xp, 0, idx, sp, reduce, include_self=include_self)
            yt = torch.scatter_reduce(xt, 0, torch.tensor(idx), st, reduce,
                                      include_self=include_self)
            g = rng.standard_normal((4, 5))
            pa.backward(yp, g)
            yt.backward(torch.tensor(g))
            assert np.array_equal(yp.numpy(), yt.detach().numpy())
            np.testing.assert_allclose(xp.grad, xt.grad.numpy(), rtol=1e-14, atol=1e-15)
            np.testing.assert_allclose(sp.grad, st.grad.numpy(), rtol=1e-14, atol=1e-15)
    x, idx = np.zeros((3, 4)), np.array([[0, 1, 0, 2], [0, 0, 1, 2]])
    src = np.arange(8.0).reshape(2, 4)
    want = torch.zeros(3, 4).double().scatter_add(0, torch.tensor(idx), torch.tensor(src))
    assert np.array_equal(pa.scatter(pa.tensor(x), 0, idx, src, reduce="add").numpy(), want)
    with pytest.raises(RuntimeError, match="reduce argument must be one of"):
        pa.scatter_reduce(pa.tensor(x), 0, idx, src, "maximum")
    with pytest.raises(RuntimeError, match="out of bounds"):
        pa.scatter_reduce(pa.tensor(x), 0, idx + 3, src, "sum")


# ---- scatter_reduce "prod", scatter(reduce="multiply"), dtypes (issue 27) ------------------------
def _both(fn, *arrays):
    """fn on pa and on torch: results and the leaves (float arrays require grad)."""
    xs = [pa.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    ts = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    return (xs, fn(pa, *xs)), (ts, fn(torch, *ts))


def _same_values_and_grads(fn, *arrays):
    (xs, y), (ts, ty) = _both(fn, *arrays)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-13, atol=1e-14)
    w = RNG.uniform(0.5, 1.5, y.shape)
    leaves = [x for x in xs if x.requires_grad]
    tleaves = [t for t in ts if t.requires_grad]
    for g, tg in zip(pa.grad(y, leaves, grad_outputs=w, allow_unused=True),
                     torch.autograd.grad(ty, tleaves, torch.tensor(w), allow_unused=True)):
        assert (g is None) == (tg is None)
        if g is not None:
            np.testing.assert_allclose(g, tg.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("case", ["plain", "zero_in_input", "one_zero_per_element",
                                  "two_zeros_one_element"])
def test_scatter_reduce_prod_values_and_gradients_match_pytorch(case, include_self):
    """'prod' was refused (NotImplementedError); now PyTorch's value and its gradient, whose
    zeros get the product of the others (ans / value would divide by 0)."""
    x, src = r(3, 4), r(2, 4)
    idx = np.array([[0, 1, 2, 0], [0, 2, 2, 3]])
    if case == "zero_in_input":
        x[0, 0] = x[2, 2] = 0.0
    elif case == "one_zero_per_element":
        src[0, 1] = src[1, 3] = 0.0
    elif case == "two_zeros_one_element":
        src[1, 1] = src[1, 2] = 0.0                  # both to element (1, 2)
        x[0, 3] = 0.0
    _same_values_and_grads(lambda L, a, b: L.scatter_reduce(
        a, 1, _idx(L, idx), b, "prod", include_self=include_self), x, src)


def test_scatter_reduce_prod_second_derivative_and_pytorchs_refusal():
    x, src = r(3, 4), r(2, 4)
    idx = np.array([[0, 1, 2, 0], [0, 2, 2, 3]])
    src[0, 1] = 0.0
    xs = [pa.tensor(x, requires_grad=True), pa.tensor(src, requires_grad=True)]
    assert pa.gradgradcheck(lambda a, b: pa.scatter_reduce(a, 1, idx, b, "prod"), xs)
    src[1, 1] = src[1, 2] = 0.0                      # two zeros meet: PyTorch refuses twice
    xs = [pa.tensor(x, requires_grad=True), pa.tensor(src, requires_grad=True)]
    y = pa.scatter_reduce(xs[0], 1, idx, xs[1], "prod")
    (gs,) = pa.grad(y.sum(), [xs[1]], create_graph=True)
    with pytest.raises(RuntimeError, match="Double backward is unsupported for src when >1 "
                                           "zeros"):
        pa.grad(gs.sum(), [xs[1]])


@pytest.mark.parametrize("reduce", ["add", "multiply"])
@pytest.mark.parametrize("value", [None, 1.5])
def test_scatter_with_reduce_matches_pytorchs_values(reduce, value):
    """reduce="multiply" was refused; PyTorch has no gradient for either reduce (ours:
    scatter_reduce's with the input included)."""
    x, src, idx = r(3, 4), r(2, 4), np.array([[0, 1, 2, 0], [0, 2, 2, 3]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")             # (PyTorch deprecates reduce= with src)
        want = torch.scatter(torch.tensor(x), 1, torch.tensor(idx),
                             torch.tensor(src) if value is None else value, reduce=reduce)
    got = pa.scatter(pa.tensor(x), 1, idx, src if value is None else value, reduce=reduce)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-14)
    name = {"add": "sum", "multiply": "prod"}[reduce]
    xs = [pa.tensor(x, requires_grad=True), pa.tensor(src, requires_grad=True)]
    if value is None:
        a = pa.grad(pa.scatter(xs[0], 1, idx, xs[1], reduce=reduce).sum(), xs)
        b = pa.grad(pa.scatter_reduce(xs[0], 1, idx, xs[1], name).sum(), xs)
        for g, h in zip(a, b):
            assert_bitwise(g, h)


@pytest.mark.parametrize("op", ["scatter", "scatter_add", "scatter_reduce", "index_add",
                                "masked_scatter", "scatter_multiply"])
def test_a_src_of_another_dtype_raises_as_pytorch(op):
    """scatter of float32 into float16 was cast silently; PyTorch raises RuntimeError (and so
    for the other ops that write a src/source into input)."""
    x16 = np.zeros((3, 4), np.float16)
    s32 = np.ones((3, 4), np.float32)
    idx = np.zeros((3, 4), np.int64)
    calls = {
        "scatter": lambda L, x, s: L.scatter(x, 1, _idx(L, idx), s),
        "scatter_add": lambda L, x, s: L.scatter_add(x, 1, _idx(L, idx), s),
        "scatter_reduce": lambda L, x, s: L.scatter_reduce(x, 1, _idx(L, idx), s, "sum"),
        "index_add": lambda L, x, s: L.index_add(x, 0, _idx(L, [0, 1, 2]), s),
        "masked_scatter": lambda L, x, s: L.masked_scatter(x, B(L, MASK), s),
        "scatter_multiply": lambda L, x, s: L.scatter(x, 1, _idx(L, idx), s, reduce="multiply"),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError):
            calls[op](torch, torch.tensor(x16), torch.tensor(s32))
    with pytest.raises(RuntimeError, match="dtype|scalar type|dtypes"):
        calls[op](pa, pa.tensor(x16), pa.tensor(s32))


def test_zero_dim_inputs_of_the_index_ops_match_pytorch():
    """PyTorch takes a 0-d input (as 1-D) in gather, scatter, scatter_add, scatter_reduce,
    index_select and index_add; they refused it ("input must have at least 1 dimension")."""
    calls = {
        "gather": lambda L, x, s: L.gather(x, 0, _idx(L, [0, 0])),
        "scatter": lambda L, x, s: L.scatter(x, 0, _idx(L, 0), s),
        "scatter_add": lambda L, x, s: L.scatter_add(x, 0, _idx(L, 0), s),
        "scatter_reduce": lambda L, x, s: L.scatter_reduce(x, 0, _idx(L, 0), s, "prod"),
        "index_select": lambda L, x, s: L.index_select(x, 0, _idx(L, [0])),
        "index_add": lambda L, x, s: L.index_add(x, 0, _idx(L, [0]), s),
        "take_along_dim": lambda L, x, s: L.take_along_dim(x, _idx(L, [0, 0])),
        "masked_fill": lambda L, x, s: L.masked_fill(x, B(L, np.array(True)), s),
    }
    for _name, call in calls.items():
        _same_values_and_grads(call, np.array(1.5), np.array(-2.0))


def test_einsum_is_declared_and_a_frozen_operand_costs_its_node_nothing():
    # issue 26: one declared op (`einsum_contract`: a Joint formula of einsums, the numpy
    # kernel tested equal to it by the registry walk); its kernel contracts only for the
    # operands that take a gradient (the forward's needs_input_grad), as the per-operand
    # rules did
    from parallel_autograd.primitive import REGISTRY
    ops = {op.name: op for op in REGISTRY}
    assert ops["einsum"].composite and ops["einsum_contract"].has_kernel
    x = pa.tensor(np.ones((2, 3)), requires_grad=True)
    w = pa.tensor(np.ones((3, 4)))
    y = pa.einsum("ij,jk->ik", x, w)
    node = y.grad_fn
    assert node.name == "einsum_contract" and node.saved[0] is None   # (ans: never read)
    gx, gw = node.joint(np.ones((2, 4)), *node.saved, **node.kwargs)
    assert gw is None and gx.shape == (2, 3)


# ---- the index family's internal ops: the registry's checks ----------------------------------
# (getitem and its adjoint, scatter's two forms, diagonal_backward: declared, not exported, so
# the registry walk does not see them; samples_index.INTERNAL holds their samples)
def _internal_index_ops():
    from parallel_autograd.primitive import REGISTRY   # noqa: PLC0415
    return {op.name: op for op in REGISTRY
            if op.family == "index" and not op.export and not op.composite}


CHECKED_ELSEWHERE = {
    "einsum_contract": "einsum's node: the walk runs the registry checks through einsum",
    "delayed_error": "once_differentiable's refusing node: it raises by design",
}


def test_every_internal_index_op_has_samples():
    import op_samples                                  # noqa: PLC0415, F401  (imports first)
    from samples_index import INTERNAL                 # noqa: PLC0415
    assert set(_internal_index_ops()) == set(INTERNAL) | set(CHECKED_ELSEWHERE)


@pytest.mark.parametrize("check", ["test_gradcheck_and_gradgradcheck",
                                   "test_kernel_equals_formula_at_first_order",
                                   "test_both_engines_agree_bitwise",
                                   "test_every_differentiable_input_has_a_formula"])
@pytest.mark.parametrize("name", ["diagonal_backward", "getitem", "index_accumulate",
                                  "scatter_src", "scatter_value"])
def test_the_registry_checks_pass_for_the_internal_index_ops(name, check, monkeypatch):
    import test_registry as registry                  # noqa: PLC0415  (its checks, reused)
    from samples_index import INTERNAL                 # noqa: PLC0415
    monkeypatch.setitem(registry.SAMPLES, name, INTERNAL[name])
    op = _internal_index_ops()[name]
    if check == "test_kernel_equals_formula_at_first_order" and not op.has_kernel:
        return
    getattr(registry, check)(op)
