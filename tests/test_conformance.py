"""Conformance with PyTorch, generated from the op walk (issue 27, item 6).

Every case of `opwalk.CASES` (every public function, Tensor method and operator,
`nn.functional` and `linalg` name: a new op without a case fails the walk) runs in each
of its forms on parallel_autograd and on PyTorch with the same values, once per dtype
variant of its floating inputs:

- `float32`, `float64`: the float inputs in that dtype;
- `int64`: the float inputs as small integers (`-3..3`) of dtype int64;
- `bool`: the float inputs as booleans;
- `mixed`: the first float input float32, the others float64 (type promotion).

(Index and mask inputs keep their dtype. 0-d, empty and non-contiguous inputs are the
zero-size walk's, `test_zero_size.py`; broadcast shapes are cases of the walk.)

The outcome must be PyTorch's:
- both return: the same number of results, each of the same shape and dtype, and the
  same values (float32: 1e-5 relative; a case marked not `exact`, a random draw, compares
  shapes and dtypes only);
- both raise: our exception is an instance of PyTorch's exception's type (exactly its
  type or a subclass, so an `except` written for PyTorch catches it);
- one raises and the other returns: a disagreement.

`KNOWN` lists every disagreement left, each with a reason; the test fails on a new one
and on a listed one that is gone (remove it). docs/conformance.md is the table of
`KNOWN`, checked to be up to date; regenerate it with
`python tests/test_conformance.py > docs/conformance.md`.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

import opwalk as W
import parallel_autograd as pa
from opwalk import torch

pytestmark = [pytest.mark.skipif(torch is None, reason="PyTorch is the oracle"),
              pytest.mark.walk]

VARIANTS = ("float32", "float64", "int64", "bool", "mixed")
SKIP_CASES = {"__repr__", "__len__", "__array__"}  # not values of a dtype


def _arrays(case: W.Case, variant: str) -> list:
    arrays = W.make_arrays(case)
    out, first = [], True
    for i, a in enumerate(arrays):
        kind = case.dtypes[i] if i < len(case.dtypes) else "f"
        if kind not in "fs":
            out.append(a)
            continue
        if variant == "float32" or (variant == "mixed" and first):
            a = a.astype(np.float32)
        elif variant == "int64":
            a = np.clip(np.round(a * 1.5), -3, 3).astype(np.int64)
        elif variant == "bool":
            a = a > 0
        else:
            a = a.astype(np.float64)
        first = False
        out.append(a)
    return out


def _floats(case: W.Case) -> int:
    return sum(1 for i, _ in enumerate(case.shapes)
               if (case.dtypes[i] if i < len(case.dtypes) else "f") in "fs")


def _params() -> list:
    out = []
    for c in W.CASES:
        if c.name in SKIP_CASES or c.inplace:
            continue
        n = _floats(c)
        for f in W.forms(c):
            if f == "x":
                continue
            for v in VARIANTS:
                if n == 0 and v != "float64":
                    continue  # nothing to vary
                if v == "mixed" and n < 2:
                    continue
                out.append((c, f, v))
    return out


PARAMS = _params()
P = W.Lib("pa")
T = W.Lib("torch") if torch is not None else None


def _dtype_name(t) -> str:
    return str(t.dtype).replace("torch.", "")


def _values_differ(a, b, dtype: str) -> bool:
    x = np.asarray(a.detach().numpy() if isinstance(a, pa.Tensor) else a)
    y = b.detach().resolve_conj().numpy()
    if x.dtype.kind == "c" or y.dtype.kind == "c":
        x, y = x.astype(np.complex128), y.astype(np.complex128)
    elif x.dtype.kind in "fc" or y.dtype.kind in "fc":
        x, y = x.astype(np.float64), y.astype(np.float64)
    rtol, atol = (1e-5, 1e-6) if dtype in ("float32", "bfloat16", "float16") else (1e-9, 1e-12)
    with np.errstate(all="ignore"):
        return not np.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True)


def outcome(case: W.Case, form: str, variant: str) -> str | None:
    """None when parallel_autograd does what PyTorch does; else what differs."""
    arrays = _arrays(case, variant)
    tins = [T.t(a) for a in arrays]
    pins = [P.t(a) for a in arrays]
    try:
        tcall, pcall = W.prepare(case, form, T, tins), W.prepare(case, form, P, pins)
    except (AttributeError, IndexError, TypeError):
        return None  # PyTorch has no such op or method here
    before = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, str(np.dtype(pa.get_default_dtype()))))
    try:  # integer inputs promote to the default dtype: the same one on both sides
        tout, terr = W.attempt(tcall)
    finally:
        torch.set_default_dtype(before)
    pout, perr = W.attempt(pcall)
    if terr is not None and perr is not None:
        if isinstance(perr, type(terr)):
            return None
        return f"raises {type(perr).__name__}, PyTorch {type(terr).__name__}"
    if terr is not None:
        return f"returns, PyTorch raises {type(terr).__name__}"
    if perr is not None:
        return f"raises {type(perr).__name__}, PyTorch returns"
    ours, theirs = W.tensors_of(pout), W.tensors_of(tout)
    if not ours and not theirs:
        if isinstance(tout, (bool, int, float)) and case.exact and pout != tout \
                and not (pout != pout and tout != tout):
            return "another value"
        return None
    if len(ours) != len(theirs):
        return f"{len(ours)} results, PyTorch {len(theirs)}"
    for a, b in zip(ours, theirs):
        if not isinstance(a, pa.Tensor):
            return "a result is not a Tensor"
        if tuple(a.shape) != tuple(b.shape):
            return f"shape {tuple(a.shape)}, PyTorch {tuple(b.shape)}"
        da, db = _dtype_name(a), _dtype_name(b)
        if da != db:
            return f"dtype {da}, PyTorch {db}"
        if case.exact and _values_differ(a, b, db):
            return "other values"
    return None


def _key(case: W.Case, form: str, variant: str) -> str:
    return f"{case.id}-{form}-{variant}"


MIXED = "PyTorch's kernel refuses mixed float32/float64 operands; here they promote"
INT_REFUSED = 'PyTorch refuses integer inputs; here they compute in the default dtype'
RECIPROCAL = "PyTorch computes y / x as reciprocal(x) * y in x's float32"
TIES = "ties: PyTorch's index of a tied value is unspecified"
INT_AVERAGE = 'PyTorch averages integer inputs in integers'
F32_FIRST = 'PyTorch computes in float32, then promotes; here in float64'
FIRST_DTYPE = "PyTorch's result dtype is the first operand's; here the promoted one"
EINSUM_BOOL = ("PyTorch refuses bool where its einsum contracts through bmm (it depends on "
               "the equation); numpy's computes every equation")

# "case-form-variant" -> why parallel_autograd does not do what PyTorch does there
KNOWN: dict[str, str] = {
    'isclose-f-mixed': MIXED,
    'isclose-m-mixed': MIXED,
    'allclose-f-mixed': MIXED,
    'allclose-m-mixed': MIXED,
    '__rtruediv__-o-mixed': RECIPROCAL,
    'kthvalue-f-int64': TIES,
    'kthvalue-m-int64': TIES,
    'einsum-f-bool': EINSUM_BOOL,
    'einsum-f-mixed': MIXED,
    'local_response_norm-F-int64': INT_AVERAGE,
    'l1_loss-F-int64': INT_REFUSED,
    'huber_loss-F-mixed': FIRST_DTYPE,
    'binary_cross_entropy_with_logits-F-mixed': F32_FIRST,
    'cross_entropy[probabilities]-F-mixed': FIRST_DTYPE,
}


@pytest.mark.parametrize("case,form,variant", [
    pytest.param(c, f, v, id=_key(c, f, v)) for c, f, v in PARAMS])
def test_conforms_to_pytorch(case, form, variant):
    got = outcome(case, form, variant)
    key = _key(case, form, variant)
    if key in KNOWN:
        assert got is not None, f"{key} now conforms: remove it from KNOWN"
        return
    assert got is None, got


def table(rows: dict) -> str:
    """docs/conformance.md: the known disagreements, one row per reason."""
    lines = [
        "# Conformance with PyTorch: what is left",
        "",
        "Generated by `python tests/test_conformance.py > docs/conformance.md` from",
        "`tests/test_conformance.py`'s `KNOWN` table (the test fails when this file is out of",
        "date). The test runs every op of the op walk (`tests/opwalk.py`) in each of its forms",
        "(f: `pa.op`, m: a Tensor method, o: an operator, F: `nn.functional`, L: `linalg`) on",
        "float32, float64, int64, bool and mixed float32/float64 inputs, on parallel_autograd",
        "and on PyTorch, and compares the results (shape, dtype, values) and the exception",
        "types. A new disagreement fails the test; so does a listed one that is gone.",
        "",
        f"{len(rows)} disagreements out of {len(PARAMS)} calls, by reason:",
        "",
        "| why | inputs | ops (forms) |",
        "|---|---|---|",
    ]
    groups: dict = {}
    for key, why in rows.items():
        name, form, variant = key.rsplit("-", 2)
        ops = groups.setdefault(why, {}).setdefault(variant, {})
        ops.setdefault(name, []).append(form)
    for why, by_variant in groups.items():
        for variant, ops in sorted(by_variant.items()):
            names = ", ".join(f"`{n}` ({''.join(sorted(f))})" for n, f in sorted(ops.items()))
            lines.append(f"| {why} | {variant} | {names} |")
    return "\n".join(lines) + "\n"


def test_docs_table_is_up_to_date():
    from pathlib import Path
    doc = Path(__file__).resolve().parent.parent / "docs" / "conformance.md"
    assert doc.read_text() == table(KNOWN), (
        "docs/conformance.md is out of date: python tests/test_conformance.py > "
        "docs/conformance.md")


if __name__ == "__main__":
    if "--find" in sys.argv:  # print every disagreement, for KNOWN
        for c, f, v in PARAMS:
            got = outcome(c, f, v)
            if got is not None:
                print(f"    {_key(c, f, v)!r}: {got!r},")
    else:
        sys.stdout.write(table(KNOWN))
