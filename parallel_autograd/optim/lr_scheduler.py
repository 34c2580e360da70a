"""Learning-rate schedulers, as `torch.optim.lr_scheduler`: `LRScheduler` (the base),
`StepLR`, `MultiStepLR`, `ConstantLR`, `LinearLR`, `ExponentialLR`, `PolynomialLR`,
`CosineAnnealingLR`, `CosineAnnealingWarmRestarts`, `LambdaLR`, `MultiplicativeLR`,
`CyclicLR`, `OneCycleLR` (these two also cycle the momentum, or Adam's beta1), the
combinators `SequentialLR` and `ChainedScheduler`, and `ReduceLROnPlateau` (stepped with
a metric).

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

import bisect
import functools
import math
import types
import warnings
from collections import Counter
from typing import Any, Callable, Optional, Sequence, Union

from .optimizer import Optimizer

__all__ = ["LRScheduler", "StepLR", "CosineAnnealingLR", "LambdaLR", "MultiplicativeLR",
           "MultiStepLR", "ConstantLR", "LinearLR", "ExponentialLR", "PolynomialLR",
           "SequentialLR", "ChainedScheduler", "ReduceLROnPlateau", "CyclicLR",
           "CosineAnnealingWarmRestarts", "OneCycleLR"]

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
        self._initial_step()

    def _initial_step(self) -> None:
        """Reset the step count and take the constructor's step (to epoch 0)."""
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
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
        if epoch is not None:
            warnings.warn(_EPOCH_DEPRECATION, UserWarning, stacklevel=2)
        self._update_lr(epoch)

    def _update_lr(self, epoch: Optional[int] = None) -> None:
        """Advance `last_epoch` (or set it to `epoch`, then use the closed form where
        there is one) and write the new learning rates into the groups."""
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
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


def _lambdas(optimizer: Optimizer, lr_lambda) -> list:
    """One callable per parameter group: `lr_lambda` repeated, or a list/tuple of the
    groups' length (PyTorch's messages: ValueError for the length, TypeError for a value
    that is not callable, raised here rather than at the first step)."""
    n = len(optimizer.param_groups)
    if isinstance(lr_lambda, (list, tuple)):
        if len(lr_lambda) != n:
            raise ValueError(f"Expected {n} lr_lambdas, but got {len(lr_lambda)}")
        lambdas = list(lr_lambda)
    else:
        lambdas = [lr_lambda] * n
    for f in lambdas:
        if not callable(f):
            raise TypeError(f"lr_lambda should be a function, but got {type(f).__name__}")
    return lambdas


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
        self.lr_lambdas = _lambdas(optimizer, lr_lambda)
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


# ---- more of torch's schedulers (the same Python float arithmetic as torch 2.13) -----------------
def _lrs(optimizer: Optimizer) -> list:
    return [group["lr"] for group in optimizer.param_groups]


def _format_param(name: str, optimizer: Optimizer, param) -> list:
    """One value per group: `param` repeated, or a list/tuple of the groups' length."""
    if isinstance(param, (list, tuple)):
        if len(param) != len(optimizer.param_groups):
            raise ValueError(f"{name} must have the same length as optimizer.param_groups. "
                             f"{name} has {len(param)} values, param_groups has "
                             f"{len(optimizer.param_groups)}.")
        return list(param)
    return [param] * len(optimizer.param_groups)


class MultiplicativeLR(LRScheduler):
    """Multiply each group's lr by `lr_lambda(epoch)` every epoch (after the first), as
    `torch.optim.lr_scheduler.MultiplicativeLR`; `lr_lambda` a function or one per group."""

    def __init__(self, optimizer: Optimizer,
                 lr_lambda: Union[Callable[[int], float], Sequence[Callable[[int], float]]],
                 last_epoch: int = -1) -> None:
        self.lr_lambdas = _lambdas(optimizer, lr_lambda)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        """The current lrs times each lambda at `last_epoch` (unchanged at epoch 0)."""
        if self._is_initial:
            return _lrs(self.optimizer)
        return [g["lr"] * f(self.last_epoch)
                for f, g in zip(self.lr_lambdas, self.optimizer.param_groups)]

    state_dict = LambdaLR.state_dict
    load_state_dict = LambdaLR.load_state_dict


