"""Samples of the reductions, scans and selections (ops/reduce.py, ops/scan.py; see
tests/op_samples.py for how samples work; arguments that are not tensors are keywords, as
gradcheck makes every positional argument a tensor): every dim form (None, an int, negative, a
tuple, (), a 0-d input's 0 and -1), keepdim, integer inputs where the result dtype is PyTorch's
choice. Values are distinct where a derivative is piecewise (extrema, norms, selections: finite
differences must not reorder them) and away from zero where it has a kink.

Besides the declared ops the registry test walks, `COMPOSITES` holds samples of the
composite ops (max, min, var_mean, std_mean, cummax, cummin, sort, topk, kthvalue, median:
their arguments may be positional) and of the non-exported declared ones (max_all, min_all,
median_all, gather_along, scatter_along), which tests/test_ops_reduce.py checks the same
way (the registry's checks, and PyTorch's values, indices and gradients).
"""
from __future__ import annotations

import numpy as np
from op_samples import Sample


def distinct(rng, shape, scale=0.3):
    """Values at least `scale` apart, mixed signs, in random order."""
    n = int(np.prod(shape))
    v = (rng.permutation(n) - n / 2 + 0.5) * scale
    return v.reshape(shape) if shape else np.asarray(v[0])


def magnitudes(rng, shape):
    """Distinct nonzero magnitudes, mixed signs: the p-norms are smooth around them."""
    n = int(np.prod(shape))
    v = (rng.permutation(n) + 1).reshape(shape) * 0.3 * rng.choice([-1.0, 1.0], shape)
    return np.asarray(v)


def positive(rng, shape):
    return rng.uniform(0.5, 1.5, shape)


def normal(rng, shape):
    return rng.standard_normal(shape)


def with_zeros(rng):
    """Positive values with zeros: one in some rows, two in another, along both dims."""
    x = positive(rng, (3, 4))
    x[0, 1] = x[1, 1] = x[1, 3] = x[2, 0] = 0
    return x


def _dims(make, dims=(None, 1, -1, (0, 2), ()), shape=(2, 3, 4), zero_dim=True, keep=True):
    """Samples of a reduction over each of `dims` (keepdim too), and of a 0-d input."""
    def samples(rng):
        out = [Sample(make(rng, shape))]
        for d in dims:
            if d is not None:
                out.append(Sample(make(rng, shape), dim=d))
        if keep:
            out.append(Sample(make(rng, shape), dim=1, keepdim=True))
            out.append(Sample(make(rng, (3, 4)), dim=(0, 1), keepdim=True))
        out.append(Sample(make(rng, (5,)), dim=0))
        if zero_dim:
            out += [Sample(make(rng, ()), dim=0), Sample(make(rng, ()), dim=-1, keepdim=True)]
        return out
    return samples


def _ints(rng, shape=(3, 4)):
    return rng.integers(-3, 4, shape)


def _sum(rng):
    return _dims(normal)(rng) + [Sample(_ints(rng)), Sample(_ints(rng), dim=1),
                                 Sample(rng.integers(0, 2, (3, 4)).astype(bool), dim=0)]


def _var(rng):
    x = normal(rng, (3, 4))
    # not dim=(): PyTorch's var/std backward then takes n = 1 (its forward reduces all, its
    # gradient is inf); ours is the gradient of what the forward computes
    return _dims(normal, dims=(None, 1, -1, (0, 2)), zero_dim=False)(rng) + [
        Sample(x, dim=1, unbiased=True), Sample(x, dim=0, unbiased=False, keepdim=True),
        Sample(x, unbiased=False), Sample(x, dim=1, correction=0),
        Sample(x, dim=(0, 1), correction=2), Sample(x, correction=0.5)]


def _norm(rng):
    out = []
    for p in ("fro", 2, 1, 3, 0.5, 1.5, float("inf"), -float("inf"), 0, None):
        out.append(Sample(magnitudes(rng, (3, 4)), p=p))
        out.append(Sample(magnitudes(rng, (2, 3, 2)), p=p, dim=(0, 2), keepdim=True))
        out.append(Sample(magnitudes(rng, (3, 4)), p=p, dim=1))
    return out + [Sample(magnitudes(rng, ()), p=2, dim=0)]


def _extremum(rng):
    return _dims(distinct)(rng) + [Sample(_ints(rng), dim=1)]


def _arg(rng):
    x = distinct(rng, (3, 4))
    return [Sample(x), Sample(x, dim=1), Sample(x, dim=-1, keepdim=True),
            Sample(x, dim=None, keepdim=True), Sample(distinct(rng, ()), dim=0),
            Sample(_ints(rng), dim=0)]


def _logsumexp(rng):
    return [Sample(normal(rng, (2, 3, 4)), dim=d) for d in (1, -1, (0, 2))] + [
        Sample(normal(rng, (3, 4)), dim=1, keepdim=True), Sample(normal(rng, ()), dim=0),
        Sample(normal(rng, (3, 4)) * 300, dim=0)]


