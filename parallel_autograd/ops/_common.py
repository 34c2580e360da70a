"""What every op family shares: unwrapping, the leanness helpers of the kernels, dimension
arguments. One copy each (the families import them from here, never from each other).

Kernels and forwards allocate only the array they return (from the caching allocator when
large, `P` / `empty`) and reuse it for their temporaries with `out=`; `buf` makes a ufunc's
0-d result (a numpy scalar) an array that can be written into; `fused` evaluates a kernel
that needs a second temporary chunk by chunk. Each kernel's comment counts its passes over
memory.

Thread safety: pure functions.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..memory import empty
from ..memory import pooled as P
from ..tensor import Tensor

__all__ = ["P", "empty", "raw", "array", "const", "buf", "fused", "as_float", "default_float",
           "weak", "quiet", "dim", "dims", "reduction_dims", "kept_shape", "as_dtype",
           "accumulate_dtype", "BLOCK", "zeros", "copy", "reshaped", "row_blocks",
           "ROW_BLOCK_BYTES"]


def raw(x):
    """A Tensor's array; anything else as it is."""
    return x._data if isinstance(x, Tensor) else x


def array(x) -> np.ndarray:
    """A Tensor's array, or `x` as an array."""
    return x._data if isinstance(x, Tensor) else np.asarray(x)


def const(x) -> Tensor:
    """`x` if a Tensor, else a constant Tensor of it."""
    return x if isinstance(x, Tensor) else Tensor._wrap(np.asarray(x))


def buf(a):
    """`a` as an ndarray that can be written in place (ufuncs give numpy scalars for 0-d)."""
    return a if type(a) is np.ndarray else np.asarray(a)


def weak(a):
    """A numpy scalar as a Python number: weakly typed, as PyTorch treats Python scalars
    (`float32_tensor * np.float64(2)` stays float32)."""
    return a.item() if isinstance(a, np.generic) else a


def default_float() -> np.dtype:
    """The default dtype (`pa.get_default_dtype()`) as a numpy dtype: what integer and
    boolean inputs are computed in by ops that give floats."""
    return D.to_numpy(D.get_default_dtype())


def as_float(x) -> np.ndarray:
    """`x` as an array of a floating dtype (integers and booleans in the default dtype, as
    PyTorch's integer-to-float ops)."""
    x = np.asarray(x)
    return x if x.dtype.kind in "fc" else x.astype(default_float())


BLOCK = 32768  # elements per chunk in `fused`: 256 KiB of float64, cache resident


def fused(kernel, like, operands, scratch=(), dtype=None):
    """`kernel(out, *operands, *scratch)` evaluated chunk by chunk; returns `out`, a new
    array shaped like `like` (of `dtype`, default `like`'s), the only full-size allocation.

    For kernels that need a second temporary: chunks of `BLOCK` elements (numpy's
    buffered iterator; broadcast operands are buffered per chunk) get chunk-sized
    `scratch` arrays of the given dtypes. Operands that are not ndarrays (Python
    scalars, weakly typed) are passed through unchanged. Small arrays: one call.
    """
    out = empty(np.shape(like), like.dtype if dtype is None else dtype)
    if out.size <= BLOCK:
        kernel(out, *operands, *(empty(out.shape, d) for d in scratch))
        return out
    where = [i for i, a in enumerate(operands) if type(a) is np.ndarray]
    it = np.nditer([out] + [operands[i] for i in where],
                   flags=["external_loop", "buffered", "zerosize_ok"],
                   op_flags=[["writeonly"]] + [["readonly"]] * len(where), buffersize=BLOCK)
    bufs = [empty(BLOCK, d) for d in scratch]
    args = list(operands)
    with it:
        for chunk in it:
            for i, c in zip(where, chunk[1:]):
                args[i] = c
            n = chunk[0].size
            kernel(chunk[0], *args, *(b[:n] for b in bufs))
    return out


def quiet(fn):
    """`fn` with numpy's divide/invalid/overflow warnings off: outside an op's domain the
    result is inf or NaN, as in PyTorch, which does not warn either."""
    def quieted(*args, **kwargs):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return fn(*args, **kwargs)
    quieted.__name__ = quieted.__qualname__ = getattr(fn, "__name__", "quiet")
    quieted.__doc__ = getattr(fn, "__doc__", None)
    return quieted


