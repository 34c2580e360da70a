"""PyTorch's process-wide settings: threads, determinism, matmul precision.

Threads (what each of torch's two pools maps to here):

- `set_num_threads(n)` / `get_num_threads()`: torch's intra-op threads, the ones one op
  uses. Here an op is split over threads in two places: BLAS (matmul, conv through GEMM)
  and the large transcendental kernels (`intraop`). `set_num_threads(n)` sets both: the
  BLAS libraries' thread count (threadpoolctl, through `engine.blas`, so a parallel
  backward's own lower limit is respected and restored to `n`) and `intraop`'s.
  `get_num_threads()` is intraop's count (the usable cores unless set or
  `PARALLEL_AUTOGRAD_INTRAOP_THREADS`).
- `set_num_interop_threads(n)` / `get_num_interop_threads()`: torch's inter-op pool, the
  threads that run independent ops side by side. Here that is the parallel backward
  engine: the workers (the calling thread included) of `Tensor.backward()` and
  `backward_parallel` when they are not given `num_workers` (default the usable cores).
  Unlike torch, it may be called again, and after work started (engines already made
  keep their workers; the next call uses the new count).

Determinism: every computation here is deterministic already (both engines give bitwise
the same gradients whatever the threads; the DataLoader's workers draw from per-worker
generators), so `use_deterministic_algorithms` only records the flags it is given, for
code that reads them back. `set_float32_matmul_precision` likewise records its value
(numpy's float32 GEMM is the "highest" precision; there is no TF32 on a CPU).

Thread safety: each setter is one assignment under the GIL (BLAS changes under
`engine.blas`'s lock); settings are process-wide, as torch's.
"""
from __future__ import annotations

import numbers
import warnings

from . import intraop
from .engine import blas
from .engine.engine import default_num_workers, set_default_num_workers

__all__ = ["set_num_threads", "get_num_threads", "set_num_interop_threads",
           "get_num_interop_threads", "use_deterministic_algorithms",
           "are_deterministic_algorithms_enabled", "is_deterministic_algorithms_warn_only_enabled",
           "set_float32_matmul_precision", "get_float32_matmul_precision"]

_DETERMINISTIC = {"mode": False, "warn_only": False}
_PRECISION = ["highest"]


def _positive(n, name: str) -> int:
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise RuntimeError(f"{name} expects an int, but got {type(n).__name__}")
    if n < 1:
        raise RuntimeError(f"{name} expects a positive integer")
    return int(n)


def set_num_threads(int: int) -> None:  # noqa: A002  (PyTorch's parameter name)
    """Threads one op may use: BLAS's and the split kernels' (see the module docstring).
    RuntimeError unless a positive int, as torch's."""
    n = _positive(int, "set_num_threads")
    intraop.set_num_threads(n)
    blas.set_threads(n)


def get_num_threads() -> int:
    """Threads one op may use (`set_num_threads`)."""
    return intraop.get_num_threads()


def set_num_interop_threads(int: int) -> None:  # noqa: A002  (PyTorch's parameter name)
    """Threads of the parallel backward engine when a call is not given `num_workers`
    (see the module docstring). RuntimeError unless a positive int."""
    set_default_num_workers(_positive(int, "set_num_interop_threads"))


def get_num_interop_threads() -> int:
    """Threads a backward call uses when not told (`set_num_interop_threads`)."""
    return default_num_workers()


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """Record PyTorch's determinism flags (no effect: everything here is deterministic,
    see the module docstring). TypeError unless `mode` and `warn_only` are bools."""
    for name, v in (("mode", mode), ("warn_only", warn_only)):
        if not isinstance(v, bool):
            raise TypeError(f"use_deterministic_algorithms(): argument '{name}' must be bool, "
                            f"not {type(v).__name__}")
    _DETERMINISTIC.update(mode=mode, warn_only=warn_only)


def are_deterministic_algorithms_enabled() -> bool:
    """The `mode` last given to `use_deterministic_algorithms` (default False)."""
    return _DETERMINISTIC["mode"]


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    """The `warn_only` last given to `use_deterministic_algorithms` (default False)."""
    return _DETERMINISTIC["warn_only"]


def set_float32_matmul_precision(precision: str) -> None:
    """Record 'highest', 'high' or 'medium' (no effect on a CPU: float32 GEMMs are always
    full precision); another value warns and changes nothing, as torch's."""
    if precision not in ("highest", "high", "medium"):
        warnings.warn(f"{precision} is not one of 'highest', 'high', or 'medium'; the "
                      f"current setFloat32MatmulPrecision call has no effect.",
                      UserWarning, stacklevel=2)
        return
    _PRECISION[0] = precision


def get_float32_matmul_precision() -> str:
    """The value last given to `set_float32_matmul_precision` (default 'highest')."""
    return _PRECISION[0]
