"""Normalization layers of `torch.nn.functional`: layer_norm, rms_norm, batch_norm,
instance_norm, group_norm, local_response_norm (PyTorch's signatures, semantics and
exception types).

- layer_norm and rms_norm are declared ops over the trailing `normalized_shape` dims: the
  input seen as (rows, D), each row normalized per block of rows (cache resident); the
  node keeps the input and each row's mean and 1/std (1/rms), not the output.
- batch_norm normalizes the channels of (N, C, *) inputs, seen as (N, C, S): a composite
  that takes the statistics (the batch's in training, over every dimension but the
  channels, biased variance; the running ones in evaluation, copied: a later update cannot
  change what backward reads), updates the running statistics when given, and applies
  them with one declared op, `normalize_channels`, whose derivative in training goes
  through the batch statistics (PyTorch's formula) and in evaluation is a per-channel
  scale. instance_norm is the same op on the input seen as (1, N*C, S), its weight and
  bias repeated N times (recorded ops, so their gradients are summed back), as PyTorch
  computes it; with `use_input_stats=False` it is batch_norm in evaluation.
- group_norm is layer_norm over (N, groups, C/groups * S), then the per-channel weight and
  bias as ops; local_response_norm is PyTorch's composition (squares, a zero-padded average
  over neighbouring channels, pow, divide).

Each declared op's derivative is written once as a formula (ops: differentiable again);
the fused numpy kernels kept beside them work per block (rows or samples, cache resident)
and allocate only the gradient they return besides one block temporary; their comments
count the passes over a block.

Running statistics. Every check (shapes, dtypes, sizes, eps) runs before anything is
written, and the statistics are written only after the batch's are computed, so a failed
forward leaves them, and `num_batches_tracked`, as they were. Each update (the counter's
increment, the momentum it implies, both running arrays and their version counters) is
atomic under one lock: concurrent training forwards of one module each apply their
batch's update whole (in whichever order the threads get there), and the counter counts
every one. An empty batch only counts, as in PyTorch. Reading the statistics while another
thread trains the module is the usual data race (nn/module.py: a module is not to be
mutated while it is used).
"""
from __future__ import annotations

import math
import numbers
import threading

import numpy as np

from .. import locks, version
from ..ops import pointwise as PW
from ..ops import reduce as R
from ..ops import shape as S
from ..ops._common import array, default_float, empty, reshaped, row_blocks, zeros
from ..primitive import Joint, Saved, composite, defop
from ..tensor import Tensor

__all__ = ["layer_norm", "rms_norm", "batch_norm", "batch_norm_counted", "instance_norm",
           "group_norm", "local_response_norm", "normalize_channels"]

_AXES = (0, 2)   # what batch_norm reduces of (N, C, S): all but the channels


