"""`pa.linalg`: torch.linalg's names, signatures and gradients on numpy's LAPACK.

    solve inv det slogdet cholesky qr eigh svd svdvals pinv lstsq matrix_power
    norm vector_norm matrix_norm cross matmul

The ops are declared in `ops/linalg/` (one declaration each; their docstrings say what
they compute and differentiate); this module is their face: every op declared with
`module="torch.linalg"` is exported here from the registry, with the result types and
`LinAlgError` (a RuntimeError, as `torch.linalg.LinAlgError`).

Thread safety: pure functions of their arguments, like every op.
"""
from __future__ import annotations

from .ops import linalg as _ops  # noqa: F401  (declares the ops)
from .ops.linalg.checks import LinAlgError  # noqa: F401  (torch.linalg.LinAlgError)
from .ops.linalg.decompositions import (EighResult, LstsqResult,  # noqa: F401  (result types)
                                        QRResult, SlogdetResult, SVDResult)
from .primitive import exports as _exports

globals().update(_exports("torch.linalg"))

__all__ = sorted({"LinAlgError", "EighResult", "LstsqResult", "QRResult",  # noqa: PLE0605
                  "SlogdetResult", "SVDResult", *_exports("torch.linalg")})
