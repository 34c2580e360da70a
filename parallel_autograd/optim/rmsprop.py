"""`RMSprop`, with torch.optim.RMSprop's arithmetic."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..tensor import Tensor
from ._blocks import blocks, effective_grad, lerp_
from .optimizer import Optimizer, ParamsT, check_flag, check_real


class RMSprop(Optimizer):
    """RMSprop, as `torch.optim.RMSprop`. With `g` the gradient (negated if `maximize`)
    plus `weight_decay * p`: `v = alpha*v + (1 - alpha)*g*g`; centered:
    `a = lerp(a, g, 1 - alpha)` and `d = sqrt(v - a*a) + eps`, else `d = sqrt(v) + eps`;
    with momentum `b = momentum*b + g/d`, `p -= lr*b`; without, `p -= lr*g/d`.

    Args:
        params: the tensors to optimize or param-group dicts (see `Optimizer`).
        lr: learning rate, >= 0 (default 1e-2).
        alpha: smoothing constant, in [0, 1] (default 0.99).
        eps: added to the denominator, >= 0 (default 1e-8).
        weight_decay: L2 penalty added to the gradient, >= 0 (default 0).
        momentum: momentum factor, >= 0 (default 0).
        centered: normalize by an estimate of the gradient's variance.
        maximize: maximize the objective instead of minimizing it.
        foreach, fused, capturable, differentiable: PyTorch's implementation switches,
            where torch.optim has them (`optimizer.IMPL_FLAGS`: foreach and fused are
            ignored, a step with capturable or differentiable raises as PyTorch's).

    State per parameter: `"step"` (a float), `"square_avg"`, with momentum > 0
    `"momentum_buffer"`, centered `"grad_avg"` (arrays of the parameter's shape).
    Memory: each step reads `p`, `.grad` and the state arrays once and writes `p` and
    the state arrays once; nothing is allocated after the first step (see `_blocks`).
    Thread safety: not locked (see `Optimizer`).
    """

    def __init__(self, params: ParamsT, lr: float = 1e-2, alpha: float = 0.99,
                 eps: float = 1e-8, weight_decay: float = 0, momentum: float = 0,
                 centered: bool = False, capturable: bool = False,
                 foreach: Optional[bool] = None, maximize: bool = False,
                 differentiable: bool = False) -> None:
        defaults = dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                        momentum=momentum, centered=centered, capturable=capturable,
                        foreach=foreach, maximize=maximize, differentiable=differentiable)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        check_real("RMSprop", "lr", group["lr"])
        check_real("RMSprop", "alpha", group["alpha"], 0.0, 1.0)
        check_real("RMSprop", "eps", group["eps"])
        check_real("RMSprop", "weight_decay", group["weight_decay"])
        check_real("RMSprop", "momentum", group["momentum"])
        check_flag("RMSprop", "centered", group["centered"])
        check_flag("RMSprop", "maximize", group["maximize"])

    def _state_keys(self, group: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        optional = ("grad_avg",) if group["centered"] else ()
        return ("square_avg",), optional + (("momentum_buffer",) if group["momentum"] > 0
                                            else ())

    def _update(self, p: Tensor, grad: np.ndarray, group: dict[str, Any]) -> None:
        state = self.state[p]
        required, optional = self._state_keys(group)
        arrays = [state[k] for k in required + optional]  # square_avg, [grad_avg], [buffer]
        state["step"] += 1
        lr, alpha, eps, momentum = group["lr"], group["alpha"], group["eps"], group["momentum"]
        centered = group["centered"]
        # Per block, in cache: up to 2 passes (effective gradient), 4 (square_avg), 6
        # (centered: lerp, variance) or 1 (sqrt), 1 (eps), 5 (momentum) or 3 (update): at
        # most 18. From memory: one read of p, grad and each state array, one write of p
        # and each state array.
        for views in blocks([p._data, grad, *arrays], self._scratch):
            P, G, V = views[:3]
            S, T = views[-2:]
            g = effective_grad(G, P, group["weight_decay"], group["maximize"], T)
            V *= alpha  # square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
            np.multiply(g, 1 - alpha, out=S)
            S *= g
            V += S
            if centered:  # grad_avg.lerp_(grad, 1 - alpha); square_avg.addcmul(ga, ga, value=-1)
                A = views[3]
                lerp_(A, g, 1 - alpha, S)
                np.multiply(A, A, out=S)
                np.subtract(V, S, out=S)
                np.sqrt(S, out=S)
            else:
                np.sqrt(V, out=S)
            S += eps
            if momentum > 0:  # buf.mul_(momentum).addcdiv_(grad, avg); param.add_(buf, alpha=-lr)
                B = views[-3]
                B *= momentum
                np.divide(g, S, out=S)
                B += S
                np.multiply(B, -lr, out=S)
                P += S
            else:  # param.addcdiv_(grad, avg, value=-lr)
                np.multiply(g, -lr, out=T)
                T /= S
                P += T
