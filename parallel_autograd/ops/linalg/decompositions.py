"""torch.linalg's solvers and decompositions on numpy's LAPACK:

    inv solve det slogdet cholesky eigh svd svdvals qr pinv lstsq matrix_power

Every op takes batches of matrices (leading dimensions, as torch; `solve` and `lstsq`
broadcast A's and B's batch dimensions against each other) in float32 or float64, and
raises PyTorch's exception types naming the op before anything is recorded: a
RuntimeError for a shape or dtype that does not fit, a `LinAlgError` (a RuntimeError, as
torch's) for a singular or non-positive-definite matrix, naming the batch element.

Each op is one declaration (`primitive.defop`): its forward, its derivative as a formula
written with the package's ops (differentiable again: create_graph to any order) and,
where it saves GEMMs or memory, a first-order numpy kernel of the same derivative (each
kernel's comment counts its GEMMs and work arrays; tests/test_lean_index_linalg.py holds
them to it). The derivatives are the standard matrix-calculus results (Giles 2008, "An
extended collection of matrix derivative results"; Murray 2016 for the Cholesky factor;
torch's own formulas, whose conventions they follow):

- inv: -A^-T g A^-T; solve: gB = A^-T gX, gA = -gB X^T (one joint rule: gA needs gB);
  det: g det(A) A^-T, and for a singular A the cofactor matrix from the SVD (torch 2.13
  returns zeros there); slogdet: g A^-T through `logabsdet` (`sign` has no gradient).
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

Several outputs (eigh, svd, qr, slogdet, lstsq): the function is a composite that runs
the decomposition once and records each differentiable output with its own op (`eigh_values`
`eigh_vectors`, `svd_U` `svd_S` `svd_Vh`, `qr_Q` `qr_R`, `logabsdet`, `lstsq_solution`;
not exported), whose forward is handed the factors already computed. The gradient is
linear in the output gradients, so each node's rule is its output's part and the engine's
sum of contributions is the whole: an unused output costs nothing. A formula that needs the
other factors records them again as outputs of the same input (no recomputation), so their
derivatives are these ops' own, to any order.

Thread safety: pure functions of their arguments, like every op's rules.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...grad_mode import is_grad_enabled
from ...memory import empty, empty_like
from ...memory import matmul as _mm
from ...primitive import Joint, composite, defop
from ...tensor import Tensor
from .._common import const
from ..forms import depends_on
from ..shape import clone, concat, squeeze, stack, unsqueeze
from .checks import T, batch_shape, cost, data, floating, is_vector_rhs, lapack, mT, square
from .products import matmul

__all__ = ["EighResult", "LstsqResult", "QRResult", "SVDResult", "SlogdetResult", "cholesky",
           "det", "eigh", "inv", "lstsq", "matrix_power", "pinv", "qr", "slogdet", "solve", "svd",
           "svdvals"]


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


def _eye(n: int, dtype) -> np.ndarray:
    return np.eye(n, dtype=dtype)


def _unsqueeze2(t):
    """A batch of numbers as a batch of 1 x 1 matrices (broadcasts against matrices)."""
    return unsqueeze(unsqueeze(t, -1), -1)


# ---- inv ---------------------------------------------------------------------------------
def _inv_kernel(g, ans, A):
    # -A^-T g A^-T: 2 GEMMs, one new array (the result, negated in place)
    r = _mm(_mm(T(ans), g), T(ans))
    return np.negative(r, out=r)


@defop(formula=lambda g, ans, A: -matmul(matmul(mT(ans), g), mT(ans)), kernel=_inv_kernel,
       module="torch.linalg", cost=cost, threaded=True)
def inv(A: Tensor) -> Tensor:
    """The inverse of a square matrix (or batch); a singular matrix raises LinAlgError.
    Gradient: -A^-T g A^-T."""
    name = "linalg.inv"
    a = floating(name, A)
    square(name, a)
    return lapack(name, np.linalg.inv, a, "the input matrix is singular, it cannot be "
                  "inverted")


# ---- solve -------------------------------------------------------------------------------
def _solve_kernel(g, ans, A, B, left):
    # the left form A'X' = B' (right: A' = A^T, X' = X^T): gB' = A'^-T gX' (one LU solve),
    # gA' = -gB' X'^T (one GEMM, negated in place); transposes are views
    a = np.asarray(A)
    vector = is_vector_rhs(a.shape, np.shape(B))
    gm, xm = (g[..., None], ans[..., None]) if vector else (g, ans)
    if not left:
        a, gm, xm = T(a), T(gm), T(xm)
    gb = np.linalg.solve(T(a), gm)
    ga = _mm(gb, T(xm))
    np.negative(ga, out=ga)
    if not left:
        ga, gb = T(ga), T(gb)
    return ga, (gb[..., 0] if vector else gb)


def _solve_formula(g, ans, A, B, left):
    vector = is_vector_rhs(np.shape(A), np.shape(B))
    gm, xm = (unsqueeze(g, -1), unsqueeze(ans, -1)) if vector else (g, ans)
    if not left:
        A, gm, xm = mT(A), mT(gm), mT(xm)
    gb = solve(mT(A), gm)
    ga = -matmul(gb, mT(xm))
    if not left:
        ga, gb = mT(ga), mT(gb)
    return ga, (squeeze(gb, -1) if vector else gb)


@defop(inputs=("A", "B"), formula=Joint(_solve_formula), kernel=Joint(_solve_kernel),
       module="torch.linalg", cost=cost, threaded=True)
def solve(A: Tensor, B: Tensor, *, left: bool = True) -> Tensor:
    """X with AX = B (`left=False`: XA = B) for square A, as torch.linalg.solve: B is
    a batch of vectors (columns, so `left=False` refuses them unless n = 1, as torch) when
    it is 1-D or has A's shape without the last dimension, else a batch of matrices; batch
    dimensions broadcast. A singular A raises LinAlgError.
    Gradients: gB = A^-T gX, gA = -gB X^T."""
    name = "linalg.solve"
    a = floating(name, A)
    square(name, a)
    b = floating(name, B, "B", 1, like=a)
    vector = is_vector_rhs(a.shape, b.shape)
    bm = b[..., None] if vector else b      # a vector is a column, left or right (torch)
    n = a.shape[-1]
    if bm.shape[-2 if left else -1] != n:
        eq = "AX = B" if left else "XA = B"
        raise RuntimeError(f"{name}: incompatible shapes of A and B for the equation {eq} "
                           f"({n}x{n} and {bm.shape[-2]}x{bm.shape[-1]})")
    batch_shape(name, a.shape, bm.shape)
    problem = "the solver failed because the input matrix is singular"
    if left:
        x = lapack(name, np.linalg.solve, a, problem, bm)
    else:                                   # XA = B <=> A^T X^T = B^T
        x = T(lapack(name, np.linalg.solve, T(a), problem, T(bm)))
    return x[..., 0] if vector else x


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
        return T(out)
    flat = a.reshape((-1,) + a.shape[-2:])
    dflat, sflat = d.reshape(-1), singular.reshape(-1)
    out = np.empty(flat.shape, a.dtype)
    ok = ~sflat
    if ok.any():
        out[ok] = T(np.linalg.inv(flat[ok]) * dflat[ok][:, None, None])
    out[sflat] = _cofactor_svd(flat[sflat])
    return out.reshape(a.shape)


def _det_kernel(g, ans, A):
    # g cof(A): one LU inverse (an SVD per singular matrix), one new array
    c = _cofactor(np.asarray(A), ans)
    c *= np.asarray(g)[..., None, None]
    return c


def _det_formula(g, ans, A):
    if np.all(data(ans) != 0):
        return _unsqueeze2(g) * _unsqueeze2(ans) * mT(inv(A))
    # a singular matrix: the cofactor matrix from the SVD, written with ops
    U, s, Vh = svd(A, full_matrices=False)
    n = s.shape[-1]
    sign = np.linalg.det(data(U)) * np.linalg.det(data(Vh))   # locally constant
    cols = []
    for i in range(n):
        p = None
        for j in range(n):
            if j != i:
                p = s[..., j] if p is None else p * s[..., j]
        cols.append(p if p is not None else s[..., 0] * 0.0 + 1.0)
    others = stack(cols, -1) * sign[..., None]
    return _unsqueeze2(g) * matmul(U * unsqueeze(others, -2), Vh)


@defop(formula=_det_formula, kernel=_det_kernel, module="torch.linalg", cost=cost,
       threaded=True)
def det(A: Tensor) -> Tensor:
    """The determinant of a square matrix (or batch). Gradient: g times the cofactor
    matrix det(A) A^-T; for a singular matrix the cofactor matrix from the SVD (the true
    derivative; torch 2.13 returns zeros there)."""
    name = "linalg.det"
    a = floating(name, A)
    square(name, a)
    return np.asarray(np.linalg.det(a))


def _logabsdet_kernel(g, ans, A, value):
    # g A^-T: one LU inverse, one new array
    r = lapack("linalg.slogdet", np.linalg.inv, np.asarray(A), "the gradient of logabsdet "
               "is not defined for a singular matrix (logabsdet is -inf)")
    r *= np.asarray(g)[..., None, None]
    return T(r)


@defop(formula=lambda g, ans, A, value: _unsqueeze2(g) * mT(inv(A)), kernel=_logabsdet_kernel,
       export=False, cost=cost, threaded=True)
def logabsdet(A: Tensor, value) -> Tensor:
    """log |det A| (`value`, computed by `slogdet` with the sign), recorded as a function
    of A. Gradient g A^-T; for a singular A (-inf) it raises LinAlgError."""
    return value


@composite(module="torch.linalg")
def slogdet(A: Tensor) -> SlogdetResult:
    """(sign, logabsdet) of the determinant, as torch.linalg.slogdet. The gradient
    flows through logabsdet (g A^-T); sign has none. For a singular matrix logabsdet is
    -inf and its gradient raises LinAlgError."""
    name = "linalg.slogdet"
    a = floating(name, A)
    square(name, a)
    sign, value = np.linalg.slogdet(a)
    return SlogdetResult(const(np.asarray(sign)), logabsdet(A, np.asarray(value)))


# ---- cholesky ----------------------------------------------------------------------------
def _phi(m: np.ndarray) -> np.ndarray:
    """The symmetric matrix built from m's lower triangle, diagonal halved; m (the
    caller's own temporary) is overwritten and freed: 3 passes, one new array (and an
    n x n bool mask)."""
    p = np.tril(m)
    np.copyto(m, 0, where=~np.tri(m.shape[-1], k=-1, dtype=bool))  # tril(m, -1) in place
    p += T(m)
    p *= 0.5
    return p


def _cholesky_kernel(g, ans, A, upper):
    # Murray 2016 / torch: gA = L^-T Phi(L^T gL) L^-1: one triangular inverse (LU), 3 GEMMs;
    # work arrays: L^-1 and one product at a time (the last GEMM writes into Phi's buffer)
    lo, gl = (T(ans), T(g)) if upper else (ans, g)
    li = np.linalg.inv(lo)
    phi = _phi(_mm(T(lo), gl))
    t = _mm(T(li), phi)
    return np.matmul(t, li, out=phi)


def _cholesky_formula(g, ans, A, upper):
    lo, gl = (mT(ans), mT(g)) if upper else (ans, g)
    n = lo.shape[-1]
    m = matmul(mT(lo), gl)
    tril = np.tri(n, dtype=lo.dtype)
    strict = np.tri(n, k=-1, dtype=lo.dtype)
    phi = (m * tril + mT(m * strict)) * 0.5
    li = inv(lo)
    return matmul(matmul(mT(li), phi), li)


@defop(formula=_cholesky_formula, kernel=_cholesky_kernel, module="torch.linalg", cost=cost,
       threaded=True)
def cholesky(A: Tensor, *, upper: bool = False) -> Tensor:
    """The Cholesky factor L (A = L L^T; `upper=True`: U = L^T) of a symmetric
    positive-definite matrix (or batch), read from the lower triangle of A. A matrix that
    is not positive-definite raises LinAlgError. The gradient is symmetric (Murray 2016)."""
    name = "linalg.cholesky"
    a = floating(name, A)
    square(name, a)
    out = lapack(name, np.linalg.cholesky, a, "the factorization could not be completed "
                 "because the input is not positive-definite")
    return np.ascontiguousarray(T(out)) if upper else out


# ---- eigh --------------------------------------------------------------------------------
def _e_into(out: np.ndarray, row: np.ndarray, col: np.ndarray) -> np.ndarray:
    """out = row - col plus the identity, written into `out` (no identity matrix made):
    adding +0.0 off the diagonal is kept, as it turns -0.0 into +0.0 as adding eye did.
    3 passes (the last over the diagonal only)."""
    np.subtract(row, col, out=out)
    out += 0.0
    n = out.shape[-1]
    out.reshape(out.shape[:-2] + (n * n,))[..., ::n + 1] += 1   # (a view: out is C order)
    return out


def _eigenvalues_kernel(g, ans, A, eigenvalues, eigenvectors):
    # Q diag(gL) Q^T: one GEMM
    q = eigenvectors
    return _mm(q * g[..., None, :], T(q))


def _eigenvectors_kernel(g, ans, A, eigenvalues, eigenvectors):
    # Q (skew(Q^T gQ) / E) Q^T, E_ij = l_j - l_i (diagonal: 1): 3 GEMMs
    # work arrays: K = Q^T gQ, one n x n buffer (K^T, then E in it), Q K (the last GEMM
    # writes into K's buffer): 6 passes besides the GEMMs
    w, q = eigenvalues, eigenvectors
    k = _mm(T(q), g)
    e = T(k).copy()
    k -= e
    k *= 0.5
    _e_into(e, w[..., None, :], w[..., :, None])
    k /= e
    del e
    return np.matmul(_mm(q, k), T(q), out=k)


def _eigh_factors(A, eigenvalues, eigenvectors) -> tuple:
    """The eigenvalues and eigenvectors recorded again as outputs of A (for a formula)."""
    return (eigh_values(A, eigenvalues, eigenvectors),
            eigh_vectors(A, eigenvalues, eigenvectors))


def _eigenvalues_formula(g, ans, A, eigenvalues, eigenvectors):
    _, q = _eigh_factors(A, eigenvalues, eigenvectors)
    return matmul(q * unsqueeze(g, -2), mT(q))


def _eigenvectors_formula(g, ans, A, eigenvalues, eigenvectors):
    w, q = _eigh_factors(A, eigenvalues, eigenvectors)
    k = matmul(mT(q), g)
    k = (k - mT(k)) * 0.5
    e = unsqueeze(w, -2) - unsqueeze(w, -1) + _eye(w.shape[-1], w.dtype)
    return matmul(matmul(q, k / e), mT(q))


@defop(formula=_eigenvalues_formula, kernel=_eigenvalues_kernel, export=False, cost=cost,
       threaded=True)
def eigh_values(A: Tensor, eigenvalues, eigenvectors) -> Tensor:
    """The eigenvalues of the symmetric A (computed by `eigh`), recorded as a function of
    A: gradient Q diag(g) Q^T."""
    return eigenvalues


@defop(formula=_eigenvectors_formula, kernel=_eigenvectors_kernel, export=False, cost=cost,
       threaded=True)
def eigh_vectors(A: Tensor, eigenvalues, eigenvectors) -> Tensor:
    """The eigenvectors of the symmetric A (computed by `eigh`), recorded as a function of
    A: gradient Q (skew(Q^T g) / (l_j - l_i)) Q^T (distinct eigenvalues)."""
    return eigenvectors


@composite(dtypes=("float32", "float64", "complex64", "complex128"), module="torch.linalg")
def eigh(A: Tensor, UPLO: str = "L") -> EighResult:
    """Eigenvalues (ascending) and eigenvectors (columns) of a symmetric matrix (or
    batch), from its lower (`UPLO='L'`) or upper triangle. Gradients need distinct
    eigenvalues and, through the eigenvectors, a loss invariant to their signs; the
    gradient is symmetric, as torch's."""
    name = "linalg.eigh"
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"{name}: Expected UPLO argument to be 'L' or 'U', but got "
                           f"{UPLO!r}")
    a = floating(name, A)
    square(name, a)
    w, q = lapack(name, np.linalg.eigh, a, "the eigenvalue algorithm did not converge",
                  UPLO=UPLO)
    return EighResult(*_eigh_factors(A, w, q))



