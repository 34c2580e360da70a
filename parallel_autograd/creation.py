"""Tensor factories with PyTorch's names, signatures, dtypes and errors.

`tensor as_tensor from_numpy`, `zeros ones full empty` and their `*_like`, `eye linspace
logspace arange meshgrid`, and the random ones `rand randn randint randperm` (and
`rand_like randn_like randint_like`, `multinomial`, `normal`).

Common rules (PyTorch's):
- sizes: `zeros(2, 3)` or `zeros((2, 3))` (ints, numpy ints or 0-d int tensors); a negative
  size is a RuntimeError, anything else not an int a TypeError;
- `dtype=None`: floating results take the default dtype (`pa.get_default_dtype()`), integer
  results int64 (`arange` of ints, `randint`, `randperm`, `full` with an int);
  `tensor`/`as_tensor` infer as torch.tensor (Python floats -> default dtype, ints -> int64,
  bools -> bool, numpy arrays and scalars keep theirs). `dtype=` takes a pa dtype, a numpy
  dtype or a name ("float32");
- `device=`: None or the CPU (`pa.device`); another device raises
  `device.DeviceUnavailableError` (PyTorch without CUDA raises the same message);
- `requires_grad=True` on an integer dtype: `GradDtypeError`, a RuntimeError (torch's) and a
  TypeError (what `Tensor.requires_grad` raises here), before anything is allocated;
- `layout`, `pin_memory`, `memory_format`: accepted, no effect (one layout, no pinned
  memory, tensors are C-contiguous);
- random factories draw from `generator=` (a `pa.Generator` or any numpy Generator), else
  the current generator (`pa.manual_seed`'s default one; a checkpoint's replay). `randn`
  keeps its older `rng=`/`seed=` keywords. Values differ from PyTorch's (another bit
  generator); distributions, dtypes and shapes are the same.

Every factory returns a new leaf tensor, except `from_numpy` and `as_tensor`, which share
the array's memory when they can (as torch's).

Thread safety: pure functions of their arguments; draws from a shared generator are
serialised by numpy (which thread gets which numbers depends on scheduling).
"""
from __future__ import annotations

import math
import numbers
import warnings

import numpy as np

from . import dtypes as D
from . import random as _random
from .device import check_device
from .ops import convert as _convert
from .ops import shape as _shape_ops
from .ops.forms import depends_on
from .tensor import GradDtypeError, Tensor

__all__ = ["tensor", "as_tensor", "from_numpy", "zeros", "ones", "full", "empty",
           "zeros_like", "ones_like", "full_like", "empty_like", "eye", "linspace",
           "logspace", "arange", "meshgrid", "rand", "randn", "randint", "randperm",
           "rand_like", "randn_like", "randint_like", "multinomial", "normal", "GradDtypeError"]


# ---- shared checks ------------------------------------------------------------------------------
def _size(size: tuple, op: str) -> tuple:
    """`size` given as `*size` (ints) or one sequence, as a tuple of non-negative ints."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    out = []
    for i, s in enumerate(size):
        if isinstance(s, Tensor) and s.ndim == 0 and s.dtype.kind in "iu":
            s = s.item()
        if isinstance(s, bool) or not isinstance(s, numbers.Integral):
            raise TypeError(f"{op}(): argument 'size' must be a tuple of ints, but found "
                            f"element of type {type(s).__name__} at pos {i}")
        if s < 0:
            raise RuntimeError(f"{op}: Trying to create tensor with negative dimension "
                               f"{int(s)}: {[int(v) for v in size]}")
        out.append(int(s))
    return tuple(out)


def _dtype(dtype, default) -> np.dtype:
    """The numpy dtype for `dtype=` (None: `default`, a numpy dtype or a callable giving
    one: the default dtype is read at call time)."""
    if dtype is None:
        return np.dtype(default() if callable(default) else default)
    return D.to_numpy(dtype)


def _default_float() -> np.dtype:
    return D.to_numpy(D.get_default_dtype())


def _leaf(arr: np.ndarray, requires_grad: bool) -> Tensor:
    t = Tensor._wrap(arr)
    if requires_grad:
        t.requires_grad = True
    return t


def _check_grad(dt: np.dtype, requires_grad: bool) -> None:
    if requires_grad and dt.kind not in "fc":
        raise GradDtypeError(f"Only Tensors of floating point and complex dtype can require "
                             f"gradients (got {dt})")


def _setup(dtype, default, device, requires_grad: bool, op: str) -> np.dtype:
    """The result's numpy dtype after the device and requires_grad checks."""
    check_device(device, op)
    dt = _dtype(dtype, default)
    _check_grad(dt, requires_grad)
    return dt


