"""pa.linalg: values and gradients against PyTorch, first and second order against finite
differences (gradcheck / gradgradcheck), errors, and the parallel engine."""
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import parallel_autograd as pa
from parallel_autograd import linalg as LA


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def _wellcond(*shape, seed=0):
    """Random matrices plus 3 I: far from singular."""
    return _rand(*shape, seed=seed) + 3 * np.eye(shape[-1])


def _spd(*shape, seed=0):
    a = _rand(*shape, seed=seed)
    return a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])


def _sym(x):
    return x + pa.swapaxes(x, -1, -2)


def _t(a, grad=True):
    return pa.tensor(a, requires_grad=grad)


# ---- first and second order against finite differences -----------------------------------
def _diag_weights(n):
    return pa.tensor(np.linspace(1.0, 2.0, n))


CASES = {
    "inv": (lambda a: LA.inv(a), [_wellcond(2, 3, 3)]),
    "solve_matrix": (lambda a, b: LA.solve(a, b), [_wellcond(2, 3, 3), _rand(3, 2, seed=1)]),
    "solve_vector": (lambda a, b: LA.solve(a, b), [_wellcond(2, 3, 3), _rand(2, 3, seed=1)]),
    "solve_right": (lambda a, b: LA.solve(a, b, left=False),
                    [_wellcond(3, 3), _rand(2, 3, seed=1)]),
    "det": (lambda a: LA.det(a), [_wellcond(2, 3, 3)]),
    "det_singular": (lambda a: LA.det(a), [np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0],
                                                     [1.0, 0.0, 1.0]])]),
    "slogdet": (lambda a: LA.slogdet(a).logabsdet, [_rand(2, 3, 3, seed=3)]),
    "cholesky": (lambda a: LA.cholesky(_sym(a) * 0.5), [_spd(2, 3, 3)]),
    "cholesky_upper": (lambda a: LA.cholesky(_sym(a) * 0.5, upper=True), [_spd(3, 3)]),
    "eigh_values": (lambda a: LA.eigh(_sym(a)).eigenvalues, [_rand(2, 3, 3)]),
    "eigh_vectors": (lambda a: (lambda q: q * q)(LA.eigh(_sym(a), UPLO="U").eigenvectors),
                     [_rand(3, 3)]),
    "eigh_projector": (lambda a: (lambda r: pa.matmul(r.eigenvectors * _diag_weights(3),
                                                      pa.swapaxes(r.eigenvectors, -1, -2)))(
        LA.eigh(_sym(a))), [_rand(3, 3, seed=2)]),
    "svd_S": (lambda a: LA.svd(a, full_matrices=False).S, [_rand(2, 4, 3)]),
    "svdvals": (lambda a: LA.svdvals(a), [_rand(3, 4)]),
    "svd_U_tall": (lambda a: (lambda u: u * u)(LA.svd(a, full_matrices=False).U),
                   [_rand(4, 3)]),
    "svd_Vh_wide": (lambda a: (lambda v: v * v)(LA.svd(a, full_matrices=False).Vh),
                    [_rand(3, 4)]),
    "svd_U_wide_full": (lambda a: (lambda u: u * u)(LA.svd(a).U), [_rand(3, 4, seed=5)]),
    "svd_Vh_tall_full": (lambda a: (lambda v: v[..., :3, :] ** 2)(LA.svd(a).Vh),
                         [_rand(4, 3, seed=6)]),
    "svd_UVh": (lambda a: (lambda r: pa.matmul(r.U * _diag_weights(3), r.Vh))(
        LA.svd(a, full_matrices=False)), [_rand(2, 4, 3, seed=7)]),
    "qr_tall": (lambda a: pa.concat([pa.reshape(t, (-1,)) for t in LA.qr(a)]), [_rand(4, 3)]),
    "qr_square_batch": (lambda a: pa.concat([pa.reshape(t, (-1,)) for t in LA.qr(a)]),
                        [_rand(2, 3, 3)]),
    "qr_wide": (lambda a: pa.concat([pa.reshape(t, (-1,)) for t in LA.qr(a)]), [_rand(3, 4)]),
    "qr_complete_wide": (lambda a: pa.concat([pa.reshape(t, (-1,))
                                              for t in LA.qr(a, "complete")]), [_rand(2, 4)]),
    "qr_R_only": (lambda a: LA.qr(a).R, [_rand(4, 3, seed=8)]),
    "pinv_tall": (lambda a: LA.pinv(a), [_rand(4, 3)]),
    "pinv_wide": (lambda a: LA.pinv(a), [_rand(2, 3, 4)]),
    "pinv_hermitian": (lambda a: LA.pinv(_sym(a), hermitian=True), [_rand(3, 3, seed=4)]),
    "lstsq_tall": (lambda a, b: LA.lstsq(a, b).solution, [_rand(4, 3), _rand(4, 2, seed=1)]),
    "lstsq_vector": (lambda a, b: LA.lstsq(a, b).solution, [_rand(2, 4, 2), _rand(2, 4, seed=1)]),
    "lstsq_square": (lambda a, b: LA.lstsq(a, b, driver="gelsd").solution,
                     [_wellcond(3, 3), _rand(3, 2, seed=1)]),
    "vector_norm_2": (lambda x: LA.vector_norm(x), [_rand(2, 3)]),
    "vector_norm_3_dim": (lambda x: LA.vector_norm(x, 3, dim=1, keepdim=True), [_rand(2, 3)]),
    "vector_norm_0.5": (lambda x: LA.vector_norm(x, 0.5, dim=(0,)), [_rand(2, 3)]),
    "vector_norm_1": (lambda x: LA.vector_norm(x, 1, dim=-1), [_rand(2, 3)]),
    "vector_norm_inf": (lambda x: LA.vector_norm(x, float("inf"), dim=0), [_rand(2, 3)]),
    "vector_norm_-inf": (lambda x: LA.vector_norm(x, -np.inf), [_rand(2, 3)]),
    "matrix_norm_fro": (lambda x: LA.matrix_norm(x), [_rand(2, 2, 3)]),
    "matrix_norm_nuc": (lambda x: LA.matrix_norm(x, "nuc", dim=(0, 2)), [_rand(3, 2, 3)]),
    "matrix_norm_2": (lambda x: LA.matrix_norm(x, 2, keepdim=True), [_rand(2, 3, 3)]),
    "matrix_norm_-2": (lambda x: LA.matrix_norm(x, -2), [_rand(3, 3)]),
    "matrix_norm_1": (lambda x: LA.matrix_norm(x, 1), [_rand(2, 3, 3)]),
    "matrix_norm_-inf": (lambda x: LA.matrix_norm(x, -np.inf, dim=(1, 0)), [_rand(3, 3)]),
    "norm_default": (lambda x: LA.norm(x), [_rand(2, 3)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradcheck_and_gradgradcheck(name):
    fn, arrays = CASES[name]
    inputs = [_t(a) for a in arrays]
    assert pa.gradcheck(fn, inputs)
    assert pa.gradgradcheck(fn, inputs)


def test_third_order_through_inv_and_eigh():
    # the twins use inv and eigh themselves: a third derivative exists and is right
    a = _t(_wellcond(3, 3))

    def second(x):
        (g,) = pa.grad(LA.inv(x).sum() + LA.eigh(_sym(x)).eigenvalues.pow(3).sum(), [x],
                       create_graph=True)
        return g

    assert pa.gradgradcheck(second, [a])


# ---- against PyTorch: values, gradients, second order ------------------------------------
torch_cases = {
    # name: (pa fn, torch fn, input arrays); fns map inputs to a tensor output
    "inv": (LA.inv, lambda t, a: t.linalg.inv(a), [_rand(2, 4, 4)]),
    "solve": (LA.solve, lambda t, a, b: t.linalg.solve(a, b), [_rand(2, 4, 4), _rand(4, 3)]),
    "solve_vec": (LA.solve, lambda t, a, b: t.linalg.solve(a, b), [_rand(2, 4, 4), _rand(2, 4)]),
    "solve_right": (lambda a, b: LA.solve(a, b, left=False),
                    lambda t, a, b: t.linalg.solve(a, b, left=False),
                    [_rand(4, 4), _rand(2, 3, 4)]),
    "det": (LA.det, lambda t, a: t.linalg.det(a), [_rand(3, 4, 4)]),
    "slogdet": (lambda a: LA.slogdet(a)[1], lambda t, a: t.linalg.slogdet(a)[1],
                [_rand(3, 4, 4)]),
    "cholesky": (lambda a: LA.cholesky(a), lambda t, a: t.linalg.cholesky(a), [_spd(2, 4, 4)]),
    "cholesky_upper": (lambda a: LA.cholesky(a, upper=True),
                       lambda t, a: t.linalg.cholesky(a, upper=True), [_spd(4, 4)]),
    "eigh_values": (lambda a: LA.eigh(a)[0], lambda t, a: t.linalg.eigh(a)[0], [_spd(2, 4, 4)]),
    "eigh_vectors_sq": (lambda a: LA.eigh(a)[1] ** 2, lambda t, a: t.linalg.eigh(a)[1] ** 2,
                        [_spd(2, 4, 4)]),
    "svd_S": (lambda a: LA.svd(a)[1], lambda t, a: t.linalg.svd(a)[1], [_rand(2, 5, 3)]),
    "svd_U_sq_full": (lambda a: LA.svd(a)[0] ** 2, lambda t, a: t.linalg.svd(a)[0] ** 2,
                      [_rand(2, 5, 3)]),
    "svd_Vh_sq_wide": (lambda a: LA.svd(a, False)[2] ** 2,
                       lambda t, a: t.linalg.svd(a, False)[2] ** 2, [_rand(2, 3, 5)]),
    "svdvals": (LA.svdvals, lambda t, a: t.linalg.svdvals(a), [_rand(4, 4)]),
    "qr_Q": (lambda a: LA.qr(a)[0], lambda t, a: t.linalg.qr(a)[0], [_rand(2, 5, 3)]),
    "qr_R": (lambda a: LA.qr(a)[1], lambda t, a: t.linalg.qr(a)[1], [_rand(2, 5, 3)]),
    "qr_wide_Q": (lambda a: LA.qr(a)[0], lambda t, a: t.linalg.qr(a)[0], [_rand(3, 5)]),
    "qr_wide_R": (lambda a: LA.qr(a)[1], lambda t, a: t.linalg.qr(a)[1], [_rand(3, 5)]),
    "qr_complete_R": (lambda a: LA.qr(a, "complete")[1],
                      lambda t, a: t.linalg.qr(a, "complete")[1], [_rand(4, 4)]),
    "pinv_tall": (LA.pinv, lambda t, a: t.linalg.pinv(a), [_rand(2, 5, 3)]),
    "pinv_wide": (LA.pinv, lambda t, a: t.linalg.pinv(a), [_rand(3, 5)]),
    "pinv_hermitian": (lambda a: LA.pinv(a, hermitian=True),
                       lambda t, a: t.linalg.pinv(a, hermitian=True), [_spd(4, 4) - 6 * np.eye(4)]),
    "lstsq": (lambda a, b: LA.lstsq(a, b)[0], lambda t, a, b: t.linalg.lstsq(a, b)[0],
              [_rand(2, 5, 3), _rand(2, 5, 2)]),
    "lstsq_vec": (lambda a, b: LA.lstsq(a, b)[0], lambda t, a, b: t.linalg.lstsq(a, b)[0],
                  [_rand(2, 5, 3), _rand(2, 5)]),
    # B's batch broadcast against A's: the rule's gX B^T has the wider batch
    "lstsq_broadcast": (lambda a, b: LA.lstsq(a, b)[0], lambda t, a, b: t.linalg.lstsq(a, b)[0],
                        [_rand(1, 5, 3), _rand(2, 5, 2)]),
    "lstsq_broadcast_wide": (lambda a, b: LA.lstsq(a, b, driver="gelsd")[0],
                             lambda t, a, b: t.linalg.lstsq(a, b, driver="gelsd")[0],
                             [_rand(3, 1, 3, 5), _rand(1, 2, 3, 2)]),
    # constant-rank formula at a rank-deficient matrix (as torch's pinv_backward)
    "pinv_rank2_tall": (LA.pinv, lambda t, a: t.linalg.pinv(a),
                        [_rand(5, 2) @ _rand(2, 3, seed=3)]),
    "pinv_rank2_wide": (LA.pinv, lambda t, a: t.linalg.pinv(a),
                        [_rand(2, 2) @ _rand(2, 5, seed=3)]),
    "lstsq_wide": (lambda a, b: LA.lstsq(a, b, driver="gelsd")[0],
                   lambda t, a, b: t.linalg.lstsq(a, b, driver="gelsd")[0],
                   [_rand(3, 5), _rand(3, 2)]),
    "vector_norm": (lambda x: LA.vector_norm(x, 3, dim=(0, 2)),
                    lambda t, x: t.linalg.vector_norm(x, 3, dim=(0, 2)), [_rand(2, 3, 4)]),
    "vector_norm_2": (lambda x: LA.vector_norm(x, dim=-1, keepdim=True),
                      lambda t, x: t.linalg.vector_norm(x, dim=-1, keepdim=True),
                      [_rand(2, 3, 4)]),
    "matrix_norm_nuc": (lambda x: LA.matrix_norm(x, "nuc"),
                        lambda t, x: t.linalg.matrix_norm(x, "nuc"), [_rand(2, 3, 4)]),
    "matrix_norm_2": (lambda x: LA.matrix_norm(x, 2, dim=(2, 0)),
                      lambda t, x: t.linalg.matrix_norm(x, 2, dim=(2, 0)), [_rand(2, 3, 4)]),
    "norm_inf": (lambda x: LA.norm(x, np.inf), lambda t, x: t.linalg.norm(x, np.inf),
                 [_rand(3, 4)]),
}


@pytest.mark.parametrize("name", sorted(torch_cases))
def test_against_torch_values_gradients_and_second_order(name):
    torch = pytest.importorskip("torch")
    fn, tfn, arrays = torch_cases[name]
    xs = [_t(a) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, tout = fn(*xs), tfn(torch, *ts)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-10, atol=1e-10)
    w = np.random.default_rng(9).uniform(0.5, 1.5, out.shape)
    gs = pa.grad(out, xs, grad_outputs=pa.tensor(w), create_graph=True)
    tgs = torch.autograd.grad(tout, ts, grad_outputs=torch.tensor(w), create_graph=True)
    for g, tg in zip(gs, tgs):
        np.testing.assert_allclose(g.numpy(), tg.detach().numpy(), rtol=1e-10, atol=1e-10)
    # second order: d/dx <grad, v>
    vs = [np.random.default_rng(10 + i).standard_normal(a.shape) for i, a in enumerate(arrays)]
    s = sum((g * pa.tensor(v)).sum() for g, v in zip(gs, vs))
    ts_s = sum((tg * torch.tensor(v)).sum() for tg, v in zip(tgs, vs))
    thv = torch.autograd.grad(ts_s, ts, allow_unused=True) if ts_s.requires_grad else \
        [None] * len(ts)
    if not s.requires_grad:  # a piecewise-linear op: the first-order gradient is constant
        assert all(th is None or not th.any() for th in thv)
        return
    hv = pa.grad(s, xs, allow_unused=True)
    for h, th in zip(hv, thv):
        # (torch's zero second derivative of a piecewise-linear op may be a ZeroTensor)
        th = np.zeros_like(h) if th is None or th._is_zerotensor() else th.numpy()
        np.testing.assert_allclose(h, th, rtol=1e-8, atol=1e-9)


def test_float32_follows_torch():
    torch = pytest.importorskip("torch")
    a = _wellcond(2, 3, 3).astype(np.float32)
    x = _t(a)
    t = torch.tensor(a, requires_grad=True)
    y, ty = LA.inv(x), torch.linalg.inv(t)
    assert y.dtype == np.float32
    y.sum().backward()
    ty.sum().backward()
    assert x.grad.dtype == np.float32
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(LA.det(a).numpy(), torch.linalg.det(torch.tensor(a)).numpy(),
                               rtol=1e-5)


def test_det_of_singular_matrix_is_the_cofactor_matrix():
    # rank n-1: the cofactor matrix is not 0 (torch 2.13 returns 0 here; finite
    # differences agree with us, `det_singular` above)
    a = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])
    x = _t(a)
    LA.det(x).backward()
    cof = np.array([[4.0, 4.0, -4.0], [-2.0, -2.0, 2.0], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(x.grad, cof, atol=1e-12)
    # rank n-2: all cofactors vanish
    x = _t(np.ones((2, 3, 3)))
    LA.det(x).sum().backward()
    np.testing.assert_allclose(x.grad, 0, atol=1e-12)


def test_lstsq_fields_follow_torch_drivers():
    torch = pytest.importorskip("torch")
    a, b = _rand(2, 5, 3), _rand(2, 5, 2, seed=1)
    for driver in (None, "gels", "gelsy", "gelsd", "gelss"):
        r = LA.lstsq(a, b, driver=driver)
        tr = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b), driver=driver)
        assert r._fields == ("solution", "residuals", "rank", "singular_values")
        for f in r._fields:
            mine, theirs = getattr(r, f).numpy(), getattr(tr, f).numpy()
            assert mine.shape == theirs.shape, (driver, f)
            assert mine.dtype == theirs.dtype, (driver, f)
            np.testing.assert_allclose(mine, theirs, rtol=1e-10, atol=1e-12)
    # rank deficient: rank counts, no residuals
    a2 = a.copy()
    a2[1, :, 2] = a2[1, :, 1]
    r = LA.lstsq(a2, b, driver="gelsd")
    assert r.rank.numpy().tolist() == [3, 2] and r.residuals.shape == (0,)
    assert not r.residuals.requires_grad and not r.rank.requires_grad


