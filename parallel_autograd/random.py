"""The default random number generator and `manual_seed` (PyTorch's `torch.manual_seed`).

Everything in the library that draws random numbers without being given a generator
(`pa.randn` without `rng`/`seed`, layer initialisation in `pa.nn`, `nn.Dropout`,
`nn.init.*` without `generator=`) draws from one process-wide numpy Generator,
`default_generator` (PCG64). `manual_seed(s)` reseeds it in place, so

    pa.manual_seed(0); m = pa.nn.Linear(3, 4)

builds the same layer every time, and code that kept a reference to
`default_generator` sees the reseeded stream. After `manual_seed(s)` the stream is the
one of `numpy.random.default_rng(s)`.

At import the generator is seeded from fresh OS entropy (numpy's convention; PyTorch
instead starts every process from the same fixed seed): call `manual_seed` for
reproducible runs. `initial_seed()` returns the seed in use.

Thread safety: numpy serialises draws from one Generator with a lock, so drawing from
several threads is safe, but which thread gets which numbers depends on scheduling;
for reproducible multi-threaded work give each thread its own Generator. A forked
child process inherits the parent's generator state (as with PyTorch): reseed it in
the child if the streams must differ.

`pa.checkpoint` replays the draws of its function when it recomputes it in backward:
it runs the recomputation under `generator_override(g)`, which makes `g` (a copy of the
generator's state at forward time) what code without a generator draws from, in this
context only (a ContextVar: this thread, and the engine's workers that run in a copy of
its context), so other threads and the default generator are untouched.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator

import numpy as np

from .generator import Generator

__all__ = ["default_generator", "manual_seed", "initial_seed", "seed", "get_rng_state",
           "set_rng_state", "resolve_generator", "current_generator", "generator_override",
           "use_generator"]

_INITIAL_SEED = [int(np.random.SeedSequence().generate_state(1, np.uint64)[0])]

#: The process-wide generator (a `pa.Generator`: a `numpy.random.Generator` with torch's
#: methods, its initial seed kept in _INITIAL_SEED); reseeded in place by `manual_seed`, so
#: references to it stay valid.
default_generator: Generator = Generator(seed_box=_INITIAL_SEED)

# A generator that replaces the default one in this context (`generator_override`).
_override: contextvars.ContextVar = contextvars.ContextVar("parallel_autograd_generator",
                                                           default=None)


def manual_seed(seed: int) -> np.random.Generator:
    """Reseed the default generator with `seed` (a non-negative int) and return it.

    Afterwards the default generator produces the stream of
    `numpy.random.default_rng(seed)`. Not atomic with respect to draws made by other
    threads at the same time (they may see either stream).
    """
    seed = _check_seed(seed)
    default_generator.bit_generator.state = np.random.PCG64(seed).state
    _INITIAL_SEED[0] = seed
    return default_generator


def seed() -> int:
    """Reseed the default generator from fresh OS entropy; returns the new seed."""
    s = int(np.random.SeedSequence().generate_state(1, np.uint64)[0])
    manual_seed(s)
    return s


def initial_seed() -> int:
    """The seed the default generator was last seeded with (`manual_seed`, `seed`, or
    the entropy drawn at import)."""
    return _INITIAL_SEED[0]


def get_rng_state() -> dict:
    """A copy of the default generator's state (numpy's bit-generator state dict);
    give it to `set_rng_state` to replay the same draws."""
    return default_generator.bit_generator.state


def set_rng_state(state: dict) -> None:
    """Restore the default generator's state from `get_rng_state()`."""
    default_generator.bit_generator.state = state


def current_generator() -> np.random.Generator:
    """The generator that code given no generator draws from here: the one set by an
    enclosing `generator_override` in this context, else `default_generator`.

    Thread safety: the override is per context (thread, or asyncio task)."""
    g = _override.get()
    return default_generator if g is None else g


@contextlib.contextmanager
def generator_override(generator: np.random.Generator) -> Iterator[np.random.Generator]:
    """Within the block, `current_generator()` (and so dropout, `resolve_generator(None)`,
    layer initialisation) draws from `generator` instead of the default generator, in
    this context only; the default generator is neither read nor advanced. Used by
    `pa.checkpoint` to replay the forward's random draws in its recomputation.

    Thread safety: a ContextVar: other threads are not affected; threads started
    with a copy of this context (the parallel engine's workers) see it."""
    if not isinstance(generator, np.random.Generator):
        raise TypeError(f"generator_override: expected a numpy.random.Generator, "
                        f"got {type(generator).__name__}")
    token = _override.set(generator)
    try:
        yield generator
    finally:
        _override.reset(token)


def use_generator(generator: np.random.Generator) -> None:
    """From now on in this context (a thread that calls it: for the rest of its life),
    code given no generator draws from `generator`: a worker thread's own stream (the
    DataLoader's workers). Other threads are not affected."""
    if not isinstance(generator, np.random.Generator):
        raise TypeError(f"use_generator: expected a numpy.random.Generator, "
                        f"got {type(generator).__name__}")
    _override.set(generator)


def resolve_generator(generator: np.random.Generator | None) -> np.random.Generator:
    """`generator` if given, else the current generator (`current_generator()`: the
    default generator, read at call time so it reflects the latest `manual_seed`, unless
    a `generator_override` is active). Raises TypeError for anything that is not a
    `numpy.random.Generator`."""
    if generator is None:
        return current_generator()
    if not isinstance(generator, np.random.Generator):
        raise TypeError(f"generator must be a numpy.random.Generator or None, "
                        f"got {type(generator).__name__}")
    return generator


def _check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"manual_seed: seed must be an int, got {type(seed).__name__}")
    seed = int(seed)
    if seed < 0:
        raise ValueError(f"manual_seed: seed must be non-negative, got {seed}")
    return seed
