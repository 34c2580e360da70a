"""Allocation of the index ops (ops/index.py), index_put (ops/writes/setitem.py) and pa.linalg.

Each op's forward and each of its rules, called as the engine calls them
(`vjp(g, *node.saved, **node.kwargs)` or `joint(g, *node.saved, **node.kwargs)`), on inputs
of a few MB, allocates at most what it returns plus the bound stated per case (tests/conftest.py's
`temporary_bytes`: the peak of traced bytes beyond the result). SLACK (128 KiB) covers
Python objects, numpy's fancy-indexing buffers (about 70 KB) and small index arrays.
The bounds, and why each is legitimate:

- the copying index ops and their rules: the result only (gather/scatter keep their
  coordinate grids, O(rows + cols) ints); tril/triu: numpy's n x n bool mask (1/8);
- scatter: its duplicate check holds index-sized ints (a flat copy and a sorted one; with
  repeats np.unique's copies); its src rule and masked_scatter's source rule hold the
  selected values (the part of the result index names) before placing them in zeros;
  index_add with alpha != 1 holds alpha * source; einsum's repeated-subscript rule holds
  its identity constant; index_put with a repeating index holds one chunk of the winning
  writes' values (it finds them over the index alone: O(index) ints);
- linalg: the work matrices each rule's GEMM chain needs (named per case in units of the
  input matrix) and the decomposition's own outputs (U, Vh of svdvals and lstsq, the
  lower factor of cholesky(upper=True)); LAPACK's workspaces are not traced.
"""
import numpy as np
import pytest
from conftest import temporary_bytes

import parallel_autograd as pa
from parallel_autograd.ops.writes.setitem import index_put

