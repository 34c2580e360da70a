"""Products with PyTorch's names and shape rules: `mm bmm mv dot outer (ger) addmm addmv
baddbmm cross kron matrix_power diag trace`.

All but `cross` are compositions of `matmul`, elementwise ops, `diagonal`/`diag_embed` and
reshapes, so their gradients (and create_graph twins) are those ops'. They check shapes
first, as PyTorch does (`mm` wants matrices, `bmm` equal batch sizes: no broadcasting), and
raise ValueError naming the method. `cross` is one node: forward numpy's cross on the
broadcast inputs; rules cross(other, g) and cross(g, input), twins the op itself (it is
bilinear). `matrix_power` squares and multiplies in PyTorch's order (n < 0: of the
inverse); n = 0 gives identities whose gradient is 0.

Thread safety: pure functions of their arguments, like the other ops.
"""
from __future__ import annotations

import numpy as np

from ..primitive import primitive
from ..tensor import Tensor
from . import elementwise as E
from . import index as ix
from . import reduce as R
from . import shape as S
from .graph import depends_on
from .linalg import matmul

__all__ = ["mm", "bmm", "mv", "dot", "outer", "addmm", "addmv", "baddbmm", "cross", "kron",
           "matrix_power", "diag", "trace", "METHODS"]


def _shape(x) -> tuple:
    return np.shape(x.data if isinstance(x, Tensor) else x)


def _ndim(x, n: int, op: str, what: str) -> tuple:
    s = _shape(x)
    if len(s) != n:
        raise ValueError(f"{op}: {what} must be a {n}-D tensor, got {len(s)}-D")
    return s


def _mm_shapes(a, b, op: str, names=("mat1", "mat2")) -> tuple:
    sa, sb = _ndim(a, 2, op, names[0]), _ndim(b, 2, op, names[1])
    if sa[1] != sb[0]:
        raise ValueError(f"{op}: {names[0]} and {names[1]} shapes cannot be multiplied "
                         f"({sa[0]}x{sa[1]} and {sb[0]}x{sb[1]})")
    return sa[0], sb[1]


def mm(input, mat2) -> Tensor:
    """The matrix product of two matrices (no broadcasting)."""
    _mm_shapes(input, mat2, "mm", ("input", "mat2"))
    return matmul(input, mat2)


def _bmm_shapes(a, b, op: str, names=("input", "mat2")) -> tuple:
    sa, sb = _ndim(a, 3, op, names[0]), _ndim(b, 3, op, names[1])
    if sa[0] != sb[0] or sa[2] != sb[1]:
        raise ValueError(f"{op}: shapes {sa} and {sb} cannot be multiplied: the batch sizes "
                         f"must be equal and {names[0]}'s columns {names[1]}'s rows")
    return sa[0], sa[1], sb[2]


def bmm(input, mat2) -> Tensor:
    """Batched matrix products of (b, n, k) and (b, k, m) tensors (no broadcasting)."""
    _bmm_shapes(input, mat2, "bmm")
    return matmul(input, mat2)


def _mv_shape(a, v, op: str) -> int:
    sa, sv = _ndim(a, 2, op, "mat"), _ndim(v, 1, op, "vec")
    if sa[1] != sv[0]:
        raise ValueError(f"{op}: size mismatch, mat {sa[0]}x{sa[1]} and vec {sv[0]}")
    return sa[0]


def mv(input, vec) -> Tensor:
    """The product of a matrix and a vector."""
    _mv_shape(input, vec, "mv")
    return matmul(input, vec)


def dot(input, other) -> Tensor:
    """The inner product of two 1-D tensors of the same size and dtype (a 0-d tensor)."""
    sa, sb = _ndim(input, 1, "dot", "input"), _ndim(other, 1, "dot", "other")
    if sa != sb:
        raise ValueError(f"dot: the vectors must have the same size, got {sa[0]} and {sb[0]}")
    da, db = (np.asarray(x.data if isinstance(x, Tensor) else x).dtype for x in (input, other))
    if da != db:
        raise TypeError(f"dot: expected both vectors to have the same dtype, got {da} and {db}")
    return matmul(input, other)


def outer(input, vec2) -> Tensor:
    """The outer product of two 1-D tensors: `out[i, j] = input[i] * vec2[j]`."""
    _ndim(input, 1, "outer", "input")
    _ndim(vec2, 1, "outer", "vec2")
    return E.mul(S.unsqueeze(input, 1), S.unsqueeze(vec2, 0))


def _scaled_sum(input, product, beta, alpha, shape: tuple, op: str) -> Tensor:
    """`beta * input + alpha * product`; input is ignored when beta is 0 (PyTorch: its NaNs
    and infs do not propagate) and must broadcast to the product's `shape`."""
    try:
        ok = np.broadcast_shapes(_shape(input), shape) == shape
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{op}: input of shape {_shape(input)} does not broadcast to the "
                         f"product's shape {shape}")
    if alpha != 1:
        product = E.mul(product, alpha)
    if beta == 0:
        return product
    return E.add(input if beta == 1 else E.mul(input, beta), product)


def addmm(input, mat1, mat2, *, beta=1, alpha=1) -> Tensor:
    """`beta * input + alpha * (mat1 @ mat2)` (input broadcast to the product's shape)."""
    shape = _mm_shapes(mat1, mat2, "addmm")
    return _scaled_sum(input, matmul(mat1, mat2), beta, alpha, shape, "addmm")


