"""Adversarial checks of pa.distributed and DistributedDataParallel, run by
tests/test_distributed_attacks.py under `mpiexec -n N` (never inside pytest: a fork after
MPI_Init crashes at exit).

    mpiexec -n N python tests/mpi_attacks.py SCENARIO [ARG]

Scenarios:
- `grads`: many models the DDP author did not design for (random MLP shapes, float32,
  mixed float32 parameters fed float64 data, a CNN, tied/shared parameters, a parameter
  used twice, frozen parameters, 0-d and zero-size parameters, checkpointed segments,
  BatchNorm, an Embedding), tiny and default bucket caps, the sequential engine and the
  parallel engine forced parallel at 2 and 4 workers: every `.grad` equals the average over
  ranks of the local gradient, bitwise the same for every engine, on every rank.
- `protocol`: held .grad arrays never reused, a gradient penalty, a profiled forced-parallel
  backward's merged trace, recovery after a failed backward (world of one), two forwards then
  one backward, retain_graph twice, no_sync with the parallel engine and bucket views,
  zero_grad(set_to_none=False), gradient_as_bucket_view with SGD and Adam over several steps
  against the default mode, the wrapped module used directly in the middle of training,
  unused parameters with bucket views.
- `split`: DDP on the halves of a split COMM_WORLD.
- `collectives`: 0-d, empty, non-contiguous, float32/int32/uint8 arrays, Tensors (version
  bumps), all_gather into Tensors, async Work waited twice and polled, AVG divided once.
- `fault WHERE`: rank 1 (of 2) fails at step 1 in WHERE (forward, hook, callback,
  callback-late, anomaly, anomaly-input, unused, optimizer, thread, sigint, sigterm): the
  job must end.
- `forever`: trains until killed (the driver sends SIGINT to mpiexec).
- `unused-on-some-ranks`, `no-sync-unused`, `two-ddp-modules`, `view-failure-world-one`,
  `view-unused-keeps-grad`, `work-threads`, `mismatches`: reproducers of bugs found and fixed since
  (regression tests);
- `xfail-sys-exit`: a known limit (a strict xfail in the driver).

Every rank runs every check; a failed assert is an uncaught exception, which ends the whole
job (pa.distributed's excepthook). The last line of each rank is "ATTACKS OK <scenario>
<rank>".
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

import numpy as np

import parallel_autograd as pa
import parallel_autograd.distributed as dist
from parallel_autograd import nn
from parallel_autograd.nn.parallel import DistributedDataParallel as DDP

pa.set_default_dtype(pa.float64)   # the checks compare gradients to 1e-13


def say(msg: str) -> None:
    sys.stdout.write(msg + "\n")  # one write: the ranks' lines do not interleave
    sys.stdout.flush()


_FORCED: dict = {}


def forced(n: int) -> pa.Engine:
    """An engine of n workers that runs every graph in parallel (one per n, reused)."""
    if n not in _FORCED:
        _FORCED[n] = pa.Engine(n, min_nodes=1, min_work=0, min_width=0, inline_below=0)
    return _FORCED[n]


ENGINES = None  # name -> backward function, made in main (the engines' threads live long)


def gather_mean(arrays):
    """The average over ranks of each rank's arrays (rank order, left to right)."""
    w = dist.world_size()
    out = []
    for a in arrays:
        parts = [np.empty_like(a) for _ in range(w)]
        dist.all_gather(parts, np.array(a, order="C"))
        out.append(sum(parts[1:], parts[0]) / w)
    return out


def same_on_every_rank(arrays) -> bool:
    """Whether every rank holds bitwise the same arrays as rank 0."""
    ok = True
    for a in arrays:
        a = np.ascontiguousarray(a)
        mine = np.frombuffer(a.tobytes(), np.uint8).copy()
        parts = [np.empty_like(mine) for _ in range(dist.world_size())]
        dist.all_gather(parts, mine)
        ok = ok and all(np.array_equal(p, parts[0]) for p in parts)
    return ok


def copy_state(dst: nn.Module, src: nn.Module) -> None:
    for p, q in zip(dst.parameters(), src.parameters()):
        p.numpy()[...] = q.numpy()
    for p, q in zip(dst.buffers(), src.buffers()):
        p.numpy()[...] = q.numpy()


def assert_close(got, want, rtol, what):
    got, want = (np.asarray(a.numpy() if isinstance(a, pa.Tensor) else a) for a in (got, want))
    assert got.shape == want.shape, (what, got.shape, want.shape)
    err = np.max(np.abs(got - want), initial=0.0)
    scale = np.max(np.abs(want), initial=0.0)
    assert err <= rtol * scale + 1e-300, f"{what}: max error {err} (scale {scale})"