L = pa.linalg
SLACK = 192 * 1024                       # ~ a seventh of the index ops' result
RNG = np.random.default_rng(15)
N = 400                                  # index ops: N x N float64 (1.28 MB)
X = RNG.standard_normal((N, N))
IDX = RNG.integers(0, N, (N, N))         # with repeats
PERM = np.argsort(RNG.random((N, N)), axis=1)[:, :N // 2]   # distinct along dim 1
ROWS = RNG.integers(0, N, N - 80)
MASK = X > 0
M = 240                                  # linalg: M x M (460 KB), tall/wide M x 2M/3
A = RNG.standard_normal((M, M)) + M * np.eye(M)
SPD = A @ A.T
TALL = RNG.standard_normal((M, 2 * M // 3))
WIDE = np.ascontiguousarray(TALL.T)
MAT = 8 * M * M                          # one M x M matrix
THIN = 8 * M * (2 * M // 3)              # one tall matrix; its k x k square is 4/9 MAT
FLOAT = 8


def _t(a):
    return pa.tensor(a, requires_grad=True)


def _nbytes(r):
    items = r if isinstance(r, (tuple, list)) else (r,)
    return sum(np.asarray(getattr(a, "data", a)).nbytes for a in items if a is not None)


# name -> (op, inputs, forward bound, rule bound): bounds are (factor of the result,
# bytes), the allowance being factor * result + bytes + SLACK
NONE = (0.0, 0)
CASES = {
    "repeat": (lambda a: pa.repeat(a, 2, 1), [X], NONE, NONE),
    "flip": (lambda a: pa.flip(a, 0), [X], NONE, NONE),
    "roll": (lambda a: pa.roll(a, 3, 0), [X], NONE, NONE),
    "tril": (lambda a: pa.tril(a), [X], (0.14, 0), (0.14, 0)),       # numpy's bool mask
    "triu": (lambda a: pa.triu(a, 1), [X], (0.14, 0), (0.14, 0)),
    "diagonal": (lambda a: pa.diagonal(a, 1), [X], NONE, NONE),
    "diag_embed": (lambda a: pa.diag_embed(a), [X[:12]], NONE, NONE),
    "gather": (lambda a: pa.gather(a, 1, IDX), [X], NONE, NONE),
    "take_along_dim": (lambda a: pa.take_along_dim(a, IDX, 1), [X], NONE, NONE),
    "scatter_add": (lambda a, b: pa.scatter_add(a, 1, IDX, b), [X, X], NONE, NONE),
    # duplicate check: a flat and a sorted copy of the index; src rule: the selection
    "scatter": (lambda a, b: pa.scatter(a, 1, PERM, b), [X, X],
                (0, 2.1 * PERM.nbytes), (0, 1.05 * PERM.size * FLOAT)),
    "scatter_repeats": (lambda a, b: pa.scatter(a, 1, IDX, b), [X, X],
                        (0, 4.6 * IDX.nbytes), NONE),                # np.unique's copies
    "scatter_value": (lambda a: pa.scatter(a, 1, IDX, value=2.0), [X], NONE, NONE),
    "index_select": (lambda a: pa.index_select(a, 0, ROWS), [X], NONE, NONE),
    "index_add": (lambda a, b: pa.index_add(a, 0, ROWS, b), [X, X[:N - 80]], NONE, NONE),
    "index_add_alpha": (lambda a, b: pa.index_add(a, 0, ROWS, b, alpha=2.0),
                        [X, X[:N - 80]], (0, 1.05 * X[:N - 80].nbytes), NONE),
    "masked_fill": (lambda a: pa.masked_fill(a, MASK, 1.5), [X], NONE, NONE),
    "masked_scatter": (lambda a, b: pa.masked_scatter(a, MASK, b), [X, X],
                       NONE, (0, 1.05 * FLOAT * np.count_nonzero(MASK))),
    "einsum_matmul": (lambda a, b: pa.einsum("ij,jk->ik", a, b), [X, X], NONE, NONE),
    "einsum_diagonal": (lambda a: pa.einsum("ii->i", a), [X], NONE, (0, 1.05 * X.nbytes)),
    "index_put_slice": (lambda a, v: index_put(a, (slice(None), slice(0, N // 2)), v),
                        [X, X[:, :N // 2]], NONE, NONE),
    # a repeating row index: the winners are found over the N-long index (O(N) ints, in
    # SLACK); the forward gathers their values a chunk at a time (setitem._CHUNK, 2**15
    # float64s); the value rule np.takes g into its result and zeroes the losing rows
    "index_put_repeats": (lambda a, v: index_put(a, IDX[:, 0], v), [X, X],
                          (0, 2 ** 15 * FLOAT), NONE),
    # ---- linalg: work matrices in units of the input matrix
    "inv": (L.inv, [A], NONE, (0, 1.05 * MAT)),                 # the first product
    "solve": (L.solve, [A, A[:, :M // 2]], NONE, NONE),
    "det": (L.det, [A / M], (0, 0.5 * MAT), (0.1, 0)),
    "slogdet": (L.slogdet, [A], NONE, (0.1, 0)),
    "cholesky": (L.cholesky, [SPD], NONE, (0, 2.3 * MAT)),       # L^-1, one product, mask
    "cholesky_upper": (lambda a: L.cholesky(a, upper=True), [SPD],
                       (0, 1.05 * MAT), (0, 2.3 * MAT)),        # + the lower factor
    # values: Q diag(g); vectors: K^T (then E in it), Q K
    "eigh": (L.eigh, [SPD], NONE, (0, 1.25 * MAT)),
    # U's rule: gU / S and the inner sum (tall), the k x k skew part; Vh's: the k x k part
    # and U S^-1 gV^T-sized terms: at most 2.75 tall matrices
    "svd_tall": (lambda a: L.svd(a, full_matrices=False), [TALL], NONE, (0, 2.75 * THIN)),
    "svd_wide": (lambda a: L.svd(a, full_matrices=False), [WIDE], NONE, (0, 2.75 * THIN)),
    "svdvals": (L.svdvals, [TALL], (0, 1.5 * THIN), (0, 1.05 * THIN)),   # U and Vh kept
    # qr's rules: k x k matrices (R's inverse, M) and a 64-row block of the result
    "qr_tall": (L.qr, [TALL], (0, 1.15 * THIN), (0, 1.0 * THIN)),
    # (numpy 2.5's matmul copies one more strided operand in the rule than 2.4's)
    "qr_wide": (L.qr, [WIDE], (0, 1.2 * THIN), (0, 1.7 * THIN)),
    # the SVD's U and Vh (scaled in place); the rule: one tall and two n x n matrices
    "pinv_tall": (L.pinv, [TALL], (0, 1.8 * THIN), (0, 2.7 * THIN)),
    "pinv_wide": (L.pinv, [WIDE], (0, 1.8 * THIN), (0, 2.5 * THIN)),
    # + the saved pinv(A); the rule: pinv's, in the tall gX B^T it makes
    "lstsq": (lambda a, b: L.lstsq(a, b).solution, [TALL, TALL[:, :M // 3]],
              (0, 2.8 * THIN), (0, 2.65 * THIN)),
}


# The linalg forwards are numpy's LAPACK wrappers, and several rules call them again (det's
# and slogdet's an inverse, solve's a solve, qr's R^-1): their own copies and workspaces
# change between numpy versions (2.5 copies more than 2.4), so a forward or rule may also
# use what numpy's call of that routine uses, measured here in the same process.
_SVD = lambda a: np.linalg.svd(a, full_matrices=False)  # noqa: E731
NUMPY_WORK = {
    "inv": (np.linalg.inv, [A]), "solve": (np.linalg.solve, [A, A[:, :M // 2]]),
    "det": (np.linalg.inv, [A / M]), "slogdet": (np.linalg.inv, [A]),
    "cholesky": (np.linalg.cholesky, [SPD]), "cholesky_upper": (np.linalg.cholesky, [SPD]),
    "eigh": (np.linalg.eigh, [SPD]), "svd_tall": (_SVD, [TALL]), "svd_wide": (_SVD, [WIDE]),
    "svdvals": (_SVD, [TALL]), "qr_tall": (np.linalg.qr, [TALL]),
    "qr_wide": (np.linalg.qr, [WIDE]), "pinv_tall": (_SVD, [TALL]),
    "pinv_wide": (_SVD, [WIDE]), "lstsq": (_SVD, [TALL]),
}
_R = np.linalg.qr(TALL)[1]                  # k x k, as R (and R1 of the wide case)
RULE_WORK = {"qr_tall": (np.linalg.inv, [_R]), "qr_wide": (np.linalg.inv, [_R]),
             "pinv_tall": None, "pinv_wide": None, "lstsq": None}   # GEMMs only


def _numpy_work(name, rule: bool = False) -> int:
    work = RULE_WORK.get(name, NUMPY_WORK.get(name)) if rule else NUMPY_WORK.get(name)
    if work is None:
        return 0
    fn, arrays = work
    return temporary_bytes(fn, *arrays)[1]


def _rules(out):
    """(name, callable) per rule of each recorded output, as the engine calls them."""
    outs = out if isinstance(out, tuple) else (out,)
    for j, o in enumerate(outs):
        node = getattr(o, "grad_fn", None)
        if node is None:
            continue
        g = np.random.default_rng(j).uniform(0.5, 1.5, o.shape)
        kw = node.kwargs or {}
        if getattr(node, "joint", None) is not None:
            yield f"output {j} joint", lambda n=node, g=g, kw=kw: n.joint(g, *n.saved, **kw)
            continue
        for i, v in enumerate(node.vjps):
            if v is not None:
                yield f"output {j} rule {i}", lambda v=v, n=node, g=g, kw=kw: v(
                    g, *n.saved, **kw)


def _check(what, extra, result, bound):
    factor, fixed = bound
    allowed = factor * _nbytes(result) + fixed + SLACK
    assert extra <= allowed, (f"{what}: {extra} bytes beyond its result of {_nbytes(result)}"
                              f" (allowed {allowed:.0f})")


@pytest.mark.parametrize("name", list(CASES))
def test_forward_and_rules_allocate_within_their_bound(name):
    op, arrays, fwd, rule = CASES[name]
    leaves = [_t(a) for a in arrays]
    out, extra = temporary_bytes(op, *leaves)
    _check(f"{name} forward", extra - _numpy_work(name), out, fwd)
    count = 0
    for what, call in _rules(out):
        result, extra = temporary_bytes(call)
        _check(f"{name} {what}", extra - _numpy_work(name, True), result, rule)
        count += 1
    assert count, f"{name} recorded no rule"


def test_the_lean_rules_keep_their_values():
    # the rules rewritten to reuse their buffers give the textbook formulas' values
    q = np.linalg.eigh(SPD)[1]
    w = np.linalg.eigh(SPD)[0]
    g = RNG.standard_normal((M, M))
    e = w[None, :] - w[:, None] + np.eye(M)
    k = q.T @ g
    want = q @ (((k - k.T) * 0.5) / e) @ q.T
    Q = L.eigh(_t(SPD)).eigenvectors
    got = Q.grad_fn.vjps[0](g, *Q.grad_fn.saved, **Q.grad_fn.kwargs)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    lo = np.linalg.cholesky(SPD)
    m = lo.T @ g
    phi = (np.tril(m) + np.tril(m, -1).T) * 0.5
    li = np.linalg.inv(lo)
    C = L.cholesky(_t(SPD))
    got = C.grad_fn.vjps[0](g, *C.grad_fn.saved, **C.grad_fn.kwargs)
    np.testing.assert_allclose(got, li.T @ phi @ li, rtol=1e-9, atol=1e-15)
