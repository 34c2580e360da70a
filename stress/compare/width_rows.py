"""Two rows about independent backward work inside one program (issue 28, item 3, "width
where users have it"), selected with `--workloads` like the sci- rows:

- `per-sample-grad`: per-sample gradients of a small tanh MLP (32 -> H -> H -> 10, squared
  error, N samples) by the idiom users write without functorch: the loss vector `losses`
  (N,) and `grad(losses, params, grad_outputs=eye(N), is_grads_batched=True)`. Ours
  (`pa.grad`: the rows concurrent when `engine.rows` says it pays), ours with the rows
  forced one by one (the same call: one plan, no threads), a plain loop of N `pa.grad`
  calls (one per row, `retain_graph=True`), PyTorch's `is_grads_batched=True` (vmap) and
  PyTorch's loop.
- `multi-loss`: a shared trunk (2 tanh layers) and K heads (3 tanh layers each), the K
  losses summed and `.backward()`: ours with the default engine (its cost model decides),
  ours on an `Engine(max_blas_share=inf)` (parallel whenever the graph has width: the
  heads' subgraphs are independent until the trunk), the sequential engine, the
  sequential engine with BLAS at one thread, and PyTorch's `.backward()`.

    python -m stress.compare.width_rows [--rows per-sample-grad,multi-loss]
        [--size full|quick|tiny] [--reps N] [--out f.json]

Ours and PyTorch's configurations run in two child processes one after the other (PyTorch's
threads spin after its calls: in one process they slowed our next call up to 15x under
load). In each, the configurations run interleaved, `--reps` rounds after a warm-up, the
order rotated each round, the cyclic GC off; a round's sample is the median of `inner`
calls, each on a freshly built graph (only the gradient call is timed, wall clock).
Ratios are medians over rounds with a 95% bootstrap interval (`stats`), paired between
configurations of one process, unpaired against PyTorch's.
Report only: no target.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROWS = ("per-sample-grad", "multi-loss")
SIZES = {  # row -> size -> cases
    "per-sample-grad": {"full": [dict(n=32, hidden=64), dict(n=64, hidden=128)],
                        "quick": [dict(n=32, hidden=64)], "tiny": [dict(n=4, hidden=8)]},
    "multi-loss": {"full": [dict(batch=64, hidden=128, heads=2),
                            dict(batch=64, hidden=128, heads=4),
                            dict(batch=256, hidden=256, heads=4)],
                   "quick": [dict(batch=64, hidden=128, heads=4)],
                   "tiny": [dict(batch=4, hidden=8, heads=2)]},
}
INNER = {"full": 3, "quick": 2, "tiny": 1}


# ---- per-sample gradients -------------------------------------------------------------------
def _psg_data(rng, n: int, hidden: int):
    shapes = [(32, hidden), (hidden,), (hidden, hidden), (hidden,), (hidden, 10)]
    params = [rng.standard_normal(s) / np.sqrt(s[0]) for s in shapes]
    return params, rng.standard_normal((n, 32)), np.eye(10)[rng.integers(0, 10, n)]


def _psg_losses(lib, wrap, ps, x, y):
    h = lib.tanh(wrap(x) @ ps[0] + ps[1])
    h = lib.tanh(h @ ps[2] + ps[3])
    d = h @ ps[4] - wrap(y)
    return (d * d).sum(1)


def psg_configs(case: dict, seed: int, torch=None) -> dict:
    """{config: zero-argument call} for one per-sample-grad case."""
    import parallel_autograd as pa
    from parallel_autograd.engine import rows
    params, x, y = _psg_data(np.random.default_rng(seed), case["n"], case["hidden"])
    n = case["n"]
    pp = [pa.tensor(a, requires_grad=True) for a in params]
    eye = pa.tensor(np.eye(n))

    def ours():
        return pa.grad(_psg_losses(pa, pa.tensor, pp, x, y), pp, eye, is_grads_batched=True)

    def ours_one_by_one():
        keep = rows.CONCURRENT_MIN_SECONDS
        rows.CONCURRENT_MIN_SECONDS = float("inf")
        try:
            return ours()
        finally:
            rows.CONCURRENT_MIN_SECONDS = keep

    def ours_loop():
        losses = _psg_losses(pa, pa.tensor, pp, x, y)
        return [pa.grad(losses, pp, eye[k], retain_graph=True) for k in range(n)]

    out = {"pa-batched": ours, "pa-batched-one-by-one": ours_one_by_one, "pa-loop": ours_loop}
    if torch is not None:
        tp = [torch.tensor(a, requires_grad=True) for a in params]
        teye = torch.eye(n, dtype=torch.float64)

        def t_losses():
            return _psg_losses(torch, torch.from_numpy, tp, x, y)
        out["torch-batched"] = lambda: torch.autograd.grad(t_losses(), tp, teye,
                                                           is_grads_batched=True)

        def t_loop():
            losses = t_losses()
            return [torch.autograd.grad(losses, tp, teye[k], retain_graph=True)
                    for k in range(n)]
        out["torch-loop"] = t_loop
    return out


# ---- several losses of one graph --------------------------------------------------------------
def _ml_data(rng, batch: int, hidden: int, heads: int):
    def w(a, b):
        return rng.standard_normal((a, b)) / np.sqrt(a)
    trunk = [w(64, hidden), w(hidden, hidden)]
    hs = [[w(hidden, hidden), w(hidden, hidden), w(hidden, 8)] for _ in range(heads)]
    return trunk, hs, rng.standard_normal((batch, 64))


def _ml_loss(lib, wrap, trunk, heads, x):
    h = wrap(x)
    for w in trunk:
        h = lib.tanh(h @ w)
    total = None
    for ws in heads:
        z = h
        for w in ws:
            z = lib.tanh(z @ w)
        loss = (z * z).mean()
        total = loss if total is None else total + loss
    return total


def ml_configs(case: dict, seed: int, torch=None) -> dict:
    """{config: (build, backward)} for one multi-loss case: only backward is timed."""
    import threadpoolctl

    import parallel_autograd as pa
    trunk, heads, x = _ml_data(np.random.default_rng(seed), case["batch"], case["hidden"],
                               case["heads"])
    pt = [pa.tensor(a, requires_grad=True) for a in trunk]
    ph = [[pa.tensor(a, requires_grad=True) for a in ws] for ws in heads]
    wide = pa.Engine(max_blas_share=float("inf"))

    def build():
        return _ml_loss(pa, pa.tensor, pt, ph, x)

    def blas1():  # entered and left outside the timed call (threadpoolctl takes ~ms)
        return threadpoolctl.threadpool_limits(1, "blas")
    out = {"pa-default": (build, lambda loss: loss.backward()),
           "pa-parallel": (build, wide.backward),
           "pa-sequential": (build, pa.backward),
           "pa-sequential-blas1": (build, pa.backward, blas1)}
    if torch is not None:
        tt = [torch.tensor(a, requires_grad=True) for a in trunk]
        th = [[torch.tensor(a, requires_grad=True) for a in ws] for ws in heads]
        out["torch"] = (lambda: _ml_loss(torch, torch.from_numpy, tt, th, x),
                        lambda loss: loss.backward())
    return out


def ml_decision(case: dict, seed: int) -> str:
    """What the default engine decides for the case's graph, and why."""
    import parallel_autograd as pa
    trunk, heads, x = _ml_data(np.random.default_rng(seed), case["batch"], case["hidden"],
                               case["heads"])
    loss = _ml_loss(pa, pa.tensor, [pa.tensor(a, requires_grad=True) for a in trunk],
                    [[pa.tensor(a, requires_grad=True) for a in ws] for ws in heads], x)
    st = pa.default_engine().backward(loss, stats=True)
    return f"{st.mode}: {st.reason}"


