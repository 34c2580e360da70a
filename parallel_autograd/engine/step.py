"""The per-node step both engines share, and the final write-back.

`run_node(node, g, owned, sink)` handles a node whose gradient `g` is complete: it
runs the tensor hooks, stages leaf/retained gradients and records `grad()` captures
in the thread's `Sink` (nothing is written to `.grad` yet), then runs the node's rule
and frees its saved values. `commit` writes the staged gradients to `.grad` only after
the whole pass succeeded, so a failed call leaves every `.grad` exactly as it was.

Thread safety: a `Sink` belongs to one thread; `commit` takes each tensor's lock.
"""
from __future__ import annotations

import sys

import numpy as np

from .. import anomaly, locks, memory
from ..locks import InterruptsDeferred
from ..anomaly import add_note
from ..grad_mode import Recording, enable_grad, run_recording
from ..tensor import Tensor
from . import callbacks
from ..ops.forms import graph_grads
from .graph import hook_result



def run_hooks(node, g):
    """Apply the tensor hooks of `node`'s output in registration order. Each sees the
    gradient as a Tensor (PyTorch's); one it returns (a Tensor, or an array) replaces it."""
    graph = isinstance(g, Tensor)  # a create_graph pass: hooks see and return Tensors
    for hook in list(node.pre_hooks):
        try:
            r = hook(g if graph else Tensor._wrap(g))
        except BaseException as e:
            annotate(e, node, "a hook on the gradient of")
            raise
        if r is not None and graph:
            try:
                g = hook_result(node, g, r)
            except BaseException as e:
                annotate(e, node, "a hook on the gradient of")
                raise
        elif r is not None:
            if isinstance(r, Tensor):
                r = r._data
            r = np.asarray(r)
            if r.dtype.kind not in "biufc":  # e.g. a list of Nones: not a gradient
                e = TypeError(f"hook on the gradient of {node.name} returned a "
                              f"{type(r).__name__} of dtype {r.dtype}, not a numeric array")
                annotate(e, node, "a hook on the gradient of")
                raise e
            if r.shape != g.shape:
                e = ValueError(f"hook on the gradient of {node.name} returned shape "
                               f"{r.shape}, expected {g.shape}")
                annotate(e, node, "a hook on the gradient of")  # not "the backward of"
                raise e
            if r.dtype != g.dtype:
                r = r.astype(g.dtype)
            g = r
    return g


class Sink:
    """What one thread's per-node steps read from the plan and what they produce.

    Read: `runs`, `input_masks`, `retain_graph`, `accumulate`, `targets` (None when
    empty) copied from the plan, `rec`, the profiler's recorder (None: off), and
    `anomaly`: check gradients for NaN/inf (`detect_anomaly`, as the caller set it);
    `progress`: the pass's progress callbacks (engine/callbacks.py; empty: none). Each
    thread has its own copy: on free-threaded builds, objects many threads touch at
    once make every reference count update contend.
    Produced: `staged` [(tensor, grad, owned)] leaf and retained gradients to commit;
    `captured` {node: grad} for grad(). The parallel engine merges every thread's.
    """

    __slots__ = ("runs", "input_masks", "retain_graph", "accumulate", "targets", "rec",
                 "staged", "captured", "positions", "made", "anomaly", "progress")

    def __init__(self, plan, rec, calls=None):
        self.runs, self.input_masks = plan.runs, plan.input_masks
        self.retain_graph, self.accumulate = plan.retain_graph, plan.accumulate
        self.targets = plan.targets or None
        self.rec = rec
        self.staged = []
        self.captured = {}
        self.positions = plan.positions  # create_graph only (engine/graph.py), else None
        self.made = plan.made
        self.anomaly = anomaly.checking()
        self.progress = () if calls is None else calls.progress  # shared, grows


