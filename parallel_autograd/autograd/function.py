"""`pa.autograd.Function`: PyTorch's `torch.autograd.Function`, on Tensors.

    class MulK(pa.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, k=2.0):          # Tensors as passed, grad mode off
            ctx.save_for_backward(x, w)
            ctx.k = k
            return x * w * k
        @staticmethod
        def backward(ctx, grad):                # Tensors; one result per forward input
            x, w = ctx.saved_tensors
            return grad * w * ctx.k, grad * x * ctx.k, None

    y = MulK.apply(x, w)

As in PyTorch: `forward` gets the arguments as passed and runs with grad mode off; it
returns a Tensor, a tuple (Tensors and other values), or any other value (passed through).
`ctx` has `save_for_backward` / `saved_tensors` (a saved tensor written in place since
raises PyTorch's "modified by an inplace operation" error on access), `needs_input_grad`,
`mark_dirty`, `mark_non_differentiable`, `set_materialize_grads`, and takes any
attribute. `backward` gets one gradient per output (zeros, or None with
`set_materialize_grads(False)`, for an output that got none; None for a non-Tensor output)
and returns one Tensor or None per forward input (trailing extra Nones allowed). The newer
style, `forward(*args)` without ctx plus `setup_context(ctx, inputs, output)`, works too.
`backward` runs with grad mode off, or on in a `create_graph=True` pass: written with Tensor
ops, it is then differentiable again (its saved inputs and outputs are on the graph);
`once_differentiable` makes the result of a second differentiation raise, as PyTorch's.

The graph: one node `<Name>Backward` per call, with one input per forward input. A node
here has one output, so a call with several differentiable outputs gets, per output, a
node of the same name that sends the output's gradient, packed with the others' places
left at -0.0 (the exact additive identity) and a flag saying it arrived, to the node that
runs `backward` (so memory is O(outputs x total output size) in that case).

Thread safety: `apply` is as thread safe as `forward`; `backward` may run on an engine
worker thread (and may itself call backward/grad).
"""
from __future__ import annotations

import inspect
import weakref

import numpy as np

from .. import anomaly, version
from ..function import once_differentiable
from ..grad_mode import grad_mode, is_grad_enabled, no_grad
from ..node import Node, accumulator_for
from ..ops import shape as S
from ..ops.forms import cast
from ..ops.writes.record import adopt, view_refused
from ..ops.writes.setitem import view_of_other
from ..tensor import Tensor

__all__ = ["Function", "FunctionCtx", "once_differentiable"]


class FunctionCtx:
    """The `ctx` of a `Function` call: what `forward` (or `setup_context`) leaves for
    `backward`, as PyTorch's."""

    needs_input_grad: tuple = ()
    materialize_grads: bool = True
    to_save: tuple = ()
    dirty_tensors: tuple = ()
    non_differentiable: tuple = ()
    _saved = None  # [(kind, value, counter, stamp)] once forward is done

    def save_for_backward(self, *tensors) -> None:
        """Keep `tensors` (Tensors or None) for backward (`saved_tensors`)."""
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"save_for_backward can only save variables, but argument "
                                f"{i} is of type {type(t).__name__}")
        self.to_save = tensors

    def mark_dirty(self, *tensors) -> None:
        """The inputs `forward` modified in place (they must be returned as outputs)."""
        self.dirty_tensors = tensors

    def mark_non_differentiable(self, *tensors) -> None:
        """Outputs that take no gradient (requires_grad False; zeros in backward)."""
        self.non_differentiable = tensors

    def set_materialize_grads(self, value: bool) -> None:
        """False: backward gets None, not zeros, for an output that got no gradient."""
        self.materialize_grads = bool(value)

    @property
    def saved_tensors(self) -> tuple:
        """The tensors given to `save_for_backward`; raises RuntimeError if one was
        written in place after it was saved."""
        if self._saved is None:
            return ()
        return tuple(_unpack(self, i, entry) for i, entry in enumerate(self._saved))


