"""Variable-length sequences (PyTorch's `torch.nn.utils.rnn`): `PackedSequence`,
`pack_padded_sequence`, `pad_packed_sequence`, `pad_sequence`, `pack_sequence`,
`unpad_sequence`, `unpack_sequence`.

A PackedSequence holds the steps of B sequences sorted by decreasing length, time-major:
`data` stacks, for t = 0, 1, ..., the step t of the `batch_sizes[t]` sequences that are at
least t + 1 long (so the sequences alive at step t are always the first batch_sizes[t] in
the sorted order, the layout `nn.RNN`/`LSTM`/`GRU` run on). `sorted_indices` maps the
sorted order to the caller's batch order, `unsorted_indices` back (None when the input was
already sorted). Every conversion is one gather (`index_select`) of the values, so
gradients flow through packing and padding in both engines and to any order.

Thread safety: pure functions; a PackedSequence is an immutable tuple.
"""
from __future__ import annotations

from typing import List, NamedTuple, Optional, Sequence

import numpy as np

from ...ops import index as IX
from ...ops import shape as S
from ...ops.forms import cast
from ...tensor import Tensor

__all__ = ["PackedSequence", "pack_padded_sequence", "pad_packed_sequence", "pad_sequence",
           "pack_sequence", "unpad_sequence", "unpack_sequence"]


class PackedSequence(NamedTuple):
    """Steps of sorted sequences, time-major (see the module docstring): `data`
    (sum of lengths, *), `batch_sizes` (int64, one per step), `sorted_indices` and
    `unsorted_indices` (int64 permutations, or None)."""
    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Optional[Tensor] = None
    unsorted_indices: Optional[Tensor] = None

    def to(self, dtype) -> "PackedSequence":
        """The same sequences with `data` cast to `dtype` (differentiable)."""
        return self._replace(data=cast(self.data, dtype=np.dtype(dtype)))

    def double(self) -> "PackedSequence":
        """`to(float64)`."""
        return self.to(np.float64)

    def float(self) -> "PackedSequence":
        """`to(float32)`."""
        return self.to(np.float32)

    @property
    def is_cuda(self) -> bool:
        """Always False (numpy)."""
        return False


def _ints(name: str, lengths) -> np.ndarray:
    a = np.asarray(lengths._data if isinstance(lengths, Tensor) else lengths)
    if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
        raise ValueError(f"{name}: lengths must be a 1-D sequence of integers, got "
                         f"{a.dtype} of shape {a.shape}")
    return a.astype(np.int64)


def _tensor(x) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor._wrap(np.asarray(x))


def _index(a: np.ndarray) -> Tensor:
    return Tensor._wrap(np.asarray(a, np.int64))


def _layout(lengths_sorted: np.ndarray, steps: int):
    """(batch_sizes, t, i) with (t, i) the (step, sorted position) of every packed row in
    order: row-major over steps, the first batch_sizes[t] positions of each."""
    alive = lengths_sorted[None, :] > np.arange(steps)[:, None]        # (T, B)
    t, i = np.nonzero(alive)
    return alive.sum(axis=1).astype(np.int64), t, i


def _raw(x) -> np.ndarray:
    return x._data if isinstance(x, Tensor) else np.asarray(x)


def packed_rows(batch_sizes) -> np.ndarray:
    """The rows of a packed sequence's data in its padded, sorted, time-major layout
    (T, B) flattened: t * B + i for each alive (step t, sorted position i), in order."""
    bs = np.asarray(_raw(batch_sizes), np.int64)
    b = int(bs[0]) if bs.size else 0
    _, t, i = _layout(_sorted_lengths(bs), bs.size)
    return t * b + i


def pack_padded_sequence(input, lengths, batch_first: bool = False,
                         enforce_sorted: bool = True) -> PackedSequence:
    """Pack the padded batch `input` (T, B, *) ((B, T, *) with `batch_first`) of
    sequences of `lengths` (B positive ints, at most T), as PyTorch's. With
    `enforce_sorted` the lengths must be non-increasing; otherwise they are sorted
    (stably) and the permutation is kept in the result."""
    name = "pack_padded_sequence"
    x = _tensor(input)
    if x.ndim < 2:
        raise ValueError(f"{name}: expected a (T, B, *) input, got shape {x.shape}")
    tm = S.swapaxes(x, 0, 1) if batch_first else x
    steps, b = tm.shape[0], tm.shape[1]
    lens = _ints(name, lengths)
    if lens.size != b:
        raise ValueError(f"{name}: expected {b} lengths (the batch size), got {lens.size}")
    if b and lens.min() <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an "
                           "element in 'lengths' that is <= 0")
    if b and lens.max() > steps:
        raise ValueError(f"{name}: a length of {lens.max()} exceeds the input's {steps} steps")
    if enforce_sorted:
        if np.any(np.diff(lens) > 0):
            raise RuntimeError("`lengths` array must be sorted in decreasing order when "
                               "`enforce_sorted` is True. You can pass `enforce_sorted=False` "
                               "to pack_padded_sequence and/or pack_sequence to sidestep this "
                               "requirement if you do not need ONNX exportability.")
        order, sorted_idx, unsorted_idx = np.arange(b), None, None
    else:
        order = np.argsort(-lens, kind="stable")
        sorted_idx, unsorted_idx = _index(order), _index(np.argsort(order))
    batch_sizes, t, i = _layout(lens[order], int(lens.max()) if b else 0)
    rows = S.reshape(tm, (steps * b,) + tuple(tm.shape[2:]))
    data = IX.index_select(rows, 0, t * b + order[i])
    return PackedSequence(data, _index(batch_sizes), sorted_idx, unsorted_idx)


