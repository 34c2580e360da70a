"""Run by tests/test_distributed.py: `pa.distributed.init()` when the program started MPI itself
(mpi4py.rc.initialize = False, then MPI.Init_thread). argv[1] is the thread level to start with:
"multiple" must be accepted (and the group works), "funneled" refused with a clear error."""
import sys

import mpi4py

mpi4py.rc.initialize = False
from mpi4py import MPI  # noqa: E402

import numpy as np  # noqa: E402

import parallel_autograd.distributed as dist  # noqa: E402

level = {"multiple": MPI.THREAD_MULTIPLE, "funneled": MPI.THREAD_FUNNELED}[sys.argv[1]]
MPI.Init_thread(level)
try:
    dist.init()
except RuntimeError as e:
    sys.stdout.write(f"REFUSED: {e}\n")  # one write: ranks' lines interleave otherwise
    sys.exit(0)
a = np.ones(3)
dist.all_reduce(a)
assert np.array_equal(a, np.full(3, float(dist.world_size())))
sys.stdout.write(f"ACCEPTED {dist.rank()}\n")  # one write: lines of ranks interleave otherwise
sys.stdout.flush()