class MultiStepLR(LRScheduler):
    """Multiply each group's lr by `gamma` at each epoch in `milestones` (a milestone
    listed n times: gamma ** n), as `torch.optim.lr_scheduler.MultiStepLR`."""

    def __init__(self, optimizer: Optimizer, milestones: Sequence[int], gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        self.milestones = Counter(milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        """The current lrs, times gamma ** (times `last_epoch` is a milestone)."""
        if self.last_epoch not in self.milestones:
            return _lrs(self.optimizer)
        return [g["lr"] * self.gamma ** self.milestones[self.last_epoch]
                for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        milestones = sorted(self.milestones.elements())
        return [base_lr * self.gamma ** bisect.bisect_right(milestones, self.last_epoch)
                for base_lr in self.base_lrs]


class ConstantLR(LRScheduler):
    """Multiply each group's lr by `factor` until epoch `total_iters`, as
    `torch.optim.lr_scheduler.ConstantLR`."""

    def __init__(self, optimizer: Optimizer, factor: float = 1.0 / 3, total_iters: int = 5,
                 last_epoch: int = -1) -> None:
        if factor > 1.0 or factor < 0:
            raise ValueError("Constant multiplicative factor expected to be between 0 and 1.")
        self.factor = factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        """lr * factor at epoch 0, lr / factor at `total_iters`, else unchanged."""
        groups = self.optimizer.param_groups
        if self.last_epoch == 0:
            return [g["lr"] * self.factor for g in groups]
        if self.last_epoch != self.total_iters:
            return _lrs(self.optimizer)
        return [g["lr"] * (1.0 / self.factor) for g in groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * (self.factor + (self.last_epoch >= self.total_iters)
                           * (1 - self.factor)) for base_lr in self.base_lrs]


class LinearLR(LRScheduler):
    """Scale each group's lr by a factor going linearly from `start_factor` to
    `end_factor` over `total_iters` epochs, as `torch.optim.lr_scheduler.LinearLR`."""

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3,
                 end_factor: float = 1.0, total_iters: int = 5, last_epoch: int = -1) -> None:
        if start_factor > 1.0 or start_factor <= 0:
            raise ValueError("Starting multiplicative factor expected to be greater than 0 "
                             "and less or equal to 1.")
        if end_factor > 1.0 or end_factor < 0:
            raise ValueError("Ending multiplicative factor expected to be between 0 and 1.")
        self.start_factor = start_factor
        self.end_factor = end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        """torch's recursive form: lr * (1 + (end - start) / (total * start + (t - 1) *
        (end - start)))."""
        groups = self.optimizer.param_groups
        if self.last_epoch == 0:
            return [g["lr"] * self.start_factor for g in groups]
        if self._is_initial or self.last_epoch > self.total_iters:
            return _lrs(self.optimizer)
        diff = self.end_factor - self.start_factor
        return [g["lr"] * (1.0 + diff / (self.total_iters * self.start_factor
                                         + (self.last_epoch - 1) * diff)) for g in groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * (self.start_factor + (self.end_factor - self.start_factor)
                           * min(self.total_iters, self.last_epoch) / self.total_iters)
                for base_lr in self.base_lrs]


class ExponentialLR(LRScheduler):
    """Multiply each group's lr by `gamma` every epoch, as
    `torch.optim.lr_scheduler.ExponentialLR`."""

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        """The current lrs times gamma (unchanged by the constructor's step)."""
        if self._is_initial:
            return _lrs(self.optimizer)
        return [g["lr"] * self.gamma for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * self.gamma ** self.last_epoch for base_lr in self.base_lrs]


class PolynomialLR(LRScheduler):
    """Decay each group's lr as `(1 - t / total_iters) ** power` until `total_iters`, as
    `torch.optim.lr_scheduler.PolynomialLR`."""

    def __init__(self, optimizer: Optimizer, total_iters: int = 5, power: float = 1.0,
                 last_epoch: int = -1) -> None:
        self.total_iters = total_iters
        self.power = power
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        """torch's recursive form (the ratio of consecutive closed-form factors)."""
        if self._is_initial or self.last_epoch > self.total_iters:
            return _lrs(self.optimizer)
        decay = ((1.0 - self.last_epoch / self.total_iters)
                 / (1.0 - (self.last_epoch - 1) / self.total_iters)) ** self.power
        return [g["lr"] * decay for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * (1.0 - min(self.total_iters, self.last_epoch)
                           / self.total_iters) ** self.power for base_lr in self.base_lrs]


def _check_children(owner: str, optimizer: Optimizer, schedulers) -> None:
    for i, s in enumerate(schedulers):
        if not hasattr(s, "optimizer"):
            raise TypeError(f"{owner} at index {i} should have `optimizer` as its attribute.")
        if isinstance(s, ReduceLROnPlateau):
            raise ValueError(f"{owner} does not support `ReduceLROnPlateau` scheduler as it "
                             f"requires additional kwargs to be specified when calling "
                             f"`step`, but got one at index {i} in the given schedulers "
                             f"sequence.")
        if optimizer != s.optimizer:
            raise ValueError(f"{owner} expects all schedulers to belong to the same optimizer, "
                             f"but got scheduler {type(s).__name__} at index {i} has "
                             f"{s.optimizer}, which is different from "
                             f"{type(optimizer).__name__}.")


class _Composite(LRScheduler):
    """State dicts of the combinators: their own attributes plus each child's state."""

    def state_dict(self) -> dict[str, Any]:
        """Every attribute but the optimizer, the children as their state dicts."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what `state_dict()` returned, the children included (the dict given is
        left as it was)."""
        state = dict(state_dict)
        children = state.pop("_schedulers")
        self.__dict__.update(state)
        for s, child in zip(self._schedulers, children):
            s.load_state_dict(child)


class SequentialLR(_Composite):
    """Run `schedulers` one after another, switching at each epoch of `milestones`, as
    `torch.optim.lr_scheduler.SequentialLR` (at a milestone the next scheduler restarts
    from epoch 0 with its closed form)."""

    def __init__(self, optimizer: Optimizer, schedulers: list[LRScheduler],
                 milestones: list[int], last_epoch: int = -1) -> None:
        if len(schedulers) < 1:
            raise ValueError(f"{type(self).__name__} expects at least one scheduler, but got "
                             f"no scheduler.")
        _check_children(type(self).__name__, optimizer, schedulers)
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(f"Sequential Schedulers expects number of schedulers provided to "
                             f"be one more than the number of milestone points, but got number "
                             f"of schedulers {len(schedulers)} and the number of milestones to "
                             f"be equal to {len(milestones)}")
        self._schedulers = schedulers
        self._milestones = milestones
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        self.recursive_undo()
        idx = bisect.bisect_right(self._milestones, 0)
        self._schedulers[idx]._initial_step()
        self._last_lr = schedulers[idx].get_last_lr()

    def recursive_undo(self, sched: Optional[LRScheduler] = None) -> None:
        """Undo the step each child (and their children) took at construction."""
        stack = [self if sched is None else sched]
        while stack:
            s = stack.pop()
            if hasattr(s, "_schedulers"):
                stack.extend(reversed(s._schedulers))
            elif hasattr(s, "last_epoch"):
                s.last_epoch -= 1

    def step(self) -> None:
        """Step the scheduler of the current epoch (restarting it at its milestone)."""
        self.last_epoch += 1
        idx = bisect.bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            scheduler._update_lr(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()


class ChainedScheduler(_Composite):
    """Step every scheduler of `schedulers` at each step, as
    `torch.optim.lr_scheduler.ChainedScheduler` (their effects compose)."""

    def __init__(self, schedulers: Sequence[LRScheduler],
                 optimizer: Optional[Optimizer] = None) -> None:
        if len(schedulers) < 1:
            raise ValueError(f"{type(self).__name__} expects at least one scheduler to be "
                             f"chained, but got no scheduler.")
        optimizer = optimizer or schedulers[0].optimizer
        _check_children(type(self).__name__, optimizer, schedulers)
        self._schedulers = schedulers
        self.optimizer = optimizer
        self._last_lr = _lrs(self._schedulers[-1].optimizer)

    def step(self) -> None:
        """Step each scheduler in order."""
        for s in self._schedulers:
            s.step()
        self._last_lr = _lrs(self._schedulers[-1].optimizer)


class ReduceLROnPlateau(LRScheduler):
    """Multiply each group's lr by `factor` when `metrics` (given to `step`) stopped
    improving for `patience` epochs, as `torch.optim.lr_scheduler.ReduceLROnPlateau`:
    `mode` "min" or "max", improvement relative (`threshold_mode="rel"`) or absolute,
    `cooldown` epochs of rest after a reduction, never below `min_lr`, changes smaller
    than `eps` skipped."""

    def __init__(self, optimizer: Optimizer, mode: str = "min", factor: float = 0.1,
                 patience: int = 10, threshold: float = 1e-4, threshold_mode: str = "rel",
                 cooldown: int = 0, min_lr: Union[list, float] = 0, eps: float = 1e-8) -> None:
        if factor >= 1.0:
            raise ValueError("Factor should be < 1.0.")
        self.factor = factor
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if isinstance(min_lr, (list, tuple)):
            if len(min_lr) != len(optimizer.param_groups):
                raise ValueError(f"expected {len(optimizer.param_groups)} min_lrs, got "
                                 f"{len(min_lr)}")
            self.default_min_lr = None
            self.min_lrs = list(min_lr)
        else:
            self.default_min_lr = min_lr
            self.min_lrs = [min_lr] * len(optimizer.param_groups)
        self.patience = patience
        self.cooldown = cooldown
        self.eps = eps
        self.last_epoch = 0
        self._last_lr = _lrs(optimizer)
        self._init_is_better(mode=mode, threshold=threshold, threshold_mode=threshold_mode)
        self._reset()

    def _reset(self) -> None:
        self.best = self.mode_worse
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    def step(self, metrics: Any, epoch: Optional[int] = None) -> None:  # type: ignore[override]
        """Record `metrics` (a number or 0-d tensor) for this epoch; reduce the lrs after
        more than `patience` epochs without improvement."""
        current = float(metrics)
        if epoch is None:
            epoch = self.last_epoch + 1
        else:
            warnings.warn(_EPOCH_DEPRECATION, UserWarning, stacklevel=2)
        self.last_epoch = epoch
        if self._is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            self._reduce_lr()
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = _lrs(self.optimizer)

    def _reduce_lr(self) -> None:
        groups = self.optimizer.param_groups
        if len(groups) != len(self.min_lrs):
            if self.default_min_lr is None:
                raise RuntimeError(f"The number of param groups in the `optimizer` "
                                   f"({len(groups)}) differs from when `ReduceLROnPlateau` "
                                   f"was initialized ({len(self.min_lrs)}), usually due to a "
                                   f"new param group being added to the optimizer. Please "
                                   f"modify the `min_lrs` field to match the length of the "
                                   f"`optimizer` param groups.")
            self.min_lrs = [self.default_min_lr] * len(groups)
        for i, group in enumerate(groups):
            old_lr = float(group["lr"])
            new_lr = max(old_lr * self.factor, self.min_lrs[i])
            if old_lr - new_lr > self.eps:
                group["lr"] = new_lr

    @property
    def in_cooldown(self) -> bool:
        """Whether the scheduler rests after a reduction."""
        return self.cooldown_counter > 0

    def _is_better(self, a: float, best: float) -> bool:
        if self.mode == "min" and self.threshold_mode == "rel":
            return a < best * (1.0 - self.threshold)
        if self.mode == "min" and self.threshold_mode == "abs":
            return a < best - self.threshold
        if self.mode == "max" and self.threshold_mode == "rel":
            return a > best * (self.threshold + 1.0)
        return a > best + self.threshold

    def _init_is_better(self, mode: str, threshold: float, threshold_mode: str) -> None:
        if mode not in {"min", "max"}:
            raise ValueError("mode " + mode + " is unknown!")
        if threshold_mode not in {"rel", "abs"}:
            raise ValueError("threshold mode " + threshold_mode + " is unknown!")
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.mode = mode
        self.threshold = threshold
        self.threshold_mode = threshold_mode

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what `state_dict()` returned."""
        self.__dict__.update(state_dict)
        self._init_is_better(mode=self.mode, threshold=self.threshold,
                             threshold_mode=self.threshold_mode)


def _set_momentum(group: dict, value: float, use_beta1: bool) -> None:
    if use_beta1:
        group["betas"] = (value, *group["betas"][1:])
    else:
        group["momentum"] = value


def _momentum_setup(owner, optimizer: Optimizer, base_momentum, max_momentum,
                    last_epoch: int) -> tuple:
    """(base, max) momentums per group; at a fresh start each group's momentum (or beta1)
    is set to its max and `base_momentum`/`max_momentum` recorded in it (torch's)."""
    if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
        raise ValueError("optimizer must support momentum or beta1 with `cycle_momentum` "
                         "option enabled")
    owner.use_beta1 = "betas" in optimizer.defaults
    base = _format_param("base_momentum", optimizer, base_momentum)
    top = _format_param("max_momentum", optimizer, max_momentum)
    if last_epoch == -1:
        for m, b, group in zip(top, base, optimizer.param_groups):
            _set_momentum(group, m, owner.use_beta1)
            group["max_momentum"] = m
            group["base_momentum"] = b
    return base, top


class CyclicLR(LRScheduler):
    """Cycle each group's lr between `base_lr` and `max_lr` (triangular, triangular2,
    exp_range, or a custom `scale_fn`), and the momentum inversely, as
    `torch.optim.lr_scheduler.CyclicLR`. Step it after every batch."""

    def __init__(self, optimizer: Optimizer, base_lr: Union[float, list[float]],
                 max_lr: Union[float, list[float]], step_size_up: int = 2000,
                 step_size_down: Optional[int] = None, mode: str = "triangular",
                 gamma: float = 1.0, scale_fn: Optional[Callable[[float], float]] = None,
                 scale_mode: str = "cycle", cycle_momentum: bool = True,
                 base_momentum: float = 0.8, max_momentum: float = 0.9,
                 last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        base_lrs = _format_param("base_lr", optimizer, base_lr)
        if last_epoch == -1:
            for lr, group in zip(base_lrs, optimizer.param_groups):
                group["lr"] = lr
        self.max_lrs = _format_param("max_lr", optimizer, max_lr)
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        self.total_size = up + down
        self.step_ratio = up / self.total_size
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ValueError("mode is invalid and scale_fn is None")
        self.mode = mode
        self.gamma = gamma
        self._scale_fn_custom = scale_fn
        self.scale_mode = scale_mode
        self._init_scale_fn()
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self.base_momentums, self.max_momentums = _momentum_setup(
                self, optimizer, base_momentum, max_momentum, last_epoch)
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    def _init_scale_fn(self) -> None:
        if self._scale_fn_custom is not None:
            return
        if self.mode == "triangular":
            self._scale_fn_ref = _triangular_scale_fn
            self.scale_mode = "cycle"
        elif self.mode == "triangular2":
            self._scale_fn_ref = _triangular2_scale_fn
            self.scale_mode = "cycle"
        elif self.mode == "exp_range":
            self._scale_fn_ref = functools.partial(_exp_range_scale_fn, self.gamma)
            self.scale_mode = "iterations"

    def scale_fn(self, x: float) -> float:
        """The amplitude scale at cycle (or iteration) `x`."""
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        return self._scale_fn_ref(x)

    def get_lr(self) -> list[float]:
        """The lrs at `last_epoch` (and the momentums, written into the groups)."""
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        if x <= self.step_ratio:
            scale_factor = x / self.step_ratio
        else:
            scale_factor = (x - 1) / (self.step_ratio - 1)
        at = cycle if self.scale_mode == "cycle" else self.last_epoch
        lrs = [base_lr + ((max_lr - base_lr) * scale_factor) * self.scale_fn(at)
               for base_lr, max_lr in zip(self.base_lrs, self.max_lrs)]
        if self.cycle_momentum:
            momentums = [m_max - ((m_max - m_base) * scale_factor) * self.scale_fn(at)
                         for m_base, m_max in zip(self.base_momentums, self.max_momentums)]
            for group, m in zip(self.optimizer.param_groups, momentums):
                _set_momentum(group, m, self.use_beta1)
        return lrs

    def state_dict(self) -> dict[str, Any]:
        """As the base's, without the built-in scale function; a custom `scale_fn` is kept
        as its attributes if it is a callable object, None if a function."""
        state = super().state_dict()
        state.pop("_scale_fn_ref", None)
        fn = state.pop("_scale_fn_custom")
        state["_scale_fn_custom"] = None
        if fn is not None and not isinstance(fn, types.FunctionType):
            state["_scale_fn_custom"] = fn.__dict__.copy()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what `state_dict()` returned (the scale function stays)."""
        state = dict(state_dict)
        fn = state.pop("_scale_fn_custom")
        self.__dict__.update(state)
        if fn is not None:
            self._scale_fn_custom.__dict__.update(fn)
        self._init_scale_fn()


def _triangular_scale_fn(x: float) -> float:
    return 1.0


def _triangular2_scale_fn(x: float) -> float:
    return 1 / (2.0 ** (x - 1))


def _exp_range_scale_fn(gamma: float, x: float) -> float:
    return gamma ** x


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing from each group's initial lr to `eta_min` over `T_0` epochs, then
    restarting with periods multiplied by `T_mult`, as
    `torch.optim.lr_scheduler.CosineAnnealingWarmRestarts`. `step(epoch)` may be given a
    fractional epoch (stepping within an epoch)."""

    def __init__(self, optimizer: Optimizer, T_0: int, T_mult: int = 1, eta_min: float = 0.0,
                 last_epoch: int = -1) -> None:
        if T_0 <= 0 or not isinstance(T_0, int):
            raise ValueError(f"Expected positive integer T_0, but got {T_0}")
        if T_mult < 1 or not isinstance(T_mult, int):
            raise ValueError(f"Expected integer T_mult >= 1, but got {T_mult}")
        if not isinstance(eta_min, (float, int)):
            raise ValueError(f"Expected float or int eta_min, but got {eta_min} of type "
                             f"{type(eta_min)}")
        self.T_0 = T_0
        self.T_i = T_0
        self.T_mult = T_mult
        self.eta_min = eta_min
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        """eta_min + (base - eta_min) * (1 + cos(pi * T_cur / T_i)) / 2."""
        return [self.eta_min + (base_lr - self.eta_min)
                * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
                for base_lr in self.base_lrs]

    def step(self, epoch: Optional[float] = None) -> None:
        """Advance one epoch, or go to `epoch` (may be fractional)."""
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur = self.T_cur + 1
            if self.T_cur >= self.T_i:
                self.T_cur = self.T_cur % self.T_i
                self.T_i = self.T_i * self.T_mult
        else:
            if epoch < 0:
                raise ValueError(f"Expected non-negative epoch, but got {epoch}")
            if epoch >= self.T_0:
                if self.T_mult == 1:
                    self.T_cur = epoch % self.T_0
                else:
                    n = int(math.log((epoch / self.T_0 * (self.T_mult - 1) + 1), self.T_mult))
                    self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
                    self.T_i = self.T_0 * self.T_mult ** n
            else:
                self.T_i = self.T_0
                self.T_cur = epoch
        self.last_epoch = math.floor(epoch)
        for group, lr in zip(self.optimizer.param_groups, self.get_lr()):
            group["lr"] = lr
        self._last_lr = _lrs(self.optimizer)


class OneCycleLR(LRScheduler):
    """The 1cycle policy, as `torch.optim.lr_scheduler.OneCycleLR`: the lr rises from
    `max_lr / div_factor` to `max_lr` over `pct_start` of `total_steps` (or `epochs *
    steps_per_epoch`), then anneals ("cos" or "linear") to `initial / final_div_factor`
    (`three_phase`: back to the initial lr first); the momentum (or beta1) moves inversely
    between `max_momentum` and `base_momentum`. Step it after every batch; stepping past
    `total_steps` raises ValueError."""

    def __init__(self, optimizer: Optimizer, max_lr: Union[float, list[float]],
                 total_steps: Optional[int] = None,
                 epochs: Optional[int] = None, steps_per_epoch: Optional[int] = None,
                 pct_start: float = 0.3, anneal_strategy: str = "cos",
                 cycle_momentum: bool = True, base_momentum: Union[float, list[float]] = 0.85,
                 max_momentum: Union[float, list[float]] = 0.95,
                 div_factor: float = 25.0, final_div_factor: float = 1e4,
                 three_phase: bool = False, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        self.total_steps = _total_steps(total_steps, epochs, steps_per_epoch)
        self._schedule_phases = _one_cycle_phases(self.total_steps, pct_start, three_phase)
        if pct_start < 0 or pct_start > 1 or not isinstance(pct_start, float):
            raise ValueError(f"Expected float between 0 and 1 pct_start, but got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"anneal_strategy must be one of 'cos' or 'linear', instead got "
                             f"{anneal_strategy}")
        self._anneal_func_type = anneal_strategy
        max_lrs = _format_param("max_lr", optimizer, max_lr)
        if last_epoch == -1:
            for idx, group in enumerate(optimizer.param_groups):
                group["initial_lr"] = max_lrs[idx] / div_factor
                group["max_lr"] = max_lrs[idx]
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            _momentum_setup(self, optimizer, base_momentum, max_momentum, last_epoch)
        super().__init__(optimizer, last_epoch)

    def _anneal_func(self, start: float, end: float, pct: float) -> float:
        if self._anneal_func_type == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self) -> list[float]:
        """The lrs at `last_epoch` (and the momentums, written into the groups)."""
        step_num = self.last_epoch
        if step_num > self.total_steps:
            raise ValueError(f"Tried to step {step_num} times. The specified number of total "
                             f"steps is {self.total_steps}")
        lrs = []
        for group in self.optimizer.param_groups:
            start_step = 0.0
            for i, phase in enumerate(self._schedule_phases):
                end_step = phase["end_step"]
                if step_num <= end_step or i == len(self._schedule_phases) - 1:
                    pct = (step_num - start_step) / (end_step - start_step)
                    lr = self._anneal_func(group[phase["start_lr"]], group[phase["end_lr"]], pct)
                    if self.cycle_momentum:
                        m = self._anneal_func(group[phase["start_momentum"]],
                                              group[phase["end_momentum"]], pct)
                    break
                start_step = phase["end_step"]
            lrs.append(lr)
            if self.cycle_momentum:
                _set_momentum(group, m, self.use_beta1)
        return lrs


def _total_steps(total_steps, epochs, steps_per_epoch) -> int:
    if total_steps is not None:
        if total_steps <= 0 or not isinstance(total_steps, int):
            raise ValueError(f"Expected positive integer total_steps, but got {total_steps}")
        return total_steps
    if epochs is not None and steps_per_epoch is not None:
        if not isinstance(epochs, int) or epochs <= 0:
            raise ValueError(f"Expected positive integer epochs, but got {epochs}")
        if not isinstance(steps_per_epoch, int) or steps_per_epoch <= 0:
            raise ValueError(f"Expected positive integer steps_per_epoch, but got "
                             f"{steps_per_epoch}")
        return epochs * steps_per_epoch
    raise ValueError("You must define either total_steps OR (epochs AND steps_per_epoch)")


def _one_cycle_phases(total: int, pct_start: float, three_phase: bool) -> list:
    def phase(end_step, start_lr, end_lr, start_m, end_m):
        return {"end_step": end_step, "start_lr": start_lr, "end_lr": end_lr,
                "start_momentum": start_m, "end_momentum": end_m}

    if three_phase:
        return [phase(float(pct_start * total) - 1, "initial_lr", "max_lr", "max_momentum",
                      "base_momentum"),
                phase(float(2 * pct_start * total) - 2, "max_lr", "initial_lr",
                      "base_momentum", "max_momentum"),
                phase(total - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum")]
    return [phase(float(pct_start * total) - 1, "initial_lr", "max_lr", "max_momentum",
                  "base_momentum"),
            phase(total - 1, "max_lr", "min_lr", "base_momentum", "max_momentum")]
