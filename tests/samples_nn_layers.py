"""Samples of the non-spatial layers of nn.functional (nn/_linear.py, _embedding.py,
_dropout.py, _norms.py, _losses.py, _attention.py, _recurrent.py; tests/op_samples.py says
how samples work). Arguments that are not tensors are keywords, or are put in place by
`prep` (gradcheck makes every positional argument a tensor): `layer_norm(x, (4,), w, b)` is
`Sample(x, w, b, prep=...)`, so that its weight and bias are checked too.

`INTERNAL` holds samples of the declared ops these families do not export (the fused nodes
behind composites: dropout's mask, batch_norm's normalization, the recurrence ...), which
tests/test_nn_declared.py runs through the registry's checks.
"""
from __future__ import annotations

import numpy as np
from op_samples import Sample


def normal(rng, shape, scale=1.0):
    return rng.standard_normal(shape) * scale


def _linear(rng):
    return [Sample(normal(rng, (3, 4)), normal(rng, (5, 4)), normal(rng, (5,))),
            Sample(normal(rng, (2, 3, 4)), normal(rng, (5, 4))),
            Sample(normal(rng, (4,)), normal(rng, (5, 4)), normal(rng, (5,))),
            Sample(normal(rng, (3, 4)), normal(rng, (5, 4)), normal(rng, (3, 1))),
            Sample(normal(rng, (3, 4)), normal(rng, (1, 4)), normal(rng, ()))]


def _bilinear(rng):
    return [Sample(normal(rng, (3, 4)), normal(rng, (3, 2)), normal(rng, (5, 4, 2)),
                   normal(rng, (5,))),
            Sample(normal(rng, (2, 3, 4)), normal(rng, (2, 3, 2)), normal(rng, (1, 4, 2)))]


SAMPLES = {
    "linear": _linear, "bilinear": _bilinear,
}

INTERNAL: dict = {}
