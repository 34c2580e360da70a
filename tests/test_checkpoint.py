"""pa.checkpoint / pa.checkpoint_sequential (activation checkpointing): gradients bitwise
those of the same model without checkpointing in both engines (captured parameters,
dropout, nesting), create_graph (gradgradcheck), PyTorch's values, errors that change no
state, and the peak memory it saves."""
from __future__ import annotations

import threading
import tracemalloc

import numpy as np
import pytest

import parallel_autograd as pa
from parallel_autograd import random as pa_random
from parallel_autograd.nn import functional as F
from conftest import assert_bitwise

RNG = np.random.default_rng(11)


@pytest.fixture(scope="module")
def engine():
    """A parallel engine that runs even tiny graphs in parallel."""
    with pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0) as eng:
        yield eng


def _backward(loss, engine=None, **kw):
    if engine is None:
        pa.backward(loss, **kw)
    else:
        engine.backward(loss, **kw)


def _layers(width=8, depth=4, seed=0):
    pa.manual_seed(seed)
    return [pa.nn.Linear(width, width) for _ in range(depth)]


def _params(layers):
    return [p for layer in layers for p in layer.parameters()]


def _layer_fn(layer, act=pa.tanh, p=0.0):
    def f(h):
        y = act(layer(h))
        return F.dropout(y, p) if p else y
    return f


def _loss(layers, x, ckpt, act=pa.tanh, p=0.0, **kw):
    h = x
    for layer in layers:
        f = _layer_fn(layer, act, p)
        h = pa.checkpoint(f, h, **kw) if ckpt else f(h)
    return (h * h).mean()


def _grads(layers, x):
    return [x.grad] + [q.grad for q in _params(layers)]


def _run(ckpt, engine=None, act=pa.tanh, p=0.0, seed=0, **kw):
    """Fresh model and input; loss and backward; the gradients and the RNG state after."""
    layers = _layers(seed=seed)
    x = pa.tensor(np.random.default_rng(3).standard_normal((5, 8)), requires_grad=True)
    pa.manual_seed(100 + seed)
    _backward(_loss(layers, x, ckpt, act, p, **kw), engine)
    return _grads(layers, x), pa_random.get_rng_state()


# ---- the same gradients as without checkpointing --------------------------------------

@pytest.mark.parametrize("act", [pa.tanh, pa.gelu, pa.relu])
def test_gradients_bitwise_plain_in_both_engines(engine, act):
    want, _ = _run(False, act=act)
    assert all(g is not None for g in want)
    assert_bitwise(want, _run(True, act=act)[0])
    assert_bitwise(want, _run(True, engine, act=act)[0])
    assert_bitwise(want, _run(False, engine, act=act)[0])


def test_forward_output_bitwise_plain():
    layers = _layers()
    x = pa.tensor(RNG.standard_normal((5, 8)), requires_grad=True)
    f = _layer_fn(layers[0], pa.gelu)
    y = pa.checkpoint(f, x)
    assert y.requires_grad and y.grad_fn.name == "checkpoint"
    assert_bitwise([f(x).numpy()], [y.numpy()], "output")


def test_against_torch_checkpoint():
    torch = pytest.importorskip("torch")
    from torch.utils.checkpoint import checkpoint as tcheckpoint
    layers = _layers(width=6, depth=3)
    xa = RNG.standard_normal((4, 6))
    x = pa.tensor(xa, requires_grad=True)
    pa.backward(_loss(layers, x, True, pa.gelu))
    tl = [torch.nn.Linear(6, 6).double() for _ in layers]
    with torch.no_grad():
        for t, layer in zip(tl, layers):
            t.weight.copy_(torch.from_numpy(layer.weight.numpy()))
            t.bias.copy_(torch.from_numpy(layer.bias.numpy()))
    tx = torch.tensor(xa, requires_grad=True)
    h = tx
    for t in tl:
        h = tcheckpoint(lambda a, t=t: torch.nn.functional.gelu(t(a)), h, use_reentrant=False)
    (h * h).mean().backward()
    want = [tx.grad] + [q.grad for t in tl for q in (t.weight, t.bias)]
    for w, g in zip(want, _grads(layers, x)):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-10, atol=1e-12)


