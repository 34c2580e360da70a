"""`t[index] = value` on Tensors, and the op it records: `index_put`.

A write is one of two kinds (the rules of `inplace.py`, plus one that records):

- **Plain**: grad mode off (`pa.no_grad()`), or neither `t` nor `value` requires grad.
  The value is written into `t`'s own array (views and other references see it) and
  `t`'s version counter is bumped, so a backward that saved the overwritten values
  fails with PyTorch's "modified by an inplace operation" error (`version.py`).
- **Recorded** (grad mode on, `t` or `value` requires grad): the write is differentiable.
  It records `index_put(old t, value)`, whose gradient is g with zeros where the write
  landed for the old `t`, and g at those places (summed back to `value`'s shape) for
  `value`, and `t` (the same Python object) takes that node as its `grad_fn` and the
  written values as its data, as PyTorch's rebase of history does. Its rules read no
  saved values, so the node records no version counters: writing into `t` again is fine.

  Where the values go: if nothing else can see `t`'s array (no view of it, no node saved
  it, no other reference: reference counts, as `memory.is_sole_view` reads them), it is
  written in place; otherwise `t` gets a new array holding the written values, and what
  held the old one keeps the old values. That is what keeps every gradient right: a
  node that saved `t`'s values (exp saves its output) still reads the values it saw.
  The price is the difference from PyTorch: a view of `t` taken before the write, or
  `t.detach()` or `t.data` taken before, does not see a recorded write that copied.

  Refused, before anything is written: on a leaf that requires grad (PyTorch's error);
  through a view of another tensor (`y[0][1] = v`, `x.T[0] = v`, where PyTorch would
  rewrite the history of the viewed tensor): write into the tensor it views, or into a
  copy; and a value that requires grad into a tensor whose dtype cannot.

Integer-array indices may select an element twice (`t[[0, 0]] = v`). numpy leaves the
winner unspecified; here, when `value` requires grad, the last write in index order
(C order of the broadcast index) wins and only it gets the gradient, so the value and
its gradient agree. Index arrays are copied when the write is recorded: changing yours
afterwards does not change the gradient.

Thread safety: like any in-place write, not synchronised with readers of `t`.
"""
from __future__ import annotations

import math
import sys

import numpy as np

from ... import memory, version
from ...grad_mode import is_grad_enabled
from ...memory import empty as _empty
from ...primitive import defop
from ...tensor import Tensor
from .. import index as ix
from .. import shape as S

__all__ = ["index_put", "setitem"]

# reference counts are exact only with the GIL (free-threaded builds: always copy)
_GIL = getattr(sys, "_is_gil_enabled", lambda: True)()


def _data(x):
    return x._data if isinstance(x, Tensor) else np.asarray(x)


def _frozen(index):
    """The index as numpy takes it: Tensors to arrays, lists to arrays, every array a
    copy of its own (the recorded write keeps it)."""
    if isinstance(index, Tensor):
        index = index._data
    if isinstance(index, list):
        return np.array(index) if index else np.array([], dtype=np.intp)
    if isinstance(index, np.ndarray):
        return index.copy()
    if isinstance(index, tuple):
        return tuple(_frozen(i) for i in index)
    return index


def _may_repeat(index) -> bool:
    """The index holds an integer array of 2 or more elements: it may select an element
    twice (slices, integers and boolean masks never do)."""
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(p, np.ndarray) and p.dtype.kind in "iu" and p.size > 1
               for p in parts)


# selects without copying t, and numpy's fancy indexing of it allocates nothing per element
# (an itemsize of 0; unstructured, so a bad index raises what it raises on t)
_PROBE = np.zeros((), np.dtype("V0"))
_CHUNK = 1 << 15   # winning values gathered at a time: at most this many elements, or B's


