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
from samples_nn_losses import INTERNAL as _LOSSES


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


def _indices(rng, shape=(3, 4), n=5, avoid=None):
    """Indices into n rows, each row used at least once where the shape allows it (a row
    no index uses has gradient 0 either way; repeats accumulate). `avoid`: a padding
    row, which gets no gradient although the lookup reads it (PyTorch's padding_idx), so
    that finite differences see it: not used here."""
    rows = np.array([r for r in range(n) if r != avoid % n]) if avoid is not None \
        else np.arange(n)
    idx = rng.choice(rows, shape)
    k = min(idx.size, rows.size)
    idx.reshape(-1)[:k] = rng.permutation(rows)[:k]
    return idx


def _embedding(rng):
    w = normal(rng, (5, 3))
    return [Sample(_indices(rng), w),
            Sample(_indices(rng, (2, 3, 4), avoid=2), w, padding_idx=2),
            Sample(_indices(rng, (7,), avoid=-1), w, padding_idx=-1),
            # (scale_grad_by_freq is not a gradient: finite differences see it only where
            # each index occurs once; tests/test_nn_declared.py checks it against torch)
            Sample(rng.permutation(np.arange(1, 5)), w, scale_grad_by_freq=True, padding_idx=-5),
            Sample(_indices(rng, ()), w)]


def _torch_embedding(rng):
    w = normal(rng, (5, 3))
    return [Sample(w, _indices(rng)), Sample(w, _indices(rng, (2, 4), avoid=3), padding_idx=3),
            Sample(w, rng.permutation(5), scale_grad_by_freq=True)]


def _embedding_bag(rng):
    """Bags of every kind: fixed-length (2-D input), offsets with an empty bag, the
    three modes, per_sample_weights (a differentiable input of its own), padding_idx
    (left out of the bags), include_last_offset. 'max' with distinct values per column
    (finite differences need a unique maximum)."""
    w = normal(rng, (6, 3))
    idx = _indices(rng, (7,), n=6)
    off = np.array([0, 0, 2, 5])

    def with_psw(a):
        return [a[0], a[1], a[2], None, 2, False, "sum", False, a[3]]

    return [Sample(_indices(rng, (3, 4), n=6), w),
            Sample(_indices(rng, (2, 3), n=6), w, mode="sum"),
            Sample(_indices(rng, (2, 3), n=6), w, mode="max"),
            Sample(idx, w, off, mode="mean"),
            Sample(idx, w, off, mode="max"),
            Sample(idx, w, off, normal(rng, (7,)), prep=with_psw),
            Sample(_indices(rng, (7,), n=6, avoid=2), w, off, padding_idx=2),
            Sample(np.array([1, 2, 3, 2, 4, 0]), w, np.array([0, 2, 2, 6]), mode="sum",
                   include_last_offset=True)]


def _dropout(shape=(3, 4), **extra):
    """Deterministic cases only (torch draws other masks): p = 1 (zeros), not training
    (the input), p = 0."""
    def make(rng):
        return [Sample(normal(rng, shape), p=1.0, training=True, **extra),
                Sample(normal(rng, shape), training=False),
                Sample(normal(rng, shape), p=0.0, training=True),
                Sample(normal(rng, shape), 1.0, True)]
    return make


def _trailing(ns):
    """layer_norm's / rms_norm's (input, normalized_shape, weight, bias...) from the
    sample's tensors (input, then the parameters given)."""
    return lambda a: [a[0], ns, *a[1:]]


def _layer_norm(rng):
    return [Sample(normal(rng, (2, 3, 4)), normal(rng, (4,)), normal(rng, (4,)),
                   prep=_trailing((4,))),
            Sample(normal(rng, (2, 3, 4)), normal(rng, (3, 4)), prep=_trailing((3, 4)),
                   eps=1e-3),
            Sample(normal(rng, (3, 5)), normalized_shape=(5,))]


def _rms_norm(rng):
    return [Sample(normal(rng, (2, 3, 4)), normal(rng, (4,)), prep=_trailing((4,))),
            Sample(normal(rng, (2, 3, 4)), normal(rng, (3, 4)), prep=_trailing((3, 4)),
                   eps=1e-3),
            Sample(normal(rng, (3, 5)), normalized_shape=(5,))]