def test_named_results_and_outputs_without_gradient():
    x = _t(_spd(3, 3))
    res = LA.eigh(x)
    assert res._fields == ("eigenvalues", "eigenvectors")
    assert LA.svd(x)._fields == ("U", "S", "Vh")
    assert LA.qr(x)._fields == ("Q", "R")
    sign, logabsdet = LA.slogdet(x)
    assert not sign.requires_grad and logabsdet.requires_grad
    q, r = LA.qr(x, mode="r")
    assert q.shape == (0,) and r.requires_grad
    # an unused output costs nothing: only the used output's node runs
    (g,) = pa.grad(res.eigenvalues.sum(), [x])
    np.testing.assert_allclose(g, np.eye(3), atol=1e-12)   # d trace / dA


def test_torch_names_methods_and_top_level():
    torch = pytest.importorskip("torch")
    a = _wellcond(3, 3)
    x = _t(a)
    t = torch.tensor(a)
    np.testing.assert_allclose(x.det().numpy(), t.det().numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.inverse().numpy(), t.inverse().numpy(), rtol=1e-12)
    np.testing.assert_allclose(pa.pinverse(x).numpy(), torch.pinverse(t).numpy(), rtol=1e-10)
    np.testing.assert_allclose(x.slogdet()[1].numpy(), t.slogdet()[1].numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.pinverse().numpy(), t.pinverse().numpy(), rtol=1e-10)
    np.testing.assert_allclose(pa.det(x).numpy(), torch.det(t).numpy(), rtol=1e-12)
    np.testing.assert_allclose(pa.inverse(x).numpy(), torch.inverse(t).numpy(), rtol=1e-12)
    np.testing.assert_allclose(pa.slogdet(x).logabsdet.numpy(), torch.slogdet(t)[1].numpy())
    assert pa.linalg.matmul is pa.matmul
    for args in [{}, {"ord": 2, "dim": 1}, {"ord": "nuc", "dim": (0, 1)}, {"keepdim": True},
                 {"ord": -2}, {"ord": 1}, {"ord": 0.5, "dim": (1,)}]:
        np.testing.assert_allclose(LA.norm(x, **args).numpy(), torch.linalg.norm(t, **args).numpy(),
                                   rtol=1e-12)
    v = _rand(5)
    np.testing.assert_allclose(LA.norm(v, 3).numpy(), torch.linalg.norm(torch.tensor(v), 3).numpy())