def _kind(part):
    """How numpy takes one part of an index: "basic" (a slice, None, Ellipsis), "int" (an
    integer or integer array), "mask" (a boolean array); None for any other form."""
    if part is None or part is Ellipsis or isinstance(part, slice):
        return "basic"
    if isinstance(part, np.ndarray):
        return "int" if part.dtype.kind in "iu" else \
            "mask" if part.dtype.kind == "b" and part.ndim else None
    if isinstance(part, (int, np.integer)) and not isinstance(part, bool):
        return "int"
    return None


def _advanced(target: tuple, index):
    """`index` as a list of parts with each boolean mask spelled as its nonzero() arrays
    (numpy's equivalence), the positions in it of the advanced parts (integers, integer
    arrays), the sizes of the axes they index, and where their broadcast dims sit in the
    selection (first when a slice, None or Ellipsis separates them, as numpy puts them).
    None when a part has another form. No pass over memory but the masks' nonzero()."""
    parts = list(index) if isinstance(index, tuple) else [index]
    kinds = [_kind(p) for p in parts]
    if None in kinds:
        return None
    ell = len(target) - sum(p.ndim if k == "mask" else 1 for p, k in zip(parts, kinds)
                            if p is not None and p is not Ellipsis)
    out, adv, sizes, axis, lead, last, adjacent = [], [], [], 0, 0, None, True
    for i, (p, kind) in enumerate(zip(parts, kinds)):
        if kind == "basic":
            n = ell if p is Ellipsis else int(p is not None)   # the target axes it takes
            lead += 0 if adv else ell if p is Ellipsis else 1   # dims before the first
            axis += n
            out.append(p)
            continue
        adjacent = adjacent and last in (None, i - 1)
        last = i
        for a in np.nonzero(p) if kind == "mask" else (np.asarray(p),):
            adv.append(len(out))
            out.append(a)
            sizes.append(target[axis])
            axis += 1
    return out, adv, sizes, lead if adjacent else 0


class Plan:
    """Where a write lands in an array of `target` shape: `index` (numpy's), the shape
    it selects (`shape`); when that selection names an element twice and the written
    value takes a gradient, which writes win (the last for each element), kept as
    - `wins` (an index of the target: the winners' elements, each once), `pick` and
      `lose` (indexes of the selection: the winning writes, the others) when the index's
      parts other than its advanced ones are slices, None and Ellipsis: an element is
      named twice only through the advanced index, so the winners are found on the
      shape B it broadcasts to, and these hold O(B) integers; with one integer array
      as the advanced index, `take` too (a basic view's index, the axis, the array:
      g[index] is np.take of that view, which writes into an array of ours);
    - else `win` (flat positions in the selection of the writes that win) and `coords`
      (the elements they write): O(the selection) integers.
    Immutable."""

    __slots__ = ("index", "shape", "win", "coords", "wins", "pick", "lose", "take")

    def __init__(self, target: tuple, index, dedupe: bool, op: str = "setitem"):
        try:
            self.shape = np.broadcast_to(_PROBE, target)[index].shape
        except (IndexError, TypeError, ValueError) as e:
            kind = IndexError if isinstance(e, IndexError) else type(e)
            raise kind(f"{op}: {e}") from e
        self.index, self.win, self.coords = index, None, None
        self.wins = self.pick = self.lose = self.take = None
        if dedupe and _may_repeat(index) and math.prod(self.shape):
            found = _advanced(target, index)
            if found is None or not self._over_advanced(*found):
                self._over_selection(target)

    def _over_advanced(self, parts: list, adv: list, sizes: list, at: int) -> bool:
        # each write's element over the advanced axes: 1 pass over B (wrap: negative
        # indices, in bounds as the probe checked); the last write to each: np.unique
        # sorts a reversed copy (O(B)); the winners' indices: 1 pass over B
        flat = np.ravel_multi_index([parts[k] for k in adv], sizes, mode="wrap")
        if self.shape[at:at + flat.ndim] != flat.shape:
            return False          # (not numpy's layout: the general path decides)
        _, first = np.unique(flat.reshape(-1)[::-1], return_index=True)
        if first.size < flat.size:
            keep = np.zeros(flat.shape, bool)
            keep.reshape(-1)[flat.size - 1 - first] = True
            if len(adv) == 1:
                view = tuple(slice(None) if k == adv[0] else p for k, p in enumerate(parts))
                self.take = view, at, parts[adv[0]]
            for k in adv:
                parts[k] = np.broadcast_to(parts[k], flat.shape)[keep]
            lead = (slice(None),) * at
            self.wins, self.pick, self.lose = tuple(parts), lead + np.nonzero(keep), \
                lead + (~keep,)
        return True

    def _over_selection(self, target: tuple) -> None:
        # each selected element's coordinates: axis d's coordinate grid (a zero-copy
        # broadcast) indexed like t, so any numpy index works: O(the selection) ints
        coords = tuple(np.broadcast_to(np.arange(n, dtype=np.intp).reshape(
            (n,) + (1,) * (len(target) - d - 1)), target)[self.index].reshape(-1)
            for d, n in enumerate(target))
        flat = np.ravel_multi_index(coords, target)
        _, first = np.unique(flat[::-1], return_index=True)  # each element's last write
        if first.size < flat.size:
            self.win = np.sort(flat.size - 1 - first)
            self.coords = tuple(c[self.win] for c in coords)

    @classmethod
    def at(cls, positions: np.ndarray, target: tuple) -> "Plan":
        """The plan of a write at distinct flat `positions` of an array of `target` shape."""
        plan = cls.__new__(cls)
        plan.index = np.unravel_index(positions, target)
        plan.shape, plan.win, plan.coords = positions.shape, None, None
        plan.wins = plan.pick = plan.lose = plan.take = None
        return plan


