"""Functional higher-order API, with PyTorch's names, argument order and return shapes
(`torch.autograd.functional`): `vjp`, `jvp`, `jacobian`, `hessian`, `vhp`, `hvp`.

`func` takes the inputs (a Tensor or a tuple of Tensors) and returns a Tensor or a tuple
of Tensors. Results follow the inputs' structure: a single Tensor in, a Tensor out; a
tuple in, a tuple out (`jacobian` and `hessian`: nested per output and input, as in
PyTorch). Everything is built on `grad(..., create_graph=True)` of the sequential engine:
`jvp` and `hvp` by the double-vjp trick (a vjp is linear in its cotangent, so
differentiating it with respect to the cotangent gives the jvp). With
`create_graph=False` the results are constants (no grad_fn); with `create_graph=True`
they keep their graph and can be differentiated again. With `strict=True`, an output
that does not depend on an input raises instead of giving zeros.

Thread safety: the functions keep no state; calls from several threads are independent.
"""
from __future__ import annotations

import numpy as np

from ..engine.rows import run_rows
from ..engine.sequential import grad
from ..ops.shape import reshape, stack
from ..tensor import Tensor

__all__ = ["hessian", "hvp", "jacobian", "jvp", "vhp", "vjp"]


def _as_tuple(x, what: str, fn: str) -> tuple[bool, tuple]:
    is_tuple = isinstance(x, (tuple, list))
    items = tuple(x) if is_tuple else (x,)
    for i, t in enumerate(items):
        if not isinstance(t, Tensor):
            raise TypeError(f"{fn}: {what} {i} is a {type(t).__name__}, expected a Tensor")
    return is_tuple, items


def _prepare(inputs: tuple, create_graph: bool) -> tuple:
    """Leaves to differentiate with respect to: the input itself when its graph must be
    kept (create_graph and it requires grad), else a fresh leaf on the same data."""
    out = []
    for x in inputs:
        if create_graph and x.requires_grad:
            out.append(x)
        else:
            out.append(Tensor(x._data, requires_grad=True))
    return tuple(out)


def _constant(t, create_graph: bool):
    return t if create_graph or t is None else t.detach()  # shares t's version counter


def _grads(outputs: tuple, inputs: tuple, grad_outputs, create_graph: bool, strict: bool,
           fn: str) -> tuple:
    """d(sum of outputs . grad_outputs)/d(inputs) as Tensors: zeros where an input is not
    reached (strict: RuntimeError)."""
    pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if o.requires_grad]
    if pairs:
        res = grad([o for o, _ in pairs], list(inputs), [g for _, g in pairs],
                   retain_graph=True, create_graph=create_graph, allow_unused=True)
    else:
        res = [None] * len(inputs)
    out = []
    for i, (x, g) in enumerate(zip(inputs, res)):
        if g is None:
            if strict:
                raise RuntimeError(f"{fn}: the output is independent of input {i} "
                                   "(strict=True)")
            g = Tensor._wrap(np.zeros(x.shape, x.dtype))
        elif not isinstance(g, Tensor):
            g = Tensor._wrap(g)
        out.append(g)
    return tuple(out)


def _cotangents(v, like: tuple, fn: str, what: str) -> tuple:
    """`v` as a tuple of Tensors shaped like `like` (ones when None and every item has one
    element, as PyTorch allows)."""
    if v is None:
        if any(t._data.size != 1 for t in like):
            raise RuntimeError(f"{fn}: v can be None only when the {what} has a single "
                               "element")
        return tuple(Tensor._wrap(np.ones(t.shape, t.dtype)) for t in like)
    vs = tuple(v) if isinstance(v, (tuple, list)) else (v,)
    if len(vs) != len(like):
        raise RuntimeError(f"{fn}: v has {len(vs)} items, the {what} has {len(like)}")
    out = []
    for i, (a, b) in enumerate(zip(vs, like)):
        if not isinstance(a, Tensor):
            a = Tensor(np.asarray(a, b.dtype))
        if a.shape != b.shape:
            raise RuntimeError(f"{fn}: v {i} has shape {a.shape}, the {what} {i} has "
                               f"shape {b.shape}")
        if a.dtype != b.dtype and not a.requires_grad:
            a = Tensor(a._data.astype(b.dtype))
        out.append(a)
    return tuple(out)


def _result(is_tuple: bool, items: tuple):
    return tuple(items) if is_tuple else items[0]


def vjp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """`(func(inputs), v^T J)`: the vector-Jacobian product, PyTorch's `vjp`."""
    in_tuple, xs = _as_tuple(inputs, "input", "vjp")
    xs = _prepare(xs, create_graph)
    out_tuple, outs = _as_tuple(func(*xs), "output", "vjp")
    vs = _cotangents(v, outs, "vjp", "output")
    res = _grads(outs, xs, vs, create_graph, strict, "vjp")
    return (_result(out_tuple, [_constant(o, create_graph) for o in outs]),
            _result(in_tuple, [_constant(r, create_graph) for r in res]))


def jvp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """`(func(inputs), J v)`: the Jacobian-vector product, by the double-vjp trick."""
    in_tuple, xs = _as_tuple(inputs, "input", "jvp")
    vs = _cotangents(v, xs, "jvp", "input")
    xs = _prepare(xs, create_graph)
    out_tuple, outs = _as_tuple(func(*xs), "output", "jvp")
    us = tuple(Tensor(np.zeros(o.shape, o.dtype), requires_grad=True) for o in outs)
    gs = _grads(outs, xs, us, True, strict, "jvp")  # u^T J, linear in u
    res = _grads(gs, us, vs, create_graph, strict, "jvp")  # d(u^T J v)/du = J v
    return (_result(out_tuple, [_constant(o, create_graph) for o in outs]),
            _result(out_tuple, [_constant(r, create_graph) for r in res]))