def complete_gradient(node, g, owned: bool, sink: Sink):
    """Handle a complete gradient `g` of `node`; returns the gradient the node's
    rule must run on (after the tensor hooks), or None if the rule must not run.

    `owned` says whether `g` is a buffer the engine allocated (safe to keep as .grad).
    """
    if node.pre_hooks:
        if sink.anomaly:  # blame a hook only for what it added
            anomaly.check_incoming(node, g)
        g = run_hooks(node, g)
        owned = False  # a hook saw (and may keep) g: it must not become .grad as is
        if sink.anomaly:
            anomaly.check_hooked(node, g)
    if node.retained is not None and sink.accumulate:
        t = node.retained()
        if t is not None:
            sink.staged.append((t, g, owned))
    if sink.targets is not None and node in sink.targets:
        sink.captured[node] = g
    if node.variable is not None:
        if sink.accumulate:
            t = node.variable
            if t._ready_hooks:
                g, owned = run_ready_hooks(t, g)
            sink.staged.append((t, g, owned))
        return None
    runs = sink.runs
    return g if runs is None or node in runs else None


class _TakenOver:
    """The `owned` of a staged gradient a grad-ready hook took over: `.grad` becomes it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ASSIGN"


ASSIGN = _TakenOver()


def run_ready_hooks(t: Tensor, g):
    """Call `t`'s grad-ready hooks (`Tensor.register_grad_ready_hook`) with the pass's final
    gradient `g` of leaf `t`; returns what to stage: `(g, False)` (a hook saw `g`: `.grad`
    adopts it only if nothing else holds it), or `(value, ASSIGN)` when a hook returned the
    value `.grad` is to become (it took over the accumulation, e.g.
    DistributedDataParallel's averaged bucket slot)."""
    taken = None
    for fn in list(t._ready_hooks):
        r = fn(t, g)
        if r is None:
            continue
        if taken is not None:
            raise RuntimeError(f"two grad-ready hooks of a tensor of shape {t.shape} returned "
                               "a value for .grad: at most one may take over its gradient")
        if isinstance(g, Tensor):
            raise RuntimeError("a grad-ready hook returned a value for .grad in a "
                               "create_graph pass: only plain backward passes can be taken over")
        if not isinstance(r, np.ndarray) or r.shape != t.shape or r.dtype != t.dtype:
            what = (f"shape {r.shape}, dtype {r.dtype}" if isinstance(r, np.ndarray)
                    else type(r).__name__)
            raise TypeError(f"a grad-ready hook of a tensor of shape {t.shape} and dtype "
                            f"{t.dtype} returned {what}: expected an ndarray of its shape "
                            "and dtype")
        taken = r
    # a hook saw (and may keep) g: it must not become .grad as is (then be added into)
    return (g, False) if taken is None else (taken, ASSIGN)


@anomaly.backward_step
def run_node(node, g, owned: bool, sink: Sink, recording: bool = False):
    """Complete `node`'s gradient (`complete_gradient`) and run its rule: the input
    gradients, or None if the rule must not run. Frees the saved values unless
    `retain_graph` and times the rule when profiling. In a create_graph pass the whole
    step runs again under the node's `Recording` (`recording=True`: engine/graph.py)
    with the rule's differentiable form. With `sink.anomaly` (detect_anomaly), raises at
    NaN/inf in `g` or in what the rule returned (anomaly.check_step; `anomaly.note`
    reads this frame's `node`)."""
    if sink.positions is not None and not recording:
        return run_node_graph(node, g, sink)  # (which comes back here, recording)
    if sink.progress:  # e.g. DistributedDataParallel's MPI requests (engine/callbacks.py)
        callbacks.poke(sink.progress)
    gh = complete_gradient(node, g, owned, sink)
    if gh is None:
        if sink.anomaly:
            anomaly.check_step(node, g, None)
        return None
    rec = sink.rec
    t0 = rec.now() if rec is not None else 0.0
    masks = sink.input_masks
    mask = None if masks is None else masks[node]
    grads = graph_grads(node, gh, mask) if recording else node.input_grads(gh, mask)
    if not sink.retain_graph:
        node.saved = None
        node.released = True
    if rec is not None:
        rec.add(node.name, t0)
    if sink.anomaly:
        anomaly.check_step(node, g, grads)
    return grads


def run_node_graph(node, g, sink):
    """`step.run_node` for create_graph: the whole step (hooks, staging, the rule's
    differentiable form) under a Recording tagged with the node's position; returns the
    input gradients (Tensors) or None."""
    rec = Recording((2 * sink.positions[node] + 1, 0), sink.made)
    return run_recording(rec, run_node, node, g, False, sink, True)


def commit(staged) -> None:
    """Add staged gradients into `.grad` (leaf accumulation, under each tensor's lock).

    All or nothing: everything that can fail (checks, copies) happens before the first
    write, and a Ctrl+C that arrives during the writes is delivered when they are done
    (`InterruptsDeferred`), so `.grad` is never left half-updated.

    A first gradient is adopted without a copy when the engine allocated it or
    nothing else refers to it (PyTorch's AccumulateGrad steals the same way);
    otherwise `.grad` gets a copy, so it never aliases a user's or a saved array.

    Then the leaves' post-accumulate hooks run (`_run_post_accumulate_hooks`).
    """
    _check_existing_grads(staged)
    if staged and isinstance(staged[0][1], Tensor):
        _write_graph_grads(staged)
    else:
        _write_grads(staged)
    hooked = [t for t, _, _ in staged if t._post_hooks and t.grad_fn is None]
    if hooked:
        _run_post_accumulate_hooks(hooked)


def _write_grads(staged) -> None:
    # `.grad` is a Tensor around the engine's array: wrapped once, when first written
    # (`Tensor._wrap`, no copy); later passes add into its array in place, as PyTorch's
    # AccumulateGrad does, so the same Tensor object keeps the sum
    firsts = []  # what becomes .grad if it is still None when written
    wrap = Tensor._wrap
    for t, g, owned in staged:
        firsts.append(wrap(g) if owned is ASSIGN else None if t._grad is not None else
                      wrap(g if owned or _unshared(g) else g.copy()))
    with InterruptsDeferred():
        for (t, g, owned), first in zip(staged, firsts):
            with locks.grad_lock(t):
                cur = t._grad
                if cur is None or owned is ASSIGN:
                    t._grad = first if first is not None else wrap(g.copy())
                else:
                    cur._data += g


def _write_graph_grads(staged) -> None:
    """commit for a create_graph pass: `.grad` becomes the gradient Tensor (its graph
    kept, as in PyTorch), or the recorded sum of what it held and the gradient. The sums
    are computed first (a failure changes no `.grad`), then assigned."""
    # the sums in backward order, whatever order the threads staged the tensors in: the
    # nodes they record are numbered alike in both engines (bitwise higher orders)
    staged = sorted(staged, key=lambda entry: _backward_rank(entry[0]), reverse=True)
    new = []
    with enable_grad():
        for t, g, _ in staged:
            cur = t._grad
            new.append(g if cur is None else cur + g)
    with InterruptsDeferred():
        for (t, _, _), value in zip(staged, new):
            with locks.grad_lock(t):
                t._grad = value


def _run_post_accumulate_hooks(leaves) -> None:
    """Each leaf's post-accumulate hooks (`Tensor.register_post_accumulate_grad_hook`),
    leaves in backward order (accumulator seq descending: the same in both engines,
    whatever order the threads staged them in)."""
    for t in sorted(leaves, key=_backward_rank, reverse=True):
        for fn in list(t._post_hooks):
            fn(t)


def _backward_rank(t) -> int:
    """A staged tensor's place in backward order (larger: earlier): its node's seq (a
    leaf's accumulator, a retained tensor's grad_fn); the same in both engines."""
    if t.grad_fn is not None:
        return t.grad_fn.seq
    ref = t._accumulator
    acc = ref() if ref is not None else None
    return -1 if acc is None else acc.seq


def _check_existing_grads(staged) -> None:
    """Reject a `.grad` the user assigned that the gradient cannot be added into."""
    for t, g, owned in staged:
        cur = t._grad
        if cur is None or owned is ASSIGN:  # a grad-ready hook's value replaces .grad
            continue
        if not isinstance(cur, Tensor):  # set past the `grad` setter (e.g. a slot write)
            raise TypeError(f".grad of a tensor of shape {t.shape} is a "
                            f"{type(cur).__name__}, not a Tensor: cannot accumulate into it")
        if cur.grad_fn is not None and not isinstance(g, Tensor):
            raise TypeError(f".grad of a tensor of shape {t.shape} is a Tensor with a graph "
                            "(left by backward(create_graph=True)): set it to None first")
        cur = cur._data
        if not isinstance(cur, np.ndarray):
            raise TypeError(f".grad of a tensor of shape {t.shape} is a {type(cur).__name__}, "
                            "not an ndarray: cannot accumulate into it")
        if cur.shape != g.shape:
            raise ValueError(f".grad of a tensor of shape {t.shape} has shape {cur.shape}: "
                             f"cannot accumulate a gradient of shape {g.shape} into it")
        if not np.can_cast(g.dtype, cur.dtype, "same_kind"):
            raise TypeError(f".grad of a tensor of shape {t.shape} has dtype {cur.dtype}: "
                            f"cannot accumulate a {g.dtype} gradient into it")
        if not cur.flags.writeable and not isinstance(g, Tensor):
            raise ValueError(f".grad of a tensor of shape {t.shape} is read-only: "
                             "cannot accumulate into it in place")


def _unshared(g) -> bool:
    # References when no one else holds g: the staged tuple, commit's loop
    # variable, this parameter and getrefcount's argument (calibrated below). Its
    # memory is its own: it owns it, or it is the one view of a cached block, or the one
    # view of all of an array no one else holds (a rule's `result.reshape(shape)` with
    # the caching allocator off: adopted, not copied).
    if not g.flags.writeable or sys.getrefcount(g) > _SOLE_REFS:
        return False
    if g.base is None or memory.is_sole_view(g):  # (before `base` adds a reference)
        return True
    base = g.base
    return (type(base) is np.ndarray and base.base is None and g.nbytes == base.nbytes
            and sys.getrefcount(base) <= _SOLE_BASE_REFS)


def _calibrate() -> int:
    staged = [(None, np.empty(1), False)]
    for t, g, owned in staged:  # the same references as in commit's first loop
        return _count(g)


def _count(g):
    return sys.getrefcount(g)


_SOLE_REFS = _calibrate()


def _calibrate_base() -> int:
    g = np.empty(2).reshape(1, 2)
    base = g.base  # as in _unshared: the view's reference, this local, the argument
    return sys.getrefcount(base)


_SOLE_BASE_REFS = _calibrate_base()  # an array held by its one view only


def annotate(exc: BaseException, node, where: str = "the backward of") -> None:
    """Name the failing op on the exception (once), keeping its type."""
    if getattr(exc, "_pa_annotated", False):
        return
    msg = f"raised in {where} {node.name} (node seq {node.seq})"
    try:
        exc._pa_annotated = True
        exc.autograd_op = node.name
    except AttributeError:
        pass
    add_note(exc, msg)
    anomaly.add_trace_note(exc, node)  # where the op was created, if detect_anomaly noted it


def release_frames(tb) -> None:
    """Clear the locals of every frame of traceback `tb` that has finished (the frames a
    failed call ran, below the one handling its error), keeping the file, line and
    function each traceback entry shows. A frame still executing is left alone.

    Why: those locals hold the call's graph (nodes, saved arrays, gradients) and its
    GraphTask, whose `error` is the exception holding the traceback, so a failed parallel
    call would keep its whole graph alive until the cycle collector ran, or for good if
    anything kept the exception. Not thread-safe for frames another thread still runs
    (the engine calls it once every thread of the call has left it)."""
    while tb is not None:
        try:
            tb.tb_frame.clear()
        except RuntimeError:  # still executing
            pass
        tb = tb.tb_next
