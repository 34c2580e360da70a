"""`Conv2d`."""
from __future__ import annotations

import numpy as np

from .. import functional as F
from ..module import Module
from ._utils import empty_parameter, float_dtype, pair, positive_int
from .linear import init_linear_like


class Conv2d(Module):
    """2-D convolution (cross-correlation) over NCHW input (PyTorch's `nn.Conv2d`).

    Args:
        in_channels, out_channels: channels of the input and of the output.
        kernel_size: int or (kh, kw).
        stride: int or pair (default 1).
        padding: int or pair of zero padding (default 0), or "valid" (none) or "same"
            (stride 1 and odd kernel sizes only here).
        dilation, groups, padding_mode: only the defaults (1, 1, "zeros");
            others raise NotImplementedError (nn.functional.conv2d lacks them).
        bias: whether to learn a bias (default True).
        dtype: parameter dtype (default float64).
        generator: numpy Generator for the initial values (default: the default
            generator).

    Parameters: `weight` (out_channels, in_channels, kh, kw) and `bias`
    (out_channels,), both ~ U(-k, k) with k = 1/sqrt(in_channels * kh * kw)
    (PyTorch's default initialisation). Input (N, C, H, W) -> (N, out_channels, H', W').
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1,
                 padding=0, dilation=1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", dtype=None,
                 generator: np.random.Generator | None = None) -> None:
        super().__init__()
        self.in_channels = positive_int(in_channels, "in_channels", "Conv2d")
        self.out_channels = positive_int(out_channels, "out_channels", "Conv2d")
        self.kernel_size = pair(kernel_size, "kernel_size", "Conv2d")
        self.stride = pair(stride, "stride", "Conv2d")
        self.dilation = pair(dilation, "dilation", "Conv2d")
        self.groups, self.padding_mode = groups, padding_mode
        self.output_padding = (0, 0)
        if self.dilation != (1, 1) or groups != 1 or padding_mode != "zeros":
            raise NotImplementedError("Conv2d: dilation, groups and padding_mode other "
                                      "than 1, 1 and 'zeros' are not supported yet")
        self.padding = padding if isinstance(padding, str) else \
            pair(padding, "padding", "Conv2d")
        self._padding = self._resolve_padding()
        dt = float_dtype(dtype, "Conv2d")
        self.weight = empty_parameter((self.out_channels, self.in_channels)
                                      + self.kernel_size, dt)
        if bias:
            self.bias = empty_parameter((self.out_channels,), dt)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters(generator)

    def _resolve_padding(self) -> tuple:
        if not isinstance(self.padding, str):
            return self.padding
        if self.padding == "valid":
            return (0, 0)
        if self.padding != "same":
            raise ValueError(f"Conv2d: invalid padding string {self.padding!r}, should be "
                             f"one of 'valid', 'same'")
        if self.stride != (1, 1):
            raise ValueError("padding='same' is not supported for strided convolutions")
        if any(k % 2 == 0 for k in self.kernel_size):
            raise NotImplementedError("Conv2d: padding='same' with an even kernel size "
                                      "needs asymmetric padding, not supported yet")
        return tuple((k - 1) // 2 for k in self.kernel_size)

    def reset_parameters(self, generator: np.random.Generator | None = None) -> None:
        """Redraw weight and bias with PyTorch's default initialisation."""
        init_linear_like(self.weight, self.bias, generator)

    def forward(self, input):
        """The convolution of `input` (N, C, H, W)."""
        return F.conv2d(input, self.weight, self.bias, self.stride, self._padding)

    def extra_repr(self) -> str:
        """PyTorch's: channels, kernel_size, stride, then padding/bias when not default."""
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.bias is None:
            s += ", bias=False"
        return s