# ---- svd and svdvals ---------------------------------------------------------------------
def _svd_e(s: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """E_jk = s_k^2 - s_j^2, 1 on the diagonal (into `out` when given)."""
    s2 = s * s
    if out is None:
        out = np.empty(s.shape + s.shape[-1:], np.result_type(s2))
    return _e_into(out, s2[..., None, :], s2[..., :, None])


def _thin(u, s, vh) -> tuple:
    """The first k = min(m, n) columns of U and rows of Vh (views): what the rules see."""
    k = s.shape[-1]
    return u[..., :k], s, vh[..., :k, :]


def _svd_s_kernel(g, ans, A, u, s, vh):
    # U diag(gS) Vh: one GEMM
    u, s, vh = _thin(u, s, vh)
    return _mm(u * g[..., None, :], vh)


def _svd_u_kernel(g, ans, A, u, s, vh):
    # U (skew(U^T gU) / E) S Vh + (I - U U^T) gU S^-1 Vh (tall): 2-4 GEMMs
    u, s, vh = _thin(u, s, vh)
    k = s.shape[-1]
    if g.shape[-1] != k:          # full_matrices: the first k columns only (torch)
        g = g[..., :k]
    x = _mm(T(u), g)
    e = T(x).copy()
    x -= e
    x /= _svd_e(s, out=e)     # E in the buffer of X^T
    del e
    x *= s[..., None, :]
    inner = _mm(u, x)
    if u.shape[-2] > k:
        gs = g / s[..., None, :]
        inner += gs
        inner -= np.matmul(u, _mm(T(u), gs), out=gs)   # U U^T gs in gs's buffer
    return _mm(inner, vh)


def _svd_vh_kernel(g, ans, A, u, s, vh):
    # U S (skew(V^T gV) / E) Vh + U S^-1 gV^T (I - V V^T) (wide): 2-4 GEMMs
    u, s, vh = _thin(u, s, vh)
    k = s.shape[-1]
    if g.shape[-2] != k:
        g = g[..., :k, :]
    x = _mm(vh, T(g))
    e = T(x).copy()
    x -= e
    x /= _svd_e(s, out=e)     # E in the buffer of X^T
    del e
    x *= s[..., :, None]
    inner = _mm(x, vh)
    if vh.shape[-1] > k:
        gs = g / s[..., :, None]
        inner += gs
        inner -= np.matmul(_mm(gs, T(vh)), vh, out=gs)   # gs V V^T in gs's buffer
    return _mm(u, inner)


def _svd_factors(A, u, s, vh) -> tuple:
    """U, S, Vh recorded again as outputs of A (for a formula), U and Vh thin."""
    k = s.shape[-1]
    return svd_U(A, u, s, vh)[..., :k], svd_S(A, u, s, vh), svd_Vh(A, u, s, vh)[..., :k, :]


def _svd_e_formula(s):
    s2 = s * s
    return unsqueeze(s2, -2) - unsqueeze(s2, -1) + _eye(s.shape[-1], s.dtype)


def _svd_s_formula(g, ans, A, u, s, vh):
    u, _, vh = _svd_factors(A, u, s, vh)
    return matmul(u * unsqueeze(g, -2), vh)


def _svd_u_formula(g, ans, A, u, s, vh):
    u, s, vh = _svd_factors(A, u, s, vh)
    k = s.shape[-1]
    if g.shape[-1] != k:
        g = g[..., :k]
    x = matmul(mT(u), g)
    inner = matmul(u, (x - mT(x)) / _svd_e_formula(s) * unsqueeze(s, -2))
    if u.shape[-2] > k:
        gs = g / unsqueeze(s, -2)
        inner = inner + gs - matmul(u, matmul(mT(u), gs))
    return matmul(inner, vh)


def _svd_vh_formula(g, ans, A, u, s, vh):
    u, s, vh = _svd_factors(A, u, s, vh)
    k = s.shape[-1]
    if g.shape[-2] != k:
        g = g[..., :k, :]
    x = matmul(vh, mT(g))
    inner = matmul((x - mT(x)) / _svd_e_formula(s) * unsqueeze(s, -1), vh)
    if vh.shape[-1] > k:
        gs = g / unsqueeze(s, -1)
        inner = inner + gs - matmul(matmul(gs, mT(vh)), vh)
    return matmul(u, inner)


@defop(formula=_svd_u_formula, kernel=_svd_u_kernel, export=False, cost=cost, threaded=True)
def svd_U(A: Tensor, u, s, vh) -> Tensor:
    """U of A = U diag(S) Vh (computed by `svd`: u, s, vh), recorded as a function of A."""
    return u


@defop(formula=_svd_s_formula, kernel=_svd_s_kernel, export=False, cost=cost, threaded=True)
def svd_S(A: Tensor, u, s, vh) -> Tensor:
    """S of A = U diag(S) Vh (computed by `svd`), recorded as a function of A: gradient
    U diag(g) Vh."""
    return s


@defop(formula=_svd_vh_formula, kernel=_svd_vh_kernel, export=False, cost=cost, threaded=True)
def svd_Vh(A: Tensor, u, s, vh) -> Tensor:
    """Vh of A = U diag(S) Vh (computed by `svd`), recorded as a function of A."""
    return vh


def _check_driver(name: str, driver) -> None:
    if driver is not None:
        raise RuntimeError(f"{name}: keyword argument `driver=` is only supported on CUDA "
                           f"inputs in torch; numpy's gesdd is used (got driver={driver!r})")


@composite(module="torch.linalg")
def svd(A: Tensor, full_matrices: bool = True, *, driver=None) -> SVDResult:
    """A = U diag(S) Vh with S descending (torch.linalg.svd; `full_matrices=True` is
    torch's default: square U and Vh, whose extra columns/rows get no gradient).
    Gradients need distinct singular values, nonzero ones for U of a tall or Vh of a
    wide matrix, and through U or Vh a loss invariant to the vectors' signs."""
    name = "linalg.svd"
    _check_driver(name, driver)
    a = floating(name, A)
    u, s, vh = lapack(name, np.linalg.svd, a, "the SVD did not converge",
                      full_matrices=bool(full_matrices))
    return SVDResult(svd_U(A, u, s, vh), svd_S(A, u, s, vh), svd_Vh(A, u, s, vh))


@composite(module="torch.linalg")
def svdvals(A: Tensor, *, driver=None) -> Tensor:
    """The singular values, descending (torch.linalg.svdvals); gradient U diag(g) Vh
    (U and Vh are computed only when A requires grad)."""
    name = "linalg.svdvals"
    _check_driver(name, driver)
    a = floating(name, A)
    if not (isinstance(A, Tensor) and A.requires_grad and is_grad_enabled()):
        return const(lapack(name, np.linalg.svd, a, "the SVD did not converge",
                                   compute_uv=False))
    u, s, vh = lapack(name, np.linalg.svd, a, "the SVD did not converge",
                      full_matrices=False)
    return svd_S(A, u, s, vh)


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
    return _matmul_right_inplace(out, T(rinv))


def _qr_core(gq, gr, q, r, out=None):
    """(gQ + Q copyltu(R gR^T - gQ^T Q)) R^-T for Q m x k, R k x k (either g may be
    None), written into `out` (m x k, or a new array): 2-4 GEMMs and R's inverse; beyond
    the result only k x k matrices and one row block."""
    m = None
    if gr is not None:
        m = _mm(r, T(gr))
    if gq is not None:
        t = _mm(T(gq), q)
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


def _qr_q_kernel(g, ans, A, q, r, mode):
    _qr_check(mode, q, r)
    m, n = q.shape[-2], r.shape[-1]
    if m >= n:
        return _qr_core(g, None, q, r)
    out = np.zeros(g.shape[:-2] + (m, n), np.result_type(g, q))
    _qr_core(g, None, q, r[..., :m], out=out[..., :m])
    return out


def _qr_r_kernel(g, ans, A, q, r, mode):
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
    s = _mm(r[..., m:], T(g2))
    r1 = r[..., :m]
    c = _mm(r1, T(g1))
    c -= T(s)                                   # M = R1 gR1^T - s^T
    c = _copyltu_inplace(c)
    c += s
    del s
    np.matmul(q, c, out=out[..., :m])
    del c
    _qr_finish(out[..., :m], None, r1)
    return out


def _qr_core_formula(gq, gr, q, r):
    k = q.shape[-1]
    m = None
    if gr is not None:
        m = matmul(r, mT(gr))
    if gq is not None:
        t = matmul(mT(gq), q)
        m = -t if m is None else m - t
    c = m * np.tri(k, dtype=q.dtype) + mT(m * np.tri(k, k=-1, dtype=q.dtype))
    b = matmul(q, c)
    if gq is not None:
        b = b + gq
    return mT(solve(r, mT(b)))


def _qr_formula(which: str):
    """The formula of Q's (`which` 'q') or R's rule, with ops."""
    def formula(g, ans, A, q, r, mode):
        """(gQ + Q copyltu(M)) R^-T, Q and R recorded again as outputs of A."""
        _qr_check(mode, q, r)
        Q, R = qr_Q(A, q, r, mode), qr_R(A, q, r, mode)   # on the graph again
        m, n = q.shape[-2], r.shape[-1]
        if m >= n:
            return _qr_core_formula(g, None, Q, R) if which == "q" else \
                _qr_core_formula(None, g, Q, R)
        r1 = R[..., :m]
        if which == "q":
            zeros = np.zeros(g.shape[:-2] + (m, n - m), g.dtype)
            return concat([_qr_core_formula(g, None, Q, r1), zeros], -1)
        g1, g2 = g[..., :m], g[..., m:]
        y = matmul(Q, R[..., m:])
        return concat([_qr_core_formula(matmul(y, mT(g2)), g1, Q, r1), matmul(Q, g2)], -1)
    return formula


@defop(formula=_qr_formula("q"), kernel=_qr_q_kernel, export=False, cost=cost, threaded=True)
def qr_Q(A: Tensor, q, r, mode: str) -> Tensor:
    """Q of A = Q R (computed by `qr`: q, r), recorded as a function of A."""
    return q


@defop(formula=_qr_formula("r"), kernel=_qr_r_kernel, export=False, cost=cost, threaded=True)
def qr_R(A: Tensor, q, r, mode: str) -> Tensor:
    """R of A = Q R (computed by `qr`: q, r), recorded as a function of A."""
    return r


@composite(module="torch.linalg")
def qr(A: Tensor, mode: str = "reduced") -> QRResult:
    """A = QR (torch.linalg.qr): `mode` 'reduced' (Q m x k, R k x n, k = min(m, n)),
    'complete' (Q m x m) or 'r' (R only; Q is an empty tensor). Differentiable for
    'reduced' and for 'complete' with m <= n (backward raises otherwise, as torch)."""
    name = "linalg.qr"
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"{name}: qr received unrecognized mode {mode!r} but expected one "
                           f"of 'reduced' (default), 'r', or 'complete'")
    a = floating(name, A)
    if mode == "r":
        r = np.linalg.qr(a, mode="r")
        q = np.zeros(a.shape[:-2] + (a.shape[-2], 0), a.dtype)  # not computed
        return QRResult(const(np.zeros((0,), r.dtype)), qr_R(A, q, r, mode))
    q, r = np.linalg.qr(a, mode=mode)
    return QRResult(qr_Q(A, q, r, mode), qr_R(A, q, r, mode))


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
    z -= T(k)                                   # K (I - P A) - K^T
    out = empty(np.broadcast_shapes(gh.shape, a.shape), np.result_type(gh, p))
    np.matmul(a, k, out=out)
    del k
    pp = np.matmul(p, T(p), out=w)              # P P^T, in w's buffer (both P's batch)
    t = gh if own_gh and gh.shape == out.shape else empty_like(out)
    np.subtract(gh, out, out=t)                 # gh - A K: 1 pass
    np.matmul(t, pp, out=out)
    del pp, w
    np.matmul(T(p), z, out=t)
    out += t                                    # 1 pass
    return out


