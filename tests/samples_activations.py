"""Samples of the activations (tests/op_samples.py says how samples work): inputs kept away
from each op's kinks (0, the hardtanh bounds, +-3, softplus's threshold)."""
from __future__ import annotations

import numpy as np
from op_samples import SHAPES, Sample, away_from_zero, uniform


def away_from(*kinks, lo=-4.0, hi=4.0, **kwargs):
    """One-input samples from [lo, hi] with no element within 0.1 of a kink."""
    def make(rng):
        out = []
        for s in SHAPES:
            x = rng.uniform(lo, hi, s)
            for k in kinks:
                x = np.where(np.abs(x - k) < 0.1, k + 0.2, x)
            out.append(Sample(x, **kwargs))
        return out
    return make


def both(*makers):
    return lambda rng: [s for make in makers for s in make(rng)]


def _prelu(rng):
    def x(shape):
        return rng.choice([-1.0, 1.0], shape) * rng.uniform(0.2, 2.0, shape)
    return [Sample(x((2, 3, 4)), rng.uniform(0.05, 0.5, (3,))),
            Sample(x((2, 3)), rng.uniform(0.05, 0.5, (1,))),
            Sample(x((5,)), rng.uniform(0.05, 0.5, ()))]


def _glu(rng):
    return [Sample(rng.uniform(-2, 2, (3, 4))), Sample(rng.uniform(-2, 2, (4, 3)), dim=0),
            Sample(rng.uniform(-2, 2, (2, 6, 2)), dim=-2)]


SAMPLES = {
    "relu": lambda rng: away_from_zero(rng) + [Sample(rng.uniform(-2, 2, (3,)), inplace=True,
                                                      grad=[])],
    "leaky_relu": both(away_from_zero, away_from(0, negative_slope=0.2),
                       away_from(0, negative_slope=-0.5), away_from(0, negative_slope=3.0)),
    "sigmoid": uniform(-5, 5),
    "silu": uniform(-5, 5),
    "gelu": both(uniform(-4, 4), lambda rng: [Sample(rng.uniform(-4, 4, (3, 4)),
                                                     approximate="tanh")]),
    "softplus": both(uniform(-4, 4), away_from(1.5, beta=2.0, threshold=3.0)),
    "softsign": uniform(-3, 3),
    "mish": uniform(-4, 4),
    "elu": both(away_from(0), away_from(0, alpha=0.7)),
    "selu": away_from(0),
    "celu": both(away_from(0), away_from(0, alpha=1.5)),
    "hardtanh": both(away_from(-1, 1, lo=-2, hi=2),
                     away_from(-0.5, 1.5, lo=-2, hi=2, min_val=-0.5, max_val=1.5)),
    "hardsigmoid": away_from(-3, 3),
    "hardswish": away_from(-3, 3),
    "logsigmoid": uniform(-5, 5),
    "prelu": _prelu,
    "glu": _glu,
}
# celu's backward uses PyTorch's 1 / float32(alpha): an alpha float32 cannot hold shows it
SAMPLES["celu"] = both(SAMPLES["celu"], away_from(0, alpha=0.3))
