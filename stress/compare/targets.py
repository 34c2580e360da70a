"""The benchmark's targets, PASS/MISS from ratios measured in the same run.

`evaluate_targets(raw)`: the six targets, from one setting's measurements (one
interpreter). `evaluate_ft_targets(raw, label)`: the two targets of free-threaded
CPython, from the second interpreter's measurements of `--python`. Each target is a
dict: id, target (the text), detail (the numbers), status PASS, MISS or n/a (not
measured in this run).
"""
from __future__ import annotations

NO_SLOWDOWN = 1.03      # target 1 and free-threaded (b): parallel / sequential, 3% noise
WIDE_SPEEDUP = {"default": 1.25, "tuned": 1.5}  # target 2, per malloc setting
TORCH_WORKLOADS = ("wide-matmul", "attention", "mlp-chain")  # target 3
MIN_EFFICIENCY = 0.85   # target 5, where width >= MIN_WIDTH
MIN_WIDTH = 2
MAX_MEMORY = 1.5        # target 6: peak bytes, parallel / sequential
FT_SPEEDUP_TINY = 1.4   # free-threaded (a): tiny-nodes parallel over sequential


def target(tid, text: str, ok, detail: str) -> dict:
    """One target's line: `ok` None means not measured (n/a)."""
    return {"id": tid, "target": text, "detail": detail,
            "status": "n/a" if ok is None else ("PASS" if ok else "MISS")}


def _all_within(values: dict, limit: float, fmt) -> tuple:
    """(every value <= limit, "worst NAME V; over: ...") with `fmt(value)` for numbers."""
    worst = max(values, key=values.get)
    over = ", ".join(f"{n} {fmt(v)}" for n, v in values.items() if v > limit) or "none"
    return all(v <= limit for v in values.values()), f"worst {worst} {fmt(values[worst])}; " \
        f"over: {over}"


def _no_slowdown(tid, wl: dict, par: str, label: str = "") -> dict:
    """parallel / sequential <= NO_SLOWDOWN on every workload (`label`: an interpreter)."""
    p = f"{label} " if label else ""
    ratios = {n: r["median"][par] / r["median"]["seq"] for n, r in wl.items()}
    ok, detail = _all_within(ratios, NO_SLOWDOWN, lambda v: f"{v:.3f}")
    return target(tid, f"{p}parallel / {p}sequential <= {NO_SLOWDOWN} on every workload",
                  ok, detail)


def _wide_speedup(wl: dict, par: str, setting: str) -> dict:
    need = WIDE_SPEEDUP.get(setting, WIDE_SPEEDUP["default"])
    if "wide-elementwise" not in wl:
        return target(2, f"wide-elementwise speedup >= {need}x", None, "not run")
    s = wl["wide-elementwise"]["speedup"][par]
    return target(2, f"wide-elementwise speedup >= {need}x ({setting} allocator)", s >= need,
                  f"{s:.2f}x")


def _faster_than_torch(wl: dict, par: str) -> dict:
    text = ", ".join(TORCH_WORKLOADS) + " faster than PyTorch backward()"
    present = [n for n in TORCH_WORKLOADS if n in wl]
    if not present:
        return target(3, text, None, "not run")
    if any("torch" not in wl[n]["median"] for n in present):
        return target(3, text, None, "torch not run")
    r = {n: wl[n]["median"][par] / wl[n]["median"]["torch"] for n in present}
    return target(3, text, all(v < 1 for v in r.values()),
                  ", ".join(f"{n} {v:.2f}x torch's time" for n, v in r.items()))


def _tiny_per_node(wl: dict) -> dict:
    text = "tiny-nodes: sequential time per node <= PyTorch's"
    t = wl.get("tiny-nodes")
    if t is None or "torch" not in t["median"]:
        return target(4, text, None, "not run")
    ours = t["median"]["seq"] / t["nodes"]
    theirs = t["median"]["torch"] / t["torch_nodes"]
    return target(4, text, ours <= theirs, f"{ours * 1e6:.1f} us ({t['nodes']} nodes) vs "
                  f"{theirs * 1e6:.1f} us ({t['torch_nodes']} nodes)")


def _efficiency(wl: dict) -> dict:
    wide = {n: r["efficiency"] for n, r in wl.items() if r["bound"]["width"] >= MIN_WIDTH}
    return target(5, f"efficiency (bound / parallel time) >= {MIN_EFFICIENCY} where width >= "
                  f"{MIN_WIDTH}",
                  all(v >= MIN_EFFICIENCY for v in wide.values()) if wide else None,
                  ", ".join(f"{n} {v:.2f}" for n, v in wide.items())
                  or f"no workload with width >= {MIN_WIDTH}")


def _memory(wl: dict, par: str) -> dict:
    mem = {n: r["peak_bytes"][par] / max(r["peak_bytes"]["seq"], 1) for n, r in wl.items()}
    ok, detail = _all_within(mem, MAX_MEMORY, lambda v: f"{v:.2f}x")
    return target(6, f"peak memory of backward_parallel <= {MAX_MEMORY}x the sequential "
                  "engine's", ok, detail)


def evaluate_targets(raw: dict) -> list:
    """The benchmark's six targets, from one setting's measurements (same run)."""
    wl, par = raw["workloads"], f"par{raw['cores']}"
    return [_no_slowdown(1, wl, par), _wide_speedup(wl, par, raw["setting"]),
            _faster_than_torch(wl, par), _tiny_per_node(wl), _efficiency(wl),
            _memory(wl, par)]


def evaluate_ft_targets(raw: dict, label: str = "FT") -> list:
    """The targets of free-threaded CPython, from the second interpreter's measurements:
    (a) tiny-nodes parallel speedup over sequential >= 1.4x, (b) parallel / sequential
    <= 1.03 on every workload (target 1's wording and noise allowance)."""
    wl, par = raw["workloads"], f"par{raw['cores']}"
    text = (f"tiny-nodes: {label} parallel speedup over {label} sequential >= "
            f"{FT_SPEEDUP_TINY}x")
    if "tiny-nodes" in wl:
        s = wl["tiny-nodes"]["speedup"][par]
        tiny = target("a", text, s >= FT_SPEEDUP_TINY, f"{s:.2f}x")
    else:
        tiny = target("a", text, None, "not run")
    return [tiny, _no_slowdown("b", wl, par, label)]

