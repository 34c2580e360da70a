"""create_graph=True: second derivatives of every op (gradgradcheck: finite differences of
the recorded first-order gradients), the functional API against torch.autograd.functional,
the parallel engine's recorded graph bitwise the sequential one's, errors and state."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import parallel_autograd as pa
from parallel_autograd.autograd import functional as AF
from parallel_autograd.node import next_seq
from parallel_autograd.ops import forms as G
from conftest import assert_bitwise

RNG = np.random.default_rng(7)


def _t(*shape, lo=-1.5, hi=1.5, grad=True):
    return pa.tensor(RNG.uniform(lo, hi, shape), requires_grad=grad)


def _pos(*shape):
    return _t(*shape, lo=0.3, hi=2.0)


def _away_from_ties(*shape):
    # values far apart: finite differences never cross a kink of max/min/relu/abs/clip
    v = RNG.permutation(np.arange(np.prod(shape), dtype=np.float64)).reshape(shape)
    return pa.tensor((v - v.size / 2 + 0.5) * 0.37, requires_grad=True)


# name -> (fn, inputs): each op's second derivative, through every input that takes one
CASES = {
    "add": (lambda a, b: a + b * b, [_t(3, 4), _t(4)]),
    "sub": (lambda a, b: (a - b) * a, [_t(3, 4), _t(3, 1)]),
    "mul": (lambda a, b: a * b, [_t(3, 4), _t(3, 4)]),
    "div": (lambda a, b: a / b, [_t(3, 4), _pos(3, 4)]),
    "neg": (lambda a: -(a * a), [_t(5)]),
    "pow_2": (lambda a: a ** 2, [_t(5)]),
    "pow_3": (lambda a: a ** 3, [_t(5)]),
    "pow_half": (lambda a: a ** 0.5, [_pos(5)]),
    "pow_minus_1": (lambda a: a ** -1, [_pos(5)]),
    "pow_1_7": (lambda a: a ** 1.7, [_pos(5)]),
    "pow_tensor": (lambda a, b: a ** b, [_pos(4), _t(4)]),
    "abs": (lambda a: pa.abs(a) * a, [_away_from_ties(6)]),
    "exp": (lambda a: pa.exp(a), [_t(5)]),
    "log": (lambda a: pa.log(a), [_pos(5)]),
    "sqrt": (lambda a: pa.sqrt(a), [_pos(5)]),
    "sin": (lambda a: pa.sin(a), [_t(5)]),
    "cos": (lambda a: pa.cos(a), [_t(5)]),
    "tanh": (lambda a: pa.tanh(a), [_t(5)]),
    "sigmoid": (lambda a: pa.sigmoid(a), [_t(5)]),
    "silu": (lambda a: pa.silu(a), [_t(5)]),
    "relu": (lambda a: pa.relu(a) * a, [_away_from_ties(6)]),
    "leaky_relu": (lambda a: pa.leaky_relu(a, 0.2) * a, [_away_from_ties(6)]),
    "clip": (lambda a: pa.clip(a, -0.5, 0.8) * a, [_away_from_ties(6)]),
    "maximum": (lambda a, b: pa.maximum(a, b) * a, [_away_from_ties(6), _t(6) * 0.01]),
    "minimum": (lambda a, b: pa.minimum(a, b) * b, [_away_from_ties(6), _t(6) * 0.01]),
    "where": (lambda a, b: pa.where(a.numpy() > 0, a * a, b * a), [_away_from_ties(6), _t(6)]),
    "gelu_exact": (lambda a: pa.gelu(a), [_t(6, lo=-3, hi=3)]),
    "gelu_tanh": (lambda a: pa.gelu(a, approximate="tanh"), [_t(6, lo=-3, hi=3)]),
    "sum": (lambda a: pa.sum(a * a, axis=1), [_t(3, 4)]),
    "sum_all": (lambda a: pa.sum(a * a), [_t(3, 4)]),
    "mean": (lambda a: pa.mean(a * a, axis=0, keepdims=True), [_t(3, 4)]),
    "max": (lambda a: pa.amax(a, axis=1) * pa.max(a, 1).values, [_away_from_ties(3, 4)]),
    "min": (lambda a: pa.min(a) * pa.min(a), [_away_from_ties(3, 4)]),
    "var": (lambda a: pa.var(a, axis=1), [_t(3, 4)]),
    "logsumexp": (lambda a: pa.logsumexp(a, axis=-1), [_t(3, 4)]),
    "softmax": (lambda a: pa.softmax(a, axis=-1), [_t(3, 4)]),
    "log_softmax": (lambda a: pa.log_softmax(a, axis=0), [_t(3, 4)]),
    "reshape": (lambda a: pa.reshape(a * a, (2, 6)), [_t(3, 4)]),
    "permute": (lambda a: pa.permute(a * a, (2, 0, 1)), [_t(2, 3, 4)]),
    "transpose": (lambda a: pa.transpose(a * a, 0, 2), [_t(2, 3, 4)]),
    "broadcast_to": (lambda a: pa.broadcast_to(a, (3, 4)) * pa.broadcast_to(a, (3, 4)),
                     [_t(1, 4)]),
    "squeeze": (lambda a: pa.squeeze(a * a, 1), [_t(3, 1, 4)]),
    "unsqueeze": (lambda a: pa.unsqueeze(a * a, 0), [_t(3, 4)]),
    "getitem_basic": (lambda a: (a * a)[1:, ::2], [_t(3, 4)]),
    "getitem_repeats": (lambda a: (a * a)[np.array([0, 2, 0])], [_t(3, 4)]),
    "pad": (lambda a: pa.pad(a * a, ((1, 0), (0, 2))), [_t(3, 4)]),
    "concat": (lambda a, b: pa.concat([a * b, b * b], axis=1), [_t(3, 2), _t(3, 2)]),
    "stack": (lambda a, b: pa.stack([a * b, a * a], axis=0), [_t(3, 2), _t(3, 2)]),
    "matmul": (lambda a, b: pa.matmul(a * a, b), [_t(3, 4), _t(4, 2)]),
    "matmul_batched": (lambda a, b: pa.matmul(a, b * b), [_t(2, 3, 4), _t(4, 2)]),
    "matmul_vec_mat": (lambda a, b: pa.matmul(a * a, b), [_t(4), _t(2, 4, 3)]),
    "matmul_mat_vec": (lambda a, b: pa.matmul(a, b * b), [_t(2, 3, 4), _t(4)]),
    "matmul_vec_vec": (lambda a, b: pa.matmul(a * a, b), [_t(4), _t(4)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_second_derivatives_match_finite_differences(name):
    fn, inputs = CASES[name]
    assert pa.gradgradcheck(fn, inputs)


def test_cast_second_derivative():
    """Through float32 and back (finite differences cannot see through float32)."""
    x = pa.tensor(np.array([0.5, -1.25]), requires_grad=True)
    y = G.cast(G.cast(x * x * x, dtype=np.float32), dtype=np.float64).sum()
    (g,) = pa.grad(y, x, create_graph=True)
    assert g.dtype == np.float64
    np.testing.assert_array_equal(g.numpy(), 3 * x.numpy() ** 2)
    (g2,) = pa.grad(g.sum(), x)
    np.testing.assert_array_equal(g2, 6 * x.numpy())


def test_gradgradcheck_catches_a_wrong_second_derivative():
    """A differentiable form that disagrees with the fast rule (1% off) is caught: its
    first-order values are compared with the fast rule's."""
    op = pa.sin.op  # the registry entry: the formula is the create_graph form
    good = op.formulas
    op.formulas = (lambda g, ans, x: g * pa.cos(x) * 1.01,)
    try:
        with pytest.raises(AssertionError, match="differentiable form"):
            pa.gradgradcheck(lambda a: pa.sin(a), [_t(4)])
    finally:
        op.formulas = good


