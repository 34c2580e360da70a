"""`NAdam` and `RAdam`, with torch.optim.NAdam's and torch.optim.RAdam's arithmetic."""
from __future__ import annotations

import math
import numbers
from typing import Any, Optional

import numpy as np

from .. import dtypes as D
from ..tensor import Tensor
from ._blocks import blocks, effective_grad, lerp_
from .adam import check_adam_group
from .optimizer import Optimizer, ParamsT, load_step, check_real


def _moments(P, G, M, V, S, T, group: dict[str, Any], beta1: float, beta2: float):
    """The shared start of NAdam's and RAdam's step on one block: weight decay (the
    parameter's, decoupled, or the gradient's), `m.lerp_(g, 1 - beta1)` and
    `v.mul_(beta2).addcmul_(g, g, value=1 - beta2)`. Returns the effective gradient
    (`G` itself or `T`)."""
    lr, wd = group["lr"], group["weight_decay"]
    decoupled = group["decoupled_weight_decay"]
    if wd != 0 and decoupled:
        P *= 1 - lr * wd
    g = effective_grad(G, P, 0 if decoupled else wd, group["maximize"], T)
    lerp_(M, g, 1 - beta1, S)
    V *= beta2
    np.multiply(g, 1 - beta2, out=S)
    S *= g
    V += S
    return g


