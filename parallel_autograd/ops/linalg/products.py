"""Products: `matmul` (numpy's and PyTorch's semantics: 1-D operands, broadcast batch
dimensions) and PyTorch's products built on it, `mm bmm mv dot outer (ger) addmm addmv
baddbmm kron diag trace`, and `cross`.

`matmul` is one declaration: its forward (BLAS, the output from the caching allocator), its
derivative as formulas (`g @ other^T`, `input^T @ g`, differentiable again) and the fused
kernels that run at first order (a `(..., n, k) @ (k, m)` product folds its batch into
the rows: one 2-D GEMM instead of a batched product with a broadcast operand, which numpy
runs much slower). `cross` is bilinear: its formulas are `cross` itself. The others are
composites of `matmul`, elementwise ops, `diagonal`/`diag_embed` and reshapes (their
gradients are those ops'); they check shapes first as PyTorch does (`mm` wants matrices,
`bmm` equal batch sizes: no broadcasting) and raise PyTorch's exception types: a shape or
dtype that does not fit is a RuntimeError naming the op (products do not promote dtypes).

Thread safety: pure functions of their arguments, like the other ops.
"""
from __future__ import annotations

import numpy as np

from ...costs import gemm_cost
from ...memory import matmul as _mm
from ...primitive import composite, defop
from ...tensor import Tensor
from .. import index as ix
from .. import reduce as R
from .. import shape as S
from .._common import dim as _dim
from ..forms import connect
from .checks import data, mT, same_dtype

__all__ = ["addmm", "addmv", "baddbmm", "bmm", "cross", "diag", "dot", "kron", "matmul", "mm",
           "mv", "outer", "trace"]


# ---- matmul ------------------------------------------------------------------------------
def _as_matrices(g, a, b):
    """Undo matmul's dropping of 1-D operand dims so both kernels see matrices."""
    if b.ndim == 1:          # b first: for vector @ vector, g is 0-d
        b = b[:, None]
        g = g[..., None]
    if a.ndim == 1:
        a = a[None, :]
        g = g[..., None, :]
    return g, a, b


def _folds(a, b) -> bool:
    # (..., n, k) @ (k, m): fold the batch dims into rows, one 2-D GEMM instead of a
    # batched product (numpy's batched matmul with a broadcast operand is much slower)
    return a.ndim > 2 and b.ndim == 2


def _rows(a):
    """`a` with its batch dimensions folded into rows (any of them may be 0)."""
    return a.reshape(S.fold((-1, a.shape[-1]), a.shape))


def _input_kernel(g, ans, input, other):
    a, b = np.asarray(input), np.asarray(other)
    if _folds(a, b):
        return _mm(_rows(g), b.T).reshape(a.shape)
    g2, _, b2 = _as_matrices(g, a, b)
    r = _mm(g2, np.swapaxes(b2, -1, -2))
    return r[..., 0, :] if a.ndim == 1 else r   # batch dims are summed by the node


def _other_kernel(g, ans, input, other):
    a, b = np.asarray(input), np.asarray(other)
    if _folds(a, b):
        return _mm(_rows(a).T, _rows(g))
    g2, a2, _ = _as_matrices(g, a, b)
    r = _mm(np.swapaxes(a2, -1, -2), g2)
    return r[..., 0] if b.ndim == 1 else r


def _input_formula(g, ans, input, other):
    """g @ other^T (1-D operands as matmul treats them)."""
    if np.ndim(input) == 1:
        if np.ndim(other) == 1:
            return g * other
        return S.squeeze(matmul(S.unsqueeze(g, -2), mT(other)), -2)
    if np.ndim(other) == 1:
        return S.unsqueeze(g, -1) * other
    return matmul(g, mT(other))


def _other_formula(g, ans, input, other):
    """input^T @ g, a batch folded into the rows as the kernel does."""
    na, nb = np.ndim(input), np.ndim(other)
    if nb == 1:
        if na == 1:
            return g * input
        return S.squeeze(matmul(mT(input), S.unsqueeze(g, -1)), -1)
    if na == 1:
        return S.unsqueeze(input, -1) * S.unsqueeze(g, -2)
    if na > 2 and nb == 2:
        k, m = np.shape(input)[-1], np.shape(g)[-1]
        return matmul(mT(S.reshape(input, (-1, k))), S.reshape(g, (-1, m)))
    return matmul(mT(input), g)


