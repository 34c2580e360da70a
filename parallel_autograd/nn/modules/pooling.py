"""Pooling and resampling layers: `MaxPool1d`, `MaxPool2d`, `AvgPool1d`, `AvgPool2d`,
`AdaptiveAvgPool1d`, `AdaptiveAvgPool2d`, `AdaptiveMaxPool1d`, `AdaptiveMaxPool2d`,
`LPPool1d`, `LPPool2d`, `LPPool3d`, `Upsample`, `PixelShuffle`, `PixelUnshuffle`."""
from __future__ import annotations

from .. import functional as F
from ..module import Module


class _MaxPoolNd(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1,
                 return_indices: bool = False, ceil_mode: bool = False) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def extra_repr(self) -> str:
        """PyTorch's: kernel_size, stride, padding, dilation, ceil_mode."""
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, dilation={self.dilation}, "
                f"ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPoolNd):
    """Max over sliding windows of (N, C, L) input (PyTorch's `nn.MaxPool1d`).

    Args: kernel_size; stride (default kernel_size); padding (implicit -inf, at most
    half the kernel); dilation; return_indices (also return each maximum's position in
    L, int64); ceil_mode (keep a last partial window).
    """

    def forward(self, input):
        """Max pooling of `input` (N, C, L) or (C, L)."""
        return F.max_pool1d(input, self.kernel_size, self.stride, self.padding,
                            self.dilation, self.ceil_mode, self.return_indices)


class MaxPool2d(_MaxPoolNd):
    """Max over sliding windows of NCHW input (PyTorch's `nn.MaxPool2d`).

    Args:
        kernel_size: int or pair; stride: int or pair, default `kernel_size`;
        padding: int or pair of implicit -inf padding (default 0);
        dilation: spacing of a window's elements (default 1);
        return_indices: also return the flat index of each maximum within its (H, W)
            plane (int64, PyTorch's);
        ceil_mode: keep last partial windows (starting inside the input).
    The gradient goes to the first maximum of each window, as in PyTorch.
    """

    def forward(self, input):
        """Max pooling of `input` (N, C, H, W) or (C, H, W)."""
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding,
                            self.dilation, self.ceil_mode, self.return_indices)


class _MaxUnpoolNd(Module):
    _nd = 2

    def __init__(self, kernel_size, stride=None, padding=0) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding

    def forward(self, input, indices, output_size=None):
        """The values of `input` at `indices` (from the max pooling), zeros elsewhere."""
        unpool = F.max_unpool1d if self._nd == 1 else F.max_unpool2d
        return unpool(input, indices, self.kernel_size, self.stride, self.padding,
                      output_size)

    def extra_repr(self) -> str:
        """PyTorch's: kernel_size, stride, padding."""
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpoolNd):
    """The inverse of `MaxPool1d(return_indices=True)` (PyTorch's `nn.MaxUnpool1d`): args
    kernel_size, stride (default kernel_size), padding; `forward(input, indices,
    output_size=None)`."""

    _nd = 1


class MaxUnpool2d(_MaxUnpoolNd):
    """The inverse of `MaxPool2d(return_indices=True)` (PyTorch's `nn.MaxUnpool2d`): args
    kernel_size, stride (default kernel_size), padding; `forward(input, indices,
    output_size=None)`."""

    _nd = 2


