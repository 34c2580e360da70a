"""The command line: `python -m stress.compare [options]` (see the package docstring)."""
from __future__ import annotations

import argparse
import datetime
import os
import shutil
import sys
import time

from ..helpformat import HelpFormatter
from .children import MALLOC_ENV, ROOT, run_pythons
from .measure import run_setting, run_torch
from .plot import plot
from .report import log, report, write_json
from .report_pythons import report_pythons
from .schedule import measure_all, split, torch_available
from .stats import MISS
from .targets import evaluate_all, evaluate_ft_targets
from .verdict import verdict
from .workloads import MODEL_WORKLOADS, PROGRAM_WORKLOADS, SIZES, WORKLOADS

BUDGET = {"full": 120.0, "quick": 20.0, "tiny": 0.0}  # default --budget per --size
TORCH_HINT = ("no PyTorch columns: torch is not installed for " + sys.executable + ". "
              "`make bench TORCH=1` installs its CPU build into .venv (from "
              "download.pytorch.org), or: "
              "pip install torch --index-url https://download.pytorch.org/whl/cpu")
# the JSON of --out: bump when a key is renamed, removed or changes meaning (docs/benchmarks.md)
SCHEMA_VERSION = 1
OUT_DIR = "bench-out"  # default place of the plot and the full report (git-ignored)
DEFAULT_PLOT = os.path.join(OUT_DIR, "compare.png")
DEFAULT_REPORT = os.path.join(OUT_DIR, "compare.md")


def extra_rows() -> tuple:
    """The rows outside the workload table, selected with --workloads too (not measured
    with --python). (Imported here: `python -m stress.compare.scientific` and `.loaded`
    run as children, and the package must not have imported them first.)"""
    from . import loaded, scientific, width_rows
    return (*scientific.ROWS, loaded.ROW, *width_rows.ROWS)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m stress.compare", formatter_class=HelpFormatter,
        description="The comparison of `backward_parallel` against the sequential engine "
                    "(and PyTorch).")
    p.add_argument("--quick", action="store_true",
                   help="smaller sizes and 3 repetitions (under a minute)")
    p.add_argument("--out", metavar="FILE.json", help="write all measurements as JSON")
    p.add_argument("--plot", metavar="FILE.png", default=DEFAULT_PLOT,
                   help="where the PNG goes (needs matplotlib; default %(default)s)")
    p.add_argument("--no-plot", dest="plot", action="store_const", const=None,
                   help="write no PNG")
    p.add_argument("--report", metavar="FILE.md", default=DEFAULT_REPORT,
                   help="where the full markdown tables go; '-': on stdout after the "
                        "verdict (default %(default)s)")
    p.add_argument("--workloads", default=",".join((*WORKLOADS, *extra_rows())),
                   help="comma-separated subset of: " + ", ".join((*WORKLOADS, *extra_rows()))
                        + "; 'models': the first eight, 'programs': the real programs, "
                        "'scientific': the sci- rows, 'width': per-sample-grad and multi-loss "
                        "(default: all)")
    p.add_argument("--reps", type=int, default=None,
                   help="timed repetitions per configuration (default 7, --quick 3)")
    p.add_argument("--allocator", choices=("default", "tuned", "both"), default=None,
                   help="malloc settings to measure (default: both, side by side; "
                        "with --python: default only)")
    p.add_argument("--python", metavar="ft|PATH", default=None,
                   help="also measure with another interpreter, side by side with this "
                        "one: 'ft' is the free-threaded build of `make freethreaded` "
                        "($FT_CACHE/venv/bin/python), or give an interpreter's path")
    p.add_argument("--size", choices=SIZES, default=None,
                   help="workload sizes (default full, --quick quick; tiny is for tests)")
    p.add_argument("--seed", type=int, default=0, help="seed of the workloads' data")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch column")
    p.add_argument("--timeline", metavar="WORKLOAD", default=None,
                   help="workload whose profiled parallel call is kept for the plot "
                        "(default wide-elementwise if selected)")
    p.add_argument("--noisy", type=float, default=0.25, metavar="CORES",
                   help="measure a workload again when other processes used more than "
                        "this many cores meanwhile (default 0.25)")
    p.add_argument("--retries", type=int, default=None,
                   help="how many times at most a noisy workload is measured again "
                        "(default 1, --quick 0)")
    p.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                   help="before timing a workload, wait up to this long for other "
                        "processes to use less than --noisy cores (default 0: no wait)")
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="time for more rounds of workloads whose targets are unresolved "
                        "or whose rows were noisy (default 120, --quick 20, tiny sizes 0)")
    p.add_argument("--check", action="store_true",
                   help="exit status 1 when a target is MISS (unresolved is not a failure)")
    # child mode: one setting's (or PyTorch's) raw JSON
    p.add_argument("--raw-out", help=argparse.SUPPRESS)
    p.add_argument("--torch-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--timing-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--numpy-scaling", action="store_true", help=argparse.SUPPRESS)
    return p