def _matmul_cost(ans, input, other) -> float:
    shape = np.shape(input)
    return gemm_cost(ans.size, shape[-1] if shape else 1)


def _shape_problem(sa: tuple, sb: tuple) -> str:
    """Why shapes `sa` @ `sb` cannot be multiplied (matmul's rules)."""
    shapes = f"shapes {sa} and {sb} cannot be multiplied"
    if not sa or not sb:
        return f"{shapes}: both operands need at least one dimension (a scalar is not a matrix)"
    k_b = sb[0] if len(sb) == 1 else sb[-2]
    if sa[-1] != k_b:
        which = "the only" if len(sb) == 1 else "the second-to-last"
        return (f"{shapes}: the last dimension of the first ({sa[-1]}) must equal "
                f"{which} dimension of the second ({k_b})")
    return (f"{shapes}: the batch dimensions {sa[:-2]} and {sb[:-2]} do not broadcast "
            f"against each other")


@defop(dtypes="numeric", inputs=("input", "other"), formula=(_input_formula, _other_formula),
       kernel=(_input_kernel, _other_kernel), method=True, also=("torch.linalg",),
       cost=_matmul_cost, threaded=True)
def matmul(input: Tensor, other: Tensor) -> Tensor:
    """The matrix product with PyTorch's (and numpy's) `matmul` semantics: 1-D operands
    (a vector is a row on the left, a column on the right, its dimension dropped from the
    result), batch dimensions broadcast. Both operands have the same dtype (no promotion,
    as PyTorch: RuntimeError). Multithreaded (BLAS) kernels, forward and backward."""
    a = input if type(input) is np.ndarray else np.asarray(input)
    b = other if type(other) is np.ndarray else np.asarray(other)
    if a.ndim == 0 or b.ndim == 0 or a.dtype != b.dtype:
        if a.ndim and b.ndim:
            raise RuntimeError(f"matmul: expected both operands to have the same dtype, but "
                               f"got: {a.dtype} != {b.dtype}")
        raise RuntimeError(f"matmul: {_shape_problem(a.shape, b.shape)}")
    try:
        return _mm(a, b)  # the output from the caching allocator when large
    except ValueError:  # numpy's gufunc text names neither shape: say what disagrees
        raise RuntimeError(f"matmul: {_shape_problem(a.shape, b.shape)}") from None


# ---- products with PyTorch's shape rules (composites of matmul) ------------------------------
def _ndim(x, n: int, op: str, what: str) -> tuple:
    s = np.shape(data(x))
    if len(s) != n:
        raise RuntimeError(f"{op}: {what} must be a {n}-D tensor, got {len(s)}-D")
    return s


def _mm_shapes(a, b, op: str, names=("mat1", "mat2")) -> tuple:
    sa, sb = _ndim(a, 2, op, names[0]), _ndim(b, 2, op, names[1])
    if sa[1] != sb[0]:
        raise RuntimeError(f"{op}: {names[0]} and {names[1]} shapes cannot be multiplied "
                           f"({sa[0]}x{sa[1]} and {sb[0]}x{sb[1]})")
    return sa[0], sb[1]


@composite(dtypes="numeric", method=True)
def mm(input: Tensor, mat2: Tensor) -> Tensor:
    """The matrix product of two matrices (no broadcasting, one dtype)."""
    _mm_shapes(input, mat2, "mm", ("input", "mat2"))
    same_dtype("mm", "input and mat2", data(input), data(mat2))
    return matmul(input, mat2)


def _bmm_shapes(a, b, op: str, names=("input", "mat2")) -> tuple:
    sa, sb = _ndim(a, 3, op, names[0]), _ndim(b, 3, op, names[1])
    if sa[0] != sb[0] or sa[2] != sb[1]:
        raise RuntimeError(f"{op}: shapes {sa} and {sb} cannot be multiplied: the batch "
                           f"sizes must be equal and {names[0]}'s columns {names[1]}'s rows")
    return sa[0], sa[1], sb[2]


