"""Normalization over channels (PyTorch's `torch.nn.functional` signatures): batch_norm,
instance_norm, group_norm, local_response_norm.

- batch_norm is one node, like layer_norm: inputs (N, C), (N, C, L), (N, C, H, W), ...
  are seen as (N, C, S). Training normalizes with the batch's statistics per channel
  (biased variance) and, when running statistics are given, updates them in place with
  the momentum and the unbiased variance, as PyTorch; evaluation normalizes with the
  running statistics (a per-channel affine map). The node keeps the input and each
  channel's mean and 1/std (copies of the running ones in evaluation: a later update
  cannot change what backward reads). Its rules are fused, per block of samples
  (cache resident); its twins (create_graph) are their formulas written with ops.
- instance_norm is batch_norm's kernel on the input seen as (1, N*C, S), its weight
  and bias repeated N times (recorded ops, so they get their gradients summed back),
  as PyTorch computes it; with `use_input_stats=False` it is batch_norm in evaluation.
- group_norm is layer_norm's fused kernel over (N, groups, C/groups * S), then the
  per-channel weight and bias as ops; local_response_norm is PyTorch's own composition
  (squares, a zero-padded average over neighbouring channels, pow, divide).

Running statistics. Every check (shapes, dtypes, sizes, eps) runs before anything is
written, and the statistics are written only after the output is computed, so a failed
forward leaves them, and `num_batches_tracked`, as they were. Each update (the counter's
increment, the momentum it implies, both running arrays and their version counters) is
atomic under one lock: concurrent training forwards of one module each apply their
batch's update whole (in whichever order the threads get there), and the counter counts
every one. Reading the statistics while another thread trains the module is the usual
data race (nn/module.py: a module is not to be mutated while it is used).
"""
from __future__ import annotations

import math
import numbers
import threading

import numpy as np

from .. import locks, version
from ..memory import empty as _empty
from ..node import graph_input
from ..ops import elementwise as E
from ..ops import reduce as R
from ..ops import shape as S
from ..ops.graph import _t
from ..primitive import record
from ..tensor import Tensor
from . import functional as F

__all__ = ["batch_norm", "instance_norm", "group_norm", "local_response_norm"]

_AXES = (0, 2)   # what batch_norm reduces of (N, C, S): all but the channels


