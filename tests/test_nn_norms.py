"""batch_norm, instance_norm, group_norm, local_response_norm and their layers
(nn/_norms.py, nn/modules/norm.py): values, gradients and running statistics against
PyTorch, training steps and evaluation of the layers, state dicts, first and second
derivatives, the parallel engine bit for bit, bad input (leaving the running statistics
untouched), concurrent training forwards, and the memory of batch_norm's node."""
import threading

import numpy as np
import pytest

import parallel_autograd as pa
import parallel_autograd.nn.functional as F
from conftest import assert_bitwise, temporary_bytes

RNG = np.random.default_rng(16)


def _torch():
    return pytest.importorskip("torch")


def _close(a, b, tol=1e-10):
    b = b.detach().numpy() if hasattr(b, "detach") else np.asarray(b)
    np.testing.assert_allclose(np.asarray(a), b, rtol=tol, atol=tol)


def _data(shape, c_axis=1):
    """Values with a different mean and scale per channel."""
    x = RNG.standard_normal(shape)
    view = [1] * len(shape)
    view[c_axis] = shape[c_axis]
    return x * RNG.uniform(0.5, 3.0, shape[c_axis]).reshape(view) \
        + RNG.uniform(-2, 2, shape[c_axis]).reshape(view)


def _both(torch, *arrays):
    """Each array as a pa leaf and a torch leaf, requiring grad."""
    return ([pa.tensor(a, requires_grad=True) for a in arrays],
            [torch.tensor(a, requires_grad=True) for a in arrays])


def _compare(torch, fn_pa, fn_torch, arrays, extra=()):
    """fn(*tensors) on both libraries: values and the gradients of sum(out * seed)."""
    ps, ts = _both(torch, *arrays)
    out, tout = fn_pa(*ps), fn_torch(*ts)
    seed = RNG.standard_normal(out.shape)
    _close(out.numpy(), tout)
    grads = pa.grad(out, ps, grad_outputs=seed)
    tout.backward(torch.tensor(seed))
    for g, t in zip(grads, ts):
        _close(g, t.grad)


# ---- functional against PyTorch -------------------------------------------------------------
@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5), (2, 3, 4, 5)])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_matches_torch(shape, training, affine):
    torch = _torch()
    x = _data(shape)
    rm, rv = RNG.standard_normal(3), RNG.uniform(0.5, 2.0, 3)
    run_p, run_t = (pa.tensor(rm), pa.tensor(rv)), (torch.tensor(rm), torch.tensor(rv))
    arrays = [x] + ([RNG.uniform(0.5, 2, 3), RNG.standard_normal(3)] if affine else [])

    def call(lib_F, run, *ts):
        w, b = ts[1:] if affine else (None, None)
        return lib_F.batch_norm(ts[0], *run, w, b, training, 0.3, 1e-3)

    _compare(torch, lambda *ts: call(F, run_p, *ts),
             lambda *ts: call(torch.nn.functional, run_t, *ts), arrays)
    for p, t in zip(run_p, run_t):
        _close(p.numpy(), t)


def test_batch_norm_without_running_stats_and_float32():
    torch = _torch()
    x = _data((5, 4, 3))
    _compare(torch, lambda x: F.batch_norm(x, None, None, training=True),
             lambda x: torch.nn.functional.batch_norm(x, None, None, training=True), [x])
    x32 = pa.tensor(x.astype(np.float32))
    with pytest.raises(RuntimeError, match="mixed dtype"):  # float64 stats: torch raises too
        F.batch_norm(x32, np.zeros(4), np.ones(4), training=True)
    y = F.batch_norm(x32, np.zeros(4, np.float32), np.ones(4, np.float32), training=True)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.numpy().mean(axis=(0, 2)), 0, atol=1e-6)


@pytest.mark.parametrize("shape", [(2, 3, 5), (3, 3, 2, 3)])
@pytest.mark.parametrize("affine", [True, False])
def test_instance_norm_matches_torch(shape, affine):
    torch = _torch()
    x = _data(shape)
    rm, rv = RNG.standard_normal(3), RNG.uniform(0.5, 2.0, 3)
    run_p, run_t = (pa.tensor(rm), pa.tensor(rv)), (torch.tensor(rm), torch.tensor(rv))
    arrays = [x] + ([RNG.uniform(0.5, 2, 3), RNG.standard_normal(3)] if affine else [])
    for use_input_stats in (True, False):
        def call(lib_F, run, *ts):
            w, b = ts[1:] if affine else (None, None)
            return lib_F.instance_norm(ts[0], *run, w, b, use_input_stats, 0.2, 1e-4)

        _compare(torch, lambda *ts: call(F, run_p, *ts),
                 lambda *ts: call(torch.nn.functional, run_t, *ts), arrays)
        for p, t in zip(run_p, run_t):
            _close(p.numpy(), t)


