"""`pa.cuda`: PyTorch's `torch.cuda` as it behaves in a build without CUDA.

Code written for GPUs asks before it uses one: `is_available()` is False, `device_count()`
0, `is_initialized()` False; the seeding calls (`manual_seed`, `manual_seed_all`, `seed`,
`seed_all`) do nothing, as torch's do without a device; `empty_cache`, `synchronize`-free
memory queries (`memory_allocated`, `max_memory_allocated`, `memory_reserved`) answer
0 / do nothing. What needs a device (`current_device`, `synchronize`, `set_device`,
`get_device_name`, `init`, `get_rng_state`) raises `DeviceUnavailableError` (a
RuntimeError and an AssertionError, like torch's "Torch not compiled with CUDA enabled").
`amp.GradScaler(...)` and `amp.autocast(...)` are torch's deprecated spellings of
`pa.amp.GradScaler("cuda", ...)` and `pa.amp.autocast("cuda", ...)` (parallel_autograd/amp.py).

Thread safety: stateless.
"""
from __future__ import annotations

import types
import warnings

from . import amp as _amp
from .device import check_device

__all__ = ["is_available", "device_count", "is_initialized", "manual_seed",
           "manual_seed_all", "seed", "seed_all", "empty_cache", "memory_allocated",
           "max_memory_allocated", "memory_reserved", "is_bf16_supported", "current_device",
           "synchronize", "set_device", "get_device_name", "init", "get_rng_state", "amp"]


def _deprecated(name: str) -> None:
    warnings.warn(f"`torch.cuda.amp.{name}(args...)` is deprecated. Please use "
                  f"`torch.amp.{name}('cuda', args...)` instead.", FutureWarning, stacklevel=3)


def _grad_scaler(init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 enabled: bool = True) -> _amp.GradScaler:
    """`torch.cuda.amp.GradScaler(...)`: `pa.amp.GradScaler("cuda", ...)`, deprecated."""
    _deprecated("GradScaler")
    return _amp.GradScaler("cuda", init_scale, growth_factor, backoff_factor, growth_interval,
                           enabled)


def _autocast(enabled: bool = True, dtype=None, cache_enabled: bool = True) -> _amp.autocast:
    """`torch.cuda.amp.autocast(...)`: `pa.amp.autocast("cuda", ...)`, deprecated."""
    _deprecated("autocast")
    return _amp.autocast("cuda", dtype, enabled, cache_enabled)


amp = types.SimpleNamespace(GradScaler=_grad_scaler, autocast=_autocast)


def is_available() -> bool:
    """False: there is no CUDA device here."""
    return False


def device_count() -> int:
    """0: there is no CUDA device here."""
    return 0


def is_initialized() -> bool:
    """False: CUDA is never initialised here."""
    return False


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """False (no device)."""
    return False


def manual_seed(seed: int) -> None:
    """Nothing (torch without a CUDA device ignores it too); seed the CPU with
    `pa.manual_seed`."""


def manual_seed_all(seed: int) -> None:
    """Nothing (no device)."""


def seed() -> None:
    """Nothing (no device)."""


def seed_all() -> None:
    """Nothing (no device)."""


def empty_cache() -> None:
    """Nothing (no device memory); the CPU allocator's cache is `pa.memory`."""


def memory_allocated(device=None) -> int:
    """0 (no device memory)."""
    return 0


def max_memory_allocated(device=None) -> int:
    """0 (no device memory)."""
    return 0


def memory_reserved(device=None) -> int:
    """0 (no device memory)."""
    return 0


def _unavailable(what: str):
    check_device("cuda", f"cuda.{what}")


def current_device() -> int:
    """Raises `DeviceUnavailableError`: there is no CUDA device."""
    _unavailable("current_device")


def synchronize(device=None) -> None:
    """Raises `DeviceUnavailableError`: there is no CUDA device."""
    _unavailable("synchronize")


def set_device(device) -> None:
    """Raises `DeviceUnavailableError`: there is no CUDA device."""
    _unavailable("set_device")


def get_device_name(device=None) -> str:
    """Raises `DeviceUnavailableError`: there is no CUDA device."""
    _unavailable("get_device_name")


def init() -> None:
    """Raises `DeviceUnavailableError`: there is no CUDA device."""
    _unavailable("init")


def get_rng_state(device="cuda"):
    """Raises `DeviceUnavailableError`: there is no CUDA device."""
    _unavailable("get_rng_state")
