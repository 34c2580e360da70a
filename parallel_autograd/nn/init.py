"""Parameter initialisation (PyTorch's `torch.nn.init`): same names, formulas and fan
computation.

Each function fills its tensor in place (under `no_grad`, bumping its version
counter, as PyTorch's do), returns it, and accepts a `Tensor` (a `Parameter`) or an
ndarray. Random ones draw from `generator` (a numpy Generator) or, when None, from
the default generator that `pa.manual_seed` reseeds. Values are drawn in float64 and
cast to the tensor's dtype.

Thread safety: filling a tensor that another thread reads or trains is a data race
(as any in-place write); the default generator itself is safe to share.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from .. import random as _random
from .. import version
from ..tensor import Tensor

__all__ = ["calculate_gain", "uniform_", "normal_", "constant_", "ones_", "zeros_",
           "eye_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
           "kaiming_normal_"]


def _array(tensor) -> np.ndarray:
    if isinstance(tensor, Tensor):
        return tensor._data
    if isinstance(tensor, np.ndarray):
        return tensor
    raise TypeError(f"expected a pa.Tensor or numpy.ndarray, got {type(tensor).__name__}")


def _fill(tensor, values):
    """Write `values` (array or scalar) into `tensor` in place; returns `tensor`."""
    np.copyto(_array(tensor), values, casting="unsafe")
    if isinstance(tensor, Tensor):
        version.bump(tensor)
    return tensor


def _float_shape(tensor, name: str) -> tuple:
    arr = _array(tensor)
    if arr.dtype.kind != "f":
        raise TypeError(f"{name}: expected a floating tensor, got dtype {arr.dtype}")
    return arr.shape


def _no_elements(tensor) -> bool:
    if _array(tensor).size == 0:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=3)
        return True
    return False


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for `nonlinearity` (PyTorch's table): 1 for linear, conv
    and sigmoid, 5/3 for tanh, sqrt(2) for relu, sqrt(2 / (1 + slope**2)) for
    leaky_relu (`param` is the slope, default 0.01), 3/4 for selu."""
    linear = {"linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
              "conv_transpose2d", "conv_transpose3d", "sigmoid"}
    if nonlinearity in linear:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, (int, float)) and not isinstance(param, bool):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor) -> tuple[int, int]:
    """PyTorch's fans: fan_in = shape[1] * receptive field, fan_out = shape[0] *
    receptive field, the receptive field being the product of shape[2:]."""
    shape = _array(tensor).shape
    if len(shape) < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer "
                         "than 2 dimensions")
    receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return shape[1] * receptive, shape[0] * receptive


def _calculate_correct_fan(tensor, mode: str) -> int:
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor, a: float = 0.0, b: float = 1.0,
             generator: np.random.Generator | None = None):
    """Fill with samples of U(a, b). Returns `tensor`."""
    g = _random.resolve_generator(generator)
    return _fill(tensor, g.uniform(a, b, size=_float_shape(tensor, "uniform_")))


def normal_(tensor, mean: float = 0.0, std: float = 1.0,
            generator: np.random.Generator | None = None):
    """Fill with samples of N(mean, std**2). Returns `tensor`."""
    g = _random.resolve_generator(generator)
    return _fill(tensor, g.normal(mean, std, size=_float_shape(tensor, "normal_")))


def constant_(tensor, val: float):
    """Fill with `val`. Returns `tensor`."""
    return _fill(tensor, val)


def ones_(tensor):
    """Fill with ones. Returns `tensor`."""
    return _fill(tensor, 1)


def zeros_(tensor):
    """Fill with zeros. Returns `tensor`."""
    return _fill(tensor, 0)


def eye_(tensor):
    """Fill a 2-D tensor with the identity matrix. Returns `tensor`."""
    arr = _array(tensor)
    if arr.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    return _fill(tensor, np.eye(*arr.shape))


def xavier_uniform_(tensor, gain: float = 1.0,
                    generator: np.random.Generator | None = None):
    """Glorot uniform: U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)).
    Returns `tensor`."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    a = math.sqrt(3.0) * std
    return uniform_(tensor, -a, a, generator)


def xavier_normal_(tensor, gain: float = 1.0,
                   generator: np.random.Generator | None = None):
    """Glorot normal: N(0, std**2) with std = gain * sqrt(2 / (fan_in + fan_out)).
    Returns `tensor`."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def kaiming_uniform_(tensor, a: float = 0.0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu",
                     generator: np.random.Generator | None = None):
    """He uniform: U(-bound, bound) with bound = gain * sqrt(3 / fan), gain =
    `calculate_gain(nonlinearity, a)`, fan the fan_in or fan_out (`mode`). With
    a = sqrt(5) (the default of Linear and Conv2d) the bound is 1 / sqrt(fan_in).
    Returns `tensor`."""
    if _no_elements(tensor):
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    gain = calculate_gain(nonlinearity, a)
    bound = math.sqrt(3.0) * gain / math.sqrt(fan)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor, a: float = 0.0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu",
                    generator: np.random.Generator | None = None):
    """He normal: N(0, std**2) with std = gain / sqrt(fan). Returns `tensor`."""
    if _no_elements(tensor):
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return normal_(tensor, 0.0, std, generator)