class _UpdateLock:
    """Holds the lock that makes each running-statistics update atomic (renewed in a fork
    child: `locks.track`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()


_UPDATES = _UpdateLock()
locks.track(_UPDATES)


def _shape(x) -> tuple:
    return np.shape(array(x))


def _float(x: np.ndarray) -> np.ndarray:
    return x if x.dtype.kind == "f" else x.astype(default_float())


def _inv_sqrt(v, out):
    np.sqrt(v, out=out)
    return np.reciprocal(out, out=out)


# ---- layer_norm and rms_norm: over the trailing dims ------------------------------------------
def _normalized(normalized_shape) -> tuple:
    ns = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) \
        else tuple(normalized_shape)
    return tuple(int(s) for s in ns)


def _rows_of(shape: tuple, ns: tuple) -> tuple:
    """(rows, D) of an input of `shape` normalized over its trailing `ns` (not -1: either
    may be 0)."""
    return math.prod(shape[:len(shape) - len(ns)]), math.prod(ns)


def _check_trailing(name: str, x: np.ndarray, ns: tuple, params) -> None:
    """PyTorch's checks: `ns` the input's trailing dims, each parameter of shape `ns`."""
    if not ns or len(ns) > x.ndim or x.shape[x.ndim - len(ns):] != ns:
        kind = ValueError if name == "rms_norm" and len(ns) > x.ndim else RuntimeError
        raise kind(f"{name}: normalized_shape {ns} does not match the trailing dimensions "
                   f"of input shape {x.shape} (expected input of shape [*, "
                   f"{', '.join(map(str, ns))}])")
    for what, p in params:
        if p is not None and np.shape(p) != ns:
            raise RuntimeError(f"{name}: {what} shape {np.shape(p)} does not match "
                               f"normalized_shape {ns}")


def _weighted_column_sums(g2, x2, mean, scale) -> np.ndarray:
    """sum over rows of g2 * (x2 - mean) * scale (mean None: no centring), per row
    block through a block temporary."""
    d = x2.shape[1]
    acc = zeros(d, np.result_type(g2, x2))
    rb, blocks = row_blocks(x2.shape[0], d * acc.itemsize)
    buf = empty((rb, d), acc.dtype)
    for a, e in blocks:
        t = buf[:e - a]
        if mean is None:
            np.multiply(x2[a:e], scale[a:e, None], out=t)
        else:
            np.subtract(x2[a:e], mean[a:e, None], out=t)
            t *= scale[a:e, None]
        acc += np.einsum("ij,ij->j", g2[a:e], t)
    return acc


_MATVEC_MEAN = 256


def _rule_setup(g, x2, w):
    """What both input kernels start from: g as rows, the result (the only full-size
    allocation), the row blocks, and a block temporary for h = g w when weighted."""
    d = x2.shape[1]
    out = empty(x2.shape, np.result_type(g, x2))
    rb, blocks = row_blocks(x2.shape[0], d * out.itemsize)
    hbuf = None if w is None else empty((rb, d), out.dtype)
    return reshaped(g, x2.shape), out, blocks, hbuf


def _operands(input, weight, normalized_shape) -> tuple:
    """(x as (rows, D) of a floating dtype, the weight as (D,) or None, the shapes)."""
    x = _float(np.asarray(input))
    ns = _normalized(normalized_shape)
    rows, d = _rows_of(x.shape, ns)
    w = None if weight is None else np.asarray(weight).reshape(d)
    return reshaped(x, (rows, d)), w, x.shape, ns


def _ln_block(t, xb, gb, m, r, w, hbuf, dw) -> None:
    """One row block of layer_norm's joint kernel: t <- xh = (x - mean) r (2 passes);
    dw += sum over rows of g xh (1); if `hbuf` is not False, t <- dx =
    r (h - s1/D - xh c), h = g w, s1 = g @ w (a BLAS matvec, 4x numpy's row sum),
    c = sum(h xh)/D (the row dot): h (weighted only), the dot, then scale, add h,
    subtract, scale (5-6)."""
    np.subtract(xb, m[:, None], out=t)
    t *= r[:, None]
    if dw is not None:
        dw += np.einsum("ij,ij->j", gb, t)
    if hbuf is False:
        return
    d = t.shape[1]
    s1 = np.matmul(gb, np.ones(d, t.dtype) if w is None else w)
    h = gb if w is None else np.multiply(gb, w, out=hbuf[:t.shape[0]])
    c = np.vecdot(h, t)
    c /= -d
    t *= c[:, None]
    t += h
    s1 /= d
    t -= s1[:, None]
    t *= r[:, None]


def _ln_kernel(g, ans, input, weight, bias, mean, rstd, needs, normalized_shape, eps):
    # The three gradients in one sweep over cached row blocks (PyTorch's fused backward):
    # xh rebuilt once for dx and dw, db = sum over rows of g. Passes over a block: 9 with
    # a weight taking a gradient (2 xh, 1 dw, 6 dx), where three rules took 12 and three
    # calls (the weight's rule rebuilt xh, the bias's was summed by the node); 2 + 1 for
    # dw alone (a frozen input). Allocations: the gradients returned, and one row block
    # (h = g w, or xh when dx is not asked).
    x2, w, shape, ns = _operands(input, weight, normalized_shape)
    need_x, need_w, need_b = needs
    g2 = reshaped(g, x2.shape)
    dtype = np.result_type(g, x2)
    rb, blocks = row_blocks(x2.shape[0], x2.shape[1] * dtype.itemsize)
    dw = zeros(x2.shape[1], dtype) if need_w and weight is not None else None
    db = g2.sum(axis=0) if need_b and bias is not None else None
    dx = empty(x2.shape, dtype) if need_x else None
    if need_x or dw is not None:
        tbuf = None if need_x else empty((rb, x2.shape[1]), dtype)
        hbuf = False if not need_x else None if w is None else empty((rb, x2.shape[1]), dtype)
        for a, e in blocks:
            t = dx[a:e] if need_x else tbuf[:e - a]
            _ln_block(t, x2[a:e], g2[a:e], mean[a:e], rstd[a:e], w, hbuf, dw)
    return (None if dx is None else dx.reshape(shape), None if dw is None else dw.reshape(ns),
            None if db is None else db.reshape(ns))


def _ln_parts(g, input, weight, normalized_shape, eps) -> tuple:
    """(g as rows, x normalized (xh), 1/std, the weight as (D,) or None) with ops."""
    shape, ns = _shape(input), _normalized(normalized_shape)
    rows, d = _rows_of(shape, ns)
    x = S.reshape(_float(input) if not isinstance(input, Tensor) else input, (rows, d))
    xc = x - R.mean(x, dim=1, keepdim=True)
    r = PW.rsqrt(R.mean(xc * xc, dim=1, keepdim=True) + eps)
    w = None if weight is None else S.reshape(weight, (d,))
    return S.reshape(g, (rows, d)), xc * r, r, w


def _ln_input_formula(g, ans, input, weight, bias, normalized_shape, eps):
    g2, xh, r, w = _ln_parts(g, input, weight, normalized_shape, eps)
    h = g2 if w is None else g2 * w
    d = r * (h - R.mean(h, dim=1, keepdim=True) - xh * R.mean(h * xh, dim=1, keepdim=True))
    return S.reshape(d, _shape(input))


def _ln_weight_formula(g, ans, input, weight, bias, normalized_shape, eps):
    g2, xh, _, _ = _ln_parts(g, input, None, normalized_shape, eps)
    return S.reshape(R.sum(g2 * xh, dim=0), _normalized(normalized_shape))


def _bias_formula(g, ans, input, weight, bias, normalized_shape, eps):
    ns = _normalized(normalized_shape)      # g summed over the leading dims
    return S.reshape(R.sum(S.reshape(g, (-1, math.prod(ns))), dim=0), ns)


def _ln_formula(g, ans, input, weight, bias, normalized_shape, eps):
    """The three gradients with ops (create_graph; None for an absent parameter)."""
    args = (g, ans, input, weight, bias, normalized_shape, eps)
    return (_ln_input_formula(*args), None if weight is None else _ln_weight_formula(*args),
            None if bias is None else _bias_formula(*args))


@defop(dtypes="floating", inputs=("input", "weight", "bias"),
       formula=Joint(_ln_formula), kernel=Joint(_ln_kernel), unsaved=("result",),
       module="torch.nn.functional")
def layer_norm(input: Tensor, normalized_shape, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5, *,
               needs_input_grad=(True, True, True)) -> Tensor:
    """Normalize over the trailing `normalized_shape` dims (biased variance), then
    scale by `weight` and shift by `bias` (both of shape `normalized_shape`).

    One node keeping the input and each row's mean and 1/std. Forward per row block
    (cache resident): mean (a BLAS matvec up to D = 256), x - mean, variance (a row
    dot), scale, weight, bias: 6 passes over the block, the least with numpy's ufuncs
    (each reads or writes the block once; the variance needs the mean first, to not
    cancel). The output is the only full-size allocation.
    """
    ns = _normalized(normalized_shape)
    _check_trailing("layer_norm", np.asarray(input), ns, (("weight", weight), ("bias", bias)))
    _same_dtype("layer_norm", np.asarray(input).dtype, (("weight", weight), ("bias", bias)))
    x2, w, shape, _ = _operands(input, weight, ns)
    b = None if bias is None else np.asarray(bias).reshape(x2.shape[1])
    d, dtype = x2.shape[1], x2.dtype
    y = empty(x2.shape, dtype)
    mean, rstd = empty(x2.shape[0], dtype), empty(x2.shape[0], dtype)
    # rows of up to _MATVEC_MEAN: the mean as a BLAS matvec (4-6x np.mean's pairwise row
    # sums at D = 64; its 8-lane running sums add no error there, and past a few hundred
    # elements they did: float32 D = 4096, mean 1000: 4.7x the output error)
    inv_d = np.full(d, 1 / max(d, 1), dtype) if d <= _MATVEC_MEAN else None
    for a, e in row_blocks(x2.shape[0], d * dtype.itemsize)[1]:
        t, m, r = y[a:e], mean[a:e], rstd[a:e]
        if inv_d is None:
            np.mean(x2[a:e], axis=1, out=m)
        else:
            np.matmul(x2[a:e], inv_d, out=m)
        np.subtract(x2[a:e], m[:, None], out=t)
        _inv_sqrt(np.vecdot(t, t) / d + eps, out=r)
        t *= r[:, None]
        if w is not None:
            t *= w
        if b is not None:
            t += b
    return Saved(y.reshape(shape), mean, rstd, tuple(needs_input_grad))


def _rms_eps(eps, dtype) -> float:
    return float(np.finfo(dtype).eps) if eps is None else eps


def _rms_input_kernel(g, ans, input, weight, rr, normalized_shape, eps):
    # rr h - x rr^3 mean(h x), h = g w (a block temporary when weighted), per row
    # block: one row reduction, then scale, add, scale: 4 passes over the block.
    x2, w, shape, _ = _operands(input, weight, normalized_shape)
    d = x2.shape[1]
    g2, out, blocks, hbuf = _rule_setup(g, x2, w)
    for a, e in blocks:
        r = rr[a:e]
        h = g2[a:e] if w is None else np.multiply(g2[a:e], w, out=hbuf[:e - a])
        c = np.vecdot(h, x2[a:e]) * (r * r / -d)
        t = np.multiply(x2[a:e], c[:, None], out=out[a:e])
        t += h
        t *= r[:, None]
    return out.reshape(shape)


def _rms_weight_kernel(g, ans, input, weight, rr, normalized_shape, eps):
    # sum over rows of g x rr, x rr rebuilt per row block in a block temporary
    x2, _, _, ns = _operands(input, None, normalized_shape)
    return _weighted_column_sums(reshaped(g, x2.shape), x2, None, rr).reshape(ns)


def _rms_parts(g, input, weight, normalized_shape, eps) -> tuple:
    shape, ns = _shape(input), _normalized(normalized_shape)
    rows, d = _rows_of(shape, ns)
    x = S.reshape(_float(input) if not isinstance(input, Tensor) else input, (rows, d))
    r = PW.rsqrt(R.mean(x * x, dim=1, keepdim=True) + _rms_eps(eps, array(x).dtype))
    w = None if weight is None else S.reshape(weight, (d,))
    return S.reshape(g, (rows, d)), x, r, w


def _rms_input_formula(g, ans, input, weight, normalized_shape, eps):
    g2, x, r, w = _rms_parts(g, input, weight, normalized_shape, eps)
    h = g2 if w is None else g2 * w
    d = r * h - x * (r * r * r) * R.mean(h * x, dim=1, keepdim=True)
    return S.reshape(d, _shape(input))


def _rms_weight_formula(g, ans, input, weight, normalized_shape, eps):
    g2, x, r, _ = _rms_parts(g, input, None, normalized_shape, eps)
    return S.reshape(R.sum(g2 * (x * r), dim=0), _normalized(normalized_shape))


@defop(inputs=("input", "weight"), formula=(_rms_input_formula, _rms_weight_formula),
       dtypes="inexact",
       kernel=(_rms_input_kernel, _rms_weight_kernel), unsaved=("result",),
       module="torch.nn.functional")
def rms_norm(input: Tensor, normalized_shape, weight: Tensor | None = None,
             eps: float | None = None) -> Tensor:
    """`x / sqrt(mean(x**2) + eps) * weight` over the trailing `normalized_shape` dims;
    `eps=None` is the machine epsilon of the input's dtype, as in PyTorch.

    One node keeping the input and each row's 1/rms. Forward: one row reduction and
    two scaling passes (per row block); the output is the only full-size allocation.
    """
    ns = _normalized(normalized_shape)
    _check_trailing("rms_norm", np.asarray(input), ns, (("weight", weight),))
    x2, w, shape, _ = _operands(input, weight, ns)
    d, dtype = x2.shape[1], x2.dtype
    eps = _rms_eps(eps, dtype)
    y, rr = empty(x2.shape, dtype), empty(x2.shape[0], dtype)
    for a, e in row_blocks(x2.shape[0], d * dtype.itemsize)[1]:
        r = _inv_sqrt(np.vecdot(x2[a:e], x2[a:e]) / d + eps, out=rr[a:e])
        np.multiply(x2[a:e], r[:, None], out=y[a:e])
        if w is not None:
            y[a:e] *= w
    return Saved(y.reshape(shape), rr)


# ---- batch_norm's node: normalize_channels ------------------------------------------------------
def _as_ncs(x: np.ndarray) -> np.ndarray:
    """x (N, C, *) as (N, C, S): a view when x is contiguous."""
    return reshaped(x, (x.shape[0], x.shape[1], math.prod(x.shape[2:])))


def _center_and_dot(x3, mean, g3=None):
    """Per channel sum((x3 - mean)^2) (`g3` None) or (sum(g3), sum(g3 (x3 - mean))), the
    centring per block of samples into a block temporary, each block reduced while in
    cache: 2 passes over a block (3 with g3), nothing full-size."""
    n, c, s = x3.shape
    dtype = x3.dtype if g3 is None else np.result_type(x3, g3)
    rb, blocks = row_blocks(n, c * s * dtype.itemsize)
    buf = empty((rb, c, s), dtype)
    dot = np.zeros(c, dtype)
    sg = None if g3 is None else np.zeros(c, dtype)
    for a, b in blocks:
        t = np.subtract(x3[a:b], mean[:, None], out=buf[:b - a])
        if g3 is None:
            dot += np.einsum("ncs,ncs->c", t, t)
        else:
            sg += g3[a:b].sum(axis=_AXES)
            dot += np.einsum("ncs,ncs->c", g3[a:b], t)
    return dot if g3 is None else (sg, dot)


def _bn_input_kernel(g, ans, input, weight, bias, mean, rstd, training, eps):
    # Evaluation: g a (a = rstd w per channel), 1 pass. Training: rstd (h - mean(h) - xh
    # mean(h xh)), h = g w, xh = (x - mean) rstd, as a g - c0 - (x - mean) k with per
    # channel a, c0 = a sum(g) / m, k = a rstd^2 sum(g (x - mean)) / m: per block, the
    # centring into a block temporary and the two sums (reading x and g), then per block
    # the centring into the result, scale, g a into the block temporary, add, shift
    # (reading x and g again, writing the result once). The result is the only
    # full-size allocation.
    x3 = _as_ncs(np.asarray(input))
    g3 = reshaped(g, x3.shape)
    a = rstd if weight is None else rstd * weight
    out = empty(x3.shape, np.result_type(g, x3))
    if not training:
        np.multiply(g3, a[:, None], out=out)
        return out.reshape(input.shape)
    n, c, s = x3.shape
    if n * s == 0:                      # an empty batch: an empty gradient
        return out.reshape(input.shape)
    sg, sgx = _center_and_dot(x3, mean, g3)
    k = a * rstd * rstd * sgx / (n * s)
    c0 = a * sg / (n * s)
    rb, blocks = row_blocks(n, c * s * out.itemsize)
    buf = empty((rb, c, s), out.dtype)
    for i, j in blocks:
        t = np.subtract(x3[i:j], mean[:, None], out=out[i:j])
        t *= -k[:, None]
        t += np.multiply(g3[i:j], a[:, None], out=buf[:j - i])
        t -= c0[:, None]
    return out.reshape(input.shape)


def _bn_weight_kernel(g, ans, input, weight, bias, mean, rstd, training, eps):
    # sum over samples and positions of g (x - mean) rstd, the centring in a block
    # temporary: 3 passes over a block, nothing full-size. No value: 0, as PyTorch's
    # (not 0 times the NaN statistics of an empty batch)
    x3 = _as_ncs(np.asarray(input))
    if x3.size == 0:
        return np.zeros(x3.shape[1], np.result_type(g, x3))
    return _center_and_dot(x3, mean, reshaped(g, x3.shape))[1] * rstd


def _bn_parts(g, input, mean, rstd, training, eps) -> tuple:
    """(g as (N, C, S), normalized x, 1/std as (1, C, 1)) with ops: in training both
    recomputed from the input (the derivative goes through them), in evaluation the
    given statistics (constants)."""
    shape = _shape(input)
    n3 = (shape[0], shape[1], math.prod(shape[2:]))
    x = S.reshape(input, n3)
    if training:
        xc = x - R.mean(x, dim=_AXES, keepdim=True)
        r = PW.rsqrt(R.mean(xc * xc, dim=_AXES, keepdim=True) + eps)
        return S.reshape(g, n3), xc * r, r
    r = np.reshape(rstd, (1, -1, 1))
    return S.reshape(g, n3), (x - np.reshape(mean, (1, -1, 1))) * r, r


def _bn_input_formula(g, ans, input, weight, bias, mean, rstd, training, eps):
    g3, xh, r = _bn_parts(g, input, mean, rstd, training, eps)
    w = None if weight is None else S.reshape(weight, (1, -1, 1))
    if not training:
        return S.reshape(g3 * (r if w is None else w * r), _shape(input))
    h = g3 if w is None else g3 * w
    d = r * (h - R.mean(h, dim=_AXES, keepdim=True)
             - xh * R.mean(h * xh, dim=_AXES, keepdim=True))
    return S.reshape(d, _shape(input))


def _bn_weight_formula(g, ans, input, weight, bias, mean, rstd, training, eps):
    g3, xh, _ = _bn_parts(g, input, mean, rstd, training, eps)
    return R.sum(g3 * xh, dim=_AXES)


def _bn_bias_formula(g, ans, input, weight, bias, mean, rstd, training, eps):
    shape = _shape(input)
    return R.sum(S.reshape(g, (shape[0], shape[1], math.prod(shape[2:]))), dim=_AXES)


@defop(inputs=("input", "weight", "bias"),
       formula=(_bn_input_formula, _bn_weight_formula, _bn_bias_formula),
       kernel=(_bn_input_kernel, _bn_weight_kernel, None), unsaved=("result",),
       export=False, name="batch_norm")
def normalize_channels(input: Tensor, weight: Tensor | None, bias: Tensor | None,
                       mean: Tensor, rstd: Tensor, training: bool, eps: float) -> Tensor:
    """`(x - mean) * rstd * weight + bias` per channel of an (N, C, *) input, `mean` and
    `rstd` (1/std) given per channel: the batch's own (`training`: the derivative goes
    through them, recomputed from the input) or running ones (constants). Per block of
    samples (cache resident): subtract, scale, shift; the output the only allocation."""
    x = np.asarray(input)
    x3 = _as_ncs(x)
    a = rstd if weight is None else rstd * np.asarray(weight)
    y = empty(x3.shape, x3.dtype)
    n, c, s = x3.shape
    for i, j in row_blocks(n, c * s * x3.itemsize)[1]:
        t = np.subtract(x3[i:j], mean[:, None], out=y[i:j])
        t *= a[:, None]
        if bias is not None:
            t += np.asarray(bias)[:, None]
    return y.reshape(x.shape)


# ---- batch_norm's checks and statistics ----------------------------------------------------------
def _channels_input(name: str, input) -> tuple:
    """(x, x as (N, C, S))."""
    x = array(input)
    if x.ndim < 2:
        raise IndexError(f"{name}: expected an input (N, C, *) of at least 2 dimensions, "
                         f"got shape {x.shape} (Dimension out of range)")
    if x.dtype.kind != "f":
        raise TypeError(f"{name}: expected a floating-point input, got dtype {x.dtype}")
    return x, _as_ncs(x)


def _same_dtype(name: str, x_dtype: np.dtype, params) -> None:
    """PyTorch's CPU rule for the norms: `params` ((what, tensor or None), ...) have the
    floating input's dtype (a float16 input may have float32 ones); RuntimeError
    otherwise, where numpy would silently compute in the wider dtype."""
    if x_dtype.kind != "f":
        return
    for what, p in params:
        d = None if p is None else array(p).dtype
        if d is None or d == x_dtype or (x_dtype == np.float16 and d == np.float32):
            continue
        raise RuntimeError(f"{name}: mixed dtype (CPU): all inputs must share same datatype "
                           f"(the input is {x_dtype}, {what} {d}: convert one, e.g. the "
                           f"input with .to(dtype) or the module with .to(dtype))")


def _per_channel(name: str, what: str, p, c: int):
    if p is None:
        return None
    a = array(p)
    if a.shape != (c,):
        raise RuntimeError(f"{name}: {what} shape {a.shape} does not match the input's {c} "
                           f"channels: {what} should contain {c} elements")
    return a


def _check_running(name: str, running_mean, running_var, c: int) -> None:
    if (running_mean is None) != (running_var is None):
        raise ValueError(f"{name}: running_mean and running_var must either both be None "
                         f"or both be given")
    for what, r in (("running_mean", running_mean), ("running_var", running_var)):
        if r is None:
            continue
        if not isinstance(r, (Tensor, np.ndarray)):
            raise TypeError(f"{name}: {what} must be a Tensor or an ndarray (updated in "
                            f"place), got {type(r).__name__}")
        a = array(r)
        if a.shape != (c,):
            raise RuntimeError(f"{name}: {what} should contain {c} elements, got shape "
                               f"{a.shape}")
        if a.dtype.kind != "f":
            raise ValueError(f"{name}: {what} must be a floating array, got dtype {a.dtype}")
        if not a.flags.writeable:
            raise ValueError(f"{name}: {what} is read-only; it is updated in place")


def _check_eps(name: str, eps, training: bool) -> float:
    eps = float(eps)
    if training and not eps > 0:
        raise ValueError(f"{name}: eps must be positive in training, got {eps}")
    if not eps >= 0:
        raise ValueError(f"{name}: eps must be non-negative, got {eps}")
    return eps


def _check_momentum(name: str, momentum) -> float:
    if isinstance(momentum, bool) or not isinstance(momentum, numbers.Real):
        raise TypeError(f"{name}: momentum must be a number, got {momentum!r}")
    return float(momentum)


def _batch_stats(x3: np.ndarray) -> tuple:
    """(mean, biased variance) per channel of (N, C, S); NaN for an empty batch."""
    n, c, s = x3.shape
    if n * s == 0:                      # no value per channel: no statistics (the output
        nan = np.full(c, np.nan, x3.dtype)  # is empty)
        return nan, nan.copy()
    mean = x3.mean(axis=_AXES)
    return mean, _center_and_dot(x3, mean) / (n * s)


def _update_running(running_mean, running_var, mean, unbiased_var, momentum,
                    counter=None, seen: bool = True) -> None:
    """running = (1 - f) running + f batch for both, in place, atomically (one lock),
    each write bumping the tensor's version counter. f is `momentum`; with a `counter`
    (a module's num_batches_tracked) the counter is incremented first, and momentum None
    means the cumulative average f = 1 / count (PyTorch's BatchNorm). An empty batch
    (`seen` False) only counts, as in PyTorch: the statistics stay as they are."""
    with _UPDATES._lock:
        factor = 0.0 if momentum is None else momentum
        if counter is not None:
            c = array(counter)
            np.add(c, 1, out=c)
            if isinstance(counter, Tensor):
                version.bump(counter)
            if momentum is None:
                factor = 1.0 / float(c)
        if not seen:
            return
        for r, new in ((running_mean, mean), (running_var, unbiased_var)):
            d = array(r)
            d *= 1.0 - factor
            d += factor * new
            if isinstance(r, Tensor):
                version.bump(r)


def batch_norm_counted(name: str, input, running_mean, running_var, weight, bias,
                       training: bool, momentum, eps, counter=None) -> Tensor:
    """batch_norm (`name` in its messages), with a module's `num_batches_tracked` as
    `counter`: incremented with each training update, and `momentum` None (with a
    counter) is the cumulative average (PyTorch's BatchNorm layers)."""
    x, x3 = _channels_input(name, input)
    n, c, s = x3.shape
    _per_channel(name, "weight", weight, c)
    _per_channel(name, "bias", bias, c)
    _check_running(name, running_mean, running_var, c)
    _same_dtype(name, x.dtype, (("weight", weight), ("bias", bias),
                                ("running_mean", running_mean), ("running_var", running_var)))
    training = bool(training)
    eps = _check_eps(name, eps, training)
    if training and n * s == 1:         # PyTorch's check: an empty batch passes
        raise ValueError(f"{name}: expected more than 1 value per channel when training, "
                         f"got input size {x.shape}")
    if not training and running_mean is None:
        raise RuntimeError(f"{name}: running_mean and running_var must be given in "
                           f"evaluation mode (training=False)")
    if training:
        mean, var = _batch_stats(x3)
        if running_mean is not None:
            _update_running(running_mean, running_var, mean,
                            var * (n * s / max(n * s - 1, 1)), momentum, counter,
                            seen=n * s > 0)
    else:    # copies: the node must not see later updates of the running statistics
        mean = np.array(array(running_mean), dtype=x3.dtype)
        var = np.array(array(running_var), dtype=x3.dtype)
    rstd = _inv_sqrt(var + eps, out=np.empty_like(var))
    return normalize_channels(input, weight, bias, mean, rstd, training, eps)


@composite(dtypes="floating", module="torch.nn.functional")
def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None,
               training: bool = False, momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Batch normalization over the channels of (N, C), (N, C, L), (N, C, H, W), ...:
    `(x - mean) / sqrt(var + eps) * weight + bias` per channel.

    `training=True` normalizes with the batch's mean and biased variance over every
    dimension but the channels (more than one value per channel is required) and, if
    `running_mean` / `running_var` (Tensors or arrays of shape (C,); both or neither)
    are given, updates them in place: `(1 - momentum) * running + momentum * batch`,
    the variance unbiased, as PyTorch. `training=False` normalizes with the running
    statistics (required). `weight` and `bias` (C,) are optional. One node.
    """
    return batch_norm_counted("batch_norm", input, running_mean, running_var, weight, bias,
                              training, _check_momentum("batch_norm", momentum), eps)


def _repeated(p, n: int):
    """A per-channel parameter (C,) repeated for each of n samples, (n*C,): recorded ops
    when it is a Tensor (its gradient is summed back over the samples)."""
    if p is None:
        return None
    if isinstance(p, Tensor):
        c = p.shape[0]
        return S.reshape(S.broadcast_to(S.reshape(p, (1, c)), (n, c)), (n * c,))
    return np.tile(array(p), n)


@composite(dtypes="floating", module="torch.nn.functional")
def instance_norm(input: Tensor, running_mean: Tensor | None = None,
                  running_var: Tensor | None = None, weight: Tensor | None = None,
                  bias: Tensor | None = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalization of each sample's channels over their positions, input (N, C, *)
    with more than one position: `(x - mean) / sqrt(var + eps) * weight + bias`, the
    statistics per (sample, channel). Given `running_mean` / `running_var` (C,), they are
    updated in place with the momentum and the samples' average mean and unbiased
    variance, as PyTorch. `use_input_stats=False` normalizes with the running
    statistics instead (batch_norm in evaluation)."""
    name = "instance_norm"
    x, x3 = _channels_input(name, input)
    n, c, s = x3.shape
    _per_channel(name, "weight", weight, c)
    _per_channel(name, "bias", bias, c)
    _check_running(name, running_mean, running_var, c)
    _same_dtype(name, x.dtype, (("weight", weight), ("bias", bias),
                                ("running_mean", running_mean), ("running_var", running_var)))
    momentum = _check_momentum(name, momentum)
    if not use_input_stats:
        if running_mean is None:
            raise RuntimeError(f"{name}: running_mean and running_var must be given when "
                               f"use_input_stats is False")
        return batch_norm_counted(name, input, running_mean, running_var, weight, bias,
                                  False, momentum, eps)
    eps = _check_eps(name, eps, True)
    if s == 1:                          # PyTorch's check: no position at all passes
        raise ValueError(f"{name}: expected more than 1 spatial element when training, "
                         f"got input size {x.shape}")
    flat = S.reshape(input, (1, n * c, s))
    mean, var = _batch_stats(flat._data)
    if running_mean is not None and n * s:  # nothing seen: left as they are
        _update_running(running_mean, running_var, mean.reshape(n, c).mean(axis=0),
                        (var * (s / (s - 1))).reshape(n, c).mean(axis=0), momentum)
    rstd = _inv_sqrt(var + eps, out=np.empty_like(var))
    out = normalize_channels(flat, _repeated(weight, n), _repeated(bias, n), mean, rstd,
                             True, eps)
    return S.reshape(out, x.shape)


# ---- group_norm and local_response_norm: compositions -----------------------------------------
def _channel_view(p, ndim: int):
    """A per-channel parameter shaped (C, 1, ...) to broadcast over (N, C, *)."""
    shape = (-1,) + (1,) * (ndim - 2)
    return S.reshape(p, shape) if isinstance(p, Tensor) else array(p).reshape(shape)


@composite(dtypes="floating", module="torch.nn.functional")
def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalization over groups of channels: input (N, C, *) with C divisible by
    `num_groups`, each sample's group of C/num_groups channels normalized over those
    channels and all positions (biased variance), then `weight` and `bias` (C,) per
    channel. layer_norm's fused node over (N, num_groups, -1), then two ops."""
    name = "group_norm"
    x, x3 = _channels_input(name, input)
    n, c, s = x3.shape
    if isinstance(num_groups, bool) or not isinstance(num_groups, numbers.Integral) \
            or num_groups < 1 or c % num_groups:
        raise RuntimeError(f"{name}: expected the number of channels ({c}) to be divisible "
                           f"by num_groups, a positive integer, got {num_groups!r}")
    for what, p in (("weight", weight), ("bias", bias)):
        if p is not None and array(p).shape != (c,):
            raise RuntimeError(f"{name}: expected {what} to be a vector of size equal to the "
                               f"number of channels ({c}), got {what} shape "
                               f"{array(p).shape}")
    _same_dtype(name, x.dtype, (("weight", weight), ("bias", bias)))
    eps = _check_eps(name, eps, False)
    if n * c // num_groups * s == 1:       # PyTorch's check
        raise ValueError(f"{name}: expected more than 1 value per channel when training, "
                         f"got input size {x.shape}")
    d = c // int(num_groups) * s
    y = S.reshape(layer_norm(S.reshape(input, (n, int(num_groups), d)), (d,), eps=eps),
                  x.shape)
    if weight is not None:
        y = y * _channel_view(weight, x.ndim)
    if bias is not None:
        y = y + _channel_view(bias, x.ndim)
    return y


@composite(dtypes=("int64", "floating"), module="torch.nn.functional")
def local_response_norm(input: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75,
                        k: float = 1.0) -> Tensor:
    """`x / (k + alpha * avg(x**2)) ** beta`, the average over the `size` channels
    around each one (c - size//2 .. c + (size-1)//2, zero outside, divided by `size`),
    input (N, C, *) of at least 3 dimensions. PyTorch's composition: the squares padded
    with zero channels, their sums over `size` neighbouring channels (`size` shifted
    slices added), pow and a division."""
    name = "local_response_norm"
    t = input if isinstance(input, Tensor) else Tensor._wrap(np.asarray(input))
    if t._data.ndim < 3:
        raise ValueError(f"{name}: expected an input of 3 or more dimensions (N, C, *), "
                         f"got shape {t.shape}")
    if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1:
        raise RuntimeError(f"{name}: size must be a positive integer, got {size!r}")
    if t._data.size == 0:
        return t
    shape = t.shape
    n, c, s = shape[0], shape[1], math.prod(shape[2:])
    sq = S.reshape(t * t, (n, c, s))
    before, after = size // 2, (size - 1) // 2
    parts = [np.zeros((n, before, s), t.dtype)] if before else []
    parts += [sq] + ([np.zeros((n, after, s), t.dtype)] if after else [])
    padded = S.concat(parts, 1) if len(parts) > 1 else sq
    total = S.getitem(padded, (slice(None), slice(0, c)))
    for i in range(1, size):
        total = total + S.getitem(padded, (slice(None), slice(i, i + c)))
    avg = S.reshape(total, shape) / size
    return t / (avg * alpha + k) ** beta
