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
import weakref

import numpy as np
import pytest
import op_samples  # noqa: F401, I001  (first: it imports the samples modules)
from samples_nn_layers import INTERNAL

import parallel_autograd as pa
import parallel_autograd.nn.functional as F
from parallel_autograd.primitive import REGISTRY, defop


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
    np.testing.assert_array_equal(y.data, [30.0, 80.0])
    gx, gw = pa.grad(y.sum(), [x, w])
    np.testing.assert_array_equal(gx, [30.0, 40.0])
    np.testing.assert_array_equal(gw, [10.0, 20.0])
    assert pa.gradgradcheck(lambda a, b: _scaled(a, 0.5, b), [x, w])


@defop(formula=lambda g, ans, x: g * 2.0, unsaved=("x", "result"), export=False)
def _doubled(x):
    """2 x, keeping nothing."""
    return x * 2.0


def test_an_unsaved_result_is_not_kept_alive_by_its_node():
    # linear's node keeps the input and the weight (its rules read them), not the output;
    # `_doubled` keeps neither its input nor its output: linear's output is then freed
    x, w = leaf(rand((64, 32))), leaf(rand((16, 32), 1))
    y = F.linear(x, w)
    ref = weakref.ref(y.data)
    z = _doubled(y)                 # y's node stays alive in z's graph
    del y
    gc.collect()
    assert ref() is None
    saved = z.grad_fn.next_nodes[0].saved
    assert saved[0].shape == (64, 16) and saved[0].strides == (0, 0)   # a placeholder
    assert not saved[0].flags.writeable
    v = rand((64, 16), 2)
    gx, gw = pa.grad(z, [x, w], grad_outputs=v)
    np.testing.assert_allclose(gx, 2 * v @ w.data)
    np.testing.assert_allclose(gw, 2 * v.T @ x.data)
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
def _internal():
    ops = {}
    for op in REGISTRY:
        if not op.export and not op.composite and op.forward.__module__.startswith(
                "parallel_autograd.nn."):
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
