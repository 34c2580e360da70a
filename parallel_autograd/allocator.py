"""Opt-in tuning of glibc's malloc for large, short-lived numpy buffers.

With glibc's defaults every buffer above the (dynamic) mmap threshold is a fresh
`mmap`, so each backward pass page-faults in zeroed memory (about 100 MiB and
26,000 faults for the wide-elementwise benchmark), and freeing it again costs
`munmap` plus cross-core TLB flushes once a second thread is alive. Raising the
mmap threshold keeps such buffers in the heap, and raising the trim threshold
keeps freed heap memory mapped for reuse: the faults vanish. The same effect as
running with `MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=8589934592`.

The price is memory that is not returned to the OS after a peak, so this is
never applied silently: call `tune_allocator()` yourself, early in the process.

    import parallel_autograd.allocator as alloc
    alloc.tune_allocator()   # True on glibc, False elsewhere (nothing changed)
"""
from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
_INT_MAX = 2**31 - 1  # mallopt takes an int


def _glibc():
    """The C library if it is glibc, else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        version = libc.gnu_get_libc_version  # glibc only (musl has no such symbol)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    version.restype = ctypes.c_char_p
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return libc


def glibc_version() -> str | None:
    """glibc's version string, or None when the C library is not glibc."""
    libc = _glibc()
    return None if libc is None else libc.gnu_get_libc_version().decode()


def tune_allocator(mmap_threshold: int = 33554432, trim_threshold: int = 8589934592) -> bool:
    """Raise glibc's mmap and trim thresholds with `mallopt`; True if both took effect.

    Returns False, changing nothing, when the C library is not glibc. Values above
    what `mallopt` accepts are clamped: the trim threshold to 2**31 - 1 (mallopt
    takes an int; the 8 GiB default means "never trim" either way), and glibc itself
    refuses mmap thresholds above 32 MiB on 64-bit systems (then False is returned).
    Setting either threshold also turns off glibc's dynamic threshold adjustment.
    Affects allocations made after the call, process-wide, for every thread.
    """
    for name, v in (("mmap_threshold", mmap_threshold), ("trim_threshold", trim_threshold)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int, got {v!r}")
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
    libc = _glibc()
    if libc is None:
        return False
    ok = libc.mallopt(M_MMAP_THRESHOLD, min(mmap_threshold, _INT_MAX)) == 1
    ok = libc.mallopt(M_TRIM_THRESHOLD, min(trim_threshold, _INT_MAX)) == 1 and ok
    return ok