def _softmax(rng):
    return [Sample(normal(rng, (3, 4)), dim=1), Sample(normal(rng, (2, 3, 4)), dim=0),
            Sample(normal(rng, (2, 3, 4)), dim=-1), Sample(normal(rng, (5,)), dim=0),
            Sample(normal(rng, ()), dim=0), Sample(normal(rng, (3, 4)) * 300, dim=-1)]


def _prod(rng):
    return [Sample(positive(rng, (3, 4))), Sample(positive(rng, (3, 4)), dim=1),
            Sample(positive(rng, (3, 4)), dim=0, keepdim=True), Sample(with_zeros(rng), dim=1),
            Sample(with_zeros(rng), dim=0), Sample(with_zeros(rng)),
            Sample(positive(rng, ()), dim=0), Sample(_ints(rng), dim=1)]


def _scan(make, zeros=False):
    def samples(rng):
        out = [Sample(make(rng, (3, 4)), dim=0), Sample(make(rng, (3, 4)), dim=-1),
               Sample(make(rng, (2, 3, 4)), dim=1), Sample(make(rng, ()), dim=0)]
        return out + ([Sample(with_zeros(rng), dim=1), Sample(with_zeros(rng), dim=0)]
                      if zeros else [])
    return samples


SAMPLES = {
    "sum": _sum, "mean": _dims(normal), "var": _var, "std": _var, "norm": _norm,
    "amax": _extremum, "amin": _extremum, "argmax": _arg, "argmin": _arg,
    "logsumexp": _logsumexp, "softmax": _softmax, "log_softmax": _softmax, "prod": _prod,
    "cumsum": lambda rng: _scan(normal)(rng) + [Sample(_ints(rng), dim=1)],
    "cumprod": lambda rng: _scan(positive, zeros=True)(rng) + [Sample(_ints(rng), dim=0)],
    "logcumsumexp": _scan(normal),
}


def _max(rng):
    x = distinct(rng, (3, 4))
    return [Sample(x), Sample(x, 1), Sample(x, 0, True), Sample(x, dim=-1),
            Sample(distinct(rng, ()), 0), Sample(distinct(rng, (2, 3, 4)), 2, keepdim=True),
            Sample(x, distinct(rng, (3, 4)) + 0.1, grad=[0, 1]),   # + 0.1: no ties with x
            Sample(x, distinct(rng, (4,)) + 0.1, grad=[0, 1])]


def _var_mean(rng):
    x = normal(rng, (3, 4))
    return [Sample(x), Sample(x, 1), Sample(x, 1, False, True), Sample(x, True),
            Sample(x, dim=0, correction=0), Sample(normal(rng, (2, 3, 4)), (0, 2), keepdim=True)]


def _selection(keep=True):
    def samples(rng):
        x = distinct(rng, (3, 4))
        out = [Sample(x, 1), Sample(x, 0), Sample(distinct(rng, (2, 3, 4)), 1),
               Sample(distinct(rng, ()), 0)]
        return out + ([Sample(x, 1, True)] if keep else [Sample(x)])
    return samples


COMPOSITES = {
    "max": _max, "min": _max, "var_mean": _var_mean, "std_mean": _var_mean,
    "cummax": _scan(distinct), "cummin": _scan(distinct),
    "sort": lambda rng: _selection(keep=False)(rng) + [
        Sample(distinct(rng, (3, 4)), 1, True), Sample(distinct(rng, (3, 4)), descending=True,
                                                       stable=True)],
    "topk": lambda rng: [Sample(distinct(rng, (3, 4)), 2), Sample(distinct(rng, (3, 4)), 3, 0),
                         Sample(distinct(rng, (3, 4)), 4, 1, False),
                         Sample(distinct(rng, (2, 3, 4)), 1, dim=1, largest=False),
                         Sample(distinct(rng, ()), 1)],
    "kthvalue": lambda rng: [
        Sample(distinct(rng, (3, 4)), 2), Sample(distinct(rng, (3, 4)), 3, 0),
        Sample(distinct(rng, (3, 4)), 1, 1, True), Sample(distinct(rng, ()), 1, 0)],
    "median": lambda rng: _selection(keep=True)(rng) + [Sample(distinct(rng, (3, 5)))],
    # the non-exported declared ops
    "max_all": lambda rng: [Sample(distinct(rng, (3, 4))), Sample(distinct(rng, ()))],
    "min_all": lambda rng: [Sample(distinct(rng, (3, 4))), Sample(distinct(rng, ()))],
    "median_all": lambda rng: [Sample(distinct(rng, (3, 5))), Sample(distinct(rng, (4,)))],
    "gather_along": lambda rng: [
        Sample(normal(rng, (3, 4)), np.argsort(rng.random((3, 4)), 1), dim=1, full=True),
        Sample(normal(rng, (3, 4)), rng.integers(0, 3, (1, 4)), dim=0, squeeze=True),
        Sample(normal(rng, ()), np.zeros((), np.int64), dim=0)],
    "scatter_along": lambda rng: [
        Sample(normal(rng, (3, 2)), np.argsort(rng.random((3, 4)), 1)[:, :2], dim=1,
               shape=(3, 4)),
        Sample(normal(rng, (4,)), rng.integers(0, 3, (1, 4)), dim=0, shape=(3, 4),
               squeeze=True)],
}