def _pinv_backward(g, p, a) -> np.ndarray:
    if a.shape[-2] >= a.shape[-1]:
        return _pinv_tall(T(g), p, a)
    # the wide case is the tall one of A^T: pinv(A^T) = pinv(A)^T
    return T(_pinv_tall(g, T(p), T(a)))


def _pinv_kernel(g, ans, A, atol, rtol, hermitian):
    return _pinv_backward(g, ans, np.asarray(A))


def _pinv_backward_formula(g, ans, A) -> Tensor:
    """torch's pinv_backward with ops (P = ans = pinv(A))."""
    m, n = A.shape[-2:]
    ph, gh = mT(ans), mT(g)
    if m <= n:
        k = matmul(gh, ans)
        kph = matmul(k, ph)
        return (-mT(matmul(ans, k)) + kph - matmul(matmul(A, ans), kph)
                + matmul(matmul(ph, ans), gh - matmul(k, A)))
    k = matmul(ans, gh)
    phk = matmul(ph, k)
    return (-mT(matmul(k, ans)) + matmul(matmul(gh - matmul(A, k), ans), ph) + phk
            - matmul(matmul(phk, ans), A))


def _tolerance(name, v, batch: tuple, dtype):
    if v is None:
        return None
    t = data(v)
    if t.dtype.kind not in "fiu":
        raise RuntimeError(f"{name}: tolerances must be real numbers, got {t.dtype}")
    try:
        return np.broadcast_to(np.asarray(t, dtype), batch)[..., None]
    except ValueError:
        raise RuntimeError(f"{name}: a tolerance of shape {t.shape} does not broadcast to "
                           f"the batch shape {batch}") from None


