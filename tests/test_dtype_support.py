"""Declared dtype support (`defop(dtypes=)`, `composite(dtypes=)`): an op refuses a dtype
exactly where PyTorch's CPU kernel does, with PyTorch's NotImplementedError.

The walk runs every op of `opwalk.CASES` whose declaration names its dtypes on the 11
dtypes (bool, the integers, float16/32/64, complex64/128) on both libraries: where
PyTorch refuses the dtype ("not implemented for", "does not support"...), ours raises
`DtypeNotImplementedError`; where PyTorch computes, ours does not raise it (it may fail
otherwise: complex inputs some forwards do not take). The rest checks the refusal itself
(type, message, no state touched), the declaration API and that the library's own calls
on other dtypes still run.
"""
from __future__ import annotations

import numpy as np
import pytest

import opwalk as W
import parallel_autograd as pa
import parallel_autograd.nn.functional as F
from opwalk import torch
from parallel_autograd.dtypes import DtypeNotImplementedError, supported
from parallel_autograd.primitive import REGISTRY, composite, defop

DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32",
          "float64", "complex64", "complex128")
_REFUSALS = ("not implemented for", "does not support", "not supported for",
             "Integral inputs not supported", "Complex inputs not supported",
             "inputs not supported for")


def _declared() -> dict:
    """{op name: (module, frozenset of numpy dtypes)} of the ops declaring dtypes=."""
    return {(op.name, m): op.dtypes for op in REGISTRY if op.dtypes is not None
            for m in op.modules}


def _cases() -> list:
    declared = _declared()
    module = {"f": "torch", "m": "torch", "o": "torch", "F": "torch.nn.functional",
              "L": "torch.linalg"}
    out = []
    for c in W.CASES:
        if c.inplace:
            continue
        for f in W.forms(c):
            if (c.name, module.get(f)) in declared and _torch_has(c, f):
                out.append((c, f))
                break
    return out


def _torch_has(case: W.Case, form: str) -> bool:
    """PyTorch has the op in this form (torch.silu does not exist: F.silu does)."""
    if torch is None:
        return True
    try:
        T = W.Lib("torch")
        W.prepare(case, form, T, [T.t(a) for a in W.make_arrays(case)])
    except (AttributeError, IndexError, TypeError):
        return False
    return True


CASES = _cases()


def _arrays(case: W.Case, dtype: str) -> list:
    out = []
    for i, a in enumerate(W.make_arrays(case)):
        if (case.dtypes[i] if i < len(case.dtypes) else "f") in "fs":
            if dtype == "bool":
                a = a > 0
            elif dtype[0] in "iu":
                a = np.clip(np.round(a * 1.5), 0 if dtype[0] == "u" else -3, 3)
            a = a.astype(dtype)
        out.append(a)
    return out


def _torch_refuses(err) -> bool:
    return err is not None and any(r in str(err) for r in _REFUSALS)


@pytest.mark.walk
@pytest.mark.skipif(torch is None, reason="PyTorch is the oracle")
@pytest.mark.parametrize("case,form", [pytest.param(c, f, id=f"{c.id}-{f}") for c, f in CASES])
def test_declared_dtypes_are_pytorchs(case, form):
    P, T = W.Lib("pa"), W.Lib("torch")
    wrong = []
    for dtype in DTYPES:
        arrays = _arrays(case, dtype)
        _, terr = W.attempt(W.prepare(case, form, T, [T.t(a) for a in arrays]))
        _, perr = W.attempt(W.prepare(case, form, P, [P.t(a) for a in arrays]))
        ours = isinstance(perr, DtypeNotImplementedError)
        if _torch_refuses(terr) and not isinstance(perr, NotImplementedError):
            wrong.append(f"{dtype}: PyTorch refuses ({terr}), ours "
                         f"{'returns' if perr is None else repr(perr)}")
        elif terr is None and ours:
            wrong.append(f"{dtype}: PyTorch computes, ours refuses ({perr})")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("call,dtype,name", [
    (lambda x: F.gelu(x), np.int64, "gelu"),
    (lambda x: pa.abs(x), np.bool_, "abs"),
    (lambda x: x.floor(), np.bool_, "floor"),
    (lambda x: pa.matmul(x, x), np.bool_, "matmul"),
    (lambda x: pa.hypot(x, x), np.int32, "hypot"),
    (lambda x: pa.mm(x, x), np.bool_, "mm"),                      # a composite
    (lambda x: x.argmax(), np.bool_, "argmax"),                    # a method
    (lambda x: F.mse_loss(x, x), np.int64, "mse_loss"),           # an nn composite
    (lambda x: F.batch_norm(x, None, None, training=True), np.int64, "batch_norm"),
    (lambda x: F.max_unpool1d(x[None], pa.zeros(1, 4, 4, dtype=pa.int64), 2), np.int64,
     "max_unpool1d"),
])
def test_refusal_is_pytorchs_not_implemented(call, dtype, name):
    x = pa.tensor(np.ones((4, 4), dtype))
    before = x.numpy().copy()
    with pytest.raises(NotImplementedError) as e:
        call(x)
    # PyTorch's type (a RuntimeError) and the TypeError this library raised before
    assert isinstance(e.value, RuntimeError) and isinstance(e.value, TypeError)
    torch_name = {np.int64: "Long", np.bool_: "Bool", np.int32: "Int"}[dtype]
    assert str(e.value) == f"\"{name}\" not implemented for '{torch_name}'"
    assert np.array_equal(x.numpy(), before) and x.numpy().dtype == dtype


