"""The caching allocator's cost per operation against the number of blocks in use, with
the cache on and off side by side (issue 25, item 5: each request used to scan every
block of its size class, so a 3,000-step chain keeping its 128 KiB activations ran
3.4-5.3x slower than with the cache off, 443 -> 905 us a step from 1,000 to 4,000
steps).

Measured in the default setting's child of `WORKLOAD` (stored in that workload's
entry, as `probes.kernel_gap` is), for each operation and each live count of `LIVE` in
turn (so that the size class holds just those `n` blocks in use): a warm-up round, then
rounds of the cache on and off one after the other, the order alternating, so the
on / off ratio is paired by round (the largest / smallest count ratio is not). Arrays
of `ELEMS` float64 (64 KiB, the smallest cached size), the cyclic GC off while timing.
Operations:

- `replace`: one of `n` live arrays from `memory.empty` dropped at random and a new one
  requested (`OPS_REPLACE` times a sample): with the cache on, a block freed among `n`
  busy ones is found again (the scan looked through the busy ones first);
- `chain step`: `y = pa.tanh(y * 1.0001)` with the graph kept, grown `OPS_CHAIN` steps
  from a chain of `n` steps (`n` cached activations in use); the new steps are dropped
  and the free blocks released after each sample, so every sample grows into new
  memory as a first pass does (the issue's case).

With the cache off the same operations run with `memory.set_enabled(False)` on the same
live arrays: their cost does not depend on the blocks in use.
"""
from __future__ import annotations

import gc
import time

import numpy as np

import parallel_autograd as pa
from parallel_autograd import memory

from .machine import Contention
from .report import cores_text, markdown
from .stats import Interval, ratio_interval, ratio_text, seed_for

WORKLOAD = "mlp-chain"  # a chain: whose child measures this
LIVE = {"full": (1000, 4000), "quick": (1000, 4000), "tiny": (16, 64)}
ELEMS = 8192
OPS_REPLACE = 1000
OPS_CHAIN = 40
OPERATIONS = ("replace", "chain step")
CACHE = ("on", "off")


class _State:
    """The live arrays of one operation at one count, made with the cache on: `n` from
    `memory.empty` (replace) or a chain of `n` steps (chain step)."""

    def __init__(self, op: str, n: int, rng):
        self.rng = rng
        self.arrays, self.chain = [], None
        if op == "replace":
            self.arrays = [memory.empty(ELEMS) for _ in range(n)]
            return
        y = pa.tensor(rng.standard_normal(ELEMS), requires_grad=True)
        for _ in range(n):
            y = pa.tanh(y * 1.0001)
        self.chain = y

    def replace(self, ops: int) -> float:
        idx = self.rng.integers(len(self.arrays), size=ops).tolist()
        arrays, empty = self.arrays, memory.empty
        t0 = time.perf_counter()
        for i in idx:
            arrays[i] = None
            arrays[i] = empty(ELEMS)
        t = time.perf_counter() - t0
        self.replaced = idx
        return t / ops

    def refill(self) -> None:
        """The arrays the last (cache off) sample replaced, from the cache again."""
        for i in self.replaced:
            self.arrays[i] = None
            self.arrays[i] = memory.empty(ELEMS)

    def chain_step(self, ops: int) -> float:
        y = self.chain
        t0 = time.perf_counter()
        for _ in range(ops):
            y = pa.tanh(y * 1.0001)
        t = time.perf_counter() - t0
        del y
        memory.empty_cache()  # the next sample grows into new memory again
        return t / ops


def _sample(state: _State, op: str, cache: str) -> float:
    prev = memory.set_enabled(cache == "on")
    gc.disable()
    try:
        if op == "replace":
            return state.replace(OPS_REPLACE)
        return state.chain_step(OPS_CHAIN)
    finally:
        gc.enable()
        memory.set_enabled(prev)
        if op == "replace" and cache == "off":
            state.refill()