# ---- models -----------------------------------------------------------------------------
class Tied(nn.Module):
    """One Linear used twice, and one Parameter registered in two submodules."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(5, 5)
        self.dec = nn.Linear(5, 3)
        self.other = nn.Linear(5, 3)
        self.other.weight = self.dec.weight  # shared between two submodules

    def forward(self, x):
        h = self.enc(self.enc(x).tanh())  # used twice in one forward
        return self.dec(h) + self.other(h * h)


class Odd(nn.Module):
    """A 0-d parameter, a zero-size parameter and a frozen one next to ordinary ones."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(5, 3)
        self.scale = nn.Parameter(np.array(1.5))
        self.empty = nn.Parameter(np.zeros((0, 3)))
        self.frozen = nn.Linear(5, 3)
        self.frozen.weight.requires_grad = False

    def forward(self, x):
        z = x[:, :0] @ self.empty  # (n, 3) of zeros, a gradient of shape (0, 3)
        return self.lin(x) * self.scale + z + self.frozen(x)


class Ckpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh())
        self.b = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        h = pa.checkpoint(self.a, x)
        h = pa.checkpoint(self.b, h)
        return self.head(h)


class Emb(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(11, 4)
        self.lin = nn.Linear(4, 3)

    def forward(self, idx):
        return self.lin(self.emb(idx).tanh())


def random_mlp(seed: int, dtype):
    rng = np.random.default_rng(seed)  # the same shapes on every rank
    widths = [5] + [int(k) for k in rng.integers(1, 12, rng.integers(1, 5))] + [3]
    layers = []
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [nn.Linear(a, b, bias=bool(rng.integers(0, 2)), dtype=dtype), nn.Tanh()]
    return nn.Sequential(*layers[:-1])


MODELS = {
    "mlp_rand_a": lambda: random_mlp(11, np.float64),
    "mlp_rand_b": lambda: random_mlp(12, np.float64),
    "mlp_f32": lambda: random_mlp(13, np.float32),
    "f32_params_f64_data": lambda: nn.Sequential(Float32(), random_mlp(14, np.float32)),
    "cnn": lambda: nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(3, 2, 3), nn.Flatten(), nn.Linear(2, 3)),
    "tied": Tied,
    "odd": Odd,
    "frozen_first": lambda: _frozen_first(),
    "checkpoint": Ckpt,
    "batchnorm": lambda: nn.Sequential(nn.Linear(5, 6), nn.BatchNorm1d(6), nn.Tanh(),
                                       nn.Linear(6, 3)),
    "embedding": Emb,
}


class Float32(nn.Module):
    """float64 data cast to the float32 parameters' dtype (F.linear, as PyTorch's, refuses
    an input whose dtype is not its weight's)."""

    def forward(self, x):
        return x.float()


def _frozen_first():
    m = nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 3))
    for p in m[0].parameters():
        p.requires_grad = False
    return m


def inputs(name: str, r: int, n: int = 6):
    rng = np.random.default_rng(1000 + r)
    if name == "cnn":
        x = rng.standard_normal((n, 1, 6, 6))
    elif name == "embedding":
        return pa.tensor(rng.integers(0, 11, (n, 2))), rng.standard_normal((n, 2, 3))
    else:
        x = rng.standard_normal((n, 5))
    if name == "mlp_f32":
        x = x.astype(np.float32)
    return pa.tensor(x), rng.standard_normal((n, 3))


def mse(out, y):
    d = out - pa.tensor(y.astype(out.dtype))
    return (d * d).mean()


# ---- grads --------------------------------------------------------------------------
def check_model(name: str, cap: float, view: bool) -> None:
    r = dist.rank()
    pa.manual_seed(100 + r)  # different on each rank: DDP broadcasts rank 0's
    model = MODELS[name]()
    ddp = DDP(model, bucket_cap_mb=cap, gradient_as_bucket_view=view)
    pa.manual_seed(7)
    ref = MODELS[name]()
    copy_state(ref, model)
    params = list(model.parameters())
    x, y = inputs(name, r)
    ref.zero_grad()
    pa.backward(mse(ref(x), y))
    local = [p.grad for p in ref.parameters()]
    trained = [i for i, g in enumerate(local) if g is not None]
    assert [i for i, p in enumerate(params) if p.requires_grad] == trained, name
    want = gather_mean([local[i] for i in trained])
    results = {}
    for ename, run in ENGINES.items():
        model.zero_grad()
        run(mse(ddp(x), y))
        got = [params[i].grad for i in trained]
        for i, g, wnt in zip(trained, got, want):
            assert g.dtype == params[i].dtype == local[i].dtype, (name, i, g.dtype)
            tol = 1e-13 if g.dtype == np.float64 else 1e-6
            assert_close(g, wnt, tol, f"{name} cap={cap} view={view} {ename} param {i}")
        for i, p in enumerate(params):
            if not p.requires_grad:
                assert p.grad is None, (name, i)
        results[ename] = [g.numpy().copy() for g in got]
    first = next(iter(results.values()))
    for ename, res in results.items():
        assert all(np.array_equal(a, b) for a, b in zip(first, res)), (name, ename)
    assert same_on_every_rank(first), name


def scenario_grads() -> None:
    for name in MODELS:
        for cap, view in ((1e-6, False), (25.0, True)):
            check_model(name, cap, view)


