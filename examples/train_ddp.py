"""Data-parallel training over MPI: every rank trains on its shard of each batch, and
DistributedDataParallel averages the gradients during the backward.

    make example-mpi                                     # installs the [mpi] extra, runs this
    UCX_TLS=self,sm UCX_NET_DEVICES=lo mpiexec -n 2 python examples/train_ddp.py --check
    python examples/train_ddp.py                         # also works: a world of one

The data is synthetic (8x8 "images" labelled by a random teacher network, seeded), so the
example needs nothing but the package and the extra. It trains in float32 (the default
dtype) unless `--dtype float64`. `--check` makes rank 0 train the same model on the
concatenated batches in one process afterwards and compare the loss curve and the final
parameters (exit status 1 beyond `--tol`); every rank also checks that its parameters are
bitwise those of rank 0. `--fault-rank` injects an exception into one rank's
backward: the job must end (MPI_Abort), not hang.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time

import numpy as np

import parallel_autograd as pa
import parallel_autograd.distributed as dist
import parallel_autograd.optim as optim
from parallel_autograd.nn import functional as F
from parallel_autograd.nn.parallel import DistributedDataParallel
from train_digits import HelpFormatter, make_model  # this script's directory is on sys.path


def make_data(n: int, seed: int):
    """(x, y): n images (n, 1, 8, 8) in the default dtype and labels 0..9 from a fixed
    random teacher."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 1, 8, 8))
    teacher = rng.standard_normal((64, 10))
    y = np.argmax(np.tanh(x.reshape(n, 64) @ teacher) + 0.3 * rng.standard_normal((n, 10)), 1)
    return x.astype(np.dtype(pa.get_default_dtype())), y.astype(np.int64)


