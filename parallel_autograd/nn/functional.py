"""PyTorch-style functional API built on the op library."""
from __future__ import annotations

from ..ops.elementwise import gelu, leaky_relu, relu, sigmoid, silu, tanh  # noqa: F401
from ..ops.linalg import matmul
from ..ops.reduce import log_softmax, mean, softmax  # noqa: F401
from ..ops.shape import transpose


def linear(x, weight, bias=None):
    """`x @ weight.T + bias`, with weight of shape (out_features, in_features)."""
    y = matmul(x, transpose(weight))
    return y if bias is None else y + bias


def mse_loss(input, target, reduction: str = "mean"):
    d = (input - target) ** 2
    if reduction == "mean":
        return mean(d)
    if reduction == "sum":
        return d.sum()
    if reduction == "none":
        return d
    raise ValueError(f"mse_loss: unknown reduction {reduction!r}")
