"""In-place ops on tensors with a gradient history, checked against PyTorch itself
(parallel_autograd/ops/writes/record.py; docs/inplace.md).

- every in-place method (and `+= -= *= /=`) on a non-leaf is recorded: the same Python
  object gets a new grad_fn, its memory holds the new values, its version is bumped, and
  values and gradients are PyTorch's, on both engines bit for bit;
- a value some node saved and the write changed makes backward raise PyTorch's
  RuntimeError; nodes that saved nothing of it (add, linear, batch_norm, conv) do not;
- a leaf that requires grad is refused with PyTorch's message, except under no_grad;
- a view of a tensor with history is refused (RuntimeError), never a wrong gradient;
- create_graph differentiates through a recorded in-place op, as PyTorch's.
"""
from __future__ import annotations

import numpy as np
import pytest

import parallel_autograd as pa
import parallel_autograd.nn.functional as PF

torch = pytest.importorskip("torch")
TF = torch.nn.functional

RNG = np.random.default_rng(0)
X = RNG.standard_normal((4, 3))
W = RNG.standard_normal((4, 3))
POS = X * X + 0.5
MASK = X > 0
WEIGHTS = np.arange(12.0).reshape(4, 3) / 7  # the loss: (y * WEIGHTS).sum()
VERSION_ERROR = "modified by an inplace operation"
LEAF = "a leaf Variable that requires grad is being used in an in-place operation."


def _idx(lib, a):
    return lib.tensor(np.asarray(a, dtype=np.int64))


def _aug(op):
    """`y op= operand` as a function returning y (the augmented assignments)."""
    def run(y, other):
        if op == "+":
            y += other
        elif op == "-":
            y -= other
        elif op == "*":
            y *= other
        else:
            y /= other
        return y
    return run