def _input(x, op: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(x).__name__}")
    return x


# ---- from data ----------------------------------------------------------------------------------
_SEQUENCES = (list, tuple)
_PY_NUMBERS = (bool, int, float, complex)


def _leaves_dtype(data) -> np.dtype | None:
    """torch.tensor's inference over the leaves of nested sequences: the promotion of each
    leaf's type, a Python float counting as the default dtype, a Python int as int64, a bool
    as bool, numpy scalars, arrays and tensors as their own dtype. None when there is no
    leaf (an empty list). The leaves' types are gathered a sequence at a time
    (`set(map(type, ...))`, C speed); only the distinct ones are promoted."""
    py, typed = set(), set()
    stack = [data if isinstance(data, _SEQUENCES) else [data]]
    while stack:
        seq = stack.pop()
        kinds = set(map(type, seq))
        py |= kinds & set(_PY_NUMBERS)
        nested = {k for k in kinds if issubclass(k, _SEQUENCES)}
        if nested:
            stack.extend(x for x in seq if type(x) in nested)
        other = kinds - set(_PY_NUMBERS) - nested
        if other:
            typed |= {_leaf_dtype(x) for x in seq if type(x) in other}
    dts = list(typed)
    dts += [_python_dtype(k) for k in py]
    result = None
    for d in dts:
        result = d if result is None else D.to_numpy(D.promote_types(result, d))
    return result


def _python_dtype(kind: type) -> np.dtype:
    if kind is bool:
        return np.dtype(np.bool_)
    if kind is int:
        return np.dtype(np.int64)
    if kind is complex:
        return np.dtype(np.complex64 if _default_float() == np.float32 else np.complex128)
    return _default_float()


def _leaf_dtype(x) -> np.dtype:
    if isinstance(x, Tensor):
        return x._data.dtype
    if isinstance(x, (np.ndarray, np.generic)):
        return x.dtype
    if isinstance(x, _PY_NUMBERS):   # a subclass of a Python number
        return _python_dtype(next(k for k in (bool, int, float, complex) if isinstance(x, k)))
    raise TypeError(f"tensor(): invalid data type '{type(x).__name__}'")


def _infer(data) -> np.dtype:
    """The dtype torch.tensor gives `data` (see `_leaves_dtype`)."""
    if isinstance(data, Tensor):
        return data._data.dtype
    if isinstance(data, (np.ndarray, np.generic)):
        return data.dtype
    d = _leaves_dtype(data)
    return _default_float() if d is None else d


def array_of(data, dt: np.dtype | None) -> np.ndarray:
    """A new array of `data` (nested sequences, scalars, arrays, tensors) in dtype `dt`
    (None: torch.tensor's inference). numpy's own inference agrees with torch's for bool
    and integer leaves; a float result may not (Python floats count as the default dtype,
    an integer with a float32 gives float32): then the leaves are walked
    (`_leaves_dtype`)."""
    if isinstance(data, (str, bytes)):
        raise TypeError(f"tensor(): invalid data type '{type(data).__name__}'")
    try:
        arr = np.array(data, dtype=dt, copy=True)
    except ValueError as e:   # ragged nesting
        raise ValueError(f"tensor(): the data is not a rectangular nested sequence "
                         f"({e})") from None
    except OverflowError as e:
        raise ValueError(f"tensor(): a value does not fit in {dt} ({e})") from None
    if arr.dtype.kind in "OUSVMm":
        raise TypeError(f"tensor(): invalid data type '{arr.dtype}' (from "
                        f"{type(data).__name__}: only numbers, bools and nested sequences "
                        f"of them; an integer beyond int64 gives this too)")
    if dt is None and not isinstance(data, (np.ndarray, np.generic, Tensor)) \
            and arr.dtype.kind in "fc":
        want = _leaves_dtype(data)
        want = _default_float() if want is None else want
        if want != arr.dtype:
            arr = arr.astype(want)
    return arr


