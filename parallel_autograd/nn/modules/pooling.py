"""`MaxPool2d` and `AvgPool2d`."""
from __future__ import annotations

from .. import functional as F
from ..module import Module


class MaxPool2d(Module):
    """Max over sliding windows of NCHW input (PyTorch's `nn.MaxPool2d`).

    Args:
        kernel_size: int or pair; stride: int or pair, default `kernel_size`;
        padding: int or pair of implicit -inf padding (default 0).
        dilation, return_indices, ceil_mode: only the defaults (1, False, False);
            others raise NotImplementedError.
    The gradient goes to the first maximum of each window, as in PyTorch.
    """

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1,
                 return_indices: bool = False, ceil_mode: bool = False) -> None:
        super().__init__()
        if dilation != 1 or return_indices or ceil_mode:
            raise NotImplementedError("MaxPool2d: dilation, return_indices and ceil_mode "
                                      "other than 1, False, False are not supported yet")
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, input):
        """Max pooling of `input` (N, C, H, W)."""
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding)

    def extra_repr(self) -> str:
        """PyTorch's: kernel_size, stride, padding, dilation, ceil_mode."""
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, dilation={self.dilation}, "
                f"ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    """Mean over sliding windows of NCHW input (PyTorch's `nn.AvgPool2d`).

    Args:
        kernel_size: int or pair; stride: int or pair, default `kernel_size`;
        padding: int or pair of zero padding (default 0);
        count_include_pad: whether padded zeros count in the divisor (default True).
        ceil_mode, divisor_override: only the defaults (False, None); others raise
            NotImplementedError.
    """

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override=None) -> None:
        super().__init__()
        if ceil_mode or divisor_override is not None:
            raise NotImplementedError("AvgPool2d: ceil_mode and divisor_override are not "
                                      "supported yet")
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, input):
        """Average pooling of `input` (N, C, H, W)."""
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding,
                            self.count_include_pad)

    def extra_repr(self) -> str:
        """PyTorch's: kernel_size, stride, padding."""
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"
