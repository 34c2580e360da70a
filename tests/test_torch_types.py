"""PyTorch's types where users touch gradients and sizes (issue 27): `.grad`, hook
arguments and `grad()` results are Tensors, `x.size()` is a `Size` and `x.size(d)` an int,
`Tensor.__format__`. Each behaviour is checked on parallel_autograd and, where torch is
installed, against torch itself (types, values, exception types)."""
import copy
import inspect
import pickle

import numpy as np
import pytest

import parallel_autograd as pa

try:
    import torch
except ImportError:  # the parity halves skip; parallel_autograd's own checks still run
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch not installed")
ENGINES = ["sequential", "parallel"]


def _backward(loss, engine):
    if engine == "sequential":
        loss.backward()
    else:
        pa.Engine(num_workers=2, min_nodes=1, min_work=0, min_width=0,
                  inline_below=0).backward(loss)


def _leaf(values, lib):
    return (pa if lib == "pa" else torch).tensor(np.asarray(values, np.float64),
                                                 requires_grad=True)


# ---- .grad is a Tensor ---------------------------------------------------------------------
@pytest.mark.parametrize("engine", ENGINES)
def test_grad_is_a_tensor_accumulated_in_place(engine):
    p = _leaf([1.0, 2.0, 3.0], "pa")
    _backward((p * p).sum(), engine)
    g = p.grad
    assert type(g) is pa.Tensor and not g.requires_grad and g.grad_fn is None
    assert g.shape == (3,) and g.dtype == np.float64
    _backward((p * 2).sum(), engine)
    assert p.grad is g  # the same Tensor object keeps the sum, as PyTorch's AccumulateGrad
    np.testing.assert_array_equal(np.asarray(p.grad), [4.0, 6.0, 8.0])


@needs_torch
def test_grad_type_and_accumulation_as_torch():
    got = {}
    for lib in ("pa", "torch"):
        p = _leaf([1.0, 2.0, 3.0], lib)
        (p * p).sum().backward()
        g = p.grad
        (p * 2).sum().backward()
        got[lib] = (p.grad is g, float(p.grad.norm()), p.grad.shape == (3,))
        assert isinstance(p.grad, pa.Tensor if lib == "pa" else torch.Tensor)
    assert got["pa"] == pytest.approx(got["torch"])


@needs_torch
def test_in_place_on_grad_reaches_the_optimizer_and_the_next_backward():
    """p.grad.zero_() / p.grad.mul_(2) / p.grad.data *= ... change the gradient the
    optimizer reads and the next backward adds to."""
    out = {}
    for lib in ("pa", "torch"):
        p = _leaf([1.0, -2.0, 3.0], lib)
        (p * p).sum().backward()
        p.grad.zero_()
        (p * 3).sum().backward()   # accumulates into the zeroed gradient: 3
        p.grad.mul_(2)             # 6
        if lib == "pa":
            p.grad.numpy()[...] *= 0.5   # the array itself: 3
        else:
            p.grad.data.mul_(0.5)
        if lib == "pa":
            pa.optim.SGD([p], lr=0.5).step()
        else:  # SGD's step by hand: torch.optim's first import takes seconds
            with torch.no_grad():
                p -= 0.5 * p.grad
        out[lib] = np.array(p.detach().numpy(), copy=True)
    np.testing.assert_array_equal(out["pa"], out["torch"])
    np.testing.assert_array_equal(out["pa"], [-0.5, -3.5, 1.5])


def test_zero_grad_in_place_keeps_the_tensor():
    lin = pa.nn.Linear(2, 2)
    opt = pa.optim.SGD(lin.parameters(), lr=0.1)
    lin(pa.tensor(np.ones((1, 2)))).sum().backward()
    g = lin.weight.grad
    opt.zero_grad(set_to_none=False)
    assert lin.weight.grad is g and not np.asarray(g).any()
    lin(pa.tensor(np.ones((1, 2)))).sum().backward()
    lin.zero_grad(set_to_none=False)
    assert lin.weight.grad is g and not np.asarray(g).any()
    opt.zero_grad()
    assert lin.weight.grad is None