def addmv(input, mat, vec, *, beta=1, alpha=1) -> Tensor:
    """`beta * input + alpha * (mat @ vec)`."""
    n = _mv_shape(mat, vec, "addmv")
    return _scaled_sum(input, matmul(mat, vec), beta, alpha, (n,), "addmv")


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1) -> Tensor:
    """`beta * input + alpha * (batch1 @ batch2)` for (b, n, k) and (b, k, m) batches."""
    shape = _bmm_shapes(batch1, batch2, "baddbmm", ("batch1", "batch2"))
    return _scaled_sum(input, matmul(batch1, batch2), beta, alpha, shape, "baddbmm")


# ---- cross, kron ---------------------------------------------------------------------------------
def _cross_forward(a, b, dim):
    a, b = np.broadcast_arrays(a, b)
    return np.cross(a, b, axis=dim)


_cross = primitive("cross", _cross_forward,
                   lambda g, ans, a, b, dim: _cross_forward(b, g, dim),
                   lambda g, ans, a, b, dim: _cross_forward(g, a, dim))
_cross.vjps[0].graph = lambda g, ans, a, b, dim: _cross(b, g, dim=dim)
_cross.vjps[1].graph = lambda g, ans, a, b, dim: _cross(g, a, dim=dim)


def cross(input, other, dim: int | None = None) -> Tensor:
    """The cross product of 3-vectors along `dim` (None: the first dimension of size 3, as
    PyTorch's `Tensor.cross`); the inputs have the same number of dimensions and broadcast
    in the others."""
    sa, sb = _shape(input), _shape(other)
    if len(sa) != len(sb):
        raise ValueError(f"cross: inputs must have the same number of dimensions, got "
                         f"{len(sa)} and {len(sb)}")
    try:
        shape = np.broadcast_shapes(sa, sb)
    except ValueError:
        raise ValueError(f"cross: shapes {sa} and {sb} do not broadcast") from None
    if dim is None:
        threes = [d for d, n in enumerate(shape) if n == 3]
        if not threes:
            raise ValueError(f"cross: no dimension of size 3 in input (shape {shape})")
        d = threes[0]
    else:
        d = ix._dim(dim, len(shape), "cross")
    if (sa[d], sb[d]) != (3, 3):
        raise ValueError(f"cross: inputs dimension {d} must have length 3, got {sa[d]} and "
                         f"{sb[d]}")
    return _cross(input, other, dim=d)


def kron(input, other) -> Tensor:
    """The Kronecker product: blocks `input[i, j] * other` (any dimensions; the fewer
    are padded with leading 1s)."""
    sa, sb = _shape(input), _shape(other)
    n = max(len(sa), len(sb))
    sa, sb = (1,) * (n - len(sa)) + sa, (1,) * (n - len(sb)) + sb
    a = S.reshape(input, tuple(v for p in sa for v in (p, 1)))
    b = S.reshape(other, tuple(v for q in sb for v in (1, q)))
    return S.reshape(E.mul(a, b), tuple(p * q for p, q in zip(sa, sb)))


# ---- matrix_power, diag, trace -------------------------------------------------------------------
def _identity(input, shape: tuple) -> Tensor:
    x = input.data if isinstance(input, Tensor) else np.asarray(input)
    eye = np.broadcast_to(np.eye(shape[-1], dtype=x.dtype), shape).copy()
    out = depends_on(eye, input)      # gradient 0, part of the graph (PyTorch)
    return out if isinstance(out, Tensor) else Tensor._wrap(out)


def matrix_power(input, n: int) -> Tensor:
    """The `n`-th power of square matrices (batches allowed): n = 0 the identity, n < 0 a
    power of the inverse; computed by repeated squaring in PyTorch's order."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"matrix_power: n must be an int, got {n!r}")
    shape = _shape(input)
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise ValueError(f"matrix_power: A must be batches of square matrices, got shape "
                         f"{shape}")
    if n == 0:
        return _identity(input, shape)
    a, n = input, int(n)
    if n < 0:
        from ..linalg import inverse   # late: pa.linalg builds on the ops
        a, n = inverse(a), -n
    if n == 1:
        return S.clone(a)
    if n <= 3:
        aa = matmul(a, a)
        return aa if n == 2 else matmul(aa, a)
    z = result = None
    while n > 0:                      # PyTorch's binary decomposition
        bit, n = n % 2, n // 2
        z = a if z is None else matmul(z, z)
        if bit:
            result = z if result is None else matmul(result, z)
    return result


def diag(input, diagonal: int = 0) -> Tensor:
    """A 1-D tensor: the square matrix with it on the `diagonal`-th diagonal; a matrix:
    its `diagonal`-th diagonal (1-D), a copy as in PyTorch (`diagonal` is the view)."""
    nd = len(_shape(input))
    if nd == 1:
        return ix.diag_embed(input, offset=diagonal)
    if nd == 2:  # a copy: a write into the result must not reach the matrix (PyTorch's)
        return S.clone(ix.diagonal(input, offset=diagonal))
    raise ValueError(f"diag: supports 1-D or 2-D tensors, got {nd}-D")


def trace(input) -> Tensor:
    """The sum of a matrix's main diagonal (integers sum in int64)."""
    _ndim(input, 2, "trace", "input")
    return R.sum(ix.diagonal(input))


METHODS = {
    "mm": mm, "bmm": bmm, "mv": mv, "dot": dot, "outer": outer, "ger": outer,
    "addmm": addmm, "addmv": addmv, "baddbmm": baddbmm, "cross": cross, "kron": kron,
    "matrix_power": matrix_power, "diag": diag, "trace": trace,
}
