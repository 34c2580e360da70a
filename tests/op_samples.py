"""Sample inputs for every declared op (PyTorch's OpInfo idea). `SAMPLES[name]` makes a list
of `Sample`s from a numpy Generator; each family has its file, `tests/samples_<family>.py`,
with a dict `SAMPLES`, merged here. tests/test_registry.py walks the registry and fails for an
op without samples, so a new op cannot skip its checks.

A Sample holds the positional arguments (numpy arrays become float64 Tensors; those at the
positions in `grad` require grad, default: the arrays among the op's differentiable inputs)
and the keyword arguments. The domain helpers keep arguments where an op is smooth (away from
kinks, poles and branch cuts), so finite differences agree with the analytic gradient.
"""
from __future__ import annotations

import importlib
import pathlib

import numpy as np


class Sample:
    """One call: `args` (arrays: tensors), `kwargs`; `grad` the positions of `args` that
    require grad (None: every float array among the op's differentiable inputs). Optional,
    written with operators that work on either library's tensors: `prep` maps the argument
    list to the one passed (a symmetric matrix for an op that reads one triangle, as
    cholesky, whose gradient is symmetric while finite differences see the triangle);
    `post` maps the result to what is compared and differentiated (eigenvectors squared:
    their signs are arbitrary)."""

    def __init__(self, *args, grad=None, prep=None, post=None, **kwargs):
        # numpy gives scalars for size=(): 0-d arrays, so that they become 0-d tensors
        self.args = tuple(np.asarray(a) if isinstance(a, (np.ndarray, np.generic)) else a
                          for a in args)
        self.kwargs, self.grad, self.prep, self.post = kwargs, grad, prep, post

    def call(self, fn, args):
        """`fn` (pa's op or torch's) on `args` and the keyword arguments, with `prep` and
        `post` applied."""
        if self.prep is not None:
            args = self.prep(list(args))
        out = fn(*args, **self.kwargs)
        return out if self.post is None else self.post(out)

    def __repr__(self):
        shapes = [a.shape if isinstance(a, np.ndarray) else a for a in self.args]
        return f"Sample({shapes}, {self.kwargs})"


SHAPES = ((3, 4), (5,), ())  # a matrix, a vector, a 0-d tensor


def uniform(lo, hi, shapes=SHAPES):
    """One-input samples drawn from [lo, hi] for each of `shapes`."""
    def make(rng):
        return [Sample(rng.uniform(lo, hi, s)) for s in shapes]
    return make


def away_from_integers(rng):
    """Piecewise-constant ops: finite differences stay inside one piece."""
    return [Sample(rng.integers(-3, 3, s) + rng.uniform(0.2, 0.8, s)) for s in SHAPES]


def away_from_zero(rng):
    return [Sample(rng.choice([-1.0, 1.0], s) * rng.uniform(0.3, 2.0, s)) for s in SHAPES]


def _merge() -> dict:
    out = {}
    for path in sorted(pathlib.Path(__file__).parent.glob("samples_*.py")):
        family = importlib.import_module(path.stem).SAMPLES
        twice = set(out) & set(family)
        assert not twice, f"{path.name}: samples for {sorted(twice)} are given twice"
        out.update(family)
    return out


SAMPLES = _merge()
