"""Real PyTorch programs (tests/programs/: nanoGPT-, MNIST-, word-language-model-, ResNet-,
DCGAN- and VAE-style, each PyTorch code with only its imports naming parallel_autograd)
trained for a few steps on pa and, from the same initial weights and data, on PyTorch: the
float64 loss curves agree to 1e-10 relative, the float32 ones to a loose bound 1e-4
(measured: 1.8e-7 at most). Each on both engines behind `loss.backward()`: a forced parallel
`Engine` and the sequential one. The programs also run on pa alone (dropout and sampling
on), without PyTorch.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from pytorch_programs import copy_weights, load, max_rel, snapshot

import parallel_autograd as pa

DTYPES = {"float64": 1e-10, "float32": 1e-4}


@pytest.fixture(params=["parallel", "sequential"])
def engine(request):
    """`loss.backward()` on a parallel Engine that parallelises any graph (checked: its
    calls ran in parallel mode), or sequential."""
    was = pa.get_default_engine()
    eng = pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0,
                    max_blas_share=1.0) if request.param == "parallel" else None
    pa.set_default_engine(eng or "sequential")
    try:
        yield request.param
        if eng is not None and eng.stats()["calls"]:
            assert eng.stats()["fallbacks"] < eng.stats()["calls"], eng.stats()["last_call"]
    finally:
        pa.set_default_engine(was)
        if eng is not None:
            eng.close()


@pytest.fixture
def default_dtypes():
    """Put pa's (and, if imported, PyTorch's) default dtype back after the test."""
    was = pa.get_default_dtype()
    torch = _torch_or_none()
    twas = torch.get_default_dtype() if torch else None
    yield
    pa.set_default_dtype(was)
    if torch:
        torch.set_default_dtype(twas)


def _torch_or_none():
    try:
        import torch
    except ImportError:
        return None
    return torch


# -- each program's data (numpy: the data source replaced) and the arguments of run() --

def _gpt_inputs(np_dtype, rng):
    data = rng.integers(0, 37, 400).astype(np.uint16)
    return (data, [rng.integers(0, 400 - 17, 4) for _ in range(6)]), {}


def _mnist_inputs(np_dtype, rng):
    x = rng.random((48, 1, 12, 12)).astype(np_dtype)
    y = (x[:, 0, :6].sum(axis=(1, 2)) * 10 / 72).astype(np.int64) % 10
    return (x, y), {"p1": 0.0, "p2": 0.0}


def _word_lm_inputs(rnn_type):
    def inputs(np_dtype, rng):
        corpus = (np.arange(81) * 7 + rng.integers(0, 3, 81)) % 29  # something to learn
        return (corpus.astype(np.int64),), {"rnn_type": rnn_type, "dropout": 0.0}
    return inputs


def _resnet_inputs(np_dtype, rng):
    x = rng.standard_normal((24, 3, 8, 8)).astype(np_dtype)
    y = (x[:, 0].mean(axis=(1, 2)) > 0).astype(np.int64) + 2 * (x[:, 1, :4].mean(axis=(1, 2)) > 0)
    return (x, y), {}


def _dcgan_inputs(np_dtype, rng):
    images = np.tanh(rng.standard_normal((4, 8, 1, 16, 16))).astype(np_dtype)
    noises = rng.standard_normal((4, 8, 8, 1, 1)).astype(np_dtype)
    return (images, noises), {}


def _vae_inputs(np_dtype, rng):
    images = rng.random((32, 64)).astype(np_dtype)
    noises = rng.standard_normal((4, 16, 4)).astype(np_dtype)
    return (images, noises), {}


PROGRAMS = {
    "gpt": ("gpt", _gpt_inputs),
    "mnist": ("mnist", _mnist_inputs),
    "word_lm_lstm": ("word_lm", _word_lm_inputs("LSTM")),
    "word_lm_gru": ("word_lm", _word_lm_inputs("GRU")),
    "word_lm_transformer": ("word_lm", _word_lm_inputs("Transformer")),
    "resnet": ("resnet", _resnet_inputs),
    "dcgan": ("dcgan", _dcgan_inputs),
    "vae": ("vae", _vae_inputs),
}


def _run_both(case, dtype):
    """Train the program on pa, then on PyTorch from pa's initial weights: both curves."""
    torch = pytest.importorskip("torch")
    program, inputs = PROGRAMS[case]
    pa.set_default_dtype(getattr(pa, dtype))
    torch.set_default_dtype(getattr(torch, dtype))
    args, make_kw = inputs(np.dtype(dtype), np.random.default_rng(0))
    ours = load(program, "pa")
    pa.manual_seed(0)
    models = ours.make_models(**make_kw)
    start = {k: snapshot(m) for k, m in models.items()}
    for m in models.values():
        assert {str(p.dtype) for p in m.parameters()} == {dtype}
    curve = ours.run(models, *args)
    theirs = load(program, "torch")
    tmodels = theirs.make_models(**make_kw)
    for k, m in tmodels.items():
        copy_weights(start[k], m, torch)
    return curve, theirs.run(tmodels, *args), (models, tmodels, ours, theirs)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", list(PROGRAMS))
