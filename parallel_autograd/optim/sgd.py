"""`SGD`: stochastic gradient descent with momentum, dampening, Nesterov momentum, weight
decay and maximize, with torch.optim.SGD's arithmetic."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..tensor import Tensor
from ._blocks import blocks, effective_grad
from .optimizer import Optimizer, ParamsT, check_flag, check_real


class SGD(Optimizer):
    """Stochastic gradient descent, as `torch.optim.SGD`: with `g` the gradient
    (negated if `maximize`) plus `weight_decay * p`, and `b` the momentum buffer
    (`b = g` on the first step, then `b = momentum*b + (1 - dampening)*g`), the update is
    `p -= lr * (g + momentum*b if nesterov else b)` (`p -= lr*g` without momentum).

    Args:
        params: the tensors to optimize or param-group dicts (see `Optimizer`).
        lr: learning rate, >= 0 (default 1e-3).
        momentum: momentum factor, >= 0 (default 0).
        dampening: dampening of the momentum (default 0).
        weight_decay: L2 penalty added to the gradient, >= 0 (default 0).
        nesterov: Nesterov momentum (needs momentum > 0 and dampening 0).
        maximize: maximize the objective instead of minimizing it.
        foreach, fused, capturable, differentiable: PyTorch's implementation switches,
            where torch.optim has them (`optimizer.IMPL_FLAGS`: foreach and fused are
            ignored, a step with capturable or differentiable raises as PyTorch's).

    State per parameter (only with momentum): `"momentum_buffer"`, an array.
    Memory: each step reads `p`, `.grad` (and the buffer) once and writes `p` (and the
    buffer) once; no allocation after the first step (see `_blocks`).
    Thread safety: not locked (see `Optimizer`).
    """

    def __init__(self, params: ParamsT, lr: float = 1e-3, momentum: float = 0,
                 dampening: float = 0, weight_decay: float = 0, nesterov: bool = False,
                 *, maximize: bool = False, foreach: Optional[bool] = None,
                 differentiable: bool = False, fused: Optional[bool] = None) -> None:
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening,
                        weight_decay=weight_decay, nesterov=nesterov, maximize=maximize,
                        foreach=foreach, differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        check_real("SGD", "lr", group["lr"])
        check_real("SGD", "momentum", group["momentum"])
        check_real("SGD", "dampening", group["dampening"], low=-np.inf)
        check_real("SGD", "weight_decay", group["weight_decay"])
        check_flag("SGD", "nesterov", group["nesterov"])
        check_flag("SGD", "maximize", group["maximize"])
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError(f"SGD: nesterov momentum requires a momentum > 0 and zero "
                             f"dampening (got momentum={group['momentum']}, "
                             f"dampening={group['dampening']})")

    _counts_steps = False

    def _state_keys(self, group: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return (), ("momentum_buffer",) if group["momentum"] != 0 else ()

    def _initial(self, p: Tensor, group: dict[str, Any], key: str) -> np.ndarray:
        return np.empty(p._data.shape, p._data.dtype)  # its first step copies the gradient in

    def _update(self, p: Tensor, grad: np.ndarray, group: dict[str, Any]) -> None:
        lr, wd, maximize = group["lr"], group["weight_decay"], group["maximize"]
        momentum = group["momentum"]
        arrays = [p._data, grad]
        first = False
        if momentum != 0:
            arrays.append(self.state[p]["momentum_buffer"])
            first = "momentum_buffer" in self._made.get(p, ())  # torch: buf = grad
        # Per block, in cache: up to 2 passes (effective gradient), 3 (momentum buffer), 2
        # (nesterov), 2 (update): at most 9. From memory: one read of p, grad (buffer), one
        # write of p (buffer).
        for views in blocks(arrays, self._scratch):
            if momentum == 0:
                P, G, S, T = views
                g = effective_grad(G, P, wd, maximize, T)
            else:
                P, G, B, S, T = views
                g = effective_grad(G, P, wd, maximize, T)
                g = _momentum(g, B, S, momentum, group["dampening"], group["nesterov"],
                              first)
            np.multiply(g, -lr, out=S)  # torch: param.add_(grad, alpha=-lr)
            P += S


def _momentum(g: np.ndarray, buf: np.ndarray, tmp: np.ndarray, momentum: float,
              dampening: float, nesterov: bool, first: bool) -> np.ndarray:
    """Update the momentum buffer block `buf` with `g` (torch: a copy of `g` on the first
    step, else `buf.mul_(momentum).add_(g, alpha=1 - dampening)`) and return the
    direction: `g + momentum*buf` (into `g`'s or `tmp`'s memory) if nesterov, else `buf`."""
    if first:
        np.copyto(buf, g)
    else:
        buf *= momentum
        np.multiply(g, 1 - dampening, out=tmp)
        buf += tmp
    if not nesterov:
        return buf
    np.multiply(buf, momentum, out=tmp)
    tmp += g
    return tmp
