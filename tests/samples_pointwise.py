"""Samples of the pointwise ops (tests/op_samples.py says how samples work)."""
from __future__ import annotations

import numpy as np
from op_samples import Sample, away_from_integers, away_from_zero, uniform

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


# ---- arithmetic and selection ---------------------------------------------------------------
PAIRS = (((3, 4), (3, 4)), ((3, 4), (4,)), ((), (5,)), ((2, 1, 3), (4, 1)))


def binary(lo, hi, lo2=None, hi2=None, scalar=1.5, **kwargs):
    """Two-input samples from [lo, hi] x [lo2, hi2] for broadcasting pairs of shapes, and one
    with a Python number as the second operand."""
    lo2, hi2 = (lo, hi) if lo2 is None else (lo2, hi2)

    def make(rng):
        out = [Sample(rng.uniform(lo, hi, a), rng.uniform(lo2, hi2, b), **kwargs)
               for a, b in PAIRS]
        if scalar is not None:
            out.append(Sample(rng.uniform(lo, hi, (3, 4)), scalar, **kwargs))
        return out
    return make


def apart(rng, a, b):
    """Two arrays of shapes a and b with no element of one within 0.1 of the other's
    (the kinks of maximum, minimum, clamp)."""
    x = rng.uniform(-2, 2, a)
    y = rng.uniform(-2, 2, b)
    close = np.abs(x - y) < 0.1
    return np.where(close, x + 0.3, x), y


def quotients(rng, a, b):
    """x of shape a (the broadcast shape), y of shape b away from 0, x / y away from
    integers (the kinks of fmod, remainder, floor and trunc division)."""
    y = rng.choice([-1.0, 1.0], b) * rng.uniform(0.5, 2.0, b)
    return (rng.integers(-3, 3, a) + rng.uniform(0.2, 0.8, a)) * y, y


def _division(rng, **kwargs):
    out = []
    for a, b in (((3, 4), (3, 4)), ((3, 4), (4,)), ((), ())):
        x, y = quotients(rng, a, b)
        out.append(Sample(x, y, **kwargs))
    return out


def _selection(rng):
    out = []
    for a, b in (((3, 4), (3, 4)), ((3, 4), (4,)), ((), ())):
        x, y = apart(rng, a, b)
        out.append(Sample(x, y))
    return out


def _where(rng):
    c = rng.uniform(size=(3, 4)) > 0.5
    return [Sample(c, rng.uniform(-2, 2, (3, 4)), rng.uniform(-2, 2, (4,))),
            Sample(c[0], rng.uniform(-2, 2, (3, 4)), 0.5),
            Sample(np.asarray(True), rng.uniform(-2, 2, ()), rng.uniform(-2, 2, (2,)))]


def _clamp(rng):
    x = rng.uniform(-2, 2, (3, 4))
    x = np.where(np.abs(np.abs(x) - 0.5) < 0.1, x * 1.5, x)
    lo, hi = apart(rng, (3, 4), (4,))
    lo, hi = np.minimum(lo, hi) - 0.25, np.maximum(lo, hi) + 0.25
    x = np.where((np.abs(x - lo) < 0.05) | (np.abs(x - hi) < 0.05), x + 0.12, x)
    return [Sample(x, -0.5, 0.5), Sample(x, min=-0.5), Sample(x, max=0.5),
            Sample(x, lo, hi), Sample(x, hi, lo),      # min > max: max everywhere
            Sample(x, lo)]


def _clamp_one(rng):
    x, b = apart(rng, (3, 4), (4,))
    y = rng.uniform(-2, 2, (5,))
    return [Sample(x, b), Sample(np.where(np.abs(y - 0.3) < 0.1, 0.6, y), 0.3),
            Sample(*apart(rng, (), (5,)))]


def _pow(rng):
    out = [Sample(rng.uniform(0.5, 2, a), rng.uniform(-2, 2, b)) for a, b in PAIRS]
    out += [Sample(rng.uniform(0.5, 2, (3, 4)), y) for y in (2, 3, 0.5, -1, -1.3, 0)]
    out.append(Sample(2.0, rng.uniform(-2, 2, (3, 4))))
    return out


