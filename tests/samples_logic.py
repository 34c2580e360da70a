"""Samples of the comparisons and logic ops (tests/op_samples.py says how samples work):
none is differentiable, so the samples check values and dtypes against PyTorch (ties, NaN,
inf, the shift widths, uint8 reductions, 0-d tensors)."""
from __future__ import annotations

import numpy as np
from op_samples import Sample

SPECIAL = np.array([-np.inf, -1.5, -0.0, 0.0, 1.0, np.inf, np.nan])


def compare(rng):
    a = np.round(rng.uniform(-2, 2, (3, 4)), 0)      # ties with b
    b = np.round(rng.uniform(-2, 2, (4,)), 0)
    return [Sample(a, b), Sample(a, 1.0), Sample(SPECIAL, SPECIAL[::-1]),
            Sample(rng.integers(-3, 3, (3, 4)), rng.integers(-3, 3, (3, 4))),
            Sample(np.asarray(1.5), SPECIAL)]


def tests(rng):
    return [Sample(SPECIAL), Sample(rng.uniform(-2, 2, (3, 4))), Sample(np.array([1, -2, 0]))]


def logical_binary(rng):
    return [Sample(rng.integers(0, 2, (3, 4)).astype(bool), rng.integers(0, 2, (4,)).astype(bool)),
            Sample(np.array([0.0, 0.5, -1.0, np.nan]), np.array([1, 0, 0, 2])),
            Sample(rng.integers(-2, 2, (3, 4)), np.asarray(True))]


def bitwise_binary(rng):
    return [Sample(rng.integers(-50, 50, (3, 4)), rng.integers(-50, 50, (4,))),
            Sample(rng.integers(0, 2, (5,)).astype(bool), rng.integers(0, 2, (5,)).astype(bool)),
            Sample(rng.integers(0, 255, (6,)).astype(np.uint8), 7)]


def shifts(rng):
    return [Sample(np.array([1, -1, 3, 8, -8, 5]), np.array([64, 65, 63, -1, -2, 0])),
            Sample(rng.integers(-100, 100, (3, 4)), rng.integers(0, 10, (4,))),
            Sample(np.array([1, 3, -128, 127], np.int8), 7),
            Sample(np.array([255, 3, 128], np.uint8), 9),
            Sample(np.array([255, 3, 128], np.uint8), 3),
            Sample(np.array([True, False]), 1)]


def reductions(rng):
    x = rng.integers(0, 2, (2, 3, 4)) * rng.uniform(0.5, 2.0, (2, 3, 4))
    return [Sample(x), Sample(x, 1), Sample(x, dim=(0, 2), keepdim=True), Sample(x, -1, True),
            Sample(x, dim=()), Sample(np.array([0, 3, 1], np.uint8)),
            Sample(np.array([0, 3, 1], np.uint8), 0), Sample(np.asarray(0.0), 0, True),
            Sample(np.array([np.nan, 0.0])), Sample(np.zeros((0, 3)), 0)]


def count_nonzero(rng):
    x = rng.integers(0, 2, (2, 3, 4)) * rng.uniform(0.5, 2.0, (2, 3, 4))
    return [Sample(x), Sample(x, 1), Sample(x, dim=(0, 2)), Sample(x, dim=()),
            Sample(np.array([np.nan, 0.0, -0.0])), Sample(np.asarray(2.0), 0)]


def argsort(rng):
    x = np.round(rng.uniform(-2, 2, (3, 5)), 0)      # ties: stable order
    x[0, 1] = x[2, 3] = np.nan
    return [Sample(x), Sample(x, 0), Sample(x, descending=True), Sample(x, 1, True),
            Sample(x, stable=True), Sample(np.asarray(1.0)), Sample(x[0], dim=0)]


def bincount(rng):
    x = rng.integers(0, 6, (10,))
    return [Sample(x), Sample(x, rng.uniform(-1, 1, (10,))), Sample(x, minlength=9),
            Sample(x, rng.integers(0, 3, (10,))), Sample(np.array([], np.int64)),
            Sample(np.array([], np.int64), minlength=3)]


def isclose(rng):
    a = rng.uniform(-2, 2, (3, 4))
    b = a + rng.choice([0.0, 1e-9, 1e-6, 1e-3], (3, 4)) * a
    return [Sample(a, b), Sample(a, b, 1e-4, 1e-6), Sample(SPECIAL, SPECIAL),
            Sample(SPECIAL, SPECIAL, equal_nan=True), Sample(a, np.asarray(0.5), atol=2.0)]


SAMPLES = {
    **{n: compare for n in ("eq", "ne", "lt", "gt", "le", "ge")},
    **{n: tests for n in ("isnan", "isinf", "isfinite", "isposinf", "isneginf",
                          "logical_not")},
    **{n: logical_binary for n in ("logical_and", "logical_or", "logical_xor")},
    **{n: bitwise_binary for n in ("bitwise_and", "bitwise_or", "bitwise_xor")},
    "bitwise_not": lambda rng: [Sample(rng.integers(-50, 50, (3, 4))),
                                Sample(np.array([True, False])),
                                Sample(np.array([0, 5, 255], np.uint8))],
    "bitwise_left_shift": shifts,
    "bitwise_right_shift": shifts,
    "any": reductions,
    "all": reductions,
    "count_nonzero": count_nonzero,
    "argsort": argsort,
    "bincount": bincount,
    "isclose": isclose,
    "msort": lambda rng: [Sample(rng.uniform(-2, 2, (4, 3))), Sample(rng.uniform(-2, 2, (5,)))],
}
