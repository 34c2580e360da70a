"""What the benchmark writes: progress on stderr (`log`), the markdown report on stdout
and the JSON of `--out` (`write_json`).

`report(result)`: one interpreter; per malloc setting the backward table, the table of
forward, backward and training step against PyTorch, and the targets; then the
settings side by side and PyTorch in this process against its own process
(`report_torch`). `report_pythons.report_pythons(result)` (`--python ft|PATH`): two
interpreters side by side. Every ratio is printed with its 95% interval
(`stress.compare.ratios`), `1.23x [1.10, 1.35]`."""
from __future__ import annotations

import json
import sys

from . import ratios as R
from .stats import ratio_text

LEGEND = (
    "Backward times in milliseconds, medians over the rounds; ratios with their 95% "
    "bootstrap interval `[lo, hi]`. `par Nw` is `backward_parallel(num_workers=N)` with its "
    "speedup over the sequential engine; `par/seq` at all cores; `bound` = "
    "max(one-core work / cores, critical path) from a profiled sequential walk, `eff` = "
    "bound / parallel time, `width` = work / critical path; `torch ms`: PyTorch's backward "
    "in its own process; peak = tracemalloc peak above the level at the start of "
    "backward; `other load` = cores' worth of CPU used by other processes while timing "
    "(0 = quiet machine); a row marked `(noisy)` was measured under more than the "
    "`--noisy` load and is not scored by the targets.")


def log(msg: str) -> None:
    """Progress, on stderr (stdout is the report)."""
    print(msg, file=sys.stderr, flush=True)


def write_json(path: str, obj, indent=None) -> None:
    """`obj` as JSON (numpy scalars as numbers)."""
    with open(path, "w") as f:
        json.dump(obj, f, indent=indent, default=_jsonable)


def _jsonable(o):
    return o.item() if hasattr(o, "item") else str(o)


# ---- cells -------------------------------------------------------------------------------
def ms(t) -> str:
    """Seconds as milliseconds, one decimal."""
    return f"{t * 1e3:.1f}"


def cores_text(c) -> str:
    """Cores' worth of CPU used by other processes, or n/a where not measured."""
    return "n/a" if c is None else f"{c:.2f}"


def mib(b) -> str:
    """Bytes as MiB."""
    return f"{b / 2**20:.1f}" if b >= 2**20 else f"{b / 2**20:.3f}"


def decision_text(d) -> str:
    """The engine's decision (`stats` mode and reason), short."""
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
    """A markdown table."""
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def targets_text(targets: list) -> str:
    """The targets as markdown list items: `- STATUS ID. target: detail`."""
    return "\n".join(f"- {t['status']:4s} {t['id']}. {t['target']}: {t['detail']}"
                     for t in targets)


def row_name(raw: dict, name: str, *others) -> str:
    """The workload's cell: its name, `(noisy)` when it or its row in `others` was
    measured under other load."""
    noisy = R.noisy(raw, name) or any(R.noisy(o, name) for o in others)
    return f"{name} (noisy)" if noisy else name


# ---- one interpreter ---------------------------------------------------------------------
def _setting_row(raw: dict, name: str, torch) -> list:
    r, p, workers = raw["workloads"][name], R.par(raw), raw["workers"]
    m = r["median"]
    row = [row_name(raw, name), str(r["nodes"]), f"{r['bound']['width']:.1f}",
           ms(m["seq"])]
    row += [f"{ms(m[f'par{n}'])} ({ratio_text(R.speedup(raw, name, f'par{n}'))})"
            for n in workers]
    row += [ratio_text(R.within(raw, name, p, "seq"), 3, ""), ms(r["bound"]["bound"]),
            ratio_text(R.efficiency(raw, name), 2, "")]
    if torch is not None:
        t = torch["workloads"].get(name)
        row.append(ms(t["median"]["torch"]) if t else "n/a")
    return row + [mib(r["peak_bytes"]["seq"]), mib(r["peak_bytes"][p]),
                  decision_text(r["decision"][p]), cores_text(r["contention"])]


