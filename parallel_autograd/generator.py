"""`Generator`: PyTorch's `torch.Generator` methods on a `numpy.random.Generator`.

A `pa.Generator` IS a numpy Generator (a subclass, PCG64 bits), so it is accepted wherever
the library takes `generator=` (and `rng=`), and numpy's own methods (`random`, `normal`,
`integers`, ...) work on it. It adds torch's methods:

- `manual_seed(seed)` -> self: after it the stream is `numpy.random.default_rng(seed)`'s
  (the same seeding as `pa.manual_seed`); a negative seed wraps modulo 2**64 as torch's;
- `seed()` -> a fresh seed from OS entropy, set and returned;
- `initial_seed()` -> the seed last set;
- `get_state()` -> a uint8 Tensor (torch's ByteTensor) holding the bit generator's state,
  `set_state(state)` -> self takes it back (or numpy's state dict);
- `device` (cpu).

A new `pa.Generator()` starts from torch's fixed default seed (67280421310721), as a new
`torch.Generator()` does, so two fresh generators give the same stream. The numbers differ
from torch's (PCG64, not Mersenne Twister): seeds reproduce runs of this library, not of
PyTorch.

Thread safety: draws are serialised by numpy's lock; `manual_seed`/`set_state` concurrent
with draws from other threads are not atomic with respect to them.
"""
from __future__ import annotations

import json

import numpy as np

from .device import device as _device
from .tensor import Tensor

__all__ = ["Generator", "DEFAULT_SEED"]

#: torch's seed of a new Generator (`default_rng_seed_val` in c10).
DEFAULT_SEED = 67280421310721
_MASK = (1 << 64) - 1


def check_seed(seed) -> int:
    """`seed` as torch's `manual_seed` reads it: an int in [-2**63, 2**64), negatives taken
    modulo 2**64. RuntimeError for a non-integer (torch's type), ValueError out of range."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise RuntimeError(f"manual_seed expected a long, but got {type(seed).__name__}")
    seed = int(seed)
    if not -(1 << 63) <= seed <= _MASK:
        raise ValueError(f"manual_seed: seed {seed} is out of range [-2**63, 2**64)")
    return seed & _MASK


class Generator(np.random.Generator):
    """PyTorch's `torch.Generator(device='cpu')`: a numpy Generator (PCG64) with torch's
    `manual_seed`, `seed`, `initial_seed`, `get_state`, `set_state` and `device`. See the
    module docstring."""

    def __init__(self, device="cpu", *, seed_box: list | None = None) -> None:
        dev = _device(device)
        if dev.type != "cpu":
            raise RuntimeError(f"Generator: device {dev} is not available: parallel_autograd "
                               f"runs on the CPU only")
        # seed_box: a one-item list holding the initial seed, shared with the owner of the
        # generator (parallel_autograd.random keeps the default generator's there)
        self._seed_box = [DEFAULT_SEED] if seed_box is None else seed_box
        super().__init__(np.random.PCG64(self._seed_box[0]))
        self._device = dev

    @property
    def device(self) -> _device:
        """Where the generator draws: always the CPU."""
        return self._device

    def manual_seed(self, seed: int) -> "Generator":
        """Reseed: afterwards the stream is `numpy.random.default_rng(seed)`'s. Returns self."""
        seed = check_seed(seed)
        self.bit_generator.state = np.random.PCG64(seed).state
        self._seed_box[0] = seed
        return self

    def seed(self) -> int:
        """Reseed from fresh OS entropy; returns the new seed."""
        s = int(np.random.SeedSequence().generate_state(1, np.uint64)[0])
        self.manual_seed(s)
        return s

    def initial_seed(self) -> int:
        """The seed last given to `manual_seed` or `seed` (or the initial one)."""
        return self._seed_box[0]

    def get_state(self):
        """The bit generator's state as a uint8 Tensor (what `set_state` takes back)."""
        raw = json.dumps(self.bit_generator.state, sort_keys=True).encode()
        return Tensor._wrap(np.frombuffer(raw, dtype=np.uint8).copy())

    def set_state(self, new_state) -> "Generator":
        """Restore a state from `get_state()` (a uint8 Tensor or array), or numpy's
        `bit_generator.state` dict. Returns self. TypeError for anything else, ValueError
        for a byte tensor that is not such a state; the generator is unchanged then."""
        if isinstance(new_state, dict):
            state = new_state
        else:
            data = new_state._data if isinstance(new_state, Tensor) else new_state
            if not isinstance(data, np.ndarray) or data.dtype != np.uint8:
                raise TypeError(f"expected a torch.ByteTensor (a uint8 Tensor from "
                                f"get_state()), but got {type(new_state).__name__}")
            try:
                state = json.loads(data.tobytes().decode())
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise ValueError("set_state: the tensor is not a state from "
                                 "Generator.get_state()") from e
        probe = np.random.PCG64()
        try:
            probe.state = state  # validates before this generator changes
        except (TypeError, ValueError, KeyError) as e:
            raise ValueError(f"set_state: not a PCG64 generator state ({e})") from None
        self.bit_generator.state = state
        return self

    def __reduce__(self):
        return _rebuild, (self.bit_generator.state, self._seed_box[0])

    def __deepcopy__(self, memo) -> "Generator":
        g = _rebuild(self.bit_generator.state, self._seed_box[0])
        memo[id(self)] = g
        return g

    def __repr__(self) -> str:
        return f"<parallel_autograd.Generator device='cpu' initial_seed={self._seed_box[0]}>"

    __str__ = __repr__


def _rebuild(state: dict, seed: int) -> Generator:
    g = Generator(seed_box=[seed])
    g.bit_generator.state = state
    return g
