"""Normalization layers: `LayerNorm`, `RMSNorm`, `BatchNorm1d/2d/3d`, `InstanceNorm1d/2d/3d`,
`GroupNorm`, `LocalResponseNorm` (PyTorch's names, arguments, parameters and buffers)."""
from __future__ import annotations

import numbers
import warnings

import numpy as np

from ...ops import shape as S
from ...tensor import Tensor
from .. import _norms
from .. import functional as F
from .. import init
from ..module import Module
from ._utils import empty_parameter, float_dtype, positive_int


def _shape(normalized_shape, layer: str) -> tuple:
    if isinstance(normalized_shape, numbers.Integral):
        normalized_shape = (normalized_shape,)
    shape = tuple(int(s) for s in normalized_shape)
    if not shape or any(s < 1 for s in shape):
        raise ValueError(f"{layer}: normalized_shape must be a non-empty sequence of "
                         f"positive sizes, got {normalized_shape!r}")
    return shape


def _affine_parameters(layer: Module, affine: bool, bias: bool, shape: tuple, dt) -> None:
    """`weight` and (with `bias`) `bias` of `shape` when `affine`, else both None (as
    registered parameters, so state_dict keys and repr are PyTorch's)."""
    if affine:
        layer.weight = empty_parameter(shape, dt)
        if bias:
            layer.bias = empty_parameter(shape, dt)
            return
    else:
        layer.register_parameter("weight", None)
    layer.register_parameter("bias", None)


class LayerNorm(Module):
    """Layer normalisation over the trailing `normalized_shape` dims (PyTorch's
    `nn.LayerNorm`): `(x - mean) / sqrt(var + eps) * weight + bias`, biased variance.

    Args:
        normalized_shape: int or tuple, the trailing shape normalised over.
        eps: added to the variance (default 1e-5).
        elementwise_affine: learn `weight` (ones) and `bias` (zeros) of shape
            `normalized_shape` (default True).
        bias: learn the bias too (default True; only with elementwise_affine).
        dtype: parameter dtype (default: `pa.get_default_dtype()`).
    """

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, dtype=None) -> None:
        super().__init__()
        self.normalized_shape = _shape(normalized_shape, "LayerNorm")
        self.eps, self.elementwise_affine = eps, elementwise_affine
        dt = float_dtype(dtype, "LayerNorm")
        _affine_parameters(self, elementwise_affine, bias, self.normalized_shape, dt)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """weight = 1, bias = 0."""
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def forward(self, input):
        """The normalised `input`."""
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        """PyTorch's: shape, eps, elementwise_affine, bias."""
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}")


class RMSNorm(Module):
    """Root-mean-square normalisation over the trailing dims (PyTorch's `nn.RMSNorm`):
    `x / sqrt(mean(x**2) + eps) * weight`.

    Args:
        normalized_shape: int or tuple, the trailing shape normalised over.
        eps: added to the mean square; None (default) is the machine epsilon of the
            input's dtype, as in PyTorch.
        elementwise_affine: learn `weight` (ones) of shape `normalized_shape`.
        dtype: parameter dtype (default: `pa.get_default_dtype()`).
    """

    def __init__(self, normalized_shape, eps: float | None = None,
                 elementwise_affine: bool = True, dtype=None) -> None:
        super().__init__()
        self.normalized_shape = _shape(normalized_shape, "RMSNorm")
        self.eps, self.elementwise_affine = eps, elementwise_affine
        if elementwise_affine:
            self.weight = empty_parameter(self.normalized_shape, float_dtype(dtype, "RMSNorm"))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """weight = 1."""
        if self.weight is not None:
            init.ones_(self.weight)

    def forward(self, input):
        """The normalised `input`."""
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        """PyTorch's: shape, eps, elementwise_affine."""
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class _NormBase(Module):
    """What batch and instance normalization share (PyTorch's `_NormBase`): `weight`
    (ones) and `bias` (zeros) of shape (num_features,) when `affine`, and, when
    `track_running_stats`, the buffers `running_mean` (zeros), `running_var` (ones) and
    `num_batches_tracked` (0, int64), which are in the state dict under those names."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, *, dtype=None,
                 bias: bool = True) -> None:
        super().__init__()
        layer = type(self).__name__
        self.num_features = positive_int(num_features, "num_features", layer)
        if momentum is not None and (isinstance(momentum, bool)
                                     or not isinstance(momentum, numbers.Real)):
            raise TypeError(f"{layer}: momentum must be a number or None, got {momentum!r}")
        self.eps, self.momentum = eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        dt = float_dtype(dtype, layer)
        shape = (self.num_features,)
        _affine_parameters(self, affine, bias, shape, dt)
        if track_running_stats:
            self.register_buffer("running_mean", Tensor(np.zeros(shape, dt)))
            self.register_buffer("running_var", Tensor(np.ones(shape, dt)))
            self.register_buffer("num_batches_tracked", Tensor(np.array(0, np.int64)))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        """running_mean = 0, running_var = 1, num_batches_tracked = 0 (when tracked)."""
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1)
            self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        """The running statistics reset, weight = 1, bias = 0."""
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def extra_repr(self) -> str:
        """PyTorch's: num_features, eps, momentum, affine, bias, track_running_stats."""
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, bias={self.bias is not None}, "
                f"track_running_stats={self.track_running_stats}")


