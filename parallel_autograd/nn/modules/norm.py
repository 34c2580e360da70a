"""`LayerNorm` and `RMSNorm`."""
from __future__ import annotations

import numbers

from .. import functional as F
from .. import init
from ..module import Module
from ._utils import empty_parameter, float_dtype


def _shape(normalized_shape, layer: str) -> tuple:
    if isinstance(normalized_shape, numbers.Integral):
        normalized_shape = (normalized_shape,)
    shape = tuple(int(s) for s in normalized_shape)
    if not shape or any(s < 1 for s in shape):
        raise ValueError(f"{layer}: normalized_shape must be a non-empty sequence of "
                         f"positive sizes, got {normalized_shape!r}")
    return shape


class LayerNorm(Module):
    """Layer normalisation over the trailing `normalized_shape` dims (PyTorch's
    `nn.LayerNorm`): `(x - mean) / sqrt(var + eps) * weight + bias`, biased variance.

    Args:
        normalized_shape: int or tuple, the trailing shape normalised over.
        eps: added to the variance (default 1e-5).
        elementwise_affine: learn `weight` (ones) and `bias` (zeros) of shape
            `normalized_shape` (default True).
        bias: learn the bias too (default True; only with elementwise_affine).
        dtype: parameter dtype (default float64).
    """

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, dtype=None) -> None:
        super().__init__()
        self.normalized_shape = _shape(normalized_shape, "LayerNorm")
        self.eps, self.elementwise_affine = eps, elementwise_affine
        dt = float_dtype(dtype, "LayerNorm")
        if elementwise_affine:
            self.weight = empty_parameter(self.normalized_shape, dt)
            if bias:
                self.bias = empty_parameter(self.normalized_shape, dt)
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """weight = 1, bias = 0."""
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def forward(self, input):
        """The normalised `input`."""
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        """PyTorch's: shape, eps, elementwise_affine, bias."""
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}")


class RMSNorm(Module):
    """Root-mean-square normalisation over the trailing dims (PyTorch's `nn.RMSNorm`):
    `x / sqrt(mean(x**2) + eps) * weight`.

    Args:
        normalized_shape: int or tuple, the trailing shape normalised over.
        eps: added to the mean square; None (default) is the machine epsilon of the
            input's dtype, as in PyTorch.
        elementwise_affine: learn `weight` (ones) of shape `normalized_shape`.
        dtype: parameter dtype (default float64).
    """

    def __init__(self, normalized_shape, eps: float | None = None,
                 elementwise_affine: bool = True, dtype=None) -> None:
        super().__init__()
        self.normalized_shape = _shape(normalized_shape, "RMSNorm")
        self.eps, self.elementwise_affine = eps, elementwise_affine
        if elementwise_affine:
            self.weight = empty_parameter(self.normalized_shape, float_dtype(dtype, "RMSNorm"))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """weight = 1."""
        if self.weight is not None:
            init.ones_(self.weight)

    def forward(self, input):
        """The normalised `input`."""
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        """PyTorch's: shape, eps, elementwise_affine."""
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")
