"""Counters, failures, the live progress line, the summary table and the JSON report."""
from __future__ import annotations

import json
import os
import sys
import time

COLUMNS = ("graphs", "nodes", "comparisons", "mismatches", "errors", "hangs",
           "faults_injected", "faults_surfaced", "leaks")
HEADERS = ("family", "graphs", "nodes", "compared", "mismatch", "errors", "hangs",
           "faults inj", "faults surf", "leaks")
MAX_STORED_FAILURES = 200  # keep the report bounded however long the run


class FamilyStats:
    __slots__ = COLUMNS

    def __init__(self):
        for c in COLUMNS:
            setattr(self, c, 0)

    def as_dict(self):
        return {c: getattr(self, c) for c in COLUMNS}


class Failure:
    """One detected problem, with what it takes to reproduce it."""

    def __init__(self, kind, family, seed, message, replay=None, details=None):
        # mismatch | error | hang | lost-fault | wrong-fault | leak | blas-threads | ...
        self.kind = kind
        self.family = family
        self.seed = seed
        self.message = message
        self.replay = replay
        self.details = details or {}

    def as_dict(self):
        return {"kind": self.kind, "family": self.family, "seed": self.seed,
                "message": self.message, "replay": self.replay, "details": self.details}

    def line(self):
        where = f"{self.family} seed={self.seed}" if self.seed is not None else self.family
        s = f"[{self.kind}] {where}: {self.message}"
        if self.replay:
            s += f"\n    replay: {self.replay}"
        return s


class Report:
    def __init__(self, config: dict):
        self.config = config
        self.families = {}
        self.failures = []
        self.failure_count = 0
        self.faults_by_kind = {}   # kind -> [injected, surfaced]
        self.leak_checks = []      # bounded list of checkpoint samples
        self.notes = []
        self.start = time.time()
        self.elapsed = 0.0
        self.stopped_early = None
        self.units = 0
        self.engine_calls = 0
        self.timings = {}          # seconds spent per check kind
        self.counters = {}         # miscellaneous event counts (e.g. how interrupts arrived)

    # ---- recording -----------------------------------------------------------------------
    def fam(self, family) -> FamilyStats:
        st = self.families.get(family)
        if st is None:
            st = self.families[family] = FamilyStats()
        return st

    def fail(self, failure: Failure):
        self.failure_count += 1
        if len(self.failures) < MAX_STORED_FAILURES:
            self.failures.append(failure)
        return failure

    def fault(self, kind, surfaced: bool, family):
        c = self.faults_by_kind.setdefault(kind, [0, 0])
        c[0] += 1
        c[1] += bool(surfaced)
        st = self.fam(family)
        st.faults_injected += 1
        st.faults_surfaced += bool(surfaced)

    def notes_counter(self, name: str, n: int = 1):
        self.counters[name] = self.counters.get(name, 0) + n

    @property
    def ok(self) -> bool:
        return self.failure_count == 0

    def total(self) -> FamilyStats:
        t = FamilyStats()
        for st in self.families.values():
            for c in COLUMNS:
                setattr(t, c, getattr(t, c) + getattr(st, c))
        return t

    def kinds(self) -> dict:
        out = {}
        for f in self.failures:
            out[f.kind] = out.get(f.kind, 0) + 1
        return out

    # ---- output --------------------------------------------------------------------------
    def table(self) -> str:
        rows = [HEADERS]
        for name in sorted(self.families):
            st = self.families[name]
            rows.append((name,) + tuple(str(getattr(st, c)) for c in COLUMNS))
        t = self.total()
        rows.append(("TOTAL",) + tuple(str(getattr(t, c)) for c in COLUMNS))
        widths = [max(len(r[i]) for r in rows) for i in range(len(HEADERS))]

        def fmt(r):
            return "  ".join(r[0].ljust(widths[0]) if i == 0 else r[i].rjust(widths[i])
                             for i in range(len(r)))

        lines = [fmt(rows[0]), "  ".join("-" * w for w in widths)]
        lines += [fmt(r) for r in rows[1:-1]]
        lines += ["  ".join("-" * w for w in widths), fmt(rows[-1])]
        return "\n".join(lines)

    def summary(self) -> str:
        t = self.total()
        rate = t.graphs / self.elapsed if self.elapsed else 0.0
        out = [f"stress: {t.graphs} graphs ({self.units} units, {self.engine_calls} engine "
               f"calls) in {self.elapsed:.1f}s ({rate:.1f} graphs/s), seed "
               f"{self.config.get('seed')}, workers {self.config.get('workers')}, "
               f"threads {self.config.get('threads')}", "", self.table()]
        if self.faults_by_kind:
            out.append("")
            out.append("faults: " + ", ".join(f"{k} {s}/{i}" for k, (i, s) in
                                              sorted(self.faults_by_kind.items()))
                       + " (surfaced/injected)")
        for n in self.notes:
            out.append(f"note: {n}")
        if self.stopped_early:
            out.append(f"stopped early: {self.stopped_early}")
        out.append("")
        if self.ok:
            out.append("PASS: no mismatches, hangs, lost faults or leaks")
        else:
            out.append(f"FAIL: {self.failure_count} failure(s)")
            for f in self.failures[:20]:
                out.append("  " + f.line().replace("\n", "\n  "))
            if self.failure_count > 20:
                out.append(f"  ... {self.failure_count - 20} more (see the JSON report)")
        return "\n".join(out)

    def as_dict(self) -> dict:
        return {
            "ok": self.ok,
            "config": self.config,
            "elapsed": self.elapsed,
            "units": self.units,
            "engine_calls": self.engine_calls,
            "families": {k: v.as_dict() for k, v in sorted(self.families.items())},
            "total": self.total().as_dict(),
            "faults": {k: {"injected": i, "surfaced": s}
                       for k, (i, s) in sorted(self.faults_by_kind.items())},
            "failure_count": self.failure_count,
            "failures": [f.as_dict() for f in self.failures],
            "counters": self.counters,
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
            "leak_checks": self.leak_checks,
            "notes": self.notes,
            "stopped_early": self.stopped_early,
        }

    def write_json(self, path):
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            json.dump(self.as_dict(), f, indent=2, default=str)
        os.replace(tmp, path)


def interactive(stream=None) -> bool:
    """Live progress only on a terminal and never in CI."""
    stream = stream or sys.stderr
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """A single self-overwriting status line on stderr (a no-op when disabled)."""

    def __init__(self, report: Report, enabled: bool, stream=None, every: float = 0.25):
        self.report = report
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.every = every
        self._last = 0.0
        self._width = 0

    def update(self, what: str = "", force: bool = False):
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < self.every:
            return
        self._last = now
        r = self.report
        t = r.total()
        el = time.time() - r.start
        line = (f"[{el:6.1f}s] graphs {t.graphs}  nodes {t.nodes}  failures "
                f"{r.failure_count}  rate {t.graphs / el if el else 0:.1f}/s  {what}")
        line = line[:118]
        pad = max(0, self._width - len(line))
        self._width = len(line)
        self.stream.write("\r" + line + " " * pad)
        self.stream.flush()

    def close(self):
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
