"""The process group (one MPI communicator) and the collectives on it (see the package doc).

State: `_state` is None until `init`, then a `_Group` (the communicator, its rank and size,
the lock MPI is called under). Every collective goes through `_group()`, which raises a
clear error before `init`.
"""
from __future__ import annotations

import contextlib
import enum
import os
import sys
import threading
import time
import traceback

import numpy as np

from ..tensor import Tensor
from ..version import bump

_INSTALL_HINT = ("pa.distributed needs mpi4py and an MPI library: "
                 "pip install 'parallel_autograd[mpi]' (mpi4py and the mpich wheel)")


class ReduceOp(enum.Enum):
    """How `all_reduce` combines the ranks' arrays (PyTorch's `ReduceOp` names)."""

    SUM = "sum"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"
    AVG = "avg"  # SUM, then divided by the world size


class _Group:
    """A process group: an MPI communicator with its rank and size. `call` is the lock MPI
    calls are made under (a no-op context with MPI_THREAD_MULTIPLE; one lock shared by every
    group of the process otherwise)."""

    def __init__(self, mpi, comm, hooked: bool, call=None):
        self.MPI = mpi
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        if call is None:
            multiple = mpi.Query_thread() >= mpi.THREAD_MULTIPLE
            call = contextlib.nullcontext() if multiple else threading.Lock()
        self.call = call
        self.hooked = hooked


def new_group() -> _Group:
    """Collective (every rank, in the same order): a group of the same processes on a
    communicator of its own (`MPI_Comm_dup`), whose collectives never match another group's.
    Pass it as `group=` to the collectives. DistributedDataParallel makes one per instance,
    so two of them, or your own collectives, can run concurrently in any order."""
    g = _group()
    with g.call:
        dup = g.comm.Dup()
    return _Group(g.MPI, dup, False, g.call)


_state: _Group | None = None
_init_lock = threading.Lock()  # guards _state changes


def _import_mpi():
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError(_INSTALL_HINT) from e
    return MPI


def init(comm=None, *, abort_on_exception: bool = True) -> None:
    """Join the process group: `comm` (an mpi4py intracommunicator), default
    `MPI.COMM_WORLD`. Starts MPI with `MPI_THREAD_MULTIPLE` unless the program already did
    (mpi4py does at import by default; an MPI you started yourself with at least
    `MPI_THREAD_SERIALIZED` is accepted). Calling it again with the same communicator does
    nothing; with another one raises (call `destroy_process_group()` first).

    `abort_on_exception`: in a job of two or more processes, an exception nobody catches,
    on any thread, prints its traceback with the rank and ends the whole job
    (`MPI_Abort`), instead of leaving the other ranks waiting forever.
    Thread safety: may be called from any thread; the first call wins."""
    global _state
    MPI = _import_mpi()
    with _init_lock:
        if MPI.Is_finalized():
            raise RuntimeError("pa.distributed.init: MPI was already finalized in this process")
        if not MPI.Is_initialized():
            MPI.Init_thread(MPI.THREAD_MULTIPLE)
        if MPI.Query_thread() < MPI.THREAD_SERIALIZED:
            raise RuntimeError(
                "pa.distributed.init: MPI was started with thread level "
                f"{MPI.Query_thread()} (below MPI_THREAD_SERIALIZED): the parallel engine calls "
                "MPI from its worker threads; start MPI with MPI.Init_thread(MPI.THREAD_MULTIPLE)")
        if comm is None:
            comm = MPI.COMM_WORLD
        if not isinstance(comm, MPI.Intracomm):
            raise TypeError(f"pa.distributed.init: comm must be an mpi4py Intracomm, got "
                            f"{type(comm).__name__}")
        if _state is not None:
            if _state.comm == comm:
                return
            raise RuntimeError("pa.distributed is already initialized with another "
                               "communicator: call destroy_process_group() first")
        hooked = abort_on_exception and comm.Get_size() > 1
        _state = _Group(MPI, comm, hooked)
        if hooked:
            _install_excepthooks()