def tensor(data, *, dtype=None, device=None, requires_grad: bool = False,
           pin_memory: bool = False) -> Tensor:
    """A new leaf tensor holding a copy of `data` (PyTorch's `torch.tensor`).

    dtype inference when `dtype` is None: Python floats give the default dtype, ints int64,
    bools bool, a mix the promotion of its elements; numpy arrays, numpy scalars and
    tensors keep their dtype. A Tensor is copied without its history (torch warns and
    recommends `x.clone().detach()`, as here)."""
    if isinstance(data, Tensor):
        warnings.warn("To copy construct from a tensor, it is recommended to use "
                      "sourceTensor.clone().detach() or "
                      "sourceTensor.clone().detach().requires_grad_(True), rather than "
                      "pa.tensor(sourceTensor).", UserWarning, stacklevel=2)
    check_device(device, "tensor")
    dt = None if dtype is None else D.to_numpy(dtype)
    if dt is not None:
        _check_grad(dt, requires_grad)
    arr = array_of(data, dt)
    _check_grad(arr.dtype, requires_grad)
    return _leaf(arr, requires_grad)


def as_tensor(data, dtype=None, device=None) -> Tensor:
    """`data` as a tensor, sharing memory when it can (PyTorch's `torch.as_tensor`): a
    Tensor of the asked dtype is returned itself (another dtype: `data.to(dtype)`, on the
    graph); an ndarray of the asked dtype is wrapped without a copy; anything else is
    converted as `tensor(data, dtype=dtype)` would."""
    check_device(device, "as_tensor")
    if isinstance(data, Tensor):
        return data if dtype is None else _convert.to(data, D.to_numpy(dtype))
    if isinstance(data, np.ndarray) and (dtype is None or D.to_numpy(dtype) == data.dtype) \
            and data.dtype.kind not in "OUSVMm":
        return Tensor._wrap(data)
    return Tensor._wrap(array_of(data, None if dtype is None else D.to_numpy(dtype)))


def from_numpy(ndarray: np.ndarray) -> Tensor:
    """A tensor that shares `ndarray`'s memory (writes show in both), PyTorch's
    `torch.from_numpy`. TypeError for anything that is not an ndarray or of a dtype tensors
    do not hold (object, strings)."""
    if not isinstance(ndarray, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(ndarray).__name__})")
    if ndarray.dtype.kind in "OUSVMm":
        raise TypeError(f"can't convert np.ndarray of type {ndarray.dtype}. The only "
                        f"supported types are: bool, integers, floats and complex")
    return Tensor._wrap(ndarray)


# ---- filled -------------------------------------------------------------------------------------
def zeros(*size, dtype=None, layout=None, device=None, requires_grad: bool = False) -> Tensor:
    """A leaf tensor of zeros of `size` (`zeros(2, 3)` or `zeros((2, 3))`), the default
    dtype unless `dtype`."""
    dt = _setup(dtype, _default_float, device, requires_grad, "zeros")
    return _leaf(np.zeros(_size(size, "zeros"), dt), requires_grad)


def ones(*size, dtype=None, layout=None, device=None, requires_grad: bool = False) -> Tensor:
    """A leaf tensor of ones of `size`, the default dtype unless `dtype`."""
    dt = _setup(dtype, _default_float, device, requires_grad, "ones")
    return _leaf(np.ones(_size(size, "ones"), dt), requires_grad)


