"""In-place writes through a view of a tensor with history (PyTorch's CopySlices).

`v = y[:, 0]; v.mul_(3)` (y has a history): the write lands in y's memory, and, as in
PyTorch, y (the base) takes a new history and the view a regenerated one:

- `old = view_take(y_old)`: the view's region of the base's old value (its node sends the
  region's gradient to y's old history);
- `new = op(old, *operands)`: the out-of-place op's node (`record.rebase`'s rules: values it
  saved that the write changes are copied first);
- the base becomes `view_put(y_old, new)` ("CopySlices"): gradient g with the region zeroed
  for y's old value, g's region for `new`; its data is y's own array, already written;
- the view becomes `view_take(y)`: a view of the new base.

A view is described by its geometry in the base's memory (`Geometry`: the base's shape and
strides, the view's shape, strides and byte offset), so any basic-index view, view/reshape
that views, transpose, t, squeeze/unsqueeze, diagonal, narrow, select... and views of views
work alike. The kernels copy a gradient into a buffer with the base's layout and read or
write the region there (O(base size) per node). The view's base is the tensor an op made
it from (`Tensor._base`, set by `primitive.record` for views made with grad recorded).

Thread safety: like any in-place write, not synchronised with readers of the tensors.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ...primitive import defop
from ...tensor import Tensor

__all__ = ["Geometry", "view_take", "view_put"]


def _ptr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _extent(shape: tuple, strides: tuple) -> tuple:
    """(lowest, highest) byte offset an array of this geometry touches."""
    lo = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0 and n > 0)
    hi = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0 and n > 0)
    return lo, hi


class Geometry:
    """Where a view sits in its base's memory, in elements (so it applies to a gradient of
    another dtype too). Immutable."""

    __slots__ = ("shape", "strides", "lo", "size", "vshape", "vstrides", "voff")

    def __init__(self, base: np.ndarray, view: np.ndarray):
        it = base.itemsize
        if view.dtype != base.dtype or any(s % it for s in base.strides + view.strides):
            raise ValueError("not a view of the base's elements")
        off = _ptr(view) - _ptr(base)
        lo, hi = _extent(base.shape, base.strides)
        vlo, vhi = _extent(view.shape, view.strides)
        if off % it or off + vlo < lo or off + vhi > hi:
            raise ValueError("the view is not inside the base's memory")
        self.shape = base.shape
        self.strides = tuple(s // it for s in base.strides)
        self.lo, self.size = lo // it, (hi - lo) // it + 1
        self.vshape = view.shape
        self.vstrides = tuple(s // it for s in view.strides)
        self.voff = off // it

    def __repr__(self):
        return f"Geometry(view {self.vshape} at {self.voff} of base {self.shape})"

    def laid_out(self, a: np.ndarray) -> tuple:
        """A copy of `a` (the base's shape) in a buffer with the base's layout, and the
        view's region of it: (full, region), both writable views of one new buffer."""
        dt = a.dtype
        it = dt.itemsize
        buf = np.zeros(self.size, dt)
        start = buf[-self.lo:] if self.lo else buf
        full = as_strided(start, self.shape, tuple(s * it for s in self.strides))
        full[...] = a
        return full, self.region(full)

    def region(self, full: np.ndarray) -> np.ndarray:
        """The view's region of `full`, an array with the base's exact layout."""
        it = full.itemsize
        at = full if self.voff == 0 else as_strided(full, (2,), (self.voff * it,))[1:]
        return as_strided(at, self.vshape, tuple(s * it for s in self.vstrides))


def _take_kernel(g, ans, input, geom):
    full, region = geom.laid_out(np.zeros(geom.shape, np.asarray(g).dtype))
    region[...] = g
    return np.ascontiguousarray(full)


def _take_formula(g, ans, input, geom):
    return view_put(np.zeros(geom.shape, g.dtype), g, geom)


@defop(formula=_take_formula, kernel=_take_kernel, unsaved=("result", "input"),
       export=False, name="view_take")
def view_take(input: Tensor, geom: Geometry) -> Tensor:
    """The view `geom` describes, of `input` (which has the base's layout when it is the
    base itself; else read through a copy laid out as the base)."""
    if input.strides == tuple(s * input.itemsize for s in geom.strides):
        return geom.region(input)
    return np.ascontiguousarray(geom.laid_out(input)[1])


def _put_input_kernel(g, ans, input, values, geom, written=False):
    full, region = geom.laid_out(g)
    region[...] = 0
    return np.ascontiguousarray(full)


def _put_values_kernel(g, ans, input, values, geom, written=False):
    return np.ascontiguousarray(geom.laid_out(g)[1])


def _put_input_formula(g, ans, input, values, geom, written=False):
    return view_put(g, np.zeros(geom.vshape, g.dtype), geom)


def _put_values_formula(g, ans, input, values, geom, written=False):
    return view_take(g, geom)


@defop(inputs=("input", "values"), formula=(_put_input_formula, _put_values_formula),
       kernel=(_put_input_kernel, _put_values_kernel),
       unsaved=("result", "input", "values"), export=False, name="CopySlices")
def view_put(input: Tensor, values: Tensor, geom: Geometry, written: bool = False) -> Tensor:
    """`input` (the base's shape) with the view's region replaced by `values`: a new array,
    or (`written`: the caller already wrote `values` into the region of `input`'s own
    memory) `input`'s array itself."""
    if written:
        return input
    full, region = geom.laid_out(input)
    region[...] = values
    return np.ascontiguousarray(full)
