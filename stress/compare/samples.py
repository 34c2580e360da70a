"""A workload's samples and what is derived from them: `timing_result` turns one batch
of timed rounds into a workload's result, `merge_batch` adds a later batch of rounds of
the same workload (measured in a fresh process when a target was unresolved) and
`summarize` recomputes medians and speedups from all kept samples.

A batch measured while other processes used more than `noisy_limit` cores is *noisy*.
A quiet batch replaces noisy ones; a noisy batch is dropped when the row already has
quiet ones (kept only when nothing quieter exists, and then the row is marked noisy
and not scored by the targets)."""
from __future__ import annotations

import statistics

SERIES = ("times", "forward", "step", "fault_samples")  # per configuration, per round


def is_noisy(contention, limit) -> bool:
    """True when other processes used more than `limit` cores (None: not measured)."""
    return contention is not None and limit is not None and contention > limit


def timing_result(best: dict, cores: int, description: str, branches: bool,
                  dims: dict) -> dict:
    """A workload's result from its timed rounds (`measure.time_configs`): every sample
    and the medians, minima, speedups and engine decisions derived from them."""
    stats = best["stats"]
    r = {"description": description, "branches": branches, "dims": dims,
         "times": best["times"], "forward": best["forward"], "step": best["step"],
         "fault_samples": best["faults"], "stats": stats, "contention": best["contention"],
         "batches": [{"rounds": best["rounds"], "contention": best["contention"]}],
         "decision": {c: {"mode": s["mode"], "reason": s["reason"]} for c, s in stats.items()}}
    if f"par{cores}" in stats:
        r["nodes"] = stats[f"par{cores}"]["nodes"]
    return summarize(r, cores)


def summarize(r: dict, cores: int) -> dict:
    """(Re)compute from the samples: median and min of the backward times, speedup over
    seq of every parallel configuration, medians of forward and step, page faults, the
    number of rounds and, where the bound is known, the efficiency."""
    times = r["times"]
    med = {c: statistics.median(ts) for c, ts in times.items()}
    r["median"] = med
    r["min"] = {c: min(ts) for c, ts in times.items()}
    r["speedup"] = {c: med["seq"] / med[c] for c in times
                    if "seq" in med and (c.startswith("par") or c == "shared")}
    r["median_forward"] = {c: statistics.median(ts) for c, ts in r["forward"].items()}
    r["median_step"] = {c: statistics.median(ts) for c, ts in r["step"].items()}
    r["faults"] = {c: statistics.median(fs) for c, fs in r["fault_samples"].items()}
    r["rounds"] = len(next(iter(times.values())))
    if "bound" in r and f"par{cores}" in med:
        r["efficiency"] = r["bound"]["bound"] / med[f"par{cores}"]
    return r


def merge_batch(r: dict, batch: dict, limit, cores: int) -> dict:
    """Add `batch` (a timing-only result of the same workload and configurations) to
    `r`: appended when both are quiet, replacing `r`'s samples when only the batch is
    quiet (or both are noisy and the batch is quieter), dropped otherwise."""
    _keep_quieter_gap(r, batch)
    old_noisy = is_noisy(r["contention"], limit)
    new_noisy = is_noisy(batch["contention"], limit)
    record = dict(batch["batches"][0])
    if new_noisy and (not old_noisy or (batch["contention"] or 0) >= (r["contention"] or 0)):
        r["batches"].append(dict(record, dropped=True))
        return r
    if old_noisy:  # the batch is quiet, or quieter: it replaces every kept sample
        for key in SERIES:
            r[key] = {c: list(v) for c, v in batch[key].items()}
        r["batches"] = [dict(b, dropped=True) for b in r["batches"]] + [record]
        r["contention"] = batch["contention"]
    else:
        for key in SERIES:
            for c, v in batch[key].items():
                r[key][c] = list(r[key][c]) + list(v)
        r["batches"].append(record)
        kept = [b["contention"] for b in r["batches"] if not b.get("dropped")]
        r["contention"] = None if None in kept else max(kept)
    r["stats"].update(batch["stats"])
    r["decision"].update(batch["decision"])
    return summarize(r, cores)


def _keep_quieter_gap(r: dict, batch: dict) -> None:
    """The PyTorch child's kernel-gap measurement: the batch's when it was quieter."""
    new, old = batch.get("kernel_gap"), r.get("kernel_gap")
    if new is not None and (old is None or (new.get("contention") or 0.0)
                            < (old.get("contention") or 0.0)):
        r["kernel_gap"] = new
