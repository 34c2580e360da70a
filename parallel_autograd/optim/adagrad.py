"""`Adagrad`, with torch.optim.Adagrad's arithmetic."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..tensor import Tensor
from ._blocks import blocks, effective_grad
from .optimizer import Optimizer, ParamsT, check_flag, check_real


class Adagrad(Optimizer):
    """Adagrad, as `torch.optim.Adagrad`. At step `t`, with `g` the gradient (negated if
    `maximize`) plus `weight_decay * p`: `clr = lr / (1 + (t - 1)*lr_decay)`,
    `sum += g*g`, `p -= clr * g / (sqrt(sum) + eps)`.

    Args:
        params: the tensors to optimize or param-group dicts (see `Optimizer`).
        lr: learning rate, >= 0 (default 1e-2).
        lr_decay: learning-rate decay, >= 0 (default 0).
        weight_decay: L2 penalty added to the gradient, >= 0 (default 0).
        initial_accumulator_value: the sum's starting value, >= 0 (default 0).
        eps: added to the denominator, >= 0 (default 1e-10).
        maximize: maximize the objective instead of minimizing it.
        foreach, fused, capturable, differentiable: PyTorch's implementation switches,
            where torch.optim has them (`optimizer.IMPL_FLAGS`: foreach and fused are
            ignored, a step with capturable or differentiable raises as PyTorch's).

    State per parameter, created at construction as in PyTorch: `"step"` (a float) and
    `"sum"` (an array of the parameter's shape and dtype).
    Memory: each step reads `p`, `.grad` and `sum` once and writes `p` and `sum` once;
    nothing is allocated (see `_blocks`).
    Thread safety: not locked (see `Optimizer`).
    """

    def __init__(self, params: ParamsT, lr: float = 1e-2, lr_decay: float = 0,
                 weight_decay: float = 0, initial_accumulator_value: float = 0,
                 eps: float = 1e-10, foreach: Optional[bool] = None, *,
                 maximize: bool = False, differentiable: bool = False,
                 fused: Optional[bool] = None) -> None:
        defaults = dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, eps=eps,
                        foreach=foreach, maximize=maximize, differentiable=differentiable,
                        fused=fused)
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """As `Optimizer.add_param_group`; also creates the new parameters' state
        (`step` 0 and `sum` filled with `initial_accumulator_value`), as PyTorch's
        Adagrad does at construction."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        for p in group["params"]:
            self.state[p].update(self._new_state(p, group, self.state.get(p)))

    def _check_group(self, group: dict[str, Any]) -> None:
        check_real("Adagrad", "lr", group["lr"])
        check_real("Adagrad", "lr_decay", group["lr_decay"])
        check_real("Adagrad", "weight_decay", group["weight_decay"])
        check_real("Adagrad", "initial_accumulator_value", group["initial_accumulator_value"])
        check_real("Adagrad", "eps", group["eps"])
        check_flag("Adagrad", "maximize", group["maximize"])

    def _state_keys(self, group: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return ("sum",), ()

    def _initial(self, p: Tensor, group: dict[str, Any], key: str) -> np.ndarray:
        return np.full(p._data.shape, group["initial_accumulator_value"], dtype=p._data.dtype)

    def _update(self, p: Tensor, grad: np.ndarray, group: dict[str, Any]) -> None:
        state = self.state[p]
        state["step"] += 1
        clr = group["lr"] / (1 + (state["step"] - 1) * group["lr_decay"])
        eps = group["eps"]
        # Per block, in cache: up to 2 passes (effective gradient), 2 (sum), 2 (std), 3
        # (update): at most 9. From memory: one read of p, grad, sum, one write of p, sum.
        for P, G, A, S, T in blocks([p._data, grad, state["sum"]], self._scratch):
            g = effective_grad(G, P, group["weight_decay"], group["maximize"], T)
            np.multiply(g, g, out=S)  # state_sum.addcmul_(grad, grad, value=1)
            A += S
            np.sqrt(A, out=S)  # std = state_sum.sqrt().add_(eps)
            S += eps
            np.multiply(g, -clr, out=T)  # param.addcdiv_(grad, std, value=-clr)
            T /= S
            P += T
