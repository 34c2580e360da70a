"""Kernel rows (issue 28): exact GELU, log_softmax/softmax and layer_norm, forward and
forward+backward, float32 and float64, against PyTorch at the same thread count.

    PYTHONPATH=. python -m stress.compare.kernel_rows [--rows gelu,log_softmax,...]
                                                      [--reps N] [--dtypes float32,float64]
    PYTHONPATH=. python -m stress.compare.kernel_rows --old-new [--reps N]

`--old-new`: this branch's kernels against the code they replaced, in one process, in
process CPU time (less disturbed by other processes than wall time on a shared
machine): float32 GELU through the float64 erf (the old path) or the float32 one, and
softmax/log_softmax with the row blocks off (the whole-array code) or on.

Each row's two libraries run interleaved call by call (`--reps` rounds, the order
alternated each round, the cyclic GC off); a figure is the median over rounds in ms and
the ratio ours / torch is the median of the per-round ratios. torch runs on 2 threads
(`torch.set_num_threads(2)`), numpy's BLAS on 2 as well (threadpoolctl when installed).
Backward: `y.backward(g)` with a fixed cotangent `g` (both libraries), the forward
included. The numbers are for docs/benchmarks.md: no test asserts on them.
"""
from __future__ import annotations

import argparse
import gc
import os
import time

import numpy as np

import parallel_autograd as pa
import parallel_autograd.nn.functional as F


def _cases():
    """(name, shape, pa function, torch function, needs parameters)."""
    import torch
    import torch.nn.functional as TF

    def ln(lib, d):
        return lambda x, w, b: lib.layer_norm(x, (d,), w, b)
    return [
        ("gelu", (64, 256, 256), lambda x: F.gelu(x), lambda x: TF.gelu(x), None),
        ("log_softmax", (4096, 10000), lambda x: F.log_softmax(x, -1),
         lambda x: TF.log_softmax(x, -1), None),
        ("log_softmax", (4096, 10000, 0), lambda x: F.log_softmax(x, 0),
         lambda x: TF.log_softmax(x, 0), None),
        ("log_softmax", (64, 1000), lambda x: F.log_softmax(x, -1),
         lambda x: TF.log_softmax(x, -1), None),
        ("log_softmax", (64, 1000, 0), lambda x: F.log_softmax(x, 0),
         lambda x: TF.log_softmax(x, 0), None),
        ("softmax", (4096, 10000), lambda x: F.softmax(x, -1),
         lambda x: torch.softmax(x, -1), None),
        ("softmax", (64, 1000), lambda x: F.softmax(x, -1),
         lambda x: torch.softmax(x, -1), None),
        ("softmax", (64, 1000, 0), lambda x: F.softmax(x, 0),
         lambda x: torch.softmax(x, 0), None),
        ("layer_norm", (256, 768), ln(F, 768), ln(TF, 768), 768),
        ("layer_norm", (8192, 64), ln(F, 64), ln(TF, 64), 64),
    ]


def _time(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _callables(case, dtype, rng):
    import torch
    name, shape, fpa, fth, d = case
    shape = shape[:2] if name != "gelu" else shape
    x = rng.standard_normal(shape).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    px, tx = pa.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    pg, tg = pa.tensor(g), torch.tensor(g)
    extra_p, extra_t = (), ()
    if d is not None:
        w, b = rng.standard_normal(d).astype(dtype), rng.standard_normal(d).astype(dtype)
        extra_p = (pa.tensor(w, requires_grad=True), pa.tensor(b, requires_grad=True))
        extra_t = (torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True))

    def pa_fwd():
        with pa.no_grad():
            fpa(px, *extra_p)

    def pa_bwd():
        fpa(px, *extra_p).backward(pg)
        px.grad = None
        for p in extra_p:
            p.grad = None

    def th_fwd():
        with torch.no_grad():
            fth(tx, *extra_t)

    def th_bwd():
        fth(tx, *extra_t).backward(tg)
        tx.grad = None
        for p in extra_t:
            p.grad = None
    ya = fpa(px, *extra_p).numpy()
    yb = fth(tx, *extra_t).detach().numpy()
    err = float(np.max(np.abs(ya.astype(np.float64) - yb)))
    return (pa_fwd, th_fwd), (pa_bwd, th_bwd), err