def _unpack(ctx, i: int, entry):
    if entry is None:
        return None
    kind, value, vc, stamp = entry
    if vc[0] != stamp:
        raise RuntimeError(
            f"one of the variables needed for gradient computation has been modified by an "
            f"inplace operation: saved tensor {i} of {ctx._name} (shape {list(value.shape)}) "
            f"was written in place after save_for_backward. Use an out-of-place op, or "
            f"clone the tensor before the write")
    if kind == "out":  # value: the output's array; its node, weakly (no cycle via ctx)
        return Tensor._wrap(value, ctx._out_nodes[i](), vc)
    return value


class Function:
    """A user-defined op with its own backward, as `torch.autograd.Function` (module
    docstring): subclass it with static `forward` and `backward` (and optionally
    `setup_context`), call `MyFn.apply(*args)`."""

    @staticmethod
    def forward(*args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom "
                                  "autograd.Function.")

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for "
                                  "your custom autograd.Function to use it with backward "
                                  "mode AD.")

    @classmethod
    def apply(cls, *args, **kwargs):
        """Run `forward` on `args` and record the call (if an input requires grad and
        grad mode is on); returns what `forward` returned, outputs wrapped."""
        setup = cls.setup_context is not Function.setup_context
        if setup:
            bound = inspect.signature(cls.forward).bind(*args, **kwargs)
            bound.apply_defaults()
            args, kwargs = bound.args, bound.kwargs
            inputs = args
        else:
            inputs = args + tuple(kwargs.values())
        ctx = FunctionCtx()
        ctx._name, ctx._cls = f"{cls.__name__}Backward", cls
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad
                                     for a in inputs)
        with no_grad():
            if setup:
                out = cls.forward(*args, **kwargs)
                cls.setup_context(ctx, args, out)
            else:
                out = cls.forward(ctx, *args, **kwargs)
        tracked = is_grad_enabled() and any(ctx.needs_input_grad)
        return _finish(cls, ctx, inputs, out, tracked)


def _finish(cls, ctx, inputs: tuple, out, tracked: bool):
    """Wrap `forward`'s result: dirty inputs, non-differentiable outputs, the nodes."""
    is_tuple = isinstance(out, tuple)
    outs = list(out) if is_tuple else [out]
    dirty = _check_dirty(ctx, inputs, outs, tracked)
    nondiff = {id(t) for t in ctx.non_differentiable}
    diff = [j for j, o in enumerate(outs) if isinstance(o, Tensor) and id(o) not in nondiff
            and o.dtype.kind in "fc"] if tracked else []
    input_ids = {id(a) for a in inputs if isinstance(a, Tensor)}
    nodes = _make_nodes(ctx, inputs, outs, diff) if diff else {}
    for j, o in enumerate(outs):
        if isinstance(o, Tensor):
            outs[j] = _output(o, nodes.get(j), id(o) in input_ids, id(o) in dirty)
    for t in ctx.dirty_tensors:
        version.bump(t)
    _pack_saved(ctx, inputs, outs, nodes)
    return tuple(outs) if is_tuple else outs[0]


def _check_dirty(ctx, inputs, outs, tracked: bool) -> set:
    dirty = {id(t) for t in ctx.dirty_tensors}
    out_ids = {id(o) for o in outs}
    if not dirty <= out_ids:
        raise RuntimeError("Some elements marked as dirty during the forward method were not "
                           "returned as output. The inputs that are modified inplace must all "
                           "be outputs of the Function.")
    if tracked:
        for t in ctx.dirty_tensors:
            if t.requires_grad and t.grad_fn is None:
                raise RuntimeError("a leaf Variable that requires grad has been used in an "
                                   "in-place operation.")
            if view_of_other(t):
                raise view_refused(f"{ctx._name} (mark_dirty)")
    return dirty


def _output(o: Tensor, node, is_input: bool, is_dirty: bool) -> Tensor:
    """An output as `apply` returns it: a dirty input takes the node as its history (the
    same object); another input comes back as a new Tensor on its memory; a tensor made by
    forward takes the node itself."""
    if is_dirty:
        if node is not None:
            adopt(o, node)
        return o
    if is_input or (node is not None and (o.grad_fn is not None or o.requires_grad)):
        return Tensor._wrap(o._data, node, o._vc)
    if node is not None:
        o.grad_fn = node
        o._requires_grad = True
    return o


