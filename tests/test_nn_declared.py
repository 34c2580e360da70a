"""The non-spatial layers of nn.functional as declared ops (issue 26): what the registry
test cannot see by itself.

- `defop` features they use: differentiable inputs that are not the forward's first
  parameters (`layer_norm(input, normalized_shape, weight, bias)`), and `unsaved=` (the
  node does not keep what no rule reads: linear's output, the recurrence's projections);
- the declared ops these families do not export (the fused nodes behind composites),
  through the registry's own checks, on the samples of tests/samples_nn_layers.py
  (`INTERNAL`);
- `nn/functional.py` is a face: every op it exports is declared in a family module (or
  is another family's), none defined in it.
"""
from __future__ import annotations

import gc
import warnings
import weakref

import numpy as np
import pytest
import op_samples  # noqa: F401, I001  (first: it imports the samples modules)
from samples_nn_layers import INTERNAL

import parallel_autograd as pa
import parallel_autograd.nn.functional as F
from parallel_autograd.primitive import REGISTRY, Saved, defop


def leaf(a):
    return pa.tensor(a, requires_grad=True)


def rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


# ---- defop: inputs after other parameters; unsaved values ------------------------------------
@defop(inputs=("x", "w"), formula=(lambda g, ans, x, w, k: g * w * k,
                                   lambda g, ans, x, w, k: g * x * k), export=False)
def _scaled(x, k, w):
    """x * w * k, with the parameter k between the two inputs."""
    return x * w * k


def test_an_input_after_a_parameter_is_passed_by_name():
    # the node calls the forward as forward(*inputs, **params): w went to k ("multiple
    # values for argument") before inputs could follow other parameters
    x, w = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    y = _scaled(x, 10.0, w)
    np.testing.assert_array_equal(y.numpy(), [30.0, 80.0])
    gx, gw = pa.grad(y.sum(), [x, w])
    np.testing.assert_array_equal(gx, [30.0, 40.0])
    np.testing.assert_array_equal(gw, [10.0, 20.0])
    assert pa.gradgradcheck(lambda a, b: _scaled(a, 0.5, b), [x, w])


@defop(inputs=("x", "w"), formula=(lambda g, ans, x, w, k: g * w * k,
                                   lambda g, ans, x, w, k: g * x * k),
       kernel=(lambda g, ans, x, w, asked, k: g * w * k,
               lambda g, ans, x, w, asked, k: g * x * k), export=False)
def _scaled_asking(k, x, w, *, needs_input_grad):
    """x * w * k, keeping which inputs take a gradient (an extra, `Saved`)."""
    return Saved(x * w * k, tuple(needs_input_grad))


def test_an_input_after_a_parameter_gets_needs_input_grad():
    # inputs after another parameter (recurrence(mode, xp, ...)) and needs_input_grad: the
    # forward was called by name without it (TypeError: missing needs_input_grad)
    x, w = leaf([1.0, 2.0]), pa.tensor([3.0, 4.0])
    y = _scaled_asking(10.0, x, w)
    assert y.grad_fn.saved[-1] == (True, False)
    (gx,) = pa.grad(y.sum(), [x])
    np.testing.assert_array_equal(gx, [30.0, 40.0])
    with pa.no_grad():
        assert _scaled_asking(2.0, x, w).grad_fn is None


@defop(formula=lambda g, ans, x, k: g * k, formula_extras=True, export=False)
def _squared_keeping_its_slope(x):
    """x^2, keeping its slope 2x (an extra) and not x: the formula reads the extra."""
    return Saved(x * x, 2.0 * x)


def test_a_formula_may_take_the_extras():
    # formula_extras: the formula gets the forward's extras after the inputs at first order
    # (no kernel: the formula on arrays) and under create_graph (constants there); x, which
    # no rule reads, is not kept
    x = leaf([1.0, -2.0, 3.0])
    y = _squared_keeping_its_slope(x)
    assert y.grad_fn.saved[1] is None
    np.testing.assert_array_equal(pa.grad(y.sum(), [x])[0], [2.0, -4.0, 6.0])
    y = _squared_keeping_its_slope(x)
    (gx,) = pa.grad(y.sum(), [x], create_graph=True)
    np.testing.assert_array_equal(gx.numpy(), [2.0, -4.0, 6.0])


@defop(formula=lambda g, ans, x: g * 2.0, unsaved=("x", "result"), export=False)
def _doubled(x):
    """2 x, keeping nothing."""
    return x * 2.0