def parse_args(argv=None) -> argparse.Namespace:
    """The options, with the defaults that depend on --quick, --size and --python.
    `args.workloads`: the selected training-step workloads; `args.scientific` and
    `args.loaded`: the selected rows outside the workload table (`EXTRA_ROWS`)."""
    from . import loaded, scientific, width_rows
    p = _parser()
    args = p.parse_args(argv)
    groups = {"programs": PROGRAM_WORKLOADS, "models": MODEL_WORKLOADS,
              "scientific": tuple(scientific.ROWS), "width": width_rows.ROWS}
    chosen = list(dict.fromkeys(
        x for w in args.workloads.split(",") if w.strip()
        for x in groups.get(w.strip(), (w.strip(),))))
    unknown = [w for w in chosen if w not in WORKLOADS and w not in extra_rows()]
    if unknown or not chosen:
        p.error(f"unknown workload(s) {unknown}; choose from "
                f"{', '.join((*WORKLOADS, *extra_rows()))}")
    args.workloads = [w for w in chosen if w in WORKLOADS]
    args.scientific = [w for w in chosen if w in scientific.ROWS]
    args.loaded = loaded.ROW in chosen
    args.width = [w for w in chosen if w in width_rows.ROWS]
    if args.allocator is None:
        args.allocator = "default" if args.python else "both"
    if args.python and not args.raw_out:  # (a child measures in itself only)
        args.python_path = resolve_python(args.python, p.error)
    if args.reps is None:
        args.reps = 3 if args.quick else 7
    if args.reps < 1:
        p.error("--reps must be >= 1")
    if args.retries is None:
        args.retries = 0 if args.quick else 1
    if args.size is None:
        args.size = "quick" if args.quick else "full"
    if args.budget is None:
        args.budget = BUDGET[args.size]
    if args.timeline is None and args.workloads:
        wide = [w for w in args.workloads if WORKLOADS[w].branches]
        args.timeline = "wide-elementwise" if "wide-elementwise" in args.workloads else \
            (wide or args.workloads)[0]
    return args


def ft_python() -> str:
    """The free-threaded venv's interpreter that `make freethreaded` makes."""
    cache = os.environ.get("FT_CACHE") or os.path.join(".cache", "freethreaded")
    return os.path.join(ROOT, cache, "venv", "bin", "python")


def resolve_python(value: str, error) -> str:
    """`--python` to an interpreter path; `error(message)` exits when there is none."""
    if value == "ft":
        path = ft_python()
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            error(f"--python ft: no free-threaded interpreter at {path}; build it first "
                  "with `make freethreaded` (tools/build_freethreaded.sh)")
        return path
    path = value if os.sep in value else shutil.which(value)
    if not path or not (os.path.isfile(path) and os.access(path, os.X_OK)):
        error(f"--python {value}: not an executable interpreter")
    return os.path.abspath(path)


