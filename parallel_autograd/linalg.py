"""`pa.linalg`: torch.linalg's names, signatures and gradients on numpy's LAPACK.

    solve inv det slogdet cholesky qr eigh svd svdvals pinv lstsq
    norm vector_norm matrix_norm (and matmul)

Every op takes batches of matrices (leading dimensions, as torch; `solve` and `lstsq`
broadcast A's and B's batch dimensions against each other) in float32 or float64, and
raises a clear error naming the op (a `LinAlgError`, numpy's, for singular or
non-positive-definite input) before anything is recorded.

Gradients (the standard matrix calculus results: Giles 2008, "An extended collection of
matrix derivative results"; Murray 2016 for the Cholesky factor; torch's own formulas,
whose conventions they follow):

- inv: -A^-T g A^-T; solve: gB = A^-T gX, gA = -gB X^T; det: g det(A) A^-T, and for a
  singular A the cofactor matrix from the SVD (torch 2.13 returns zeros there);
  slogdet: g A^-T through `logabsdet` (`sign` has no gradient).
- cholesky: A = L L^T, gA = L^-T Phi(L^T gL) L^-1 with Phi the symmetric part built from
  the lower triangle, diagonal halved (a symmetric gA, as torch).
- eigh: gA = Q (diag(gL) + skew(Q^T gQ) / (l_j - l_i)) Q^T; svd: torch's formula with
  1 / (s_j^2 - s_i^2) and the (I - U U^T) gU S^-1 term of tall (and wide) matrices. With
  full_matrices=True the gradient flows through the first min(m, n) columns of U (rows
  of Vh) only, as in torch. Eigen- and singular vectors are defined up to sign: only
  functions invariant to that have a gradient, and it needs distinct eigenvalues
  (singular values, nonzero for the vector terms).
- qr (mode='reduced', or 'complete' with m <= n): (gQ + Q copyltu(M)) R^-T with
  M = R gR^T - gQ^T Q; for m < n on the first m columns, plus Q gR2 for the rest.
- pinv: torch's pinv_backward (constant rank); lstsq: through `solution` only, as
  X = pinv(A) B (full-rank A); residuals, rank and singular_values have no gradient.
- vector_norm: torch.norm's op (`ops/scan.py`, torch's norm_backward: ties of the
  inf-norms share equally; 0 where the norm is 0); matrix_norm and norm are compositions
  of vector_norm, svdvals, abs, sum, max and min, so every order works through theirs.

Multi-output ops (eigh, svd, qr) record one node per output, each with the part of the
gradient that comes from that output: the gradient is linear in the output gradients,
so the engine's sum of the parts is the whole, and an unused output costs nothing.

Higher orders: each rule has a differentiable twin written with the package's ops and
these ops themselves (inv's twin uses matmul and inv; eigh's recomputes nothing: it
records the saved eigenvalues and vectors again as outputs of the same input), so
`create_graph=True` works to any order where the derivative exists.

Thread safety: pure functions of their arguments, like every op's rules.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .costs import gemm_cost
from .grad_mode import is_grad_enabled
from .memory import empty, empty_like
from .memory import matmul as _mm
from .ops.forms import graph_input
from .ops import elementwise as E
from .ops import reduce as R
from .ops import shape as S
from .ops.graph import cast
from .ops.linalg import matmul
from .ops.scan import _norm_op
from .primitive import record
from .tensor import Tensor

__all__ = ["LinAlgError", "cholesky", "det", "eigh", "inv", "lstsq", "matmul",
           "matrix_norm", "norm", "pinv", "qr", "slogdet", "solve", "svd", "svdvals",
           "vector_norm", "EighResult", "LstsqResult", "QRResult", "SVDResult",
           "SlogdetResult"]

LinAlgError = np.linalg.LinAlgError  # a ValueError subclass, as numpy raises it


class SlogdetResult(NamedTuple):
    """`slogdet`'s result (torch.return_types.linalg_slogdet)."""
    sign: Tensor
    logabsdet: Tensor


class EighResult(NamedTuple):
    """`eigh`'s result: ascending eigenvalues and the eigenvectors as columns."""
    eigenvalues: Tensor
    eigenvectors: Tensor


class SVDResult(NamedTuple):
    """`svd`'s result: A = U diag(S) Vh, S descending."""
    U: Tensor
    S: Tensor
    Vh: Tensor


class QRResult(NamedTuple):
    """`qr`'s result: A = Q R."""
    Q: Tensor
    R: Tensor


class LstsqResult(NamedTuple):
    """`lstsq`'s result (torch.return_types.linalg_lstsq); empty tensors where the
    driver computes nothing, as in torch."""
    solution: Tensor
    residuals: Tensor
    rank: Tensor
    singular_values: Tensor


# ---- checks and small helpers ------------------------------------------------------------
def _data(x) -> np.ndarray:
    return x.data if isinstance(x, Tensor) else np.asarray(x)


def _float(name: str, x, what: str = "A", min_ndim: int = 2, like=None) -> np.ndarray:
    """`x`'s array, checked: float32/float64 and at least `min_ndim` dimensions. A
    non-array argument (a list) takes `like`'s dtype."""
    if like is not None and not isinstance(x, (Tensor, np.ndarray)):
        a = np.asarray(x, dtype=like.dtype)
    else:
        a = _data(x)
    if a.dtype not in (np.float32, np.float64):
        raise TypeError(f"{name}: expected a float32 or float64 tensor as {what}, got "
                        f"{a.dtype}")
    if like is not None and a.dtype != like.dtype:
        raise TypeError(f"{name}: A and {what} must have the same dtype, got {like.dtype} "
                        f"and {a.dtype}")
    if a.ndim < min_ndim:
        raise ValueError(f"{name}: {what} must have at least {min_ndim} dimensions, got "
                         f"shape {a.shape}")
    return a


def _square(name: str, a: np.ndarray) -> None:
    if a.shape[-1] != a.shape[-2]:
        raise ValueError(f"{name}: A must be batches of square matrices, but they are "
                         f"{a.shape[-2]} by {a.shape[-1]} matrices")


def _lapack(name: str, fn, a: np.ndarray, problem: str, *args, **kwargs):
    """`fn(a, ...)`, numpy's LinAlgError turned into one naming the op, the problem and
    the first failing matrix of a batch."""
    try:
        return fn(a, *args, **kwargs)
    except np.linalg.LinAlgError:
        pass
    where = ""
    if a.ndim > 2:  # the error path only: find the first matrix that fails
        flat = a.reshape((-1,) + a.shape[-2:])
        for i in range(flat.shape[0]):
            try:
                fn(flat[i], *args, **kwargs)
            except np.linalg.LinAlgError:
                index = tuple(int(j) for j in np.unravel_index(i, a.shape[:-2]))
                where = f" (batch element {index})"
                break
    raise LinAlgError(f"{name}: {problem}{where}") from None


