"""One Chrome trace of every rank's `pa.profile()` timeline."""
from __future__ import annotations

import json

from ..profiler import Recorder, chrome_events
from ._comm import _group, barrier


def export_chrome_trace(recorder: Recorder, path: str | None) -> dict | None:
    """Collective: every rank calls it with its own recorder (`with pa.profile() as
    recorder: ...`). Rank 0 gets (and, if `path` is given, writes) one Chrome trace with a
    process per rank ("rank r"): its threads' backward nodes and its "MPI communication"
    track (DistributedDataParallel's bucket all-reduces); other ranks get None.

    Clocks are aligned at a barrier inside this call: each rank's `perf_counter` reading
    just after it is taken as the same instant (exact on one machine, within the barrier's
    skew, microseconds, across machines)."""
    g = _group()
    barrier()
    mark = recorder.now() - recorder.t0  # this rank's reading of the common instant
    with g.call:
        parts = g.comm.gather((g.rank, mark, recorder.events), root=0)
    if g.rank != 0:
        return None
    ref = next(m for r, m, _ in parts if r == 0)
    events = []
    for r, m, evs in sorted(parts, key=lambda p: p[0]):
        events.extend(chrome_events(evs, pid=r, shift=ref - m))
        events.append({"name": "process_name", "ph": "M", "pid": r, "args": {"name": f"rank {r}"}})
    trace = {"traceEvents": events, "displayTimeUnit": "ms"}
    if path is not None:
        with open(path, "w") as f:
            json.dump(trace, f)
    return trace
