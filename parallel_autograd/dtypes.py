"""dtypes with PyTorch's names and rules: the dtype objects (`pa.float32`, `pa.long`, ...),
the default floating dtype (`set_default_dtype`, float32 unless changed) and type promotion
(`promote_types`, `result_type`: PyTorch's categories, with dimensioned tensors over 0-d
tensors over Python numbers).

A `dtype` is a thin object around a numpy dtype: it compares equal to it (and to anything
`np.dtype()` accepts: `np.float32`, `"float32"`), hashes like it, converts to it
(`np.dtype(pa.float32)`, `np.zeros(3, pa.float32)`: numpy reads its `dtype` attribute), and
has torch's attributes (`is_floating_point`, `is_complex`, `is_signed`, `itemsize`). Numpy's
own dtype attributes (`kind`, `char`, `type`) are passed through.

Promotion, as `torch.result_type`: each operand is a dimensioned tensor, a 0-d tensor, or a
Python number (bool -> bool, int -> int64, float -> the default dtype, complex -> its complex
twin). Within each of the three groups dtypes promote by `promote_types` (integer and float:
the float; two floats or two integers: the wider, as numpy's table except that an integer
with a float gives that float). Between groups the dimensioned tensors' dtype wins unless a
lower group holds a higher category (bool < integer < float < complex), which then decides
the category: a float 0-d tensor makes an integer tensor's result that float's dtype, a
Python float the default dtype.

The default dtype is per process (as PyTorch's), read by the factories and by integer-to-float
ops. Thread safety: reads are plain attribute reads; `set_default_dtype` is not synchronised
with ops running on other threads (as PyTorch's).
"""
from __future__ import annotations

import numpy as np

__all__ = ["dtype", "float16", "half", "float32", "float", "float64", "double", "bfloat16",
           "complex64", "cfloat", "complex128", "cdouble", "uint8", "int8", "int16", "short",
           "int32", "int", "int64", "long", "bool", "uint16", "uint32", "uint64",
           "get_default_dtype", "set_default_dtype", "promote_types", "result_type",
           "can_cast", "finfo", "iinfo", "as_dtype", "to_numpy"]

_builtin_bool, _builtin_int, _builtin_float = bool, int, float