class NAdam(Optimizer):
    """NAdam, as `torch.optim.NAdam` (Adam with Nesterov momentum, Dozat 2016; with
    `decoupled_weight_decay` the NAdamW variant).

    Per step `t` (counted per parameter), with `g` the gradient (negated if `maximize`;
    plus `weight_decay * p` unless `decoupled_weight_decay`, in which case
    `p *= 1 - lr*weight_decay` first): `mu_t = beta1*(1 - 0.5*0.96**(t*momentum_decay))`,
    `mu_product *= mu_t`, `m = lerp(m, g, 1 - beta1)`, `v = beta2*v + (1 - beta2)*g*g`,
    `d = sqrt(v / (1 - beta2**t)) + eps`,
    `p -= lr*(1 - mu_t)/(1 - mu_product) * g/d + lr*mu_{t+1}/(1 - mu_product*mu_{t+1}) * m/d`.

    Args:
        params: the tensors to optimize or param-group dicts (see `Optimizer`).
        lr: learning rate, >= 0 (default 2e-3).
        betas: `(beta1, beta2)`, each in [0, 1) (default (0.9, 0.999)).
        eps: added to the denominator, >= 0 (default 1e-8).
        weight_decay: >= 0 (default 0): an L2 penalty added to the gradient, or with
            `decoupled_weight_decay` a decay of the parameter.
        momentum_decay: >= 0 (default 4e-3), the `psi` of the momentum schedule.
        decoupled_weight_decay: decay the parameter rather than add to the gradient.
        maximize: maximize the objective instead of minimizing it.
        foreach, capturable, differentiable: PyTorch's implementation switches
            (`optimizer.IMPL_FLAGS`: foreach is ignored, a step with capturable or
            differentiable raises as PyTorch's).

    State per parameter: `"step"` and `"mu_product"` (floats; 0-d Tensors of PyTorch's
    scalar dtype in `state_dict()`), `"exp_avg"`, `"exp_avg_sq"` (arrays of the
    parameter's shape and dtype). Under a float32 default dtype `mu_product` is rounded
    to float32 after each product, as PyTorch's float32 scalar tensor is.
    Memory: each step reads `p`, `.grad` and the state arrays once and writes them
    once; nothing is allocated after the first step (see `_blocks`).
    Thread safety: not locked (see `Optimizer`).
    """

    def __init__(self, params: ParamsT, lr: float = 2e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, momentum_decay: float = 4e-3,
                 decoupled_weight_decay: bool = False, *, foreach: Optional[bool] = None,
                 maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False) -> None:
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        momentum_decay=momentum_decay,
                        decoupled_weight_decay=decoupled_weight_decay, maximize=maximize,
                        foreach=foreach, capturable=capturable, differentiable=differentiable)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        check_adam_group("NAdam", group)
        check_real("NAdam", "momentum_decay", group["momentum_decay"])

    def _state_keys(self, group: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return ("exp_avg", "exp_avg_sq"), ()

    def _new_state(self, p: Tensor, group: dict[str, Any],
                   state: Optional[dict[str, Any]]) -> dict[str, Any]:
        new = super()._new_state(p, group, state)
        if not state:
            new["mu_product"] = 1.0
        return new

    def _check_state(self, where: str, key: Any, p: Tensor,
                     keys: tuple[tuple[str, ...], tuple[str, ...]],
                     state: dict[str, Any]) -> None:
        super()._check_state(where, key, p, keys, state)
        mu = state.get("mu_product")
        if type(mu) is float and 0.0 <= mu < math.inf:
            return
        where = where.format(key)
        if "mu_product" not in state:
            raise ValueError(f"{where}: its state lacks 'mu_product' (it holds "
                             f"{sorted(map(str, state))}; an empty state starts afresh)")
        if isinstance(mu, (bool, np.bool_)) or not isinstance(mu, numbers.Real):
            raise TypeError(f"{where}: state 'mu_product' must be a real number, got "
                            f"{type(mu).__name__} {mu!r}")
        if not (math.isfinite(mu) and mu >= 0):
            raise ValueError(f"{where}: state 'mu_product' must be finite and >= 0, got "
                             f"{mu!r}")

    def state_dict(self) -> dict[str, Any]:
        """As `Optimizer.state_dict`, `"mu_product"` a 0-d Tensor like `"step"`."""
        sd = super().state_dict()
        scalar = np.float64 if D.get_default_dtype() == D.float64 else np.float32
        for s in sd["state"].values():
            if isinstance(s.get("mu_product"), float):
                s["mu_product"] = Tensor._wrap(np.array(s["mu_product"], dtype=scalar))
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """As `Optimizer.load_state_dict`; `"mu_product"` (a number or 0-d array, as
        PyTorch saves it) becomes a float (a string: TypeError, as PyTorch's)."""
        if isinstance(state_dict, dict) and isinstance(state_dict.get("state"), dict):
            state = {}
            for k, s in state_dict["state"].items():
                if isinstance(s, dict) and "mu_product" in s:
                    v = s["mu_product"]
                    if isinstance(v, (str, bytes)):  # PyTorch's torch.tensor(v): TypeError
                        raise TypeError(f"NAdam.load_state_dict: state 'mu_product' of "
                                        f"parameter {k!r} must be a number, got {v!r}")
                    s = dict(s, mu_product=load_step(
                        "NAdam", k, v._data if isinstance(v, Tensor) else v, "mu_product"))
                state[k] = s
            state_dict = dict(state_dict, state=state)
        super().load_state_dict(state_dict)

    def _update(self, p: Tensor, grad: np.ndarray, group: dict[str, Any]) -> None:
        state = self.state[p]
        state["step"] += 1
        step = state["step"]
        lr, eps, psi = group["lr"], group["eps"], group["momentum_decay"]
        beta1, beta2 = group["betas"]
        bias_correction2 = 1 - beta2 ** step
        mu = beta1 * (1.0 - 0.5 * (0.96 ** (step * psi)))
        mu_next = beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * psi)))
        mu_product = state["mu_product"] * mu
        if D.get_default_dtype() != D.float64:  # PyTorch's float32 scalar tensor
            mu_product = float(np.float32(np.float32(state["mu_product"]) * np.float32(mu)))
        state["mu_product"] = mu_product
        mu_product_next = mu_product * mu_next
        c_grad = -lr * (1.0 - mu) / (1.0 - mu_product)
        c_avg = (-lr * mu_next) / (1.0 - mu_product_next)
        for P, G, M, V, S, T in blocks([p._data, grad, state["exp_avg"],
                                        state["exp_avg_sq"]], self._scratch):
            g = _moments(P, G, M, V, S, T, group, beta1, beta2)
            # denom = exp_avg_sq.div(bias_correction2).sqrt().add_(eps)
            np.divide(V, bias_correction2, out=S)
            np.sqrt(S, out=S)
            S += eps
            # param.addcdiv_(grad, denom, value=c_grad); param.addcdiv_(exp_avg, denom, ...)
            np.multiply(g, c_grad, out=T)  # g may be T: overwritten only once read
            T /= S
            P += T
            np.multiply(M, c_avg, out=T)
            T /= S
            P += T


