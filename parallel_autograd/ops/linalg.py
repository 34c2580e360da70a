"""Matrix products (numpy `matmul` semantics, batch dimensions broadcast)."""
from __future__ import annotations

import numpy as np

from ..engine.cost import gemm_cost
from ..memory import matmul as _mm
from ..primitive import primitive
from .shape import fold


def _as_matrices(g, a, b):
    """Undo matmul's dropping of 1-D operand dims so both rules see matrices."""
    if b.ndim == 1:          # b first: for vector @ vector, g is 0-d
        b = b[:, None]
        g = g[..., None]
    if a.ndim == 1:
        a = a[None, :]
        g = g[..., None, :]
    return g, a, b


def _folds(a, b):
    # (..., n, k) @ (k, m): fold the batch dims into rows, one 2-D GEMM instead of a
    # batched product (numpy's batched matmul with a broadcast operand is much slower)
    return a.ndim > 2 and b.ndim == 2


def _rows(a):
    """`a` with its batch dimensions folded into rows (any of them may be 0)."""
    return a.reshape(fold((-1, a.shape[-1]), a.shape))


def _matmul_vjp_a(g, ans, a, b):
    if _folds(a, b):
        return _mm(_rows(g), b.T).reshape(a.shape)
    g2, a2, b2 = _as_matrices(g, a, b)
    r = _mm(g2, np.swapaxes(b2, -1, -2))
    return r[..., 0, :] if a.ndim == 1 else r   # batch dims are summed by the node


def _matmul_vjp_b(g, ans, a, b):
    if _folds(a, b):
        return _mm(_rows(a).T, _rows(g))
    g2, a2, b2 = _as_matrices(g, a, b)
    r = _mm(np.swapaxes(a2, -1, -2), g2)
    return r[..., 0] if b.ndim == 1 else r


def _cost(ans, a, b):
    return gemm_cost(ans.size, a.shape[-1] if a.ndim else 1)


def _forward(a, b):
    try:
        return _mm(a, b)  # the output from the caching allocator when large
    except ValueError:  # numpy's gufunc text names neither shape: say what disagrees
        raise ValueError(_shape_problem(np.shape(a), np.shape(b))) from None


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


matmul = primitive("matmul", _forward, _matmul_vjp_a, _matmul_vjp_b, cost=_cost,
                   threaded=True)
matmul.__doc__ = """Matrix product with numpy's `matmul` semantics (1-D operands, broadcast
batch dimensions); multithreaded (BLAS) kernels, forward and backward."""
