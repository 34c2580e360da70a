"""The device model (PyTorch's `torch.device`), for a library that runs on the CPU only.

`device("cpu")`, `device("cpu:0")`, `device("cpu", 0)`, `device(type="cuda", index=1)`:
a descriptor with `type` and `index`, printed and compared as torch's. Any device type
PyTorch knows can be *named* (code builds `device("cuda" if cuda.is_available() else
"cpu")`); only the CPU can be *used*: a tensor, a module or a factory asked for another
device raises `DeviceUnavailableError`, a RuntimeError that is also an AssertionError
(PyTorch without CUDA raises AssertionError "Torch not compiled with CUDA enabled"; code
catching either type catches it).

One deliberate difference: a device compares equal to its string (`device("cpu") == "cpu"`;
torch says False), and hashes like it, so `x.device == "cpu"` reads as written.

Thread safety: devices are immutable.
"""
from __future__ import annotations

__all__ = ["device", "DeviceUnavailableError", "check_device", "CPU"]

_TYPES = ("cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve",
          "fpga", "maia", "xla", "lazy", "vulkan", "mps", "meta", "hpu", "mtia",
          "privateuseone")


class DeviceUnavailableError(RuntimeError, AssertionError):
    """A device other than the CPU was asked for (PyTorch raises AssertionError for CUDA
    in a CPU build, RuntimeError for other backends: this is both)."""


class device:
    """PyTorch's `torch.device`: `type` ('cpu', 'cuda', ...) and `index` (None or an int
    >= 0). Accepts a string ('cpu', 'cpu:0'), a type and an index, another device or a
    `torch.device`. See the module docstring."""

    __slots__ = ("_type", "_index")

    def __init__(self, type=None, index: int | None = None) -> None:  # noqa: A002
        if isinstance(type, device) or _is_torch_device(type):
            if index is not None:
                raise RuntimeError("device: an index cannot be given with a device")
            type, index = type.type, type.index
        elif isinstance(type, int) and not isinstance(type, bool):
            raise RuntimeError("Cannot access accelerator device when none is available.")
        elif not isinstance(type, str):
            raise TypeError(f"device() expects a string or a device, got "
                            f"{builtins_type(type).__name__}")
        else:
            type, parsed = _parse(type)
            if parsed is not None:
                if index is not None:
                    raise RuntimeError(f"type (string) must not include an index because "
                                       f"index was passed explicitly: {type}:{parsed}")
                index = parsed
        if index is not None:
            if isinstance(index, bool) or not isinstance(index, int):
                raise TypeError(f"device index must be an int, got "
                                f"{builtins_type(index).__name__}")
            if index < 0:
                raise RuntimeError("Device index must not be negative")
        object.__setattr__(self, "_type", type)
        object.__setattr__(self, "_index", index)

    @property
    def type(self) -> str:
        """The device type: 'cpu', 'cuda', ..."""
        return self._type

    @property
    def index(self) -> int | None:
        """The device index, or None when not given."""
        return self._index

    def __setattr__(self, name, value):
        raise AttributeError("device objects are immutable")

    def __str__(self) -> str:
        return self._type if self._index is None else f"{self._type}:{self._index}"

    def __repr__(self) -> str:
        if self._index is None:
            return f"device(type='{self._type}')"
        return f"device(type='{self._type}', index={self._index})"

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            try:
                other = device(other)
            except (RuntimeError, TypeError):
                return False
        if isinstance(other, device) or _is_torch_device(other):
            return self._type == other.type and self._index == other.index
        return NotImplemented

    def __hash__(self) -> int:
        return hash(str(self))  # as its string, which it equals

    def __reduce__(self):
        return device, (self._type, self._index)


builtins_type = type


def _is_torch_device(d) -> bool:
    return builtins_type(d).__name__ == "device" and builtins_type(d).__module__ == "torch"


def _parse(s: str) -> tuple:
    kind, sep, idx = s.partition(":")
    if kind not in _TYPES:
        raise RuntimeError(f"Expected one of {', '.join(_TYPES)} device type at start of "
                           f"device string: {s}")
    if not sep:
        return kind, None
    if not idx.isdigit() or (len(idx) > 1 and idx[0] == "0"):
        raise RuntimeError(f"Invalid device string: '{s}'")
    return kind, int(idx)


def check_device(dev, op: str = "") -> device:
    """`dev` (None, a string, a device, a torch.device) as a device, which must be the CPU
    (None means the CPU): `DeviceUnavailableError` for any other device, RuntimeError /
    TypeError for what is not a device, as torch's."""
    if dev is None:
        return CPU
    d = dev if isinstance(dev, device) else device(dev)
    if d.type != "cpu":
        where = f"{op}: " if op else ""
        if d.type == "cuda":
            raise DeviceUnavailableError(f"{where}Torch not compiled with CUDA enabled "
                                         f"(parallel_autograd runs on the CPU only)")
        raise DeviceUnavailableError(f"{where}PyTorch is not linked with support for "
                                     f"{d.type} devices (parallel_autograd runs on the CPU "
                                     f"only)")
    return d


CPU = device("cpu")
