"""`Tensor.data` as PyTorch's (issue 27): a Tensor that shares the tensor's memory, with
no history and a version counter of its own, so that writes through it change the values
without autograd recording them; `t.data = other` makes `t` use `other`'s memory. Each
behaviour is checked against torch itself."""
from __future__ import annotations

import copy
import io
import pickle

import numpy as np
import pytest

import parallel_autograd as pa

torch = pytest.importorskip("torch")


def _both(values, requires_grad=False):
    """The same float64 values as a pa and a torch tensor."""
    a = np.asarray(values, dtype=np.float64)
    return (pa.tensor(a, requires_grad=requires_grad),
            torch.tensor(a, requires_grad=requires_grad))


def _same(ours, theirs) -> None:
    np.testing.assert_array_equal(ours.numpy(), theirs.detach().numpy())


# -- what `.data` is ---------------------------------------------------------------------

@pytest.mark.parametrize("make", ["leaf", "leaf_rg", "nonleaf", "parameter"])
def test_data_is_a_plain_tensor_without_history(make):
    x, tx = _both([1.0, 2.0], requires_grad=make != "leaf")
    if make == "nonleaf":
        x, tx = x * 2, tx * 2
    elif make == "parameter":
        x, tx = pa.nn.Parameter(x.detach()), torch.nn.Parameter(tx.detach())
    d, td = x.data, tx.data
    assert type(td) is torch.Tensor and type(d) is pa.Tensor
    assert (d.requires_grad, d.grad_fn, d.is_leaf) == (td.requires_grad, td.grad_fn,
                                                        td.is_leaf) == (False, None, True)
    assert d.shape == x.shape and d.dtype == x.dtype
    assert (x.data is x.data) == (tx.data is tx.data) == False  # noqa: E712  a new one each time
    _same(d, td)


def test_data_shares_memory_both_ways():
    x, tx = _both([1.0, 2.0, 3.0], requires_grad=True)
    d, td = x.data, tx.data
    assert np.shares_memory(d.numpy(), x.numpy()) and d.data_ptr() == x.data_ptr()
    d[0] = 10.0                      # a write through .data: x sees it
    td[0] = 10.0
    with pa.no_grad():
        x.mul_(2)                    # a write to x: the .data taken before sees it
    with torch.no_grad():
        tx.mul_(2)
    _same(x, tx)
    _same(d, td)
    assert d.tolist() == [20.0, 4.0, 6.0]


def test_data_has_its_own_version_counter():
    x = pa.ones(3, requires_grad=True)
    d = x.data
    assert d._vc is not x._vc
    before = x._vc[0]
    d.add_(1)
    assert x._vc[0] == before and d._vc[0] > 0      # torch: d._version 1, x._version 0
    with pa.no_grad():
        x.add_(1)
    assert d._vc[0] < x._vc[0]


# -- in-place through .data: not recorded, no version error (PyTorch's semantics) ---------

@pytest.mark.parametrize("write", ["add_", "mul_", "copy_", "fill_", "setitem", "iadd"])
def test_write_through_data_on_a_leaf_that_requires_grad(write):
    """A leaf that requires grad, written through `.data` with grad mode on: no error
    (a direct write would raise), no history, and the backward of a graph that saved the
    leaf uses the new values without the "modified by an inplace operation" error."""
    grads = []
    for lib, (a, _) in ((pa, _both([1.0, 2.0, 3.0], True)),
                        (torch, (_both([1.0, 2.0, 3.0], True)[1], None))):
        loss = (a * a).sum()             # saves a
        if write == "add_":
            a.data.add_(lib.ones(3, dtype=lib.float64), alpha=0.5)
        elif write == "mul_":
            a.data.mul_(3)
        elif write == "copy_":
            a.data.copy_(lib.tensor([4.0, 5.0, 6.0], dtype=lib.float64))
        elif write == "fill_":
            a.data.fill_(7)
        elif write == "setitem":
            a.data[1:] = 9.0
        else:
            a.data += 1
        assert a.is_leaf and a.requires_grad and a.grad_fn is None
        loss.backward()
        grads.append((a.detach().numpy().copy(), a.grad.numpy().copy()))
    np.testing.assert_array_equal(grads[0][0], grads[1][0])
    np.testing.assert_array_equal(grads[0][1], grads[1][1])


def test_write_through_data_on_a_saved_nonleaf_uses_the_new_values():
    got = []
    for lib in (pa, torch):
        y = lib.ones(3, dtype=lib.float64, requires_grad=True)
        z = y * 2
        w = (z * z).sum()                # saves z
        z.data.mul_(3)
        w.backward()                     # torch: no error, 2 * (3 z) * 2 = 24
        got.append(y.grad.numpy().copy())
    np.testing.assert_array_equal(got[0], got[1])
    assert got[0].tolist() == [24.0, 24.0, 24.0]


def test_direct_write_is_still_refused_and_checked():
    """What `.data` is for: the same writes on the tensor itself keep their checks."""
    a = pa.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        a.add_(1)
    y = pa.ones(3, requires_grad=True)
    z = y * 2
    w = (z * z).sum()
    z.mul_(3)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        w.backward()


def test_grad_data_is_the_gradient():
    x, tx = _both([1.0, 2.0], requires_grad=True)
    for t in (x, tx):
        (t * t).sum().backward()
        t.grad.data.mul_(2)
    _same(x.grad, tx.grad)
    assert x.grad.tolist() == [4.0, 8.0]


# -- the manual SGD step of PyTorch's word-LM example ---------------------------------------

