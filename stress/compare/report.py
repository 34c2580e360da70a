"""What the benchmark writes: progress on stderr (`log`), the markdown report on stdout
and the JSON of `--out` (`write_json`).

`report(result)`: one interpreter, a table and the targets per malloc setting.
`report_pythons(result)` (`--python ft|PATH`): this interpreter and the other one side
by side (per malloc setting a table and the free-threaded targets), then each one's own
detail as in `report`."""
from __future__ import annotations

import json
import statistics
import sys

LEGEND = (
    "Times: backward pass only, milliseconds; `par Nw` is `backward_parallel(num_workers=N)`"
    " with its speedup over the sequential engine; `par/seq` at all cores; `bound` = "
    "max(one-core work / cores, critical path) from a profiled sequential walk, `eff` = "
    "bound / parallel time, `width` = work / critical path; peak = tracemalloc peak above "
    "the level at the start of backward; `other load` = cores' worth of CPU used by other "
    "processes while timing (0 = quiet machine).")


def log(msg: str) -> None:
    """Progress, on stderr (stdout is the report)."""
    print(msg, file=sys.stderr, flush=True)


def write_json(path: str, obj, indent=None) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=indent, default=_jsonable)


def _jsonable(o):
    return o.item() if hasattr(o, "item") else str(o)


# ---- cells -------------------------------------------------------------------------------
def ms(t) -> str:
    return f"{t * 1e3:.1f}"


def cores_text(c) -> str:
    """Cores' worth of CPU used by other processes, or n/a where not measured."""
    return "n/a" if c is None else f"{c:.2f}"


def mib(b) -> str:
    return f"{b / 2**20:.1f}" if b >= 2**20 else f"{b / 2**20:.3f}"


def decision_text(d) -> str:
    if d["mode"] == "parallel":
        return f"parallel ({d['reason']})"
    reason = d["reason"].split(" (")[0]
    return f"sequential: {reason}"


def libraries_text(env: dict) -> str:
    """`numpy V, BLAS ..., torch V (N threads)` from an environment record."""
    blas = ", ".join(f"{b['internal_api']} {b['version']} ({b['num_threads']} threads)"
                     for b in env["blas"]) or "none"
    torch = f"torch {env['torch']} ({env['torch_threads']} threads)" if env["torch"] \
        else "no torch"
    return f"numpy {env['numpy']}, BLAS {blas}, {torch}"


def markdown(head, rows) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def targets_text(targets: list) -> str:
    """The targets as markdown list items: `- STATUS ID. target: detail`."""
    return "\n".join(f"- {t['status']:4s} {t['id']}. {t['target']}: {t['detail']}"
                     for t in targets)


# ---- one interpreter ---------------------------------------------------------------------
def _setting_row(name, r, workers, par, torch) -> list:
    m = r["median"]
    row = [name, str(r["nodes"]), f"{r['bound']['width']:.1f}", ms(m["seq"])]
    row += [f"{ms(m[f'par{n}'])} ({r['speedup'][f'par{n}']:.2f}x)" for n in workers]
    row += [f"{m[par] / m['seq']:.3f}", ms(r["bound"]["bound"]), f"{r['efficiency']:.2f}"]
    if torch:
        row.append(ms(m["torch"]) if "torch" in m else "n/a")
    return row + [mib(r["peak_bytes"]["seq"]), mib(r["peak_bytes"][par]),
                  decision_text(r["decision"][par]), cores_text(r["contention"])]


def setting_table(raw: dict) -> str:
    """One row per workload of one setting's measurements."""
    cores, workers = raw["cores"], raw["workers"]
    torch = any("torch" in r["median"] for r in raw["workloads"].values())
    wcols = [f"{n}w{' (all)' if n == cores else ''}" for n in workers]
    head = (["workload", "nodes", "width", "seq ms"] + [f"par {c} ms" for c in wcols] +
            ["par/seq", "bound ms", "eff"] + (["torch ms"] if torch else []) +
            ["peak seq MiB", "peak par MiB", "decision (all cores)", "other load"])
    return markdown(head, [_setting_row(n, r, workers, f"par{cores}", torch)
                           for n, r in raw["workloads"].items()])


