"""`Conv1d`, `Conv2d`, `Conv3d`, `ConvTranspose1d`, `ConvTranspose2d`, `ConvTranspose3d`,
`Unfold` and `Fold`."""
from __future__ import annotations

import numpy as np

from .. import functional as F
from ..module import Module
from ._utils import empty_parameter, float_dtype, positive_int
from .linear import init_linear_like

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _ntuple(value, nd: int, what: str, layer: str) -> tuple:
    """An int or `nd` ints as a tuple of `nd` ints."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return (int(value),) * nd
    try:
        out = tuple(int(v) for v in value)
    except (TypeError, ValueError):
        out = ()
    if len(out) != nd:
        raise ValueError(f"{layer}: {what} must be an int or {nd} ints, got {value!r}")
    return out


class _ConvNd(Module):
    """What the convolution layers share: arguments, parameters and their initialisation
    (PyTorch's `_ConvNd`)."""

    _nd = 2
    _transposed = False

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1,
                 padding=0, dilation=1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", dtype=None,
                 generator: np.random.Generator | None = None, output_padding=0) -> None:
        super().__init__()
        layer, nd = type(self).__name__, self._nd
        self.in_channels = positive_int(in_channels, "in_channels", layer)
        self.out_channels = positive_int(out_channels, "out_channels", layer)
        self.groups = positive_int(groups, "groups", layer)
        if self.in_channels % self.groups:
            raise ValueError(f"{layer}: in_channels must be divisible by groups")
        if self.out_channels % self.groups:
            raise ValueError(f"{layer}: out_channels must be divisible by groups")
        self.kernel_size = _ntuple(kernel_size, nd, "kernel_size", layer)
        self.stride = _ntuple(stride, nd, "stride", layer)
        self.dilation = _ntuple(dilation, nd, "dilation", layer)
        self.output_padding = _ntuple(output_padding, nd, "output_padding", layer)
        if min(self.kernel_size + self.stride + self.dilation) < 1:
            raise ValueError(f"{layer}: kernel_size, stride and dilation must be positive")
        if isinstance(padding, str):
            if padding not in ("valid", "same"):
                raise ValueError(f"{layer}: invalid padding string {padding!r}, should be "
                                 f"one of 'valid', 'same'")
            if padding == "same" and self.stride != (1,) * nd:
                raise ValueError(f"{layer}: padding='same' is not supported for strided "
                                 f"convolutions")
            self.padding = padding
        else:
            self.padding = _ntuple(padding, nd, "padding", layer)
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"{layer}: padding_mode must be one of {_PADDING_MODES}, got "
                             f"{padding_mode!r}")
        if padding_mode != "zeros" and self._transposed:
            raise ValueError(f'{layer}: only "zeros" padding mode is supported')
        self.padding_mode = padding_mode
        dt = float_dtype(dtype, layer)
        shape = (self.in_channels, self.out_channels // self.groups) if self._transposed \
            else (self.out_channels, self.in_channels // self.groups)
        self.weight = empty_parameter(shape + self.kernel_size, dt)
        if bias:
            self.bias = empty_parameter((self.out_channels,), dt)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters(generator)

    def forward(self, input):
        """The convolution of `input` (N, C, *spatial) or (C, *spatial) (`F.conv1d/2d/3d`;
        the transposed layers have their own)."""
        x, padding = self._padded(input)
        conv = (F.conv1d, F.conv2d, F.conv3d)[self._nd - 1]
        return conv(x, self.weight, self.bias, self.stride, padding, self.dilation,
                    self.groups)

    def _padded(self, input):
        """(input, padding) for the functional convolution: with padding_mode other than
        "zeros", the input padded by `F.pad` in that mode and padding 0 (PyTorch's
        `_reversed_padding_repeated_twice`; "same" puts the odd one after)."""
        if self.padding_mode == "zeros":
            return input, self.padding
        nd = self._nd
        if self.padding == "valid":
            return input, 0
        if self.padding == "same":
            totals = [d * (k - 1) for d, k in zip(self.dilation, self.kernel_size)]
            pairs = [(t // 2, t - t // 2) for t in totals]
        else:
            pairs = [(p, p) for p in self.padding]
        flat = [w for pair in reversed(pairs) for w in pair]
        return F.pad(input, flat, mode=self.padding_mode), (0,) * nd

    def reset_parameters(self, generator: np.random.Generator | None = None) -> None:
        """Redraw weight and bias with PyTorch's default initialisation:
        kaiming_uniform_(a=sqrt(5)), bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in =
        weight.shape[1] * prod(kernel_size)."""
        init_linear_like(self.weight, self.bias, generator)

    def extra_repr(self) -> str:
        """PyTorch's: channels, kernel_size, stride, then the options not at default."""
        nd = self._nd
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0,) * nd:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * nd:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * nd:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class Conv1d(_ConvNd):
    """1-D convolution (cross-correlation) over (N, C, L) input (PyTorch's `nn.Conv1d`).

    Args: in_channels, out_channels; kernel_size, stride (default 1), dilation (default
    1): ints; padding: int (default 0), 'valid' or 'same'; groups (default 1: in and out
    channels divisible by it; groups == in_channels is depthwise); bias (default True);
    padding_mode: 'zeros', 'reflect', 'replicate' or 'circular'; dtype (default:
    `pa.get_default_dtype()`); generator for the initial values. Parameters: weight
    (out_channels, in_channels/groups, k) and bias, PyTorch's initialisation.
    """

    _nd = 1

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1,
                 padding=0, dilation=1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", dtype=None,
                 generator: np.random.Generator | None = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, dtype, generator)


class Conv2d(_ConvNd):
    """2-D convolution (cross-correlation) over NCHW input (PyTorch's `nn.Conv2d`).

    Args:
        in_channels, out_channels: channels of the input and of the output.
        kernel_size: int or (kh, kw).
        stride, dilation: int or pair (default 1).
        padding: int or pair of zero padding (default 0), or "valid" (none) or "same"
            (stride 1; one more on the bottom/right when the total is odd, as PyTorch).
        groups: independent channel groups (default 1; groups == in_channels is
            depthwise).
        bias: whether to learn a bias (default True).
        padding_mode: "zeros" (default), "reflect", "replicate" or "circular" (the input
            is padded by `F.pad` in that mode, then convolved without padding).
        dtype: parameter dtype (default: `pa.get_default_dtype()`).
        generator: numpy Generator for the initial values (default: the default
            generator).

    Parameters: `weight` (out_channels, in_channels/groups, kh, kw) and `bias`
    (out_channels,), both ~ U(-k, k) with k = 1/sqrt(in_channels/groups * kh * kw)
    (PyTorch's default initialisation). Input (N, C, H, W) -> (N, out_channels, H', W').
    """

    _nd = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1,
                 padding=0, dilation=1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", dtype=None,
                 generator: np.random.Generator | None = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, dtype, generator)


class Conv3d(_ConvNd):
    """3-D convolution over (N, C, D, H, W) input (PyTorch's `nn.Conv3d`); arguments as
    `Conv2d`'s with triples. Parameters: weight (out_channels, in_channels/groups, kd, kh,
    kw) and bias."""

    _nd = 3

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1,
                 padding=0, dilation=1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", dtype=None,
                 generator: np.random.Generator | None = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, dtype, generator)