def test_supported_dtypes_still_compute():
    """The declared sets keep what PyTorch computes: integer abs, floor, argmax, matmul;
    float16 gelu; int64 avg/max pools (max_pool3d runs max_pool1d, which refuses int64
    when called itself, on its depth pass: the library's own call is not refused)."""
    i = pa.tensor(np.arange(-8, 8).reshape(4, 4))
    assert pa.abs(i).dtype == pa.int64 and i.floor().dtype == pa.int64
    assert int(i.argmax()) == 15 and pa.matmul(i, i).dtype == pa.int64
    assert F.gelu(pa.ones(3, dtype=pa.float16)).dtype == pa.float16
    # the check follows promotion: an integer with a float operand computes in the float
    f32 = pa.ones(2, dtype=pa.float32)
    assert pa.hypot(pa.ones(2, dtype=pa.int64), f32).dtype == pa.float32
    assert pa.hypot(f32, pa.ones(2, dtype=pa.int64)).dtype == pa.float32
    v = pa.tensor(np.arange(2 * 4 * 4 * 4).reshape(1, 2, 4, 4, 4))
    assert F.max_pool3d(v, 2).dtype == pa.int64
    with pytest.raises(NotImplementedError):
        F.max_pool1d(v[0, :, 0], 2)


def test_bool_pad_and_bernoulli_follow_their_arguments():
    """Support that depends on an argument is checked in the function: pad's reflect and
    replicate modes refuse bool (constant and circular take it); bernoulli refuses integer
    probabilities, not an integer tensor given `p`."""
    b = pa.tensor(np.ones((1, 2, 4), bool))
    for mode in ("reflect", "replicate"):
        with pytest.raises(NotImplementedError, match="Bool"):
            F.pad(b, (1, 1), mode=mode)
    assert F.pad(b, (1, 1), mode="circular").dtype == pa.bool
    i = pa.zeros(3, dtype=pa.int64)
    with pytest.raises(NotImplementedError, match="Long"):
        pa.bernoulli(i)
    assert pa.bernoulli(i, p=0.5).dtype == pa.int64


def test_declaration_api():
    assert supported("floating") == {np.dtype(d) for d in ("float16", "float32", "float64")}
    assert np.dtype(np.int64) in supported(("int64", "inexact"))
    with pytest.raises(ValueError, match="unknown dtype or set"):
        supported("floats")

    @defop(formula=lambda g, ans, input: g, export=False, dtypes="floating")
    def _probe_identity(input: pa.Tensor) -> pa.Tensor:
        """Test op."""
        return input.copy()

    @composite(export=False, dtypes="real")
    def _probe_composite(input, scale=2):
        """Test composite."""
        return input * scale

    try:
        assert _probe_identity.op.dtypes == supported("floating")
        with pytest.raises(DtypeNotImplementedError, match="_probe_identity"):
            _probe_identity(pa.ones(2, dtype=pa.int64))
        with pytest.raises(DtypeNotImplementedError, match="'Bool'"):
            _probe_composite(input=pa.ones(2, dtype=pa.bool))
        assert _probe_composite.unchecked(pa.ones(2, dtype=pa.bool), True).dtype == pa.bool
        assert _probe_composite(pa.ones(2, dtype=pa.int8)).dtype == pa.int8
    finally:  # the registry holds what is declared: leave it as it was
        for f in (_probe_identity, _probe_composite):
            REGISTRY.remove(f.op)


@pytest.mark.parametrize("name,dtype", [("abs_", np.bool_), ("floor_", np.bool_),
                                        ("trunc_", np.bool_), ("bernoulli_", np.complex64)])
def test_inplace_forms_refuse_as_their_ops(name, dtype):
    """An in-place method refuses the dtypes its op's declaration does not take, before
    writing (PyTorch's `x.abs_()` of bool: NotImplementedError)."""
    x = pa.tensor(np.ones(3, dtype))
    version = x._vc[0]
    with pytest.raises(NotImplementedError, match="not implemented for"):
        getattr(x, name)()
    assert np.array_equal(x.numpy(), np.ones(3, dtype)) and x._vc[0] == version
    assert pa.tensor(np.ones(3, np.int64)).abs_().dtype == pa.int64