def _chunks(plan: Plan, size: int):
    """`plan.wins` and `plan.pick` cut to successive runs of the winning writes, each run
    moving at most max(_CHUNK, B's size) of the selection's `size` elements."""
    b = plan.lose[-1].size                       # B's size: size // b elements a write
    step = max(1, max(_CHUNK, b) * b // size)
    for i in range(0, plan.pick[-1].size, step):
        yield tuple(tuple(p[i:i + step] if isinstance(p, np.ndarray) else p for p in ix)
                    for ix in (plan.wins, plan.pick))


def _put_winners(out: np.ndarray, plan: Plan, value) -> None:
    """Write the winning writes of `value` (broadcast to the selection), each element
    once: one pass over the written elements. A value that does not vary over B is
    written from a view; else the winners' values are gathered a chunk at a time, so no
    temporary is the selection's size."""
    vv = np.broadcast_to(value, plan.shape)
    at, nb = len(plan.lose) - 1, plan.lose[-1].ndim
    if not any(vv.strides[at:at + nb]):
        out[plan.wins] = vv[(slice(None),) * at + (slice(0, 1),) + (0,) * (nb - 1)]
        return
    for wins, pick in _chunks(plan, vv.size):
        out[wins] = vv[pick]


def _assign(out: np.ndarray, plan: Plan, value) -> None:
    """Write `value` (broadcast to the selection) into `out` where `plan` says."""
    if plan.wins is not None:
        _put_winners(out, plan, value)
    elif plan.win is None:
        out[plan.index] = value
    else:  # only the winning writes, each element once
        out[plan.coords] = np.broadcast_to(value, plan.shape).reshape(-1)[plan.win]


# ---- the op ---------------------------------------------------------------------------
def _old_rule(g, plan):
    # g with zeros where the write landed: 2 passes, one buffer
    out = _empty(g.shape, g.dtype)
    np.copyto(out, g)
    out[plan.index] = 0
    return out


def _value_rule(g, plan):
    # g where the write landed, at the selection's shape (the node sums it to the
    # value's), C-contiguous with repeats (the sum's order, so its bits, follow the
    # layout). By the plan over the advanced index: with one array, np.take writes the
    # selection into the result (1 pass), then the losing writes are zeroed (a pass over
    # them); else the losers zeroed and the winners gathered a chunk at a time (1 pass)
    if plan.lose is not None:
        out = _empty(plan.shape, g.dtype)
        if plan.take is not None:
            view, axis, arr = plan.take       # (wrap: negative indices, as numpy takes them)
            np.take(g[view], arr, axis=axis, out=out, mode="wrap")
        else:
            for wins, pick in _chunks(plan, out.size):
                out[pick] = g[wins]
        out[plan.lose] = 0
        return out
    if plan.win is None:
        return g[plan.index]
    out = _empty(plan.shape, g.dtype)
    out.fill(0)
    out.reshape(-1)[plan.win] = g[plan.coords]
    return out


def _taken(g, index) -> Tensor:
    """`g[index]`, recorded, with numpy's placement of the index's advanced dimensions
    (the writes take numpy's indices; getitem, PyTorch's)."""
    return ix.getitem(g, ix.numpy_index(index))


# The formulas: the kernels are linear maps of g, written as index_put (zeros written into
# g) and getitem, which are differentiable again.
def _input_formula(g, ans, input, values, plan, in_place=False):
    return _record(g, 0.0, plan)


def _values_formula(g, ans, input, values, plan, in_place=False):
    if plan.lose is not None:
        return _record(_taken(g, plan.index), 0.0, Plan(plan.shape, plan.lose, False))
    if plan.win is None:
        return _taken(g, plan.index)
    picked = _taken(g, plan.coords)
    return _record(np.zeros(plan.shape, _data(g).dtype), picked,
                   Plan.at(plan.win, plan.shape))


def _input_kernel(g, ans, input, values, plan, in_place=False):
    return _old_rule(g, plan)


def _values_kernel(g, ans, input, values, plan, in_place=False):
    return _value_rule(g, plan)


@defop(inputs=("input", "values"), formula=(_input_formula, _values_formula),
       kernel=(_input_kernel, _values_kernel), unsaved=("result", "input", "values"),
       export=False, name="index_put")
def index_put_planned(input: Tensor, values: Tensor, plan: Plan,
                      in_place: bool = False) -> Tensor:
    """`input` with `values` written where `plan` says: into a copy, or (`in_place`, for
    `t[index] = value` when nothing else sees t's array) into `input`'s own array. The
    kernels read g and the plan only: the node keeps no value."""
    if in_place:
        _assign(input, plan, values)
        return input
    out = _empty(input.shape, input.dtype)  # a copy, then the write: 2 passes at most
    np.copyto(out, input)
    _assign(out, plan, values)
    return out


def _record(old, value, plan: Plan, in_place: bool = False) -> Tensor:
    """index_put's node: `old` with `value` written (into a copy unless `in_place`)."""
    t = index_put_planned(old, value, plan, in_place)
    if t.grad_fn is not None:
        t.grad_fn.versions = None  # the kernels read no saved value: nothing to check
    return t


def _fit(value, shape: tuple, op: str):
    """`value` (a Tensor, array or number) made to broadcast to the selection's `shape`:
    leading dimensions of size 1 beyond it dropped, as numpy's assignment does."""
    if not isinstance(value, Tensor):
        value = np.asarray(value)
    vs = value.shape
    extra = len(vs) - len(shape)
    if extra > 0 and all(n == 1 for n in vs[:extra]):
        value = S.reshape(value, vs[extra:]) if isinstance(value, Tensor) \
            else value.reshape(vs[extra:])
        vs = vs[extra:]
    try:
        ok = len(vs) <= len(shape) and np.broadcast_shapes(vs, shape) == shape
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{op}: a value of shape {tuple(vs)} cannot be written into a "
                         f"selection of shape {tuple(shape)}")
    return value