class _BatchNorm(_NormBase):
    _dims: tuple = ()

    def forward(self, input):
        """Normalize with the batch's statistics in training mode (updating the running
        statistics when tracked), with the running statistics in evaluation mode (or
        the batch's, when none are tracked)."""
        ndim = np.ndim(input._data if isinstance(input, Tensor) else input)
        if ndim not in self._dims:
            raise ValueError(f"{type(self).__name__}: expected "
                             f"{' or '.join(f'{d}D' for d in self._dims)} input "
                             f"(got {ndim}D input)")
        tracking = self.training and self.track_running_stats
        use_batch = self.training or (self.running_mean is None and self.running_var is None)
        stats = not self.training or self.track_running_stats
        return _norms.batch_norm_counted(
            "batch_norm", input, self.running_mean if stats else None,
            self.running_var if stats else None, self.weight, self.bias, use_batch,
            self.momentum, self.eps,
            counter=self.num_batches_tracked if tracking else None)


class BatchNorm1d(_BatchNorm):
    """Batch normalization of (N, C) or (N, C, L) inputs (PyTorch's `nn.BatchNorm1d`):
    per channel, `(x - mean) / sqrt(var + eps) * weight + bias` with the batch's mean and
    biased variance in training, the running ones in evaluation (`eval()`).

    Args:
        num_features: C.
        eps: added to the variance (default 1e-5).
        momentum: running = (1 - momentum) running + momentum batch (default 0.1, the
            variance unbiased); None: the cumulative average over the batches seen
            (`num_batches_tracked`).
        affine: learn `weight` (ones) and `bias` (zeros) (default True).
        track_running_stats: keep `running_mean`, `running_var`, `num_batches_tracked`
            buffers (default True); False: the batch's statistics in evaluation too.
        dtype: parameter and buffer dtype (default: `pa.get_default_dtype()`).
        bias: learn the bias (default True; with affine).

    Thread safety: each training forward's update of the buffers is atomic
    (`nn/_norms.py`); see `Module` for the rest.
    """

    _dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalization of (N, C, H, W) inputs (PyTorch's `nn.BatchNorm2d`); the
    arguments, parameters and buffers of BatchNorm1d."""

    _dims = (4,)


class BatchNorm3d(_BatchNorm):
    """Batch normalization of (N, C, D, H, W) inputs (PyTorch's `nn.BatchNorm3d`); the
    arguments, parameters and buffers of BatchNorm1d."""

    _dims = (5,)


class _InstanceNorm(_NormBase):
    _dims: int = 0   # an unbatched input's number of dimensions

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 affine: bool = False, track_running_stats: bool = False, *, dtype=None,
                 bias: bool = True) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats,
                         dtype=dtype, bias=bias)

    def forward(self, input):
        """Normalize each sample's channels over their positions; an unbatched input
        (one dimension fewer) is one sample."""
        t = input if isinstance(input, Tensor) else Tensor._wrap(np.asarray(input))
        layer, ndim = type(self).__name__, t._data.ndim
        if ndim not in (self._dims, self._dims + 1):
            raise ValueError(f"{layer}: expected {self._dims}D (unbatched) or "
                             f"{self._dims + 1}D (batched) input (got {ndim}D input)")
        channels = t.shape[ndim - self._dims]
        if channels != self.num_features:
            if self.affine:
                raise ValueError(f"{layer}: expected input's size at dim={ndim - self._dims} "
                                 f"to match num_features ({self.num_features}), but got: "
                                 f"{channels}.")
            warnings.warn(f"{layer}: input's size at dim={ndim - self._dims} does not match "
                          f"num_features. You can silence this warning by not passing in "
                          f"num_features, which is not used because affine=False",
                          stacklevel=2)
        if ndim == self._dims:
            return S.squeeze(self._normalize(S.unsqueeze(t, 0)), 0)
        return self._normalize(t)

    def _normalize(self, t):
        return F.instance_norm(t, self.running_mean, self.running_var, self.weight,
                               self.bias, self.training or not self.track_running_stats,
                               0.0 if self.momentum is None else self.momentum, self.eps)


class InstanceNorm1d(_InstanceNorm):
    """Instance normalization of (N, C, L) or unbatched (C, L) inputs (PyTorch's
    `nn.InstanceNorm1d`): each sample's channels normalized over their positions.

    Args: num_features (C); eps (1e-5); momentum (0.1); affine (default False: no
    weight and bias); track_running_stats (default False; True: running statistics
    updated in training and used in evaluation); dtype; bias."""

    _dims = 2


class InstanceNorm2d(_InstanceNorm):
    """Instance normalization of (N, C, H, W) or unbatched (C, H, W) inputs (PyTorch's
    `nn.InstanceNorm2d`); the arguments of InstanceNorm1d."""

    _dims = 3


class InstanceNorm3d(_InstanceNorm):
    """Instance normalization of (N, C, D, H, W) or unbatched (C, D, H, W) inputs
    (PyTorch's `nn.InstanceNorm3d`); the arguments of InstanceNorm1d."""

    _dims = 4


class GroupNorm(Module):
    """Group normalization (PyTorch's `nn.GroupNorm`): the channels of an (N, C, *) input
    split into `num_groups` groups, each normalized over its channels and positions,
    then `weight` and `bias` per channel.

    Args: num_groups (dividing num_channels); num_channels; eps (1e-5); affine (learn
    weight = 1 and bias = 0 of shape (C,), default True); dtype; bias.
    """

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True, *, dtype=None, bias: bool = True) -> None:
        super().__init__()
        self.num_groups = positive_int(num_groups, "num_groups", "GroupNorm")
        self.num_channels = positive_int(num_channels, "num_channels", "GroupNorm")
        if self.num_channels % self.num_groups:
            raise ValueError(f"GroupNorm: num_channels ({num_channels}) must be divisible "
                             f"by num_groups ({num_groups})")
        self.eps, self.affine = eps, affine
        dt = float_dtype(dtype, "GroupNorm")
        _affine_parameters(self, affine, bias, (self.num_channels,), dt)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """weight = 1, bias = 0."""
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def forward(self, input):
        """The group-normalized `input`."""
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        """PyTorch's: num_groups, num_channels, eps, affine, bias."""
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, "
                f"affine={self.affine}, bias={self.bias is not None}")


class LocalResponseNorm(Module):
    """Local response normalization across channels (PyTorch's
    `nn.LocalResponseNorm`, `nn.functional.local_response_norm`): `x / (k + alpha *
    mean of x**2 over `size` neighbouring channels) ** beta`, input (N, C, *) of 3 or
    more dimensions. No parameters."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75,
                 k: float = 1.0) -> None:
        super().__init__()
        self.size = positive_int(size, "size", "LocalResponseNorm")
        self.alpha, self.beta, self.k = alpha, beta, k

    def forward(self, input):
        """The normalized `input`."""
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        """PyTorch's: size, alpha, beta, k."""
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"