def empty(*size, dtype=None, layout=None, device=None, requires_grad: bool = False,
          pin_memory: bool = False, memory_format=None) -> Tensor:
    """An uninitialised leaf tensor of `size` (its values are whatever the memory held),
    the default dtype unless `dtype`."""
    dt = _setup(dtype, _default_float, device, requires_grad, "empty")
    return _leaf(np.empty(_size(size, "empty"), dt), requires_grad)


def _fill_dtype(fill_value) -> np.dtype:
    """`full`'s dtype for a fill value: bool, int64, the default dtype, or a 0-d tensor's."""
    if isinstance(fill_value, Tensor):
        return fill_value._data.dtype
    return _infer(fill_value)


def full(size, fill_value, *, dtype=None, layout=None, device=None,
         requires_grad: bool = False) -> Tensor:
    """A leaf tensor of `size` (a sequence) filled with `fill_value`; the dtype is inferred
    from the value as torch's (bool, int -> int64, float -> default) unless `dtype`."""
    if not isinstance(size, (tuple, list)):
        raise TypeError(f"full(): argument 'size' (position 1) must be tuple of ints, not "
                        f"{type(size).__name__}")
    value = fill_value.item() if isinstance(fill_value, Tensor) else fill_value
    dt = _setup(dtype, _fill_dtype(fill_value), device, requires_grad, "full")
    return _leaf(np.full(_size((size,), "full"), value, dt), requires_grad)


def _like(op: str, input, dtype, device, requires_grad: bool) -> tuple:
    x = _input(input, op)
    dt = _setup(dtype, x._data.dtype, device, requires_grad, op)
    return x._data.shape, dt


def zeros_like(input, *, dtype=None, layout=None, device=None, requires_grad: bool = False,
               memory_format=None) -> Tensor:
    """Zeros of `input`'s shape and (unless `dtype`) dtype."""
    shape, dt = _like("zeros_like", input, dtype, device, requires_grad)
    return _leaf(np.zeros(shape, dt), requires_grad)


def ones_like(input, *, dtype=None, layout=None, device=None, requires_grad: bool = False,
              memory_format=None) -> Tensor:
    """Ones of `input`'s shape and (unless `dtype`) dtype."""
    shape, dt = _like("ones_like", input, dtype, device, requires_grad)
    return _leaf(np.ones(shape, dt), requires_grad)


def empty_like(input, *, dtype=None, layout=None, device=None, requires_grad: bool = False,
               memory_format=None) -> Tensor:
    """An uninitialised tensor of `input`'s shape and (unless `dtype`) dtype."""
    shape, dt = _like("empty_like", input, dtype, device, requires_grad)
    return _leaf(np.empty(shape, dt), requires_grad)


def full_like(input, fill_value, *, dtype=None, layout=None, device=None,
              requires_grad: bool = False, memory_format=None) -> Tensor:
    """`fill_value` in `input`'s shape and (unless `dtype`) dtype (a float filled into an
    integer dtype is truncated, as torch's)."""
    shape, dt = _like("full_like", input, dtype, device, requires_grad)
    value = fill_value.item() if isinstance(fill_value, Tensor) else fill_value
    return _leaf(np.full(shape, value, dt), requires_grad)


def eye(n: int, m: int | None = None, *, dtype=None, layout=None, device=None,
        requires_grad: bool = False) -> Tensor:
    """The n x m (default n x n) identity matrix, the default dtype unless `dtype`."""
    dt = _setup(dtype, _default_float, device, requires_grad, "eye")
    for name, v in (("n", n), ("m", m)):
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"eye(): argument '{name}' must be int, not {type(v).__name__}")
        if v < 0:
            raise RuntimeError(f"{name} must be greater or equal to 0, got {int(v)}")
    return _leaf(np.eye(int(n), None if m is None else int(m), dtype=dt), requires_grad)