@composite(dtypes="numeric", method=True)
def bmm(input: Tensor, mat2: Tensor) -> Tensor:
    """Batched matrix products of (b, n, k) and (b, k, m) tensors (no broadcasting)."""
    _bmm_shapes(input, mat2, "bmm")
    same_dtype("bmm", "input and mat2", data(input), data(mat2))
    return matmul(input, mat2)


def _mv_shape(a, v, op: str) -> int:
    sa, sv = _ndim(a, 2, op, "mat"), _ndim(v, 1, op, "vec")
    if sa[1] != sv[0]:
        raise RuntimeError(f"{op}: size mismatch, mat {sa[0]}x{sa[1]} and vec {sv[0]}")
    return sa[0]


@composite(dtypes="numeric", method=True)
def mv(input: Tensor, vec: Tensor) -> Tensor:
    """The product of a matrix and a vector."""
    _mv_shape(input, vec, "mv")
    same_dtype("mv", "input and vec", data(input), data(vec))
    return matmul(input, vec)


@composite(dtypes="numeric", method=True)
def dot(input: Tensor, tensor: Tensor) -> Tensor:
    """The inner product of two 1-D tensors of the same size and dtype (a 0-d tensor)."""
    sa, sb = _ndim(input, 1, "dot", "input"), _ndim(tensor, 1, "dot", "tensor")
    if sa != sb:
        raise RuntimeError(f"dot: the vectors must have the same size, got {sa[0]} and "
                           f"{sb[0]}")
    same_dtype("dot", "both vectors", data(input), data(tensor))
    return matmul(input, tensor)


@composite(method=True, aliases=("ger",))
def outer(input: Tensor, vec2: Tensor) -> Tensor:
    """The outer product of two 1-D tensors: `out[i, j] = input[i] * vec2[j]`."""
    _ndim(input, 1, "outer", "input")
    _ndim(vec2, 1, "outer", "vec2")
    return S.unsqueeze(input, 1) * S.unsqueeze(vec2, 0)


def _scaled_sum(input, product, beta, alpha, shape: tuple, op: str) -> Tensor:
    """`beta * input + alpha * product`; input is ignored when beta is 0 (PyTorch: its NaNs
    and infs do not propagate; its gradient is 0) and must broadcast to the product's
    `shape`."""
    si = np.shape(data(input))
    try:
        ok = np.broadcast_shapes(si, shape) == shape
    except ValueError:
        ok = False
    if not ok:
        raise RuntimeError(f"{op}: input of shape {si} does not broadcast to the product's "
                           f"shape {shape}")
    if alpha != 1:
        product = product * alpha
    if beta == 0:   # input's gradient is 0 (a zero tensor, as PyTorch's), not None
        return connect(product, input)
    x = input if isinstance(input, Tensor) else data(input)
    return (x if beta == 1 else x * beta) + product


@composite(dtypes="numeric", method=True)
def addmm(input: Tensor, mat1: Tensor, mat2: Tensor, *, beta=1, alpha=1) -> Tensor:
    """`beta * input + alpha * (mat1 @ mat2)` (input broadcast to the product's shape)."""
    shape = _mm_shapes(mat1, mat2, "addmm")
    same_dtype("addmm", "input, mat1 and mat2", data(input), data(mat1), data(mat2))
    return _scaled_sum(input, matmul(mat1, mat2), beta, alpha, shape, "addmm")


@composite(dtypes="numeric", method=True)
def addmv(input: Tensor, mat: Tensor, vec: Tensor, *, beta=1, alpha=1) -> Tensor:
    """`beta * input + alpha * (mat @ vec)`."""
    n = _mv_shape(mat, vec, "addmv")
    same_dtype("addmv", "input, mat and vec", data(input), data(mat), data(vec))
    return _scaled_sum(input, matmul(mat, vec), beta, alpha, (n,), "addmv")