def allocator_table(raws: dict) -> str:
    """The malloc settings side by side (`raws`: setting -> measurements)."""
    first = next(iter(raws.values()))
    par = f"par{first['cores']}"
    head = ["workload"]
    for s in raws:
        head += [f"seq ms ({s})", f"par ms ({s})", f"speedup ({s})", f"faults par ({s})"]
    rows = []
    for n in first["workloads"]:
        row = [n]
        for raw in raws.values():
            r = raw["workloads"][n]
            row += [ms(r["median"]["seq"]), ms(r["median"][par]),
                    f"{r['speedup'][par]:.2f}x", f"{r['faults'][par]:.0f}"]
        rows.append(row)
    return markdown(head, rows)


def setting_section(title: str, setting: str, raw: dict, targets: list) -> list:
    """`## title: allocator ...`, the setting's table and its targets, as lines."""
    tuned = "" if setting == "default" else f" (tune_allocator() -> {raw['tune_allocator']})"
    return [f"## {title}{setting}{tuned}", "", setting_table(raw), "",
            "Targets:", targets_text(targets), ""]


def report(result: dict) -> str:
    """The report of one interpreter: a table and the targets per malloc setting."""
    raws = result["settings"]
    first = next(iter(raws.values()))
    env = first["env"]
    parts = [f"# Backward pass: parallel vs sequential engine ({result['meta']['date']})", "",
             f"`{result['meta']['command']}`: {first['cores']} usable cores, "
             f"Python {env['python']}, {libraries_text(env)}; "
             f"sizes {first['size']}, median of {first['reps']} after a warm-up.", "",
             LEGEND, ""]
    for s, raw in raws.items():
        parts += setting_section("Allocator: ", s, raw, result["targets"][s])
    if len(raws) == 2:
        parts += ["## Allocator settings side by side", "", allocator_table(raws), ""]
    return "\n".join(parts)


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


# ---- two interpreters side by side ------------------------------------------------------
def env_line(label: str, env: dict) -> str:
    build = "free-threaded build" if env.get("free_threaded_build") else "GIL build"
    gil = "enabled" if env.get("gil_enabled", True) else "disabled"
    return (f"- {label}: `{env.get('executable')}`: Python {env['python']} ({build}, GIL "
            f"{gil}), {libraries_text(env)}")


def _pythons_row(n, ra, rb, pa_, pb, shared) -> list:
    row = [n, str(ra["nodes"])]
    for r, par in ((ra, pa_), (rb, pb)):
        row += [ms(r["median"]["seq"]), ms(r["median"][par]), f"{r['speedup'][par]:.2f}x"]
    if shared:
        row.append(f"{ms(rb['median']['shared'])} ({rb['speedup']['shared']:.2f}x)"
                   if "shared" in rb["median"] else "n/a")
    return row + [decision_text(rb["decision"][pb]),
                  f"{rb['median'][pb] / ra['median'][pa_]:.2f}",
                  f"{cores_text(ra['contention'])} / {cores_text(rb['contention'])}"]


def pythons_table(raws: dict) -> str:
    """Per workload: both interpreters' sequential and parallel (all cores) times, the
    second's engine decision and its parallel time over the first's."""
    (la, a), (lb, b) = raws.items()
    pa_, pb = f"par{a['cores']}", f"par{b['cores']}"
    head = ["workload", "nodes"]
    for lab in (la, lb):
        head += [f"{lab} seq ms", f"{lab} par ms", f"{lab} speedup"]
    shared = any("shared" in r["median"] for r in b["workloads"].values())
    if shared:  # measured only without the GIL
        head.append(f"{lb} share_cheap ms")
    head += [f"{lb} decision", f"{lb} par / {la} par", f"other load ({la} / {lb})"]
    return markdown(head, [_pythons_row(n, ra, b["workloads"][n], pa_, pb, shared)
                           for n, ra in a["workloads"].items()])


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
            f"timing (0 = quiet machine).")


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