class dtype:
    """A data type (PyTorch's `torch.dtype`), around a numpy dtype. See the module docstring."""

    __slots__ = ("_np", "_name")

    def __init__(self, np_dtype, name: str):
        self._np = np.dtype(np_dtype)
        self._name = name

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype (what numpy reads when given this object as a dtype)."""
        return self._np

    @property
    def is_floating_point(self) -> _builtin_bool:
        return self._np.kind == "f"

    @property
    def is_complex(self) -> _builtin_bool:
        return self._np.kind == "c"

    @property
    def is_signed(self) -> _builtin_bool:
        return self._np.kind in "ifc"

    @property
    def itemsize(self) -> _builtin_int:
        return self._np.itemsize

    def to_real(self) -> "dtype":
        return _BY_NUMPY[np.dtype(self._np.char.lower().replace("g", "d"))] \
            if self.is_complex else self

    def __getattr__(self, name):  # numpy's: kind, char, type, str, name ...
        return getattr(self._np, name)

    def __eq__(self, other) -> _builtin_bool:
        if isinstance(other, dtype):
            return self._np == other._np
        if other is None:
            return False
        try:
            return self._np == np.dtype(other)
        except TypeError:
            return NotImplemented

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> _builtin_int:
        return hash(self._np)

    def __repr__(self) -> str:
        return f"parallel_autograd.{self._name}"

    def __reduce__(self):
        return as_dtype, (self._np.str,)


float16 = half = dtype(np.float16, "float16")
float32 = float = dtype(np.float32, "float32")
float64 = double = dtype(np.float64, "float64")
complex64 = cfloat = dtype(np.complex64, "complex64")
complex128 = cdouble = dtype(np.complex128, "complex128")
uint8 = dtype(np.uint8, "uint8")
uint16 = dtype(np.uint16, "uint16")
uint32 = dtype(np.uint32, "uint32")
uint64 = dtype(np.uint64, "uint64")
int8 = dtype(np.int8, "int8")
int16 = short = dtype(np.int16, "int16")
int32 = int = dtype(np.int32, "int32")
int64 = long = dtype(np.int64, "int64")
bool = dtype(np.bool_, "bool")  # noqa: A001  (PyTorch's name)


class _BFloat16Unavailable:
    """numpy has no bfloat16: the name exists (code tests for it) but cannot be used."""

    def __repr__(self):
        return "parallel_autograd.bfloat16 (unsupported: numpy has no bfloat16)"

    def __eq__(self, other):
        return other is self

    __hash__ = object.__hash__


bfloat16 = _BFloat16Unavailable()

_ALL = (float16, float32, float64, complex64, complex128, uint8, uint16, uint32, uint64, int8,
        int16, int32, int64, bool)
_BY_NUMPY = {d._np: d for d in _ALL}
# float32, as PyTorch's (set_default_dtype(float64) for gradient checks)
_DEFAULT = [float32]


def as_dtype(d) -> dtype:
    """`d` (a pa dtype, a numpy dtype or type, a dtype name, Python's float/int/bool) as a
    pa dtype; TypeError for anything else (bfloat16: unsupported)."""
    if isinstance(d, dtype):
        return d
    if d is bfloat16:
        raise TypeError("bfloat16 is not supported (numpy has no bfloat16)")
    if d is _builtin_float:
        return _DEFAULT[0]
    if d is _builtin_int:
        return int64
    if d is _builtin_bool:
        return bool
    try:
        return _BY_NUMPY[np.dtype(d)]
    except (TypeError, KeyError):
        raise TypeError(f"not a supported dtype: {d!r}") from None


def to_numpy(d) -> np.dtype:
    """`d` as a numpy dtype (None stays None)."""
    return None if d is None else as_dtype(d)._np


def get_default_dtype() -> dtype:
    """The default floating dtype: of factories given float values, and of integer inputs
    to ops that give floats (float32 unless `set_default_dtype` changed it)."""
    return _DEFAULT[0]


def set_default_dtype(d) -> None:
    """Set the default floating dtype (float16, float32 or float64), as PyTorch's."""
    d = as_dtype(d)
    if d._np.kind != "f":
        raise TypeError(f"only floating-point types are supported as the default type, "
                        f"got {d!r}")
    _DEFAULT[0] = d


# ---- promotion ---------------------------------------------------------------------------
def _category(k: str) -> _builtin_int:
    return {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}[k]


def _promote(a: np.dtype, b: np.dtype) -> np.dtype:
    if a == b:
        return a
    ka, kb = a.kind, b.kind
    if ka == "b":
        return b
    if kb == "b":
        return a
    if (ka in "iu") != (kb in "iu"):  # an integer with a float or complex: that one
        return b if ka in "iu" else a
    return np.promote_types(a, b)


def promote_types(type1, type2) -> dtype:
    """PyTorch's `promote_types`: the smallest dtype both convert to without leaving their
    category (an integer and a float give the float)."""
    return _BY_NUMPY[_promote(to_numpy(type1), to_numpy(type2))]


def _scalar_dtype(x) -> np.dtype:
    if isinstance(x, _builtin_bool):
        return np.dtype(np.bool_)
    if isinstance(x, _builtin_int):
        return np.dtype(np.int64)
    if isinstance(x, complex):
        return np.dtype(np.complex64 if _DEFAULT[0]._np == np.float32 else np.complex128)
    return _DEFAULT[0]._np


def _combine(higher, lower):
    """torch's combine_categories: the higher group's dtype unless the lower group's
    category is higher."""
    if higher is None:
        return lower
    if lower is None:
        return higher
    kh, kl = higher.kind, lower.kind
    if kh == "c":
        return higher
    if kl == "c":  # the complex twin of a float (numpy has no complex32: float16 -> 64)
        return np.dtype(np.complex128 if higher == np.float64 else np.complex64) \
            if kh == "f" else lower
    if kh == "f":
        return higher
    if kh == "b" or kl == "f":
        return _promote(higher, lower)
    return higher


def result_np(*operands) -> np.dtype:
    """`result_type` as a numpy dtype, for arrays (0-d arrays count as 0-d tensors) and
    Python numbers (numpy scalars count as Python numbers of their kind, as PyTorch treats
    them)."""
    dim = zero = wrapped = None
    for x in operands:
        d = x if isinstance(x, (np.ndarray, np.generic, _builtin_int, _builtin_float,
                                complex)) else x._data  # a Tensor
        if isinstance(d, np.ndarray):
            if d.ndim:
                dim = d.dtype if dim is None else _promote(dim, d.dtype)
            else:
                zero = d.dtype if zero is None else _promote(zero, d.dtype)
        else:
            s = _scalar_dtype(d.item() if isinstance(d, np.generic) else d)
            wrapped = s if wrapped is None else _promote(wrapped, s)
    return _combine(dim, _combine(zero, wrapped))


def result_type(tensor1, tensor2) -> dtype:
    """PyTorch's `result_type`: the dtype an arithmetic op on the two operands gives."""
    return _BY_NUMPY[result_np(tensor1, tensor2)]


# ---- casting and limits (torch.can_cast, torch.finfo, torch.iinfo) -------------------------------
def can_cast(from_, to) -> _builtin_bool:
    """PyTorch's `can_cast`: whether the casting rules of in-place ops allow `from_` into
    `to`: yes unless it would lower the category (bool < integer < float < complex);
    within a category any width and signedness is allowed."""
    a, b = as_dtype(from_)._np, as_dtype(to)._np
    return _category(a.kind) <= _category(b.kind)


class finfo:
    """PyTorch's `finfo(type=None)`: the limits of a floating dtype (default: the default
    dtype; a complex dtype gives its real part's): `bits eps max min tiny smallest_normal
    resolution` (Python floats) and `dtype` (its name)."""

    def __init__(self, type=None) -> None:  # noqa: A002  (PyTorch's name)
        d = get_default_dtype() if type is None else as_dtype(type)
        if d._np.kind not in "fc":
            raise TypeError(f"torch.finfo() requires a floating point input type. Use "
                            f"torch.iinfo to handle {d!r}")
        info = np.finfo(d._np)
        self.bits = _builtin_int(info.bits)
        self.eps = _builtin_float(info.eps)
        self.max = _builtin_float(info.max)
        self.min = _builtin_float(info.min)
        self.tiny = self.smallest_normal = _builtin_float(info.smallest_normal)
        self.resolution = 10.0 ** -_builtin_int(info.precision)  # exact, as torch's
        self.dtype = info.dtype.name

    def __repr__(self) -> str:
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, "
                f"eps={self.eps:g}, smallest_normal={self.smallest_normal:g}, "
                f"tiny={self.tiny:g}, dtype={self.dtype})")