def test_an_unsaved_result_is_not_kept_alive_by_its_node():
    # linear's node keeps the input and the weight (its rules read them), not the output;
    # `_doubled` keeps neither its input nor its output: linear's output is then freed
    x, w = leaf(rand((64, 32))), leaf(rand((16, 32), 1))
    y = F.linear(x, w)
    ref = weakref.ref(y.numpy())
    z = _doubled(y)                 # y's node stays alive in z's graph
    del y
    gc.collect()
    assert ref() is None
    saved = z.grad_fn.next_nodes[0].saved
    assert saved[0].shape == (64, 16) and saved[0].strides == (0, 0)   # a placeholder
    assert not saved[0].flags.writeable
    v = rand((64, 16), 2)
    gx, gw = pa.grad(z, [x, w], grad_outputs=v)
    np.testing.assert_allclose(gx, 2 * v @ w.numpy())
    np.testing.assert_allclose(gw, 2 * v.T @ x.numpy())
    # second order through placeholders: the formulas read shapes only
    assert pa.gradgradcheck(lambda a, b: _doubled(F.linear(a, b)) * a.sum(),
                            [leaf(rand((3, 4))), leaf(rand((2, 4), 1))])


def test_unsaved_names_must_be_the_result_or_inputs():
    with pytest.raises(TypeError, match="unsaved"):
        defop(formula=lambda g, ans, x: g, unsaved=("y",), export=False)(lambda x: x)


def test_families_are_named_after_their_modules():
    fams = {op.name: op.family for op in REGISTRY if op.module == "torch.nn.functional"}
    assert fams["linear"] == "linear"
    assert {op.family for op in REGISTRY if op.name == "sum"} == {"reduce"}


# ---- the internal ops: the registry's checks ---------------------------------------------------
# the layer families (the spatial ones' internal ops: tests/test_nn_spatial.py)
LAYER_FAMILIES = ("attention", "dropout", "embedding", "linear", "losses", "norms",
                  "recurrent")


def _internal():
    ops = {}
    for op in REGISTRY:
        if not op.export and not op.composite and op.family in LAYER_FAMILIES and \
                op.forward.__module__.startswith("parallel_autograd.nn."):
            ops[op.name] = op
    return ops


_INTERNAL = _internal()


def test_every_internal_op_has_samples():
    assert set(_INTERNAL) == set(INTERNAL)


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


def _torch():
    return pytest.importorskip("torch")


# ---- embedding: PyTorch's arguments (max_norm, scale_grad_by_freq, sparse, padding_idx) -------
@pytest.mark.parametrize("kw", [dict(max_norm=1.0), dict(max_norm=0.5, norm_type=1.0),
                                dict(scale_grad_by_freq=True),
                                dict(scale_grad_by_freq=True, padding_idx=1),
                                dict(padding_idx=-2), dict(sparse=True)])
def test_embedding_arguments_as_torch(kw):
    # before: max_norm, norm_type, scale_grad_by_freq and sparse were refused (TypeError)
    torch = _torch()
    idx = np.array([[1, 3, 1, 0], [3, 3, 2, 1]])
    w = rand((5, 4), 3)
    pw, tw = leaf(w.copy()), torch.tensor(w.copy(), requires_grad=True)
    y = F.embedding(pa.tensor(idx), pw, **kw)
    ty = torch.nn.functional.embedding(torch.tensor(idx), tw, **kw)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(pw.numpy(), tw.detach().numpy(), rtol=1e-12)  # renormalized rows
    v = rand(y.shape, 4)
    (g,) = pa.grad(y, [pw], grad_outputs=v)
    (tg,) = torch.autograd.grad(ty, [tw], torch.tensor(v))
    np.testing.assert_allclose(g, tg.to_dense().numpy(), rtol=1e-12, atol=1e-15)


def test_embedding_module_takes_torchs_arguments():
    torch = _torch()
    w = rand((6, 3), 5) * 3
    m = pa.nn.Embedding(6, 3, max_norm=2.0, scale_grad_by_freq=True,
                        _weight=w.copy())
    tm = torch.nn.Embedding(6, 3, max_norm=2.0, scale_grad_by_freq=True,
                            _weight=torch.tensor(w.copy()))
    idx = np.array([0, 2, 2, 5])
    y, ty = m(pa.tensor(idx)), tm(torch.tensor(idx))
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-12)
    assert repr(m) == repr(tm)
    y.sum().backward()
    ty.sum().backward()
    np.testing.assert_allclose(m.weight.grad, tm.weight.grad.to_dense().numpy(), rtol=1e-12)
    pre = pa.nn.Embedding.from_pretrained(pa.tensor(w), max_norm=1.0)
    assert pre.max_norm == 1.0 and not pre.weight.requires_grad


