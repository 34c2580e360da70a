"""Activation modules: ReLU, GELU, SiLU, Tanh, Sigmoid, LeakyReLU, Softmax, LogSoftmax.

`inplace=True` (ReLU, SiLU, LeakyReLU) is accepted so PyTorch code runs unchanged,
but the result is computed out of place: the values are the same, the input is not
overwritten.
"""
from __future__ import annotations

from ...ops import elementwise as _ew
from ...ops import reduce as _rd
from ..module import Module


def _inplace_repr(inplace: bool, lead: str = "") -> str:
    if not inplace:
        return ""
    return lead + "inplace=True"


class ReLU(Module):
    """`max(x, 0)` elementwise."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        """relu(input)."""
        return _ew.relu(input)

    def extra_repr(self) -> str:
        """`inplace=True` when set."""
        return _inplace_repr(self.inplace)


class GELU(Module):
    """Gaussian error linear unit; `approximate` is "none" (exact, erf) or "tanh"."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got "
                             f"{approximate!r}")
        self.approximate = approximate

    def forward(self, input):
        """gelu(input, approximate)."""
        return _ew.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        """`approximate='…'`."""
        return f"approximate={self.approximate!r}"


class SiLU(Module):
    """`x * sigmoid(x)` elementwise (swish)."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        """silu(input)."""
        return _ew.silu(input)

    def extra_repr(self) -> str:
        """`inplace=True` when set."""
        return _inplace_repr(self.inplace)


class Tanh(Module):
    """tanh elementwise."""

    def forward(self, input):
        """tanh(input)."""
        return _ew.tanh(input)


class Sigmoid(Module):
    """`1 / (1 + exp(-x))` elementwise."""

    def forward(self, input):
        """sigmoid(input)."""
        return _ew.sigmoid(input)


class LeakyReLU(Module):
    """`x` where x > 0, else `negative_slope * x` (default slope 0.01)."""

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, input):
        """leaky_relu(input, negative_slope)."""
        return _ew.leaky_relu(input, self.negative_slope)

    def extra_repr(self) -> str:
        """`negative_slope=…` (and `inplace=True` when set)."""
        return f"negative_slope={self.negative_slope}" + _inplace_repr(self.inplace, ", ")


class Softmax(Module):
    """softmax over dimension `dim` (required in practice; PyTorch's default None is
    refused here rather than guessed)."""

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input):
        """softmax(input, dim)."""
        if self.dim is None:
            raise ValueError("Softmax: give dim explicitly (Softmax(dim=-1))")
        return _rd.softmax(input, axis=self.dim)

    def extra_repr(self) -> str:
        """`dim=…`."""
        return f"dim={self.dim}"


class LogSoftmax(Module):
    """log(softmax) over dimension `dim`, computed stably."""

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input):
        """log_softmax(input, dim)."""
        if self.dim is None:
            raise ValueError("LogSoftmax: give dim explicitly (LogSoftmax(dim=-1))")
        return _rd.log_softmax(input, axis=self.dim)

    def extra_repr(self) -> str:
        """`dim=…`."""
        return f"dim={self.dim}"
