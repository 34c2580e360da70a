"""Sample inputs for every declared op (PyTorch's OpInfo idea): `SAMPLES[name]` makes a list
of `Sample`s from a numpy Generator. tests/test_registry.py walks the registry and fails for
an op without samples here, so a new op cannot skip its checks.

A Sample holds the positional arguments (numpy arrays become float64 Tensors; those at the
positions in `grad` require grad, default: the op's differentiable inputs that are arrays)
and the keyword arguments. `domain` helpers keep arguments where an op is smooth (away from
kinks, poles and branch cuts), so finite differences agree with the analytic gradient.
"""
from __future__ import annotations

import numpy as np


class Sample:
    """One call: `args` (arrays: tensors), `kwargs`; `grad` the positions of `args` that
    require grad (None: every array among the op's differentiable inputs)."""

    def __init__(self, *args, grad=None, **kwargs):
        # numpy gives scalars for size=(): 0-d arrays, so that they become 0-d tensors
        self.args = tuple(np.asarray(a) if isinstance(a, (np.ndarray, np.generic)) else a
                          for a in args)
        self.kwargs, self.grad = kwargs, grad

    def __repr__(self):
        shapes = [a.shape if isinstance(a, np.ndarray) else a for a in self.args]
        return f"Sample({shapes}, {self.kwargs})"


SHAPES = ((3, 4), (5,), ())  # a matrix, a vector, a 0-d tensor


def _uniform(lo, hi):
    """Unary samples drawn from [lo, hi] for each of SHAPES."""
    def make(rng):
        return [Sample(rng.uniform(lo, hi, s)) for s in SHAPES]
    return make


def _away_from_integers(rng):
    # piecewise-constant ops: finite differences stay inside one piece
    return [Sample(rng.integers(-3, 3, s) + rng.uniform(0.2, 0.8, s)) for s in SHAPES]


def _away_from_zero(rng):
    return [Sample(rng.choice([-1.0, 1.0], s) * rng.uniform(0.3, 2.0, s)) for s in SHAPES]


SAMPLES = {
    # ---- pointwise ----
    "abs": _away_from_zero, "neg": _uniform(-2, 2), "exp": _uniform(-2, 2),
    "log": _uniform(0.2, 3), "sqrt": _uniform(0.2, 3), "sin": _uniform(-3, 3),
    "cos": _uniform(-3, 3), "tanh": _uniform(-2, 2), "tan": _uniform(-1.2, 1.2),
    "asin": _uniform(-0.9, 0.9), "acos": _uniform(-0.9, 0.9), "atan": _uniform(-3, 3),
    "sinh": _uniform(-2, 2), "cosh": _uniform(-2, 2), "asinh": _uniform(-3, 3),
    "acosh": _uniform(1.2, 3), "atanh": _uniform(-0.9, 0.9), "log1p": _uniform(-0.5, 2),
    "expm1": _uniform(-2, 2), "log2": _uniform(0.2, 3), "log10": _uniform(0.2, 3),
    "exp2": _uniform(-2, 2), "erf": _uniform(-2, 2), "erfc": _uniform(-2, 2),
    "reciprocal": _away_from_zero, "rsqrt": _uniform(0.2, 3), "sign": _away_from_zero,
    "floor": _away_from_integers, "ceil": _away_from_integers,
    "trunc": _away_from_integers,
    "round": lambda rng: _away_from_integers(rng) + [
        Sample(rng.uniform(-3, 3, (3, 4)) * 10, decimals=-1)],
}