@pytest.mark.parametrize("shape,groups", [((2, 6, 5), 3), ((2, 6, 3, 3), 2), ((4, 6), 6),
                                          ((2, 4, 3), 1)])
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm_matches_torch(shape, groups, affine):
    torch = _torch()
    c = shape[1]
    arrays = [_data(shape)] + ([RNG.uniform(0.5, 2, c), RNG.standard_normal(c)] if affine
                               else [])

    def call(lib_F, *ts):
        w, b = ts[1:] if affine else (None, None)
        return lib_F.group_norm(ts[0], groups, w, b, eps=1e-4)

    _compare(torch, lambda *ts: call(F, *ts), lambda *ts: call(torch.nn.functional, *ts),
             arrays)


@pytest.mark.parametrize("shape,size", [((2, 5, 4), 3), ((2, 6, 3, 3), 2), ((1, 4, 2, 2, 2), 4),
                                        ((2, 3, 4), 1), ((2, 3, 4), 7)])
def test_local_response_norm_matches_torch(shape, size):
    torch = _torch()
    _compare(torch, lambda x: F.local_response_norm(x, size, 0.3, 0.6, 1.5),
             lambda x: torch.nn.functional.local_response_norm(x, size, 0.3, 0.6, 1.5),
             [_data(shape)])


# ---- first and second derivatives --------------------------------------------------------------
def _t(*shape):
    return pa.tensor(_data(shape), requires_grad=True)


def _p(n):
    return pa.tensor(RNG.uniform(0.5, 2, n), requires_grad=True)


RM, RV = RNG.standard_normal(3), RNG.uniform(0.5, 2, 3)
DERIVATIVES = {
    "batch_norm_train": (lambda x, w, b: F.batch_norm(x, None, None, w, b, True),
                         [_t(4, 3, 2), _p(3), _p(3)]),
    "batch_norm_train_2d_no_affine": (lambda x: F.batch_norm(x, None, None, training=True) * x,
                                      [_t(5, 3)]),
    "batch_norm_train_weight_only": (lambda x, w: F.batch_norm(x, None, None, w, None, True),
                                     [_t(2, 3, 2, 2), _p(3)]),
    "batch_norm_eval": (lambda x, w, b: F.batch_norm(x * x, RM, RV, w, b, eps=0.1) * x,
                        [_t(3, 3, 2), _p(3), _p(3)]),
    "batch_norm_eval_bias_only": (lambda x, b: F.batch_norm(x, RM, RV, None, b),
                                  [_t(3, 3), _p(3)]),
    "instance_norm": (lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
                      [_t(2, 3, 4), _p(3), _p(3)]),
    "instance_norm_running": (lambda x, w: F.instance_norm(x, RM, RV, w, use_input_stats=False),
                              [_t(2, 3, 4), _p(3)]),
    "group_norm": (lambda x, w, b: F.group_norm(x, 2, w, b), [_t(2, 4, 3), _p(4), _p(4)]),
    "group_norm_no_affine": (lambda x: F.group_norm(x, 3, eps=1e-3), [_t(2, 3, 2, 2)]),
    "local_response_norm": (lambda x: F.local_response_norm(x, 3, 0.5, 0.75, 1.0),
                            [_t(2, 4, 3)]),
    "local_response_norm_4d": (lambda x: F.local_response_norm(x, 2, 0.2, 1.5, 2.0),
                               [_t(1, 3, 2, 2)]),
}


@pytest.mark.parametrize("name", sorted(DERIVATIVES))
def test_first_and_second_derivatives(name):
    fn, inputs = DERIVATIVES[name]
    assert pa.gradcheck(fn, inputs)
    assert pa.gradgradcheck(fn, inputs)


