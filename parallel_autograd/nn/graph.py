"""Differentiable forms of `nn.functional`'s rules, for `create_graph=True`.

`ops/graph.py` gives each op's rule a twin written with the package's ops; the layers'
fused rules save other values than `(ans, *inputs)`, so theirs are `rule.graph_node(g,
node)` (or `joint.graph(g, node)`), which rebuild the inputs they differentiate through
with `graph_input`. Two kinds:

- Linear and bilinear maps get their adjoint as an op of its own, with fast numpy rules
  that are again the other ops of the family, so any order of derivative runs the fused
  kernels: the pools (`avg_pool2d_backward`, max pooling's scatter), embedding's scatter,
  and conv2d's trio `conv2d` / `conv2d_input_backward` / `conv2d_weight_backward`
  (PyTorch's double backward of convolution: each map's partial adjoints are the others).
- The rest (layer_norm, rms_norm, the softmax losses, attention) are written as the
  formulas of their fast rules with ops on Tensors, recomputing what the node saved from
  the inputs where the derivative needs it (each row's mean and 1/std, the softmax).

Each is checked by `gradgradcheck` in tests/test_higher_order.py (first order equal to
the fast rule, second order to finite differences) and against PyTorch's double backward.

Thread safety: pure functions of their arguments, like the rules.
"""
from __future__ import annotations

import numpy as np

from ..node import graph_input
from ..ops import elementwise as E
from ..ops import linalg as L
from ..ops import reduce as R
from ..ops import shape as S
from ..ops.graph import _Shape, _t, scatter
from ..primitive import primitive, record
from ..tensor import Tensor
from . import functional as F

__all__: list = []


def _swap(x) -> Tensor:
    return S.swapaxes(_t(x), -1, -2)


def _data(x) -> np.ndarray:
    return x.data if isinstance(x, Tensor) else np.asarray(x)


# ---- linear -------------------------------------------------------------------------------
def _linear_inputs(node):
    return graph_input(node, 0, node.saved[0]), graph_input(node, 1, node.saved[1])


def _linear_x(g, node):
    x, w = _linear_inputs(node)
    return S.unsqueeze(g, -1) * w if np.ndim(_data(w)) == 1 else L.matmul(g, w)


def _linear_w(g, node):
    x, w = _linear_inputs(node)
    rows = S.reshape(_t(x), (-1, np.shape(_data(x))[-1]))
    if np.ndim(_data(w)) == 1:
        return L.matmul(S.reshape(g, (-1,)), rows)
    return L.matmul(_swap(S.reshape(g, (-1, np.shape(_data(w))[0]))), rows)


F._linear_vjp_x.graph_node = _linear_x
F._linear_vjp_w.graph_node = _linear_w
F._linear_vjp_b.graph_node = lambda g, node: g  # graph_fit sums it to the bias's shape


# ---- conv2d: the bilinear map B(x, w), and its partial adjoints --------------------------
def _columns(x: np.ndarray, kernel, stride, padding, out_hw) -> np.ndarray:
    """im2col of the whole batch: (C*kh*kw, N, Ho*Wo), as conv2d keeps them."""
    n, c = x.shape[:2]
    p = out_hw[0] * out_hw[1]
    cols = np.empty((c,) + tuple(kernel) + (n, p), dtype=x.dtype)
    taps, flat = F._conv_geometry(x.shape, kernel, stride, padding, out_hw)
    F._im2col(x, cols, padding, taps, flat, out_hw)
    return cols.reshape(-1, n, p)


def _conv(x: np.ndarray, w: np.ndarray, stride, padding, out_hw) -> np.ndarray:
    """B(x, w) on arrays: conv2d's forward kernel."""
    out, _ = F._conv_forward(x, w, stride, padding, out_hw, keep=False)
    return out.reshape(x.shape[0], w.shape[0], *out_hw)


def conv2d_input_backward(g, w, x_shape: tuple, stride: tuple, padding: tuple) -> Tensor:
    """d<g, B(x, w)>/dx: the input gradient of conv2d, as a differentiable op of (g, w)."""
    out = F._conv_vjp_x(_data(g), None, _data(w), None, x_shape, stride, padding)
    return record("conv2d_input_backward", out, (g, w), (_cib_g, _cib_w),
                  saved=(_data(g), _data(w)),
                  kwargs=dict(x_shape=x_shape, stride=stride, padding=padding))


def _cib_g(gg, g, w, x_shape, stride, padding):
    return _conv(gg, w, stride, padding, g.shape[2:])                       # B(gg, w)


def _cib_w(gg, g, w, x_shape, stride, padding):
    cols = _columns(gg, w.shape[2:], stride, padding, g.shape[2:])
    return F._conv_vjp_w(g, cols, w, None, x_shape, stride, padding)       # Bw*(gg, g)


