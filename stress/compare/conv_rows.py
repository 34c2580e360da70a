"""Conv kernel rows (issue 28): conv2d forward, input gradient and weight gradient apart,
and conv_transpose2d forward, float32 and float64, against PyTorch at the same thread count.

    PYTHONPATH=. python -m stress.compare.conv_rows [--cases mnist1,...] [--reps N]
                                                    [--threads 1,2] [--dtypes float32,...]
                                                    [--parts fwd,gx,gw,step]
    git show REV:parallel_autograd/nn/_conv.py > /tmp/old_conv.py
    PYTHONPATH=. python -m stress.compare.conv_rows --old /tmp/old_conv.py [--parts fwd,gx]

`--old FILE`: an earlier nn/_conv.py's kernels (`_apply`, `_input_of`, `_weight_of`)
against this tree's, interleaved in one process (ratio new/old, and the max relative
difference of the results); the transposed cases' `fwd` is Bx*.

Parts: `fwd` the forward (no grad); `gx` the input gradient and `gw` the weight gradient
alone (ours: the kernels `_input_of` / `_weight_of` with the columns rebuilt; torch:
`aten.convolution_backward` with that output mask); `step` forward + `y.backward(g)`
through autograd (ours keeps the columns for the weight gradient). Each row's two
libraries run interleaved call by call (the order alternated each round, the cyclic GC
off); figures are medians in ms, the ratio is the median of per-round ratios with a 95%
bootstrap interval of that median. torch at `torch.set_num_threads(t)`, numpy's BLAS at `t` threads
(threadpoolctl). For docs/benchmarks.md; no test asserts on these numbers.
"""
from __future__ import annotations

import argparse
import gc
import os
import time

import numpy as np

import parallel_autograd as pa
import parallel_autograd.nn.functional as F
from parallel_autograd.nn import _conv

# name: (N, C, O, H, W, k, stride, padding, dilation, transposed)
CASES = {
    "mnist1": (64, 1, 32, 28, 28, 3, 1, 0, 1, False),
    "mnist2": (64, 32, 64, 26, 26, 3, 1, 0, 1, False),
    "dcgan_d1": (32, 3, 64, 64, 64, 4, 2, 1, 1, False),
    "dcgan_d2": (32, 64, 128, 32, 32, 4, 2, 1, 1, False),
    "dcgan_g1": (32, 128, 64, 16, 16, 4, 2, 1, 1, True),    # conv_transpose2d 16 -> 32
    "dcgan_g2": (32, 64, 3, 32, 32, 4, 2, 1, 1, True),      # conv_transpose2d 32 -> 64
    "resnet": (32, 64, 64, 16, 16, 3, 1, 1, 1, False),
    "dilated": (16, 32, 32, 32, 32, 3, 1, 2, 2, False),
}


def _callables(case, dtype, rng):
    """{part: (ours, torch)} and the forward's max abs error against torch."""
    import torch
    n, c, o, h, wd, k, s, p, d, tr = CASES[case]
    x = rng.standard_normal((n, c, h, wd)).astype(dtype)
    wshape = (c, o, k, k) if tr else (o, c, k, k)
    w = (rng.standard_normal(wshape) / np.sqrt(c * k * k)).astype(dtype)
    px, tx = pa.Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    pw, tw = pa.Tensor(w, requires_grad=True), torch.tensor(w, requires_grad=True)
    if tr:
        fpa = lambda a, b: F.conv_transpose2d(a, b, None, s, p)          # noqa: E731
        fth = lambda a, b: torch.nn.functional.conv_transpose2d(a, b, None, s, p)  # noqa
    else:
        fpa = lambda a, b: F.conv2d(a, b, None, s, p, d)                 # noqa: E731
        fth = lambda a, b: torch.nn.functional.conv2d(a, b, None, s, p, d)  # noqa: E731
    ya = fpa(px, pw).numpy()
    yb = fth(tx, tw).detach().numpy()
    err = float(np.max(np.abs(ya.astype(np.float64) - yb)))
    g = rng.standard_normal(ya.shape).astype(dtype)
    pg, tg = pa.Tensor(g), torch.tensor(g)
    out = {}

    def pa_fwd():
        with pa.no_grad():
            fpa(px, pw)

    def th_fwd():
        with torch.no_grad():
            fth(tx, tw)
    out["fwd"] = (pa_fwd, th_fwd)
    if not tr:
        geom = dict(stride=(s, s), padding=(p, p), dilation=(d, d), groups=1)
        conv_bwd = torch.ops.aten.convolution_backward
        tx_, tw_ = tx.detach(), tw.detach()

        def th(mask):
            return lambda: conv_bwd(tg, tx_, tw_, None, [s, s], [p, p], [d, d], False,
                                    [0, 0], 1, mask)
        out["gx"] = (lambda: _conv._input_of(g, w, x.shape, geom), th([True, False, False]))
        out["gw"] = (lambda: _conv._weight_of(g, None, x, w.shape, geom),
                     th([False, True, False]))

    def pa_step():
        fpa(px, pw).backward(pg)
        px.grad = pw.grad = None

    def th_step():
        fth(tx, tw).backward(tg)
        tx.grad = tw.grad = None
    out["step"] = (pa_step, th_step)
    return out, err


