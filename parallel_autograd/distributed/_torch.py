"""PyTorch's `torch.distributed` entry points over `init` (MPI): `init_process_group`,
`get_backend`, `is_available`, `is_mpi_available`, `is_gloo_available`,
`is_nccl_available`.

The processes come from the MPI launcher (`mpiexec -n N python train.py`), not from
torchrun's environment: `init_process_group` checks what it is given against MPI's world
and refuses what cannot be honoured instead of running a job that is not the one asked
for (see its docstring).
"""
from __future__ import annotations

import importlib.util
import os

from ..device import check_device
from . import _comm

__all__ = ["init_process_group", "get_backend", "is_available", "is_mpi_available",
           "is_gloo_available", "is_nccl_available"]

_CPU_BACKENDS = ("mpi", "gloo")


def _check_backend(backend) -> None:
    """Every CPU part of `backend` ("gloo", "mpi", "cpu:gloo,cuda:nccl", ...) must be one
    this runs over MPI; NCCL alone is refused as a CPU build of torch refuses it."""
    if backend is None:
        return
    if not isinstance(backend, str):
        raise TypeError(f"init_process_group: backend must be a string or None, got "
                        f"{type(backend).__name__}")
    parts = [p.strip().lower().rpartition(":") for p in backend.split(",") if p.strip()]
    cpu = [name for dev, _, name in parts if dev in ("", "cpu") and name != "nccl"]
    if not cpu and any(name == "nccl" for _, _, name in parts):
        raise RuntimeError("Distributed package doesn't have NCCL built in "
                           "(parallel_autograd runs on the CPU over MPI: use 'gloo' or 'mpi')")
    if not cpu or any(n not in _CPU_BACKENDS for n in cpu):
        raise ValueError(f"init_process_group: unsupported backend {backend!r}: "
                         f"parallel_autograd runs over MPI ('mpi', or 'gloo' as its alias)")


def _check_size(what: str, given: int, actual: int, env: str) -> None:
    if given not in (-1, None) and given != actual:
        raise ValueError(f"init_process_group: {what}={given} but MPI's world gives "
                         f"{actual} (launch with mpiexec -n N; {what} is optional)")
    value = os.environ.get(env)
    if value is not None and value.isdigit() and int(value) != actual:
        raise RuntimeError(f"init_process_group: the environment says {env}={value} (a "
                           f"torchrun launch?) but MPI's world gives {actual}: "
                           f"pa.distributed's processes come from mpiexec -n N")


def init_process_group(backend: str | None = None, init_method: str | None = None,
                       timeout=None, world_size: int = -1, rank: int = -1, store=None,
                       group_name: str = "", pg_options=None, device_id=None) -> None:
    """PyTorch's `init_process_group`, as `pa.distributed.init()` (MPI's COMM_WORLD).

    - `backend`: None, "mpi" or "gloo" (both mean MPI here; a "cpu:gloo,cuda:nccl" list
      is fine); "nccl" alone raises RuntimeError (no CUDA), anything else ValueError;
    - `world_size`, `rank`: optional; if given they must be MPI's (ValueError);
      likewise WORLD_SIZE / RANK in the environment (a torchrun launch would otherwise
      run N independent one-process jobs): RuntimeError;
    - `init_method`, `store`, `group_name`, `pg_options`, `timeout`: accepted, unused
      (MPI's launcher is the rendezvous; `DistributedDataParallel(timeout=)` bounds
      waits); `device_id` must be the CPU.
    Everything is checked before MPI starts. Thread safety: as `init`."""
    _check_backend(backend)
    if device_id is not None:
        check_device(device_id, "init_process_group: device_id")
    for name, v in (("world_size", world_size), ("rank", rank)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise TypeError(f"init_process_group: {name} must be an int, got "
                            f"{type(v).__name__}")
    _comm.init()
    try:
        _check_size("world_size", world_size, _comm.get_world_size(), "WORLD_SIZE")
        _check_size("rank", rank, _comm.get_rank(), "RANK")
    except (ValueError, RuntimeError):
        _comm.destroy_process_group()
        raise


def get_backend(group=None) -> str:
    """"mpi" once initialized (the transport every backend name maps to here)."""
    _comm.get_world_size(group)       # NotInitializedError before init, as torch
    return "mpi"


def is_available() -> bool:
    """Whether pa.distributed can run here: mpi4py is installed."""
    return importlib.util.find_spec("mpi4py") is not None


def is_mpi_available() -> bool:
    """Whether the MPI backend is available (mpi4py installed)."""
    return is_available()


def is_gloo_available() -> bool:
    """Whether the name "gloo" works: yes when MPI does (it is an alias of MPI here)."""
    return is_available()


def is_nccl_available() -> bool:
    """False: there is no CUDA here."""
    return False
