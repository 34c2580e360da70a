"""The recurrent layers' kernels: `recurrence`, one node per layer and direction, whose
forward and backward run the whole time loop with fused per-step numpy kernels.

`nn.RNN`, `nn.LSTM` and `nn.GRU` (`modules/rnn.py`) call `run`, which per layer and
direction makes three kinds of node:

- the input projection of every time step, `linear(x, W_ih, b_ih)`: one GEMM over the
  whole sequence (and one GEMM each for its gradients);
- `recurrence(mode, xp, h0, c0, W_hh, b_hh)`: the loop over time, a declared op
  (`defop`). Each step is one GEMM (`h @ W_hh^T`) and one fused elementwise kernel
  (`_lstm_forward`, ...); the forward keeps, as extras (`Saved`), the activated gates
  and, for the LSTM, the cell states. Its kernel runs the steps backwards, each one fused
  kernel and one GEMM (`dz @ W_hh`), writing the gates' gradients for all steps into one
  array, which is the projection's gradient; W_hh's gradient is then one GEMM over the
  whole sequence, its bias's one reduction (the GRU's hidden projection has another
  gradient in its n gate, dn r, kept apart: two GEMMs a step and two over the sequence,
  one for the r,z rows and one for the n rows);
- slices of its output (the outputs, the last state) and, between layers, dropout.

So the graph has a constant number of nodes per layer and direction, whatever the
sequence length (nodes per time step: 0). Why not one node per time step: the steps
would take slices of the projection, and each slice's gradient is an array of the whole
projection's size (a node has one output and its rule returns a gradient of each input's
full shape), so T steps would sum T full-size arrays (O(T^2) memory traffic); and W_hh
would get T small gradients summed one by one instead of one GEMM. The two directions of
a bidirectional layer are independent nodes, which the parallel engine can run at once.

Gate layouts are PyTorch's: LSTM (i, f, g, o), GRU (r, z, n) with
n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), RNN tanh or relu. Arithmetic: gates =
(h W_hh^T + b_hh) + (x W_ih^T + b_ih); c' = f c + i g, h' = o tanh(c'); GRU
h' = n + z (h - n) (PyTorch's CPU kernels' order); sigmoid = 1 / (1 + exp(-x)).

The formula (`_recurrence_formula`, create_graph and the registry's kernel == formula
check) gets the forward's extras too (`defop(formula_extras=True)`): it replays the steps
with ops, each gate `activation_of(z, saved activation)` (value: the saved one;
derivative: the activation's at it), so the projections' value is never read: xp is
declared `unsaved`, the node keeps a placeholder (a Tensor routed to xp's node under
create_graph carries the graph), not the (T, N, G*H) array. Then it runs the same backward
recursion with ops, so its gradients differentiate again to any order.

Thread safety: pure functions of their arguments; every call allocates its own buffers.
"""
from __future__ import annotations

import numpy as np

from .. import memory
from ..engine.cost import gemm_cost
from ..memory import empty as _empty
from ..ops import pointwise as E
from ..ops import linalg as L
from ..ops import reduce as R
from ..ops import shape as S
from ..ops._common import const as _t
from ..primitive import Joint, Saved, defop
from ..tensor import Tensor
from . import functional as F

__all__ = ["recurrence", "run", "GATES"]

#: gates per mode: the rows of W_ih and W_hh are (gates * hidden_size)
GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


def _raw(x):
    return x._data if isinstance(x, Tensor) else x


def _sigmoid_(a: np.ndarray) -> None:
    """a = 1 / (1 + exp(-a)) in place (PyTorch's formula): 4 passes."""
    np.negative(a, out=a)
    with np.errstate(over="ignore"):
        np.exp(a, out=a)
    a += 1
    np.reciprocal(a, out=a)


def _tm(a, batch_first: bool):
    """`a` seen time-major: (T, N, ...) (a view)."""
    return np.swapaxes(a, 0, 1) if batch_first else a


def _order(n: int, reverse: bool) -> list:
    """Time indices in processing order."""
    return list(range(n - 1, -1, -1)) if reverse else list(range(n))


# ---- forward kernels: x (T, N, G*H) and y time-major views; one GEMM + fused step --------
def _alive(sizes, t: int, n: int) -> int:
    """The rows a step computes: all n, or the first sizes[t] (packed sequences)."""
    return n if sizes is None else int(sizes[t])


def _carry(m: int, n: int, pairs, zeroed=()) -> None:
    """Rows m: of a step whose sequences have ended (or not begun, in reverse): each
    (destination, source) gets the state unchanged, a copy of n - m rows, and the saved
    arrays `zeroed` get zeros there (no gates ran). Nothing when all n rows are alive."""
    if m < n:
        for dst, src in pairs:
            dst[m:] = src[m:]
        for a in zeroed:
            a[m:] = 0