def batches(n: int, batch: int, steps: int, seed: int):
    """The global batch of each step: index arrays, the same on every rank."""
    rng = np.random.default_rng(seed + 1)
    order = np.concatenate([rng.permutation(n) for _ in range((steps * batch) // n + 1)])
    return [order[s * batch:(s + 1) * batch] for s in range(steps)]


def train_ddp(args, x, y, plan):
    """The data-parallel run: returns (global loss per step, model)."""
    r, w = dist.rank(), dist.world_size()
    pa.manual_seed(args.seed + 17 * r)  # different on each rank: DDP must broadcast rank 0's
    model = make_model(args.model)
    ddp = DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb,
                                  timeout=args.timeout)
    opt = optim.Adam(ddp.parameters(), lr=args.lr)
    engine = pa.Engine(args.workers)
    losses = []
    shard = len(plan[0]) // w
    for step, idx in enumerate(plan):
        mine = idx[r * shard:(r + 1) * shard]
        opt.zero_grad()
        with pa.profile() if args.trace and step == len(plan) - 1 else _nothing() as prof:
            out = ddp(pa.tensor(x[mine]))
            if args.fault_rank == r and args.fault_step == step:
                _inject(out, model, args.fault_where)
            loss = F.cross_entropy(out, y[mine])
            try:
                engine.backward(loss)
            except RuntimeError:
                if not args.fault_catch:
                    raise
                time.sleep(3600)  # caught and stuck: the others must time out and abort
        if prof is not None:
            dist.export_chrome_trace(prof, args.trace)
        opt.step()
        total = np.array([loss.item()])
        dist.all_reduce(total, dist.ReduceOp.AVG)
        losses.append(float(total[0]))
    engine.close()
    return losses, model


def _inject(out, model, where: str) -> None:
    def fail(g):
        raise RuntimeError(f"injected fault on rank {dist.rank()}")
    if where == "early":  # before any parameter gradient is ready
        out.register_hook(fail)
    else:  # after the last layers' gradients were handed to DDP
        next(model.parameters()).register_hook(fail)


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def train_single(args, x, y, plan):
    """The reference: one process, the whole batch, the same initial weights (rank 0's)."""
    pa.manual_seed(args.seed)
    model = make_model(args.model)
    opt = optim.Adam(model.parameters(), lr=args.lr)
    losses = []
    for idx in plan:
        opt.zero_grad()
        loss = F.cross_entropy(model(pa.tensor(x[idx])), y[idx])
        pa.backward(loss)
        opt.step()
        losses.append(loss.item())
    return losses, model


def digest(model) -> np.ndarray:
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(np.ascontiguousarray(p.numpy()).tobytes())
    return np.frombuffer(h.digest(), np.uint8).copy()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="train_ddp.py", formatter_class=HelpFormatter,
                                description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--model", choices=("mlp", "cnn"), default="mlp", help="the network")
    p.add_argument("--steps", type=int, default=20, help="training steps")
    p.add_argument("--batch", type=int, default=64, help="global batch (all ranks)")
    p.add_argument("--samples", type=int, default=1024, help="size of the synthetic data set")
    p.add_argument("--lr", type=float, default=2e-3, help="Adam's learning rate")
    p.add_argument("--workers", type=int, default=None,
                   help="engine threads per rank (default: pa.Engine's, all cores)")
    p.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP's bucket size, MB")
    p.add_argument("--timeout", type=float, default=1800.0, help="DDP all-reduce timeout, s")
    p.add_argument("--seed", type=int, default=0, help="seed of the data, weights and batches")
    p.add_argument("--check", action="store_true",
                   help="rank 0 then trains the same model in one process and compares")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                   help="the model's and the data's dtype (pa.set_default_dtype)")
    p.add_argument("--tol", type=float, default=None,
                   help="largest loss or parameter difference --check accepts (default: "
                        "1e-10 in float64, 1e-5 in float32: the ranks' averaged gradient "
                        "is rounded differently from one process's)")
    p.add_argument("--trace", metavar="FILE.json",
                   help="write the last step's Chrome trace (all ranks) here")
    p.add_argument("--fault-rank", type=int, default=-1,
                   help="rank whose backward raises (tests that the job ends); -1: none")
    p.add_argument("--fault-step", type=int, default=1, help="step of --fault-rank's fault")
    p.add_argument("--fault-where", choices=("early", "middle"), default="middle",
                   help="early: before any parameter's gradient is ready; middle: after the last "
                        "layers' gradients went to DDP")
    p.add_argument("--fault-catch", action="store_true",
                   help="the faulty rank catches the error and hangs (tests the timeout)")
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    pa.set_default_dtype(getattr(pa, args.dtype))
    if args.tol is None:
        args.tol = 1e-10 if args.dtype == "float64" else 1e-5
    dist.init()
    r, w = dist.rank(), dist.world_size()
    if args.batch % w:
        sys.exit(f"--batch {args.batch} is not a multiple of the world size {w}")
    x, y = make_data(args.samples, args.seed)
    plan = batches(args.samples, args.batch, args.steps, args.seed)
    t0 = time.perf_counter()
    losses, model = train_ddp(args, x, y, plan)
    elapsed = time.perf_counter() - t0
    mine = digest(model)
    every = [np.empty_like(mine) for _ in range(w)]
    dist.all_gather(every, mine)
    same = all(np.array_equal(d, every[0]) for d in every)
    if r != 0:
        return 0 if same else 1
    report = {"world_size": w, "model": args.model, "steps": args.steps,
              "first_loss": losses[0], "last_loss": losses[-1], "seconds": round(elapsed, 3),
              "ranks_bitwise_equal": same, "digest": mine.tobytes().hex()}
    ok = same
    if args.check:
        ref_losses, ref = train_single(args, x, y, plan)
        report["max_loss_diff"] = max(abs(a - b) for a, b in zip(losses, ref_losses))
        report["max_param_diff"] = max(float(np.max(np.abs(a.numpy() - b.numpy())))
                                       for a, b in zip(model.parameters(), ref.parameters()))
        ok = ok and report["max_loss_diff"] <= args.tol and report["max_param_diff"] <= args.tol
    report["ok"] = ok
    print(json.dumps(report))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
