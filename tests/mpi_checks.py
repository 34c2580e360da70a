"""Checks of pa.distributed and DistributedDataParallel, run by tests/test_distributed.py under
`mpiexec -n N` (N = 1, 2, 3) in a process of their own: MPI must never start inside the pytest
process (a fork after MPI_Init crashes at exit). Every rank runs every check; a failed assert
is an uncaught exception, which ends the whole job (pa.distributed's excepthook), so the test
sees a non-zero exit and the traceback. The last line of each rank is "MPI CHECKS OK <rank>".
"""
from __future__ import annotations

import sys

import numpy as np

import parallel_autograd as pa
import parallel_autograd.distributed as dist
from parallel_autograd import nn
from parallel_autograd.nn.parallel import DistributedDataParallel as DDP

pa.set_default_dtype(pa.float64)   # the checks compare gradients to 1e-13


def raises(exc, fn, *args, match: str = "", **kw):
    try:
        fn(*args, **kw)
    except exc as e:
        assert match in str(e), f"{exc.__name__} without {match!r}: {e}"
        return e
    raise AssertionError(f"{fn.__name__} did not raise {exc.__name__}")


def check_before_init():
    assert not dist.is_initialized()
    raises(RuntimeError, dist.rank, match="pa.distributed.init()")
    raises(RuntimeError, dist.all_reduce, np.zeros(2), match="init()")
    raises(RuntimeError, DDP, nn.Linear(2, 2), match="init()")


def check_collectives(r, w):
    a = np.arange(6.0).reshape(2, 3) + r
    want = {"sum": sum(np.arange(6.0).reshape(2, 3) + k for k in range(w)),
            "max": np.arange(6.0).reshape(2, 3) + w - 1,
            "min": np.arange(6.0).reshape(2, 3)}
    for op, exp in want.items():
        b = a.copy()
        dist.all_reduce(b, op)
        assert np.array_equal(b, exp), (op, b, exp)
    b = a.copy()
    dist.all_reduce(b, dist.ReduceOp.AVG)
    assert np.allclose(b, want["sum"] / w, rtol=1e-15), b
    p = np.full(3, 2.0)
    dist.all_reduce(p, dist.ReduceOp.PRODUCT)
    assert np.array_equal(p, np.full(3, 2.0 ** w))
    i = np.array([r, 7], np.int64)
    dist.all_reduce(i, "avg")
    assert i.tolist() == [sum(range(w)) // w, 7]
    # a Tensor: in place, version bumped; a non-contiguous view: written back
    t = pa.tensor(np.ones(4))
    v0 = t._vc[0]
    dist.all_reduce(t)
    assert np.array_equal(t.numpy(), np.full(4, float(w))) and t._vc[0] > v0
    base = np.zeros((3, 4))
    view = base[:, ::2]
    view[...] = r + 1
    dist.all_reduce(view)
    assert np.array_equal(base[:, ::2], np.full((3, 2), float(sum(range(1, w + 1)))))
    assert np.array_equal(base[:, 1::2], np.zeros((3, 2)))
    work = dist.all_reduce(np.ones(5), async_op=True)
    assert work.wait() and work.is_completed()
    raises(ValueError, dist.all_reduce, np.ones(2), "median", match="op must be")
    ro = np.ones(2)
    ro.flags.writeable = False
    raises(ValueError, dist.all_reduce, ro, match="read-only")
    raises(TypeError, dist.all_reduce, [1.0, 2.0], match="ndarray or Tensor")
    raises(TypeError, dist.all_reduce, np.ones(2, complex), match="dtype")
    raises(TypeError, dist.all_reduce, np.ones(2, bool), match="not bool")  # no MPI SUM
    ro_src = np.full(2, 9.0)
    ro_src.flags.writeable = r != 0  # the source only sends: read-only is fine there
    dist.broadcast(ro_src, 0)
    assert np.array_equal(ro_src, [9.0, 9.0])
    # broadcast from the last rank
    x = np.full(3, float(r))
    dist.broadcast(x, w - 1)
    assert np.array_equal(x, np.full(3, float(w - 1)))
    raises(ValueError, dist.broadcast, x, w, match="rank in 0..")
    raises(ValueError, dist.broadcast, x, -1, match="rank in 0..")
    # all_gather, in rank order
    outs = [np.empty(2) for _ in range(w)]
    dist.all_gather(outs, np.array([r, 10.0 * r]))
    assert all(np.array_equal(o, [k, 10.0 * k]) for k, o in enumerate(outs)), outs
    raises(ValueError, dist.all_gather, [np.empty(2)] * (w + 1), np.zeros(2),
           match="world_size()")
    raises(ValueError, dist.all_gather, [np.empty(3) for _ in range(w)], np.zeros(2),
           match="shape")
    dist.barrier()
    dist.barrier(async_op=True).wait()


def mlp(seed, dtype=np.float64):
    pa.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 16, dtype=dtype), nn.Tanh(), nn.Linear(16, 16, dtype=dtype),
                         nn.Tanh(), nn.Linear(16, 3, dtype=dtype))