class iinfo:
    """PyTorch's `iinfo(type)`: the limits of an integer dtype: `bits max min` (ints) and
    `dtype` (its name). TypeError for bool and non-integer dtypes."""

    def __init__(self, type) -> None:  # noqa: A002  (PyTorch's name)
        d = as_dtype(type)
        if d._np.kind == "b":
            raise TypeError(f"{d!r} is not supported by torch.iinfo")
        if d._np.kind not in "iu":
            raise TypeError(f"torch.iinfo() requires an integer input type. Use torch.finfo "
                            f"to handle {d!r}")
        info = np.iinfo(d._np)
        self.bits, self.max, self.min = (_builtin_int(v) for v in (info.bits, info.max,
                                                                   info.min))
        self.dtype = d._np.name

    def __repr__(self) -> str:
        return f"iinfo(min={self.min:g}, max={self.max:g}, dtype={self.dtype})"


# ---- the op layer's promotion (`defop(promote=..., int_to_float=...)`) ---------------------
_SCALAR_CATEGORY = {_builtin_bool: 0, _builtin_int: 1, _builtin_float: 2, complex: 3}
_KIND_CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}


_ndarray = np.ndarray
_INT64 = np.dtype(np.int64)


def promote_operands(values: list, where: tuple, to_float: _builtin_bool = False,
                     into: _builtin_int | None = None) -> list:
    """`values` (an op's arguments as arrays, numbers or None) with those at the positions
    `where` brought to their common dtype, PyTorch's `result_type` (with `to_float`: an
    integer or bool result is the default dtype instead, as for sqrt or true division).
    Arrays of another dtype are cast (a new array each; the others are passed as they
    are), numbers become numpy scalars of that dtype (so numpy does not upcast: 2.5 with
    float32 stays float32). Returns `values` itself when nothing changes.

    The common case costs one pass over `where` (~0.3 us): every array of one dtype and
    every number of a category not above it (float32 tensors and a Python float). Values
    of any other type (a list, a string) leave everything as it is: the op reports them.

    `into`: the position of an in-place op's destination (`x.add_(y)`): it is not cast,
    and a common dtype of a higher category than its own is PyTorch's RuntimeError
    ("result type Float can't be cast to the desired output type Long").
    Thread safety: reads the default dtype, writes nothing shared."""
    if len(where) == 2:  # binary ops: two arrays of one dtype, or an array and a number
        a, b = values[where[0]], values[where[1]]
        if type(a) is _ndarray and not (to_float and a.dtype.kind in "biu"):
            t = type(b)
            if t is _ndarray:
                if a.dtype is b.dtype:  # (numpy's builtin dtypes are singletons)
                    return values
            elif t is _builtin_float:
                if a.dtype.kind in "fc":
                    return values
            elif t is _builtin_int and (a.dtype.kind in "fc" or a.dtype is _INT64):
                return values  # (narrower integers: the number wraps around, below)
    elif len(where) == 1:  # unary ops (int_to_float): a floating array
        a = values[where[0]]
        if type(a) is _ndarray and a.dtype.kind in "fc":
            return values
    return _promote_operands(values, where, to_float, into)