def test_nested_checkpoints_bitwise_plain(engine):
    def model(layers, x, ckpt):
        def pair(a, b):
            def f(h):
                h = pa.checkpoint(_layer_fn(a, p=0.3), h) if ckpt else _layer_fn(a, p=0.3)(h)
                return _layer_fn(b, p=0.3)(h)
            return f
        h = x
        for a, b in ((layers[0], layers[1]), (layers[2], layers[3])):
            h = pa.checkpoint(pair(a, b), h) if ckpt else pair(a, b)(h)
        return (h * h).sum()

    results = []
    for ckpt, eng in ((False, None), (True, None), (True, engine)):
        layers = _layers()
        x = pa.tensor(np.random.default_rng(4).standard_normal((5, 8)), requires_grad=True)
        pa.manual_seed(9)
        _backward(model(layers, x, ckpt), eng)
        results.append((_grads(layers, x), pa_random.get_rng_state()))
    for grads, state in results[1:]:
        assert_bitwise(results[0][0], grads)
        assert state == results[0][1]


def test_captured_non_leaf_and_tensors_in_kwargs(engine):
    for eng in (None, engine):
        out = []
        for ckpt in (False, True):
            w = pa.tensor(np.random.default_rng(5).standard_normal((4, 4)), requires_grad=True)
            s = pa.tensor(np.random.default_rng(6).standard_normal(4), requires_grad=True)
            x = pa.tensor(np.random.default_rng(7).standard_normal((3, 4)), requires_grad=True)
            w2 = pa.tanh(w) * 2  # a non-leaf made outside, used by closure

            def f(h, k, *, shift):
                return pa.sin(h @ w2 + shift) * k

            y = pa.checkpoint(f, x, 1.5, shift=s) if ckpt else f(x, 1.5, shift=s)
            _backward((y * y).sum() + (w2 * w2).sum(), eng)
            out.append([x.grad, w.grad, s.grad])
        assert_bitwise(*out)


def test_argument_also_captured_and_passed_twice():
    def f(a, b):
        return a * b + pa.exp(x)  # x is also captured

    grads = []
    for ckpt in (False, True):
        x = pa.tensor(np.linspace(-1, 1, 6), requires_grad=True)
        y = pa.checkpoint(f, x, x) if ckpt else f(x, x)
        pa.backward(y.sum())
        grads.append([x.grad])
    assert_bitwise(*grads)


def test_identity_and_unused_argument():
    x = pa.tensor(np.arange(3.0), requires_grad=True)
    y = pa.tensor(np.ones(3), requires_grad=True)
    out = pa.checkpoint(lambda a, b: a, x, y)
    gx, gy = pa.grad(out.sum() * 2, [x, y], allow_unused=True)
    np.testing.assert_array_equal(gx, np.full(3, 2.0))
    assert gy is None  # as PyTorch's non-reentrant checkpoint: y is not in the graph
    with pytest.raises(RuntimeError, match="not part of the graph"):
        pa.grad(pa.checkpoint(lambda a, b: a * 2, x, y).sum(), [y])


def test_output_without_grad_and_grad_mode_off():
    x = pa.tensor(np.ones(3))  # requires no grad, nothing captured does either
    y = pa.checkpoint(lambda a: a * 2, x)
    assert not y.requires_grad and y.grad_fn is None
    with pa.no_grad():  # no graph: the function is just called (any output)
        assert pa.checkpoint(lambda a: (a, 1), x)[1] == 1