def _sorted_lengths(batch_sizes: np.ndarray) -> np.ndarray:
    """Each sorted sequence's length: the number of steps at which it is alive."""
    b = int(batch_sizes[0]) if batch_sizes.size else 0
    return (batch_sizes[:, None] > np.arange(b)[None, :]).sum(axis=0)


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False,
                        padding_value: float = 0.0, total_length: Optional[int] = None):
    """The padded batch (T, B, *) ((B, T, *) with `batch_first`) of a PackedSequence,
    in the caller's batch order, and the lengths (int64), as PyTorch's; T is the longest
    length, or `total_length` (at least that)."""
    data = _tensor(sequence.data)
    bs = np.asarray(sequence.batch_sizes._data if isinstance(sequence.batch_sizes, Tensor)
                    else sequence.batch_sizes, np.int64)
    steps, b = bs.size, int(bs[0]) if bs.size else 0
    if total_length is not None:
        if total_length < steps:
            raise ValueError(f"Expected total_length to be at least the length of the longest "
                             f"sequence in input, but got total_length={total_length} and max "
                             f"sequence length being {steps}")
        steps_out = int(total_length)
    else:
        steps_out = steps
    lens = _sorted_lengths(bs)
    unsorted = None if sequence.unsorted_indices is None else \
        np.asarray(_tensor(sequence.unsorted_indices)._data, np.int64)
    # where each (step, caller's batch position) reads: its packed row, or the padding row
    _, t, i = _layout(lens, steps)
    where = np.full((steps_out, b), data.shape[0], np.int64)
    where[t, i] = np.arange(t.size)
    if unsorted is not None:
        where = where[:, unsorted]
    pad = np.full((1,) + tuple(data.shape[1:]), padding_value, data.dtype)
    rows = IX.index_select(S.concat([data, pad], 0), 0, where.reshape(-1))
    out = S.reshape(rows, (steps_out, b) + tuple(data.shape[1:]))
    lengths = lens if unsorted is None else lens[unsorted]
    return (S.swapaxes(out, 0, 1) if batch_first else out), _index(lengths)


def pad_sequence(sequences: Sequence, batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right") -> Tensor:
    """Stack sequences of shapes (L_i, *) into (T, B, *) ((B, T, *) with `batch_first`),
    T the longest, padding with `padding_value` on the right (or `padding_side='left'`),
    as PyTorch's."""
    name = "pad_sequence"
    if padding_side not in ("left", "right"):
        raise ValueError(f"{name}: padding_side must be 'left' or 'right', got "
                         f"{padding_side!r}")
    seqs = [_tensor(s) for s in sequences]
    if not seqs:
        raise ValueError(f"{name}: received an empty list of sequences")
    tail = seqs[0].shape[1:]
    if any(s.ndim < 1 or s.shape[1:] != tail for s in seqs):
        raise ValueError(f"{name}: every sequence must be (L, {', '.join(map(str, tail))}),"
                         f" got shapes {[s.shape for s in seqs]}")
    lens = np.array([s.shape[0] for s in seqs], np.int64)
    steps, b, total = int(lens.max()), len(seqs), int(lens.sum())
    where = np.full((steps, b), total, np.int64)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    for j, (n, s0) in enumerate(zip(lens, starts)):
        at = slice(0, n) if padding_side == "right" else slice(steps - n, steps)
        where[at, j] = np.arange(s0, s0 + n)
    dtype = np.result_type(*[s.dtype for s in seqs])
    pad = np.full((1,) + tuple(tail), padding_value, dtype)
    rows = IX.index_select(S.concat(seqs + [pad], 0), 0, where.reshape(-1))
    out = S.reshape(rows, (steps, b) + tuple(tail))
    return S.swapaxes(out, 0, 1) if batch_first else out


def pack_sequence(sequences: Sequence, enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of sequences (L_i, *) (PyTorch's `pack_sequence`)."""
    lens = [_tensor(s).shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lens, enforce_sorted=enforce_sorted)


def unpad_sequence(padded_sequences, lengths, batch_first: bool = False) -> List[Tensor]:
    """The list of sequences (L_i, *) of a padded batch (PyTorch's `unpad_sequence`)."""
    x = _tensor(padded_sequences)
    bm = x if batch_first else S.swapaxes(x, 0, 1)
    lens = _ints("unpad_sequence", lengths)
    return [S.getitem(bm, (j, slice(0, int(n)))) for j, n in enumerate(lens)]


def unpack_sequence(packed_sequences: PackedSequence) -> List[Tensor]:
    """The list of sequences of a PackedSequence, in the caller's order (PyTorch's
    `unpack_sequence`)."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
