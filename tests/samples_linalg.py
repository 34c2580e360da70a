"""Samples of the linear-algebra ops, primitives and composites (tests/op_samples.py says
how samples work).

Matrices are kept where each op is smooth: well-conditioned for inv/solve/det (random plus
3 I), symmetric positive-definite for cholesky (made symmetric by `prep`, since cholesky
and eigh read one triangle and their gradients are symmetric), full rank for pinv and
lstsq, distinct eigenvalues and singular values; vector norms of orders 1 and inf away from
zero and from ties. Eigenvectors and singular vectors are compared squared (`post`): their
signs are arbitrary.
"""
from __future__ import annotations

import numpy as np
from op_samples import Sample


def _sym(args):
    """The first argument made symmetric, (A + A^T) / 2, with operators of either library."""
    a = args[0]
    return [(a + a.mT) * 0.5, *args[1:]]


def _orthonormal(rng, *shape):
    """Random matrices with orthonormal columns (m >= k)."""
    q, r = np.linalg.qr(rng.standard_normal(shape))
    return q * np.sign(np.diagonal(r, axis1=-2, axis2=-1))[..., None, :]


def _spectrum(rng, *shape, low=1.0, step=0.5, signs=False):
    """U diag(s) V^T of `shape` with singular values low, low + step, ... (distinct and
    away from 0: invertible or of full rank, condition number fixed), U and V random; with
    `signs`, a random sign per value (a symmetric matrix's eigenvalues: `_symmetric`)."""
    m, n = shape[-2:]
    k = min(m, n)
    s = low + step * rng.permutation(k)
    u = _orthonormal(rng, *shape[:-2], m, k)
    v = _orthonormal(rng, *shape[:-2], n, k)
    return (u * s) @ np.swapaxes(v, -1, -2)


def _wellcond(rng, *shape):
    """Invertible, condition number <= 2: singular values in [1, 2]."""
    n = shape[-1]
    return _spectrum(rng, *shape, low=1.0, step=1.0 / max(n - 1, 1))


def _symmetric(rng, *shape):
    """Symmetric, eigenvalues distinct (spaced 0.7, both signs)."""
    q = _orthonormal(rng, *shape)
    w = 0.7 * rng.permutation(shape[-1]) - 1.0
    return (q * w) @ np.swapaxes(q, -1, -2)


def _spd(rng, *shape):
    """Symmetric positive-definite, eigenvalues in [1, 3]."""
    q = _orthonormal(rng, *shape)
    w = 1.0 + 2.0 * rng.permutation(shape[-1]) / max(shape[-1] - 1, 1)
    return (q * w) @ np.swapaxes(q, -1, -2)


def matmul(rng):
    shapes = [((3,), (3,)), ((3,), (3, 4)), ((2, 3), (3,)), ((2, 3), (3, 4)),
              ((5, 2, 3), (3, 4)),         # a batch folded into the rows
              ((2, 3), (5, 3, 4)), ((2, 1, 2, 3), (4, 3, 2)), ((3,), (2, 3, 4)),
              ((2, 4, 3), (3,))]
    return [Sample(rng.standard_normal(a), rng.standard_normal(b)) for a, b in shapes]


def cross(rng):
    n = rng.standard_normal
    return [Sample(n((3, 2)), n((3, 2)), dim=0), Sample(n((2, 3)), n((1, 3)), dim=-1),
            Sample(n((4, 3)), n((4, 3))), Sample(n(3), n(3), grad=[1])]


def inv(rng):
    return [Sample(_wellcond(rng, 3, 3)), Sample(_wellcond(rng, 2, 3, 3))]


def solve(rng):
    a, n = _wellcond(rng, 2, 3, 3), rng.standard_normal
    return [Sample(a, n(3)), Sample(a, n((3, 2))), Sample(a, n((2, 3))),
            Sample(a[0], n((2, 3, 2))),                      # A broadcast over B's batch
            Sample(a[0], n((2, 3)), left=False), Sample(a, n((4, 3)), left=False),
            Sample(a, n((3, 4)), grad=[1]), Sample(a, n((3, 2)), grad=[0])]


