"""Run under mpiexec by tests/test_torch_distributed.py: a PyTorch-style script with only the
module aliased (`import parallel_autograd.distributed as dist`), printing one JSON line."""
from __future__ import annotations

import json

import numpy as np

import parallel_autograd as torch
import parallel_autograd.distributed as dist

assert not dist.is_initialized()
dist.init_process_group(backend="gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)] * 3)
dist.all_reduce(t, op=dist.ReduceOp.SUM)
dist.barrier()
b = torch.tensor([float(rank)])
dist.broadcast(b, src=0)
g = dist.new_group()
got = {"rank": rank, "world": world, "sum": t.tolist(), "bcast": b.tolist(),
       "backend": dist.get_backend(), "group_rank": dist.get_rank(g),
       "group_world": dist.get_world_size(g), "initialized": dist.is_initialized()}
dist.destroy_process_group(g)                     # a sub-group: the process group stays
got["after_group_destroy"] = dist.is_initialized()
dist.destroy_process_group()
got["after_destroy"] = dist.is_initialized()
dist.init_process_group("mpi", world_size=world, rank=rank)   # again, explicit and right
got["reinit"] = dist.is_initialized()
try:
    dist.destroy_process_group()
    dist.init_process_group("gloo", world_size=world + 1)
except ValueError as e:
    got["bad_world"] = str(e)
got["after_bad"] = dist.is_initialized()
assert np.isfinite(t.numpy()).all()
print(json.dumps(got))
