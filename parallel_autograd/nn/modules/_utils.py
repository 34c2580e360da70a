"""Helpers shared by the layers: parameter allocation and argument checks."""
from __future__ import annotations

import numpy as np

from ... import dtypes as D
from ..parameter import Parameter


def float_dtype(dtype, layer: str) -> np.dtype:
    """`dtype` as a numpy floating dtype, None the default dtype (`pa.get_default_dtype()`,
    read at construction: float32 unless changed, as PyTorch's); TypeError naming `layer`
    for a non-floating dtype."""
    dt = D.to_numpy(D.get_default_dtype() if dtype is None else dtype)
    if dt.kind != "f":
        raise TypeError(f"{layer}: dtype must be a floating dtype, got {dt}")
    return dt


def empty_parameter(shape: tuple, dtype: np.dtype) -> Parameter:
    """A Parameter of uninitialised values (the layer's reset_parameters fills it)."""
    return Parameter(np.empty(shape, dtype=dtype))


def positive_int(value, what: str, layer: str) -> int:
    """`value` as an int >= 1 (ValueError naming `what` and `layer` otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{layer}: {what} must be a positive integer, got {value!r}")
    return int(value)


def size_int(value, what: str, layer: str) -> int:
    """`value` as an int >= 0 (ValueError naming `what` and `layer` otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{layer}: {what} must be a non-negative integer, got {value!r}")
    return int(value)


def pair(value, what: str, layer: str) -> tuple:
    """An int or a pair of ints as a pair of ints."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value), int(value)
    try:
        out = tuple(int(v) for v in value)
    except TypeError:
        out = ()
    if len(out) != 2:
        raise ValueError(f"{layer}: {what} must be an int or a pair of ints, got {value!r}")
    return out
