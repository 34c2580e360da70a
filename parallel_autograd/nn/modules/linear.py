"""`Identity` and `Linear`."""
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
        dt = float_dtype(dtype, "Linear")
        self.weight = empty_parameter((self.out_features, self.in_features), dt)
        if bias:
            self.bias = empty_parameter((self.out_features,), dt)
        else:
            self.register_parameter("bias", None)
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
