"""`pa.backends.mps`: torch.backends.mps (there is no Metal device here)."""
from __future__ import annotations


def is_available() -> bool:
    """False: there is no MPS device here."""
    return False


def is_built() -> bool:
    """False: this library has no MPS backend."""
    return False