def test_third_derivative_of_batch_norm():
    fn, inputs = DERIVATIVES["batch_norm_train"]

    def first_order(*xs):
        gs = pa.grad((fn(*xs) ** 2).sum(), list(xs), create_graph=True)
        return pa.concat([pa.reshape(g, (-1,)) for g in gs])

    assert pa.gradgradcheck(first_order, inputs)


def test_parallel_engine_is_bitwise_sequential():
    x = pa.tensor(_data((4, 6, 3, 3)), requires_grad=True)
    w, b = _p(6), _p(6)

    def loss():
        rm, rv = np.zeros(6), np.ones(6)
        h = F.batch_norm(x, rm, rv, w, b, training=True)
        h = h + F.group_norm(pa.tanh(x), 3, w, b) + F.instance_norm(x * x, weight=w)
        h = F.local_response_norm(h, 3) + F.batch_norm(x, rm, rv, w, b)   # eval
        return (h * h).mean()

    want = pa.grad(loss(), [x, w, b])
    with pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0) as eng:
        got = eng.grad(loss(), [x, w, b])
    assert_bitwise(want, got)
    (gx,) = pa.grad(loss(), [x], create_graph=True)
    want2 = pa.grad((gx * gx).sum(), [x, w, b])
    with pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0) as eng:
        (gx,) = eng.grad(loss(), [x], create_graph=True)
        got2 = eng.grad((gx * gx).sum(), [x, w, b])
    assert_bitwise(want2, got2)


# ---- layers --------------------------------------------------------------------------------------
def _copy_params(pm, tm):
    """torch module's parameters and buffers := the pa module's."""
    import torch
    with torch.no_grad():
        for name, v in pm.state_dict().items():
            tm.state_dict()[name].copy_(torch.tensor(v.numpy()))


@pytest.mark.parametrize("layer,shape,kwargs", [
    ("BatchNorm1d", (8, 3), {}),
    ("BatchNorm1d", (4, 3, 5), dict(momentum=None)),
    ("BatchNorm2d", (3, 3, 4, 4), dict(eps=1e-3, momentum=0.25)),
    ("BatchNorm2d", (2, 3, 3, 3), dict(affine=False)),
    ("BatchNorm3d", (2, 3, 2, 2, 2), dict(bias=False, momentum=None)),
    ("BatchNorm1d", (6, 3), dict(track_running_stats=False)),
    ("InstanceNorm1d", (3, 3, 6), dict(affine=True, track_running_stats=True)),
    ("InstanceNorm2d", (2, 3, 3, 4), dict(track_running_stats=True, momentum=None)),
    ("InstanceNorm2d", (3, 4, 4), dict(affine=True)),                     # unbatched
    ("InstanceNorm3d", (2, 3, 2, 2, 3), {}),
])
def test_layers_train_and_evaluate_like_torch(layer, shape, kwargs):
    torch = _torch()
    pm, tm = getattr(pa.nn, layer)(3, **kwargs), getattr(torch.nn, layer)(3, **kwargs)
    tm.double()
    assert repr(pm) == repr(tm)
    assert list(pm.state_dict()) == list(tm.state_dict())
    c_axis = 0 if len(shape) == int(layer[-2]) + 1 and layer.startswith("Instance") else 1
    params_p, params_t = list(pm.parameters()), list(tm.parameters())
    opt_p = pa.optim.SGD(params_p, lr=0.1) if params_p else None
    opt_t = torch.optim.SGD(params_t, lr=0.1) if params_t else None
    for _ in range(3):
        x = _data(shape, c_axis)
        xp, xt = pa.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        seed = RNG.standard_normal(shape)
        yp, yt = pm(xp), tm(xt)
        _close(yp.numpy(), yt)
        (yp * pa.tensor(seed)).sum().backward()
        (yt * torch.tensor(seed)).sum().backward()
        _close(xp.grad, xt.grad)
        for p, t in zip(params_p, params_t):
            _close(p.grad, t.grad)
        if opt_p:
            opt_p.step(), opt_t.step()
            opt_p.zero_grad(), opt_t.zero_grad()
        for (name, v), (tname, tv) in zip(pm.state_dict().items(), tm.state_dict().items()):
            assert name == tname
            _close(v.numpy(), tv)
    pm.eval(), tm.eval()
    x = _data(shape, c_axis)
    _close(pm(pa.tensor(x)).numpy(), tm(torch.tensor(x)))
    # the state dict round trip: into a fresh module of each library
    fresh = getattr(pa.nn, layer)(3, **kwargs).eval()
    fresh.load_state_dict(pm.state_dict())
    for (name, v), w in zip(pm.state_dict().items(), fresh.state_dict().values()):
        assert np.array_equal(v.numpy(), w.numpy()) and v.dtype == w.dtype, name
    tfresh = getattr(torch.nn, layer)(3, **kwargs).double().eval()
    tfresh.load_state_dict({k: torch.tensor(v.numpy()) for k, v in pm.state_dict().items()})
    _close(fresh(pa.tensor(x)).numpy(), tfresh(torch.tensor(x)))