def data(r, n=8):
    rng = np.random.default_rng(100 + r)
    return rng.standard_normal((n, 5)), rng.standard_normal((n, 3))


def local_grads(model, x, y, steps=1):
    """The gradients one rank's plain backward gives (no DDP), summed over `steps`."""
    model.zero_grad()
    for _ in range(steps):
        pa.backward(((model(pa.tensor(x)) - pa.tensor(y)) ** 2).mean())
    return [p.grad.clone() for p in model.parameters()]


def gather_mean(arrays, w):
    out = []
    for a in arrays:
        parts = [np.empty_like(a) for _ in range(w)]
        dist.all_gather(parts, a)
        out.append(sum(parts[1:], parts[0]) / w)
    return out


def forced_parallel():
    return pa.Engine(2, min_nodes=1, min_work=0, min_width=0, inline_below=0)


def check_ddp(r, w):
    # construction broadcasts rank 0's parameters: every rank starts from them
    model = mlp(seed=r)
    ddp = DDP(model, bucket_cap_mb=0.001)
    ref = mlp(seed=0)
    for p, q in zip(model.parameters(), ref.parameters()):
        assert np.array_equal(p.numpy(), q.numpy())
    names = [n for n, _ in model.named_parameters()]
    flat = [n for b in ddp.buckets for n in b]
    assert flat == names[::-1], (flat, names)  # buckets in reverse parameter order
    assert len(ddp.buckets) > 1
    x, y = data(r)
    want = gather_mean(local_grads(ref, x, y), w)
    results = []
    for run in (pa.backward, forced_parallel().backward, lambda loss: loss.backward()):
        model.zero_grad()
        run(((ddp(pa.tensor(x)) - pa.tensor(y)) ** 2).mean())
        got = [p.grad for p in model.parameters()]
        for a, b in zip(want, got):
            assert np.allclose(a, b, rtol=1e-13, atol=1e-15), np.max(np.abs(a - b))
        results.append([g.clone() for g in got])
    for other in results[1:]:  # bitwise the same, whatever the engine
        assert all(np.array_equal(a, b) for a, b in zip(results[0], other))
    # no_sync: two local steps, then one synchronised: the average of the three's sum
    model.zero_grad()
    with ddp.no_sync():
        for _ in range(2):
            pa.backward(((ddp(pa.tensor(x)) - pa.tensor(y)) ** 2).mean())
    local = [p.grad.clone() for p in model.parameters()]
    assert all(np.array_equal(a, b) for a, b in zip(local, local_grads(ref, x, y, 2)))
    pa.backward(((ddp(pa.tensor(x)) - pa.tensor(y)) ** 2).mean())
    want3 = gather_mean(local_grads(ref, x, y, 3), w)
    for a, p in zip(want3, model.parameters()):
        assert np.allclose(a, p.grad, rtol=1e-13, atol=1e-15)
    # a backward without a DDP forward before it does not synchronise
    model.zero_grad()
    pa.backward(((model(pa.tensor(x)) - pa.tensor(y)) ** 2).mean())
    assert all(np.array_equal(a, p.grad) for a, p in zip(local_grads(ref, x, y),
                                                          model.parameters()))
    # create_graph is refused
    model.zero_grad()
    raises(RuntimeError, pa.backward, ((ddp(pa.tensor(x)) - pa.tensor(y)) ** 2).mean(),
           create_graph=True, match="create_graph")
    assert all(p.grad is None for p in model.parameters())


class Double(nn.Module):
    """The input as float64: a float32 layer's output into a float64 one (F.linear, as
    PyTorch's, refuses an input whose dtype is not its weight's)."""

    def forward(self, x):
        return x.double()


def check_bucket_view_and_dtypes(r, w):
    pa.manual_seed(3)
    model = nn.Sequential(nn.Linear(4, 6, dtype=np.float32), Double(), nn.Linear(6, 2))
    ddp = DDP(model, gradient_as_bucket_view=True)
    assert len(ddp.buckets) == 2  # one per dtype
    x = pa.tensor(np.random.default_rng(r).standard_normal((3, 4)).astype(np.float32))
    pa.backward(ddp(x).sum())
    for p in model.parameters():
        assert p.grad.dtype == p.dtype
        assert any(np.shares_memory(p.grad, b.buffer) for b in ddp._buckets)


class TwoBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 2)
        self.b = nn.Linear(3, 2)
        self.never = nn.Linear(3, 2)

    def forward(self, x, branch):
        return (self.a if branch == 0 else self.b)(x).sum()


