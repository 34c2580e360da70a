"""float32 is the library's default dtype, as PyTorch's (issue 27 item 2): a fresh process
gets it, every factory, layer and initialiser follows it, numpy arrays keep their own dtype,
float64 into a float32 layer raises as in PyTorch, and a float32 model trains end to end
in float32 (against PyTorch's float32 from the same weights when torch is installed).

The rest of the suite runs in float64 (tests/conftest.py); the tests here that need the
real default set it (the fixture puts float64 back) or start a fresh interpreter.
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import parallel_autograd as pa
import parallel_autograd.optim as optim
from parallel_autograd.nn import functional as F

ROOT = pathlib.Path(__file__).parents[1]

try:
    import torch
except ImportError:  # the torch comparisons skip; the dtype checks still run
    torch = None


@pytest.fixture
def float32_default():
    """The library's own default for this test (conftest's fixture restores float64)."""
    pa.set_default_dtype(pa.float32)
    yield


@pytest.mark.timeout(120)
def test_a_fresh_process_defaults_to_float32():
    code = ("import numpy as np, parallel_autograd as pa; "
            "print(pa.get_default_dtype(), pa.zeros(1).dtype, pa.nn.Linear(2, 2).weight.dtype, "
            "pa.tensor([1.0]).dtype, pa.tensor(np.zeros(1)).dtype, pa.sin(pa.arange(3)).dtype)")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=100, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["parallel_autograd.float32", "float32", "float32",
                                   "float32", "float64", "float32"]


def test_the_suite_runs_in_float64():
    """conftest's per-test fixture (gradchecks and 1e-10 comparisons need it)."""
    assert pa.get_default_dtype() == pa.float64
    assert pa.nn.Linear(2, 2).weight.dtype == np.float64


# (name, how to make it with a module `m` standing for pa or torch): what follows the default
MADE = [
    ("tensor of floats", lambda m: m.tensor([1.0, 2.0])),
    ("tensor of a float", lambda m: m.tensor(1.5)),
    ("Tensor of floats", lambda m: m.Tensor([1.0, 2.0])),
    ("Tensor of ints", lambda m: m.Tensor([1, 2])),
    ("Tensor of bools", lambda m: m.Tensor([True, False])),
    ("zeros", lambda m: m.zeros(2)), ("ones", lambda m: m.ones(2)),
    ("empty", lambda m: m.empty(2)), ("full", lambda m: m.full((2,), 1.5)),
    ("randn", lambda m: m.randn(2)), ("rand", lambda m: m.rand(2)),
    ("arange of floats", lambda m: m.arange(0.0, 1.0, 0.25)),
    ("linspace", lambda m: m.linspace(0, 1, 5)), ("eye", lambda m: m.eye(2)),
    ("sin of ints", lambda m: m.sin(m.tensor([1, 2]))),
    ("ints / ints", lambda m: m.tensor([1, 2]) / m.tensor([3, 4])),
    ("ints * a float", lambda m: m.tensor([1, 2]) * 1.5),
    ("logsumexp of ints", lambda m: m.logsumexp(m.tensor([1, 2]), 0)),
    ("Linear", lambda m: m.nn.Linear(2, 3).weight),
    ("Linear bias", lambda m: m.nn.Linear(2, 3).bias),
    ("Conv2d", lambda m: m.nn.Conv2d(1, 2, 3).weight),
    ("BatchNorm running_mean", lambda m: m.nn.BatchNorm1d(3).running_mean),
    ("LayerNorm", lambda m: m.nn.LayerNorm(3).weight),
    ("Embedding", lambda m: m.nn.Embedding(4, 2).weight),
    ("LSTM", lambda m: m.nn.LSTM(2, 3).weight_hh_l0),
    ("MultiheadAttention", lambda m: m.nn.MultiheadAttention(4, 2).in_proj_weight),
    ("TransformerEncoderLayer", lambda m: m.nn.TransformerEncoderLayer(4, 2, 8).linear1.weight),
    ("PReLU", lambda m: m.nn.PReLU().weight),
    ("empty Parameter", lambda m: m.nn.Parameter()),
    ("init.normal_", lambda m: m.nn.init.normal_(m.empty(3))),
]


def _name(d) -> str:
    return str(d).rsplit(".", 1)[-1]