def test_retain_graph_twice_bitwise_plain():
    grads = []
    for ckpt in (False, True):
        layers = _layers()
        x = pa.tensor(np.random.default_rng(3).standard_normal((5, 8)), requires_grad=True)
        pa.manual_seed(1)
        loss = _loss(layers, x, ckpt, p=0.4)
        pa.backward(loss, retain_graph=True)
        pa.backward(loss)
        grads.append(_grads(layers, x))
    assert_bitwise(*grads)


def test_checkpoint_sequential_bitwise_plain(engine):
    def build():
        pa.manual_seed(0)
        return pa.nn.Sequential(pa.nn.Linear(8, 8), pa.nn.Tanh(), pa.nn.Dropout(0.25),
                                pa.nn.Linear(8, 8), pa.nn.GELU(), pa.nn.Linear(8, 3))

    results = []
    for segments, eng in ((None, None), (3, None), (2, engine), (6, engine)):
        net = build()
        x = pa.tensor(np.random.default_rng(2).standard_normal((4, 8)), requires_grad=True)
        pa.manual_seed(5)
        y = net(x) if segments is None else pa.checkpoint_sequential(net, segments, x)
        _backward((y * y).sum(), eng)
        results.append([x.grad] + [q.grad for q in net.parameters()])
    for r in results[1:]:
        assert_bitwise(results[0], r)
    net = build()
    for bad, exc in ((0, ValueError), (7, ValueError), (2.0, TypeError)):
        with pytest.raises(exc, match="segments"):
            pa.checkpoint_sequential(net, bad, x)


# ---- captured parameters: grad(), hooks, reentrant mode ---------------------------------

def test_grad_writes_no_dot_grad_and_matches_plain(engine):
    res = []
    for ckpt, eng in ((False, None), (True, None), (True, engine)):
        layers = _layers()
        x = pa.tensor(np.random.default_rng(3).standard_normal((5, 8)), requires_grad=True)
        loss = _loss(layers, x, ckpt)
        res.append(pa.grad(loss, [x]) if eng is None else eng.grad(loss, [x]))
        assert all(q.grad is None for q in _params(layers)) and x.grad is None
    for r in res[1:]:
        assert_bitwise(res[0], r)


def test_hooks_on_a_shared_captured_weight_run_once_on_the_full_gradient(engine):
    for eng in (None, engine):
        seen = []
        for ckpt in (False, True):
            w = pa.tensor(np.random.default_rng(8).standard_normal((4, 4)), requires_grad=True)
            calls = []
            w.register_hook(lambda g, calls=calls: calls.append(g.clone()))
            h = pa.tensor(np.random.default_rng(9).standard_normal((2, 4)), requires_grad=True)
            for _ in range(3):  # the same weight in three checkpointed segments
                def f(a, w=w):
                    return pa.tanh(a @ w)
                h = pa.checkpoint(f, h) if ckpt else f(h)
            _backward(h.sum(), eng)
            assert len(calls) == 1
            seen.append([calls[0], w.grad])
        assert_bitwise(*seen)


def test_reentrant_supports_arguments_only():
    layer = _layers(depth=1)[0]
    x = pa.tensor(RNG.standard_normal((2, 8)), requires_grad=True)
    f = _layer_fn(layer)
    before = layer.weight.grad
    y = pa.checkpoint(f, x, use_reentrant=True)
    with pytest.raises(RuntimeError, match="pass it as an argument"):
        pa.backward(y.sum())
    assert layer.weight.grad is before and x.grad is None
    grads = []
    for ckpt in (False, True):
        w = pa.tensor(layer.weight.numpy(), requires_grad=True)
        b = pa.tensor(layer.bias.numpy(), requires_grad=True)
        def g(a, w, b):
            return pa.tanh(F.linear(a, w, b))
        y = pa.checkpoint(g, x, w, b, use_reentrant=True) if ckpt else g(x, w, b)
        grads.append(pa.grad(y.sum(), [x, w, b]))
    assert_bitwise(*grads)


# ---- random state -----------------------------------------------------------------------

