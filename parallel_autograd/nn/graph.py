"""Differentiable forms of `nn.functional`'s rules, for `create_graph=True`.

`ops/graph.py` gives each op's rule a twin written with the package's ops; the layers'
fused rules save other values than `(ans, *inputs)`, so theirs are `rule.graph_node(g,
node)` (or `joint.graph(g, node)`), which rebuild the inputs they differentiate through
with `graph_input`. Two kinds:

- Linear maps get their adjoint as an op of its own, with fast numpy rules that are
  again the other ops of the family, so any order of derivative runs the fused kernels.
  (The convolutions, pools, resampling and padding are declared ops whose formulas are
  written where they are: nn/_conv.py, nn/_pool.py, ...)
- The rest (the softmax losses) are written as the
  formulas of their fast rules with ops on Tensors, recomputing what the node saved from
  the inputs where the derivative needs it (the softmax). The declared ops (linear,
  embedding, dropout, the norms, attention: nn/_linear.py, ...) carry their formulas
  themselves.

Each is checked by `gradgradcheck` in tests/test_higher_order.py (first order equal to
the fast rule, second order to finite differences) and against PyTorch's double backward.

Thread safety: pure functions of their arguments, like the rules.
"""
from __future__ import annotations

import numpy as np

from ..ops.forms import graph_input
from ..ops import elementwise as E
from ..ops import reduce as R
from ..ops import shape as S
from . import functional as F

__all__: list = []


# ---- losses --------------------------------------------------------------------------------
def _nll_x(g, node):
    # G (A p - T) for logits (p = softmax(x)), -G T for log-probabilities, where G is g
    # per row (over the mean's denominator) and A, T the constants of `_nll_vjp`.
    x, _, safe, scale, valid, w, denom = node.saved
    (n, c), s = node.kwargs["shape"], node.kwargs["smoothing"]
    with np.errstate(divide="ignore", invalid="ignore"):
        G = g if denom is None else g / denom
    G = S.reshape(E.where(valid, G, 0.0), (n, 1))           # ignored rows: 0 (the rule's)
    target = np.zeros((n, c), dtype=scale.dtype)
    target[np.arange(n), safe] = scale * (1 - s)
    if x is None:
        return -(G * target)
    if s:
        target += (valid * (s / c))[:, None] * (1.0 if w is None else w)
    wsum = c if w is None else w.sum()
    a = scale * (1 - s) + valid * (s * wsum / c)
    p = R.softmax(graph_input(node, 0, x), axis=1)
    return G * (p * a[:, None] - target)


F._nll_vjp.graph_node = _nll_x
