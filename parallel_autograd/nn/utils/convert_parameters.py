"""`parameters_to_vector` and `vector_to_parameters` (PyTorch's
`torch.nn.utils.convert_parameters`)."""
from __future__ import annotations

from typing import Iterable

import numpy as np

from ... import version
from ...grad_mode import no_grad
from ...ops import shape as S
from ...tensor import Tensor

__all__ = ["parameters_to_vector", "vector_to_parameters"]


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """All of `parameters` flattened and concatenated into one 1-D Tensor, recorded (a
    loss of it differentiates into each parameter), as PyTorch's."""
    params = list(parameters)
    if not params:
        raise ValueError("parameters_to_vector: expected at least one parameter")
    for p in params:
        if not isinstance(p, Tensor):
            raise TypeError(f"expected Tensor, but got: {type(p).__name__}")
    return S.concat([S.reshape(p, (-1,)) for p in params], 0)


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Copy consecutive slices of the 1-D `vec` into `parameters` in place (their shapes
    in order), as PyTorch's; a length that does not match raises before anything is
    written. Each parameter's version is bumped (an in-place write)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected Tensor, but got: {type(vec).__name__}")
    params = list(parameters)
    v = vec._data
    need = sum(p._data.size for p in params)
    if v.ndim != 1 or v.size != need:
        raise ValueError(f"vector_to_parameters: vec must be 1-D with {need} elements (the "
                         f"parameters' total), got shape {v.shape}")
    at = 0
    with no_grad():
        for p in params:
            n = p._data.size
            np.copyto(p._data, v[at:at + n].reshape(p._data.shape), casting="same_kind")
            version.bump(p)
            at += n