def _pinv_tolerances(name, a, atol, rtol) -> tuple:
    """(atol, rtol) as arrays broadcast to the batch: rtol defaults to eps * max(m, n),
    or 0 where atol > 0 is given (torch)."""
    at = _tolerance(name, atol, a.shape[:-2], a.dtype)
    rt = _tolerance(name, rtol, a.shape[:-2], a.dtype)
    if rt is None:
        rt = np.asarray(np.finfo(a.dtype).eps * max(a.shape[-2:]), a.dtype)
        if at is not None:
            rt = np.where(at > 0, np.zeros((), a.dtype), rt)
    return (np.zeros((), a.dtype) if at is None else at), rt


@defop(formula=lambda g, ans, A, atol, rtol, hermitian: _pinv_backward_formula(g, ans, A),
       kernel=_pinv_kernel, module="torch.linalg", cost=cost, threaded=True)
def pinv(A: Tensor, *, atol: Tensor | float | None = None, rtol: Tensor | float | None = None,
         hermitian: bool = False) -> Tensor:
    """The Moore-Penrose pseudoinverse (torch.linalg.pinv): singular values (|eigenvalues|
    with `hermitian=True`) at or below max(atol, rtol * largest) are treated as zero;
    rtol defaults to eps * max(m, n) unless atol > 0 is given. Gradient: torch's
    pinv_backward, which assumes the rank does not change near A."""
    name = "linalg.pinv"
    a = floating(name, A)
    if hermitian:
        square("linalg.eigh", a)
    at, rt = _pinv_tolerances(name, a, atol, rtol)
    if hermitian:
        w, q = lapack(name, np.linalg.eigh, a, "the eigenvalue algorithm did not converge")
        aw = np.abs(w)
        tol = np.maximum(at, rt * aw.max(axis=-1, keepdims=True, initial=0.0))
        with np.errstate(divide="ignore"):
            winv = np.where(aw > tol, 1.0 / w, 0.0).astype(a.dtype)
        return _mm(q * winv[..., None, :], T(q))
    u, s, vh = lapack(name, np.linalg.svd, a, "the SVD did not converge", full_matrices=False)
    tol = np.maximum(at, rt * s[..., :1]) if s.shape[-1] else at
    with np.errstate(divide="ignore"):
        sinv = np.where(s > tol, 1.0 / s, 0.0).astype(a.dtype)
    vh *= sinv[..., :, None]                # the SVD's own Vh, scaled in place
    return _mm(T(vh), T(u))


