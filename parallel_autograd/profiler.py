"""`profile()`: record a per-node timeline of backward passes (both engines).

Records (op name, thread, start, end) for every rule that runs while the context
is active, from any thread, and writes a Chrome/Perfetto trace (`chrome://tracing`,
https://ui.perfetto.dev). Thread safety: recording from many threads is safe
(`list.append` under a lock); one recorder is active per process at a time.
"""
from __future__ import annotations

import json
import threading
import time

from . import locks

_active = None  # the Recorder in use, or None (read without a lock: a plain reference)


def active() -> "Recorder | None":
    """The recorder of the active `profile()` context, or None."""
    return _active


class Recorder:
    """Collects timeline events; `events` is a list of dicts once the context exits."""

    def __init__(self):
        self._lock = threading.Lock()  # guards self._raw
        locks.track(self)  # a fork child gets a fresh one
        self._raw = []
        self.now = time.perf_counter
        self.t0 = self.now()

    def add(self, name: str, start: float, end: float | None = None, *,
            track: str | None = None) -> None:
        """Add one event: `name` ran on this thread from `start` to `end` (default:
        now), both `perf_counter` readings. `track`: show it on a track of that name
        instead of the thread's (e.g. "MPI communication")."""
        if end is None:
            end = self.now()
        if track is None:
            th = threading.current_thread()
            tname, tid = th.name, th.ident
        else:
            tname, tid = track, _track_id(track)
        with self._lock:
            self._raw.append((name, tname, tid, start, end))

    @property
    def events(self) -> list:
        with self._lock:
            raw = list(self._raw)
        return [{"name": n, "thread": tn, "thread_id": tid,
                 "start": s - self.t0, "end": e - self.t0} for n, tn, tid, s, e in raw]

    def chrome_trace(self, pid: int = 1, shift: float = 0.0) -> dict:
        """The timeline as a Chrome trace dict: one track per thread (and per named
        track), process `pid`, times shifted by `shift` seconds."""
        return {"traceEvents": chrome_events(self.events, pid, shift), "displayTimeUnit": "ms"}

    def export_chrome_trace(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.chrome_trace(), f)


def chrome_events(events: list, pid: int = 1, shift: float = 0.0) -> list:
    """Chrome trace events ("X" spans and thread-name metadata) for `Recorder.events`."""
    out, names = [], {}
    for ev in events:
        names[ev["thread_id"]] = ev["thread"]
        out.append({"name": ev["name"], "ph": "X", "pid": pid, "tid": ev["thread_id"],
                    "ts": (ev["start"] + shift) * 1e6, "dur": (ev["end"] - ev["start"]) * 1e6,
                    "cat": "backward"})
    for tid, tn in names.items():
        out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                    "args": {"name": tn}})
    return out


_TRACKS: dict = {}  # named track -> its id in the trace (below any thread ident)


def _track_id(track: str) -> int:
    tid = _TRACKS.get(track)
    if tid is None:
        tid = _TRACKS.setdefault(track, len(_TRACKS) + 1)
    return tid


class profile:
    """Context manager: `with pa.profile() as prof: ...; prof.export_chrome_trace(p)`."""

    def __init__(self, path: str | None = None):
        self.path = path
        self.recorder = Recorder()

    def __enter__(self) -> Recorder:
        global _active
        if _active is not None:
            raise RuntimeError("a profile() is already active")
        _active = self.recorder
        return self.recorder

    def __exit__(self, *exc):
        global _active
        _active = None
        if self.path is not None:
            self.recorder.export_chrome_trace(self.path)
        return False