def _T(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, -1, -2)


def _sw(x) -> Tensor:
    return S.swapaxes(x, -1, -2)


def _eye(n: int, dtype) -> np.ndarray:
    return np.eye(n, dtype=dtype)


def _cost(batch_elems: int, n: int) -> float:
    # LAPACK and the rules' GEMMs: about n^3 per matrix
    return gemm_cost(max(batch_elems, 1), max(n, 1))


def _record(name, out, inputs, vjps=None, saved=(), kwargs=None, joint=None, n=1):
    return record(name, out, inputs, vjps, saved=saved, kwargs=kwargs, joint=joint,
                  cost=_cost(out.size, n), threaded=True)


def _edge(node, i: int):
    """Input `i` of `node` as the input of outputs recorded again by a twin (their
    values are the saved ones, so this input's value is never read): the leaf itself,
    or a placeholder of its shape routed to the node its gradient goes to."""
    shape, dtype = node.input_meta[i]
    return graph_input(node, i, np.broadcast_to(np.zeros((), dtype), shape))


def _bcast_batch(name, a: np.ndarray, b: np.ndarray) -> tuple:
    try:
        return np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ValueError(f"{name}: the batch dimensions of A {a.shape[:-2]} and B "
                         f"{b.shape[:-2]} do not broadcast against each other") from None


def _is_vector_rhs(a: np.ndarray, b: np.ndarray) -> bool:
    # torch's rule (linalg_solve_is_vector_rhs): B is a (batch of) vector(s) when it is
    # 1-D or has exactly A's shape without the last dimension
    return b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape == a.shape[:-1])


# ---- inv ---------------------------------------------------------------------------------
def _inv_vjp(g, ans, a):
    # -A^-T g A^-T: 2 GEMMs, one new array (the result, negated in place)
    r = _mm(_mm(_T(ans), g), _T(ans))
    return np.negative(r, out=r)


_inv_vjp.graph = lambda g, ans, A: -matmul(matmul(_sw(ans), g), _sw(ans))


def inv(A) -> Tensor:
    """The inverse of a square matrix (or batch); a singular matrix raises LinAlgError.
    Gradient: -A^-T g A^-T."""
    name = "linalg.inv"
    a = _float(name, A)
    _square(name, a)
    out = _lapack(name, np.linalg.inv, a, "the input matrix is singular, it cannot be "
                  "inverted")
    return _record(name, out, (A,), (_inv_vjp,), saved=(out, a), n=a.shape[-1])


# ---- solve -------------------------------------------------------------------------------
def _solve_joint(g, a, b, x, vector, needs):
    # gB = A^-T gX (one LU solve), gA = -gB X^T (one GEMM, negated in place)
    gm = g[..., None] if vector else g
    gb = np.linalg.solve(_T(a), gm)
    ga = None
    if needs[0]:
        ga = _mm(gb, _T(x))
        np.negative(ga, out=ga)
    return ga, (gb[..., 0] if vector and needs[1] else gb if needs[1] else None)


def _solve_joint_graph(g, node):
    a, b, x, vector, needs = node.saved
    A = graph_input(node, 0, a)
    X = Tensor._wrap(x[..., 0] if vector else x, node)   # the output, on the graph
    gm = S.unsqueeze(g, -1) if vector else g
    Xm = S.unsqueeze(X, -1) if vector else X
    gb = _solve(_sw(A), gm, False)
    ga = -matmul(gb, _sw(Xm)) if needs[0] else None
    return ga, (S.squeeze(gb, -1) if vector else gb) if needs[1] else None


_solve_joint.graph = _solve_joint_graph


def _solve(A, B, vector: bool) -> Tensor:
    """AX = B on checked operands (B as matrices when not `vector`)."""
    name = "linalg.solve"
    a, b = _data(A), _data(B)
    bm = b[..., None] if vector else b
    x = _lapack(name, np.linalg.solve, a, "the solver failed because the input matrix "
                "is singular", bm)
    needs = tuple(isinstance(t, Tensor) and t.requires_grad for t in (A, B))
    return _record(name, x[..., 0] if vector else x, (A, B), saved=(a, bm, x, vector, needs),
                   joint=_solve_joint, n=a.shape[-1])


def solve(A, B, *, left: bool = True) -> Tensor:
    """X with AX = B (`left=False`: XA = B) for square A, as torch.linalg.solve: B is
    a batch of vectors when it is 1-D or has A's shape without the last dimension, else
    a batch of matrices; batch dimensions broadcast. A singular A raises LinAlgError.
    Gradients: gB = A^-T gX, gA = -gB X^T."""
    name = "linalg.solve"
    a = _float(name, A)
    _square(name, a)
    b = _float(name, B, "B", 1, like=a)
    if not isinstance(B, Tensor):
        B = b
    vector = _is_vector_rhs(a, b)
    n = a.shape[-1]
    rows = b.shape[-1] if vector else b.shape[-1 if not left else -2]
    if rows != n:
        shape_b = f"{b.shape[-1]}x1" if vector else f"{b.shape[-2]}x{b.shape[-1]}"
        eq = "AX = B" if left else "XA = B"
        raise ValueError(f"{name}: incompatible shapes of A and B for the equation {eq} "
                         f"({n}x{n} and {shape_b})")
    _bcast_batch(name, a, b[..., None] if vector else b)
    if left:
        return _solve(A, B, vector)
    # XA = B  <=>  A^T X^T = B^T
    At = _sw(A)
    if vector:
        return _solve(At, B, True)
    return _sw(_solve(At, _sw(B), False))


# ---- det and slogdet ---------------------------------------------------------------------
def _prod_others(s: np.ndarray) -> np.ndarray:
    """prod_{j != i} s_j along the last axis, without dividing (zeros are fine)."""
    ones = np.ones(s.shape[:-1] + (1,), s.dtype)
    left = np.cumprod(np.concatenate([ones, s[..., :-1]], -1), -1)
    right = np.cumprod(np.concatenate([ones, s[..., :0:-1]], -1), -1)[..., ::-1]
    return left * right


def _cofactor_svd(a: np.ndarray) -> np.ndarray:
    # A = U S Vh: cof(A) = det(U) det(Vh) U diag(prod_{j != i} s_j) Vh, defined for every A
    u, s, vh = np.linalg.svd(a)
    sign = np.linalg.det(u) * np.linalg.det(vh)
    return _mm(u * (sign[..., None] * _prod_others(s))[..., None, :], vh)


