"""dtype objects, the default dtype and PyTorch's type promotion (parallel_autograd.dtypes),
against torch where it is installed."""
import itertools

import numpy as np
import pytest

from parallel_autograd import dtypes as D

NAMES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64",
         "complex64", "complex128"]


def test_dtype_objects_compare_convert_and_hash_like_numpys():
    assert D.float32 == np.float32 and D.float32 == np.dtype("float32") and D.float32 == "float32"
    assert D.float32 != D.float64 and D.float32 != None  # noqa: E711
    assert np.dtype(D.float32) == np.float32 and np.zeros(2, D.long).dtype == np.int64
    assert hash(D.float64) == hash(np.dtype(np.float64))
    assert {np.dtype(np.float32): 1}[D.float32] == 1
    assert D.float32.is_floating_point and not D.int64.is_floating_point
    assert D.complex64.is_complex and D.int8.is_signed and not D.uint8.is_signed
    assert D.float64.itemsize == 8 and D.float32.kind == "f"
    assert D.long is D.int64 and D.double is D.float64 and D.half is D.float16
    assert D.as_dtype(float) == D.get_default_dtype() and D.as_dtype(int) is D.int64
    with pytest.raises(TypeError, match="bfloat16"):
        D.as_dtype(D.bfloat16)
    with pytest.raises(TypeError, match="not a supported dtype"):
        D.as_dtype("float99")


def test_set_default_dtype_takes_floats_only():
    before = D.get_default_dtype()
    try:
        D.set_default_dtype(D.float64)
        assert D.get_default_dtype() is D.float64
        with pytest.raises(TypeError, match="floating-point"):
            D.set_default_dtype(D.int64)
        assert D.get_default_dtype() is D.float64
    finally:
        D.set_default_dtype(before)


def test_promotion_equals_torchs_for_every_pair_of_operand_kinds():
    torch = pytest.importorskip("torch")
    kinds = [(n, dim) for n in NAMES for dim in (True, False)] + \
        [("py", v) for v in (True, 2, 2.5)]
    before_pa, before_torch = D.get_default_dtype(), torch.get_default_dtype()
    try:
        for default in ("float32", "float64"):
            torch.set_default_dtype(getattr(torch, default))
            D.set_default_dtype(default)
            for a, b in itertools.product(kinds, repeat=2):
                if a[0] == "py" and b[0] == "py":
                    continue
                (ta, na), (tb, nb) = _operand(torch, a), _operand(torch, b)
                want = str(torch.result_type(ta, tb)).replace("torch.", "")
                want = "complex64" if want == "complex32" else want  # numpy has none
                assert str(D.result_np(na, nb)) == want, (default, a, b)
                if a[0] != "py" and b[0] != "py":
                    assert D.promote_types(a[0], b[0]).name == str(
                        torch.promote_types(ta.dtype, tb.dtype)).replace("torch.", "")
    finally:
        D.set_default_dtype(before_pa)
        torch.set_default_dtype(before_torch)


def _operand(torch, kind):
    name, dim = kind
    if name == "py":
        return dim, dim
    shape = (2,) if dim else ()
    return (torch.ones(shape, dtype=getattr(torch, name)),
            np.ones(shape, dtype=np.bool_ if name == "bool" else name))
