"""`grad(..., is_grads_batched=True)` (issue 28, "width where users have it"): PyTorch's
semantics (values, shapes, errors, create_graph, allow_unused, materialize_grads), bitwise
the one-by-one calls on both engines whether the rows run concurrently or not, thread
safety, and nothing written when a row fails. Also `backward([l1, l2], [g1, g2])`, several
losses of one graph. No timing: the benchmark rows are
`python -m stress.compare.engine_rows --rows per-sample-grad,multi-loss`."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import parallel_autograd as pa
from parallel_autograd.engine import rows as ROWS

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(28)
W1 = RNG.standard_normal((4, 7)) / 2
B1 = RNG.standard_normal(7)
W2 = RNG.standard_normal((7, 3)) / 2
U = RNG.standard_normal(2)
X = RNG.standard_normal((6, 4))
N = X.shape[0]


def model(lib, wrap):
    """Leaves (w1, b1, w2, u: unused) and the per-sample losses (N,) of a small MLP."""
    ps = [wrap(a.copy()) for a in (W1, B1, W2, U)]
    for p in ps:
        p.requires_grad_(True)
    h = lib.tanh(wrap(X.copy()) @ ps[0] + ps[1])
    out = h @ ps[2]
    return ps, (out * out).sum(1)


def pa_model():
    return model(pa, pa.tensor)


def torch_model():
    return model(torch, torch.from_numpy)


def grads_of(engine):
    return {"sequential": pa.grad, "autograd": pa.autograd.grad,
            "parallel": pa.grad_parallel, "engine": pa.Engine(3).grad}[engine]


ENGINES = ["sequential", "autograd", "parallel", "engine"]


@pytest.fixture(params=[False, True], ids=["one-by-one", "concurrent"])
def concurrent(request, monkeypatch):
    if request.param:  # every row set goes to threads, however fast the rows are
        monkeypatch.setattr(ROWS, "CONCURRENT_MIN_SECONDS", 0.0)
        monkeypatch.setattr(ROWS, "ROW_MIN_SECONDS", 0.0)
        monkeypatch.setattr(ROWS, "usable_cores", lambda: 3)
    return request.param


def force_threads(monkeypatch, n=3):
    monkeypatch.setattr(ROWS, "CONCURRENT_MIN_SECONDS", 0.0)
    monkeypatch.setattr(ROWS, "ROW_MIN_SECONDS", 0.0)
    monkeypatch.setattr(ROWS, "usable_cores", lambda: n)


def spy_threads(monkeypatch) -> set:
    """The threads that ran a row (Thread objects: a finished thread's ident is reused)."""
    seen = set()
    real = ROWS.run_call

    def spy(plan):
        seen.add(threading.current_thread())
        return real(plan)
    monkeypatch.setattr(ROWS, "run_call", spy)
    return seen


# ---- against PyTorch ------------------------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("engine", ENGINES)
def test_per_sample_gradients_match_torch(engine, concurrent):
    (w1, b1, w2, _), losses = pa_model()
    got = grads_of(engine)(losses, [w1, b1, w2], pa.tensor(np.eye(N)), is_grads_batched=True)
    (tw1, tb1, tw2, _), tl = torch_model()
    want = torch.autograd.grad(tl, [tw1, tb1, tw2], torch.eye(N, dtype=torch.float64),
                               is_grads_batched=True)
    for g, t in zip(got, want):
        assert g.shape == tuple(t.shape) and g.dtype == pa.float64
        np.testing.assert_allclose(g.numpy(), t.numpy(), rtol=1e-12, atol=1e-13)
    # row k is sample k's own gradient
    (w1, b1, w2, _), losses = pa_model()
    one = pa.grad(losses[2], [w1, b1, w2])
    for g, o in zip(got, one):
        np.testing.assert_allclose(g.numpy()[2], o.numpy(), rtol=1e-12, atol=1e-13)


@pytest.mark.timeout(60)
def test_several_outputs_other_batch_sizes_and_casts_match_torch(concurrent):
    v = RNG.standard_normal((3, N)).astype(np.float32)  # cast to the outputs' float64
    s = RNG.standard_normal(3)
    (w1, b1, w2, _), losses = pa_model()
    got = pa.grad([losses, losses.sum()], [w1, w2], [pa.tensor(v), pa.tensor(s)],
                  is_grads_batched=True)
    (tw1, tb1, tw2, _), tl = torch_model()
    want = torch.autograd.grad([tl, tl.sum()], [tw1, tw2],
                               [torch.from_numpy(v), torch.from_numpy(s)],
                               is_grads_batched=True)
    for g, t in zip(got, want):
        assert g.shape == tuple(t.shape) == (3,) + g.shape[1:]
        np.testing.assert_allclose(g.numpy(), t.numpy(), rtol=1e-12, atol=1e-13)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("batched", [False, True])
def test_allow_unused_and_materialize_grads_as_torch(batched):
    go = np.eye(N) if batched else np.ones(N)
    for kw in ({"allow_unused": True}, {"materialize_grads": True},
               {"materialize_grads": True, "create_graph": True}):
        (w1, _, _, u), losses = pa_model()
        got = pa.grad(losses, [w1, u], pa.tensor(go), is_grads_batched=batched, **kw)
        (tw1, _, _, tu), tl = torch_model()
        want = torch.autograd.grad(tl, [tw1, tu], torch.from_numpy(go),
                                   is_grads_batched=batched, **kw)
        for g, t in zip(got, want):
            if t is None:
                assert g is None
                continue
            # materialize_grads gives zeros of the input's shape, batched or not (torch's)
            assert g.shape == tuple(t.shape)
            assert g.requires_grad == t.requires_grad
            np.testing.assert_allclose(g.detach().numpy(), t.detach().numpy(), rtol=1e-12)


@pytest.mark.timeout(60)
def test_create_graph_results_differentiate_as_torch(concurrent, monkeypatch):
    seen = spy_threads(monkeypatch)
    v = RNG.standard_normal((4, N))
    (w1, b1, w2, _), losses = pa_model()
    gv = pa.tensor(v, requires_grad=True)
    got = pa.grad(losses, [w1, w2], gv, is_grads_batched=True, create_graph=True)
    assert all(g.requires_grad for g in got)
    second = pa.grad((got[0] ** 2).sum() + got[1].sum(), [w1, gv])
    (tw1, tb1, tw2, _), tl = torch_model()
    tv = torch.from_numpy(v.copy()).requires_grad_(True)
    want = torch.autograd.grad(tl, [tw1, tw2], tv, is_grads_batched=True, create_graph=True)
    twant = torch.autograd.grad((want[0] ** 2).sum() + want[1].sum(), [tw1, tv])
    for g, t in zip(got, want):
        np.testing.assert_allclose(g.detach().numpy(), t.detach().numpy(), rtol=1e-12)
    for g, t in zip(second, twant):
        np.testing.assert_allclose(g.numpy(), t.numpy(), rtol=1e-10, atol=1e-12)
    assert seen == {threading.current_thread()}  # create_graph: rows one by one


def _torch_error(fn):
    try:
        fn()
    except Exception as e:
        return type(e)
    return None


BAD = {  # name -> (grad_outputs maker(lib_wrap), outputs maker(losses)), as torch rejects
    "row shape": (lambda w: w(np.ones((3, 4))), lambda o: o),
    "no batch dimension": (lambda w: w(np.ones(N)), lambda o: o),
    "0-d": (lambda w: w(np.array(2.0)), lambda o: o.sum()),
    "empty batch": (lambda w: w(np.ones((0, N))), lambda o: o),
    "None, scalar output": (lambda w: None, lambda o: o.sum()),
    "None, vector output": (lambda w: None, lambda o: o),
    "unequal batches": (lambda w: [w(np.eye(N)), w(np.ones(3))], lambda o: [o, o.sum()]),
    "complex": (lambda w: w(np.eye(N).astype(np.complex128)), lambda o: o),
    "a list": (lambda w: [[1.0] * N] * 2, lambda o: o),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(BAD))
@pytest.mark.parametrize("engine", ["sequential", "parallel"])
def test_bad_grad_outputs_raise_torchs_exception_types_before_any_rule_runs(name, engine):
    make_go, make_out = BAD[name]
    (tw1, _, _, _), tl = torch_model()
    expected = _torch_error(lambda: torch.autograd.grad(
        make_out(tl), [tw1], make_go(lambda a: torch.from_numpy(np.asarray(a))),
        is_grads_batched=True))
    assert expected is not None
    calls = []

    class Count(pa.Function):
        @staticmethod
        def forward(ctx, t):
            return t * 1.0

        @staticmethod
        def backward(ctx, g):
            calls.append(1)
            return g
    (w1, _, _, _), losses = pa_model()
    losses = Count.apply(losses)
    with pytest.raises(expected):
        grads_of(engine)(make_out(losses), [w1], make_go(pa.tensor), is_grads_batched=True)
    assert not calls
    assert pa.grad(losses.sum(), [w1])[0].shape == w1.shape  # the graph is intact


def test_materialize_with_allow_unused_false_is_torchs_value_error():
    (w1, _, _, u), losses = pa_model()
    with pytest.raises(ValueError, match="allow_unused"):
        pa.grad(losses.sum(), [w1, u], materialize_grads=True, allow_unused=False)


# ---- the same as one call per row -----------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("engine", ENGINES)
def test_concurrent_rows_are_bitwise_the_one_by_one_calls(engine, monkeypatch):
    v = RNG.standard_normal((7, N))
    (w1, b1, w2, _), losses = pa_model()
    loop = [pa.grad(losses, [w1, b1, w2], pa.tensor(v[k]), retain_graph=True)
            for k in range(len(v))]
    force_threads(monkeypatch)
    seen = spy_threads(monkeypatch)
    got = grads_of(engine)(losses, [w1, b1, w2], pa.tensor(v), is_grads_batched=True)
    # the default engine's rows use its workers (the usable cores), the others up to 3
    assert len(seen) == (min(3, pa.default_engine().num_workers) if engine == "parallel"
                         else 3)
    for j, g in enumerate(got):
        assert np.array_equal(g.numpy(), np.stack([r[j].numpy() for r in loop]))


@pytest.mark.timeout(60)
def test_rows_run_one_by_one_when_the_graph_has_tensor_hooks(monkeypatch):
    force_threads(monkeypatch)
    seen = spy_threads(monkeypatch)
    (w1, b1, w2, _), losses = pa_model()
    hits = []
    w1.register_hook(lambda g: hits.append(threading.current_thread()))
    pa.grad(losses, [w1], pa.tensor(np.eye(N)), is_grads_batched=True)
    assert seen == {threading.current_thread()} and len(hits) == N


@pytest.mark.timeout(120)
def test_concurrent_callers_on_one_graph(monkeypatch):
    force_threads(monkeypatch, 2)
    (w1, b1, w2, _), losses = pa_model()
    want = pa.grad(losses, [w1, w2], pa.tensor(np.eye(N)), is_grads_batched=True,
                   retain_graph=True)
    out, errors = [], []

    def call():
        try:
            for _ in range(5):
                out.append(pa.grad(losses, [w1, w2], pa.tensor(np.eye(N)),
                                   is_grads_batched=True, retain_graph=True))
        except BaseException as e:
            errors.append(e)
    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(out) == 20
    for got in out:
        assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(got, want))