def _cofactor(a: np.ndarray, d: np.ndarray) -> np.ndarray:
    """det(A) A^-T (the cofactor matrix) of each matrix; from the SVD where det is 0."""
    singular = d == 0
    if not singular.any():
        out = np.linalg.inv(a)
        out *= d[..., None, None]
        return _T(out)
    flat = a.reshape((-1,) + a.shape[-2:])
    dflat, sflat = d.reshape(-1), singular.reshape(-1)
    out = np.empty(flat.shape, a.dtype)
    ok = ~sflat
    if ok.any():
        out[ok] = _T(np.linalg.inv(flat[ok]) * dflat[ok][:, None, None])
    out[sflat] = _cofactor_svd(flat[sflat])
    return out.reshape(a.shape)


def _det_vjp(g, ans, a):
    # g cof(A): one LU inverse (an SVD per singular matrix), one new array
    c = _cofactor(a, ans)
    c *= np.asarray(g)[..., None, None]
    return c


def _det_graph(g, ans, A):
    gd = S.unsqueeze(S.unsqueeze(g, -1), -1)
    if np.all(ans.data != 0):
        return gd * S.unsqueeze(S.unsqueeze(ans, -1), -1) * _sw(inv(A))
    # a singular matrix: the cofactor matrix from the SVD, written with ops
    U, s, Vh = svd(A, full_matrices=False)
    n = s.shape[-1]
    sign = np.linalg.det(U.data) * np.linalg.det(Vh.data)   # locally constant
    cols = []
    for i in range(n):
        p = None
        for j in range(n):
            if j != i:
                sj = s[..., j]
                p = sj if p is None else p * sj
        cols.append(p if p is not None else E.mul(s[..., 0], 0.0) + 1.0)
    others = S.stack(cols, -1) * sign[..., None]
    return gd * matmul(U * S.unsqueeze(others, -2), Vh)


_det_vjp.graph = _det_graph


def det(A) -> Tensor:
    """The determinant of a square matrix (or batch). Gradient: g times the cofactor
    matrix det(A) A^-T; for a singular matrix the cofactor matrix from the SVD (the true
    derivative; torch 2.13 returns zeros there)."""
    name = "linalg.det"
    a = _float(name, A)
    _square(name, a)
    out = np.asarray(np.linalg.det(a))
    return _record(name, out, (A,), (_det_vjp,), saved=(out, a), n=a.shape[-1])


def _slogdet_vjp(g, ans, a):
    # g A^-T: one LU inverse, one new array
    r = _lapack("linalg.slogdet", np.linalg.inv, a, "the gradient of logabsdet is not "
                "defined for a singular matrix (logabsdet is -inf)")
    r *= np.asarray(g)[..., None, None]
    return _T(r)


_slogdet_vjp.graph = lambda g, ans, A: S.unsqueeze(S.unsqueeze(g, -1), -1) * _sw(inv(A))


def slogdet(A) -> SlogdetResult:
    """(sign, logabsdet) of the determinant, as torch.linalg.slogdet. The gradient
    flows through logabsdet (g A^-T); sign has none. For a singular matrix logabsdet is
    -inf and its gradient raises LinAlgError."""
    name = "linalg.slogdet"
    a = _float(name, A)
    _square(name, a)
    sign, logabs = np.linalg.slogdet(a)
    sign, logabs = np.asarray(sign), np.asarray(logabs)
    return SlogdetResult(Tensor._wrap(sign),
                         _record(name, logabs, (A,), (_slogdet_vjp,), saved=(logabs, a),
                                 n=a.shape[-1]))


# ---- cholesky ----------------------------------------------------------------------------
def _phi(m: np.ndarray) -> np.ndarray:
    """The symmetric matrix built from m's lower triangle, diagonal halved; m (the
    caller's own temporary) is overwritten and freed: 3 passes, one new array (and an
    n x n bool mask)."""
    p = np.tril(m)
    np.copyto(m, 0, where=~np.tri(m.shape[-1], k=-1, dtype=bool))  # tril(m, -1) in place
    p += _T(m)
    p *= 0.5
    return p


def _cholesky_vjp(g, ans, a, upper):
    # Murray 2016 / torch: gA = L^-T Phi(L^T gL) L^-1: one triangular inverse (LU), 3 GEMMs;
    # work arrays: L^-1 and one product at a time (the last GEMM writes into Phi's buffer)
    lo, gl = (_T(ans), _T(g)) if upper else (ans, g)
    li = np.linalg.inv(lo)
    phi = _phi(_mm(_T(lo), gl))
    t = _mm(_T(li), phi)
    return np.matmul(t, li, out=phi)


def _cholesky_graph(g, ans, A, upper):
    lo, gl = (_sw(ans), _sw(g)) if upper else (ans, g)
    n = lo.shape[-1]
    m = matmul(_sw(lo), gl)
    tril = np.tri(n, dtype=lo.dtype)
    strict = np.tri(n, k=-1, dtype=lo.dtype)
    phi = (m * tril + _sw(m * strict)) * 0.5
    li = inv(lo)
    return matmul(matmul(_sw(li), phi), li)


_cholesky_vjp.graph = _cholesky_graph


def cholesky(A, *, upper: bool = False) -> Tensor:
    """The Cholesky factor L (A = L L^T; `upper=True`: U = L^T) of a symmetric
    positive-definite matrix (or batch), read from the lower triangle of A. A matrix that
    is not positive-definite raises LinAlgError. The gradient is symmetric (Murray 2016)."""
    name = "linalg.cholesky"
    a = _float(name, A)
    _square(name, a)
    out = _lapack(name, np.linalg.cholesky, a, "the factorization could not be completed "
                  "because the input is not positive-definite")
    if upper:
        out = np.ascontiguousarray(_T(out))
    return _record(name, out, (A,), (_cholesky_vjp,), saved=(out, a),
                   kwargs={"upper": bool(upper)}, n=a.shape[-1])


# ---- eigh --------------------------------------------------------------------------------
def _eigh_values_vjp(g, w, q):
    # Q diag(gL) Q^T: one GEMM
    return _mm(q * g[..., None, :], _T(q))


def _eigh_vectors_vjp(g, w, q):
    # Q (skew(Q^T gQ) / E) Q^T, E_ij = l_j - l_i (diagonal: 1): 3 GEMMs
    # work arrays: K = Q^T gQ, one n x n buffer (K^T, then E in it), Q K (the last GEMM
    # writes into K's buffer): 6 passes besides the GEMMs
    k = _mm(_T(q), g)
    e = _T(k).copy()
    k -= e
    k *= 0.5
    _svd_e_into(e, w[..., None, :], w[..., :, None])
    k /= e
    del e
    return np.matmul(_mm(q, k), _T(q), out=k)