@pytest.mark.parametrize("make", [m for _, m in MADE], ids=[n for n, _ in MADE])
def test_what_is_made_without_a_dtype_is_float32(make, float32_default):
    got = make(pa)
    assert got.dtype == np.float32
    if torch is not None:
        assert _name(make(torch).dtype) == _name(got.dtype)


@pytest.mark.parametrize("make", [m for _, m in MADE], ids=[n for n, _ in MADE])
def test_set_default_dtype_float64_is_one_call_away(make):
    pa.set_default_dtype(pa.float64)
    assert make(pa).dtype == np.float64


def test_numpy_arrays_keep_their_dtype(float32_default):
    """torch.tensor and torch.from_numpy keep the array's dtype."""
    a = np.zeros(2)
    for t in (pa.tensor(a), pa.from_numpy(a), pa.as_tensor(a), pa.Tensor(a),
              pa.nn.Parameter(a)):
        assert t.dtype == np.float64
    if torch is not None:
        assert torch.tensor(a).dtype == torch.from_numpy(a).dtype == torch.float64


def test_float64_into_a_float32_layer_raises_as_pytorch(float32_default):
    """PyTorch: RuntimeError "mat1 and mat2 must have the same dtype, but got Double and
    Float"; here a RuntimeError naming both dtypes. No silent float64 computation."""
    x = np.random.default_rng(0).standard_normal((4, 3))
    with pytest.raises(RuntimeError, match="same dtype.*float64.*float32"):
        pa.nn.Linear(3, 2)(pa.tensor(x))
    with pytest.raises(RuntimeError, match="Double but found Float"):
        pa.nn.Conv1d(3, 2, 1)(pa.tensor(x[None]))
    if torch is not None:
        with pytest.raises(RuntimeError, match="same dtype"):
            torch.nn.Linear(3, 2)(torch.tensor(x))
    assert pa.nn.Linear(3, 2)(pa.tensor(x).float()).dtype == np.float32   # converted: fine


def _mlp(lib):
    return lib.nn.Sequential(lib.nn.Linear(8, 16), lib.nn.Tanh(), lib.nn.Linear(16, 4))


@pytest.mark.timeout(120)
def test_float32_training_end_to_end(float32_default):
    """A small MLP, 8 Adam steps in the default dtype: parameters, gradients, optimizer
    state and loss stay float32, the loss decreases, and (torch installed) the loss curve
    is PyTorch's float32 one from the same weights to float32 rounding."""
    pa.manual_seed(0)
    model = _mlp(pa)
    opt = optim.Adam(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((32, 8)).astype(np.float32)
    y = rng.integers(0, 4, 32)
    ours = []
    for _ in range(8):
        opt.zero_grad()
        loss = F.cross_entropy(model(pa.tensor(x)), pa.tensor(y))
        loss.backward()
        opt.step()
        assert loss.dtype == np.float32
        ours.append(loss.item())
    for p in model.parameters():
        assert p.dtype == p.grad.dtype == np.float32
        assert all(v.dtype == np.float32 for v in opt.state[p].values()
                   if isinstance(v, (pa.Tensor, np.ndarray)) and v.ndim)
    assert ours[-1] < ours[0] - 0.1
    if torch is None:
        return
    pa.manual_seed(0)
    twin, start = _mlp(torch), _mlp(pa)
    with torch.no_grad():
        for tp, p in zip(twin.parameters(), start.parameters()):
            tp.copy_(torch.from_numpy(p.numpy()))
    topt = torch.optim.Adam(twin.parameters(), lr=1e-2)
    theirs = []
    for _ in range(8):
        topt.zero_grad()
        tloss = torch.nn.functional.cross_entropy(twin(torch.from_numpy(x)),
                                                  torch.from_numpy(y))
        tloss.backward()
        topt.step()
        theirs.append(tloss.item())
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)



NORMS = [
    ("layer_norm", lambda f, x, p: f.layer_norm(x, (4,), p, p)),
    ("batch_norm", lambda f, x, p: f.batch_norm(x, None, None, p, p, training=True)),
    ("batch_norm running", lambda f, x, p: f.batch_norm(x, p, p + 1, training=False)),
    ("group_norm", lambda f, x, p: f.group_norm(x, 2, p, p)),
    ("instance_norm", lambda f, x, p: f.instance_norm(x[:, :, None].expand(3, 4, 2),
                                                      weight=p, bias=p)),
]


