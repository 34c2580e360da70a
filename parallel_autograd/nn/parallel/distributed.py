"""`DistributedDataParallel`: data-parallel training over `pa.distributed` (MPI), with each
bucket's gradient all-reduce started during the backward, as soon as its gradients are final.

How (PyTorch's DDP, on this package's engines):
- At construction, the parameters are split into buckets: in reverse registration order
  (the order backward tends to finish them), by dtype, the first bucket at most 1 MiB and
  the others `bucket_cap_mb`, each with one flat contiguous buffer. Every rank checks that
  it agrees with rank 0 (parameters, buffers, communication options, bucket layout; all
  raise alike, naming the difference), then rank 0's parameters and buffers are broadcast.
- Each parameter has a grad-ready hook (`Tensor.register_grad_ready_hook`): the engine calls
  it, on whichever thread finished that gradient, as soon as the gradient of the call is
  final. The hook writes it (plus what `.grad` already held: gradient accumulation) divided
  by the world size into the parameter's slot of its bucket, in one pass (PyTorch divides
  before the all-reduce too), so the sum is the average. When a bucket's last slot is
  filled, the bucket and every full bucket after it are started as non-blocking all-reduces
  (`Iallreduce`, sum),
  always in bucket order: MPI needs every rank to start collectives in the same order, and
  the threads finish gradients in different orders on different ranks.
- While the backward goes on, the engine calls the module's progress callback before each
  node (`engine/callbacks.py`), which tests the pending requests: MPI makes no progress
  unless someone calls into it.
- After the last node, a callback queued on the pass waits for the remaining requests and
  hands the averages to the write-back (a copy into a fresh array, or with
  `gradient_as_bucket_view` the bucket slot itself): `.grad` of every
  parameter becomes the average over ranks of what it would have been locally. Then the
  backward call returns.

`no_sync()` skips all of this (local accumulation into `.grad`); the next synchronised
backward averages the accumulated gradients. A forward decides: the backward after a forward
inside `no_sync()` does not synchronise (as in PyTorch).

Failure: a backward that fails on one rank after this rank joined its collectives (an
error in a rule, a NaN under detect_anomaly, Ctrl+C), or a bucket that does not complete
within `timeout` seconds (another rank failed before its backward reached us), ends the
whole job with `pa.distributed.abort` (the error printed): the other ranks could only wait
forever. In a world of one the error propagates as usual and no `.grad` changes.

Determinism: a bucket holds the engine's gradients, which are bitwise the same for any
worker count, and MPI's reduction of a fixed-size buffer over a fixed world size is the same
from run to run, so the averages are bitwise reproducible for a given world size. They equal
a single-process run on the whole batch up to rounding (the order of the additions differs).

Thread safety: the hooks run concurrently on the engine's threads; the module's state is
guarded by `self._lock` (bucket bookkeeping and starting requests, never numpy work); the
progress callbacks test started requests under `self._testing` only (a Test can copy
megabytes). One backward at a time may reach the module's parameters.
"""
from __future__ import annotations

import contextlib
import json
import threading
import time
import traceback

import numpy as np

from ... import memory, profiler
from ...distributed import _comm
from ...engine import callbacks
from ...grad_mode import no_grad
from ...tensor import Tensor
from ...version import bump
from ..module import Module

_FIRST_BUCKET_BYTES = 1 << 20  # PyTorch's dist._DEFAULT_FIRST_BUCKET_BYTES
_TRACK = "MPI communication"
_VERDICT_BYTES = 512  # what each rank says differs from rank 0 (utf-8, truncated)


class _Bucket:
    """One flat buffer of several parameters' gradients and its all-reduce."""

    __slots__ = ("index", "buffer", "params", "slots", "left", "request", "started",
                 "done", "nbytes")

    def __init__(self, index: int, params: list, dtype):
        self.index = index
        self.params = params  # [(parameter index, Parameter)]
        total = sum(p._data.size for _, p in params)
        self.buffer = np.zeros(total, dtype)
        self.nbytes = self.buffer.nbytes
        self.slots, off = [], 0
        for _, p in params:
            n = p._data.size
            self.slots.append(self.buffer[off:off + n].reshape(p._data.shape))
            off += n
        self.reset()

    def reset(self) -> None:
        self.left = len(self.params)  # slots still to fill in this backward
        self.request = None
        self.started = None  # perf_counter when the all-reduce was started
        self.done = False


