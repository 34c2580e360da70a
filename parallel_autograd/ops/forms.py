"""create_graph: running a node's derivative as recorded ops, so it can be differentiated
again, to any order. The one place that knows how; the engines call `graph_grads` in a
create_graph pass where they call `Node.input_grads` otherwise.

Each op declares its derivative once, as a formula written with the package's ops
(`primitive.defop`). At first order the engines run the node's kernels on arrays; here
`graph_grads` runs the formulas on Tensors with grad mode on (the engine's `Recording`): the
gradients it returns are recorded. `ans` is a Tensor whose grad_fn is the node itself and
each input a Tensor routed to where its gradient goes (a leaf is the leaf), so `exp`'s
`g * ans` or `tanh`'s `g * (1 - ans * ans)` differentiate correctly; inputs that take no
gradient are passed as saved (arrays, numbers: constants). This is PyTorch's design
(derivatives.yaml) and HIPS autograd's (vjps written in autograd.numpy).

The bottom of the op layer: it imports no op family, and declares the few ops it needs
itself (`sum_to`, `expand_to`, `cast`, `zeros_of`, `factor_of`), each differentiable by the
others. Helpers for formulas whose factor is piecewise constant (relu, abs, clamp, max):
`depends_on`, `connect`, `piecewise`.

Thread safety: pure functions of their arguments.
"""
from __future__ import annotations

import numpy as np

from .. import version
from ..node import freed_graph_message, unbroadcast
from ..primitive import Joint, defop
from ..tensor import Tensor
from ..version import EPOCH

__all__ = ["graph_grads", "run_formulas", "graph_input", "graph_saved", "graph_fit", "cast",
           "sum_to", "expand_to", "zeros_of", "depends_on", "connect", "piecewise",
           "no_graph_rule_message"]


def graph_grads(node, g: Tensor, mask=None) -> list:
    """The create_graph form of `Node.input_grads`: the node's formulas on Tensors
    (recorded); one Tensor (or None) per input, summed back over broadcast dimensions and
    cast to the input's dtype by ops. `mask` skips inputs the caller does not need.
    Raises RuntimeError naming the op when it has no differentiable form."""
    if node.released:
        raise RuntimeError(freed_graph_message(node))
    if EPOCH[0] > node.epoch and node.versions is not None:
        version.check(node)
    op = node.op
    grads = _user_forms(node, g, mask) if op is None else run_formulas(node, op, g, mask)
    out = []
    for i, (gi, meta, nxt) in enumerate(zip(grads, node.input_meta, node.next_nodes)):
        if gi is None or nxt is None or (mask is not None and not mask[i]):
            out.append(None)
        else:
            out.append(graph_fit(gi, meta[0], meta[1], node.name))
    return out


def run_formulas(node, op, g, mask=None) -> list:
    """`op`'s formulas for `node` (unfitted: at the output's shape or the input's)."""
    formulas = op.formulas
    n = len(node.next_nodes)  # (cat: one per tensor)
    saved = graph_saved(node, n)
    if op.formula_extras:  # the forward's extras (`Saved`), as the kernels get them
        saved += node.saved[n + 1:]
    params = node.kwargs or {}
    if isinstance(formulas, Joint):
        grads = formulas.fn(g, *saved, **params)
        return _checked(node, grads)
    nexts = node.next_nodes
    return [None if f is None or nexts[i] is None or (mask is not None and not mask[i])
            else f(g, *saved, **params) for i, f in enumerate(formulas)]


def _user_forms(node, g, mask):
    """Nodes of `Function` subclasses and `primitive` ops: their rules' `graph` forms."""
    if node.joint is not None:
        rule = getattr(node.joint, "graph", None)
        if rule is None:
            raise RuntimeError(no_graph_rule_message(node))
        return _checked(node, rule(g, node))
    grads, saved = [], None
    kwargs = node.kwargs or {}
    for i, v in enumerate(node.vjps):
        if v is None or node.next_nodes[i] is None or (mask is not None and not mask[i]):
            grads.append(None)
            continue
        rule = getattr(v, "graph", None)
        if rule is None:
            raise RuntimeError(no_graph_rule_message(node))
        if saved is None:
            saved = graph_saved(node, len(node.vjps))
        grads.append(rule(g, *saved, **kwargs))
    return grads


def _checked(node, grads) -> tuple:
    if not isinstance(grads, tuple):
        grads = (grads,)
    if len(grads) != len(node.next_nodes):
        raise RuntimeError(f"{node.name}: the differentiable backward returned "
                           f"{len(grads)} gradients, expected {len(node.next_nodes)}")
    return grads


def graph_input(node, i: int, arr):
    """Input `i` of `node` as a formula sees it: the leaf itself, a Tensor of `arr` (its
    saved value) routed to the node it came from, or `arr` (no gradient: a constant)."""
    nxt = node.next_nodes[i]
    if nxt is None or arr is None:  # (None: an input no rule reads, not kept)
        return arr
    if nxt.variable is not None:
        return nxt.variable
    return Tensor._wrap(arr if type(arr) is np.ndarray else np.asarray(arr), nxt)