def _lstm_forward(x, y, h0, c0, w, b, order, dtype, sizes=None):
    # per step: the GEMM into the gates' row, + b, + x_t (2 passes over N*4H), the
    # activations (6 passes: sigmoid of all 4H, tanh of g saved and put back), then
    # c' = f c + i g (3 passes over N*H) and h' = o tanh(c') (2 passes); with `sizes`, on
    # the step's first sizes[t] rows, the others carried
    T, n = len(order), x.shape[1]
    H = w.shape[1]
    acts = _empty((T, n, 4 * H), dtype)       # i, f, g, o after their activations
    cells = _empty((T, n, H), dtype)
    tmp = np.empty((n, H), dtype)
    wt = w.T
    h, c = h0, c0
    for t in order:
        m = _alive(sizes, t, n)
        a, tm = acts[t][:m], tmp[:m]
        np.matmul(h[:m], wt, out=a)
        if b is not None:
            a += b
        a += x[t][:m]
        np.tanh(a[:, 2 * H:3 * H], out=tm)
        _sigmoid_(a)
        a[:, 2 * H:3 * H] = tm
        cn, hn = cells[t], y[t]
        np.multiply(a[:, H:2 * H], c[:m], out=cn[:m])
        np.multiply(a[:, :H], a[:, 2 * H:3 * H], out=tm)
        cn[:m] += tm
        np.tanh(cn[:m], out=hn[:m])
        hn[:m] *= a[:, 3 * H:]
        _carry(m, n, ((cn, c), (hn, h)), (acts[t],))
        h, c = hn, cn
    y[T] = c                                    # the last cell state: row T of the output
    return acts, cells


def _gru_forward(x, y, h0, c0, w, b, order, dtype, sizes=None):
    # per step: the GEMM (+ b_hh) into a scratch row, r and z (1 add, 4 sigmoid passes
    # over N*2H), W_hn h + b_hn kept, n = tanh(x_n + r hn) (3 passes), h' = n + z (h - n)
    # (3 passes)
    T, n = len(order), x.shape[1]
    H = w.shape[1]
    acts = _empty((T, n, 3 * H), dtype)       # r, z, n after their activations
    hns = _empty((T, n, H), dtype)            # W_hn h + b_hn per step
    hp = np.empty((n, 3 * H), dtype)
    wt = w.T
    h = h0
    for t in order:
        m = _alive(sizes, t, n)
        hpm = hp[:m]
        np.matmul(h[:m], wt, out=hpm)
        if b is not None:
            hpm += b
        a, xt = acts[t][:m], x[t][:m]
        rz = a[:, :2 * H]
        np.add(xt[:, :2 * H], hpm[:, :2 * H], out=rz)
        _sigmoid_(rz)
        hns[t][:m] = hpm[:, 2 * H:]
        nt = a[:, 2 * H:]
        np.multiply(a[:, :H], hpm[:, 2 * H:], out=nt)
        nt += xt[:, 2 * H:]
        np.tanh(nt, out=nt)
        hy = y[t]
        np.subtract(h[:m], nt, out=hy[:m])
        hy[:m] *= a[:, H:2 * H]
        hy[:m] += nt
        _carry(m, n, ((hy, h),), (acts[t], hns[t]))
        h = hy
    return acts, hns


def _rnn_forward(x, y, h0, c0, w, b, order, dtype, relu: bool, sizes=None):
    # per step: the GEMM into the output row, + b, + x_t, the activation (3 passes)
    wt = w.T
    h, n = h0, x.shape[1]
    for t in order:
        m = _alive(sizes, t, n)
        hy = y[t]
        hm = hy[:m]
        np.matmul(h[:m], wt, out=hm)
        if b is not None:
            hm += b
        hm += x[t][:m]
        if relu:
            np.maximum(hm, 0, out=hm)
        else:
            np.tanh(hm, out=hm)
        _carry(m, n, ((hy, h),))
        h = hy
    return None, None


# ---- backward kernels: gy and dx time-major views; returns (dh0, dc0) --------------------
def _pass_through(m: int, n: int, dz, dh, dht) -> None:
    """The rows m: of a step that carried its state (packed sequences): no gates, so no
    projection gradient, and the state's gradient passes to the step before unchanged."""
    if m < n:
        dh[m:] = dht[m:]          # (before zeroing dz: the RNN's dht is its dz)
        dz[m:] = 0


