"""Two benchmark rows about the engine itself, outside the workload table:

- `chain`: what the default engine (`loss.backward()`, the parallel engine with its
  cost model) costs over the sequential engine (`pa.backward`) on graphs without
  width, where it must decide "sequential" and add nothing else. The target (issue
  28): default / sequential <= `CHAIN_TARGET` (1.01), scored PASS / MISS / unresolved
  from the interval on the chains of `TARGET_CHAINS`: a 10-layer MLP 64 wide and the
  backward of the real programs gpt-f32 and mnist-cnn-f32 (`stress.compare.programs`,
  BLAS-bound chains). Other chains: MLPs of 4, 16 and 20 small layers, a 1,000-node
  elementwise chain on 64-element vectors, a 10-node chain (the fixed per-call cost),
  an 8-layer 256x512 MLP and lstm-lm-f32.
- `jacobian`: `pa.autograd.functional.jacobian`/`hessian` against
  `torch.autograd.functional.jacobian`/`hessian`, each with `vectorize=False` and
  `True` (needs torch; skipped without it).

    python -m stress.compare.engine_rows [--rows chain,jacobian] [--reps N] [--out f.json]

Every row runs its configurations interleaved, `--reps` rounds, the order rotated each
round, the cyclic GC off; a round's sample of a configuration is the median of `--inner`
calls (each on a freshly built graph; only the backward or the jacobian call is timed).
Ratios are medians over rounds with a 95% paired bootstrap interval (`stats`). The
numbers are for the report: no test asserts on them.
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import time

import numpy as np

import parallel_autograd as pa

from .stats import decide, median_interval, ratio_interval, ratio_text, seed_for


# ---- the chain row ----------------------------------------------------------------------------
def _mlp(rng, layers: int, batch: int, width: int):
    x = pa.tensor(rng.standard_normal((batch, width)))
    ws = [pa.tensor(rng.standard_normal((width, width)) / np.sqrt(width), requires_grad=True)
          for _ in range(layers)]

    def build():
        h = x
        for w in ws:
            h = pa.relu(h @ w)
        return (h * h).mean()
    return build


def _ew_chain(rng, nodes: int, size: int):
    x = pa.tensor(rng.standard_normal(size), requires_grad=True)

    def build():
        h = x
        for _ in range(nodes // 2):
            h = pa.sin(h * 0.999)
        return h.sum()
    return build


def _program(name: str):
    """A real program's forward (`stress.compare.programs`, full size): one model kept,
    a fresh graph per call."""
    from .backend import PA
    from .workloads import WORKLOADS
    w = WORKLOADS[name]
    return w.program(w.data(0, "full"), PA).loss


CHAINS = {
    "mlp10-64": (lambda rng: _mlp(rng, 10, 32, 64), "10 layers relu(h @ W), 32x64"),
    "gpt-f32": (lambda rng: _program("gpt-f32"), "nanoGPT's backward (float32)"),
    "mnist-cnn-f32": (lambda rng: _program("mnist-cnn-f32"),
                      "mnist/main.py Net's backward (float32)"),
    "mlp4-64": (lambda rng: _mlp(rng, 4, 32, 64), "4 layers relu(h @ W), 32x64"),
    "mlp20-64": (lambda rng: _mlp(rng, 20, 32, 64), "20 layers relu(h @ W), 32x64"),
    "lstm-lm-f32": (lambda rng: _program("lstm-lm-f32"), "word_language_model LSTM (float32)"),
    "mlp16-small": (lambda rng: _mlp(rng, 16, 32, 64), "16 layers relu(h @ W), 32x64"),
    "ew-chain-1000": (lambda rng: _ew_chain(rng, 1000, 64),
                      "1,000 elementwise nodes (mul, sin) on 64 elements"),
    "chain-10": (lambda rng: _ew_chain(rng, 10, 64), "10 elementwise nodes: the fixed cost"),
    "mlp8-256x512": (lambda rng: _mlp(rng, 8, 256, 512), "8 layers, batch 256, width 512"),
}
TARGET_CHAINS = ("mlp10-64", "gpt-f32", "mnist-cnn-f32")  # scored against CHAIN_TARGET
CHAIN_TARGET = 1.01  # default / sequential, issue 28
DEFAULT_CHAINS = TARGET_CHAINS + ("chain-10",)  # the others: on request (--chains)


def _time_backward(build, default: bool, clock) -> float:
    loss = build()
    t0 = clock()
    if default:
        loss.backward()
    else:
        pa.backward(loss)
    return clock() - t0


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def run_chain(reps: int, inner: int, seed: int, names=None, clock: str = "cpu") -> dict:
    """{chain: {"default": [...], "sequential": [...], "decision": reason}}: per round,
    the median of `inner` calls of each, the two alternating call by call. `clock`
    "cpu" (process CPU time, all threads: less disturbed by other processes on a shared
    machine than wall time, and the engine's decision here is to run on one thread) or
    "wall"."""
    out = {}
    tick = CLOCKS[clock]
    for name in names or CHAINS:
        make, desc = CHAINS[name]
        build = make(np.random.default_rng(seed_for(seed, name)))
        st = pa.default_engine().backward(build(), stats=True)
        samples = {"default": [], "sequential": []}
        for r in range(reps + 1):  # round 0: warm-up
            ts = {"default": [], "sequential": []}
            for i in range(inner):
                first = (r + i) % 2 == 0
                for default in (first, not first):
                    ts["default" if default else "sequential"].append(
                        _time_backward(build, default, tick))
            if r:
                for k, v in ts.items():
                    samples[k].append(float(np.median(v)))
        out[name] = {"description": desc, "decision": st.reason, "clock": clock, **samples}
        _log(f"chain {name}: {_chain_text(name, out[name], seed)}")
    return out


def _chain_text(name: str, r: dict, seed: int) -> str:
    iv = ratio_interval(r["default"], r["sequential"], seed_for(seed, "chain", name), True)
    med = median_interval(r["sequential"], seed_for(seed, "chain-seq", name))
    return (f"default / sequential {ratio_text(iv, 3, '')} {chain_verdict(name, iv)}, "
            f"sequential {med.point * 1e3:.3f} ms ({r['clock']})")


def chain_verdict(name: str, iv) -> str:
    """PASS / MISS / unresolved against `CHAIN_TARGET` for a target chain, else ""."""
    return decide(iv, "<=", CHAIN_TARGET) if name in TARGET_CHAINS else ""


# ---- the jacobian row -------------------------------------------------------------------------
def _tanh_mlp(lib, params):
    w1, w2 = params

    def f(x):
        return lib.tanh(lib.tanh(x @ w1) @ w2)
    return f


def _jac_cases(rng, n: int, hidden: int):
    """(name, kind, function builder per library, input array)."""
    w1 = rng.standard_normal((n, hidden)) / np.sqrt(n)
    w2 = rng.standard_normal((hidden, n)) / np.sqrt(hidden)
    x = rng.standard_normal(n)

    def vec_fn(lib, const):
        return _tanh_mlp(lib, (const(w1), const(w2)))

    def scalar_fn(lib, const):
        g = _tanh_mlp(lib, (const(w1), const(w2)))
        return lambda x: (g(x) ** 2).sum()
    return [("jacobian", vec_fn, x), ("hessian", scalar_fn, x)]


def run_jacobian(reps: int, inner: int, seed: int, n: int = 64, hidden: int = 128) -> dict:
    """{case: {config: [...]}} for jacobian and hessian, ours and torch's, vectorize F/T."""
    try:
        import torch
        import torch.autograd.functional as TAF
    except ImportError:
        _log("jacobian: torch does not import; row skipped")
        return {}
    torch.set_num_threads(pa.engine.cost.usable_cores())
    rng = np.random.default_rng(seed_for(seed, "jacobian"))
    out = {}
    for name, make, x in _jac_cases(rng, n, hidden):
        f_pa = make(pa, lambda a: pa.tensor(a))
        f_t = make(torch, torch.from_numpy)
        x_pa, x_t = pa.tensor(x), torch.from_numpy(x.copy())
        pa_fn = getattr(pa.autograd.functional, name)
        t_fn = getattr(TAF, name)
        configs = {f"pa-vec{v:d}": (lambda v=v: pa_fn(f_pa, x_pa, vectorize=v))
                   for v in (False, True)}
        configs.update({f"torch-vec{v:d}": (lambda v=v: t_fn(f_t, x_t, vectorize=v))
                        for v in (False, True)})
        configs["pa-one-by-one"] = lambda: _one_by_one(pa_fn, f_pa, x_pa)
        samples = {k: [] for k in configs}
        keys = list(configs)
        for r in range(reps + 1):
            for k in keys[r % len(keys):] + keys[:r % len(keys)]:
                ts = []
                for _ in range(inner):
                    t0 = time.perf_counter()
                    configs[k]()
                    ts.append(time.perf_counter() - t0)
                if r:
                    samples[k].append(float(np.median(ts)))
        out[name] = {"n": n, "hidden": hidden, **samples}
        _log(f"{name}: " + "; ".join(_jac_text(name, out[name], seed)))
    return out


def _one_by_one(fn, f, x):
    """`fn(f, x)` with the rows one after the other (what it did before issue 28)."""
    from parallel_autograd.engine import rows
    keep = rows.CONCURRENT_MIN_SECONDS
    rows.CONCURRENT_MIN_SECONDS = float("inf")
    try:
        return fn(f, x)
    finally:
        rows.CONCURRENT_MIN_SECONDS = keep


def _jac_text(name: str, r: dict, seed: int) -> list:
    lines = []
    for v in (0, 1):
        ours, theirs = r[f"pa-vec{v}"], r[f"torch-vec{v}"]
        iv = ratio_interval(ours, theirs, seed_for(seed, name, v), True)
        lines.append(f"vectorize={bool(v)}: ours {np.median(ours) * 1e3:.2f} ms, torch "
                     f"{np.median(theirs) * 1e3:.2f} ms, ours / torch {ratio_text(iv)}")
    iv = ratio_interval(r["pa-vec1"], r["torch-vec0"], seed_for(seed, name, "x"), True)
    lines.append(f"ours vectorize=True / torch vectorize=False {ratio_text(iv)}")
    iv = ratio_interval(r["pa-vec0"], r["pa-one-by-one"], seed_for(seed, name, "rows"), True)
    lines.append(f"ours concurrent / ours one by one {ratio_text(iv)}")
    return lines


# ---- report -----------------------------------------------------------------------------------
def report(result: dict, seed: int) -> str:
    """Markdown tables of both rows."""
    lines = []
    if result.get("chain"):
        lines += ["### The default engine on chains (no width)", "",
                  f"Clock: {next(iter(result['chain'].values()))['clock']}; "
                  f"{result['reps']} rounds, medians of {result['inner']} calls each.", "",
                  f"Target: default / sequential <= {CHAIN_TARGET} on "
                  f"{', '.join(TARGET_CHAINS)}.", "",
                  "| chain | engine's decision | sequential | default / sequential | "
                  "target |", "|---|---|---|---|---|"]
        for name, r in result["chain"].items():
            iv = ratio_interval(r["default"], r["sequential"], seed_for(seed, "chain", name),
                                True)
            lines.append(f"| {name}: {r['description']} | {r['decision']} | "
                         f"{np.median(r['sequential']) * 1e3:.3f} ms | "
                         f"{ratio_text(iv, 3, '')} | {chain_verdict(name, iv)} |")
        lines.append("")
    if result.get("jacobian"):
        lines += ["### jacobian and hessian against PyTorch", "",
                  "| function | vectorize | ours | torch | ours / torch |", "|---|---|---|---|---|"]
        for name, r in result["jacobian"].items():
            for v in (0, 1):
                ours, theirs = r[f"pa-vec{v}"], r[f"torch-vec{v}"]
                iv = ratio_interval(ours, theirs, seed_for(seed, name, v), True)
                lines.append(f"| {name} (n={r['n']}, hidden {r['hidden']}) | {bool(v)} | "
                             f"{np.median(ours) * 1e3:.2f} ms | "
                             f"{np.median(theirs) * 1e3:.2f} ms | {ratio_text(iv)} |")
            iv = ratio_interval(r["pa-vec0"], r["pa-one-by-one"], seed_for(seed, name, "rows"),
                                True)
            lines.append(f"| {name}: rows concurrent / one by one | | | | {ratio_text(iv)} |")
        lines.append("")
    return "\n".join(lines)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(argv=None) -> int:
    """`python -m stress.compare.engine_rows`: measure, print markdown, write --out."""
    p = argparse.ArgumentParser(prog="python -m stress.compare.engine_rows")
    p.add_argument("--rows", default="chain,jacobian")
    p.add_argument("--chains", default=",".join(DEFAULT_CHAINS),
                   help="comma-separated subset of: " + ", ".join(CHAINS))
    p.add_argument("--clock", choices=tuple(CLOCKS), default="cpu",
                   help="chain row: process CPU time (default) or wall time")
    p.add_argument("--reps", type=int, default=41)
    p.add_argument("--inner", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    rows = set(args.rows.split(","))
    gc.disable()
    result = {"reps": args.reps, "inner": args.inner, "seed": args.seed}
    try:
        if "chain" in rows:
            result["chain"] = run_chain(args.reps, args.inner, args.seed,
                                        args.chains.split(","), args.clock)
        if "jacobian" in rows:
            result["jacobian"] = run_jacobian(args.reps, args.inner, args.seed)
    finally:
        gc.enable()
    print(report(result, args.seed))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