# ---- ranges -------------------------------------------------------------------------------------
def _number(v, op: str, name: str):
    """A Python number from a number, a numpy scalar or a 0-d tensor."""
    if isinstance(v, Tensor):
        if v.ndim:
            raise RuntimeError(f"{op}: {name} must be a number or a 0-d tensor, got a tensor "
                               f"of shape {tuple(v.shape)}")
        v = v.item()
    elif isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{op}(): argument '{name}' must be a number, not {type(v).__name__}")
    return v


def arange(start=0, end=None, step=1, *, dtype=None, layout=None, device=None,
           requires_grad: bool = False) -> Tensor:
    """`start, start + step, ...` up to (not including) `end` (`arange(end)`,
    `arange(start, end, step)`), PyTorch's `torch.arange`: int64 when every bound is an
    integer, else the default dtype; the length is `ceil((end - start) / step)` and value
    i is `start + i * step` (computed in float64 for floating results, in int64 for
    integer ones: bounds are truncated to integers first when `dtype` is an integer)."""
    if end is None:
        start, end = 0, start
    start, end, step = (_number(v, "arange", n)
                        for v, n in ((start, "start"), (end, "end"), (step, "step")))
    integral = all(isinstance(v, numbers.Integral) for v in (start, end, step))
    dt = _setup(dtype, np.int64 if integral else _default_float, device, requires_grad,
                "arange")
    if dt.kind == "b":
        raise NotImplementedError('"arange_cpu" not implemented for \'Bool\'')
    if dt.kind in "iu":
        if step != 0 and int(step) == 0:
            raise ValueError("step must be nonzero")
        start, end, step = int(start), int(end), int(step)
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if not all(math.isfinite(v) for v in (start, end)):
        raise RuntimeError(f"unsupported range: {start} -> {end}")
    if (step > 0 and end < start) or (step < 0 and end > start):
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    if dt.kind in "iu":
        arr = np.arange(start, end, step, dtype=np.int64).astype(dt, copy=False)
    else:
        n = math.ceil((end - start) / step)
        arr = (start + np.arange(n, dtype=np.float64) * step).astype(dt, copy=False)
    return _leaf(arr, requires_grad)


def _steps(steps, op: str) -> int:
    if isinstance(steps, bool) or not isinstance(steps, numbers.Integral):
        raise TypeError(f"{op}(): argument 'steps' must be int, not {type(steps).__name__}")
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    return int(steps)


def _symmetric(start: float, end: float, n: int, dt: np.dtype) -> np.ndarray:
    """torch's linspace values: the first half `start + i * step`, the second half
    `end - (n - 1 - i) * step`, in `dt` arithmetic (float64 for integer results)."""
    if n == 0:
        return np.empty(0, dt)
    if n == 1:
        return np.array([start], dt)
    ct = dt if dt.kind in "fc" else np.dtype(np.float64)
    step = (ct.type(end) - ct.type(start)) / ct.type(n - 1)
    i = np.arange(n)
    half = n // 2
    out = np.empty(n, ct)
    out[:half] = ct.type(start) + i[:half].astype(ct) * step
    out[half:] = ct.type(end) - (n - 1 - i[half:]).astype(ct) * step
    return out


def linspace(start, end, steps: int, *, dtype=None, layout=None, device=None,
             requires_grad: bool = False) -> Tensor:
    """`steps` evenly spaced values from `start` to `end` inclusive (PyTorch's formula,
    symmetric about the middle), the default dtype unless `dtype` (an integer dtype
    truncates)."""
    start, end = _number(start, "linspace", "start"), _number(end, "linspace", "end")
    n = _steps(steps, "linspace")
    dt = _setup(dtype, _default_float, device, requires_grad, "linspace")
    with np.errstate(invalid="ignore", over="ignore"):
        arr = _symmetric(start, end, n, dt).astype(dt, copy=False)
    return _leaf(arr, requires_grad)