def promoter(where: tuple, to_float: _builtin_bool = False):
    """`values -> promote_operands(values, where, to_float)`, specialised for `where`: the
    fast paths of unary and binary ops cost no further call (the op layer's
    `defop(promote=)`; ~10 bytecodes when the dtypes already agree)."""
    if len(where) == 1:
        (i,) = where

        def promote1(values: list) -> list:
            a = values[i]
            if type(a) is _ndarray and (a.dtype.kind in "fc" or not to_float):
                return values
            return _promote_operands(values, where, to_float)
        return promote1
    if len(where) != 2:
        return lambda values: promote_operands(values, where, to_float)
    i, j = where

    def promote2(values: list) -> list:
        a = values[i]
        b = values[j]
        if type(a) is _ndarray:
            if type(b) is _ndarray:
                if a.dtype is b.dtype and (not to_float or a.dtype.kind in "fc"):
                    return values  # (numpy's builtin dtypes are singletons)
            elif type(b) is _builtin_float:
                if a.dtype.kind in "fc":
                    return values
            elif type(b) is _builtin_int and (a.dtype is _INT64 and not to_float or
                                              a.dtype.kind in "fc"):
                return values  # (narrower integers: the number wraps around, below)
        return _promote_operands(values, where, to_float)
    promote2.pair = (i, j, to_float)  # (dtype_checker folds its check into the fast path)
    return promote2


_TORCH_NAMES = {"float16": "Half", "float32": "Float", "float64": "Double", "bool": "Bool",
                "uint8": "Byte", "int8": "Char", "int16": "Short", "int32": "Int",
                "int64": "Long", "uint16": "UInt16", "uint32": "UInt32", "uint64": "UInt64",
                "complex64": "ComplexFloat", "complex128": "ComplexDouble"}


# The dtypes the op layer's generated functions test for before skipping the promotion
# step (`primitive._dtype_test`): PyTorch's, numpy's builtin singletons; others take the step.
FAST = frozenset(np.dtype(n) for n in _TORCH_NAMES)


def scalar_type_name(d) -> str:
    """PyTorch's name of a dtype in its messages (`Float`, `Double`, `Long` ...)."""
    n = np.dtype(d).name
    return _TORCH_NAMES.get(n, n)


def same_dtype_checker(name: str, where: tuple):
    """`values -> values`, raising PyTorch's RuntimeError ("expected scalar type Float but
    found Double") unless the arrays at the positions `where` have one dtype: the ops
    PyTorch does not promote (convolutions), `defop(promote="same")`."""
    def check(values: list) -> list:
        d = None
        for i in where:
            v = values[i]
            if type(v) is _ndarray:
                if d is None:
                    d = v.dtype
                elif v.dtype != d:
                    raise RuntimeError(f"{name}: expected scalar type {scalar_type_name(d)} "
                                       f"but found {scalar_type_name(v.dtype)} (the "
                                       f"inputs must have one dtype)")
        return values
    return check


# ---- the op layer's dtype support (`defop(dtypes=...)`, `composite(dtypes=...)`) ------------
class DtypeNotImplementedError(NotImplementedError, TypeError):
    """An op called on a dtype it has no kernel for: PyTorch's NotImplementedError (a
    RuntimeError: `"abs_cpu" not implemented for 'Bool'`), and also a TypeError, what
    this library raised before for most of these refusals (numpy's own, or an op's check);
    code catching either still works."""


_FLOATING = ("float16", "float32", "float64")
_COMPLEX = ("complex64", "complex128")
_INTEGER = ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64")
# The named sets a declaration may use (with dtype names): PyTorch's CPU kernels' support.
SUPPORT_SETS = {
    "floating": _FLOATING,                                # gelu, softplus, the norms, losses
    "inexact": _FLOATING + _COMPLEX,                      # silu, logaddexp, rms_norm
    "real": _FLOATING + _INTEGER,                         # floor, argmax, topk, max_pool2d
    "numeric": _FLOATING + _COMPLEX + _INTEGER,           # abs, matmul, conv: no bool
}