# ---- lstsq -------------------------------------------------------------------------------
_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def _lstsq_parts(g, A, B) -> tuple:
    """(a, gX, B) as matrices (a batch of vectors as columns)."""
    a, b = np.asarray(A), np.asarray(B)
    if is_vector_rhs(a.shape, b.shape):
        return a, g[..., None], b[..., None]
    return a, g, b


def _lstsq_a_kernel(g, ans, A, B, p, rcond):
    # X = pinv(A) B: gA = pinv_backward(gX B^T); the (transposed) gX B^T made here is
    # pinv_backward's scratch
    a, gm, bm = _lstsq_parts(g, A, B)
    if a.shape[-2] >= a.shape[-1]:
        return _pinv_tall(_mm(bm, T(gm)), p, a, own_gh=True)
    return T(_pinv_tall(_mm(gm, T(bm)), T(p), T(a), own_gh=True))


def _lstsq_b_kernel(g, ans, A, B, p, rcond):
    # gB = pinv(A)^T gX: one GEMM
    gm = _lstsq_parts(g, A, B)[1]
    gb = _mm(T(p), gm)
    return gb[..., 0] if gm is not g else gb


def _lstsq_a_formula(g, ans, A, B, p, rcond):
    vector = is_vector_rhs(np.shape(A), np.shape(B))
    gm, bm = (unsqueeze(g, -1), unsqueeze(B, -1)) if vector else (g, B)
    pa = pinv(A, rtol=rcond)          # pinv(A) again, on the graph
    return _pinv_backward_formula(matmul(gm, mT(bm)), pa, A)