def test_third_order_of_a_polynomial_is_exact():
    x = pa.tensor(np.array([0.5, -2.0]), requires_grad=True)
    y = (x ** 4).sum()
    (g1,) = pa.grad(y, x, create_graph=True)
    (g2,) = pa.grad(g1.sum(), x, create_graph=True)
    (g3,) = pa.grad(g2.sum(), x)
    np.testing.assert_allclose(g1.numpy(), 4 * x.numpy() ** 3)
    np.testing.assert_allclose(g2.numpy(), 12 * x.numpy() ** 2)
    np.testing.assert_allclose(g3, 24 * x.numpy())


def test_backward_create_graph_leaves_a_differentiable_grad():
    x = pa.tensor(np.array([0.3, -1.2, 2.0]), requires_grad=True)
    (pa.sin(x) * x).sum().backward(create_graph=True)
    g = x.grad
    assert isinstance(g, pa.Tensor) and g.grad_fn is not None
    np.testing.assert_allclose(g.numpy(), np.cos(x.numpy()) * x.numpy() + np.sin(x.numpy()))
    x.grad = None
    (g * g).sum().backward()  # a gradient penalty: d/dx |g|^2
    gd = np.cos(x.numpy()) * x.numpy() + np.sin(x.numpy())
    want = 2 * gd * (-np.sin(x.numpy()) * x.numpy() + 2 * np.cos(x.numpy()))
    np.testing.assert_allclose(x.grad, want, rtol=1e-12)


def test_create_graph_accumulates_into_an_existing_grad():
    x = pa.tensor(np.array([1.0, 2.0]), requires_grad=True)
    x.grad = np.array([10.0, 20.0])
    (x * x).sum().backward(create_graph=True)
    assert isinstance(x.grad, pa.Tensor)
    np.testing.assert_array_equal(x.grad.numpy(), [12.0, 24.0])
    (x * x).sum().backward(create_graph=True)  # a Tensor .grad: the sum is recorded too
    np.testing.assert_array_equal(x.grad.numpy(), [14.0, 28.0])
    (g2,) = pa.grad(x.grad.sum(), x)
    np.testing.assert_array_equal(g2, [4.0, 4.0])


def test_retain_graph_defaults_to_create_graph():
    x = pa.tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = (pa.exp(x) * x).sum()
    pa.grad(y, x, create_graph=True)
    pa.grad(y, x)  # the graph was kept: a second pass works
    with pytest.raises(RuntimeError, match="second time"):
        pa.grad(y, x)