def jacobian(func, inputs, create_graph: bool = False, strict: bool = False,
             vectorize: bool = False, strategy: str = "reverse-mode"):
    """The Jacobian of `func` at `inputs`, row by row (one reverse pass per output
    element): entry [i][j] has shape `outputs[i].shape + inputs[j].shape`.

    The rows are independent passes over one retained graph. Without `create_graph`,
    when there are enough of them and they take long enough to pay for threads
    (`engine.rows.concurrent_rows`: rows of at least 1 ms, 5 ms in all), they run concurrently on
    the usable cores (BLAS limited to one thread each meanwhile); each is the sequential
    engine's pass, so the result is bitwise the one-by-one result. `vectorize=True` is
    accepted for PyTorch's API but does not batch the cotangents into one pass
    (PyTorch's vmap): the rules here take no batch dimension, so it runs the same
    concurrent passes as `vectorize=False`.
    With `create_graph=True` the rows run one by one (their recorded nodes are numbered
    in row order, so differentiating the result again is deterministic).
    Thread safety: as the module's; the passes only read the shared graph."""
    if strategy != "reverse-mode":
        raise ValueError(f"jacobian: strategy {strategy!r} is not supported "
                         "(only 'reverse-mode')")
    in_tuple, xs = _as_tuple(inputs, "input", "jacobian")
    xs = _prepare(xs, create_graph)
    out_tuple, outs = _as_tuple(func(*xs), "output", "jacobian")
    table = []
    for o in outs:
        rows = [[] for _ in xs]
        for g in _jacobian_rows(o, xs, create_graph, strict):
            for j, gj in enumerate(g):
                rows[j].append(gj)
        entries = []
        for x, r in zip(xs, rows):
            if create_graph:
                j = reshape(stack(r), o.shape + x.shape) if r else \
                    Tensor._wrap(np.zeros(o.shape + x.shape, x.dtype))
            else:
                j = Tensor._wrap(np.stack([t._data for t in r]).reshape(o.shape + x.shape)
                                 if r else np.zeros(o.shape + x.shape, x.dtype))
            entries.append(j)
        table.append(_result(in_tuple, entries))
    return _result(out_tuple, table)


def _jacobian_rows(o, xs: tuple, create_graph: bool, strict: bool) -> list:
    """d(o[k])/d(xs) for every element k of `o`, in order: the first row on this
    thread, the rest concurrently when `engine.rows.concurrent_rows` says it pays."""
    def row(k):
        e = np.zeros(o.numel(), o.dtype)
        e[k] = 1
        return _grads((o,), xs, (e.reshape(o.shape),), create_graph, strict, "jacobian")

    return run_rows(row, o.numel(), create_graph)


def hessian(func, inputs, create_graph: bool = False, strict: bool = False,
            vectorize: bool = False, outer_jacobian_strategy: str = "reverse-mode"):
    """The Hessian of a scalar `func`: entry [i][j] has shape
    `inputs[i].shape + inputs[j].shape` (the Jacobian of the gradient)."""
    in_tuple, xs = _as_tuple(inputs, "input", "hessian")

    def gradient(*args):
        out_tuple, outs = _as_tuple(func(*args), "output", "hessian")
        if out_tuple or outs[0].numel() != 1:
            raise RuntimeError("hessian: func must return a single Tensor with one element")
        gs = _grads(outs, args, (Tensor._wrap(np.ones(outs[0].shape, outs[0].dtype)),),
                    True, strict, "hessian")
        return gs if in_tuple else gs[0]

    return jacobian(gradient, xs if in_tuple else xs[0], create_graph, strict,
                    vectorize, outer_jacobian_strategy)


def _scalar_gradient(func, xs: tuple, strict: bool, fn: str):
    out_tuple, outs = _as_tuple(func(*xs), "output", fn)
    if out_tuple or outs[0].numel() != 1:
        raise RuntimeError(f"{fn}: func must return a single Tensor with one element")
    out = outs[0]
    gs = _grads((out,), xs, (Tensor._wrap(np.ones(out.shape, out.dtype)),), True, strict, fn)
    return out, gs


def vhp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """`(func(inputs), v^T H)` for a scalar `func`."""
    in_tuple, xs = _as_tuple(inputs, "input", "vhp")
    vs = _cotangents(v, xs, "vhp", "input")
    xs = _prepare(xs, create_graph)
    out, gs = _scalar_gradient(func, xs, strict, "vhp")
    res = _grads(gs, xs, vs, create_graph, strict, "vhp")
    return _constant(out, create_graph), _result(in_tuple, [_constant(r, create_graph)
                                                            for r in res])


def hvp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """`(func(inputs), H v)` for a scalar `func`, by the double-vjp trick (equal to
    `vhp` where the Hessian is symmetric)."""
    in_tuple, xs = _as_tuple(inputs, "input", "hvp")
    vs = _cotangents(v, xs, "hvp", "input")
    xs = _prepare(xs, create_graph)
    out, gs = _scalar_gradient(func, xs, strict, "hvp")
    us = tuple(Tensor(np.zeros(x.shape, x.dtype), requires_grad=True) for x in xs)
    uh = _grads(gs, xs, us, True, strict, "hvp")          # u^T H, linear in u
    res = _grads(uh, us, vs, create_graph, strict, "hvp")  # d(u^T H v)/du = H v
    return _constant(out, create_graph), _result(in_tuple, [_constant(r, create_graph)
                                                            for r in res])
