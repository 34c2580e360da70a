"""The report of `--python ft|PATH`: this interpreter and the other one side by side (per
malloc setting a table and the free-threaded targets), then each one's own detail as
in `report.report`."""
from __future__ import annotations

import statistics

from . import ratios as R
from .report import (LEGEND, cores_text, decision_text, libraries_text, markdown, ms,
                     row_name, setting_section, targets_text)
from .stats import ratio_text


def scaling_line(label: str, raws) -> str:
    """Median over children of numpy_scaling, one line."""
    per = {}
    for raw in raws:
        for size, v in (raw.get("numpy_scaling") or {}).items():
            per.setdefault(size, []).append(v)
    if not per:
        return f"- {label}: not measured"
    cores = next(iter(raws))["cores"]
    parts = [f"{int(size):,} elements {statistics.median(v):.2f}x" for size, v in per.items()]
    return (f"- {label}: numpy alone, {cores} threads vs 1 running `tanh(a * 1.0001 + 0.1)` "
            f"loops: " + ", ".join(parts) + f" (median of {len(next(iter(per.values())))} "
            "measurements, one per workload run)")


def env_line(label: str, env: dict) -> str:
    """One interpreter: path, version, build, whether the GIL was on, libraries."""
    build = "free-threaded build" if env.get("free_threaded_build") else "GIL build"
    gil = "enabled" if env.get("gil_enabled", True) else "disabled"
    return (f"- {label}: `{env.get('executable')}`: Python {env['python']} ({build}, GIL "
            f"{gil}), {libraries_text(env)}")


def _pythons_row(n, a, b, shared) -> list:
    ra, rb, pa_, pb = a["workloads"][n], b["workloads"][n], R.par(a), R.par(b)
    row = [row_name(a, n, b), str(ra["nodes"])]
    for raw, r, par in ((a, ra, pa_), (b, rb, pb)):
        row += [ms(r["median"]["seq"]), ms(r["median"][par]),
                ratio_text(R.speedup(raw, n, par))]
    if shared:
        row.append(f"{ms(rb['median']['shared'])} ({ratio_text(R.speedup(b, n, 'shared'))})"
                   if "shared" in rb["median"] else "n/a")
    return row + [decision_text(rb["decision"][pb]), ratio_text(R.across(b, pb, a, pa_, n)),
                  f"{cores_text(ra['contention'])} / {cores_text(rb['contention'])}"]


def pythons_table(raws: dict) -> str:
    """Per workload: both interpreters' sequential and parallel (all cores) times, the
    second's engine decision and its parallel time over the first's."""
    (la, a), (lb, b) = raws.items()
    head = ["workload", "nodes"]
    for lab in (la, lb):
        head += [f"{lab} seq ms", f"{lab} par ms", f"{lab} speedup"]
    shared = any("shared" in r["median"] for r in b["workloads"].values())
    if shared:  # measured only without the GIL
        head.append(f"{lb} share_cheap ms")
    head += [f"{lb} decision", f"{lb} par / {la} par", f"other load ({la} / {lb})"]
    return markdown(head, [_pythons_row(n, a, b, shared) for n in a["workloads"]])


def _gil_notes(ia, ib) -> list:
    """Warnings when the GIL was not where the labels say it is."""
    gil = {i["label"]: any(r["env"].get("gil_enabled", True) for r in i["settings"].values())
           for i in (ia, ib)}
    la, lb = ia["label"], ib["label"]
    notes = []
    if lb == "FT" and gil[lb]:
        notes.append(f"note: the GIL was enabled in the {lb} runs: not a free-threaded "
                     "measurement (an extension turned it on, or not a free-threaded build)")
    if la == "GIL" and not gil[la]:
        notes.append(f"note: the GIL was disabled in the {la} runs: run the comparison "
                     "from a GIL build (`make bench-ft` uses .venv's interpreter)")
    return notes


def _legend(la: str, lb: str) -> str:
    return (f"Times: backward pass only, milliseconds, median; `par` is "
            f"`backward_parallel` at all cores (the default engine), `speedup` = seq / par "
            f"within one interpreter; `{lb} share_cheap` (without the GIL only) is "
            f"`Engine(share_cheap=True, min_work=0)`, the opt-in sharing of cheap "
            f"nodes, with its speedup; `{lb} decision` is the default engine's choice "
            f"(`stats`); `{lb} par / {la} par` below 1 means {lb}'s parallel pass is "
            f"faster; `other load` = cores' worth of CPU used by other processes while "
            f"timing (0 = quiet machine); ratios with their 95% bootstrap interval.")


def _ceiling(interpreters) -> list:
    lines = ["Ceiling for small nodes (how far two threads can overlap small numpy "
             "kernels at all, measured beside each workload):"]
    for i in interpreters:
        cores = next(iter(i["settings"].values()))["cores"]
        runs = [r for raw in i["settings"].values() for r in raw.get("numpy_runs", []) if r]
        lines.append(scaling_line(i["label"], [{"cores": cores, "numpy_scaling": r}
                                               for r in runs]))
    return lines + [""]


def _head(result, ia, ib) -> list:
    la, lb = ia["label"], ib["label"]
    sa = next(iter(ia["settings"].values()))
    title = (f"# Backward pass: parallel vs sequential engine, {la} and {lb} interpreters "
             f"side by side ({result['meta']['date']})")
    how = (f"`{result['meta']['command']}`: {sa['cores']} usable cores; sizes {sa['size']}, "
           f"median of {sa['reps']} after a warm-up. Each workload is measured in a fresh "
           f"process per interpreter, the two one after the other (which goes first "
           f"alternates per workload).")
    parts = [title, "", how, ""]
    parts += [env_line(i["label"], next(iter(i["settings"].values()))["env"])
              for i in (ia, ib)]
    notes = _gil_notes(ia, ib)
    return parts + ([""] + notes if notes else []) + ["", _legend(la, lb), ""]


def report_pythons(result: dict) -> str:
    """The report of `--python`: `result["interpreters"]` holds this interpreter, then
    the other; `result["ft_targets"]` the other's free-threaded targets per setting."""
    ia, ib = result["interpreters"].values()
    la, lb = ia["label"], ib["label"]
    parts = _head(result, ia, ib) + _ceiling((ia, ib))
    for s in ia["settings"]:
        parts += [f"## {la} vs {lb} (allocator: {s})", "",
                  pythons_table({la: ia["settings"][s], lb: ib["settings"][s]}), "",
                  f"Targets ({lb} interpreter, free-threaded CPython):",
                  targets_text(result["ft_targets"][s]), ""]
    parts += ["Per-interpreter detail below. " + LEGEND, ""]
    for i in (ia, ib):
        for s, raw in i["settings"].items():
            parts += setting_section(f"{i['label']} detail: allocator ", s, raw,
                                     i["targets"][s])
    return "\n".join(parts)