def test_grad_outputs_with_a_graph_are_differentiated_too():
    """The double-vjp trick: the result is differentiable with respect to grad_outputs."""
    x = pa.tensor(np.array([0.4, -0.7]), requires_grad=True)
    u = pa.tensor(np.zeros(2), requires_grad=True)
    (g,) = pa.grad(pa.tanh(x), x, grad_outputs=u, create_graph=True)
    v = np.array([2.0, -3.0])
    (jv,) = pa.grad(g, u, grad_outputs=v)
    np.testing.assert_allclose(jv, (1 - np.tanh(x.numpy()) ** 2) * v)


def test_hooks_see_tensors_and_their_results_are_differentiated():
    x = pa.tensor(np.array([0.5, 1.5]), requires_grad=True)
    y = x * x
    seen = []

    def hook(g):
        seen.append(type(g))
        return g * x  # the hook's ops are recorded too

    y.register_hook(hook)
    (g,) = pa.grad(y.sum(), x, create_graph=True)
    assert seen == [pa.Tensor]
    np.testing.assert_allclose(g.numpy(), 2 * x.numpy() ** 2)
    (g2,) = pa.grad(g.sum(), x)
    np.testing.assert_allclose(g2, 4 * x.numpy())


def test_an_op_without_a_differentiable_rule_is_named_and_changes_nothing():
    cube = pa.primitive("my_cube", lambda x: x ** 3, lambda g, ans, x: g * 3 * x ** 2)
    x = pa.tensor(np.array([1.0, 2.0]), requires_grad=True)
    x.grad = np.array([5.0, 5.0])
    before = x.grad.clone()
    y = (cube(x) * x).sum()
    with pytest.raises(RuntimeError, match="my_cube has no differentiable backward"):
        y.backward(create_graph=True)
    assert_bitwise([before], [x.grad])
    y.backward()  # first order still works (the graph was retained by the failed call)
    np.testing.assert_allclose(x.grad, before + 4 * x.numpy() ** 3)


def test_a_differentiable_form_can_be_given_to_a_users_op():
    cube = pa.primitive("my_cube2", lambda x: x ** 3, lambda g, ans, x: g * 3 * x ** 2)
    cube.vjps[0].graph = lambda g, ans, x: g * 3 * x * x
    assert pa.gradgradcheck(lambda a: cube(a), [_t(4)])


# ---- the functional API against torch.autograd.functional --------------------------------
def _torch():
    return pytest.importorskip("torch")


W1 = RNG.standard_normal((5, 4)) * 0.5
B1 = RNG.standard_normal(5) * 0.1
W2 = RNG.standard_normal((3, 5)) * 0.5


def _softplus(lib, x):
    return lib.log(1 + lib.exp(x))


def _mlp(lib, x):
    t = lib.tanh(lib.matmul(lib.tensor(W1), x) + lib.tensor(B1))
    return lib.matmul(lib.tensor(W2), _softplus(lib, t))


def _xent(lib, x):
    logits = _mlp(lib, x)
    logp = lib.log_softmax(logits, 0) if lib is pa else lib.log_softmax(logits, 0)
    return -logp[1]


def _layer_norm(lib, x):
    mu = lib.mean(x) if lib is pa else x.mean()
    c = x - mu
    var = lib.mean(c * c) if lib is pa else (c * c).mean()
    y = c / lib.sqrt(var + 1e-5)
    return (y * lib.tensor(np.arange(1.0, 5.0)) + 0.5).sum() * (y * y * y).sum()


MODELS = {"mlp_tanh_softplus": _mlp, "softmax_cross_entropy": _xent, "layer_norm": _layer_norm}


@pytest.mark.parametrize("model", sorted(MODELS))
def test_functional_api_matches_torch(model):
    torch = _torch()
    f = MODELS[model]
    x0 = RNG.standard_normal(4)
    v_in = RNG.standard_normal(4)
    out0 = f(torch, torch.tensor(x0))
    v_out = RNG.standard_normal(tuple(out0.shape))
    ours = lambda x: f(pa, x)  # noqa: E731
    theirs = lambda x: f(torch, x)  # noqa: E731
    X, T = pa.tensor(x0), torch.tensor(x0)
    tf = torch.autograd.functional

    def close(a, b):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-12)

    close(AF.jacobian(ours, X), tf.jacobian(theirs, T))
    close(AF.vjp(ours, X, pa.tensor(v_out))[1], tf.vjp(theirs, T, torch.tensor(v_out))[1])
    close(AF.jvp(ours, X, pa.tensor(v_in))[1], tf.jvp(theirs, T, torch.tensor(v_in))[1])
    if out0.numel() == 1:
        close(AF.hessian(ours, X), tf.hessian(theirs, T))
        close(AF.hvp(ours, X, pa.tensor(v_in))[1], tf.hvp(theirs, T, torch.tensor(v_in))[1])
        close(AF.vhp(ours, X, pa.tensor(v_in))[1], tf.vhp(theirs, T, torch.tensor(v_in))[1])


