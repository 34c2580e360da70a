"""`Identity`, `Linear` and `Bilinear`."""
from __future__ import annotations

import math

import numpy as np

from .. import functional as F
from .. import init
from ..module import Module
from ..parameter import Parameter
from ._utils import empty_parameter, float_dtype, size_int


class Identity(Module):
    """Returns its input unchanged (arguments are accepted and ignored, as in PyTorch)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__()

    def forward(self, input):
        """Returns `input`."""
        return input


class Linear(Module):
    """`y = x @ weight.T + bias` (PyTorch's `nn.Linear`).

    Args:
        in_features: size of each input's last dimension.
        out_features: size of each output's last dimension.
        bias: whether to learn an additive bias (default True).
        dtype: parameter dtype (default: `pa.get_default_dtype()`).
        generator: numpy Generator for the initial values (default: the default
            generator that `pa.manual_seed` reseeds).

    Parameters: `weight` (out_features, in_features) ~ U(-k, k) and `bias`
    (out_features,) ~ U(-k, k), k = 1/sqrt(in_features): kaiming_uniform_ with
    a = sqrt(5), PyTorch's default initialisation.
    Input (..., in_features) -> output (..., out_features).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 dtype=None, generator: np.random.Generator | None = None) -> None:
        super().__init__()
        self.in_features = size_int(in_features, "in_features", "Linear")
        self.out_features = size_int(out_features, "out_features", "Linear")
        _weight_and_bias(self, (self.out_features, self.in_features), bias, dtype, "Linear")
        self.reset_parameters(generator)

    def reset_parameters(self, generator: np.random.Generator | None = None) -> None:
        """Redraw weight and bias with PyTorch's default initialisation."""
        init_linear_like(self.weight, self.bias, generator)

    def forward(self, input):
        """`input @ weight.T + bias` over the last dimension."""
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        """`in_features=…, out_features=…, bias=…`."""
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Bilinear(Module):
    """`y_k = x1^T weight[k] x2 + bias[k]` (PyTorch's `nn.Bilinear`, `F.bilinear`).

    Args:
        in1_features, in2_features: sizes of the two inputs' last dimensions (in1 > 0).
        out_features: size of the output's last dimension.
        bias: whether to learn an additive bias (default True).
        dtype: parameter dtype (default: `pa.get_default_dtype()`).
        generator: numpy Generator for the initial values (default: the default
            generator that `pa.manual_seed` reseeds).

    Parameters: `weight` (out_features, in1_features, in2_features) and `bias`
    (out_features,), both ~ U(-k, k) with k = 1/sqrt(in1_features), drawn in that order
    (PyTorch's initialisation).
    Inputs (..., in1_features) and (..., in2_features) -> output (..., out_features).
    """

    def __init__(self, in1_features: int, in2_features: int, out_features: int,
                 bias: bool = True, dtype=None,
                 generator: np.random.Generator | None = None) -> None:
        super().__init__()
        self.in1_features = size_int(in1_features, "in1_features", "Bilinear")
        self.in2_features = size_int(in2_features, "in2_features", "Bilinear")
        self.out_features = size_int(out_features, "out_features", "Bilinear")
        _weight_and_bias(self, (self.out_features, self.in1_features, self.in2_features),
                         bias, dtype, "Bilinear")
        self.reset_parameters(generator)

    def reset_parameters(self, generator: np.random.Generator | None = None) -> None:
        """Redraw weight and bias from U(-1/sqrt(in1_features), 1/sqrt(in1_features)).

        Raises:
            ValueError: in1_features is 0 (as PyTorch's).
        """
        if self.in1_features <= 0:
            raise ValueError(f"in1_features must be > 0, but got "
                             f"(in1_features={self.in1_features})")
        bound = 1 / math.sqrt(self.in1_features)
        init.uniform_(self.weight, -bound, bound, generator)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound, generator)

    def forward(self, input1, input2):
        """`F.bilinear(input1, input2, weight, bias)`."""
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        """PyTorch's: the three sizes and whether there is a bias."""
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


def _weight_and_bias(module: Module, shape: tuple, bias: bool, dtype, name: str) -> None:
    """Uninitialised `weight` of `shape` and `bias` of (shape[0],), or bias None."""
    dt = float_dtype(dtype, name)
    module.weight = empty_parameter(shape, dt)
    if bias:
        module.bias = empty_parameter((shape[0],), dt)
    else:
        module.register_parameter("bias", None)


def init_linear_like(weight: Parameter, bias: Parameter | None,
                     generator: np.random.Generator | None) -> None:
    """PyTorch's reset_parameters of Linear and ConvNd: kaiming_uniform_(a=sqrt(5))
    for the weight, then U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the bias, drawn in
    that order from one generator."""
    init.kaiming_uniform_(weight, a=math.sqrt(5), generator=generator)
    if bias is not None:
        fan_in, _ = init._calculate_fan_in_and_fan_out(weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        init.uniform_(bias, -bound, bound, generator)
