"""`t[index] = value` (parallel_autograd/ops/writes/setitem.py): plain writes (no_grad, nothing
requires grad) with the version counter, recorded differentiable writes (index_put, the
tensor re-pointed to the new node), against PyTorch and finite differences, repeated
indices, refused writes (leaf, views), saved values, the parallel engine bit for bit."""
from __future__ import annotations

import weakref

import numpy as np
import pytest

import parallel_autograd as pa
from conftest import assert_bitwise

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(151)
MASK = np.array([[True, False, True], [False, False, True], [True, True, False],
                 [False, True, False]])


def r(*shape):
    return RNG.uniform(-1.5, 1.5, shape)


def writes(L, a, b, c):
    """Several writes into a fresh buffer, overlapping, every kind of index; the same
    code on pa and torch (torch's write-backs are CopySlices)."""
    zeros = torch.zeros(4, 3, dtype=torch.float64) if L is torch else pa.zeros(4, 3)
    idx = (lambda v: torch.tensor(v)) if L is torch else np.asarray
    buf = zeros
    buf[0] = a                                # a row from a (3,) value
    buf[1:3] = b * 2                          # a block
    buf[:, 1] = a.sum() * c                   # overlaps both: column 1 rewritten
    buf[idx(MASK)] = (b.sum() + c) * 0.5      # a boolean mask, a 0-d value broadcast
    buf[idx([3, 0]), idx([2, 0])] = a[:2] ** 2  # integer arrays (distinct elements)
    buf[-1, ...] = buf[-1] * 1 * c            # the tensor's own values read back
    return buf * buf.sum(0)


def test_a_function_writing_into_a_fresh_tensor_matches_pytorch():
    a, b, c = r(3), r(2, 3), np.array(0.7)
    xs = [pa.tensor(v, requires_grad=True) for v in (a, b, c)]
    ts = [torch.tensor(v, requires_grad=True) for v in (a, b, c)]
    out, want = writes(pa, *xs), writes(torch, *ts)
    assert np.allclose(out.numpy(), want.detach().numpy(), rtol=1e-13, atol=1e-14)
    assert out.grad_fn.name == "mul"
    w = RNG.uniform(0.5, 1.5, out.shape)
    got = pa.grad(out, xs, grad_outputs=w)
    expected = torch.autograd.grad(want, ts, torch.tensor(w))
    for g, e in zip(got, expected):
        assert np.allclose(g, e.numpy(), rtol=1e-11, atol=1e-13)


def test_gradcheck_and_gradgradcheck_through_writes():
    xs = [pa.tensor(v, requires_grad=True) for v in (r(3), r(2, 3), np.array(0.7))]
    assert pa.gradcheck(lambda *t: writes(pa, *t), xs)
    assert pa.gradgradcheck(lambda *t: writes(pa, *t), xs)


def test_writing_into_a_tensor_with_history_matches_pytorch():
    def f(L, x, v):
        y = x * 3
        y[1] = v                       # overwrite a row of an op's result
        y[:, 0] = y[:, 0].exp()        # a column, from its own old values
        y[y.detach() > 1] = 0.0        # a mask computed from the values, a constant
        return y.tanh()

    x, v = r(3, 4), r(4)
    px, pv = pa.tensor(x, requires_grad=True), pa.tensor(v, requires_grad=True)
    tx, tv = torch.tensor(x, requires_grad=True), torch.tensor(v, requires_grad=True)
    out, want = f(pa, px, pv), f(torch, tx, tv)
    assert np.allclose(out.numpy(), want.detach().numpy(), rtol=1e-13)
    w = RNG.uniform(0.5, 1.5, out.shape)
    for g, e in zip(pa.grad(out, [px, pv], grad_outputs=w),
                    torch.autograd.grad(want, [tx, tv], torch.tensor(w))):
        assert np.allclose(g, e.numpy(), rtol=1e-11, atol=1e-13)
    assert pa.gradcheck(lambda a, b: f(pa, a, b), [px, pv])
    assert pa.gradgradcheck(lambda a, b: f(pa, a, b), [px, pv])


