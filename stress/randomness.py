"""Fault kinds for random draws shared between threads (issue 25).

- checkpoint_rng: a thread draws from the default generator nonstop while checkpointed
               segments (Linear, sigmoid, dropout from the default generator, `pa.randn`
               noise; nested now and then, `use_reentrant` now and then) run forward and
               backward on the unit's engine or the sequential one -> the output and every
               gradient bitwise those of the uncheckpointed model run with the masks and
               noise the checkpointed forward drew (the recomputation replays the
               segment's own draws, whatever the other thread drew meanwhile). Also, with
               no other thread drawing: checkpointed and plain runs from one seed agree
               bitwise, the default generator's final state included.

(fork_busy's "drawing" variant, a thread drawing random numbers while the process
forks, lives with fork_busy in `stress.hazards`.)

The runner takes a `faults.FaultRun` and returns True (surfaced correctly) or False (a
failure was reported). Only public API is used, so the kind still runs, and finds the
bug, with the library's fix reverted.
"""
from __future__ import annotations

import sys
import threading

import numpy as np

import parallel_autograd as pa
from parallel_autograd.nn import functional as F

from .checks import diff_all

KINDS = ("checkpoint_rng",)
_ROUNDS = 4            # busy rounds per unit: a shifted mask needs a draw in a window
_SWITCH = 1e-5         # sys.setswitchinterval while the other thread draws


class _Masks:
    """Stands in for a Generator in `F.dropout(rng=...)`: hands out the recorded keep
    mask as draws (1.0 kept, 0.0 dropped), so the plain reference uses exactly the masks
    the checkpointed forward drew, through dropout's own code."""

    def __init__(self, keep: np.ndarray) -> None:
        self.flat = np.where(keep.reshape(-1), 1.0, 0.0)
        self.at = 0

    def random(self, n: int) -> np.ndarray:
        out = self.flat[self.at:self.at + n]
        self.at += n
        return out


class _Segment:
    """Layers of `sigmoid(linear(h, w, b))`, dropout and (maybe) noise; an inner segment
    run first (checkpointed inside this one). Its first call records the masks and noise
    it drew; `reference` replays them without drawing. With `use_reentrant=True` the
    parameters are passed as arguments (a captured one would be an error there)."""

    def __init__(self, layers, p, noise, inner=None, reentrant=False) -> None:
        self.layers, self.p, self.noise = layers, p, noise
        self.inner, self.reentrant = inner, reentrant
        self.calls, self.masks, self.noises = 0, [], []

    def params(self) -> list:
        """Its parameters, the inner segment's first."""
        own = [q for lin in self.layers for q in (lin.weight, lin.bias)]
        return (self.inner.params() if self.inner is not None else []) + own

    def args(self) -> tuple:
        return tuple(self.params()) if self.reentrant else ()

    def __call__(self, h, *given):
        self.calls += 1
        first = self.calls == 1
        ws = list(given) if given else self.params()
        if self.inner is not None:
            k = len(self.inner.params())
            inner_ws, ws = ws[:k], ws[k:]
            h = pa.checkpoint(self.inner, h, *(inner_ws if self.reentrant else ()),
                              use_reentrant=self.reentrant)
        for i in range(len(self.layers)):
            h = F.dropout(pa.sigmoid(F.linear(h, ws[2 * i], ws[2 * i + 1])), self.p)
            if first:  # sigmoid > 0: an element was kept iff it is nonzero
                self.masks.append(h.numpy() != 0)
            if self.noise:
                n = pa.randn(*h.shape)
                if first:
                    self.noises.append(n.numpy().copy())
                h = h + n * 0.25
        return h

    def plain(self, h):
        """The same computation, not checkpointed, drawing as it goes."""
        if self.inner is not None:
            h = self.inner.plain(h)
        for lin in self.layers:
            h = F.dropout(pa.sigmoid(F.linear(h, lin.weight, lin.bias)), self.p)
            if self.noise:
                h = h + pa.randn(*h.shape) * 0.25
        return h

    def reference(self, h):
        """Not checkpointed, with the masks and noise of the first call."""
        if self.inner is not None:
            h = self.inner.reference(h)
        for i, lin in enumerate(self.layers):
            h = F.dropout(pa.sigmoid(F.linear(h, lin.weight, lin.bias)), self.p,
                          rng=_Masks(self.masks[i]))
            if self.noise:
                h = h + pa.tensor(self.noises[i]) * 0.25
        return h


