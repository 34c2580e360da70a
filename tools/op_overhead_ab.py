"""Per-op cost of two versions of the package, interleaved in one process.

    git archive <commit> parallel_autograd | tar -x -C /tmp/old
    mv /tmp/old/parallel_autograd /tmp/old/pa_old
    python tools/op_overhead_ab.py --old /tmp/old [--reps 15] [--calls 300]

Imports the checkout's `parallel_autograd` and the old copy (renamed `pa_old`, importable
because the package's imports are relative) side by side; for each op, on small float64
inputs (so the per-op Python cost dominates), times `calls` forward calls (recorded: the
inputs require grad) and `calls` forward+backward calls (`backward(op(...).sum())`,
the sequential engine), the two versions alternating in every repetition. Prints, per op,
the median time per call of each version and the median of the per-repetition ratios
new/old with a 95% bootstrap interval of that median. `--size` sets the side of the square
inputs (default 8), `--ops add,mul` picks ops. Times are the calling thread's CPU time by
default (`--clock thread`: the sequential engine runs on it; on a shared machine the time
other processes hold the core is left out), `--clock wall` for wall time.

`--torch` times PyTorch too (one thread, `torch.set_num_threads(1)`, the same ops on the
same float64 inputs requiring grad, `op(...).sum().backward()`), in the same rotation,
and adds its median times and the new/torch ratio with its 95% interval: our cost per
recorded op against PyTorch's (issue 28).
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def _cases(pa, size: int = 8):
    """{name: a forward call} on `pa`'s inputs; `pa` is a version of the package, or torch."""
    F = pa.nn.functional
    rng = np.random.default_rng(0)

    def t(*shape):
        return pa.tensor(rng.standard_normal(shape), requires_grad=True)

    a, b, m, n = t(size, size), t(size, size), t(16, 32), t(32, 16)
    pos = pa.tensor(rng.uniform(1, 2, (size, size)), requires_grad=True)
    img, w = t(2, 3, 8, 8), t(4, 3, 3, 3)
    target = pa.tensor(np.arange(16) % 32)
    return {
        "add": lambda: a + b,
        "sub": lambda: a - b,
        "mul": lambda: a * b,
        "div": lambda: a / pos,
        "add(scalar)": lambda: a + 1.0,
        "sin": lambda: a.sin(),
        "exp": lambda: a.exp(),
        "tanh": lambda: a.tanh(),
        "relu": lambda: F.relu(a),
        "sum": lambda: a.sum(),
        "sum(dim)": lambda: a.sum(1),
        "mean": lambda: a.mean(),
        "matmul": lambda: m @ n,
        "mm(small)": lambda: a @ b,
        "einsum": lambda: pa.einsum("ij,jk->ik", a, b),
        "getitem(slice)": lambda: a[1:5, ::2],
        "reshape": lambda: a.reshape(4, 16),
        "transpose": lambda: a.transpose(0, 1),
        "softmax": lambda: F.softmax(a, dim=1),
        "softmax(dim0)": lambda: F.softmax(a, dim=0),
        "log_softmax": lambda: F.log_softmax(a, dim=1),
        "cross_entropy": lambda: F.cross_entropy(m, target),
        "linear": lambda: F.linear(m, n.transpose(0, 1)),
        "layer_norm": lambda: F.layer_norm(a, (size,)),
        "conv2d": lambda: F.conv2d(img, w, padding=1),
        "cat": lambda: pa.cat([a, b], 0),
        "where": lambda: pa.where(a > 0, a, b),
        "stack": lambda: pa.stack([a, b]),
        "unsqueeze": lambda: a.unsqueeze(0),
        "view": lambda: a.view(-1),
        "permute": lambda: a.permute(1, 0),
        "getitem(int)": lambda: a[2],
        "sigmoid": lambda: a.sigmoid(),
        "pow": lambda: a ** 2,
        "neg": lambda: -a,
        "max(dim)": lambda: a.max(1)[0],
    }


def _ci(r: np.ndarray, n_boot: int = 2000) -> tuple:
    """A 95% bootstrap interval of the median of `r`."""
    rng = np.random.default_rng(1)
    meds = np.median(rng.choice(r, (n_boot, len(r))), axis=1)
    return tuple(np.percentile(meds, [2.5, 97.5]))


def _time(fn, calls: int, clock=time.thread_time) -> float:
    t0 = clock()
    for _ in range(calls):
        fn()
    return (clock() - t0) / calls


def _backward(lib):
    """`fn -> backward(fn().sum())` for a version of the package, or torch."""
    if getattr(lib, "__name__", "") == "torch":
        return lambda fn: fn().sum().backward()
    return lambda fn: lib.backward(fn().sum())


def _row(name: str, times: dict, versions: tuple) -> str:
    row = f"{name:15s}"
    for w in ("f", "fb"):
        old, new = np.array(times["old", w]), np.array(times["new", w])
        r = new / old
        lo, hi = _ci(r)
        row += (f" {np.median(old) * 1e6:10.1f} {np.median(new) * 1e6:10.1f} "
                f"{np.median(r):8.3f} [{lo:.2f}-{hi:.2f}]")
        if "torch" in versions:
            tt = np.array(times["torch", w])
            r = new / tt
            lo, hi = _ci(r)
            row += f" {np.median(tt) * 1e6:10.1f} {np.median(r):8.3f} [{lo:.2f}-{hi:.2f}]"
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", required=True, help="directory holding the old copy, pa_old/")
    p.add_argument("--reps", type=int, default=15, help="repetitions (default 15)")
    p.add_argument("--calls", type=int, default=300, help="calls per timing (default 300)")
    p.add_argument("--size", type=int, default=8, help="side of the square inputs (default 8)")
    p.add_argument("--ops", default="", help="comma-separated op names (default: all)")
    p.add_argument("--clock", choices=("thread", "wall"), default="thread",
                   help="thread: this thread's CPU time (default; on a shared machine it "
                        "leaves out the time other processes hold the core); wall")
    p.add_argument("--torch", action="store_true",
                   help="time PyTorch too (one thread): its columns and new/torch")
    args = p.parse_args(argv)
    clock = time.thread_time if args.clock == "thread" else time.perf_counter
    sys.path.insert(0, args.old)
    import pa_old  # noqa: E402
    import parallel_autograd as pa_new  # noqa: E402
    libs = {"old": pa_old, "new": pa_new}
    if args.torch:
        import torch  # noqa: E402
        torch.set_num_threads(1)
        libs["torch"] = torch
    cases = {k: _cases(lib, args.size) for k, lib in libs.items()}
    backwards = {k: _backward(lib) for k, lib in libs.items()}
    versions = tuple(libs)
    head = f"{'op':15s}"
    for w in ("fwd", "f+b"):
        head += f" {w + ' old us':>10s} {w + ' new us':>10s} {'new/old [95% CI]':>20s}"
        if args.torch:
            head += f" {w + ' torch us':>10s} {'new/torch [95% CI]':>20s}"
    print(head)
    names = args.ops.split(",") if args.ops else list(cases["new"])
    for name in names:
        times = {(k, w): [] for k in libs for w in ("f", "fb")}
        for rep in range(args.reps):
            order = versions[rep % len(versions):] + versions[:rep % len(versions)]
            order = order if rep % 2 == 0 else order[::-1]
            for k in order:
                fn, bw = cases[k][name], backwards[k]
                times[k, "f"].append(_time(fn, args.calls, clock))
                times[k, "fb"].append(_time(lambda fn=fn, bw=bw: bw(fn),
                                            args.calls // 3, clock))
        print(_row(name, times, versions), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