def logspace(start, end, steps: int, base: float = 10.0, *, dtype=None, layout=None,
             device=None, requires_grad: bool = False) -> Tensor:
    """`base ** linspace(start, end, steps)`, the default dtype unless `dtype`."""
    start, end = _number(start, "logspace", "start"), _number(end, "logspace", "end")
    base = _number(base, "logspace", "base")
    n = _steps(steps, "logspace")
    dt = _setup(dtype, _default_float, device, requires_grad, "logspace")
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        exps = _symmetric(start, end, n, np.dtype(np.float64))
        arr = np.power(np.float64(base), exps).astype(dt, copy=False)
    return _leaf(arr, requires_grad)


def meshgrid(*tensors, indexing: str | None = None) -> tuple:
    """Coordinate grids from 0-d or 1-d tensors (PyTorch's `torch.meshgrid`): output k has
    shape (len(t0), len(t1), ...) ('ij', the default, with torch's warning when not
    given) or with the first two swapped ('xy'), holding tensor k's values along its own
    dimension. Outputs are broadcast views of the inputs (gradients flow back)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if not tensors:
        raise RuntimeError("meshgrid expects a non-empty TensorList")
    if indexing is None:
        warnings.warn("torch.meshgrid: in an upcoming release, it will be required to pass "
                      "the indexing argument.", UserWarning, stacklevel=2)
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f'torch.meshgrid: indexing must be one of "xy" or "ij", but '
                           f'received: {indexing}')
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"meshgrid(): expected Tensors, got {type(t).__name__}")
        if t.ndim > 1:
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list "
                               f"but got a {t.ndim}-D tensor")
    if len({t.dtype for t in tensors}) > 1:
        raise RuntimeError("meshgrid expects all tensors to have the same dtype")
    sizes = [int(t._data.size) for t in tensors]
    swap = indexing == "xy" and len(tensors) >= 2
    if swap:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    out = []
    for k, t in enumerate(tensors):
        axis = (1 - k if k < 2 else k) if swap else k
        view = [1] * len(tensors)
        view[axis] = sizes[axis]
        out.append(_shape_ops.broadcast_to(_shape_ops.reshape(t, tuple(view)), tuple(sizes)))
    return tuple(out)


# ---- random -------------------------------------------------------------------------------------
def _uniform01(rng: np.random.Generator, shape: tuple, dt: np.dtype) -> np.ndarray:
    """Uniform [0, 1) in `dt`: drawn in float32 for float32 (so no value rounds up to 1),
    in float64 else, clamped below 1 after a cast to a narrower type."""
    if dt == np.float32:
        return rng.random(shape, dtype=np.float32)
    out = rng.random(shape).astype(dt, copy=False)
    if dt != np.float64:
        np.minimum(out, np.nextafter(dt.type(1), dt.type(0)), out=out)
    return out


def _float_only(dt: np.dtype, kernel: str) -> None:
    if dt.kind not in "f":
        raise NotImplementedError(f'"{kernel}" not implemented for \'{dt.name}\' '
                                  f'(a floating dtype is needed)')


def rand(*size, generator=None, dtype=None, layout=None, device=None,
         requires_grad: bool = False, pin_memory: bool = False) -> Tensor:
    """Uniform samples in [0, 1) of `size`, the default dtype unless `dtype` (floating)."""
    dt = _setup(dtype, _default_float, device, requires_grad, "rand")
    _float_only(dt, "check_uniform_bounds")
    shape = _size(size, "rand")
    return _leaf(_uniform01(_random.resolve_generator(generator), shape, dt), requires_grad)


def randn(*size, generator=None, dtype=None, layout=None, device=None,
          requires_grad: bool = False, pin_memory: bool = False, rng=None,
          seed=None) -> Tensor:
    """Standard normal samples of `size`, the default dtype unless `dtype` (floating).

    Drawn from `generator` (or `rng`, its older name: a numpy Generator), else from a fresh
    generator seeded with `seed`, else from the current generator (the default one that
    `pa.manual_seed` reseeds; inside a checkpoint's recomputation, the copy that replays
    the forward's draws). Draws are float64, then cast."""
    dt = _setup(dtype, _default_float, device, requires_grad, "randn")
    _float_only(dt, "normal_kernel_cpu")
    shape = _size(size, "randn")
    if generator is not None and rng is not None:
        raise TypeError("randn: give generator= or rng= (the same thing), not both")
    g = generator if generator is not None else rng
    if g is None and seed is not None:
        g = np.random.default_rng(seed)
    g = _random.resolve_generator(g)
    return _leaf(g.standard_normal(shape).astype(dt, copy=False), requires_grad)


def _int_bounds(low: int, high: int, dt: np.dtype) -> None:
    if low >= high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got "
                           f"from={low} >= to={high}")
    if dt.kind in "iub":
        info = np.iinfo(dt) if dt.kind != "b" else None
        lo, hi = (0, 1) if info is None else (info.min, info.max)
        name = dt.name if info is not None else "bool"
        if not lo <= low <= hi:
            raise RuntimeError(f"from is out of bounds for {name}")
        if not lo <= high - 1 <= hi:
            raise RuntimeError(f"to - 1 is out of bounds for {name}")