def _lstm_backward(gy, dx, acts, cells, y, h0, c0, w, order, need_h0, sizes=None):
    # per step (N*H or N*4H passes): dh + gy_t (1), tanh(c) (1), dc += dh o (1 - tanh^2)
    # (5), the gates' gradients before their activations (4 products into dz), the
    # activations' derivatives for all 4H at once (sigmoid's a (1 - a), tanh's 1 - g^2:
    # 4 passes, one product), dc f (1); then one GEMM dz @ W_hh. With `sizes`, on the
    # step's first sizes[t] rows; the others pass their gradients through (dc unchanged)
    T, n, H = len(order), acts.shape[1], w.shape[1]
    dt = dx.dtype
    dh = np.zeros((n, H), dt)
    dc = np.array(gy[T], dtype=dt)            # the last cell state's gradient
    dht, tc = np.empty((n, H), dt), np.empty((n, H), dt)
    deriv = np.empty((n, 4 * H), dt)
    for k in range(T - 1, -1, -1):
        t = order[k]
        m = _alive(sizes, t, n)
        a, dz, dcm, dhm = acts[t][:m], dx[t][:m], dc[:m], dht[:m]
        i, f, g, o = a[:, :H], a[:, H:2 * H], a[:, 2 * H:3 * H], a[:, 3 * H:]
        cp = (c0 if k == 0 else cells[order[k - 1]])[:m]
        np.add(gy[t], dh, out=dht)
        tm = tc[:m]
        np.tanh(cells[t][:m], out=tm)
        np.multiply(dhm, tm, out=dz[:, 3 * H:])            # d o
        np.multiply(tm, tm, out=tm)
        np.subtract(1, tm, out=tm)
        tm *= o
        tm *= dhm
        dcm += tm
        np.multiply(dcm, g, out=dz[:, :H])                  # d i
        np.multiply(dcm, cp, out=dz[:, H:2 * H])            # d f
        np.multiply(dcm, i, out=dz[:, 2 * H:3 * H])         # d g
        dv = deriv[:m]
        np.subtract(1, a, out=dv)
        dv *= a                                             # sigmoid' = a (1 - a)
        dg = dv[:, 2 * H:3 * H]
        np.multiply(g, g, out=dg)
        np.subtract(1, dg, out=dg)                          # tanh' = 1 - g^2
        dz *= dv
        dcm *= f
        if k or need_h0:
            np.matmul(dz, w, out=dh[:m])
        _pass_through(m, n, dx[t], dh, dht)
    return dh, dc


def _gru_backward(gy, dx, dnr, acts, hns, y, h0, w, order, need_h0, sizes=None):
    # per step: dh + gy_t (1), dn (4 passes), dz (2), dr (1), the sigmoid derivative of
    # r and z (3 passes over N*2H), dn r into `dnr` (1: the n part of the hidden
    # projection's gradient; its r and z parts are dx's), then dh = dx_rz @ W_hr,hz +
    # dnr @ W_hn + dh z: two GEMMs, their sum and the direct term (3 passes)
    T, n, H = len(order), acts.shape[1], w.shape[1]
    dt = dx.dtype
    dh = np.zeros((n, H), dt)
    dht, tmp = np.empty((n, H), dt), np.empty((n, H), dt)
    deriv = np.empty((n, 2 * H), dt)
    w_rz, w_n = w[:2 * H], w[2 * H:]
    for k in range(T - 1, -1, -1):
        t = order[k]
        m = _alive(sizes, t, n)
        a, d, dhm, tm, dnrm = acts[t][:m], dx[t][:m], dht[:m], tmp[:m], dnr[t][:m]
        r, z, nt = a[:, :H], a[:, H:2 * H], a[:, 2 * H:]
        hprev = (h0 if k == 0 else y[order[k - 1]])[:m]
        np.add(gy[t], dh, out=dht)
        dn = d[:, 2 * H:]
        np.subtract(1, z, out=dn)
        dn *= dhm
        np.multiply(nt, nt, out=tm)
        np.subtract(1, tm, out=tm)
        dn *= tm                                            # before tanh
        np.subtract(hprev, nt, out=d[:, H:2 * H])
        d[:, H:2 * H] *= dhm                                # d z
        np.multiply(dn, hns[t][:m], out=d[:, :H])           # d r
        dv = deriv[:m]
        np.subtract(1, a[:, :2 * H], out=dv)
        dv *= a[:, :2 * H]
        d[:, :2 * H] *= dv                                  # before the sigmoids
        np.multiply(dn, r, out=dnrm)                        # W_hn h + b_hn's gradient
        if k or need_h0:
            np.matmul(d[:, :2 * H], w_rz, out=dh[:m])
            np.matmul(dnrm, w_n, out=tm)
            dh[:m] += tm
            np.multiply(dhm, z, out=tm)
            dh[:m] += tm
        if m < n:
            dnr[t][m:] = 0
        _pass_through(m, n, dx[t], dh, dht)
    return dh, None