def test_program_trains_as_on_pytorch(case, dtype, engine, default_dtypes):
    ours, theirs, _ = _run_both(case, dtype)
    assert all(math.isfinite(v) for v in ours), ours
    distance = max_rel(ours, theirs)
    assert distance <= DTYPES[dtype], (distance, ours, theirs)


def test_gpt_generates_pytorchs_tokens(default_dtypes):
    """After training, greedy sampling (top_k=1: multinomial over one token) of nanoGPT's
    generate() under no_grad picks the tokens PyTorch picks."""
    _, _, (models, tmodels, ours, theirs) = _run_both("gpt", "float64")
    assert ours.sample(models, [1, 2, 3]) == theirs.sample(tmodels, [1, 2, 3])
    assert pa.is_grad_enabled()


# -- on pa alone: dropout, sampling and randn_like on (no PyTorch needed) --

@pytest.mark.parametrize("case", list(PROGRAMS))
def test_program_runs_on_pa_alone_with_its_randomness(case, engine, default_dtypes):
    program, inputs = PROGRAMS[case]
    pa.set_default_dtype(pa.float32)
    args, make_kw = inputs(np.dtype("float32"), np.random.default_rng(1))
    make_kw = {k: v for k, v in make_kw.items() if k not in ("p1", "p2", "dropout")}
    if program == "vae":
        args = args[:1]  # the noise from torch.randn_like
    mod = load(program, "pa")
    pa.manual_seed(1)
    models = mod.make_models(**make_kw)
    curve = mod.run(models, *args)
    assert curve and all(math.isfinite(v) for v in curve), curve
    if program == "gpt":
        tokens = mod.sample(models, [1, 2, 3], max_new_tokens=20, top_k=None)
        assert len(tokens) == 23 and all(0 <= t < 37 for t in tokens)


# -- a gap the programs found, fixed: the layers' parameters in the default dtype --

LAYERS = ["Linear(3, 4)", "Embedding(5, 3)", "Conv2d(1, 2, 3)", "ConvTranspose2d(2, 3, 4)",
          "LSTM(3, 4)", "GRU(3, 4)", "BatchNorm2d(3)", "LayerNorm(3)", "PReLU()"]


@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_layers_make_their_parameters_in_the_default_dtype(layer, dtype, default_dtypes):
    """PyTorch's layers allocate in `torch.get_default_dtype()` when given no dtype; ours
    made float64 whatever the default (a float32 program trained in float64)."""
    pa.set_default_dtype(getattr(pa, dtype))
    m = eval(f"pa.nn.{layer}")  # noqa: S307  (the names above)
    got = {n: str(t.dtype) for n, t in [*m.named_parameters(), *m.named_buffers()]}
    want = {n: (dtype if "num_batches" not in n else "int64") for n in got}
    assert got == want
    assert str(pa.nn.Linear(2, 2, dtype=pa.float64).weight.dtype) == "float64"
    assert str(pa.nn.Parameter().dtype) == dtype and pa.nn.Parameter().shape == (0,)


# -- a gap the programs found, fixed: int(), float(), operator.index() of a tensor --

def test_nanogpt_get_batch_slices_with_randint_elements():
    """nanoGPT's get_batch: `data[i:i+block_size] for i in ix`, ix from torch.randint,
    slices a numpy array with one-element integer tensors (`__index__`)."""
    data = np.arange(40, dtype=np.uint16)
    pa.manual_seed(0)
    ix = pa.randint(len(data) - 4, (3,))
    x = pa.stack([pa.from_numpy((data[i:i + 4]).astype(np.int64)) for i in ix])
    assert x.tolist() == [list(range(int(i), int(i) + 4)) for i in ix.tolist()]
    assert ["a", "b", "c"][pa.tensor(2)] == "c" and list(range(pa.tensor([3]))) == [0, 1, 2]


SCALARS = [3, [3], True, 3.0, [[2.5]], [1, 2], -2.5, [[-7]]]


@pytest.mark.parametrize("value", SCALARS, ids=str)
@pytest.mark.parametrize("convert", ["index", "int", "float", "complex"])
def test_python_scalar_conversions_as_pytorch(value, convert):
    torch = pytest.importorskip("torch")
    import operator
    fn = {"index": operator.index, "int": int, "float": float, "complex": complex}[convert]

    def outcome(t):
        try:
            return fn(t)
        except (TypeError, ValueError) as e:
            return type(e), str(e)
    got, want = outcome(pa.tensor(value)), outcome(torch.tensor(value))
    assert got == want and type(got) is type(want)
