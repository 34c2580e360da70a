"""The spatial ops of nn.functional as declarations (issue 26): the composites and the
internal ops the registry test does not walk, on their samples (tests/samples_nn_spatial.py)
with the registry's own checks and PyTorch's values, indices, gradients and dtypes; uint8
`interpolate` as PyTorch (issue 27); `needs_input_grad` (what a forward keeps for its
kernels)."""
from __future__ import annotations

import inspect
import warnings
import zlib

import numpy as np
import pytest
from op_samples import SAMPLES as ALL_SAMPLES  # noqa: F401  (first: it imports the families)
from samples_nn_spatial import COMPOSITES, INTERNAL, SAMPLES

import parallel_autograd as pa
import parallel_autograd.nn.functional as F
from parallel_autograd.primitive import REGISTRY

FAMILIES = ("conv", "pool", "pool3d", "lppool", "unpool", "resample", "pad")
_INTERNAL = {op.name: op for op in REGISTRY if op.family in FAMILIES and not op.export}
_COMPOSITE = {op.name: op for op in REGISTRY if op.family in FAMILIES and op.composite}


def _torch():
    return pytest.importorskip("torch")


def rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def test_every_spatial_op_is_declared_once_with_samples():
    declared = {op.name for op in REGISTRY if op.family in FAMILIES and op.export}
    assert declared == set(SAMPLES) | set(COMPOSITES)
    assert set(_INTERNAL) == set(INTERNAL)
    for name in declared:
        op = getattr(F, name).op
        assert op.module == "torch.nn.functional" and op.fn is getattr(F, name)
        assert "*args" not in str(inspect.signature(op.fn)), name


def test_signatures_are_pytorchs():
    torch = _torch()
    for name in sorted(set(SAMPLES) | set(COMPOSITES)):
        try:
            want = inspect.signature(getattr(torch.nn.functional, name))
        except ValueError:     # a builtin without a signature: its docstring's first line
            continue
        if "*args" in str(want):
            continue
        ours = inspect.signature(getattr(F, name))
        assert list(ours.parameters) == list(want.parameters), name
        for p, q in zip(ours.parameters.values(), want.parameters.values()):
            assert p.default == q.default, (name, p.name)


@pytest.mark.parametrize("check", ["test_gradcheck_and_gradgradcheck",
                                   "test_kernel_equals_formula_at_first_order",
                                   "test_both_engines_agree_bitwise",
                                   "test_every_differentiable_input_has_a_formula"])
@pytest.mark.parametrize("name", sorted(INTERNAL))
def test_the_registry_checks_pass_for_the_internal_ops(name, check, monkeypatch):
    import test_registry as registry                  # noqa: PLC0415  (its checks, reused)
    monkeypatch.setitem(registry.SAMPLES, name, INTERNAL[name])
    op = _INTERNAL[name]
    if check == "test_kernel_equals_formula_at_first_order" and not op.has_kernel:
        return
    getattr(registry, check)(op)


def _samples(table, name):
    return table[name](np.random.default_rng(zlib.crc32(name.encode())))


def _bound(fn, sample):
    """fn of the sample's first array (the tensor gradcheck perturbs), the rest bound; the
    first tensor of the result (the values)."""
    def call(t):
        out = fn(t, *sample.args[1:], **sample.kwargs)
        return out[0] if isinstance(out, tuple) else out
    return call


@pytest.mark.parametrize("name", sorted(COMPOSITES))
def test_composites_gradcheck_and_gradgradcheck(name):
    for sample in _samples(COMPOSITES, name):
        x = pa.tensor(sample.args[0], requires_grad=True)
        call = _bound(getattr(F, name), sample)
        assert pa.gradcheck(call, [x]), sample
        assert pa.gradgradcheck(call, [x]), sample


@pytest.mark.parametrize("name", sorted(COMPOSITES))
def test_composites_values_indices_gradients_and_dtypes_equal_pytorchs(name):
    torch = _torch()
    tfn = getattr(torch.nn.functional, name)
    for sample in _samples(COMPOSITES, name):
        args = [pa.tensor(a, requires_grad=i == 0) if isinstance(a, np.ndarray) else a
                for i, a in enumerate(sample.args)]
        targs = [torch.tensor(a, requires_grad=i == 0) if isinstance(a, np.ndarray) else a
                 for i, a in enumerate(sample.args)]
        got = getattr(F, name)(*args, **sample.kwargs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")            # upsample's deprecation
            want = tfn(*targs, **sample.kwargs)
        got = got if isinstance(got, tuple) else (got,)
        want = want if isinstance(want, tuple) else (want,)
        assert len(got) == len(want), sample
        for a, b in zip(got, want):
            assert str(a.dtype) == str(b.dtype).replace("torch.", ""), sample
            np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-12, atol=1e-13,
                                       err_msg=f"{name} {sample}")
        w = rand(got[0].shape, 43)
        (g,) = pa.grad(got[0], [args[0]], grad_outputs=w)
        (gt,) = torch.autograd.grad(want[0], [targs[0]], torch.tensor(w))
        np.testing.assert_allclose(np.asarray(g), gt.numpy(), rtol=1e-11, atol=1e-12,
                                   err_msg=f"{name} {sample}")