def index_put(input, index, values) -> Tensor:
    """A copy of `input` with `values` written at `input[index]` (out of place, any
    numpy index; PyTorch's `index_put` with `accumulate=False`): the gradient is g with
    zeros at `index` for `input`, and g at `index` for `values`. An element selected
    twice takes the last write in index order."""
    index = _frozen(index)
    shape = np.shape(_data(input))
    plan = Plan(shape, index, isinstance(values, Tensor) and values._requires_grad,
                "index_put")
    return _record(input, _fit(values, plan.shape, "index_put"), plan)


# ---- t[index] = value -----------------------------------------------------------------
def _refs(a) -> int:
    return sys.getrefcount(a)


def _calibrate() -> tuple:
    # references to an array held by one tensor, counted as `_sole` counts them; and to a
    # base array viewed by one array alone, counted as `view_of_other` counts them
    t = Tensor._wrap(np.empty(1))
    owner = np.empty(2)
    view = Tensor._wrap(owner[:1])
    del owner
    return _refs(t._data), _base_refs(view._data)


def _base_refs(a) -> int:
    base = a.base
    return sys.getrefcount(base)


def _sole(t: Tensor) -> bool:
    """Nothing but `t` can see `t`'s array: no other reference to it, and it is the only
    array viewing its memory (an allocator block it alone views, or its own)."""
    if not _GIL or not t._data.flags.writeable:
        return False
    if t._data.base is not None and not memory.is_sole_view(t._data):
        return False
    return _refs(t._data) <= _SOLE_REFS