def _rnn_backward(gy, dx, y, h0, w, order, need_h0, relu: bool, sizes=None):
    # per step: dh + gy_t (1), the activation's derivative (2 or 3 passes), the GEMM
    T, n, H = len(order), dx.shape[1], w.shape[1]
    dh = np.zeros((n, H), dx.dtype)
    tmp = np.empty((n, H), dx.dtype)
    for k in range(T - 1, -1, -1):
        t = order[k]
        m = _alive(sizes, t, n)
        d, hy = dx[t], y[t][:m]
        np.add(gy[t], dh, out=d)
        dm = d[:m]
        if relu:
            np.copyto(dm, 0, where=hy <= 0)
        else:
            tm = tmp[:m]
            np.multiply(hy, hy, out=tm)
            np.subtract(1, tm, out=tm)
            dm *= tm
        if k or need_h0:
            np.matmul(dm, w, out=dh[:m])
        _pass_through(m, n, d, dh, d)
    return dh, None


# ---- the first-order kernel ------------------------------------------------------------------
INPUTS = ("xp", "h0", "c0", "w_hh", "b_hh")  # the op's differentiable inputs, in order


def _check_inputs(name: str, gates: int, x, h, c, w, b, batch_first: bool):
    """`x`, checked with the states and weights `recurrence` was given (ValueError)."""
    lstm = name == "lstm"
    if h is None or (lstm and c is None):
        raise ValueError(f"{name}: the initial state h0{' and c0' if lstm else ''} is required")
    if np.ndim(x) != 3 or np.ndim(w) != 2 or w.shape[0] != gates * w.shape[1]:
        raise ValueError(f"{name}: expected the projections (T, N, {gates}*H) and "
                         f"W_hh ({gates}*H, H), got shapes {np.shape(x)} and {np.shape(w)}")
    xt = _tm(x, batch_first)
    if xt.shape[2] != w.shape[0] or xt.shape[0] == 0:
        raise ValueError(f"{name}: projections of shape {x.shape} do not match W_hh of "
                         f"shape {w.shape} (or the sequence is empty)")
    for what, s in (("h0", h), ("c0", c)) + ((("b_hh", b),) if b is not None else ()):
        want = (w.shape[0],) if what == "b_hh" else (xt.shape[1], w.shape[1])
        if s is not None and np.shape(s) != want:
            raise ValueError(f"{name}: {what} has shape {np.shape(s)}, expected {want}")
    return x


def _check_sizes(name: str, batch_sizes, T: int, n: int, batch_first: bool):
    """`batch_sizes` as an int64 array (None stays None), checked."""
    if batch_sizes is None:
        return None
    s = np.asarray(batch_sizes)
    if (batch_first or s.shape != (T,) or s.dtype.kind not in "iu" or (T and (
            s[0] != n or s[-1] < 1 or np.any(np.diff(s) > 0)))):
        raise ValueError(f"{name}: batch_sizes must be {T} non-increasing positive ints "
                         f"starting at the batch size {n} (time-major input), got {s!r}")
    return s.astype(np.int64)


def _previous_states(y, h0, xp_shape: tuple, bf: bool, reverse: bool, dt) -> np.ndarray:
    """The hidden state before each step, stacked in the projections' layout ((T, N, H),
    or (N, T, H) with batch_first): W_hh's GEMM operand. One copy of the states."""
    hp = _empty(xp_shape[:2] + (y.shape[-1],), dt)
    hpt, yt = _tm(hp, bf), _tm(y, bf)
    T = hpt.shape[0]
    if reverse:
        hpt[T - 1] = h0
        hpt[:T - 1] = yt[1:T]
    else:
        hpt[0] = h0
        hpt[1:] = yt[:T - 1]
    return hp


def _by_gate_rows(kernel, dx, dnr, shape, dt) -> np.ndarray:
    """`kernel(m, out)` over the GRU's hidden projection gradient by parts, into one
    array of `shape` (rows per gate): its r and z columns are dx's (T*N, 3H), its n
    columns are `dnr` (T*N, H)."""
    k = dx.shape[1] - dnr.shape[1]                        # the r and z columns: 2H
    out = _empty(shape, dt)
    kernel(dx[:, :k], out[:k])
    kernel(dnr, out[k:])
    return out


