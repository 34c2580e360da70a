"""Convenience constructors for leaf tensors."""
from __future__ import annotations

import numpy as np

from .tensor import Tensor


def zeros(*shape, dtype=np.float64, requires_grad: bool = False) -> Tensor:
    """A leaf tensor of zeros of `shape` (`zeros(2, 3)` or `zeros((2, 3))`)."""
    return Tensor(np.zeros(_shape(shape), dtype=dtype), requires_grad=requires_grad)


def ones(*shape, dtype=np.float64, requires_grad: bool = False) -> Tensor:
    """A leaf tensor of ones of `shape` (`ones(2, 3)` or `ones((2, 3))`)."""
    return Tensor(np.ones(_shape(shape), dtype=dtype), requires_grad=requires_grad)


def randn(*shape, dtype=np.float64, requires_grad: bool = False, rng=None,
          seed=None) -> Tensor:
    """Standard normal samples from `rng` (a numpy Generator) or a fresh one from `seed`."""
    rng = rng if rng is not None else np.random.default_rng(seed)
    return Tensor(rng.standard_normal(_shape(shape)).astype(dtype, copy=False),
                  requires_grad=requires_grad)


def arange(*args, dtype=None, requires_grad: bool = False) -> Tensor:
    """A leaf tensor of `np.arange(*args)` (integers unless `dtype` or a float argument)."""
    return Tensor(np.arange(*args, dtype=dtype), requires_grad=requires_grad)


def _shape(shape):
    return tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) \
        else tuple(shape)
