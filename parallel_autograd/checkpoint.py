"""Activation checkpointing: `checkpoint(function, *args)` (PyTorch's
`torch.utils.checkpoint.checkpoint`) trades compute for memory.

The forward runs `function` and keeps none of its intermediate values: the graph gets
one node, `checkpoint`, whose only saved values are the arrays of the Tensor arguments
(and the states its random draws started from). Its rule runs `function` again with grad
mode on, then differentiates that recomputed graph with a nested `grad` (on the rule's
thread: any engine, any worker), so a segment's activations live only while its own
backward runs. A model whose every layer is checkpointed holds one activation per layer
between forward and backward instead of all of them.

How gradients reach tensors the function uses without taking them as arguments (a
module's parameters, captured by closure): the default (`use_reentrant=False`) runs the
forward with grad mode on, walks the graph it made (iteratively) to the tensors it came
from, and then drops that graph (so only one segment's activations are alive at once, as
in the recomputation). The checkpoint node gets one edge per such tensor, next to the
arguments', so their gradients flow through the outer engine like any op's: staged, all
or nothing, summed in the canonical order, not written by `grad()`.

The recomputation is a private graph. Before differentiating it, its edges to anything
made outside it are pointed at per-input stand-ins (fresh leaves; in a create_graph pass,
identity nodes routed to the real inputs), so the nested pass runs only recomputed nodes:
it never runs the outer graph's nodes or the hooks of the real inputs, which run once,
in the outer pass, on the complete gradient. An edge to a tensor the checkpoint node has
no edge for (`use_reentrant=True` with a captured parameter, or a function whose rerun
builds a different graph) is an error naming it, never a gradient silently dropped.

Random draws (dropout, `pa.randn`, `nn.init`, `bernoulli`...) replay exactly: the
forward notes, for each draw it makes, the state of the generator just before it, taken
atomically with the draw under the generator's lock (`random.record_draws`); the
recomputation replays those draws in order from the noted states (`random.replay_draws`).
Other threads drawing from the same generator meanwhile change nothing, the recomputation
may run on any thread, and every generator is left as the forward left it. The cost is
~0.5 KB per draw kept with the node (dropout draws once per 32,768 elements: 0.2% of the
float64 activation it masks, ~0.07% of what a Linear + gelu + dropout segment does not
keep), ~12 us per draw in the forward and ~20 us in the recomputation.
"""
from __future__ import annotations

import contextlib
import weakref
from typing import Any, Callable, Iterable

import numpy as np

from . import random as _random
from .engine.sequential import grad as _grad
from .grad_mode import enable_grad, is_grad_enabled, no_grad
from .node import accumulator_for, next_seq
from .ops.forms import graph_input
from .primitive import primitive, record
from .tensor import Tensor

__all__ = ["checkpoint", "checkpoint_sequential"]


