"""`pa.backends.cuda`: torch.backends.cuda's flags (no effect: there is no CUDA here)."""
from __future__ import annotations


class _MatmulFlags:
    """`matmul.allow_tf32` (torch's default False) and
    `matmul.allow_fp16_reduced_precision_reduction` (True): settable, no effect."""

    def __init__(self) -> None:
        self.allow_tf32 = False
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True


matmul = _MatmulFlags()


def is_built() -> bool:
    """False: this library has no CUDA backend."""
    return False
