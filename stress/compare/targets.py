"""The benchmark's targets, scored from intervals measured in the same run.

Each target is a list of *checks* (one per workload, or one), each an interval
(`stress.compare.ratios`) and a decision (`stats.decide`): PASS when the whole 95%
interval satisfies the threshold, MISS when none of it does, otherwise unresolved.
Rows measured under other load are "noisy": shown, not scored (they can neither pass
nor fail a target). A target is MISS when a check is, PASS when every check is,
otherwise unresolved; n/a when nothing was measured. `recheck` lists the workloads whose
more rounds could still decide it (`stress.compare.schedule` measures them again, within
the time budget).

`evaluate_targets(raw, torch, tuned)`: one setting's targets; `torch` the PyTorch
child's measurements (ratios to PyTorch use that column only), `tuned` the tuned
setting's, for the default setting's allocator target. `evaluate_ft_targets(raw,
label)`: the two targets of free-threaded CPython, from the second interpreter's
measurements of `--python`.
"""
from __future__ import annotations

from typing import Optional

from . import ratios as R
from .samples import is_noisy
from .stats import MISS, NA, NOISY, PASS, UNRESOLVED, Interval, decide, ratio_text
from .workloads import MODEL_WORKLOADS, PROGRAM_WORKLOADS, WORKLOADS

NO_SLOWDOWN = 1.03      # 1 and free-threaded (b): parallel / sequential
WIDE_SPEEDUP = {"default": 1.25, "tuned": 1.5}  # 2, per malloc setting
WIDE = "wide-elementwise"  # 3 excludes it, 4 is about it
STEP_FASTER = 5         # 5: of all the workloads
MAX_ALLOCATOR = 1.05    # 6: default / tuned
MIN_EFFICIENCY = 0.90   # 7, where the engine runs in parallel
MAX_US_PER_NODE = 5.0   # 8: tiny-nodes, sequential backward
MAX_MEMORY = 1.5        # 9: peak bytes, parallel / sequential
FT_SPEEDUP_TINY = 1.4   # free-threaded (a): tiny-nodes parallel over sequential
# 10-12, the real programs (issue 28): training step, ours / PyTorch's
F32_AT_MOST = 1.0       # 10: float32 step at most PyTorch's ...
F32_HOW_MANY = 4        # ... on at least this many of the six
F32_NEVER_ABOVE = 1.15  # 11: and never above this
F64_FASTER = 1.0        # 12: float64 step faster than PyTorch's on all


def check(name: str, iv: Interval, op: str, limit: float, noisy: bool = False,
          digits: int = 2, unit: str = "x") -> dict:
    """One workload's check: the interval and its decision (noisy rows: not scored)."""
    status = NOISY if noisy else decide(iv, op, limit)
    return {"workload": name, **iv.as_dict(), "status": status,
            "text": f"{name} {ratio_text(iv, digits, unit)} {status}"}


def target(tid, text: str, ok, detail: str) -> dict:
    """A target without checks: `ok` True/False (PASS/MISS), None (n/a)."""
    return {"id": tid, "target": text, "detail": detail, "checks": [], "recheck": [],
            "status": NA if ok is None else (PASS if ok else MISS)}


def all_of(tid, text: str, checks: list, note: str = "") -> dict:
    """Every check must PASS: MISS once a scored one is MISS, unresolved while one is
    unresolved or not scored (noisy)."""
    if not checks:
        status = NA
    elif any(c["status"] == MISS for c in checks):
        status = MISS
    elif all(c["status"] == PASS for c in checks):
        status = PASS
    else:  # unresolved checks, or rows not scored: "every workload" is still open
        status = UNRESOLVED
    t = _with_checks(tid, text, status, checks, note)
    return dict(t, recheck=[] if status == MISS else t["recheck"])


