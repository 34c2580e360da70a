"""Statistics of the benchmark: 95% intervals by a seeded bootstrap, and the decision
PASS / MISS / unresolved that a target takes from an interval.

Samples come in *rounds*: in one round every configuration of a process runs once, in
an order rotated every round (`stress.compare.measure.time_configs`). Samples of the
same process are resampled *paired* (one draw of round indices for all of them, so
drift that hits a whole round cancels in their ratios); samples of different processes
(the PyTorch child, the other malloc setting) are resampled independently.
`boot_medians` returns, per series, the medians of `N_BOOT` resamples; a ratio's
interval is the 2.5th and 97.5th percentile of the ratio of those vectors
(`interval`). The generator is seeded from the run's seed and the quantity's name
(`seed_for`), so the report can be recomputed from the raw JSON bit for bit.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

N_BOOT = 2000
LEVEL = 0.95
PASS, MISS, UNRESOLVED, NOISY, NA = "PASS", "MISS", "unresolved", "noisy", "n/a"


@dataclass(frozen=True)
class Interval:
    """A point estimate (from all samples) and its 95% bootstrap interval."""
    point: float
    lo: float
    hi: float

    def scaled(self, k: float) -> "Interval":
        """The same interval times a positive constant `k` (units)."""
        return Interval(self.point * k, self.lo * k, self.hi * k)

    def as_dict(self) -> dict:
        """{"point", "lo", "hi"} for the JSON."""
        return {"point": self.point, "lo": self.lo, "hi": self.hi}

    def contains(self, value: float) -> bool:
        """Whether `value` lies in the interval (ends included)."""
        return self.lo <= value <= self.hi


def seed_for(seed: int, *names) -> int:
    """A stable 32-bit seed from the run's `seed` and the names of a quantity."""
    return zlib.crc32("|".join(str(n) for n in (seed, *names)).encode())


def boot_medians(samples: Mapping[str, Sequence[float]], seed: int,
                 n_boot: int = N_BOOT) -> dict:
    """Medians of `n_boot` paired resamples of every series in `samples` (all measured
    in the same rounds, so all of one length): {name: array of n_boot medians}."""
    arrays = {k: np.asarray(v, dtype=float) for k, v in samples.items()}
    lengths = {a.size for a in arrays.values()}
    if len(lengths) != 1 or 0 in lengths:
        raise ValueError(f"paired series need one common, non-zero length: {sorted(lengths)}")
    n = lengths.pop()
    idx = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
    return {k: np.median(a[idx], axis=1) for k, a in arrays.items()}


def interval(values: np.ndarray, point: float, level: float = LEVEL) -> Interval:
    """Percentile interval of bootstrap `values` around the estimate `point`."""
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(values, [tail, 100 - tail])
    return Interval(float(point), float(min(lo, point)), float(max(hi, point)))


def median_interval(samples: Sequence[float], seed: int) -> Interval:
    """The median of `samples` with its interval."""
    boot = boot_medians({"x": samples}, seed)["x"]
    return interval(boot, float(np.median(samples)))


def ratio_interval(num: Sequence[float], den: Sequence[float], seed: int,
                   paired: bool) -> Interval:
    """median(num) / median(den) with its interval: `paired` when both were measured in
    the same rounds (same process), independent resamples otherwise."""
    if paired:
        b = boot_medians({"n": num, "d": den}, seed)
        bn, bd = b["n"], b["d"]
    else:
        bn = boot_medians({"n": num}, seed)["n"]
        bd = boot_medians({"d": den}, seed + 1)["d"]
    return interval(bn / bd, float(np.median(num) / np.median(den)))


_OPS = {"<=": (lambda v, lim: v <= lim), "<": (lambda v, lim: v < lim),
        ">=": (lambda v, lim: v >= lim)}


def decide(iv: Interval, op: str, limit: float) -> str:
    """PASS when the whole interval satisfies `value op limit`, MISS when none of it
    does, otherwise unresolved (`op` is "<=", "<" or ">=")."""
    ok = _OPS[op]
    if ok(iv.lo, limit) and ok(iv.hi, limit):
        return PASS
    if not ok(iv.lo, limit) and not ok(iv.hi, limit):
        return MISS
    return UNRESOLVED


def ratio_text(iv: Interval, digits: int = 2, unit: str = "x") -> str:
    """`1.23x [1.10, 1.35]`: the estimate and its 95% interval."""
    f = f"{{:.{digits}f}}"
    return f"{f.format(iv.point)}{unit} [{f.format(iv.lo)}, {f.format(iv.hi)}]"
