"""Loss modules (PyTorch's names and arguments): `CrossEntropyLoss`, `NLLLoss`, `MSELoss`,
`L1Loss`, `SmoothL1Loss`, `HuberLoss`, `BCELoss`, `BCEWithLogitsLoss`, `KLDivLoss`,
`CosineEmbeddingLoss`, `MarginRankingLoss`, `TripletMarginLoss`. Each forwards to its
`nn.functional` loss; constant weights are buffers (in the state dict when given), as in
PyTorch. The deprecated `size_average` / `reduce` arguments are not taken."""
from __future__ import annotations

from ...tensor import Tensor, tensor
from .. import functional as F
from ..module import Module


def _check_reduction(layer: str, reduction, allowed=("mean", "sum", "none")) -> str:
    if not isinstance(reduction, str) or reduction not in allowed:
        raise ValueError(f"{layer}: reduction must be one of "
                         f"{', '.join(repr(a) for a in allowed)}, got {reduction!r}")
    return reduction


def _buffer(value) -> Tensor | None:
    return value if value is None or isinstance(value, Tensor) else tensor(value)


class _Loss(Module):
    """A loss with a `reduction` ('mean', 'sum' or 'none'), checked when it is made."""

    def __init__(self, reduction: str, allowed=("mean", "sum", "none")) -> None:
        super().__init__()
        self.reduction = _check_reduction(type(self).__name__, reduction, allowed)


class _WeightedLoss(_Loss):
    """A loss with an optional per-class `weight`, registered as a buffer like
    PyTorch's (so it is in the state dict when given)."""

    def __init__(self, weight: Tensor | None, reduction: str) -> None:
        super().__init__(reduction)
        self.register_buffer("weight", _buffer(weight))


class CrossEntropyLoss(_WeightedLoss):
    """Softmax cross-entropy of logits (N, C) against class indices (N,), or (C,) and
    (N, C, d1, ...) as nll_loss takes them (`nn.functional.cross_entropy`).

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
    """Negative log-likelihood of log-probabilities (N, C) against class indices (N,),
    (C,) against a 0-d target, or (N, C, d1, ...) against (N, d1, ...)
    (`nn.functional.nll_loss`); arguments as CrossEntropyLoss without smoothing."""

    def __init__(self, weight: Tensor | None = None, ignore_index: int = -100,
                 reduction: str = "mean") -> None:
        super().__init__(weight, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        """The loss of log-probabilities `input` against `target`."""
        return F.nll_loss(input, target, self.weight, ignore_index=self.ignore_index,
                          reduction=self.reduction)


class MSELoss(_Loss):
    """Mean squared error (`nn.functional.mse_loss`); reduction "mean", "sum", "none"."""

    def __init__(self, reduction: str = "mean") -> None:
        super().__init__(reduction)

    def forward(self, input, target):
        """The squared error of `input` against `target`, reduced."""
        return F.mse_loss(input, target, self.reduction)


class L1Loss(_Loss):
    """Mean absolute error `|input - target|` (`nn.functional.l1_loss`)."""

    def __init__(self, reduction: str = "mean") -> None:
        super().__init__(reduction)

    def forward(self, input, target):
        """The absolute error of `input` against `target`, reduced."""
        return F.l1_loss(input, target, reduction=self.reduction)


class SmoothL1Loss(_Loss):
    """Squared error below `beta`, absolute error above (`nn.functional.smooth_l1_loss`).

    Args: reduction; beta >= 0 (default 1.0; 0 is L1Loss)."""

    def __init__(self, reduction: str = "mean", beta: float = 1.0) -> None:
        super().__init__(reduction)
        self.beta = beta

    def forward(self, input, target):
        """The smooth L1 loss of `input` against `target`, reduced."""
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    """Squared error below `delta`, delta-scaled absolute error above
    (`nn.functional.huber_loss`). Args: reduction; delta > 0 (default 1.0)."""

    def __init__(self, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__(reduction)
        self.delta = delta

    def forward(self, input, target):
        """The Huber loss of `input` against `target`, reduced."""
        return F.huber_loss(input, target, self.reduction, self.delta)


class BCELoss(_WeightedLoss):
    """Binary cross-entropy of probabilities (`nn.functional.binary_cross_entropy`).

    Args: weight: rescales each element (broadcast to the input; a buffer);
    reduction."""

    def __init__(self, weight: Tensor | None = None, reduction: str = "mean") -> None:
        super().__init__(weight, reduction)

    def forward(self, input, target):
        """The loss of probabilities `input` against `target` (same shape)."""
        return F.binary_cross_entropy(input, target, self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_WeightedLoss):
    """Binary cross-entropy of logits, numerically stable
    (`nn.functional.binary_cross_entropy_with_logits`).

    Args: weight: rescales each element; reduction; pos_weight: the weight of positive
    targets, e.g. one per class (C,). Both broadcast to the input and are buffers."""

    def __init__(self, weight: Tensor | None = None, reduction: str = "mean",
                 pos_weight: Tensor | None = None) -> None:
        super().__init__(weight, reduction)
        self.register_buffer("pos_weight", _buffer(pos_weight))

    def forward(self, input, target):
        """The loss of logits `input` against `target` (same shape)."""
        return F.binary_cross_entropy_with_logits(input, target, self.weight,
                                                  reduction=self.reduction,
                                                  pos_weight=self.pos_weight)


class KLDivLoss(_Loss):
    """Kullback-Leibler divergence of log-probabilities `input` from `target`
    (`nn.functional.kl_div`). Args: reduction ('mean', 'batchmean' - the true KL
    divergence -, 'sum' or 'none'); log_target: the target is given as
    log-probabilities."""

    def __init__(self, reduction: str = "mean", log_target: bool = False) -> None:
        super().__init__(reduction, ("mean", "batchmean", "sum", "none"))
        self.log_target = log_target

    def forward(self, input, target):
        """The divergence of `input` (log-probabilities) from `target`, reduced."""
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class CosineEmbeddingLoss(_Loss):
    """`1 - cos(x1, x2)` for target 1, `max(0, cos(x1, x2) - margin)` for target -1
    (`nn.functional.cosine_embedding_loss`). Args: margin (default 0); reduction."""

    def __init__(self, margin: float = 0.0, reduction: str = "mean") -> None:
        super().__init__(reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        """The loss of the pairs (input1, input2) (N, D) or (D,) against target +-1."""
        return F.cosine_embedding_loss(input1, input2, target, self.margin,
                                       reduction=self.reduction)


class MarginRankingLoss(_Loss):
    """`max(0, -target (input1 - input2) + margin)`
    (`nn.functional.margin_ranking_loss`). Args: margin (default 0); reduction."""

    def __init__(self, margin: float = 0.0, reduction: str = "mean") -> None:
        super().__init__(reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        """The ranking loss of input1 over input2 as `target` (+-1) says."""
        return F.margin_ranking_loss(input1, input2, target, self.margin,
                                     reduction=self.reduction)


class TripletMarginLoss(_Loss):
    """`max(0, margin + d(anchor, positive) - d(anchor, negative))`, d the p-norm
    distance (`nn.functional.triplet_margin_loss`). Args: margin > 0 (default 1);
    p (default 2); eps (default 1e-6); swap: the distance swap; reduction."""

    def __init__(self, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6,
                 swap: bool = False, reduction: str = "mean") -> None:
        super().__init__(reduction)
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap

    def forward(self, anchor, positive, negative):
        """The triplet loss of (anchor, positive, negative) (N, D) or (D,)."""
        return F.triplet_margin_loss(anchor, positive, negative, self.margin, self.p,
                                     self.eps, self.swap, reduction=self.reduction)