class DistributedDataParallel(Module):
    """Wrap `module` for data-parallel training over `pa.distributed` (PyTorch's
    `torch.nn.parallel.DistributedDataParallel`): call it like the module; after each
    backward, every parameter's `.grad` is the average over ranks.

    bucket_cap_mb: size of a bucket (all-reduce unit) in MiB; the first is 1 MiB at most
        (so the first all-reduce starts early).
    find_unused_parameters: allow parameters that a backward does not reach: their slots
        are filled with what `.grad` holds (or zeros) when the backward ends, and one small
        all-reduce per synchronised step (every rank) tells which parameters some rank
        reached since the last synchronisation (no_sync steps included): those get the
        average, the others keep their `.grad`. Without it such a backward is an error
        naming the parameters.
    broadcast_buffers: broadcast rank 0's buffers (e.g. BatchNorm's running statistics)
        at each forward, as PyTorch does.
    gradient_as_bucket_view: `.grad` becomes a view of the bucket buffer (no copy; it is
        overwritten by the next synchronised backward), else a fresh array.
    timeout: seconds to wait for a bucket's all-reduce before ending the job.

    `pa.distributed.init()` must have been called. Thread safety: see the module doc.
    """

    def __init__(self, module: Module, bucket_cap_mb: float = 25.0,
                 find_unused_parameters: bool = False, broadcast_buffers: bool = True,
                 gradient_as_bucket_view: bool = False, timeout: float = 1800.0) -> None:
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel: expected a Module, got "
                            f"{type(module).__name__}")
        if not bucket_cap_mb > 0:
            raise ValueError(f"DistributedDataParallel: bucket_cap_mb must be > 0, got "
                             f"{bucket_cap_mb}")
        if not timeout > 0:
            raise ValueError(f"DistributedDataParallel: timeout must be > 0, got {timeout}")
        _comm._group()  # raises before init()
        # a communicator of its own: its collectives never match another DDP's or the user's,
        # whatever order the engine's threads start them in (collective: every rank)
        self.group = _comm.new_group()
        self.module = module
        self.find_unused_parameters = find_unused_parameters
        self.broadcast_buffers = broadcast_buffers
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.timeout = timeout
        self.require_backward_grad_sync = True
        self._lock = threading.Lock()
        # one tester of the started requests at a time (MPI must not test a request from two
        # threads), apart from _lock: a Test may copy megabytes (shared-memory transfers run
        # inside it), which must not stall the hooks filling other buckets
        self._testing = threading.Lock()
        self._armed = False  # the next backward synchronises (set by forward)
        self._overlap = True  # start buckets during the backward (False: at its end; the
        # benchmark's baseline without overlap)
        self._pass = None  # the PassCallbacks of the synchronising backward under way
        named = []
        seen = set()
        for name, p in module.named_parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                named.append((name, p))
        self._names = [n for n, _ in named]
        self._params = [p for _, p in named]
        self._buckets, self._where = _assign_buckets(self._params, bucket_cap_mb)
        self._check_ranks_agree(bucket_cap_mb)
        self._sync_state(module)
        self._outs: list = [None] * len(self._params)  # what .grad becomes, per parameter
        # parameters some backward reached since the last synchronisation (no_sync steps
        # included): what find_unused_parameters tells the other ranks
        self._used = np.zeros(len(self._params), np.int32)
        self._saved: dict = {}  # index -> .grad's values a bucket-view slot held (restore)
        self._next = 0  # the next bucket to start
        self._handles = [p.register_grad_ready_hook(self._hook_for(i))
                         for i, p in enumerate(self._params)]

    # ---- the module interface -------------------------------------------------------
    def forward(self, *args, **kwargs):
        """Run the wrapped module; the backward of its result synchronises unless this
        forward ran inside `no_sync()`."""
        if self.broadcast_buffers and self.group.size > 1 and self.training:
            self._wait_all([_comm.broadcast(b, 0, self.group, async_op=True)
                            for b in self.module.buffers()], "the buffers' broadcast")
        self._armed = self.require_backward_grad_sync
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes of forwards run inside accumulate into `.grad` locally, with
        no communication; the first synchronised backward after it averages the sum."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    @property
    def buckets(self) -> list:
        """The buckets' parameter names, in the order they are all-reduced."""
        return [[self._names[i] for i, _ in b.params] for b in self._buckets]

    # ---- during backward --------------------------------------------------------------
    def _hook_for(self, index: int):
        def hook(t, g):
            return self._ready(index, t, g)
        return hook

    def _ready(self, index: int, t: Tensor, g):
        """A parameter's gradient is final (any engine thread): fill its slot, start what
        can start, and tell the write-back what `.grad` becomes."""
        self._used[index] = 1  # (a plain store: concurrent hooks write distinct items)
        if not self._armed:
            return None
        if isinstance(g, Tensor):
            raise RuntimeError("DistributedDataParallel does not support backward with "
                               "create_graph=True")
        self._join_pass()
        b, j = self._where[index]
        slot = b.slots[j]
        cur = None if t._grad is None else t._grad._data  # .grad's array
        if cur is not None and np.shares_memory(cur, slot):  # bucket view, not zeroed: keep
            self._saved[index] = cur.copy()  # its values for a failed backward (world of one)
        self._fill(slot, g, cur)
        out = slot if self.gradient_as_bucket_view else memory.empty(slot.shape, slot.dtype)
        self._outs[index] = out
        with self._lock:
            b.left -= 1
            if b.left == 0 and self._overlap:
                self._start_ready()
        return out

    def _fill(self, slot: np.ndarray, g, cur) -> None:
        """slot = (cur + g) / world size (the sum of the slots is then the average): one
        pass, two with `cur` (what `.grad` held: accumulated under no_sync(), or a bucket
        view of the last step, possibly `slot` itself)."""
        n = self.group.size
        if cur is None:
            np.divide(g, n, out=slot)
        else:
            np.add(cur, g, out=slot)
            np.divide(slot, n, out=slot)

    def _join_pass(self) -> None:
        calls = callbacks.current_pass()
        with self._lock:
            if self._pass is calls:
                return
            if self._pass is not None:
                raise RuntimeError("DistributedDataParallel: a second backward reached the "
                                   "module's parameters while one was synchronising")
            self._pass = calls
        calls.on_failure(self._failed)
        calls.add_progress(self._progress)
        calls.queue_callback(self._finalize)

    def _start_ready(self) -> None:
        """Start every full bucket from `_next` on, in order (under `_lock`)."""
        g = self.group
        rec = profiler.active()
        buckets = self._buckets
        while self._next < len(buckets) and buckets[self._next].left == 0:
            b = buckets[self._next]
            b.started = time.perf_counter()
            with g.call:
                b.request = g.comm.Iallreduce(g.MPI.IN_PLACE, b.buffer, op=g.MPI.SUM)
            if rec is not None:
                rec.add(f"start all-reduce bucket {b.index}", b.started, track=_TRACK)
            self._next += 1

    def _progress(self) -> None:
        """Before each node (any thread): test started requests so MPI moves them on."""
        if self._next == 0 or not self._testing.acquire(blocking=False):
            return
        try:
            self._test_started()
        finally:
            self._testing.release()

    def _test_started(self) -> None:
        g = self.group
        for b in self._buckets[:self._next]:
            if not b.done:
                with g.call:
                    done = b.request.Test()
                if not done:
                    return  # later buckets complete after earlier ones
                self._completed(b)

    def _completed(self, b: _Bucket) -> None:
        b.done = True
        rec = profiler.active()
        if rec is not None:
            rec.add(f"all-reduce bucket {b.index} ({b.nbytes / 2**20:.2f} MiB)", b.started,
                    track=_TRACK)

    # ---- after the last node (the calling thread) ---------------------------------------
    def _finalize(self) -> None:
        missing = [i for i in range(len(self._params)) if self._outs[i] is None]
        if missing and not self.find_unused_parameters:
            names = ", ".join(self._names[i] for i in missing[:8])
            raise RuntimeError(
                f"DistributedDataParallel: {len(missing)} parameter(s) got no gradient in this "
                f"backward ({names}{', ...' if len(missing) > 8 else ''}); their buckets "
                "cannot be all-reduced. Pass find_unused_parameters=True if the model does "
                "not use every parameter in every step")
        for i in missing:
            self._fill_unused(i)
        if not self._overlap:
            with self._lock:
                self._start_ready()
        rec = profiler.active()
        t0 = time.perf_counter()
        for b in self._buckets:
            _comm.wait(b.request, self.timeout,
                       f"the all-reduce of gradient bucket {b.index} of {len(self._buckets)}",
                       b.nbytes, self.group)
            if not b.done:
                self._completed(b)
        if rec is not None:
            rec.add("DDP: wait for all-reduces", t0)
        # every rank, every synchronised step (a collective): which parameters some rank used
        used = self._globally_used() if self.find_unused_parameters else None
        if not self.gradient_as_bucket_view:  # the averages into .grad's arrays: one pass
            for i, out in enumerate(self._outs):
                b, j = self._where[i]
                np.copyto(out, b.slots[j])
        for i in missing:
            if used[i]:  # used elsewhere, or in this rank's no_sync steps: the average
                self._params[i].grad = self._outs[i]
            elif i in self._saved:  # no rank used it: its .grad (a bucket view) as it was
                b, j = self._where[i]
                np.copyto(b.slots[j], self._saved[i])
        self._used[:] = 0
        self._reset()

    def _fill_unused(self, index: int) -> None:
        b, j = self._where[index]
        slot = b.slots[j]
        cur = self._params[index]._grad
        cur = None if cur is None else cur._data
        if cur is None:
            slot.fill(0)
        else:
            if np.shares_memory(cur, slot):  # bucket view: kept for a parameter no rank used
                self._saved[index] = cur.copy()
            np.divide(cur, self.group.size, out=slot)
        self._outs[index] = slot if self.gradient_as_bucket_view else \
            memory.empty(slot.shape, slot.dtype)
        with self._lock:
            b.left -= 1
            if b.left == 0:
                self._start_ready()

    def _globally_used(self) -> np.ndarray:
        """Per parameter, how many ranks reached it since the last synchronisation (one
        small all-reduce; find_unused_parameters only, on every rank at every sync)."""
        used = self._used.copy()
        self._wait_all([_comm.all_reduce(used, _comm.ReduceOp.SUM, self.group, async_op=True)],
                       "the all-reduce of the used-parameter flags")
        return used

    def _failed(self, exc: BaseException) -> None:
        """The synchronising backward failed on this rank."""
        if self.group.size > 1:
            text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            why = ("the other ranks would wait for its gradients forever" if self._pass
                   is not None else "its gradients were averaged but this rank does not write "
                   "them: the ranks' parameters would diverge")
            _comm.abort(f"a synchronising backward failed; {why}:\n{text.rstrip()}")
        for b in self._buckets[:self._next]:  # one rank: they complete; never abandon them
            _comm.wait(b.request, self.timeout, group=self.group)
        for i, values in self._saved.items():  # .grad was a bucket view we overwrote
            b, j = self._where[i]
            np.copyto(b.slots[j], values)
        self._reset()

    def _reset(self) -> None:
        with self._lock:
            for b in self._buckets:
                b.reset()
            self._outs = [None] * len(self._params)
            self._saved = {}
            self._next = 0
            self._pass = None
            self._armed = False

    # ---- set-up -------------------------------------------------------------------
    def _sync_state(self, module: Module) -> None:
        """Every rank starts from rank 0's parameters and buffers."""
        if self.group.size == 1:
            return
        params = list(module.parameters())
        with no_grad():
            works = [_comm.broadcast(p._data, 0, self.group, async_op=True) for p in params]
            works += [_comm.broadcast(b, 0, self.group, async_op=True)
                      for b in module.buffers()]
            self._wait_all(works, "the broadcast of rank 0's parameters and buffers")
            for p in params:
                bump(p)

    def _check_ranks_agree(self, bucket_cap_mb: float) -> None:
        """Every rank wraps the same model (parameters' names, shapes, dtypes and
        requires_grad, buffers' names, shapes and dtypes) with the same communication
        settings and bucket layout: else the broadcasts and bucket all-reduces would
        mismatch (a hang until `timeout`, or silently mixed-up gradients). Rank 0's
        description is broadcast, each rank compares its own, and every rank sees every
        rank's verdict, so all raise the same error naming the ranks and what differs."""
        if self.group.size == 1:
            return
        mine = _describe(self.module, self._buckets, self._names, {
            "bucket_cap_mb": float(bucket_cap_mb),
            "find_unused_parameters": bool(self.find_unused_parameters),
            "broadcast_buffers": bool(self.broadcast_buffers)})
        ref = self._broadcast_json(mine)
        verdict = (_difference(mine, ref) if self.group.rank != 0 else "").encode()
        mine_v = np.zeros(_VERDICT_BYTES, np.uint8)
        mine_v[:min(len(verdict), _VERDICT_BYTES)] = np.frombuffer(verdict[:_VERDICT_BYTES],
                                                                   np.uint8)
        every = [np.empty_like(mine_v) for _ in range(self.group.size)]
        self._wait_all([_comm.all_gather(every, mine_v, self.group, async_op=True)],
                       "the comparison of the ranks' models")
        odd = [(r, v.tobytes().rstrip(b"\0").decode(errors="replace"))
               for r, v in enumerate(every) if v.any()]
        if odd:
            lines = "; ".join(f"rank {r}: {why}" for r, why in odd[:4])
            more = f"; and {len(odd) - 4} more rank(s)" if len(odd) > 4 else ""
            raise RuntimeError(
                "DistributedDataParallel: the ranks' models or DDP arguments differ from rank "
                f"0's ({lines}{more}): every rank must build the same model and pass the "
                "same bucket_cap_mb, find_unused_parameters and broadcast_buffers")

    def _broadcast_json(self, obj):
        """Rank 0's `obj` on every rank (its JSON text: length, then bytes)."""
        blob = json.dumps(obj).encode()
        n = np.array([len(blob)], np.int64)
        self._wait_all([_comm.broadcast(n, 0, self.group, async_op=True)],
                       "the comparison of the ranks' models")
        buf = (np.frombuffer(blob, np.uint8).copy() if self.group.rank == 0
               else np.empty(int(n[0]), np.uint8))
        self._wait_all([_comm.broadcast(buf, 0, self.group, async_op=True)],
                       "the comparison of the ranks' models")
        return json.loads(buf.tobytes())

    def _wait_all(self, works: list, what: str) -> None:
        """Wait for DDP's own collectives, at most `timeout` seconds: past it, in a world of
        two or more, end the job (another rank failed or hangs)."""
        try:
            for w in works:
                w.wait(self.timeout)
        except TimeoutError as e:
            if self.group.size > 1:
                _comm.abort(f"{what}: {e}")
            raise

    def extra_repr(self) -> str:
        return (f"world_size={self.group.size}, buckets={len(self._buckets)}, "
                f"find_unused_parameters={self.find_unused_parameters}")