def _lstsq_b_formula(g, ans, A, B, p, rcond):
    vector = is_vector_rhs(np.shape(A), np.shape(B))
    pa = pinv(A, rtol=rcond)
    if vector:
        return squeeze(matmul(mT(pa), unsqueeze(g, -1)), -1)
    return matmul(mT(pa), g)


@defop(inputs=("A", "B"), formula=(_lstsq_a_formula, _lstsq_b_formula),
       kernel=(_lstsq_a_kernel, _lstsq_b_kernel), export=False, cost=cost, threaded=True)
def lstsq_solution(A: Tensor, B: Tensor, p, rcond: float) -> Tensor:
    """The least-squares solution pinv(A) B (`p` = pinv(A) with singular values at or
    below rcond * the largest dropped, computed by `lstsq`), batch dimensions broadcast,
    recorded as a function of A and B: gA = pinv_backward(gX B^T), gB = pinv(A)^T gX
    (full-rank A)."""
    b = np.asarray(B)
    vector = is_vector_rhs(np.shape(A), b.shape)
    bm = b[..., None] if vector else b
    x = _mm(p, bm)
    x = np.broadcast_to(x, batch_shape("linalg.lstsq", np.shape(A), bm.shape) + x.shape[-2:])
    return np.ascontiguousarray(x[..., 0] if vector else x)