def test_batchnorm_state_dict_keys_and_buffers():
    bn = pa.nn.BatchNorm2d(4)
    assert list(bn.state_dict()) == ["weight", "bias", "running_mean", "running_var",
                                     "num_batches_tracked"]
    assert [n for n, _ in bn.named_parameters()] == ["weight", "bias"]
    assert bn.num_batches_tracked.dtype == np.int64 and bn.num_batches_tracked.shape == ()
    bn(pa.randn(2, 4, 3, 3, seed=0))
    bn(pa.randn(2, 4, 3, 3, seed=1))
    assert int(bn.num_batches_tracked.item()) == 2
    bn.float()
    assert bn.running_mean.dtype == np.float32 and bn.num_batches_tracked.dtype == np.int64
    bn.reset_running_stats()
    assert bn.num_batches_tracked.item() == 0 and np.all(bn.running_var.numpy() == 1)
    bn.eval()
    assert bn(pa.tensor(np.ones((1, 4, 1, 1), np.float32))).dtype == np.float32


def test_group_norm_and_local_response_norm_layers_match_torch():
    torch = _torch()
    for pm, tm, shape in ((pa.nn.GroupNorm(2, 4), torch.nn.GroupNorm(2, 4), (2, 4, 3)),
                          (pa.nn.GroupNorm(3, 6, affine=False, eps=1e-3),
                           torch.nn.GroupNorm(3, 6, affine=False, eps=1e-3), (2, 6, 2, 2)),
                          (pa.nn.LocalResponseNorm(3, k=2.0), torch.nn.LocalResponseNorm(3, k=2.0),
                           (2, 5, 3, 3))):
        tm.double()
        assert repr(pm) == repr(tm)
        assert list(pm.state_dict()) == list(tm.state_dict())
        if pm.state_dict():
            with torch.no_grad():
                for p, t in zip(pm.parameters(), tm.parameters()):
                    p.numpy()[...] = RNG.uniform(0.5, 2, p.shape)
                    t.copy_(torch.tensor(p.numpy()))
        x = _data(shape)
        _compare(torch, pm, tm, [x])


# ---- running statistics: failures, versions, threads -------------------------------------------
def _stats(bn):
    return [v.numpy().copy() for v in bn.state_dict().values()]


@pytest.mark.parametrize("bad", [
    lambda bn: bn(pa.randn(4, 5, seed=0)),                          # 5 channels, 3 tracked
    lambda bn: bn(pa.randn(1, 3, seed=0)),                          # one value per channel
    lambda bn: bn(pa.randn(4, 3, 2, 2, seed=0)),                    # 4-D into BatchNorm1d
    lambda bn: bn(pa.tensor(np.ones((4, 3), np.int64))),            # integers
])
def test_a_failed_forward_leaves_the_running_statistics_alone(bad):
    bn = pa.nn.BatchNorm1d(3, momentum=None)
    bn(pa.randn(6, 3, seed=1))
    before = _stats(bn)
    with pytest.raises((ValueError, TypeError, RuntimeError)):
        bad(bn)
    for a, b in zip(before, _stats(bn)):
        assert np.array_equal(a, b)


def test_functional_checks_everything_before_updating():
    rm, rv = np.zeros(3), np.ones(3)
    x = pa.randn(4, 3, seed=0)
    for kwargs, exc in ((dict(weight=np.ones(4)), RuntimeError),
                        (dict(bias=np.ones((3, 1))), RuntimeError), (dict(eps=0.0), ValueError)):
        with pytest.raises(exc, match="batch_norm"):     # PyTorch's exception types
            F.batch_norm(x, rm, rv, training=True, **kwargs)
    with pytest.raises(RuntimeError, match="running_var"):
        F.batch_norm(x, rm, np.ones(4), training=True)
    assert np.array_equal(rm, np.zeros(3)) and np.array_equal(rv, np.ones(3))
    F.batch_norm(x, rm, rv, training=True, momentum=0.5)      # arrays are updated in place
    np.testing.assert_allclose(rm, 0.5 * x.numpy().mean(axis=0))
    np.testing.assert_allclose(rv, 0.5 + 0.5 * x.numpy().var(axis=0, ddof=1))