def test_repeated_integer_indices_the_last_write_wins_and_gets_the_gradient():
    v = pa.tensor([10.0, 20.0, 30.0, 40.0], requires_grad=True)
    t = pa.zeros(3)
    t[[0, 2, 0, 2]] = v                       # element 0: 10 then 30; element 2: 20 then 40
    assert np.array_equal(t.numpy(), [30.0, 0.0, 40.0])
    (g,) = pa.grad(t, [v], grad_outputs=np.array([1.0, 2.0, 3.0]))
    assert np.array_equal(g, [0.0, 0.0, 1.0, 3.0])
    s = pa.tensor(5.0, requires_grad=True)    # one value written twice counts once
    t = pa.zeros(3)
    t[[1, 1]] = s
    (gs,) = pa.grad(t, [s], grad_outputs=np.array([1.0, 2.0, 3.0]))
    assert gs == 2.0

    def f(x, y):
        out = x * 1
        out[np.array([[0, 1], [0, 1]]), np.array([2, 2])] = y   # (0,2) and (1,2) twice
        return out * out

    assert pa.gradcheck(f, [pa.tensor(r(2, 3), requires_grad=True),
                            pa.tensor(r(2, 2), requires_grad=True)])
    assert pa.gradgradcheck(f, [pa.tensor(r(2, 3), requires_grad=True),
                                pa.tensor(r(2, 2), requires_grad=True)])


def test_tensor_indices_and_changing_the_index_array_afterwards():
    v = pa.tensor([1.0, 2.0], requires_grad=True)
    t = pa.zeros(4)
    idx = np.array([3, 1])
    t[pa.tensor(idx)] = v
    t[pa.tensor(np.array([True, False, False, False]))] = v[1] * 5
    idx[:] = 0                                # the write kept its own copy
    (g,) = pa.grad(t, [v], grad_outputs=np.array([1.0, 2.0, 3.0, 4.0]))
    assert np.array_equal(t.numpy(), [10.0, 2.0, 0.0, 1.0]) and np.array_equal(g, [4.0, 7.0])


def test_chained_writes_into_an_array_no_one_else_sees_are_in_place():
    a = pa.tensor(r(3), requires_grad=True)
    buf = pa.zeros(5, 3)
    first = weakref.ref(buf.numpy())                 # (a reference would make it shared)
    buf[0] = a
    buf[1] = a * 2
    buf[2] = a.exp()
    buf[3] = a.sin()
    assert buf.numpy() is first() and buf.grad_fn.name == "index_put"   # written in place
    held = buf.numpy()                               # now someone else sees it: a copy
    buf[4] = a
    assert buf.numpy() is not held and not held[4].any()
    assert np.array_equal(buf.numpy()[4], a.numpy())
    (g,) = pa.grad(buf.sum(), [a])
    assert np.allclose(g, 4 + np.exp(a.numpy()) + np.cos(a.numpy()))


def test_a_saved_array_is_never_overwritten_by_a_recorded_write():
    x = pa.tensor(r(4), requires_grad=True)
    v = pa.tensor(0.5, requires_grad=True)
    e = x.exp()                                   # exp's rule reads its saved output
    old = e.numpy()
    before = old.copy()
    e[1] = v
    assert e.numpy() is not old and np.array_equal(old, before)   # written into a new array
    gx, gv = pa.grad(e.sum(), [x, v])
    want = np.exp(x.numpy())
    want[1] = 0.0
    assert np.allclose(gx, want) and gv == 1.0    # (PyTorch raises here: exp saved e)


def test_a_plain_write_over_a_saved_value_fails_backward_clearly():
    w = pa.tensor(r(3), requires_grad=True)
    c = pa.tensor([1.0, 2.0, 3.0])
    y = w * c                                     # mul saved c
    c[0] = 5.0                                    # plain: nothing requires grad
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    assert w.grad is None
    e = w.exp()
    with pa.no_grad():
        e[2] = 0.0                                # exp's saved output overwritten
    with pytest.raises(RuntimeError, match="modified by an inplace operation.*exp"):
        pa.grad(e.sum(), [w])
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        with pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0) as eng:
            eng.grad(e.sum(), [w])


