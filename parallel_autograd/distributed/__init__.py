"""`pa.distributed`: processes that train together over MPI (PyTorch's `torch.distributed`
names where they exist), through `mpi4py`. An optional extra: `pip install
'parallel_autograd[mpi]'` brings mpi4py and the MPICH wheel (its `mpiexec`); launch with
`mpiexec -n 4 python train.py`, the same command on one machine or on a cluster.

- `init(comm=None)`, `is_initialized()`, `destroy_process_group()`; PyTorch's
  `init_process_group(backend="gloo"|"mpi", ...)` is `init()` with torch's arguments
  checked against MPI's world, plus `get_backend()`, `is_available()`,
  `is_mpi_available()`, `is_gloo_available()`, `is_nccl_available()`;
- `rank()` / `get_rank(group=None)`, `world_size()` / `get_world_size(group=None)`;
- collectives on ndarrays or Tensors, in place: `all_reduce(t, op=ReduceOp.SUM)`,
  `broadcast(t, src=0)`, `all_gather(tensor_list, t)`, `barrier()`; `async_op=True`
  returns a `Work` to `wait()` on;
- `new_group()`: the same processes on a communicator of their own (collectives take
  `group=`);
- `abort(message)`: end every process of the job (`MPI_Abort`), the message printed first;
- `export_chrome_trace(recorder, path)`: one Chrome trace of every rank's `pa.profile()`
  timeline (a process per rank, a track for its MPI communication).

`nn.parallel.DistributedDataParallel` builds on it. Without a launcher the world is one
process (MPI's singleton mode) and everything works.

Blocking collectives wait by polling their request with short sleeps, so Ctrl+C interrupts
them and an idle rank does not spin a core. An uncaught exception in any rank of a job of
two or more ends the whole job (`init(abort_on_exception=True)`, as `python -m mpi4py`
does): otherwise that rank blocks in `MPI_Finalize` while the others wait forever.

Thread safety: every function may be called from any thread once `init` returned. MPI
itself is called under one lock unless MPI provides `MPI_THREAD_MULTIPLE` (mpi4py asks for
it by default).
"""
from __future__ import annotations

from ._comm import (NotInitializedError, ReduceOp, Work, abort, all_gather, all_reduce, barrier,
                    broadcast, destroy_process_group, get_rank, get_world_size, init,
                    is_initialized, new_group, rank, world_size)
from ._torch import (get_backend, init_process_group, is_available, is_gloo_available,
                     is_mpi_available, is_nccl_available)
from ._trace import export_chrome_trace

__all__ = ["NotInitializedError", "ReduceOp", "Work", "abort", "all_gather", "all_reduce",
           "barrier", "broadcast", "destroy_process_group", "export_chrome_trace",
           "get_backend", "get_rank", "get_world_size", "init", "init_process_group",
           "is_available", "is_gloo_available", "is_initialized", "is_mpi_available",
           "is_nccl_available", "new_group", "rank", "world_size"]