# name -> (the tensor written: a function of x, the write: (lib, y, w) -> y)
METHODS = {
    "add_": (lambda x: x * 2, lambda L, y, w: y.add_(w, alpha=0.5)),
    "sub_": (lambda x: x * 2, lambda L, y, w: y.sub_(w, alpha=2)),
    "mul_": (lambda x: x * 2, lambda L, y, w: y.mul_(w)),
    "div_": (lambda x: x * 2, lambda L, y, w: y.div_(w * w + 1)),
    "+=": (lambda x: x * 2, lambda L, y, w: _aug("+")(y, w)),
    "-=": (lambda x: x * 2, lambda L, y, w: _aug("-")(y, w)),
    "*=": (lambda x: x * 2, lambda L, y, w: _aug("*")(y, w)),
    "/=": (lambda x: x * 2, lambda L, y, w: _aug("/")(y, 3.0)),
    "neg_": (lambda x: x * 2, lambda L, y, w: y.neg_()),
    "zero_": (lambda x: x * 2, lambda L, y, w: y.zero_()),
    "fill_": (lambda x: x * 2, lambda L, y, w: y.fill_(1.5)),
    "copy_": (lambda x: x * 2, lambda L, y, w: y.copy_(w)),
    "clamp_": (lambda x: x * 2, lambda L, y, w: y.clamp_(min=-0.5, max=0.7)),
    "clip_": (lambda x: x * 2, lambda L, y, w: y.clip_(-0.5, 0.7)),
    "addcmul_": (lambda x: x * 2, lambda L, y, w: y.addcmul_(w, w, value=0.5)),
    "lerp_": (lambda x: x * 2, lambda L, y, w: y.lerp_(w, 0.3)),
    "masked_fill_": (lambda x: x * 2, lambda L, y, w: y.masked_fill_(L.tensor(MASK), 0.25)),
    "index_fill_": (lambda x: x * 2, lambda L, y, w: y.index_fill_(1, _idx(L, [0, 2]), -1.0)),
    "scatter_": (lambda x: x * 2,
                 lambda L, y, w: y.scatter_(1, _idx(L, [[0], [1], [2], [0]]), w[:, :1] * 1)),
    "scatter_add_": (lambda x: x * 2,
                     lambda L, y, w: y.scatter_add_(1, _idx(L, [[0], [1], [2], [0]]),
                                                    w[:, :1] * 1)),
    "index_add_": (lambda x: x * 2,
                   lambda L, y, w: y.index_add_(0, _idx(L, [0, 2]), w[:2] * 1, alpha=2)),
    "exp_": (lambda x: x * 0.5, lambda L, y, w: y.exp_()),
    "sqrt_": (lambda x: x * x + 0.5, lambda L, y, w: y.sqrt_()),
    "log_": (lambda x: x * x + 0.5, lambda L, y, w: y.log_()),
    "abs_": (lambda x: x * 2, lambda L, y, w: y.abs_()),
    "relu_": (lambda x: x * 2, lambda L, y, w: y.relu_()),
    "sigmoid_": (lambda x: x * 2, lambda L, y, w: y.sigmoid_()),
    "tanh_": (lambda x: x * 2, lambda L, y, w: y.tanh_()),
    "square_": (lambda x: x * 2, lambda L, y, w: y.square_()),
    "sin_": (lambda x: x * 2, lambda L, y, w: y.sin_()),
    "cos_": (lambda x: x * 2, lambda L, y, w: y.cos_()),
    "floor_": (lambda x: x * 3, lambda L, y, w: y.floor_()),
    "ceil_": (lambda x: x * 3, lambda L, y, w: y.ceil_()),
    "trunc_": (lambda x: x * 3, lambda L, y, w: y.trunc_()),
    "reciprocal_": (lambda x: x * x + 0.5, lambda L, y, w: y.reciprocal_()),
    "rsqrt_": (lambda x: x * x + 0.5, lambda L, y, w: y.rsqrt_()),
    "log1p_": (lambda x: x * x + 0.5, lambda L, y, w: y.log1p_()),
    "expm1_": (lambda x: x * 0.5, lambda L, y, w: y.expm1_()),
    "t_": (lambda x: x * 2, lambda L, y, w: y.t_().t_()),
    "transpose_": (lambda x: x * 2, lambda L, y, w: y.transpose_(0, 1).transpose_(1, 0)),
    "unsqueeze_": (lambda x: x * 2, lambda L, y, w: y.unsqueeze_(0).squeeze_(0)),
    "swapaxes_": (lambda x: x * 2, lambda L, y, w: y.swapaxes_(0, 1).swapaxes_(0, 1)),
    "uniform_": (lambda x: x * 2, lambda L, y, w: y.uniform_(0, 0)),   # (a constant draw)
    "normal_": (lambda x: x * 2, lambda L, y, w: y.normal_(1.0, 0.0)),
    "bernoulli_": (lambda x: x * 2, lambda L, y, w: y.bernoulli_(1.0)),
    # a chain, an operand-only graph
    "sin_ cos_ neg_ abs_": (lambda x: x * 2, lambda L, y, w: y.sin_().cos_().neg_().abs_()),
    "into a tensor without grad": (lambda x: x.detach() * 0 + 1,
                                   lambda L, y, w: y.mul_(w).add_(w)),
}


def _run(lib, name: str, backward=None):
    """The write's result, and the gradients of x and w, in `lib`."""
    make, write = METHODS[name]
    x = lib.tensor(X.copy(), requires_grad=True)
    w = lib.tensor(W.copy(), requires_grad=True)
    y = make(x)
    was = y
    out = write(lib, y, w)
    assert out is was                        # the same Python object
    loss = (y * lib.tensor(WEIGHTS)).sum()
    if backward is None:
        loss.backward()
    else:
        backward(loss)
    grads = [None if t.grad is None else np.array(t.grad.detach().numpy()) for t in (x, w)]
    return y, np.array(y.detach().numpy()), grads


