"""Semantics of the sequential reference engine: accumulation, retain_graph, freeing,
pruning in grad(), frozen inputs, graph shapes and the canonical summation order."""
import gc
import time
import weakref

import numpy as np
import pytest

import parallel_autograd as pa
from conftest import assert_bitwise


def fd(f, x, eps=1e-6):
    """Central finite differences of the scalar f() w.r.t. the array x (in place)."""
    g = np.zeros_like(x, dtype=np.float64)
    flat, gflat = x.reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + eps
        hi = f()
        flat[i] = old - eps
        lo = f()
        flat[i] = old
        gflat[i] = (hi - lo) / (2 * eps)
    return g


def all_nodes(t):
    seen, stack = [], [t.grad_fn]
    while stack:
        n = stack.pop()
        if n is None or any(n is s for s in seen):
            continue
        seen.append(n)
        stack.extend(n.next_nodes)
    return seen


def counting_function():
    """A pa.Function computing 2*x whose backward counts its calls."""
    calls = []

    class Double(pa.Function):
        @staticmethod
        def forward(ctx, x):
            return 2 * x

        @staticmethod
        def backward(ctx, g):
            calls.append(1)
            return 2 * g

    return Double, calls


# --- accumulation and retain_graph ---------------------------------------------------

def test_leaf_grad_accumulates_across_backward_calls():
    x = pa.tensor([1.0, -2.0, 3.0], requires_grad=True)
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad, [2.0, -4.0, 6.0])
    (x * 3.0).sum().backward()
    np.testing.assert_array_equal(x.grad, [5.0, -1.0, 9.0])
    x.zero_grad()
    assert x.grad is None
    (x * 3.0).sum().backward()
    np.testing.assert_array_equal(x.grad, [3.0, 3.0, 3.0])


def test_retain_graph_allows_second_backward():
    x = pa.tensor([0.5, 1.5], requires_grad=True)
    y = (x.exp() * x).sum()
    y.backward(retain_graph=True)
    first = x.grad.clone()
    expected = np.exp(x.numpy()) * (1 + x.numpy())
    np.testing.assert_allclose(first, expected, rtol=1e-12)
    y.backward()
    np.testing.assert_allclose(x.grad, 2 * expected, rtol=1e-12)


def test_second_backward_without_retain_graph_raises_before_changing_grads():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    w = pa.tensor([3.0, 4.0], requires_grad=True)
    h = x * w
    y = h.sum()
    y.backward()
    gx, gw = x.grad.clone(), w.grad.clone()
    with pytest.raises(RuntimeError, match="retain_graph"):
        y.backward()
    # A new graph reaching the freed part: the fresh leaf must stay untouched too,
    # though its own branch comes first in the backward order.
    b = pa.tensor([1.0, 1.0], requires_grad=True)
    z = (b * 5.0 + h).sum()
    with pytest.raises(RuntimeError, match="retain_graph"):
        z.backward()
    assert b.grad is None
    np.testing.assert_array_equal(x.grad, gx)
    np.testing.assert_array_equal(w.grad, gw)


def test_saved_values_freed_after_backward():
    x = pa.tensor(np.linspace(-1, 1, 5), requires_grad=True)
    y = (x.sin() * x.exp()).sum()
    nodes = all_nodes(y)
    rule_nodes = [n for n in nodes if n.variable is None]
    assert len(rule_nodes) == 4  # sin, exp, mul, sum
    assert all(n.saved is not None and not n.released for n in rule_nodes)
    y.backward()
    assert all(n.saved is None and n.released for n in rule_nodes)


def test_saved_values_kept_with_retain_graph():
    x = pa.tensor(np.linspace(-1, 1, 5), requires_grad=True)
    y = (x.sin() * x.exp()).sum()
    y.backward(retain_graph=True)
    assert all(n.saved is not None and not n.released for n in all_nodes(y))
    pa.grad(y, [x], retain_graph=True)
    assert all(n.saved is not None and not n.released for n in all_nodes(y))
    y.backward()
    assert all(n.released for n in all_nodes(y) if n.variable is None)