def _hidden_param_grads(dx, dnr, hp, w, need_b: bool) -> tuple:
    """(dW_hh or None when `hp` is None, db_hh or None) from the gradient of
    h W_hh^T + b_hh over all steps (2-d): dx, or for the GRU dx with its n columns
    replaced by `dnr`. One GEMM (two for the GRU, the r,z rows and the n rows) reading
    the gradients and the stacked states `hp` (T*N, H) once, and one reduction pass over
    the gradients for the bias."""
    dt = np.result_type(dx, w)
    if dnr is None:
        dw = None if hp is None else memory.matmul(dx.T, hp)
        return dw, (dx.sum(axis=0) if need_b else None)
    dw = None if hp is None else _by_gate_rows(
        lambda m, out: np.matmul(m.T, hp, out=out), dx, dnr, w.shape, dt)
    db = None if not need_b else _by_gate_rows(
        lambda m, out: np.sum(m, axis=0, out=out), dx, dnr, w.shape[:1], dt)
    return dw, db


def _recurrence_kernel(g, y, xp, h0, c0, w, b, a1, a2, needs, mode, reverse, batch_first,
                       batch_sizes):
    # The steps backwards (the kernels above), the projections' gradient written in place
    # for all steps (it is the returned array), then W_hh's gradient as one GEMM of the
    # gates' gradients (T*N, G*H)^T against the previous hidden states (T*N, H), stacked
    # in the same layout, and b_hh's as one reduction. The GRU's hidden projection has
    # the projections' gradient but for the n gate (times r there): only that third is
    # kept (`dnr`, T*N*H), and W_hh's r,z rows and n rows are two GEMMs. `a1`, `a2`:
    # the forward's extras (the activated gates, the LSTM's cells or the GRU's W_hn h +
    # b_hn); `needs`: the forward's needs_input_grad (what is not asked is not computed).
    bf, need = batch_first, dict(zip(INPUTS, needs))
    xp_shape, H = np.shape(xp), w.shape[1]
    T = xp_shape[1] if bf else xp_shape[0]
    order = _order(T, reverse)
    dt = np.result_type(g, w)
    dx = _empty(xp_shape, dt)
    gy, dxt, yt = _tm(g, bf), _tm(dx, bf), _tm(y, bf)
    dnr = None
    sizes = None if batch_sizes is None else np.asarray(batch_sizes)
    if mode == "LSTM":
        dh, dc = _lstm_backward(gy, dxt, a1, a2, yt, h0, c0, w, order, need["h0"], sizes)
    elif mode == "GRU":
        dnr = _empty(xp_shape[:2] + (H,), dt)        # the n gate's part, in dx's layout
        dh, dc = _gru_backward(gy, dxt, _tm(dnr, bf), a1, a2, yt, h0, w, order,
                               need["h0"], sizes)
    else:
        dh, dc = _rnn_backward(gy, dxt, yt, h0, w, order, need["h0"], mode == "RNN_RELU",
                               sizes)
    dw = db = None
    need_b = b is not None and need["b_hh"]
    if need["w_hh"] or need_b:
        hp = _previous_states(y, h0, xp_shape, bf, reverse, dt) if need["w_hh"] else None
        dw, db = _hidden_param_grads(dx.reshape(-1, w.shape[0]),
                                     None if dnr is None else dnr.reshape(-1, H),
                                     None if hp is None else hp.reshape(-1, H), w, need_b)
    return (dx if need["xp"] else None, dh if need["h0"] else None,
            dc if mode == "LSTM" and need["c0"] else None, dw, db)


# ---- a gate whose value the forward has: its derivative without its input's value -----------
ACTIVATIONS = ("sigmoid", "tanh", "relu")


def _activation_formula(g, ans, z, a, kind):
    """The activation's derivative at its value `ans` (= a)."""
    if kind == "relu":
        return g * (_raw(ans) > 0)
    return g * (ans * (1 - ans)) if kind == "sigmoid" else g * (1 - ans * ans)


def _activation_kernel(g, ans, z, a, kind):
    if kind == "relu":
        return g * (ans > 0)
    t = np.subtract(1, ans) if kind == "sigmoid" else np.subtract(1, ans * ans)
    if kind == "sigmoid":
        t *= ans
    t *= g
    return t