def at_least(tid, text: str, k: int, checks: list, note: str = "") -> dict:
    """At least `k` checks must PASS: MISS once too few can (noisy rows counted as if
    they could)."""
    passed = sum(c["status"] == PASS for c in checks)
    could = sum(c["status"] in (PASS, UNRESOLVED, NOISY) for c in checks)
    status = PASS if passed >= k else (MISS if could < k else UNRESOLVED)
    t = _with_checks(tid, text, status, checks, f"{passed} of {len(checks)} PASS, "
                     f"need {k}" + (f"; {note}" if note else ""))
    return dict(t, recheck=t["recheck"] if status == UNRESOLVED else [])


def _with_checks(tid, text, status, checks, note) -> dict:
    open_ = [c["workload"] for c in checks if c["status"] in (UNRESOLVED, NOISY)]
    noisy = [c["workload"] for c in checks if c["status"] == NOISY]
    detail = "; ".join(c["text"] for c in checks) or "not run"
    if noisy:
        detail += f" (not scored, measured under other load: {', '.join(noisy)})"
    return {"id": tid, "target": text, "status": status, "checks": checks,
            "detail": (note + ": " if note else "") + detail, "recheck": open_}


# ---- the targets --------------------------------------------------------------------------
def _no_slowdown(tid, raw: dict, label: str = "") -> dict:
    p = f"{label} " if label else ""
    checks = [check(n, R.within(raw, n, R.par(raw), "seq"), "<=", NO_SLOWDOWN,
                    R.noisy(raw, n), digits=3, unit="") for n in raw["workloads"]]
    return all_of(tid, f"{p}parallel / {p}sequential backward <= {NO_SLOWDOWN} on every "
                  "workload", checks)


def _wide_speedup(raw: dict) -> dict:
    need = WIDE_SPEEDUP.get(raw["setting"], WIDE_SPEEDUP["default"])
    text = f"{WIDE} backward speedup >= {need}x ({raw['setting']} allocator)"
    if WIDE not in raw["workloads"]:
        return target(2, text, None, "not run")
    return all_of(2, text, [check(WIDE, R.speedup(raw, WIDE, R.par(raw)), ">=", need,
                                  R.noisy(raw, WIDE))])


def _torch_checks(raw, torch, names, series, op, limit) -> list:
    return [check(n, R.vs_torch(raw, torch, n, series), op, limit,
                  R.noisy(raw, n) or R.noisy(torch, n)) for n in names]


def _faster_backward(raw: dict, torch: Optional[dict]) -> dict:
    text = (f"backward_parallel faster than PyTorch's backward on every workload but {WIDE} "
            "(the first eight; the real programs: targets 10-12)")
    if torch is None:
        return target(3, text, None, "no PyTorch child column")
    names = [n for n in raw["workloads"]
             if n != WIDE and n in MODEL_WORKLOADS and n in torch["workloads"]]
    return all_of(3, text, _torch_checks(raw, torch, names, "times", "<", 1.0),
                  "ours / PyTorch's time")


def _wide_gap(raw: dict, torch: Optional[dict]) -> dict:
    text = (f"{WIDE}: backward_parallel / PyTorch backward <= numpy's per-element kernel "
            "gap (np.sin + np.cos / torch.sin + torch.cos, one thread each)")
    found = None if torch is None else R.gap_quotient(raw, torch)
    if found is None:
        return target(4, text, None, "not measured")
    ratio, gap, q = found
    gap_noisy = is_noisy(torch["workloads"][WIDE]["kernel_gap"].get("contention"),
                         torch.get("noisy_limit"))
    c = check(WIDE, q, "<=", 1.0, R.noisy(raw, WIDE) or R.noisy(torch, WIDE) or gap_noisy)
    c["text"] = (f"ours / PyTorch's {ratio_text(ratio)}, kernel gap {ratio_text(gap)}, "
                 f"quotient {ratio_text(q)} {c['status']}")
    return all_of(4, text, [c])