def test_norm_dtype_argument_and_zero_norm_gradient():
    x = _t(np.zeros((2, 3)))
    y = LA.vector_norm(x, dim=1)
    y.sum().backward()
    assert np.array_equal(x.grad, np.zeros((2, 3)))            # torch: 0, not NaN
    x32 = _t(_rand(2, 3).astype(np.float32))
    y = LA.vector_norm(x32, dtype=np.float64)
    assert y.dtype == np.float64
    y.backward()
    assert x32.grad.dtype == np.float32


# ---- errors --------------------------------------------------------------------------------
def test_bad_input_raises_pytorchs_exception_types_before_recording():
    # PyTorch's types: RuntimeError for shapes, dtypes and arguments, IndexError for a dim
    # out of range, TypeError for an argument of the wrong type, LinAlgError (a
    # RuntimeError) for a singular or not positive-definite matrix (before: ValueError,
    # TypeError, numpy's LinAlgError, a ValueError)
    x = _t(np.ones((2, 3)))
    with pytest.raises(RuntimeError, match=r"linalg.inv: A must be batches of square "
                                           r"matrices, but they are 2 by 3 matrices"):
        LA.inv(x)
    with pytest.raises(RuntimeError, match="linalg.det: A must be batches of square"):
        LA.det(x)
    with pytest.raises(RuntimeError, match="linalg.cholesky: The input tensor A must have "
                                           "at least 2 dim"):
        LA.cholesky(_t(np.ones(3)))
    with pytest.raises(RuntimeError, match="linalg.inv: Expected a floating point"):
        LA.inv(np.eye(2, dtype=np.int64))
    with pytest.raises(RuntimeError, match="same dtype"):
        LA.solve(np.eye(2), np.ones(2, np.float32))
    singular = _t(np.array([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 2.0], [2.0, 4.0]]]))
    with pytest.raises(LA.LinAlgError, match=r"linalg.inv: the input matrix is singular.*"
                                             r"batch element \(1,\)"):
        LA.inv(singular)
    with pytest.raises(LA.LinAlgError, match="linalg.solve: .*singular"):
        LA.solve(singular, np.ones(2))
    with pytest.raises(RuntimeError, match="linalg.cholesky: .*not positive-definite"):
        LA.cholesky(-np.eye(2))
    with pytest.raises(RuntimeError, match=r"incompatible shapes of A and B .* \(3x3 and 2x1\)"):
        LA.solve(np.eye(3), np.ones(2))
    with pytest.raises(RuntimeError, match="batch dimensions of A .* do not broadcast"):
        LA.solve(np.ones((2, 3, 3)), np.ones((4, 3, 1)))
    with pytest.raises(RuntimeError, match="linalg.lstsq: A and B must have the same number"):
        LA.lstsq(np.ones((4, 3)), np.ones((3, 2)))
    with pytest.raises(RuntimeError, match="driver"):
        LA.lstsq(np.ones((4, 3)), np.ones((4, 2)), driver="gelsx")
    with pytest.raises(RuntimeError, match="unrecognized mode 'full'"):
        LA.qr(x, mode="full")
    with pytest.raises(RuntimeError, match="UPLO"):
        LA.eigh(np.eye(2), UPLO="X")
    with pytest.raises(RuntimeError, match="matrix_norm: Order 3 not supported"):
        LA.matrix_norm(x, 3)
    with pytest.raises(RuntimeError, match="matrix_norm: dim must be a 2-tuple"):
        LA.matrix_norm(x, dim=(0,))
    with pytest.raises(RuntimeError, match="appears multiple times"):
        LA.matrix_norm(x, dim=(0, 0))
    with pytest.raises(TypeError, match="vector_norm: argument 'ord' must be a number"):
        LA.vector_norm(x, "fro")
    with pytest.raises(IndexError, match="Dimension out of range"):
        LA.vector_norm(x, dim=2)
    with pytest.raises(RuntimeError, match="vector_norm: Expected a floating point"):
        LA.vector_norm(np.ones(3, np.int64))
    with pytest.raises(RuntimeError, match="without narrowing"):
        LA.vector_norm(x, dtype=np.float32)
    with pytest.raises(RuntimeError, match="norm: if dim is not given but ord is"):
        LA.norm(np.ones((2, 2, 2)), 2)
    with pytest.raises(RuntimeError, match="driver="):
        LA.svd(x, driver="gesvd")
    assert issubclass(LA.LinAlgError, RuntimeError)
    assert x.grad is None and singular.grad is None