def _batch_norm(rng):
    c = 3
    def affine(a):          # noqa: E306  (input, weight, bias) -> batch_norm's order
        return [a[0], None, None, *a[1:]]
    return [Sample(normal(rng, (4, c, 5)), normal(rng, (c,)), normal(rng, (c,)),
                   prep=affine, training=True),
            Sample(normal(rng, (5, c)), prep=affine, training=True, eps=1e-3),
            Sample(normal(rng, (2, c, 2, 3)), normal(rng, (c,)), rng.uniform(0.5, 2, c),
                   normal(rng, (c,)), normal(rng, (c,)), grad=[0, 3, 4])]


def _instance_norm(rng):
    c = 3
    return [Sample(normal(rng, (2, c, 5)), prep=lambda a: [a[0], None, None, *a[1:]]),
            Sample(normal(rng, (2, c, 2, 3)), normal(rng, (c,)), normal(rng, (c,)),
                   prep=lambda a: [a[0], None, None, *a[1:]], eps=1e-3)]


def _group_norm(rng):
    return [Sample(normal(rng, (2, 6, 3)), normal(rng, (6,)), normal(rng, (6,)),
                   prep=lambda a: [a[0], 3, *a[1:]]),
            Sample(normal(rng, (3, 4, 2, 2)), num_groups=2, eps=1e-3)]


def _local_response_norm(rng):
    return [Sample(normal(rng, (2, 5, 3)), size=3),
            Sample(normal(rng, (2, 4, 2, 2)), size=2, alpha=0.5, beta=0.6, k=2.0)]


def _sdpa(rng):
    mask = rng.random((4, 6)) > 0.4
    mask[:, 0] = True
    dead = mask.copy()
    dead[1] = False                     # a query that may attend nothing: zeros
    return [Sample(normal(rng, (2, 3, 4, 5)), normal(rng, (2, 3, 6, 5)),
                   normal(rng, (2, 3, 6, 2))),
            Sample(normal(rng, (2, 4, 5)), normal(rng, (2, 4, 5)), normal(rng, (2, 4, 3)),
                   is_causal=True, scale=0.3),
            Sample(normal(rng, (2, 4, 5)), normal(rng, (2, 6, 5)), normal(rng, (2, 6, 3)),
                   normal(rng, (4, 6))),                         # a float mask: its gradient
            Sample(normal(rng, (2, 4, 5)), normal(rng, (2, 6, 5)), normal(rng, (2, 6, 3)), dead),
            Sample(normal(rng, (1, 4, 3, 2)), normal(rng, (1, 2, 5, 2)),
                   normal(rng, (1, 1, 5, 3)), enable_gqa=True)]


SAMPLES = {
    "scaled_dot_product_attention": _sdpa,
    "layer_norm": _layer_norm, "rms_norm": _rms_norm, "batch_norm": _batch_norm,
    "instance_norm": _instance_norm, "group_norm": _group_norm,
    "local_response_norm": _local_response_norm,
    "linear": _linear, "bilinear": _bilinear,
    "torch.nn.functional.embedding": _embedding, "torch.embedding": _torch_embedding,
    "embedding_bag": _embedding_bag,
    "dropout": _dropout(), "alpha_dropout": _dropout((2, 3)),
    "feature_alpha_dropout": _dropout((2, 3, 4)), "dropout1d": _dropout((2, 3, 4)),
    "dropout2d": _dropout((2, 3, 4, 2)), "dropout3d": _dropout((3, 2, 2, 2)),
}


def _apply_mask(rng):
    x = normal(rng, (3, 4))
    keep = rng.random((3, 4)) > 0.4
    return [Sample(x, mask=keep, scale=2.5),
            Sample(normal(rng, (2, 3, 2)), mask=rng.random((2, 3, 1)) > 0.5, scale=0.5,
                   offset=normal(rng, (2, 3, 1))),
            Sample(x, mask=np.zeros((3, 4), bool), scale=0.0)]


def _embedding_backward(rng):
    return [Sample(normal(rng, (3, 4, 2)), input=_indices(rng), num_weights=5),
            Sample(normal(rng, (6, 2)), input=_indices(rng, (6,), 4), num_weights=4,
                   padding_idx=1, scale_grad_by_freq=True)]  # (linear in g: padding too)


def _batch_stats(a):
    """normalize_channels' (input, weight, bias, mean, rstd) in training: the statistics
    the input's own, recomputed from its values (its derivative goes through them)."""
    x = np.asarray(a[0].numpy())
    x3 = x.reshape(x.shape[0], x.shape[1], -1)
    mean = x3.mean(axis=(0, 2))
    params = a[1:] if len(a) > 1 else [None, None]    # (None: gradcheck's arguments are
    return [a[0], *params, mean, 1 / np.sqrt(x3.var(axis=(0, 2)) + 1e-5)]  # tensors)