@pytest.mark.parametrize("norm", [f for _, f in NORMS], ids=[n for n, _ in NORMS])
@pytest.mark.parametrize("xd,pd", [("float64", "float32"), ("float32", "float64")])
def test_norms_refuse_parameters_of_another_dtype_as_pytorch(norm, xd, pd):
    """numpy would compute in the wider dtype; PyTorch raises (a float32 BatchNorm fed
    numpy's float64 data). A float16 input with float32 parameters is allowed, as there."""
    x = pa.randn(3, 4, dtype=getattr(pa, xd))
    p = pa.ones(4, dtype=getattr(pa, pd))
    with pytest.raises(RuntimeError, match="mixed dtype"):
        norm(F, x, p)
    if torch is not None:
        tx = torch.randn(3, 4, dtype=getattr(torch, xd))
        with pytest.raises(RuntimeError, match="mixed dtype"):
            norm(torch.nn.functional, tx, torch.ones(4, dtype=getattr(torch, pd)))
    assert norm(F, x, p.to(x.dtype)).dtype == x.dtype
    assert norm(F, x.to(pa.float16), pa.ones(4, dtype=pa.float32)) is not None


def _rnn_call(lib, kind, case):
    """Call a float32 recurrent layer or cell of `lib` on a mismatched input or state."""
    nn = lib.nn
    f64 = lib.float64
    x = lib.zeros(2, 1, 3)
    h = lib.zeros(1, 1, 4, dtype=f64)
    layer = getattr(nn, kind)(3, 4)
    if case == "input float64":
        return layer(lib.zeros(2, 1, 3, dtype=f64))
    if case == "input int64":
        return layer(lib.zeros(2, 1, 3, dtype=lib.int64))
    if case == "unbatched float64":
        return layer(lib.zeros(2, 3, dtype=f64))
    if case == "hx float64":
        return layer(x, (h, lib.zeros(1, 1, 4)) if kind == "LSTM" else h)
    if case == "packed float64":
        return layer(nn.utils.rnn.pack_padded_sequence(x.double(), [2]))
    cell = getattr(nn, kind + "Cell")(3, 4)
    if case == "cell input float64":
        return cell(lib.zeros(1, 3, dtype=f64))
    if case == "cell input int64":
        return cell(lib.zeros(1, 3, dtype=lib.int64))
    h = lib.zeros(1, 4, dtype=f64)
    return cell(lib.zeros(1, 3), (h, lib.zeros(1, 4)) if kind == "LSTM" else h)


RNN_CASES = ["input float64", "input int64", "unbatched float64", "hx float64",
             "packed float64", "cell input float64", "cell input int64", "cell hx float64"]


@pytest.mark.parametrize("case", RNN_CASES)
@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_recurrent_layers_refuse_another_dtype_as_pytorch(kind, case, float32_default):
    """A float64 (or integer) input or state to a float32 LSTM/GRU/RNN or cell: PyTorch's
    exception type (ValueError "RNN input dtype ... does not match weight dtype" for a
    layer's input, RuntimeError for a state or a cell); numpy computed it silently in
    float64. The layers' message is PyTorch's with this library's dtype names."""
    with pytest.raises((ValueError, RuntimeError)) as got:
        _rnn_call(pa, kind, case)
    if case.startswith("input") or case.startswith("unbatched") or (
            case.startswith("packed") and kind != "LSTM"):
        assert got.type is ValueError
        what = "int64" if "int64" in case else "float64"
        assert str(got.value) == (
            f"RNN input dtype (parallel_autograd.{what}) does not match weight dtype "
            f"(parallel_autograd.float32). Convert input: input.to(parallel_autograd.float32)"
            f", or convert model: model.to(parallel_autograd.{what})")
    else:
        assert got.type is RuntimeError and "dtype" in str(got.value)
    if torch is not None:
        with pytest.raises((ValueError, RuntimeError)) as want:
            _rnn_call(torch, kind, case)
        assert want.type is got.type
        if got.type is ValueError:
            assert str(want.value) == str(got.value).replace("parallel_autograd.", "torch.")