def test_saved_arrays_are_garbage_after_backward():
    """Saved arrays (here a temporary only the graph holds) die with the pass, even
    while the output tensor is still alive."""
    x = pa.tensor(np.ones(4), requires_grad=True)
    tmp = x * 2.0
    ref = weakref.ref(tmp.numpy())
    y = (tmp.sin()).sum()  # sin saves tmp.data
    del tmp
    gc.collect()
    assert ref() is not None
    y.backward()
    gc.collect()
    assert ref() is None
    assert y.grad_fn is not None


def test_function_saved_tensors_freed_after_backward():
    class Scale(pa.Function):
        @staticmethod
        def forward(ctx, a):
            buf = a * 3.0
            ctx.save_for_backward(buf)
            refs.append(weakref.ref(buf))
            return buf

        @staticmethod
        def backward(ctx, g):
            (buf,) = ctx.saved_tensors
            return g * (buf / buf) * 3.0

    refs = []
    x = pa.tensor(np.ones(3), requires_grad=True)
    y = Scale.apply(x).exp().sum()   # exp does not save the Function's buffer
    y.backward()
    np.testing.assert_allclose(x.grad, 3.0 * np.exp(3.0))
    # The Scale output tensor (and its data) is unreachable now; only saved state
    # could keep the buffer alive.
    gc.collect()
    assert refs[0]() is None, "Function ctx.saved_tensors not released after backward"


def test_intermediate_gradients_freed_as_consumed():
    """In a chain, each intermediate gradient dies once its consumer ran: the engine
    must not hold all of them until the end of the pass."""
    alive_max = [0]
    refs = []

    def rule(g, ans, x):
        alive = sum(r() is not None for r in refs)
        alive_max[0] = max(alive_max[0], alive)
        out = g * 1.0  # a fresh array per node
        refs.append(weakref.ref(out))
        return out

    ident = pa.primitive("ident", lambda x: x.copy(), rule)
    x = pa.tensor(np.ones(1000), requires_grad=True)
    h = x
    for _ in range(60):
        h = ident(h)
    h.sum().backward()
    assert len(refs) == 60
    np.testing.assert_array_equal(x.grad, np.ones(1000))
    assert alive_max[0] <= 3, f"{alive_max[0]} intermediate gradients alive at once"


# --- grad(): pruning, capture, no .grad changes ---------------------------------------

def test_grad_returns_tensors_and_touches_no_grad():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    w = pa.tensor([3.0, 5.0], requires_grad=True)
    w.grad = np.array([10.0, 10.0])
    h = x * w
    h.retain_grad()
    y = (h * h).sum()
    gx, gw = pa.grad(y, [x, w])
    assert type(gx) is pa.Tensor and type(gw) is pa.Tensor
    np.testing.assert_allclose(gx, 2 * x.numpy() * w.numpy() ** 2)
    np.testing.assert_allclose(gw, 2 * w.numpy() * x.numpy() ** 2)
    assert x.grad is None and h.grad is None
    np.testing.assert_array_equal(w.grad, [10.0, 10.0])


def test_grad_scalar_inputs_give_0d_tensors():
    a = pa.tensor(3.0, requires_grad=True)
    (g,) = pa.grad(a * a * a, [a])
    assert type(g) is pa.Tensor and type(g.numpy()) is np.ndarray and g.shape == ()
    assert g == 27.0


def test_grad_prunes_side_branches():
    Double, calls = counting_function()
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    w = pa.tensor([3.0, 4.0], requires_grad=True)
    side = Double.apply(w)             # on no path from y to x
    y = (x * x + side).sum()
    (gx,) = pa.grad(y, [x], retain_graph=True)
    np.testing.assert_array_equal(gx, 2 * x.numpy())
    assert calls == []
    (gw,) = pa.grad(y, [w])            # side still usable: it did not run
    np.testing.assert_array_equal(gw, [2.0, 2.0])
    assert len(calls) == 1


def test_grad_does_not_run_nodes_below_a_nonleaf_input():
    Double, calls = counting_function()
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    h = Double.apply(x)
    u = h * 3.0
    y = (u * u).sum()
    gu, gh = pa.grad(y, [u, h])
    np.testing.assert_allclose(gu, 2 * u.numpy())
    np.testing.assert_allclose(gh, 6 * u.numpy())
    assert calls == []
    assert x.grad is None