class _UpdateLock:
    """Holds the lock that makes each running-statistics update atomic (renewed in a fork
    child: `locks.track`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()


_UPDATES = _UpdateLock()
locks.track(_UPDATES)


def _raw(x):
    return x.data if isinstance(x, Tensor) else np.asarray(x)


# ---- checks ---------------------------------------------------------------------------------
def _channels_input(name: str, input) -> tuple:
    """(x, x as (N, C, S): a view when x is contiguous)."""
    x = _raw(input)
    if x.ndim < 2:
        raise ValueError(f"{name}: expected an input (N, C, *) of at least 2 dimensions, "
                         f"got shape {x.shape}")
    if x.dtype.kind != "f":
        raise TypeError(f"{name}: expected a floating-point input, got dtype {x.dtype}")
    return x, F._reshape(x, (x.shape[0], x.shape[1], math.prod(x.shape[2:])))


def _per_channel(name: str, what: str, p, c: int):
    if p is None:
        return None
    a = _raw(p)
    if a.shape != (c,):
        raise ValueError(f"{name}: {what} shape {a.shape} does not match the input's {c} "
                         f"channels (expected ({c},))")
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
        a = _raw(r)
        if a.shape != (c,) or a.dtype.kind != "f":
            raise ValueError(f"{name}: {what} must be a floating array of shape ({c},), "
                             f"got shape {a.shape} and dtype {a.dtype}")
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


# ---- batch_norm's kernels --------------------------------------------------------------------
def _center_and_dot(x3, mean, out, g3=None):
    """`out` = x3 - mean per channel (None: into a block temporary), per block of samples,
    each block then reduced while in cache: returns per channel sum(out * out) (`g3`
    None) or (sum(g3), sum(g3 * out)). 2 passes over a block (3 with g3)."""
    n, c, s = x3.shape
    dtype = x3.dtype if g3 is None else np.result_type(x3, g3)
    rb, blocks = F._row_blocks(n, c * s * dtype.itemsize)
    buf = _empty((rb, c, s), dtype) if out is None else None
    dot = np.zeros(c, dtype)
    sg = None if g3 is None else np.zeros(c, dtype)
    for a, b in blocks:
        t = np.subtract(x3[a:b], mean[:, None], out=buf[:b - a] if out is None else out[a:b])
        if g3 is None:
            dot += np.einsum("ncs,ncs->c", t, t)
        else:
            sg += g3[a:b].sum(axis=_AXES)
            dot += np.einsum("ncs,ncs->c", g3[a:b], t)
    return dot if g3 is None else (sg, dot)


def _bn_compute(x3, w, b, training: bool, running_mean, running_var, eps: float) -> tuple:
    """(y as (N, C, S), mean, biased variance, 1/std) per channel. Passes: the mean's,
    the centring and the squares' sum (per block), the scale and the shift; the output
    is the only full-size allocation."""
    y = _empty(x3.shape, x3.dtype)
    if training and x3.shape[0] * x3.shape[2] == 0:  # no value per channel: no statistics
        mean = np.full(x3.shape[1], np.nan, x3.dtype)  # (the output is empty)
        var = mean.copy()
    elif training:
        mean = x3.mean(axis=_AXES)
        var = _center_and_dot(x3, mean, y) / (x3.shape[0] * x3.shape[2])
    else:   # copies: the node must not see later updates of the running statistics
        mean = np.array(_raw(running_mean), dtype=x3.dtype)
        var = np.array(_raw(running_var), dtype=x3.dtype)
        np.subtract(x3, mean[:, None], out=y)
    rstd = F._inv_sqrt(var + eps, out=np.empty_like(var))
    y *= (rstd if w is None else rstd * w)[:, None]
    if b is not None:
        y += b[:, None]
    return y, mean, var, rstd


def _bn_record(name, input, weight, bias, y, x3, shape, mean, rstd, w, training, eps):
    inputs, vjps = F._norm_inputs((input, _bn_vjp_x), (weight, _bn_vjp_w), (bias, _bn_vjp_b))
    return record(name, y.reshape(shape), inputs, vjps, saved=(x3, mean, rstd, w),
                  kwargs=dict(shape=shape, train=training, eps=eps))


def _bn_vjp_x(g, x3, mean, rstd, w, shape, train, eps):
    # Evaluation: g a (a = rstd w per channel), 1 pass. Training: rstd (h - mean(h) - xh
    # mean(h xh)), h = g w, xh = (x - mean) rstd, as a g - c0 - (x - mean) k with per
    # channel a, c0 = a sum(g) / m, k = a rstd^2 sum(g (x - mean)) / m: per block, the
    # centring into a block temporary and the two sums (reading x and g), then per block
    # the centring into the result, scale, g a into the block temporary, add, shift
    # (reading x and g again, writing the result once). The result is the only
    # full-size allocation.
    g3 = F._reshape(g, x3.shape)
    a = rstd if w is None else rstd * w
    out = _empty(x3.shape, np.result_type(g, x3))
    if not train:
        np.multiply(g3, a[:, None], out=out)
        return out.reshape(shape)
    n, c, s = x3.shape
    sg, sgx = _center_and_dot(x3, mean, None, g3)
    k = a * rstd * rstd * sgx / (n * s)
    c0 = a * sg / (n * s)
    rb, blocks = F._row_blocks(n, c * s * out.itemsize)
    buf = _empty((rb, c, s), out.dtype)
    for i, j in blocks:
        t = np.subtract(x3[i:j], mean[:, None], out=out[i:j])
        t *= -k[:, None]
        t += np.multiply(g3[i:j], a[:, None], out=buf[:j - i])
        t -= c0[:, None]
    return out.reshape(shape)


def _bn_vjp_w(g, x3, mean, rstd, w, shape, train, eps):
    # sum over samples and positions of g (x - mean) rstd, the centring in a block
    # temporary: 3 passes over a block, nothing full-size. No value: 0, as PyTorch's
    # (not 0 times the NaN statistics of an empty batch)
    if x3.size == 0:
        return np.zeros(x3.shape[1], np.result_type(g, x3))
    return _center_and_dot(x3, mean, None, F._reshape(g, x3.shape))[1] * rstd


def _bn_vjp_b(g, x3, mean, rstd, w, shape, train, eps):
    # one reduction pass over g
    return F._reshape(g, x3.shape).sum(axis=_AXES)


# ---- batch_norm's twins (create_graph) -------------------------------------------------------
def _bn_graph_parts(g, node) -> tuple:
    """(g as (N, C, S), normalized x, 1/std as (1, C, 1)) with ops: in training both
    recomputed from the input, in evaluation from the saved running statistics."""
    x3, mean, rstd, _ = node.saved
    x = S.reshape(_t(graph_input(node, 0, x3.reshape(node.kwargs["shape"]))), x3.shape)
    g3 = S.reshape(g, x3.shape)
    if node.kwargs["train"]:
        xc = x - R.mean(x, axis=_AXES, keepdims=True)
        r = E.pow(R.mean(xc * xc, axis=_AXES, keepdims=True) + node.kwargs["eps"], -0.5)
        return g3, xc * r, r
    r = rstd[:, None]
    return g3, (x - mean[:, None]) * r, r


def _bn_graph_weight(node):
    w = node.saved[3]
    return None if w is None else S.reshape(_t(graph_input(node, 1, w)), (-1, 1))


def _bn_graph_x(g, node):
    w = _bn_graph_weight(node)
    x3 = node.saved[0]
    if not node.kwargs["train"]:
        a = node.saved[2][:, None] if w is None else w * node.saved[2][:, None]
        return S.reshape(S.reshape(g, x3.shape) * a, node.kwargs["shape"])
    g3, xh, r = _bn_graph_parts(g, node)
    h = g3 if w is None else g3 * w
    d = r * (h - R.mean(h, axis=_AXES, keepdims=True)
             - xh * R.mean(h * xh, axis=_AXES, keepdims=True))
    return S.reshape(d, node.kwargs["shape"])


def _bn_graph_w(g, node):
    g3, xh, _ = _bn_graph_parts(g, node)
    return R.sum(g3 * xh, axis=_AXES)


_bn_vjp_x.graph_node = _bn_graph_x
_bn_vjp_w.graph_node = _bn_graph_w
_bn_vjp_b.graph_node = lambda g, node: R.sum(S.reshape(g, node.saved[0].shape), axis=_AXES)


# ---- running statistics ---------------------------------------------------------------------
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
            c = _raw(counter)
            np.add(c, 1, out=c)
            if isinstance(counter, Tensor):
                version.bump(counter)
            if momentum is None:
                factor = 1.0 / float(c)
        if not seen:
            return
        for r, new in ((running_mean, mean), (running_var, unbiased_var)):
            d = _raw(r)
            d *= 1.0 - factor
            d += factor * new
            if isinstance(r, Tensor):
                version.bump(r)


def _batch_norm(name, input, running_mean, running_var, weight, bias, training, momentum,
                eps, counter=None) -> Tensor:
    """batch_norm; `momentum` None (with a module's `counter`) is the cumulative average."""
    x, x3 = _channels_input(name, input)
    n, c, s = x3.shape
    w = _per_channel(name, "weight", weight, c)
    b = _per_channel(name, "bias", bias, c)
    _check_running(name, running_mean, running_var, c)
    training = bool(training)
    eps = _check_eps(name, eps, training)
    if training and n * s == 1:  # PyTorch's check: an empty batch passes (empty output)
        raise ValueError(f"{name}: expected more than 1 value per channel when training, "
                         f"got input size {x.shape}")
    if not training and running_mean is None:
        raise ValueError(f"{name}: running_mean and running_var must be given in evaluation "
                         f"mode (training=False)")
    y, mean, var, rstd = _bn_compute(x3, w, b, training, running_mean, running_var, eps)
    if training and running_mean is not None:
        _update_running(running_mean, running_var, mean, var * (n * s / (n * s - 1)),
                        momentum, counter, seen=n * s > 0)
    return _bn_record(name, input, weight, bias, y, x3, x.shape, mean, rstd, w, training, eps)


def batch_norm(input, running_mean, running_var, weight=None, bias=None,
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
    return _batch_norm("batch_norm", input, running_mean, running_var, weight, bias,
                       training, _check_momentum("batch_norm", momentum), eps)


def _repeated(p, n: int):
    """A per-channel parameter (C,) repeated for each of n samples, (n*C,): recorded ops
    when it is a Tensor (its gradient is summed back over the samples)."""
    if p is None:
        return None
    if isinstance(p, Tensor):
        c = p.shape[0]
        return S.reshape(S.broadcast_to(S.reshape(p, (1, c)), (n, c)), (n * c,))
    return np.tile(_raw(p), n)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats: bool = True, momentum: float = 0.1,
                  eps: float = 1e-5) -> Tensor:
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
    momentum = _check_momentum(name, momentum)
    if not use_input_stats:
        if running_mean is None:
            raise ValueError(f"{name}: running_mean and running_var must be given when "
                             f"use_input_stats is False")
        return _batch_norm(name, input, running_mean, running_var, weight, bias, False,
                           momentum, eps)
    eps = _check_eps(name, eps, True)
    if s == 1:  # PyTorch's check: no position at all passes (empty output)
        raise ValueError(f"{name}: expected more than 1 spatial element when training, "
                         f"got input size {x.shape}")
    flat = S.reshape(input, (1, n * c, s))
    wr, br = _repeated(weight, n), _repeated(bias, n)
    w = None if wr is None else _raw(wr)
    y, mean, var, rstd = _bn_compute(flat.data, w, None if br is None else _raw(br), True,
                                     None, None, eps)
    if running_mean is not None and n * s:  # nothing seen: left as they are
        _update_running(running_mean, running_var, mean.reshape(n, c).mean(axis=0),
                        (var * (s / (s - 1))).reshape(n, c).mean(axis=0), momentum)
    out = _bn_record(name, flat, wr, br, y, flat.data, flat.shape, mean, rstd, w, True, eps)
    return S.reshape(out, x.shape)


# ---- group_norm and local_response_norm: compositions -----------------------------------------
def _channel_view(p, ndim: int):
    """A per-channel parameter shaped (C, 1, ...) to broadcast over (N, C, *)."""
    shape = (-1,) + (1,) * (ndim - 2)
    return S.reshape(p, shape) if isinstance(p, Tensor) else _raw(p).reshape(shape)


def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    """Normalization over groups of channels: input (N, C, *) with C divisible by
    `num_groups`, each sample's group of C/num_groups channels normalized over those
    channels and all positions (biased variance), then `weight` and `bias` (C,) per
    channel. layer_norm's fused kernel over (N, num_groups, -1), then two ops."""
    name = "group_norm"
    x, x3 = _channels_input(name, input)
    n, c, s = x3.shape
    if isinstance(num_groups, bool) or not isinstance(num_groups, numbers.Integral) \
            or num_groups < 1 or c % num_groups:
        raise ValueError(f"{name}: num_groups must be a positive integer dividing the "
                         f"{c} channels, got {num_groups!r}")
    _per_channel(name, "weight", weight, c)
    _per_channel(name, "bias", bias, c)
    eps = _check_eps(name, eps, False)
    if n * c // num_groups * s == 1:       # PyTorch's check
        raise ValueError(f"{name}: expected more than 1 value per channel when training, "
                         f"got input size {x.shape}")
    d = c // int(num_groups) * s
    y = S.reshape(F.layer_norm(S.reshape(input, (n, int(num_groups), d)), (d,), eps=eps),
                  x.shape)
    if weight is not None:
        y = y * _channel_view(weight, x.ndim)
    if bias is not None:
        y = y + _channel_view(bias, x.ndim)
    return y


def local_response_norm(input, size: int, alpha: float = 1e-4, beta: float = 0.75,
                        k: float = 1.0) -> Tensor:
    """`x / (k + alpha * avg(x**2)) ** beta`, the average over the `size` channels
    around each one (c - size//2 .. c + (size-1)//2, zero outside, divided by `size`),
    input (N, C, *) of at least 3 dimensions. PyTorch's composition: the squares, a zero
    padding of the channels, avg_pool2d over (size, 1) windows, pow and a division."""
    name = "local_response_norm"
    t = input if isinstance(input, Tensor) else Tensor._wrap(np.asarray(input))
    if t.data.ndim < 3:
        raise ValueError(f"{name}: expected an input of 3 or more dimensions (N, C, *), "
                         f"got shape {t.shape}")
    if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1:
        raise ValueError(f"{name}: size must be a positive integer, got {size!r}")
    if t.data.size == 0:
        return t
    shape = t.shape
    sq = S.reshape(t * t, (shape[0], 1, shape[1], math.prod(shape[2:])))
    sq = S.pad(sq, ((0, 0), (0, 0), (size // 2, (size - 1) // 2), (0, 0)))
    avg = S.reshape(F.avg_pool2d(sq, (size, 1), stride=1), shape)
    return t / E.pow(avg * alpha + k, beta)
