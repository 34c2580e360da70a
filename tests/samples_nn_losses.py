"""Samples of the losses (nn/_losses.py; tests/op_samples.py says how samples work).

`SAMPLES` holds the exported losses (composites: PyTorch's values, gradients and dtypes,
gradcheck and gradgradcheck through them); `INTERNAL` the fused nodes behind them
(nll_loss's and cross_entropy's rows, the pointwise losses' nodes), which
tests/test_nn_declared.py runs through the registry's checks (kernel == formula, both
engines bitwise, gradcheck, gradgradcheck). Inputs stay away from the kinks (|x - y| = 0,
|x - y| = delta, the margins) so that finite differences see one piece.
"""
from __future__ import annotations

import numpy as np
from op_samples import Sample


def normal(rng, shape, scale=1.0):
    return rng.standard_normal(shape) * scale


def _apart(rng, shape, lo=0.2, hi=0.8):
    """Offsets of size in [lo, hi] with random signs: |x - y| away from 0 and the deltas."""
    return rng.choice([-1.0, 1.0], shape) * rng.uniform(lo, hi, shape)


def _classes(rng, n=4, c=5):
    return rng.permutation(np.arange(n) % c)


def _nll_rows(rng):
    w = rng.uniform(0.5, 2.0, 5)
    t = _classes(rng)
    return [Sample(normal(rng, (4, 5)), t),
            Sample(normal(rng, (4, 5)), t, w, reduction="sum"),
            Sample(normal(rng, (4, 5)), np.array([1, -100, 3, 0]), w, reduction="mean"),
            Sample(normal(rng, (4, 5)), t, ignore_index=t[0], reduction="none")]


def _cross_entropy_rows(rng):
    w = rng.uniform(0.5, 2.0, 5)
    t = _classes(rng)
    return _nll_rows(rng) + [
        Sample(normal(rng, (4, 5)), t, w, ignore_index=t[1], label_smoothing=0.2),
        Sample(normal(rng, (4, 5)), t, label_smoothing=0.1, reduction="none")]


def _pair(rng, shape=(3, 4), other=None):
    x = normal(rng, shape)
    return x, x - _apart(rng, shape) if other is None else other


def _l1_node(rng):
    x, y = _pair(rng)
    return [Sample(x, y, reduction="mean", denom=12), Sample(x, y, reduction="none"),
            Sample(x[0], y[0], reduction="sum")]


def _huber_node(rng):
    x = normal(rng, (3, 4))
    d = rng.choice([-1.0, 1.0], (3, 4)) * rng.choice([0.3, 1.6], (3, 4))
    return [Sample(x, x - d, reduction="mean", denom=12, delta=1.0, scale=1.0),
            Sample(x, x - d, reduction="none", delta=0.8, scale=1 / 0.8)]


def _probabilities(rng, shape=(3, 4)):
    return rng.uniform(0.1, 0.9, shape), rng.uniform(0.0, 1.0, shape)


def _bce_node(rng):
    x, y = _probabilities(rng)
    return [Sample(x, y, reduction="mean", denom=12),
            Sample(x, y, rng.uniform(0.5, 2.0, 4), reduction="none")]


def _bcel_node(rng):
    x, y = normal(rng, (3, 4)), rng.uniform(0.0, 1.0, (3, 4))
    return [Sample(x, y, reduction="sum"),
            Sample(x, y, rng.uniform(0.5, 2.0, 4), rng.uniform(0.5, 3.0, 4), reduction="mean",
                   denom=12)]


def _kl_node(rng):
    x, y = normal(rng, (3, 4)), rng.uniform(0.1, 1.0, (3, 4))
    return [Sample(x, y, reduction="mean", denom=12),
            Sample(x, np.log(y), reduction="none", log_target=True)]


INTERNAL = {"nll_loss": _nll_rows, "cross_entropy": _cross_entropy_rows,
            "l1_loss": _l1_node, "huber_loss": _huber_node, "binary_cross_entropy": _bce_node,
            "binary_cross_entropy_with_logits": _bcel_node, "kl_div": _kl_node}