def _eigh_nodes(A, w, q) -> EighResult:
    saved = (w, q)
    n = q.shape[-1]
    return EighResult(_record("linalg.eigh", w, (A,), (_eigh_values_vjp,), saved, n=n),
                      _record("linalg.eigh", q, (A,), (_eigh_vectors_vjp,), saved, n=n))


def _eigh_values_graph(g, node):
    _, q = _eigh_nodes(_edge(node, 0), *node.saved)
    return matmul(q * S.unsqueeze(g, -2), _sw(q))


def _eigh_vectors_graph(g, node):
    w, q = _eigh_nodes(_edge(node, 0), *node.saved)
    k = matmul(_sw(q), g)
    k = (k - _sw(k)) * 0.5
    e = S.unsqueeze(w, -2) - S.unsqueeze(w, -1) + _eye(w.shape[-1], w.dtype)
    return matmul(matmul(q, k / e), _sw(q))


_eigh_values_vjp.graph_node = _eigh_values_graph
_eigh_vectors_vjp.graph_node = _eigh_vectors_graph


def eigh(A, UPLO: str = "L") -> EighResult:
    """Eigenvalues (ascending) and eigenvectors (columns) of a symmetric matrix (or
    batch), from its lower (`UPLO='L'`) or upper triangle. Gradients need distinct
    eigenvalues and, through the eigenvectors, a loss invariant to their signs; the
    gradient is symmetric, as torch's."""
    name = "linalg.eigh"
    if UPLO not in ("L", "U"):
        raise ValueError(f"{name}: UPLO must be 'L' or 'U', got {UPLO!r}")
    a = _float(name, A)
    _square(name, a)
    w, q = _lapack(name, np.linalg.eigh, a, "the eigenvalue algorithm did not converge",
                   UPLO=UPLO)
    return _eigh_nodes(A, w, q)


# ---- svd and svdvals ---------------------------------------------------------------------
def _svd_e_into(out: np.ndarray, row: np.ndarray, col: np.ndarray) -> np.ndarray:
    """out = row - col plus the identity, written into `out` (no identity matrix made):
    adding +0.0 off the diagonal is kept, as it turns -0.0 into +0.0 as adding eye did.
    3 passes (the last over the diagonal only)."""
    np.subtract(row, col, out=out)
    out += 0.0
    n = out.shape[-1]
    out.reshape(out.shape[:-2] + (n * n,))[..., ::n + 1] += 1   # (a view: out is C order)
    return out


