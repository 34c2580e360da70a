"""Recorded in-place ops: `y.mul_(2)`, `out += shortcut`, `h.relu_()` with grad involved.

PyTorch's semantics (its "rebase history"): an in-place op on a tensor `t` that has a
history (or with an operand that requires grad) writes the new values into `t`'s own
memory, bumps `t`'s version counter, and `t` (the same Python object) takes as its
`grad_fn` the node of the op applied to its previous value. Here that node is the one the
declared out-of-place op records (`add` for `add_` and `+=`, `exp` for `exp_`, ...: its
formula, kernel, create_graph form and torch parity are the registry's), made by calling
the op on an alias of the old `t`, then adjusted so its rules never read memory the write
changed:

- the values it saved of the old `t` (or of anything sharing `t`'s memory: `y.mul_(y)`,
  `y.add_(y[0])`) are replaced by a private copy first (PyTorch's `original_self` clone),
  made only when a rule reads them (`mul_` with an operand that requires grad; not
  `add_`, `exp_` or `relu_`, whose rules read the result);
- the output it saved is `t`'s own array after the write (the node's new array is
  dropped: one write, no extra memory), so its counter is `t`'s, checked at backward as
  any saved value (`y.exp_(); y += 1` then backward raises, as in PyTorch);
- its creation epoch is the write's, so the bump does not invalidate the node itself.

Every earlier node that saved `t`'s values (or a view's) sees the bump and raises
PyTorch's "modified by an inplace operation" error at backward (`version.py`); nodes
that saved nothing of `t` (add, linear, batch_norm's output) are unaffected
(`primitive._read_counters`).

A write through a view of a tensor with history (`y[:, 0].mul_(2)`, `y.view(-1).add_(1)`)
rewrites the base's history, as PyTorch's CopySlices (`_through_view`, `views.py`).

Refused (RuntimeError, nothing written): a leaf that requires grad, or a view of one
(PyTorch's messages; allowed under `no_grad()`), and a view whose base is unknown (made
while nothing was recorded), or a shape op (`unsqueeze_`) on a view.

Thread safety: like any in-place write, not synchronised with readers of `t`.
"""
from __future__ import annotations

import numpy as np

from ... import version
from ...dtypes import scalar_type_name
from ...primitive import UNREAD
from ...tensor import Tensor
from .setitem import view_of_other
from .views import Geometry, view_put, view_take

__all__ = ["rebase", "rebase_view", "view_refused"]


def view_refused(name: str) -> RuntimeError:
    """The error for a recorded write through a view of another tensor's memory."""
    return RuntimeError(
        f"{name}: an in-place operation that must be recorded (grad mode on, and the tensor "
        f"or an operand requires grad) on a view of another tensor's memory (made by "
        f"indexing, view, reshape, transpose, ...) is not supported here: PyTorch rewrites "
        f"the history of the tensor it views, which this library does not track. Write "
        f"into that tensor (y[:, 0] = y[:, 0] * 2), or into a copy (v = v.clone())")


def _aliases(a, base: np.ndarray) -> bool:
    return type(a) is np.ndarray and (a is base or np.may_share_memory(a, base))


def _prepare(t: Tensor, name: str) -> np.ndarray:
    """`t`'s array, once the write is known to be allowed."""
    if view_of_other(t):
        raise view_refused(name)
    a = t._data
    if a.dtype.kind != "f":
        raise RuntimeError(f"{name}: result type Float can't be cast to the desired output "
                           f"type {scalar_type_name(a.dtype)} (an operand requires grad)")
    return a


def rebase(t: Tensor, name: str, op, operands: tuple, kwargs: dict) -> Tensor:
    """Record `t = op(t, *operands, **kwargs)` in place (see the module docstring)."""
    if view_of_other(t):
        return _through_view(t, name, op, operands, kwargs)
    a = _prepare(t, name)
    old = Tensor._wrap(a, t.grad_fn, t._vc)
    old._requires_grad = t._requires_grad
    new = op(old, *operands, **kwargs)
    out, node = new._data, new.grad_fn
    if out.shape != a.shape:
        raise RuntimeError(f"{name}: output with shape {list(a.shape)} doesn't match the "
                           f"broadcast shape {list(out.shape)}")
    if node is None:  # (an op without gradient: a plain write)
        _write(t, a, out)
        version.bump(t)
        return t
    saved = _detached(node, a)
    reads_out = len(saved) > 0 and saved[0] is out
    a = _write(t, a, out)
    if reads_out and a.dtype == out.dtype:
        saved[0] = a  # t's array holds the values: the node's own is dropped
    node.saved = tuple(saved)
    version.bump(t)
    node.versions = _counters(operands, kwargs, saved, t._vc if reads_out else UNREAD)
    node.epoch = version.EPOCH[0]
    adopt(t, node)
    return t


