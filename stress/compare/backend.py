"""What the workload definitions are written with: a `Backend` per library (the same
definition builds the parallel_autograd graph and the PyTorch one) and seeded normal data."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

import parallel_autograd as pa
from parallel_autograd.nn import functional as F


@dataclass(frozen=True)
class Backend:
    """What a workload's one definition needs from a library: `lib` (the module of
    `tanh`, `sin`, `relu`, `mean`, `cat`, `flatten`, ...), `F` (its functional module),
    `leaf(array)` (a float64 tensor that requires grad) and `const(array)` (a tensor
    without grad, sharing the array)."""
    name: str
    lib: object
    F: object
    leaf: Callable
    const: Callable


# The workloads' dtype, stated (the library's default is float32, as PyTorch's): the
# data is numpy's float64 and both libraries' leaves are made in it.
DTYPE = np.float64


def _pa_leaf(a):
    return pa.Tensor(a, requires_grad=True, dtype=DTYPE)


def _pa_const(a):
    return pa.Tensor._wrap(np.asarray(a))


PA = Backend("parallel_autograd", pa, F, _pa_leaf, _pa_const)
_TORCH = []


def torch_backend() -> Backend:
    """The PyTorch backend (imported on first use; float64 leaves copied from the arrays)."""
    if not _TORCH:
        import torch
        import torch.nn.functional as TF

        def leaf(a):
            t = torch.from_numpy(np.array(a, dtype=DTYPE, copy=True))
            return t.requires_grad_(True)

        _TORCH.append(Backend("torch", torch, TF, leaf, torch.from_numpy))
    return _TORCH[0]


def normal(rng, shape, scale=1.0):
    """Standard normal samples of `shape` from `rng`, times `scale`."""
    return rng.standard_normal(shape) * scale