def _svd_e(s: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """E_jk = s_k^2 - s_j^2, 1 on the diagonal (into `out` when given)."""
    s2 = s * s
    if out is None:
        out = np.empty(s.shape + s.shape[-1:], np.result_type(s2))
    return _svd_e_into(out, s2[..., None, :], s2[..., :, None])


def _svd_s_vjp(g, u, s, vh):
    # U diag(gS) Vh: one GEMM
    return _mm(u * g[..., None, :], vh)


def _svd_u_vjp(g, u, s, vh):
    # U (skew(U^T gU) / E) S Vh + (I - U U^T) gU S^-1 Vh (tall): 2-4 GEMMs
    k = s.shape[-1]
    if g.shape[-1] != k:          # full_matrices: the first k columns only (torch)
        g = g[..., :k]
    x = _mm(_T(u), g)
    e = _T(x).copy()
    x -= e
    x /= _svd_e(s, out=e)     # E in the buffer of X^T
    del e
    x *= s[..., None, :]
    inner = _mm(u, x)
    if u.shape[-2] > k:
        gs = g / s[..., None, :]
        inner += gs
        inner -= np.matmul(u, _mm(_T(u), gs), out=gs)   # U U^T gs in gs's buffer
    return _mm(inner, vh)


def _svd_vh_vjp(g, u, s, vh):
    # U S (skew(V^T gV) / E) Vh + U S^-1 gV^T (I - V V^T) (wide): 2-4 GEMMs
    k = s.shape[-1]
    if g.shape[-2] != k:
        g = g[..., :k, :]
    x = _mm(vh, _T(g))
    e = _T(x).copy()
    x -= e
    x /= _svd_e(s, out=e)     # E in the buffer of X^T
    del e
    x *= s[..., :, None]
    inner = _mm(x, vh)
    if vh.shape[-1] > k:
        gs = g / s[..., :, None]
        inner += gs
        inner -= np.matmul(_mm(gs, _T(vh)), vh, out=gs)   # gs V V^T in gs's buffer
    return _mm(u, inner)


def _svd_nodes(A, u, s, vh, outputs=(True, True, True)) -> tuple:
    """The recorded outputs U, S, Vh (None where not wanted); the rules see the first
    k = min(m, n) columns of U and rows of Vh."""
    k = s.shape[-1]
    saved = (u[..., :k], s, vh[..., :k, :])
    n = max(u.shape[-2], vh.shape[-1])
    rules = (_svd_u_vjp, _svd_s_vjp, _svd_vh_vjp)
    return tuple(_record("linalg.svd", out, (A,), (rule,), saved, n=n) if want else None
                 for out, rule, want in zip((u, s, vh), rules, outputs))


def _svd_s_graph(g, node):
    u, _, vh = _svd_nodes(_edge(node, 0), *node.saved)
    return matmul(u * S.unsqueeze(g, -2), vh)


def _svd_e_graph(s) -> Tensor:
    s2 = s * s
    return S.unsqueeze(s2, -2) - S.unsqueeze(s2, -1) + _eye(s.shape[-1], s.dtype)


def _svd_u_graph(g, node):
    u, s, vh = _svd_nodes(_edge(node, 0), *node.saved)
    k = s.shape[-1]
    if g.shape[-1] != k:
        g = S.getitem(g, (Ellipsis, slice(0, k)))
    x = matmul(_sw(u), g)
    inner = matmul(u, (x - _sw(x)) / _svd_e_graph(s) * S.unsqueeze(s, -2))
    if u.shape[-2] > k:
        gs = g / S.unsqueeze(s, -2)
        inner = inner + gs - matmul(u, matmul(_sw(u), gs))
    return matmul(inner, vh)


def _svd_vh_graph(g, node):
    u, s, vh = _svd_nodes(_edge(node, 0), *node.saved)
    k = s.shape[-1]
    if g.shape[-2] != k:
        g = S.getitem(g, (Ellipsis, slice(0, k), slice(None)))
    x = matmul(vh, _sw(g))
    inner = matmul((x - _sw(x)) / _svd_e_graph(s) * S.unsqueeze(s, -1), vh)
    if vh.shape[-1] > k:
        gs = g / S.unsqueeze(s, -1)
        inner = inner + gs - matmul(matmul(gs, _sw(vh)), vh)
    return matmul(u, inner)


_svd_s_vjp.graph_node = _svd_s_graph
_svd_u_vjp.graph_node = _svd_u_graph
_svd_vh_vjp.graph_node = _svd_vh_graph


def _check_driver(name, driver):
    if driver is not None:
        raise ValueError(f"{name}: driver= is only supported on CUDA inputs in torch; "
                         f"numpy's gesdd is used (got driver={driver!r})")


def svd(A, full_matrices: bool = True, *, driver=None) -> SVDResult:
    """A = U diag(S) Vh with S descending (torch.linalg.svd; `full_matrices=True` is
    torch's default: square U and Vh, whose extra columns/rows get no gradient).
    Gradients need distinct singular values, nonzero ones for U of a tall or Vh of a
    wide matrix, and through U or Vh a loss invariant to the vectors' signs."""
    name = "linalg.svd"
    _check_driver(name, driver)
    a = _float(name, A)
    u, s, vh = _lapack(name, np.linalg.svd, a, "the SVD did not converge",
                       full_matrices=bool(full_matrices))
    return SVDResult(*_svd_nodes(A, u, s, vh))


def svdvals(A, *, driver=None) -> Tensor:
    """The singular values, descending (torch.linalg.svdvals); gradient U diag(g) Vh."""
    name = "linalg.svdvals"
    _check_driver(name, driver)
    a = _float(name, A)
    if not (isinstance(A, Tensor) and A.requires_grad and is_grad_enabled()):
        return Tensor._wrap(_lapack(name, np.linalg.svd, a, "the SVD did not converge",
                                    compute_uv=False))
    u, s, vh = _lapack(name, np.linalg.svd, a, "the SVD did not converge",
                       full_matrices=False)
    return _svd_nodes(A, u, s, vh, (False, True, False))[1]


# ---- qr ----------------------------------------------------------------------------------
_ROW_BLOCK = 64               # rows per block of _matmul_right_inplace: a GEMM BLAS runs
_ROW_BLOCK_BYTES = 1 << 18    # at full speed, in a buffer of at most 256 KiB


def _matmul_right_inplace(b: np.ndarray, m: np.ndarray) -> np.ndarray:
    """b <- b @ m for a square m, in place: rows in blocks of at most _ROW_BLOCK rows and
    _ROW_BLOCK_BYTES (but one row of every matrix of the batch) through one block-sized
    buffer; one GEMM per block and one copy back: 2 passes over b."""
    rows, k = b.shape[-2:]
    per_row = max(1, b.size // max(rows, 1)) * b.itemsize
    step = max(1, min(rows, _ROW_BLOCK, _ROW_BLOCK_BYTES // per_row))
    buf = empty(b.shape[:-2] + (step, k), b.dtype)
    for i in range(0, rows, step):
        j = min(rows, i + step)
        part = buf[..., :j - i, :]
        np.matmul(b[..., i:j, :], m, out=part)
        b[..., i:j, :] = part
    return b


def _copyltu_inplace(m: np.ndarray) -> np.ndarray:
    """m <- tril(m) + tril(m, -1)^T in place: each row's upper part from the column
    below the diagonal (one pass over the upper triangle)."""
    k = m.shape[-1]
    for i in range(k - 1):
        m[..., i, i + 1:] = m[..., i + 1:, i]
    return m


def _qr_finish(out, gq, r):
    """out <- (out + gQ) R^-T in place (out m x k): one pass adding gQ (if any), R's
    inverse (k x k) and 2 passes applying it by row blocks."""
    if gq is not None:
        out += gq
    rinv = np.linalg.inv(r)          # R is triangular and invertible where QR has a rule
    return _matmul_right_inplace(out, _T(rinv))


def _qr_core(gq, gr, q, r, out=None):
    """(gQ + Q copyltu(R gR^T - gQ^T Q)) R^-T for Q m x k, R k x k (either g may be
    None), written into `out` (m x k, or a new array): 2-4 GEMMs and R's inverse; beyond
    the result only k x k matrices and one row block."""
    m = None
    if gr is not None:
        m = _mm(r, _T(gr))
    if gq is not None:
        t = _mm(_T(gq), q)
        m = np.negative(t, out=t) if m is None else np.subtract(m, t, out=m)
        del t
    if out is None:
        out = empty(np.broadcast_shapes(q.shape[:-2], m.shape[:-2]) + q.shape[-2:],
                    np.result_type(q, m))
    np.matmul(q, _copyltu_inplace(m), out=out)
    del m                            # before R's inverse: one k x k at a time
    return _qr_finish(out, gq, r)


def _qr_check(mode, q, r):
    if mode == "r":
        raise RuntimeError("linalg.qr: the derivative of linalg.qr depends on Q, which is "
                           "not computed when mode='r'. Use mode='reduced' to differentiate "
                           "through linalg.qr")
    if q.shape[-1] != min(q.shape[-2], r.shape[-1]):
        raise RuntimeError("linalg.qr: the QR decomposition is not differentiable when "
                           "mode='complete' and nrows > ncols")


def _qr_q_vjp(g, q, r, mode):
    _qr_check(mode, q, r)
    m, n = q.shape[-2], r.shape[-1]
    if m >= n:
        return _qr_core(g, None, q, r)
    out = np.zeros(g.shape[:-2] + (m, n), np.result_type(g, q))
    _qr_core(g, None, q, r[..., :m], out=out[..., :m])
    return out


def _qr_r_vjp(g, q, r, mode):
    _qr_check(mode, q, r)
    m, n = q.shape[-2], r.shape[-1]
    if m >= n:
        return _qr_core(None, g, q, r)
    # A = [X | Y]: X = Q R1 (square), Y = Q R2, so gY = Q gR2 and X sees gQ = Q R2 gR2^T
    g1, g2 = g[..., :m], g[..., m:]
    out = empty(g.shape[:-2] + (m, n), np.result_type(g, q))
    # X sees gQ = Y gR2^T = Q s with s = R2 gR2^T; Q is square here (Q^T Q = I), so
    # gQ^T Q = s^T and gQ + Q copyltu(M) = Q (copyltu(M) + s): no m x m product with Q
    np.matmul(q, g2, out=out[..., m:])          # Q gR2, the gradient of Y
    s = _mm(r[..., m:], _T(g2))
    r1 = r[..., :m]
    c = _mm(r1, _T(g1))
    c -= _T(s)                                  # M = R1 gR1^T - s^T
    c = _copyltu_inplace(c)
    c += s
    del s
    np.matmul(q, c, out=out[..., :m])
    del c
    _qr_finish(out[..., :m], None, r1)
    return out


def _qr_nodes(A, q, r, mode) -> QRResult:
    saved = (q, r)
    kw = {"mode": mode}
    n = max(q.shape[-2], r.shape[-1])
    if mode == "r":
        return QRResult(Tensor._wrap(np.zeros((0,), r.dtype)),
                        _record("linalg.qr", r, (A,), (_qr_r_vjp,), saved, kw, n=n))
    return QRResult(_record("linalg.qr", q, (A,), (_qr_q_vjp,), saved, kw, n=n),
                    _record("linalg.qr", r, (A,), (_qr_r_vjp,), saved, kw, n=n))


def _qr_core_graph(gq, gr, q, r) -> Tensor:
    k = q.shape[-1]
    m = None
    if gr is not None:
        m = matmul(r, _sw(gr))
    if gq is not None:
        t = matmul(_sw(gq), q)
        m = -t if m is None else m - t
    c = m * np.tri(k, dtype=q.dtype) + _sw(m * np.tri(k, k=-1, dtype=q.dtype))
    b = matmul(q, c)
    if gq is not None:
        b = b + gq
    return _sw(_solve(r, _sw(b), False))


def _qr_graph(which: str):
    def form(g, node):
        q, r = node.saved
        mode = node.kwargs["mode"]
        _qr_check(mode, q, r)
        Q, Rt = _qr_nodes(_edge(node, 0), q, r, mode)
        m, n = q.shape[-2], r.shape[-1]
        if m >= n:
            return _qr_core_graph(g, None, Q, Rt) if which == "q" else \
                _qr_core_graph(None, g, Q, Rt)
        r1 = S.getitem(Rt, (Ellipsis, slice(0, m)))
        if which == "q":
            zeros = np.zeros(g.shape[:-2] + (m, n - m), g.dtype)
            return S.concat([_qr_core_graph(g, None, Q, r1), zeros], -1)
        g1 = S.getitem(g, (Ellipsis, slice(0, m)))
        g2 = S.getitem(g, (Ellipsis, slice(m, n)))
        y = matmul(Q, S.getitem(Rt, (Ellipsis, slice(m, n))))
        return S.concat([_qr_core_graph(matmul(y, _sw(g2)), g1, Q, r1), matmul(Q, g2)], -1)
    return form


_qr_q_vjp.graph_node = _qr_graph("q")
_qr_r_vjp.graph_node = _qr_graph("r")


def qr(A, mode: str = "reduced") -> QRResult:
    """A = QR (torch.linalg.qr): `mode` 'reduced' (Q m x k, R k x n, k = min(m, n)),
    'complete' (Q m x m) or 'r' (R only; Q is an empty tensor). Differentiable for
    'reduced' and for 'complete' with m <= n (backward raises otherwise, as torch)."""
    name = "linalg.qr"
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"{name}: mode must be 'reduced', 'complete' or 'r', got {mode!r}")
    a = _float(name, A)
    if mode == "r":
        r = np.linalg.qr(a, mode="r")
        q = np.zeros(a.shape[:-2] + (a.shape[-2], 0), a.dtype)  # not computed
        return _qr_nodes(A, q, r, mode)
    q, r = np.linalg.qr(a, mode=mode)
    return _qr_nodes(A, q, r, mode)


# ---- pinv --------------------------------------------------------------------------------
def _pinv_tall(gh, p, a, own_gh: bool = False) -> np.ndarray:
    """torch's pinv_backward for A m x n with m >= n (P = pinv(A) n x m, gh = g^T m x n),
    regrouped so that every m-sized product has an n x n factor (no m x m matrix):

        gA = (gh - A K) P P^T + P^T (K (I - P A) - K^T),   K = P gh (n x n).

    7 GEMMs (six of m n^2, one n^3) where torch's grouping has four of m^2 n. Beyond the
    result, at most three n x n work matrices, or one m x n (none when `own_gh`: gh is
    the caller's scratch and is overwritten) and two n x n."""
    k = _mm(p, gh)
    w = _mm(p, a)                               # I - P A, in place
    np.negative(w, out=w)
    n = w.shape[-1]
    w.reshape(w.shape[:-2] + (n * n,))[..., ::n + 1] += 1
    z = _mm(k, w)
    z -= _T(k)                                  # K (I - P A) - K^T
    out = empty(np.broadcast_shapes(gh.shape, a.shape), np.result_type(gh, p))
    np.matmul(a, k, out=out)
    del k
    pp = np.matmul(p, _T(p), out=w)             # P P^T, in w's buffer (both P's batch)
    t = gh if own_gh and gh.shape == out.shape else empty_like(out)
    np.subtract(gh, out, out=t)                 # gh - A K: 1 pass
    np.matmul(t, pp, out=out)
    del pp, w
    np.matmul(_T(p), z, out=t)
    out += t                                    # 1 pass
    return out


def _pinv_vjp(g, ans, a):
    if a.shape[-2] >= a.shape[-1]:
        return _pinv_tall(_T(g), ans, a)
    # the wide case is the tall one of A^T: pinv(A^T) = pinv(A)^T
    return _T(_pinv_tall(g, _T(ans), _T(a)))


def _pinv_graph(g, ans, A) -> Tensor:
    m, n = A.shape[-2:]
    ph, gh = _sw(ans), _sw(g)
    if m <= n:
        k = matmul(gh, ans)
        kph = matmul(k, ph)
        return (-_sw(matmul(ans, k)) + kph - matmul(matmul(A, ans), kph)
                + matmul(matmul(ph, ans), gh - matmul(k, A)))
    k = matmul(ans, gh)
    phk = matmul(ph, k)
    return (-_sw(matmul(k, ans)) + matmul(matmul(gh - matmul(A, k), ans), ph) + phk
            - matmul(matmul(phk, ans), A))


_pinv_vjp.graph = _pinv_graph


def _tolerance(name, v, batch: tuple, dtype):
    if v is None:
        return None
    t = _data(v)
    if t.dtype.kind not in "fiu":
        raise TypeError(f"{name}: tolerances must be real numbers, got {t.dtype}")
    try:
        return np.broadcast_to(np.asarray(t, dtype), batch)[..., None]
    except ValueError:
        raise ValueError(f"{name}: a tolerance of shape {t.shape} does not broadcast to "
                         f"the batch shape {batch}") from None


def pinv(A, *, atol=None, rtol=None, hermitian: bool = False) -> Tensor:
    """The Moore-Penrose pseudoinverse (torch.linalg.pinv): singular values (|eigenvalues|
    with `hermitian=True`) at or below max(atol, rtol * largest) are treated as zero;
    rtol defaults to eps * max(m, n) unless atol > 0 is given. Gradient: torch's
    pinv_backward, which assumes the rank does not change near A."""
    name = "linalg.pinv"
    a = _float(name, A)
    m, n = a.shape[-2:]
    if hermitian:
        _square(name, a)
    batch = a.shape[:-2]
    at = _tolerance(name, atol, batch, a.dtype)
    rt = _tolerance(name, rtol, batch, a.dtype)
    if rt is None:  # torch: eps * max(m, n), or 0 where atol > 0 is given
        rt = np.asarray(np.finfo(a.dtype).eps * max(m, n), a.dtype)
        if at is not None:
            rt = np.where(at > 0, np.zeros((), a.dtype), rt)
    if at is None:
        at = np.zeros((), a.dtype)
    if hermitian:
        w, q = _lapack(name, np.linalg.eigh, a, "the eigenvalue algorithm did not converge")
        aw = np.abs(w)
        tol = np.maximum(at, rt * aw.max(axis=-1, keepdims=True, initial=0.0))
        with np.errstate(divide="ignore"):
            winv = np.where(aw > tol, 1.0 / w, 0.0).astype(a.dtype)
        out = _mm(q * winv[..., None, :], _T(q))
    else:
        u, s, vh = _lapack(name, np.linalg.svd, a, "the SVD did not converge",
                           full_matrices=False)
        tol = np.maximum(at, rt * s[..., :1]) if s.shape[-1] else at
        with np.errstate(divide="ignore"):
            sinv = np.where(s > tol, 1.0 / s, 0.0).astype(a.dtype)
        vh *= sinv[..., :, None]                # the SVD's own Vh, scaled in place
        out = _mm(_T(vh), _T(u))
    return _record(name, np.asarray(out), (A,), (_pinv_vjp,), saved=(out, a), n=max(m, n))


# ---- lstsq -------------------------------------------------------------------------------
_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def _lstsq_joint(g, a, b, p, vector, needs, rcond):
    # X = pinv(A) B: gA = pinv_backward(gX B^T), gB = pinv(A)^T gX; the (transposed)
    # gX B^T made here is pinv_backward's scratch
    gm = g[..., None] if vector else g
    bm = b[..., None] if vector else b
    ga = gb = None
    if needs[0]:
        if a.shape[-2] >= a.shape[-1]:
            ga = _pinv_tall(_mm(bm, _T(gm)), p, a, own_gh=True)
        else:
            ga = _T(_pinv_tall(_mm(gm, _T(bm)), _T(p), _T(a), own_gh=True))
    if needs[1]:
        gb = _mm(_T(p), gm)
        gb = gb[..., 0] if vector else gb
    return ga, gb


def _lstsq_joint_graph(g, node):
    a, b, p, vector, needs, rcond = node.saved
    A = graph_input(node, 0, a)
    B = graph_input(node, 1, b)
    P = pinv(A, rtol=rcond)          # pinv(A) again, on the graph
    gm = S.unsqueeze(g, -1) if vector else g
    ga = _pinv_graph(matmul(gm, _sw(S.unsqueeze(B, -1) if vector else B)), P, A) \
        if needs[0] else None
    gb = None
    if needs[1]:
        gb = matmul(_sw(P), gm)
        gb = S.squeeze(gb, -1) if vector else gb
    return ga, gb


_lstsq_joint.graph = _lstsq_joint_graph


def lstsq(A, B, rcond=None, *, driver=None) -> LstsqResult:
    """Least-squares solution of AX = B (torch.linalg.lstsq): A (*, m, n), B (*, m, k)
    or a batch of vectors (*, m); batch dimensions broadcast. Computed from the SVD
    (the minimum-norm solution; singular values at or below rcond * largest count as 0,
    rcond defaulting to eps * max(m, n)); `driver` says which extra fields are filled,
    as torch on CPU: rank ('gelsy', the default, 'gelsd', 'gelss'), singular_values
    ('gelsd', 'gelss'), residuals (the squared residual of each column, 'gels', 'gelsd',
    'gelss', when m > n and every A has full rank); others are empty. Gradient through
    `solution` (pinv-based, for full-rank A)."""
    name = "linalg.lstsq"
    if driver is None:
        driver = "gelsy"
    if driver not in _DRIVERS:
        raise ValueError(f"{name}: driver must be one of {_DRIVERS}, got {driver!r}")
    a = _float(name, A)
    b = _float(name, B, "B", 1, like=a)
    if not isinstance(B, Tensor):
        B = b
    vector = _is_vector_rhs(a, b)
    bm = b[..., None] if vector else b
    m, n = a.shape[-2:]
    if bm.shape[-2] != m:
        raise ValueError(f"{name}: A and B must have the same number of rows, got {m} and "
                         f"{bm.shape[-2]} (shapes {a.shape} and {b.shape})")
    batch = _bcast_batch(name, a, bm)
    if rcond is None:
        rcond = float(np.finfo(a.dtype).eps) * max(m, n)
    u, s, vh = _lapack(name, np.linalg.svd, a, "the SVD did not converge",
                       full_matrices=False)
    keep = s > rcond * s[..., :1] if s.shape[-1] else np.zeros(s.shape, bool)
    with np.errstate(divide="ignore"):
        sinv = np.where(keep, 1.0 / s, 0.0).astype(a.dtype)
    vh *= sinv[..., :, None]                      # the SVD's own Vh, scaled in place
    p = _mm(_T(vh), _T(u))                        # pinv(A)
    x = _mm(p, bm)
    rank = keep.sum(-1).astype(np.int64)
    full = np.all(rank == min(m, n))
    empty = np.zeros((0,), a.dtype)
    if driver != "gelsy" and m > n and full:
        r = _mm(a, x) - bm
        residuals = np.sum(r * r, axis=-2)
    else:
        residuals = empty
    needs = tuple(isinstance(t, Tensor) and t.requires_grad for t in (A, B))
    out = np.broadcast_to(x, batch + x.shape[-2:])
    out = np.ascontiguousarray(out[..., 0] if vector else out)
    sol = _record(name, out, (A, B), saved=(a, b, p, vector, needs, rcond),
                  joint=_lstsq_joint,
                  n=max(m, n))
    return LstsqResult(
        sol, Tensor._wrap(np.asarray(residuals)),
        Tensor._wrap(rank if driver != "gels" else np.zeros((0,), np.int64)),
        Tensor._wrap(s if driver in ("gelsd", "gelss") else empty))


# ---- norms -------------------------------------------------------------------------------
def _ord(name, ord) -> float:
    if isinstance(ord, (bool, str)) or not isinstance(ord, (int, float, np.integer,
                                                          np.floating)):
        raise TypeError(f"{name}: ord must be a number (inf and -inf included), got "
                        f"{ord!r}")
    if np.isnan(ord):
        raise ValueError(f"{name}: ord must not be NaN")
    return float(ord)


def _dims(name, dim, ndim) -> tuple | None:
    if dim is None:
        return None
    dims = (dim,) if isinstance(dim, (int, np.integer)) else tuple(dim)
    out = []
    for d in dims:
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool):
            raise TypeError(f"{name}: dim must be an int or a tuple of ints, got {dim!r}")
        if not -max(ndim, 1) <= d < max(ndim, 1):
            raise IndexError(f"{name}: dimension {d} is out of range for a tensor with "
                             f"{ndim} dimensions")
        out.append(int(d) % max(ndim, 1))
    if len(set(out)) != len(out):
        raise ValueError(f"{name}: dim {dim!r} names a dimension twice")
    return tuple(out)


def vector_norm(x, ord=2, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """The vector `ord`-norm over `dim` (None: every element), torch.linalg.vector_norm:
    any real ord, inf (max |x|), -inf (min |x|), 0 (count of nonzeros). Gradient:
    torch's (0 where the norm is 0; the inf-norms' ties share equally)."""
    name = "linalg.vector_norm"
    p = _ord(name, ord)
    if dtype is not None:
        x = cast(x, dtype=np.dtype(dtype)) if isinstance(x, Tensor) else \
            np.asarray(x, dtype=dtype)
    a = _float(name, x, "x", 0)
    axis = _dims(name, dim, a.ndim)
    if a.ndim == 0:
        axis = None
    if p < 0 or np.isinf(p):
        # as torch: only an empty reduced dimension (or, without dims, an empty tensor)
        if (a.size == 0 and axis is None) or (axis is not None and
                                              any(a.shape[d] == 0 for d in axis)):
            raise ValueError(f"{name}: the norm of order {ord} of an empty tensor is not "
                             "defined")
    # the kernel, rules and twin are torch.norm's (`ops/scan.py`: pa.norm)
    return _norm_op(x if isinstance(x, Tensor) else a, p=p, axis=axis,
                    keepdims=bool(keepdim))


_MATRIX_ORDS = ("fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf)


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim: bool = False, *, dtype=None) -> Tensor:
    """The matrix norm over the two dimensions `dim` (torch.linalg.matrix_norm): 'fro',
    'nuc' (sum of singular values), 2 / -2 (largest / smallest singular value), 1 / -1
    (max / min column sum of |A|), inf / -inf (max / min row sum of |A|). Written with
    vector_norm, svdvals, abs, sum, max and min: their gradients, to any order."""
    name = "linalg.matrix_norm"
    if isinstance(ord, str) and ord not in ("fro", "nuc") or \
            not isinstance(ord, str) and (isinstance(ord, bool) or ord not in _MATRIX_ORDS):
        raise ValueError(f"{name}: ord must be one of 'fro', 'nuc', 1, -1, 2, -2, inf, -inf; "
                         f"got {ord!r}")
    if dtype is not None:
        A = cast(A, dtype=np.dtype(dtype)) if isinstance(A, Tensor) else \
            np.asarray(A, dtype=dtype)
    a = _float(name, A)
    dims = _dims(name, dim, a.ndim)
    if dims is None or len(dims) != 2:
        raise ValueError(f"{name}: dim must be a 2-tuple of distinct dimensions, got {dim!r}")
    if ord == "fro":
        return vector_norm(A, 2, dims, keepdim)
    if not isinstance(A, Tensor):
        A = Tensor._wrap(a)
    r, c = dims
    if ord in ("nuc", 2, -2):
        rest = [d for d in range(a.ndim) if d not in dims]
        s = svdvals(S.permute(A, rest + [r, c]))
        out = R.sum(s, -1) if ord == "nuc" else R.amax(s, -1) if ord == 2 else R.amin(s, -1)
        if keepdim:
            out = S.reshape(out, tuple(1 if d in dims else n for d, n in enumerate(a.shape)))
        return out
    # 1 / -1: reduce each column's sum over the rows; inf / -inf: each row's over the columns
    inner, outer = (r, c) if abs(ord) == 1 else (c, r)
    sums = R.sum(E.abs(A), inner, keepdims=True)
    out = R.amax(sums, outer, keepdim=True) if ord > 0 else R.amin(sums, outer, keepdim=True)
    return out if keepdim else S.squeeze(out, dims)


def norm(A, ord=None, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """torch.linalg.norm: a vector norm when `dim` is an int (or a 1-tuple), a matrix
    norm when it is a 2-tuple; with `dim=None`, the 2-norm of all elements when `ord` is
    None, else a vector or matrix norm of a 1-D or 2-D input."""
    name = "linalg.norm"
    nd = _data(A).ndim
    if dim is not None:
        dims = (dim,) if isinstance(dim, (int, np.integer)) else tuple(dim)
        if len(dims) == 1:
            if isinstance(ord, str):
                raise ValueError(f"{name}: ord {ord!r} is a matrix norm: dim must name two "
                                 "dimensions")
            return vector_norm(A, 2 if ord is None else ord, dims, keepdim, dtype=dtype)
        if len(dims) == 2:
            return matrix_norm(A, "fro" if ord is None else ord, dims, keepdim, dtype=dtype)
        raise ValueError(f"{name}: dim must be an int, a 1-tuple or a 2-tuple, got {dim!r}")
    if ord is None:
        return vector_norm(A, 2, None, keepdim, dtype=dtype)
    if nd == 1:
        return vector_norm(A, ord, None, keepdim, dtype=dtype)
    if nd == 2:
        return matrix_norm(A, ord, (-2, -1), keepdim, dtype=dtype)
    raise ValueError(f"{name}: if dim is not given but ord is, the input must be 1-D or "
                     f"2-D, got {nd}-D")


# ---- torch.* names (pa.det, pa.inverse, pa.slogdet, pa.pinverse; Tensor methods) ----------
def inverse(input) -> Tensor:
    """torch.inverse / Tensor.inverse: `linalg.inv`."""
    return inv(input)


def pinverse(input, rcond: float = 1e-15) -> Tensor:
    """torch.pinverse / Tensor.pinverse: `linalg.pinv` with rtol=rcond."""
    return pinv(input, rtol=rcond)
