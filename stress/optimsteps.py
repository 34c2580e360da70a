"""Fault kind for the optimizers' threaded steps (issue 25, item 4: Ctrl+C in a step).

- optim_interrupt: SIGINT lands while `Optimizer.step` writes, on 1-4 (simulated) cores,
               from inside a random gradient read of the update (on the caller's share or
               a helper thread's) or from a timer aimed at a random moment of the step ->
               the step is all or nothing (every parameter, version counter and state equals
               an uninterrupted twin's, or every one is as before), nothing is written
               after step() raised (values taken at the KeyboardInterrupt equal values taken
               20 ms later; no step thread left), and the optimizer then steps as the twin.

The optimizer and its hyperparameters, the parameters (3-8, 20k-200k elements, float64 or
float32) and where the interrupt lands are drawn from the unit's seed. The runner takes a
`faults.FaultRun` and returns True (held), False (a failure was reported) or None (not on
the main thread with Python's SIGINT handler: nothing to do).
"""
from __future__ import annotations

import copy
import signal
import threading
import time

import numpy as np

import parallel_autograd as pa
from parallel_autograd import optim
from parallel_autograd.optim import optimizer as optimizer_module

from .checks import INTERRUPT_TAG, Interrupter, diff_all

KINDS = ("optim_interrupt",)
_CONFIGS = (("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
            ("SGD", dict(lr=0.05)),
            ("Adam", dict(lr=1e-3, amsgrad=True, weight_decay=0.1)),
            ("Adam", dict(lr=1e-3, maximize=True)),
            ("AdamW", dict(lr=1e-3)),
            ("RMSprop", dict(lr=1e-3, centered=True, momentum=0.5)),
            ("Adagrad", dict(lr=0.1, lr_decay=0.01)))


class _TripArray(np.ndarray):
    """A `.grad` that counts the ufunc calls reading it (any thread) and calls `trip()`
    at the `at`-th: the optimizer's blocked update reads the gradient in every block, so
    the interrupt lands mid-update, on whichever thread runs that parameter."""

    trip = None  # class-level while armed: (lock, [count], at, callable)

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        armed = _TripArray.trip
        if armed is not None:
            lock, count, at, fire = armed
            with lock:
                count[0] += 1
                now = count[0] == at
            if now:
                fire()
        args = tuple(x.view(np.ndarray) if isinstance(x, _TripArray) else x for x in inputs)
        if out is not None:
            kwargs["out"] = tuple(x.view(np.ndarray) if isinstance(x, _TripArray) else x
                                  for x in out)
        result = getattr(ufunc, method)(*args, **kwargs)
        if out is not None:
            return out[0] if len(out) == 1 else out
        return result


class _cores:
    """`optimizer._cores` returns `n` inside (the step deals its shares to n threads)."""

    def __init__(self, n: int):
        self.n = n

    def __enter__(self):
        self.saved = optimizer_module._cores
        optimizer_module._cores = lambda: self.n
        return self

    def __exit__(self, *exc):
        optimizer_module._cores = self.saved
        return False


def _build(rng):
    """An optimizer (drawn) on 3-8 parameters, stepped twice, with its next gradients
    set; and an identical twin."""
    name, kw = _CONFIGS[int(rng.integers(len(_CONFIGS)))]
    dtype = np.float32 if rng.random() < 0.3 else np.float64
    sizes = [int(n) for n in rng.integers(20_000, 200_000, size=int(rng.integers(3, 9)))]
    params = [pa.tensor(rng.standard_normal(n).astype(dtype), requires_grad=True)
              for n in sizes]
    opt = getattr(optim, name)(params, **kw)
    opt.parallel_min_elements = 0
    for _ in range(2):
        for p in params:
            p.grad = rng.standard_normal(p.shape).astype(dtype)
        opt.step()
    for p in params:
        p.grad = rng.standard_normal(p.shape).astype(dtype).view(_TripArray)
    twin_params, twin = copy.deepcopy((params, opt))
    for p, q in zip(params, twin_params):
        q.grad = p.grad.numpy().copy()  # a _TripArray too: the twin's step counts the reads
    return f"{name}({len(sizes)} x {dtype.__name__})", params, opt, twin_params, twin


def _state(params, opt):
    """Every parameter's array, version and state, in parameter order (copies)."""
    out = []
    for p in params:
        s = opt.state.get(p, {})
        out.append((p.numpy().copy(), p._vc[0],
                    {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in s.items()}))
    return out


def _differences(want, got, versions=True) -> list:
    """Problems where the snapshot `got` is not bitwise `want` (both from `_state`); with
    `versions`, the version counters must be equal too (they are epochs: compare those of
    one set of parameters only)."""
    problems = diff_all([w[0] for w in want], [g[0] for g in got], "parameter")
    for j, (w, g) in enumerate(zip(want, got)):
        if versions and w[1] != g[1]:
            problems.append(f"parameter {j}: version {g[1]}, expected {w[1]}")
        if set(w[2]) != set(g[2]):
            problems.append(f"parameter {j}: state keys {sorted(g[2])}, expected "
                            f"{sorted(w[2])}")
            continue
        for k in w[2]:
            a, b = w[2][k], g[2][k]
            if isinstance(a, np.ndarray):
                problems += diff_all([a], [b], f"parameter {j} state {k!r}")
            elif a != b:
                problems.append(f"parameter {j} state {k!r}: {b!r}, expected {a!r}")
    return problems


def _timed_step(opt):
    """Step `opt` (the twin; its gradients are `_TripArray`s) counting its gradient reads.
    Returns (reads, seconds)."""
    count = [0]
    _TripArray.trip = (threading.Lock(), count, 0, lambda: None)
    try:
        t0 = time.perf_counter()
        opt.step()
        return count[0], time.perf_counter() - t0
    finally:
        _TripArray.trip = None


def _interrupted_step(fr, params, opt, reads, length):
    """Step `opt` with a SIGINT armed: at a random one of its `reads` gradient reads, or
    by a timer at a random moment of a step `length` seconds long. Returns (raised,
    values at the raise, values 20 ms later, step threads left then, how it was sent)."""
    # raised stays None if the interrupt lands before the step began (swallowed by the
    # Interrupter): then nothing may have changed
    raised, at_raise, later, left = None, None, None, []
    with Interrupter(f"{INTERRUPT_TAG} (optimizer step)") as irq:
        if fr.rng.random() < 0.6:
            at = int(fr.rng.integers(1, reads + 1))
            how = f"at gradient read {at} of {reads}"
            _TripArray.trip = (threading.Lock(), [0], at, irq.send)
        else:
            delay = length * fr.rng.uniform(0.0, 1.1)
            how = f"timer at {delay * 1e3:.2f} ms of a ~{length * 1e3:.2f} ms step"
            irq.after(delay)
        try:
            opt.step()
            raised = False
        except KeyboardInterrupt as e:
            if INTERRUPT_TAG not in str(e):
                raise
            raised = True
            at_raise = _state(params, opt)
            time.sleep(0.02)
            later = _state(params, opt)
            left = [t.name for t in threading.enumerate() if t.name == "pa-optim"]
        finally:
            _TripArray.trip = None
    return raised, at_raise, later, left, how + ("" if irq.fired.is_set() else ", not sent")


def run_optim_interrupt(fr):
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        return None
    cores = int(fr.rng.integers(1, 5))
    what, params, opt, twin_params, twin = _build(fr.rng)
    with _cores(cores):
        before = _state(params, opt)
        reads, length = _timed_step(twin)
        after = _state(twin_params, twin)
        raised, at_raise, later, left, how = _interrupted_step(fr, params, opt, reads, length)
        where = f"{what} on {cores} core(s), SIGINT {how}"
        outcome = {True: "raised", False: "returned", None: "landed before the step"}[raised]
        fr.h.report.notes_counter(f"optim_interrupt: {outcome}"
                                  + (" (threads)" if cores > 1 else " (one thread)"))
        if raised:
            problems = _differences(at_raise, later)
            if problems or left:
                fr.fail("mismatch", f"{where}: written after step() raised KeyboardInterrupt"
                        f" ({problems[0] if problems else 'threads left: ' + str(left)})",
                        {"problems": problems[:20]})
                return False
        now = _state(params, opt)
        done = _differences(after, now, versions=False) + [
            f"parameter {j}: version not bumped" for j, (n, b) in enumerate(zip(now, before))
            if n[1] == b[1]]
        untouched = _differences(before, now)
        if done and (untouched or raised is False):  # neither complete nor nothing
            changed = sum(1 for j in range(len(params)) if any(
                d.startswith(f"parameter {j}") for d in untouched))
            fr.fail("mismatch", f"{where}: {'an interrupted' if raised else 'a'} step left "
                    f"{changed} of {len(params)} parameters changed, not as the "
                    f"uninterrupted twin's: {done[0]}", {"problems": done[:20]})
            return False
        return _keeps_stepping(fr, where, params, opt, twin_params, twin, not done)


def _keeps_stepping(fr, where, params, opt, twin_params, twin, complete) -> bool:
    """After the interrupt: (the step again if it did nothing, then) one more step on
    both, bitwise the twin's."""
    for p in params:
        p.grad = p.grad.numpy().view(np.ndarray)
    if not complete:
        opt.step()
    rng = np.random.default_rng([fr.seed, 11])
    for p, q in zip(params, twin_params):
        p.grad = rng.standard_normal(p.shape).astype(p.dtype)
        q.grad = p.grad.numpy().copy()
    opt.step()
    twin.step()
    problems = _differences(_state(twin_params, twin), _state(params, opt), versions=False)
    if problems:
        fr.fail("mismatch", f"{where}: the step after the interrupt differs from the twin's: "
                f"{problems[0]}", {"problems": problems[:20]})
        return False
    return True


RUNNERS = {"optim_interrupt": run_optim_interrupt}