def checkpoint(function: Callable[..., Tensor], *args: Any, use_reentrant: bool = False,
               preserve_rng_state: bool = True, **kwargs: Any) -> Tensor:
    """`function(*args, **kwargs)` without keeping its intermediate values for backward:
    backward recomputes them (PyTorch's `torch.utils.checkpoint.checkpoint`).

    `function` must return one Tensor and compute the same graph when it is run again
    (same ops on the same inputs; random draws are replayed, see below). Gradients flow
    to Tensor arguments that require grad and, by default, to tensors the function uses
    without taking them as arguments (a module's parameters).

    Args:
        function: the segment to checkpoint; returns one Tensor.
        *args, **kwargs: its arguments. The arrays of Tensor positional arguments are
            saved (not copied); other values are kept as given.
        use_reentrant: False (default): the forward runs with grad mode on to find the
            tensors the output depends on (captured ones included), then drops that
            graph. True: the forward runs under `no_grad` and gradients flow only to
            the Tensor positional arguments; a captured tensor that requires grad makes
            backward raise RuntimeError naming it (pass it as an argument).
        preserve_rng_state: True (default): the recomputation replays exactly the
            random draws the forward made through the library (dropout, `pa.randn`,
            `nn.init`, `bernoulli`, from the default generator or a given one), even if
            other threads drew from the same generator meanwhile, and advances no
            generator. The node keeps ~0.5 KB per draw (PCG64's state; dropout draws
            once per 32,768 elements). False: nothing is kept; the recomputation draws
            anew (other numbers than the forward's, as in PyTorch), advancing the
            generators again.

    Returns the output (bitwise the one `function` gives). With grad mode off this is
    just `function(*args, **kwargs)`. Works with both engines, `create_graph=True`
    (the recomputation is differentiable again), `retain_graph=True` and nesting.
    Raises TypeError if `function` is not callable or does not return a Tensor.

    Thread safety: like any op; the recomputation runs on the thread that runs the
    node's rule (an engine worker), in that thread's context. The random draws replayed
    are the segment's own, whatever other threads drew meanwhile (PyTorch replays the
    shared generator's state, and so another thread's draws can shift its masks).
    """
    if not callable(function):
        raise TypeError(f"checkpoint: function must be callable, got {type(function).__name__}")
    if not is_grad_enabled():
        return function(*args, **kwargs)
    draws = [] if preserve_rng_state else None
    out, inputs, cost, threaded = _forward(function, args, kwargs, use_reentrant, draws)
    arr, out = out._data, None  # drops the forward's graph (use_reentrant=False)
    saved = _Saved(function, args, kwargs, draws, use_reentrant)
    res = record("checkpoint", arr, inputs, saved=(saved,), joint=_rule, cost=cost,
                 threaded=threaded)
    if res.grad_fn is not None:
        saved.node = weakref.ref(res.grad_fn)
        saved.edges = res.grad_fn.next_nodes
    return res


def _forward(function, args, kwargs, use_reentrant: bool, draws: list | None) -> tuple:
    """Run the segment once, noting its random draws into `draws` (unless None):
    (output, the node's inputs, its cost, threaded). Reentrant: under no_grad, the inputs
    are the positional arguments; otherwise recorded, the inputs found from its graph."""
    noting = _random.record_draws(draws) if draws is not None else contextlib.nullcontext()
    if use_reentrant:
        with no_grad(), noting:
            return _output(function(*args, **kwargs)), list(args), None, False
    start = next_seq()
    with noting:
        out = _output(function(*args, **kwargs))
    return (out, *_edges(out, args, start))


def checkpoint_sequential(functions: Iterable[Callable[[Tensor], Tensor]], segments: int,
                          input: Tensor, use_reentrant: bool = False,
                          preserve_rng_state: bool = True) -> Tensor:
    """Run `functions` (a `nn.Sequential` or a list of callables) in order on `input`,
    split into `segments` runs of consecutive functions, each but the last checkpointed
    (PyTorch's `torch.utils.checkpoint.checkpoint_sequential`; the last segment's values
    are needed at once by backward, so it is run normally).

    Raises ValueError unless `1 <= segments <= len(functions)`.

    Thread safety: as `checkpoint`.
    """
    functions = list(functions)
    if isinstance(segments, bool) or not isinstance(segments, int):
        raise TypeError(f"checkpoint_sequential: segments must be an int, "
                        f"got {type(segments).__name__}")
    if not 1 <= segments <= max(len(functions), 1):
        raise ValueError(f"checkpoint_sequential: segments must be between 1 and the number "
                         f"of functions ({len(functions)}), got {segments}")
    size = len(functions) // segments
    end = 0
    for start in range(0, size * (segments - 1), size):
        end = start + size
        input = checkpoint(_Run(functions[start:end]), input, use_reentrant=use_reentrant,
                           preserve_rng_state=preserve_rng_state)
    return _Run(functions[end:])(input)


class _Run:
    """Consecutive functions applied in order (one checkpointed segment)."""

    __slots__ = ("functions",)

    def __init__(self, functions):
        self.functions = functions

    def __call__(self, x):
        for f in self.functions:
            x = f(x)
        return x