def _step_faster(raw: dict, torch: Optional[dict]) -> dict:
    text = (f"training step (forward + backward_parallel) faster than PyTorch's on >= "
            f"{STEP_FASTER} of the first {len(MODEL_WORKLOADS)} workloads")
    if torch is None:
        return target(5, text, None, "no PyTorch child column")
    names = [n for n in raw["workloads"] if n in torch["workloads"] and n in MODEL_WORKLOADS]
    checks = _torch_checks(raw, torch, names, "step", "<", 1.0)
    if set(names) != set(MODEL_WORKLOADS):
        t = at_least(5, text, STEP_FASTER, checks, "not every workload run")
        return dict(t, status=NA, recheck=[])
    return at_least(5, text, STEP_FASTER, checks, "ours / PyTorch's step time")


def _allocator(raw: dict, tuned: Optional[dict]) -> dict:
    text = (f"default allocator within {MAX_ALLOCATOR}x of tune_allocator() on every "
            "workload (backward_parallel's backward, default / tuned)")
    if raw["setting"] != "default" or tuned is None:
        return target(6, text, None, "needs both allocator settings (scored in the "
                      "default setting's list)")
    names = [n for n in raw["workloads"] if n in tuned["workloads"]]
    return all_of(6, text, [check(n, R.allocator(raw, tuned, n), "<=", MAX_ALLOCATOR,
                                  R.noisy(raw, n) or R.noisy(tuned, n)) for n in names])


def _efficiency(raw: dict) -> dict:
    text = (f"efficiency (bound / backward_parallel time) >= {MIN_EFFICIENCY} where the "
            "engine runs in parallel")
    names = [n for n, r in raw["workloads"].items()
             if r["decision"][R.par(raw)]["mode"] == "parallel"]
    return all_of(7, text, [check(n, R.efficiency(raw, n), ">=", MIN_EFFICIENCY,
                                  R.noisy(raw, n), unit="") for n in names])


def _tiny_per_node(raw: dict, torch: Optional[dict]) -> dict:
    text = f"tiny-nodes: sequential backward <= {MAX_US_PER_NODE:g} us per node"
    t = raw["workloads"].get("tiny-nodes")
    if t is None:
        return target(8, text, None, "not run")
    us = R.per_unit(raw, "tiny-nodes", "seq", t["nodes"]).scaled(1e6)
    c = check("tiny-nodes", us, "<=", MAX_US_PER_NODE, R.noisy(raw, "tiny-nodes"), 1, " us")
    ops = t["nodes"] - t["bound"]["by_op"].get("AccumulateGrad", {"count": 0})["count"]
    fwd = R.per_unit(raw, "tiny-nodes", "seq", ops, "forward").scaled(1e6)
    note = f"{t['nodes']} nodes; forward recording {ratio_text(fwd, 1, ' us')} per op ({ops} ops)"
    if torch is not None and "tiny-nodes" in torch["workloads"]:
        tt = torch["workloads"]["tiny-nodes"]
        tb = R.per_unit(torch, "tiny-nodes", "torch", tt["torch_nodes"]).scaled(1e6)
        tf = R.per_unit(torch, "tiny-nodes", "torch", ops, "forward").scaled(1e6)
        note += (f"; PyTorch: backward {ratio_text(tb, 1, ' us')} per node "
                 f"({tt['torch_nodes']} nodes), forward {ratio_text(tf, 1, ' us')} per op")
    return all_of(8, text, [c], note)


def _memory(raw: dict) -> dict:
    p = R.par(raw)
    checks = []
    for n, r in raw["workloads"].items():
        v = r["peak_bytes"][p] / max(r["peak_bytes"]["seq"], 1)  # bytes: no interval
        checks.append(check(n, Interval(v, v, v), "<=", MAX_MEMORY))
    return all_of(9, f"peak memory of backward_parallel <= {MAX_MEMORY}x the sequential "
                  "engine's (traced bytes, one pass each)", checks)