@needs_torch
def test_zero_grad_defaults_as_torch():
    for ours, theirs in [(pa.optim.Optimizer.zero_grad, torch.optim.Optimizer.zero_grad),
                         (pa.nn.Module.zero_grad, torch.nn.Module.zero_grad)]:
        want = inspect.signature(theirs).parameters["set_to_none"].default
        assert inspect.signature(ours).parameters["set_to_none"].default is want is True


@needs_torch
def test_parameter_grad_and_clip_as_torch():
    rng = np.random.default_rng(0)
    w, x = rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    res = {}
    for lib in ("pa", "torch"):
        m = pa if lib == "pa" else torch
        lin = m.nn.Linear(4, 3, bias=False).double()
        with m.no_grad():
            lin.weight.copy_(m.tensor(w))
        (lin(m.tensor(x)) ** 2).sum().backward()
        g = lin.weight.grad
        total = m.nn.utils.clip_grad_norm_(lin.parameters(), 1.0)
        assert lin.weight.grad is g  # scaled in place
        res[lib] = (float(total), np.array(g.detach().numpy(), copy=True))
    assert res["pa"][0] == pytest.approx(res["torch"][0], rel=1e-12)
    np.testing.assert_allclose(res["pa"][1], res["torch"][1], rtol=1e-12)


# ---- assigning .grad ------------------------------------------------------------------------
def test_assign_grad_tensor_and_ndarray():
    p = _leaf([1.0, 2.0], "pa")
    t = pa.tensor([10.0, 20.0])
    p.grad = t
    assert p.grad is t
    (p * 1).sum().backward()
    assert p.grad is t and np.asarray(t).tolist() == [11.0, 21.0]
    arr = np.zeros(2)
    p.grad = arr  # converted: a Tensor around the array (no copy), accumulated into
    assert isinstance(p.grad, pa.Tensor) and np.shares_memory(p.grad.numpy(), arr)
    (p * 1).sum().backward()
    assert arr.tolist() == [1.0, 1.0]
    p.grad = None
    assert p.grad is None


@pytest.mark.parametrize("bad", ["shape", "rank", "dtype", "int"])
def test_assign_bad_grad_raises_as_torch(bad):
    def value(m):
        return {"shape": lambda: m.zeros(3, dtype=m.float64),
                "rank": lambda: m.zeros((1, 2), dtype=m.float64),
                "dtype": lambda: m.zeros(2, dtype=m.float32),
                "int": lambda: 3}[bad]()

    p = _leaf([1.0, 2.0], "pa")
    old = pa.tensor([5.0, 6.0])
    p.grad = old
    with pytest.raises(Exception) as ours:
        p.grad = value(pa)
    assert p.grad is old  # never corrupts state
    want = TypeError if bad == "int" else RuntimeError
    assert ours.type is want
    if torch is not None:
        q = _leaf([1.0, 2.0], "torch")
        with pytest.raises(Exception) as theirs:
            q.grad = value(torch)
        assert theirs.type is ours.type
        if bad in ("shape", "rank"):
            assert str(ours.value) == str(theirs.value)


def test_pickle_and_deepcopy_keep_a_tensor_grad():
    p = _leaf([1.0, 2.0], "pa")
    (p * 3).sum().backward()
    for q in (pickle.loads(pickle.dumps(p)), copy.deepcopy(p)):
        assert type(q.grad) is pa.Tensor and np.asarray(q.grad).tolist() == [3.0, 3.0]
        assert not np.shares_memory(q.grad.numpy(), p.grad.numpy())


# ---- hooks and grad() -----------------------------------------------------------------------
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("where", ["leaf", "nonleaf"])
def test_hook_sees_a_tensor_and_its_tensor_replaces_the_grad(engine, where):
    seen = []

    def hook(g):
        seen.append(type(g))
        return g * 10

    x = _leaf([1.0, 2.0], "pa")
    y = x * 3
    (x if where == "leaf" else y).register_hook(hook)
    _backward((y * y).sum(), engine)
    assert seen == [pa.Tensor]
    want = 2 * 3 * np.array([3.0, 6.0]) * 10  # d(y^2)/dy = 2y, times 3 (dy/dx), times 10
    np.testing.assert_allclose(np.asarray(x.grad), want)
    if torch is not None:
        tx = _leaf([1.0, 2.0], "torch")
        ty = tx * 3
        (tx if where == "leaf" else ty).register_hook(lambda g: g * 10)
        (ty * ty).sum().backward()
        np.testing.assert_allclose(np.asarray(x.grad), tx.grad.numpy())