class _ConvTransposeNd(_ConvNd):
    """What the transposed convolution layers share: PyTorch's argument order and the
    `output_size` argument of forward."""

    _transposed = True

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1,
                 padding=0, output_padding=0, groups: int = 1, bias: bool = True,
                 dilation=1, padding_mode: str = "zeros", dtype=None,
                 generator: np.random.Generator | None = None) -> None:
        if isinstance(padding, str):
            raise ValueError(f"{type(self).__name__}: padding must be an int or ints, got "
                             f"{padding!r}")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, dtype, generator, output_padding)

    def _output_padding(self, input, output_size) -> tuple:
        """`output_padding`, or the one giving `output_size` (PyTorch's: between the
        smallest output size and stride - 1 more)."""
        if output_size is None:
            return self.output_padding
        nd, layer = self._nd, type(self).__name__
        output_size = tuple(int(s) for s in output_size)
        shape = np.shape(input)
        if len(output_size) == len(shape):
            output_size = output_size[-nd:]
        if len(output_size) != nd:
            raise ValueError(f"{layer}: output_size must have {nd} or {len(shape)} "
                             f"elements, got {output_size}")
        out = []
        for n, size, k, s, p, d in zip(shape[-nd:], output_size, self.kernel_size,
                                       self.stride, self.padding, self.dilation):
            smallest = (n - 1) * s - 2 * p + d * (k - 1) + 1
            if not smallest <= size <= smallest + s - 1:
                raise ValueError(f"{layer}: requested an output size of {output_size}, "
                                 f"but valid sizes range from {smallest} to "
                                 f"{smallest + s - 1} (for an input of {shape[-nd:]})")
            out.append(size - smallest)
        return tuple(out)


