"""The benchmark's first screen: one row per workload (ours against the sequential
engine and against PyTorch, each with its 95% interval, and the workload's verdict
against the targets of `stress.compare.targets`), one line counting the targets, and
how to get a quiet measurement when noise left targets open.

A workload's verdict comes from the checks the targets made of it (default malloc
setting): MISS when any is MISS, PASS when every one is PASS, otherwise unresolved (a
check still open, or a row measured under other load: noisy rows are not scored). The
MISS and unresolved cells name the targets concerned.
"""
from __future__ import annotations

from . import ratios as R
from .report import markdown
from .stats import MISS, NA, NOISY, PASS, UNRESOLVED, ratio_text

QUIET_HINT = ("for a quiet measurement: `make bench BENCH_ARGS='--wait-quiet 120'` (before "
              "timing each workload, waits up to 120 s for other processes to use less than "
              "`--noisy` cores), or run when the machine is idle")


def workload_verdict(name: str, targets: list) -> tuple:
    """(PASS/MISS/unresolved/n/a, ids of the targets that missed or are open) of
    workload `name` from the checks of `targets` (one setting's list)."""
    by_status: dict = {}
    for t in targets:
        for c in t["checks"]:
            if c["workload"] == name:
                s = UNRESOLVED if c["status"] == NOISY else c["status"]
                by_status.setdefault(s, []).append(t["id"])
    if not by_status:
        return NA, []
    if MISS in by_status:
        return MISS, by_status[MISS]
    if set(by_status) == {PASS}:
        return PASS, []
    return UNRESOLVED, by_status.get(UNRESOLVED, [])


def verdict_cell(status: str, ids: list, noisy: bool) -> str:
    """`MISS (targets 3, 7)`, `unresolved (target 1)`, `unresolved (noisy)`, `PASS`."""
    if noisy and status == UNRESOLVED:  # every check of the row is open: no list
        return f"{status} (noisy: measured under other load, not scored)"
    why = []
    if ids:
        why.append(f"target{'s' if len(set(ids)) > 1 else ''} "
                   + ", ".join(str(i) for i in dict.fromkeys(ids)))
    return status + (f" ({'; '.join(why)})" if why else "")


def verdict_table(raw: dict, torch, targets: list) -> str:
    """Per workload of one setting: ours (`backward_parallel` at all cores) as a speedup
    over the sequential engine, our backward and training-step times over PyTorch's (its
    own process; the columns are left out without PyTorch) and the verdict."""
    p = R.par(raw)
    head = ["workload", f"speedup over sequential ({raw['cores']} cores)"]
    if torch is not None:
        head += ["time / PyTorch's (below 1: faster)", "training step / PyTorch's"]
    rows = []
    for n in raw["workloads"]:
        row = [n, ratio_text(R.speedup(raw, n, p))]
        if torch is not None:
            row += ([ratio_text(R.vs_torch(raw, torch, n, s)) for s in ("times", "step")]
                    if n in torch["workloads"] else ["n/a", "n/a"])
        noisy = R.noisy(raw, n) or R.noisy(torch, n)
        rows.append(row + [verdict_cell(*workload_verdict(n, targets), noisy)])
    return markdown(head + ["verdict"], rows)


def counts(target_lists: dict) -> dict:
    """{status: count} over every setting's targets, and "noisy": how many of the open
    targets have a check measured under other load."""
    out = {PASS: 0, MISS: 0, UNRESOLVED: 0, NA: 0, "noisy": 0}
    for ts in target_lists.values():
        for t in ts:
            out[t["status"]] = out.get(t["status"], 0) + 1
            if t["status"] == UNRESOLVED and any(c["status"] == NOISY for c in t["checks"]):
                out["noisy"] += 1
    return out


def summary_line(target_lists: dict) -> str:
    """`Targets: 5 PASS, 1 MISS, 3 unresolved (2 of them by noise), 2 n/a ...`, and the
    quiet-measurement hint when noise left at least one target open."""
    c = counts(target_lists)
    where = " (both allocator settings)" if len(set(target_lists) - {"rows"}) > 1 else ""
    noise = f" ({c['noisy']} of them because rows were measured under other load)" \
        if c["noisy"] else ""
    line = (f"Targets{where}: {c[PASS]} PASS, {c[MISS]} MISS, {c[UNRESOLVED]} unresolved"
            f"{noise}, {c[NA]} n/a.")
    return line + (f" {QUIET_HINT[0].upper()}{QUIET_HINT[1:]}." if c["noisy"] else "")


def verdict(result: dict, files: dict) -> str:
    """The first screen of one interpreter's result: the verdict table (default malloc
    setting), the targets' count, and where the plot, full tables and JSON are
    (`files`: label -> path or a note)."""
    from .report import extra_rows_section
    settings, torch = result["settings"], result.get("torch_child")
    meta = result["meta"]
    parts = []
    if settings:
        setting = "default" if "default" in settings else next(iter(settings))
        parts += [f"# Verdict: backward_parallel against the sequential engine and PyTorch "
                  f"({meta['date']}, {setting} malloc)", "",
                  verdict_table(settings[setting], torch, result["targets"][setting]), ""]
    parts += extra_rows_section(result)
    lists = dict(result["targets"], **({"rows": result["extra_targets"]}
                                       if result.get("extra_targets") else {}))
    parts.append(summary_line(lists))
    if torch is None and settings:
        parts.append("No torch: " + (meta.get("torch_hint") or "--no-torch given") + ".")
    parts += [""] + [f"{label}: {path}" for label, path in files.items()]
    return "\n".join(parts)


def eta_text(seconds) -> str:
    """A duration for the progress line: `45s`, `2m10s`, `1h05m`, `?` when unknown."""
    if seconds is None or seconds < 0:
        return "?"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def progress_line(done: int, total: int, name: str, elapsed: float) -> str:
    """`[3/12] name ... ETA 2m10s`: unit `done + 1` of `total` starting, the ETA from
    the mean time of the `done` finished units."""
    eta = elapsed / done * (total - done) if done else None
    return f"[{done + 1}/{total}] {name} ... ETA {eta_text(eta)}"
