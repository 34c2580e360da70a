"""Graph nodes: what an op leaves behind for the backward pass.

A `Node` is made by one op and has exactly one output (its tensor). It knows,
per input, the next node to send a gradient to (None when that input needs no
gradient), the input's shape and dtype (so un-broadcasting and dtype casts
happen here, in one place), the rule that turns the output gradient into input
gradients, and the values the rule needs (`saved`).

Rules are pure: `vjp(g, *saved, **kwargs) -> ndarray` per input, or for
user Functions one joint rule returning a tuple. Accumulation is the engine's job.

`seq` is a global creation counter: every node's inputs were made before it, so
decreasing `seq` is a valid backward order, and (consumer seq, input slot) is the
canonical order in which contributions to one gradient are summed.
"""
from __future__ import annotations

import itertools
import sys
import weakref

import numpy as np

from . import locks, version
from .version import EPOCH

_seq_counter = itertools.count()


def _next_seq_locked() -> int:
    with locks.seq:
        return next(_seq_counter)


# With the GIL, `next()` on an itertools.count is one C call, atomic: no lock (and none a
# fork child could inherit held). Without it (free-threaded build), a lock. A GIL that is
# on at import stays on.
_next_seq = _seq_counter.__next__ if getattr(sys, "_is_gil_enabled", lambda: True)() \
    else _next_seq_locked


def next_seq() -> int:
    """The next node creation number (thread safe)."""
    return _next_seq()


class Node:
    """One recorded op. Immutable after creation except `saved` (freed by backward)."""

    __slots__ = (
        "name", "vjps", "joint", "saved", "kwargs", "next_nodes", "input_meta",
        "seq", "pre_hooks", "retained", "released", "cost", "threaded", "variable", "size",
        "versions", "epoch", "op", "__weakref__",
    )

    def __init__(self, name, next_nodes, input_meta, saved=(), vjps=None, joint=None,
                 kwargs=None, cost=0, threaded=False, size=0, versions=None, op=None):
        self.name = name
        self.next_nodes = next_nodes        # tuple[Node | None], one per input
        self.input_meta = input_meta        # tuple[(shape, dtype) | None], one per input
        self.saved = saved
        self.vjps = vjps                    # tuple[callable | None] or None
        self.joint = joint                  # callable(g, *saved) -> tuple, or None
        self.kwargs = kwargs or None        # dict of keyword arguments for the rules
        self.seq = _next_seq()
        self.pre_hooks = None               # list of fn(grad) -> grad | None
        self.retained = None                # weakref to the output tensor (retain_grad)
        self.released = False
        self.cost = cost                    # estimated backward work, ~ns on one core
        self.threaded = threaded            # the rule's kernels are multithreaded (BLAS)
        self.variable = None                # set only on AccumulateGrad
        self.size = size                    # elements of the gradient it receives (output)
        self.versions = versions            # version counters of its tensors (version.py)
        self.epoch = EPOCH[0]               # the in-place write epoch when it was made
        self.op = op                        # the registry entry (primitive.OpDef): formulas

    def __repr__(self):
        return f"<{self.name} node seq={self.seq}>"

    def input_grads(self, g, mask=None):
        """Run the rule: the gradient of each input (None where not needed).

        `mask` (one bool per input) skips inputs the caller does not need (pruning).

        Raises RuntimeError if the graph was freed. Shapes and dtypes are checked
        and fixed here: gradients are summed back over broadcast dimensions and cast
        to the input's dtype.
        """
        saved = self.saved
        if self.released:
            raise RuntimeError(freed_graph_message(self))
        if EPOCH[0] > self.epoch and self.versions is not None:  # a write since: look
            version.check(self)
        if self.joint is not None:
            kwargs = self.kwargs
            grads = self.joint(g, *saved) if kwargs is None else self.joint(g, *saved, **kwargs)
            if not isinstance(grads, tuple):
                grads = (grads,)
            if len(grads) != len(self.next_nodes):
                raise RuntimeError(
                    f"{self.name}.backward returned {len(grads)} gradients, "
                    f"expected {len(self.next_nodes)} (one per input)")
        else:
            kwargs = self.kwargs  # None when empty: no shared {} to touch (free-threading)
            if kwargs is None:
                if mask is None:
                    grads = [None if v is None else v(g, *saved) for v in self.vjps]
                else:
                    grads = [None if v is None or not m else v(g, *saved)
                             for v, m in zip(self.vjps, mask)]
            elif mask is None:
                grads = [None if v is None else v(g, *saved, **kwargs) for v in self.vjps]
            else:
                grads = [None if v is None or not m else v(g, *saved, **kwargs)
                         for v, m in zip(self.vjps, mask)]
        out = []
        for gi, meta, nxt in zip(grads, self.input_meta, self.next_nodes):
            if gi is None or nxt is None:
                out.append(None)
                continue
            if mask is not None and not mask[len(out)]:
                out.append(None)
                continue
            shape, dtype = meta
            if type(gi) is not np.ndarray:
                gi = np.asarray(gi)
            if gi.shape != shape:
                gi = unbroadcast(gi, shape, self.name)
            if gi.dtype != dtype:
                gi = gi.astype(dtype)
            if type(gi) is not np.ndarray:  # a full reduction gives a numpy scalar
                gi = np.asarray(gi)
            out.append(gi)
        return out


class AccumulateGrad(Node):
    """The sink for a leaf tensor: its gradient is committed to `leaf.grad`."""

    __slots__ = ()

    def __init__(self, leaf):
        # Node.__init__'s fields set here, not by a second call: a leaf's accumulator is
        # made again on the forward path each time the graph that held it is freed
        self.name = "AccumulateGrad"
        self.next_nodes = self.input_meta = self.saved = ()
        self.vjps = self.joint = self.kwargs = self.retained = self.versions = self.op = None
        self.seq = _next_seq()
        self.released = self.threaded = False
        self.cost = 0
        self.epoch = EPOCH[0]
        self.variable = leaf          # strong ref; the leaf holds us weakly (no cycle)
        self.size = leaf._data.size
        self.pre_hooks = leaf._hooks  # shared list: hooks registered later still apply


def accumulator_for(leaf) -> AccumulateGrad:
    """The leaf's AccumulateGrad node, made on first use and shared while alive."""
    ref = leaf._accumulator
    acc = ref() if ref is not None else None
    if acc is None:
        with locks.once:
            ref = leaf._accumulator
            acc = ref() if ref is not None else None
            if acc is None:
                acc = AccumulateGrad(leaf)
                leaf._accumulator = weakref.ref(acc)
    return acc


def unbroadcast(g: np.ndarray, shape: tuple, opname: str = "op") -> np.ndarray:
    """Sum `g` back to `shape`, undoing numpy broadcasting."""
    ndiff = g.ndim - len(shape)
    if ndiff < 0:
        raise ValueError(
            f"{opname}: gradient of shape {g.shape} cannot be reduced to input shape {shape}")
    if ndiff:
        g = g.sum(axis=tuple(range(ndiff)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    if g.shape != shape:
        raise ValueError(
            f"{opname}: gradient of shape {g.shape} does not match input shape {shape}")
    return g


def freed_graph_message(node) -> str:
    return (f"Trying to backward through the graph a second time: the saved values of "
            f"{node.name} were already freed. Specify retain_graph=True on the first "
            f"backward call if you need to backward through the graph again.")
