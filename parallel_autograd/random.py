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
the child if the streams must differ. A Generator of your own that other threads draw
from when the process forks may have its lock held in the child: make a new one there.

`pa.checkpoint` replays the draws of its segment when it recomputes it in backward,
exactly, whatever other threads draw meanwhile: while a checkpointed segment's forward
runs, every draw the library makes for it (from the default generator, from a
`generator_override`, or from a Generator passed as `generator=`/`rng=`) goes through
`resolve_generator`, which then returns a `SegmentDraws` view of the generator: each
draw takes the generator's own lock, notes the bit generator's state just before it,
and draws (so the numbers and the generator's final state are exactly those of a plain
draw). The segment keeps the list of (method, state) pairs (`record_draws`); its
recomputation replays them in order (`replay_draws`), each from a private Generator set
to the noted state, so it sees the forward's numbers and leaves every generator as the
forward left it. The record and the replay are ContextVars: they follow the forward's
thread and the recomputation's thread (any engine worker), and are keyed to the
segment, not to a thread. Draws made directly on a numpy Generator object (not through
the library's functions) are not seen. Cost: about 0.5 KB kept per draw (PCG64's state
dict), ~12 us more per recorded draw and ~20 us per replayed one; dropout draws once
per 32,768 elements (0.5 ms of drawing), so a segment keeps ~0.07% of the activations
it does not keep (measured for Linear + gelu + dropout blocks, docs/design.md).

Fork: in a child made by `os.fork()`, `default_generator`'s lock is reset (another
thread may have held it, mid-draw, when the parent forked), in place: the same object,
at the same stream position (`_after_fork_in_child`).
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import threading
from typing import Any, Iterator

import numpy as np

from .generator import Generator

__all__ = ["default_generator", "manual_seed", "initial_seed", "seed", "get_rng_state",
           "set_rng_state", "resolve_generator", "current_generator", "generator_override",
           "check_generator", "SegmentDraws", "record_draws", "replay_draws", "use_generator"]

_INITIAL_SEED = [int(np.random.SeedSequence().generate_state(1, np.uint64)[0])]

#: The process-wide generator (a `pa.Generator`: a `numpy.random.Generator` with torch's
#: methods, its initial seed kept in _INITIAL_SEED); reseeded in place by `manual_seed`, so
#: references to it stay valid.
default_generator: Generator = Generator(seed_box=_INITIAL_SEED)

# A generator that replaces the default one in this context (`generator_override`).
_override: contextvars.ContextVar = contextvars.ContextVar("parallel_autograd_generator",
                                                           default=None)
# The draw lists of the checkpointed segments whose forward runs here (innermost last).
_recording: contextvars.ContextVar = contextvars.ContextVar("parallel_autograd_record",
                                                            default=())
# The `_Replay` of the segment being recomputed here, if any.
_replaying: contextvars.ContextVar = contextvars.ContextVar("parallel_autograd_replay",
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
    this context only; the default generator is neither read nor advanced.

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


def check_generator(generator: Any) -> np.random.Generator | None:
    """`generator` itself if it is None or a `numpy.random.Generator`; TypeError
    otherwise."""
    if generator is None or isinstance(generator, np.random.Generator):
        return generator
    raise TypeError(f"generator must be a numpy.random.Generator or None, "
                    f"got {type(generator).__name__}")


def resolve_generator(generator: np.random.Generator | None) -> Any:
    """What library code given `generator` draws from: `generator` if given, else the
    current generator (`current_generator()`: the default generator, read at call time so
    it reflects the latest `manual_seed`, unless a `generator_override` is active).
    While a checkpointed segment runs here (its forward or its recomputation), that
    generator wrapped in a `SegmentDraws`, which records or replays the segment's draws.
    Raises TypeError for anything that is not a `numpy.random.Generator`.

    Thread safety: the segment state is per context (thread, or an engine worker in a
    copy of the caller's context)."""
    g = check_generator(generator)
    if g is None:
        g = current_generator()
    if _recording.get() or _replaying.get() is not None:
        return SegmentDraws(g)
    return g


#: Generator methods that consume random numbers (everything public but `spawn`,
#: which derives new seeds, and the `bit_generator` property).
_DRAWS = frozenset(n for n in dir(np.random.Generator)
                   if not n.startswith("_") and n not in ("spawn", "bit_generator"))


class SegmentDraws:
    """A view of a Generator inside a checkpointed segment (`resolve_generator` returns
    it there): its drawing methods record each draw in the segment's forward and replay
    it in the segment's recomputation; other attributes are the generator's. A view
    kept past the segment draws from the generator as usual.

    Thread safety: as the generator's own methods (its lock)."""

    __slots__ = ("generator",)

    def __init__(self, generator: np.random.Generator) -> None:
        self.generator = generator

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.generator, name)
        if name not in _DRAWS:
            return attr
        return lambda *args, **kwargs: _draw(self.generator, name, args, kwargs)

    def __repr__(self) -> str:
        return f"SegmentDraws({self.generator!r})"


