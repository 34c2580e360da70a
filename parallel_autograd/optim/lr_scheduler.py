"""Learning-rate schedulers, as `torch.optim.lr_scheduler`: `LRScheduler` (the base),
`StepLR`, `CosineAnnealingLR`, `LambdaLR`.

A scheduler sets `group["lr"]` of its optimizer's parameter groups when it steps; call
`scheduler.step()` once per epoch (or iteration), after `optimizer.step()`. At
construction with `last_epoch=-1` each group gets `"initial_lr"` (its current lr, kept if
already there) and the scheduler steps once to epoch 0; resuming with `last_epoch >= 0`
needs `"initial_lr"` in every group (load the optimizer's state dict first). The
arithmetic is PyTorch's (the same Python float operations), so the learning rates equal
PyTorch's.

Thread safety: not locked; step a scheduler from the thread that steps its optimizer.
"""
from __future__ import annotations

import math
import types
import warnings
from typing import Any, Callable, Optional, Sequence, Union

from .optimizer import Optimizer

__all__ = ["LRScheduler", "StepLR", "CosineAnnealingLR", "LambdaLR"]

_EPOCH_DEPRECATION = (
    "The epoch argument of scheduler.step() is deprecated (as in PyTorch): call "
    "scheduler.step() without it. With an epoch, the closed form is used where there is one.")


