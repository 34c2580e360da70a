"""The report's tables beside the backward one: forward, backward and training step
against PyTorch (`step_table`), the malloc settings side by side (`allocator_table`),
PyTorch in the benchmark's process against PyTorch in its own process and numpy's
per-element kernel gap (`torch_section`)."""
from __future__ import annotations

import statistics

from . import ratios as R
from .report import cores_text, markdown, ms, row_name
from .stats import ratio_interval, ratio_text, seed_for
from .step import OPTIMIZERS

STEP_LEGEND = (
    "`fwd`: recording the forward pass on the persistent parameters (before "
    "backward_parallel's backward); `bwd par`: backward_parallel at all cores; `step` = "
    "zero_grad + forward + backward{opt}, with the sequential engine (`seq`) or "
    "backward_parallel (`par`); PyTorch columns from PyTorch alone in its own process; "
    "`/ torch` = our time over PyTorch's (below 1: we are faster).")


def step_legend() -> str:
    """The step table's legend (says whether an optimizer step is included)."""
    opt = " + optimizer step" if OPTIMIZERS["parallel_autograd"] else \
        " (no optimizer step yet: `stress.compare.step.OPTIMIZERS`)"
    return STEP_LEGEND.format(opt=opt)


def _step_row(raw: dict, name: str, torch) -> list:
    r, p = raw["workloads"][name], R.par(raw)
    mf, mb, mstep = r["median_forward"], r["median"], r["median_step"]
    t = torch["workloads"].get(name) if torch else None
    row = [row_name(raw, name, torch), str(r["rounds"]) + (f" / {t['rounds']}" if t else ""),
           ms(mf[p])]
    if t:
        row += [ms(t["median_forward"]["torch"]),
                ratio_text(R.vs_torch(raw, torch, name, "forward"))]
    row += [ms(mb[p])]
    if t:
        row += [ms(t["median"]["torch"]), ratio_text(R.vs_torch(raw, torch, name))]
    row += [ms(mstep["seq"]), ms(mstep[p])]
    if t:
        row += [ms(t["median_step"]["torch"]),
                ratio_text(R.vs_torch(raw, torch, name, "step"))]
    load = cores_text(r["contention"])
    return row + [load + (f" / {cores_text(t['contention'])}" if t else "")]


def step_table(raw: dict, torch=None) -> str:
    """Per workload: forward, backward (all cores) and step times, each beside the
    PyTorch child's with our time over its (when `torch` is given), and the legend."""
    names = list(raw["workloads"])
    with_torch = torch is not None and any(n in torch["workloads"] for n in names)
    t = with_torch
    head = (["workload", "rounds" + (" (ours / torch)" if t else ""), "fwd ms"]
            + (["torch fwd ms", "fwd / torch"] if t else []) + ["bwd par ms"]
            + (["torch bwd ms", "bwd / torch"] if t else []) + ["step seq ms", "step par ms"]
            + (["torch step ms", "step par / torch"] if t else [])
            + ["other load" + (" (ours / torch)" if t else "")])
    rows = [_step_row(raw, n, torch if with_torch else None) for n in names]
    return markdown(head, rows) + "\n\n" + step_legend()


def allocator_table(raws: dict) -> str:
    """The malloc settings side by side (`raws`: setting -> measurements), with
    backward_parallel's default / tuned time."""
    first = next(iter(raws.values()))
    par = R.par(first)
    head = ["workload"]
    for s in raws:
        head += [f"seq ms ({s})", f"par ms ({s})", f"speedup ({s})", f"faults par ({s})"]
    head.append("par default / tuned")
    rows = []
    for n in first["workloads"]:
        row = [row_name(first, n, *list(raws.values())[1:])]
        for raw in raws.values():
            r = raw["workloads"][n]
            row += [ms(r["median"]["seq"]), ms(r["median"][par]),
                    ratio_text(R.speedup(raw, n, par)), f"{r['faults'][par]:.0f}"]
        row.append(ratio_text(R.allocator(raws["default"], raws["tuned"], n)))
        rows.append(row)
    return markdown(head, rows) + "\n\n`faults`: minor page faults per backward pass, median."


def _in_vs_child_row(raw: dict, torch: dict, name: str) -> list:
    ivs = [R.in_vs_child(raw, torch, name, s) for s in ("forward", "times", "step")]
    r, t = raw["workloads"][name], torch["workloads"][name]
    same = all(iv.contains(1.0) for iv in ivs)
    return [row_name(raw, name, torch), ms(r["median"]["torch"]), ms(t["median"]["torch"])] + \
        [ratio_text(iv) for iv in ivs] + ["yes" if same else "no"]


def in_vs_child_table(raw: dict, torch: dict) -> str:
    """PyTorch timed in the default setting's process (interleaved with our engines)
    against PyTorch alone in its own process."""
    names = [n for n in raw["workloads"]
             if "torch" in raw["workloads"][n]["times"] and n in torch["workloads"]]
    head = ["workload", "bwd ms (benchmark's process)", "bwd ms (own process)",
            "fwd in / own", "bwd in / own", "step in / own", "same (1 in every interval)"]
    return markdown(head, [_in_vs_child_row(raw, torch, n) for n in names])


def kernel_gap_line(torch: dict) -> str:
    """numpy's per-element kernel gap to PyTorch on wide-elementwise, one line."""
    gap = R.kernel_gap(torch)
    if gap is None:
        return "numpy's per-element kernel gap: not measured (wide-elementwise not run)."
    k = torch["workloads"]["wide-elementwise"]["kernel_gap"]
    med = {key: statistics.median(v) for key, v in k["samples"].items()}
    s = k["samples"]
    at_n = ratio_interval(s["numpy"], s["torchN"], seed_for(torch["seed"], "gap_n"), True)
    kernels = " + ".join(f"np.{x}" for x in k["kernels"])
    return (f"numpy's per-element kernel gap (wide-elementwise's {k['n']:,} float64, "
            f"{kernels} into a preallocated output against torch's, medians of "
            f"{len(s['numpy'])} rounds): numpy {ms(med['numpy'])} ms, torch on one thread "
            f"{ms(med['torch1'])} ms, on {torch['cores']} threads {ms(med['torchN'])} ms; "
            f"gap numpy / torch (one thread each) {ratio_text(gap)}, against torch on "
            f"{torch['cores']} threads {ratio_text(at_n)}; other load meanwhile "
            f"{cores_text(k.get('contention'))}.")


def torch_section(raw, torch: dict) -> list:
    """`## PyTorch ...`: the in-process / own-process table and the kernel gap."""
    parts = ["## PyTorch in the benchmark's process and in its own process", ""]
    if raw is not None and any("torch" in r["times"] for r in raw["workloads"].values()):
        parts += ["PyTorch timed in the default setting's process (in rounds of its own "
                  "after ours, each PyTorch step right after one of the sequential engine) "
                  "over PyTorch alone in a fresh process (`torch.set_num_threads("
                  f"{torch['cores']})` and its own warm-up in both); the ratios to PyTorch "
                  "above and the targets use the own-process column.", "",
                  in_vs_child_table(raw, torch), ""]
    return parts + [kernel_gap_line(torch), ""]