def _measure(pair, reps: int) -> tuple:
    a, b = pair
    ta, tb = [], []
    for f in pair:
        f()
        f()
    for r in range(reps):
        order = ((a, ta), (b, tb)) if r % 2 == 0 else ((b, tb), (a, ta))
        for f, acc in order:
            t = time.perf_counter()
            f()
            acc.append(time.perf_counter() - t)
    ta, tb = np.array(ta), np.array(tb)
    r = ta / tb
    boot = np.median(np.random.default_rng(1).choice(r, (2000, len(r))), axis=1)
    lo, hi = np.quantile(boot, [0.025, 0.975])
    return np.median(ta) * 1e3, np.median(tb) * 1e3, np.array([lo, np.median(r), hi])


def _load_old(path: str):
    """The module in `path` (an nn/_conv.py), its relative imports made absolute."""
    import importlib.util
    import re
    import sys
    import tempfile
    src = open(path).read()
    src = re.sub(r"from \.\. import", "from parallel_autograd import", src)
    src = re.sub(r"from \.\.([a-z_.]+) import", r"from parallel_autograd.\1 import", src)
    src = re.sub(r"from \.([a-z_]+) import", r"from parallel_autograd.nn.\1 import", src)
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location("conv_old", f.name)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["conv_old"] = mod
    spec.loader.exec_module(mod)
    return mod


def _kernels(case, dtype, rng) -> dict:
    """{part: f(module)} calling a conv module's kernels on the case's arrays."""
    n, c, o, h, wd, k, s, p, d, tr = CASES[case]
    geom = dict(stride=(s, s), padding=(p, p), dilation=(d, d), groups=1)
    x = rng.standard_normal((n, c, h, wd)).astype(dtype)
    if tr:                                  # conv_transpose2d's forward: Bx*(x, w)
        w = rng.standard_normal((c, o, k, k)).astype(dtype)
        xs = (n, o) + tuple((a - 1) * s - 2 * p + d * (k - 1) + 1 for a in (h, wd))
        return {"fwd": lambda m: m._input_of(x, w, xs, geom)}
    w = rng.standard_normal((o, c, k, k)).astype(dtype)
    out_sz = _conv._out_sizes("conv2d", (h, wd), (k, k), (s, s), (p, p), (p, p), (d, d))
    g = rng.standard_normal((n, o) + out_sz).astype(dtype)
    return {"fwd": lambda m: m._apply(x, w, geom, out_sz)[0],
            "gx": lambda m: m._input_of(g, w, x.shape, geom),
            "gw": lambda m: m._weight_of(g, None, x, w.shape, geom)}


def _old_new(args) -> None:
    from threadpoolctl import threadpool_limits
    old = _load_old(args.old)
    print("| case | dtype | thr | part | old ms | new ms | new/old [95% CI] | rel diff |")
    print("|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for t in map(int, args.threads.split(",")):
        with threadpool_limits(t, user_api="blas"):
            for case in args.cases.split(","):
                for dtype in args.dtypes.split(","):
                    fs = _kernels(case, np.dtype(dtype), rng)
                    for part in args.parts.split(","):
                        if part not in fs:
                            continue
                        f = fs[part]
                        ra, rb = f(old), f(_conv)
                        diff = np.max(np.abs(ra - rb)) / max(1e-30, np.max(np.abs(ra)))
                        a, b, q = _measure((lambda: f(old), lambda: f(_conv)), args.reps)
                        q = 1 / q[::-1]                 # new/old quantiles
                        print(f"| {case} | {dtype} | {t} | {part} | {a:.2f} | {b:.2f} | "
                              f"{q[1]:.2f} [{q[0]:.2f}, {q[2]:.2f}] | {diff:.1e} |",
                              flush=True)
                    gc.collect()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--dtypes", default="float32,float64")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--parts", default="fwd,gx,gw,step")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--old", help="an earlier nn/_conv.py to run against this tree's")
    args = p.parse_args(argv)
    if args.old:
        gc.disable()
        print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load "
              f"{os.getloadavg()[0]:.1f}, reps {args.reps}, old {args.old}")
        _old_new(args)
        return
    import torch
    from threadpoolctl import threadpool_limits
    gc.disable()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load "
          f"{os.getloadavg()[0]:.1f}, reps {args.reps}, torch {torch.__version__}")
    print("| case | dtype | thr | part | ours ms | torch ms | ours/torch [95% CI] | load |")
    print("|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for t in map(int, args.threads.split(",")):
        torch.set_num_threads(t)
        with threadpool_limits(t, user_api="blas"):
            for case in args.cases.split(","):
                for dtype in args.dtypes.split(","):
                    parts, err = _callables(case, np.dtype(dtype), rng)
                    for part in args.parts.split(","):
                        if part not in parts:
                            continue
                        a, b, q = _measure(parts[part], args.reps)
                        print(f"| {case} | {dtype} | {t} | {part} | {a:.2f} | {b:.2f} | "
                              f"{q[1]:.2f} [{q[0]:.2f}, {q[2]:.2f}] | "
                              f"{os.getloadavg()[0]:.1f} |", flush=True)
                    gc.collect()


if __name__ == "__main__":
    main()