def _lstsq_residuals(a, bm, x, driver: str, rank):
    """The squared residual of each column, where torch's CPU drivers compute it: not
    'gelsy', m > n, every A of full rank; else an empty tensor."""
    m, n = a.shape[-2:]
    if driver != "gelsy" and m > n and np.all(rank == min(m, n)):
        r = _mm(a, x) - bm
        return np.sum(r * r, axis=-2)
    return np.zeros((0,), a.dtype)


@composite(module="torch.linalg")
def lstsq(A: Tensor, B: Tensor, rcond: float | None = None, *, driver: str | None = None
          ) -> LstsqResult:
    """Least-squares solution of AX = B (torch.linalg.lstsq): A (*, m, n), B (*, m, k)
    or a batch of vectors (*, m); batch dimensions broadcast. Computed from the SVD
    (the minimum-norm solution; singular values at or below rcond * largest count as 0,
    rcond defaulting to eps * max(m, n)); `driver` says which extra fields are filled,
    as torch on CPU: rank ('gelsy', the default, 'gelsd', 'gelss'), singular_values
    ('gelsd', 'gelss'), residuals (the squared residual of each column, 'gels', 'gelsd',
    'gelss', when m > n and every A has full rank); others are empty. Gradient through
    `solution` (pinv-based, for full-rank A)."""
    name = "linalg.lstsq"
    driver = "gelsy" if driver is None else driver
    if driver not in _DRIVERS:
        raise RuntimeError(f"{name}: parameter `driver` should be one of {_DRIVERS}, got "
                           f"{driver!r}")
    a = floating(name, A)
    b = floating(name, B, "B", 1, like=a)
    bm = b[..., None] if is_vector_rhs(a.shape, b.shape) else b
    m, n = a.shape[-2:]
    if bm.shape[-2] != m:
        raise RuntimeError(f"{name}: A and B must have the same number of rows, got {m} "
                           f"and {bm.shape[-2]} (shapes {a.shape} and {b.shape})")
    batch_shape(name, a.shape, bm.shape)
    if rcond is None:
        rcond = float(np.finfo(a.dtype).eps) * max(m, n)
    u, s, vh = lapack(name, np.linalg.svd, a, "the SVD did not converge", full_matrices=False)
    keep = s > rcond * s[..., :1] if s.shape[-1] else np.zeros(s.shape, bool)
    with np.errstate(divide="ignore"):
        sinv = np.where(keep, 1.0 / s, 0.0).astype(a.dtype)
    vh *= sinv[..., :, None]                      # the SVD's own Vh, scaled in place
    p = _mm(T(vh), T(u))                          # pinv(A)
    x = lstsq_solution(A, B if isinstance(B, Tensor) else b, p, rcond)
    rank = keep.sum(-1).astype(np.int64)
    xm = x._data[..., None] if bm is not b else x._data
    return LstsqResult(
        x, const(np.asarray(_lstsq_residuals(a, bm, xm, driver, rank))),
        const(rank if driver != "gels" else np.zeros((0,), np.int64)),
        const(s if driver in ("gelsd", "gelss") else np.zeros((0,), a.dtype)))


# ---- matrix_power ------------------------------------------------------------------------
def _identity(A, shape: tuple) -> Tensor:
    eye = np.broadcast_to(np.eye(shape[-1], dtype=data(A).dtype), shape).copy()
    out = depends_on(eye, A)      # gradient 0, part of the graph (PyTorch)
    return const(out)


@composite(module="torch.linalg")
def matrix_power(A: Tensor, n: int) -> Tensor:
    """The `n`-th power of square matrices (batches allowed): n = 0 the identity, n < 0 a
    power of the inverse; computed by repeated squaring in PyTorch's order."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"matrix_power: n must be an int, got {n!r}")
    shape = np.shape(data(A))
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise RuntimeError(f"linalg.matrix_power: A must be batches of square matrices, got "
                           f"shape {shape}")
    if n == 0:
        return _identity(A, shape)
    a, n = A, int(n)
    if n < 0:
        a, n = inv(a), -n
    if n == 1:
        return clone(a)
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
