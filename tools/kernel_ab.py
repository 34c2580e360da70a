"""A/B timing of kernels on GPT/Transformer shapes: our code at an older git revision
against the working tree, and PyTorch at 1 and 2 threads, interleaved call by call in one
process (issue 28: layer_norm, exact GELU in float32, erf/erfc/ndtr).

    PYTHONPATH=. python tools/kernel_ab.py --old-rev HEAD~1 --rounds 21
    PYTHONPATH=. python tools/kernel_ab.py --old-rev HEAD~1 --only layer_norm

The old revision's `parallel_autograd/` is extracted with `git archive` into a temporary
directory and imported as a second package (`pa_old`: the package imports itself
relatively), so both run in the same process under the same load. Each round times every
variant once (a variant's time: the mean of `--inner` calls, wall clock); the table gives
the medians over rounds and, for the ratios, the median of the per-round ratios with a 95%
bootstrap interval. The variants run in a new random order each round. Prints a markdown
table; `uptime` before and after.
"""
from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import tempfile
import time

import numpy as np


def load_old(rev: str):
    """The package at git revision `rev`, imported as `pa_old`."""
    root = tempfile.mkdtemp(prefix="kernel_ab_")
    tar = subprocess.run(["git", "archive", rev, "parallel_autograd"], check=True,
                         capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", root], input=tar, check=True)
    os.rename(os.path.join(root, "parallel_autograd"), os.path.join(root, "pa_old"))
    sys.path.insert(0, root)
    return importlib.import_module("pa_old")


def workloads(only: str | None):
    """(name, shape, dtype, kind, normalized dims or None) rows."""
    rows = []
    for shape in ((64, 64, 64), (20, 35, 200)):
        for dt in ("float32", "float64"):
            for kind in ("fwd", "fwd+bwd"):
                rows.append(("layer_norm", shape, dt, kind))
    for kind in ("fwd", "fwd+bwd"):
        rows.append(("gelu", (64, 64, 256), "float32", kind))
    for name in ("erf", "erfc", "ndtr"):
        rows.append((name, (64, 64, 256), "float32", "fwd"))
    rows.append(("ndtr", (64, 64, 256), "float64", "fwd"))
    return [r for r in rows if only is None or r[0] == only]


def make_call(lib, name, shape, dtype, kind, torch_threads=None):
    """A no-argument callable running one call of the workload with `lib` (a package or
    torch)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(dtype)
    d = shape[-1]
    w = (1 + 0.1 * rng.standard_normal(d)).astype(dtype)
    b = (0.1 * rng.standard_normal(d)).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    is_torch = torch_threads is not None
    if is_torch:
        import torch
        T, F = torch.from_numpy, torch.nn.functional
        special = {"erf": torch.erf, "erfc": torch.erfc, "ndtr": torch.special.ndtr}
        no_grad = torch.no_grad
    else:
        T, F = lib.tensor, lib.nn.functional
        special = {"erf": lib.erf, "erfc": lib.erfc,
                   "ndtr": lambda t: lib.tensor(lib.ops.special.ndtr(t.numpy()))}
        no_grad = lib.no_grad
    fn = {"layer_norm": lambda t, *p: F.layer_norm(t, (d,), *p),
          "gelu": lambda t, *p: F.gelu(t)}.get(name) or (lambda t, *p: special[name](t))
    params = (T(w), T(b)) if name == "layer_norm" else ()
    xt, gt = T(x), T(g)

    def run():
        if kind == "fwd":
            with no_grad():
                return fn(xt, *params)
        xr = T(x).requires_grad_(True) if is_torch else lib.tensor(x, requires_grad=True)
        pr = [p.detach().requires_grad_(True) if is_torch else
              lib.tensor(p.numpy(), requires_grad=True) for p in params]
        fn(xr, *pr).backward(gt)
        return xr.grad
    if is_torch:     # set once a round, outside the timed calls (measure: `setup`)
        run.setup = lambda: torch.set_num_threads(torch_threads)
    return run


def bootstrap_ratio(num, den, n=2000, seed=0):
    """Median of the per-round ratios and its 95% bootstrap interval."""
    r = np.asarray(num) / np.asarray(den)
    rng = np.random.default_rng(seed)
    meds = np.median(r[rng.integers(0, r.size, (n, r.size))], axis=1)
    return np.median(r), np.percentile(meds, 2.5), np.percentile(meds, 97.5)


def measure(variants: dict, rounds: int, inner: int) -> dict:
    """{variant: [ms per call, one per round]}, variants interleaved within each round."""
    for f in variants.values():
        getattr(f, "setup", lambda: None)()
        f()                                  # warm up (allocator, imports)
    times = {k: [] for k in variants}
    order = np.random.default_rng(1)
    for _ in range(rounds):
        # a new order each round: torch's OpenMP threads spin after a call and slow
        # whichever variant follows them
        for k in order.permutation(list(variants)):
            f = variants[k]
            getattr(f, "setup", lambda: None)()
            t0 = time.perf_counter()
            for _ in range(inner):
                f()
            times[k].append((time.perf_counter() - t0) / inner * 1e3)
    return times


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old-rev", required=True)
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--inner", type=int, default=3)
    p.add_argument("--only", default=None)
    args = p.parse_args(argv)
    import parallel_autograd as new
    old = load_old(args.old_rev)
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    print("| op | shape | dtype | kind | old ms | new ms | new/old [95%] | torch 1t ms | "
          "torch 2t ms | new/torch1 [95%] | new/torch2 [95%] |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in workloads(args.only):
        v = {"old": make_call(old, *row), "new": make_call(new, *row),
             "t1": make_call(None, *row, torch_threads=1),
             "t2": make_call(None, *row, torch_threads=2)}
        t = measure(v, args.rounds, args.inner)
        med = {k: np.median(s) for k, s in t.items()}
        ratio = [bootstrap_ratio(t["new"], t[k]) for k in ("old", "t1", "t2")]
        fmt = [f"{m:.2f} [{lo:.2f}, {hi:.2f}]" for m, lo, hi in ratio]
        name, shape, dtype, kind = row
        print(f"| {name} | {'x'.join(map(str, shape))} | {dtype} | {kind} | "
              f"{med['old']:.3f} | {med['new']:.3f} | {fmt[0]} | {med['t1']:.3f} | "
              f"{med['t2']:.3f} | {fmt[1]} | {fmt[2]} |", flush=True)
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
