"""Fault kind `alloc_work`: the caching allocator's work per request must not grow with
the number of blocks in use (issue 25, item 5: each request scanned every block of its
size class, so a 3,000-step chain keeping its activations ran 3.4-5.3x slower than with
the cache off).

Work is counted, not timed: the lines of Python that run during a batch of requests
(`count_lines`: `sys.settrace`, this thread only, this module's own lines excepted, so
the allocator's and whatever it calls), so the check does not depend on the machine's
load, and it sees any scan written in Python whatever its shape. A private
`CachingAllocator` with small blocks (`min_bytes` 4 KiB, arrays left untouched: a few
MiB of address space) serves the same pattern at a small and at a large number of live
arrays of one size (16-64, then 8-16x more):

- random: one live array dropped at random, then a new one requested (the free block
  is anywhere among the busy ones);
- chain: a growing chain, each step a temporary and a kept array (the issue's case:
  every block but the temporary's busy when the kept one is requested);
- mixed: random, with a stream of requests of other sizes in between.

Failure: the large count's lines per request above twice the small count's plus 16
(a free-list pop is the same few lines at any count; the old scan grew ~4 lines per
live block). Also checked on the way: no request gets the block of a live array, and
`stats()["in_use_bytes"]` covers the live arrays and stays within `reserved_bytes`.

`request_work` is shared with the regression test (tests/test_memory.py).
"""
from __future__ import annotations

import gc
import sys

import numpy as np

from parallel_autograd import memory

from .watchdog import drop_pending_async_exc

KINDS = ("alloc_work",)
PAGE_ELEMS = 512  # float64 elements of one 4 KiB page: the private allocator's smallest block
PATTERNS = ("random", "chain", "mixed")
SLACK = 16  # lines per request allowed beyond twice the small count's


def count_lines(fn) -> int:
    """Lines of Python run in this thread while `fn()` runs, this module's own excepted
    (the allocator's, and whatever it calls); the cyclic GC is off meanwhile, so no
    unrelated finalizer adds lines."""
    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return local

    def tracer(frame, event, arg):
        return None if frame.f_code.co_filename == __file__ else local

    # (a flag left set by PyThreadState_SetAsyncExc(tid, NULL) would make a traced call
    # loop forever on 3.11: see watchdog.drop_pending_async_exc; none is pending here)
    drop_pending_async_exc()
    prev, was_on = sys.gettrace(), gc.isenabled()
    gc.disable()
    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(prev)
        if was_on:
            gc.enable()
    return count


def _addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


class _Live:
    """The arrays a pattern keeps (`arrays`, None where one was dropped) and their
    addresses: a new array starting where a live one starts got a block in use (blocks
    are separate allocations, so sharing one means sharing its start)."""

    def __init__(self, al, elems: int, n: int):
        self.al, self.elems = al, elems
        self.arrays: list = []
        self.addrs: set = set()
        self.problems: list = []
        for _ in range(n):
            self.keep(self.request(elems))

    def request(self, elems: int) -> np.ndarray:
        a = self.al.empty(elems)
        if _addr(a) in self.addrs and not self.problems:
            self.problems.append(f"a request of {a.nbytes} bytes got the block of a live "
                                 "array")
        return a

    def keep(self, a) -> None:
        self.arrays.append(a)
        self.addrs.add(_addr(a))

    def replace(self, i: int, elems: int) -> None:
        self.addrs.discard(_addr(self.arrays[i]))
        self.arrays[i] = None
        a = self.request(elems)
        self.arrays[i] = a
        self.addrs.add(_addr(a))


def _step(pattern: str, live: _Live, rng, n: int):
    """One operation of the pattern (a closure): two requests for chain (a temporary,
    dropped at the end of the step, and an array kept), one for random, two for mixed."""
    elems = live.elems
    if pattern == "chain":
        def step():
            tmp = live.request(elems)
            live.keep(live.request(elems))
            del tmp
        return step

    def step():
        if pattern == "mixed":
            other = live.request(elems * int(rng.integers(2, 5)))
            del other
        live.replace(int(rng.integers(n)), elems)
    return step


def request_work(pattern: str, n: int, rng, elems: int = PAGE_ELEMS,
                 steps: int = 16, al=None) -> tuple:
    """Lines of Python (`count_lines`) per request while `pattern` runs `steps` steps with
    `n` (chain: n + 64) arrays of `elems` float64 live, after as many steps as warm-up; and
    the problems seen (list of str)."""
    # enabled=True: free-threaded builds turn the default allocator off (its sole-view
    # test needs the GIL), but the work per request is the algorithm's, measured here in
    # one thread, so it is checked on every build
    al = al if al is not None else memory.CachingAllocator(min_bytes=PAGE_ELEMS * 8,
                                                           enabled=True)
    live = _Live(al, elems, n)
    step = _step(pattern, live, rng, n)
    for _ in range(min(n, 64)):  # steady state: blocks freed and reused
        step()

    def batch():
        for _ in range(steps):
            step()

    lines = count_lines(batch)
    per_step = 1 if pattern == "random" else 2
    live.problems += _stats_problems(al, live.arrays, elems)
    return lines / (steps * per_step), live.problems


def _stats_problems(al, arrays, elems) -> list:
    st = al.stats()
    busy = sum(1 for a in arrays if a is not None)
    if st["in_use_bytes"] < busy * elems * 8 or st["in_use_bytes"] > st["reserved_bytes"]:
        return [(f"stats: {st['in_use_bytes']} bytes in use with {busy} live arrays of "
                 f"{elems * 8} bytes, {st['reserved_bytes']} reserved")]
    return []


def check(pattern: str, small: int, factor: int, rng) -> tuple:
    """(failure message or None, the lines per request at both counts)."""
    elems = PAGE_ELEMS * int(rng.integers(1, 4))
    few, p1 = request_work(pattern, small, rng, elems)
    many, p2 = request_work(pattern, small * factor, rng, elems)
    where = (f"{pattern} pattern, {elems * 8} byte arrays, {small} and {small * factor} "
             f"live: {few:.1f} and {many:.1f} lines per request")
    if p1 or p2:
        return f"{where}: {(p1 + p2)[0]}", (few, many)
    if many > 2 * few + SLACK:
        return f"{where}: the work per request grows with the blocks in use", (few, many)
    return None, (few, many)


def run_alloc_work(fr):
    if sys.gettrace() is not None:  # a debugger or coverage owns the trace hook
        return None
    rng = fr.rng
    pattern = PATTERNS[int(rng.integers(len(PATTERNS)))]
    small, factor = int(rng.integers(16, 65)), int(rng.choice([8, 16]))
    problem, _ = check(pattern, small, factor, rng)
    if problem:
        fr.fail("alloc_work", problem)
        return False
    return True


RUNNERS = {"alloc_work": run_alloc_work}
