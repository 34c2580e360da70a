"""`--plot FILE.png` (needs matplotlib, the optional `compare` extra): speedup against
workers for every workload and setting, and the timeline of one profiled
`backward_parallel` call, one lane per thread."""
from __future__ import annotations

from .report import log


def plot(result: dict, path: str) -> bool:
    """Write the PNG of `result` to `path`; False (and one note on stderr) without
    matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("no plot: matplotlib is not installed (pip install 'parallel_autograd[compare]'"
            "; --no-plot: do not try)")
        return False
    if "interpreters" in result:  # --python: every (interpreter, setting) as one series
        raws = {f"{i['label']}, {s}": raw for i in result["interpreters"].values()
                for s, raw in i["settings"].items()}
    else:
        raws = result["settings"]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 10),
                                   gridspec_kw={"height_ratios": [1, 1.1]})
    _plot_speedups(ax1, raws)
    # with --python, the timeline of the other interpreter (the free-threaded one) if kept
    _plot_timeline(ax2, dict(reversed(raws.items())) if "interpreters" in result else raws)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _plot_speedups(ax, raws) -> None:
    styles = dict(zip(raws, ("-", "--", ":", "-.")))
    colors = {}
    for s, raw in raws.items():
        ws = raw["workers"]
        for name, r in raw["workloads"].items():
            c = colors.setdefault(name, f"C{len(colors) % 10}")
            ax.plot(ws, [r["speedup"][f"par{n}"] for n in ws], styles.get(s, "-"),
                    marker="o", color=c, label=f"{name} ({s})")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xlabel("num_workers")
    ax.set_ylabel("speedup over sequential engine")
    ax.set_xticks(next(iter(raws.values()))["workers"])
    names = {"-": "solid", "--": "dashed", ":": "dotted", "-.": "dash-dot"}
    ax.set_title("backward_parallel speedup (" + "; ".join(
        f"{names[st]}: {s}" for s, st in styles.items()) + ")")  # "; ": s has commas
    ax.legend(fontsize=7, ncol=2)


def _first_timeline(raws):
    """(setting, raw, workload name, its result) of the first workload with events."""
    for s, raw in raws.items():
        for name, r in raw["workloads"].items():
            if r["timeline"].get("events"):
                return s, raw, name, r
    return None


def _plot_timeline(ax, raws) -> None:
    found = _first_timeline(raws)
    if found is None:
        ax.set_title("no timeline recorded")
        return
    s, raw, name, r = found
    events = r["timeline"]["events"]
    lanes = sorted({e["thread"] for e in events}, key=lambda t: (t != "MainThread", t))
    ops = sorted({e["name"] for e in events})
    color = {op: f"C{i % 10}" for i, op in enumerate(ops)}
    for y, lane in enumerate(lanes):
        for op in ops:
            bars = [(e["start"] * 1e3, (e["end"] - e["start"]) * 1e3) for e in events
                    if e["thread"] == lane and e["name"] == op]
            if bars:
                ax.broken_barh(bars, (y - 0.4, 0.8), color=color[op])
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels(lanes)
    ax.set_xlabel("ms since the call started")
    ax.set_title(f"timeline of one backward_parallel call (median of those profiled): {name}, "
                 f"{s} malloc, {raw['cores']} workers, {r['timeline']['wall'] * 1e3:.1f} ms")
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=color[o], label=o) for o in ops], fontsize=7,
              ncol=min(len(ops), 6), loc="upper right")