# ---- the exported losses: PyTorch's own -------------------------------------------------------
def _cross_entropy(rng):
    t = _classes(rng)
    return [Sample(normal(rng, (4, 5)), t),
            Sample(normal(rng, (4, 5)), t, rng.uniform(0.5, 2.0, 5), label_smoothing=0.2,
                   ignore_index=int(t[2]), grad=[0]),
            Sample(normal(rng, (2, 5, 3)), rng.integers(0, 5, (2, 3)), reduction="none"),
            Sample(normal(rng, (5,)), np.array(3), reduction="sum"),
            Sample(normal(rng, (3, 5)), rng.dirichlet(np.ones(5), 3), grad=[0])]


def _nll_loss(rng):
    t = _classes(rng)
    return [Sample(normal(rng, (4, 5)), t),
            Sample(normal(rng, (4, 5)), t, rng.uniform(0.5, 2.0, 5), reduction="sum", grad=[0]),
            Sample(normal(rng, (2, 5, 3)), rng.integers(0, 5, (2, 3)), reduction="none")]


def _regression(rng):
    x, y = _pair(rng)
    return [Sample(x, y), Sample(x, y, reduction="sum"), Sample(x, y[0], reduction="none")]


def _huber(rng):
    x = normal(rng, (3, 4))
    d = rng.choice([-1.0, 1.0], (3, 4)) * rng.choice([0.3, 1.6], (3, 4))
    return [Sample(x, x - d), Sample(x, x - d, reduction="sum", delta=0.8)]


def _smooth_l1(rng):
    x = normal(rng, (3, 4))
    d = rng.choice([-1.0, 1.0], (3, 4)) * rng.choice([0.3, 1.6], (3, 4))
    return [Sample(x, x - d), Sample(x, x - d, reduction="none", beta=0.8)]


def _bce(rng):
    x, y = _probabilities(rng)
    return [Sample(x, y, grad=[0]), Sample(x, y, rng.uniform(0.5, 2.0, 4), reduction="sum",
                                           grad=[0])]


def _bcel(rng):
    x, y = normal(rng, (3, 4)), rng.uniform(0.0, 1.0, (3, 4))
    # (pos_weight, a keyword argument, stays an array here, which PyTorch refuses: the
    # node's samples in INTERNAL check it)
    return [Sample(x, y), Sample(x, y, rng.uniform(0.5, 2.0, 4), reduction="sum", grad=[0, 1])]


def _kl(rng):
    x, y = normal(rng, (3, 4)), rng.uniform(0.1, 1.0, (3, 4))
    return [Sample(x, y), Sample(x, y, reduction="batchmean"),
            Sample(x, np.log(y), reduction="sum", log_target=True)]


def _cosine(rng):
    t = np.array([1.0, -1.0, 1.0, -1.0])
    a = normal(rng, (4, 3))
    return [Sample(a, a + normal(rng, (4, 3), 0.3), t, grad=[0, 1]),
            Sample(a, -a + normal(rng, (4, 3), 0.3), t, margin=-0.5, grad=[0, 1])]


def _margin_ranking(rng):
    a = normal(rng, (5,))
    return [Sample(a, a - _apart(rng, (5,), 0.3, 1.0), np.array([1.0, -1, 1, -1, 1]),
                   margin=0.1, grad=[0, 1])]


def _triplet(rng):
    a = normal(rng, (4, 3))
    return [Sample(a, a + normal(rng, (4, 3), 0.3), a + normal(rng, (4, 3), 0.5), margin=2.0),
            Sample(a, a + normal(rng, (4, 3), 0.3), a + normal(rng, (4, 3), 0.5), margin=2.0,
                   p=1.0, swap=True)]


SAMPLES = {"cross_entropy": _cross_entropy, "nll_loss": _nll_loss, "mse_loss": _regression,
           "l1_loss": _regression, "huber_loss": _huber, "smooth_l1_loss": _smooth_l1,
           "binary_cross_entropy": _bce, "binary_cross_entropy_with_logits": _bcel,
           "kl_div": _kl, "cosine_embedding_loss": _cosine,
           "margin_ranking_loss": _margin_ranking, "triplet_margin_loss": _triplet}
