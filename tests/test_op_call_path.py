"""The two call paths of a declared op give the same tensor and the same node.

A declared op's public function is generated with its body specialised at declaration
(`primitive._fast_body`: inputs unwrapped by name, the dtype step skipped when the inputs
already share an accepted dtype, the lean plan written out, `_record_one`/`_record_op`);
`OpDef.__call__` is the general path it replaces (and the one the other ops take). For
every declared op with samples (tests/op_samples.py), with every input requiring grad,
with only the first one, and in float32: the same values and dtype, and a node with the
same rules, params, next nodes, input metadata, saved values (None where the other has
None, arrays of the same shape, dtype and values) and version counters (the inputs'
own, in the same places). Also the dtype step: an op whose inputs' dtypes differ, or that
refuses a dtype, does so on both paths with the same exception.
"""
from __future__ import annotations

import inspect
import zlib

import numpy as np
import pytest
from op_samples import SAMPLES

import parallel_autograd as pa
from parallel_autograd.primitive import REGISTRY
from parallel_autograd.tensor import Tensor

pytestmark = pytest.mark.walk
OPS = [op for op in REGISTRY if not op.composite and
       (f"{op.module}.{op.name}" in SAMPLES or op.name in SAMPLES)]


def _sample(op):
    key = f"{op.module}.{op.name}"
    make = SAMPLES[key if key in SAMPLES else op.name]
    return make(np.random.default_rng(zlib.crc32(op.name.encode())))[0]


def _args(op, sample, dtype, grad_first_only: bool) -> list:
    args = sample.prep(list(sample.args)) if sample.prep is not None else list(sample.args)
    n = 1 if op.variadic else len(op.inputs)
    out = []
    for i, a in enumerate(args):
        if isinstance(a, np.ndarray):
            floating = a.dtype.kind == "f"
            a = a.astype(dtype) if floating else a
            grad = floating and i < n and (i == 0 or not grad_first_only)
            a = pa.tensor(a, requires_grad=grad)
        out.append(a)
    return out


def _general(op, args: list, kwargs: dict):
    """The op through `OpDef.__call__`: the generated function's argument handling done
    here (`inspect` binding, Tensor parameters unwrapped, the sequence as a tuple)."""
    bound = inspect.signature(op.fn).bind(*args, **kwargs)
    bound.apply_defaults()
    values = dict(bound.arguments)
    for n in op.tensor_params:
        if isinstance(values[n], Tensor):
            values[n] = values[n]._data
    inputs = tuple(values[op.inputs[0]]) if op.variadic else tuple(values[n] for n in op.inputs)
    params = {n: values[n] for n in op.params} or None
    return op(inputs, params)


def _same_array(a, b) -> bool:
    """Saved values alike: arrays equal in shape, dtype and values; tuples item by item;
    numbers equal; other objects (an index plan made on each call) of one type."""
    if type(a) is not type(b):
        return False
    if type(a) is np.ndarray:
        return a.shape == b.shape and a.dtype == b.dtype and \
            np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same_array(x, y) for x, y in zip(a, b))
    if a is None or isinstance(a, (int, float, complex, str, np.generic)):
        return a == b or a != a and b != b
    return True


def _check_same(x: Tensor, y: Tensor, inputs: list) -> None:
    assert x.dtype == y.dtype and np.array_equal(x._data, y._data, equal_nan=True)
    assert x._requires_grad == y._requires_grad
    assert (getattr(x, "_base", None) is None) == (getattr(y, "_base", None) is None)
    f, g = x.grad_fn, y.grad_fn
    if f is None or g is None:
        assert f is g
        return
    assert (f.name, f.vjps, f.joint, f.next_nodes, f.input_meta, f.threaded, f.op) == \
        (g.name, g.vjps, g.joint, g.next_nodes, g.input_meta, g.threaded, g.op)
    assert (f.kwargs is None) == (g.kwargs is None)
    assert len(f.saved) == len(g.saved)
    assert all(_same_array(a, b) for a, b in zip(f.saved, g.saved))
    assert (f.versions is None) == (g.versions is None)
    if f.versions is not None:  # an input's counter in the same places; the output's own
        own = [[v is t._vc for t in inputs if isinstance(t, Tensor)] for v in f.versions]
        assert own == [[v is t._vc for t in inputs if isinstance(t, Tensor)]
                       for v in g.versions]


def _results(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("grad_first_only", [False, True])
@pytest.mark.parametrize("op", OPS, ids=[f"{op.module}.{op.name}" for op in OPS])
def test_the_generated_function_records_what_the_general_path_does(op, grad_first_only, dtype):
    sample = _sample(op)
    args = _args(op, sample, dtype, grad_first_only)
    pa.manual_seed(0)  # (random ops: the same draws on both paths)
    try:
        fast = op.fn(*args, **sample.kwargs)
    except Exception as e:  # noqa: BLE001 - then the general path refuses it the same way
        with pytest.raises(type(e)):
            _general(op, args, sample.kwargs)
        return
    pa.manual_seed(0)
    general = _general(op, args, sample.kwargs)
    flat = list(args[0]) if op.variadic else args
    for x, y in zip(_results(fast), _results(general)):
        _check_same(x, y, flat)


BINARY = [op for op in OPS if op.promote is not None and len(op.inputs) >= 2]


@pytest.mark.parametrize("dtypes", [("float32", "float64"), ("int64", "float32"),
                                    ("int32", "int32"), ("bool", "bool"), ("int64", "int64"),
                                    ("float16", "float16")])
@pytest.mark.parametrize("op", BINARY, ids=[f"{op.module}.{op.name}" for op in BINARY])
def test_the_dtype_step_is_the_same_on_both_paths(op, dtypes):
    """Promotion and refusals (`defop(promote=, int_to_float=, dtypes=)`): the skipped step
    and the general one agree on mixed, integer, bool and half inputs."""
    sample = _sample(op)
    args = list(sample.args)
    k = 0
    for i, a in enumerate(args):
        if isinstance(a, np.ndarray) and a.dtype.kind == "f" and k < 2 and \
                i < len(op.inputs):
            args[i] = pa.tensor(np.abs(a).astype(dtypes[k]) + (dtypes[k] != "bool"))
            k += 1
        elif isinstance(a, np.ndarray):
            args[i] = pa.tensor(a)
    try:
        fast = op.fn(*args, **sample.kwargs)
    except Exception as e:  # noqa: BLE001 - the same refusal on the general path
        with pytest.raises(type(e)) as info:
            _general(op, args, sample.kwargs)
        assert str(info.value) == str(e)
        return
    general = _general(op, args, sample.kwargs)
    for x, y in zip(_results(fast), _results(general)):
        _check_same(x, y, args)
