"""`python -m stress`: the stress harness's command line (see `--help`)."""
from __future__ import annotations

import argparse
import sys

from . import faults, graphs, higher
from .checks import VARIANTS
from .harness import PROFILES, Config, run
from .helpformat import HelpFormatter


def _list(text: str, cast=str) -> tuple:
    return tuple(cast(x.strip()) for x in text.split(",") if x.strip())


def int_list(text: str) -> tuple:
    """`--workers`' type: comma-separated positive integers (argparse names the option and
    prints this message when the text is not one)."""
    try:
        out = _list(text, int)
    except ValueError:
        out = ()
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated positive integers such as 1,2,4, got {text!r}")
    return out


def _kinds(text):
    """Fault kinds; 'all' stands for every default kind (so 'all,stall' adds the opt-in)."""
    out = []
    for k in _list(text):
        for kk in (faults.KINDS if k == "all" else (k,)):
            if kk not in out:
                out.append(kk)
    return tuple(out)


def parse_args(argv=None) -> argparse.Namespace:
    """The options of `python -m stress` (argparse exits with status 2 on bad ones)."""
    return _parser().parse_args(argv)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m stress", formatter_class=HelpFormatter,
        description="Stress the parallel backward engine: random and model graphs compared "
                    "bitwise with the sequential engine, concurrent callers sharing leaves, "
                    "injected faults, a hang watchdog and leak checks. Exits non-zero on any "
                    "failure; each failure prints the command that replays it.")
    _budget_args(p)
    _workload_args(p)
    _watch_args(p)
    _output_args(p)
    return p


def _budget_args(p):
    """How long to run, or which unit to replay, and the master seed."""
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--duration", type=float, metavar="S",
                        help="run for S seconds (finishing the unit in progress)")
    budget.add_argument("--iterations", type=int, metavar="N",
                        help="run N units (graph + concurrency + fault each); with neither "
                             "this nor --duration: 60 seconds")
    budget.add_argument("--replay", type=int, metavar="SEED",
                        help="re-run the unit with this graph seed (from a failure line) for "
                             "each of --families and --faults")
    p.add_argument("--seed", type=int, default=0, metavar="K",
                   help="master seed: unit i uses graph seed K*1000000+i")


def _workload_args(p):
    """What runs: engines, callers, graph families and sizes, faults."""
    p.add_argument("--workers", type=int_list, default=(1, 2, 4),
                   metavar="1,2,4", help="worker counts to compare (default 1,2,4)")
    p.add_argument("--threads", type=int, default=4, metavar="T",
                   help="caller threads in the concurrency check; 1 turns it off")
    p.add_argument("--rounds", type=int, default=2, metavar="R",
                   help="calls per concurrency caller")
    p.add_argument("--families", type=_list, default=tuple(graphs.FAMILIES),
                   metavar="F1,F2", help="graph families (default all: "
                                         + ",".join(graphs.FAMILIES) + ")")
    p.add_argument("--faults", type=_kinds,
                   nargs="?", const=faults.KINDS, default=faults.KINDS, metavar="KINDS",
                   help="fault kinds to inject, comma-separated or 'all' (the default: "
                        + ",".join(faults.KINDS) + "; opt-in: " + ",".join(faults.OPT_IN) + ")")
    p.add_argument("--no-faults", dest="faults", action="store_const", const=(),
                   help="no fault injection")
    p.add_argument("--variants", type=_list, default=VARIANTS, metavar="V1,V2",
                   help="engine set-ups per worker count: queue (thresholds 0, every node "
                        "queued), inline (thresholds 0, cheap nodes inline), shared "
                        "(thresholds 0, cheap nodes handed between threads), default "
                        "(backward_parallel's cost model), many_cores (inline under 16 "
                        "simulated cores: BLAS threads inside a call must not exceed the "
                        "caller's). Default: all")
    cg = p.add_mutually_exclusive_group()
    cg.add_argument("--create-graph", dest="create_graph", type=_list,
                    default=higher.CREATE_GRAPH_FAMILIES, metavar="F1,F2",
                    help="families whose units also check create_graph=True passes "
                         "(gradients, recorded graph and second order bitwise; faults "
                         "during them). Default: those whose every op has a "
                         "differentiable backward: " + ",".join(higher.CREATE_GRAPH_FAMILIES))
    cg.add_argument("--no-create-graph", dest="create_graph", action="store_const", const=(),
                    help="no create_graph checks")
    p.add_argument("--multi-root", type=int, default=Config.multi_root, metavar="N",
                   help="calls with several roots (backward and grad() each) per parallel "
                        f"engine target and unit; 0: no multi-root step (default "
                        f"{Config.multi_root})")
    p.add_argument("--profile", choices=sorted(PROFILES), default="default",
                   help="graph sizes: 'default' (100,000-node chains) or 'quick' (small graphs); "
                        "default: default")
    p.add_argument("--scale", type=float, default=None,
                   help="override the profile's graph size factor (default: the profile's)")