def scenario_split() -> None:
    """Two process groups of a split COMM_WORLD train independently: DDP averages within
    its own group only (checked against the group's average), in both engines."""
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    sub = world.Split(world.Get_rank() % 2, world.Get_rank())
    dist.destroy_process_group()
    dist.init(sub)
    assert dist.world_size() == (world.Get_size() + 1 - world.Get_rank() % 2) // 2
    for name in ("mlp_rand_a", "tied", "batchnorm"):
        check_model(name, 1e-6, False)
    dist.barrier()
    dist.destroy_process_group()
    dist.init()  # back to COMM_WORLD for the end of the script
    dist.barrier()


# ---- protocol misuse ------------------------------------------------------------------
def mlp(dtype=np.float64):
    return nn.Sequential(nn.Linear(5, 8, dtype=dtype), nn.Tanh(), nn.Linear(8, 8, dtype=dtype),
                         nn.Tanh(), nn.Linear(8, 3, dtype=dtype))


def pair(**kw):
    """(model wrapped in DDP, ddp, plain reference copy with rank 0's weights)."""
    r = dist.rank()
    pa.manual_seed(r)
    model = mlp()
    ddp = DDP(model, bucket_cap_mb=kw.pop("cap", 1e-5), **kw)
    ref = mlp()
    copy_state(ref, model)
    return model, ddp, ref


def local(ref, *losses_of):
    """The local gradient of the sum of `losses_of(ref)` (a fresh .grad)."""
    ref.zero_grad()
    for f in losses_of:
        pa.backward(f(ref))
    return [p.grad.clone() for p in ref.parameters()]


def grads(model):
    return [p.grad.clone() for p in model.parameters()]


def close_all(got, want, what):
    for k, (g, wnt) in enumerate(zip(got, want)):
        assert_close(g, wnt, 1e-13, f"{what} param {k}")


def check_two_forwards_one_backward():
    r = dist.rank()
    model, ddp, ref = pair()
    (x1, y1), (x2, y2) = inputs("mlp", r), inputs("mlp", r + 50)
    f = lambda m: mse(m(x1), y1) + 2.0 * mse(m(x2), y2)  # noqa: E731
    want = gather_mean(local(ref, f))
    for run in ENGINES.values():
        model.zero_grad()
        run(f(ddp))
        close_all(grads(model), want, "two forwards, one backward")
    assert same_on_every_rank(grads(model))


def check_retain_graph_twice():
    """One forward, two backward passes with retain_graph: the first synchronises; the
    second (as in PyTorch, whose reducer ignores hooks after finalizing) only accumulates
    locally, so `.grad` = average + local gradient."""
    r = dist.rank()
    model, ddp, ref = pair()
    x, y = inputs("mlp", r)
    f = lambda m: mse(m(x), y)  # noqa: E731
    loc = local(ref, f)
    want = gather_mean(loc)
    model.zero_grad()
    loss = f(ddp)
    forced(2).backward(loss, retain_graph=True)
    close_all(grads(model), want, "retain_graph, first backward")
    forced(2).backward(loss)
    close_all(grads(model), [a + b for a, b in zip(want, loc)], "retain_graph, second")


def check_no_sync_then_sync(view: bool):
    r = dist.rank()
    model, ddp, ref = pair(gradient_as_bucket_view=view)
    batches = [inputs("mlp", r + 10 * k) for k in range(3)]
    fs = [lambda m, b=b: mse(m(b[0]), b[1]) for b in batches]
    eng = forced(4)
    model.zero_grad()
    with ddp.no_sync():
        for f in fs[:2]:
            eng.backward(f(ddp))
    close_all(grads(model), local(ref, *fs[:2]), "no_sync accumulates locally")
    eng.backward(fs[2](ddp))
    want = gather_mean(local(ref, *fs))
    close_all(grads(model), want, f"no_sync then sync (view={view})")
    assert same_on_every_rank(grads(model))
    # and again, without zero_grad: the average accumulates onto the average
    eng.backward(fs[0](ddp))
    want2 = [a + b for a, b in zip(want, gather_mean(local(ref, fs[0])))]
    close_all(grads(model), want2, f"accumulation across synchronised steps (view={view})")


def check_zero_grad_in_place():
    r = dist.rank()
    model, ddp, ref = pair()
    x, y = inputs("mlp", r)
    want = gather_mean(local(ref, lambda m: mse(m(x), y)))
    pa.backward(mse(ddp(x), y))
    held = [p.grad for p in model.parameters()]
    model.zero_grad(set_to_none=False)
    assert all(not h.any() for h in held)
    forced(2).backward(mse(ddp(x), y))
    close_all(grads(model), want, "after zero_grad(set_to_none=False)")


def train(view: bool, opt_name: str, set_to_none: bool, steps: int = 5):
    r = dist.rank()
    model, ddp, _ = pair(gradient_as_bucket_view=view)
    opt = (pa.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9) if opt_name == "sgd"
           else pa.optim.Adam(ddp.parameters(), lr=1e-2))
    eng = forced(2)
    for s in range(steps):
        x, y = inputs("mlp", r + 100 * s)
        opt.zero_grad(set_to_none=set_to_none)
        eng.backward(mse(ddp(x), y))
        opt.step()
    return [p.numpy().copy() for p in model.parameters()]


