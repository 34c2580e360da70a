"""Zero-size inputs give PyTorch's results: the op walk (issue 25, item 9).

Every op of the walk (`opwalk.CASES`: pa, Tensor, nn.functional, linalg) runs with each
of its dimensions set to 0 in turn, on 0-d inputs, and on strided (non-contiguous) views
with an empty dimension, in parallel_autograd and in PyTorch with the same values:

- where PyTorch returns a result, parallel_autograd returns one of the same shape, dtype
  and values (NaN where PyTorch gives NaN), and the same gradients for every input (a
  missing gradient and a zero one are the same here);
- where PyTorch raises, parallel_autograd raises an exception of the same category, and a
  clear one (raised by the package, not a ZeroDivisionError or a numpy error from deep
  inside a kernel); or it returns an empty result (it accepts an empty dimension PyTorch's
  kernel refuses, and makes nothing up).

`DIFFERENT` lists where PyTorch is not followed, with why. The layers with parameters
(`nn.Linear` with 0 in or out features, attention with no keys, recurrent layers with an
empty batch or sequence, ...) are walked the same way, with PyTorch's weights.
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

import opwalk as W
import parallel_autograd as pa
import parallel_autograd.nn as nn
from opwalk import torch

pytestmark = [pytest.mark.skipif(torch is None, reason="PyTorch is the oracle"),
              pytest.mark.walk]  # the op walk (`-m "not walk"` leaves it out)

P = W.Lib("pa")
T = W.Lib("torch") if torch is not None else None  # the module is skipped then
TOL = dict(rtol=1e-6, atol=1e-8, equal_nan=True)

# (case id, variant) -> why PyTorch is not followed there
DIFFERENT = {
    # PyTorch returns the input's shape for an empty input ((0, 3, 4, 4) stays (0, 3, 4,
    # 4) instead of (0, 12, 2, 2)): a PyTorch bug; here the shape is the op's
    ("pixel_unshuffle", "b=0"): "PyTorch bug", ("pixel_unshuffle", "c=0"): "PyTorch bug",
    ("pixel_unshuffle", "b=0 strided"): "PyTorch bug",
    # PyTorch's bincount of an empty input is int64 even with float weights; here the
    # weights' dtype, as for any other input
    ("bincount[weights]", "i=0"): "PyTorch quirk", ("bincount[weights]", "i=0 strided"): "",
    # PyTorch's lstsq reports rank 0 for an empty B (LAPACK is not called); here A's rank
    ("lstsq", "k=0"): "PyTorch quirk",
    # a convolution with no input channels: PyTorch's result has 0 channels instead of
    # its C_out (a bug); here (N, C_out, *out): the bias, or zeros (empty sums)
    ("conv1d", "c=0"): "PyTorch bug", ("conv2d", "c=0"): "PyTorch bug",
    ("conv3d", "c=0"): "PyTorch bug",
    # group_norm over empty groups: PyTorch's weight gradient is NaN (its formula scales
    # empty sums by the NaN statistics); here 0, the sum over no element
    ("group_norm", "w=0"): "PyTorch artifact", ("GroupNorm", "w=0"): "PyTorch artifact",
    # bilinear with no in1 or in2 features: PyTorch refuses to reshape its empty operand
    # to (-1, 0) (a bug: the sum over no feature is 0); here the bias, broadcast
    ("bilinear", "i=0"): "PyTorch bug", ("bilinear", "j=0"): "PyTorch bug",
    ("Bilinear", "e=0"): "PyTorch bug",
}


def _letters(case: W.Case) -> list:
    return sorted({c for s in case.shapes for c in s if not c.isdigit()})


def _variants(case: W.Case) -> list:
    letters = _letters(case)
    out = [(f"{x}=0", {x: 0}, False) for x in letters]
    if letters:
        out.append((f"{letters[0]}=0 strided", {letters[0]: 0}, True))
    out.append(("0-d", {}, False))
    return out


PARAMS = [pytest.param(c, f, v, s, st, id=f"{c.id}-{f}-{v}")
          for c in W.CASES for f in W.forms(c) if f != "x"
          for v, s, st in _variants(c)]


def _leaves(m: W.Lib, arrays: list, case: W.Case, strided: bool):
    """(leaves, op inputs): float leaves require grad; strided inputs are every other
    element of a leaf twice as wide in its last dimension."""
    grad = case.grad and not case.inplace
    leaves, inputs = [], []
    for a in arrays:
        rg = grad and a.dtype.kind == "f"
        if strided and a.ndim:
            big = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
            big[..., ::2] = a
            leaf = m.t(big, requires_grad=rg)
            leaves.append(leaf)
            inputs.append(leaf[..., ::2])
        else:
            leaf = m.t(a, requires_grad=rg)
            leaves.append(leaf)
            inputs.append(leaf)
    return leaves, inputs


def _arrays(case: W.Case, sizes: dict, variant: str) -> list:
    arrays = W.make_arrays(case, sizes)
    if variant == "0-d":
        arrays = [a.reshape(-1)[:1].reshape(()) if a.size else a for a in arrays]
    return arrays


# torch's exception -> the kinds that count as the same category here (a bad shape or
# value is RuntimeError in PyTorch, ValueError in parallel_autograd's convention, and an
# index out of range IndexError in either)
_BAD_VALUE = (RuntimeError, ValueError, IndexError)
CATEGORY = {RuntimeError: _BAD_VALUE, ValueError: _BAD_VALUE, IndexError: _BAD_VALUE,
            TypeError: (TypeError,), NotImplementedError: (NotImplementedError,) + _BAD_VALUE}


# messages of Python's and numpy's own errors, not of a check that names the problem
_INTERNAL = re.compile(r"(tuple|list) index out of range|cannot reshape array|zero-size array"
                       r"|division by zero|modulo by zero|attempt to get arg|has no attribute"
                       r"|not subscriptable|unsupported operand|return arrays must be")


def _clear(e: BaseException) -> str | None:
    """Why `e` is not a clear error the package raised (None: it is)."""
    if not isinstance(e, (ValueError, RuntimeError, IndexError, TypeError,
                          NotImplementedError)):
        return f"{type(e).__name__} is not an error the package raises"
    if _INTERNAL.search(str(e)):
        return "a Python or numpy internal error"
    tb = e.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    where = tb.tb_frame.f_code.co_filename
    if "parallel_autograd" not in where:
        return f"raised inside {where}"
    return None


def _same_category(theirs: BaseException, ours: BaseException) -> None:
    kinds = next((v for k, v in CATEGORY.items() if isinstance(theirs, k)), (Exception,))
    assert isinstance(ours, kinds), (
        f"PyTorch raises {type(theirs).__name__} ({theirs}), parallel_autograd "
        f"{type(ours).__name__} ({ours})")
    why = _clear(ours)
    assert why is None, f"unclear error: {why}: {type(ours).__name__}: {ours}"


def _empty(out) -> bool:
    return all(t.numel() == 0 for t in W.tensors_of(out))


def _compare_results(case: W.Case, ours: list, theirs: list) -> None:
    assert len(ours) == len(theirs) or not case.exact, (
        f"{len(ours)} results, PyTorch {len(theirs)}")
    for k, (a, b) in enumerate(zip(ours, theirs)):
        if not isinstance(a, pa.Tensor):
            continue
        want = b.detach().numpy()
        assert a.shape == want.shape, f"result {k}: shape {a.shape}, PyTorch {want.shape}"
        assert a.dtype == want.dtype, f"result {k}: dtype {a.dtype}, PyTorch {want.dtype}"
        if case.exact:
            np.testing.assert_allclose(a.numpy().astype(np.float64), want.astype(np.float64),
                                       err_msg=f"result {k}", **TOL)


def _grad_of(t):
    g = t.grad
    if g is None:
        return None
    return g.numpy(force=True) if torch is not None and isinstance(g, torch.Tensor) else g


def _compare_grads(ours: list, theirs: list, pleaves: list, tleaves: list) -> None:
    graded = [k for k, b in enumerate(theirs)
              if isinstance(b, torch.Tensor) and b.requires_grad]
    if not graded:
        return
    rng = np.random.default_rng(1)
    seeds = {k: rng.standard_normal(tuple(theirs[k].shape)) for k in graded}
    _, terr = W.attempt(lambda: sum((theirs[k] * torch.tensor(seeds[k])).sum()
                                   for k in graded).backward())
    _, perr = W.attempt(lambda: pa.stack([(ours[k] * pa.tensor(seeds[k])).sum()
                                         for k in graded]).sum().backward())
    if terr is not None:  # PyTorch has no derivative, or refuses this one
        if perr is not None:
            assert _clear(perr) is None, f"backward: {type(perr).__name__}: {perr}"
        return
    assert perr is None, f"backward raised {type(perr).__name__}: {perr}"
    for i, (p, t) in enumerate(zip(pleaves, tleaves)):
        if not t.requires_grad:
            continue
        want, got = _grad_of(t), _grad_of(p)
        if want is None and got is None:
            continue
        want = np.zeros(t.shape) if want is None else want
        got = np.zeros(p.shape) if got is None else got
        assert np.shape(got) == want.shape, f"input {i}: grad shape {np.shape(got)}"
        np.testing.assert_allclose(got, want, err_msg=f"gradient of input {i}", **TOL)


@pytest.mark.parametrize("case,form,variant,sizes,strided", PARAMS)
def test_zero_size_follows_pytorch(case, form, variant, sizes, strided):
    if (case.id, variant) in DIFFERENT:
        return
    arrays = _arrays(case, sizes, variant)
    tleaves, tins = _leaves(T, arrays, case, strided)
    pleaves, pins = _leaves(P, arrays, case, strided)
    try:
        tcall, pcall = W.prepare(case, form, T, tins), W.prepare(case, form, P, pins)
    except (AttributeError, IndexError):
        return  # PyTorch has no such op or method, or the case has no call for 0-d inputs
    tout, terr = W.attempt(tcall)
    pout, perr = W.attempt(pcall)
    if terr is not None:
        if perr is not None:
            _same_category(terr, perr)
        else:
            assert _empty(pout), (f"PyTorch refuses this input ({terr}); parallel_autograd "
                                  f"returned a non-empty result")
        return
    if perr is not None:
        raise AssertionError(f"PyTorch accepts this input; parallel_autograd raised "
                             f"{type(perr).__name__}: {perr}") from perr
    ours, theirs = W.tensors_of(pout), W.tensors_of(tout)
    if not ours and not theirs:
        if isinstance(tout, (bool, int, float)) and case.exact:
            assert pout == tout or (pout != pout and tout != tout), (pout, tout)
        return  # other objects (a dtype, a repr, a node) are not comparable
    _compare_results(case, ours, theirs)
    _compare_grads(ours, theirs, pleaves, tleaves)


# ---- layers with parameters ------------------------------------------------------------------
@dataclass
class Layer:
    name: str
    make: Callable            # (sizes) -> constructor args
    shapes: tuple             # input shapes (letters), float unless `dtypes` says "i"
    dtypes: str = ""
    kwargs: dict = field(default_factory=dict)
    letters: str = ""         # the sizes set to 0 in turn
    forward: Callable | None = None  # (module, *inputs) -> output (default module(*inputs))


_LSIZES = {"b": 2, "i": 3, "o": 4, "t": 3, "l": 3, "s": 4, "e": 4, "c": 3, "w": 5, "n": 5}


def _first(out):
    """The tensors of a layer's result ((output, state) for the recurrent ones)."""
    return W.tensors_of(out)


