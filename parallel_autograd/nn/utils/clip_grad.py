"""Gradient clipping (PyTorch's `torch.nn.utils.clip_grad`): `clip_grad_norm_`,
`clip_grad_value_`, `get_total_norm`, `clip_grads_with_norm_`.

They read and scale the `.grad` of parameters in place, between a backward and an
optimizer step, with PyTorch's arithmetic: the total norm is the `norm_type`-norm of the
per-gradient norms, the scale `max_norm / (total + 1e-6)` clamped at 1 and applied to every
gradient (also when it is 1). A `.grad` that is a Tensor (after `create_graph=True`) is
scaled by its in-place method, which bumps its version as PyTorch's `mul_` does.

Thread safety: each gradient is scaled under the engine's lock for that tensor
(`locks.grad_lock`), so a clip never interleaves with an engine's accumulation into the
same `.grad`; clipping while a backward into these parameters runs gives one or the other
order, as in PyTorch.
"""
from __future__ import annotations

import math
import types
import warnings
from typing import Iterable, Union

import numpy as np

from ... import locks
from ...grad_mode import no_grad
from ...tensor import Tensor

__all__ = ["clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm"]

Parameters = Union[Tensor, Iterable[Tensor]]


def _params(parameters: Parameters) -> list:
    if isinstance(parameters, Tensor):
        return [parameters]
    empty_gen = isinstance(parameters, types.GeneratorType)
    out = list(parameters)
    if empty_gen and not out:
        warnings.warn("`parameters` is an empty generator, no gradient clipping will occur.",
                      stacklevel=3)
    for p in out:
        if not isinstance(p, Tensor):
            raise TypeError(f"expected Tensors (parameters), got {type(p).__name__}")
    return out


def _array(g) -> np.ndarray:
    return g._data if isinstance(g, Tensor) else g


def _norm(a: np.ndarray, p: float) -> float:
    """The p-norm of every element of `a` (torch.linalg.vector_norm's orders)."""
    a = np.asarray(a)
    if a.size == 0:
        return 0.0
    if p == 2:
        flat = a.reshape(-1)
        return math.sqrt(float(np.dot(flat, flat)))     # 1 pass, no temporary
    if p == math.inf:
        return float(max(np.max(a), -np.min(a)))
    if p == -math.inf:
        return float(np.min(np.abs(a)))
    if p == 0:
        return float(np.count_nonzero(a))
    return float(np.linalg.norm(a.reshape(-1), p))


def get_total_norm(tensors: Parameters, norm_type: float = 2.0,
                   error_if_nonfinite: bool = False, foreach=None) -> Tensor:
    """The `norm_type`-norm of the norms of `tensors` (arrays or Tensors): the norm of
    all their elements taken as one vector (PyTorch's `get_total_norm`); 0 for none.
    `error_if_nonfinite`: raise RuntimeError when it is NaN or infinite."""
    items = [tensors] if isinstance(tensors, (Tensor, np.ndarray)) else list(tensors)
    p = float(norm_type)
    if not items:
        return Tensor._wrap(np.asarray(0.0))
    dtype = np.result_type(*[_array(t) for t in items])
    norms = np.array([_norm(_array(t), p) for t in items], dtype=np.float64)
    total = _norm(norms, p)
    if error_if_nonfinite and not math.isfinite(total):
        raise RuntimeError(f"The total norm of order {p} for gradients from `parameters` is "
                           "non-finite, so it cannot be clipped. To disable this error and "
                           "scale the gradients by the non-finite norm anyway, set "
                           "`error_if_nonfinite=False`")
    return Tensor._wrap(np.asarray(total, dtype=dtype if dtype.kind == "f" else np.float64))


def clip_grads_with_norm_(parameters: Parameters, max_norm: float, total_norm,
                          foreach=None) -> None:
    """Scale every `.grad` of `parameters` in place by min(1, max_norm / (total_norm +
    1e-6)) (PyTorch's `clip_grads_with_norm_`); `total_norm` from `get_total_norm`."""
    params = [p for p in _params(parameters) if p.grad is not None]
    if not params:
        return
    total = float(_array(total_norm))
    coef = min(float(max_norm) / (total + 1e-6), 1.0)
    _update(params, lambda g, out: np.multiply(g, g.dtype.type(coef), out=out),
            lambda g: g.mul_(coef))


def clip_grad_norm_(parameters: Parameters, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach=None) -> Tensor:
    """Scale the gradients of `parameters` in place so that their total `norm_type`-norm
    (all gradients taken as one vector) is at most `max_norm`, as PyTorch's
    `clip_grad_norm_`; returns the total norm before clipping (a 0-d Tensor).
    `foreach` is accepted for PyTorch's signature and ignored."""
    params = _params(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    total = get_total_norm(grads, norm_type, error_if_nonfinite)
    clip_grads_with_norm_(params, max_norm, total)
    return total


def clip_grad_value_(parameters: Parameters, clip_value: float, foreach=None) -> None:
    """Clamp every `.grad` of `parameters` in place to [-clip_value, clip_value]
    (PyTorch's `clip_grad_value_`)."""
    c = float(clip_value)
    _update(_params(parameters), lambda g, out: np.clip(g, -c, c, out=out),
            lambda g: g.clamp_(-c, c))


def _update(params: list, kernel, method) -> None:
    """Each `.grad` rewritten by `kernel(g, out)` in place (1 pass; into a new array if g
    is read-only) or, for a Tensor gradient, by its in-place `method` (a version bump),
    under the tensor's grad lock."""
    for p in params:
        with locks.grad_lock(p):
            g = p._grad
            if g is None:
                continue
            arr = g._data
            if g.grad_fn is not None or g._requires_grad or not isinstance(arr, np.ndarray):
                with no_grad():
                    method(g)
            elif arr.flags.writeable:
                kernel(arr, arr)
            else:
                p._grad = Tensor._wrap(kernel(arr, None))