# ---- the graph's lifetime and failures ----------------------------------------------------------
@pytest.mark.timeout(60)
def test_the_graph_is_freed_after_the_rows_unless_retained(concurrent):
    (w1, _, _, _), losses = pa_model()
    pa.grad(losses, [w1], pa.tensor(np.eye(N)), is_grads_batched=True, retain_graph=True)
    pa.grad(losses, [w1], pa.tensor(np.eye(N)), is_grads_batched=True)
    with pytest.raises(RuntimeError, match="second time"):
        pa.grad(losses, [w1], pa.tensor(np.eye(N)), is_grads_batched=True)


def _failing_head(losses, fail_at: int, calls: list):
    class Fail(pa.Function):
        @staticmethod
        def forward(ctx, t):
            return t * 1.0

        @staticmethod
        def backward(ctx, g):
            calls.append(1)
            if len(calls) == fail_at:
                raise ValueError(f"row {fail_at} failed")
            return g
    return Fail.apply(losses)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("engine", ["sequential", "parallel"])
def test_a_failed_row_raises_writes_nothing_and_keeps_the_graph(engine, concurrent):
    (w1, b1, w2, _), losses = pa_model()
    w1.grad = pa.tensor(np.full(W1.shape, 5.0))
    calls = []
    out = _failing_head(losses, 3, calls)
    with pytest.raises(ValueError, match="row 3 failed"):
        grads_of(engine)(out, [w1, b1], pa.tensor(np.eye(N)), is_grads_batched=True)
    assert np.array_equal(w1.grad.numpy(), np.full(W1.shape, 5.0)) and b1.grad is None
    # kept: the graph still gives the right answer (the head fails only once)
    got = pa.grad(out, [w1], pa.tensor(np.eye(N)), is_grads_batched=True)
    (tw1, _, _, _), tl = torch_model()
    want = torch.autograd.grad(tl, [tw1], torch.eye(N, dtype=torch.float64),
                               is_grads_batched=True)
    np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-12)


