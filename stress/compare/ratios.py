"""The ratios the report prints and the targets score, each a `stats.Interval` from a
workload's samples: within one process paired by round, across processes (the PyTorch
child, the other malloc setting) independent. Every function takes the raw
measurements as written to the JSON, so the report and the targets can be recomputed
from it; the bootstrap is seeded from the run's seed and the quantity's name.

`raw` is one setting's measurements (`measure.run_setting`), `torch` the PyTorch
child's (`measure.run_torch`), `r` a workload's entry of either; series are "times"
(backward), "forward" and "step"."""
from __future__ import annotations

from typing import Optional

from .samples import is_noisy
from .stats import Interval, boot_medians, interval, median_interval, ratio_interval, seed_for


def par(raw: dict) -> str:
    """The configuration of `backward_parallel` at all cores."""
    return f"par{raw['cores']}"


def noisy(raw: Optional[dict], name: str) -> bool:
    """Workload `name` of `raw` was measured under other load (not scored)."""
    if raw is None or name not in raw["workloads"]:
        return False
    return is_noisy(raw["workloads"][name]["contention"], raw.get("noisy_limit"))


def within(raw: dict, name: str, num: str, den: str, series: str = "times") -> Interval:
    """median(num) / median(den) of one process's samples, paired by round."""
    r = raw["workloads"][name]
    return ratio_interval(r[series][num], r[series][den],
                          seed_for(raw["seed"], raw["setting"], name, series, num, den), True)


def across(a: dict, ca: str, b: dict, cb: str, name: str, series: str = "times") -> Interval:
    """median of `ca` in `a` over median of `cb` in `b` (two processes), independent."""
    sa, sb = a["workloads"][name][series][ca], b["workloads"][name][series][cb]
    return ratio_interval(sa, sb, seed_for(a["seed"], a["setting"], b["setting"], name, series,
                                           ca, cb), False)


def speedup(raw: dict, name: str, config: str) -> Interval:
    """seq / `config` (backward)."""
    return within(raw, name, "seq", config)


def efficiency(raw: dict, name: str) -> Interval:
    """bound / median backward time at all cores (the bound is one profiled number)."""
    r = raw["workloads"][name]
    ts = r["times"][par(raw)]
    boot = boot_medians({"p": ts}, seed_for(raw["seed"], raw["setting"], name, "efficiency"))
    b = r["bound"]["bound"]
    return interval(b / boot["p"], r["efficiency"])


def per_unit(raw: dict, name: str, config: str, count: int, series: str = "times") -> Interval:
    """Median seconds of `config`'s `series` divided by `count` (nodes or ops)."""
    r = raw["workloads"][name]
    iv = median_interval(r[series][config], seed_for(raw["seed"], raw["setting"], name, series,
                                                    config, "per_unit"))
    return iv.scaled(1 / count)


def vs_torch(raw: dict, torch: dict, name: str, series: str = "times",
             config: Optional[str] = None) -> Interval:
    """Ours (`config`, default `backward_parallel` at all cores) / the PyTorch child's."""
    return across(raw, config or par(raw), torch, "torch", name, series)


def in_vs_child(raw: dict, torch: dict, name: str, series: str = "times") -> Interval:
    """PyTorch in the benchmark's process / PyTorch in its own process."""
    return across(raw, "torch", torch, "torch", name, series)


def kernel_gap(torch: dict) -> Optional[Interval]:
    """numpy / torch (one thread each) on wide-elementwise's kernels, paired by round;
    None when not measured."""
    r = torch["workloads"].get("wide-elementwise", {})
    k = r.get("kernel_gap")
    if k is None:
        return None
    s = k["samples"]
    return ratio_interval(s["numpy"], s["torch1"], seed_for(torch["seed"], "kernel_gap"), True)


def gap_quotient(raw: dict, torch: dict) -> Optional[tuple]:
    """(par / torch backward on wide-elementwise, kernel gap, their quotient), each with
    its interval (three processes' samples, independent); None when not measured."""
    gap = kernel_gap(torch)
    name = "wide-elementwise"
    if gap is None or name not in raw["workloads"]:
        return None
    ratio = vs_torch(raw, torch, name)
    seed = seed_for(raw["seed"], raw["setting"], "gap_quotient")
    k = torch["workloads"][name]["kernel_gap"]["samples"]
    b_par = boot_medians({"p": raw["workloads"][name]["times"][par(raw)]}, seed)["p"]
    b_t = boot_medians({"t": torch["workloads"][name]["times"]["torch"]}, seed + 1)["t"]
    b_k = boot_medians({"n": k["numpy"], "t": k["torch1"]}, seed + 2)
    q = (b_par / b_t) / (b_k["n"] / b_k["t"])
    return ratio, gap, interval(q, ratio.point / gap.point)


def allocator(default: dict, tuned: dict, name: str) -> Interval:
    """backward_parallel's backward, default malloc / tuned malloc (two processes)."""
    return across(default, par(default), tuned, par(tuned), name)
