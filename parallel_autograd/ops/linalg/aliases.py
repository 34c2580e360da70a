"""The family's ops under their other PyTorch names, with those names' parameters:
`torch.det`, `torch.slogdet`, `torch.inverse`, `torch.pinverse` and `torch.matrix_power`
(and their Tensor methods) for torch.linalg's det, slogdet, inv, pinv and matrix_power;
`torch.linalg.cross` for `torch.cross` (dim=-1 by default, keyword only). Composites:
each calls the op it names, which records the node.

Thread safety: pure functions of their arguments.
"""
from __future__ import annotations

from ...primitive import composite
from ...tensor import Tensor
from . import decompositions as D
from . import products

__all__ = ["cross", "det", "inverse", "matrix_power", "pinverse", "slogdet"]


@composite(method=True)
def det(input: Tensor) -> Tensor:
    """torch.det / Tensor.det: `linalg.det`, the determinant of square matrices."""
    return D.det(input)


@composite(method=True)
def slogdet(input: Tensor) -> D.SlogdetResult:
    """torch.slogdet / Tensor.slogdet: `linalg.slogdet`, (sign, logabsdet) of the
    determinant."""
    return D.slogdet(input)


@composite(method=True)
def inverse(input: Tensor) -> Tensor:
    """torch.inverse / Tensor.inverse: `linalg.inv`."""
    return D.inv(input)


@composite(method=True)
def pinverse(input: Tensor, rcond: float = 1e-15) -> Tensor:
    """torch.pinverse / Tensor.pinverse: `linalg.pinv` with rtol=rcond."""
    return D.pinv(input, rtol=rcond)


@composite(method=True)
def matrix_power(input: Tensor, n: int) -> Tensor:
    """torch.matrix_power / Tensor.matrix_power: `linalg.matrix_power`, the `n`-th power of
    square matrices (n = 0 the identity, n < 0 a power of the inverse)."""
    return D.matrix_power(input, n)


@composite(dtypes="numeric", module="torch.linalg")
def cross(input: Tensor, other: Tensor, *, dim: int = -1) -> Tensor:
    """torch.linalg.cross: `torch.cross` along `dim` (default the last; the inputs have the
    same number of dimensions and broadcast in the others)."""
    return products.cross(input, other, dim)
