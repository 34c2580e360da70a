"""pa.nn.RNN / LSTM / GRU: PyTorch's state dicts load as they are and give the same
outputs and gradients (inputs, initial states, every parameter); gradcheck and
gradgradcheck (the recurrence op's formula); the graph does not grow
per time step; the parallel engine is bitwise the sequential one; bad input."""
from __future__ import annotations

import numpy as np
import pytest
import op_samples  # noqa: F401, I001  (first: it imports the samples modules)
from samples_nn_layers import recurrence_cases
from threadpoolctl import threadpool_limits

import parallel_autograd as pa
from parallel_autograd import nn
from parallel_autograd.nn._recurrent import recurrence

from conftest import assert_bitwise

LAYERS = {"LSTM": nn.LSTM, "GRU": nn.GRU, "RNN": nn.RNN}

CASES = {
    "plain": {},
    "two_layers_bidirectional": dict(num_layers=2, bidirectional=True),
    "batch_first_bidirectional_no_hx": dict(batch_first=True, bidirectional=True),
    "no_bias_batch_first": dict(bias=False, batch_first=True, num_layers=2),
    "unbatched": dict(num_layers=2),
    "unbatched_batch_first_bidirectional": dict(batch_first=True, bidirectional=True),
}


def _torch_pair(torch, kind, kw, size_in=3, hidden=4):
    extra = dict(nonlinearity="relu") if kind == "RNN_relu" else {}
    kind = kind.split("_")[0]
    ours = LAYERS[kind](size_in, hidden, **kw, **extra)
    theirs = getattr(torch.nn, kind)(size_in, hidden, dtype=torch.float64, **kw, **extra)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    return ours, theirs


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("kind", ["GRU", "LSTM", "RNN", "RNN_relu"])
def test_matches_torch_values_and_every_gradient(kind, case):
    torch = pytest.importorskip("torch")
    kw = CASES[case]
    ours, theirs = _torch_pair(torch, kind, kw)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    rng = np.random.default_rng(len(case) + len(kind))
    t_, n_ = 5, 2
    dirs, layers = 2 if kw.get("bidirectional") else 1, kw.get("num_layers", 1)
    unbatched = case.startswith("unbatched")
    if unbatched:
        xshape, hshape = (t_, 3), (dirs * layers, 4)
    else:
        xshape, hshape = (n_, t_, 3) if kw.get("batch_first") else (t_, n_, 3), \
            (dirs * layers, n_, 4)
    arrays = [rng.standard_normal(xshape)]
    with_hx = "no_hx" not in case
    if with_hx:
        arrays += [rng.standard_normal(hshape) for _ in range(2 if kind == "LSTM" else 1)]
    ps = [pa.tensor(a, requires_grad=True) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]

    def call(m, xs):
        if not with_hx:
            out, h = m(xs[0])
        else:
            out, h = m(xs[0], tuple(xs[1:]) if kind == "LSTM" else xs[1])
        return [out, *h] if kind == "LSTM" else [out, h]

    op, ot = call(ours, ps), call(theirs, ts)
    weights = [rng.standard_normal(tuple(t.shape)) for t in ot]
    for a, b in zip(op, ot):
        assert a.shape == tuple(b.shape)
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=0, atol=1e-10)
    sum((a * w).sum() for a, w in zip(op, weights)).backward()
    sum((b * torch.tensor(w)).sum() for b, w in zip(ot, weights)).backward()
    for a, b in zip(ps, ts):
        np.testing.assert_allclose(a.grad, b.grad.numpy(), rtol=0, atol=1e-10)
    tp = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(p.grad, tp[name].grad.numpy(), rtol=0, atol=1e-10,
                                   err_msg=name)


@pytest.mark.parametrize("kind,kw", [("LSTM", dict(batch_first=True)),
                                     ("GRU", dict(bidirectional=True)),
                                     ("RNN", dict(num_layers=2)),
                                     ("RNN", dict(nonlinearity="relu", bidirectional=True))])
def test_gradcheck_and_gradgradcheck(kind, kw):
    rng = np.random.default_rng(3)
    m = LAYERS[kind](2, 2, generator=np.random.default_rng(1), **kw)
    dirs, layers = 2 if kw.get("bidirectional") else 1, kw.get("num_layers", 1)
    x = pa.tensor(rng.standard_normal((2, 2, 2)), requires_grad=True)   # T = N = 2
    batch = 2
    states = [pa.tensor(rng.standard_normal((dirs * layers, batch, 2)), requires_grad=True)
              for _ in range(2 if kind == "LSTM" else 1)]

    def f(x, *rest):
        hx = tuple(rest[:2]) if kind == "LSTM" else rest[0]
        out, h = m(x, hx)
        hs = h if kind == "LSTM" else (h,)
        return pa.concat([out.reshape(-1)] + [s.reshape(-1) for s in hs]).tanh()

    inputs = [x, *states, *m.parameters()]
    assert pa.gradcheck(f, inputs)
    assert pa.gradgradcheck(f, inputs)