def _assign_buckets(params: list, cap_mb: float):
    """Buckets in reverse parameter order, one dtype each: (buckets, where), `where[i]` =
    (bucket, slot index) of parameter i."""
    buckets, where = [], [None] * len(params)
    open_: dict = {}  # dtype -> parameter indices of its open bucket
    sizes: dict = {}

    def close(dt):
        members = open_.pop(dt)
        b = _Bucket(len(buckets), [(i, params[i]) for i in members], dt)
        for j, i in enumerate(members):
            where[i] = (b, j)
        buckets.append(b)
        sizes.pop(dt)

    for i in reversed(range(len(params))):
        dt = params[i]._data.dtype
        open_.setdefault(dt, []).append(i)
        sizes[dt] = sizes.get(dt, 0) + params[i]._data.nbytes
        cap = cap_mb * 2**20 if buckets else min(_FIRST_BUCKET_BYTES, cap_mb * 2**20)
        if sizes[dt] >= cap:
            close(dt)
    for dt in list(open_):
        close(dt)
    return buckets, where


def _describe(module: Module, buckets: list, names: list, options: dict) -> dict:
    """What must agree across ranks, as JSON-able lists."""
    return {
        "parameter": [[n, list(p.shape), str(p.dtype), bool(p.requires_grad)]
                      for n, p in module.named_parameters()],
        "buffer": [[n, list(b.shape), str(b.dtype)] for n, b in module.named_buffers()],
        "option": [[k, v] for k, v in options.items()],
        "gradient bucket": [[str(i), [names[j] for j, _ in b.params]]
                            for i, b in enumerate(buckets)],
    }