def det(rng):
    return [Sample(_wellcond(rng, 3, 3)), Sample(_wellcond(rng, 2, 4, 4))]


def cholesky(rng):
    return [Sample(_spd(rng, 3, 3), prep=_sym), Sample(_spd(rng, 2, 3, 3), prep=_sym),
            Sample(_spd(rng, 4, 4), prep=_sym, upper=True)]


def pinv(rng):
    n = lambda *s: _spectrum(rng, *s)  # noqa: E731  (full rank, distinct singular values)
    return [Sample(n(4, 3)), Sample(n(2, 3, 4)), Sample(n(3, 3), rtol=1e-6),
            Sample(n(4, 3), atol=1e-9), Sample(_symmetric(rng, 3, 3), prep=_sym,
                                               hermitian=True)]


def vector_norm(rng):
    signs = rng.choice([-1.0, 1.0], (3, 4))
    apart = signs * (np.arange(12).reshape(3, 4) * 0.37 + 0.5)   # no ties, no zeros
    n = rng.standard_normal
    return [Sample(n((3, 4))), Sample(n((2, 3, 4)), ord=3, dim=(0, 2)),
            Sample(n((3, 4)), ord=3.5, dim=1, keepdim=True), Sample(apart, ord=1, dim=0),
            Sample(apart, ord=np.inf, dim=1), Sample(apart, ord=-np.inf),
            Sample(apart, ord=0.5, dim=-1), Sample(apart, ord=-1.5, dim=1),
            Sample(apart, ord=0, dim=1), Sample(n(5), ord=2, dim=0, keepdim=True),
            Sample(np.asarray(1.5))]


# ---- composites -----------------------------------------------------------------------------
def _shapes(*shapes, **kwargs):
    def make(rng):
        return [Sample(*(rng.standard_normal(s) for s in group), **kwargs) for group in shapes]
    return make


def addmm(rng):
    n = rng.standard_normal
    return [Sample(n(4), n((2, 3)), n((3, 4)), beta=0.5, alpha=-2),
            Sample(n((2, 4)), n((2, 3)), n((3, 4)), beta=0), Sample(n((2, 4)), n((2, 3)),
                                                                   n((3, 4)))]


def addmv(rng):
    n = rng.standard_normal
    return [Sample(n(2), n((2, 3)), n(3), beta=2, alpha=0.5), Sample(n(1), n((2, 3)), n(3))]


def baddbmm(rng):
    n = rng.standard_normal
    return [Sample(n((2, 1, 4)), n((2, 3, 5)), n((2, 5, 4)), beta=2),
            Sample(n((2, 3, 4)), n((2, 3, 5)), n((2, 5, 4)), alpha=-1, beta=0)]


def matrix_power(rng):
    n = rng.standard_normal
    return [Sample(n((3, 3)) * 0.5, n=3), Sample(n((2, 2, 2)) * 0.5, n=5),
            Sample(n((3, 3)), n=1), Sample(_wellcond(rng, 3, 3), n=-2), Sample(n((3, 3)), n=0)]


def _squared_vectors(r):
    """eigh's result with the eigenvectors squared (invariant to their signs)."""
    return r[0], r[1] * r[1]


def eigh(rng):
    return [Sample(_symmetric(rng, 3, 3), prep=_sym, post=_squared_vectors),
            Sample(_symmetric(rng, 2, 4, 4), prep=_sym, post=_squared_vectors, UPLO="U")]


def _thin_squared(k):
    def post(r):
        u, vh = r[0][..., :k], r[2][..., :k, :]
        return u * u, r[1], vh * vh
    return post


def svd(rng):
    n = lambda *s: _spectrum(rng, *s)  # noqa: E731
    return [Sample(n(4, 3), full_matrices=False, post=_thin_squared(3)),
            Sample(n(2, 3, 5), full_matrices=False, post=_thin_squared(3)),
            Sample(n(5, 3), post=_thin_squared(3)), Sample(n(3, 4), post=_thin_squared(3))]