def test_hessian_of_two_inputs_is_nested_like_pytorchs():
    a, b = pa.tensor(np.array([0.5, 1.0])), pa.tensor(np.array([2.0]))
    H = AF.hessian(lambda x, y: (x * x * y).sum(), (a, b))
    assert isinstance(H, tuple) and len(H) == 2 and len(H[0]) == 2
    assert H[0][0].shape == (2, 2) and H[0][1].shape == (2, 1) and H[1][1].shape == (1, 1)
    np.testing.assert_allclose(H[0][0].numpy(), np.diag([4.0, 4.0]))
    np.testing.assert_allclose(H[0][1].numpy(), [[1.0], [2.0]])
    np.testing.assert_allclose(H[1][0].numpy(), [[1.0, 2.0]])
    np.testing.assert_allclose(H[1][1].numpy(), [[0.0]])


def test_functional_results_are_constants_unless_create_graph():
    x = pa.tensor(np.array([0.5, 1.0]), requires_grad=True)
    _, g = AF.vjp(lambda t: pa.exp(t), x, pa.tensor(np.ones(2)))
    assert g.grad_fn is None
    _, g = AF.vjp(lambda t: pa.exp(t), x, pa.tensor(np.ones(2)), create_graph=True)
    (gg,) = pa.grad(g.sum(), x)
    np.testing.assert_allclose(gg, np.exp(x.numpy()))


def test_functional_strict_and_bad_arguments():
    x = pa.tensor(np.array([0.5, 1.0]))
    with pytest.raises(RuntimeError, match="independent of input 1"):
        AF.jacobian(lambda a, b: a * 2, (x, x), strict=True)
    J = AF.jacobian(lambda a, b: a * 2, (x, x))
    np.testing.assert_array_equal(J[1].numpy(), np.zeros((2, 2)))
    with pytest.raises(RuntimeError, match="single element"):
        AF.vjp(lambda a: a * 2, x)
    with pytest.raises(RuntimeError, match="shape"):
        AF.jvp(lambda a: a * 2, x, pa.tensor(np.ones(3)))
    with pytest.raises(TypeError, match="expected a Tensor"):
        AF.jacobian(lambda a: a, np.ones(2))
    with pytest.raises(RuntimeError, match="single Tensor with one element"):
        AF.hessian(lambda a: a * 2, x)


# ---- both engines record the same graph --------------------------------------------------
def _wide(x, ws):
    branches = [pa.tanh(pa.matmul(x, w)) * pa.sin(x).sum() for w in ws]
    out = branches[0]
    for b in branches[1:]:
        out = out + b * b
    return out.sum()


def _made_graph(grads, first_new_seq: int) -> list:
    """The nodes a create_graph pass made, in seq order, each as (name, its inputs: the
    rank of a made node, or the name of an older one): equal lists mean the same graph
    numbered the same way."""
    made, stack = set(), [g.grad_fn for g in grads if g.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node in made or node.seq < first_new_seq:
            continue
        made.add(node)
        stack.extend(n for n in node.next_nodes if n is not None)
    order = sorted(made, key=lambda n: n.seq)
    rank = {n: i for i, n in enumerate(order)}
    return [(n.name, tuple(None if m is None else rank.get(m, m.name) for m in n.next_nodes))
            for n in order]


def _creation_order_is_valid(roots) -> int:
    stack, seen = [r.grad_fn for r in roots], set()
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        for nxt in node.next_nodes:
            if nxt is not None:
                assert nxt.seq < node.seq, f"{nxt} is an input of {node}"
                stack.append(nxt)
    return len(seen)


def _second_order(engine_grad):
    rng = np.random.default_rng(3)
    x = pa.tensor(rng.standard_normal((6, 5)), requires_grad=True)
    ws = [pa.tensor(rng.standard_normal((5, 5)), requires_grad=True) for _ in range(6)]
    y = _wide(x, ws)
    first_new = next_seq()
    g = engine_grad(y, [x] + ws)
    graph = _made_graph(g, first_new)
    penalty = sum(((gi * gi).sum() for gi in g[1:]), (g[0] * g[0]).sum())
    second = pa.grad(penalty, [x] + ws)
    return [gi.numpy() for gi in g], second, graph


@pytest.fixture
def jittered_forms(monkeypatch):
    """tanh's and sin's differentiable forms sleep a random 0-2 ms: the threads of a
    parallel pass make their nodes in a different order every time."""
    rng = np.random.default_rng(11)
    lock = threading.Lock()

    def jitter(form):
        def slow(*args, **kwargs):
            with lock:
                d = rng.uniform(0, 0.002)
            time.sleep(d)
            return form(*args, **kwargs)
        return slow

    for fn in (pa.tanh, pa.sin):
        monkeypatch.setattr(fn.op, "formulas", (jitter(fn.op.formulas[0]),))


@pytest.mark.parametrize("workers", [2, 3, 8])
def test_parallel_create_graph_is_bitwise_the_sequential_one(workers, jittered_forms):
    with threadpool_limits(1, user_api="blas"):
        seq_first, seq_second, seq_graph = _second_order(
            lambda y, xs: pa.grad(y, xs, create_graph=True))
        opts = dict(min_nodes=0, min_work=0, min_width=0, inline_below=0, max_blas_share=1.0)
        with pa.Engine(workers, **opts) as eng:
            for _ in range(3):
                modes = []

                def parallel_grad(y, xs):
                    g = eng.grad(y, xs, create_graph=True)
                    modes.append(eng.last_stats.mode)
                    return g

                first, second, graph = _second_order(parallel_grad)
                # the create_graph pass ran in parallel: several threads recorded the graph,
                # and it is the sequential pass's graph, numbered in the same order
                assert modes == ["parallel"]
                assert graph == seq_graph
                assert_bitwise(seq_first, first, "first order")
                assert_bitwise(seq_second, second, "second order")


def test_backward_parallel_create_graph_writes_tensor_grads():
    x = pa.tensor(np.array([0.3, 0.9]), requires_grad=True)
    with pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0) as eng:
        eng.backward((pa.exp(x) * x).sum(), create_graph=True)
        assert isinstance(x.grad, pa.Tensor)
        g = x.grad
        x.grad = None
        eng.backward(g.sum())
    np.testing.assert_allclose(x.grad, np.exp(x.numpy()) * (x.numpy() + 2))