class _Saved:
    """A checkpoint node's one saved value: what the recomputation needs."""

    __slots__ = ("function", "values", "is_tensor", "kwargs", "draws", "reentrant", "node",
                 "edges")

    def __init__(self, function, args, kwargs, draws, reentrant):
        self.function = function
        self.is_tensor = tuple(isinstance(a, Tensor) for a in args)
        self.values = tuple(a._data if t else a for a, t in zip(args, self.is_tensor))
        self.kwargs = kwargs
        self.draws = draws          # the forward's random draws (`record_draws`), or None
        self.reentrant = reentrant
        self.node = None            # weakref to the checkpoint node
        self.edges = None           # its next nodes as recorded (see `_rerun`)


def _output(out) -> Tensor:
    if isinstance(out, Tensor):
        return out
    if isinstance(out, (tuple, list)):
        raise TypeError(f"checkpoint: function returned a {type(out).__name__}; "
                        "pa.checkpoint supports exactly one Tensor output (checkpoint each "
                        "output's computation separately, or concatenate them)")
    raise TypeError(f"checkpoint: function must return a Tensor, got {type(out).__name__}")


def _inside(node, start: int) -> bool:
    """Made by the run that began at seq `start` (not a leaf's accumulator)."""
    return node.variable is None and node.seq >= start


def _root(t: Tensor):
    if t.grad_fn is not None:
        return t.grad_fn
    return accumulator_for(t) if t.requires_grad else None


def _node_of(t: Tensor):
    """The node a Tensor's gradient goes to, if it exists."""
    if t.grad_fn is not None:
        return t.grad_fn
    ref = t._accumulator
    return ref() if ref is not None else None


def _edges(out: Tensor, args, start: int):
    """The inputs the checkpoint node records for a forward run with grad on: the Tensor
    arguments the output depends on, then each other tensor it depends on (a captured
    leaf itself; a stand-in routed to a captured non-leaf's node). Also the run's cost
    (recompute + backward, for the cost model) and whether it used threaded kernels."""
    root = _root(out)
    boundary, cost, threaded = {}, 0, False
    if root is not None and not _inside(root, start):
        boundary[root] = (out.shape, out.dtype)
    elif root is not None:
        seen, stack = {root}, [root]
        while stack:
            node = stack.pop()
            cost += node.cost
            threaded = threaded or node.threaded
            for nxt, meta in zip(node.next_nodes, node.input_meta):
                if nxt is None:
                    continue
                if _inside(nxt, start):
                    if nxt not in seen:
                        seen.add(nxt)
                        stack.append(nxt)
                elif nxt not in boundary:
                    boundary[nxt] = meta
    inputs, used = [], set()
    for a in args:
        if isinstance(a, Tensor) and a.requires_grad:
            node = _node_of(a)
            if node in boundary:
                used.add(node)
                inputs.append(a)
                continue
            a = Tensor._wrap(a._data, None, a._vc)  # no edge: the output does not use it
        inputs.append(a)
    for node, (shape, dtype) in boundary.items():
        if node in used:
            continue
        inputs.append(node.variable if node.variable is not None
                      else Tensor._wrap(_placeholder(shape, dtype), node))
    return inputs, 2 * cost if cost else None, threaded


def _placeholder(shape, dtype) -> np.ndarray:
    """A read-only array of `shape` that allocates nothing (its values are not used)."""
    return np.broadcast_to(np.zeros((), dtype), shape)


_alias = primitive("checkpoint_input", lambda x: x, lambda g, ans, x: g)
_alias.vjps[0].graph = lambda g, ans, x: g


def _rule(g, saved: _Saved):
    """The checkpoint node's rule (create_graph=False): recompute, then differentiate."""
    return _rerun(g, saved, saved.node(), False)


def _rule_graph(g: Tensor, node) -> tuple:
    """The rule's differentiable form (create_graph=True)."""
    return _rerun(g, node.saved[0], node, True)


_rule.graph = _rule_graph