@pytest.mark.parametrize("name", list(METHODS))
def test_in_place_op_on_a_tensor_with_history_matches_pytorch(name):
    t, t_values, t_grads = _run(torch, name)
    y, values, grads = _run(pa, name)
    assert y.grad_fn is not None and t.grad_fn is not None
    assert y.requires_grad and not y.is_leaf
    np.testing.assert_allclose(values, t_values, rtol=1e-12, atol=1e-12)
    for ours, theirs in zip(grads, t_grads):
        if theirs is None or not theirs.any():  # PyTorch: None or zeros (no gradient)
            assert ours is None or not ours.any()
        else:
            np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", list(METHODS))
def test_both_engines_give_the_same_bits(name):
    _, _, seq = _run(pa, name, pa.backward)
    _, _, par = _run(pa, name, lambda loss: pa.backward_parallel(loss, num_workers=2))
    for a, b in zip(seq, par):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.tobytes() == b.tobytes()


def test_the_write_bumps_the_version_and_views_and_detached_tensors_see_it():
    x = pa.tensor(X.copy(), requires_grad=True)
    y = x * 2
    v, d = y[0], y.detach()                  # taken before the write: same memory
    before = y._vc[0]
    y.mul_(3)
    assert y._vc[0] > before and v._vc is y._vc and d._vc is y._vc
    np.testing.assert_array_equal(v.numpy(), X[0] * 6)
    np.testing.assert_array_equal(d.numpy(), X * 6)


@pytest.mark.parametrize("write, equivalent", [
    (lambda y: _aug("*")(y, y), lambda y: y * y), (lambda y: y.mul_(y), lambda y: y * y),
    (lambda y: y.div_(y + 1), lambda y: y / (y + 1))])
def test_the_tensor_itself_as_an_operand_is_read_before_the_write(write, equivalent):
    # PyTorch raises at backward (mul saved its operand, which the write then changed);
    # here the old values are copied before the write, and the gradient is that of the
    # out-of-place program (a deliberate leniency, docs/inplace.md)
    x = pa.tensor(X.copy(), requires_grad=True)
    y = write(x * 0.5)
    (y * pa.tensor(WEIGHTS)).sum().backward()
    tx = torch.tensor(X.copy(), requires_grad=True)
    ty = equivalent(tx * 0.5)
    (ty * torch.tensor(WEIGHTS)).sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


# ---- values a node saved: PyTorch's error; values no node saved: no error ------------------
SAVED = {
    "sigmoid then mul_": lambda L, F, x: x.sigmoid().mul_(2),
    "exp then +=": lambda L, F, x: _aug("+")(x.exp(), 1),
    "tanh then tanh_": lambda L, F, x: x.tanh().tanh_(),
    "exp_ then add_": lambda L, F, x: (x * 1).exp_().add_(1),
    "softmax then mul_": lambda L, F, x: F.softmax(x, -1).mul_(2),
    "exp then unsqueeze_": lambda L, F, x: x.exp().unsqueeze_(0),
    "input of sqrt overwritten": lambda L, F, x: _sqrt_then_write(x),
    "exp_ then mul_ by itself": lambda L, F, x: _exp_times_itself(x * 0.5),
}
NOT_SAVED = {
    "linear then +=": lambda L, F, x: _aug("+")(F.linear(x, x[:3] * 1), 1),
    "batch_norm then +=": lambda L, F, x: _aug("+")(F.batch_norm(x, None, None,
                                                                 training=True), x),
    "layer_norm then +=": lambda L, F, x: _aug("+")(F.layer_norm(x, (3,)), 1),
    "conv1d then +=": lambda L, F, x: _aug("+")(
        F.conv1d(x.reshape(1, 4, 3), x[:, :1].reshape(4, 1, 1).expand(4, 4, 1) * 1),
        1).reshape(4, 3),
    "add then mul_": lambda L, F, x: (x + 1).mul_(x),
    "sub then -=": lambda L, F, x: _aug("-")(x - 1, x),
    "mul then relu_": lambda L, F, x: (x * x).relu_(),
    "matmul then relu_": lambda L, F, x: (x @ (x.T * 1)).relu_()[:, :3],
    "div then /=": lambda L, F, x: _aug("/")(x / (x * x + 1), 2),
    "sum then mul_": lambda L, F, x: (x.sum(0) * 1).sum().mul_(2) * x,
    "cat then add_": lambda L, F, x: L.cat([x, x]).add_(1)[:4],
    "log then exp_": lambda L, F, x: (x * x + 1).log().exp_(),
}