def test_renumbered_graph_is_a_valid_creation_order():
    """Every node a create_graph pass made has a larger seq than each of its inputs."""
    x = pa.tensor(RNG.standard_normal((4, 3)), requires_grad=True)
    w = pa.tensor(RNG.standard_normal((3, 3)), requires_grad=True)
    with pa.Engine(3, min_nodes=0, min_work=0, min_width=0, inline_below=0) as eng:
        (g,) = eng.grad(_wide(x, [w, w * 2, w * 3]), [w], create_graph=True)
    assert _creation_order_is_valid([g]) > 30


@pytest.mark.parametrize("w_shape", [(3, 4), (4,)])
def test_linear_second_derivatives(w_shape):
    F = pa.nn.functional
    inputs = [_t(2, 4), _t(*w_shape)] + ([_t(3)] if len(w_shape) == 2 else [])
    assert pa.gradgradcheck(lambda x, w, *b: pa.tanh(F.linear(x, w, *b)), inputs)


class _NumpyCos(pa.Function):
    """A backward on arrays only (np.sin): fine at first order, not on Tensors."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return np.cos(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return -np.sin(x) * g


def test_a_function_whose_backward_needs_arrays_is_named_and_changes_nothing():
    x = _t(3)
    x.grad = prior = np.ones(3)
    y = (_NumpyCos.apply(x) * x).sum()
    with pytest.raises(RuntimeError, match="create_graph: _NumpyCos.backward failed on "
                                           "Tensors.*once_differentiable"):
        y.backward(create_graph=True)
    assert x.grad.numpy() is prior and np.array_equal(prior, np.ones(3))
    y.backward()  # first order still works
    np.testing.assert_allclose(x.grad, 1 - np.sin(x.numpy()) * x.numpy() + np.cos(x.numpy()))


class _Cube(pa.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * g


class _ExpScaled(pa.Function):
    """exp(x) * k, saving its output and a constant: the output is on the graph."""

    @staticmethod
    def forward(ctx, x, k):
        out = np.exp(x) * k
        ctx.save_for_backward(out)
        ctx.k = k
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g * out, None


class _TwoInputs(pa.Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y, x * y)   # x * y: a new array, a constant
        return x * x * y

    @staticmethod
    def backward(ctx, g):
        x, y, _ = ctx.saved_tensors
        return 2 * x * y * g, x * x * g


@pytest.mark.parametrize("fn, shapes", [
    (lambda x: _Cube.apply(pa.sin(x)), [(4,)]),
    (lambda x: _ExpScaled.apply(x * x, 1.5), [(2, 3)]),
    (lambda x, y: _TwoInputs.apply(x, pa.tanh(y)), [(3,), (3,)]),
])
def test_user_functions_are_differentiable_to_any_order(fn, shapes):
    inputs = [_t(*s) for s in shapes]
    assert pa.gradgradcheck(fn, inputs)

    def first_order(*xs):
        gs = pa.grad((fn(*xs) ** 2).sum(), list(xs), create_graph=True)
        return pa.concat([pa.reshape(g, (-1,)) for g in gs])

    assert pa.gradgradcheck(first_order, inputs)  # third order


class _OnceCube(pa.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    @pa.once_differentiable
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * np.square(x) * g


@pytest.mark.parametrize("engine", ["sequential", "parallel"])
def test_once_differentiable_runs_once_and_refuses_a_second_time(engine):
    x = _t(4)
    y = (_OnceCube.apply(x) * pa.sin(x)).sum()
    if engine == "sequential":
        (g,) = pa.grad(y, x, create_graph=True)
    else:
        with pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0) as eng:
            (g,) = eng.grad(y, x, create_graph=True)
    d = x.numpy()
    np.testing.assert_allclose(g.numpy(), 3 * d ** 2 * np.sin(d) + d ** 3 * np.cos(d))
    x.grad = prior = np.zeros(4)
    with pytest.raises(RuntimeError, match="_OnceCube.backward is marked once_differentiable"):
        g.sum().backward()
    assert x.grad.numpy() is prior and not prior.any()


def test_turning_grad_on_inside_a_hook_keeps_the_pass_numbering():
    """enable_grad / set_grad_enabled(True) in a hook of a create_graph pass leave the
    pass's recording in place: the nodes the hook makes are renumbered with the rest."""
    x = pa.tensor(RNG.standard_normal(4), requires_grad=True)
    y = pa.tanh(x) * x

    def hook(g):
        with pa.enable_grad():
            pa.set_grad_enabled(True)
            return g * pa.sin(x)

    y.register_hook(hook)
    first_new = next_seq()
    (g,) = pa.grad((y * y).sum(), x, create_graph=True)
    made = _made_graph([g], first_new)
    assert ("sin", (None,)) not in made and any(name == "sin" for name, _ in made)
    _creation_order_is_valid([g])
    assert pa.is_grad_enabled()