@pytest.mark.parametrize("engine", ENGINES)
def test_post_accumulate_hook_sees_a_tensor_grad(engine):
    seen = []
    p = _leaf([1.0, 2.0], "pa")
    p.register_post_accumulate_grad_hook(lambda t: seen.append((t is p, type(t.grad))))
    _backward((p * p).sum(), engine)
    assert seen == [(True, pa.Tensor)]


@pytest.mark.parametrize("fn", ["pa.grad", "pa.autograd.grad", "Engine.grad"])
def test_grad_returns_a_tuple_of_tensors(fn):
    x, z = _leaf([1.0, 2.0], "pa"), _leaf([3.0], "pa")
    out = (x * x).sum()
    call = {"pa.grad": pa.grad, "pa.autograd.grad": pa.autograd.grad,
            "Engine.grad": pa.Engine(num_workers=2).grad}[fn]
    gs = call(out, [x, z], allow_unused=True, retain_graph=True)
    assert type(gs) is tuple and len(gs) == 2 and gs[1] is None
    assert type(gs[0]) is pa.Tensor and np.asarray(gs[0]).tolist() == [2.0, 4.0]
    (g,) = call(out, [x])
    assert type(g) is pa.Tensor
    if torch is not None:
        tx = _leaf([1.0, 2.0], "torch")
        assert type(torch.autograd.grad((tx * tx).sum(), [tx])) is tuple


# ---- size(), numel(), shape ---------------------------------------------------------------
def test_size_and_shape_are_sizes():
    x = pa.zeros((2, 3, 4))
    assert type(x.size()) is pa.Size and isinstance(x.size(), tuple)
    assert x.size() == (2, 3, 4) == x.shape
    assert [x.size(d) for d in (0, 1, 2, -1, -3)] == [2, 3, 4, 4, 2]
    assert type(x.size(1)) is int and x.size(dim=1) == 3
    assert x.numel() == pa.numel(x) == x.size().numel() == 24
    assert pa.zeros(()).size() == () and pa.zeros(()).numel() == 1
    assert repr(x.size()) == "Size([2, 3, 4])"
    assert pickle.loads(pickle.dumps(x.shape)) == (2, 3, 4)


@needs_torch
@pytest.mark.parametrize("shape", [(2, 3), (4,), (), (0, 5)])
def test_size_as_torch(shape):
    x, t = pa.zeros(shape), torch.zeros(shape)
    assert tuple(x.size()) == tuple(t.size()) and x.numel() == t.numel()
    assert pa.numel(x) == torch.numel(t)
    for d in range(-len(shape) - 2, len(shape) + 2):
        try:
            want = t.size(d)
        except Exception as e:
            with pytest.raises(type(e)):
                x.size(d)
        else:
            assert x.size(d) == want
    s, ts = x.size(), t.size()
    for other in [lambda a: a[1:], lambda a: a + (7,), lambda a: (7,) + a]:
        ours, theirs = other(s), other(ts)
        assert tuple(ours) == tuple(theirs)
        assert (type(ours) is pa.Size) == (type(theirs) is torch.Size)
    with pytest.raises(TypeError):
        t.size("a")
    with pytest.raises(TypeError):
        x.size("a")


def test_size_is_no_longer_numpys_element_count():
    x = pa.zeros((2, 3))
    assert callable(x.size) and x.size() != 6
    with pytest.raises(TypeError):
        pa.numel(np.zeros(3))


# ---- __format__ -----------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("make", ["scalar", "vector", "parameter"])
@pytest.mark.parametrize("spec", ["", ".4f", ">12"])
def test_format_as_torch(make, spec):
    def build(m):
        return {"scalar": lambda: m.tensor(1.23456789, dtype=m.float64),
                "vector": lambda: m.tensor([1.0, 2.0], dtype=m.float64),
                "parameter": lambda: m.nn.Parameter(m.tensor(1.5, dtype=m.float64))}[make]()

    try:
        want = format(build(torch), spec)
    except TypeError:
        with pytest.raises(TypeError):
            format(build(pa), spec)
        return
    got = format(build(pa), spec)
    if make == "scalar" or spec:
        assert got == want
    else:  # str of the tensor: same layout, the library's name in place of torch's
        assert got == str(build(pa))