@composite(dtypes="numeric", method=True)
def baddbmm(input: Tensor, batch1: Tensor, batch2: Tensor, *, beta=1, alpha=1) -> Tensor:
    """`beta * input + alpha * (batch1 @ batch2)` for (b, n, k) and (b, k, m) batches."""
    shape = _bmm_shapes(batch1, batch2, "baddbmm", ("batch1", "batch2"))
    same_dtype("baddbmm", "input, batch1 and batch2", data(input), data(batch1), data(batch2))
    return _scaled_sum(input, matmul(batch1, batch2), beta, alpha, shape, "baddbmm")


# ---- cross, kron -----------------------------------------------------------------------------
def _cross_dim(sa: tuple, sb: tuple, dim) -> int:
    """The dimension of the 3-vectors (PyTorch's rules), checked."""
    if not sa or not sb:
        raise RuntimeError(f"cross: inputs must have at least one dimension (of length 3), "
                           f"got shapes {sa} and {sb}")
    if len(sa) != len(sb):
        raise RuntimeError(f"cross: inputs must have the same number of dimensions, got "
                           f"{len(sa)} and {len(sb)}")
    try:
        shape = np.broadcast_shapes(sa, sb)
    except ValueError:
        raise RuntimeError(f"cross: shapes {sa} and {sb} do not broadcast") from None
    if dim is None:
        threes = [d for d, n in enumerate(shape) if n == 3]
        if not threes:
            raise RuntimeError(f"cross: no dimension of size 3 in input (shape {shape})")
        return threes[0]
    d = _dim(dim, len(shape), "cross")
    if (sa[d], sb[d]) != (3, 3):
        raise RuntimeError(f"cross: inputs dimension {d} must have length 3, got {sa[d]} "
                           f"and {sb[d]}")
    return d


@defop(dtypes="numeric", inputs=("input", "other"),
       formula=(lambda g, ans, input, other, dim: cross(other, g, dim),
                lambda g, ans, input, other, dim: cross(g, input, dim)),
       method=True)
def cross(input: Tensor, other: Tensor, dim: int | None = None) -> Tensor:
    """The cross product of 3-vectors along `dim` (None: the first dimension of size 3, as
    PyTorch's `torch.cross`); the inputs have the same number of dimensions and dtype and
    broadcast in the others. Bilinear: its gradients are cross products again."""
    a, b = np.asarray(input), np.asarray(other)
    d = _cross_dim(a.shape, b.shape, dim)
    same_dtype("cross", "input and other", a, b)
    a, b = np.broadcast_arrays(a, b)
    return np.cross(a, b, axis=d)


@composite(method=True)
def kron(input: Tensor, other: Tensor) -> Tensor:
    """The Kronecker product: blocks `input[i, j] * other` (any dimensions; the fewer
    are padded with leading 1s)."""
    sa, sb = np.shape(data(input)), np.shape(data(other))
    n = max(len(sa), len(sb))
    sa, sb = (1,) * (n - len(sa)) + sa, (1,) * (n - len(sb)) + sb
    a = S.reshape(input, tuple(v for p in sa for v in (p, 1)))
    b = S.reshape(other, tuple(v for q in sb for v in (1, q)))
    return S.reshape(a * b, tuple(p * q for p, q in zip(sa, sb)))


# ---- diag, trace -----------------------------------------------------------------------------
@composite(method=True)
def diag(input: Tensor, diagonal: int = 0) -> Tensor:
    """A 1-D tensor: the square matrix with it on the `diagonal`-th diagonal; a matrix:
    its `diagonal`-th diagonal (1-D), a copy as in PyTorch (`diagonal` is the view)."""
    nd = np.ndim(data(input))
    if nd == 1:
        return ix.diag_embed(input, offset=diagonal)
    if nd == 2:  # a copy: a write into the result must not reach the matrix (PyTorch's)
        return S.clone(ix.diagonal(input, offset=diagonal))
    raise RuntimeError(f"diag: supports 1-D or 2-D tensors, got {nd}-D")


@composite(dtypes="numeric", method=True)
def trace(input: Tensor) -> Tensor:
    """The sum of a matrix's main diagonal (integers sum in int64)."""
    _ndim(input, 2, "trace", "input")
    return R.sum(ix.diagonal(input))