def test_embedding_max_norm_bumps_the_weights_version():
    # the renormalization writes the weight in place: a node that saved it sees the write
    w = leaf(rand((4, 3), 6) * 5)
    with pa.no_grad():
        frozen = w * 1.0
    saved = pa.tensor(frozen.numpy(), requires_grad=True)
    y = saved * w                    # mul saved w's values
    F.embedding(np.array([0, 1]), pa.tensor(w.numpy().copy()), max_norm=1.0)  # another table
    y.sum().backward()
    y = saved * w
    F.embedding(np.array([0, 1]), w, max_norm=1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_embedding_padding_idx_out_of_range_is_torchs_assertion():
    with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):
        F.embedding(np.array([0]), pa.ones(3, 2), padding_idx=3)


# ---- dropout's family ----------------------------------------------------------------------------
@pytest.mark.parametrize("name,shape,mask", [
    ("dropout1d", (4, 6, 5), (4, 6, 1)), ("dropout1d", (6, 5), (6, 1)),
    ("dropout2d", (4, 6, 3, 2), (4, 6, 1, 1)), ("dropout2d", (4, 6, 5), (4, 6, 1)),
    ("dropout3d", (2, 6, 2, 2, 2), (2, 6, 1, 1, 1)), ("dropout3d", (6, 2, 2, 2), (6, 1, 1, 1)),
    ("feature_alpha_dropout", (4, 6, 5), (4, 6, 1))])
def test_channel_dropouts_drop_whole_channels(name, shape, mask):
    # before: not there (AttributeError)
    x = leaf(np.abs(rand(shape, 1)) + 1)
    alpha = "alpha" in name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")            # dropout2d's 3-D input warns
        y = getattr(F, name)(x, 0.5, True, seed=3)
    # alpha dropout sets a dropped element to alpha a (p - 1) < 0; the input is positive
    dropped = y.numpy() < 0 if alpha else y.numpy() == 0
    axes = tuple(i for i, n in enumerate(mask) if n == 1)
    assert np.array_equal(dropped.all(axis=axes), dropped.any(axis=axes))  # whole channels
    assert 0 < dropped.mean() < 1
    (g,) = pa.grad(y.sum(), [x])
    assert np.array_equal(g == 0, dropped)


def test_alpha_dropout_keeps_selu_statistics_and_is_torchs_map():
    # kept: a x + alpha a p; dropped: alpha a (p - 1) (PyTorch's _dropout_impl), and inputs
    # of zero mean and unit variance keep both
    p, alpha = 0.2, 1.7580993408473766
    a = 1 / np.sqrt((alpha * alpha * p + 1) * (1 - p))
    x = pa.tensor(np.random.default_rng(0).standard_normal(400000))
    y = F.alpha_dropout(x, p, training=True, seed=1).numpy()
    kept = np.isclose(y, a * x.numpy() + alpha * a * p)
    assert np.all(kept | np.isclose(y, alpha * a * (p - 1)))
    assert abs(kept.mean() - (1 - p)) < 0.01
    assert abs(y.mean()) < 0.01 and abs(y.std() - 1) < 0.01
    assert F.alpha_dropout(x, p) is x                        # training=False by default


def test_dropout_accepts_inplace_and_keeps_the_eval_identity():
    x = leaf(rand((3, 4)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")            # a 2-D input to dropout2d/3d warns
        for fn in (F.dropout, F.dropout1d, F.dropout2d, F.dropout3d):
            assert fn(x, 0.5, False, True) is x
    with pytest.raises(RuntimeError, match="leaf Variable"):  # PyTorch's refusal
        F.dropout(x, 1.0, True, True)
    z = pa.tensor(rand((3, 4)))
    assert F.dropout(z, 1.0, True, True) is z  # written in place, as PyTorch's
    np.testing.assert_array_equal(z.numpy(), 0)
    with pytest.warns(UserWarning, match="dropout2d: Received a 3D input"):
        F.dropout2d(pa.ones(2, 3, 4), 0.5)
    with pytest.warns(UserWarning, match="dropout3d: Received a 3-D input"):
        F.dropout3d(pa.ones(2, 3, 4), 0.5)


def test_dropout_masks_replay_under_checkpoint():
    # the draws go through resolve_generator: a checkpoint's recomputation replays them
    x = leaf(rand((4, 6, 3, 3)))

    def seg(a):
        return F.dropout2d(a * 2.0, 0.5) * a

    pa.manual_seed(5)
    y = pa.checkpoint(seg, x)
    (g,) = pa.grad(y.sum(), [x])
    pa.manual_seed(5)
    (want,) = pa.grad(seg(x).sum(), [x])
    np.testing.assert_array_equal(g, want)