def test_double_backward_matches_torch():
    torch = pytest.importorskip("torch")
    ours, theirs = _torch_pair(torch, "LSTM", dict(num_layers=2, batch_first=True,
                                                     bidirectional=True))
    x = np.random.default_rng(5).standard_normal((2, 4, 3))
    xp, xt = pa.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out_p, (h_p, _) = ours(xp)
    out_t, (h_t, _) = theirs(xt)
    (gp,) = pa.grad((out_p * out_p).sum() + h_p.sum(), [xp], create_graph=True)
    (gt,) = torch.autograd.grad((out_t * out_t).sum() + h_t.sum(), [xt], create_graph=True)
    np.testing.assert_allclose(gp.numpy(), gt.detach().numpy(), rtol=0, atol=1e-10)
    (gp * gp).sum().backward()
    (gt * gt).sum().backward()
    np.testing.assert_allclose(xp.grad, xt.grad.numpy(), rtol=0, atol=1e-10)
    tp = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(p.grad, tp[name].grad.numpy(), rtol=0, atol=1e-10,
                                   err_msg=name)


def _count_nodes(t) -> int:
    seen, stack = set(), [t.grad_fn]
    while stack:
        nd = stack.pop()
        if nd is None or id(nd) in seen:
            continue
        seen.add(id(nd))
        stack.extend(nd.next_nodes)
    return len(seen)


@pytest.mark.parametrize("kind", sorted(LAYERS))
def test_graph_size_does_not_grow_with_the_sequence(kind):
    m = LAYERS[kind](3, 4, num_layers=2, bidirectional=True)
    sizes = []
    for steps in (2, 9):
        x = pa.randn(steps, 2, 3, seed=0, requires_grad=True)
        out, h = m(x)
        sizes.append(_count_nodes(out.sum() + (h[0] if kind == "LSTM" else h).sum()))
    assert sizes[0] == sizes[1]


def test_parallel_engine_bitwise_on_bidirectional_two_layer_lstm():
    m = nn.LSTM(5, 6, num_layers=2, bidirectional=True, generator=np.random.default_rng(0))
    x = pa.randn(7, 3, 5, seed=1, requires_grad=True)
    h0 = pa.randn(4, 3, 6, seed=2, requires_grad=True)
    c0 = pa.randn(4, 3, 6, seed=3, requires_grad=True)
    wrt = [x, h0, c0, *m.parameters()]

    def loss():
        out, (h, c) = m(x, (h0, c0))
        return (out * out).sum() + (h * c).sum()

    with threadpool_limits(1, user_api="blas"):
        want = pa.grad(loss(), wrt)
        opts = dict(min_nodes=0, min_work=0, min_width=0, inline_below=0, max_blas_share=1.0)
        with pa.Engine(2, **opts) as eng:
            for _ in range(3):
                got = eng.grad(loss(), wrt)
                assert eng.last_stats.mode == "parallel"
                assert_bitwise(want, got)
                assert all(a.numpy().tobytes() == b.numpy().tobytes() for a, b in zip(want, got))


def test_dropout_between_layers_only_in_training():
    torch = pytest.importorskip("torch")
    ours, theirs = _torch_pair(torch, "GRU", dict(num_layers=3, dropout=0.5))
    x = np.random.default_rng(0).standard_normal((4, 2, 3))
    pa.manual_seed(0)
    out, h = ours(pa.tensor(x))
    assert out.shape == (4, 2, 4) and h.shape == (3, 2, 4)
    out2, _ = ours(pa.tensor(x))
    assert not np.allclose(out.numpy(), out2.numpy())            # fresh masks each call
    ours.eval()
    theirs.eval()
    out, h = ours(pa.tensor(x))
    np.testing.assert_allclose(out.numpy(), theirs(torch.tensor(x))[0].detach().numpy(),
                               rtol=0, atol=1e-10)
    with pytest.warns(UserWarning, match="num_layers greater than 1"):
        nn.LSTM(3, 4, dropout=0.2)


def test_state_dict_names_repr_init_and_dtype():
    torch = pytest.importorskip("torch")
    for kind in LAYERS:
        kw = dict(num_layers=2, bidirectional=True, bias=False, batch_first=True)
        ours = LAYERS[kind](3, 4, **kw)
        theirs = getattr(torch.nn, kind)(3, 4, **kw)
        assert list(ours.state_dict()) == list(theirs.state_dict())
        assert repr(ours) == repr(theirs)
        for p in ours.parameters():
            assert np.all(np.abs(p.numpy()) <= 0.5) and p.dtype == np.float64   # U(+-1/sqrt(4))
    m = nn.LSTM(3, 4, dtype=np.float32)
    out, (h, c) = m(pa.randn(5, 2, 3, seed=0).numpy().astype(np.float32))
    assert out.dtype == h.dtype == c.dtype == np.float32
    assert len(m.all_weights) == 1 and len(m.all_weights[0]) == 4


