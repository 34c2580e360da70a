"""`Dropout`."""
from __future__ import annotations

import numpy as np

from ... import random as _random
from .. import functional as F
from ..module import Module


class Dropout(Module):
    """In training mode, zero each element with probability `p` and scale the rest by
    1/(1-p); in eval mode, the identity (PyTorch's `nn.Dropout`).

    Args:
        p: drop probability in [0, 1] (default 0.5).
        inplace: write the result into the input and return it, as PyTorch's.
        generator: numpy Generator for the masks; default None draws each mask from
            the default generator at call time (so `pa.manual_seed` makes runs
            reproducible). A generator given here is deep-copied with the module.

    Thread safety: calls from several threads draw from the same generator (safe;
    which call gets which mask depends on scheduling).
    """

    def __init__(self, p: float = 0.5, inplace: bool = False,
                 generator: np.random.Generator | None = None) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace
        self.generator = _random.check_generator(generator)

    def forward(self, input):
        """`input` with dropout applied when `self.training`, else `input` itself."""
        if not self.training or self.p == 0.0:
            return input
        return F.dropout(input, self.p, True, self.inplace,
                         rng=_random.resolve_generator(self.generator))

    def extra_repr(self) -> str:
        """`p=…, inplace=…`."""
        return f"p={self.p}, inplace={self.inplace}"