def conv2d_weight_backward(x, g, w_shape: tuple, stride: tuple, padding: tuple,
                           cols=None) -> Tensor:
    """d<g, B(x, w)>/dw: the weight gradient of conv2d, as a differentiable op of (x, g)
    (`cols`: x's columns when the caller has them)."""
    xd, gd = _data(x), _data(g)
    if cols is None:
        cols = _columns(xd, w_shape[2:], stride, padding, gd.shape[2:])
    out = F._conv_vjp_w(gd, cols, _Shape(w_shape, None), None, xd.shape, stride, padding)
    return record("conv2d_weight_backward", out, (x, g), (_cwb_x, _cwb_g), saved=(xd, gd),
                  kwargs=dict(stride=stride, padding=padding))


def _cwb_x(gg, x, g, stride, padding):
    return F._conv_vjp_x(g, None, gg, None, x.shape, stride, padding)      # Bx*(g, gg)


def _cwb_g(gg, x, g, stride, padding):
    return _conv(x, gg, stride, padding, g.shape[2:])                       # B(x, gg)


def _conv_forms():
    kw = lambda node: (node.kwargs["stride"], node.kwargs["padding"])  # noqa: E731
    F._conv_vjp_x.graph_node = lambda g, node: conv2d_input_backward(
        g, graph_input(node, 1, node.saved[1]), node.kwargs["x_shape"], *kw(node))
    F._conv_vjp_w.graph_node = lambda g, node: conv2d_weight_backward(
        graph_input(node, 0, node.saved[2]), g, node.saved[1].shape, *kw(node),
        cols=node.saved[0])
    F._conv_vjp_b.graph_node = lambda g, node: R.sum(g, axis=(0, 2, 3))
    _cib_g.graph_node = lambda gg, node: F.conv2d(
        gg, graph_input(node, 1, node.saved[1]), stride=node.kwargs["stride"],
        padding=node.kwargs["padding"])
    _cib_w.graph_node = lambda gg, node: conv2d_weight_backward(
        gg, graph_input(node, 0, node.saved[0]), node.saved[1].shape, *kw(node))
    _cwb_x.graph_node = lambda gg, node: conv2d_input_backward(
        graph_input(node, 1, node.saved[1]), gg, node.saved[0].shape, *kw(node))
    _cwb_g.graph_node = lambda gg, node: F.conv2d(
        graph_input(node, 0, node.saved[0]), gg, stride=node.kwargs["stride"],
        padding=node.kwargs["padding"])


_conv_forms()


# ---- pooling -------------------------------------------------------------------------------
def _max_pool_x(g, node):
    # a scatter of g to each window's first maximum: linear in g, with a constant index
    index, shape = node.saved[0], node.kwargs["x_shape"]
    flat = scatter(S.reshape(g, (-1,)), index=index.reshape(-1), shape=(int(np.prod(shape)),))
    return S.reshape(flat, shape)


F._max_pool_vjp.graph_node = _max_pool_x


def avg_pool2d_backward(g, divisor, x_shape: tuple, kernel: tuple, stride: tuple,
                        padding: tuple) -> Tensor:
    """avg_pool2d's input gradient as a differentiable op of g; its rule is avg_pool2d
    (with the same divisor): each is the other's adjoint."""
    out = F._avg_pool_vjp(_data(g), divisor, x_shape, kernel, stride, padding)
    return record("avg_pool2d_backward", out, (g,), (_avg_unpool_rule,), saved=(divisor,),
                  kwargs=dict(kernel=kernel, stride=stride, padding=padding,
                              out_hw=tuple(_data(g).shape[2:])))


def _avg_unpool_rule(gg, divisor, kernel, stride, padding, out_hw):
    return F._avg_pool_forward(gg, divisor, kernel, stride, padding, out_hw)


def _avg_pool(x, divisor, kernel, stride, padding, out_hw) -> Tensor:
    """avg_pool2d with a given divisor (the node avg_pool2d records)."""
    out = F._avg_pool_forward(_data(x), divisor, kernel, stride, padding, out_hw)
    return record("avg_pool2d", out, (x,), (F._avg_pool_vjp,), saved=(divisor,),
                  kwargs=dict(x_shape=_data(x).shape, kernel=kernel, stride=stride,
                              padding=padding))


F._avg_pool_vjp.graph_node = lambda g, node: avg_pool2d_backward(
    g, node.saved[0], **node.kwargs)
_avg_unpool_rule.graph_node = lambda gg, node: _avg_pool(gg, node.saved[0], **node.kwargs)


# ---- normalization -------------------------------------------------------------------------
def _rows_of_input(node) -> Tensor:
    """The normalized input as (rows, D), routed to the input's node."""
    x2, shape = node.saved[0], node.kwargs["shape"]
    return S.reshape(_t(graph_input(node, 0, x2.reshape(shape))), x2.shape)


def _weight(node, w) -> Tensor | np.ndarray:
    """The weight (saved flat as (D,)) routed to its node (input 1)."""
    ns = node.kwargs["ns"]
    return S.reshape(_t(graph_input(node, 1, w.reshape(ns))), w.shape)