def test_no_grad_writes_are_plain_and_bump_the_version():
    w = pa.tensor([1.0, 2.0, 3.0], requires_grad=True)
    arr, vc = w.numpy(), w._vc
    epoch = vc[0]
    with pa.no_grad():
        w[0] = 10.0
        w[np.array([1, 2])] = pa.tensor([4.0, 5.0], requires_grad=True)
    assert w.is_leaf and w.requires_grad and w.numpy() is arr and w._vc is vc and vc[0] > epoch
    assert np.array_equal(arr, [10.0, 4.0, 5.0])
    c = pa.tensor(np.zeros((2, 2)))
    view = c[0]
    c[0, 1] = 7.0                                 # grad mode on, nothing requires grad
    assert view.numpy()[1] == 7.0 and c.grad_fn is None and not c.requires_grad


def test_a_leaf_that_requires_grad_is_refused():
    w = pa.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used "
                                           "in an in-place operation"):
        w[0] = 5.0
    assert np.array_equal(w.numpy(), [1.0, 2.0]) and w.is_leaf


def test_writes_through_views_of_tensors_are_refused():
    x = pa.tensor(r(3, 4), requires_grad=True)
    y = x * 2
    before = y.numpy().copy()
    for view in (y[0], y.T, y.reshape(12), y[:, 1:]):
        with pytest.raises(RuntimeError, match="view of another tensor"):
            view[1] = pa.tensor(1.0, requires_grad=True)
    assert np.array_equal(y.numpy(), before) and y.grad_fn.name == "mul"
    buf = pa.zeros(3, 4)                          # a view of a tensor without grad too
    with pytest.raises(RuntimeError, match="view of another tensor"):
        buf[0][1] = x[0, 0]
    assert not buf.numpy().any() and not buf.requires_grad
    fresh = pa.zeros(12).reshape(3, 4)            # a view no other tensor shares: fine
    fresh[0, 1] = x[0, 0]
    assert fresh.grad_fn.name == "index_put"


def test_bad_writes_raise_before_anything_changes():
    v = pa.tensor(r(3), requires_grad=True)
    t = pa.zeros(2, 3)
    with pytest.raises(ValueError, match=r"setitem: a value of shape \(3,\) cannot be written "
                                         r"into a selection of shape \(2, 2\)"):
        t[:, :2] = v
    with pytest.raises(IndexError, match="setitem: index 5 is out of bounds"):
        t[5] = v
    with pytest.raises(IndexError, match="setitem:"):
        t[5] = 1.0                                # a plain write names the op too
    ints = pa.tensor(np.zeros(3, dtype=np.int64))
    with pytest.raises(TypeError, match="setitem: a value that requires grad cannot be "
                                        "written into a tensor of dtype int64"):
        ints[0] = v[0]
    assert not t.numpy().any() and t.grad_fn is None and not ints.numpy().any()
    t[None, 1] = v                                # numpy's leading 1s are accepted
    assert np.array_equal(t.numpy()[1], v.numpy())


def test_retain_grad_and_dtype():
    x = pa.tensor(r(3), requires_grad=True)
    y = x * 1
    y.retain_grad()
    y[0] = pa.tensor(2.0, requires_grad=True)
    (y * y).sum().backward()
    assert np.allclose(y.grad, 2 * y.numpy())        # the written y's gradient, as PyTorch
    h = pa.zeros(3, dtype=np.float32)
    v = pa.tensor([1.0, 2.0], requires_grad=True)   # float64 into float32
    h[1:] = v
    assert h.dtype == np.float32
    (g,) = pa.grad(h.sum(), [v])
    assert g.dtype == np.float64 and np.array_equal(g, [1.0, 1.0])


