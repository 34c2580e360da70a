"""In-place ops: `+= -= *= /=` and PyTorch's trailing-underscore methods (arithmetic, fills,
copies and the index writes `scatter_ scatter_add_ index_add_ index_fill_ masked_fill_`).

They write into the tensor's own ndarray (views and other references see the change)
and bump its version counter (`parallel_autograd.version`), so a backward that needs
an overwritten value fails with a clear error instead of computing a wrong gradient.

When they are allowed (PyTorch's rules, stricter in one place):
- under `no_grad()` (the optimizer-step case), or on tensors that do not require grad,
  with no operand that requires grad: allowed;
- on a leaf that requires grad, with grad mode on: RuntimeError (PyTorch's "a leaf
  Variable that requires grad is being used in an in-place operation");
- on a tensor with a gradient history, or with an operand that requires grad, with
  grad mode on: RuntimeError. PyTorch records these; here they are refused, never
  recorded wrongly: write the op out of place (`y = y + x`).

Writes through `.data` (numpy) bypass the checks and the version counter, as in
PyTorch. Thread safety: like any write to an array, not synchronised with readers.

`t[index] = value` (`__setitem__`, `ops/setitem.py`) follows the same rules when nothing
requires grad or under `no_grad()`, and otherwise, unlike the methods here, is recorded:
a differentiable write (`index_put`) that `t` takes as its new history.
"""
from __future__ import annotations

import numpy as np

from . import version
from .grad_mode import is_grad_enabled
from .ops import index as IX
from .ops.setitem import setitem
from .tensor import Tensor


def _raw(x):
    return x.data if isinstance(x, Tensor) else x


def _check(t: Tensor, name: str, operands) -> None:
    if not is_grad_enabled():
        return
    if t._requires_grad:
        if t.grad_fn is None:
            raise RuntimeError(
                f"a leaf Variable that requires grad is being used in an in-place operation "
                f"({name}); for an update such as an optimizer step, run it under "
                f"`with pa.no_grad():`")
        raise RuntimeError(
            f"{name}: in-place operations are not recorded on a tensor with a gradient "
            f"history (grad_fn=<{t.grad_fn.name}>); write it out of place (y = y + x), or "
            f"run it under pa.no_grad()")
    for o in operands:
        if isinstance(o, Tensor) and o._requires_grad:
            raise RuntimeError(
                f"{name}: an operand requires grad, but the in-place result would not "
                f"record it (the tensor written does not require grad); write it out of "
                f"place (y = y + x)")


def _inplace(name: str, write):
    """An in-place method: `write(data, *raw_operands, **kwargs)` writes into `data`."""

    def method(self: Tensor, *operands, **kwargs) -> Tensor:
        _check(self, name, operands + tuple(kwargs.values()))
        try:
            write(self.data, *[_raw(o) for o in operands],
                  **{k: _raw(v) for k, v in kwargs.items()})
        except (TypeError, ValueError) as e:
            kind = ValueError if isinstance(e, ValueError) else TypeError
            raise kind(f"{name}: {e}") from e
        version.bump(self)
        return self

    method.__name__ = method.__qualname__ = name
    return method


def _add(d, other, alpha=1):
    np.add(d, other if alpha == 1 else np.multiply(other, alpha), out=d)


def _sub(d, other, alpha=1):
    np.subtract(d, other if alpha == 1 else np.multiply(other, alpha), out=d)


def _array(a) -> np.ndarray:
    """A ufunc's result as an array to write into (0-d operands give a numpy scalar)."""
    return a if type(a) is np.ndarray else np.asarray(a)


def _addcmul(d, t1, t2, value=1):
    prod = _array(np.multiply(t1, t2))  # one temporary (PyTorch's addcmul_ fuses it away)
    if value != 1:
        np.multiply(prod, value, out=prod)
    np.add(d, prod, out=d)


def _lerp(d, end, weight):
    step = _array(np.subtract(end, d))  # one temporary: d + weight * (end - d)
    np.multiply(step, weight, out=step)
    np.add(d, step, out=d)


def _clamp(d, min=None, max=None):
    if min is None and max is None:
        raise ValueError("at least one of min and max must be given")
    np.clip(d, min, max, out=d)