def supported(spec) -> frozenset:
    """The numpy dtypes a declaration's `dtypes=` names: a set's name (`SUPPORT_SETS`), a
    dtype name, or a tuple of them (their union)."""
    names = (spec,) if isinstance(spec, str) else tuple(spec)
    out = set()
    for n in names:
        if n in SUPPORT_SETS:
            out.update(np.dtype(d) for d in SUPPORT_SETS[n])
        elif n in _TORCH_NAMES:
            out.add(np.dtype(n))
        else:
            raise ValueError(f"dtypes: unknown dtype or set {n!r} (one of "
                             f"{sorted(SUPPORT_SETS)} or a dtype name)")
    return frozenset(out)


def not_implemented(name: str, d) -> DtypeNotImplementedError:
    """PyTorch's refusal of a dtype: `"gelu" not implemented for 'Long'`."""
    return DtypeNotImplementedError(f'"{name}" not implemented for '
                                    f"'{scalar_type_name(d)}'")


def dtype_checker(name: str, where: _builtin_int, allowed: frozenset, then=None):
    """`values -> values` for the op layer: `then` (the op's promotion, if any) first, then
    the array at position `where` (the op's first input, promoted) must have a dtype in
    `allowed`, else `DtypeNotImplementedError`. One set lookup (~50 ns) on the op's path;
    a number or None there is not checked (the op reports it). Thread safe: reads only."""
    def check(values: list) -> list:
        a = values[where]
        if type(a) is _ndarray and a.dtype not in allowed:
            raise not_implemented(name, a.dtype)
        return values
    if then is None:
        return check
    pair = getattr(then, "pair", None)
    if pair is not None and pair[0] == where:  # a binary promotion: one call, not two
        i, j, to_float = pair

        def promote2_check(values: list) -> list:
            a = values[i]
            b = values[j]
            if type(a) is _ndarray and type(b) is _ndarray and a.dtype is b.dtype \
                    and a.dtype in allowed and (not to_float or a.dtype.kind in "fc"):
                return values  # (promote2's fast path: nothing to promote)
            return check(then(values))
        return promote2_check

    def promote_check(values: list) -> list:
        return check(then(values))
    return promote_check


def _promote_operands(values: list, where: tuple, to_float: _builtin_bool,
                      into: _builtin_int | None = None) -> list:
    """`promote_operands` past its fast paths."""
    d = None
    top = -1  # the highest category of the numbers
    mixed = False
    for i in where:
        v = values[i]
        if type(v) is np.ndarray:
            if d is None:
                d = v.dtype
            elif v.dtype != d:
                mixed = True
        elif v is not None:
            c = _SCALAR_CATEGORY.get(type(v))
            if c is None:
                if not isinstance(v, (np.generic, _builtin_int, _builtin_float, complex)):
                    return values
                c = _KIND_CATEGORY[np.asarray(v).dtype.kind]
                mixed = mixed or isinstance(v, np.generic)  # numpy's scalars are strong:
            top = c if c > top else top                     # made the result's dtype
    if d is None:
        return values  # numbers only (the op's own business)
    if not mixed and top <= _KIND_CATEGORY[d.kind] and not (to_float and d.kind in "biu") \
            and (top < 1 or d.kind in "fc" or d == _INT64):
        return values
    r = result_np(*(values[i] for i in where if values[i] is not None))
    if to_float and r.kind in "biu":
        r = _DEFAULT[0]._np
    if into is not None:
        d = values[into].dtype
        if _KIND_CATEGORY[r.kind] > _KIND_CATEGORY[d.kind]:
            raise RuntimeError(f"result type {scalar_type_name(r)} can't be cast to the "
                               f"desired output type {scalar_type_name(d)}")
    out = list(values)
    for i in where:
        v = values[i]
        if i == into:
            continue
        if type(v) is np.ndarray:
            if v.dtype != r:
                out[i] = v.astype(r)
        elif v is not None:
            out[i] = _as_scalar(v, r)
    return out


def _as_scalar(v, r: np.dtype):
    """The number `v` as a numpy scalar of dtype `r`: a float too large for it becomes inf
    and integers wrap around, silently, as PyTorch's conversions of Python numbers."""
    with np.errstate(over="ignore"):
        try:
            return r.type(v)
        except OverflowError:
            return np.asarray(v).astype(r)[()]
