"""pa.nn layers: forward values and gradients against PyTorch given the same weights,
initialisation (bounds, statistics, fans, gains) against PyTorch's formulas,
containers, argument checks, dtypes."""
from __future__ import annotations

import math

import numpy as np
import pytest

import parallel_autograd as pa
from parallel_autograd import nn
from parallel_autograd.nn import init
from parallel_autograd.random import manual_seed


def rng(seed=0):
    return np.random.default_rng(seed)


# (name, builder taking an nn namespace, input shape or "int") - built identically in
# both libraries; torch's copy gets our weights through load_state_dict, which also
# checks that the parameter names agree.
LAYERS = {
    "linear": (lambda n: n.Linear(5, 3), (4, 5)),
    "linear_nobias_3d": (lambda n: n.Linear(5, 3, bias=False), (2, 4, 5)),
    "conv": (lambda n: n.Conv2d(2, 3, 3), (2, 2, 6, 5)),
    "conv_stride_pad": (lambda n: n.Conv2d(2, 4, (3, 2), stride=2, padding=(1, 0)),
                        (2, 2, 7, 6)),
    "conv_same_nobias": (lambda n: n.Conv2d(1, 2, 3, padding="same", bias=False),
                         (1, 1, 5, 5)),
    "conv_valid": (lambda n: n.Conv2d(1, 2, 2, padding="valid"), (1, 1, 4, 4)),
    "embedding": (lambda n: n.Embedding(7, 4), "int"),
    "embedding_pad": (lambda n: n.Embedding(7, 4, padding_idx=-2), "int"),
    "layernorm": (lambda n: n.LayerNorm(6), (3, 6)),
    "layernorm_2d_nobias": (lambda n: n.LayerNorm((2, 3), eps=1e-3, bias=False), (4, 2, 3)),
    "layernorm_plain": (lambda n: n.LayerNorm(6, elementwise_affine=False), (3, 6)),
    "rmsnorm": (lambda n: n.RMSNorm(6), (3, 6)),
    "rmsnorm_eps": (lambda n: n.RMSNorm([2, 3], eps=1e-4), (4, 2, 3)),
    "relu": (lambda n: n.ReLU(), (3, 4)),
    "gelu": (lambda n: n.GELU(), (3, 4)),
    "gelu_tanh": (lambda n: n.GELU(approximate="tanh"), (3, 4)),
    "silu": (lambda n: n.SiLU(), (3, 4)),
    "tanh": (lambda n: n.Tanh(), (3, 4)),
    "sigmoid": (lambda n: n.Sigmoid(), (3, 4)),
    "leaky_relu": (lambda n: n.LeakyReLU(0.2), (3, 4)),
    "softmax": (lambda n: n.Softmax(dim=1), (3, 4)),
    "log_softmax": (lambda n: n.LogSoftmax(dim=-1), (3, 4)),
    "flatten": (lambda n: n.Flatten(), (2, 3, 2, 2)),
    "flatten_range": (lambda n: n.Flatten(0, 1), (2, 3, 2)),
    "maxpool": (lambda n: n.MaxPool2d(2), (2, 3, 6, 5)),
    "maxpool_stride_pad": (lambda n: n.MaxPool2d(3, stride=2, padding=1), (1, 2, 7, 7)),
    "avgpool": (lambda n: n.AvgPool2d(2, stride=1), (2, 1, 4, 5)),
    "avgpool_pad_exclude": (lambda n: n.AvgPool2d(3, 2, 1, count_include_pad=False),
                            (1, 2, 6, 6)),
    "identity": (lambda n: n.Identity(), (2, 2)),
    "dropout_eval": (lambda n: n.Dropout(0.5).eval(), (3, 4)),
    "sequential": (lambda n: n.Sequential(n.Conv2d(1, 2, 3, padding=1), n.ReLU(),
                                          n.MaxPool2d(2), n.Flatten(), n.Linear(8, 3),
                                          n.Tanh()), (2, 1, 4, 4)),
}


def to_torch(torch, pa_module, torch_module):
    torch_module = torch_module.double()
    torch_module.load_state_dict({k: torch.from_numpy(v.numpy().copy())
                                  for k, v in pa_module.state_dict().items()})
    return torch_module


