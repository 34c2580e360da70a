"""`LBFGS`, with torch.optim.LBFGS's algorithm and arithmetic (its strong-Wolfe line
search included)."""
from __future__ import annotations

import copy
import numbers
from typing import Any, Callable, Optional

import numpy as np

from .. import version
from ..grad_mode import enable_grad, no_grad
from ..tensor import Tensor
from .optimizer import Optimizer, ParamsT, check_real

_STATE_KEYS = ("func_evals", "n_iter", "d", "t", "old_dirs", "old_stps", "ro", "H_diag",
               "prev_flat_grad", "prev_loss", "al")


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None):
    """The minimizer of the cubic through (x1, f1, g1) and (x2, f2, g2), clipped to
    `bounds` (PyTorch's `_cubic_interpolate`)."""
    if bounds is not None:
        xmin_bound, xmax_bound = bounds
    else:
        xmin_bound, xmax_bound = (x1, x2) if x1 <= x2 else (x2, x1)
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 ** 2 - g1 * g2
    if d2_square >= 0:
        d2 = np.sqrt(d2_square)
        if x1 <= x2:
            min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return min(max(min_pos, xmin_bound), xmax_bound)
    return (xmin_bound + xmax_bound) / 2.0


def _zoom(obj_func, x, t, d, f, gtd, c1, c2, tolerance_change, max_ls, d_norm,
          bracket, bracket_f, bracket_g, bracket_gtd, ls_iter, evals):
    """The zoom phase of the strong-Wolfe search: shrink the bracket until the
    conditions hold. Returns (f, g, t, evals)."""
    done = False
    insuf_progress = False
    low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0],
                               bracket[1], bracket_f[1], bracket_gtd[1])
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insuf_progress or t >= max(bracket) or t <= min(bracket):
                t = max(bracket) - eps if abs(t - max(bracket)) < abs(t - min(bracket)) \
                    else min(bracket) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False
        f_new, g_new = obj_func(x, t, d)
        evals += 1
        gtd_new = g_new.dot(d)
        ls_iter += 1
        if f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low_pos]:
            bracket[high_pos], bracket_f[high_pos] = t, f_new
            bracket_g[high_pos], bracket_gtd[high_pos] = g_new.copy(), gtd_new
            low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high_pos] - bracket[low_pos]) >= 0:
                bracket[high_pos], bracket_f[high_pos] = bracket[low_pos], bracket_f[low_pos]
                bracket_g[high_pos] = bracket_g[low_pos]
                bracket_gtd[high_pos] = bracket_gtd[low_pos]
            bracket[low_pos], bracket_f[low_pos] = t, f_new
            bracket_g[low_pos], bracket_gtd[low_pos] = g_new.copy(), gtd_new
    return bracket_f[low_pos], bracket_g[low_pos], bracket[low_pos], evals


def _strong_wolfe(obj_func, x, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9,
                  max_ls=25):
    """PyTorch's `_strong_wolfe` line search (bracketing, then `_zoom`). Returns
    (f, g, t, evaluations)."""
    d_norm = np.abs(d).max()
    g = g.copy()
    f_new, g_new = obj_func(x, t, d)
    evals = 1
    gtd_new = g_new.dot(d)
    t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
    ls_iter = 0
    while ls_iter < max_ls:
        bracketed = f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev)
        if not bracketed and abs(gtd_new) <= -c2 * gtd:
            return f_new, g_new, t, evals
        if bracketed or gtd_new >= 0:
            return _zoom(obj_func, x, t, d, f, gtd, c1, c2, tolerance_change, max_ls, d_norm,
                         [t_prev, t], [f_prev, f_new], [g_prev, g_new.copy()],
                         [gtd_prev, gtd_new], ls_iter, evals)
        min_step = t + 0.01 * (t - t_prev)
        max_step = t * 10
        tmp = t
        t = _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new,
                               bounds=(min_step, max_step))
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new.copy(), gtd_new
        f_new, g_new = obj_func(x, t, d)
        evals += 1
        gtd_new = g_new.dot(d)
        ls_iter += 1
    # reached max_ls: bracket [0, t], then the zoom loop (which does not run)
    return _zoom(obj_func, x, t, d, f, gtd, c1, c2, tolerance_change, max_ls, d_norm,
                 [0, t], [f, f_new], [g, g_new], [None, None], ls_iter, evals)