def test_grad_allow_unused():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    unused = pa.tensor([7.0], requires_grad=True)
    y = (x * 2.0).sum()
    gx, gu = pa.grad(y, [x, unused], allow_unused=True)
    np.testing.assert_array_equal(gx, [2.0, 2.0])
    assert gu is None


def test_grad_with_grad_outputs_and_multiple_outputs():
    x = pa.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y1 = x * x
    y2 = x.sin()
    v1 = np.array([1.0, -1.0, 0.5])
    v2 = np.array([2.0, 0.0, 1.0])
    (g,) = pa.grad([y1, y2], [x], grad_outputs=[v1, v2], retain_graph=True)
    np.testing.assert_allclose(g, v1 * 2 * x.numpy() + v2 * np.cos(x.numpy()), rtol=1e-13)
    (g1,) = pa.grad(y1, x, grad_outputs=v1)
    np.testing.assert_allclose(g1, v1 * 2 * x.numpy())


def test_grad_same_output_twice_adds_seeds():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3.0
    (g,) = pa.grad([y, y], [x], grad_outputs=[np.ones(2), np.full(2, 2.0)])
    np.testing.assert_array_equal(g, [9.0, 9.0])


def test_grad_of_output_wrt_itself_and_leaf_root():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3.0
    (g,) = pa.grad(y, [y], grad_outputs=np.array([4.0, 5.0]))
    np.testing.assert_array_equal(g, [4.0, 5.0])
    a = pa.tensor(2.0, requires_grad=True)
    (ga,) = pa.grad(a, [a])
    assert ga == 1.0
    a.backward()
    assert a.grad == 1.0


def test_grad_matches_finite_differences():
    rng = np.random.default_rng(0)
    xd, wd = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    x = pa.tensor(xd, requires_grad=True)
    w = pa.tensor(wd, requires_grad=True)

    def f():
        return float(np.sum(np.tanh(xd @ wd) ** 2))

    y = ((x @ w).tanh() ** 2).sum()
    gx, gw = pa.grad(y, [x, w])
    np.testing.assert_allclose(gx, fd(f, xd), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gw, fd(f, wd), rtol=1e-6, atol=1e-8)


# --- frozen inputs cost no gradient kernel ---------------------------------------------

def counting_mul():
    calls = {"x": 0, "w": 0}

    def rule_x(g, ans, x, w):
        calls["x"] += 1
        return g * w

    def rule_w(g, ans, x, w):
        calls["w"] += 1
        return g * x

    return pa.primitive("cmul", np.multiply, rule_x, rule_w), calls


def test_frozen_weight_primitive_rule_never_runs():
    cmul, calls = counting_mul()
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    w = pa.tensor([3.0, 4.0])  # frozen
    cmul(x, w).sum().backward()
    assert calls == {"x": 1, "w": 0}
    np.testing.assert_array_equal(x.grad, [3.0, 4.0])
    assert w.grad is None


def test_grad_runs_only_requested_input_rules():
    cmul, calls = counting_mul()
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    w = pa.tensor([3.0, 4.0], requires_grad=True)
    y = cmul(x, w).sum()
    (gx,) = pa.grad(y, [x], retain_graph=True)
    assert calls == {"x": 1, "w": 0}
    (gw,) = pa.grad(y, [w])
    assert calls == {"x": 1, "w": 1}
    np.testing.assert_array_equal(gx, [3.0, 4.0])
    np.testing.assert_array_equal(gw, [1.0, 2.0])


