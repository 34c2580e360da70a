"""Tensor conversions, factories and introspection with PyTorch's names: `to`, `float()
double() half() long() int() short() char() byte() bool()`, `type`, `type_as`, `tolist`,
`cpu`, `contiguous`, `new_zeros new_ones new_full new_empty new_tensor`, and `dim numel
nelement element_size stride storage_offset data_ptr is_contiguous is_floating_point`.

Semantics are PyTorch's on a CPU-only numpy tensor:
- a conversion that changes nothing returns the tensor itself (`x.to(x.dtype) is x`), as
  PyTorch; `copy=True` gives a copy on the graph (`clone`);
- casts between floating dtypes are differentiable (`ops.forms.cast`: the gradient is cast
  back to the input's dtype); integer and bool results never require grad (PyTorch);
  a complex result of a tensor that requires grad is refused (no rule here conjugates);
- dtypes are numpy's (anything `np.dtype` takes: `np.float32`, `"float32"`, `float`); a
  `torch.dtype` is mapped by its name, so ported code passing `torch.float32` works;
- devices: "cpu", "cpu:0", a `pa.device` or a `torch.device` of type cpu are accepted and
  ignored; another device (`to("cuda")`, `cuda()`) raises `device.DeviceUnavailableError`
  (a RuntimeError and AssertionError, as torch without CUDA);
- `type()` returns PyTorch's legacy type names ('torch.FloatTensor', 'torch.LongTensor',
  ...) so code comparing them keeps working; `type(name)` takes them back;
- `stride()` counts elements (numpy's byte strides divided by the item size; a flipped
  view has negative strides, which PyTorch never shows); `storage_offset()` is the
  element offset into the array that owns the memory.

Thread safety: pure functions of their arguments; `data_ptr` and `storage_offset` read
the array's address only.
"""
from __future__ import annotations

import numpy as np

from ..device import check_device
from ..grad_mode import is_grad_enabled
from ..tensor import Tensor
from . import shape as S
from .forms import cast
from .index import old_dim as _dim
from .index import sizes as _sizes

__all__ = ["to", "type_", "type_as", "tolist", "cpu", "cuda", "contiguous", "new_zeros", "new_ones",
           "new_full", "new_empty", "new_tensor", "METHODS"]

# PyTorch's legacy tensor type names (`x.type()`), by dtype
_TYPE_NAMES = {np.dtype(d): f"torch.{n}Tensor" for d, n in (
    (np.float32, "Float"), (np.float64, "Double"), (np.float16, "Half"), (np.int64, "Long"),
    (np.int32, "Int"), (np.int16, "Short"), (np.int8, "Char"), (np.uint8, "Byte"),
    (np.bool_, "Bool"), (np.complex64, "ComplexFloat"), (np.complex128, "ComplexDouble"))}
_BY_TYPE_NAME = {name: dtype for dtype, name in _TYPE_NAMES.items()}
_DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu", "meta", "hip", "xla", "hpu", "ipu", "mtia",
                 "vulkan", "privateuseone")


def _dtype(d, op: str) -> np.dtype:
    """A numpy dtype from anything `np.dtype` takes, or a torch.dtype (by its name)."""
    if type(d).__module__ == "torch":        # torch.float32 -> "float32"
        d = str(d).rsplit(".", 1)[-1]
    if d is None:
        raise TypeError(f"{op}: expected a dtype, got None")
    try:
        return np.dtype(d)
    except TypeError:
        raise TypeError(f"{op}: {d!r} is not a dtype numpy knows") from None


def _is_device(d) -> bool:
    if isinstance(d, str):
        return d.split(":")[0] in _DEVICE_TYPES
    return type(d).__name__ == "device"      # torch.device


def _check_device(device, op: str) -> None:
    check_device(device, op)  # DeviceUnavailableError (RuntimeError) unless the CPU


def cuda(self: Tensor, device=None, non_blocking: bool = False, memory_format=None) -> Tensor:
    """PyTorch's `Tensor.cuda`: there is no CUDA here, so it raises
    `DeviceUnavailableError` (a RuntimeError and an AssertionError, as torch's
    "Torch not compiled with CUDA enabled")."""
    check_device("cuda", "cuda")
    return self