def check_unused(r, w):
    pa.manual_seed(5)
    model = TwoBranch()
    ddp = DDP(model, find_unused_parameters=True, bucket_cap_mb=0.0001)
    x = pa.tensor(np.full((2, 3), r + 1.0))
    branch = r % 2 if w > 1 else 0
    pa.backward(ddp(x, branch))
    users = [k for k in range(w) if k % 2 == 0] if w > 1 else [0]
    total = sum(np.full(3, 2.0 * (k + 1)) for k in users)
    assert np.allclose(model.a.weight.grad, np.tile(total / w, (2, 1)))
    assert model.never.weight.grad is None  # used by no rank: untouched
    if w > 1:
        other = [k for k in range(w) if k % 2 == 1]
        total_b = sum(np.full(3, 2.0 * (k + 1)) for k in other)
        assert np.allclose(model.b.weight.grad, np.tile(total_b / w, (2, 1)))
    if w == 1:  # without the flag: a clear error, and no .grad changes
        strict = DDP(model, bucket_cap_mb=0.0001)
        before = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
        raises(RuntimeError, pa.backward, strict(x, 0), match="find_unused_parameters=True")
        for b, p in zip(before, model.parameters()):
            assert (b is None and p.grad is None) or np.array_equal(b, p.grad)


def check_models_must_match(r, w):
    """Ranks that build different models get a clear error on every rank (PyTorch checks
    the parameters' shapes across processes too)."""
    if w == 1:
        return
    pa.manual_seed(0)
    model = nn.Linear(3, 2 + (r == w - 1))
    e = raises(RuntimeError, DDP, model, match="every rank must build the same model")
    assert f"rank {w - 1}: parameter 'weight' has shape (3, 3) where rank 0's has (2, 3)" \
        in str(e), str(e)


def check_failure_one_rank(r, w):
    """World of one: a failed backward changes no .grad, and the next step works."""
    if w != 1:
        return
    model = mlp(seed=1)
    ddp = DDP(model, bucket_cap_mb=0.001)
    x, y = data(0)
    pa.backward(((ddp(pa.tensor(x)) - pa.tensor(y)) ** 2).mean())
    before = [p.grad.clone() for p in model.parameters()]
    out = ddp(pa.tensor(x))
    first = next(model.parameters())
    h = first.register_hook(lambda g: 1 / 0)
    raises(ZeroDivisionError, pa.backward, ((out - pa.tensor(y)) ** 2).mean())
    h.remove()
    assert all(np.array_equal(b, p.grad) for b, p in zip(before, model.parameters()))
    model.zero_grad()
    pa.backward(((ddp(pa.tensor(x)) - pa.tensor(y)) ** 2).mean())
    assert all(np.array_equal(b, p.grad) for b, p in zip(before, model.parameters()))


def check_buffers_and_trace(r, w):
    pa.manual_seed(r)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 8), nn.Linear(8, 1))
    ddp = DDP(model, bucket_cap_mb=0.0002)
    x = pa.tensor(np.random.default_rng(r).standard_normal((6, 4)))
    with pa.profile() as prof:
        pa.backward(ddp(x).sum())
    trace = dist.export_chrome_trace(prof, None)
    def stats_equal():
        bn = model[1].running_mean.numpy().copy()
        parts = [np.empty_like(bn) for _ in range(w)]
        dist.all_gather(parts, bn)
        return all(np.array_equal(p, parts[0]) for p in parts)
    assert stats_equal() == (w == 1)  # each rank's batch moved its statistics
    ddp(pa.tensor(np.ones((6, 4))))  # the forward broadcasts rank 0's statistics first
    assert stats_equal()
    if r != 0:
        assert trace is None
        return
    ev = trace["traceEvents"]
    assert {e["pid"] for e in ev} == set(range(w))
    comm = [e for e in ev if e["ph"] == "X" and e["name"].startswith("all-reduce bucket")]
    assert len(comm) == w * len(ddp.buckets), len(comm)
    assert any(e["name"] == "DDP: wait for all-reduces" for e in ev)


def main() -> int:
    check_before_init()
    dist.init()
    dist.init()  # again: nothing happens
    r, w = dist.rank(), dist.world_size()
    assert (dist.get_rank(), dist.get_world_size()) == (r, w) and 0 <= r < w
    check_collectives(r, w)
    check_ddp(r, w)
    check_bucket_view_and_dtypes(r, w)
    check_unused(r, w)
    check_failure_one_rank(r, w)
    check_models_must_match(r, w)
    check_buffers_and_trace(r, w)
    dist.barrier()
    sys.stdout.write(f"MPI CHECKS OK {r}\n")  # one write: print's two would interleave
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