def test_solve_left_false_takes_b_as_torch_does():
    # a batch of vectors is a batch of columns, left or right (torch): XA = B then needs
    # B's columns to number n, so torch refuses it; it was solved as rows before
    a = _wellcond(2, 3, 3)
    for b in (np.ones(3), np.ones((2, 3))):
        with pytest.raises(RuntimeError, match=r"XA = B \(3x3 and 3x1\)"):
            LA.solve(a, b, left=False)
    torch = pytest.importorskip("torch")
    for b in (np.ones(3), np.ones((2, 3))):
        with pytest.raises(RuntimeError, match=r"XA = B \(3x3 and 3x1\)"):
            torch.linalg.solve(torch.tensor(a), torch.tensor(b), left=False)
    b = _rand(4, 3, seed=2)            # a matrix: X (4 x 3) A = B
    np.testing.assert_allclose(LA.solve(a[0], b, left=False).numpy(),
                               torch.linalg.solve(torch.tensor(a[0]), torch.tensor(b),
                                                  left=False).numpy(), rtol=1e-12)


def test_exception_types_are_pytorchs():
    torch = pytest.importorskip("torch")
    calls = [
        lambda L, t: L.linalg.inv(t(np.ones((2, 3)))),
        lambda L, t: L.linalg.inv(t(np.eye(2, dtype=np.int64))),
        lambda L, t: L.linalg.inv(t(np.array([[1.0, 2.0], [2.0, 4.0]]))),
        lambda L, t: L.linalg.solve(t(np.eye(3)), t(np.ones(2))),
        lambda L, t: L.linalg.solve(t(np.eye(2)), t(np.ones(2, np.float32))),
        lambda L, t: L.linalg.cholesky(t(-np.eye(2))),
        lambda L, t: L.linalg.qr(t(np.ones((2, 3))), mode="full"),
        lambda L, t: L.linalg.eigh(t(np.eye(2)), UPLO="X"),
        lambda L, t: L.linalg.lstsq(t(np.ones((4, 3))), t(np.ones((3, 2)))),
        lambda L, t: L.linalg.matrix_norm(t(np.ones((2, 3))), 3),
        lambda L, t: L.linalg.vector_norm(t(np.ones((2, 3))), "fro"),
        lambda L, t: L.linalg.vector_norm(t(np.ones((2, 3))), dim=2),
        lambda L, t: L.linalg.vector_norm(t(np.ones((2, 3), np.int64))),
        lambda L, t: L.linalg.norm(t(np.ones((2, 2, 2))), 2),
        lambda L, t: L.linalg.matrix_power(t(np.ones((2, 3))), 2),
    ]
    for call in calls:
        with pytest.raises(Exception) as theirs:
            call(torch, torch.tensor)
        with pytest.raises(Exception) as ours:
            call(pa, pa.tensor)
        kind = type(theirs.value)
        want = RuntimeError if issubclass(kind, RuntimeError) else kind
        assert isinstance(ours.value, want), (ours.value, theirs.value)