def lstsq(rng):
    a, n = (lambda *s: _spectrum(rng, *s)), rng.standard_normal
    return [Sample(a(5, 3), n((5, 2))), Sample(a(2, 5, 3), n((2, 5)), driver="gelsd"),
            Sample(a(1, 5, 3), n((2, 5, 2)), driver="gelss"),
            Sample(a(3, 5), n((3, 2)), driver="gelsd"),
            Sample(_wellcond(rng, 3, 3), n((3, 2)), driver="gels")]


def matrix_norm(rng):
    n = lambda *s: _spectrum(rng, *s)  # noqa: E731  (distinct singular values, no zeros)
    return ([Sample(n(2, 3, 4), ord=o) for o in ("fro", "nuc", 2, -2, 1, -1, np.inf, -np.inf)]
            + [Sample(np.moveaxis(n(4, 3, 2), -1, 0), ord=2, dim=(2, 0)),
               Sample(n(3, 4), ord=np.inf, keepdim=True),
               Sample(np.moveaxis(n(4, 2, 3), 0, -1), ord="nuc", dim=(0, 1), keepdim=True)])


def norm(rng):
    n, m = rng.standard_normal, (lambda *s: _spectrum(rng, *s))
    return [Sample(n((3, 4))), Sample(n((3, 4)), ord=2, dim=1), Sample(n(5), ord=3),
            Sample(m(3, 4), ord="nuc", dim=(0, 1)), Sample(n((3, 4)), keepdim=True),
            Sample(m(3, 4), ord=-2), Sample(m(3, 4), ord=1),
            Sample(m(3, 4), ord=0.5, dim=(1,))]


SAMPLES = {
    # primitives
    "matmul": matmul, "cross": cross, "inv": inv, "solve": solve, "det": det,
    "cholesky": cholesky, "pinv": pinv, "vector_norm": vector_norm,
    # composites
    "mm": _shapes(((2, 3), (3, 4))), "bmm": _shapes(((2, 2, 3), (2, 3, 2))),
    "mv": _shapes(((2, 3), (3,))), "dot": _shapes(((4,), (4,))),
    "outer": _shapes(((3,), (2,))), "addmm": addmm, "addmv": addmv, "baddbmm": baddbmm,
    "kron": _shapes(((2, 2), (3,)), ((2, 1, 3), (2, 2))),
    "diag": lambda rng: [Sample(rng.standard_normal(3), diagonal=1),
                         Sample(rng.standard_normal((3, 4)), diagonal=-1),
                         Sample(rng.standard_normal(3))],
    "trace": _shapes(((3, 4),), ((3, 3),)),
    "torch.linalg.cross": lambda rng: [
        Sample(rng.standard_normal((2, 3)), rng.standard_normal((1, 3))),
        Sample(rng.standard_normal((3, 2)), rng.standard_normal((3, 2)), dim=0)],
    "inverse": inv, "pinverse": lambda rng: [Sample(_spectrum(rng, 4, 3)),
                                             Sample(_spectrum(rng, 3, 4), rcond=1e-3)],
    "slogdet": lambda rng: [Sample(_wellcond(rng, 3, 3) * [[1], [-1], [1]]),
                            Sample(_wellcond(rng, 2, 4, 4))],
    "matrix_power": matrix_power, "eigh": eigh, "svd": svd,
    "svdvals": lambda rng: [Sample(_spectrum(rng, 3, 4)), Sample(_spectrum(rng, 2, 4, 3))],
    "qr": lambda rng: [Sample(_spectrum(rng, 4, 3)), Sample(_spectrum(rng, 2, 3, 3)),
                       Sample(_spectrum(rng, 3, 5)),
                       Sample(_spectrum(rng, 2, 4), mode="complete")],
    "lstsq": lstsq, "matrix_norm": matrix_norm,
    "torch.linalg.norm": norm,       # (torch.norm is another op: the reductions')
}