def _nested_pass_first_order(x_data):
    """d/dx sum(y^2), y = tanh(x) x, with y's gradient multiplied by dz/dx,
    z = sum((sin(x) x)^2)."""
    t = np.tanh(x_data)
    y = t * x_data
    dz = 2 * np.sin(x_data) * x_data * (np.cos(x_data) * x_data + np.sin(x_data))
    return 2 * y * dz * ((1 - t * t) * x_data + t)


@pytest.mark.parametrize("engine", ["sequential", "parallel"])
def test_a_create_graph_pass_inside_a_hook_of_one_is_numbered_with_it(engine):
    """A hook of a create_graph pass that runs a create_graph pass itself (as a
    checkpoint's recomputation does): the inner pass's nodes take inputs the hook made
    before calling it, so they are numbered after them, with the outer pass's nodes."""
    x = pa.tensor(RNG.standard_normal(5), requires_grad=True)
    y = pa.tanh(x) * x

    def hook(g):
        z = pa.sin(x) * x
        (dz,) = pa.grad((z * z).sum(), x, create_graph=True)
        return g * dz

    handle = y.register_hook(hook)
    if engine == "sequential":
        (g,) = pa.grad((y * y).sum(), x, create_graph=True)
    else:
        with pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0) as eng:
            (g,) = eng.grad((y * y).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.numpy(), _nested_pass_first_order(x.numpy()), rtol=1e-12)
    assert _creation_order_is_valid([g]) > 10
    handle.remove()  # y's node is on g's graph too: the hook would fire again
    (gg,) = pa.grad(g.sum(), x)
    eps = 1e-6
    fd = [(_nested_pass_first_order(x.numpy() + eps * e).sum()
           - _nested_pass_first_order(x.numpy() - eps * e).sum()) / (2 * eps) for e in np.eye(5)]
    np.testing.assert_allclose(gg.numpy(), fd, rtol=1e-6, atol=1e-8)


# ---- nn.functional: every layer op's second derivative -------------------------------------
F = pa.nn.functional
_IDX = np.array([[1, 3, 3], [0, 2, 1]])

NN_CASES = {
    "conv2d_same": (lambda x, w, b: F.conv2d(x, w, b, padding=1),
                    [_t(2, 2, 4, 4), _t(3, 2, 3, 3), _t(3)]),
    "conv2d_strided": (lambda x, w: pa.tanh(F.conv2d(x, w, stride=2)),
                       [_t(2, 2, 5, 5), _t(3, 2, 2, 2)]),
    "conv2d_padded_stride": (lambda x, w: F.conv2d(x * x, w, stride=(2, 1), padding=(1, 0)),
                             [_t(1, 2, 5, 4), _t(2, 2, 3, 2)]),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2) * F.max_pool2d(x, 2),
                   [_away_from_ties(2, 2, 4, 4)]),
    "max_pool2d_overlapping": (lambda x: F.max_pool2d(x * x, 3, stride=2, padding=1),
                               [_away_from_ties(1, 2, 5, 5)]),
    "avg_pool2d": (lambda x: F.avg_pool2d(x * x, 2), [_t(2, 2, 4, 4)]),
    "avg_pool2d_pad_uncounted": (lambda x: F.avg_pool2d(x * x, 3, stride=2, padding=1,
                                                        count_include_pad=False),
                                 [_t(1, 2, 5, 5)]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (4,), w, b), [_t(3, 4), _t(4), _t(4)]),
    "layer_norm_2d_no_weight": (lambda x: F.layer_norm(x, (2, 3)), [_t(2, 2, 3)]),
    "layer_norm_bias_only": (lambda x, b: F.layer_norm(x, (4,), None, b) * x,
                             [_t(3, 4), _t(4)]),
    "rms_norm": (lambda x, w: F.rms_norm(x, (4,), w), [_t(3, 4), _t(4)]),
    "rms_norm_no_weight": (lambda x: F.rms_norm(x, (2, 3), eps=1e-3), [_t(2, 2, 3)]),
    "embedding": (lambda w: F.embedding(_IDX, w) * F.embedding(_IDX, w), [_t(5, 3)]),
    "embedding_padding_idx": (lambda w: F.embedding(_IDX, w * w, padding_idx=3), [_t(5, 3)]),
    "dropout": (lambda x: F.dropout(x * x, 0.4, seed=3), [_t(4, 5)]),
    "cross_entropy": (lambda x: F.cross_entropy(x, np.array([0, 2, 1])), [_t(3, 4)]),
    "cross_entropy_weighted_smoothed": (
        lambda x, w: F.cross_entropy(x * w, np.array([0, 2, -100, 3]), pa.tensor([1., 2, .5, 1]),
                                     label_smoothing=0.2, reduction="none"),
        [_t(4, 4), _t(4)]),
    "cross_entropy_sum_ignored": (
        lambda x: F.cross_entropy(x, np.array([1, 7, 0]), ignore_index=7, reduction="sum"),
        [_t(3, 4)]),
    "nll_loss": (lambda x: F.nll_loss(F.log_softmax(x, dim=1), np.array([0, 2, 1]),
                                      pa.tensor([1., 2., .5, 1.])), [_t(3, 4)]),
    "sdpa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
             [_t(2, 3, 4), _t(2, 5, 4), _t(2, 5, 2)]),
    "sdpa_causal": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                    [_t(1, 4, 3), _t(1, 4, 3), _t(1, 4, 3)]),
    "sdpa_float_mask": (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m),
                        [_t(3, 2), _t(4, 2), _t(4, 3), _t(3, 4)]),
    "sdpa_bool_mask_dropout_broadcast": (
        lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, np.array([[1, 0, 1], [1, 1, 0]], bool), dropout_p=0.3, seed=5),
        [_t(2, 2, 2, 3), _t(2, 3, 3), _t(3, 2)]),
}