def test_frozen_weight_function_uses_needs_input_grad():
    seen, kernels = [], []

    class Linear(pa.Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return x @ w

        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            seen.append(ctx.needs_input_grad)
            gx = gw = None
            if ctx.needs_input_grad[0]:
                kernels.append("x")
                gx = g @ w.T
            if ctx.needs_input_grad[1]:
                kernels.append("w")
                gw = x.T @ g
            return gx, gw

    x = pa.tensor(np.ones((2, 3)), requires_grad=True)
    w = pa.tensor(np.arange(6.0).reshape(3, 2))  # frozen
    Linear.apply(x, w).sum().backward()
    assert seen == [(True, False)]
    assert kernels == ["x"]
    np.testing.assert_array_equal(x.grad, np.ones((2, 2)) @ w.numpy().T)
    assert w.grad is None


# --- graph shapes -----------------------------------------------------------------------

def test_diamond():
    x = pa.tensor([0.3, -0.7], requires_grad=True)
    a = x.sin()
    b = a * 2.0
    c = a.exp()
    y = (b * c).sum()          # y = 2 sin(x) exp(sin(x))
    y.backward()
    s = np.sin(x.numpy())
    expected = np.cos(x.numpy()) * (2 * np.exp(s) + 2 * s * np.exp(s))
    np.testing.assert_allclose(x.grad, expected, rtol=1e-13)


def test_shared_subexpressions():
    x = pa.tensor([1.5, -2.0], requires_grad=True)
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad, 2 * x.numpy())
    x.grad = None
    y = x
    for _ in range(9):
        y = y + x
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, [10.0, 10.0])
    x.grad = None
    (x * x * x).sum().backward()
    np.testing.assert_allclose(x.grad, 3 * x.numpy() ** 2)


def test_scalar_tensor_used_three_times():
    a = pa.tensor(2.0, requires_grad=True)
    (a * a * a).backward()
    assert type(a.grad) is pa.Tensor and type(a.grad.numpy()) is np.ndarray
    assert a.grad == 12.0
    b = pa.tensor(2.0, requires_grad=True)
    (b + b + b + b).backward()
    assert b.grad == 4.0


def test_deep_chain_no_recursion_error():
    n = 100_000
    x = pa.tensor(1.0, requires_grad=True)
    h = x
    t0 = time.perf_counter()
    for _ in range(n):
        h = h + 1.0
    h.backward()
    assert x.grad == 1.0
    del h
    gc.collect()
    assert time.perf_counter() - t0 < 60


def test_broadcasting_gradients():
    x = pa.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    b = pa.tensor([1.0, 2.0, 3.0], requires_grad=True)
    c = pa.tensor([[2.0], [3.0]], requires_grad=True)
    s = pa.tensor(0.5, requires_grad=True)
    y = ((x + b) * c * s).sum()
    y.backward()
    np.testing.assert_array_equal(x.grad, np.broadcast_to(c.numpy() * 0.5, (2, 3)))
    np.testing.assert_array_equal(b.grad, (c.numpy() * 0.5).sum() * np.ones(3))
    np.testing.assert_array_equal(c.grad, ((x.numpy() + b.numpy()) * 0.5).sum(1, keepdims=True))
    assert s.grad.shape == ()
    np.testing.assert_allclose(s.grad, ((x.numpy() + b.numpy()) * c.numpy()).sum())


def test_float32_graph_keeps_float32_grads():
    rng = np.random.default_rng(1)
    xd = rng.standard_normal((3, 4)).astype(np.float32)
    wd = rng.standard_normal((4, 2)).astype(np.float32)
    bd = rng.standard_normal(2).astype(np.float32)
    x = pa.tensor(xd, requires_grad=True)
    w = pa.tensor(wd, requires_grad=True)
    b = pa.tensor(bd, requires_grad=True)
    y = ((x @ w + b).tanh() * 2.0).sum()
    assert y.dtype == np.float32
    y.backward()
    for t in (x, w, b):
        assert t.grad.dtype == np.float32
    x64, w64, b64 = (pa.tensor(t.numpy().astype(np.float64), requires_grad=True)
                     for t in (x, w, b))
    ((x64 @ w64 + b64).tanh() * 2.0).sum().backward()
    for t, t64 in ((x, x64), (w, w64), (b, b64)):
        np.testing.assert_allclose(t.grad, t64.grad, rtol=1e-4, atol=1e-5)


def test_mixed_dtype_leaf_gets_its_own_dtype():
    x = pa.tensor([1.0, 2.0], requires_grad=True, dtype=np.float32)
    w = pa.tensor([3.0, 4.0], requires_grad=True)  # float64
    (x * w).sum().backward()
    assert x.grad.dtype == np.float32 and w.grad.dtype == np.float64
    np.testing.assert_array_equal(x.grad, [3.0, 4.0])


# --- canonical accumulation order ---------------------------------------------------------

def _two_slot(c0, c1):
    """f(a, b) = a + b whose rules scale the gradient by c0 (slot 0) and c1 (slot 1)."""
    return pa.primitive("two", np.add,
                        lambda g, ans, a, b: g * c0,
                        lambda g, ans, a, b: g * c1)