def test_rnn_style_loop_and_the_parallel_engine_bitwise():
    w = pa.tensor(r(3, 3) * 0.5, requires_grad=True)
    x0 = pa.tensor(r(2, 3), requires_grad=True)

    def loss():
        out = pa.zeros(2, 4, 3)
        h = x0
        for step in range(4):
            h = pa.tanh(h @ w + 0.1 * step)
            out[:, step] = h                      # write each step's state
        out[:, np.array([0, 3, 0])] = out[:, :3] * 0.5   # overlapping, repeated indices
        return (out * out).sum()

    want = pa.grad(loss(), [w, x0])
    with pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0) as eng:
        got = eng.grad(loss(), [w, x0])
    assert_bitwise(want, got)
    assert pa.gradcheck(lambda a, b: (lambda: loss())(), [w, x0])
    with pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0) as eng:
        (gw,) = eng.grad(loss(), [w], create_graph=True)
        got2 = eng.grad((gw * gw).sum(), [w, x0])
    (gw,) = pa.grad(loss(), [w], create_graph=True)
    assert_bitwise(pa.grad((gw * gw).sum(), [w, x0]), got2)


# ---- index_put with a repeating index: winners found over the advanced index alone ----
def _cases():
    """(target shape, index) pairs naming elements twice, each a layout numpy treats
    differently: negative indices equal to others, several advanced axes broadcast
    together, advanced parts separated by a slice, None or Ellipsis (their broadcast dims
    go first) or adjacent (in place), integers among them, boolean masks."""
    rows = np.array([0, -1, 4, 0, 2, -5])           # -1 is 4 and -5 is 0 once wrapped
    return {
        "negative": ((5, 6), (rows,)),
        "two_axes": ((5, 6, 4), (np.array([[0, 1, 0], [4, -5, 1]]), np.array([2, 3, 2]))),
        "split_by_slice": ((5, 6, 7), (np.array([[1], [3], [1]]), slice(1, 5, 2),
                                       np.array([0, 6, -7]))),
        "adjacent_after_slice": ((5, 6, 7), (slice(None, None, -2), np.array([2, 2, 5]),
                                             np.array([[1], [1]]))),
        "int_split": ((5, 6, 7), (0, slice(None), np.array([3, 1, 3]))),
        "int_adjacent": ((5, 6, 7), (slice(None), -2, np.array([3, 1, -4]))),
        "none_ellipsis": ((5, 6, 7), (None, np.array([1, 1]), ..., np.array([2, 2]))),
        "none_between": ((5, 6, 7), (np.array([1, 4, 1]), None, np.array([[2], [2]]))),
        "ellipsis_first": ((5, 6, 7), (Ellipsis, np.array([4, 0, -3, 4]))),
        "one_array_in_slices": ((5, 6, 7), (None, slice(1, None, 2), np.array([[5, -1],
                                            [0, 5]]), slice(None, None, -3))),
        "mask_and_ints": ((4, 3, 5), (MASK, np.array([[1], [-4]]))),
        "slice_mask_ints": ((5, 4, 3), (slice(1, None), np.array([True, False, True, True]),
                                        np.array([[2], [0], [-1]]))),
        "empty_slice": ((5, 6), (np.array([1, 1, 2]), slice(3, 3))),
        "empty_broadcast": ((5, 6), (np.array([1, 1]), np.zeros((0, 1), int))),
    }


def _value_shapes(sel):
    """Values broadcast to the selection every way numpy allows: full, varying over the
    last axis only, a 0-d value, size-1 first axis, and an extra leading 1 (dropped)."""
    return {"full": sel, "last": sel[-1:], "scalar": (), "first_one": (1,) + sel[1:],
            "leading_one": (1,) + sel}