@pytest.mark.parametrize("name", sorted(NN_CASES))
def test_nn_second_derivatives_match_finite_differences(name):
    fn, inputs = NN_CASES[name]
    assert pa.gradgradcheck(fn, inputs)


@pytest.mark.parametrize("name", ["conv2d_same", "conv2d_strided", "avg_pool2d",
                                  "layer_norm", "sdpa"])
def test_nn_third_derivatives(name):
    """The forms' own forms: differentiate a create_graph gradient with create_graph."""
    fn, inputs = NN_CASES[name]

    def first_order(*xs):
        out = fn(*xs)
        gs = pa.grad((out * out).sum(), list(xs), create_graph=True)
        return pa.concat([pa.reshape(g, (-1,)) for g in gs])

    assert pa.gradgradcheck(first_order, inputs)


# the same nn ops against PyTorch's double backward: (F, inputs) -> output, on either library
_TORCH_NN = {
    "conv2d": (lambda F, x, w, b: F.conv2d(x, w, b, stride=2, padding=1),
               [(2, 3, 6, 5), (4, 3, 3, 3), (4,)]),
    "max_pool2d": (lambda F, x: F.max_pool2d(x * x, 3, 2, 1), [(2, 2, 5, 6)]),
    "avg_pool2d": (lambda F, x: F.avg_pool2d(x * x, 3, 2, 1, count_include_pad=False),
                   [(2, 2, 5, 6)]),
    "layer_norm": (lambda F, x, w, b: F.layer_norm(x, (6,), w, b), [(4, 6), (6,), (6,)]),
    "rms_norm": (lambda F, x, w: F.rms_norm(x, (6,), w, eps=1e-6), [(4, 6), (6,)]),
    "cross_entropy": (lambda F, x: F.cross_entropy(x, _lib_of(F).tensor([2, 0, 4]),
                                                   label_smoothing=0.1), [(3, 5)]),
    "sdpa": (lambda F, q, k, v, m: F.scaled_dot_product_attention(q, k, v, m),
             [(2, 3, 4), (2, 5, 4), (2, 5, 3), (3, 5)]),
}


def _lib_of(F):
    return pa if F is pa.nn.functional else _torch()


@pytest.mark.parametrize("name", sorted(_TORCH_NN))
def test_nn_double_backward_matches_torch(name):
    """d/d(inputs) of sum of squares of the first-order gradients, both libraries."""
    torch = _torch()
    fn, shapes = _TORCH_NN[name]
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(s) for s in shapes]
    results = []
    for lib, F in ((pa, pa.nn.functional), (torch, torch.nn.functional)):
        xs = [lib.tensor(a, requires_grad=True) for a in arrays]
        out = fn(F, *xs)
        weights = lib.tensor(np.linspace(0.5, 1.5, out.numel())
                             .reshape(tuple(out.shape)))
        gs = (pa.grad if lib is pa else torch.autograd.grad)(
            (out * weights).sum(), xs, create_graph=True)
        penalty = sum((g * g).sum() for g in gs)
        second = (pa.grad if lib is pa else torch.autograd.grad)(penalty, xs, allow_unused=True)
        results.append([None if g is None else np.asarray(g.numpy() if lib is pa else
                                                          g.detach().numpy())
                        for g in list(gs) + list(second)])
    for ours, theirs in zip(*results):
        assert (ours is None) == (theirs is None)  # a bias: its gradient is constant
        if ours is not None:
            np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-11)