def is_initialized() -> bool:
    """Whether `init` was called (and not undone by `destroy_process_group`)."""
    return _state is not None


def destroy_process_group(group: _Group | None = None) -> None:
    """Leave the process group (MPI itself stays up, as mpi4py finalizes it at exit).
    `group` (PyTorch's argument): a group from `new_group()` is simply dropped (nothing
    to tear down); None or the process group itself leaves the process group."""
    global _state
    if group is not None and group is not _state:
        return
    with _init_lock:
        _state = None


class NotInitializedError(RuntimeError, ValueError):
    """A collective or query before `init` (PyTorch raises ValueError there: this is both
    a RuntimeError and a ValueError)."""


def _group() -> _Group:
    g = _state
    if g is None:
        raise NotInitializedError("pa.distributed is not initialized: call "
                                  "pa.distributed.init() (or init_process_group()) first")
    return g


def rank() -> int:
    """This process's rank in the group (0 .. world_size() - 1)."""
    return _group().rank


def world_size() -> int:
    """How many processes the group has."""
    return _group().size


def get_rank(group: _Group | None = None) -> int:
    """PyTorch's name: this process's rank in `group` (default: the process group)."""
    return (group or _group()).rank


def get_world_size(group: _Group | None = None) -> int:
    """PyTorch's name: how many processes `group` (default: the process group) has."""
    return (group or _group()).size


# ---- waiting ------------------------------------------------------------------------
ABORT_GRACE = 0.5  # seconds `abort` waits between printing and MPI_Abort
SPIN = 2e-3  # seconds `wait` polls without sleeping (MPI moves data only while polled) ...
SPIN_RATE = 1e9  # ... plus the time the request's bytes take at this many bytes a second
NAP = 1e-3  # its longest sleep after that


def wait(req, timeout: float | None = None, what: str = "a collective",
         nbytes: int = 0, group: _Group | None = None) -> None:
    """Wait for MPI request `req` (see `poll`); the caller must be its only tester."""
    g = group or _group()

    def test():
        with g.call:
            return req.Test()
    poll(test, timeout, what, nbytes, g)


def poll(test, timeout: float | None = None, what: str = "a collective",
         nbytes: int = 0, group: _Group | None = None) -> None:
    """Poll `test()` (an MPI request's Test, moving `nbytes`) until true: without sleeping
    for `SPIN` seconds plus the time `nbytes` take at `SPIN_RATE` (each rank's polling
    moves the data, so a sleeping rank slows the others down: 8 MiB took 6.8 ms instead of
    1.3 with sleeps after 2 ms), then with sleeps growing to `NAP`, so a rank waiting for
    a slower one does not hold a core. Ctrl+C interrupts it. `timeout` (seconds):
    TimeoutError after it."""
    g = group or _group()
    t0 = time.perf_counter()
    spin = SPIN + nbytes / SPIN_RATE
    nap = 0.0
    while True:
        if test():
            return
        now = time.perf_counter()
        if timeout is not None and now - t0 > timeout:
            raise TimeoutError(f"rank {g.rank}: {what} did not complete within {timeout} s "
                               "(another rank failed or never joined?)")
        if now - t0 > spin:  # (no sleep(0) while spinning: it costs ~50 us a call here)
            nap = min(NAP, nap * 2 or 20e-6)
            time.sleep(nap)