LAYERS = [
    Layer("Linear", lambda z: (z["i"], z["o"]), ("bi",), letters="bio"),
    Layer("Linear", lambda z: (z["i"], z["o"]), ("i",), letters="io"),
    Layer("Bilinear", lambda z: (z["i"], z["e"], z["o"]), ("bi", "be"), letters="bieo"),
    Layer("MultiheadAttention", lambda z: (z["e"], 2), ("lbe", "sbe", "sbe"), letters="lsb"),
    Layer("MultiheadAttention", lambda z: (z["e"], 2), ("ble", "bse", "bse"), letters="lsb",
          kwargs=dict(batch_first=True)),
    Layer("MultiheadAttention", lambda z: (z["e"], 2), ("lbe", "sbe", "sbe"), letters="lsb",
          forward=lambda m, q, k, v: m(q, k, v, need_weights=False)),
    Layer("RNN", lambda z: (z["i"], 4), ("tbi",), letters="tbi"),
    Layer("LSTM", lambda z: (z["i"], 4), ("tbi",), letters="tbi"),
    Layer("GRU", lambda z: (z["i"], 4), ("tbi",), letters="tbi"),
    Layer("LSTM", lambda z: (z["i"], 4), ("bti",), letters="tb",
          kwargs=dict(batch_first=True, bidirectional=True, num_layers=2)),
    Layer("RNNCell", lambda z: (z["i"], 4), ("bi",), letters="bi"),
    Layer("LSTMCell", lambda z: (z["i"], 4), ("bi",), letters="bi"),
    Layer("GRUCell", lambda z: (z["i"], 4), ("bi",), letters="bi"),
    Layer("Conv1d", lambda z: (z["c"], z["o"], 3), ("bcw",), letters="b"),
    Layer("Conv2d", lambda z: (z["c"], z["o"], 3), ("bcww",), letters="b"),
    Layer("ConvTranspose1d", lambda z: (z["c"], z["o"], 3), ("bcw",), letters="b"),
    Layer("Embedding", lambda z: (z["n"], z["e"]), ("b",), dtypes="i", letters="be"),
    Layer("LayerNorm", lambda z: (z["i"],), ("bi",), letters="bi"),
    Layer("RMSNorm", lambda z: (z["i"],), ("bi",), letters="bi"),
    Layer("GroupNorm", lambda z: (1, z["c"]), ("bcw",), letters="bw"),
    Layer("BatchNorm1d", lambda z: (z["c"],), ("bc",), letters="b"),
    Layer("BatchNorm1d", lambda z: (z["c"],), ("bcw",), letters="bw"),
    Layer("BatchNorm2d", lambda z: (z["c"],), ("bcww",), letters="bw"),
    Layer("InstanceNorm1d", lambda z: (z["c"],), ("bcw",), letters="bw",
          kwargs=dict(affine=True, track_running_stats=True)),
    Layer("PReLU", lambda z: (z["c"],), ("bcw",), letters="bw"),
]