def _nn_model(x, ws):
    """Two branches of layer ops meeting in a loss: conv/pool/norm and attention."""
    conv_w, ln_w, q_w, emb = ws
    h = F.max_pool2d(pa.tanh(F.conv2d(x, conv_w, padding=1)), 2)        # (2, 3, 2, 2)
    h = F.layer_norm(pa.reshape(h, (2, 12)), (12,), ln_w)
    t = pa.reshape(x, (2, 4, 4)) @ q_w                                   # (2, 4, 3)
    a = F.scaled_dot_product_attention(t, t, F.dropout(t, 0.2, seed=1), is_causal=True)
    a = F.avg_pool2d(pa.reshape(a, (2, 1, 4, 3)), (2, 1))
    e = F.embedding(np.array([[1, 0], [2, 1]]), emb)                    # (2, 2, 6)
    logits = pa.concat([h[:, :4] * a.sum(), pa.reshape(e, (2, 12))[:, :4]], axis=1)
    return F.cross_entropy(logits, np.array([3, 6]), label_smoothing=0.1)


@pytest.mark.parametrize("workers", [2, 4])
def test_parallel_create_graph_through_nn_ops_is_bitwise(workers):
    rng = np.random.default_rng(8)
    x = pa.tensor(rng.standard_normal((2, 1, 4, 4)), requires_grad=True)
    ws = [pa.tensor(rng.standard_normal(s), requires_grad=True)
          for s in [(3, 1, 3, 3), (12,), (4, 3), (3, 6)]]

    def run(engine_grad):
        first_new = next_seq()
        g = engine_grad(_nn_model(x, ws), [x] + ws)
        graph = _made_graph(g, first_new)
        penalty = sum(((gi * gi).sum() for gi in g[1:]), (g[0] * g[0]).sum())
        return [gi.numpy() for gi in g], pa.grad(penalty, [x] + ws), graph

    with threadpool_limits(1, user_api="blas"):
        seq = run(lambda y, xs: pa.grad(y, xs, create_graph=True))
        opts = dict(min_nodes=0, min_work=0, min_width=0, inline_below=0, max_blas_share=1.0)
        with pa.Engine(workers, **opts) as eng:
            par = run(lambda y, xs: eng.grad(y, xs, create_graph=True))
            assert eng.last_stats.mode == "parallel"
    assert par[2] == seq[2]
    assert_bitwise(seq[0], par[0], "first order")
    assert_bitwise(seq[1], par[1], "second order")
    assert pa.gradcheck(lambda *xs: _nn_model(xs[0], list(xs[1:])), [x] + ws)


# ---- piecewise-linear ops: their create_graph gradient is part of the graph ---------------
# As PyTorch's (threshold_backward, sgn, max pooling's index scatter): the gradient of relu(x)
# is a function of x with derivative 0, so differentiating it again with respect to x gives
# zeros, not "x is not part of the graph" (e.g. a gradient penalty asking for the input's
# gradient), and the other inputs get theirs.
_PIECEWISE = {
    "relu": lambda lib, x, w: lib.relu(x * w),
    "abs": lambda lib, x, w: lib.abs(x * w),
    "hardtanh": lambda lib, x, w: lib.nn.functional.hardtanh(x * w),
    "leaky_relu": lambda lib, x, w: lib.nn.functional.leaky_relu(x * w, 0.1),
    "prelu": lambda lib, x, w: lib.nn.functional.prelu(
        x * w, _lib_tensor(lib, np.array([0.25, 0.1, 0.3]))),
    "l1_loss": lambda lib, x, w: lib.nn.functional.l1_loss(x * w, x * 0 + 0.5),
    "max_pool2d": lambda lib, x, w: lib.nn.functional.max_pool2d(x * w, 2),
    "adaptive_max_pool2d": lambda lib, x, w: lib.nn.functional.adaptive_max_pool2d(x * w, 3),
    "max_pool3d": lambda lib, x, w: lib.nn.functional.max_pool3d((x * w)[None], 2),
    "norm_1": lambda lib, x, w: lib.norm(x * w, 1),
    "norm_inf": lambda lib, x, w: lib.norm(x * w, float("inf")),
}


def _lib_tensor(lib, a):
    return pa.tensor(a) if lib is pa else lib.tensor(a)


@pytest.mark.parametrize("name", sorted(_PIECEWISE))
def test_piecewise_gradients_are_part_of_the_graph(name):
    torch = _torch()
    rng = np.random.default_rng(21)
    x0, w0 = rng.standard_normal((2, 3, 4, 4)), rng.standard_normal((2, 3, 4, 4))
    x, w = pa.tensor(x0, requires_grad=True), pa.tensor(w0, requires_grad=True)
    (g,) = pa.grad(_PIECEWISE[name](pa, x, w).sum(), [x], create_graph=True)
    assert g.requires_grad
    gx, gw = pa.grad((g * g).sum(), [x, w])
    xt, wt = torch.tensor(x0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    (gt,) = torch.autograd.grad(_PIECEWISE[name](torch, xt, wt).sum(), [xt],
                                create_graph=True)
    tx, tw = torch.autograd.grad((gt * gt).sum(), [xt, wt])
    np.testing.assert_array_equal(gx, np.zeros_like(x0))
    assert tx._is_zerotensor() or not tx.any()         # PyTorch's: zeros too
    np.testing.assert_allclose(gw, tw.numpy(), rtol=1e-12, atol=1e-14)
    # the relu of a leaf alone: g is ones times a function of x, and its derivative is 0
    (g,) = pa.grad(pa.relu(x).sum(), [x], create_graph=True)
    np.testing.assert_array_equal(pa.grad((g * g).sum(), [x])[0], np.zeros_like(x0))
