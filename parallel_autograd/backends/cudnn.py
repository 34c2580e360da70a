"""`pa.backends.cudnn`: torch.backends.cudnn's flags (no effect: there is no cuDNN here)."""
from __future__ import annotations

#: Pick the fastest convolution algorithm by benchmarking (torch's default False).
benchmark: bool = False
#: Only deterministic convolution algorithms (torch's default False).
deterministic: bool = False
#: Use cuDNN at all (torch's default True).
enabled: bool = True
#: Allow TF32 in cuDNN convolutions (torch's default True).
allow_tf32: bool = True


def is_available() -> bool:
    """False: there is no cuDNN here."""
    return False


def version() -> None:
    """None: there is no cuDNN here."""
    return None