def graph_saved(node, n: int) -> list:
    """`(ans, *inputs)` of a node (saved as `(ans, *arrays, ...)`) as Tensors for a formula:
    `ans` has this node as grad_fn (None if the op keeps no output), input i the node it
    sends gradients to (a leaf: the leaf itself); inputs that take no gradient stay as they
    were saved (arrays or numbers: constants)."""
    saved = node.saved
    ans = saved[0]
    return [None if ans is None else Tensor._wrap(ans, node)] + \
        [graph_input(node, i, saved[1 + i]) for i in range(n)]


def no_graph_rule_message(node) -> str:
    return (f"create_graph: {node.name} has no differentiable backward, so its gradient "
            f"cannot be differentiated again (node seq {node.seq}); compute this part "
            f"without create_graph, or give its rule a differentiable form (`rule.graph`)")


# ---- the ops create_graph itself needs --------------------------------------------------------
def _const(x) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor._wrap(np.asarray(x))


def _sum_to_formula(g, ans, input, shape):
    return expand_to(g, np.shape(input._data if isinstance(input, Tensor) else input))


@defop(formula=_sum_to_formula, export=False)
def sum_to(input: Tensor, shape: tuple) -> Tensor:
    """`input` summed over the dimensions broadcasting added to `shape` (the adjoint of
    `expand_to`)."""
    return np.asarray(unbroadcast(np.asarray(input), tuple(shape), "sum_to"))


@defop(formula=lambda g, ans, input, shape: sum_to(g, np.shape(_raw(input))), export=False)
def expand_to(input: Tensor, shape: tuple) -> Tensor:
    """`input` broadcast to `shape` (a read-only view)."""
    return np.broadcast_to(input, tuple(shape))


@defop(formula=lambda g, ans, input, dtype: g, export=False)
def cast(input: Tensor, dtype) -> Tensor:
    """`input` converted to `dtype` (the gradient is converted back by the node)."""
    return np.asarray(input).astype(dtype)


def _zeros(x):
    t = np.empty(np.shape(x), np.result_type(x))   # 1 pass
    t.fill(0)
    return t


@defop(formula=lambda g, ans, input: zeros_of(g), export=False)
def zeros_of(input: Tensor) -> Tensor:
    """Zeros of `input`'s shape and dtype, recorded as a function of it (its gradient is
    zeros again): a derivative that is 0 wherever it is defined, still part of the graph."""
    return _zeros(input)


def _raw(x):
    return x._data if isinstance(x, Tensor) else x


def graph_fit(g, shape: tuple, dtype, opname: str = "op") -> Tensor:
    """`Node.input_grads`'s un-broadcasting and cast, with ops (recorded): `g` summed
    back to `shape` over broadcast dimensions and cast to `dtype`."""
    g = _const(g)
    if g.shape != shape:
        lead = g.ndim - len(shape)
        if lead < 0 or any(n != 1 and n != m for n, m in zip(shape, g.shape[lead:])):
            raise ValueError(f"{opname}: gradient of shape {g.shape} cannot be reduced to "
                             f"input shape {shape}")
        g = sum_to(g, shape)
    if g.dtype != dtype:
        g = cast(g, dtype)
    return g


# The factor `f` (a constant array) as a function of an input `x` with derivative 0, as
# PyTorch's threshold_backward or sgn: the gradient of a piecewise-linear op is then part of
# the graph wherever its input is, and differentiating it again gives zeros, not "not part
# of the graph".
@defop(inputs=("f", "x"), formula=(lambda g, ans, f, x: g, lambda g, ans, f, x: zeros_of(g)),
       export=False)
def factor_of(f, x: Tensor) -> Tensor:
    """`f`, recorded as a function of `x` with derivative 0."""
    return f


def depends_on(value: np.ndarray, *inputs):
    """`value` (an array) as a function with derivative 0 of each of `inputs` that is a
    Tensor requiring grad (`value` itself if none is): for the differentiable form of a
    rule whose factor is piecewise constant in an input, so that the gradient it returns
    is part of the graph wherever that input is, as in PyTorch."""
    for x in inputs:
        if isinstance(x, Tensor) and x.requires_grad:
            value = factor_of(value, x)
    return value


def connect(t: Tensor, *inputs) -> Tensor:
    """`t` (a gradient made of g and constants, e.g. scattered by saved indices) times
    ones that depend with derivative 0 on each of `inputs` requiring grad: the same
    values, now part of the graph wherever those inputs are."""
    ones = depends_on(np.ones(t.shape, t.dtype), *inputs)
    return t * ones if isinstance(ones, Tensor) else t


def piecewise(kernel):
    """The formula of an op whose derivative is g times a factor that is constant where
    it is differentiable: the factor from the kernel at g = 1, as a zero-derivative function
    of the inputs that take a gradient (`depends_on`), then g times it (recorded)."""
    def formula(g, ans, *inputs, **params):
        a = _raw(g)                 # (ans: None when the kernel does not read it)
        ones = np.ones(a.shape, a.dtype)
        factor = np.asarray(kernel(ones, None if ans is None else _raw(ans),
                                   *[_raw(x) for x in inputs], **params))
        return g * depends_on(factor, *inputs)
    formula.kernel = kernel
    formula.ans_read_by = kernel  # (ans's values: only through the kernel)
    return formula