LPARAMS = [pytest.param(L, x, id=f"{L.name}{'+' if L.kwargs or L.forward else ''}-"
                                f"{''.join(L.shapes)}-{x}=0")
           for L in LAYERS if hasattr(nn, L.name) for x in L.letters]


def _modules(layer: Layer, sizes: dict):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        args = layer.make(sizes)
        tm = getattr(torch.nn, layer.name)(*args, **layer.kwargs).double()
        pm = getattr(nn, layer.name)(*args, **layer.kwargs, dtype=np.float64)
    state = {k: v.detach().numpy().copy() for k, v in tm.state_dict().items()}
    pm.load_state_dict(state)
    return tm, pm


@pytest.mark.parametrize("layer,letter", LPARAMS)
def test_zero_size_layers_follow_pytorch(layer, letter):
    if (layer.name, f"{letter}=0") in DIFFERENT:
        return
    sizes = {**_LSIZES, letter: 0}
    rng = np.random.default_rng(0)
    arrays = []
    for i, spec in enumerate(layer.shapes):
        shape = W.shape_of(spec, sizes)
        if i < len(layer.dtypes) and layer.dtypes[i] == "i":
            arrays.append(W.index_array(shape, sizes["n"]))
        else:
            arrays.append(rng.standard_normal(shape))
    tm, pm = W.attempt(lambda: _modules(layer, sizes))[0] or (None, None)
    if tm is None:
        _, terr = W.attempt(lambda: _modules(layer, sizes))
        _, perr = W.attempt(lambda: getattr(nn, layer.name)(*layer.make(sizes), **layer.kwargs))
        assert perr is not None, \
            f"PyTorch refuses to build it ({terr}); parallel_autograd builds it"
        _same_category(terr, perr)
        return
    tins = [T.t(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    pins = [P.t(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    run = layer.forward or (lambda m, *xs: m(*xs))
    tout, terr = W.attempt(lambda: run(tm, *tins))
    pout, perr = W.attempt(lambda: run(pm, *pins))
    if terr is not None:
        if perr is not None:
            _same_category(terr, perr)
        else:
            assert _empty(pout), f"PyTorch refuses ({terr}); parallel_autograd returned values"
        return
    if perr is not None:
        raise AssertionError(f"PyTorch accepts this input; parallel_autograd raised "
                             f"{type(perr).__name__}: {perr}") from perr
    ours, theirs = _first(pout), _first(tout)
    _compare_results(W.Case(layer.name, (), None), ours, theirs)
    tparams = dict(tm.named_parameters())
    pparams = dict(pm.named_parameters())
    assert sorted(tparams) == sorted(pparams)
    names = sorted(tparams)
    _compare_grads(ours, theirs, pins + [pparams[n] for n in names],
                   tins + [tparams[n] for n in names])