def test_manual_sgd_step_through_data_trains_as_torch():
    rng = np.random.default_rng(0)
    w0, b0 = rng.standard_normal((3, 4)), rng.standard_normal(3)
    xs, ys = rng.standard_normal((5, 8, 4)), rng.standard_normal((5, 8, 3))
    losses = []
    for lib in (pa, torch):
        m = lib.nn.Linear(4, 3).double()
        with lib.no_grad():
            m.weight.copy_(lib.tensor(w0))
            m.bias.copy_(lib.tensor(b0))
        curve = []
        for x, y in zip(xs, ys):
            m.zero_grad()
            loss = ((m(lib.tensor(x)) - lib.tensor(y)) ** 2).mean()
            loss.backward()
            for p in m.parameters():
                p.data.add_(p.grad, alpha=-0.1)
            curve.append(float(loss.detach()))
        losses.append((curve, m.weight.detach().numpy().copy()))
    np.testing.assert_allclose(losses[0][0], losses[1][0], rtol=1e-12)
    np.testing.assert_allclose(losses[0][1], losses[1][1], rtol=1e-12)


# -- `t.data = other` ---------------------------------------------------------------------

def test_set_data_changes_shape_and_dtype_and_shares_the_new_memory():
    p = pa.nn.Parameter(pa.ones(2, 3, dtype=pa.float32))
    tp = torch.nn.Parameter(torch.ones(2, 3, dtype=torch.float32))
    new, tnew = pa.zeros(4, dtype=pa.float64), torch.zeros(4, dtype=torch.float64)
    p.data, tp.data = new, tnew
    assert (p.shape, str(p.dtype)) == (tuple(tp.shape), "float64")
    assert type(p) is pa.nn.Parameter and p.requires_grad == tp.requires_grad == True  # noqa: E712
    new.add_(1)                            # p now uses new's memory, as torch's
    tnew.add_(1)
    _same(p, tp)
    (p * 2).sum().backward()
    assert p.grad.shape == (4,)


def test_set_data_on_a_nonleaf_and_a_view():
    x, tx = _both([1.0, 2.0], requires_grad=True)
    q, tq = x * 2, tx * 2
    q.data, tq.data = pa.zeros(3, dtype=pa.float64), torch.zeros(3, dtype=torch.float64)
    assert q.shape == tuple(tq.shape) == (3,) and q.grad_fn is not None
    base, tbase = pa.ones(4, dtype=pa.float64), torch.ones(4, dtype=torch.float64)
    v, tv = base[:2], tbase[:2]
    v.data, tv.data = pa.zeros(3, dtype=pa.float64), torch.zeros(3, dtype=torch.float64)
    _same(v, tv)
    _same(base, tbase)                     # the viewed tensor is untouched


@pytest.mark.parametrize("value", [[1.0, 2.0], 3.0, np.ones(2), None])
def test_set_data_to_a_non_tensor_is_a_type_error(value):
    t = pa.ones(2)
    with pytest.raises(TypeError) as theirs:
        torch.ones(2).data = value
    with pytest.raises(TypeError, match="Variable data has to be a tensor") as ours:
        t.data = value
    assert str(ours.value).split(",")[0] == str(theirs.value).split(",")[0]
    assert t.tolist() == [1.0, 1.0]        # unchanged


def test_set_integer_data_on_a_tensor_that_requires_grad():
    with pytest.raises(RuntimeError, match="must be floating point") as theirs:
        torch.ones(2, requires_grad=True).data = torch.zeros(2, dtype=torch.long)
    t = pa.ones(2, requires_grad=True)
    dtype = t.dtype
    with pytest.raises(RuntimeError, match="must be floating point") as ours:
        t.data = pa.zeros(2, dtype=pa.int64)
    assert str(ours.value) == str(theirs.value)
    assert t.dtype == dtype and t.tolist() == [1.0, 1.0]   # unchanged
    u = pa.ones(2)                         # no grad: any dtype, as torch's
    u.data = pa.zeros(2, dtype=pa.int64)
    assert str(u.dtype) == "int64"


def test_deleting_data_is_refused():
    with pytest.raises(RuntimeError) as theirs:
        del torch.ones(2).data
    with pytest.raises(RuntimeError) as ours:
        del pa.ones(2).data
    assert str(ours.value) == str(theirs.value)


# -- what uses parameters keeps working ---------------------------------------------------

def test_optimizer_state_dict_and_serialization_after_data_writes():
    m = pa.nn.Linear(3, 2)
    opt = pa.optim.Adam(m.parameters(), lr=0.1)
    m(pa.ones(4, 3)).sum().backward()
    opt.step()
    m.weight.data.mul_(0.5)                # the optimizer sees the written values
    m.bias.data = pa.zeros(2, dtype=m.bias.dtype)
    m.zero_grad()
    m(pa.ones(4, 3)).sum().backward()
    opt.step()
    buf = io.BytesIO()
    pa.save({"model": m.state_dict(), "opt": opt.state_dict()}, buf)
    buf.seek(0)
    state = pa.load(buf)
    m2 = pa.nn.Linear(3, 2)
    m2.load_state_dict(state["model"])
    opt2 = pa.optim.Adam(m2.parameters(), lr=0.1)
    opt2.load_state_dict(state["opt"])
    for p, q in zip(m.parameters(), m2.parameters()):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())
        assert type(q.data) is pa.Tensor and q.data.data_ptr() == q.data_ptr()
    for clone in (pickle.loads(pickle.dumps(m)), copy.deepcopy(m)):
        np.testing.assert_array_equal(clone.weight.data.numpy(), m.weight.detach().numpy())


def test_state_dict_values_and_data_share_the_parameters_memory():
    m, tm = pa.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    for mod in (m, tm):
        mod.state_dict()["weight"].data.fill_(3.0)
        mod.weight.data[0, 0] = -1.0
    _same(m.weight, tm.weight)