def test_dropout_replays_the_forward_masks_and_leaves_the_generator_as_plain(engine):
    want, state = _run(False, p=0.5)
    for eng in (None, engine):
        got, got_state = _run(True, eng, p=0.5)
        assert_bitwise(want, got)
        assert got_state == state  # the recomputation drew from a copy
    got, got_state = _run(True, p=0.5, preserve_rng_state=False)
    assert got_state != state  # new masks drawn from the default generator
    assert any(not np.array_equal(a, b) for a, b in zip(want, got))


def test_randn_inside_a_checkpoint_is_replayed():
    """pa.randn without a seed draws from the current generator: replayed too."""
    def noisy(x):
        return x * pa.randn(*x.shape) + pa.tanh(x)

    results = []
    for ckpt in (False, True):
        pa.manual_seed(4)
        x = pa.tensor(np.linspace(-1, 1, 6), requires_grad=True)
        y = pa.checkpoint(noisy, x) if ckpt else noisy(x)
        pa.backward(y.sum())
        results.append((x.grad, pa_random.get_rng_state()))
    assert_bitwise([results[0][0]], [results[1][0]])
    assert results[0][1] == results[1][1]


def test_generator_override_is_context_local():
    g = np.random.default_rng(1)
    before = pa_random.get_rng_state()
    other = []
    with pa_random.generator_override(g):
        assert pa_random.current_generator() is g
        assert pa_random.resolve_generator(None) is g
        t = threading.Thread(target=lambda: other.append(pa_random.current_generator()))
        t.start()
        t.join()
        F.dropout(pa.ones(10), 0.5)
    assert other == [pa.default_generator]
    assert pa_random.current_generator() is pa.default_generator
    assert pa_random.get_rng_state() == before  # dropout drew from g
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        with pa_random.generator_override(3):
            pass


def _draw_elsewhere(n=64):
    """Another thread draws from the default generator, now (between this thread's draws)."""
    t = threading.Thread(target=lambda: pa.randn(n))
    t.start()
    t.join()


def _interleaved_segment(h):
    """Draws of its own (dropout, randn), with another thread's draws in between."""
    y = F.dropout(pa.sigmoid(h), 0.5)
    _draw_elsewhere()
    y = y + pa.randn(*y.shape) * 0.5
    _draw_elsewhere()
    return F.dropout(y, 0.3) * h


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_other_threads_drawing_between_the_segments_draws_change_no_mask(engine,
                                                                         use_reentrant):
    # Before: the recomputation replayed the generator from the state it had when the
    # forward began, so the other thread's draws shifted every later mask: wrong grads.
    for eng in (None, engine):
        results = []
        for ckpt in (False, True):
            pa.manual_seed(21)
            x = pa.tensor(np.random.default_rng(2).standard_normal((6, 5)), requires_grad=True)
            y = (pa.checkpoint(_interleaved_segment, x, use_reentrant=use_reentrant) if ckpt
                 else _interleaved_segment(x))
            _backward((y * y).sum(), eng)
            results.append((y.numpy(), x.grad))
        assert_bitwise(*[[r[0]] for r in results], "output")
        assert_bitwise(*[[r[1]] for r in results])


def test_nested_segments_replay_their_own_draws_on_engine_workers(engine):
    # the recomputation of both segments runs on the engine's workers, the inner one
    # inside the outer one's, with other threads drawing throughout
    def inner(h):
        _draw_elsewhere()
        return F.dropout(pa.tanh(h), 0.4) + pa.randn(*h.shape)

    def outer(h, ckpt):
        h = F.dropout(h * 2.0, 0.5)
        _draw_elsewhere()
        h = pa.checkpoint(inner, h) if ckpt else inner(h)
        _draw_elsewhere()
        return F.dropout(h, 0.5) * h

    for eng in (None, engine):
        results = []
        for ckpt in (False, True):
            pa.manual_seed(5)
            x = pa.tensor(np.random.default_rng(3).standard_normal((4, 6)), requires_grad=True)
            y = pa.checkpoint(outer, x, ckpt) if ckpt else outer(x, False)
            _backward(y.sum(), eng)
            results.append(x.grad)
        assert_bitwise([results[0]], [results[1]])