# ---- timing -------------------------------------------------------------------------------------
def measure(configs: dict, reps: int, inner: int) -> dict:
    """{config: [round medians, seconds]}: rounds interleaved, order rotated; a config is
    a call, or (build, timed[, context]) where only `timed(build())` is timed (inside
    `context()` when given)."""
    keys = list(configs)
    samples = {k: [] for k in keys}
    for r in range(reps + 1):  # round 0: warm-up
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            c = configs[k]
            ts = []
            for _ in range(inner):
                if isinstance(c, tuple):
                    arg = c[0]()
                    with c[2]() if len(c) > 2 else contextlib.nullcontext():
                        t0 = time.perf_counter()
                        c[1](arg)
                        t1 = time.perf_counter()
                    ts.append(t1 - t0)
                    continue
                else:
                    t0 = time.perf_counter()
                    c()
                ts.append(time.perf_counter() - t0)
            if r:
                samples[k].append(float(np.median(ts)))
    return samples


def _torch():
    try:
        import torch
    except ImportError:
        return None
    from parallel_autograd.engine.cost import usable_cores
    torch.set_num_threads(usable_cores())
    return torch


def run_here(rows: list, size: str, reps: int, seed: int, lib: str) -> dict:
    """Measure `rows` in this process, `lib`'s configurations only ("pa" or "torch": each
    library in its own process, since PyTorch's threads spin after its calls and slow
    whatever runs next): {row: [{"case": ..., "samples": ...}, ...]}."""
    from .stats import seed_for
    torch = _torch() if lib == "torch" else None
    if lib == "torch" and torch is None:
        raise SystemExit("torch does not import")
    gc.disable()
    try:
        out = {}
        for row in rows:
            cases = []
            for i, case in enumerate(SIZES[row][size]):
                s = seed_for(seed, row, i)
                if row == "per-sample-grad":
                    configs, extra = psg_configs(case, s, torch), {}
                else:
                    configs, extra = ml_configs(case, s, torch), {
                        "decision": ml_decision(case, s)}
                configs = {k: v for k, v in configs.items() if k.startswith(lib)}
                cases.append({"case": case, **(extra if lib == "pa" else {}),
                              "samples": measure(configs, reps, INNER[size])})
            out[row] = cases
    finally:
        gc.enable()
    return {"rows": out, "size": size, "reps": reps, "seed": seed,
            "load": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}


