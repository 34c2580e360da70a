"""`pa.testing.assert_close` against `torch.testing.assert_close`: the same verdicts, the
same exception types and (but for how shapes and dtypes print) the same messages."""
from __future__ import annotations

import math

import numpy as np
import pytest

import parallel_autograd as pa

torch = pytest.importorskip("torch")

F32, F64, F16, I64 = np.float32, np.float64, np.float16, np.int64


def T(values, dtype=F32):
    """A leaf of the values in the given dtype, built in both libraries."""
    return ("T", np.asarray(values, dtype=dtype))


def build(x, lib):
    if isinstance(x, tuple) and len(x) == 2 and x[0] == "T":
        return pa.tensor(x[1]) if lib is pa else torch.from_numpy(x[1].copy())
    if isinstance(x, list):
        return [build(v, lib) for v in x]
    if isinstance(x, dict):
        return {k: build(v, lib) for k, v in x.items()}
    return x


CASES = {
    "close_f32": (T([1, 2, 3]), T([1, 2, 3.000001]), {}),
    "far_f32": (T([1, 2, 3]), T([1, 2.1, 3]), {}),
    "far_2d": (T([[1, 2], [3, 4]]), T([[1, 2], [3, 4.5]]), {}),
    "far_f64": (T([1, 2], F64), T([1, 2.5], F64), {}),
    "far_f16": (T([1, 2], F16), T([1, 2.001], F16), {}),
    "far_f16_more": (T([1, 2], F16), T([1, 2.01], F16), {}),
    "ints_equal": (T([1, 2, 3], I64), T([1, 2, 3], I64), {}),
    "ints_differ": (T([1, 2, 3], I64), T([1, 2, 4], I64), {}),
    "ints_third": (T([1, 2, 3], I64), T([1, 2, 4], I64) and T([0, 2, 6], I64), {}),
    "bools": (T([True, False], bool), T([True, True], bool), {}),
    "dtype": (T([1, 2]), T([1, 2], F64), {}),
    "dtype_unchecked": (T([1, 2]), T([1, 2], F64), {"check_dtype": False}),
    "int_vs_float_unchecked": (T([1, 2], I64), T([1, 2.5]), {"check_dtype": False}),
    "shape": (T([1, 2]), T([1, 2, 3]), {}),
    "nan": (T([math.nan]), T([math.nan]), {}),
    "nan_equal": (T([math.nan]), T([math.nan]), {"equal_nan": True}),
    "inf_same": (T([1, math.inf]), T([1, math.inf]), {}),
    "inf_opposite": (T([1, math.inf]), T([1, -math.inf]), {}),
    "zero_expected": (T([5.0]), T([0.0]), {}),
    "tiny": (T([0.0]), T([1e-6]), {}),
    "atol_rtol": (T([1.0]), T([1.1]), {"rtol": 0.0, "atol": 0.2}),
    "only_rtol": (T([1.0]), T([1.1]), {"rtol": 0.2}),
    "only_atol": (T([1.0]), T([1.1]), {"atol": 0.2}),
    "custom_msg": (T([1.0]), T([1.1]), {"msg": "custom"}),
    "scalar_tensor": (T(1.0), T(1.2), {}),
    "empty": (T([]), T([]), {}),
    "floats": (1.0, 1.1, {}),
    "floats_close": (1.0, 1.0 + 1e-9, {}),
    "ints": (1, 2, {}),
    "int_float": (1.0, 1, {}),
    "bool_numbers": (True, False, {}),
    "complex": (1 + 1j, 1 + 1.1j, {}),
    "none": (None, None, {}),
    "tensor_number": (T(1.0), 1.0, {}),
    "strings": ("a", "a", {}),
    "list_item": ([T(1.0), T(2.0)], [T(1.0), T(2.5)], {}),
    "nested_item": ([[T(1.0)], [T(2.0)]], [[T(1.0)], [T(3.0)]], {}),
    "dict_item": ({"a": T(1.0)}, {"a": T(1.5)}, {}),
    "dict_keys": ({"a": 1.0, "b": 2.0}, {"a": 1.0, "c": 2.0}, {}),
    "lengths": ([1.0], [1.0, 2.0], {}),
    "tuple_list": ((1.0, 2.0), [1.0, 2.0], {}),
    "structure_before_values": ([T([1.0]), [1.0]], [T([5.0]), [1.0, 2.0]], {}),
    "type_before_values": ([T([1.0]), "a"], [T([5.0]), "a"], {}),
}


def run(lib, actual, expected, kwargs):
    fn = pa.testing.assert_close if lib is pa else torch.testing.assert_close
    try:
        fn(build(actual, lib), build(expected, lib), **kwargs)
    except Exception as e:  # noqa: BLE001  (compared below)
        return type(e), str(e)
    return None, None


def normalise(msg: str) -> str:
    """torch prints shapes as torch.Size([2]) and dtypes as torch.float32."""
    return msg.replace("torch.Size([", "(").replace("])", ",)").replace("torch.", "")


@pytest.mark.parametrize("name", sorted(CASES))
def test_assert_close_matches_torch(name):
    actual, expected, kwargs = CASES[name]
    kind, msg = run(pa, actual, expected, kwargs)
    tkind, tmsg = run(torch, actual, expected, kwargs)
    assert kind is tkind, (msg, tmsg)
    if "'shape'" in (tmsg or ""):
        assert msg == "The values for attribute 'shape' do not match: (2,) != (3,)."
    elif tmsg is not None and "No comparison pair" not in tmsg:
        assert msg == normalise(tmsg)


def test_callable_msg_gets_the_message_with_the_path():
    with pytest.raises(AssertionError) as e:
        pa.testing.assert_close([pa.tensor([1.0])], [pa.tensor([2.0])], msg=lambda m: "X" + m)
    assert e.value.args[0].startswith("XTensor-likes are not close!")
    assert e.value.args[0].endswith("The failure occurred for item [0]")


def test_ndarrays_and_subclasses():
    pa.testing.assert_close(np.array([1.0, 2.0]), np.array([1.0, 2.0 + 1e-9]))
    with pytest.raises(AssertionError, match="not close"):
        pa.testing.assert_close(np.array([1.0, 2.0]), np.array([1.0, 2.5]))
    with pytest.raises(TypeError, match="No comparison pair"):
        pa.testing.assert_close(pa.tensor([1.0]), np.array([1.0]))
    p = pa.nn.Parameter(np.array([1.0]))
    pa.testing.assert_close(p, pa.tensor([1.0]))
    with pytest.raises(TypeError, match="No comparison pair"):
        pa.testing.assert_close(p, pa.tensor([1.0]), allow_subclasses=False)
    with pytest.raises(AssertionError, match="'stride'"):
        a = np.arange(6.0).reshape(2, 3)
        pa.testing.assert_close(pa.tensor(a.T.copy()), pa.tensor(a).T, check_stride=True)
