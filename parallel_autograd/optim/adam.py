"""`Adam` and `AdamW`, with torch.optim.Adam's and torch.optim.AdamW's arithmetic."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..tensor import Tensor
from ._blocks import blocks, effective_grad, lerp_
from .optimizer import Optimizer, ParamsT, check_flag, check_real



def check_adam_group(name: str, group: dict[str, Any], flags: tuple = ()) -> None:
    """lr, eps, betas, weight_decay, and the flags maximize, decoupled_weight_decay and
    `flags`: the checks of Adam's family (Adam, AdamW, NAdam, RAdam)."""
    check_real(name, "lr", group["lr"])
    check_real(name, "eps", group["eps"])
    betas = group["betas"]
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise TypeError(f"{name}: betas must be a pair (beta1, beta2), got {betas!r}")
    for i, b in enumerate(betas):
        check_real(name, f"betas[{i}]", b, 0.0, 1.0, high_open=True)
    check_real(name, "weight_decay", group["weight_decay"])
    for flag in (*flags, "maximize", "decoupled_weight_decay"):
        check_flag(name, flag, group[flag])

class Adam(Optimizer):
    """Adam, as `torch.optim.Adam` (Kingma & Ba; AMSGrad with `amsgrad=True`).

    Per step `t` (counted per parameter), with `g` the gradient (negated if `maximize`;
    plus `weight_decay * p` unless `decoupled_weight_decay`, in which case
    `p *= 1 - lr*weight_decay` first):
    `m = lerp(m, g, 1 - beta1)`, `v = beta2*v + (1 - beta2)*g*g`,
    (amsgrad: `v_max = max(v_max, v)`, used in place of `v` below),
    `p -= (lr / (1 - beta1**t)) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)`.

    Args:
        params: the tensors to optimize or param-group dicts (see `Optimizer`).
        lr: learning rate, >= 0 (default 1e-3).
        betas: `(beta1, beta2)`, each in [0, 1) (default (0.9, 0.999)).
        eps: added to the denominator, >= 0 (default 1e-8).
        weight_decay: >= 0 (default 0): an L2 penalty added to the gradient, or with
            `decoupled_weight_decay` AdamW's decay of the parameter.
        amsgrad: use the running maximum of the second moment.
        maximize: maximize the objective instead of minimizing it.
        foreach, fused, capturable, differentiable: PyTorch's implementation switches,
            where torch.optim has them (`optimizer.IMPL_FLAGS`: foreach and fused are
            ignored, a step with capturable or differentiable raises as PyTorch's).
        decoupled_weight_decay: AdamW's weight decay (what `AdamW` sets).

    State per parameter: `"step"` (a float), `"exp_avg"`, `"exp_avg_sq"` and with
    amsgrad `"max_exp_avg_sq"` (arrays of the parameter's shape and dtype).
    Memory: each step reads `p`, `.grad` and the state arrays once and writes `p` and
    the state arrays once; nothing is allocated after the first step (see `_blocks`).
    Thread safety: not locked (see `Optimizer`).
    """

    _name = "Adam"

    def __init__(self, params: ParamsT, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, amsgrad: bool = False, *,
                 foreach: Optional[bool] = None, maximize: bool = False,
                 capturable: bool = False, differentiable: bool = False,
                 fused: Optional[bool] = None, decoupled_weight_decay: bool = False) -> None:
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        amsgrad=amsgrad, maximize=maximize, foreach=foreach,
                        capturable=capturable, differentiable=differentiable, fused=fused,
                        decoupled_weight_decay=decoupled_weight_decay)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        check_adam_group(self._name, group, ("amsgrad",))

    def _state_keys(self, group: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return ("exp_avg", "exp_avg_sq"), ("max_exp_avg_sq",) if group["amsgrad"] else ()

    def _update(self, p: Tensor, grad: np.ndarray, group: dict[str, Any]) -> None:
        state = self.state[p]
        amsgrad = group["amsgrad"]
        state["step"] += 1
        step = state["step"]
        lr, wd, eps = group["lr"], group["weight_decay"], group["eps"]
        beta1, beta2 = group["betas"]
        decoupled = group["decoupled_weight_decay"]
        # torch's scalars, computed the same way in Python floats
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        step_size = lr / bias_correction1
        bias_correction2_sqrt = bias_correction2 ** 0.5
        arrays = [p._data, grad, state["exp_avg"], state["exp_avg_sq"]]
        if amsgrad:
            arrays.append(state["max_exp_avg_sq"])
        # Per block, in cache: up to 2 passes (decay, effective gradient), 3 (lerp), 4
        # (second moment), 1 (amsgrad max), 3 (denominator), 3 (update): at most 16. From
        # memory: one read of p, grad, exp_avg, exp_avg_sq (max_exp_avg_sq), one write of
        # p, exp_avg, exp_avg_sq (max_exp_avg_sq).
        for views in blocks(arrays, self._scratch):
            P, G, M, V = views[:4]
            S, T = views[-2:]
            if wd != 0 and decoupled:
                P *= 1 - lr * wd
            g = effective_grad(G, P, 0 if decoupled else wd, group["maximize"], T)
            lerp_(M, g, 1 - beta1, S)  # exp_avg.lerp_(grad, 1 - beta1)
            V *= beta2  # exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            np.multiply(g, 1 - beta2, out=S)
            S *= g
            V += S
            if amsgrad:
                np.maximum(views[4], V, out=views[4])
            # denom = (v.sqrt() / bias_correction2_sqrt).add_(eps)
            np.sqrt(views[4] if amsgrad else V, out=S)
            S /= bias_correction2_sqrt
            S += eps
            # param.addcdiv_(exp_avg, denom, value=-step_size)
            np.multiply(M, -step_size, out=T)
            T /= S
            P += T


class AdamW(Adam):
    """AdamW, as `torch.optim.AdamW`: `Adam` with decoupled weight decay (the parameter
    is multiplied by `1 - lr*weight_decay` before the Adam update; the gradient is not
    changed) and a default `weight_decay` of 1e-2.

    Args:
        params: the tensors to optimize or param-group dicts (see `Optimizer`).
        lr: learning rate, >= 0 (default 1e-3).
        betas: `(beta1, beta2)`, each in [0, 1) (default (0.9, 0.999)).
        eps: added to the denominator, >= 0 (default 1e-8).
        weight_decay: decoupled weight decay, >= 0 (default 1e-2).
        amsgrad: use the running maximum of the second moment.
        maximize: maximize the objective instead of minimizing it.
        foreach, fused, capturable, differentiable: PyTorch's implementation switches,
            where torch.optim has them (`optimizer.IMPL_FLAGS`: foreach and fused are
            ignored, a step with capturable or differentiable raises as PyTorch's).

    State, memory and thread safety: as `Adam`.
    """

    _name = "AdamW"

    def __init__(self, params: ParamsT, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *,
                 maximize: bool = False, foreach: Optional[bool] = None,
                 capturable: bool = False, differentiable: bool = False,
                 fused: Optional[bool] = None) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         amsgrad=amsgrad, maximize=maximize, foreach=foreach,
                         capturable=capturable, differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """As `Optimizer.load_state_dict`; the groups keep AdamW's decoupled weight
        decay whatever the state dict says (as in PyTorch)."""
        super().load_state_dict(state_dict)
        for group in self.param_groups:
            group["decoupled_weight_decay"] = True