class RAdam(Optimizer):
    """RAdam, as `torch.optim.RAdam` (Liu et al. 2019, rectified Adam; with
    `decoupled_weight_decay` the RAdamW variant).

    Per step `t`, with `g` and the weight decay as `NAdam`'s: `m = lerp(m, g, 1 - beta1)`,
    `v = beta2*v + (1 - beta2)*g*g`, `rho_inf = 2/(1 - beta2) - 1`,
    `rho_t = rho_inf - 2*t*beta2**t/(1 - beta2**t)`; if `rho_t > 5`:
    `p -= lr * m/(1 - beta1**t) * sqrt(1 - beta2**t)/(sqrt(v) + eps) * r_t` with the
    rectification `r_t = sqrt((rho_t-4)(rho_t-2)rho_inf / ((rho_inf-4)(rho_inf-2)rho_t))`,
    else `p -= lr * m/(1 - beta1**t)`.

    Args:
        params: the tensors to optimize or param-group dicts (see `Optimizer`).
        lr: learning rate, >= 0 (default 1e-3).
        betas: `(beta1, beta2)`, each in [0, 1) (default (0.9, 0.999)).
        eps: added to the denominator, >= 0 (default 1e-8).
        weight_decay: >= 0 (default 0), as `NAdam`'s.
        decoupled_weight_decay: decay the parameter rather than add to the gradient.
        maximize: maximize the objective instead of minimizing it.
        foreach, capturable, differentiable: as `NAdam`'s.

    State per parameter: `"step"` (a float), `"exp_avg"`, `"exp_avg_sq"`.
    Memory and thread safety: as `NAdam`.
    """

    def __init__(self, params: ParamsT, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, decoupled_weight_decay: bool = False, *,
                 foreach: Optional[bool] = None, maximize: bool = False,
                 capturable: bool = False, differentiable: bool = False) -> None:
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        maximize=maximize, foreach=foreach, capturable=capturable,
                        decoupled_weight_decay=decoupled_weight_decay,
                        differentiable=differentiable)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        check_adam_group("RAdam", group)

    def _state_keys(self, group: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return ("exp_avg", "exp_avg_sq"), ()

    def _update(self, p: Tensor, grad: np.ndarray, group: dict[str, Any]) -> None:
        state = self.state[p]
        state["step"] += 1
        step = state["step"]
        lr, eps = group["lr"], group["eps"]
        beta1, beta2 = group["betas"]
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        rho_inf = 2 / (1 - beta2) - 1
        rho_t = rho_inf - 2 * step * (beta2 ** step) / bias_correction2
        rect = None
        if rho_t > 5.0:
            rect = ((rho_t - 4) * (rho_t - 2) * rho_inf
                    / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
        for P, G, M, V, S, T in blocks([p._data, grad, state["exp_avg"],
                                        state["exp_avg_sq"]], self._scratch):
            _moments(P, G, M, V, S, T, group, beta1, beta2)
            np.divide(M, bias_correction1, out=T)  # bias_corrected_exp_avg
            T *= lr
            if rect is not None:
                # adaptive lr = bias_correction2**0.5 / (sqrt(v) + eps), as PyTorch's
                # float / tensor: reciprocal, then the product
                np.sqrt(V, out=S)
                S += eps
                np.reciprocal(S, out=S)
                S *= bias_correction2 ** 0.5
                T *= S
                T *= rect
            P -= T