def test_undefined_gradients_raise_in_backward():
    x = _t(_rand(4, 3))
    q, r = LA.qr(x, mode="complete")
    with pytest.raises(RuntimeError, match="not differentiable when mode='complete'"):
        q.sum().backward()
    _, r = LA.qr(x, mode="r")
    with pytest.raises(RuntimeError, match="depends on Q, which is not computed"):
        r.sum().backward()
    s = _t(np.array([[1.0, 2.0], [2.0, 4.0]]))
    sign, logabsdet = LA.slogdet(s)
    assert sign.item() == 0 and logabsdet.item() == -np.inf
    with pytest.raises(LA.LinAlgError, match="slogdet: the gradient of logabsdet"):
        logabsdet.backward()
    assert x.grad is None and s.grad is None


# ---- the parallel engine -------------------------------------------------------------------
def test_parallel_engine_is_bitwise_the_sequential_one():
    a = _t(_wellcond(2, 4, 4))
    b = _t(_rand(2, 4, 3, seed=1))

    def loss():
        x = LA.solve(a, b)
        u, s, vh = LA.svd(a)
        w, q = LA.eigh(_sym(a))
        return (LA.inv(a).sum() + LA.det(a).sum() + (x * x).sum() + s.sum()
                + (q * q * w[..., None, :]).sum() + LA.cholesky(
                    pa.matmul(a, pa.swapaxes(a, -1, -2))).sum()
                + LA.matrix_norm(a, "nuc").sum() + LA.lstsq(b, a[..., :3]).solution.sum()
                + (u[..., :3] ** 2 * LA.qr(a).R[..., :1, :3]).sum())

    opts = dict(min_nodes=0, min_work=0, min_width=0, inline_below=0, max_blas_share=1.0)
    with threadpool_limits(1, user_api="blas"):
        want = pa.grad(loss(), [a, b])
        with pa.Engine(2, **opts) as eng:
            for _ in range(3):
                got = eng.grad(loss(), [a, b])
                assert eng.last_stats.mode == "parallel"
                for w, g in zip(want, got):
                    assert np.array_equal(w, g) and w.numpy().tobytes() == g.numpy().tobytes()
        # and the create_graph pass
        want2 = pa.grad(loss(), [a], create_graph=True)[0].sum()
        (want2,) = pa.grad(want2, [a])
        with pa.Engine(2, **opts) as eng:
            got2 = eng.grad(loss(), [a], create_graph=True)[0].sum()
            (got2,) = eng.grad(got2, [a])
        assert want2.numpy().tobytes() == got2.numpy().tobytes()


def test_inf_norms_of_empty_tensors_as_torch():
    # only an empty reduced dimension (or, without dims, an empty tensor) is refused; an
    # empty tensor reduced along a non-empty dimension gives an empty result
    x = pa.tensor(np.zeros((0, 3)), requires_grad=True)
    for p in (np.inf, -np.inf):
        y = LA.vector_norm(x, p, dim=1)
        assert y.shape == (0,)
        pa.backward(y.sum())
        assert x.grad.shape == (0, 3)
        for bad in (dict(dim=0), {}):
            with pytest.raises(RuntimeError, match="of an empty tensor is not defined"):
                LA.vector_norm(x, p, **bad)
    torch = pytest.importorskip("torch")
    assert tuple(torch.linalg.vector_norm(torch.zeros(0, 3), np.inf, dim=1).shape) == (0,)