def check_bucket_view_with_optimizers():
    for opt_name in ("sgd", "adam"):
        base = train(False, opt_name, True)
        for view, stn in ((True, True), (True, False), (False, False)):
            other = train(view, opt_name, stn)
            assert all(np.array_equal(a, b) for a, b in zip(base, other)), \
                (opt_name, view, stn)
        assert same_on_every_rank(base)


def check_wrapped_module_directly():
    """A step through the wrapped module (no DDP forward) in the middle: local only."""
    r = dist.rank()
    model, ddp, ref = pair()
    x, y = inputs("mlp", r)
    f = lambda m: mse(m(x), y)  # noqa: E731
    want = gather_mean(local(ref, f))
    loc = local(ref, f)
    for run in (pa.backward, forced(2).backward):
        model.zero_grad()
        run(f(ddp))
        close_all(grads(model), want, "DDP step")
        model.zero_grad()
        run(f(model))
        close_all(grads(model), loc, "the wrapped module directly: local")
        model.zero_grad()
        run(f(ddp))
        close_all(grads(model), want, "DDP step after a local one")


def check_unused_with_views():
    """find_unused_parameters with gradient_as_bucket_view: a parameter no rank uses keeps
    its .grad; one only some ranks use gets the average."""
    r, w = dist.rank(), dist.world_size()

    class Three(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c = nn.Linear(3, 2), nn.Linear(3, 2), nn.Linear(3, 2)

        def forward(self, x, use_b, use_c):
            out = self.a(x).sum()
            if use_b:
                out = out + self.b(x).sum()
            if use_c:
                out = out + self.c(x).sum()
            return out

    pa.manual_seed(3)
    m = Three()
    ddp = DDP(m, find_unused_parameters=True, gradient_as_bucket_view=True, bucket_cap_mb=1e-5)
    x = pa.tensor(np.full((2, 3), r + 1.0))
    pa.backward(ddp(x, True, True))  # every rank uses every parameter
    assert same_on_every_rank(grads(m))
    c_before = m.c.weight.grad.clone()
    m.a.zero_grad()
    m.b.zero_grad()
    # b used on every rank but the last; c on none (every rank has missing parameters)
    forced(2).backward(ddp(x, r != w - 1 or w == 1, False))
    want_b = sum(np.full((2, 3), 2.0 * (k + 1)) for k in range(w) if k != w - 1 or w == 1) / w
    assert_close(m.b.weight.grad, want_b, 1e-13, "b used on some ranks")
    assert np.allclose(m.c.weight.grad, c_before, rtol=1e-15), "c used on no rank"
    assert same_on_every_rank(grads(m))


def check_gradient_penalty():
    """A loss with a gradient penalty (a create_graph `pa.grad` in the forward), then a plain
    backward through DDP: the average of the local gradients."""
    r = dist.rank()
    model, ddp, ref = pair()
    x0, y = inputs("mlp", r)

    def f(m):
        x = pa.tensor(x0.numpy(), requires_grad=True)
        out = m(x)
        (gx,) = pa.grad(out.sum(), [x], create_graph=True)
        return mse(out, y) + 0.1 * (gx * gx).sum()
    want = gather_mean(local(ref, f))
    for run in ENGINES.values():
        model.zero_grad()
        run(f(ddp))
        close_all(grads(model), want, "gradient penalty")


def check_profiled_parallel_trace():
    """pa.profile() around a forced-parallel DDP backward (the recorder is written from the
    engine's threads): every rank's buckets appear once in the merged trace."""
    r, w = dist.rank(), dist.world_size()
    model, ddp, _ = pair()
    x, y = inputs("mlp", r)
    with pa.profile() as prof:
        forced(4).backward(mse(ddp(x), y))
    trace = dist.export_chrome_trace(prof, None)
    if r == 0:
        ev = [e for e in trace["traceEvents"] if e["ph"] == "X"]
        done = sorted((e["pid"], e["name"]) for e in ev
                      if e["name"].startswith("all-reduce bucket"))
        want = sorted((k, f"all-reduce bucket {b}") for k in range(w)
                      for b in range(len(ddp.buckets)))
        assert [(k, n.split(" (")[0]) for k, n in done] == want, done
    else:
        assert trace is None


def check_failure_then_recover():
    """World of one, default mode: a backward that fails in the middle (buckets already
    started, forced-parallel engine) changes no .grad, and the next steps are right."""
    if dist.world_size() != 1:
        return
    for unused in (False, True):
        model, ddp, ref = pair(find_unused_parameters=unused)
        x, y = inputs("mlp", 0)
        f = lambda m: mse(m(x), y)  # noqa: E731
        want = local(ref, f)
        eng = forced(4)
        eng.backward(f(ddp))
        before = grads(model)
        loss = f(ddp)
        h = model[0].weight.register_hook(lambda g: 1 / 0)
        try:
            eng.backward(loss)
        except ZeroDivisionError:
            pass
        else:
            raise AssertionError("did not fail")
        h.remove()
        assert all(np.array_equal(a, b) for a, b in zip(before, grads(model)))
        assert ddp._next == 0 and ddp._pass is None and not ddp._armed
        for _ in range(2):
            model.zero_grad()
            eng.backward(f(ddp))
            close_all(grads(model), want, "after a failed backward")


def check_held_grads_are_not_reused():
    """Default mode: `.grad` arrays come from the caching allocator (>= 64 KiB here). Arrays
    the user still holds from an earlier step must never be handed out again."""
    r = dist.rank()
    pa.manual_seed(1)
    model = nn.Sequential(nn.Linear(128, 128), nn.Tanh(), nn.Linear(128, 128))
    ddp = DDP(model, bucket_cap_mb=0.1)
    held = []
    for step in range(3):
        x = pa.tensor(np.random.default_rng(10 * r + step).standard_normal((4, 128)))
        model.zero_grad()
        forced(2).backward(ddp(x).sum())
        held.append([(p.grad, p.grad.clone()) for p in model.parameters()])
    for step in held:
        for g, c in step:
            assert np.array_equal(g, c), "a held .grad array was overwritten"
    arrays = [g for step in held for g, _ in step]
    for i, a in enumerate(arrays):
        assert not any(np.shares_memory(a, b) for b in arrays[i + 1:]), "shared .grad memory"


def scenario_protocol() -> None:
    check_held_grads_are_not_reused()
    check_gradient_penalty()
    check_profiled_parallel_trace()
    check_failure_then_recover()
    check_two_forwards_one_backward()
    check_retain_graph_twice()
    check_no_sync_then_sync(False)
    check_no_sync_then_sync(True)
    check_zero_grad_in_place()
    check_bucket_view_with_optimizers()
    check_wrapped_module_directly()
    check_unused_with_views()


# ---- collectives --------------------------------------------------------------------------
def scenario_collectives() -> None:
    r, w = dist.rank(), dist.world_size()
    tri = w * (w + 1) / 2  # sum of r + 1 over ranks
    a = np.array(float(r + 1))
    dist.all_reduce(a)
    assert a.shape == () and a == tri
    e = np.zeros((0, 3))
    dist.all_reduce(e)
    dist.broadcast(e, 0)
    outs = [np.zeros((0, 3)) for _ in range(w)]
    dist.all_gather(outs, e)
    assert all(o.shape == (0, 3) for o in outs)
    f = np.full(3, r + 1, np.float32)
    dist.all_reduce(f, "avg")
    assert f.dtype == np.float32 and np.array_equal(f, np.full(3, tri / w, np.float32))
    i = np.array([r, -r - 1], np.int32)
    dist.all_reduce(i, dist.ReduceOp.AVG)  # floor division
    s = sum(range(w))
    assert i.dtype == np.int32 and i.tolist() == [s // w, -(s + w) // w]
    u = np.array([200], np.uint8)
    dist.all_reduce(u, "max")
    assert u.tolist() == [200]
    # a 0-d Tensor; a Tensor that requires grad, overwritten by broadcast (version bumped
    # on the receivers only: the source's data does not change)
    t0 = pa.tensor(np.array(float(r)))
    v = t0._vc[0]
    dist.all_reduce(t0, "max")
    assert t0.item() == w - 1 and t0._vc[0] > v
    leaf = pa.tensor(np.full((2, 2), float(r)), requires_grad=True)
    v = leaf._vc[0]
    dist.broadcast(leaf, w - 1)
    assert np.array_equal(leaf.numpy(), np.full((2, 2), float(w - 1)))
    assert (leaf._vc[0] > v) == (r != w - 1)
    # non-contiguous: a transposed Tensor's data and a strided source for all_gather
    base = np.arange(12.0).reshape(3, 4) * (r + 1)
    tr = base.T
    dist.all_reduce(tr)
    assert np.array_equal(base, np.arange(12.0).reshape(3, 4) * tri)
    src = (np.arange(8.0).reshape(2, 4) + 100 * r)[:, ::2]
    into = [pa.tensor(np.zeros((2, 2))) for _ in range(w)]
    vs = [t._vc[0] for t in into]
    dist.all_gather(into, src)
    for k, t in enumerate(into):
        assert np.array_equal(t.numpy(), np.arange(8.0).reshape(2, 4)[:, ::2] + 100 * k)
        assert t._vc[0] > vs[k]
    # async: Work waited twice, polled until done, AVG divided exactly once
    x = np.full(4, float(r + 1))
    work = dist.all_reduce(x, "avg", async_op=True)
    while not work.is_completed():
        pass
    assert work.wait() and work.wait() and work.is_completed()
    assert np.array_equal(x, np.full(4, tri / w))
    works = [dist.broadcast(np.full(2, float(r)), k, async_op=True) for k in range(w)]
    for wk in reversed(works):
        wk.wait(timeout=10)
    b = dist.barrier(async_op=True)
    b.wait()
    assert b.is_completed()
    # bad input raises before communicating (every rank alike, so nothing desynchronises)
    for bad in (lambda: dist.all_reduce(np.ones(2), "mean"),
                lambda: dist.broadcast(np.ones(2), True),
                lambda: dist.all_gather(tuple(np.zeros(1) for _ in range(w)), np.zeros(1)),
                lambda: dist.all_gather([np.zeros(1, np.float32) for _ in range(w)],
                                        np.zeros(1))):
        try:
            bad()
        except (ValueError, TypeError):
            pass
        else:
            raise AssertionError("bad input accepted")
    dist.barrier()


# ---- faults ---------------------------------------------------------------------------------
class WithBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 3))
        self.spare = nn.Linear(5, 3)

    def forward(self, x, use_spare=True):
        out = self.net(x)
        return out + self.spare(x) if use_spare else out


