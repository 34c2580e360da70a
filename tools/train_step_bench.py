"""One training step (forward, backward, Adam step) of an MLP and a small CNN, in
parallel_autograd and in PyTorch, float32 (both libraries' default) and float64.

    PYTHONPATH=. python tools/train_step_bench.py [--threads N] [--reps R]

Prints the median step time in ms per model, dtype and library. `--threads` sets both
libraries' intra-op threads and numpy's BLAS threads through the environment, so it must
be given before numpy is imported: the script re-executes itself with the variables set.
Results: docs/benchmarks.md, "float32 by default".
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def _models(lib):
    nn = lib.nn
    mlp = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                        nn.Linear(512, 10))
    cnn = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(32 * 8 * 8, 10))
    return {"mlp": (mlp, (128, 256)), "cnn": (cnn, (64, 3, 32, 32))}


def _time(lib, name: str, dtype: str, reps: int) -> float:
    import numpy as np
    lib.manual_seed(0)
    lib.set_default_dtype(getattr(lib, dtype))
    model, shape = _models(lib)[name]
    rng = np.random.default_rng(0)
    x = lib.from_numpy(rng.standard_normal(shape).astype(dtype))
    y = lib.from_numpy(rng.integers(0, 10, shape[0]).astype(np.int64))
    opt = lib.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = lib.nn.CrossEntropyLoss()
    times = []
    for i in range(reps + 3):  # 3 warm-up steps
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if i >= 3:
            times.append(time.perf_counter() - t0)
    assert str(loss.dtype).endswith(dtype), loss.dtype
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=0, help="0: each library's default")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    if args.threads and os.environ.get("_TSB_THREADS") != str(args.threads):
        env = dict(os.environ, _TSB_THREADS=str(args.threads),
                   **{k: str(args.threads) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                     "MKL_NUM_THREADS")})
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    import parallel_autograd as pa
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
        pa.set_num_threads(args.threads)
    print(f"threads: {args.threads or 'default'} (torch {torch.get_num_threads()}, "
          f"pa {pa.get_num_threads()}); median of {args.reps} steps, ms")
    for name in ("mlp", "cnn"):
        for dtype in ("float32", "float64"):
            ours = _time(pa, name, dtype, args.reps)
            theirs = _time(torch, name, dtype, args.reps)
            print(f"{name} {dtype}: pa {ours:.2f}  torch {theirs:.2f}  ratio "
                  f"{ours / theirs:.2f}")
    torch.set_default_dtype(torch.float32)


if __name__ == "__main__":
    main()
