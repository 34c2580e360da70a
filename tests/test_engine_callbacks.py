"""Pass callbacks (`pa.autograd.queue_callback`, `callbacks.current_pass()`: on_failure,
add_progress) and `Tensor.register_grad_ready_hook`, on every engine: sequential,
`Engine(2)`/`Engine(4)` forced parallel (checked with stats), keyed accumulation, and the
default `loss.backward()`. A failed call must leave every `.grad` as it was (bytes, identity)."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import parallel_autograd as pa
from conftest import assert_bitwise
from parallel_autograd.engine import callbacks


def forced(workers, **kw):
    opts = dict(min_nodes=0, min_work=0, min_width=0, inline_below=0, max_blas_share=1.0)
    return pa.Engine(workers, **{**opts, **kw})


@pytest.fixture(scope="module")
def engines():
    engs = {"par2": forced(2), "par4": forced(4),
            "keyed": forced(2, inline_below=16384, share_cheap=True)}
    yield engs
    for eng in engs.values():
        eng.close()


@pytest.fixture(params=["seq", "par2", "par4", "keyed", "default"])
def run(request, engines):
    """`run(loss, **kw)`: a backward call on one engine; forced engines must really run
    in parallel (with the accumulation asked for)."""
    mode = request.param

    def backward(loss, **kw):
        if mode == "seq":
            return pa.backward(loss, **kw)
        if mode == "default":
            return loss.backward(**kw)
        st = engines[mode].backward(loss, stats=True, **kw)
        assert st.mode == "parallel", st.reason
        assert (st.accumulation == "keyed") == (mode == "keyed")
    return backward


def leaves(n, size=5, seed=0):
    rng = np.random.default_rng(seed)
    return [pa.tensor(rng.standard_normal(size), requires_grad=True) for _ in range(n)]


def multi_use(x):
    """x used six times: its gradient is a sum of several contributions."""
    return (x * 1.5 + x.sin() * x + (x * x).exp() * 0.25 + x.tanh()).sum()


def reference(x):
    """d multi_use(x) / dx by a plain sequential backward, on a copy of x."""
    r = pa.tensor(x.numpy().copy(), requires_grad=True)
    pa.backward(multi_use(r))
    return r.grad


def wide(ws, hook=None):
    """One branch per leaf, summed: branches may run on different threads."""
    total = None
    for i, w in enumerate(ws):
        h = (w * (i + 1.0)).sin()
        if hook is not None:
            h.register_hook(hook)
        b = (h * w).exp().sum()
        total = b if total is None else total + b
    return total


def snapshot(ts):
    return [(t.grad, None if t.grad is None else t.grad.clone()) for t in ts]


def assert_unchanged(ts, snap):  # the same objects, with the same bytes
    assert all(t.grad is obj for t, (obj, _) in zip(ts, snap))
    assert_bitwise([v for _, v in snap], [t.grad for t in ts])


def raiser(exc):
    def fn(*args):
        raise exc
    return fn


def on_root(loss, fn):
    """Run `fn()` from a hook at the root of the pass (the first node to run)."""
    return loss.register_hook(lambda g: fn())


# ---- grad-ready hooks ---------------------------------------------------------------

def test_ready_hook_gets_final_sum_once_grad_untouched(run):
    (x,) = leaves(1, seed=1)
    ref = reference(x)
    x.grad = old = np.full(5, 0.5)
    seen = []
    x.register_grad_ready_hook(
        lambda t, g: seen.append((t, g.copy(), t.grad.numpy() is old and (t.grad == 0.5).all())))
    run(multi_use(x))
    assert len(seen) == 1 and seen[0][0] is x and seen[0][2]
    assert_bitwise([ref, np.full(5, 0.5) + ref], [seen[0][1], x.grad])
    assert x.grad.numpy() is old
    run(multi_use(x))
    assert len(seen) == 2
    assert_bitwise([ref], [seen[1][1]])


@pytest.mark.parametrize("how", ["seq", "par2"])
def test_ready_hook_not_called_by_grad(how, engines):
    (x,) = leaves(1, seed=3)
    calls = []
    x.register_grad_ready_hook(lambda t, g: calls.append(1) or np.zeros(5))
    (g,) = (pa.grad if how == "seq" else engines[how].grad)(multi_use(x), [x])
    assert calls == [] and x.grad is None
    assert_bitwise([reference(x)], [g])


def test_take_over_sets_grad_to_the_returned_array(run):
    x, y, w = leaves(3, seed=4)
    refs = [pa.tensor(t.numpy().copy(), requires_grad=True) for t in (x, y, w)]
    pa.backward(wide(refs))
    x.grad = np.ones(5)
    w.grad = w_old = np.full(5, 2.0)
    bx, by = np.full(5, 7.0), np.full(5, -3.0)
    x.register_grad_ready_hook(lambda t, g: bx)
    y.register_grad_ready_hook(lambda t, g: by)
    w.register_grad_ready_hook(lambda t, g: None)  # None: accumulate as usual
    run(wide([x, y, w]))
    assert x.grad.numpy() is bx and y.grad.numpy() is by and w.grad.numpy() is w_old
    assert (bx == 7.0).all() and (by == -3.0).all()
    assert_bitwise([np.full(5, 2.0) + refs[2].grad], [w.grad])


def test_take_over_filled_by_a_queued_callback_after_tensor_hooks(run):
    (x,) = leaves(1, seed=5)
    ref = reference(x)
    x.grad = np.ones(5)
    buf = np.empty(5)

    def hook(t, g):
        pa.autograd.queue_callback(lambda: np.multiply(g, 2.0, out=buf))
        return buf

    x.register_hook(lambda g: g * 3.0)  # tensor hooks run first: the ready hook sees 3 ref
    x.register_grad_ready_hook(hook)
    run(multi_use(x))
    assert x.grad.numpy() is buf
    assert_bitwise([ref * 3.0 * 2.0], [x.grad])


@pytest.mark.parametrize("mode", ["par2", "par4"])
def test_ready_hooks_and_callbacks_threads(mode, engines):
    main, others = threading.current_thread().name, set()
    for _ in range(30):
        ws, names, cb = leaves(8, size=20000, seed=6), [], []
        for w in ws:
            w.register_grad_ready_hook(lambda t, g: names.append(threading.current_thread().name))
        loss = wide(ws)
        on_root(loss, lambda: pa.autograd.queue_callback(
            lambda: cb.append(threading.current_thread().name)))
        st = engines[mode].backward(loss, stats=True)
        assert st.mode == "parallel" and len(names) == 8
        assert set(names) <= set(st.nodes_per_thread), (names, st.nodes_per_thread)
        assert cb == [main]  # final callbacks: on the calling thread
        others |= set(names) - {main}
        if others:
            break
    assert others, "no grad-ready hook ever ran on a worker thread"


def _bad(kind, x):
    if kind == "two":
        x.register_grad_ready_hook(lambda t, g: np.zeros(5))
    if kind == "raises":
        return raiser(ValueError("boom"))
    return {"shape": lambda t, g: np.zeros(6), "complex": lambda t, g: np.zeros(5, complex),
            "list": lambda t, g: [0.0] * 5, "tensor": lambda t, g: pa.tensor(np.zeros(5)),
            }.get(kind, lambda t, g: np.zeros(5))


@pytest.mark.parametrize("kind, exc", [
    ("shape", TypeError), ("complex", TypeError), ("list", TypeError), ("tensor", TypeError),
    ("two", RuntimeError), ("raises", ValueError), ("create_graph", RuntimeError)])
def test_ready_hook_errors_change_no_grad(run, kind, exc):
    x, w, u = leaves(3, seed=7)
    x.grad, w.grad = np.ones(5), np.full(5, 3.0)
    w.register_grad_ready_hook(lambda t, g: None)
    x.register_grad_ready_hook(_bad(kind, x))
    snap = snapshot([x, w, u])
    with pytest.raises(exc) as info:
        run(wide([x, w, u]), create_graph=kind == "create_graph")
    if kind != "raises":
        assert "grad-ready hook" in str(info.value)
    assert_unchanged([x, w, u], snap)


def test_register_rejects_bad_targets_and_handle_remove(run):
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="non-leaf"):
        (x * 2.0).register_grad_ready_hook(lambda t, g: None)
    with pytest.raises(RuntimeError, match="does not require grad"):
        pa.tensor([1.0]).register_grad_ready_hook(lambda t, g: None)
    with pytest.raises(TypeError, match="callable"):
        x.register_grad_ready_hook(42)
    a, b = [], []
    handle = x.register_grad_ready_hook(lambda t, g: a.append(1) or np.zeros(2))
    x.register_grad_ready_hook(lambda t, g: b.append(1))
    handle.remove()
    handle.remove()  # twice: no error
    run((x * x).sum())
    assert a == [] and b == [1]
    assert_bitwise([2.0 * x.numpy()], [x.grad])  # not taken over, nothing half-registered


def test_gradient_given_to_ready_hook_is_not_mutated_later(run):
    """Regression: an engine-owned gradient a hook kept became .grad itself, and the next
    backward accumulated into it in place."""
    (x,) = leaves(1, seed=9)
    kept = []
    x.register_grad_ready_hook(lambda t, g: kept.append(g))
    run(multi_use(x))
    first = kept[0].copy()
    run(multi_use(x))  # accumulates into .grad
    assert_bitwise([first], [kept[0]])


@pytest.mark.parametrize("tdtype, rdtype", [(np.float64, np.int64), (np.float64, bool),
                                            (np.float32, np.float64)])
def test_take_over_with_other_dtype_rejected(tdtype, rdtype):
    """Regression: an int, bool or wider float array was accepted and became .grad."""
    x = pa.tensor(np.arange(3.0, dtype=tdtype), requires_grad=True)
    x.register_grad_ready_hook(lambda t, g: np.ones(3, dtype=rdtype))
    with pytest.raises(TypeError, match="shape and dtype"):
        pa.backward((x * x).sum())
    assert x.grad is None


# ---- queue_callback -----------------------------------------------------------------

def test_callbacks_run_after_every_node_before_write_back(run):
    ws = leaves(6, seed=10)
    for w in ws:
        w.grad = np.full(5, 0.25)
    snap, ready, out = snapshot(ws), [], []

    def cb():
        out.append((len(ready), threading.get_ident(),
                    all(w.grad is s[0] and (w.grad == 0.25).all() for w, s in zip(ws, snap))))
    for w in ws:  # queued from whichever thread completed the gradient
        w.register_grad_ready_hook(lambda t, g: ready.append(t) or pa.autograd.queue_callback(cb))
    run(wide(ws))
    assert out == [(6, threading.get_ident(), True)] * 6
    assert all(w.grad is s[0] and not (w.grad == 0.25).all() for w, s in zip(ws, snap))


def test_callbacks_in_queue_order_and_may_queue_more(run):
    (x,) = leaves(1, seed=11)
    order, passes, failed = [], [], []

    def cb(name, *more):
        def fn():
            order.append(name)
            passes.append(callbacks.current_pass())
            for m in more:
                pa.autograd.queue_callback(m)
        return fn

    def root():
        passes.append(callbacks.current_pass())
        pa.autograd.queue_callback(cb("a", cb("b", cb("d"))))
        callbacks.current_pass().queue_callback(cb("c"))
        callbacks.current_pass().on_failure(failed.append)

    loss = multi_use(x)
    on_root(loss, root)
    run(loss)
    assert order == ["a", "c", "b", "d"] and failed == []  # no failure: not called
    assert passes[0] is not None and all(p is passes[0] for p in passes)


def test_queue_callback_outside_a_pass_and_non_callable(run):
    assert callbacks.current_pass() is None
    with pytest.raises(RuntimeError, match="no backward pass"):
        pa.autograd.queue_callback(lambda: None)
    (x,) = leaves(1, seed=12)
    x.grad = np.ones(5)
    snap, loss = snapshot([x]), multi_use(x)
    on_root(loss, lambda: pa.autograd.queue_callback("not callable"))
    with pytest.raises(TypeError, match="callable"):
        run(loss)
    assert_unchanged([x], snap)
    assert callbacks.current_pass() is None


@pytest.mark.parametrize("exc_type", [ValueError, KeyboardInterrupt])
def test_raising_callback_fails_call_changes_no_grad(run, exc_type):
    x, w, u = leaves(3, seed=13)
    x.grad, w.grad = np.ones(5), np.full(5, -2.0)
    snap, failed, later, post = snapshot([x, w, u]), [], [], []
    x.register_post_accumulate_grad_hook(lambda t: post.append(1))

    def root():
        p = callbacks.current_pass()
        p.on_failure(failed.append)
        p.queue_callback(raiser(exc_type("callback failed")))
        p.queue_callback(lambda: later.append(1))

    loss = wide([x, w, u])
    on_root(loss, root)
    with pytest.raises(exc_type, match="callback failed") as info:
        run(loss)
    assert_unchanged([x, w, u], snap)
    assert failed == [info.value] and later == [] and post == []
    run(wide([x, w, u]))  # the engine still works, and nothing left over runs
    assert len(failed) == 1 and later == [] and post == [1]


def test_nested_passes_keep_callbacks_separate(run):
    x, y, z = leaves(3, seed=14)
    events = []
    iz, iy = multi_use(z), multi_use(y)  # (hooks run with grad mode off: made here)
    on_root(iz, lambda: pa.autograd.queue_callback(lambda: events.append("grad")))

    def root():
        outer = callbacks.current_pass()
        pa.autograd.queue_callback(lambda: events.append("outer"))
        pa.grad(iz, [z])
        assert events == ["grad"]
        y.register_grad_ready_hook(lambda t, g: pa.autograd.queue_callback(
            lambda: events.append(("inner", callbacks.current_pass() is not outer))))
        run(iy)  # the same engine: reentrant
        assert events == ["grad", ("inner", True)]
        assert callbacks.current_pass() is outer
        pa.autograd.queue_callback(lambda: events.append("outer2"))  # still the outer's

    loss = multi_use(x)
    on_root(loss, root)
    run(loss)
    assert events == ["grad", ("inner", True), "outer", "outer2"]
    assert x.grad is not None and y.grad is not None and z.grad is None


def test_concurrent_calls_run_only_their_own_callbacks(run):
    n, rounds = 4, 5
    barrier = threading.Barrier(n)
    seen, errors = {i: [] for i in range(n)}, []

    def worker(i):
        try:
            me = threading.get_ident()
            barrier.wait()
            for r in range(rounds):
                x, w = leaves(2, size=200, seed=i)
                x.register_grad_ready_hook(lambda t, g: pa.autograd.queue_callback(
                    lambda: seen[i].append((i, r, threading.get_ident() == me))))
                run(wide([x, w]))
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    [t.start() for t in threads]
    [t.join(30) for t in threads]
    assert not errors, errors
    assert seen == {i: [(i, r, True) for r in range(rounds)] for i in range(n)}


# ---- failure and progress callbacks ---------------------------------------------------

class Fails(pa.Function):
    forward = staticmethod(lambda ctx, x: x * 1.0)
    backward = staticmethod(lambda ctx, g: raiser(ValueError("rule failed"))())


@pytest.mark.parametrize("where", ["hook", "rule"])
def test_on_failure_once_with_the_error(run, where):
    ws = leaves(4, seed=16)
    for w in ws:
        w.grad = np.ones(5)
    snap, failed = snapshot(ws), []

    def root():
        p = callbacks.current_pass()
        p.on_failure(raiser(RuntimeError("cleanup failed")))
        p.on_failure(failed.append)  # still called after the one that raised

    loss = wide(ws, raiser(ValueError("hook failed"))) if where == "hook" else \
        wide([Fails.apply(w) for w in ws[:2]] + ws[2:])
    on_root(loss, root)
    with pytest.raises(ValueError, match=f"{where} failed") as info:
        run(loss)
    assert failed == [info.value]  # once, even when several threads failed
    notes = getattr(info.value, "__notes__", [])
    assert any("failure callback" in n and "cleanup failed" in n for n in notes), notes
    assert_unchanged(ws, snap)


def test_progress_before_every_node_and_not_after(run):
    (x,) = leaves(1, seed=18)
    length, count, at_hooks = 40, [0], []
    h = x
    for _ in range(length):
        h = h * 1.01
        h.register_hook(lambda g: at_hooks.append(count[0]))
    loss = h.sum()
    handle = on_root(loss, lambda: callbacks.current_pass().add_progress(
        lambda: count.__setitem__(0, count[0] + 1)))
    run(loss, retain_graph=True)
    # each node pokes before its hooks run: strictly increasing, from at least 1
    assert len(at_hooks) == length and at_hooks[0] >= 1
    assert all(a < b for a, b in zip(at_hooks, at_hooks[1:])), at_hooks
    assert count[0] >= length + 1  # the chain and the leaf, after the root registered
    done = count[0]
    handle.remove()
    run(loss)  # the same graph again: a new pass, which registered nothing
    run(multi_use(x))
    assert count[0] == done, "a progress callback outlived its pass"
    assert at_hooks[length:] == [done] * length