def _convert(x: Tensor, dtype, copy: bool, op: str) -> Tensor:
    """`x` as `dtype` (None: its own): itself when nothing changes and no copy is asked."""
    if dtype is None or dtype == x.dtype:
        return S.clone(x) if copy else x
    if dtype.kind == "f" and x.dtype.kind == "f":
        return cast(x, dtype=dtype)          # recorded when x requires grad
    if dtype.kind == "c" and x.requires_grad and is_grad_enabled():
        raise TypeError(f"{op}: cannot convert a tensor that requires grad to {dtype}: "
                        f"complex tensors cannot require gradients here; detach() first")
    return Tensor._wrap(x._data.astype(dtype))  # integer and bool results: no gradient


# ---- to, the named casts, type, type_as ---------------------------------------------------
def to(self: Tensor, *args, dtype=None, device=None, non_blocking: bool = False,
       copy: bool = False) -> Tensor:
    """PyTorch's `Tensor.to`: `to(dtype)`, `to(device)`, `to(device, dtype)` or
    `to(other)` (other's dtype); the tensor itself when nothing changes (unless
    `copy=True`). Only the CPU is a device here; `non_blocking` is ignored."""
    if len(args) > 2:
        raise TypeError(f"to: expected at most 2 positional arguments, got {len(args)}")
    for a in args:
        if isinstance(a, Tensor):
            a = a.dtype
        elif _is_device(a):
            device = a
            continue
        if dtype is not None:
            raise TypeError("to: dtype given twice")
        dtype = a
    _check_device(device, "to")
    return _convert(self, None if dtype is None else _dtype(dtype, "to"), bool(copy), "to")


def _named_cast(name: str, dtype):
    dt = np.dtype(dtype)

    def method(self: Tensor) -> Tensor:
        return _convert(self, dt, False, name)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"`self.to({dt.name})` (PyTorch's `Tensor.{name}()`)."
    return method


def type_(self: Tensor, dtype=None, non_blocking: bool = False) -> str | Tensor:
    """PyTorch's `Tensor.type`: without an argument, the legacy type name
    ('torch.FloatTensor' for float32, 'torch.DoubleTensor', 'torch.LongTensor', ...; a
    dtype PyTorch lacks gives 'numpy.<name>'); with a dtype or such a name, the tensor
    converted (itself if already of that type)."""
    if dtype is None:
        return _TYPE_NAMES.get(self.dtype, f"numpy.{self.dtype.name}")
    if isinstance(dtype, str) and dtype in _BY_TYPE_NAME:
        return _convert(self, _BY_TYPE_NAME[dtype], False, "type")
    return _convert(self, _dtype(dtype, "type"), False, "type")


def type_as(self: Tensor, other) -> Tensor:
    """`self` converted to `other`'s dtype (itself if already of it)."""
    dtype = other.dtype if isinstance(other, Tensor) else np.asarray(other).dtype
    return _convert(self, dtype, False, "type_as")


# ---- host-side and layout ------------------------------------------------------------------
def tolist(self: Tensor) -> list | float | int | bool:
    """The values as (nested) Python lists of Python numbers; a 0-d tensor gives a number."""
    return self._data.tolist()


def cpu(self: Tensor) -> Tensor:
    """The tensor itself (it already is on the CPU)."""
    return self


def contiguous(self: Tensor) -> Tensor:
    """The tensor itself if its memory is C-contiguous, else a contiguous copy that stays
    on the graph (`clone`)."""
    return self if self._data.flags.c_contiguous else S.clone(self)