@pytest.mark.timeout(120)
def test_checkpointed_dropout_keeps_its_mask_while_a_thread_draws_nonstop(engine):
    # The loop: a thread draws pa.randn(64) forever. Before: 54 of 200 calls
    # (3 of 200 on a loaded machine) gave a gradient from another mask.
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            pa.randn(64)

    t = threading.Thread(target=spin, daemon=True)
    t.start()
    bad = []
    try:
        for i in range(200):
            x = pa.tensor(np.random.default_rng(i).standard_normal(256) + 5.0,
                          requires_grad=True)
            y = pa.checkpoint(lambda a: F.dropout(a * 1.0, p=0.5, training=True), x)
            _backward(y.sum(), engine if i % 2 else None)
            if not np.array_equal(x.grad, (y.numpy() != 0) * 2.0):
                bad.append(i)
    finally:
        stop.set()
        t.join()
    assert bad == []


def test_draws_from_a_given_generator_are_replayed_and_advance_it_once(engine):
    # Before: only the current generator was replayed; a Dropout(generator=g), randn(rng=g)
    # or bernoulli(generator=g) drew anew from g in the recomputation: other masks.
    def run(ckpt, eng):
        g = np.random.default_rng(8)
        drop = pa.nn.Dropout(0.5, generator=g)

        def seg(h):
            noise = pa.randn(*h.shape, rng=g) + pa.bernoulli(pa.tensor(np.full(h.shape, 0.5)),
                                                             generator=g)
            return drop(pa.tanh(h) * noise)

        x = pa.tensor(np.random.default_rng(4).standard_normal((5, 7)), requires_grad=True)
        y = pa.checkpoint(seg, x) if ckpt else seg(x)
        _backward((y * y).sum(), eng)
        return [y.numpy(), x.grad], g.bit_generator.state

    want, state = run(False, None)
    for eng in (None, engine):
        got, got_state = run(True, eng)
        assert_bitwise(want, got)
        assert got_state == state


def test_a_segment_built_inside_a_checkpoint_keeps_a_plain_generator():
    g = np.random.default_rng(1)

    def seg(h):
        drop = pa.nn.Dropout(0.5, generator=g)
        made.append(drop)
        return drop(h)

    made = []
    y = pa.checkpoint(seg, pa.ones(4, requires_grad=True))
    pa.backward(y.sum())
    assert all(d.generator is g for d in made)
    view = []
    pa.checkpoint(lambda h: view.append(pa_random.resolve_generator(None)) or h * 1.0,
                  pa.ones(2, requires_grad=True))
    assert isinstance(view[0], pa_random.SegmentDraws)
    state = pa_random.get_rng_state()
    view[0].random(3)  # kept past its segment: an ordinary draw
    assert pa_random.get_rng_state() != state


@pytest.mark.parametrize("change, match", [
    (lambda h, n: h * pa.randn(*h.shape) if n > 1 else h * 1.0, "draws more"),
    (lambda h, n: h * pa.randn(*h.shape) if n == 1 else h * 1.0, "drew random numbers 0"),
    (lambda h, n: F.dropout(h, 0.5) if n == 1 else h * pa.randn(*h.shape), "standard_normal"),
])
def test_a_recomputation_that_draws_differently_is_an_error(engine, change, match):
    for eng in (None, engine):
        calls = []

        def seg(h):
            calls.append(1)
            return change(h, len(calls))

        x = pa.tensor(np.ones((3, 4)), requires_grad=True)
        y = pa.checkpoint(seg, x)
        with pytest.raises(RuntimeError, match=match):
            _backward(y.sum(), eng)
        assert x.grad is None