def _reference(a, index, v, g):
    """The last writer in C order of the selection, one write at a time: the written
    array, and the gradients for `a` and `v` of <g, output> (the old semantics)."""
    sel = a[index].shape
    grids = np.indices(a.shape)
    dest = np.ravel_multi_index(tuple(c[index].reshape(-1) for c in grids), a.shape)
    winner = {}
    for j, d in enumerate(dest):
        winner[d] = j                                # a later write replaces an earlier
    fit = v.reshape(v.shape[max(v.ndim - len(sel), 0):]) if v.ndim > len(sel) else v
    vals = np.broadcast_to(fit, sel).reshape(-1)
    out, gsel = a.copy(), np.zeros(vals.size)
    for d, j in winner.items():
        out.reshape(-1)[d] = vals[j]
        gsel[j] = g.reshape(-1)[d]
    ga = g.copy()
    ga.reshape(-1)[dest] = 0.0
    gv = gsel.reshape(sel)
    gv = gv.sum(tuple(range(gv.ndim - fit.ndim))) if gv.ndim > fit.ndim else gv
    gv = gv.sum(tuple(i for i, n in enumerate(fit.shape) if n == 1), keepdims=True)
    return out, ga, gv.reshape(v.shape)


def _put(shape, index, vshape, seed=0):
    """index_put of random `a` and `v` (both require grad), its plan, the leaves and g."""
    from parallel_autograd.ops.writes.setitem import index_put
    rng = np.random.default_rng(seed)
    a = pa.tensor(rng.uniform(-1, 1, shape), requires_grad=True)
    v = pa.tensor(rng.uniform(-1, 1, vshape), requires_grad=True)
    out = index_put(a, index, v)
    return out, out.grad_fn.kwargs["plan"], a, v, rng.uniform(0.5, 1.5, shape)


@pytest.mark.parametrize("name", list(_cases()))
@pytest.mark.parametrize("vkind", ["full", "last", "scalar", "first_one", "leading_one"])
def test_index_put_repeats_keep_the_last_writer_and_its_gradient(name, vkind):
    shape, index = _cases()[name]
    sel = np.zeros(shape)[index].shape
    out, plan, a, v, g = _put(shape, index, _value_shapes(sel)[vkind])
    assert plan.win is None and (plan.wins is not None) == (np.prod(sel) > 0)
    want, ga, gv = _reference(a.numpy(), index, v.numpy(), g)
    numpy_put = a.numpy().copy()
    numpy_put[index] = v.numpy()                        # numpy's assignment: the last wins
    assert_bitwise([want, numpy_put], [out.numpy(), out.numpy()], "value")
    got = pa.grad(out, [a, v], grad_outputs=g)
    assert_bitwise([ga], [got[0]])                   # zeros and g: exact
    np.testing.assert_allclose(got[1], gv, rtol=1e-14, atol=0)   # (sums in any order)


def test_index_put_repeats_in_an_index_of_another_form_take_the_general_plan():
    # a bool scalar (numpy: a 0-d mask, a new axis) is not read over the advanced index
    for shape, index in (((5, 6), (np.array([1, -4, 0]), True)),
                         ((5, 6), (True, slice(None), np.array([[2, 2, 3]])))):
        sel = np.zeros(shape)[index].shape
        out, plan, a, v, g = _put(shape, index, sel)
        assert plan.wins is None and plan.win is not None
        want, ga, gv = _reference(a.numpy(), index, v.numpy(), g)
        assert_bitwise([want, ga, gv], [out.numpy(), *pa.grad(out, [a, v], grad_outputs=g)])


def test_index_put_a_bad_index_raises_numpys_error():
    # the plan's probe (of itemsize 0) raises what indexing the tensor's array raises
    from parallel_autograd.ops.writes.setitem import index_put
    a, v = pa.tensor(r(3, 4), requires_grad=True), pa.tensor(1.0, requires_grad=True)
    for index in ("f0", (0, "x"), 1.5, (np.array([1, 1]), 4), (np.array([True]), 0)):
        with pytest.raises(IndexError, match="index_put: "):
            index_put(a, index, v)


