"""The comparison of `backward_parallel` against the sequential engine (and PyTorch).

    python -m stress.compare [--quick] [--out f.json] [--plot f.png]
                             [--workloads a,b] [--reps N] [--allocator default|tuned|both]
                             [--python ft|PATH]

For every workload of `stress.compare.workloads` (float64, seeded; the forward pass is
rebuilt for every measurement and only the backward pass is timed, with the cyclic GC
off):

- the sequential engine, `backward_parallel` at 1, 2, all cores and 2x cores workers,
  and PyTorch's `loss.backward()` on the same graph and data (when torch imports);
  a warm-up round, then `--reps` rounds (default 7) in which the configurations run
  interleaved, in an order rotated every round, so machine drift hits all alike;
  the medians are reported;
- the bound `max(work / cores, critical path)` from a profiled sequential walk
  (`stress.compare.bound`) and the efficiency `bound / parallel time`;
- the peak traced memory (tracemalloc) of the backward pass, both engines;
- minor page faults per backward pass (getrusage) and the engine's decision (`stats`).

`--allocator both` (the default) measures glibc's default malloc settings and the
opt-in tuning of `parallel_autograd.allocator.tune_allocator()` in two fresh
subprocesses and shows them side by side; `default` or `tuned` measures one setting
in this process. The benchmark's targets are printed with PASS/MISS from ratios
measured in the same run. Output: markdown on stdout (progress on stderr),
JSON with `--out`, and with matplotlib a PNG with `--plot` (speedup against workers,
and the timeline of one profiled `backward_parallel` call, one lane per thread).

`--python ft` (`make bench-ft`) measures this interpreter (the "GIL" build) and the
free-threaded one, `$FT_CACHE/venv/bin/python` (default `.cache/freethreaded`, made by
`make freethreaded`; run with PYTHON_GIL unset), side by side in one report;
`--python PATH` compares against any other interpreter the same way. Every workload
is measured in a fresh child process per interpreter, the two children one after the
other, which one goes first alternating from workload to workload, so machine drift
hits both alike. The allocator setting is `default` only unless `--allocator` is
given. The report adds a side-by-side table (sequential and parallel times, speedups,
the second interpreter's engine decision, its parallel time over this one's) and two
targets for the second interpreter: tiny-nodes speedup >= 1.4x, and parallel /
sequential <= 1.03 on every workload (no workload slower than sequential, with the
3% noise allowance of target 1); the JSON holds both interpreters' measurements.

Run from the repository root (`stress` is not installed with the package); the
children it starts run there too, with the root on PYTHONPATH.

Modules: `cli` (options, main), `measure` (timing in this process), `machine` (other
processes' load, the numpy threading ceiling, versions), `children` (fresh processes
per malloc setting and per interpreter), `targets` (PASS/MISS), `report` (markdown,
JSON, progress), `plot` (matplotlib), `workloads` (the registry) with `backend`,
`synthetic` and `models` (one definition per workload for both libraries), `bound`
(the parallel bound from a profiled walk).
"""
from .cli import ft_python, main, parse_args, resolve_python

__all__ = ["ft_python", "main", "parse_args", "resolve_python"]