def _detached(node, a: np.ndarray) -> list:
    """`node`'s saved values, those sharing memory with `a` (about to be written) replaced
    by copies (PyTorch's original_self: one copy per distinct view, shared)."""
    saved = list(node.saved)
    copies = {}
    for i in range(1, len(saved)):
        if _aliases(saved[i], a):
            key = (saved[i].__array_interface__["data"][0], saved[i].shape,
                   saved[i].strides)
            if key not in copies:
                copies[key] = saved[i].copy()
            saved[i] = copies[key]
    return saved


def _through_view(t: Tensor, name: str, op, operands: tuple, kwargs: dict) -> Tensor:
    """Record `t = op(t, ...)` where `t` views its base's memory (PyTorch's CopySlices,
    `views.py`): the base takes `view_put(old base, op(view of old base))` as its history,
    `t` a view of the new base. Refused (nothing written) when the base is unknown, a
    leaf that requires grad, or the geometry does not allow it."""
    base, geom = _view_base(t, name)
    a = t._data
    old_base = Tensor._wrap(base._data, base.grad_fn, base._vc)
    old_base._requires_grad = base._requires_grad
    old = view_take(old_base, geom)
    new = op(old, *operands, **kwargs)
    if new._data.shape != a.shape:
        raise RuntimeError(f"{name}: output with shape {list(a.shape)} doesn't match the "
                           f"broadcast shape {list(new._data.shape)}")
    node = new.grad_fn
    if node is not None:
        node.saved = tuple(_detached(node, a))
    np.copyto(a, new._data, casting="unsafe")
    version.bump(t)
    epoch = version.EPOCH[0]
    # the nodes made before the write read nothing it changed (old's reads nothing at all;
    # the op's copies, above, or its own output): their checks start after it
    old.grad_fn.versions = None
    if node is not None:
        node.versions = _counters(operands, kwargs, list(node.saved), new._vc)
    put = view_put(old_base, new, geom, written=True).grad_fn
    for n in (old.grad_fn, node, put):
        if n is not None:
            n.epoch = epoch
    put.versions = None
    adopt(base, put)
    adopt(t, view_take(base, geom).grad_fn)
    return t


def _view_base(t: Tensor, name: str):
    """The tensor `t` views and the view's `Geometry` in it, or the refusal."""
    base = getattr(t, "_base", None)
    a = t._data
    if base is None or view_of_other(base) or not a.flags.writeable:
        raise view_refused(name)
    if base.grad_fn is None and base._requires_grad:
        raise RuntimeError(f"a view of a leaf Variable that requires grad is being used in an "
                           f"in-place operation. ({name})")
    if a.dtype.kind != "f":
        raise RuntimeError(f"{name}: result type Float can't be cast to the desired output "
                           f"type {scalar_type_name(a.dtype)} (an operand requires grad)")
    try:
        return base, Geometry(base._data, a)
    except ValueError:
        raise view_refused(name) from None


def _write(t: Tensor, a: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The new values into `t`'s memory (a read-only array: `t` takes a new one)."""
    if a.flags.writeable:
        np.copyto(a, out, casting="unsafe")
        return a
    t._data = out.astype(a.dtype, copy=False)
    return t._data


def _counters(operands: tuple, kwargs: dict, saved: list, out_vc: list) -> tuple:
    """The counters the node checks: the operands whose memory it keeps, then the output's."""
    vcs = []
    for o in (*operands, *kwargs.values()):
        if isinstance(o, Tensor) and any(_aliases(s, o._data) for s in saved[1:]):
            vcs.append(o._vc)
    vcs.append(out_vc)
    return tuple(vcs)


def adopt(t: Tensor, node) -> None:
    """`t` takes `node` as its history (retain_grad follows `t`, as setitem's)."""
    prev = t.grad_fn
    if prev is not None and prev.retained is not None and prev.retained() is t:
        node.retained, prev.retained = prev.retained, None
    t.grad_fn = node
    t._requires_grad = True


def rebase_view(t: Tensor, name: str, op, args: tuple) -> Tensor:
    """Record an in-place shape op (`unsqueeze_`, `t_`, ...): `t` takes `op(t, *args)`'s
    view of its memory and node. Its version is bumped, as PyTorch's are, so a node that
    saved `t`'s values raises at backward; the new node reads no values and checks none
    (`t` is not a view of another tensor afterwards: it may be written in place)."""
    _prepare(t, name)
    old = Tensor._wrap(t._data, t.grad_fn, t._vc)
    old._requires_grad = t._requires_grad
    new = op(old, *args)
    node = new.grad_fn
    node.versions = None
    t._data = new._data
    version.bump(t)
    adopt(t, node)
    return t
