"""The data-parallel benchmark: `mpiexec -n 2 python -m stress.compare.mpi` (`make bench-mpi`).

Every rank runs every measurement (collectives need all of them); rank 0 prints the report
(markdown on stdout) and, with `--out`, every sample as JSON. A sample's time is the slowest
rank's (ranks start each sample together, after a barrier).

1. All-reduce throughput: `pa.distributed.all_reduce` of float64 buffers from 8 KiB to
   32 MiB; median time per size with its 95% interval, bus bandwidth (2(p-1)/p x bytes / time,
   as nccl-tests define it) and the fit time = a + bytes x b.
2. Overlap: one training step of an MLP (`--width`, `--layers`, `--batch` per rank) wrapped in
   DistributedDataParallel, measured in rounds of four configurations in rotated order:
   "local" (inside `no_sync()`: no communication), "ddp" (all-reduces overlapped with the
   backward), "serial" (the same DDP, every bucket started after the backward: no overlap)
   and "comm" (blocking all-reduces of the bucket buffers alone). Hidden share of the
   synchronisation = (serial - ddp) / (serial - local): the part of what synchronising costs
   that overlap removes, with its interval (paired by round). Then one profiled ddp step (its
   picture with `--plot`, matplotlib): the merged
   Chrome trace of all ranks (`--trace`), and from it the share of the backward still to run
   when the first bucket's all-reduce starts, and the exposed wait.
3. Scaling model for 1..64 ranks: step(p) = compute(1 rank, whole batch) / p + copies +
   exposed(p), exposed(p) = max(last(p), comm(p) - window / p): comm(p) = 2(p-1) a' +
   2(p-1)/p x bytes x b' (a ring all-reduce, a' = a/2 and b' = b from the fit at 2 ranks),
   window = the backward left after the first bucket starts (one rank, whole batch; from the
   profiled step), last(p) = the last bucket's all-reduce (it starts when the backward
   ends), copies = DDP's own passes over the gradients (serial - local - comm). Printed for
   the measured loopback, whose transfers are CPU copies on the cores that compute (no
   window), and for an assumed network (`--net-gbps`, `--net-latency-us`), with the measured
   points (1 rank: rank 0 alone on the whole batch, the others idle; 2 ranks) beside it.

Threads: by default one engine worker and one BLAS thread per rank (`--workers`), so 2 ranks
use the 2 cores of this machine without oversubscription.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time

import numpy as np
from threadpoolctl import threadpool_limits

import parallel_autograd as pa
import parallel_autograd.distributed as dist
from parallel_autograd.nn import functional as F
from parallel_autograd.nn.parallel import DistributedDataParallel

from ..helpformat import HelpFormatter
from .stats import Interval, boot_medians, interval, median_interval, ratio_text, seed_for

SIZES = [2**k for k in range(13, 26, 2)]  # 8 KiB .. 32 MiB
RANKS = [1, 2, 4, 8, 16, 32, 64]
CONFIGS = ("local", "ddp", "serial", "comm")
DTYPE = np.float64  # the MLP's, stated (the default dtype is float32): docs/benchmarks.md's rows


def slowest(seconds: float) -> float:
    """The largest of every rank's `seconds` (all ranks call it)."""
    t = np.array([seconds])
    dist.all_reduce(t, dist.ReduceOp.MAX)
    return float(t[0])


def timed(fn) -> float:
    dist.barrier()
    t0 = time.perf_counter()
    fn()
    return slowest(time.perf_counter() - t0)