def _measure(pair, reps: int) -> tuple:
    a, b = pair
    ta, tb = [], []
    for f in pair:
        f()                             # warm up (allocator, caches)
    for r in range(reps):
        order = ((a, ta), (b, tb)) if r % 2 == 0 else ((b, tb), (a, ta))
        for f, acc in order:
            acc.append(_time(f))
    ta, tb = np.array(ta), np.array(tb)
    return np.median(ta) * 1e3, np.median(tb) * 1e3, float(np.median(ta / tb))


def _old_new(reps: int) -> None:
    """Old against new code paths, interleaved, medians of process CPU time."""
    from parallel_autograd.ops import reduce as R
    from parallel_autograd.ops import special as S
    f32, rows = S._F32, R._rows
    rng = np.random.default_rng(0)
    print("| op | shape | dtype | kind | old ms | new ms | new/old |")
    print("|---|---|---|---|---|---|---|")

    def setter(module, name, old, new):
        return lambda v: setattr(module, name, old if v == "old" else new)
    plans = [("gelu", (64, 256, 256), ["float32"], lambda x: F.gelu(x),
              setter(S, "_F32", S._F64, f32))]
    for name in ("log_softmax", "softmax"):
        fn = getattr(F, name)
        for shape in ((4096, 10000), (64, 1000)):
            plans.append((name, shape, ["float32", "float64"],
                          lambda x, fn=fn: fn(x, -1),
                          setter(R, "_rows", lambda *a, d: None, rows)))
    for name, shape, dtypes, fn, use in plans:
        for dtype in dtypes:
            x = rng.standard_normal(shape).astype(dtype)
            px = pa.tensor(x, requires_grad=True)
            g = pa.tensor(rng.standard_normal(shape).astype(dtype))

            def fwd():
                with pa.no_grad():
                    fn(px)

            def bwd():
                fn(px).backward(g)
                px.grad = None
            for kind, f in (("fwd", fwd), ("fwd+bwd", bwd)):
                ts = {"old": [], "new": []}
                for _ in range(reps):
                    for v in ts:
                        use(v)
                        t = time.process_time()
                        f()
                        ts[v].append(time.process_time() - t)
                o, n = (np.median(ts[v]) * 1e3 for v in ("old", "new"))
                print(f"| {name} | {'x'.join(map(str, shape))} | {dtype} | {kind} | "
                      f"{o:.1f} | {n:.1f} | {n / o:.2f} |", flush=True)
    S._F32, R._rows = f32, rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="gelu,log_softmax,softmax,layer_norm")
    p.add_argument("--dtypes", default="float32,float64")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--old-new", action="store_true", help="old against new code paths")
    args = p.parse_args(argv)
    if args.old_new:
        gc.disable()
        print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load "
              f"{os.getloadavg()[0]:.1f}, reps {args.reps}, process CPU time")
        _old_new(args.reps)
        return
    import torch
    torch.set_num_threads(2)
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(2)
    except ImportError:
        pass
    rows = args.rows.split(",")
    gc.disable()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load "
          f"{os.getloadavg()[0]:.1f}, reps {args.reps}, torch {torch.__version__}")
    print("| op | shape, dim | dtype | fwd ours | fwd torch | ratio | fwd+bwd ours | "
          "fwd+bwd torch | ratio | max abs err vs torch |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for case in _cases():
        if case[0] not in rows:
            continue
        for dtype in args.dtypes.split(","):
            fwd, bwd, err = _callables(case, np.dtype(dtype), rng)
            f = _measure(fwd, args.reps)
            b = _measure(bwd, args.reps)
            shape = case[1]
            dim = f", dim={shape[2]}" if len(shape) == 3 and case[0] != "gelu" else \
                (", dim=-1" if "softmax" in case[0] else "")
            shp = "x".join(map(str, shape[:2] if case[0] != "gelu" else shape)) + dim
            print(f"| {case[0]} | {shp} | {dtype} | {f[0]:.2f} | {f[1]:.2f} | {f[2]:.2f}x | "
                  f"{b[0]:.2f} | {b[1]:.2f} | {b[2]:.2f}x | {err:.1e} |", flush=True)
            gc.collect()


if __name__ == "__main__":
    main()