class ConvTranspose1d(_ConvTransposeNd):
    """1-D transposed convolution over (N, C_in, L) (PyTorch's `nn.ConvTranspose1d`):
    the input gradient of a Conv1d. Args as PyTorch's (in_channels, out_channels,
    kernel_size, stride, padding, output_padding, groups, bias, dilation, padding_mode);
    weight (in_channels, out_channels/groups, k)."""

    _nd = 1

    def forward(self, input, output_size=None):
        """The transposed convolution of `input`; `output_size` picks output_padding."""
        return F.conv_transpose1d(input, self.weight, self.bias, self.stride, self.padding,
                                  self._output_padding(input, output_size), self.groups,
                                  self.dilation)


class ConvTranspose2d(_ConvTransposeNd):
    """2-D transposed convolution ("deconvolution") over NCHW input (PyTorch's
    `nn.ConvTranspose2d`): the input gradient of a Conv2d, output size (H-1)*stride -
    2*padding + dilation*(k-1) + output_padding + 1. Args as PyTorch's; weight
    (in_channels, out_channels/groups, kh, kw)."""

    _nd = 2

    def forward(self, input, output_size=None):
        """The transposed convolution of `input`; `output_size` picks output_padding."""
        return F.conv_transpose2d(input, self.weight, self.bias, self.stride, self.padding,
                                  self._output_padding(input, output_size), self.groups,
                                  self.dilation)


class ConvTranspose3d(_ConvTransposeNd):
    """3-D transposed convolution over (N, C_in, D, H, W) (PyTorch's
    `nn.ConvTranspose3d`); weight (in_channels, out_channels/groups, kd, kh, kw)."""

    _nd = 3

    def forward(self, input, output_size=None):
        """The transposed convolution of `input`; `output_size` picks output_padding."""
        return F.conv_transpose3d(input, self.weight, self.bias, self.stride, self.padding,
                                  self._output_padding(input, output_size), self.groups,
                                  self.dilation)


class Unfold(Module):
    """Sliding local blocks of (N, C, H, W) input as columns (N, C*kh*kw, L) (PyTorch's
    `nn.Unfold`, im2col)."""

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1) -> None:
        super().__init__()
        self.kernel_size, self.dilation = kernel_size, dilation
        self.padding, self.stride = padding, stride

    def forward(self, input):
        """The columns of `input`."""
        return F.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        """PyTorch's: kernel_size, dilation, padding, stride."""
        return (f"kernel_size={self.kernel_size}, dilation={self.dilation}, "
                f"padding={self.padding}, stride={self.stride}")


class Fold(Module):
    """Columns (N, C*kh*kw, L) summed back into an (N, C, *output_size) image (PyTorch's
    `nn.Fold`, col2im: overlapping blocks add)."""

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1) -> None:
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input):
        """The image the columns `input` add up to."""
        return F.fold(input, self.output_size, self.kernel_size, self.dilation, self.padding,
                      self.stride)

    def extra_repr(self) -> str:
        """PyTorch's: output_size, kernel_size, dilation, padding, stride."""
        return (f"output_size={self.output_size}, kernel_size={self.kernel_size}, "
                f"dilation={self.dilation}, padding={self.padding}, stride={self.stride}")