_FIELDS = {"parameter": ("shape", "dtype", "requires_grad"), "buffer": ("shape", "dtype"),
           "option": ("value",), "gradient bucket": ("parameters",)}


def _difference(mine: dict, ref: dict) -> str:
    """The first way `mine` differs from rank 0's `ref` ("" if none), in words."""
    for kind, fields in _FIELDS.items():
        a, b = mine[kind], ref[kind]
        names_a, names_b = [e[0] for e in a], [e[0] for e in b]
        if names_a != names_b and kind == "gradient bucket":
            return f"has {len(a)} gradient buckets where rank 0 has {len(b)}"
        if names_a != names_b:
            i = next((i for i, (x, y) in enumerate(zip(names_a, names_b)) if x != y),
                     min(len(a), len(b)))
            here = repr(names_a[i]) if i < len(a) else "none"
            there = repr(names_b[i]) if i < len(b) else "none"
            return (f"has {len(a)} {kind}s where rank 0 has {len(b)} (the first that "
                    f"differs: {here} here, {there} on rank 0)")
        for x, y in zip(a, b):
            for field, u, v in zip(fields, x[1:], y[1:]):
                if u != v:
                    return _mismatch(kind, x[0], field, u, v)
    return ""


def _mismatch(kind: str, name: str, field: str, here, there) -> str:
    if field == "requires_grad":
        return (f"parameter {name!r} is {'trainable' if here else 'frozen'} (requires_grad="
                f"{here}) where rank 0's is {'trainable' if there else 'frozen'}")
    if kind == "option":
        return f"{name}={here!r} where rank 0's is {there!r}"
    if field == "shape":
        here, there = tuple(here), tuple(there)
    return f"{kind} {name!r} has {field} {here} where rank 0's has {there}"