def view_of_other(t: Tensor) -> bool:
    """`t` views another tensor's memory: an op made it as a view of its input (they
    share a version counter), or its array views memory that another array views."""
    node = t.grad_fn
    if node is not None:
        vs = node.versions
        return vs is not None and any(vc is t._vc for vc in vs[:-1])
    data = t._data
    if data.base is None:
        return False
    if memory.is_block(data.base):
        return not memory.is_sole_view(data)
    return not _GIL or _base_refs(data) > _BASE_REFS  # (no local reference to the base)


def _plain(t: Tensor, index, value) -> None:
    try:
        t._data[index] = _data(value)
    except (IndexError, TypeError, ValueError) as e:
        kind = IndexError if isinstance(e, IndexError) else \
            ValueError if isinstance(e, ValueError) else TypeError
        raise kind(f"setitem: {e}") from e
    version.bump(t)


def setitem(self: Tensor, index, value) -> None:
    """`t[index] = value`: a plain write under `no_grad` or when nothing requires grad,
    else a recorded, differentiable one (see the module's docstring)."""
    v_grad = isinstance(value, Tensor) and value._requires_grad
    if not (self._requires_grad or v_grad) or not is_grad_enabled():
        _plain(self, _frozen(index), value)
        return
    node = self.grad_fn
    if node is None and self._requires_grad:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                           "operation (setitem); to change its values without recording, "
                           "write under `with pa.no_grad():`")
    if self._data.dtype.kind != "f":
        raise TypeError(f"setitem: a value that requires grad cannot be written into a "
                        f"tensor of dtype {self._data.dtype} (only floating point tensors "
                        f"can require gradients)")
    if view_of_other(self):
        raise RuntimeError(
            "setitem: this tensor is a view of another tensor's memory (made by indexing, "
            "reshape, transpose, ...); a recorded write through it is not supported, as it "
            "would not reach the history of the tensor it views. Write into that tensor "
            "(x[0, 1] = v rather than x[0][1] = v), or into a copy (y = x * 1)")
    index = _frozen(index)
    plan = Plan(self._data.shape, index, v_grad)
    value = _fit(value, plan.shape, "setitem")
    if _sole(self):  # no one else sees the array: write it in place (no node saved it,
        made = _record(self, value, plan, in_place=True).grad_fn  # so no version to bump)
    else:            # others hold it: the written values go to a new array, t's from now
        new = _record(self, value, plan)
        self._data = new._data
        made = new.grad_fn
    self._vc = [0]   # t's values from now on: what shared the old counter is unaffected
    if node is not None and node.retained is not None and node.retained() is self:
        made.retained, node.retained = node.retained, None  # retain_grad follows t
    self.grad_fn = made
    self._requires_grad = True


_SOLE_REFS, _BASE_REFS = _calibrate()