def run(rows: list, size: str, reps: int, seed: int, log, with_torch: bool) -> dict:
    """`run_here` for ours, then PyTorch's (`with_torch`, when it imports), each in a fresh
    child process; the PyTorch samples merged into ours (ratios against them unpaired)."""
    log(f"[width] {', '.join(rows)} (sizes {size}): ours")
    result = _child(rows, size, reps, seed, "pa")
    if with_torch:
        log(f"[width] {', '.join(rows)} (sizes {size}): PyTorch")
        try:
            theirs = _child(rows, size, reps, seed, "torch")
        except subprocess.CalledProcessError:
            log("[width] the PyTorch child failed: no PyTorch columns")
            return result
        for row, cases in theirs["rows"].items():
            for ours, t in zip(result["rows"][row], cases):
                ours["samples"].update(t["samples"])
        result["load"] = max(result["load"] or 0, theirs["load"] or 0)
    return result


def _child(rows: list, size: str, reps: int, seed: int, lib: str) -> dict:
    from .children import ROOT, child_env
    fd, path = tempfile.mkstemp(suffix=".json", prefix=f"compare-width-{lib}-")
    os.close(fd)
    cmd = [sys.executable, "-m", "stress.compare.width_rows", "--rows", ",".join(rows),
           "--size", size, "--reps", str(reps), "--seed", str(seed), "--child", lib,
           "--raw-out", path]
    try:
        subprocess.run(cmd, env=child_env(False), check=True, cwd=ROOT)
        with open(path) as f:
            return json.load(f)
    finally:
        os.unlink(path)


# ---- report -----------------------------------------------------------------------------------
PSG_RATIOS = [("pa-batched", "pa-loop", "ours batched / our loop"),
              ("pa-batched", "pa-batched-one-by-one", "ours batched / its rows one by one"),
              ("pa-batched", "torch-batched", "ours batched / torch batched (vmap)"),
              ("pa-batched", "torch-loop", "ours batched / torch loop")]
ML_RATIOS = [("pa-default", "pa-sequential", "default / sequential"),
             ("pa-parallel", "pa-sequential", "parallel / sequential"),
             ("pa-parallel", "pa-sequential-blas1", "parallel / sequential, BLAS 1 thread"),
             ("pa-default", "torch", "default / torch")]


