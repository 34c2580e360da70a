"""`Adadelta`, with torch.optim.Adadelta's arithmetic."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..tensor import Tensor
from ._blocks import blocks, effective_grad
from .optimizer import Optimizer, ParamsT, check_flag, check_real


class Adadelta(Optimizer):
    """Adadelta, as `torch.optim.Adadelta`. With `g` the gradient (negated if `maximize`)
    plus `weight_decay * p`: `square_avg = rho*square_avg + (1 - rho)*g*g`,
    `delta = sqrt(acc_delta + eps) / sqrt(square_avg + eps) * g`,
    `acc_delta = rho*acc_delta + (1 - rho)*delta*delta`, `p -= lr * delta`.

    Args:
        params: the tensors to optimize or param-group dicts (see `Optimizer`).
        lr: coefficient of delta before it is applied, >= 0 (default 1.0).
        rho: coefficient of the running averages, in [0, 1] (default 0.9).
        eps: added inside the square roots, >= 0 (default 1e-6).
        weight_decay: L2 penalty added to the gradient, >= 0 (default 0).
        maximize: maximize the objective instead of minimizing it.
        foreach, fused, capturable, differentiable: PyTorch's implementation switches,
            where torch.optim has them (`optimizer.IMPL_FLAGS`: foreach and fused are
            ignored, a step with capturable or differentiable raises as PyTorch's).

    State per parameter: `"step"` (a float), `"square_avg"` and `"acc_delta"` (arrays of
    the parameter's shape and dtype, zeros at the first step).
    Rounding: PyTorch's order of operations; with `weight_decay` or `maximize` the delta
    is formed as `sqrt(acc_delta + eps) * (g / std)` (one rounding apart: the two work
    buffers hold the effective gradient and std).
    Memory: each step reads `p`, `.grad` and the state arrays once and writes `p` and the
    state arrays once; nothing is allocated after the first step (see `_blocks`).
    Thread safety: not locked (see `Optimizer`).
    """

    def __init__(self, params: ParamsT, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                 weight_decay: float = 0, foreach: Optional[bool] = None, *,
                 capturable: bool = False, maximize: bool = False,
                 differentiable: bool = False) -> None:
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, foreach=foreach,
                        capturable=capturable, maximize=maximize,
                        differentiable=differentiable)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        check_real("Adadelta", "lr", group["lr"])
        check_real("Adadelta", "rho", group["rho"], 0.0, 1.0)
        check_real("Adadelta", "eps", group["eps"])
        check_real("Adadelta", "weight_decay", group["weight_decay"])
        check_flag("Adadelta", "maximize", group["maximize"])

    def _state_keys(self, group: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return ("square_avg", "acc_delta"), ()

    def _update(self, p: Tensor, grad: np.ndarray, group: dict[str, Any]) -> None:
        state = self.state[p]
        state["step"] += 1
        lr, rho, eps = group["lr"], group["rho"], group["eps"]
        for P, G, V, D, S, T in blocks([p._data, grad, state["square_avg"], state["acc_delta"]],
                                       self._scratch):
            g = effective_grad(G, P, group["weight_decay"], group["maximize"], T)
            V *= rho  # square_avg.mul_(rho).addcmul_(grad, grad, value=1 - rho)
            np.multiply(g, 1 - rho, out=S)
            S *= g
            V += S
            np.add(V, eps, out=S)  # std = square_avg.add(eps).sqrt_()
            np.sqrt(S, out=S)
            if g is T:  # T holds g: delta = sqrt(acc_delta + eps) * (g / std)
                np.divide(g, S, out=S)
                np.add(D, eps, out=T)
                np.sqrt(T, out=T)
                T *= S
            else:  # delta = acc_delta.add(eps).sqrt_(); delta.div_(std).mul_(grad)
                np.add(D, eps, out=T)
                np.sqrt(T, out=T)
                T /= S
                T *= g
            D *= rho  # acc_delta.mul_(rho).addcmul_(delta, delta, value=1 - rho)
            np.multiply(T, 1 - rho, out=S)
            S *= T
            D += S
            np.multiply(T, -lr, out=S)  # param.add_(delta, alpha=-lr)
            P += S