def _exp_times_itself(y):
    return y.exp_().mul_(y)      # exp_'s node saved its output, which mul_ then changes


def _sqrt_then_write(x):
    y = x * x + 1
    z = y.sqrt()
    y.mul_(2)               # sqrt's saved output is z, not y: still fine ...
    w = y * 1
    u = w.exp()             # ... but exp saved its output u:
    u.add_(1)
    return z + u


def _loss(lib, F, f):
    x = lib.tensor(X.copy(), requires_grad=True)
    y = f(lib, F, x)
    (y * lib.tensor(WEIGHTS[: y.shape[0]] if y.ndim == 2 else 1.0)).sum().backward()
    return np.array(x.grad.numpy())


@pytest.mark.parametrize("name", list(SAVED))
def test_a_saved_value_written_in_place_makes_backward_raise_as_in_pytorch(name):
    with pytest.raises(RuntimeError, match=VERSION_ERROR):
        _loss(torch, TF, SAVED[name])
    with pytest.raises(RuntimeError, match=VERSION_ERROR):
        _loss(pa, PF, SAVED[name])


@pytest.mark.parametrize("name", list(NOT_SAVED))
def test_a_write_into_a_value_no_node_saved_is_fine_as_in_pytorch(name):
    np.testing.assert_allclose(_loss(pa, PF, NOT_SAVED[name]),
                               _loss(torch, TF, NOT_SAVED[name]), rtol=1e-10, atol=1e-10)


def test_an_operand_viewing_the_tensor_is_refused():
    # PyTorch refuses at once ("some elements of the input tensor and the written-to
    # tensor refer to a single memory location"); here backward raises: the row's view
    # of y has changed behind its history
    x = torch.tensor(X.copy(), requires_grad=True)
    with pytest.raises(RuntimeError, match="single memory location"):
        _mul_by_row(x * 2)
    x = pa.tensor(X.copy(), requires_grad=True)
    y = _mul_by_row(x * 2)
    with pytest.raises(RuntimeError, match=VERSION_ERROR):
        y.sum().backward()


def _mul_by_row(y):
    return y.mul_(y[0])


def test_the_error_changes_no_grad():
    x = pa.tensor(X.copy(), requires_grad=True)
    w = pa.tensor(W.copy(), requires_grad=True)
    y = (x * w).exp()
    y += 1
    with pytest.raises(RuntimeError, match=VERSION_ERROR):
        y.sum().backward()
    assert x.grad is None and w.grad is None


# ---- leaves ------------------------------------------------------------------------------
@pytest.mark.parametrize("write", ["add_(1)", "mul_(2)", "relu_()", "zero_()", "copy_(o)",
                                   "exp_()", "unsqueeze_(0)", "uniform_()", "+= 1", "*= 2"])
def test_a_leaf_that_requires_grad_is_refused_with_pytorchs_message(write):
    for lib in (torch, pa):
        x = lib.tensor(X.copy(), requires_grad=True)
        o = lib.tensor(W.copy())
        stmt = f"x {write}" if write[0] in "+*" else f"x.{write}"
        with pytest.raises(RuntimeError) as e:
            exec(stmt, {"x": x, "o": o})
        assert str(e.value).startswith(LEAF), (lib.__name__, str(e.value))
        assert np.array_equal(x.detach().numpy(), X) and x.is_leaf
    x = pa.tensor(X.copy(), requires_grad=True)
    with pa.no_grad():                       # the optimizer-step case: allowed
        exec(f"x {write}" if write[0] in "+*" else f"x.{write}",
             {"x": x, "o": pa.tensor(W.copy())})
    assert x.is_leaf and x.requires_grad and x.grad_fn is None


