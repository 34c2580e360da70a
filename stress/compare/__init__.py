"""The comparison of parallel_autograd (`backward_parallel` and the sequential engine)
against itself and PyTorch: forward, backward and training step.

    python -m stress.compare [--quick] [--out f.json] [--plot f.png | --no-plot]
                             [--report f.md | -] [--wait-quiet SECONDS]
                             [--workloads a,b] [--reps N] [--allocator default|tuned|both]
                             [--budget SECONDS] [--check] [--python ft|PATH]

For every workload of `stress.compare.workloads` (float64, seeded), each run is one
training step on persistent parameters (`step`): zero the gradients, record the forward
pass, run the backward pass (the optimizer step joins once the library has one); the
forward, backward and whole step are timed, with the cyclic GC off:

- the sequential engine, `backward_parallel` at 1, 2, all cores and 2x cores workers,
  and (in the default setting's process) PyTorch; a warm-up round, then `--reps` rounds
  (default 7) in which the configurations run interleaved, in an order rotated every
  round, so machine drift hits all alike;
- PyTorch alone in its own process (`torch.set_num_threads(cores)`, its own warm-up):
  the column every ratio to PyTorch and every target uses; the report shows whether
  the in-process column agrees with it, and numpy's own per-element kernel gap to torch
  (np.sin/np.cos against torch.sin/cos on wide-elementwise's vectors);
- the bound `max(work / cores, critical path)` from a profiled sequential walk
  (`stress.compare.bound`) and the efficiency `bound / parallel time`;
- the peak traced memory (tracemalloc) of the backward pass, both engines;
- minor page faults per backward pass (getrusage) and the engine's decision (`stats`);
- once (in the default setting's child of mlp-chain) the caching allocator's cost per
  operation at 1,000 and 4,000 blocks in use, cache on and off (`alloc_scaling`).

Every workload runs in a fresh child process per kind, back to back, the order rotated
per workload (`schedule`): glibc's default malloc, `tune_allocator()` (`--allocator
both`, the default; or one of them) and PyTorch alone (when torch imports). Every ratio
is printed with a 95% bootstrap interval (`stats`, `ratios`; seeded, so the report is
recomputable from the JSON). The targets (`targets`) are PASS or MISS only when the
interval is entirely on one side of the threshold, otherwise unresolved; those
workloads (and rows measured under other load, which are marked and not scored) are
measured again, `--reps` more rounds at a time, within `--budget` seconds. `--check`:
exit status 1 when a target is MISS. Output (`verdict`): on stdout a verdict table (per
workload the speedup over the sequential engine, the time over PyTorch's and
PASS/MISS/unresolved), the targets' count and where the files went; progress with an ETA
on stderr; the full markdown tables in `--report` (default bench-out/compare.md), with
matplotlib a PNG in `--plot` (default bench-out/compare.png: speedup against workers,
and the timeline of one profiled `backward_parallel` call, one lane per thread), JSON
(`schema_version` 1) with `--out`.

`--python ft` (`make bench-ft`) measures this interpreter (the "GIL" build) and the
free-threaded one, `$FT_CACHE/venv/bin/python` (default `.cache/freethreaded`, made by
`make freethreaded`; run with PYTHON_GIL unset), side by side in one report;
`--python PATH` compares against any other interpreter the same way. Every workload
is measured in a fresh child process per interpreter, the two children one after the
other, which one goes first alternating from workload to workload, so machine drift
hits both alike. The allocator setting is `default` only unless `--allocator` is
given; there is no PyTorch child and no re-measuring. The report adds a side-by-side
table and two targets for the second interpreter: tiny-nodes speedup >= 1.4x, and
parallel / sequential <= 1.03 on every workload; the JSON holds both interpreters'
measurements.

Rows outside the workload table, selected with `--workloads` too (all by default; not
with `--python`), each library in its own child: `scientific` (float64 gradient,
Jacobian, Hessian and Hessian-vector product against PyTorch, JAX and HIPS autograd,
columns for the installed ones; target 13) and `loaded` (a float32 training step quiet
and beside a process spinning on one core, ours and PyTorch; target 14). Their
measurements and targets are the JSON's `scientific`, `loaded` and `extra_targets`.

Run from the repository root (`stress` is not installed with the package); the
children it starts run there too, with the root on PYTHONPATH.

Modules: `cli` (options, main), `schedule` (which child when, re-measuring),
`children` (the child processes), `measure` (timing in a child), `step` (one training
step on persistent parameters), `samples` (a workload's samples, merging batches),
`probes` (memory, timeline, torch's node count, the kernel gap), `machine` (other
processes' load, the numpy threading ceiling, versions), `alloc_scaling` (the caching
allocator against the blocks in use), `stats` (bootstrap, decisions),
`ratios` (every ratio's interval from the raw JSON), `targets` (PASS/MISS/unresolved),
`verdict` (the first screen, progress lines), `scientific` and `loaded` (the rows
outside the workload table), `report`, `report_torch` and
`report_pythons` (markdown, JSON, progress), `plot`
(matplotlib), `workloads` (the registry) with `backend`, `synthetic` and `models` (one
definition per workload for both libraries), `bound` (the parallel bound).
"""
from .cli import ft_python, main, parse_args, resolve_python

__all__ = ["ft_python", "main", "parse_args", "resolve_python"]
