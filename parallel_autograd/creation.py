"""Convenience constructors for leaf tensors."""
from __future__ import annotations

import numpy as np

from . import random as _random
from .tensor import Tensor


def zeros(*shape, dtype=np.float64, requires_grad: bool = False) -> Tensor:
    """A leaf tensor of zeros of `shape` (`zeros(2, 3)` or `zeros((2, 3))`)."""
    return Tensor(np.zeros(_shape(shape), dtype=dtype), requires_grad=requires_grad)


def ones(*shape, dtype=np.float64, requires_grad: bool = False) -> Tensor:
    """A leaf tensor of ones of `shape` (`ones(2, 3)` or `ones((2, 3))`)."""
    return Tensor(np.ones(_shape(shape), dtype=dtype), requires_grad=requires_grad)


def randn(*shape, dtype=np.float64, requires_grad: bool = False, rng=None,
          seed=None) -> Tensor:
    """Standard normal samples of `shape` as a leaf tensor.

    Drawn from `rng` (a numpy Generator) if given, else from a fresh generator seeded
    with `seed`, else from the current generator (`parallel_autograd.random`: the default
    one, reseeded by `pa.manual_seed`). A checkpoint's recomputation replays the draw.
    """
    if rng is None and seed is not None:
        rng = np.random.default_rng(seed)
    elif rng is None or isinstance(rng, np.random.Generator):
        rng = _random.resolve_generator(rng)  # seen by a checkpoint's record/replay
    return Tensor(rng.standard_normal(_shape(shape)).astype(dtype, copy=False),
                  requires_grad=requires_grad)


def arange(*args, dtype=None, requires_grad: bool = False) -> Tensor:
    """A leaf tensor of `np.arange(*args)` (integers unless `dtype` or a float argument)."""
    return Tensor(np.arange(*args, dtype=dtype), requires_grad=requires_grad)


def _shape(shape):
    return tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) \
        else tuple(shape)