def test_an_operand_that_requires_grad_gives_a_leaf_without_grad_a_history():
    buf = pa.zeros(4, 3)
    w = pa.tensor(W.copy(), requires_grad=True)
    buf.add_(w)
    assert buf.grad_fn is not None and buf.requires_grad
    (buf * 2).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.full((4, 3), 2.0))
    ints = pa.zeros(4, 3, dtype=pa.int64)
    with pytest.raises(RuntimeError, match="can't be cast"):
        ints.add_(w)
    tints = torch.zeros(4, 3, dtype=torch.int64)
    with pytest.raises(RuntimeError, match="can't be cast"):
        tints.add_(torch.tensor(W, requires_grad=True))


def test_a_shape_mismatch_is_refused_before_anything_is_written():
    x = pa.tensor(X.copy(), requires_grad=True)
    y = x * 2
    fn = y.grad_fn
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        y.add_(pa.ones(2, 4, 3))
    assert y.grad_fn is fn and np.array_equal(y.numpy(), X * 2)


# ---- views -------------------------------------------------------------------------------
@pytest.mark.parametrize("write", ["y[:, 0].mul_(2)", "y.view(-1).add_(1)", "y.T.relu_()",
                                   "y[1] += 1", "y.reshape(3, 4).zero_()",
                                   "y.squeeze().exp_()"])
def test_an_in_place_op_on_a_view_of_a_tensor_with_history_is_refused(write):
    x = pa.tensor(X.copy(), requires_grad=True)
    y = x * 2
    fn = y.grad_fn
    with pytest.raises(RuntimeError, match="view of another tensor's memory"):
        exec(write, {"y": y})
    assert y.grad_fn is fn and np.array_equal(y.numpy(), X * 2)  # nothing written
    y.sum().backward()                       # and the graph is intact
    np.testing.assert_array_equal(x.grad.numpy(), np.full((4, 3), 2.0))


def test_a_view_of_a_buffer_with_an_operand_that_requires_grad_is_refused():
    buf = pa.zeros(4, 3)
    w = pa.tensor(W.copy(), requires_grad=True)
    with pytest.raises(RuntimeError, match="view of another tensor's memory"):
        buf[0].add_(w[0])


def test_a_view_taken_before_the_base_is_written_cannot_give_a_stale_gradient():
    # PyTorch regenerates the view's history from the base's; here the view's node keeps
    # the base's counter: backward through it raises rather than differentiate old values
    x = pa.tensor(X.copy(), requires_grad=True)
    y = x * 2
    v = y[:2]
    y.mul_(2)
    with pytest.raises(RuntimeError, match=VERSION_ERROR):
        v.sum().backward()


# ---- create_graph ---------------------------------------------------------------------------
@pytest.mark.parametrize("engine", ["sequential", "parallel"])
def test_create_graph_differentiates_through_a_recorded_in_place_op(engine):
    def second(lib, grad):
        x = lib.tensor(X.copy(), requires_grad=True)
        y = x * x
        y.mul_(x)                            # x^3, the old value kept for mul's rule
        y.sin_()
        (g,) = grad(y.sum(), x)
        (gg,) = grad(g.sum(), x)
        return np.array(g.detach().numpy()), np.array(gg.detach().numpy())

    def pa_grad(out, x):
        if engine == "parallel":
            return pa.grad_parallel(out, x, create_graph=True)
        return pa.grad(out, x, create_graph=True)
    ours = second(pa, pa_grad)
    theirs = second(torch, lambda out, x: torch.autograd.grad(out, x, create_graph=True))
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_retain_grad_follows_the_tensor_through_the_write():
    for lib in (torch, pa):
        x = lib.tensor(X.copy(), requires_grad=True)
        y = x * 2
        y.retain_grad()
        y.mul_(3)
        (y * lib.tensor(WEIGHTS)).sum().backward()
        np.testing.assert_allclose(np.array(y.grad.numpy()), WEIGHTS)