def test_bad_input_raises_before_recording():
    m = nn.LSTM(3, 4, num_layers=2)
    x = pa.randn(5, 2, 3, seed=0, requires_grad=True)
    with pytest.raises(ValueError, match="input.size\\(-1\\) must be equal to input_size"):
        m(pa.randn(5, 2, 4, seed=0))
    with pytest.raises(ValueError, match="Expected input to be 2D or 3D"):
        m(pa.randn(5, 2, 3, 1, seed=0))
    with pytest.raises(ValueError, match="Expected hidden size \\(2, 2, 4\\)"):
        m(x, (pa.zeros(1, 2, 4), pa.zeros(2, 2, 4)))
    with pytest.raises(TypeError, match="tuple"):
        m(x, pa.zeros(2, 2, 4))
    with pytest.raises(TypeError, match="not a tuple"):
        nn.GRU(3, 4)(x, (pa.zeros(1, 2, 4),))
    with pytest.raises(ValueError, match="hx should also be 2-D"):
        nn.GRU(3, 4)(pa.randn(5, 3, seed=0), pa.zeros(1, 2, 4))
    with pytest.raises(ValueError, match="sequence is empty"):
        m(pa.zeros(0, 2, 3))
    with pytest.raises(ValueError, match="Unknown nonlinearity"):
        nn.RNN(3, 4, nonlinearity="gelu")
    with pytest.raises(ValueError, match="dropout"):
        nn.GRU(3, 4, dropout=1.5)
    with pytest.raises(ValueError, match="hidden_size must be greater than zero"):
        nn.LSTM(3, 0)
    with pytest.raises(TypeError, match="input_size should be of type int"):
        nn.LSTM(3.0, 4)
    with pytest.raises(ValueError, match="proj_size"):
        nn.LSTM(3, 4, proj_size=2)
    with pytest.raises(ValueError, match="W_hh"):
        recurrence("GRU", x, pa.zeros(2, 4), None, pa.zeros(12, 5))
    with pytest.raises(ValueError, match="h0 has shape"):
        recurrence("RNN_TANH", pa.zeros(5, 2, 4), pa.zeros(3, 4), None, pa.zeros(4, 4))
    with pytest.raises(ValueError, match="mode must be one of"):
        recurrence("LSTMP", x, None, None, None)
    assert x.grad is None and x.grad_fn is None


def test_recurrence_node_keeps_no_projection_and_frees_after_backward():
    # the node saves the gates, the cell states, its output and its other inputs, not the
    # projections (a placeholder: zero strides, one element; the formula replays the steps
    # from the saved gates, `activation_of`)
    m = nn.LSTM(3, 4)
    out, (h, c) = m(pa.randn(6, 2, 3, seed=0))
    node = [n for n in _nodes(out) if n.name == "recurrence"][0]
    assert node.saved[1].shape == (6, 2, 16) and not any(node.saved[1].strides)
    saved_bytes = sum(a.nbytes for a in node.saved
                      if isinstance(a, np.ndarray) and any(a.strides))
    # gates (T, N, 4H), cells (T, N, H), output (T+1, N, H), h0, c0, W_hh, b_hh
    assert saved_bytes == (6 * 2 * 16 + 6 * 2 * 4 + 7 * 2 * 4 + 2 * 2 * 4 + 16 * 4 + 16) * 8
    out.sum().backward()
    assert node.saved is None


@pytest.mark.timeout(600)
@pytest.mark.parametrize("check", ["test_gradcheck_and_gradgradcheck",
                                   "test_kernel_equals_formula_at_first_order",
                                   "test_both_engines_agree_bitwise"])
def test_recurrence_every_case_passes_the_registry_checks(check, monkeypatch):
    # every mode: time-major and batch_first, reverse, no b_hh, packed forwards and in
    # reverse, inputs without gradient (tests/test_nn_declared.py: the fast lane's cases)
    import test_registry as registry                  # noqa: PLC0415  (its checks, reused)
    monkeypatch.setitem(registry.SAMPLES, "recurrence", recurrence_cases)
    getattr(registry, check)(recurrence.op)


def _nodes(t):
    seen, stack, out = set(), [t.grad_fn], []
    while stack:
        nd = stack.pop()
        if nd is None or id(nd) in seen:
            continue
        seen.add(id(nd))
        out.append(nd)
        stack.extend(nd.next_nodes)
    return out