def _rerun(g, saved: _Saved, node, graph: bool) -> tuple:
    """Run the function again with grad on, on stand-ins for the node's inputs, point the
    recomputed graph's outside edges at the stand-ins, and return the gradient of the
    recomputed output (seeded with `g`) for each input of the node."""
    nexts, nargs = saved.edges, len(saved.values)
    # An input's node as recorded -> its first slot. Not node.next_nodes: when this
    # checkpoint is inside another's recomputation, that one's `_redirect` has pointed
    # them at its stand-ins (where the gradients must go), but this function's rerun
    # still reaches the inputs' own nodes.
    slot = {}
    proxies = [None] * len(nexts)
    for i, nxt in enumerate(nexts):
        if nxt is None:
            continue
        slot.setdefault(nxt, i)
        arr = saved.values[i] if i < nargs else _placeholder(*node.input_meta[i])
        if graph:  # an identity node routed to the real input: the gradient's graph
            proxies[i] = _alias(graph_input(node, i, arr))  # reaches the real inputs
        else:
            proxies[i] = Tensor._wrap(arr)
            proxies[i].requires_grad = True
    # The stand-ins' nodes, made before the recomputation: a node's inputs must be
    # older than it (backward runs in decreasing creation order).
    pnodes = [None if p is None else p.grad_fn if graph else accumulator_for(p)
              for p in proxies]
    stand_in = {n: i for i, n in enumerate(pnodes) if n is not None}  # node -> its slot
    call = [proxies[i] if proxies[i] is not None
            else Tensor._wrap(v) if saved.is_tensor[i] else v
            for i, v in enumerate(saved.values)]
    with _random.replay_draws(saved.draws), enable_grad():
        start = next_seq()
        out = saved.function(*call, **saved.kwargs)
    call = None
    if not isinstance(out, Tensor) or out.shape != g.shape or out.dtype != g.dtype:
        what = (f"shape {out.shape}, dtype {out.dtype}" if isinstance(out, Tensor)
                else type(out).__name__)
        raise RuntimeError(f"checkpoint: the recomputation returned {what}, the forward "
                           f"shape {g.shape}, dtype {g.dtype}: the function must compute "
                           "the same thing when run again")
    grads = [None] * len(nexts)
    root = _root(out)
    if root is None:
        return tuple(grads)
    if root in stand_in or not _inside(root, start):  # the output is an input itself
        i = stand_in.get(root, slot.get(root))
        if i is None:
            raise RuntimeError(_outside_message(saved, root, out.shape))
        grads[i] = g
        return tuple(grads)
    _redirect(root, start, stand_in, slot, pnodes, saved)
    targets = [p for p in proxies if p is not None]
    got = _grad(out, targets, grad_outputs=g, allow_unused=True, create_graph=graph)
    if not graph:  # grad() wraps its arrays in Tensors; the outer engine takes arrays
        got = [None if t is None else t._data for t in got]
    it = iter(got)
    return tuple(None if p is None else next(it) for p in proxies)


def _redirect(root, start: int, stand_in: dict, slot: dict, proxy_nodes: list,
              saved: _Saved) -> None:
    """Point every edge of the recomputed graph that leaves it at the stand-in of the
    checkpoint input it belongs to (iterative walk); raise for an edge to a tensor the
    checkpoint node has no input for."""
    seen, stack = {root}, [root]
    while stack:
        node = stack.pop()
        nexts = node.next_nodes
        new = None
        for j, nxt in enumerate(nexts):
            if nxt is None or nxt in stand_in:
                continue
            if _inside(nxt, start):
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
                continue
            i = slot.get(nxt)
            if i is None:
                raise RuntimeError(_outside_message(saved, nxt, node.input_meta[j][0]))
            if new is None:
                new = list(nexts)
            new[j] = proxy_nodes[i]
        if new is not None:
            node.next_nodes = tuple(new)


def _outside_message(saved: _Saved, node, shape) -> str:
    what = ("a leaf tensor" if node.variable is not None
            else f"a tensor made by {node.name} (node seq {node.seq})")
    if saved.reentrant:
        return (f"checkpoint(use_reentrant=True): the function uses {what} of shape "
                f"{tuple(shape)} that requires grad but is not one of its arguments, so its "
                f"gradient would be lost: pass it as an argument, or use "
                f"use_reentrant=False (the default), which supports captured tensors")
    return (f"checkpoint: the recomputation uses {what} of shape {tuple(shape)} that "
            f"requires grad, which the forward did not use: the function must compute "
            f"the same graph when run again")