def _ratio_cells(samples: dict, pairs: list, seed: int, tag) -> list:
    from .stats import ratio_interval, ratio_text, seed_for
    cells = []
    for a, b, _ in pairs:
        if a in samples and b in samples:
            paired = a.split("-")[0] == b.split("-")[0]  # one process: same rounds
            iv = ratio_interval(samples[a], samples[b], seed_for(seed, tag, a, b), paired)
            cells.append(ratio_text(iv))
        else:
            cells.append("n/a")
    return cells


def section(result) -> list:
    """`## Width inside one program` as markdown lines (none when not run)."""
    if not result:
        return []
    rows, seed = result["rows"], result["seed"]
    load = result.get("load")
    lines = ["## Width inside one program: per-sample gradients, several losses", "",
             f"`python -m stress.compare.width_rows` (sizes {result['size']}), "
             f"{result['reps']} rounds interleaved, ours and PyTorch each in its own "
             "process, medians of round medians (ms, wall); ratios with 95% intervals "
             "(paired by round within one process)"
             + (f"; load average {load:.1f} at the end" if load is not None else "") + ".",
             ""]
    for case in rows.get("per-sample-grad", []):
        c, s = case["case"], case["samples"]
        if not lines[-1].startswith("|"):
            lines += ["| per-sample-grad | ours batched ms | our loop ms | torch batched ms | "
                      + " | ".join(t for *_, t in PSG_RATIOS) + " |",
                      "|---" * (4 + len(PSG_RATIOS)) + "|"]
        lines.append(f"| N={c['n']}, hidden {c['hidden']} | " + " | ".join(
            _ms(s.get(k)) for k in ("pa-batched", "pa-loop", "torch-batched")) + " | "
            + " | ".join(_ratio_cells(s, PSG_RATIOS, seed, ("psg", c["n"], c["hidden"])))
            + " |")
    lines.append("")
    for case in rows.get("multi-loss", []):
        c, s = case["case"], case["samples"]
        if not lines[-1].startswith("|"):
            lines += ["| multi-loss | default engine's decision | default ms | sequential ms | "
                      "torch ms | " + " | ".join(t for *_, t in ML_RATIOS) + " |",
                      "|---" * (5 + len(ML_RATIOS)) + "|"]
        lines.append(f"| batch {c['batch']}, hidden {c['hidden']}, {c['heads']} heads | "
                     f"{case['decision']} | " + " | ".join(
                         _ms(s.get(k)) for k in ("pa-default", "pa-sequential", "torch"))
                     + " | " + " | ".join(_ratio_cells(s, ML_RATIOS, seed,
                                                       ("ml", *c.values()))) + " |")
    return lines + [""]


def _ms(v) -> str:
    return "n/a" if not v else f"{np.median(v) * 1e3:.2f}"


def main(argv=None) -> int:
    """`python -m stress.compare.width_rows`: measure, print markdown, write --out."""
    p = argparse.ArgumentParser(prog="python -m stress.compare.width_rows")
    p.add_argument("--rows", default=",".join(ROWS), help="comma-separated subset of: "
                   + ", ".join(ROWS))
    p.add_argument("--size", choices=("full", "quick", "tiny"), default="full")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch columns")
    p.add_argument("--out", default=None, help="write the measurements as JSON")
    p.add_argument("--raw-out", default=None, help=argparse.SUPPRESS)
    p.add_argument("--child", choices=("pa", "torch"), default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    rows = [r for r in args.rows.split(",") if r]
    bad = [r for r in rows if r not in ROWS]
    if bad or args.reps < 1:
        p.error(f"unknown row(s) {bad}" if bad else "--reps must be >= 1")
    if args.child:
        with open(args.raw_out, "w") as f:
            json.dump(run_here(rows, args.size, args.reps, args.seed, args.child), f)
        return 0
    result = run(rows, args.size, args.reps, args.seed,
                 lambda m: print(m, file=sys.stderr, flush=True), not args.no_torch)
    print("\n".join(section(result)))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
