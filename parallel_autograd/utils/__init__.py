"""PyTorch's `torch.utils` that programs use: `data` (datasets, samplers, DataLoader) and
`checkpoint`."""
from . import checkpoint, data  # noqa: F401

__all__ = ["checkpoint", "data"]