def test_running_update_bumps_the_version_counter():
    bn = pa.nn.BatchNorm1d(3)
    w = pa.randn(3, seed=0, requires_grad=True)
    y = (w * bn.running_mean).sum()             # running_mean saved by mul's node
    bn(pa.randn(5, 3, seed=1))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        pa.backward(y)


def test_concurrent_training_forwards_each_update_whole():
    """Cumulative averages (momentum None) from 4 threads: every batch is counted once,
    and the running mean is the mean of the batch means in whatever order they came."""
    bn = pa.nn.BatchNorm1d(4, momentum=None)
    batches = [_data((16, 4)) for _ in range(40)]
    errors = []

    def work(part):
        try:
            for x in part:
                bn(pa.tensor(x)).sum().backward()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(batches[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert bn.num_batches_tracked.item() == 40
    np.testing.assert_allclose(bn.running_mean.numpy(),
                               np.mean([x.mean(axis=0) for x in batches], axis=0), rtol=1e-12)
    np.testing.assert_allclose(bn.running_var.numpy(),
                               np.mean([x.var(axis=0, ddof=1) for x in batches], axis=0),
                               rtol=1e-12)


# ---- bad input ----------------------------------------------------------------------------------
@pytest.mark.parametrize("fn,exc,text", [
    (lambda: F.batch_norm(pa.ones(3), None, None, training=True), IndexError, "batch_norm"),
    (lambda: F.batch_norm(pa.ones((2, 3)), None, None), RuntimeError, "evaluation"),
    (lambda: F.batch_norm(pa.ones((2, 3)), np.zeros(3), None, training=True), ValueError,
     "both"),
    (lambda: F.batch_norm(pa.ones((2, 3)), None, None, training=True, momentum=None),
     TypeError, "momentum"),
    (lambda: F.batch_norm(pa.ones((2, 3)), np.zeros(3, np.int64), np.ones(3), training=True),
     ValueError, "floating"),
    (lambda: F.instance_norm(pa.ones((2, 3, 1))), ValueError, "spatial"),
    (lambda: F.instance_norm(pa.ones((2, 3, 4)), use_input_stats=False), RuntimeError,
     "use_input_stats"),
    (lambda: F.group_norm(pa.ones((2, 6, 3)), 4), RuntimeError, "num_groups"),
    (lambda: F.group_norm(pa.ones((2, 6, 3)), 3, pa.ones(3)), RuntimeError, "weight shape"),
    (lambda: F.group_norm(pa.ones((1, 2)), 2), ValueError, "more than 1 value"),
    (lambda: F.local_response_norm(pa.ones((2, 3)), 2), ValueError, "3 or more"),
    (lambda: F.local_response_norm(pa.ones((2, 3, 4)), 0), RuntimeError, "size"),
    (lambda: pa.nn.GroupNorm(4, 6), ValueError, "divisible"),
    (lambda: pa.nn.BatchNorm2d(0), ValueError, "num_features"),
    (lambda: pa.nn.InstanceNorm1d(3, affine=True)(pa.ones((2, 4, 5))), ValueError,
     "num_features"),
])
def test_bad_input_raises_naming_the_op(fn, exc, text):
    with pytest.raises(exc) as info:
        fn()
    assert text in str(info.value), str(info.value)


def test_batch_norm_allocates_only_its_output_and_gradients():
    """The forward's only full-size array is the output, each rule's its gradient (block
    temporaries of 256 KiB aside). The input is 2 MiB."""
    x = pa.tensor(_data((32, 8, 32, 32)), requires_grad=True)
    w, b = _p(8), _p(8)
    y, extra = temporary_bytes(lambda: F.batch_norm(x, np.zeros(8), np.ones(8), w, b, True))
    assert extra < x.numpy().nbytes / 4, extra
    seed = np.ones(x.shape)
    gs, extra = temporary_bytes(lambda: pa.grad(y, [x, w, b], grad_outputs=seed))
    assert extra < x.numpy().nbytes / 4, extra
