"""A caching allocator for the package's large arrays: memory that is reused, not refaulted.

With glibc's default malloc, a large numpy buffer is a fresh `mmap` (or heap memory
that was trimmed back to the OS), so every training step page-faults its forward
intermediates and gradients in again: zeroed pages, one fault per 4 KiB (or a 2 MiB
huge page zeroed and compacted), and `munmap` with cross-core TLB flushes when freed.
That cost was up to 3x the arithmetic on this project's benchmark. PyTorch pays it less
because its autograd metadata pins the heap; the usual advice is jemalloc or glibc
tuning (`allocator.tune_allocator()`), both process-wide.

This module keeps the package's own large buffers instead, as PyTorch's CUDA caching
allocator does for device memory: ops, rules and the engines ask `empty` (or a
`ufunc` wrapper) for their outputs, and get a view of a cached block that no array uses
any more. Nothing has to be returned explicitly, and an array that escapes to the user
simply keeps its block busy: each request gets a fresh *owner* array over its block
(`np.frombuffer` of the block's memory), and the array handed out is a view of it.
numpy collapses views of views to the owner, so every view of the block holds a
reference to the owner and nothing else does; a weak reference to the owner calls back
when its last view dies, and the callback puts the block on the free list of its size.
A request pops that list: O(1) whatever the number of blocks in use (it used to scan
the blocks of its size class for one nobody referenced: a 3,000-step chain keeping its
activations ran 3.4-5.3x slower than with the cache off).

- Only arrays of at least `min_bytes` (64 KiB) are cached: small ones come from
  malloc's bins, which glibc reuses without faulting, and cost ~0.2 us there.
- Blocks are kept by exact size (rounded up to 4 KiB), so a training loop that
  allocates the same shapes every step reuses the same memory every step; within a
  size, the block freed last is reused first (likely still in the CPU's caches).
- At most `max_bytes` of blocks are kept (default: a quarter of physical memory, at
  most 4 GiB). Over the limit, free blocks of other sizes are released first; if that
  is not enough, the array is a plain `np.empty` (counted in `stats()["uncached"]`).
- `empty_cache()` releases every free block (as `torch.cuda.empty_cache()`); `stats()`
  reports what is held. `PARALLEL_AUTOGRAD_CACHE=0` in the environment, or
  `set_enabled(False)`, turns caching off (every request is a plain `np.empty`).
- Off on free-threaded builds: `is_sole_view` (the engine's test that a gradient's
  memory is its own) reads a block's reference count, which is not exact there when
  another thread reads it.

Thread safety: `empty` and the other methods take the allocator's lock (renewed in a
fork child, `locks.track`). The callback of a dying owner may run on any thread, in
the middle of anything (a garbage collection inside the locked section included), so
it takes no lock: it only drops the owner's entry (`dict.pop`) and appends the block to
a queue (`deque.append`), both atomic; requests move queued blocks onto the free lists
under the lock. A block is queued only once its last view is gone, and leaves a free
list only under the lock: a block handed out is used by no other array.
"""
from __future__ import annotations

import collections
import contextlib
import os
import sys
import threading
import weakref
from typing import Iterator

import numpy as np

from . import intraop, locks

_PAGE = 4096
_GIL = getattr(sys, "_is_gil_enabled", lambda: True)()


def _physical_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 16 << 30


class _Block:
    """One cached block: its memory (`raw`, a memoryview of a uint8 array, so an owner
    made over it has a non-array base and views stop collapsing at the owner), its
    size, and while in use the weak reference to its owner (`lease`), the owner's id
    (`key`) and the callback that queues the block when the owner dies (`back`)."""

    __slots__ = ("back", "key", "lease", "raw", "size")