def randint(low=0, high=None, size=None, *, generator=None, dtype=None, layout=None,
            device=None, requires_grad: bool = False) -> Tensor:
    """Integers uniform in [low, high) of `size` (a tuple): `randint(high, size)` or
    `randint(low, high, size)`; int64 unless `dtype` (a float dtype holds the integers)."""
    if size is None and isinstance(high, (tuple, list)):
        low, high, size = 0, low, high
    elif high is None:
        low, high = 0, low
    if size is None or not isinstance(size, (tuple, list)):
        raise TypeError(f"randint(): argument 'size' must be tuple of ints, not "
                        f"{type(size).__name__}")
    low, high = (int(_number(v, "randint", n)) for v, n in ((low, "low"), (high, "high")))
    dt = _setup(dtype, np.int64, device, requires_grad, "randint")
    _int_bounds(low, high, dt)
    shape = _size((size,), "randint")
    draws = _random.resolve_generator(generator).integers(low, high, shape, dtype=np.int64)
    return _leaf(draws.astype(dt, copy=False), requires_grad)


def randperm(n: int, *, generator=None, dtype=None, layout=None, device=None,
             requires_grad: bool = False, pin_memory: bool = False) -> Tensor:
    """A random permutation of 0 .. n-1, int64 unless `dtype`."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"randperm(): argument 'n' must be int, not {type(n).__name__}")
    if n < 0:
        raise RuntimeError(f"Trying to create tensor with negative dimension {int(n)}: "
                           f"[{int(n)}]")
    dt = _setup(dtype, np.int64, device, requires_grad, "randperm")
    perm = _random.resolve_generator(generator).permutation(int(n))
    return _leaf(perm.astype(dt, copy=False), requires_grad)


def rand_like(input, *, generator=None, dtype=None, layout=None, device=None,
              requires_grad: bool = False, memory_format=None) -> Tensor:
    """`rand` of `input`'s shape and (unless `dtype`) dtype."""
    shape, dt = _like("rand_like", input, dtype, device, requires_grad)
    _float_only(dt, "check_uniform_bounds")
    return _leaf(_uniform01(_random.resolve_generator(generator), shape, dt), requires_grad)


def randn_like(input, *, generator=None, dtype=None, layout=None, device=None,
               requires_grad: bool = False, memory_format=None) -> Tensor:
    """`randn` of `input`'s shape and (unless `dtype`) dtype."""
    shape, dt = _like("randn_like", input, dtype, device, requires_grad)
    _float_only(dt, "normal_kernel_cpu")
    draws = _random.resolve_generator(generator).standard_normal(shape)
    return _leaf(draws.astype(dt, copy=False), requires_grad)


