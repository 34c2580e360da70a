"""numpy's floating-point error modes (`np.errstate`) for work split over threads.

numpy keeps its error modes per thread (a context variable): a thread that a kernel hands
part of its work to starts with numpy's defaults, not the caller's `np.errstate`. So under
`np.errstate(all="raise")` a division by zero in a helper thread's range was only warned
about there (or not at all, under the caller's "ignore"), and the caller got `-inf` with
no `FloatingPointError`.

`Deferred` carries the caller's modes to the threads and the errors back: it is made on
the calling thread (capturing `np.geterr()` and `np.geterrcall()`); each range of the
split work runs inside its `recording()`, where every category the caller does not ignore
is logged instead of acted on; once all ranges are done the caller calls `replay()`, which
handles what was logged as numpy would have handled it on the caller: "raise" raises
`FloatingPointError` with numpy's message ("divide by zero encountered in log"), "warn"
issues one `RuntimeWarning` per kind of error from the caller, "call" calls the
`np.seterrcall` function with the error's name and flag bits, "log" writes numpy's line to
the `np.seterrcall` object, "print" writes it to stderr. A category the caller ignores
stays ignored in the threads and costs nothing.

Two orders: `replay(merged=True)` treats everything logged as one ufunc call split in
ranges (`intraop`): per ufunc, its error kinds in numpy's order (divide, overflow,
underflow, invalid) with the flag bits of the whole call, exactly what numpy reports for
the unsplit call. `merged=False` (an optimizer step: many ufunc calls) reports each
distinct (ufunc, kind) once, in the order the work would have met them on one thread
(ranges by their tag, then as logged), so the first error raised is the one a
single-threaded run raises first.

Thread safety: one `Deferred` serves all the threads of one split call (each thread its
own `recording()`); `replay` runs on the caller after they all finished.
"""
from __future__ import annotations

import sys
import warnings
from typing import Any

import numpy as np

# (np.geterr key, numpy's name for the error, numpy's NPY_FPE_* flag bit), numpy's order
CATEGORIES = (("divide", "divide by zero", 1), ("over", "overflow", 2),
              ("under", "underflow", 4), ("invalid", "invalid value", 8))
_BIT = {text: bit for _, text, bit in CATEGORIES}
_PREFIX, _INFIX = "Warning: ", " encountered in "


class _Log:
    """The `np.errstate(call=...)` object of one thread's recording: numpy's "log" mode
    writes "Warning: <kind> encountered in <ufunc>\\n" for each error of each ufunc
    call; kept as (tag, ufunc, bit) in the shared list."""

    __slots__ = ("events", "tag")

    def __init__(self, events: list, tag: Any) -> None:
        self.events = events
        self.tag = tag

    def write(self, message: str) -> None:
        kind, _, name = message.removeprefix(_PREFIX).rstrip("\n").partition(_INFIX)
        self.events.append((self.tag, name, _BIT.get(kind, 0)))  # list.append: atomic


class Deferred:
    """The calling thread's floating-point error modes, and the errors split work
    reported under them on any thread (see the module docstring).

    Make it on the calling thread, run each part of the work inside `recording(tag)`
    (on whichever thread runs it), then call `replay()` on the caller."""

    __slots__ = ("modes", "call", "events", "_record")

    def __init__(self) -> None:
        self.modes = np.geterr()
        self.call = np.geterrcall()
        self.events: list = []
        self._record = {k: ("ignore" if m == "ignore" else "log") for k, m in self.modes.items()}

    def recording(self, tag: Any = 0) -> _Recording:
        """Context manager for one part of the work: numpy errors in categories the
        caller does not ignore are logged (tagged `tag`) rather than acted on. Its
        `log.tag` may be changed inside to tag what follows differently."""
        return _Recording(self, tag)

    def replay(self, merged: bool = True, stacklevel: int = 1) -> None:
        """Handle the logged errors as numpy would on the caller (raise, warn, call,
        log, print, per the captured modes); nothing if none was logged. Warnings are
        attributed `stacklevel` frames up from the caller of `replay` (1: that caller),
        as `warnings.warn` counts."""
        if not self.events:
            return
        events = sorted(self.events, key=lambda e: e[0])  # stable: per tag as logged
        flags: dict[str, int] = {}
        for _, name, bit in events:
            flags[name] = flags.get(name, 0) | bit
        if merged:
            order = [(name, text) for name, bits in flags.items()
                     for _, text, bit in CATEGORIES if bits & bit]
        else:
            bit_text = {bit: text for _, text, bit in CATEGORIES}
            order = list(dict.fromkeys((name, bit_text[bit]) for _, name, bit in events
                                       if bit in bit_text))
        key = {text: k for k, text, _ in CATEGORIES}
        for name, text in order:
            _handle(self.modes[key[text]], self.call, text, name, flags[name],
                    stacklevel + 2)


class _Recording:
    """`Deferred.recording`'s context manager (`log`: the `_Log` numpy writes to)."""

    __slots__ = ("log", "_state")

    def __init__(self, deferred: Deferred, tag: Any) -> None:
        self.log = _Log(deferred.events, tag)
        self._state = np.errstate(call=self.log, **deferred._record)

    def __enter__(self) -> _Recording:
        self._state.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._state.__exit__(*exc)


def _handle(mode: str, call: Any, text: str, name: str, bits: int, stacklevel: int) -> None:
    """numpy's handling of one error kind of one ufunc call (its `_error_handler`)."""
    message = f"{text}{_INFIX}{name}"
    if mode == "raise":
        raise FloatingPointError(message)
    if mode == "warn":
        warnings.warn(message, RuntimeWarning, stacklevel=stacklevel)
    elif mode == "call":
        if call is None:
            raise NameError(f"python callback specified for {text} (in  {name}) but no "
                            f"function found.")
        call(text, bits)
    elif mode == "log":
        if call is None:
            raise NameError(f"log specified for {text} (in {name}) but no object with "
                            f"write method found.")
        call.write(f"{_PREFIX}{message}\n")
    elif mode == "print":
        sys.stderr.write(f"{_PREFIX}{message}\n")