def stride(self: Tensor, dim=None):
    """The strides in elements (a tuple), or the stride of `dim` (an int)."""
    x = self._data
    strides = tuple(s // x.itemsize for s in x.strides) if x.itemsize else (0,) * x.ndim
    if dim is None:
        return strides
    if x.ndim == 0:
        raise IndexError("stride: a 0-dim tensor has no dimensions")
    return strides[_dim(dim, x.ndim, "stride")]


def storage_offset(self: Tensor) -> int:
    """The offset, in elements, of the first element in the memory the array views."""
    x = self._data
    root = x
    while isinstance(root.base, np.ndarray):
        root = root.base
    if root is x or not x.itemsize:
        return 0
    return max((x.ctypes.data - root.ctypes.data) // x.itemsize, 0)


_INFO = {
    "dim": (lambda self: self._data.ndim, "The number of dimensions."),
    "ndimension": (lambda self: self._data.ndim, "The number of dimensions (`dim()`)."),
    "numel": (lambda self: self._data.size, "The number of elements."),
    "nelement": (lambda self: self._data.size, "The number of elements (`numel()`)."),
    "element_size": (lambda self: self._data.itemsize, "The size of one element in bytes."),
    "data_ptr": (lambda self: self._data.ctypes.data, "The address of the first element."),
    "is_contiguous": (lambda self: bool(self._data.flags.c_contiguous),
                      "True when the memory is C-contiguous (row-major, no gaps)."),
    "is_floating_point": (lambda self: self._data.dtype.kind == "f",
                          "True for a floating point dtype."),
    "is_complex": (lambda self: self._data.dtype.kind == "c", "True for a complex dtype."),
}


# ---- factories: new tensors with self's dtype -------------------------------------------------
def _new(self: Tensor, make, size, dtype, device, requires_grad: bool, op: str) -> Tensor:
    _check_device(device, op)
    shape = _sizes(size, op)
    if any(n < 0 for n in shape):
        raise ValueError(f"{op}: negative dimension in size {shape}")
    dt = self.dtype if dtype is None else _dtype(dtype, op)
    t = Tensor._wrap(make(shape, dt))
    if requires_grad:
        t.requires_grad = True           # TypeError for integer dtypes
    return t


def new_zeros(self: Tensor, *size, dtype=None, device=None,
              requires_grad: bool = False) -> Tensor:
    """Zeros of `size` (`new_zeros(2, 3)` or `new_zeros((2, 3))`), self's dtype by default."""
    return _new(self, np.zeros, size, dtype, device, requires_grad, "new_zeros")


def new_ones(self: Tensor, *size, dtype=None, device=None,
             requires_grad: bool = False) -> Tensor:
    """Ones of `size`, self's dtype by default."""
    return _new(self, np.ones, size, dtype, device, requires_grad, "new_ones")


def new_empty(self: Tensor, *size, dtype=None, device=None,
              requires_grad: bool = False) -> Tensor:
    """An uninitialised tensor of `size`, self's dtype by default."""
    return _new(self, np.empty, size, dtype, device, requires_grad, "new_empty")


def new_full(self: Tensor, size, fill_value, *, dtype=None, device=None,
             requires_grad: bool = False) -> Tensor:
    """`fill_value` everywhere in a tensor of `size` (a sequence), self's dtype by default
    (a float filled into an integer dtype is truncated, as PyTorch)."""
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    return _new(self, lambda s, d: np.full(s, fill_value, d), (size,), dtype, device,
                requires_grad, "new_full")


def new_tensor(self: Tensor, data, *, dtype=None, device=None,
               requires_grad: bool = False) -> Tensor:
    """A new leaf holding a copy of `data`, self's dtype by default (not the data's)."""
    _check_device(device, "new_tensor")
    dt = self.dtype if dtype is None else _dtype(dtype, "new_tensor")
    return Tensor(data._data if isinstance(data, Tensor) else data, requires_grad=requires_grad,
                  dtype=dt)


METHODS = {
    "to": to, "type": type_, "type_as": type_as, "tolist": tolist, "cpu": cpu, "cuda": cuda,
    "contiguous": contiguous, "stride": stride, "storage_offset": storage_offset,
    "new_zeros": new_zeros, "new_ones": new_ones, "new_empty": new_empty,
    "new_full": new_full, "new_tensor": new_tensor,
}
for _name, _dt in (("float", np.float32), ("double", np.float64), ("half", np.float16),
                   ("long", np.int64), ("int", np.int32), ("short", np.int16),
                   ("char", np.int8), ("byte", np.uint8), ("bool", np.bool_)):
    METHODS[_name] = _named_cast(_name, _dt)
for _name, (_fn, _doc) in _INFO.items():
    _fn.__name__ = _fn.__qualname__ = _name
    _fn.__doc__ = _doc
    METHODS[_name] = _fn