def test_replay_without_a_reentrant_generator_lock(monkeypatch):
    # numpy < 2 guards a bit generator with a plain Lock: the draw is made on a private
    # copy under the lock instead; the same numbers and the same final state
    want, state = _run(False, p=0.5)
    monkeypatch.setattr(pa_random, "_RLOCK", type(None))
    got, got_state = _run(True, p=0.5)
    assert_bitwise(want, got)
    assert got_state == state


def test_a_segment_keeps_one_small_record_per_draw():
    # dropout draws in blocks of 32,768: a 1M-element mask is 32 draws, each noted as
    # the bit generator's state (about 0.6 KB), not as the 8 MB of numbers drawn
    x = pa.tensor(np.ones(1 << 20), requires_grad=True)
    y = pa.checkpoint(lambda a: F.dropout(a * 1.0, 0.5), x)
    draws = y.grad_fn.saved[0].draws
    assert len(draws) == 32
    assert all(name == "random" and isinstance(state, dict) for name, _, state in draws)
    assert pa.checkpoint(lambda a: F.dropout(a * 1.0, 0.5), x,
                         preserve_rng_state=False).grad_fn.saved[0].draws is None


# ---- create_graph -----------------------------------------------------------------------

def test_gradgradcheck_through_checkpoint():
    w = pa.tensor(RNG.uniform(-1, 1, (3, 3)), requires_grad=True)
    x = pa.tensor(RNG.uniform(-1, 1, (2, 3)), requires_grad=True)

    def seg(a):
        return pa.tanh(a @ w) * a

    assert pa.gradgradcheck(lambda a: pa.checkpoint(seg, a), [x])
    # w is captured by the function: its second derivatives flow too
    assert pa.gradgradcheck(lambda a, v: pa.checkpoint(lambda b: pa.tanh(b @ v) * b, a),
                            [x, w])
    assert pa.gradgradcheck(lambda a: pa.checkpoint(lambda b: pa.checkpoint(seg, b) * b, a),
                            [x])
    assert pa.gradgradcheck(lambda a, v: pa.checkpoint(lambda b, u: pa.tanh(b @ u) * b, a, v,
                                                       use_reentrant=True), [x, w])


def test_create_graph_second_order_matches_plain_and_engines(engine):
    def hvp(ckpt, eng):
        layers = _layers(depth=3)
        x = pa.tensor(np.random.default_rng(3).standard_normal((5, 8)), requires_grad=True)
        pa.manual_seed(2)
        loss = _loss(layers, x, ckpt, act=pa.gelu, p=0.3)
        call = pa.grad if eng is None else eng.grad
        gs = call(loss, [x] + _params(layers), create_graph=True)
        assert all(isinstance(g, pa.Tensor) and g.requires_grad for g in gs)
        s = sum((g * g).sum() for g in gs)
        return [g.numpy() for g in gs] + list(call(s, [x] + _params(layers)))

    plain = hvp(False, None)
    seq = hvp(True, None)
    for a, b in zip(plain, seq):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14)
    assert_bitwise(plain[:7], seq[:7])  # first order: bitwise
    assert_bitwise(seq, hvp(True, engine))


# ---- errors change nothing --------------------------------------------------------------