def test_canonical_order_consumer_seq_desc_then_slot_asc():
    big = 1e16
    cB, c0, c1 = big, -big, 1.0
    # the canonical order: consumer B (made later) first, then A's slot 0, slot 1
    canonical = (cB + c0) + c1
    others = [(c0 + c1) + cB, (cB + c1) + c0, (c1 + c0) + cB]
    assert canonical == 1.0 and all(o == 0.0 for o in others)  # the test can tell

    x = pa.tensor(0.25, requires_grad=True)
    A = _two_slot(c0, c1)(x, x)   # lower seq
    B = x * cB                    # higher seq
    y = A + B
    y.backward(retain_graph=True)
    assert x.grad == canonical
    (g,) = pa.grad(y, [x])
    assert g == canonical


def test_canonical_order_many_consumers_exact_bits():
    rng = np.random.default_rng(3)
    n = 40
    scales = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 17, n)
    x = pa.tensor([0.5, -0.5, 2.0], requires_grad=True)
    terms = [x * float(s) for s in scales]   # consumer i has seq increasing with i
    y = terms[0]
    for t in terms[1:]:
        y = y + t
    (g,) = pa.grad(y.sum(), [x])
    expected = 0.0
    for s in scales[::-1]:                    # consumer seq descending
        expected = expected + float(s)
    forward_sum = 0.0
    for s in scales:
        forward_sum += float(s)
    assert expected != forward_sum             # the order is observable here
    assert_bitwise([np.full(3, expected)], [g])


def test_canonical_order_with_multi_input_consumers():
    """Contributions from slots of several multi-input consumers interleave by
    (consumer seq desc, slot asc)."""
    big = 2.0 ** 60
    vals = {("P", 0): 3.0, ("P", 1): big, ("Q", 0): -big, ("Q", 1): 5.0,
            ("R", 0): 1.0, ("R", 1): -7.0}
    x = pa.tensor(1.0, requires_grad=True)
    P = _two_slot(vals["P", 0], vals["P", 1])(x, x)
    Q = _two_slot(vals["Q", 0], vals["Q", 1])(x, x)
    R = _two_slot(vals["R", 0], vals["R", 1])(x, x)
    y = P + Q + R
    y.backward()
    order = [("R", 0), ("R", 1), ("Q", 0), ("Q", 1), ("P", 0), ("P", 1)]
    expected = vals[order[0]]
    for k in order[1:]:
        expected = expected + vals[k]
    naive = sum(vals[k] for k in sorted(vals))
    assert expected != naive
    assert float(x.grad) == expected


# ---- what loss.backward() runs on ------------------------------------------------------
def test_tensor_backward_runs_on_the_default_engine_which_can_be_set():
    from parallel_autograd.engine import engine as engine_module

    def graph():
        x = pa.tensor(np.linspace(-1, 1, 200_000), requires_grad=True)
        return sum((x * float(i)).tanh().sum() for i in range(1, 9)), x

    assert pa.get_default_engine() == "parallel"
    try:
        loss, x = graph()
        loss.backward()  # the default engine: backward_parallel's
        st = engine_module.default_engine().last_stats
        assert st is not None  # (one usable core: num_workers=1, so sequential)
        assert st.mode == "parallel" or engine_module.default_engine().num_workers == 1
        want = x.grad
        with pa.Engine(2, min_nodes=0, min_work=0, min_width=0) as eng:
            pa.set_default_engine(eng)
            assert pa.get_default_engine() is eng
            loss, x = graph()
            loss.backward()
            assert eng.last_stats is not None and np.array_equal(x.grad, want)
        pa.set_default_engine("sequential")
        loss, x = graph()
        eng_calls = engine_module.default_engine().stats()["calls"]
        loss.backward()
        assert engine_module.default_engine().stats()["calls"] == eng_calls
        assert np.array_equal(x.grad, want)
        with pytest.raises(ValueError, match="set_default_engine"):
            pa.set_default_engine("fast")
        with pytest.raises(TypeError, match="set_default_engine"):
            pa.set_default_engine(3)
        assert pa.get_default_engine() == "sequential"
    finally:
        pa.set_default_engine("parallel")