def setting_table(raw: dict, torch=None) -> str:
    """The backward pass, one row per workload of one setting's measurements; `torch`
    (the PyTorch child's measurements) adds its backward column."""
    cores, workers = raw["cores"], raw["workers"]
    wcols = [f"{n}w{' (all)' if n == cores else ''}" for n in workers]
    head = (["workload", "nodes", "width", "seq ms"] + [f"par {c} ms" for c in wcols] +
            ["par/seq", "bound ms", "eff"] + (["torch ms"] if torch else []) +
            ["peak seq MiB", "peak par MiB", "decision (all cores)", "other load"])
    return markdown(head, [_setting_row(raw, n, torch) for n in raw["workloads"]])


def setting_section(title: str, setting: str, raw: dict, targets: list, torch=None) -> list:
    """`## title: allocator ...`, the setting's tables and its targets, as lines."""
    from .report_torch import step_table
    tuned = "" if setting == "default" else f" (tune_allocator() -> {raw['tune_allocator']})"
    return [f"## {title}{setting}{tuned}", "", "Backward pass:", "",
            setting_table(raw, torch), "", "Forward, backward and training step"
            + (" against PyTorch (its own process):" if torch else ":"), "",
            step_table(raw, torch), "", "Targets:", targets_text(targets), ""]


def _header(result: dict, first: dict) -> list:
    env, meta = first["env"], result["meta"]
    rounds = sorted({r["rounds"] for raw in result["settings"].values()
                     for r in raw["workloads"].values()})
    more = "" if rounds == [first["reps"]] else \
        f" ({'-'.join(str(x) for x in (rounds[0], rounds[-1]))} where measured again)"
    torch = result.get("torch_child")
    how = (f"`{meta['command']}`: {first['cores']} usable cores, Python {env['python']}, "
           f"{libraries_text(torch['env'] if torch else env)}; sizes {first['size']}, "
           f"medians of {first['reps']} rounds{more} after a warm-up; every workload in a "
           f"fresh process per allocator setting"
           + (" and one for PyTorch alone" if torch else "") + ", back to back.")
    parts = [f"# Forward, backward and training step: parallel_autograd against PyTorch "
             f"({meta['date']})", "", how, ""]
    if meta.get("torch_hint"):
        parts += [f"Note: {meta['torch_hint']}.", ""]
    return parts + [LEGEND, ""]


def report(result: dict) -> str:
    """The report of one interpreter: tables and targets per malloc setting, the settings
    side by side, PyTorch in this process against its own process."""
    from .alloc_scaling import section as alloc_scaling_section
    from .report_torch import allocator_table, torch_section
    raws, torch = result["settings"], result.get("torch_child")
    parts = _header(result, next(iter(raws.values()))) if raws else \
        [f"# parallel_autograd against other libraries ({result['meta']['date']})", "",
         f"`{result['meta']['command']}`", ""]
    for s, raw in raws.items():
        parts += setting_section("Allocator: ", s, raw, result["targets"][s], torch)
    if len(raws) == 2:
        parts += ["## Allocator settings side by side", "", allocator_table(raws), ""]
    if torch:
        parts += torch_section(raws.get("default"), torch)
    parts += alloc_scaling_section(raws.get("default"))
    return "\n".join(parts + extra_rows_section(result))


def extra_rows_section(result: dict) -> list:
    """The rows outside the workload table (float64 scientific, competing load) and
    their targets, as lines; none when they were not run."""
    from . import loaded, scientific, width_rows
    parts = scientific.section(result.get("scientific")) + \
        loaded.section(result.get("loaded")) + width_rows.section(result.get("width"))
    if result.get("extra_targets"):
        parts += ["Targets of these rows:", targets_text(result["extra_targets"]), ""]
    return parts