@defop(formula=_activation_formula, kernel=_activation_kernel, export=False)
def activation_of(z: Tensor, a: Tensor, kind: str) -> Tensor:
    """`kind` ("sigmoid", "tanh" or "relu") of `z`, whose value `a` the caller has
    already (the recurrence's saved gates): the value is `a` itself, the derivative the
    activation's at `a`, so z's value is never read (no rule loads it: its node keeps
    none) and z may be a placeholder carrying only the graph (the recurrence's formula
    replays its steps so, without the projections). Correct only where a = kind(z)."""
    if kind not in ACTIVATIONS:
        raise ValueError(f"kind must be one of {ACTIVATIONS}, got {kind!r}")
    if np.shape(z) != np.shape(a):
        raise ValueError(f"z of shape {np.shape(z)} and its value a of shape "
                         f"{np.shape(a)} differ")
    return a


# ---- the formula: the forward replayed from the saved gates, the backward recursion, ops ------
def _replay_step(mode: str, xt, hp, a, h, c, y_t, H: int) -> tuple:
    """One forward step on Tensors, each gate `activation_of` its saved value `a` (the
    step's row of the activated gates; the RNN's: its output `y_t`), so the projection
    `xt` carries the graph only: (what the backward step needs, the new h, the new c)."""
    if mode == "LSTM":
        z = xt + hp
        i, f, gg, o = (activation_of(z[:, k * H:(k + 1) * H], a[:, k * H:(k + 1) * H],
                                     "tanh" if k == 2 else "sigmoid") for k in range(4))
        cn = f * c + i * gg
        tc = E.tanh(cn)
        return (h, c, i, f, gg, o, tc), o * tc, cn
    if mode == "GRU":
        r = activation_of(xt[:, :H] + hp[:, :H], a[:, :H], "sigmoid")
        z = activation_of(xt[:, H:2 * H] + hp[:, H:2 * H], a[:, H:2 * H], "sigmoid")
        hn = hp[:, 2 * H:]
        nt = activation_of(xt[:, 2 * H:] + r * hn, a[:, 2 * H:], "tanh")
        return (h, r, z, nt, hn), nt + z * (h - nt), c
    hy = activation_of(xt + hp, y_t, "relu" if mode == "RNN_RELU" else "tanh")
    return (h, hy), hy, c


def _back_step(mode: str, step: tuple, dht, dc) -> tuple:
    """One backward step with ops: (gradient of the input projection, of the hidden
    projection, the carried cell gradient, the direct term of dh (GRU) or None)."""
    if mode == "LSTM":
        _, cp, i, f, gg, o, tc = step
        dc = dc + dht * o * (1 - tc * tc)
        dz = S.concat([dc * gg * (i * (1 - i)), dc * cp * (f * (1 - f)),
                       dc * i * (1 - gg * gg), dht * tc * (o * (1 - o))], axis=-1)
        return dz, dz, dc * f, None
    if mode == "GRU":
        hprev, r, z, nt, hn = step
        dn = dht * (1 - z) * (1 - nt * nt)
        dr = dn * hn * (r * (1 - r))
        dzz = dht * (hprev - nt) * (z * (1 - z))
        return (S.concat([dr, dzz, dn], axis=-1), S.concat([dr, dzz, dn * r], axis=-1),
                dc, dht * z)
    _, hy = step
    d = dht * (_raw(hy) > 0) if mode == "RNN_RELU" else dht * (1 - hy * hy)
    return d, d, dc, None


def _replay(mode: str, X, h, c, Wt, bt, gates, yt, order: list, sizes) -> tuple:
    """The forward replayed with ops (the gates: `gates`, the saved activations, time
    major; the RNN's: its outputs `yt`), steps in processing order: (each step's values
    for the backward, the hidden state before each step by time index)."""
    n, H = X.shape[1], Wt.shape[0]
    steps, hprevs = [], [None] * len(order)
    for t in order:
        m = _alive(sizes, t, n)
        hprevs[t] = h
        hp = L.matmul(_rows(h, m, n), Wt)
        if bt is not None:
            hp = hp + bt
        step, hm, cm = _replay_step(mode, _rows(X[t], m, n), hp,
                                    None if gates is None else gates[t][:m], _rows(h, m, n),
                                    None if c is None else _rows(c, m, n), yt[t][:m], H)
        steps.append(step)
        h, c = _join(hm, h, m, n), (None if c is None else _join(cm, c, m, n))
    return steps, hprevs