def _layer_norm_parts(g, node) -> tuple:
    """(g as rows, x normalized (xh), 1/std, weight or None) with ops, from the input."""
    x = _rows_of_input(node)
    xc = x - R.mean(x, axis=1, keepdims=True)
    r = E.pow(R.mean(xc * xc, axis=1, keepdims=True) + node.kwargs["eps"], -0.5)
    w = node.saved[3]
    return S.reshape(g, x.shape), xc * r, r, None if w is None else _weight(node, w)


def _layer_norm_x(g, node):
    g2, xh, r, w = _layer_norm_parts(g, node)
    h = g2 if w is None else g2 * w
    d = r * (h - R.mean(h, axis=1, keepdims=True) - xh * R.mean(h * xh, axis=1, keepdims=True))
    return S.reshape(d, node.kwargs["shape"])


def _layer_norm_w(g, node):
    g2, xh, _, _ = _layer_norm_parts(g, node)
    return S.reshape(R.sum(g2 * xh, axis=0), node.kwargs["ns"])


def _norm_b(g, node):
    return S.reshape(R.sum(S.reshape(g, node.saved[0].shape), axis=0), node.kwargs["ns"])


def _rms_parts(g, node) -> tuple:
    x = _rows_of_input(node)
    r = E.pow(R.mean(x * x, axis=1, keepdims=True) + node.kwargs["eps"], -0.5)
    w = node.saved[2]
    return S.reshape(g, x.shape), x, r, None if w is None else _weight(node, w)


def _rms_norm_x(g, node):
    g2, x, r, w = _rms_parts(g, node)
    h = g2 if w is None else g2 * w
    d = r * h - x * (r * r * r) * R.mean(h * x, axis=1, keepdims=True)
    return S.reshape(d, node.kwargs["shape"])


def _rms_norm_w(g, node):
    g2, x, r, _ = _rms_parts(g, node)
    return S.reshape(R.sum(g2 * (x * r), axis=0), node.kwargs["ns"])


F._layer_norm_vjp_x.graph_node = _layer_norm_x
F._layer_norm_vjp_w.graph_node = _layer_norm_w
F._norm_vjp_b.graph_node = _norm_b
F._rms_norm_vjp_x.graph_node = _rms_norm_x
F._rms_norm_vjp_w.graph_node = _rms_norm_w


# ---- embedding and dropout -------------------------------------------------------------------
def _embedding_w(g, node):
    # the rows of g added at their indices (not at padding_idx): scatter, linear in g
    rows, pad = node.saved[0].reshape(-1), node.kwargs["padding_idx"]
    n = node.kwargs["num_embeddings"]
    d = g.shape[-1]
    g2 = S.reshape(g, (-1, d))
    if pad is not None:
        kept = np.flatnonzero(rows != pad)
        g2, rows = S.getitem(g2, kept), rows[kept]
    return scatter(g2, index=rows, shape=(n, d))


F._embedding_vjp.graph_node = _embedding_w
F._dropout_vjp.graph_node = lambda g, node: g * (node.saved[0] * node.kwargs["scale"])


# ---- losses --------------------------------------------------------------------------------
def _nll_x(g, node):
    # G (A p - T) for logits (p = softmax(x)), -G T for log-probabilities, where G is g
    # per row (over the mean's denominator) and A, T the constants of `_nll_vjp`.
    x, _, safe, scale, valid, w, denom = node.saved
    (n, c), s = node.kwargs["shape"], node.kwargs["smoothing"]
    G = g if denom is None else g / denom
    if G.ndim == 1:
        G = S.reshape(G, (n, 1))
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


# ---- attention -----------------------------------------------------------------------------
def _softmax_rule(g, ans, s, p):
    return ans * (g - (g * ans).sum(axis=-1, keepdims=True))


# softmax(s) whose value the forward already has (p, masked rows and all): its rule is
# softmax's at ans = p (0 where masked, so a masked score gets no gradient at any order)
_softmax_of = primitive("softmax", lambda s, p: p, _softmax_rule)
_softmax_rule.graph = lambda g, ans, s, p: ans * (g - R.sum(g * ans, axis=-1, keepdims=True))


def _sdpa(g, node):
    q, k, v, p, keep, scale, dscale, need, added = node.saved
    qt, kt, vt = (graph_input(node, i, a) for i, a in enumerate((q, k, v)))
    s = L.matmul(qt, _swap(kt)) * scale
    if added is not None:
        s = s + graph_input(node, 3, added)
    pt = _softmax_of(s, p)
    drop = None if keep is None else keep * dscale
    dv = L.matmul(_swap(pt if drop is None else pt * drop), g)
    dp = L.matmul(g, _swap(vt))
    if drop is not None:
        dp = dp * drop
    ds = pt * (dp - R.sum(dp * pt, axis=-1, keepdims=True))
    dq = L.matmul(ds, kt) * scale
    dk = L.matmul(_swap(ds), qt) * scale
    return (dq, dk, dv) + ((ds,) if added is not None else ())


F._sdpa_vjp.graph = _sdpa
