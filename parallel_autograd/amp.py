"""`pa.amp` (`torch.amp`): `GradScaler` and `autocast` as PyTorch's behave on a machine
without CUDA, which is this library's only kind.

Training scripts create them whatever the device (nanoGPT's
`torch.cuda.amp.GradScaler(enabled=(dtype == 'float16'))`, `torch.autocast(...)` around the
forward). Disabled, or for "cuda" (PyTorch warns and disables them when CUDA is missing),
they pass everything through: `scale(loss)` is `loss`, `step(opt)` is `opt.step()`,
`unscale_`/`update` do nothing, `get_scale()` is 1.0, and `autocast` changes no dtype.
Enabled on "cpu" (float16 loss scaling, bfloat16 autocast) they raise
NotImplementedError: mixed precision is not implemented here, and a silent pass-through
would train in another precision than the program asked for.

Thread safety: a GradScaler holds only its settings; autocast holds no state.
"""
from __future__ import annotations

import functools
import warnings
from typing import Any, Callable

__all__ = ["GradScaler", "autocast"]


def _mixed_precision_missing(what: str) -> NotImplementedError:
    return NotImplementedError(
        f"{what}: mixed precision on the CPU is not implemented in parallel_autograd; "
        f"pass enabled=False (or train in float32/float64)")


class GradScaler:
    """PyTorch's `torch.amp.GradScaler(device="cuda", init_scale=2.**16, growth_factor=2.0,
    backoff_factor=0.5, growth_interval=2000, enabled=True)` without a GPU: always
    disabled (see the module's docstring); `enabled=True` warns as PyTorch's for "cuda"
    and raises NotImplementedError for "cpu"."""

    def __init__(self, device: str = "cuda", init_scale: float = 2.0 ** 16,
                 growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        if enabled and device == "cpu":
            raise _mixed_precision_missing("GradScaler('cpu', enabled=True)")
        if enabled:
            warnings.warn(f"torch.{device}.amp.GradScaler is enabled, but "
                          f"{device.upper()} is not available.  Disabling.", UserWarning,
                          stacklevel=2)
        self._device = device
        self._settings = {"scale": float(init_scale), "growth_factor": float(growth_factor),
                          "backoff_factor": float(backoff_factor),
                          "growth_interval": int(growth_interval)}

    def is_enabled(self) -> bool:
        """False: no loss scaling happens here."""
        return False

    def scale(self, outputs: Any) -> Any:
        """`outputs` unchanged (a disabled scaler's result)."""
        return outputs

    def unscale_(self, optimizer) -> None:
        """Nothing to unscale."""

    def step(self, optimizer, *args: Any, **kwargs: Any) -> Any:
        """`optimizer.step(*args, **kwargs)`."""
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale: Any = None) -> None:
        """Nothing to update."""

    def get_scale(self) -> float:
        """1.0, as a disabled PyTorch scaler answers."""
        return 1.0

    def get_growth_factor(self) -> float:
        return self._settings["growth_factor"]

    def set_growth_factor(self, new_factor: float) -> None:
        self._settings["growth_factor"] = float(new_factor)

    def get_backoff_factor(self) -> float:
        return self._settings["backoff_factor"]

    def set_backoff_factor(self, new_factor: float) -> None:
        self._settings["backoff_factor"] = float(new_factor)

    def get_growth_interval(self) -> int:
        return self._settings["growth_interval"]

    def set_growth_interval(self, new_interval: int) -> None:
        self._settings["growth_interval"] = int(new_interval)

    def state_dict(self) -> dict:
        """{} (a disabled scaler's state)."""
        return {}

    def load_state_dict(self, state_dict: dict) -> None:
        """Ignored, as by a disabled PyTorch scaler."""


class autocast:  # noqa: N801  (PyTorch's name)
    """PyTorch's `torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None)`,
    a context manager and decorator, without a GPU: changes no dtype. Enabled for "cuda"
    it warns and disables itself as PyTorch's does; enabled for "cpu" it raises
    NotImplementedError (bfloat16/float16 autocast is not implemented here)."""

    def __init__(self, device_type: str, dtype: Any = None, enabled: bool = True,
                 cache_enabled: bool | None = None) -> None:
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: "
                             f"`{type(device_type)}`")
        if enabled and device_type == "cpu":
            raise _mixed_precision_missing("autocast('cpu', enabled=True)")
        if enabled:
            warnings.warn("CUDA is not available or torch_xla is imported. Disabling "
                          "autocast.", UserWarning, stacklevel=2)
        self.device, self.fast_dtype, self._enabled = device_type, dtype, False

    def __enter__(self) -> "autocast":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)
        return wrapped