def randint_like(input, low=0, high=None, *, generator=None, dtype=None, layout=None,
                 device=None, requires_grad: bool = False, memory_format=None) -> Tensor:
    """`randint` of `input`'s shape and (unless `dtype`) dtype: `randint_like(x, high)` or
    `randint_like(x, low, high)`."""
    if high is None:
        low, high = 0, low
    shape, dt = _like("randint_like", input, dtype, device, requires_grad)
    low, high = (int(_number(v, "randint_like", n)) for v, n in ((low, "low"), (high, "high")))
    _int_bounds(low, high, dt)
    draws = _random.resolve_generator(generator).integers(low, high, shape, dtype=np.int64)
    return _leaf(draws.astype(dt, copy=False), requires_grad)


def multinomial(input, num_samples: int, replacement: bool = False, *,
                generator=None) -> Tensor:
    """Category indices (int64) drawn from each row of `input` (1-d or 2-d non-negative
    weights, not necessarily normalised), PyTorch's `torch.multinomial`: with
    `replacement` each draw is independent; without it the categories of a row are
    distinct (weighted sampling without replacement, zero-weight categories last)."""
    x = _input(input, "multinomial")._data
    if x.dtype.kind != "f":
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, "
                           f"got: {x.dtype}")
    if x.ndim not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    n = num_samples
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"multinomial(): argument 'num_samples' must be int, not "
                        f"{type(n).__name__}")
    if n <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    w = np.atleast_2d(x).astype(np.float64)
    if not replacement and n > w.shape[1]:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without "
                           "replacement")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    total = w.sum(axis=1, keepdims=True)
    if np.any(total <= 0):
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    rng = _random.resolve_generator(generator)
    if replacement:               # inverse CDF: a zero-weight category is never drawn
        cdf = np.cumsum(w / total, axis=1)
        u = rng.random((w.shape[0], int(n)))
        idx = np.stack([np.searchsorted(c, r, side="right") for c, r in zip(cdf, u)])
        idx = np.minimum(idx, w.shape[1] - 1)
    else:                         # the exponential race: the n largest w / Exp(1)
        keys = w / rng.exponential(size=w.shape)
        idx = np.argsort(-keys, axis=1, kind="stable")[:, :int(n)]
    idx = idx.astype(np.int64)
    return Tensor._wrap(idx if x.ndim == 2 else idx[0])


def normal(mean=0.0, std=1.0, size=None, *, generator=None, dtype=None, layout=None,
           device=None, requires_grad: bool = False, pin_memory: bool = False) -> Tensor:
    """Normal samples, PyTorch's `torch.normal` overloads: `normal(mean, std, size)` with
    numbers (the default dtype unless `dtype`), or with a tensor `mean` and/or `std`
    (broadcast; the result has their dtype and shape). As torch's, the result depends on
    tensor arguments with derivative 0."""
    tensors = [t for t in (mean, std) if isinstance(t, Tensor)]
    check_device(device, "normal")
    if not tensors:
        if size is None:
            raise TypeError("normal(): with a number mean and std, give size (a tuple of "
                            "ints)")
        m, s = _number(mean, "normal", "mean"), _number(std, "normal", "std")
        dt = _setup(dtype, _default_float, device, requires_grad, "normal")
        shape = _size((size,), "normal")
    else:
        if size is not None:
            raise TypeError("normal(): size is only taken with a number mean and std")
        m = mean._data if isinstance(mean, Tensor) else _number(mean, "normal", "mean")
        s = std._data if isinstance(std, Tensor) else _number(std, "normal", "std")
        dt = np.result_type(*[t._data.dtype for t in tensors])
        shape = np.broadcast_shapes(*[t._data.shape for t in tensors])
    _float_only(dt, "normal_kernel_cpu")
    if np.any(np.asarray(s) < 0):
        raise RuntimeError(f"normal expects std >= 0.0, but found std "
                           f"{np.min(np.asarray(s))}")
    z = _random.resolve_generator(generator).standard_normal(shape)
    out = (m + s * z).astype(dt, copy=False)
    if not tensors:
        return _leaf(out, requires_grad)
    grads = [t if t.shape == shape else _shape_ops.broadcast_to(t, shape)
             for t in tensors if t.requires_grad]
    res = depends_on(out, *grads)
    return res if isinstance(res, Tensor) else Tensor._wrap(res)