def main(argv=None) -> int:
    """`python -m stress.compare`: measure, report; the exit status (0, or 1 with
    --check when a target is MISS)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    t0 = time.perf_counter()
    if args.raw_out:  # child mode
        raw = run_torch(args) if args.torch_only else run_setting(args, args.allocator)
        write_json(args.raw_out, raw)
        return 0
    if args.python:
        return _main_pythons(args, argv, t0)
    hint = None
    if not args.no_torch and not torch_available(args):
        log(TORCH_HINT)  # once: the children are told --no-torch
        hint, args.no_torch = TORCH_HINT, True
    no_torch_given = args.no_torch and hint is None
    raws, extra = measure_all(args, argv) if args.workloads else ({}, {})
    settings, torch = split(raws)
    if torch is None and not no_torch_given and hint is None and args.workloads:
        hint = ("no PyTorch columns: torch is installed but does not import (its error is "
                "above); `make bench TORCH=1` reinstalls its CPU build into .venv")
    result = {"schema_version": SCHEMA_VERSION,
              "meta": _meta(argv, budget=args.budget, extra_batches=extra, torch_hint=hint),
              "settings": settings, "torch_child": torch,
              "targets": evaluate_all(settings, torch)}
    result.update(measure_extra_rows(args))
    return _finish(args, result, report, t0)


def measure_extra_rows(args) -> dict:
    """The rows outside the workload table (`EXTRA_ROWS`), each library in its own
    child: {"scientific": ..., "loaded": ..., "extra_targets": [13, 14]}; {} when none
    is selected."""
    from . import loaded, scientific, width_rows
    if not args.scientific and not args.loaded and not args.width:
        return {}
    libs = [lib for lib in scientific.LIBS if not (args.no_torch and lib == "torch")]
    sci = scientific.run(args.scientific, args.size, args.reps, args.seed, log, libs) \
        if args.scientific else None
    load = loaded.run(args.size, args.reps, args.seed, log, not args.no_torch) \
        if args.loaded else None
    width = width_rows.run(args.width, args.size, args.reps, args.seed, log,
                           not args.no_torch) if args.width else None
    return {"scientific": sci, "loaded": load, "width": width, "extra_targets": extra_targets(
        {"scientific": sci, "loaded": load}, args.noisy)}


def extra_targets(result: dict, noisy_limit) -> list:
    """Targets 13 (float64 scientific) and 14 (competing load) of the rows that ran,
    recomputable from the JSON's "scientific" and "loaded"."""
    from . import loaded, scientific
    out = []
    if result.get("scientific"):
        out.append(scientific.evaluate_target(result["scientific"], noisy_limit))
    if result.get("loaded"):
        out.append(loaded.evaluate_target(result["loaded"]))
    return out


def _main_pythons(args, argv, t0) -> int:
    interp = run_pythons(args, argv)
    other = list(interp.values())[1]
    result = {
        "schema_version": SCHEMA_VERSION,
        "meta": _meta(argv, python=args.python),
        "interpreters": interp,
        "ft_targets": {s: evaluate_ft_targets(raw, other["label"])
                       for s, raw in other["settings"].items()},
    }
    return _finish(args, result, report_pythons, t0)


def _meta(argv, **extra) -> dict:
    return {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "command": "python -m stress.compare " + " ".join(argv), **extra,
            "malloc_env": {k: os.environ[k] for k in MALLOC_ENV if k in os.environ},
            "seconds": None}


def missed(result: dict) -> list:
    """(section, target id) of every MISS in a result (both layouts)."""
    lists = dict(result.get("targets", {}))
    if result.get("extra_targets"):
        lists["rows"] = result["extra_targets"]
    lists.update({f"ft {s}": ts for s, ts in result.get("ft_targets", {}).items()})
    for i in result.get("interpreters", {}).values():
        lists.update({f"{i['label']} {s}": ts for s, ts in i["targets"].items()})
    return [(s, t["id"]) for s, ts in lists.items() for t in ts if t["status"] == MISS]


def _write_files(args, result, full: str) -> dict:
    """Write --plot, --report and --out; {label: path or why not} for the summary."""
    files = {}
    if args.plot and (result.get("settings") or "interpreters" in result):
        _mkdir_for(args.plot)
        files["Plot"] = args.plot if plot(result, args.plot) else \
            "not written: matplotlib is not installed (pip install 'parallel_autograd[compare]')"
    if args.report != "-":
        _mkdir_for(args.report)
        with open(args.report, "w") as f:
            f.write(full + "\n")
        files["Full tables (markdown)"] = args.report
    if args.out:
        _mkdir_for(args.out)
        write_json(args.out, result, indent=1)
        files["All measurements (JSON)"] = args.out
    return files


def _mkdir_for(path: str) -> None:
    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)


def _finish(args, result, render, t0) -> int:
    """Print the verdict (the full report without one), write the files; the exit status."""
    result["meta"]["seconds"] = time.perf_counter() - t0
    full = render(result)
    files = _write_files(args, result, full)
    if "settings" in result:
        print(verdict(result, files), flush=True)
        if args.report == "-":
            print("\n" + full, flush=True)
    else:  # --python: no verdict table; the side-by-side report is the answer
        print(full + "\n\n" + "\n".join(f"{k}: {v}" for k, v in files.items()), flush=True)
    log(f"done in {result['meta']['seconds']:.0f} s")
    if args.check and missed(result):
        log("--check: MISS: " + ", ".join(f"{s} target {i}" for s, i in missed(result)))
        return 1
    return 0