def measure(size: str, rounds: int, seed: int) -> dict:
    """Seconds per operation for every (operation, live count, cache) over `rounds`
    rounds after a warm-up round, and the other processes' load meanwhile. One
    (operation, count) at a time, so its size class holds just its `n` blocks in use."""
    if not memory.default_allocator.enabled:
        return {"skipped": "the caching allocator is off in this process"}
    rng = np.random.default_rng(seed_for(seed, "alloc_scaling"))
    live = LIVE[size]
    samples = {op: {str(n): {c: [] for c in CACHE} for n in live} for op in OPERATIONS}
    meter = Contention()
    for op in OPERATIONS:
        for n in live:
            state = _State(op, n, rng)
            for r in range(rounds + 1):  # round 0: warm-up
                for c in CACHE[r % 2:] + CACHE[:r % 2]:
                    t = _sample(state, op, c)
                    if r:
                        samples[op][str(n)][c].append(t)
            del state
            memory.empty_cache()
    return {"live": list(live), "elems": ELEMS, "ops_per_sample": {
        "replace": OPS_REPLACE, "chain step": OPS_CHAIN}, "samples": samples,
        "contention": meter.cores()}


def on_over_off(m: dict, seed: int, op: str, n: int) -> Interval:
    """Cache on / cache off for `op` at `n` live blocks (paired by round)."""
    s = m["samples"][op][str(n)]
    return ratio_interval(s["on"], s["off"], seed_for(seed, "alloc_scaling", op, n), True)


def growth(m: dict, seed: int, op: str, cache: str) -> Interval:
    """`op`'s time at the largest live count over the smallest (measured one after the
    other: resampled independently)."""
    lo, hi = m["live"][0], m["live"][-1]
    s = m["samples"][op]
    return ratio_interval(s[str(hi)][cache], s[str(lo)][cache],
                          seed_for(seed, "alloc_scaling", op, cache, "growth"), False)


def _us(samples) -> str:
    return f"{float(np.median(samples)) * 1e6:.1f}"


def section(raw) -> list:
    """`## The caching allocator against the blocks in use`: the table, as lines (none
    when the default setting's child of `WORKLOAD` did not measure it)."""
    r = (raw or {}).get("workloads", {}).get(WORKLOAD, {})
    m = r.get("alloc_scaling")
    if m is None:
        return []
    head = ["## The caching allocator against the blocks in use", ""]
    if "skipped" in m:
        return head + [f"Not measured: {m['skipped']}.", ""]
    seed, lo = raw["seed"], m["live"][0]
    rows = []
    for op in OPERATIONS:
        for n in m["live"]:
            s = m["samples"][op][str(n)]
            row = [op, f"{n:,}", _us(s["on"]), _us(s["off"]),
                   ratio_text(on_over_off(m, seed, op, n))]
            row += ["" if n == lo else ratio_text(growth(m, seed, op, c)) for c in CACHE]
            rows.append(row)
    table = markdown(["operation", "blocks in use", "cache on us/op", "cache off us/op",
                      "on / off", f"on: / {lo:,} in use", f"off: / {lo:,} in use"], rows)
    legend = (f"Medians of {len(m['samples'][OPERATIONS[0]][str(lo)]['on'])} rounds "
              f"({m['ops_per_sample']['replace']} replacements or "
              f"{m['ops_per_sample']['chain step']} chain steps a sample, arrays of "
              f"{m['elems'] * 8 // 1024} KiB), in the default setting's child of {WORKLOAD}; "
              "`replace`: one of the live arrays dropped at random, then `memory.empty`; "
              "`chain step`: `y = pa.tanh(y * 1.0001)` grown from a chain that many steps "
              "long, its graph kept. A request costs the same whatever the number of "
              "blocks in use when the `/ in use` ratios hold 1 (it used to scan them: "
              f"issue 25). Other load meanwhile {cores_text(m['contention'])} cores.")
    return head + [table, "", legend, ""]