def _recurrence_formula(g, ans, xp, h0, c0, w_hh, b_hh, a1, a2, needs, mode, reverse,
                        batch_first, batch_sizes):
    """The recurrence's derivative with ops (differentiable again): the forward replayed
    from the inputs and the forward's extras (`formula_extras`: `a1` the activated gates,
    each gate `activation_of` its saved value), then the backward recursion, then W_hh's
    and b_hh's gradients over the whole sequence. `xp` is a placeholder (`unsaved`): its
    value is never read, only its graph (its gradient's route) is."""
    bf, lstm = batch_first, mode == "LSTM"
    X = S.swapaxes(_t(xp), 0, 1) if bf else _t(xp)
    G = S.swapaxes(_t(g), 0, 1) if bf else _t(g)
    W = _t(w_hh)
    T, n, H = X.shape[0], X.shape[1], W.shape[1]
    order = _order(T, reverse)
    sizes = None if batch_sizes is None else np.asarray(batch_sizes)
    steps, hprevs = _replay(mode, X, _t(h0), _t(c0) if lstm else None, S.swapaxes(W, -1, -2),
                            None if b_hh is None else _t(b_hh), a1, _tm(_raw(ans), bf),
                            order, sizes)
    dh, dc = None, (G[T] if lstm else None)
    dxs, dpres = [None] * T, [None] * T
    for k in range(T - 1, -1, -1):
        t = order[k]
        m = _alive(sizes, t, n)
        dht = G[t] if dh is None else G[t] + dh
        dx_m, dpre_m, dc_m, direct = _back_step(
            mode, steps[k], _rows(dht, m, n), None if dc is None else _rows(dc, m, n))
        dh_m = L.matmul(dpre_m, W)
        if direct is not None:
            dh_m = dh_m + direct
        # rows that carried their state: no gates (zero projection gradient), and the
        # gradients of h and c pass through
        dxs[t], dpres[t] = _zero_rows(dx_m, m, n), _zero_rows(dpre_m, m, n)
        dh = _join(dh_m, dht, m, n)
        dc = None if dc is None else _join(dc_m, dc, m, n)
    axis = 1 if bf else 0
    dx = S.stack(dxs, axis=axis)
    dpre = dx if mode != "GRU" else S.stack(dpres, axis=axis)
    dw = L.matmul(S.swapaxes(S.reshape(dpre, (-1, W.shape[0])), 0, 1),
                  S.reshape(S.stack(hprevs, axis=axis), (-1, H)))
    db = None if b_hh is None else R.sum(dpre, axis=(0, 1))
    return dx, dh, dc, dw, db


def _rows(t: Tensor, m: int, n: int) -> Tensor:
    """The first m rows of a step's Tensor (itself when all n are alive)."""
    return t if m == n else S.getitem(t, slice(0, m))


def _join(head: Tensor, full: Tensor, m: int, n: int) -> Tensor:
    """`head` (m rows) over the rows m: of `full`: a step's new state with the carried
    rows (or a gradient with the passed-through rows)."""
    return head if m == n else S.concat([head, S.getitem(full, slice(m, n))], 0)


def _zero_rows(head: Tensor, m: int, n: int) -> Tensor:
    return head if m == n else S.concat(
        [head, np.zeros((n - m,) + tuple(head.shape[1:]), head.dtype)], 0)


# ---- the op ---------------------------------------------------------------------------------
def _recurrence_cost(ans, xp, h0, c0, w_hh, *rest, **params):
    # backward: T GEMMs (N, G*H) @ (G*H, H), one (G*H, T*N) @ (T*N, H), ~20 passes a step
    return gemm_cost(np.size(xp), np.shape(w_hh)[1]) + 20 * np.size(xp)


# the formulas get the extras (the gates) and the projections' value is read by no rule:
# the node keeps a placeholder of xp (`unsaved`), not the (T, N, G*H) array
@defop(inputs=INPUTS, formula=Joint(_recurrence_formula), kernel=Joint(_recurrence_kernel),
       export=False, cost=_recurrence_cost, threaded=True, formula_extras=True,
       unsaved=("xp",))