class _Boom(pa.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 1.0

    @staticmethod
    def backward(ctx, g):
        raise ValueError("boom")


def test_failed_backward_after_checkpoint_rules_changes_no_grad(engine):
    for eng in (None, engine):
        layers = _layers()
        x = pa.tensor(RNG.standard_normal((5, 8)), requires_grad=True)
        _backward(_loss(layers, x, False), eng)
        before = [g.clone() for g in _grads(layers, x)]
        loss = _loss(layers, _Boom.apply(x), True)  # fails after every checkpoint ran
        with pytest.raises(ValueError, match="boom"):
            _backward(loss, eng)
        assert_bitwise(before, _grads(layers, x))


def test_failing_recomputation_changes_no_grad_and_rng(engine):
    for eng in (None, engine):
        layers = _layers(depth=2)
        x = pa.tensor(RNG.standard_normal((5, 8)), requires_grad=True)
        calls = []

        def f(h):
            calls.append(1)
            if len(calls) > 1:
                raise KeyError("recompute failed")
            return F.dropout(_layer_fn(layers[1])(h), 0.5)

        loss = pa.checkpoint(f, pa.checkpoint(_layer_fn(layers[0]), x)).sum()
        state = pa_random.get_rng_state()
        with pytest.raises(KeyError, match="recompute failed"):
            _backward(loss, eng)
        assert all(g is None for g in _grads(layers, x))
        assert pa_random.get_rng_state() == state
        assert pa_random.current_generator() is pa.default_generator


def test_function_that_changes_between_runs_is_an_error():
    w = pa.tensor(np.ones((3, 3)), requires_grad=True)
    v = pa.tensor(np.ones((3, 3)), requires_grad=True)
    x = pa.tensor(np.ones((2, 3)), requires_grad=True)
    use = [w]
    y = pa.checkpoint(lambda a: a @ use[0], x)
    use[0] = v  # the recomputation uses a tensor the forward did not
    with pytest.raises(RuntimeError, match="same graph"):
        pa.backward(y.sum())
    shape = [3]
    y = pa.checkpoint(lambda a: a.sum(axis=0)[:shape[0]], x)
    shape[0] = 2
    with pytest.raises(RuntimeError, match="recomputation returned shape"):
        pa.backward(y.sum())
    assert w.grad is None and v.grad is None and x.grad is None


def test_inplace_write_to_a_saved_input_is_detected():
    layers = _layers(depth=1)
    x = pa.tensor(RNG.standard_normal((2, 8)), requires_grad=True)
    y = pa.checkpoint(_layer_fn(layers[0]), x)
    with pa.no_grad():
        layers[0].weight.mul_(2.0)  # an optimizer step before backward
    with pytest.raises(RuntimeError, match="inplace"):
        pa.backward(y.sum())


def test_bad_arguments():
    x = pa.tensor(np.ones(2), requires_grad=True)
    with pytest.raises(TypeError, match="callable"):
        pa.checkpoint(3, x)
    with pytest.raises(TypeError, match="exactly one Tensor output"):
        pa.checkpoint(lambda a: (a * 2, a * 3), x)
    with pytest.raises(TypeError, match="must return a Tensor"):
        pa.checkpoint(lambda a: a.numpy() * 2, x)


# ---- memory -----------------------------------------------------------------------------

def _peak(ckpt, layers, x):
    """Peak bytes traced during forward + backward, and the bytes held between them."""
    with pa.memory.caching_disabled():
        pa.memory.empty_cache()
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            loss = _loss(layers, x, ckpt, act=pa.gelu)
            held = tracemalloc.get_traced_memory()[0] - base
            pa.backward(loss)
            loss = None
            peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
    return peak, held


def test_peak_memory_of_a_checkpointed_mlp():
    # 8 layers, width 256, batch 1024 (activations 2 MiB each, outweighing the weights'
    # gradients, which backward holds until it commits them). .grad exists beforehand,
    # as in training, so the gradient copies made on the first commit do not count.
    layers = _layers(width=256, depth=8)
    x = pa.tensor(np.random.default_rng(0).standard_normal((1024, 256)), requires_grad=True)
    res = {}
    for ckpt in (False, True):
        for q in [x] + _params(layers):
            q.grad = np.zeros_like(q.numpy())
        res[ckpt] = _peak(ckpt, layers, x) + (_grads(layers, x),)
    assert_bitwise(res[False][2], res[True][2])
    (peak, held), (cpeak, cheld) = res[False][:2], res[True][:2]
    assert cheld < 0.5 * held       # measured: 18 vs 50 MiB
    assert cpeak < 0.75 * peak      # measured: 24 vs 54 MiB