def _draw(g: np.random.Generator, name: str, args: tuple, kwargs: dict) -> Any:
    """`g.<name>(*args, **kwargs)`, recorded for (or replayed from) the segments here."""
    replay = _replaying.get()
    recording = _recording.get()
    if replay is not None:
        out, entry = replay.draw(g, name, args, kwargs)
    elif recording:
        out, entry = _noted_draw(g, name, args, kwargs)
    else:
        return getattr(g, name)(*args, **kwargs)
    for draws in recording:  # nested segments all replay this draw
        draws.append(entry)
    return out


def _noted_draw(g: np.random.Generator, name: str, args: tuple, kwargs: dict) -> tuple:
    """The draw and (name, bit generator type, its state just before), atomically: under
    the bit generator's lock, which every draw from it by any thread takes."""
    bits = g.bit_generator
    lock = bits.lock
    with lock:
        state = bits.state
        if isinstance(lock, _RLOCK):  # numpy >= 2: the draw re-takes the lock
            out = getattr(g, name)(*args, **kwargs)
        else:  # a plain Lock (older numpy): draw on a private copy, then move g on
            private = _private(type(bits), state)
            out = getattr(private, name)(*args, **kwargs)
            bits.state = private.bit_generator.state
    return out, (name, type(bits), state)


_RLOCK = type(threading.RLock())
_privates = threading.local()  # .gens: bit generator type -> this thread's private Generator


def _private(kind: type, state: dict) -> np.random.Generator:
    """This thread's own Generator of bit generator type `kind`, set to `state` (made
    once per thread and type: seeding a new one costs ~20-70 us). The caller draws from
    it at once: nothing else on this thread uses it in between."""
    gens = getattr(_privates, "gens", None)
    if gens is None:
        gens = _privates.gens = {}
    g = gens.get(kind)
    if g is None:
        g = gens[kind] = np.random.Generator(kind(0))
    g.bit_generator.state = state
    return g


class _Replay:
    """The recorded draws of one segment, handed out in order to its recomputation."""

    __slots__ = ("entries", "next")

    def __init__(self, entries: list) -> None:
        self.entries = entries
        self.next = 0

    def draw(self, g: np.random.Generator, name: str, args: tuple, kwargs: dict) -> tuple:
        i = self.next
        if i >= len(self.entries):
            raise RuntimeError(f"checkpoint: the recomputation draws more random numbers "
                               f"than the forward did (draw {i + 1}: {name}; the forward "
                               f"made {len(self.entries)}): the function must compute the "
                               "same thing when run again")
        entry = self.entries[i]
        was, kind, state = entry
        if was != name or kind is not type(g.bit_generator):
            raise RuntimeError(f"checkpoint: the recomputation's draw {i + 1} is {name} "
                               f"from a {type(g.bit_generator).__name__}, the forward's "
                               f"was {was} from a {kind.__name__}: the function must "
                               "compute the same thing when run again")
        self.next = i + 1
        return getattr(_private(kind, state), name)(*args, **kwargs), entry

    def check_done(self) -> None:
        if self.next != len(self.entries):
            raise RuntimeError(f"checkpoint: the recomputation drew random numbers "
                               f"{self.next} times, the forward {len(self.entries)} times: "
                               "the function must compute the same thing when run again")


@contextlib.contextmanager
def record_draws(draws: list) -> Iterator[list]:
    """Within the block (a checkpointed segment's forward), append each draw made
    through `resolve_generator` here to `draws`, as entries `replay_draws` replays.
    Enclosing records get them too (nested checkpoints).

    Thread safety: a ContextVar (this thread, and threads run in a copy of its context)."""
    token = _recording.set(_recording.get() + (draws,))
    try:
        yield draws
    finally:
        _recording.reset(token)


@contextlib.contextmanager
def replay_draws(draws: list | None) -> Iterator[None]:
    """Within the block (a segment's recomputation), draws made through
    `resolve_generator` here give the recorded ones in order (`draws` from
    `record_draws`; each checked to be the same method on the same kind of bit
    generator), advancing no generator; None: draw anew (`preserve_rng_state=False`).
    Raises RuntimeError, on leaving the block normally, if the block made fewer draws
    than recorded. Records of enclosing segments are suspended inside.

    Thread safety: a ContextVar, as `record_draws`."""
    replay = None if draws is None else _Replay(draws)
    token, rec = _replaying.set(replay), _recording.set(())
    try:
        yield
    finally:
        _recording.reset(rec)
        _replaying.reset(token)
    if replay is not None:
        replay.check_done()


def _check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"manual_seed: seed must be an int, got {type(seed).__name__}")
    seed = int(seed)
    if seed < 0:
        raise ValueError(f"manual_seed: seed must be non-negative, got {seed}")
    return seed


def _after_fork_in_child() -> None:
    """Another thread may have held the default generator's lock (mid-draw) when the
    parent forked: it would stay held forever here, and the child's first draw would
    hang. numpy's Generator and its bit generator share that one lock object, so it is
    reset in place, with the interpreter's own fork-child reset (`_at_fork_reinit`, what
    `threading` and `logging` use for their locks): the generator stays the same object
    (references to `default_generator` stay valid) and the stream goes on where it was.
    Not by copying the bit generator: reading its state takes the lock in newer numpy."""
    default_generator.bit_generator.lock._at_fork_reinit()


if hasattr(os, "register_at_fork"):  # looked up at fork time (the stress tests patch it)
    os.register_at_fork(after_in_child=lambda: _after_fork_in_child())