class AvgPool1d(Module):
    """Mean over sliding windows of (N, C, L) input (PyTorch's `nn.AvgPool1d`).

    Args: kernel_size; stride (default kernel_size); padding (zeros); ceil_mode;
    count_include_pad (whether padded zeros count in the divisor, default True).
    """

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True) -> None:
        super().__init__()
        single = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v,)  # noqa: E731
        self.kernel_size = single(kernel_size)              # PyTorch keeps 1-tuples here
        self.stride = single(stride if stride is not None else kernel_size)
        self.padding, self.ceil_mode = single(padding), ceil_mode
        self.count_include_pad = count_include_pad

    def forward(self, input):
        """Average pooling of `input` (N, C, L) or (C, L)."""
        return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding,
                            self.ceil_mode, self.count_include_pad)

    def extra_repr(self) -> str:
        """PyTorch's: kernel_size, stride, padding."""
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(Module):
    """Mean over sliding windows of NCHW input (PyTorch's `nn.AvgPool2d`).

    Args:
        kernel_size: int or pair; stride: int or pair, default `kernel_size`;
        padding: int or pair of zero padding (default 0);
        ceil_mode: keep last partial windows (PyTorch's divisors);
        count_include_pad: whether padded zeros count in the divisor (default True);
        divisor_override: divide every window's sum by this instead.
    """

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override=None) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, input):
        """Average pooling of `input` (N, C, H, W) or (C, H, W)."""
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding,
                            self.ceil_mode, self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        """PyTorch's: kernel_size, stride, padding."""
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class _AdaptivePool(Module):
    def __init__(self, output_size) -> None:
        super().__init__()
        self.output_size = output_size

    def extra_repr(self) -> str:
        """PyTorch's: output_size."""
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptivePool):
    """Mean over adaptive windows of (N, C, L) input giving length `output_size`
    (PyTorch's `nn.AdaptiveAvgPool1d`)."""

    def forward(self, input):
        """Adaptive average pooling of `input`."""
        return F.adaptive_avg_pool1d(input, self.output_size)


class AdaptiveAvgPool2d(_AdaptivePool):
    """Mean over adaptive windows of NCHW input giving `output_size` (int or pair; None
    keeps that input size) (PyTorch's `nn.AdaptiveAvgPool2d`; `AdaptiveAvgPool2d(1)` is
    global average pooling)."""

    def forward(self, input):
        """Adaptive average pooling of `input`."""
        return F.adaptive_avg_pool2d(input, self.output_size)


class AdaptiveMaxPool1d(_AdaptivePool):
    """Max over adaptive windows of (N, C, L) input (PyTorch's `nn.AdaptiveMaxPool1d`);
    `return_indices` also returns each maximum's position in L."""

    def __init__(self, output_size, return_indices: bool = False) -> None:
        super().__init__(output_size)
        self.return_indices = return_indices

    def forward(self, input):
        """Adaptive max pooling of `input`."""
        return F.adaptive_max_pool1d(input, self.output_size, self.return_indices)


class AdaptiveMaxPool2d(_AdaptivePool):
    """Max over adaptive windows of NCHW input giving `output_size` (PyTorch's
    `nn.AdaptiveMaxPool2d`); `return_indices` also returns each maximum's flat index
    within its (H, W) plane."""

    def __init__(self, output_size, return_indices: bool = False) -> None:
        super().__init__(output_size)
        self.return_indices = return_indices

    def forward(self, input):
        """Adaptive max pooling of `input`."""
        return F.adaptive_max_pool2d(input, self.output_size, self.return_indices)


class MaxPool3d(_MaxPoolNd):
    """Max over sliding windows of (N, C, D, H, W) input (PyTorch's `nn.MaxPool3d`); args as
    `MaxPool2d`'s with triples; `return_indices` gives flat indices in the (D, H, W) volume."""

    def forward(self, input):
        """Max pooling of `input` (N, C, D, H, W) or (C, D, H, W)."""
        return F.max_pool3d(input, self.kernel_size, self.stride, self.padding,
                            self.dilation, self.ceil_mode, self.return_indices)


class AvgPool3d(AvgPool2d):
    """Mean over sliding windows of (N, C, D, H, W) input (PyTorch's `nn.AvgPool3d`); args
    as `AvgPool2d`'s with triples."""

    def forward(self, input):
        """Average pooling of `input` (N, C, D, H, W) or (C, D, H, W)."""
        return F.avg_pool3d(input, self.kernel_size, self.stride, self.padding,
                            self.ceil_mode, self.count_include_pad, self.divisor_override)