MIXED = [  # (name, call with a module `m` standing for pa or torch): PyTorch raises
    ("PReLU on float64", lambda m: m.nn.PReLU()(m.ones(2, 3, dtype=m.float64))),
    ("PReLU(3) on float64", lambda m: m.nn.PReLU(3)(m.ones(2, 3, dtype=m.float64))),
    ("prelu float64 weight", lambda m: m.nn.functional.prelu(
        m.ones(3), m.ones(1, dtype=m.float64))),
    ("cross_entropy float64 weight", lambda m: m.nn.functional.cross_entropy(
        m.ones(2, 3), m.tensor([0, 1]), weight=m.ones(3, dtype=m.float64))),
    ("nll_loss float64 weight", lambda m: m.nn.functional.nll_loss(
        m.ones(2, 3), m.tensor([0, 1]), weight=m.ones(3, dtype=m.float64))),
    ("binary_cross_entropy float64 target", lambda m: m.nn.functional.binary_cross_entropy(
        m.ones(3) * 0.5, m.ones(3, dtype=m.float64))),
    ("binary_cross_entropy int64 target", lambda m: m.nn.functional.binary_cross_entropy(
        m.ones(3) * 0.5, m.ones(3, dtype=m.int64))),
]


@pytest.mark.parametrize("call", [c for _, c in MIXED], ids=[n for n, _ in MIXED])
def test_float32_layers_and_losses_refuse_another_dtype_as_pytorch(call, float32_default):
    """A float32 PReLU fed float64, or a loss given a class weight or target of another
    dtype: PyTorch's RuntimeError naming both dtypes (numpy computed in float64)."""
    with pytest.raises(RuntimeError, match="float64.*float32|float32.*float64|int64"):
        call(pa)
    if torch is not None:
        with pytest.raises(RuntimeError):
            call(torch)


@pytest.mark.parametrize("name", ["Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta"])
@pytest.mark.parametrize("default", ["float32", "float64"])
def test_optimizer_state_dict_holds_tensors_and_a_0d_step_as_pytorch(name, default):
    """PyTorch's state_dict: the state's arrays are Tensors and `"step"` a 0-d Tensor of
    float32 (float64 under a float64 default dtype: torch.optim's `_get_scalar_dtype`),
    whatever the parameter's dtype; it loads back to the same state."""
    pa.set_default_dtype(getattr(pa, default))
    p = pa.nn.Parameter(pa.ones(3, dtype=pa.float32))
    opt = getattr(optim, name)([p])
    p.grad = pa.ones(3, dtype=pa.float32)
    opt.step()
    state = opt.state_dict()["state"][0]
    assert all(isinstance(v, pa.Tensor) for v in state.values())
    assert state["step"].shape == () and str(state["step"].dtype) == default
    assert float(state["step"]) == 1.0
    opt.load_state_dict(opt.state_dict())
    assert opt.state[p]["step"] == 1.0
    if torch is not None:
        torch.set_default_dtype(getattr(torch, default))
        try:
            tp = torch.nn.Parameter(torch.ones(3, dtype=torch.float32))
            topt = getattr(torch.optim, name)([tp])
            tp.grad = torch.ones(3, dtype=torch.float32)
            topt.step()
            tstate = topt.state_dict()["state"][0]
        finally:
            torch.set_default_dtype(torch.float32)
        assert set(tstate) == set(state)
        assert all(isinstance(v, torch.Tensor) for v in tstate.values())
        assert _name(tstate["step"].dtype) == default and tstate["step"].shape == ()


REPRS = [lambda m: m.ones(2), lambda m: m.ones(2, dtype=m.float64), lambda m: m.tensor([1, 2]),
         lambda m: m.tensor([True]), lambda m: m.ones(2, dtype=m.float16),
         lambda m: m.ones(2, dtype=m.int32), lambda m: m.ones(2, dtype=m.complex64),
         lambda m: m.ones(2, dtype=m.complex128)]


@pytest.mark.parametrize("make", REPRS)
@pytest.mark.parametrize("default", ["float32", "float64"])
def test_repr_names_the_dtype_when_pytorch_does(make, default):
    """PyTorch's repr leaves out the default dtype (and its complex twin, int64, bool):
    a float32 tensor printed `dtype=float32` and a float64 one nothing, whatever the
    default."""
    pa.set_default_dtype(getattr(pa, default))
    shown = "dtype=" in repr(make(pa))
    if torch is not None:
        torch.set_default_dtype(getattr(torch, default))
        try:
            assert shown == ("dtype=" in repr(make(torch)))
        finally:
            torch.set_default_dtype(torch.float32)
    t = make(pa)
    assert shown == (str(t.dtype) not in (default, "int64", "bool",
                                          "complex64" if default == "float32" else "complex128"))