class Work:
    """A collective started with `async_op=True` (PyTorch's `Work`): `wait()` until it is
    done (the result then is in the array you passed), `is_completed()` to ask. Both may be
    called from several threads at once (one lock per Work: MPI must not test one request
    from two threads)."""

    def __init__(self, req, finish=None, what: str = "a collective", nbytes: int = 0,
                 group: _Group | None = None):
        self._req, self._finish, self._what, self._nbytes = req, finish, what, nbytes
        self._group = group or _group()
        self._lock = threading.Lock()  # guards _req's tests, _done and the finish
        self._done = False

    def is_completed(self) -> bool:
        """Whether the collective finished (and `wait` would return at once)."""
        return self._test()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until done (TimeoutError after `timeout` seconds); returns True."""
        if not self._done:
            poll(self._test, timeout, self._what, self._nbytes, self._group)
        return True

    def _test(self) -> bool:
        with self._lock:
            if not self._done:
                with self._group.call:
                    done = self._req.Test()
                if done:
                    self._done = True
                    if self._finish is not None:
                        self._finish()
            return self._done


# ---- collectives -----------------------------------------------------------------------
def _as_buffer(t, what: str, kinds: str = "biuf", written: bool = True):
    """(array MPI writes, finish()) for an ndarray or Tensor `t`, written in place: a
    contiguous array is used directly, another goes through a contiguous copy that
    `finish` writes back. `finish` also bumps a Tensor's version counter. `kinds`: the
    dtype kinds allowed; `written`: False where this rank only sends (read-only is fine)."""
    tensor = t if isinstance(t, Tensor) else None
    arr = t._data if tensor is not None else t
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"{what}: expected an ndarray or Tensor, got {type(t).__name__}")
    if arr.dtype.kind not in kinds:
        raise TypeError(f"{what}: dtype {arr.dtype} is not supported (numbers only"
                        f"{'' if 'b' in kinds else ', not bool'})")
    if written and not arr.flags.writeable:
        raise ValueError(f"{what}: the array is read-only; the collective writes into it")
    buf = arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)

    def finish():
        if buf is not arr:
            np.copyto(arr, buf)
        if tensor is not None:
            bump(tensor)
    return buf, finish


def _mpi_op(g: _Group, op):
    if isinstance(op, str):
        try:
            op = ReduceOp(op.lower())
        except ValueError:
            op = None
    if not isinstance(op, ReduceOp):
        raise ValueError(f"all_reduce: op must be a ReduceOp or one of "
                         f"{[o.value for o in ReduceOp]}")
    M = g.MPI
    return op, {ReduceOp.SUM: M.SUM, ReduceOp.AVG: M.SUM, ReduceOp.PRODUCT: M.PROD,
                ReduceOp.MIN: M.MIN, ReduceOp.MAX: M.MAX}[op]


def all_reduce(tensor, op: ReduceOp | str = ReduceOp.SUM, group: _Group | None = None,
               async_op: bool = False):
    """Combine `tensor` (ndarray or Tensor) across ranks with `op`, in place on every rank.
    AVG divides the sum by the world size (integer arrays: floor division). Returns None,
    or a `Work` with `async_op=True`. `group`: a `new_group()` (default: the whole group)."""
    g = group or _group()
    op, mpi_op = _mpi_op(g, op)
    buf, finish = _as_buffer(tensor, "all_reduce", kinds="iuf")  # MPI's SUM & co: no bool

    def done():
        if op is ReduceOp.AVG:
            if buf.dtype.kind == "f":
                np.divide(buf, g.size, out=buf)
            else:
                np.floor_divide(buf, g.size, out=buf)
        finish()
    with g.call:
        req = g.comm.Iallreduce(g.MPI.IN_PLACE, buf, op=mpi_op)
    return _finish(Work(req, done, "all_reduce", buf.nbytes, g), async_op)


def broadcast(tensor, src: int = 0, group: _Group | None = None, async_op: bool = False):
    """Overwrite `tensor` (ndarray or Tensor) on every rank with rank `src`'s, in place.
    Every rank must pass the same shape and dtype. Returns None, or a `Work`."""
    g = group or _group()
    _check_rank(g, src, "broadcast: src")
    buf, finish = _as_buffer(tensor, "broadcast", written=g.rank != src)
    if g.rank == src:  # nothing changes here: no write-back, no version bump
        finish = None
    with g.call:
        req = g.comm.Ibcast(buf, root=src)
    return _finish(Work(req, finish, "broadcast", buf.nbytes, g), async_op)


def all_gather(tensor_list: list, tensor, group: _Group | None = None,
               async_op: bool = False):
    """Fill `tensor_list` (one ndarray or Tensor per rank, each of `tensor`'s shape and
    dtype) with every rank's `tensor`, in rank order (PyTorch's signature). Returns None, or
    a `Work`."""
    g = group or _group()
    src = tensor._data if isinstance(tensor, Tensor) else tensor
    if not isinstance(src, np.ndarray):
        raise TypeError(f"all_gather: expected an ndarray or Tensor, got {type(tensor).__name__}")
    if not isinstance(tensor_list, list) or len(tensor_list) != g.size:
        raise ValueError(f"all_gather: tensor_list must be a list of world_size() = {g.size} "
                         "arrays to fill")
    outs = [_as_buffer(t, "all_gather: tensor_list entry") for t in tensor_list]
    for t in tensor_list:
        a = t._data if isinstance(t, Tensor) else t
        if a.shape != src.shape or a.dtype != src.dtype:
            raise ValueError(f"all_gather: every tensor_list entry must have shape {src.shape} "
                             f"and dtype {src.dtype}, got {a.shape} {a.dtype}")
    whole = np.empty((g.size,) + src.shape, src.dtype)

    def done():
        for (buf, finish), part in zip(outs, whole):
            np.copyto(buf, part)
            finish()
    with g.call:
        req = g.comm.Iallgather(np.ascontiguousarray(src), whole)
    return _finish(Work(req, done, "all_gather", whole.nbytes, g), async_op)


def barrier(group: _Group | None = None, async_op: bool = False):
    """Wait until every rank reached its `barrier()` (returns None, or a `Work`)."""
    g = group or _group()
    with g.call:
        req = g.comm.Ibarrier()
    return _finish(Work(req, None, "barrier", 0, g), async_op)


def _finish(work: Work, async_op: bool):
    if async_op:
        return work
    work.wait()
    return None


def _check_rank(g: _Group, r, what: str) -> None:
    if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or not 0 <= r < g.size:
        raise ValueError(f"{what} must be a rank in 0..{g.size - 1}, got {r!r}")


# ---- ending the job ----------------------------------------------------------------------
def abort(message: str, errorcode: int = 1) -> None:
    """Print `message` (prefixed with the rank) to stderr and end every process of the
    job (`MPI_Abort`): what to do when this rank cannot go on and the others would wait
    for it forever. Does not return (outside a group: raises SystemExit)."""
    g = _state
    who = "" if g is None else f"rank {g.rank} of {g.size}: "
    sys.stderr.write(f"parallel_autograd.distributed: {who}{message}\n"
                     "parallel_autograd.distributed: aborting the job (MPI_Abort) so that "
                     "no rank waits forever\n")
    sys.stderr.flush()
    if g is None:
        raise SystemExit(errorcode)
    # the launcher forwards our stderr asynchronously and stops reading when it kills the job:
    # give it time (the message was lost once in a CI run under load without this pause)
    time.sleep(ABORT_GRACE)
    g.comm.Abort(errorcode)
    os._exit(errorcode)  # not reached with a working MPI


def _install_excepthooks() -> None:
    prev_sys, prev_thread = sys.excepthook, threading.excepthook

    def sys_hook(tp, value, tb):
        _abort_uncaught(tp, value, tb, "the main thread")
        prev_sys(tp, value, tb)

    def thread_hook(args):
        if args.exc_type is not SystemExit:
            where = f"thread {args.thread.name if args.thread else '?'}"
            _abort_uncaught(args.exc_type, args.exc_value, args.exc_traceback, where)
        prev_thread(args)
    sys.excepthook = sys_hook
    threading.excepthook = thread_hook


def _abort_uncaught(tp, value, tb, where: str) -> None:
    if _state is None:
        return
    text = "".join(traceback.format_exception(tp, value, tb))
    abort(f"uncaught exception in {where}:\n{text.rstrip()}")


def _after_fork_in_child() -> None:
    # Another thread may have been in init()/finalize() at the fork: its lock would stay
    # held forever here. (MPI itself does not survive a fork: docs/distributed.md.)
    global _init_lock
    _init_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