@pytest.mark.parametrize("name", list(_cases()))
@pytest.mark.parametrize("chunk", [1, 1 << 15])
def test_index_put_plan_over_the_index_matches_the_general_plan_bitwise(
        name, chunk, monkeypatch):
    from parallel_autograd.ops.writes import setitem as S
    shape, index = _cases()[name]
    sel = np.zeros(shape)[index].shape
    results = []
    for general in (False, True):
        with monkeypatch.context() as m:
            m.setattr(S, "_CHUNK", chunk)            # 1: a chunk per winning write
            if general:
                m.setattr(S, "_advanced", lambda target, index: None)
            for vshape in _value_shapes(sel).values():
                out, plan, a, v, g = _put(shape, index, vshape, seed=len(vshape))
                assert (plan.win is None) != (general and np.prod(sel) > 0)
                # the rules' differentiable forms too: out ** 3 makes them non-constant
                (ga, gv) = pa.grad(out ** 3, [a, v], grad_outputs=g, create_graph=True)
                second = pa.grad((ga * ga).sum() + (gv * gv).sum(), [a, v],
                                 allow_unused=True)
                results.append([out.numpy(), ga.numpy(), gv.numpy()] + list(second))
    half = len(results) // 2
    for new, old in zip(results[:half], results[half:]):
        assert_bitwise(old, new)


def test_index_put_repeats_both_engines_bitwise_and_finite_differences():
    from parallel_autograd.ops.writes.setitem import index_put
    cases = _cases()

    def loss(a, v, w):
        y = index_put(a * 1.5, cases["split_by_slice"][1], v)
        y = index_put(y, cases["split_by_slice"][1], v.sin() * y[:3, :3, :2])  # reads y
        z = index_put(w, cases["mask_and_ints"][1], y[0, :2, :1].sum() * 2.0)
        return (y * y).sum() + (z.sin() * y[:4, :3, :5]).sum()

    leaves = [pa.tensor(r(*s), requires_grad=True) for s in ((5, 6, 7), (3, 3, 2), (4, 3, 5))]
    for t in leaves:
        t.grad = None
    pa.backward(loss(*leaves))
    want = [t.grad for t in leaves]
    for t in leaves:
        t.grad = None
    pa.backward_parallel(loss(*leaves), num_workers=3)
    assert_bitwise(want, [t.grad for t in leaves])
    assert pa.gradcheck(loss, leaves)
    assert pa.gradgradcheck(loss, leaves)
    for name in ("two_axes", "slice_mask_ints", "none_ellipsis"):
        shape, index = cases[name]
        sel = np.zeros(shape)[index].shape
        xs = [pa.tensor(r(*shape), requires_grad=True), pa.tensor(r(*sel[1:]),
                                                                  requires_grad=True)]
        assert pa.gradcheck(lambda x, u: index_put(x, index, u) ** 2, xs)


def test_index_put_unique_indices_match_pytorch():
    # torch's index_put_(accumulate=False) is deterministic when no element is named
    # twice (arrays only: torch's own index_put; with slices: its setitem, CopySlices)
    from parallel_autograd.ops.writes.setitem import index_put
    rows, cols, mid = np.array([4, -1, 0, 2]), np.array([1, 0, 0, -2]), np.array([3, -1, 0])
    T = torch.tensor
    cases = [((rows, cols), (4, 3)),                                # pairs distinct
             ((slice(None), mid, slice(1, None)), (3, 2)),          # in place
             ((np.array([4, 1, 0]), slice(1, None), mid - 1), (3, 5))]  # B first
    for index, vshape in cases:
        a, v, g = r(5, 6, 3), r(*vshape), RNG.uniform(0.5, 1.5, (5, 6, 3))
        xs = [pa.tensor(a, requires_grad=True), pa.tensor(v, requires_grad=True)]
        out = index_put(xs[0], index, xs[1])
        ts = [T(a, requires_grad=True), T(v, requires_grad=True)]
        tindex = tuple(T(i) if isinstance(i, np.ndarray) else i for i in index)
        if any(isinstance(i, slice) for i in index):
            want = ts[0].clone()
            want[tindex] = ts[1]
        else:
            want = ts[0].index_put(tindex, ts[1], accumulate=False)
        assert np.array_equal(out.numpy(), want.detach().numpy())
        (ga, gv), (ea, ev) = pa.grad(out, xs, grad_outputs=g), \
            torch.autograd.grad(want, ts, T(g))
        assert np.array_equal(ga, ea.numpy())          # zeros and g: exact
        np.testing.assert_allclose(gv, ev.numpy(), rtol=1e-14, atol=0)  # broadcast: sums