# ---- inplace=True of nn.functional and the activation modules ----------------------------
_DETERMINISTIC = {"relu6": (), "celu": (1.1,), "elu": (0.9,), "hardsigmoid": (),
                  "hardswish": (), "hardtanh": (-0.5, 0.5), "leaky_relu": (0.2,), "mish": (),
                  "relu": (), "selu": (), "silu": ()}


def test_every_inplace_keyword_of_functional_is_covered():
    import inspect
    names = {n for n in PF.__all__ if "inplace" in inspect.signature(getattr(PF, n)).parameters}
    assert names == set(_DETERMINISTIC) | {"dropout", "dropout1d", "dropout2d", "dropout3d",
                                           "alpha_dropout", "feature_alpha_dropout"}


@pytest.mark.parametrize("name", sorted(_DETERMINISTIC))
def test_functional_inplace_writes_the_input_and_records_as_pytorch(name):
    args = _DETERMINISTIC[name]
    x0 = np.linspace(-2.0, 2.0, 12).reshape(3, 4)
    # no grad involved: the input itself is overwritten and returned
    p, t = pa.tensor(x0), torch.tensor(x0)
    pr, tr = getattr(PF, name)(p, *args, inplace=True), \
        getattr(torch.nn.functional, name)(t, *args, inplace=True)
    assert pr is p and tr is t
    np.testing.assert_allclose(p.numpy(), t.numpy(), rtol=1e-12, atol=1e-12)
    # on a tensor with history: recorded, the same gradients as torch's
    pw, tw = pa.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    ph, th = pw * 1.5, tw * 1.5
    assert getattr(PF, name)(ph, *args, inplace=True) is ph
    getattr(torch.nn.functional, name)(th, *args, inplace=True)
    assert ph.grad_fn is not None
    (ph * ph).sum().backward()
    (th * th).sum().backward()
    rtol = 1e-7 if name == "celu" else 1e-10  # PyTorch's celu rounds 1/alpha (docs/ops.md)
    np.testing.assert_allclose(pw.grad.numpy(), tw.grad.numpy(), rtol=rtol, atol=1e-12)
    # a leaf that requires grad: PyTorch's RuntimeError, nothing written
    leaf = pa.tensor(x0, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        getattr(PF, name)(leaf, *args, inplace=True)
    np.testing.assert_array_equal(leaf.numpy(), x0)


@pytest.mark.parametrize("module", ["ReLU", "SiLU", "Mish", "SELU", "Hardswish",
                                    "Hardsigmoid", "ReLU6"])
def test_activation_modules_with_inplace_overwrite_their_input(module):
    x0 = np.linspace(-2.0, 2.0, 8)
    p, t = pa.tensor(x0), torch.tensor(x0)
    out = getattr(pa.nn, module)(inplace=True)(p)
    getattr(torch.nn, module)(inplace=True)(t)
    assert out is p
    np.testing.assert_allclose(p.numpy(), t.numpy(), rtol=1e-12, atol=1e-12)
    q = pa.tensor(x0)
    getattr(pa.nn, module)()(q)  # inplace=False leaves it
    np.testing.assert_array_equal(q.numpy(), x0)


def test_dropout_inplace_overwrites_its_input():
    x = pa.ones(1000)
    out = PF.dropout(x, 0.5, True, True)
    assert out is x
    vals = set(np.unique(x.numpy()).tolist())
    assert vals == {0.0, 2.0}
    y = pa.ones(100)
    assert pa.nn.Dropout(0.5, inplace=True)(y) is y