# ---- RNNCell, LSTMCell, GRUCell -----------------------------------------------------------------
CELLS = [("RNNCell", {}), ("RNNCell", {"nonlinearity": "relu"}), ("LSTMCell", {}),
         ("GRUCell", {}), ("GRUCell", {"bias": False})]


def _cell_loss(cell, x, hx):
    out = cell(x, hx)
    if isinstance(out, tuple):
        return (out[0] * 2.0 + out[1] ** 2).sum()
    return (out ** 2).sum()


@pytest.mark.parametrize("name,kw", CELLS)
@pytest.mark.parametrize("batched", [True, False])
def test_cells_match_torch(name, kw, batched):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    cell = getattr(nn, name)(4, 5, **kw)
    tcell = getattr(torch.nn, name)(4, 5, dtype=torch.float64, **kw)
    tcell.load_state_dict({k: torch.tensor(v.numpy()) for k, v in cell.state_dict().items()})
    shape = (3, 5) if batched else (5,)
    x = rng.standard_normal((3, 4) if batched else (4,))
    states = [rng.standard_normal(shape) for _ in range(2 if name == "LSTMCell" else 1)]
    xp = pa.tensor(x, requires_grad=True)
    sp = [pa.tensor(s, requires_grad=True) for s in states]
    xt = torch.tensor(x, requires_grad=True)
    st = [torch.tensor(s, requires_grad=True) for s in states]
    lp = _cell_loss(cell, xp, tuple(sp) if len(sp) == 2 else sp[0])
    lt = _cell_loss(tcell, xt, tuple(st) if len(st) == 2 else st[0])
    assert abs(lp.item() - lt.item()) < 1e-12
    pa.backward(lp)
    lt.backward()
    for a, b in [(xp.grad, xt.grad)] + [(p.grad, q.grad) for p, q in zip(sp, st)] + \
            [(p.grad, dict(tcell.named_parameters())[n].grad)
             for n, p in cell.named_parameters()]:
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-12, atol=1e-13)
    assert repr(cell) == repr(tcell)


@pytest.mark.parametrize("name,kw", CELLS)
def test_cells_gradcheck_and_zero_state(name, kw):
    rng = np.random.default_rng(8)
    cell = getattr(nn, name)(3, 2, **kw)
    x = pa.tensor(rng.standard_normal((2, 3)), requires_grad=True)
    h = pa.tensor(rng.standard_normal((2, 2)), requires_grad=True)
    hx = (h, h * 0.5) if name == "LSTMCell" else h
    assert pa.gradcheck(lambda a, b: _cell_loss(cell, a, (b, b * 0.5) if name == "LSTMCell"
                                                 else b), (x, h))
    assert pa.gradgradcheck(lambda a: _cell_loss(cell, a, hx), (x,))
    zero = pa.zeros(2, 2)
    no_state = cell(x)
    with_zero = cell(x, (zero, zero) if name == "LSTMCell" else zero)
    for a, b in zip(no_state if isinstance(no_state, tuple) else (no_state,),
                    with_zero if isinstance(with_zero, tuple) else (with_zero,)):
        assert np.array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
def test_a_cell_unrolled_is_the_layer(name):
    """T steps of the cell with the layer's weights give the layer's outputs."""
    rng = np.random.default_rng(9)
    layer = getattr(nn, name)(3, 4)
    cell = getattr(nn, name + "Cell")(3, 4)
    cell.load_state_dict({k[:-3]: v for k, v in layer.state_dict().items()})
    x = rng.standard_normal((5, 2, 3))
    out, _ = layer(pa.tensor(x))
    state = None
    for t in range(5):
        state = cell(pa.tensor(x[t]), state)
        h = state[0] if name == "LSTM" else state
        np.testing.assert_allclose(h.numpy(), out.numpy()[t], rtol=1e-13, atol=1e-15)


def test_cell_bad_input():
    cell = nn.LSTMCell(3, 2)
    with pytest.raises(ValueError, match="inconsistent input_size"):
        cell(pa.zeros(2, 4))
    with pytest.raises(ValueError, match="Expected hidden size"):
        cell(pa.zeros(2, 3), (pa.zeros(3, 2), pa.zeros(2, 2)))
    with pytest.raises(TypeError, match="tuple"):
        cell(pa.zeros(2, 3), pa.zeros(2, 2))
    with pytest.raises(ValueError, match="1D or 2D"):
        nn.GRUCell(3, 2)(pa.zeros(1, 2, 3))
    with pytest.raises(ValueError, match="Unknown nonlinearity"):
        nn.RNNCell(3, 2, nonlinearity="gelu")
    with pytest.raises(ValueError, match="greater than zero"):
        nn.GRUCell(0, 2)