def scenario_fault(where: str) -> None:
    """Rank 1 fails at step 1 in `where`; every other rank trains normally. The job must end
    (the driver checks the exit status, the message and the time)."""
    r = dist.rank()
    pa.manual_seed(0)
    model = WithBN()
    ddp = DDP(model, bucket_cap_mb=1e-4, timeout=20)
    opt = pa.optim.SGD(ddp.parameters(), lr=0.01)
    eng = forced(2)
    bad = r == 1
    for step in range(4):
        x, y = inputs("mlp", r + step)
        if bad and step == 1 and where == "anomaly-input":
            x.numpy()[0, 0] = np.nan  # the loss's own backward fails, before DDP joined
        if bad and step == 1 and where == "forward":
            raise RuntimeError(f"injected fault on rank {r} in forward")
        out = ddp(x, use_spare=not (bad and step == 1 and where == "unused"))
        loss = mse(out, y)
        if bad and step == 1:
            if where in ("hook", "sigint", "anomaly"):
                target = model.net[0].weight  # its gradient is final late in the backward

                def fail(g):
                    if where == "sigint":
                        os.kill(os.getpid(), signal.SIGINT)  # from a worker thread
                        time.sleep(0.5)
                        return None
                    if where == "anomaly":
                        return g * np.nan
                    raise RuntimeError(f"injected fault on rank {r} in a hook")
                target.register_hook(fail)
            elif where in ("callback", "callback-late"):
                def queue(g):
                    def cb():
                        raise RuntimeError(f"injected fault on rank {r} in a queued callback")
                    pa.autograd.queue_callback(cb)
                    return None
                # early: queued before DDP's final callback; late: after it (it then runs
                # once the all-reduces completed on every rank)
                (model.net[3] if where == "callback" else model.net[0]).weight.register_hook(
                    queue)
            elif where == "sigterm":
                os.kill(os.getpid(), signal.SIGTERM)
            elif where == "thread":
                th = threading.Thread(target=lambda: 1 / 0, name="injected")
                th.start()
                th.join()
                time.sleep(30)  # the thread's excepthook must end the job
        if where in ("anomaly", "anomaly-input"):
            with pa.detect_anomaly():
                eng.backward(loss)
        else:
            eng.backward(loss)
        if bad and step == 1 and where == "optimizer":
            raise RuntimeError(f"injected fault on rank {r} in the optimizer step")
        opt.step()
        opt.zero_grad()
    dist.barrier()