def _watch_args(p):
    """Deadlines, what to do on a hang or failure, leak checks, BLAS threads."""
    p.add_argument("--deadline", type=float, default=30.0, metavar="S",
                   help="seconds an engine call may take (plus 0.2 ms per node) before the "
                        "watchdog dumps all stacks and counts a hang")
    p.add_argument("--on-hang", choices=("continue", "stop"), default="continue",
                   help="after a hang: go on with the next check, or stop the run")
    p.add_argument("--fail-fast", action="store_true", help="stop at the first failure")
    p.add_argument("--checkpoint-every", type=float, default=None, metavar="S",
                   help="seconds between leak checkpoints (default: 10, quick profile 3)")
    p.add_argument("--no-tracemalloc", dest="tracemalloc", action="store_false",
                   help="skip the tracemalloc leak probe at checkpoints")
    p.add_argument("--rss-limit-mb", type=float, default=1024.0,
                   help="RSS growth over the warmed-up baseline counted as a leak, MB")
    p.add_argument("--switch-interval", type=float, default=None, metavar="S",
                   help="sys.setswitchinterval(S) for the run: a tiny value (1e-6) makes "
                        "the GIL switch threads far more often, widening race windows "
                        "(default: Python's, 0.005; the multi-root step uses 1e-6 for its calls "
                        "unless this is set)")
    p.add_argument("--blas-threads", type=int, default=1,
                   help="pin BLAS threads (OpenBLAS GEMM bits depend on its thread count, so "
                        "the engines are compared under one limit); 0: leave as is")


def _output_args(p):
    """The JSON report and the progress line."""
    p.add_argument("--report", metavar="out.json", help="write the full report as JSON")
    prog = p.add_mutually_exclusive_group()
    prog.add_argument("--progress", dest="progress", action="store_true", default=None,
                      help="force the live progress line")
    prog.add_argument("--quiet", dest="progress", action="store_false",
                      help="no progress line (the default when not a tty or CI=true)")


def main(argv=None) -> int:
    a = parse_args(argv)
    cfg = Config(duration=a.duration, iterations=a.iterations, seed=a.seed,
                 workers=a.workers, threads=a.threads, rounds=a.rounds,
                 families=a.families, faults=a.faults, variants=a.variants,
                 create_graph=a.create_graph, multi_root=a.multi_root,
                 switch_interval=a.switch_interval,
                 profile=a.profile, scale=a.scale, deadline=a.deadline, on_hang=a.on_hang,
                 fail_fast=a.fail_fast, checkpoint_every=a.checkpoint_every,
                 tracemalloc=a.tracemalloc, rss_limit_mb=a.rss_limit_mb,
                 blas_threads=a.blas_threads or None, replay=a.replay, progress=a.progress,
                 report_path=a.report, on_stuck="exit")
    try:
        report = run(cfg)
    except ValueError as e:
        print(f"python -m stress: {e}", file=sys.stderr)
        return 2
    print(report.summary(), flush=True)
    if a.report:
        print(f"report written to {a.report}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
