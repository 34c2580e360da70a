"""Tensor: an ndarray plus what autograd needs (requires_grad, grad, grad_fn).

This module defines the class only; its operators, op methods and `backward` are
attached by `methods.py` (imported last by the package), so it imports no op
module and no engine.

Thread safety: reading a tensor is safe from any thread. `.grad` is
updated by the engines under the tensor's lock (`locks.grad_lock`), so concurrent backward calls
that share leaves are safe; assigning `.grad` yourself while a backward runs is not.
"""
from __future__ import annotations

import weakref

import numpy as np

from . import locks

_FLOAT_KINDS = "fc"


class Tensor:
    """A numpy array that records the ops applied to it when it requires grad."""

    __slots__ = ("data", "grad", "_requires_grad", "grad_fn", "_hooks", "_accumulator",
                 "__weakref__")
    __array_ufunc__ = None  # ndarray (op) Tensor defers to Tensor's reflected operator

    def __init__(self, data, requires_grad: bool = False, dtype=None):
        if isinstance(data, Tensor):
            data = data.data
        arr = np.array(data, dtype=dtype, copy=True)
        if dtype is None and arr.dtype.kind in "iub" and requires_grad:
            raise TypeError(_int_grad_message(arr.dtype))
        self._init(arr, None)
        self.requires_grad = requires_grad

    @classmethod
    def _wrap(cls, arr: np.ndarray, grad_fn=None) -> "Tensor":
        t = cls.__new__(cls)  # _init inlined: this is on every op's path
        t.data = arr
        t.grad = None
        t.grad_fn = grad_fn
        t._hooks = []
        t._accumulator = None
        t._requires_grad = grad_fn is not None
        return t

    def _init(self, arr, grad_fn):
        self.data = arr
        self.grad = None
        self.grad_fn = grad_fn
        self._hooks = []
        self._accumulator = None
        self._requires_grad = False

    # --- autograd attributes -------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool):
        value = bool(value)
        if self.grad_fn is not None:
            if not value:
                raise RuntimeError("requires_grad can only be changed on leaf tensors; "
                                   "use .detach() to get a tensor without history")
            return
        if value and self.data.dtype.kind not in _FLOAT_KINDS:
            raise TypeError(_int_grad_message(self.data.dtype))
        self._requires_grad = value

    def requires_grad_(self, value: bool = True) -> "Tensor":
        self.requires_grad = value
        return self

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    def retain_grad(self) -> None:
        """Keep `.grad` for this non-leaf tensor after backward (a no-op on leaves)."""
        if self.grad_fn is None:
            if not self._requires_grad:
                raise RuntimeError("can't retain_grad on a tensor that does not require grad")
            return
        self.grad_fn.retained = weakref.ref(self)

    def register_hook(self, fn):
        """Call `fn(grad)` when this tensor's gradient is complete; a non-None
        return value replaces the gradient (same shape required). Returns a handle
        with `.remove()`. Hooks run on whichever thread completes the gradient."""
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that does not require grad")
        if self.grad_fn is not None:
            with locks.once:
                if self.grad_fn.pre_hooks is None:
                    self.grad_fn.pre_hooks = []
            hooks = self.grad_fn.pre_hooks
        else:
            hooks = self._hooks
        hooks.append(fn)
        return _HookHandle(hooks, fn)

    def detach(self) -> "Tensor":
        return Tensor._wrap(self.data)

    def zero_grad(self) -> None:
        self.grad = None

    # --- array-like attributes -----------------------------------------------
    shape = property(lambda self: self.data.shape)
    ndim = property(lambda self: self.data.ndim)
    dtype = property(lambda self: self.data.dtype)
    size = property(lambda self: self.data.size)

    def __len__(self):
        return len(self.data)

    def item(self):
        return self.data.item()

    def numpy(self) -> np.ndarray:
        return self.data

    def __array__(self, dtype=None, copy=None):
        return self.data if dtype is None else self.data.astype(dtype)

    def __repr__(self):
        fn = f", grad_fn=<{self.grad_fn.name}>" if self.grad_fn is not None else ""
        rg = ", requires_grad=True" if self._requires_grad and self.grad_fn is None else ""
        return f"Tensor(shape={self.data.shape}, dtype={self.data.dtype}{fn}{rg})"

    def __bool__(self):
        return bool(self.data)

    def __float__(self):
        return float(self.data)

    def __hash__(self):
        return id(self)


class _HookHandle:
    def __init__(self, hooks, fn):
        self._hooks, self._fn = hooks, fn

    def remove(self):
        try:
            self._hooks.remove(self._fn)
        except ValueError:
            pass


def _int_grad_message(dtype) -> str:
    return (f"only floating point tensors can require gradients, got dtype {dtype}; "
            f"convert with dtype=np.float64 or np.float32")


def tensor(data, requires_grad: bool = False, dtype=None) -> Tensor:
    """Make a leaf tensor from array-like data (always copies)."""
    return Tensor(data, requires_grad=requires_grad, dtype=dtype)