def dim(d, ndim: int, op: str) -> int:
    """A dimension argument normalised to [0, ndim) (a 0-d tensor has the one dimension
    0 / -1, as in PyTorch); IndexError naming the op and the valid range otherwise."""
    if type(d) is int and -(ndim or 1) <= d < (ndim or 1):  # the common case, first
        return d % (ndim or 1)
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
        raise TypeError(f"{op}: dim must be an int, got {d!r}")
    n = max(ndim, 1)
    if not -n <= d < n:
        raise IndexError(f"{op}: Dimension out of range (expected to be in range of "
                         f"[{-n}, {n - 1}], but got {d})")
    return int(d) % n


def dims(ds, ndim: int, op: str) -> tuple:
    """A dimension or a sequence of them, normalised (`dim`); repeats are an error."""
    seq = (ds,) if isinstance(ds, (int, np.integer)) else tuple(ds)
    out = tuple(dim(d, ndim, op) for d in seq)
    if len(set(out)) != len(out):
        twice = next(d for i, d in enumerate(out) if d in out[:i])
        raise RuntimeError(f"{op}: dim {twice} appears multiple times in the list of dims")
    return out


def reduction_dims(ds, ndim: int, op: str):
    """The dimensions a reduction runs over, PyTorch's way: None for all (`dim=None`, or an
    empty tuple or list, which PyTorch reads as every dimension too), else a tuple
    normalised by `dims` (IndexError out of range, RuntimeError when repeated). A 0-d
    tensor's one dimension (0 or -1) is all of it: None."""
    if ds is None:
        return None
    if type(ds) is int and -(ndim or 1) <= ds < (ndim or 1):  # the common case, first
        return (ds % ndim,) if ndim else None
    if isinstance(ds, (tuple, list)) and not ds:
        return None
    if isinstance(ds, bool) or not isinstance(ds, (int, np.integer, tuple, list)):
        raise TypeError(f"{op}: dim must be an int or a tuple of ints, got {ds!r}")
    out = dims(ds, ndim, op)
    return None if ndim == 0 else out


def kept_shape(shape: tuple, ds) -> tuple:
    """The shape of a reduction over `ds` (None: all) with keepdim: 1 along each reduced
    dimension. A reduced result reshaped to it broadcasts against the input."""
    if ds is None:
        return (1,) * len(shape)
    return tuple(1 if ds is None or i in ds else n for i, n in enumerate(shape))


def as_dtype(d, op: str) -> np.dtype:
    """A dtype argument as a numpy dtype: anything `np.dtype` takes, or a torch.dtype (by
    its name, so ported code passing `torch.float32` works); TypeError naming the op."""
    if type(d).__module__ == "torch":        # torch.float32 -> "float32"
        d = str(d).rsplit(".", 1)[-1]
    try:
        return np.dtype(d)
    except TypeError:
        raise TypeError(f"{op}: {d!r} is not a dtype") from None


def accumulate_dtype(x: np.ndarray, dtype, op: str):
    """The dtype a sum, product or running sum is computed in: `dtype` if given, int64 for
    integers and booleans (PyTorch's), else None (the input's)."""
    if dtype is not None:
        return as_dtype(dtype, op)
    return np.dtype(np.int64) if x.dtype.kind in "biu" else None


# ---- the layers' kernels (nn/): cached zeros and copies, views, row blocks -------------------
def zeros(shape, dtype) -> np.ndarray:
    """`np.zeros(shape, dtype)` from the caching allocator: one zero-filling pass."""
    z = empty(shape, dtype)
    z.fill(0)
    return z


def copy(a) -> np.ndarray:
    """`a.copy()` (C order) into cached memory."""
    c = empty(np.shape(a), np.result_type(a))
    np.copyto(c, a)
    return c


def reshaped(a, shape) -> np.ndarray:
    """`a.reshape(shape)`: a view when numpy can make one, else numpy's copy (C order) made
    in cached memory. An explicit `shape` (no -1) reshapes empty arrays too."""
    try:
        return a.reshape(shape, copy=False)
    except TypeError:                                 # numpy < 2.1: no copy keyword
        return a.reshape(shape)
    except ValueError:                                # a view is impossible: a copy
        return copy(a).reshape(shape)


ROW_BLOCK_BYTES = 1 << 18   # row blocks for per-row temporaries: 256 KiB, cache resident


def row_blocks(n: int, row_bytes: int) -> tuple:
    """(rows per block, [(start, stop), ...]) covering `n` rows of `row_bytes` each, a
    block about `ROW_BLOCK_BYTES` (read at each call: tests shrink it)."""
    rb = max(1, min(n, ROW_BLOCK_BYTES // max(1, row_bytes)))
    return rb, [(a, min(n, a + rb)) for a in range(0, n, rb)]