def scenario_forever() -> None:
    r = dist.rank()
    model, ddp, _ = pair()
    eng = forced(2)
    step = 0
    while True:
        x, y = inputs("mlp", r)
        eng.backward(mse(ddp(x), y))
        if step == 2:
            say(f"TRAINING {r} {os.getpid()}")
        step += 1


# ---- reproducers of bugs found (the first four fail at commit 15ff6c9's package; the
# ---- bugs found and fixed since (regression tests), and one known limit (xfail-*) ----------
def scenario_unused_on_some_ranks() -> None:
    """find_unused_parameters=True; rank 0 uses every parameter, the others leave `spare`
    unused. Expected: every rank's spare.weight.grad is rank 0's gradient / world size.
    (Was: only ranks with unused parameters ran the used-flags all-reduce: it matched
    another collective, the ranks' .grad diverged, then the job hung.)"""
    r = dist.rank()
    pa.manual_seed(0)
    model = WithBN()
    ddp = DDP(model, find_unused_parameters=True, timeout=3)
    x, y = inputs("mlp", r)
    pa.backward(mse(ddp(x, use_spare=(r == 0)), y))
    g = model.spare.weight.grad
    # a barrier with a deadline: the mismatched collective must not hang the test
    dist.barrier(async_op=True).wait(timeout=3)
    assert g is not None, f"rank {r}: spare.weight.grad is None, rank 0 used it"
    assert same_on_every_rank([g])


def scenario_two_ddp_modules() -> None:
    """Two DDP-wrapped submodules in one loss, parallel engine: a slow tensor hook on
    branch A on rank 0 and on branch B on the others makes the ranks start the two
    instances' all-reduces in opposite orders. Expected: the averaged gradients. (Was: both
    instances shared one communicator, so MPI matched A's bucket with B's: wrong sums.)"""
    r = dist.rank()
    pa.manual_seed(0)
    A, B = nn.Linear(4, 4), nn.Linear(4, 4)
    ra, rb = nn.Linear(4, 4), nn.Linear(4, 4)
    copy_state(ra, A)
    copy_state(rb, B)
    da, db = DDP(A), DDP(B)
    x = np.random.default_rng(r).standard_normal((3, 4))

    def loss_of(fa, fb, slow):
        ya, yb = fa(pa.tensor(x)), fb(pa.tensor(x) * 2.0)
        if slow:
            (ya if r == 0 else yb).register_hook(lambda g: time.sleep(0.2))
        return (ya * ya).sum() + (yb * yb * 3.0).sum()
    forced(2).backward(loss_of(da, db, True))
    pa.backward(loss_of(ra, rb, False))
    want = gather_mean([p.grad for p in list(ra.parameters()) + list(rb.parameters())])
    got = [p.grad for p in list(A.parameters()) + list(B.parameters())]
    close_all(got, want, "two DDP instances in one backward")


