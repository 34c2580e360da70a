"""Loss modules: `CrossEntropyLoss`, `NLLLoss`, `MSELoss`."""
from __future__ import annotations

from ...tensor import Tensor
from .. import functional as F
from ..module import Module


class _WeightedLoss(Module):
    """A loss with an optional per-class `weight`, registered as a buffer like
    PyTorch's (so it is in the state dict when given)."""

    def __init__(self, weight: Tensor | None, reduction: str) -> None:
        super().__init__()
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"{type(self).__name__}: reduction must be 'mean', 'sum' or "
                             f"'none', got {reduction!r}")
        if weight is not None and not isinstance(weight, Tensor):
            weight = Tensor(weight)
        self.register_buffer("weight", weight)
        self.reduction = reduction


class CrossEntropyLoss(_WeightedLoss):
    """Softmax cross-entropy of logits (N, C) against class indices (N,)
    (`nn.functional.cross_entropy`).

    Args: weight (C,) per-class weights; ignore_index: targets to skip (default
    -100); reduction: "mean" (default), "sum" or "none"; label_smoothing in [0, 1].
    """

    def __init__(self, weight: Tensor | None = None, ignore_index: int = -100,
                 reduction: str = "mean", label_smoothing: float = 0.0) -> None:
        super().__init__(weight, reduction)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input, target):
        """The loss of logits `input` against `target`."""
        return F.cross_entropy(input, target, self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction,
                               label_smoothing=self.label_smoothing)


class NLLLoss(_WeightedLoss):
    """Negative log-likelihood of log-probabilities (N, C) against class indices (N,)
    (`nn.functional.nll_loss`); arguments as CrossEntropyLoss without smoothing."""

    def __init__(self, weight: Tensor | None = None, ignore_index: int = -100,
                 reduction: str = "mean") -> None:
        super().__init__(weight, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        """The loss of log-probabilities `input` against `target`."""
        return F.nll_loss(input, target, self.weight, ignore_index=self.ignore_index,
                          reduction=self.reduction)


class MSELoss(Module):
    """Mean squared error (`nn.functional.mse_loss`); reduction "mean", "sum", "none"."""

    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = reduction

    def forward(self, input, target):
        """The squared error of `input` against `target`, reduced."""
        return F.mse_loss(input, target, self.reduction)
