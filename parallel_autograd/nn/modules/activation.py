"""Activation modules: ReLU, GELU, SiLU, Tanh, Sigmoid, LeakyReLU, Softmax, LogSoftmax,
Softplus, Softsign, Mish, ELU, SELU, CELU, Hardtanh, Hardsigmoid, Hardswish, LogSigmoid,
PReLU (a learnable slope) and GLU.

`inplace=True` writes the result into the input and returns it, as PyTorch's (recorded
when grad is involved; a leaf that requires grad is refused): `nn.functional`'s in-place
forms, ops/writes/inplace.py `inplace_form`.
"""
from __future__ import annotations

import numpy as np

from ...ops import activations as _act
from .. import functional as F
from ...ops import pointwise as _pw
from ...ops import reduce as _rd
from .._extras import softmin as _softmin
from ..module import Module
from ..parameter import Parameter
from ._utils import float_dtype, positive_int


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
        return F.relu(input, inplace=self.inplace)

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
        return _act.gelu(input, approximate=self.approximate)

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
        return F.silu(input, inplace=self.inplace)

    def extra_repr(self) -> str:
        """`inplace=True` when set."""
        return _inplace_repr(self.inplace)


class Tanh(Module):
    """tanh elementwise."""

    def forward(self, input):
        """tanh(input)."""
        return _pw.tanh(input)


class Sigmoid(Module):
    """`1 / (1 + exp(-x))` elementwise."""

    def forward(self, input):
        """sigmoid(input)."""
        return _act.sigmoid(input)


class LeakyReLU(Module):
    """`x` where x > 0, else `negative_slope * x` (default slope 0.01)."""

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, input):
        """leaky_relu(input, negative_slope)."""
        return F.leaky_relu(input, self.negative_slope, inplace=self.inplace)

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


class Softplus(Module):
    """log(1 + exp(beta x)) / beta, x itself where beta x > threshold."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input):
        """softplus(input, beta, threshold)."""
        return _act.softplus(input, self.beta, self.threshold)

    def extra_repr(self) -> str:
        """`beta=…, threshold=…`."""
        return f"beta={self.beta}, threshold={self.threshold}"


class Softsign(Module):
    """x / (1 + |x|) elementwise."""

    def forward(self, input):
        """softsign(input)."""
        return _act.softsign(input)


class Mish(Module):
    """x tanh(softplus(x)) elementwise."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        """mish(input)."""
        return F.mish(input, inplace=self.inplace)

    def extra_repr(self) -> str:
        """`inplace=True` when set."""
        return _inplace_repr(self.inplace)


class ELU(Module):
    """x where x > 0, else alpha (exp(x) - 1)."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input):
        """elu(input, alpha)."""
        return F.elu(input, self.alpha, inplace=self.inplace)

    def extra_repr(self) -> str:
        """`alpha=…` (and `inplace=True` when set)."""
        return f"alpha={self.alpha}" + _inplace_repr(self.inplace, ", ")


class SELU(Module):
    """scale * elu(x, alpha) with PyTorch's fixed constants (self-normalizing)."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        """selu(input)."""
        return F.selu(input, inplace=self.inplace)

    def extra_repr(self) -> str:
        """`inplace=True` when set."""
        return _inplace_repr(self.inplace)


class CELU(Module):
    """x where x > 0, else alpha (exp(x / alpha) - 1)."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input):
        """celu(input, alpha)."""
        return F.celu(input, self.alpha, inplace=self.inplace)

    def extra_repr(self) -> str:
        """`alpha=…` (and `inplace=True` when set)."""
        return f"alpha={self.alpha}" + _inplace_repr(self.inplace, ", ")


class Hardtanh(Module):
    """x clamped to [min_val, max_val] (default [-1, 1])."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0,
                 inplace: bool = False) -> None:
        super().__init__()
        if min_val > max_val:
            raise ValueError(f"Hardtanh: min_val ({min_val}) cannot be greater than "
                             f"max_val ({max_val})")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, input):
        """hardtanh(input, min_val, max_val)."""
        return F.hardtanh(input, self.min_val, self.max_val, inplace=self.inplace)

    def extra_repr(self) -> str:
        """`min_val=…, max_val=…` (and `inplace=True` when set)."""
        return (f"min_val={self.min_val}, max_val={self.max_val}"
                + _inplace_repr(self.inplace, ", "))


class Hardsigmoid(Module):
    """relu6(x + 3) / 6 elementwise."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        """hardsigmoid(input)."""
        return F.hardsigmoid(input, inplace=self.inplace)

    def extra_repr(self) -> str:
        """`inplace=True` when set."""
        return _inplace_repr(self.inplace)


class Hardswish(Module):
    """x relu6(x + 3) / 6 elementwise."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        """hardswish(input)."""
        return F.hardswish(input, inplace=self.inplace)

    def extra_repr(self) -> str:
        """`inplace=True` when set."""
        return _inplace_repr(self.inplace)


class LogSigmoid(Module):
    """log(sigmoid(x)) elementwise, computed without overflow."""

    def forward(self, input):
        """logsigmoid(input)."""
        return _act.logsigmoid(input)


class PReLU(Module):
    """x where x > 0, else weight * x, with a learnable `weight`: one slope shared by
    all channels (`num_parameters=1`) or one per channel (dimension 1 of the input),
    each initialised to `init` (PyTorch's `nn.PReLU`; `dtype` default `pa.get_default_dtype()`)."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, dtype=None) -> None:
        super().__init__()
        self.num_parameters = positive_int(num_parameters, "num_parameters", "PReLU")
        self.init = init
        self.weight = Parameter(np.full((self.num_parameters,), init,
                                        dtype=float_dtype(dtype, "PReLU")))

    def reset_parameters(self) -> None:
        """Every slope back to `init`."""
        self.weight._data[...] = self.init

    def forward(self, input):
        """prelu(input, weight)."""
        return _act.prelu(input, self.weight)

    def extra_repr(self) -> str:
        """`num_parameters=…`."""
        return f"num_parameters={self.num_parameters}"


class GLU(Module):
    """a * sigmoid(b), a and b the halves of the input along `dim` (default -1)."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input):
        """glu(input, dim)."""
        return _act.glu(input, self.dim)

    def extra_repr(self) -> str:
        """`dim=…`."""
        return f"dim={self.dim}"


class ReLU6(Hardtanh):
    """min(max(0, x), 6) elementwise: PyTorch's `nn.ReLU6`, a `Hardtanh(0, 6)`."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__(0.0, 6.0, inplace)

    def extra_repr(self) -> str:
        """`inplace=True` when set, else nothing."""
        return _inplace_repr(self.inplace, "")


class Softmin(Module):
    """softmax(-x) over `dim` (PyTorch's `nn.Softmin`; dim=None: torch's implicit
    dimension, with its warning)."""

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input):
        """softmin(input, dim)."""
        return _softmin(input, self.dim, _stacklevel=5)

    def extra_repr(self) -> str:
        """`dim=…`."""
        return f"dim={self.dim}"