# ---- the index writes: PyTorch's scatter_, scatter_add_, index_add_, index_fill_,
# masked_fill_; validated as their out-of-place ops are, before anything is written; they
# write into the tensor's memory (index arrays aside, no temporaries)
def _scatter(d, dim, index, src=None, value=None):
    if src is not None and value is not None:
        raise TypeError("give src or value, not both")
    if src is not None and np.ndim(src) == 0 and not isinstance(src, np.ndarray):
        src, value = None, src  # scatter_(dim, index, 2.0): PyTorch's value overload
    if src is None and value is None:
        raise TypeError("src or value is required")
    idx, k = IX.indices(index, "scatter_"), IX.old_dim(dim, d.ndim, "scatter_")
    if src is None:
        if np.ndim(value):
            raise TypeError("value must be a number (use src= for a tensor)")
        IX.check_index(d, k, idx, "scatter_")
        d[IX.grid(idx, k)] = value
        return
    s = np.asarray(src)
    IX.check_index(d, k, idx, "scatter_", s)
    d[IX.grid(idx, k)] = s[IX.lead(idx.shape)]  # repeats: the last write wins


def _scatter_add(d, dim, index, src):
    s = np.asarray(src)
    idx, k = IX.indices(index, "scatter_add_"), IX.old_dim(dim, d.ndim, "scatter_add_")
    IX.check_index(d, k, idx, "scatter_add_", s)
    np.add.at(d, IX.grid(idx, k), s[IX.lead(idx.shape)])  # repeats accumulate


def _index_add(d, dim, index, source, alpha=1):
    if d.ndim == 0:
        raise ValueError("input must have at least 1 dimension")
    k = IX.old_dim(dim, d.ndim, "index_add_")
    idx = IX.vector_index(index, d.shape[k], "index_add_", k)
    s = np.asarray(source)
    want = d.shape[:k] + idx.shape + d.shape[k + 1:]
    if s.shape != want:
        raise ValueError(f"source must have shape {want} (input's, with len(index) in dim "
                         f"{k}), got {s.shape}")
    np.add.at(d, IX.along(k, idx), s if alpha == 1 else s * alpha)


def _index_fill(d, dim, index, value):
    if d.ndim == 0:
        raise ValueError("input must have at least 1 dimension")
    if np.ndim(value):
        raise ValueError("value must be a number or a 0-d tensor")
    k = IX.old_dim(dim, d.ndim, "index_fill_")
    d[IX.along(k, IX.vector_index(index, d.shape[k], "index_fill_", k))] = value


def _masked_fill(d, mask, value):
    m = IX.mask(mask, "masked_fill_")
    if np.ndim(value):
        raise ValueError("value must be a number or a 0-d tensor")
    try:
        if np.broadcast_shapes(m.shape, d.shape) != d.shape:
            raise ValueError
    except ValueError:
        raise ValueError(f"mask of shape {m.shape} does not broadcast to the tensor's shape "
                         f"{d.shape}") from None
    np.copyto(d, value, where=m)


METHODS = {
    "add_": _inplace("add_", _add),
    "sub_": _inplace("sub_", _sub),
    "mul_": _inplace("mul_", lambda d, o: np.multiply(d, o, out=d)),
    "div_": _inplace("div_", lambda d, o: np.true_divide(d, o, out=d)),
    "neg_": _inplace("neg_", lambda d: np.negative(d, out=d)),
    "zero_": _inplace("zero_", lambda d: d.fill(0)),
    "fill_": _inplace("fill_", lambda d, value: d.fill(value)),
    "copy_": _inplace("copy_", lambda d, src: np.copyto(d, src)),
    "clamp_": _inplace("clamp_", _clamp),
    "addcmul_": _inplace("addcmul_", _addcmul),
    "lerp_": _inplace("lerp_", _lerp),
    "__iadd__": _inplace("+=", _add),
    "__isub__": _inplace("-=", _sub),
    "__imul__": _inplace("*=", lambda d, o: np.multiply(d, o, out=d)),
    "__itruediv__": _inplace("/=", lambda d, o: np.true_divide(d, o, out=d)),
    "scatter_": _inplace("scatter_", _scatter),
    "scatter_add_": _inplace("scatter_add_", _scatter_add),
    "index_add_": _inplace("index_add_", _index_add),
    "index_fill_": _inplace("index_fill_", _index_fill),
    "masked_fill_": _inplace("masked_fill_", _masked_fill),
}
METHODS["clip_"] = METHODS["clamp_"]
METHODS["__setitem__"] = setitem