class _Model:
    """Parameters (from the unit's seed, not the default generator) and the recipe of
    its segments; `segments()` makes fresh ones (each records its own first call)."""

    def __init__(self, rng) -> None:
        self.width = int(rng.choice([4, 16, 64]))
        self.batch = int(rng.integers(2, 9))
        self.p = float(rng.choice([0.1, 0.3, 0.5, 0.7]))
        self.plan = [(int(rng.integers(1, 3)), bool(rng.random() < 0.5),
                      bool(rng.random() < 0.3)) for _ in range(int(rng.integers(1, 4)))]
        self.reentrant = bool(rng.random() < 0.3)
        init = np.random.default_rng(int(rng.integers(1 << 31)))
        self.layers = [[pa.nn.Linear(self.width, self.width, generator=init)
                        for _ in range(n * (2 if nested else 1))]
                       for n, _, nested in self.plan]
        self.x = rng.standard_normal((self.batch, self.width))

    def segments(self) -> list:
        out = []
        for (n, noise, nested), layers in zip(self.plan, self.layers):
            inner = (_Segment(layers[n:], self.p, noise, None, self.reentrant) if nested
                     else None)
            out.append(_Segment(layers[:n], self.p, noise, inner, self.reentrant))
        return out

    def params(self) -> list:
        return [q for ls in self.layers for lin in ls for q in lin.parameters()]

    def describe(self) -> str:
        return (f"{len(self.plan)} segments {self.plan} (layers, noise, nested), width "
                f"{self.width}, batch {self.batch}, p={self.p}, "
                f"use_reentrant={self.reentrant}")


def _run(model, how: str, backward, segs=None):
    """Forward (`how`: "checkpoint", "plain" or "reference") and backward; the output
    and the gradients of the input and every parameter."""
    for q in model.params():
        q.grad = None
    x = pa.tensor(model.x, requires_grad=True)
    h = x
    for seg in segs:
        if how == "checkpoint":
            h = pa.checkpoint(seg, h, *seg.args(), use_reentrant=model.reentrant)
        else:
            h = seg.plain(h) if how == "plain" else seg.reference(h)
    loss = (h * h).sum()
    backward(loss)
    return [h.numpy()] + [x.grad] + [q.grad for q in model.params()]


def _drawer(stop: threading.Event, errors: list):
    def loop():
        try:
            while not stop.is_set():
                pa.randn(64)
        except Exception as e:  # noqa: BLE001 - reported by the runner
            errors.append(e)
    t = threading.Thread(target=loop, daemon=True, name="stress-drawer")
    t.start()
    return t


def _quiet(fr, model, backward, seed) -> bool:
    """No other thread: checkpointed == plain, bitwise, generator state included."""
    results = []
    for how in ("plain", "checkpoint"):
        pa.manual_seed(seed)
        results.append((_run(model, how, backward, model.segments()),
                        pa.random.get_rng_state()))
    problems = diff_all(results[0][0], results[1][0], _name)
    if results[0][1] != results[1][1]:
        problems.append("the default generator's state after backward differs")
    if problems:
        fr.fail("mismatch", f"checkpoint_rng, no other thread ({model.describe()}): "
                f"checkpointed != plain: {problems[0]}", {"problems": problems[:20]})
        return False
    return True


def _busy(fr, model, backward, seed) -> bool:
    """Another thread draws nonstop: the gradients are those of the forward's draws."""
    stop, errors = threading.Event(), []
    before = sys.getswitchinterval()
    sys.setswitchinterval(_SWITCH)
    t = _drawer(stop, errors)
    try:
        rounds = []
        for _ in range(_ROUNDS):
            segs = model.segments()
            rounds.append((_run(model, "checkpoint", backward, segs), segs))
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(before)
    if errors:
        fr.fail("error", f"checkpoint_rng: the drawing thread raised {errors[0]!r}")
        return False
    for r, (got, segs) in enumerate(rounds):
        want = _run(model, "reference", backward, segs)
        problems = diff_all(want, got, _name)
        if problems:
            fr.fail("mismatch", f"checkpoint_rng, another thread drawing, round {r + 1}/"
                    f"{_ROUNDS} ({model.describe()}): the checkpointed backward is not that "
                    f"of the forward's masks: {problems[0]}", {"problems": problems[:20]})
            return False
    return True


def _name(j: int) -> str:
    return "output" if j == 0 else "input gradient" if j == 1 else f"parameter {j - 2} gradient"


def run_checkpoint_rng(fr):
    model = _Model(fr.rng)
    on_engine = bool(fr.rng.random() < 0.6)
    backward = (lambda loss: fr.engine.backward(loss)) if on_engine else pa.backward
    seed = int(fr.rng.integers(1 << 31))
    fr.h.report.notes_counter("checkpoint_rng: " + ("engine" if on_engine else "sequential")
                              + (", nested" if any(n for *_, n in model.plan) else ""))
    state = pa.random.get_rng_state()
    try:
        return _quiet(fr, model, backward, seed) and _busy(fr, model, backward, seed)
    finally:
        pa.random.set_rng_state(state)


RUNNERS = {"checkpoint_rng": run_checkpoint_rng}
