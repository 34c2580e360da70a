"""The losses of `nn.functional` (PyTorch's names, signatures, defaults and semantics),
each declared once: the exported losses are composites (`composite`), over the fused nodes
declared here with `defop` (a formula, written with ops, and the fused kernel it pays to
keep at first order; tests/test_nn_declared.py checks kernel == formula).

- nll_loss and cross_entropy: for every input rank PyTorch takes, reshaped to (N, C) rows
  for one fused node each (`nll_loss_rows`, `cross_entropy_rows`): the forward keeps each
  row's logsumexp, not the log-probabilities; cross_entropy's kernel makes the gradient in
  3 passes (the formula, softmax and products, is for create_graph). nll_loss's node keeps
  neither its input nor its output (its gradient reads their shapes only).
- Pointwise losses - l1_loss, smooth_l1_loss / huber_loss, binary_cross_entropy,
  binary_cross_entropy_with_logits, kl_div - are one node each (`fused_*`, inputs (input,
  target), the weights constant parameters, as in PyTorch). The forward evaluates one
  fused kernel per chunk of 32k elements (`ops._common.fused`'s chunks) and, for
  'mean'/'sum', adds each chunk up at once, so a reduced loss allocates nothing full-size;
  with 'none' the loss is the only full-size array. Each kernel is one fused pass a chunk
  (the gradient it returns is its only full-size allocation, chunk-sized scratch beside
  it); the comment of each counts its passes over a chunk. Input and target broadcast
  against each other where PyTorch lets them (not for the two cross-entropies), and the
  target gets a gradient wherever PyTorch gives one.
- mse_loss, cosine_embedding_loss, margin_ranking_loss, triplet_margin_loss, soft-target
  cross_entropy, and the weighted l1_loss and huber_loss (`weight=`, PyTorch 2.x) are
  compositions of ops (PyTorch's own formulas): no rule of their own.

Not supported: the deprecated `size_average` / `reduce` arguments (use `reduction`);
arguments PyTorch lists after them are keyword-only here, so a stray positional value
cannot be taken for the wrong one.

Thread safety: pure functions of their arguments, like every op.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..grad_mode import is_grad_enabled
from ..ops._common import default_float
from ..ops import pointwise as E
from ..ops.activations import sigmoid
from ..ops.reduce import softmax
from ..ops import reduce as R
from ..ops import shape as S
from ..ops._common import BLOCK, empty, fused, raw, row_blocks, zeros
from ..ops.forms import cast, depends_on
from ..primitive import Saved, composite, defop
from ..tensor import Tensor

__all__ = [
    "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "kl_div", "nll_loss", "cross_entropy", "mse_loss",
    "cosine_embedding_loss", "margin_ranking_loss", "triplet_margin_loss",
]

_REDUCTIONS = ("mean", "sum", "none")
_FUNCTIONAL = "torch.nn.functional"


def _raw(x):
    return x._data if isinstance(x, Tensor) else np.asarray(x)


def _check_reduction(name: str, reduction, allowed=_REDUCTIONS) -> None:
    if not isinstance(reduction, str) or reduction not in allowed:
        raise ValueError(f"{name}: reduction must be one of "
                         f"{', '.join(repr(a) for a in allowed)}, got {reduction!r}")


def _reduce(name, loss, reduction):
    """`loss` reduced as `reduction` says ('none', 'sum', 'mean'), with ops."""
    if reduction == "none":
        return loss
    if reduction == "sum":
        return R.sum(loss)
    if reduction == "mean":
        return R.mean(loss)
    raise ValueError(f"{name}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _broadcast(name: str, *arrays) -> tuple:
    """The broadcast shape of the arrays (None skipped), ValueError naming `name`."""
    try:
        return np.broadcast_shapes(*(a.shape for a in arrays if a is not None))
    except ValueError:
        shapes = " and ".join(str(a.shape) for a in arrays if a is not None)
        raise ValueError(f"{name}: shapes {shapes} do not broadcast together") from None


def _float_dtype(*arrays) -> np.dtype:
    dt = np.result_type(*(a for a in arrays if a is not None))
    return dt if dt.kind == "f" else default_float()


def _check_no_grad(name: str, what: str, t) -> None:
    # PyTorch: "the function is not differentiable with respect to argument 'weight'"
    if isinstance(t, Tensor) and t.requires_grad and is_grad_enabled():
        raise RuntimeError(f"{name}: {what} cannot require grad (the loss is not "
                           f"differentiable with respect to it, as in PyTorch); detach it")


# ---- mse_loss: a composite -------------------------------------------------------------------
@composite(dtypes="floating", module=_FUNCTIONAL)
def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """Mean squared error; input and target broadcast against each other."""
    try:
        np.broadcast_shapes(np.shape(_raw(input)), np.shape(_raw(target)))
    except ValueError as e:
        raise ValueError(f"mse_loss: {e}") from e
    d = input - target
    return _reduce("mse_loss", d * d, reduction)


# ---- the pointwise machinery ------------------------------------------------------------
def _like(shape, dtype) -> np.ndarray:
    """An array of `shape` and `dtype` that owns no memory (what `fused` sizes from)."""
    return np.broadcast_to(np.empty((), dtype), shape)


def _chunked_sum(kernel, shape, dtype, operands, scratch: int) -> float:
    """The sum of `kernel`'s elementwise values over the broadcast `shape`, evaluated
    per chunk of `BLOCK` elements into chunk-sized buffers (numpy's buffered iterator
    broadcasts the operands): no full-size array. Chunk sums are added in order."""
    if math.prod(shape) <= BLOCK:
        return float(fused(kernel, _like(shape, dtype), operands,
                           (dtype,) * scratch).sum())
    where = [i for i, a in enumerate(operands) if type(a) is np.ndarray]
    it = np.nditer([operands[i] for i in where], flags=["external_loop", "buffered"],
                   op_flags=[["readonly"]] * len(where), buffersize=BLOCK)
    out = empty(BLOCK, dtype)
    bufs = [empty(BLOCK, dtype) for _ in range(scratch)]
    args = list(operands)
    total = 0.0
    with it:
        for chunk in it:
            chunk = (chunk,) if len(where) == 1 else chunk
            for i, c in zip(where, chunk):
                args[i] = c
            n = chunk[0].size
            kernel(out[:n], *args, *(b[:n] for b in bufs))
            total += float(out[:n].sum())
    return total


def _times(o, G, c: float = 1.0) -> None:
    """o *= G * c, G the upstream gradient: an array ('none') or a number."""
    if type(G) is np.ndarray:
        o *= G
        if c != 1.0:
            o *= c
    else:
        o *= G * c


def _upstream(g, reduction: str, denom):
    """The gradient each element receives: g itself ('none'), else a number."""
    if reduction == "none":
        return g
    if reduction == "sum":
        return float(g)
    return float(g) / denom if denom else math.nan          # the mean of nothing: nan


def _shape_of(*xs) -> tuple:
    return np.broadcast_shapes(*(np.shape(raw(x)) for x in xs if x is not None))


def _pointwise(fwd, scratch: int, x, y, w, pw, reduction: str, denom, **params):
    """The forward of a pointwise loss: `fwd(o, x, y, w, pw, *scratch, **params)` writes
    the elementwise loss, chunk by chunk; 'mean'/'sum' add each chunk up at once."""
    shape, dtype = _shape_of(x, y, w, pw), _float_dtype(x, y, w, pw)
    kernel = functools.partial(fwd, **params) if params else fwd
    if reduction == "none":
        return fused(kernel, _like(shape, dtype), (x, y, w, pw), (dtype,) * scratch)
    total = _chunked_sum(kernel, shape, dtype, (x, y, w, pw), scratch)
    return np.asarray(total if reduction == "sum" else np.divide(total, denom), dtype=dtype)


def _kernel(rule, scratch: int):
    """A pointwise loss's first-order kernel from `rule(o, G, x, y, w, pw, *scratch,
    **params)` (G: the upstream gradient per element), one fused pass per chunk."""
    def kernel(g, ans, input, target, reduction, denom, weight=None, pos_weight=None,
               **params):
        k = functools.partial(rule, **params) if params else rule
        shape = _shape_of(input, target, weight, pos_weight)
        return fused(k, _like(shape, np.result_type(g, ans)),
                     (_upstream(g, reduction, denom), input, target, weight, pos_weight),
                     (np.result_type(g, ans),) * scratch)
    return kernel


def _formula(factor):
    """A pointwise loss's formula: the upstream gradient per element times `factor(x, y,
    w, pw, **params)` (written with ops), at the broadcast shape."""
    def formula(g, ans, input, target, reduction, denom, weight=None, pos_weight=None,
                **params):
        up = g if reduction in ("none", "sum") else g / denom
        out = up * factor(input, target, weight, pos_weight, **params)
        shape = _shape_of(input, target, weight, pos_weight)
        return out if np.shape(out) == shape else S.broadcast_to(out, shape)
    return formula


def _loss_op(name: str, scratch: int, kernel_x, kernel_y, factor_x, factor_y) -> dict:
    """defop's arguments for a pointwise loss over (input, target): the formulas from the
    factors, the fused kernels from the rules; weight and pos_weight are constants."""
    return dict(inputs=("input", "target"), formula=(_formula(factor_x), _formula(factor_y)),
                kernel=(_kernel(kernel_x, scratch), _kernel(kernel_y, scratch)),
                export=False, quiet=True, cost=_cost, name=name)


def _cost(ans, x, y, weight=None, pos_weight=None, **params) -> int:
    return 8 * math.prod(_shape_of(x, y, weight, pos_weight))


def _weighted(o, w) -> None:
    if w is not None:
        o *= w


def _data(x):
    return x._data if isinstance(x, Tensor) else np.asarray(x)


def _w(factor, w):
    return factor if w is None else factor * w


# ---- l1, smooth l1, huber -----------------------------------------------------------------
def _l1_fwd(o, x, y, w, pw):
    np.subtract(x, y, out=o)                  # |x - y|: 2 passes
    np.abs(o, out=o)


def _l1_dx(o, G, x, y, w, pw):
    np.subtract(x, y, out=o)                  # sign(x - y) G: 3 passes (0 at x == y)
    np.sign(o, out=o)
    _times(o, G)


def _l1_dy(o, G, x, y, w, pw):
    np.subtract(y, x, out=o)
    np.sign(o, out=o)
    _times(o, G)


def _l1_factor_x(x, y, w, pw):
    # piecewise constant: derivative 0 in x and y (part of the graph, as PyTorch's sgn)
    return depends_on(np.sign(_data(x) - _data(y)), x, y)


def _l1_factor_y(x, y, w, pw):
    return depends_on(np.sign(_data(y) - _data(x)), x, y)


@defop(**_loss_op("l1_loss", 0, _l1_dx, _l1_dy, _l1_factor_x, _l1_factor_y))
def fused_l1_loss(input: Tensor, target: Tensor, reduction: str = "mean",
                  denom: int | None = None) -> Tensor:
    """`|input - target|` reduced (one fused pass a chunk): l1_loss's node."""
    return _pointwise(_l1_fwd, 0, input, target, None, None, reduction, denom)


def _huber_fwd(o, x, y, w, pw, m, delta, scale):
    # m (|d| - m/2) scale, m = min(|d|, delta): 0.5 d^2 scale inside, (|d| - delta/2)
    # delta scale outside. 7 passes, one scratch.
    np.subtract(x, y, out=o)
    np.abs(o, out=o)
    np.minimum(o, delta, out=m)
    o *= 2
    o -= m
    o *= m
    o *= 0.5 * scale


def _huber_dx(o, G, x, y, w, pw, m, delta, scale):
    np.subtract(x, y, out=o)                  # clip(x - y, -delta, delta) scale G: 3 passes
    np.clip(o, -delta, delta, out=o)
    _times(o, G, scale)


def _huber_dy(o, G, x, y, w, pw, m, delta, scale):
    np.subtract(y, x, out=o)
    np.clip(o, -delta, delta, out=o)
    _times(o, G, scale)


def _huber_factor_x(x, y, w, pw, delta, scale):
    return E.clamp(x - y, -delta, delta) * scale


def _huber_factor_y(x, y, w, pw, delta, scale):
    return E.clamp(y - x, -delta, delta) * scale


@defop(**_loss_op("huber_loss", 1, _huber_dx, _huber_dy, _huber_factor_x, _huber_factor_y))
def fused_huber_loss(input: Tensor, target: Tensor, reduction: str = "mean",
                     denom: int | None = None, delta: float = 1.0,
                     scale: float = 1.0) -> Tensor:
    """huber_loss times `scale` (smooth_l1_loss: delta = beta, scale = 1 / beta), reduced:
    the node of both."""
    return _pointwise(_huber_fwd, 1, input, target, None, None, reduction, denom,
                      delta=delta, scale=scale)


def _weighted_mean_of(name, loss, weight, reduction, by_weight: bool):
    """`loss * weight` reduced; 'mean' divides by the weights' sum (`by_weight`, PyTorch's
    l1_loss) or the element count (huber_loss)."""
    loss = loss * weight
    if reduction == "mean" and by_weight:
        return R.sum(loss) / R.sum(weight if isinstance(weight, Tensor) else _raw(weight))
    return _reduce(name, loss, reduction)


def _check_weight_like_input(name, weight, x) -> None:
    if weight is not None and _raw(weight).shape != x.shape:
        raise ValueError(f"{name}: weight shape {_raw(weight).shape} must be the input's "
                         f"shape {x.shape}")


def _arg(v, like=None):
    """A Tensor as it is, anything else as an ndarray; a Python number as `like`'s
    floating dtype (weak, as numpy and PyTorch treat scalars)."""
    if isinstance(v, Tensor) or type(v) is np.ndarray:
        return v
    if isinstance(v, (int, float)) and not isinstance(v, bool) and like is not None \
            and _raw(like).dtype.kind == "f":
        return np.asarray(v, dtype=_raw(like).dtype)
    return np.asarray(v)


def _operands(name, input, target, broadcast: bool = True) -> tuple:
    """(input, target) as Tensors or ndarrays, their arrays, and their broadcast shape
    (None unless `broadcast`)."""
    input = _arg(input)
    target = _arg(target, input)
    x, y = _raw(input), _raw(target)
    return input, target, x, y, _broadcast(name, x, y) if broadcast else None


@composite(dtypes="numeric", module=_FUNCTIONAL)
def l1_loss(input, target, *, reduction: str = "mean", weight=None) -> Tensor:
    """Mean absolute error `|input - target|` (they broadcast), reduced; `weight` (the
    input's shape) scales each element, and 'mean' then divides by the weights' sum, as
    in PyTorch 2. The gradient at input == target is 0 (sign)."""
    _check_reduction("l1_loss", reduction)
    input, target, x, y, shape = _operands("l1_loss", input, target)
    _check_weight_like_input("l1_loss", weight, x)
    if reduction == "none" and weight is None and x.dtype.kind in "iu" \
            and y.dtype.kind in "iu":
        return E.abs(E.sub(input, target))  # PyTorch keeps integers integer here
    if weight is not None:
        loss = fused_l1_loss(input, target, reduction="none", denom=None)
        return _weighted_mean_of("l1_loss", loss, weight, reduction, by_weight=True)
    return fused_l1_loss(input, target, reduction=reduction, denom=math.prod(shape))


@composite(dtypes="floating", module=_FUNCTIONAL)
def smooth_l1_loss(input, target, *, reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """`0.5 (x - y)**2 / beta` where `|x - y| < beta`, else `|x - y| - beta / 2`
    (input and target broadcast); beta = 0 is l1_loss. One node."""
    _check_reduction("smooth_l1_loss", reduction)
    beta = float(beta)
    if not beta >= 0:
        raise ValueError(f"smooth_l1_loss: beta must be non-negative, got {beta}")
    if beta == 0:
        return l1_loss(input, target, reduction=reduction)
    input, target, x, y, shape = _operands("smooth_l1_loss", input, target)
    return fused_huber_loss(input, target, reduction=reduction, denom=math.prod(shape),
                  delta=beta, scale=1.0 / beta)


@composite(dtypes="floating", module=_FUNCTIONAL)
def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0,
               weight=None) -> Tensor:
    """`0.5 (x - y)**2` where `|x - y| < delta`, else `delta (|x - y| - delta / 2)`
    (input and target broadcast): delta times smooth_l1_loss with beta = delta. `weight`
    (the input's shape) scales each element; 'mean' is then the mean of the products."""
    _check_reduction("huber_loss", reduction)
    delta = float(delta)
    if not delta > 0:
        raise ValueError(f"huber_loss: delta must be positive, got {delta}")
    input, target, x, y, shape = _operands("huber_loss", input, target)
    _check_weight_like_input("huber_loss", weight, x)
    if weight is not None:
        loss = fused_huber_loss(input, target, reduction="none", denom=None, delta=delta,
                      scale=1.0)
        return _weighted_mean_of("huber_loss", loss, weight, reduction, by_weight=False)
    return fused_huber_loss(input, target, reduction=reduction, denom=math.prod(shape),
                  delta=delta, scale=1.0)


# ---- binary cross-entropy -----------------------------------------------------------------
def _bce_fwd(o, x, y, w, pw, a):
    # -(y L0 + (1 - y) L1) = y (L1 - L0) - L1, L0 = max(log x, -100), L1 = max(log(1 - x),
    # -100) (PyTorch's clamp): 9 passes (10 weighted), one scratch
    np.negative(x, out=o)
    np.log1p(o, out=o)
    np.maximum(o, -100.0, out=o)
    np.log(x, out=a)
    np.maximum(a, -100.0, out=a)
    np.subtract(o, a, out=a)
    a *= y
    np.subtract(a, o, out=o)
    _weighted(o, w)


_BCE_EPS = float(np.float32(1e-12))   # PyTorch's EPSILON, a float: 9.99999996e-13


def _bce_dx(o, G, x, y, w, pw, a):
    # G w (x - y) / max(x (1 - x), eps), PyTorch's formula: 6 passes (+1 weighted)
    np.subtract(1.0, x, out=o)
    o *= x
    np.maximum(o, _BCE_EPS, out=o)
    np.subtract(x, y, out=a)
    np.divide(a, o, out=o)
    _times(o, G)
    _weighted(o, w)


def _bce_dy(o, G, x, y, w, pw, a):
    # G w (log(1 - x) - log x) (= -logit(x), PyTorch's): 5 passes (+1 weighted)
    np.negative(x, out=o)
    np.log1p(o, out=o)
    np.log(x, out=a)
    o -= a
    _times(o, G)
    _weighted(o, w)


def _bce_factor_x(x, y, w, pw):
    return _w((x - y) / E.maximum(x * (1 - x), _BCE_EPS), w)


def _bce_factor_y(x, y, w, pw):
    return _w(E.log(1 - x) - E.log(x), w)


@defop(**_loss_op("binary_cross_entropy", 1, _bce_dx, _bce_dy, _bce_factor_x,
                  _bce_factor_y))
def fused_binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                               reduction: str = "mean", denom: int | None = None) -> Tensor:
    """binary_cross_entropy's node: the weighted clamped log-likelihood, reduced."""
    return _pointwise(_bce_fwd, 1, input, target, weight, None, reduction, denom)


def _log_sigmoid(o, x, a) -> None:
    """o = log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)), overflow-free: 6 passes."""
    np.abs(x, out=a)
    np.negative(a, out=a)
    np.exp(a, out=a)
    np.log1p(a, out=a)
    np.minimum(x, 0, out=o)
    o -= a


def _bcel_fwd(o, x, y, w, pw, a):
    # (1 - y) x - L log_sigmoid(x), L = 1 + (pw - 1) y (PyTorch's): 9 passes, 12 with
    # pos_weight, +1 weighted
    _log_sigmoid(o, x, a)
    if pw is not None:
        np.subtract(pw, 1.0, out=a)
        a *= y
        a += 1
        o *= a
    np.subtract(1.0, y, out=a)
    a *= x
    np.subtract(a, o, out=o)
    _weighted(o, w)


def _bcel_dx(o, G, x, y, w, pw, a):
    # G w (L sigmoid(x) - pw y), or G w (sigmoid(x) - y): 6 passes, 10 with pos_weight
    np.negative(x, out=o)
    np.exp(o, out=o)
    o += 1
    np.divide(1.0, o, out=o)
    if pw is not None:
        np.subtract(pw, 1.0, out=a)
        a *= y
        a += 1
        o *= a
        np.multiply(pw, y, out=a)
        o -= a
    else:
        o -= y
    _times(o, G)
    _weighted(o, w)


def _bcel_dy(o, G, x, y, w, pw, a):
    # -G w x, or -G w (x + (pw - 1) log_sigmoid(x)): 2 passes, 10 with pos_weight
    if pw is None:
        np.negative(x, out=o)
    else:
        _log_sigmoid(o, x, a)
        np.subtract(pw, 1.0, out=a)
        o *= a
        o += x
        np.negative(o, out=o)
    _times(o, G)
    _weighted(o, w)


def _graph_log_sigmoid(x):
    return E.minimum(x, 0.0) - E.log(E.exp(-E.abs(x)) + 1)


def _bcel_factor_x(x, y, w, pw):
    if pw is None:
        return _w(sigmoid(x) - y, w)
    return _w(sigmoid(x) * ((pw - 1) * y + 1) - pw * y, w)


def _bcel_factor_y(x, y, w, pw):
    if pw is None:
        return _w(-x, w)
    return _w(-(x + _graph_log_sigmoid(x) * (pw - 1)), w)


@defop(**_loss_op("binary_cross_entropy_with_logits", 1, _bcel_dx, _bcel_dy, _bcel_factor_x,
                  _bcel_factor_y))
def fused_binary_cross_entropy_with_logits(input: Tensor, target: Tensor,
                                           weight: Tensor | None = None,
                                           pos_weight: Tensor | None = None,
                                           reduction: str = "mean",
                                           denom: int | None = None) -> Tensor:
    """binary_cross_entropy_with_logits's node: the loss from the logits, reduced."""
    return _pointwise(_bcel_fwd, 1, input, target, weight, pos_weight, reduction, denom)


def _bce_weight(name, weight, x, what: str = "weight"):
    if weight is None:
        return None
    _check_no_grad(name, what, weight)
    w = _raw(weight)
    try:
        fits = np.broadcast_shapes(x.shape, w.shape) == x.shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"{name}: {what} of shape {w.shape} does not broadcast to the "
                         f"input's shape {x.shape}")
    return w.astype(_float_dtype(x), copy=False)      # a constant: the loss keeps x's dtype


@composite(dtypes="floating", module=_FUNCTIONAL)
def binary_cross_entropy(input, target, weight=None, *, reduction: str = "mean") -> Tensor:
    """`-weight (target log(input) + (1 - target) log(1 - input))` for probabilities
    `input` in [0, 1] (ValueError otherwise); each log is clamped at -100, and the input
    gradient divides by max(input (1 - input), 1e-12), as PyTorch does. Target: the input's
    shape; `weight` broadcasts to it (a constant). One node."""
    name = "binary_cross_entropy"
    _check_reduction(name, reduction)
    input, target, x, y, _ = _operands(name, input, target, broadcast=False)
    if y.shape != x.shape:
        raise ValueError(f"{name}: target shape {y.shape} must be the input's shape "
                         f"{x.shape}")
    if y.dtype != x.dtype:   # PyTorch refuses it (numpy would compute in the wider dtype)
        raise RuntimeError(f"{name}: Found dtype {y.dtype} but expected {x.dtype} (the "
                           f"target's dtype must be the input's)")
    if x.size and not (x.min() >= 0 and x.max() <= 1):
        raise ValueError(f"{name}: all elements of input should be between 0 and 1")
    w = _bce_weight(name, weight, x)
    return fused_binary_cross_entropy(input, target, w, reduction=reduction, denom=x.size)


@composite(dtypes="floating", module=_FUNCTIONAL)
def binary_cross_entropy_with_logits(input, target, weight=None, *, reduction: str = "mean",
                                     pos_weight=None) -> Tensor:
    """binary_cross_entropy of `sigmoid(input)` from the logits, without overflow:
    `(1 - y) x - L log_sigmoid(x)` with `L = 1 + (pos_weight - 1) y`, times `weight`.
    Target: the input's shape; `weight` and `pos_weight` (e.g. one per class, (C,))
    broadcast to it and are constants. One node."""
    name = "binary_cross_entropy_with_logits"
    _check_reduction(name, reduction)
    input, target, x, y, _ = _operands(name, input, target, broadcast=False)
    if y.shape != x.shape:
        raise ValueError(f"{name}: target size {y.shape} must be the same as input size "
                         f"{x.shape}")
    w = _bce_weight(name, weight, x)
    pw = _bce_weight(name, pos_weight, x, "pos_weight")
    return fused_binary_cross_entropy_with_logits(input, target, w, pw, reduction=reduction,
                                                  denom=x.size)


# ---- Kullback-Leibler divergence ------------------------------------------------------------
def _kl_fwd(o, x, y, w, pw, a, log_target):
    if log_target:                            # exp(y) (y - x): 3 passes
        np.exp(y, out=a)
        np.subtract(y, x, out=o)
        o *= a
        return
    o.fill(0)                                 # xlogy(y, y) - y x: 5 passes (and y's mask)
    np.log(y, out=o, where=np.not_equal(y, 0))
    o *= y
    np.multiply(y, x, out=a)
    o -= a


def _kl_dx(o, G, x, y, w, pw, a, log_target):
    if log_target:                            # -exp(y) G or -y G: 3 passes
        np.exp(y, out=o)
    else:
        np.copyto(o, y)
    np.negative(o, out=o)
    _times(o, G)


def _kl_dy(o, G, x, y, w, pw, a, log_target):
    if log_target:                            # exp(y) (y - x + 1) G: 5 passes
        np.subtract(y, x, out=o)
        o += 1
        np.exp(y, out=a)
        o *= a
    else:                                     # (log y + 1 - x) G: 4 passes
        np.log(y, out=o)
        o += 1
        o -= x
    _times(o, G)


def _kl_factor_x(x, y, w, pw, log_target):
    return -E.exp(y) if log_target else -(y if isinstance(y, Tensor) else np.asarray(y))


def _kl_factor_y(x, y, w, pw, log_target):
    if log_target:
        return E.exp(y) * (y - x + 1)
    return E.log(y) + (1 - x)


@defop(**_loss_op("kl_div", 1, _kl_dx, _kl_dy, _kl_factor_x, _kl_factor_y))
def fused_kl_div(input: Tensor, target: Tensor, reduction: str = "mean",
                 denom: int | None = None, log_target: bool = False) -> Tensor:
    """kl_div's node: the pointwise divergence, reduced ('mean' over `denom`)."""
    return _pointwise(_kl_fwd, 1, input, target, None, None, reduction, denom,
                      log_target=log_target)


@composite(dtypes="floating", module=_FUNCTIONAL)
def kl_div(input, target, *, reduction: str = "mean", log_target: bool = False) -> Tensor:
    """Pointwise KL divergence `target (log(target) - input)` of log-probabilities
    `input` (0 where target is 0; `log_target=True`: the target is given as
    log-probabilities, `exp(target) (target - input)`); input and target broadcast.
    reduction: 'mean' (over all elements, PyTorch's default), 'batchmean' (the sum over
    the batch size: the true KL divergence), 'sum' or 'none'. The target's gradient
    `log(target) + 1 - input` is -inf where a target is 0 (PyTorch: nan)."""
    _check_reduction("kl_div", reduction, _REDUCTIONS + ("batchmean",))
    input, target, x, y, shape = _operands("kl_div", input, target)
    denom = math.prod(shape)
    if reduction == "batchmean":
        reduction, denom = ("mean", x.shape[0]) if x.ndim else ("sum", None)
    return fused_kl_div(input, target, reduction=reduction, denom=denom,
               log_target=bool(log_target))


# ---- nll_loss and cross_entropy over (N, C): one fused node each -----------------------------
def _class_targets(name, input, target):
    t = _raw(target)
    if input.ndim != 2:
        raise ValueError(f"{name}: expected 2-D input (N, C), got shape {tuple(input.shape)}")
    if t.dtype.kind not in "iu":
        raise TypeError(f"{name}: target must hold class indices (integers), "
                        f"got dtype {t.dtype}")
    if t.shape != (input.shape[0],):
        raise ValueError(f"{name}: target shape {t.shape} does not match input batch "
                         f"size {input.shape[0]}")
    return t


def _row_logsumexp(x) -> np.ndarray:
    """log(sum(exp(x))) of each row of `x` (N, C), shifted by the row's finite max:
    two passes over x (the max; exp and sum through a row-block temporary)."""
    m = x.max(axis=1)
    m[~np.isfinite(m)] = 0
    s = empty(x.shape[0], dtype=x.dtype)
    rb, blocks = row_blocks(x.shape[0], x.shape[1] * x.itemsize)
    buf = empty((rb, x.shape[1]), dtype=x.dtype)
    for a, b in blocks:
        e = np.subtract(x[a:b], m[a:b, None], out=buf[:b - a])
        np.exp(e, out=e)
        np.sum(e, axis=1, out=s[a:b])
    with np.errstate(divide="ignore"):
        np.log(s, out=s)
    return np.add(s, m, out=s)


def _nll_targets(name, x, t, weight, ignore_index, reduction) -> tuple:
    """(safe targets, per-row scale w[t] or 1 (0 when ignored), valid rows, class
    weights as x's dtype or None, the mean's denominator or None), PyTorch's errors."""
    if isinstance(weight, str):
        raise TypeError(f"{name}: the third positional argument is the class weight, as in "
                        f"PyTorch; pass reduction={weight!r} by keyword")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{name}: reduction must be 'mean', 'sum' or 'none', "
                         f"got {reduction!r}")
    n, c = x.shape
    valid = t != ignore_index
    bad = valid & ((t < 0) | (t >= c))
    if bad.any():
        raise IndexError(f"{name}: target {t[bad][0]} is out of bounds for {c} classes")
    safe = np.where(valid, t, 0)
    w = None if weight is None else _raw(weight)
    if w is not None and w.shape != (c,):
        raise ValueError(f"{name}: weight shape {w.shape} does not match {c} classes")
    w = None if w is None else w.astype(x.dtype, copy=False)
    scale = valid.astype(x.dtype) if w is None else w[safe] * valid
    denom = None
    if reduction == "mean":
        denom = scale.sum() if (w is not None or not valid.all()) else x.dtype.type(n)
    return safe, scale, valid, w, denom


def _nll_forward(name, x, t, weight, ignore_index, reduction, smoothing, logits: bool):
    """Per-row loss -(1-e) w[t] logp[t] - e/C sum_c w_c logp_c (logp = x - lse(x) for
    logits, x itself otherwise), reduced; the kernels' values kept beside it."""
    n, c = x.shape
    safe, scale, valid, w, denom = _nll_targets(name, x, t, weight, ignore_index, reduction)
    lse = _row_logsumexp(x) if logits else None
    picked = x[np.arange(n), safe]
    loss = scale * (picked if lse is None else picked - lse)
    np.negative(loss, out=loss)                                # -w[t] logp[t]
    if smoothing:
        wsum = c if w is None else w.sum()
        per_class = x.sum(axis=1) if w is None else x @ w       # sum_c w_c x_c
        loss *= 1 - smoothing
        loss += valid * (smoothing / c) * (wsum * lse - per_class)
    if reduction == "mean":
        with np.errstate(invalid="ignore"):                   # all ignored: NaN, as torch
            loss = np.asarray(loss.sum() / denom, dtype=x.dtype)
    elif reduction == "sum":
        loss = np.asarray(loss.sum(), dtype=x.dtype)
    return Saved(loss, lse, safe, scale, valid, w, denom)


def _nll_grad(g, x, shape, lse, safe, scale, valid, w, denom, smoothing):
    # G = the upstream gradient per row (over the mean's denominator).
    # nll_loss: zeros with -G w[t] at each row's target (the zero fill, n elements).
    # cross_entropy: G (a p - (1-e) w[t] onehot(t) - e/C valid w), p = exp(x - lse),
    # a = (1-e) w[t] + e/C sum(w) valid: 3 passes (subtract, exp, scale), plus one for
    # smoothing (through a row-block temporary when classes are weighted).
    rows = np.arange(shape[0])
    with np.errstate(divide="ignore", invalid="ignore"):
        G = g if denom is None else g / denom
    # ignored rows get 0 even where G is not finite (every target ignored: denom 0), as
    # PyTorch, which never writes them: a selection, not a product
    G = np.where(valid, G, 0.0)
    coef = G * scale * (1 - smoothing)                         # at each row's target
    if x is None:
        out = zeros(shape, scale.dtype)
        out[rows, safe] = np.subtract(0.0, coef)               # +0.0 where ignored
        return out
    out = np.subtract(x, lse[:, None], out=empty(x.shape, x.dtype))
    np.exp(out, out=out)
    wsum = shape[1] if w is None else w.sum()
    out *= (coef + G * valid * (smoothing * wsum / shape[1]))[:, None]
    out[rows, safe] -= coef
    if smoothing:
        gamma = G * valid * (smoothing / shape[1])
        if w is None:
            out -= gamma[:, None]
        else:
            _sub_outer(out, gamma, w)
    return out


def _sub_outer(out, a, b) -> None:
    """out -= outer(a, b), through a row-block temporary."""
    rb, blocks = row_blocks(out.shape[0], out.shape[1] * out.itemsize)
    buf = empty((rb, out.shape[1]), dtype=out.dtype)
    for s, e in blocks:
        out[s:e] -= np.multiply(a[s:e, None], b, out=buf[:e - s])


def _nll_kernel(g, ans, input, lse, safe, scale, valid, w, denom, target, weight,
                ignore_index, reduction):
    return _nll_grad(g, None, input.shape, lse, safe, scale, valid, w, denom, 0.0)


def _cross_entropy_kernel(g, ans, input, lse, safe, scale, valid, w, denom, target, weight,
                          ignore_index, reduction, label_smoothing):
    return _nll_grad(g, input, input.shape, lse, safe, scale, valid, w, denom,
                     label_smoothing)


def _nll_parts(name, g, input, target, weight, ignore_index, reduction, smoothing) -> tuple:
    """What both formulas share: G (g per row over the mean's denominator, 0 at ignored
    rows, (N, 1)), T (the constant (1-e) w[t] onehot(t) + e/C valid w), and A, the
    constant (1-e) w[t] + e/C sum(w) valid (N, 1)."""
    x = raw(input)
    n, c = x.shape
    safe, scale, valid, w, denom = _nll_targets(name, x, target, weight, ignore_index,
                                                reduction)
    with np.errstate(divide="ignore", invalid="ignore"):
        G = g if denom is None else g / denom
        G = S.reshape(E.where(valid, G, 0.0), (n, 1))       # ignored rows: 0 (the kernel's)
    t = np.zeros((n, c), dtype=scale.dtype)
    t[np.arange(n), safe] = scale * (1 - smoothing)
    if smoothing:
        t += (valid * (smoothing / c))[:, None] * (1.0 if w is None else w)
    wsum = c if w is None else w.sum()
    a = scale * (1 - smoothing) + valid * (smoothing * wsum / c)
    return G, t, a[:, None]


def _nll_formula(g, ans, input, target, weight, ignore_index, reduction):
    G, t, _ = _nll_parts("nll_loss", g, input, target, weight, ignore_index, reduction, 0.0)
    return -(G * t)


def _cross_entropy_formula(g, ans, input, target, weight, ignore_index, reduction,
                           label_smoothing):
    G, t, a = _nll_parts("cross_entropy", g, input, target, weight, ignore_index, reduction,
                         label_smoothing)
    return G * (softmax(input, 1) * a - t)


@defop(formula=_nll_formula, kernel=_nll_kernel, unsaved=("input", "result"), export=False,
       name="nll_loss")
def nll_loss_rows(input: Tensor, target: Tensor, weight: Tensor | None = None,
                  ignore_index: int = -100, reduction: str = "mean") -> Tensor:
    """nll_loss's node over log-probabilities (N, C) and targets (N,): one pass to pick
    each row's target, reduced. Its gradient reads only the input's shape."""
    return _nll_forward("nll_loss", input, target, weight, ignore_index, reduction, 0.0,
                        logits=False)


@defop(formula=_cross_entropy_formula, kernel=_cross_entropy_kernel, unsaved=("result",),
       export=False, name="cross_entropy")
def cross_entropy_rows(input: Tensor, target: Tensor, weight: Tensor | None = None,
                       ignore_index: int = -100, reduction: str = "mean",
                       label_smoothing: float = 0.0) -> Tensor:
    """cross_entropy's node over logits (N, C) and targets (N,), fused: the forward keeps
    each row's logsumexp (not the log-probabilities), the kernel makes the gradient in 3
    passes."""
    return _nll_forward("cross_entropy", input, target, weight, ignore_index, reduction,
                        label_smoothing, logits=True)


# ---- nll_loss and cross_entropy of any rank --------------------------------------------------
def _rows_of_classes(name: str, input, target) -> tuple:
    """(input as (M, C), targets (M,), the unreduced loss's shape): (N, C) as it is;
    (C,) with a 0-d target as one row; (N, C, d1, ...) with targets (N, d1, ...) moved to
    channels-last rows (a copy, recorded: gradients flow back through it)."""
    x = _raw(input)
    if x.ndim == 2:
        return input, _class_targets(name, x, target), None
    t = _raw(target)
    if t.dtype.kind not in "iu":
        raise TypeError(f"{name}: target must hold class indices (integers), "
                        f"got dtype {t.dtype}")
    if x.ndim < 2 and (x.ndim == 0 or t.ndim):
        raise ValueError(f"{name}: expected 2-D input (N, C) with target (N,), or (C,) with a "
                         f"0-d target, or (N, C, d1, ...) with target (N, d1, ...); got input "
                         f"{x.shape} and target {t.shape}")
    if x.ndim == 1:
        return S.reshape(input, (1, x.shape[0])), t.reshape(1), ()
    want = (x.shape[0],) + x.shape[2:]
    if t.shape != want:
        raise ValueError(f"{name}: target shape {t.shape} does not match input shape "
                         f"{x.shape} (expected {want})")
    c = x.shape[1]
    rows = S.permute(input, (0,) + tuple(range(2, x.ndim)) + (1,))
    return S.reshape(rows, (-1, c)), t.reshape(-1), want


def _class_weight_dtype(name: str, x: np.ndarray, weight) -> None:
    """PyTorch's RuntimeError for a class-weight Tensor of another dtype than the input
    (numpy would compute in the wider dtype). A numpy array is a constant and is cast."""
    if isinstance(weight, Tensor) and weight.dtype != x.dtype:
        raise RuntimeError(f"{name}: expected scalar type {x.dtype} but found {weight.dtype} "
                           f"(the class weight's dtype must be the input's)")


def _unflatten(loss, reduction, shape):
    return loss if reduction != "none" or shape is None else S.reshape(loss, shape)


@composite(dtypes="floating", module=_FUNCTIONAL)
def nll_loss(input, target, weight=None, *, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of class-index targets given log-probabilities: input
    (N, C) with target (N,), (C,) with a 0-d target, or (N, C, d1, ...) with target
    (N, d1, ...) (per-pixel classes). `weight` (C,) rescales each class (a constant);
    targets equal to `ignore_index` contribute nothing, and 'mean' divides by the total
    weight of the targets that count, as in PyTorch. One node for (N, C); other ranks
    are reshaped (and, from 3 dimensions, copied channels-last) into it."""
    x2, t, shape = _rows_of_classes("nll_loss", input, target)
    _class_weight_dtype("nll_loss", _raw(x2), weight)
    return _unflatten(nll_loss_rows(x2, t, weight, ignore_index, reduction), reduction, shape)


@composite(module=_FUNCTIONAL)
def cross_entropy(input, target, weight=None, *, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Softmax cross-entropy of logits against class indices,
    `nll_loss(log_softmax(input, 1), ...)` with PyTorch's label smoothing, for the
    shapes nll_loss takes. One fused node for (N, C) (the forward keeps each row's
    logsumexp, not the log-probabilities); other ranks are reshaped into it.
    A floating target of the input's shape holds class probabilities instead (PyTorch's
    soft targets): `-sum_c weight_c * target_c * log_softmax(input)_c` per element, the
    mean over the batch (and spatial) elements; ignore_index does not apply."""
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], "
                         f"got {label_smoothing}")
    t, x = _raw(target), _raw(input)
    if x.dtype.kind not in "fc":  # PyTorch's log_softmax kernel has no integer form
        raise NotImplementedError(f"cross_entropy: not implemented for input dtype "
                                  f"{x.dtype} (logits must be floating point)")
    if t.shape == x.shape:  # PyTorch: the same shape means probabilities
        if t.dtype.kind != "f":
            raise RuntimeError(f"cross_entropy: expected a floating point target with "
                               f"class probabilities (the input's shape {x.shape}), got "
                               f"{t.dtype}")
        if x.ndim == 0:  # PyTorch's softmax over dim 1 of a 0-d input
            raise IndexError("cross_entropy: Dimension specified as 1 but the input has "
                             "no dimensions (expected (C,), (N, C) or (N, C, d1, ...))")
        return _soft_cross_entropy(input, target, weight, reduction, label_smoothing)
    x2, t, shape = _rows_of_classes("cross_entropy", input, target)
    _class_weight_dtype("cross_entropy", _raw(x2), weight)
    return _unflatten(cross_entropy_rows(x2, t, weight, ignore_index, reduction,
                                         label_smoothing), reduction, shape)


def _soft_cross_entropy(input, target, weight, reduction: str,
                        label_smoothing: float) -> Tensor:
    """cross_entropy against class probabilities, composed of ops (log_softmax, a product
    with the targets, a sum over classes): a target that requires grad gets its gradient,
    -w_c (1 - e) log_softmax(input)_c per element, as in PyTorch."""
    name = "cross_entropy"
    _check_reduction(name, reduction)
    x = _raw(input)
    if x.ndim < 1:
        raise ValueError(f"{name}: expected an input with a class dimension, got {x.shape}")
    cdim = 1 if x.ndim >= 2 else 0
    c = x.shape[cdim]
    w = None
    if weight is not None:
        w = _raw(weight)
        if w.shape != (c,):
            raise ValueError(f"{name}: weight must have shape ({c},) (one per class), "
                             f"got {w.shape}")
        w = w.astype(x.dtype, copy=False).reshape((c,) + (1,) * (x.ndim - cdim - 1))
    if isinstance(target, Tensor):
        t = target if target.dtype == x.dtype else cast(target, dtype=x.dtype)
    else:
        t = Tensor._wrap(np.ascontiguousarray(_raw(target), dtype=x.dtype))
    if label_smoothing and c:  # no class: nothing to smooth
        t = t * (1.0 - label_smoothing) + label_smoothing / c
    if w is not None:
        t = t * w
    logp = R.log_softmax(input, axis=cdim)
    per = -R.sum(logp * t, axis=cdim)
    if reduction == "none":
        return per
    if reduction == "mean" and c == 0:  # PyTorch divides the sum by numel / C: 0 / 0
        with np.errstate(invalid="ignore", divide="ignore"):
            return R.sum(per) / 0.0
    return R.sum(per) if reduction == "sum" else R.mean(per)


# ---- margin losses: compositions of ops ------------------------------------------------------
def _same_ndim(name: str, *named) -> None:
    dims = [np.ndim(_raw(a)) for _, a in named]
    if len(set(dims)) != 1:
        sizes = ", ".join(f"{n}: {_raw(a).shape}" for n, a in named)
        raise ValueError(f"{name}: all inputs should have the same number of dimensions, "
                         f"got {sizes}")


@composite(module=_FUNCTIONAL)
def cosine_embedding_loss(input1, input2, target, margin: float = 0.0, *,
                          reduction: str = "mean") -> Tensor:
    """`1 - cos(x1, x2)` where target is 1, `max(0, cos(x1, x2) - margin)` where it is
    -1 (0 elsewhere), the cosine over the last dimension of (N, D) or (D,) inputs with
    PyTorch's 1e-12 added to each squared norm. Composed of ops."""
    name = "cosine_embedding_loss"
    _check_reduction(name, reduction)
    x1, x2, t = _raw(input1), _raw(input2), _raw(target)
    if x1.ndim not in (1, 2) or x1.shape != x2.shape:
        raise ValueError(f"{name}: expected two inputs of the same shape (N, D) or (D,), "
                         f"got {x1.shape} and {x2.shape}")
    if t.shape != x1.shape[:-1]:
        raise ValueError(f"{name}: target shape {t.shape} does not match the inputs' "
                         f"{x1.shape} (expected {x1.shape[:-1]})")
    prod = R.sum(input1 * input2, axis=-1)
    sq1 = R.sum(input1 * input1, axis=-1) + 1e-12
    sq2 = R.sum(input2 * input2, axis=-1) + 1e-12
    cos = prod / E.sqrt(sq1 * sq2)
    loss = E.where(t == 1, 1 - cos, 0.0) + E.where(t == -1, E.clamp(cos - margin, min=0.0),
                                                  0.0)
    return _reduce(name, loss, reduction)


@composite(module=_FUNCTIONAL)
def margin_ranking_loss(input1, input2, target, margin: float = 0.0, *,
                        reduction: str = "mean") -> Tensor:
    """`max(0, -target (input1 - input2) + margin)` (the three broadcast; target is
    usually 1 or -1 and gets a gradient too, as in PyTorch). Composed of ops."""
    name = "margin_ranking_loss"
    _check_reduction(name, reduction)
    _same_ndim(name, ("input1", input1), ("input2", input2), ("target", target))
    _broadcast(name, _raw(input1), _raw(input2), _raw(target))
    target = target if isinstance(target, Tensor) else Tensor._wrap(_raw(target))
    return _reduce(name, E.clamp(-target * (input1 - input2) + margin, min=0.0), reduction)


def _pairwise_distance(a, b, p: float, eps: float):
    """The p-norm of `a - b + eps` over the last dimension (PyTorch's
    pairwise_distance), with ops."""
    d = E.abs(a - b + eps)
    if p == 2:
        return E.sqrt(R.sum(d * d, axis=-1))
    if p == 1:
        return R.sum(d, axis=-1)
    if p == math.inf:
        return R.amax(d, dim=-1)
    return E.pow(R.sum(E.pow(d, p), axis=-1), 1.0 / p)


@composite(module=_FUNCTIONAL)
def triplet_margin_loss(anchor, positive, negative, margin: float = 1.0, p: float = 2,
                        eps: float = 1e-6, swap: bool = False, *,
                        reduction: str = "mean") -> Tensor:
    """`max(0, margin + d(anchor, positive) - d(anchor, negative))`, d the p-norm
    distance over the last dimension (of `a - b + eps`, PyTorch's pairwise_distance);
    `swap` uses min(d(a, n), d(p, n)) for the negative distance. margin > 0 and p > 0
    (inf: the max norm). Composed of ops."""
    name = "triplet_margin_loss"
    _check_reduction(name, reduction)
    if not margin > 0:
        raise ValueError(f"{name}: margin must be greater than 0, got {margin}")
    if not p > 0:
        raise ValueError(f"{name}: p must be positive (or inf), got {p}")
    _same_ndim(name, ("anchor", anchor), ("positive", positive), ("negative", negative))
    a = _raw(anchor)
    if a.ndim == 0:  # PyTorch's: three 0-d inputs are vectors of one element
        anchor, positive, negative = (S.reshape(t, (1,)) if isinstance(t, Tensor)
                                      else np.reshape(t, (1,))
                                      for t in (anchor, positive, negative))
        a = _raw(anchor)
    _broadcast(name, a, _raw(positive), _raw(negative))
    d_pos = _pairwise_distance(anchor, positive, p, eps)
    d_neg = _pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = E.minimum(d_neg, _pairwise_distance(positive, negative, p, eps))
    return _reduce(name, E.clamp(d_pos - d_neg + margin, min=0.0), reduction)