# ---- uint8 images (issue 27) ------------------------------------------------------------------
UINT8 = [((1, 3, 5, 7), dict(size=(9, 11))), ((2, 3, 8, 8), dict(size=(3, 4))),
         ((1, 6, 5, 7), dict(size=(9, 4))), ((1, 1, 7, 6), dict(scale_factor=1.7)),
         ((1, 4, 6, 9), dict(scale_factor=(0.5, 1.5))), ((1, 2, 5, 7), dict(size=(5, 10))),
         ((1, 8, 4, 4), dict(scale_factor=2, recompute_scale_factor=True))]


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("mode", ["bilinear", "bicubic", "nearest", "nearest-exact"])
@pytest.mark.parametrize("shape,kw", UINT8, ids=[str(k) for _, k in UINT8])
def test_uint8_interpolate_keeps_the_dtype_and_rounds_as_pytorch(shape, kw, mode,
                                                                  align_corners):
    """A uint8 image stays uint8, equal to PyTorch's (its fixed-point separable resize;
    3 and 4 channels and more, which PyTorch computes by two different kernels)."""
    torch = _torch()
    if align_corners and mode.startswith("nearest"):
        return
    x = np.random.default_rng(sum(shape)).integers(0, 256, shape).astype(np.uint8)
    extra = dict(align_corners=align_corners) if not mode.startswith("nearest") else {}
    got = F.interpolate(pa.tensor(x), mode=mode, **kw, **extra)
    want = torch.nn.functional.interpolate(torch.tensor(x), mode=mode, **kw, **extra)
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_integer_interpolation_pytorch_does_not_implement_raises():
    x = pa.tensor(np.arange(2 * 3 * 16).reshape(2, 3, 4, 4))
    for mode in ("bilinear", "bicubic", "area"):
        with pytest.raises(NotImplementedError, match="not implemented"):
            F.interpolate(x, size=(5, 5), mode=mode)
    with pytest.raises(NotImplementedError, match="not implemented"):
        F.interpolate(pa.tensor(np.zeros((1, 1, 4), np.uint8)), size=5, mode="linear")
    with pytest.raises(NotImplementedError, match="not implemented"):
        F.adaptive_avg_pool2d(x, 2)
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        F.interpolate(x, size=(5, 5))       # nearest too: PyTorch's kernels take uint8 only
    u = pa.tensor(np.arange(16, dtype=np.uint8).reshape(1, 1, 4, 4))
    assert F.interpolate(u, size=(5, 5)).dtype == np.uint8     # nearest: a gather


# ---- what a forward keeps ------------------------------------------------------------------------
def test_conv_keeps_its_columns_only_when_the_weight_takes_a_gradient():
    """`needs_input_grad`: the forward sees which inputs will take a gradient; it is not
    in the signature, nor among the node's params."""
    x, w = pa.tensor(rand((2, 3, 6, 6), 1), requires_grad=True), rand((4, 3, 3, 3), 2)
    assert "needs_input_grad" not in inspect.signature(F.conv2d).parameters
    y = F.conv2d(x, pa.tensor(w), padding=1)
    assert y.grad_fn.saved[4] is None and "needs_input_grad" not in y.grad_fn.kwargs
    wt = pa.tensor(w, requires_grad=True)
    assert F.conv2d(x, wt, padding=1).grad_fn.saved[4] is not None
    with pa.no_grad():
        assert F.conv2d(x, wt, padding=1).grad_fn is None
    with pytest.raises(TypeError):
        F.conv2d(x, wt, needs_input_grad=(True, True, True))


def test_the_ops_torch_also_has_at_top_level_are_pa_ops():
    """torch.conv2d, torch.max_pool3d, ... are F's: pa has them too (torch's
    `adaptive_max_pool1d` returns (values, indices) always: a different op, not exported)."""
    torch = _torch()
    for name in sorted(set(SAMPLES) | set(COMPOSITES)):
        if hasattr(torch, name) and name != "adaptive_max_pool1d":
            assert getattr(pa, name, None) is getattr(F, name), name
