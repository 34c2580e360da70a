"""Per-op cost of two versions of the package, interleaved in one process.

    git archive <commit> parallel_autograd | tar -x -C /tmp/old
    mv /tmp/old/parallel_autograd /tmp/old/pa_old
    python tools/op_overhead_ab.py --old /tmp/old [--reps 15] [--calls 300]

Imports the checkout's `parallel_autograd` and the old copy (renamed `pa_old`, importable
because the package's imports are relative) side by side; for each op, on small float64
inputs (so the per-op Python cost dominates), times `calls` forward calls (recorded: the
inputs require grad) and `calls` forward+backward calls (`backward(op(...).sum())`,
the sequential engine), the two versions alternating in every repetition. Prints, per op,
the median time per call of each version and the median ratio new/old with its
interquartile range over the repetitions.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def _cases(pa):
    F = pa.nn.functional
    rng = np.random.default_rng(0)

    def t(*shape):
        return pa.tensor(rng.standard_normal(shape), requires_grad=True)

    a, b, m, n = t(8, 8), t(8, 8), t(16, 32), t(32, 16)
    img, w = t(2, 3, 8, 8), t(4, 3, 3, 3)
    target = pa.tensor(np.arange(16) % 32)
    return {
        "add": lambda: a + b,
        "mul": lambda: a * b,
        "sin": lambda: a.sin(),
        "exp": lambda: a.exp(),
        "tanh": lambda: a.tanh(),
        "relu": lambda: F.relu(a),
        "sum(dim)": lambda: a.sum(1),
        "mean": lambda: a.mean(),
        "matmul": lambda: m @ n,
        "getitem": lambda: a[1:5, ::2],
        "reshape": lambda: a.reshape(4, 16),
        "transpose": lambda: a.transpose(0, 1),
        "softmax": lambda: F.softmax(a, dim=1),
        "log_softmax": lambda: F.log_softmax(a, dim=1),
        "cross_entropy": lambda: F.cross_entropy(m, target),
        "linear": lambda: F.linear(m, n.transpose(0, 1)),
        "layer_norm": lambda: F.layer_norm(a, (8,)),
        "conv2d": lambda: F.conv2d(img, w, padding=1),
        "cat": lambda: pa.cat([a, b], 0),
        "where": lambda: pa.where(a > 0, a, b),
    }


def _time(fn, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", required=True, help="directory holding the old copy, pa_old/")
    p.add_argument("--reps", type=int, default=15, help="repetitions (default 15)")
    p.add_argument("--calls", type=int, default=300, help="calls per timing (default 300)")
    args = p.parse_args(argv)
    sys.path.insert(0, args.old)
    import pa_old  # noqa: E402
    import parallel_autograd as pa_new  # noqa: E402
    libs = {"old": pa_old, "new": pa_new}
    cases = {k: _cases(lib) for k, lib in libs.items()}
    print(f"{'op':15s} {'fwd old us':>10s} {'fwd new us':>10s} {'ratio (IQR)':>20s} "
          f"{'f+b old us':>10s} {'f+b new us':>10s} {'ratio (IQR)':>20s}")
    for name in cases["new"]:
        times = {(k, w): [] for k in libs for w in ("f", "fb")}
        for rep in range(args.reps):
            order = ("old", "new") if rep % 2 == 0 else ("new", "old")
            for k in order:
                fn, lib = cases[k][name], libs[k]
                times[k, "f"].append(_time(fn, args.calls))
                times[k, "fb"].append(_time(lambda fn=fn, lib=lib: lib.backward(fn().sum()),
                                            args.calls // 3))
        row = f"{name:15s}"
        for w in ("f", "fb"):
            old, new = np.array(times["old", w]), np.array(times["new", w])
            r = new / old
            q1, q2, q3 = np.percentile(r, [25, 50, 75])
            row += (f" {np.median(old) * 1e6:10.1f} {np.median(new) * 1e6:10.1f} "
                    f"{q2:8.3f} ({q1:.2f}-{q3:.2f})")
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