def recurrence(mode: str, xp: Tensor, h0: Tensor, c0: Tensor | None, w_hh: Tensor,
               b_hh: Tensor | None = None, reverse: bool = False, batch_first: bool = False,
               batch_sizes: Tensor | None = None, *, needs_input_grad=(True,) * 5) -> Tensor:
    """The time loop of one recurrent layer and direction, as one node.

    `xp` (T, N, G*H) (or (N, T, G*H) with `batch_first`) is the input projection of every
    step, `x W_ih^T + b_ih`; `h0` and (LSTM) `c0` are (N, H); `w_hh` (G*H, H), `b_hh`
    (G*H,) or None; G = `GATES[mode]`, mode one of "LSTM", "GRU", "RNN_TANH", "RNN_RELU".
    `reverse` processes the steps from the last to the first. Returns the hidden state
    after each step, (T, N, H) at each step's time index, and for the LSTM one more row
    (index T) holding the last cell state: (T + 1, N, H) (time on axis 1 with
    `batch_first`).

    `batch_sizes` (T non-increasing ints, time-major only): packed sequences sorted by
    decreasing length, only the first batch_sizes[t] rows alive at step t. A step then
    computes those rows and carries the others' state unchanged (a copy), so row T - 1
    (row 0 in reverse) holds every sequence's last state and the carried rows' gradients
    pass through; their projections get a zero gradient.
    """
    if mode not in GATES:
        raise ValueError(f"recurrence: mode must be one of {sorted(GATES)}, got {mode!r}")
    lstm, name = mode == "LSTM", mode.lower()
    x, h, w, b = xp, h0, w_hh, b_hh
    c = c0 if lstm else None
    xt = _tm(_check_inputs(name, GATES[mode], x, h, c, w, b, batch_first), batch_first)
    T, n, H = xt.shape[0], xt.shape[1], w.shape[1]
    dtype = np.result_type(x, h, w, *(() if c is None else (c,)), *(() if b is None else (b,)))
    if dtype.kind != "f":
        raise TypeError(f"{name}: expected floating inputs, got {dtype}")
    sizes = _check_sizes(name, batch_sizes, T, n, batch_first)
    order = _order(T, reverse)
    y = _empty((n, T + lstm, H) if batch_first else (T + lstm, n, H), dtype)
    yt = _tm(y, batch_first)
    if lstm:
        a1, a2 = _lstm_forward(xt, yt, h, c, w, b, order, dtype, sizes)
    elif mode == "GRU":
        a1, a2 = _gru_forward(xt, yt, h, None, w, b, order, dtype, sizes)
    else:
        a1, a2 = _rnn_forward(xt, yt, h, None, w, b, order, dtype, mode == "RNN_RELU", sizes)
    return Saved(y, a1, a2, tuple(needs_input_grad))


# ---- whole layers ---------------------------------------------------------------------------
def run(mode: str, input, hx, weights: list, num_layers: int, bidirectional: bool,
        batch_first: bool, dropout: float, training: bool, batch_sizes=None) -> tuple:
    """A multi-layer recurrent network over a batched sequence: (output, h_n, c_n).

    `input` (T, N, I) (or (N, T, I) with `batch_first`); `hx` (h0, c0) for the LSTM,
    h0 for the others, each (layers * directions, N, H) or None (zeros); `weights` per
    layer and direction (w_ih, w_hh, b_ih, b_hh) (biases may be None). Dropout with
    probability `dropout` on every layer's output but the last when `training`.
    Returns the last layer's outputs (T, N, directions * H) (batch first likewise), the
    last hidden state of every layer and direction (layers * directions, N, H), and for
    the LSTM the last cell states (None otherwise). `batch_sizes`: packed sequences
    (`recurrence`), time-major; outputs past a sequence's end are not defined.
    """
    lstm = mode == "LSTM"
    h0, c0 = hx if lstm else (hx, None)
    dirs = 2 if bidirectional else 1
    x, hs, cs = input, [], []
    xd = _raw(input)
    T, n = (xd.shape[1], xd.shape[0]) if batch_first else xd.shape[:2]
    for layer in range(num_layers):
        outs = []
        for d in range(dirs):
            j = layer * dirs + d
            w_ih, w_hh, b_ih, b_hh = weights[j]
            shape, dt = (n, _raw(w_hh).shape[1]), np.result_type(xd, _raw(w_hh))
            hj = _initial(h0, j, shape, dt)
            cj = _initial(c0, j, shape, dt) if lstm else None
            xp = F.linear(x, w_ih, b_ih)                   # every step's projection: one GEMM
            y = recurrence(mode, xp, hj, cj, w_hh, b_hh, reverse=d == 1,
                           batch_first=batch_first, batch_sizes=batch_sizes)
            last = 0 if d == 1 else T - 1
            at = (lambda i: (slice(None), i)) if batch_first else (lambda i: i)
            outs.append(S.getitem(y, at(slice(0, T))) if lstm else y)
            hs.append(S.getitem(y, at(last)))
            if lstm:
                cs.append(S.getitem(y, at(T)))
        x = outs[0] if dirs == 1 else S.concat(outs, axis=-1)
        if dropout and training and layer < num_layers - 1:
            x = F.dropout(x, dropout, True)
    return x, S.stack(hs, axis=0), (S.stack(cs, axis=0) if lstm else None)


def _initial(state, j: int, shape: tuple, dtype):
    """Layer-direction j's initial state: row j of `state`, or zeros (a constant)."""
    if state is None:
        return np.zeros(shape, dtype)
    return S.getitem(state, j) if isinstance(state, Tensor) else np.asarray(state)[j]