class CachingAllocator:
    """Reusable blocks for arrays of at least `min_bytes`, at most `max_bytes` held.

    Thread safety: every method takes the allocator's lock; blocks come back through
    lock-free callbacks (see the module docstring).
    """

    def __init__(self, min_bytes: int = 1 << 16, max_bytes: int | None = None,
                 enabled: bool | None = None):
        if max_bytes is None:
            max_bytes = min(_physical_bytes() // 4, 4 << 30)
        for name, v in (("min_bytes", min_bytes), ("max_bytes", max_bytes)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be an int >= 0, got {v!r}")
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        if enabled is None:
            enabled = _GIL and os.environ.get("PARALLEL_AUTOGRAD_CACHE", "1") != "0"
        self.enabled = bool(enabled)
        self._free: dict[int, list] = {}      # size -> free blocks (a stack), never empty
        self._leased: dict[int, _Block] = {}  # id(owner) -> its block, while in use
        self._returned = collections.deque()  # blocks whose owner died, not yet on _free
        self._reserved = self._free_bytes = self._blocks = 0
        self._hits = self._misses = self._uncached = 0
        self._lock = threading.Lock()
        locks.track(self)

    def empty(self, shape, dtype=np.float64) -> np.ndarray:
        """An uninitialised array like `np.empty(shape, dtype)`, from a cached block
        when it is large enough to be cached."""
        dtype = np.dtype(dtype)
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        count = 1
        for d in shape:
            if d < 0:  # numpy's error (two negative sizes would make a positive count)
                return np.empty(shape, dtype)
            count *= d
        n = count * dtype.itemsize
        if (n < self.min_bytes or not self.enabled or dtype.hasobject
                or dtype.subdtype is not None):
            return np.empty(shape, dtype)
        blk = self._block(-(-n // _PAGE) * _PAGE)
        if blk is None:
            return np.empty(shape, dtype)
        try:
            owner = np.frombuffer(blk.raw, dtype, count)
            blk.key = k = id(owner)
            blk.lease = weakref.ref(owner, blk.back)
        except Exception:  # noqa: BLE001 - a shape numpy refuses: numpy's own error below
            return np.empty(shape, dtype)
        finally:  # (an interrupt included) a block without an owner is still free
            if blk.lease is None:
                self._give_back(blk)
        self._leased[k] = blk
        try:
            return owner.reshape(shape)  # a view: only views refer to the owner
        except Exception:  # noqa: BLE001 - numpy's own error below; the owner dies here
            return np.empty(shape, dtype)  # and its block is queued

    def _block(self, size: int):
        """A free block of `size` bytes taken off its list, a new one, or None (over the
        limit); O(1) apart from moving returned blocks to their lists (each once)."""
        with self._lock:
            if self._returned:
                self._drain()
            free = self._free.get(size)
            if free is not None:
                blk = free.pop()
                if not free:
                    del self._free[size]
                self._free_bytes -= size
                self._hits += 1
                return blk
            if self._reserved + size > self.max_bytes:
                self._release(self._reserved + size - self.max_bytes)
                if self._reserved + size > self.max_bytes:
                    self._uncached += 1
                    return None
            blk = self._new_block(size)
            self._reserved += size
            self._blocks += 1
            self._misses += 1
            return blk

    def _new_block(self, size: int) -> _Block:
        blk = _Block()
        blk.raw = memoryview(np.empty(size, np.uint8))
        blk.size = size
        blk.lease = blk.key = None
        leased, returned = self._leased, self._returned

        def back(_ref, blk=blk, pop=leased.pop, queue=returned.append):
            # the owner is dying: its id is dropped before its memory (and id) can be
            # reused, then the block queued (in that order: once queued, the block can
            # be handed out again with a new key)
            pop(blk.key, None)
            queue(blk)

        blk.back = back
        return blk

    def _give_back(self, blk: _Block) -> None:
        with self._lock:
            self._free.setdefault(blk.size, []).append(blk)
            self._free_bytes += blk.size

    def _drain(self) -> None:
        """Queued blocks onto their free lists (most recently freed on top); the caller
        holds the lock."""
        returned, lists = self._returned, self._free
        while returned:
            blk = returned.popleft()
            blk.lease = None
            free = lists.get(blk.size)
            if free is None:
                free = lists[blk.size] = []
            free.append(blk)
            self._free_bytes += blk.size

    def _release(self, need: int) -> int:
        """Drop free blocks (largest sizes first) until `need` bytes are released or
        none is left; the caller holds the lock. Returns the bytes released."""
        freed = 0
        for size in sorted(self._free, reverse=True):
            dropped = self._free.pop(size)
            for blk in dropped:
                blk.back = None  # (the block and its callback refer to each other)
            freed += len(dropped) * size
            self._blocks -= len(dropped)
            if freed >= need:
                break
        self._reserved -= freed
        self._free_bytes -= freed
        return freed

    def empty_cache(self) -> int:
        """Release every free block to the C allocator; returns the bytes released."""
        with self._lock:
            self._drain()
            return self._release(self._reserved + 1)

    def stats(self) -> dict:
        """`reserved_bytes` (all blocks held), `in_use_bytes` (blocks some array uses),
        `blocks`, and the counts of requests served by a cached block (`hits`), by a new
        block (`misses`) and by plain `np.empty` over the limit (`uncached`)."""
        with self._lock:
            self._drain()
            return {"reserved_bytes": self._reserved,
                    "in_use_bytes": self._reserved - self._free_bytes,
                    "blocks": self._blocks,
                    "hits": self._hits, "misses": self._misses, "uncached": self._uncached}

    def is_block(self, base) -> bool:
        """True when `base` (an array's `.base`) is the owner of one of this allocator's
        blocks in use. Exact: an owner's id leaves the table as the owner dies."""
        return id(base) in self._leased


default_allocator = CachingAllocator()


def empty(shape, dtype=np.float64) -> np.ndarray:
    """`np.empty(shape, dtype)` from the default allocator (cached when large)."""
    return default_allocator.empty(shape, dtype)


def empty_like(a: np.ndarray, dtype=None) -> np.ndarray:
    """`np.empty_like(a)` (C order) from the default allocator."""
    return default_allocator.empty(a.shape, a.dtype if dtype is None else dtype)


def empty_cache() -> int:
    """Release every free cached block; returns the bytes released. Thread-safe."""
    return default_allocator.empty_cache()


def stats() -> dict:
    """The default allocator's `CachingAllocator.stats()`. Thread-safe."""
    return default_allocator.stats()


def set_enabled(enabled: bool) -> bool:
    """Turn caching on or off (off: every request is a plain `np.empty`; blocks already
    held stay until `empty_cache()`). Returns the previous setting. Turning it on is
    refused on free-threaded builds (RuntimeError)."""
    if enabled and not _GIL:
        raise RuntimeError("the caching allocator needs the GIL: reference counts read "
                           "from another thread are not exact on free-threaded builds")
    prev, default_allocator.enabled = default_allocator.enabled, bool(enabled)
    return prev


@contextlib.contextmanager
def caching_disabled() -> Iterator[None]:
    """A block in which every request is a plain `np.empty` (restored after): for
    measuring what code allocates, e.g. with tracemalloc, which sees a new block but
    not the reuse of a cached one. Process-wide, not per thread."""
    prev = default_allocator.enabled
    default_allocator.enabled = False
    try:
        yield
    finally:
        default_allocator.enabled = prev


# ---- ufuncs writing into cached memory ------------------------------------------
_out_dtypes: dict = {}  # (ufunc, operand dtypes or Python scalar types) -> output dtype


def _ufunc_out(ufunc, args):
    """A cached output for `ufunc(*args)`, or None (small, several outputs, or numpy
    should decide: then numpy allocates, and raises its own errors)."""
    big = 0
    for a in args:
        if type(a) is np.ndarray and a.size > big:
            big = a.size
    if big * 8 < default_allocator.min_bytes or not default_allocator.enabled:
        return None
    # arrays and numpy scalars by dtype; Python numbers by type (weak, as numpy 2 treats them)
    key = (ufunc,) + tuple(a.dtype if isinstance(a, (np.ndarray, np.generic)) else type(a)
                           for a in args)
    dt = _out_dtypes.get(key)
    if dt is None:
        try:
            dt = ufunc.resolve_dtypes(key[1:] + (None,) * ufunc.nout)
        except (TypeError, ValueError, np.exceptions.DTypePromotionError):
            dt = ()
        dt = _out_dtypes[key] = dt[-1] if len(dt) == ufunc.nin + 1 else False
    if dt is False:
        return None
    shapes = [a.shape for a in args if type(a) is np.ndarray]
    shape = shapes[0]
    for s in shapes:
        if s != shape:
            try:
                shape = np.broadcast_shapes(*shapes)
            except ValueError:
                return None
            break
    return default_allocator.empty(shape, dt)


_MIN_ELEMS = 8192  # below this many elements an output is under 64 KiB (8-byte items)
# one-input ufuncs costly enough per element that splitting a large call over threads pays
_EXPENSIVE = frozenset({"sin", "cos", "tan", "arcsin", "arccos", "arctan", "sinh", "cosh",
                        "tanh", "arcsinh", "arccosh", "arctanh", "exp", "exp2", "expm1",
                        "log", "log2", "log10", "log1p", "cbrt"})


def ufunc(f: np.ufunc, weak: bool = False):
    """`f(x)` (one-input ufuncs) or `f(x, y)` (two inputs), positional only, with the
    output from the default allocator when an operand is large; otherwise exactly the
    numpy call. Thread-safe.

    `weak=True`: numpy scalar operands are made Python scalars first (`item()`), so they
    take the array's dtype as Python numbers do (`float32 * np.float64(2)` stays float32).
    The check is on every call of every op, so it is written for speed: ~0.1 us (one
    closure per arity, names bound in the closure, no keyword arguments)."""
    nd, small, out_for, generic = np.ndarray, _MIN_ELEMS, _ufunc_out, np.generic

    def call1(x, /):
        if type(x) is nd and x.size >= small:
            out = out_for(f, (x,))
            if out is not None:
                return f(x, out=out)
        return f(x)

    def call1_split(x, /):  # call1, the kernel split over threads when that pays
        if type(x) is nd and x.size >= small:
            out = out_for(f, (x,))
            if out is not None:
                return intraop.unary(f, x, out)
        return f(x)

    def call2(x, y, /):
        if (type(x) is nd and x.size >= small) or (type(y) is nd and y.size >= small):
            out = out_for(f, (x, y))
            if out is not None:
                return f(x, y, out=out)
        return f(x, y)

    def call2_weak(x, y, /):
        if type(x) is not nd and isinstance(x, generic):
            x = x.item()
        if type(y) is not nd and isinstance(y, generic):
            y = y.item()
        if (type(x) is nd and x.size >= small) or (type(y) is nd and y.size >= small):
            out = out_for(f, (x, y))
            if out is not None:
                return f(x, y, out=out)
        return f(x, y)

    if f.nin not in (1, 2) or f.nout != 1:
        raise ValueError(f"memory.ufunc wraps ufuncs of 1 or 2 inputs and 1 output, "
                         f"not numpy.{f.__name__}")
    if f.nin == 1:
        c = call1_split if f.__name__ in _EXPENSIVE else call1
    else:
        c = call2_weak if weak else call2
    c.__name__ = c.__qualname__ = f.__name__
    c.__doc__ = f"numpy.{f.__name__}, its output cached when large (memory.ufunc)."
    return c


def _blas_ready(a: np.ndarray) -> bool:
    """Whether numpy can hand `a`'s matrices to BLAS as they are: unit stride along
    one of the last two axes (numpy copies other operands, e.g. broadcast ones with
    zero strides, into a buffer of its own: fresh memory on every call)."""
    if a.ndim < 2:
        return True
    s0, s1 = a.strides[-2:]
    n0, n1 = a.shape[-2:]
    item = a.itemsize
    return ((s1 == item and s0 >= n1 * item) or (s0 == item and s1 >= n0 * item)
            or n0 <= 1 or n1 <= 1)


# numpy 2.3 and later copy an operand BLAS cannot take and call BLAS on the copy; numpy
# 1.24 to 2.2 run their own (non-BLAS) loop on the whole product instead, whose bits differ
# from BLAS's. Measured on 1.26.4, 2.0.2, 2.2.6 (own loop) and 2.3.5, 2.4.6, 2.5.5 (copy).
# Copying where numpy would not would change the result: only numpy that copies is helped.
NUMPY_COPIES_FOR_BLAS = np.lib.NumpyVersion(np.__version__) >= "2.3.0"


def _blas_operand(a: np.ndarray) -> np.ndarray:
    """`a` itself, or a copy BLAS can take in cached memory, laid out as numpy's matmul
    lays out its own copy (each matrix row-major unless its column stride is the smaller
    one): a float32 GEMM's bits depend on the layout, so this keeps numpy's result. `a`
    itself always where numpy does not copy (`NUMPY_COPIES_FOR_BLAS` false)."""
    if not NUMPY_COPIES_FOR_BLAS or _blas_ready(a) or a.size < _MIN_ELEMS:
        return a
    s0, s1 = a.strides[-2:]
    if abs(s1) <= abs(s0):
        c = default_allocator.empty(a.shape, a.dtype)
    else:  # column-major matrices: the last two axes swapped in memory
        c = default_allocator.empty(a.shape[:-2] + a.shape[:-3:-1], a.dtype).swapaxes(-1, -2)
    np.copyto(c, a)  # one pass, cached memory
    return c


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`np.matmul(a, b)` with its output from the default allocator when it is large
    (both operands at least 2-d), and operands BLAS cannot take as they are copied
    into cached memory first where numpy would copy them into fresh memory (numpy 2.3
    and later); numpy's own result otherwise. The same kernel either way: bitwise
    numpy's result. Thread-safe (the allocator is)."""
    if (type(a) is np.ndarray and type(b) is np.ndarray and a.ndim >= 2 and b.ndim >= 2
            and default_allocator.enabled):
        m, k = a.shape[-2:]
        n = b.shape[-1]
        if b.shape[-2] == k:
            lead = a.shape[:-2] if a.shape[:-2] == b.shape[:-2] else None
            if lead is None:
                try:
                    lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
                except ValueError:
                    return np.matmul(a, b)
            dt = np.result_type(a, b)
            # m or n of 1: numpy takes gemv or its own loop on the operands as they are
            if dt.kind in "fc" and a.dtype == b.dtype and m > 1 and n > 1:
                out = default_allocator.empty(lead + (m, n), dt)
                return np.matmul(_blas_operand(a), _blas_operand(b), out=out)
    return np.matmul(a, b)


def is_block(base) -> bool:
    """True when `base` (an array's `.base`) owns a block of the default allocator: the
    array's memory is the package's own, as if it owned its data."""
    return id(base) in default_allocator._leased


def is_sole_view(a: np.ndarray) -> bool:
    """True when `a` views a block of the default allocator and no other array views
    that block (its memory is `a`'s alone, as if `a` owned it)."""
    base = a.base
    return id(base) in default_allocator._leased and sys.getrefcount(base) <= _SOLE_VIEW_REFS


def _calibrate_view() -> int:
    # an owner's references when one array views it, counted as is_sole_view counts
    owner = np.frombuffer(memoryview(np.empty(8, np.uint8)), np.uint8)
    a = owner.reshape(8)
    del owner
    base = a.base
    return sys.getrefcount(base)


_SOLE_VIEW_REFS = _calibrate_view()


class _Pooled:
    """`pooled.<name>`: numpy's ufunc `<name>` as a `ufunc` wrapper (made once, then a
    plain attribute). `pooled.matmul` is `matmul` above."""

    def __init__(self):
        self.matmul = matmul

    def __getattr__(self, name: str):
        f = getattr(np, name)
        if not isinstance(f, np.ufunc):
            raise AttributeError(f"numpy.{name} is not a ufunc")
        w = ufunc(f)
        setattr(self, name, w)
        return w


pooled = _Pooled()
