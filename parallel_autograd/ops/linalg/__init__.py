"""Linear algebra, one declaration per op (`primitive.defop` / `composite`):

- `products`: matmul and PyTorch's products built on it (mm bmm mv dot outer addmm addmv
  baddbmm kron diag trace) and cross;
- `decompositions`: torch.linalg's solvers and decompositions (inv solve det slogdet
  cholesky eigh svd svdvals qr pinv lstsq matrix_power);
- `norms`: vector_norm, matrix_norm, norm;
- `aliases`: the same ops under their other PyTorch names (torch.det, torch.inverse, ...,
  torch.linalg.cross);
- `checks`: what they share (argument checks with PyTorch's exception types, LinAlgError).

`pa.linalg` (parallel_autograd/linalg.py) is the face of torch.linalg's names; the torch
namespace's names come from the registry like every op's.
"""
from . import aliases, decompositions, norms, products  # noqa: F401  (declares the ops)
from .checks import LinAlgError
from .decompositions import (
                             EighResult,
                             LstsqResult,
                             QRResult,
                             SlogdetResult,
                             SVDResult,
                             cholesky,
                             det,
                             eigh,
                             inv,
                             lstsq,
                             matrix_power,
                             pinv,
                             qr,
                             slogdet,
                             solve,
                             svd,
                             svdvals,
)
from .norms import matrix_norm, norm, vector_norm
from .products import (
                             addmm,
                             addmv,
                             baddbmm,
                             bmm,
                             cross,
                             diag,
                             dot,
                             kron,
                             matmul,
                             mm,
                             mv,
                             outer,
                             trace,
)

__all__ = ["EighResult", "LinAlgError", "LstsqResult", "QRResult", "SVDResult", "SlogdetResult",
           "addmm", "addmv", "baddbmm", "bmm", "cholesky", "cross", "det", "diag", "dot", "eigh",
           "inv", "kron", "lstsq", "matmul", "matrix_norm", "matrix_power", "mm", "mv", "norm",
           "outer", "pinv", "qr", "slogdet", "solve", "svd", "svdvals", "trace", "vector_norm"]