def _lerp(rng):
    return [Sample(rng.uniform(-2, 2, (3, 4)), rng.uniform(-2, 2, (3, 4)),
                   rng.uniform(-1, 2, (3, 4))),
            Sample(rng.uniform(-2, 2, (3, 4)), rng.uniform(-2, 2, (4,)), 0.3),
            Sample(rng.uniform(-2, 2, (3, 4)), rng.uniform(-2, 2, (3, 4)), 0.7),
            Sample(rng.uniform(-2, 2, ()), rng.uniform(-2, 2, (2,)), rng.uniform(0, 1, ()))]


def _nan_to_num(rng):
    x = rng.uniform(-2, 2, (3, 4))
    x[0, 0], x[1, 1], x[2, 2] = np.nan, np.inf, -np.inf
    # the default replacements of inf are the dtype's extremes: finite differences overflow
    return [Sample(x, grad=[]), Sample(x, nan=1.5, posinf=100.0, neginf=-100.0),
            Sample(rng.uniform(-2, 2, ()), 0.5)]


def _addc(rng):
    return [Sample(rng.uniform(-2, 2, (3, 4)), rng.uniform(-2, 2, (3, 4)),
                   rng.uniform(0.5, 2, (4,))),
            Sample(rng.uniform(-2, 2, (4,)), rng.uniform(-2, 2, (3, 1)),
                   rng.uniform(0.5, 2, (3, 4)), value=-0.5)]


SAMPLES.update({
    "add": lambda rng: binary(-2, 2)(rng) + binary(-2, 2, alpha=-2.5)(rng)[:2],
    "sub": lambda rng: binary(-2, 2)(rng) + binary(-2, 2, alpha=0.5)(rng)[:2],
    "mul": binary(-2, 2),
    "div": lambda rng: binary(-2, 2, 0.5, 2)(rng) + _division(rng, rounding_mode="floor")
    + _division(rng, rounding_mode="trunc"),
    "true_divide": binary(-2, 2, 0.5, 2),
    # PyTorch has no derivative for floor_divide (here: 0, as div's floor mode): values only
    "floor_divide": lambda rng: [Sample(*s.args, grad=[]) for s in _division(rng)],
    "fmod": _division,
    "remainder": _division,
    "pow": _pow,
    "float_power": lambda rng: [Sample(rng.uniform(0.5, 2, (3, 4)), rng.uniform(-2, 2, (4,))),
                                Sample(rng.uniform(0.5, 2, (3, 4)), 2)],
    "square": uniform(-2, 2),
    "atan2": binary(-2, 2, 0.5, 2, scalar=None),     # PyTorch's take two tensors
    "hypot": binary(0.5, 2, -2, -0.5, scalar=None),
    "logaddexp": binary(-3, 3, scalar=None),
    "logaddexp2": binary(-3, 3, scalar=None),
    "copysign": lambda rng: [Sample(*(np.where(np.abs(a) < 0.2, 0.5, a) for a in
                                      (rng.uniform(-2, 2, s) for s in (sa, sb))))
                             for sa, sb in PAIRS] + [
                                 Sample(rng.uniform(0.3, 2, (3, 4)), -1.0)],
    "frac": away_from_integers,
    "signbit": lambda rng: [Sample(np.array([-1.5, -0.0, 0.0, 2.0, -np.inf, np.nan])),
                            Sample(np.array([-3, 0, 4])), Sample(rng.uniform(-2, 2, (3, 4)))],
    "lerp": _lerp,
    "addcmul": _addc,
    "addcdiv": _addc,
    "nan_to_num": _nan_to_num,
    "maximum": _selection,
    "minimum": _selection,
    "where": _where,
    "clamp": _clamp,
    "clamp_min": _clamp_one,
    "clamp_max": _clamp_one,
})