# ---- 1. all-reduce throughput -----------------------------------------------------------
def allreduce_sizes(reps: int) -> dict:
    bufs = {n: np.ones(n // 8) for n in SIZES}
    times = {n: [] for n in SIZES}
    for i in range(reps + 1):
        for n in SIZES[i % len(SIZES):] + SIZES[:i % len(SIZES)]:
            t = timed(lambda: dist.all_reduce(bufs[n]))
            if i:  # round 0 warms up
                times[n].append(t)
    return times


def fit(sizes, medians) -> tuple:
    """Least squares time = a + bytes * b."""
    b, a = np.polyfit(np.asarray(sizes, float), np.asarray(medians, float), 1)
    return max(float(a), 0.0), float(b)


# ---- 2. overlap ---------------------------------------------------------------------------
class Step:
    """The MLP, its DDP wrapper, optimizer-free steps (zero_grad, forward, backward)."""

    def __init__(self, args, r: int):
        pa.manual_seed(args.seed)
        layers = []
        for _ in range(args.layers):
            layers += [pa.nn.Linear(args.width, args.width, dtype=DTYPE), pa.nn.Tanh()]
        self.model = pa.nn.Sequential(*layers, pa.nn.Linear(args.width, 10, dtype=DTYPE))
        self.ddp = DistributedDataParallel(self.model, bucket_cap_mb=args.bucket_cap_mb,
                                           gradient_as_bucket_view=args.bucket_view)
        rng = np.random.default_rng(args.seed + r)
        self.x = rng.standard_normal((args.batch, args.width)).astype(DTYPE)
        self.y = rng.integers(0, 10, args.batch)
        self.engine = pa.Engine(args.workers)
        self.buffers = [b.buffer for b in self.ddp._buckets]

    def backward(self, x=None, y=None, sync=True):
        self.model.zero_grad()
        x = self.x if x is None else x
        y = self.y if y is None else y
        if sync:
            loss = F.cross_entropy(self.ddp(pa.tensor(x)), y)
        else:
            with self.ddp.no_sync():
                loss = F.cross_entropy(self.ddp(pa.tensor(x)), y)
        self.engine.backward(loss)

    def comm(self):
        for b in self.buffers:
            dist.all_reduce(b)

    def run(self, config: str):
        if config == "local":
            self.backward(sync=False)
        elif config == "ddp":
            self.backward()
        elif config == "serial":  # the same DDP with every bucket started after the backward
            self.ddp._overlap = False
            try:
                self.backward()
            finally:
                self.ddp._overlap = True
        else:
            self.comm()


def overlap(step: Step, reps: int) -> dict:
    times = {c: [] for c in CONFIGS}
    for i in range(reps + 1):
        k = i % len(CONFIGS)
        for c in CONFIGS[k:] + CONFIGS[:k]:
            t = timed(lambda: step.run(c))
            if i:
                times[c].append(t)
    return times


def single_rank(step: Step, reps: int) -> list:
    """Rank 0 alone on the whole batch (every rank's shard), the others waiting in a
    (sleeping) barrier: the measured 1-rank point."""
    w = dist.world_size()
    xs = [np.empty_like(step.x) for _ in range(w)]
    ys = [np.empty_like(step.y) for _ in range(w)]
    dist.all_gather(xs, step.x)
    dist.all_gather(ys, step.y)
    x, y = np.concatenate(xs), np.concatenate(ys)
    out = []
    for i in range(reps + 1):
        dist.barrier()
        t0 = time.perf_counter()
        if dist.rank() == 0:
            step.backward(x, y, sync=False)
        t = time.perf_counter() - t0
        if i:
            out.append(t)
    t = np.array(out)
    dist.broadcast(t, 0)
    return t.tolist()


def plot_trace(trace: dict, path: str) -> None:
    """The merged timeline as a PNG: one lane per rank and thread (and the ranks'
    "MPI communication" tracks), the backward's nodes grey, the all-reduces coloured."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot needs matplotlib: pip install 'parallel_autograd[compare]'",
              file=sys.stderr)
        return
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    t0 = min(e["ts"] for e in spans)
    lanes = sorted({(e["pid"], e["tid"]) for e in spans},
                   key=lambda k: (k[0], names.get(k, "") == "MPI communication"))
    fig, ax = plt.subplots(figsize=(11, 1 + 0.6 * len(lanes)))
    for y, lane in enumerate(lanes):
        for e in spans:
            if (e["pid"], e["tid"]) != lane:
                continue
            comm = e["name"].startswith("all-reduce")
            wait = e["name"].startswith("DDP")
            color = "C1" if comm else "C3" if wait else "0.6"
            ax.broken_barh([((e["ts"] - t0) / 1e3, max(e["dur"], 1) / 1e3)], (y - 0.4, 0.8),
                           color=color, edgecolor="white", linewidth=0.3)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([f"rank {p}: {names.get((p, t), t)}" for p, t in lanes])
    ax.set_xlabel("ms")
    ax.invert_yaxis()
    ax.set_title("one DDP step: backward nodes (grey), bucket all-reduces from start to "
                 "completion (orange), DDP's final wait (red)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def profiled(step: Step, path: str | None, plot: str | None = None) -> dict:
    """One profiled ddp step: the merged trace (written by rank 0 to `path`, or to a new
    temporary file when None), and what it says about overlap."""
    with pa.profile() as prof:
        t0 = prof.now()
        step.backward()
        t1 = prof.now()
    if path is None and dist.rank() == 0:  # a fresh name: runs never overwrite each other
        fd, path = tempfile.mkstemp(prefix="parallel_autograd_mpi_trace_", suffix=".json")
        os.close(fd)
    trace = dist.export_chrome_trace(prof, path)
    if trace is None:
        return {}
    if plot:
        plot_trace(trace, plot)
    ev = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == 0]
    starts = [e["ts"] for e in ev if e["name"].startswith("start all-reduce")]
    nodes = [e for e in ev if not e["name"].startswith(("start all-", "all-reduce", "DDP"))]
    wait = sum(e["dur"] for e in ev if e["name"] == "DDP: wait for all-reduces") * 1e-6
    comm = sum(e["dur"] for e in ev if e["name"].startswith("all-reduce bucket")) * 1e-6
    b0 = min(e["ts"] for e in nodes)
    b1 = max(e["ts"] + e["dur"] for e in nodes)
    return {"step_s": t1 - t0, "exposed_wait_s": wait, "comm_spans_s": comm,
            "backward_after_first_start": (b1 - min(starts)) / (b1 - b0) if starts else 0.0,
            "backward_share": (b1 - b0) * 1e-6 / (t1 - t0), "trace": path}


# ---- 3. the model --------------------------------------------------------------------------
def model_rows(compute1: float, window1: float, copies: float, nbytes: int, last_bytes: int,
               a: float, b: float) -> list:
    """step(p) = compute1 / p + copies + exposed(p) for each p of RANKS (see the module doc):
    `window1` is the backward time after the first bucket starts on one rank (0: no
    overlap), `copies` DDP's own passes over the gradients (each rank copies all of them)."""
    rows = []
    for p in RANKS:
        def comm(s):
            return 0.0 if p == 1 else 2 * (p - 1) * a / 2 + 2 * (p - 1) / p * s * b
        exposed = 0.0 if p == 1 else max(comm(last_bytes), comm(nbytes) - window1 / p)
        t = compute1 / p + (copies if p > 1 else 0.0) + exposed
        rows.append({"ranks": p, "step_s": t, "comm_s": comm(nbytes), "exposed_s": exposed,
                     "speedup": compute1 / t, "efficiency": compute1 / t / p})
    return rows


# ---- report ---------------------------------------------------------------------------------
def hidden_meaning(hidden: Interval) -> str:
    """One line on what the hidden share's interval says (it is a difference of noisy step
    times over another: below 0 the overlapped step was the slower one, not a bug)."""
    if hidden.hi < 0:
        return ("Below 0: the overlapped DDP step was slower than the serial one, so overlap "
                "cost more than it hid (on loopback the all-reduces are CPU copies competing "
                "with the backward for the same cores).")
    if hidden.lo < 0:
        return ("The interval includes 0 and negative values: no measurable share is hidden "
                "(a negative value means the overlapped step was the slower one; noise or "
                "the copies competing with the backward for the cores).")
    if hidden.lo > 1:
        return ("Above 1: the overlapped step was faster than the step without any "
                "communication: noise between rounds; measure again on a quiet machine.")
    return (f"Overlap hid {hidden.lo:.0%} to {hidden.hi:.0%} of what synchronising costs "
            "(0: nothing, 1: all of it).")


def ms(iv: Interval) -> str:
    return f"{iv.point * 1e3:.2f} ms [{iv.lo * 1e3:.2f}, {iv.hi * 1e3:.2f}]"


def report(args, w, sizes, over, single, prof, step) -> dict:
    seed = args.seed
    print(f"# Data parallel over MPI ({w} ranks, {time.strftime('%Y-%m-%d %H:%M')})\n")
    print(f"mpi4py {__import__('mpi4py').__version__}, "
          f"{__import__('mpi4py.MPI', fromlist=['MPI']).Get_library_version().splitlines()[0]}"
          f"; {args.workers} engine worker(s) per rank; {args.reps} rounds\n")
    print("## All-reduce (pa.distributed.all_reduce, float64, in place)\n")
    print("| bytes | time | bus bandwidth |\n|---:|---:|---:|")
    meds = []
    for n in SIZES:
        iv = median_interval(sizes[n], seed_for(seed, "allreduce", n))
        meds.append(iv.point)
        bw = 2 * (w - 1) / w * n / iv.point
        print(f"| {n:,} | {ms(iv)} | {bw / 1e9:.2f} GB/s |")
    a, b = fit(SIZES, meds)
    print(f"\nfit: time = {a * 1e6:.1f} us + bytes / {1 / b / 1e9:.2f} GB/s\n")
    nbytes = sum(buf.nbytes for buf in step.buffers)
    print(f"## Overlap: MLP {args.layers}x{args.width}, batch {args.batch} per rank, "
          f"{nbytes / 2**20:.1f} MiB of gradients in {len(step.buffers)} buckets "
          f"(bucket_cap_mb={args.bucket_cap_mb}, gradient_as_bucket_view={args.bucket_view})\n")
    print("| configuration | step (forward + backward) |\n|---|---:|")
    for c in CONFIGS:
        print(f"| {c} | {ms(median_interval(over[c], seed_for(seed, 'overlap', c)))} |")
    boot = boot_medians(over, seed_for(seed, "overlap-boot"))
    med = {c: float(np.median(v)) for c, v in over.items()}

    def hid(m):
        return (m["serial"] - m["ddp"]) / (m["serial"] - m["local"])
    hidden = interval(hid(boot), hid(med))
    speed = interval(boot["serial"] / boot["ddp"], med["serial"] / med["ddp"])
    print(f"\nhidden share of the synchronisation: {ratio_text(hidden, 2, '')} "
          f"((serial - ddp) / (serial - local)); serial / ddp: {ratio_text(speed)}")
    print(hidden_meaning(hidden))
    if prof:
        print(f"profiled ddp step (trace: {prof['trace']}): the first all-reduce started with "
              f"{prof['backward_after_first_start']:.0%} of the backward still to run; "
              f"exposed wait {prof['exposed_wait_s'] * 1e3:.2f} ms of "
              f"{prof['comm_spans_s'] * 1e3:.2f} ms of all-reduce spans (rank 0)")
    one = median_interval(single, seed_for(seed, "single"))
    print("\n## Scaling model (step = compute / p + DDP's copies + exposed communication)\n")
    print(f"measured: 1 rank on the whole batch {ms(one)}; {w} ranks (ddp) "
          f"{ms(median_interval(over['ddp'], seed_for(seed, 'overlap', 'ddp')))}\n")
    last = step.buffers[-1].nbytes
    after = prof.get("backward_after_first_start", 1.0) * prof.get("backward_share", 1.0) \
        if prof else 1.0
    copies = max(0.0, med["serial"] - med["local"] - med["comm"])
    print(f"DDP's copies (serial - local - comm): {copies * 1e3:.2f} ms a step; overlap window "
          f"on one rank: {after:.0%} of the step (the backward after the first bucket "
          f"starts)\n")
    nets = [("loopback (measured fit; its transfers are CPU copies on the cores that compute, "
             "so no overlap window)", a, b, 0.0),
            (f"{args.net_gbps:g} Gb/s network, {args.net_latency_us:g} us latency (assumed; "
             "transfers off the CPU, overlap window as measured)",
             args.net_latency_us * 2e-6, 8 / (args.net_gbps * 1e9), after * one.point)]
    out = {"allreduce": {str(n): sizes[n] for n in SIZES}, "fit": {"a": a, "b": b},
           "overlap": over, "hidden": hidden.as_dict(), "serial_over_ddp": speed.as_dict(),
           "single": single, "profiled": prof, "copies_s": copies, "models": {}}
    for name, na, nb, window in nets:
        rows = model_rows(one.point, window, copies, nbytes, last, na, nb)
        out["models"][name] = rows
        print(f"### {name}\n\n| ranks | step | exposed comm | speedup | efficiency | measured |")
        print("|---:|---:|---:|---:|---:|---:|")
        for row in rows:
            p = row["ranks"]
            meas = one.point if p == 1 else med["ddp"] if p == w and name.startswith("loop") \
                else None
            mtxt = "" if meas is None else f"{meas * 1e3:.2f} ms"
            print(f"| {p} | {row['step_s'] * 1e3:.2f} ms | {row['exposed_s'] * 1e3:.2f} ms | "
                  f"{row['speedup']:.2f}x | {row['efficiency']:.0%} | {mtxt} |")
        print()
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m stress.compare.mpi", formatter_class=HelpFormatter,
        description="The data-parallel benchmark, run under MPI with 2 or more ranks: "
                    "`mpiexec -n 2 python -m stress.compare.mpi` (`make bench-mpi`). "
                    "All-reduce throughput, the share of DDP's synchronisation hidden "
                    "behind the backward, a profiled step's merged trace and a scaling "
                    "model; rank 0 prints the report (markdown). See the module docstring "
                    "(stress/compare/mpi.py) for the method.")
    p.add_argument("--reps", type=int, default=15,
                   help="rounds of each measurement (after a warm-up round)")
    p.add_argument("--quick", action="store_true",
                   help="5 rounds, a smaller MLP (--reps 5 --width 512 --layers 4)")
    p.add_argument("--width", type=int, default=1024, help="hidden width of the MLP")
    p.add_argument("--layers", type=int, default=6, help="hidden layers (Linear + Tanh) of the MLP")
    p.add_argument("--batch", type=int, default=128, help="samples per rank and step")
    p.add_argument("--bucket-cap-mb", type=float, default=25.0,
                   help="DDP's bucket size, MB (as in PyTorch)")
    p.add_argument("--bucket-view", action="store_true",
                   help="DDP(gradient_as_bucket_view=True): no copy into .grad")
    p.add_argument("--workers", type=int, default=1,
                   help="engine threads per rank (1 also pins BLAS to one thread)")
    p.add_argument("--net-gbps", type=float, default=10.0,
                   help="bandwidth of the assumed network of the scaling model, Gb/s")
    p.add_argument("--net-latency-us", type=float, default=20.0,
                   help="latency of the assumed network of the scaling model, us")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and data")
    p.add_argument("--trace", metavar="FILE.json", default=None,
                   help="where rank 0 writes the profiled step's merged Chrome trace "
                        "(default: a new file parallel_autograd_mpi_trace_*.json in the "
                        "temporary directory; the report names it)")
    p.add_argument("--out", metavar="FILE.json", help="write every sample as JSON here")
    p.add_argument("--plot", metavar="FILE.png",
                   help="draw the profiled step's timeline (PNG, needs matplotlib)")
    return p


def main(argv=None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    if args.quick:
        args.reps, args.width, args.layers = 5, 512, 4
    dist.init()
    w = dist.world_size()
    if w < 2:
        print("run it under mpiexec with 2 or more ranks: make bench-mpi", file=sys.stderr)
        return 2
    with threadpool_limits(1) if args.workers == 1 else contextlib.nullcontext():
        step = Step(args, dist.rank())
        for _ in range(2):  # warm up every path
            for c in CONFIGS:
                step.run(c)
        sizes = allreduce_sizes(args.reps)
        over = overlap(step, args.reps)
        single = single_rank(step, args.reps)
        prof = profiled(step, args.trace, args.plot)
    if dist.rank() == 0:
        out = report(args, w, sizes, over, single, prof, step)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(out, f, indent=1)
    dist.barrier()
    return 0


if __name__ == "__main__":
    sys.exit(main())