def layer_input(shape, seed=0):
    if shape == "int":
        return rng(seed).integers(0, 7, size=(3, 5))
    return rng(seed).standard_normal(shape)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_forward_and_gradients_equal_torch(name):
    torch = pytest.importorskip("torch")
    make, shape = LAYERS[name]
    manual_seed(0)
    ours = make(nn)
    theirs = to_torch(torch, ours, make(torch.nn))
    data = layer_input(shape)
    floating = shape != "int"
    x = pa.tensor(data, requires_grad=True) if floating else data
    tx = torch.from_numpy(data).requires_grad_(floating)
    y, ty = ours(x), theirs(tx)
    assert y.shape == tuple(ty.shape)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-13)
    w = rng(1).uniform(0.5, 1.5, size=y.shape)
    (y * w).sum().backward()
    (ty * torch.from_numpy(w)).sum().backward()
    if floating:
        np.testing.assert_allclose(x.grad, tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    for (n, p), tp in zip(ours.named_parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.grad, tp.grad.numpy(), rtol=1e-10, atol=1e-12,
                                   err_msg=n)


def test_loss_modules_equal_torch():
    torch = pytest.importorskip("torch")
    logits = rng(0).standard_normal((6, 4))
    target = np.array([0, 3, 1, -100, 2, 2])
    weight = np.array([1.0, 2.0, 0.5, 1.5])
    cases = [(nn.CrossEntropyLoss(), torch.nn.CrossEntropyLoss()),
             (nn.CrossEntropyLoss(weight=pa.tensor(weight), label_smoothing=0.1,
                                  reduction="sum"),
              torch.nn.CrossEntropyLoss(weight=torch.from_numpy(weight),
                                        label_smoothing=0.1, reduction="sum")),
             (nn.NLLLoss(reduction="none"), torch.nn.NLLLoss(reduction="none"))]
    for ours, theirs in cases:
        want = theirs(torch.from_numpy(logits), torch.from_numpy(target)).numpy()
        np.testing.assert_allclose(ours(pa.tensor(logits), target).numpy(), want, rtol=1e-12)
    assert list(cases[1][0].state_dict()) == list(cases[1][1].state_dict()) == ["weight"]
    assert list(cases[0][0].state_dict()) == []
    a, b = rng(1).standard_normal((3, 2)), rng(2).standard_normal((3, 2))
    np.testing.assert_allclose(nn.MSELoss()(pa.tensor(a), pa.tensor(b)).item(),
                               torch.nn.MSELoss()(torch.from_numpy(a),
                                                  torch.from_numpy(b)).item(), rtol=1e-12)


def test_forward_values_without_torch():
    manual_seed(0)
    lin = nn.Linear(3, 2)
    x = rng().standard_normal((4, 3))
    np.testing.assert_allclose(lin(pa.tensor(x)).numpy(),
                               x @ lin.weight.numpy().T + lin.bias.numpy(), rtol=1e-14)
    emb = nn.Embedding(5, 2, padding_idx=1)
    np.testing.assert_array_equal(emb(np.array([[1, 4]])).numpy()[0],
                                  emb.weight.numpy()[[1, 4]])
    ln = nn.LayerNorm(3)
    y = ln(pa.tensor(x)).numpy()
    np.testing.assert_allclose(y, (x - x.mean(1, keepdims=True))
                               / np.sqrt(x.var(1, keepdims=True) + 1e-5), rtol=1e-12)
    np.testing.assert_array_equal(nn.Flatten()(pa.ones(2, 3, 4)).shape, (2, 12))
    np.testing.assert_allclose(nn.LeakyReLU(0.5)(pa.tensor([-2.0, 2.0])).numpy(), [-1.0, 2.0])


# ---- initialisation ---------------------------------------------------------------------
def test_linear_and_conv_init_bounds_and_statistics():
    manual_seed(0)
    for layer, fan_in in ((nn.Linear(400, 300), 400), (nn.Conv2d(16, 64, (5, 3)), 240)):
        bound = 1 / math.sqrt(fan_in)  # kaiming_uniform_(a=sqrt(5)) and the bias rule
        for p in (layer.weight, layer.bias):
            v = p.numpy().ravel()
            assert np.abs(v).max() <= bound
            if v.size > 10000:
                assert np.abs(v).max() > 0.999 * bound
                assert abs(v.mean()) < 4 * bound / math.sqrt(3 * v.size)
                np.testing.assert_allclose(v.var(), bound ** 2 / 3, rtol=0.03)


def test_embedding_and_norm_init():
    manual_seed(0)
    e = nn.Embedding(1000, 64, padding_idx=3)
    w = np.delete(e.weight.numpy(), 3, axis=0)
    assert abs(w.mean()) < 4 / math.sqrt(w.size) and abs(w.std() - 1) < 0.01
    assert not np.any(e.weight.numpy()[3]) and e.padding_idx == 3
    assert nn.Embedding(5, 2, padding_idx=-1).padding_idx == 4
    ln, rms = nn.LayerNorm((2, 3)), nn.RMSNorm(4)
    assert np.all(ln.weight.numpy() == 1) and np.all(ln.bias.numpy() == 0)
    assert np.all(rms.weight.numpy() == 1) and ln.weight.shape == (2, 3)


def test_init_functions_match_torch_formulas():
    torch = pytest.importorskip("torch")
    tinit = torch.nn.init
    for shape in ((3, 4), (8, 3, 5, 2), (2, 6, 3)):
        assert init._calculate_fan_in_and_fan_out(np.empty(shape)) == \
            tinit._calculate_fan_in_and_fan_out(torch.empty(shape))
    for args in (("relu",), ("tanh",), ("leaky_relu",), ("leaky_relu", 0.2),
                 ("leaky_relu", math.sqrt(5)), ("selu",), ("conv2d",), ("sigmoid",)):
        assert init.calculate_gain(*args) == tinit.calculate_gain(*args), args


@pytest.mark.parametrize("fn, kwargs, limit", [
    (init.uniform_, dict(a=-2.0, b=3.0), None),
    (init.xavier_uniform_, dict(gain=2.0), 2.0 * math.sqrt(6 / (200 + 300))),
    (init.kaiming_uniform_, dict(a=0.0, nonlinearity="relu"), math.sqrt(6 / 300)),
    (init.kaiming_uniform_, dict(mode="fan_out"), math.sqrt(6 / 200)),  # a=0: gain sqrt 2
])
def test_uniform_initialisers_bounds(fn, kwargs, limit):
    t = nn.Parameter(np.empty((200, 300)))
    assert fn(t, generator=rng(), **kwargs) is t
    lo, hi = (kwargs["a"], kwargs["b"]) if limit is None else (-limit, limit)
    assert lo <= t.numpy().min() and t.numpy().max() <= hi
    assert t.numpy().min() < lo + 0.001 * (hi - lo) and t.numpy().max() > hi - 0.001 * (hi - lo)


@pytest.mark.parametrize("fn, kwargs, std", [
    (init.normal_, dict(mean=1.0, std=3.0), 3.0),
    (init.xavier_normal_, dict(), math.sqrt(2 / 500)),
    (init.kaiming_normal_, dict(nonlinearity="relu"), math.sqrt(2 / 300)),
])
def test_normal_initialisers_statistics(fn, kwargs, std):
    t = np.empty((200, 300))
    fn(t, generator=rng(), **kwargs)
    mean = kwargs.get("mean", 0.0)
    assert abs(t.mean() - mean) < 4 * std / math.sqrt(t.size)
    np.testing.assert_allclose(t.std(), std, rtol=0.01)


def test_init_writes_in_place_and_bumps_the_version():
    lin = nn.Linear(2, 2)
    arr = lin.weight.numpy()
    y = (lin.weight * 2).sum()
    init.constant_(lin.weight, 0.5)
    assert lin.weight.numpy() is arr and np.all(arr == 0.5)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    init.eye_(lin.weight)
    np.testing.assert_array_equal(arr, np.eye(2))
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init.xavier_uniform_(lin.bias)
    with pytest.raises(TypeError, match="floating"):
        init.uniform_(np.zeros(3, dtype=np.int64))


def test_reset_parameters_and_generator_argument():
    g1, g2 = rng(5), rng(5)
    a, b = nn.Conv2d(2, 3, 3, generator=g1), nn.Conv2d(2, 3, 3, generator=g2)
    np.testing.assert_array_equal(a.weight.numpy(), b.weight.numpy())
    a.reset_parameters(rng(6))
    assert not np.array_equal(a.weight.numpy(), b.weight.numpy())
    e1, e2 = nn.Embedding(4, 3, generator=rng(1)), nn.Embedding(4, 3, generator=rng(1))
    np.testing.assert_array_equal(e1.weight.numpy(), e2.weight.numpy())


# ---- dtypes, dropout, from_pretrained ---------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layers_take_a_dtype(dtype):
    m = nn.Sequential(nn.Linear(3, 4, dtype=dtype), nn.LayerNorm(4, dtype=dtype),
                      nn.RMSNorm(4, dtype=dtype))
    assert all(p.dtype == dtype for p in m.parameters())
    assert m(pa.ones(2, 3, dtype=dtype)).dtype == dtype
    assert nn.Conv2d(1, 1, 1, dtype=dtype).weight.dtype == dtype
    assert nn.Embedding(3, 2, dtype=dtype).weight.dtype == dtype
    with pytest.raises(TypeError, match="floating"):
        nn.Linear(2, 2, dtype=np.int64)


def test_dropout_training_scales_and_p_edges():
    x = pa.ones(10000)
    manual_seed(0)
    y = nn.Dropout(0.25)(x).numpy()
    assert set(np.unique(y)) == {0.0, 1 / 0.75}
    assert abs((y == 0).mean() - 0.25) < 0.02
    assert nn.Dropout(0.0)(x) is x and nn.Dropout(0.9).eval()(x) is x
    assert not np.any(nn.Dropout(1.0)(x).numpy())
    g = nn.Dropout(0.5, generator=rng(3))
    np.testing.assert_array_equal(g(x).numpy(), nn.Dropout(0.5, generator=rng(3))(x).numpy())
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout(1.5)


def test_embedding_from_pretrained_shares_and_freezes():
    table = np.arange(6.0).reshape(3, 2)
    e = nn.Embedding.from_pretrained(table)
    assert e.weight.numpy() is table and not e.weight.requires_grad
    assert nn.Embedding.from_pretrained(pa.tensor(table), freeze=False).weight.requires_grad
    np.testing.assert_array_equal(e(np.array([2, 0])).numpy(), table[[2, 0]])


# ---- containers ---------------------------------------------------------------------------
def test_sequential_indexing_and_editing():
    a, b, c = nn.ReLU(), nn.Tanh(), nn.Sigmoid()
    s = nn.Sequential(a, b)
    assert len(s) == 2 and s[0] is a and s[-1] is b and list(s) == [a, b]
    s.append(c)
    assert list(s._modules) == ["0", "1", "2"]
    sub = s[1:]
    assert type(sub) is nn.Sequential and list(sub) == [b, c] and list(sub._modules) == ["1", "2"]
    del s[0]
    assert list(s) == [b, c] and list(s._modules) == ["0", "1"]
    s.insert(-1, a)
    assert list(s) == [b, a, c]
    s[0] = nn.Identity()
    assert type(s[0]) is nn.Identity and s.pop(1) is a and len(s) == 2
    with pytest.raises(IndexError):
        s[5]
    named = nn.Sequential(__import__("collections").OrderedDict([("first", a), ("second", b)]))
    assert [n for n, _ in named.named_children()] == ["first", "second"]
    x = pa.tensor([-1.0, 2.0])
    np.testing.assert_array_equal(named(x).numpy(), b(a(x)).numpy())


def test_modulelist_and_moduledict():
    layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    assert len(layers) == 3 and len(list(layers.parameters())) == 6
    layers += [nn.ReLU()]
    layers.insert(0, nn.Tanh())
    assert [type(m).__name__ for m in layers] == ["Tanh", "Linear", "Linear", "Linear", "ReLU"]
    assert list(layers._modules) == [str(i) for i in range(5)]
    del layers[1]
    assert list(layers._modules) == [str(i) for i in range(4)]
    assert type(layers[1:3]) is nn.ModuleList and len(layers[1:3]) == 2
    d = nn.ModuleDict({"x": nn.ReLU()})
    d["y"] = nn.Linear(1, 1)
    d.update([("z", nn.Tanh())])
    assert list(d) == ["x", "y", "z"] and "y" in d and len(d) == 3
    assert [n for n, _ in d.named_parameters()] == ["y.weight", "y.bias"]
    assert type(d.pop("x")) is nn.ReLU and list(d.keys()) == ["y", "z"]
    with pytest.raises(TypeError, match="iterable"):
        nn.ModuleList().extend(nn.ReLU())


def test_parameter_list_and_dict():
    pl = nn.ParameterList([np.zeros(2), pa.ones(3)])
    assert all(type(p) is nn.Parameter for p in pl) and len(pl) == 2
    arr = np.full(2, 5.0)
    pl[0] = arr
    pl.append(nn.Parameter(np.ones(1)))
    assert pl[0].numpy() is arr and [n for n, _ in pl.named_parameters()] == ["0", "1", "2"]
    assert type(pl[1:]) is nn.ParameterList and len(pl[1:]) == 2
    pd = nn.ParameterDict({"b": np.zeros(1), "a": np.zeros(2)})
    assert list(pd) == ["a", "b"]  # a plain dict is taken sorted, as in PyTorch
    pd["c"] = pa.zeros(1)
    pd.update([("0", np.ones(1))])
    assert list(pd.keys()) == ["a", "b", "c", "0"] and type(pd["c"]) is nn.Parameter
    assert pd.pop("b").shape == (1,) and "b" not in pd and len(pd) == 3
    with pytest.raises(TypeError, match="expected a pa.nn.Parameter"):
        pl.append([1.0])
    assert repr(nn.ParameterList([np.zeros((2, 3))])) == \
        "ParameterList(  (0): Parameter containing: [float64 of size 2x3])"  # as PyTorch


def test_parameter_containers_names_match_torch():
    torch = pytest.importorskip("torch")
    names = []
    for n, zeros in ((nn, pa.zeros), (torch.nn, torch.zeros)):
        m = n.Module()
        m.pl = n.ParameterList([n.Parameter(zeros(2)), n.Parameter(zeros(1))])
        m.pd = n.ParameterDict({"z": n.Parameter(zeros(1)), "a": n.Parameter(zeros(1))})
        m.pd.update(__import__("collections").OrderedDict(y=n.Parameter(zeros(1))))
        names.append([k for k, _ in m.named_parameters()])
        names.append(list(m.state_dict()))
    assert names[0] == names[2] and names[1] == names[3]


def test_unsupported_arguments_raise_not_implemented():
    with pytest.raises(ValueError, match="strided"):
        nn.Conv2d(1, 1, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="positive"):
        nn.Conv2d(0, 1, 3)
    with pytest.raises(ValueError, match="padding_idx"):
        nn.Embedding(3, 2, padding_idx=3)
    with pytest.raises(ValueError, match="approximate"):
        nn.GELU("fast")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_linear_small_gemms_run_on_one_blas_thread(dtype, monkeypatch):
    """linear's forward and both gradient GEMMs from 2^19 to 2^28 multiply-adds run with
    BLAS held at one thread (issue 28: on 2 loaded cores a threaded (64, 784) @ (784, 128)
    took ~110 ms, 0.4 ms on one thread), the count restored after; smaller ones (OpenBLAS
    keeps one thread) are not switched. Their bytes do not depend on the BLAS threads in
    force (OpenBLAS's threaded sgemm sums K=784 in other blocks: without the rule the
    float32 results at 1 and 2 threads differ by ~6e-5)."""
    from threadpoolctl import threadpool_limits

    from parallel_autograd.engine import blas
    before = blas.current_threads()
    if before is None:
        pytest.skip("no BLAS library found by threadpoolctl")
    x = rng(1).standard_normal((64, 784)).astype(dtype)
    w = rng(2).standard_normal((128, 784)).astype(dtype)

    def run(a, b):
        ta, tw = pa.tensor(a, requires_grad=True), pa.tensor(b, requires_grad=True)
        y = nn.functional.linear(ta, tw)
        y.backward(pa.tensor(np.ones(y.shape, dtype)))
        return [y.numpy(), ta.grad.numpy(), tw.grad.numpy()]
    seen = []
    real = np.matmul

    def recording(*args, **kwargs):
        seen.append(blas.current_threads())
        return real(*args, **kwargs)

    def threads_seen(a, b, high=blas.ONE_THREAD_MACS):
        monkeypatch.setattr(blas.one_thread, "__defaults__", (blas.SERIAL_MACS, high))
        monkeypatch.setattr(np, "matmul", recording)
        seen.clear()
        out = run(a, b)
        monkeypatch.undo()
        assert blas.current_threads() == 2 and blas.holders() == 0
        return out, set(seen)
    with threadpool_limits(1, user_api="blas"):
        want = run(x, w)
    blas.set_threads(2)
    try:
        if blas.current_threads() != 2:
            pytest.skip("BLAS threads cannot be set here")
        got, seen_big = threads_seen(x, w)
        assert seen_big == {1}
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
        assert threads_seen(x, w, high=0)[1] == {2}                 # the rule off
        assert threads_seen(x[:8, :64], w[:8, :64])[1] == {2}       # 4096: not switched
    finally:
        blas.set_threads(before)