def _pack_saved(ctx, inputs, outs, nodes: dict) -> None:
    """What `save_for_backward` got, by kind: an output (its array and node: a fresh Tensor
    on the graph at each access), anything else as the object; with each tensor's version
    stamp now, after forward's writes."""
    out_at = {id(o): j for j, o in enumerate(outs) if isinstance(o, Tensor)}
    saved, out_nodes = [], []
    for t in ctx.to_save:
        j = None if t is None else out_at.get(id(t))
        if t is None:
            saved.append(None)
        elif j is not None and j in nodes:
            saved.append(("out", outs[j]._data, outs[j]._vc, outs[j]._vc[0]))
        else:
            saved.append(("obj", t, t._vc, t._vc[0]))
        out_nodes.append(weakref.ref(nodes[j]) if j is not None and j in nodes else None)
    ctx._out_nodes = out_nodes
    ctx._saved = saved


# ---- the nodes ---------------------------------------------------------------------------
def _note(node) -> None:
    mode = grad_mode()
    if mode is not True:  # a create_graph pass is recording (grad_mode.Recording)
        mode.made(node)
    if anomaly.mode()[0]:
        anomaly.note(node)


def _make_nodes(ctx, inputs, outs, diff: list) -> dict:
    """The node running backward and, with several differentiable outputs, one node per
    output sending its gradient there (module docstring). Returns output index -> node."""
    name = ctx._name
    ctx._inputs = tuple(isinstance(a, Tensor) for a in inputs)
    ctx._in_shapes = tuple(a.shape if isinstance(a, Tensor) else None for a in inputs)
    ctx._outs = [None if not isinstance(o, Tensor) else (o.shape, o.dtype) for o in outs]
    ctx._diff = diff
    nexts, meta = [], []
    for a in inputs:
        if isinstance(a, Tensor) and a.requires_grad:
            nexts.append(a.grad_fn if a.grad_fn is not None else accumulator_for(a))
            meta.append((a._data.shape, a._data.dtype))
        else:
            nexts.append(None)
            meta.append(None)
    if len(diff) == 1:
        size = outs[diff[0]]._data.size
        node = Node(name, tuple(nexts), tuple(meta), (ctx,), joint=_JOINT, cost=size,
                    size=size)
        _note(node)
        return {diff[0]: node}
    ctx._packing = _packing([outs[j] for j in diff])
    total, dtype = ctx._packing[-1]
    core = Node(name, tuple(nexts), tuple(meta), (ctx,), joint=_JOINT, cost=total,
                size=total)
    _note(core)
    nodes = {}
    for k, j in enumerate(diff):
        sel = Node(name, (core,), (((total,), dtype),), (ctx._packing, k), joint=_SELECT,
                   cost=total, size=outs[j]._data.size)
        _note(sel)
        nodes[j] = sel
    return nodes


def _packing(outs: list) -> list:
    """[(offset, shape, dtype)] per differentiable output, then (total size, common dtype):
    the outputs' gradients raveled one after the other, then one flag per output."""
    places, off = [], 0
    for o in outs:
        places.append((off, o.shape, o.dtype))
        off += o._data.size
    return places + [(off + len(outs), np.result_type(*[o.dtype for o in outs]))]


def _select(g, packing, k):
    """First order: output k's gradient into the packed vector (the rest -0.0)."""
    total, dtype = packing[-1]
    off, shape, _ = packing[k]
    buf = np.full(total, -0.0, dtype)
    buf[off:off + g.size] = g.reshape(-1)
    buf[total - len(packing) + 1 + k] = 1
    return (buf,)