def scenario_no_sync_unused() -> None:
    """find_unused_parameters=True with no_sync() accumulation: `spare` is used in the
    no_sync step (each rank's own data) and by no rank in the synchronising step. Expected
    (the docs: 'the next synchronised backward averages the sum'; PyTorch's used-parameter
    map spans the no_sync session): spare's .grad is the average of the ranks' sums, the
    same on every rank. (Was: each rank kept its local gradient: the ranks diverged.)"""
    r = dist.rank()
    pa.manual_seed(0)
    model = WithBN()
    ref = WithBN()
    ddp = DDP(model, find_unused_parameters=True)
    copy_state(ref, model)
    x, y = inputs("mlp", r)
    with ddp.no_sync():
        pa.backward(mse(ddp(x), y))
    pa.backward(mse(ddp(x, use_spare=False), y))
    ref.zero_grad()
    pa.backward(mse(ref(x), y))
    want = gather_mean([ref.spare.weight.grad])[0]
    assert_close(model.spare.weight.grad, want, 1e-13, f"rank {r}: spare.weight.grad")


def scenario_view_unused_keeps_grad() -> None:
    """gradient_as_bucket_view + find_unused_parameters on 3 ranks: a parameter no rank uses
    in step 2 must keep its .grad (docs: 'a parameter no rank used keeps its .grad'). Its
    .grad is its bucket slot from step 1, which step 2 fills with .grad / 3 and all-reduces:
    x/3 + x/3 + x/3 is not always x."""
    r = dist.rank()

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.c = nn.Linear(3, 2), nn.Linear(3, 2)

        def forward(self, x, use_c):
            return self.a(x).sum() + (self.c(x).sum() if use_c else 0.0)
    pa.manual_seed(0)
    m = M()
    ddp = DDP(m, find_unused_parameters=True, gradient_as_bucket_view=True)
    x = pa.tensor(np.random.default_rng(r).standard_normal((4, 3)))
    pa.backward(ddp(x, True))
    before = m.c.weight.grad.clone()
    m.a.zero_grad()
    pa.backward(ddp(x, False))
    assert np.array_equal(m.c.weight.grad, before), \
        np.max(np.abs(m.c.weight.grad.numpy() - before))


def scenario_stall_before_forward() -> None:
    """Rank 0 stalls before a forward whose BatchNorm buffers DDP broadcasts; rank 1's
    broadcast must time out after DDP's `timeout` (1 s) and end the job (it waited forever
    before DDP's own collectives got the timeout)."""
    pa.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    ddp = DDP(model, timeout=1.0)
    if dist.rank() == 0:
        time.sleep(60)
    ddp(pa.tensor(np.ones((4, 3))))


def scenario_xfail_sys_exit() -> None:
    """Rank 1 ends with sys.exit(2) while rank 0 waits in a collective. Docs: init's
    abort_on_exception 'ends the job on any exception nobody catches ... (as python -m
    mpi4py does)'; mpi4py's runner aborts on SystemExit with a non-zero code. Expected: the
    job ends at once. Actual: rank 1 blocks in MPI_Finalize, rank 0 in its barrier (here
    bounded: it times out after 1 s and aborts, with a TimeoutError)."""
    if dist.rank() == 1:
        sys.exit(2)
    dist.barrier(async_op=True).wait(timeout=1)