def _normalize_channels(rng):
    c = 3
    return [Sample(normal(rng, (4, c, 5)), normal(rng, (c,)), normal(rng, (c,)),
                   prep=_batch_stats, training=True, eps=1e-5),
            Sample(normal(rng, (5, c)), prep=_batch_stats, training=True, eps=1e-5),
            Sample(normal(rng, (2, c, 2, 2)), normal(rng, (c,)), normal(rng, (c,)),
                   normal(rng, (c,)), rng.uniform(0.5, 2, c), grad=[0, 1, 2],
                   training=False, eps=1e-5)]


def _attention(rng):
    keep = rng.random((2, 4, 6)) > 0.3
    return [Sample(normal(rng, (2, 4, 5)), normal(rng, (2, 6, 5)), normal(rng, (2, 6, 3)),
                   keep=keep, dropout_scale=1 / 0.7, scale=0.4),
            Sample(normal(rng, (2, 4, 5)), normal(rng, (2, 6, 5)), normal(rng, (2, 6, 3)),
                   normal(rng, (4, 6)), keep=keep, dropout_scale=2.0),
            Sample(normal(rng, (1, 4, 3, 2)), normal(rng, (1, 2, 5, 2)),
                   normal(rng, (1, 1, 5, 3)), enable_gqa=True, is_causal=True)]


def _mode(mode, bias):
    """recurrence's arguments (mode, xp, h0, c0, w_hh, b_hh): c0 and b_hh None where the
    sample has none (gradcheck makes every argument a tensor, None too)."""
    return lambda a: [mode, a[0], a[1], a[2] if mode == "LSTM" else None, a[3],
                      a[4] if bias else None]


def _recurrence_sample(rng, mode, n=2, bf=False, bias=True, steps=3, hidden=2, **kw):
    g, h = {"LSTM": 4, "GRU": 3}.get(mode, 1), hidden
    c0 = normal(rng, (n, h)) if mode == "LSTM" else None
    b = normal(rng, (g * h,), 0.5) if bias else None
    return Sample(normal(rng, (n, steps, g * h) if bf else (steps, n, g * h)),
                  normal(rng, (n, h)), c0, normal(rng, (g * h, h), 0.7), b,
                  prep=_mode(mode, bias), batch_first=bf, **kw)


MODES = ("LSTM", "GRU", "RNN_TANH", "RNN_RELU")


def _recurrence(rng):
    """Each mode on packed sequences in reverse (batch_sizes: the last step has one
    sequence left, the first-processed step all three), small enough for the fast lane
    (gradgradcheck runs the formula's T steps per perturbed element); every case of every
    mode: `recurrence_cases` (tests/test_nn_rnn.py, slow)."""
    return [_recurrence_sample(rng, m, n=3, hidden=1, reverse=True,
                               batch_sizes=np.array([3, 2, 1])) for m in MODES]


def recurrence_cases(rng):
    """Every mode: time-major and batch_first, reverse, without b_hh, packed sequences
    (batch_sizes, forwards and in reverse), and some inputs without gradient (the kernel
    skips what is not asked: the last step's GEMM for h0, W_hh's). T = 3 steps, H = 2."""
    out = []
    for m in MODES:
        out += [_recurrence_sample(rng, m), _recurrence_sample(rng, m, bf=True, reverse=True),
                _recurrence_sample(rng, m, bias=False),
                _recurrence_sample(rng, m, n=3, batch_sizes=np.array([3, 2, 1])),
                _recurrence_sample(rng, m, n=3, reverse=True, batch_sizes=np.array([3, 3, 1])),
                _recurrence_sample(rng, m, grad=[0]),              # frozen weights, states
                _recurrence_sample(rng, m, grad=[1, 4])]
    return out


def _activation_of(rng):
    """activation_of(z, a, kind): its value is `a`, its derivative the activation's at a,
    so finite differences see it only where a = kind(z): `prep` computes a from z (a
    parameter, not an input: its history is not followed). relu's z away from 0."""
    z = normal(rng, (3, 4))
    z = np.where(np.abs(z) < 0.2, 0.5, z)
    return [Sample(z, prep=lambda a, k=kind: [a[0], getattr(a[0], k)()], kind=kind)
            for kind in ("sigmoid", "tanh", "relu")]


INTERNAL = {"scaled_dot_product_attention": _attention, "batch_norm": _normalize_channels,
            "dropout": _apply_mask, "embedding_backward": _embedding_backward,
            "recurrence": _recurrence, "activation_of": _activation_of,
            **_LOSSES}  # the losses' fused nodes (tests/samples_nn_losses.py)