class _LPPoolNd(Module):
    def __init__(self, norm_type, kernel_size, stride=None, ceil_mode: bool = False) -> None:
        super().__init__()
        self.norm_type, self.kernel_size = norm_type, kernel_size
        self.stride, self.ceil_mode = stride, ceil_mode     # None: kernel_size, as PyTorch

    def extra_repr(self) -> str:
        """PyTorch's: norm_type, kernel_size, stride, ceil_mode."""
        return (f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, ceil_mode={self.ceil_mode}")


class LPPool1d(_LPPoolNd):
    """The p-norm over sliding windows of (N, C, L) input (PyTorch's `nn.LPPool1d`):
    (sum x^p)^(1/p) with p = norm_type; kernel_size, stride (default kernel_size),
    ceil_mode; no padding."""

    def forward(self, input):
        """Power-average pooling of `input` (N, C, L) or (C, L)."""
        return F.lp_pool1d(input, self.norm_type, self.kernel_size, self.stride,
                           self.ceil_mode)


class LPPool2d(_LPPoolNd):
    """The p-norm over sliding windows of NCHW input (PyTorch's `nn.LPPool2d`); args as
    `LPPool1d`'s, with ints or pairs."""

    def forward(self, input):
        """Power-average pooling of `input` (N, C, H, W) or (C, H, W)."""
        return F.lp_pool2d(input, self.norm_type, self.kernel_size, self.stride,
                           self.ceil_mode)


class LPPool3d(_LPPoolNd):
    """The p-norm over sliding windows of (N, C, D, H, W) input (PyTorch's
    `nn.LPPool3d`); args as `LPPool1d`'s, with ints or triples."""

    def forward(self, input):
        """Power-average pooling of `input` (N, C, D, H, W) or (C, D, H, W)."""
        return F.lp_pool3d(input, self.norm_type, self.kernel_size, self.stride,
                           self.ceil_mode)


class AdaptiveAvgPool3d(_AdaptivePool):
    """Mean over adaptive windows of (N, C, D, H, W) input giving `output_size` (int or
    triple; None keeps that size) (PyTorch's `nn.AdaptiveAvgPool3d`)."""

    def forward(self, input):
        """Adaptive average pooling of `input`."""
        return F.adaptive_avg_pool3d(input, self.output_size)


class AdaptiveMaxPool3d(AdaptiveMaxPool2d):
    """Max over adaptive windows of (N, C, D, H, W) input (PyTorch's
    `nn.AdaptiveMaxPool3d`); `return_indices` gives flat indices in the volume."""

    def forward(self, input):
        """Adaptive max pooling of `input`."""
        return F.adaptive_max_pool3d(input, self.output_size, self.return_indices)


class Upsample(Module):
    """Resample the spatial dims of (N, C, *spatial) input (PyTorch's `nn.Upsample`,
    `F.interpolate`): `size` or `scale_factor`; mode 'nearest' (default),
    'nearest-exact', 'linear', 'bilinear', 'bicubic', 'trilinear'; `align_corners` for
    the interpolating modes."""

    def __init__(self, size=None, scale_factor=None, mode: str = "nearest",
                 align_corners=None, recompute_scale_factor=None) -> None:
        super().__init__()
        self.size = size
        self.scale_factor = float(scale_factor) if isinstance(scale_factor, (int, float)) \
            else (tuple(float(f) for f in scale_factor) if scale_factor is not None
                  else None)
        self.mode, self.align_corners = mode, align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, input):
        """The resampled `input`."""
        return F.interpolate(input, self.size, self.scale_factor, self.mode,
                             self.align_corners, self.recompute_scale_factor)

    def extra_repr(self) -> str:
        """PyTorch's: scale_factor (or size) and mode."""
        if self.scale_factor is not None:
            return f"scale_factor={self.scale_factor}, mode={self.mode!r}"
        return f"size={self.size}, mode={self.mode!r}"


class PixelShuffle(Module):
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r), r = upscale_factor (PyTorch's
    `nn.PixelShuffle`)."""

    def __init__(self, upscale_factor: int) -> None:
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input):
        """The shuffled `input`."""
        return F.pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self) -> str:
        """PyTorch's: upscale_factor."""
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """(*, C, H*r, W*r) -> (*, C*r*r, H, W), r = downscale_factor (PyTorch's
    `nn.PixelUnshuffle`, PixelShuffle's inverse)."""

    def __init__(self, downscale_factor: int) -> None:
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input):
        """The unshuffled `input`."""
        return F.pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self) -> str:
        """PyTorch's: downscale_factor."""
        return f"downscale_factor={self.downscale_factor}"