def _programs(raw: dict, torch: Optional[dict], dtype: str) -> tuple:
    """(every program workload of `dtype`, those measured in both `raw` and `torch`)."""
    every = [n for n in PROGRAM_WORKLOADS if WORKLOADS[n].dtype == dtype]
    return every, [n for n in every if n in raw["workloads"] and n in torch["workloads"]]


def _program_f32(raw: dict, torch: Optional[dict]) -> list:
    """Targets 10 and 11: the real programs' float32 training step against PyTorch's."""
    t10 = (f"real programs, float32: training step at most PyTorch's on >= {F32_HOW_MANY} "
           "of the 6")
    t11 = f"real programs, float32: training step <= {F32_NEVER_ABOVE}x PyTorch's on all 6"
    if torch is None:
        return [target(10, t10, None, "no PyTorch child column"),
                target(11, t11, None, "no PyTorch child column")]
    every, names = _programs(raw, torch, "f32")
    if not names:
        return [target(10, t10, None, "not run"), target(11, t11, None, "not run")]
    first = at_least(10, t10, F32_HOW_MANY,
                     _torch_checks(raw, torch, names, "step", "<=", F32_AT_MOST),
                     "ours / PyTorch's step time")
    if len(names) < len(every):  # "4 of the 6" needs all six
        first = dict(first, status=NA, recheck=[],
                     detail="not every program run: " + first["detail"])
    return [first, all_of(11, t11, _torch_checks(raw, torch, names, "step", "<=",
                                                 F32_NEVER_ABOVE), "ours / PyTorch's step")]


def _program_f64(raw: dict, torch: Optional[dict]) -> dict:
    """Target 12: the real programs' float64 training step faster than PyTorch's."""
    text = "real programs, float64: training step faster than PyTorch's on all 6"
    if torch is None:
        return target(12, text, None, "no PyTorch child column")
    _, names = _programs(raw, torch, "f64")
    return all_of(12, text, _torch_checks(raw, torch, names, "step", "<", F64_FASTER),
                  "ours / PyTorch's step")


def evaluate_targets(raw: dict, torch: Optional[dict] = None,
                     tuned: Optional[dict] = None) -> list:
    """The benchmark's targets for one setting's measurements `raw` (same run)."""
    return [_no_slowdown(1, raw), _wide_speedup(raw), _faster_backward(raw, torch),
            _wide_gap(raw, torch), _step_faster(raw, torch), _allocator(raw, tuned),
            _efficiency(raw), _tiny_per_node(raw, torch), _memory(raw),
            *_program_f32(raw, torch), _program_f64(raw, torch)]


def evaluate_all(settings: dict, torch: Optional[dict] = None) -> dict:
    """Every setting's targets (setting -> list), the PyTorch child's column `torch`
    beside each and the tuned setting beside the default one: what the report shows and
    the JSON keeps, recomputable from the JSON's `settings` and `torch_child`."""
    return {s: evaluate_targets(raw, torch, settings.get("tuned") if s == "default" else None)
            for s, raw in settings.items()}


def evaluate_ft_targets(raw: dict, label: str = "FT") -> list:
    """The targets of free-threaded CPython, from the second interpreter's measurements:
    (a) tiny-nodes parallel speedup over sequential >= 1.4x, (b) parallel / sequential
    <= 1.03 on every workload (target 1's wording and threshold)."""
    text = (f"tiny-nodes: {label} parallel speedup over {label} sequential >= "
            f"{FT_SPEEDUP_TINY}x")
    if "tiny-nodes" in raw["workloads"]:
        tiny = all_of("a", text, [check("tiny-nodes", R.speedup(raw, "tiny-nodes", R.par(raw)),
                                        ">=", FT_SPEEDUP_TINY, R.noisy(raw, "tiny-nodes"))])
    else:
        tiny = target("a", text, None, "not run")
    return [tiny, _no_slowdown("b", raw, label)]


def statuses(targets: list) -> list:
    """The statuses of a list of targets, in order."""
    return [t["status"] for t in targets]
