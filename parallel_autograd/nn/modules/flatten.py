"""`Flatten`."""
from __future__ import annotations

from ...ops.shape import flatten
from ..module import Module


class Flatten(Module):
    """Merge dims `start_dim`..`end_dim` into one (default: all but the batch dim)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):
        """flatten(input, start_dim, end_dim)."""
        return flatten(input, self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        """`start_dim=…, end_dim=…`."""
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"