class LRScheduler:
    """Base class: subclasses compute the next learning rates in `get_lr()`.

    Args:
        optimizer: the optimizer whose groups' `"lr"` it sets.
        last_epoch: the index of the last epoch; -1 (default) starts a schedule.

    Attributes:
        optimizer, base_lrs (each group's `"initial_lr"`), last_epoch.

    Raises:
        TypeError: `optimizer` is not an `Optimizer`.
        KeyError: `last_epoch >= 0` but a group has no `"initial_lr"`.
    """

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] "
                                   f"when resuming a scheduler with last_epoch >= 0 (load the "
                                   f"optimizer's state dict first)")
        self.base_lrs: list[float] = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._step_count = 0
        self._is_initial = True
        self.step()
        self._is_initial = False

    def get_lr(self) -> list[float]:
        """The learning rates for `last_epoch` (already advanced), one per group.
        Subclasses implement it; to read the current ones use `get_last_lr()`."""
        raise NotImplementedError

    def get_last_lr(self) -> list[float]:
        """The learning rates this scheduler set last, one per parameter group."""
        return self._last_lr

    def step(self, epoch: Optional[int] = None) -> None:
        """Advance one epoch and set each group's `"lr"`. Call it after
        `optimizer.step()` (a warning says so if the optimizer has not stepped yet).
        `epoch` is deprecated, as in PyTorch: it sets `last_epoch` and uses the closed
        form where the scheduler has one."""
        if self._step_count == 1 and not self.optimizer._opt_called and \
                type(self.optimizer).step is Optimizer.step:
            warnings.warn("Detected call of `lr_scheduler.step()` before `optimizer.step()`: "
                          "call them in the opposite order, or the first value of the "
                          "learning rate schedule is skipped (as in PyTorch)",
                          UserWarning, stacklevel=2)
        self._step_count += 1
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            warnings.warn(_EPOCH_DEPRECATION, UserWarning, stacklevel=2)
            self.last_epoch = epoch
            closed = getattr(self, "_get_closed_form_lr", None)
            values = closed() if closed is not None else self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, values):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's state: every attribute but the optimizer (as in PyTorch)."""
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what `state_dict()` returned."""
        self.__dict__.update(state_dict)


def _check_int(owner: str, name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}: {name} must be an int, got {type(value).__name__} {value!r}")
    if value < low:
        raise ValueError(f"{owner}: invalid {name}: {value} (it must be >= {low})")


class StepLR(LRScheduler):
    """Multiply each group's lr by `gamma` every `step_size` epochs, as
    `torch.optim.lr_scheduler.StepLR`.

    Args:
        optimizer: the optimizer.
        step_size: period of the decay, an int >= 1.
        gamma: multiplicative factor (default 0.1).
        last_epoch: see `LRScheduler`.
    """

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        _check_int("StepLR", "step_size", step_size, 1)
        self.step_size = step_size
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        """The current lrs, times gamma when `last_epoch` is a nonzero multiple of
        `step_size`."""
        groups = self.optimizer.param_groups
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return [g["lr"] for g in groups]
        return [g["lr"] * self.gamma for g in groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * self.gamma ** (self.last_epoch // self.step_size)
                for base_lr in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """Cosine annealing from each group's initial lr to `eta_min` over `T_max` epochs
    (then back up, periodically), as `torch.optim.lr_scheduler.CosineAnnealingLR`, with
    its recursive formula
    `lr_t = eta_min + (lr_{t-1} - eta_min) * (1 + cos(pi*t/T_max)) / (1 + cos(pi*(t-1)/T_max))`.

    Args:
        optimizer: the optimizer.
        T_max: half period, an int >= 1.
        eta_min: minimum learning rate (default 0).
        last_epoch: see `LRScheduler`.
    """

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0,
                 last_epoch: int = -1) -> None:
        _check_int("CosineAnnealingLR", "T_max", T_max, 1)
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        """The next lrs by PyTorch's recursive formula (its closed form when resuming)."""
        groups, t, T, eta_min = self.optimizer.param_groups, self.last_epoch, self.T_max, \
            self.eta_min
        if self._is_initial:
            return [g["lr"] for g in groups]
        if self._step_count == 1 and t > 0:
            return [eta_min + (base_lr - eta_min) * (1 + math.cos(t * math.pi / T)) / 2
                    for base_lr in self.base_lrs]
        if (t - 1 - T) % (2 * T) == 0:
            return [g["lr"] + (base_lr - eta_min) * (1 - math.cos(math.pi / T)) / 2
                    for base_lr, g in zip(self.base_lrs, groups)]
        return [(1 + math.cos(math.pi * t / T)) / (1 + math.cos(math.pi * (t - 1) / T))
                * (g["lr"] - eta_min) + eta_min for g in groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [self.eta_min + (base_lr - self.eta_min)
                * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for base_lr in self.base_lrs]


class LambdaLR(LRScheduler):
    """Set each group's lr to its initial lr times `lr_lambda(epoch)`, as
    `torch.optim.lr_scheduler.LambdaLR`.

    Args:
        optimizer: the optimizer.
        lr_lambda: a function of the epoch (an int) returning a factor, or a list of
            such functions, one per parameter group.
        last_epoch: see `LRScheduler`.

    Raises:
        ValueError: a list of `lr_lambda`s whose length is not the number of groups.
        TypeError: an `lr_lambda` that is not callable.

    Its state dict holds the lambdas' attributes only for callable objects (not for
    functions or lambdas), as in PyTorch.
    """

    def __init__(self, optimizer: Optimizer,
                 lr_lambda: Union[Callable[[int], float], Sequence[Callable[[int], float]]],
                 last_epoch: int = -1) -> None:
        n = len(optimizer.param_groups)
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != n:
                raise ValueError(f"LambdaLR: expected {n} lr_lambdas (one per parameter "
                                 f"group), got {len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * n
        for f in self.lr_lambdas:
            if not callable(f):
                raise TypeError(f"LambdaLR: lr_lambda must be callable, got {f!r}")
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        """Each group's initial lr times its lambda at `last_epoch`."""
        return [base_lr * f(self.last_epoch)
                for f, base_lr in zip(self.lr_lambdas, self.base_lrs)]

    def state_dict(self) -> dict[str, Any]:
        """As `LRScheduler.state_dict`, with `lr_lambdas` holding for each lambda its
        `__dict__` if it is a callable object, None if it is a function."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}
        state["lr_lambdas"] = [None if isinstance(f, types.FunctionType) else f.__dict__.copy()
                               for f in self.lr_lambdas]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what `state_dict()` returned (the lambdas stay; callable objects get
        their saved attributes back)."""
        state = dict(state_dict)
        lambdas = state.pop("lr_lambdas")
        self.__dict__.update(state)
        for f, saved in zip(self.lr_lambdas, lambdas):
            if saved is not None:
                f.__dict__.update(saved)