def _select_graph(g: Tensor, node) -> tuple:
    """create_graph: the same packed vector, built with ops (cat of constants and g)."""
    packing, k = node.saved
    total, dtype = packing[-1]
    off, shape, _ = packing[k]
    flat = S.reshape(g, (-1,))
    if flat.dtype != dtype:
        flat = cast(flat, dtype)
    head = np.full(off, -0.0, dtype)
    tail = np.full(total - off - flat.shape[0], -0.0, dtype)
    tail[total - len(packing) + 1 + k - off - flat.shape[0]] = 1
    return (S.cat([Tensor._wrap(head), flat, Tensor._wrap(tail)]),)


_select.graph = _select_graph
_SELECT = _select


def _grads_out(ctx, g, graph: bool) -> list:
    """One gradient per forward output for backward, from the node's gradient `g`."""
    outs, diff = ctx._outs, ctx._diff
    wrap = (lambda a: a) if graph else Tensor._wrap
    res = [None] * len(outs)
    if len(diff) == 1:
        res[diff[0]] = wrap(g)
    else:
        res = _unpacked(ctx, g, res, graph)
    if ctx.materialize_grads:
        for j, meta in enumerate(outs):
            if meta is not None and res[j] is None:
                res[j] = Tensor._wrap(np.zeros(meta[0], meta[1]))
    return res


def _unpacked(ctx, g, res: list, graph: bool) -> list:
    packing = ctx._packing
    total = packing[-1][0]
    flags = (g._data if graph else g)[total - len(packing) + 1:]
    for k, j in enumerate(ctx._diff):
        if not flags[k]:
            continue
        off, shape, dtype = packing[k]
        size = int(np.prod(shape))
        if graph:
            part = g[off:off + size].reshape(shape)
            res[j] = part if part.dtype == dtype else cast(part, dtype)
        else:
            res[j] = Tensor._wrap(g[off:off + size].reshape(shape).astype(dtype, copy=False))
    return res


def _joint(g, ctx):
    """First order: `backward` on Tensors (grad mode is off in the pass); arrays out."""
    grads = _run_backward(ctx, _grads_out(ctx, g, False))
    return tuple(None if x is None else x._data for x in grads)


def _joint_graph(g: Tensor, node) -> tuple:
    """create_graph: `backward` with grad mode on (the pass's Recording); Tensors out."""
    ctx = node.saved[0]
    return _run_backward(ctx, _grads_out(ctx, g, True))


_joint.graph = _joint_graph
_JOINT = _joint


def _run_backward(ctx, grads_out: list) -> tuple:
    result = ctx._cls.backward(ctx, *grads_out)
    grads = result if isinstance(result, tuple) else (result,)
    return _validated(ctx, grads)


def _validated(ctx, grads: tuple) -> tuple:
    """PyTorch's checks of what backward returned, with its messages."""
    n, name = len(ctx._inputs), ctx._name
    if len(grads) > n and all(x is None for x in grads[n:]):
        grads = grads[:n]
    if len(grads) != n:
        raise RuntimeError(f"function {name} returned an incorrect number of gradients "
                           f"(expected {n}, got {len(grads)})")
    for i, (gi, is_tensor) in enumerate(zip(grads, ctx._inputs)):
        if gi is None:
            continue
        if not isinstance(gi, Tensor):
            raise RuntimeError(f"expected Variable or None (got {_type_name(gi)}): "
                               f"gradient {i} returned by {name}")
        if not is_tensor:
            raise RuntimeError(f"function {name} returned a gradient different than None at "
                               f"position {i + 1}, but the corresponding forward input was "
                               f"not a Variable")
        shape = ctx._in_shapes[i] if ctx._in_shapes[i] is not None else gi.shape
        if not _expandable(shape, gi.shape):
            raise RuntimeError(f"Function {name} returned an invalid gradient at index {i} - "
                               f"got {list(gi.shape)} but expected shape compatible with "
                               f"{list(shape)}")
    return grads


def _type_name(x) -> str:
    t = type(x)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _expandable(shape: tuple, to: tuple) -> bool:
    """`shape` broadcasts to `to` (a gradient of shape `to` sums back to `shape`)."""
    if len(shape) > len(to):
        return False
    return all(a == b or a == 1 for a, b in zip(shape[::-1], to[::-1]))