class LBFGS(Optimizer):
    """L-BFGS, as `torch.optim.LBFGS` (after minFunc): each `step(closure)` runs up to
    `max_iter` iterations, each a two-loop recursion over the last `history_size`
    curvature pairs for the direction, then a step of `lr` (the first iteration ever:
    `min(1, 1/|g|_1) * lr`) or, with `line_search_fn="strong_wolfe"`, PyTorch's
    strong-Wolfe line search; it stops early on `tolerance_grad` (max |g|),
    `tolerance_change` (step or loss change) or `max_eval` closure calls.

    Args:
        params: the tensors to optimize (one parameter group only, as PyTorch's).
        lr: learning rate, >= 0 (default 1).
        max_iter: iterations per step, an int >= 0 (default 20).
        max_eval: closure evaluations per step (default `max_iter * 5 // 4`).
        tolerance_grad: stop when max |gradient| <= this (default 1e-7).
        tolerance_change: stop when the step or the loss changes less (default 1e-9).
        history_size: curvature pairs kept, an int >= 1 (default 100).
        line_search_fn: None or "strong_wolfe" (anything else: RuntimeError, PyTorch's
            at its step, here at construction).

    State (on the first parameter, as PyTorch's): `func_evals`, `n_iter`, the flat
    direction `d`, step `t`, the history lists `old_dirs`, `old_stps`, `ro`, `H_diag`,
    `prev_flat_grad`, `prev_loss`, `al`. Memory: `(history_size + 2)` flat copies of
    the parameters (PyTorch's note). All parameters must have one dtype.

    A step is all or nothing: if the closure raises (or a Ctrl+C arrives) the
    parameters get their values from before the step back and the state is unchanged
    (PyTorch leaves them wherever the iteration or line search had moved them).
    Thread safety: not locked (see `Optimizer`); the closure runs on the caller's thread.
    """

    _counts_steps = False

    def __init__(self, params: ParamsT, lr: float = 1, max_iter: int = 20,
                 max_eval: Optional[int] = None, tolerance_grad: float = 1e-7,
                 tolerance_change: float = 1e-9, history_size: int = 100,
                 line_search_fn: Optional[str] = None) -> None:
        if max_eval is None and isinstance(max_iter, numbers.Integral):
            max_eval = max_iter * 5 // 4
        defaults = dict(lr=lr, max_iter=max_iter, max_eval=max_eval,
                        tolerance_grad=tolerance_grad, tolerance_change=tolerance_change,
                        history_size=history_size, line_search_fn=line_search_fn)
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        dtypes = {p._data.dtype for p in self.param_groups[0]["params"]}
        if len(dtypes) > 1:
            raise ValueError(f"LBFGS: all parameters must have one dtype, got "
                             f"{sorted(map(str, dtypes))}")

    def _check_group(self, group: dict[str, Any]) -> None:
        check_real("LBFGS", "lr", group["lr"])
        check_real("LBFGS", "tolerance_grad", group["tolerance_grad"], -np.inf)
        check_real("LBFGS", "tolerance_change", group["tolerance_change"], -np.inf)
        for name, low in (("max_iter", 0), ("max_eval", 0), ("history_size", 1)):
            v = group[name]
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise TypeError(f"LBFGS: {name} must be an int, got {type(v).__name__} {v!r}")
            if v < low:
                raise ValueError(f"LBFGS: invalid {name}: {v} (it must be >= {low})")
        if group["line_search_fn"] not in (None, "strong_wolfe"):
            raise RuntimeError(f"LBFGS: only 'strong_wolfe' is supported as line_search_fn, "
                               f"got {group['line_search_fn']!r}")

    @property
    def _params(self) -> list[Tensor]:
        return self.param_groups[0]["params"]

    def _gather_flat_grad(self) -> np.ndarray:
        """The gradients of all parameters, flattened and concatenated (zeros for a
        parameter without one)."""
        views = []
        for p in self._params:
            g = p._grad
            views.append(np.zeros(p._data.size, p._data.dtype) if g is None
                         else np.asarray(g._data, p._data.dtype).reshape(-1))
        return np.concatenate(views) if views else np.zeros(0)

    def _add_grad(self, step_size: Any, update: np.ndarray) -> None:
        """`p += step_size * update[slice of p]` for every parameter (PyTorch's
        `p.add_(u, alpha=step_size)`), bumping each version counter."""
        offset = 0
        for p in self._params:
            arr = p._data
            n = arr.size
            arr += step_size * update[offset:offset + n].reshape(arr.shape)
            version.bump(p)
            offset += n

    def _set_param(self, values: list[np.ndarray]) -> None:
        for p, v in zip(self._params, values):
            p._data[...] = v
            version.bump(p)

    def _directional_evaluate(self, closure, x, t, d):
        self._add_grad(t, d)
        loss = float(closure())
        flat_grad = self._gather_flat_grad()
        self._set_param(x)
        return loss, flat_grad

    def step(self, closure: Callable[[], Any]) -> Any:  # type: ignore[override]
        """Run up to `max_iter` L-BFGS iterations, calling `closure` (which must zero
        the gradients, compute the loss, call backward and return the loss) with grad
        mode on; returns the loss of its first call.

        Raises:
            TypeError: no closure.
            AssertionError: more than one parameter group (added after construction),
                as PyTorch's.
            Whatever the closure raises: the parameters are then restored and the
            state left unchanged.
        """
        if not callable(closure):
            raise TypeError(f"LBFGS.step needs a closure (a function that recomputes the "
                            f"loss and its gradients), got {type(closure).__name__}")
        if len(self.param_groups) != 1:
            raise AssertionError(f"Expected exactly one param_group, but got "
                                 f"{len(self.param_groups)}")
        self._check_group(self.param_groups[0])
        before = [p._data.copy() for p in self._params]
        work = copy.copy(self.state.get(self._params[0], {}))
        for k in ("old_dirs", "old_stps", "ro", "al"):  # mutated in place by the run
            if isinstance(work.get(k), list):
                work[k] = list(work[k])
        try:
            with no_grad():
                loss = self._run(closure, work)
        except BaseException:
            self._set_param(before)
            raise
        self.state[self._params[0]] = work
        return loss

    def _run(self, closure: Callable[[], Any], state: dict[str, Any]) -> Any:
        """PyTorch's step body on `state` (a copy the caller installs on success)."""
        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        with enable_grad():
            orig_loss = closure()
        loss = float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1
        flat_grad = self._gather_flat_grad()
        if np.abs(flat_grad).max(initial=0) <= tolerance_grad:
            return orig_loss
        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            self._direction(state, flat_grad, group["history_size"])
            d = state["d"]
            state["prev_flat_grad"] = flat_grad.copy()  # new: the old state stays intact
            state["prev_loss"] = prev_loss = loss
            if state["n_iter"] == 1:
                t = min(1.0, 1.0 / np.abs(flat_grad).sum()) * lr
            else:
                t = lr
            gtd = flat_grad.dot(d)
            if gtd > -tolerance_change:
                state["t"] = t
                break
            loss, flat_grad, t, ls_func_evals, opt_cond = self._move(
                closure, group, d, t, loss, flat_grad, gtd, max_eval - current_evals,
                last=n_iter == max_iter)
            state["t"] = t
            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals
            if (n_iter == max_iter or current_evals >= max_eval or opt_cond
                    or np.abs(d * t).max(initial=0) <= tolerance_change
                    or abs(loss - prev_loss) < tolerance_change):
                break
        return orig_loss

    def _move(self, closure, group, d, t, loss, flat_grad, gtd, max_ls: int, last: bool):
        """One step along `d`: a strong-Wolfe line search, or `lr` (then the closure again,
        unless it is the last iteration). Returns (loss, flat_grad, t, closure calls,
        whether the gradient is within tolerance_grad)."""
        tolerance_grad = group["tolerance_grad"]
        if group["line_search_fn"] is not None:
            x_init = [p._data.copy() for p in self._params]

            def obj_func(x, t, d):
                with enable_grad():
                    return self._directional_evaluate(closure, x, t, d)

            loss, flat_grad, t, evals = _strong_wolfe(obj_func, x_init, t, d, loss, flat_grad,
                                                      gtd, max_ls=max_ls)
            self._add_grad(t, d)
            return loss, flat_grad, t, evals, np.abs(flat_grad).max(initial=0) <= tolerance_grad
        self._add_grad(t, d)
        if last:
            return loss, flat_grad, t, 0, False
        with enable_grad():
            loss = float(closure())
        flat_grad = self._gather_flat_grad()
        return loss, flat_grad, t, 1, np.abs(flat_grad).max(initial=0) <= tolerance_grad

    @staticmethod
    def _direction(state: dict[str, Any], flat_grad: np.ndarray, history_size: int) -> None:
        """The next search direction `state["d"]` (the two-loop recursion), after
        adding the last step's curvature pair to the history."""
        if state["n_iter"] == 1:
            state["d"] = -flat_grad
            state.update(old_dirs=[], old_stps=[], ro=[], H_diag=1)
            return
        old_dirs, old_stps, ro = state["old_dirs"], state["old_stps"], state["ro"]
        y = flat_grad - state["prev_flat_grad"]
        s = state["d"] * state["t"]
        ys = y.dot(s)
        if ys > 1e-10:
            if len(old_dirs) == history_size:
                old_dirs.pop(0)
                old_stps.pop(0)
                ro.pop(0)
            old_dirs.append(y)
            old_stps.append(s)
            ro.append(1.0 / ys)
            state["H_diag"] = ys / y.dot(y)
        num_old = len(old_dirs)
        if "al" not in state or len(state["al"]) < history_size:
            state["al"] = [None] * history_size
        al = state["al"]
        q = -flat_grad
        for i in range(num_old - 1, -1, -1):
            al[i] = old_stps[i].dot(q) * ro[i]
            q += -al[i] * old_dirs[i]
        r = q * state["H_diag"]
        for i in range(num_old):
            be_i = old_dirs[i].dot(r) * ro[i]
            r += (al[i] - be_i) * old_stps[i]
        state["d"] = r

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load what `state_dict()` returned: the group's hyperparameters (checked as
        `Optimizer.load_state_dict` does) and the first parameter's L-BFGS state,
        its flat arrays copied (Tensors become arrays) and checked to have the
        parameters' total size.

        Raises:
            ValueError: a mismatched structure or flat array; nothing changed then.
        """
        if not isinstance(state_dict, dict) or "state" not in state_dict:
            raise ValueError("LBFGS.load_state_dict: expected a dict with 'state' and "
                             "'param_groups' (from state_dict())")
        saved = state_dict["state"]
        if not isinstance(saved, dict) or set(saved) - {0}:
            raise ValueError(f"LBFGS.load_state_dict: the state must be on parameter 0, got "
                             f"{sorted(map(repr, saved)) if isinstance(saved, dict) else saved}")
        state = self._load_lbfgs_state(saved.get(0, {}))
        super().load_state_dict(dict(state_dict, state={}))
        if state:
            self.state[self._params[0]] = state

    def _load_lbfgs_state(self, saved: Any) -> dict[str, Any]:
        """A copy of a saved L-BFGS state, Tensors as arrays, flat arrays checked."""
        if not isinstance(saved, dict):
            raise ValueError(f"LBFGS.load_state_dict: state 0 must be a dict, got "
                             f"{type(saved).__name__}")
        n = sum(p._data.size for p in self._params)
        dtype = self._params[0]._data.dtype

        def conv(k, v):
            if isinstance(v, list):
                return [conv(k, x) for x in v]
            if isinstance(v, Tensor):
                v = v._data
            if isinstance(v, np.ndarray):
                if v.ndim == 0:
                    return v.astype(dtype)[()]
                if v.shape != (n,):
                    raise ValueError(f"LBFGS.load_state_dict: state {k!r} has shape "
                                     f"{v.shape}, the parameters {n} elements")
                return np.array(v, dtype=dtype)
            return copy.deepcopy(v)

        return {k: conv(k, v) for k, v in saved.items()}
