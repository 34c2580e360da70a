"""Samples of the pointwise ops (tests/op_samples.py says how samples work)."""
from __future__ import annotations

from op_samples import SHAPES, Sample, away_from_integers, away_from_zero, uniform

SAMPLES = {
    "abs": away_from_zero, "neg": uniform(-2, 2), "exp": uniform(-2, 2),
    "log": uniform(0.2, 3), "sqrt": uniform(0.2, 3), "sin": uniform(-3, 3),
    "cos": uniform(-3, 3), "tanh": uniform(-2, 2), "tan": uniform(-1.2, 1.2),
    "asin": uniform(-0.9, 0.9), "acos": uniform(-0.9, 0.9), "atan": uniform(-3, 3),
    "sinh": uniform(-2, 2), "cosh": uniform(-2, 2), "asinh": uniform(-3, 3),
    "acosh": uniform(1.2, 3), "atanh": uniform(-0.9, 0.9), "log1p": uniform(-0.5, 2),
    "expm1": uniform(-2, 2), "log2": uniform(0.2, 3), "log10": uniform(0.2, 3),
    "exp2": uniform(-2, 2), "erf": uniform(-2, 2), "erfc": uniform(-2, 2),
    "reciprocal": away_from_zero, "rsqrt": uniform(0.2, 3), "sign": away_from_zero,
    "floor": away_from_integers, "ceil": away_from_integers, "trunc": away_from_integers,
    "round": lambda rng: away_from_integers(rng) + [
        Sample(rng.uniform(-3, 3, (3, 4)) * 10, decimals=-1)],
}