def scenario_work_polled_by_two_threads() -> None:
    """Two threads poll one Work (`is_completed()`) at once. Docs: 'every function may be
    called from any thread once init returned'; PyTorch's Work is thread-safe. Expected: the
    result, divided once. Actual: with MPI_THREAD_MULTIPLE `Work` calls MPI_Test on the same
    request from both threads unguarded: MPICH reports an internal error (a request
    completed twice) within a few hundred rounds."""
    sys.setswitchinterval(1e-6)
    for _ in range(1000):  # the unguarded version failed within a few hundred
        a = np.full(1000, 8.0)
        work = dist.all_reduce(a, "avg", async_op=True)

        def poll():
            while not work.is_completed():
                pass
        threads = [threading.Thread(target=poll) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert np.all(a == 8.0), "divided more than once"


def scenario_view_failure_world_one() -> None:
    """World of one, gradient_as_bucket_view=True: a backward that fails after DDP's hooks
    ran must leave every .grad as it was (docs: 'no .grad changes'). (Was: the hooks wrote
    into the bucket slots, which are the .grad arrays.)"""
    pa.manual_seed(0)
    m = mlp()
    ddp = DDP(m, gradient_as_bucket_view=True, bucket_cap_mb=1e-5)
    x, y = inputs("mlp", 0)
    pa.backward(mse(ddp(x), y))
    before = grads(m)
    loss = mse(ddp(x), y)
    h = m[0].weight.register_hook(lambda g: 1 / 0)  # after the last layers' hooks ran
    try:
        pa.backward(loss)
    except ZeroDivisionError:
        pass
    else:
        raise AssertionError("the backward did not fail")
    h.remove()
    changed = [n for (n, p), b in zip(m.named_parameters(), before)
               if not np.array_equal(p.grad, b)]
    assert not changed, f".grad changed by a failed backward: {changed}"


MISMATCHES = {  # kind -> what the error must say about the last rank
    "param-shape": "parameter '2.weight' has shape (3, 4) where rank 0's has (2, 4)",
    "frozen": "parameter '0.weight' is frozen (requires_grad=False) where rank 0's is "
              "trainable",
    "buffer-shape": "buffer 'bn.running_mean' has shape (5,) where rank 0's has (4,)",
    "buffer-dtype": "buffer 'bn.running_var' has dtype float32 where rank 0's has float64",
    "buffer-missing": "has 0 buffers where rank 0 has 3 (the first that differs: none here, "
                      "'bn.running_mean' on rank 0)",
    "bucket-cap": "bucket_cap_mb=1e-05 where rank 0's is 25.0",
    "find-unused": "find_unused_parameters=True where rank 0's is False",
    "broadcast-buffers": "broadcast_buffers=False where rank 0's is True",
    "bucket-layout": "has 6 gradient buckets where rank 0 has 1",
}


def scenario_mismatches() -> None:
    """For each kind of MISMATCHES, the last rank builds its model or its DDP differently
    in that one respect. Expected: DDP() raises RuntimeError on every rank naming the last
    rank and what differs (prints "MISMATCH kind rank: message"), before any broadcast or
    bucket all-reduce could hang or mix up buffers, and the ranks still talk afterwards.
    Was: other buffers, bucket sizes or options went undetected (the job hung until DDP's
    timeout, or a rank got silently wrong averages); frozen parameters and shapes gave a
    generic 'wrap other parameters' error naming neither."""
    from parallel_autograd.nn.parallel import distributed as ddp_module
    odd = dist.rank() == dist.world_size() - 1
    assign = ddp_module._assign_buckets
    for kind in MISMATCHES:
        differ = odd and kind
        pa.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(),
                              nn.Linear(4, 3 if differ == "param-shape" else 2))
        model.bn = nn.BatchNorm1d(5 if differ == "buffer-shape" else 4,
                                  track_running_stats=differ != "buffer-missing")
        if differ == "buffer-shape":  # the same parameters: only the buffers differ
            model.bn.weight, model.bn.bias = nn.Parameter(pa.ones(4)), nn.Parameter(pa.zeros(4))
        if differ == "buffer-dtype":
            model.bn.running_var = pa.tensor(np.ones(4, np.float32))
        if differ == "frozen":
            model[0].weight.requires_grad = False
        kw = {"bucket-cap": {"bucket_cap_mb": 1e-5},
              "find-unused": {"find_unused_parameters": True},
              "broadcast-buffers": {"broadcast_buffers": False}}.get(differ, {})
        if differ == "bucket-layout":  # the same arguments, another layout (a code change)
            ddp_module._assign_buckets = lambda params, cap: assign(params, 1e-5)
        try:
            DDP(model, timeout=10.0, **kw)
        except RuntimeError as e:
            say(f"MISMATCH {kind} {dist.rank()}: {e}")
        else:
            raise AssertionError(f"DDP accepted a model or settings that differ ({kind})")
        finally:
            ddp_module._assign_buckets = assign
        dist.barrier(async_op=True).wait(timeout=10)  # nothing left half-done between ranks
    pa.manual_seed(0)  # and an agreeing model still trains
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    ddp = DDP(model, timeout=10.0)
    pa.backward(ddp(pa.tensor(np.full((4, 3), dist.rank() + 1.0))).sum())
    assert model[0].weight.grad is not None


SCENARIOS = {
    "grads": scenario_grads,
    "protocol": scenario_protocol,
    "split": scenario_split,
    "collectives": scenario_collectives,
    "forever": scenario_forever,
    "unused-on-some-ranks": scenario_unused_on_some_ranks,
    "two-ddp-modules": scenario_two_ddp_modules,
    "view-failure-world-one": scenario_view_failure_world_one,
    "no-sync-unused": scenario_no_sync_unused,
    "xfail-sys-exit": scenario_xfail_sys_exit,
    "view-unused-keeps-grad": scenario_view_unused_keeps_grad,
    "stall-before-forward": scenario_stall_before_forward,
    "work-threads": scenario_work_polled_by_two_threads,
    "mismatches": scenario_mismatches,
}


def main() -> int:
    global ENGINES
    name = sys.argv[1]
    dist.init()
    ENGINES = {"sequential": pa.backward, "forced2": forced(2).backward,
               "forced4": forced(4).backward, "loss.backward": lambda loss: loss.backward()}
    if name == "fault":
        scenario_fault(sys.argv[2])
    else:
        SCENARIOS[name]()
    say(f"ATTACKS OK {name} {dist.rank()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