# ---- several losses of one graph --------------------------------------------------------------
def _heads(lib, wrap):
    (w1, b1, w2, _), losses = model(lib, wrap)
    h = lib.tanh(wrap(X.copy()) @ w1 + b1)
    return [w1, b1, w2], (h @ w2).sum(0), (h * h).mean()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["sequential", "parallel", "tensor"])
def test_backward_of_several_losses_with_their_gradients_matches_torch(how):
    g = RNG.standard_normal(3)
    ps, l1, l2 = _heads(pa, pa.tensor)
    if how == "sequential":
        pa.autograd.backward([l1, l2], [pa.tensor(g), None])
    elif how == "parallel":
        pa.backward_parallel((l1, l2), (pa.tensor(g), None))
    else:
        ((l1 * pa.tensor(g)).sum() + l2).backward()
    tps, t1, t2 = _heads(torch, torch.from_numpy)
    torch.autograd.backward([t1, t2], [torch.from_numpy(g), None])
    for p, t in zip(ps, tps):
        np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), rtol=1e-12)


@pytest.mark.timeout(60)
def test_backward_of_several_losses_failing_leaves_grad_as_before():
    ps, l1, l2 = _heads(pa, pa.tensor)
    for p in ps:
        p.grad = pa.tensor(np.ones(p.shape))
    bad = _failing_head(l2, 1, [])
    with pytest.raises(ValueError, match="row 1 failed"):
        pa.autograd.backward([l1, bad], [pa.tensor(np.ones(3)), None])
    assert all(np.array_equal(p.grad.numpy(), np.ones(p.shape)) for p in ps)
