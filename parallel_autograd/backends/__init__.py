"""`pa.backends`: PyTorch's `torch.backends` flags, for programs that set them.

`backends.cudnn` (`benchmark`, `deterministic`, `enabled`, `allow_tf32`; `is_available()`
False, `version()` None), `backends.cuda` (`matmul.allow_tf32`,
`matmul.allow_fp16_reduced_precision_reduction`; `is_built()` False) and `backends.mps`
(`is_available()`, `is_built()` False). The flags are plain attributes with torch's
defaults: settable, read back as set, and without effect (there is no cuDNN, CUDA or MPS
here; every computation is deterministic already).
"""
from . import cuda, cudnn, mps  # noqa: F401

__all__ = ["cuda", "cudnn", "mps"]
